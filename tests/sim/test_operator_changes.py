"""An operator's own change is not an attack: on the whole simulated appliance, an audited change of the GNSS cable
delay moves the served time by the delay with no integrity finding, where the same step in the sky is caught."""

from __future__ import annotations

from appliance.status import to_dict
from tests.sim.conftest import Sim, build_sim

FAST = {"clock.warmup_s": 0, "clock.qualify_s": 3}


def locked_and_learned(seed: int) -> Sim:
    sim = build_sim(seed=seed, **FAST)
    for _ in range(600):
        sim.run_s(1)
        if sim.app.status().clock.state == "LOCKED":
            break
    sim.run_s(240)  # the integrity checks' line is fitted and the clock has learned its oscillator
    return sim


def integrity_alarms(sim: Sim) -> list[str]:
    return [a["code"] for a in to_dict(sim.app.status())["alarms"] if a["code"].startswith("gnss-")]


def test_a_cable_delay_change_moves_the_served_time_and_raises_nothing() -> None:
    sim = locked_and_learned(seed=3)
    before = sim.app.status().clock.sim_time_error_ns
    assert sim.app.status().clock.state == "LOCKED" and not integrity_alarms(sim) and abs(before) < 30
    assert sim.app.apply_live("gnss.cable_delay_ns", 50)
    seen: set[str] = set()
    for _ in range(120):
        sim.run_s(1)
        seen |= set(integrity_alarms(sim))
        assert sim.app.status().integrity.level == "ok"
    s = sim.app.status()
    assert not seen and s.clock.state == "LOCKED"
    # The reference now says the pulse left 50 ns before it was stamped: the clock follows, 50 ns later than true.
    assert abs(s.clock.sim_time_error_ns - before - 50) < 20, (before, s.clock.sim_time_error_ns)


def test_the_same_step_from_the_sky_is_caught() -> None:
    sim = locked_and_learned(seed=3)
    assert sim.app.handle_command({"cmd": "world", "action": "spoof-step", "value": "50"})["ok"]
    seen: set[str] = set()
    for _ in range(20):
        sim.run_s(1)
        seen |= set(integrity_alarms(sim))
    assert seen & {"gnss-spoofing", "gnss-integrity-suspect"}, seen
