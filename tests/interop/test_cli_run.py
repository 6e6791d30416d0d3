"""``appliance run`` on the embedded default, driven from the command line the way the README says."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.procs import ENV, appliance, stop, wait_for

DATA = Path(__file__).parents[1] / "data" / "gnss"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_embedded_default_shows_a_3d_fix_and_stops_cleanly(tmp_path: Path, sig: int) -> None:
    state = tmp_path / "state"
    app = appliance("run", "--set", f"state_dir={state}")
    try:
        s = wait_for(state, lambda s: s["receiver"]["state"] == "3d-fix" and s["pps"]["paired"] >= 2)
        used = {c["name"]: c["used"] for c in s["constellations"]}
        assert used["GPS"] > 0 and used["BeiDou"] > 0
        text = subprocess.run([sys.executable, "-m", "appliance", "status", "--set", f"state_dir={state}"],
                              capture_output=True, text=True, env=ENV, timeout=20).stdout
        assert "3d-fix" in text and "GPS" in text and "BeiDou" in text and "mode 3D" in text
        if sig == signal.SIGTERM:  # with the default settings: FREERUN -> ACQUIRING -> LOCKED within 60 s
            s = wait_for(state, lambda s: s["clock"]["state"] == "LOCKED", timeout_s=60)
            assert (s["clock"]["locked_since_ns"] - s["started_at_tai_ns"]) / 1e9 < 60
            assert s["clock"]["clock_class"] == 6 and s["clock"]["advertised"]["ntp_stratum"] == 1
        second = appliance("run", "--set", f"state_dir={state}")
        _, err = second.communicate(timeout=20)  # it must refuse at once rather than steal the control socket
        assert second.returncode == 1 and "already running" in err
    finally:
        code, err = stop(app, sig)
    assert code == 0, err
    assert not (state / "control.sock").exists()


def test_status_without_a_running_appliance_says_so(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "appliance", "status", "--set", f"state_dir={tmp_path}"],
                         capture_output=True, text=True, env=ENV, timeout=20)
    assert out.returncode == 1
    assert "not running" in out.stderr


def test_replay_prints_every_epoch_and_a_summary() -> None:
    out = subprocess.run([sys.executable, "-m", "appliance", "replay", str(DATA / "ublox-neo-m9n-nmea.log")],
                         capture_output=True, text=True, env=ENV, timeout=60)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len(lines) == 62
    assert lines[0].startswith("2020-07-11T22:37:45.000Z fix-3d")
    assert "GPS:6/13" in lines[0] and "BeiDou:5/7" in lines[0]
    assert lines[-1].startswith("61 epochs") and "rejected none" in lines[-1]


def test_replay_json_of_a_pure_ubx_timing_capture() -> None:
    out = subprocess.run([sys.executable, "-m", "appliance", "replay", "--json", str(DATA / "u-blox-m8t-time.log")],
                         capture_output=True, text=True, env=ENV, timeout=60)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    epochs, summary = rows[:-1], rows[-1]["summary"]
    assert len(epochs) == 151 and all(e["time_only"] and e["mode"] == 3 for e in epochs)
    assert epochs[0]["time"] == "2021-02-23T18:04:29.000Z"
    assert summary["tai_utc_s"] == 37 and summary["rejected"] == {"bytes:noise": 1, "ubx:truncated": 1}


def test_replay_of_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "appliance", "replay", str(tmp_path / "nope.log")],
                         capture_output=True, text=True, env=ENV, timeout=20)
    assert out.returncode == 1 and "cannot read" in out.stderr and "Traceback" not in out.stderr


def test_a_corrupt_learned_state_means_a_cold_start_and_a_warning(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "clock-state.json").write_text('{"frequency_ppb": ')
    app = appliance("run", "--set", f"state_dir={state}")
    try:
        s = wait_for(state, lambda s: s["receiver"]["state"] == "3d-fix")
        assert s["clock"]["state"] in ("FREERUN", "ACQUIRING")
    finally:
        code, err = stop(app)
    assert code == 0 and "clock-state.json: not valid JSON" in err and "cold start" in err


def test_a_bad_saved_console_setting_raises_an_alarm_instead_of_stopping_the_start(tmp_path: Path) -> None:
    # A file of console settings that no longer validates (written by hand, or by an older version) is set aside:
    # the appliance starts on the rest, with a warning alarm naming what it ignored.
    state = tmp_path / "state"
    state.mkdir()
    (state / "console-settings.toml").write_text('[snmp]\nsys_contact = "a\\nb"\nsys_location = "rack 4"\n')
    app = appliance("run", "--set", f"state_dir={state}")
    try:
        s = wait_for(state, lambda s: any(a["code"] == "config-console-ignored" and a["raised"]
                                          for a in s["alarms"]))
        alarm = next(a for a in s["alarms"] if a["code"] == "config-console-ignored")
        assert alarm["severity"] == "warning" and "snmp.sys_contact" in alarm["text"]
    finally:
        code, err = stop(app)
    assert code == 0 and "console setting ignored: snmp.sys_contact" in err


def test_the_cpu_wake_up_latency_is_held_while_running(tmp_path: Path) -> None:
    """cpu_latency_us: as root the kernel's PM QoS target reads the value held while the appliance runs; without
    the right to write it, the status says why and the appliance serves anyway."""
    import os
    import struct

    state = tmp_path / "state"
    app = appliance("run", "--set", f"state_dir={state}", "--set", "cpu_latency_us=7")
    try:
        s = wait_for(state, lambda s: "cpu_latency" in s["outputs"])
        hold = s["outputs"]["cpu_latency"]
        if os.geteuid() == 0:
            assert hold == {"enabled": True, "latency_us": 7, "held": True}
            with open("/dev/cpu_dma_latency", "rb") as device:  # the kernel's target: the least of all held
                assert struct.unpack("=i", device.read(4))[0] <= 7
        else:
            assert not hold["held"] and "needs root" in hold["error"]
    finally:
        code, err = stop(app, signal.SIGTERM)
    assert code == 0, err
    assert "CPU wake-up latency held at 7 us" in err or "cannot hold the CPU wake-up latency" in err


THREE_RECEIVERS = """
[[gnss]]                     # three simulated receivers, each on an antenna of its own
[[gnss]]
cable_delay_ns = 15
[[gnss]]
name = "roof"
priority = 2

[references]
gnss_priority = 1            # the name from before the [[gnss]] array: read, with a warning at start
"""


@pytest.mark.slow
def test_run_with_three_receivers_lists_them_in_status(tmp_path: Path) -> None:
    state, path = tmp_path / "state", tmp_path / "appliance.toml"
    path.write_text(THREE_RECEIVERS, encoding="utf-8")
    app = appliance("run", "--config", str(path), "--set", f"state_dir={state}")
    try:
        s = wait_for(state, lambda s: [r["state"] for r in s.get("receivers", [])] == ["3d-fix"] * 3, timeout_s=30)
        assert [(r["name"], r["device"], r["cable_delay_ns"], r["priority"]) for r in s["receivers"]] == [
            ("gnss", "simulated", 0, 1), ("gnss2", "simulated", 15, 1), ("roof", "simulated", 0, 2)]
        assert [r["name"] for r in s["references"]["rows"]] == ["gnss", "gnss2", "roof"]
        text = subprocess.run([sys.executable, "-m", "appliance", "status", "--config", str(path), "--set",
                               f"state_dir={state}"], capture_output=True, text=True, env=ENV, timeout=20).stdout
        assert "Receivers       : 3 ([[gnss]]; the first is watched by the integrity checks)" in text
        listed = [line.split()[:2] for line in text.splitlines() if " on simulated: " in line and
                  line.startswith("   ")]
        assert listed == [["1", "gnss"], ["2", "gnss2"], ["3", "roof"]]
    finally:
        code, err = stop(app)
    assert code == 0, err
    assert "references.gnss_priority is read as the priority of [[gnss]] receiver 1 (gnss); write it there" in err
