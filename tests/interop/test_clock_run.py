"""The disciplined clock of ``appliance run`` on its embedded default, operated from the command line.

FREERUN -> ACQUIRING -> LOCKED within a stated time; ``appliance holdover start`` moves it to HOLDOVER with a growing
bound and clockClass 7; ``stop`` brings it back to LOCKED without a phase step; killed while LOCKED and started
again, it comes back holdover-capable with its learned frequency.  In simulation the status also carries the served
time's true error, so "no phase step" is checked against the truth, not against the appliance's own word.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.procs import ENV, appliance, status, stop, wait_for

pytestmark = pytest.mark.slow
FAST = ["--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3", "--set", "clock.save_interval_s=15"]
LOCK_WITHIN_S = 60  # warm-up 0 + qualification 3 s + 16 s inside the lock threshold, with margin


def _holdover(state: Path, action: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance", "holdover", action, "--set", f"state_dir={state}"],
                          capture_output=True, text=True, env=ENV, timeout=20)


def _errors_while(state: Path, seconds: float) -> list[dict]:
    samples, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        s = status(state)
        if s is not None:
            samples.append(s["clock"])
        time.sleep(0.5)
    return samples


def test_lock_forced_holdover_and_back_then_restart_with_what_it_learned(tmp_path: Path) -> None:
    state = tmp_path / "state"
    app = appliance("run", "--set", f"state_dir={state}", *FAST)
    try:
        started = time.monotonic()
        s = wait_for(state, lambda s: s["clock"]["state"] == "LOCKED", timeout_s=LOCK_WITHIN_S)
        assert time.monotonic() - started < LOCK_WITHIN_S
        assert s["clock"]["clock_class"] == 6 and s["clock"]["steps"] == 1  # one step, on first lock
        refused = _holdover(state, "start")  # nothing learned yet: the appliance says so, and nothing changes
        assert refused.returncode == 1 and "cannot hold over" in refused.stderr
        s = wait_for(state, lambda s: s["clock"]["predicted_frequency_ppb"] is not None, timeout_s=120)

        assert _holdover(state, "start").returncode == 0
        during = _errors_while(state, 12)  # an OCXO's bound grows about a nanosecond in 5 s
        assert all(c["state"] == "HOLDOVER" and c["clock_class"] == 7 and c["forced_holdover"] for c in during)
        assert during[-1]["error_bound_ns"] > during[0]["error_bound_ns"]  # honest: the bound grows
        assert all(abs(c["sim_time_error_ns"]) <= c["error_bound_ns"] for c in during)

        assert _holdover(state, "stop").returncode == 0
        s = wait_for(state, lambda s: s["clock"]["state"] == "LOCKED", timeout_s=30)
        after = _errors_while(state, 3)
        assert s["clock"]["steps"] == 1  # slewed back, never stepped
        assert max(abs(c["sim_time_error_ns"]) for c in during + after) < 200
        learned = s["clock"]["predicted_frequency_ppb"]
        time.sleep(16)  # one save interval while locked
        assert (state / "clock-state.json").exists()
    finally:
        os.kill(app.pid, signal.SIGKILL)  # killed, not stopped: only the periodic save counts
        app.communicate(timeout=10)

    saved = json.loads((state / "clock-state.json").read_text())
    assert saved["state"] == "LOCKED" and abs(-saved["frequency_ppb"] - learned) < 0.5
    (state / "control.sock").unlink(missing_ok=True)  # a killed process leaves its socket behind
    again = appliance("run", "--set", f"state_dir={state}", *FAST)
    try:
        s = wait_for(state, lambda s: True, timeout_s=20)
        assert s["clock"]["state"] == "HOLDOVER" and "restored" in s["clock"]["reason"]
        assert s["clock"]["error_bound_ns"] is not None and s["clock"]["clock_class"] == 7
        s = wait_for(state, lambda s: s["clock"]["state"] == "LOCKED", timeout_s=60)
        assert s["clock"]["steps"] == 0  # the restart kept time: no step needed
    finally:
        code, err = stop(again)
    assert code == 0, err
