"""A receiver that is missing or fails raises an alarm with the open error, and status never shows a duration from
the epoch: ``appliance run`` on a serial device that does not exist yet, then appears (the simulated receiver
writing into a pseudo-terminal at that path), goes away and comes back."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.procs import ENV, appliance, stop, wait_for

pytestmark = pytest.mark.slow
DISCONNECTED = "gnss-disconnected"


def _alarm(s: dict[str, Any], code: str) -> dict[str, Any] | None:
    return next((a for a in s["alarms"] if a["code"] == code and a["raised"]), None)


def _status_text(state: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "appliance", "status", "--set", f"state_dir={state}"],
                         capture_output=True, text=True, env=ENV, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _receiver_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Receiver"))


def _sim_receiver(link: Path) -> subprocess.Popen:
    proc = appliance("sim-receiver", "--link", str(link), "--set", "sim.seed=7")
    first = proc.stdout.readline().split()
    assert len(first) == 2 and first[1] == str(link), f"unexpected first line {first}"
    return proc


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, float]]:
    work = tmp_path_factory.mktemp("receiver-device")
    link, state = work / "ttyGNSS", work / "state"
    started = time.monotonic()
    app = appliance("run", "--set", f"gnss.device={link}", "--set", "gnss.baud=115200", "--set", f"state_dir={state}",
                    "--set", "gnss.reconnect_max_s=1")
    try:
        yield link, state, started
    finally:
        code, err = stop(app)
        assert code == 0, err
        assert "Traceback" not in err, err[-3000:]


def test_a_missing_device_raises_the_alarm_with_the_open_error(run: tuple[Path, Path, float]) -> None:
    link, state, started = run
    s = wait_for(state, lambda s: _alarm(s, DISCONNECTED) is not None, timeout_s=30)
    took_s = time.monotonic() - started
    error = f"cannot open {link}: No such file or directory"
    alarm = _alarm(s, DISCONNECTED)
    assert alarm["severity"] == "major" and error in alarm["text"]
    assert s["receiver"]["state"] == "disconnected" and s["receiver"]["device_error"] == error
    # at the first failed open: as soon as the appliance answers status (the bound is the start-up, not a timeout)
    assert took_s < 30
    line = _receiver_line(_status_text(state))
    assert error in line
    duration = re.search(r"disconnected (?:for (\d+)h)?", line)
    assert duration and (duration.group(1) is None or int(duration.group(1)) < 1), line  # no 499065h from epoch 0


def test_the_device_appearing_clears_it_and_losing_it_again_raises_it(run: tuple[Path, Path, float]) -> None:
    link, state, _ = run
    wait_for(state, lambda s: _alarm(s, DISCONNECTED) is not None, timeout_s=30)
    receiver = _sim_receiver(link)
    try:
        s = wait_for(state, lambda s: s["receiver"]["state"] == "3d-fix", timeout_s=30)
        assert _alarm(s, DISCONNECTED) is None and s["receiver"]["device_error"] == ""
        assert "3d-fix for 0m" in _receiver_line(_status_text(state))
    finally:
        assert stop(receiver)[0] == 0
    lost_at = time.monotonic()
    s = wait_for(state, lambda s: _alarm(s, DISCONNECTED) is not None, timeout_s=20)
    assert time.monotonic() - lost_at < 20
    assert s["receiver"]["device_error"] and s["receiver"]["device_error"] in _alarm(s, DISCONNECTED)["text"]
    receiver = _sim_receiver(link)
    try:
        s = wait_for(state, lambda s: s["receiver"]["state"] == "3d-fix", timeout_s=30)
        assert _alarm(s, DISCONNECTED) is None and s["receiver"]["reconnects"] >= 1
    finally:
        stop(receiver)
