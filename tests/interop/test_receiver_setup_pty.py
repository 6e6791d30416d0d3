"""Over a real serial path: `appliance run --set gnss.device=PTY` against a pseudo-terminal that speaks each receiver
family (the simulated receiver answering as a ZED-F9T, an M8T, a UM980, or an NMEA receiver that answers nothing)
identifies the receiver, sets it up with every answer checked, and shows its model, firmware and timing mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.procs import appliance, stop, wait_for

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("family, model, firmware", [("ublox9", "ZED-F9T", "TIM 2.20"),
                                                     ("ublox8", "NEO-M8T", "TIM 1.10"),
                                                     ("unicore", "UM980", "R4.10Build11826")])
def test_each_family_is_set_up_over_a_pty(tmp_path: Path, family: str, model: str, firmware: str) -> None:
    link, state = tmp_path / "gnss0", tmp_path / "state"
    receiver = appliance("sim-receiver", "--link", str(link), "--family", family, "--set", "sim.seed=7")
    assert receiver.stdout.readline().split()[1] == str(link)
    app = appliance("run", "--set", f"gnss.device={link}", "--set", "gnss.baud=115200", "--set", f"state_dir={state}",
                    "--set", "web.enabled=false", "--set", "ntp.enabled=false")
    try:
        s = wait_for(state, lambda s: (s["receiver"].get("setup") or {}).get("state") == "done"
                     and s["receiver"]["state"] == "3d-fix", timeout_s=60)
        setup = s["receiver"]["setup"]
        assert (setup["model"], setup["firmware"]) == (model, firmware)
        assert setup["commands_answered"] == setup["commands"] > 0 and not setup["problems"]
        assert setup["mode"].startswith("survey-in")
        assert not [a for a in s["alarms"] if a["code"].startswith("gnss-")]
        assert s["receiver"]["rejected"] == {}
        shown = appliance("status", "--set", f"state_dir={state}").communicate(timeout=30)[0]
        assert f"Receiver model  : {model}, firmware {firmware}" in shown and "Timing mode     : survey-in" in shown
    finally:
        stop(receiver)
        code, err = stop(app)
    assert code == 0, err
    assert f"receiver gnss: receiver is {model}" in err


def test_an_nmea_receiver_is_read_as_it_is(tmp_path: Path) -> None:
    link, state = tmp_path / "gnss0", tmp_path / "state"
    receiver = appliance("sim-receiver", "--link", str(link), "--family", "nmea", "--set", "sim.seed=7")
    assert receiver.stdout.readline().split()[1] == str(link)
    app = appliance("run", "--set", f"gnss.device={link}", "--set", f"state_dir={state}",
                    "--set", "web.enabled=false", "--set", "ntp.enabled=false")
    try:
        s = wait_for(state, lambda s: (s["receiver"].get("setup") or {}).get("state") == "nmea"
                     and s["receiver"]["state"] == "3d-fix", timeout_s=60)
        assert "read as an NMEA receiver" in s["receiver"]["setup"]["detail"]
        assert not [a for a in s["alarms"] if a["code"].startswith("gnss-")]
    finally:
        stop(receiver)
        code, err = stop(app)
    assert code == 0, err
