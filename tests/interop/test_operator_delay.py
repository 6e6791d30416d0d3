"""An operator's own change is not an attack: ``appliance run`` (simulated world), locked, with the integrity checks'
line fitted; an admin sets ``gnss.cable_delay_ns`` to 50 through the REST API.  No integrity alarm follows, the
change is audited, and the served time moves by the delay (the simulation knows true time)."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.procs import ENV, appliance, free_tcp_port, status, stop, wait_for

pytestmark = pytest.mark.slow
PASSWORD = "a-password-for-the-admin-1"
WATCH_S = 20


def _user(state: Path, *args: str, stdin: str = "") -> str:
    out = subprocess.run([sys.executable, "-m", "appliance", "user", *args, "--set", f"state_dir={state}"],
                         input=stdin, capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _put(port: int, token: str, name: str, value: Any) -> dict[str, Any]:
    request = urllib.request.Request(f"https://127.0.0.1:{port}/api/v1/config/{name}", method="PUT",
                                     data=json.dumps({"value": value}).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=ssl._create_unverified_context(), timeout=30) as reply:
        return json.loads(reply.read())


def _integrity_alarms(s: dict[str, Any]) -> list[str]:
    return [a["text"] for a in s["alarms"] if a["raised"] and a["code"].startswith("gnss-")]


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, str]]:
    state = tmp_path_factory.mktemp("operator-delay") / "state"
    state.mkdir()
    _user(state, "add", "adm", "--role", "admin", "--password-stdin", stdin=PASSWORD + "\n")
    token = _user(state, "token", "adm").splitlines()[-1]
    port = free_tcp_port()
    app = appliance("run", "--set", f"state_dir={state}", "--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3",
                    "--set", "web.listen=127.0.0.1", "--set", f"web.port={port}")
    try:
        # locked, and the integrity checks' line through a minute of free phase is fitted
        wait_for(state, lambda s: s["clock"]["state"] == "LOCKED" and (s["integrity"] or {}).get("anchor")
                 and not _integrity_alarms(s), timeout_s=150)
        yield state, port, token
    finally:
        code, err = stop(app)
        assert code == 0, err
        assert "Traceback" not in err, err[-3000:]


def test_a_cable_delay_change_through_the_api_raises_no_integrity_alarm(locked: tuple[Path, int, str]) -> None:
    state, port, token = locked
    before = status(state)
    assert before is not None
    errors_before = [before["clock"]["sim_time_error_ns"]]  # served minus true, before the change
    reply = _put(port, token, "gnss.cable_delay_ns", 50)
    assert reply["applied"] is True and reply["value"] == 50
    seen: list[str] = []
    levels: set[str] = set()
    deadline = time.monotonic() + WATCH_S
    last = before
    trace: list[tuple[float, float, int]] = []
    while time.monotonic() < deadline:
        s = status(state)
        if s is not None:
            seen += _integrity_alarms(s)
            levels.add(s["integrity"]["level"])
            last = s
            trace.append((round(time.monotonic() - deadline + WATCH_S, 1), s["clock"]["phase_offset_ns"],
                          s["clock"]["sim_time_error_ns"] - errors_before[0]))
        time.sleep(0.5)
    assert not seen and levels == {"ok"}, (seen, levels)
    assert last["clock"]["state"] == "LOCKED"
    # The clock follows the new delay: against the moved reference it reads about -50 ns from the next second on, and
    # slews the served time on (served minus true grows towards +50 ns: a 32 s loop has done over half of it in 20 s,
    # a 64 s one a third).
    assert min(phase for at_s, phase, _ in trace if at_s <= 8) < -30, trace
    assert 15 <= trace[-1][2] <= 70, trace
    audit = subprocess.run([sys.executable, "-m", "appliance", "audit", "show", "--kind", "config.change",
                            "--set", f"state_dir={state}"], capture_output=True, text=True, env=ENV, timeout=60)
    assert audit.returncode == 0, audit.stderr
    assert "gnss.cable_delay_ns: 0 -> 50" in audit.stdout and "adm" in audit.stdout
