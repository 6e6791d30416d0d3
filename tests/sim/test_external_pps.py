"""An external 1PPS as a reference: its edges, named by the served clock's time of day, take over from GNSS.

The simulated world's true seconds are played into ``Appliance.on_external_pps`` as a PPS device would report them
(host clock instants; in simulation the host clock is true time).  With GNSS lost the clock runs on the external
1PPS without a step; an external pulse 2 us off the true second is disqualified against GNSS, never used.
"""

from __future__ import annotations

import pytest

from appliance import leap
from appliance.events import PpsEdge
from appliance.refs.selector import RefSwitched
from appliance.sched import every
from tests.sim.conftest import NS_PER_S, Sim, build_sim

pytestmark = pytest.mark.slow


def pulses(sim: Sim, late_ns: list[int]) -> None:
    """A 1PPS on every true second, ``late_ns[0]`` after it (a list, so a test can move it)."""
    table = sim.app.leap_table()
    count = [0]

    def edge() -> None:
        true_second = sim.scheduler.now_ns() // NS_PER_S * NS_PER_S
        count[0] += 1
        host_ns = leap.tai_to_posix_ns(true_second, table)[0] + late_ns[0]
        sim.app.deliver("pps", PpsEdge(host_ns, count[0], "ext-pps"))
    every(sim.scheduler, NS_PER_S, edge)


def test_the_external_pps_takes_over_from_gnss_without_a_step() -> None:
    sim = build_sim(**{"references.pps_in_device": "/dev/pps-ext", "references.qualify_s": "5"})
    pulses(sim, [0])
    sim.run_s(300)
    references = sim.app.status().references
    rows = {row.name: row for row in references.rows}
    assert references.active == "gnss" and rows["pps"].state == "qualified"
    assert abs(rows["pps"].offset_ns) < 100 and rows["pps"].samples > 250
    before = sim.app.sim_time_error_ns()
    assert sim.app.handle_command({"cmd": "world", "action": "receiver-off"})["ok"]
    worst = 0
    for _ in range(60):
        sim.run_s(1)
        worst = max(worst, abs(sim.app.sim_time_error_ns() - before))
    status = sim.app.status()
    assert status.references.active == "pps" and status.clock.state == "LOCKED"
    assert status.clock.advertised.time_source == 0x90  # OTHER: an external pulse
    assert worst <= 20 + 10, worst  # the step limit and the noise: no step
    [sw] = [e for e in sim.events if isinstance(e, RefSwitched) and e.new == "pps"]
    assert sw.old == "gnss" and "gnss no-signal" in sw.reason


def test_an_external_pps_off_the_second_is_disqualified_against_gnss() -> None:
    sim = build_sim(**{"references.pps_in_device": "/dev/pps-ext", "references.qualify_s": "5"})
    pulses(sim, [2_000])
    sim.run_s(120)
    rows = {row.name: row for row in sim.app.status().references.rows}
    assert rows["pps"].state == "disqualified" and "disagrees with gnss" in rows["pps"].reason
    assert not any(isinstance(e, RefSwitched) and e.new == "pps" for e in sim.events)
