"""The audit trail of a running appliance survives kill -9, and a record altered by hand is named.

Operator commands (forced holdover, through the control socket) are written to the audit store before the appliance
answers them, so every answered command is a committed record.  The appliance is killed with SIGKILL while commands
are streaming in, a bounded number of rounds; after each restart ``appliance audit verify`` passes and every answered
command is in the store.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from appliance.edge import control
from appliance.audit.store import TABLE, AuditStore
from harness.procs import ENV, appliance, wait_for
from harness.ptp_appliance import seed_learned_state

pytestmark = [pytest.mark.interop]
FAST = ["--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3", "--set", "ntp.enabled=false",
        "--set", "web.enabled=false"]
ROUNDS = 3


def audit_cli(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance", "audit", *args, "--set", f"state_dir={state}"],
                          capture_output=True, text=True, env=ENV, timeout=60)


def command_records(state: Path) -> list[str]:
    store = AuditStore(state / "audit.sqlite", create=False)
    try:
        return [r.text for r in store.records(kinds=["command"], limit=None)]
    finally:
        store.close()


def test_kill_9_while_commands_stream_in_loses_no_answered_record(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    seed_learned_state(state)
    answered = 0
    for round_ in range(ROUNDS):
        proc = appliance("run", "--set", f"state_dir={state}", *FAST)
        try:
            wait_for(state, lambda s: s["clock"]["state"] in ("LOCKED", "HOLDOVER"), timeout_s=60)
            stop = threading.Event()
            replies: list[dict] = []

            def stream() -> None:
                action = "start"
                while not stop.is_set():
                    try:
                        reply = control.request(state / "control.sock", {"cmd": "holdover", "action": action,
                                                                         "user": f"round{round_}"}, timeout_s=2)
                    except control.ControlError:
                        return  # the appliance is gone
                    replies.append(reply)
                    action = "stop" if action == "start" else "start"
            sender = threading.Thread(target=stream, daemon=True)
            sender.start()
            time.sleep(1.5 + 0.7 * round_)  # a different moment each round
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            stop.set()
            sender.join(10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        assert replies, "commands were answered before the kill"
        answered += len(replies)
        verify = audit_cli(state, "verify")
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert "audit chain OK" in verify.stdout
        texts = command_records(state)
        assert len(texts) >= answered, (len(texts), answered)  # every answered command was committed before
    # one record changed by hand: verify names it
    with sqlite3.connect(state / "audit.sqlite") as db:
        db.execute(f"UPDATE {TABLE} SET text = 'nothing happened' WHERE seq = 5")
    verify = audit_cli(state, "verify")
    assert verify.returncode == 1 and "record 5" in verify.stdout + verify.stderr, verify.stdout + verify.stderr
