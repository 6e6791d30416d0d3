"""End to end over a serial line: the simulated receiver writes into a pseudo-terminal at real-time pace and
``appliance run`` reads it through ``gnss.device``, as it would a UART; closing and reopening the line reconnects."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from harness.procs import appliance, stop, wait_for

pytestmark = pytest.mark.slow


def _sim_receiver(link: Path):
    proc = appliance("sim-receiver", "--link", str(link), "--set", "sim.seed=7")
    first = proc.stdout.readline().split()
    assert len(first) == 2 and first[1] == str(link), f"unexpected first line {first}"
    return proc


def _has_fix(s: dict) -> bool:
    names = {c["name"] for c in s["constellations"] if c["used"]}
    return s["receiver"]["state"] == "3d-fix" and {"GPS", "BeiDou"} <= names


def test_fix_over_a_pty_and_reconnect_after_the_line_closes(tmp_path: Path) -> None:
    link, state = tmp_path / "gnss0", tmp_path / "state"
    receiver = _sim_receiver(link)
    app = appliance("run", "--set", f"gnss.device={link}", "--set", "gnss.baud=115200",
                    "--set", f"state_dir={state}", "--set", "gnss.reconnect_max_s=1")
    try:
        s = wait_for(state, _has_fix)
        assert s["mode"] == "hardware" and s["receiver"]["device"] == str(link)
        assert s["receiver"]["last_epoch"]["position"]["lat_deg"] == pytest.approx(46.2044, abs=1e-5)
        assert s["receiver"]["rejected"] == {}

        assert stop(receiver)[0] == 0
        s = wait_for(state, lambda s: s["receiver"]["state"] == "disconnected", timeout_s=10)
        assert s["receiver"]["device_error"]
        assert "gnss-disconnected" in {a["code"] for a in s["alarms"]}

        receiver = _sim_receiver(link)
        s = wait_for(state, _has_fix)
        assert s["receiver"]["reconnects"] >= 1
        assert not [a for a in s["alarms"] if a["code"].startswith("gnss-")]
        # No PPS line on a pty: the clock cannot be disciplined from NMEA alone and says so honestly.
        assert s["clock"]["state"] == "FREERUN" and s["clock"]["error_bound_ns"] is None
    finally:
        stop(receiver)
        code, err = stop(app)
    assert code == 0, err
    assert "stopped" in err
    assert not (state / "control.sock").exists()


def test_missing_device_is_reported_and_the_appliance_keeps_running(tmp_path: Path) -> None:
    state = tmp_path / "state"
    app = appliance("run", "--set", f"gnss.device={tmp_path / 'nothing-here'}", "--set", f"state_dir={state}")
    try:
        s = wait_for(state, lambda s: s["receiver"]["state"] == "disconnected" and s["receiver"]["device_error"])
        assert "cannot open" in s["receiver"]["device_error"]
    finally:
        code, err = stop(app, signal.SIGINT)
    assert code == 0, err
