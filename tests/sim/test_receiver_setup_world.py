"""The whole appliance on its simulated world sets each receiver family up, locks to it, and tells an operator about
the receiver's faults: the antenna cable cut or shorted, a restart with new firmware, a receiver that stops answering,
a reset that loses the set-up.  Simulated time; every check is what status and the alarms say."""

from __future__ import annotations

import pytest

from appliance.sim import drills
from appliance.sim.messages import GEOID_SEPARATION_M
from appliance.status import to_dict
from tests.sim.conftest import Sim, build_sim

FAST = {"clock.warmup_s": 0, "clock.qualify_s": 3}


def alarms(sim: Sim) -> dict[str, str]:
    return {a["code"]: a["text"] for a in to_dict(sim.app.status())["alarms"]}


def setup_of(sim: Sim) -> dict:
    return to_dict(sim.app.status())["receiver"]["setup"]


def run_until(sim: Sim, check, limit_s: int) -> int:
    for second in range(limit_s):
        sim.run_s(1)
        if check(sim):
            return second
    raise AssertionError(f"not within {limit_s} s: setup {setup_of(sim)}, alarms {alarms(sim)}")


@pytest.mark.parametrize("family, model", [("ublox9", "ZED-F9T"), ("ublox8", "NEO-M8T"), ("unicore", "UM980")])
def test_each_family_is_set_up_and_the_clock_locks_to_it(family: str, model: str) -> None:
    sim = build_sim(**FAST, **{"sim.receiver": family})
    run_until(sim, lambda s: s.app.status().clock.state == "LOCKED", 300)
    setup = setup_of(sim)
    assert setup["state"] == "done", setup
    assert setup["model"] == model and setup["firmware"]
    assert setup["commands_answered"] == setup["commands"] > 0
    assert setup["mode"].startswith("survey-in")
    assert not [code for code in alarms(sim) if code.startswith("gnss-")]


def test_the_receivers_survey_in_ends_in_time_only_fixes() -> None:
    sim = build_sim(**FAST, **{"integrity.survey_s": 120})
    run_until(sim, lambda s: s.app.status().receiver.state.value == "time-only", 400)
    assert "survey-in done" in setup_of(sim)["mode"]
    assert sim.app.status().clock.state == "LOCKED"  # time-only fixes are used for time


def test_a_fixed_position_gives_time_only_fixes_at_once() -> None:
    sim = build_sim(**FAST, **{"integrity.position": "46.2044,6.1432,375.0"})
    run_until(sim, lambda s: s.app.status().receiver.state.value == "time-only", 120)
    # receivers take the height above the ellipsoid: mean sea level + the geoid separation the receiver reports
    assert setup_of(sim)["mode"] == f"fixed position 46.204400, 6.143200, {375.0 + GEOID_SEPARATION_M:.1f} m (ellipsoid)"
    assert sim.world.receiver.device.timing_mode == "fixed"


def test_antenna_faults_are_alarms_with_their_cause() -> None:
    sim = build_sim(**FAST)
    run_until(sim, lambda s: s.app.status().clock.state == "LOCKED", 300)
    drills.apply(sim.world, "antenna-open")
    run_until(sim, lambda s: "gnss-antenna" in alarms(s), 10)
    assert "open circuit" in alarms(sim)["gnss-antenna"]
    assert to_dict(sim.app.status())["receiver"]["antenna"] == "open"
    drills.apply(sim.world, "antenna-short")
    run_until(sim, lambda s: "short circuit" in alarms(s).get("gnss-antenna", ""), 10)
    drills.apply(sim.world, "antenna-ok")
    run_until(sim, lambda s: "gnss-antenna" not in alarms(s), 10)


def test_a_firmware_change_is_a_restart_and_the_receiver_is_set_up_again() -> None:
    sim = build_sim(**FAST)
    run_until(sim, lambda s: setup_of(s)["state"] == "done", 60)
    def restarted_then_done(s: Sim) -> bool:
        raised = [e for e in s.events if getattr(e, "code", "") == "gnss-restarted"]
        return bool(raised) and setup_of(s)["state"] == "done" and "gnss-restarted" not in alarms(s)

    drills.apply(sim.world, "receiver-firmware", "TIM 2.24")
    run_until(sim, restarted_then_done, 200)
    assert setup_of(sim)["firmware"] == "TIM 2.24"
    texts = [e.text for e in sim.events if getattr(e, "code", "") == "gnss-restarted" and getattr(e, "raised", False)]
    assert any("stopped sending TIM-TP" in t or "TIM 2.20 -> " in t for t in texts), texts


def test_a_receiver_that_stops_answering_is_an_alarm_until_it_answers() -> None:
    sim = build_sim(**FAST)
    run_until(sim, lambda s: setup_of(s)["state"] == "done", 60)
    drills.apply(sim.world, "receiver-mute")
    run_until(sim, lambda s: "gnss-unanswered" in alarms(s), 300)
    assert "stopped answering" in alarms(sim)["gnss-unanswered"]
    assert sim.app.status().clock.state == "LOCKED"  # its data still flows and is used
    drills.apply(sim.world, "receiver-unmute")
    run_until(sim, lambda s: "gnss-unanswered" not in alarms(s), 120)
