"""Scenario 5: several GNSS receivers, each a ``[[gnss]]`` table, each a simulated receiver on an antenna of its own,
on the whole appliance in simulated time.

5.1  Two receivers of equal priority (hot standbys): the first is pulled (its slot powered off) and the clock goes on,
     locked, on the second; status shows the pulled one's state and its alarm; it is put back, reports a fix and is
     qualified again; the clock stays on the second (equal priority: it does not leave a good one).
5.2  Three receivers of priorities 1, 2 and 3: the first is pulled and the clock runs on the second; back, the first
     is qualified again and the clock returns to it after the wait to restore.  A standby pulled while the clock
     runs on the first shows its own state while the clock does not move; it returns and is qualified again.
5.3  Every surface lists the three: status (its text too), /metrics, the MIB's receiver and reference tables.
5.4  Honesty: through every switch the clock's advertised error bound covers |time error| at every second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance import leap
from appliance.refs.selector import RefSwitched
from appliance.snmp.mibgen import enterprise_oid, load_table
from appliance.snmp.view import System, build
from appliance.status import render, to_dict
from appliance.web.metrics import StatusCollector
from tests.sim.conftest import Sim, build_sim

pytestmark = pytest.mark.slow

WARM_S = 360  # locked on the first receiver, every receiver qualified
QUALIFY_S = 10  # references.qualify_s (the default): a standby's qualification
WAIT_TO_RESTORE_S = 60  # references.wait_to_restore_s (the default)
NO_DATA_S = 5  # gnss.no_data_timeout_s (the default)
TABLE = leap.LeapTable.load_default()


@dataclass
class Second:
    te_ns: int
    bound_ns: int | None
    state: str
    active: str | None


@dataclass
class Run:
    sim: Sim
    seconds: list[Second] = field(default_factory=list)
    events: list[tuple[int, object]] = field(default_factory=list)
    marks: dict[str, int] = field(default_factory=dict)
    snapshots: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> status as JSON at that moment

    def __post_init__(self) -> None:
        self.sim.app.subscribe(lambda e: self.events.append((len(self.seconds), e)))

    def run(self, seconds: int) -> None:
        app = self.sim.app
        for _ in range(seconds):
            self.sim.run_s(1)
            status = app.status()
            clock = status.clock
            self.seconds.append(Second(app.sim_time_error_ns(), clock.error_bound_ns, clock.state,
                                       status.references.active))

    def power(self, number: int, on: bool) -> None:
        self.sim.world.receivers[number - 1].powered = on
        self.marks[f"{'on' if on else 'off'} {number}"] = len(self.seconds)

    def snapshot(self, name: str) -> dict[str, Any]:
        self.snapshots[name] = to_dict(self.sim.app.status())
        return self.snapshots[name]

    def switches(self) -> list[tuple[int, RefSwitched]]:
        return [(t, e) for t, e in self.events if isinstance(e, RefSwitched)]

    def dishonest(self) -> list[Second]:
        return [s for s in self.seconds if s.bound_ns is None or abs(s.te_ns) > s.bound_ns]


def start(**settings: Any) -> Run:
    sim = build_sim(**settings)
    sim.run_s(WARM_S)
    status = sim.app.status()
    assert status.clock.state == "LOCKED" and status.references.active == "gnss"
    views = {row.name: row.state for row in status.references.rows}
    assert all(state == "qualified" for state in views.values()), views
    return Run(sim)


def receivers(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in status["receivers"]}


def references(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in status["references"]["rows"]}


def alarms(status: dict[str, Any]) -> set[str]:
    return {a["code"] for a in status["alarms"] if a["raised"]}


# --- 5.1 two hot standbys ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def two() -> Run:
    run = start(**{"gnss2.device": ""})
    run.power(1, False)
    run.run(30)
    run.snapshot("pulled")
    run.power(1, True)
    run.run(60)
    run.snapshot("back")
    return run


def test_two_receivers_are_two_references_on_their_own_antennas(two: Run) -> None:
    first, second = two.sim.world.receivers
    assert first.source != second.source and first.receiver is not second.receiver
    rows = two.snapshots["back"]["receivers"]
    assert [r["name"] for r in rows] == ["gnss", "gnss2"]
    assert [r["watched"] for r in rows] == [True, False]  # the integrity checks watch the first


def test_the_clock_goes_on_locked_on_the_standby_when_the_first_is_pulled(two: Run) -> None:
    off = two.marks["off 1"]
    (t, switch), = [(t, e) for t, e in two.switches() if t >= off]
    assert (switch.old, switch.new) == ("gnss", "gnss2") and t - off <= NO_DATA_S
    assert all(s.state == "LOCKED" for s in two.seconds), {s.state for s in two.seconds}
    assert all(s.active == "gnss2" for s in two.seconds[t + 1:])  # equal priority: it stays on the standby


def test_the_pulled_receiver_shows_its_state_and_its_alarm(two: Run) -> None:
    pulled = two.snapshots["pulled"]
    assert receivers(pulled)["gnss"]["state"] == "no-data" and receivers(pulled)["gnss2"]["state"] == "3d-fix"
    assert references(pulled)["gnss"]["state"] == "no-signal" and references(pulled)["gnss2"]["active"]
    assert {"gnss-no-data", "reference-backup"} <= alarms(pulled)
    text = render(pulled)
    assert "   1 gnss   on simulated: no-data for" in text and "reference no-signal" in text
    assert "   2 gnss2  on simulated: 3d-fix" in text and "reference qualified (active)" in text


def test_the_pulled_receiver_returns_and_is_qualified_again(two: Run) -> None:
    back = two.snapshots["back"]
    assert receivers(back)["gnss"]["state"] == "3d-fix" and references(back)["gnss"]["state"] == "qualified"
    assert "gnss-no-data" not in alarms(back)
    assert receivers(back)["gnss"]["pps_edges"] > receivers(two.snapshots["pulled"])["gnss"]["pps_edges"]


def test_two_receivers_stay_honest(two: Run) -> None:
    assert not two.dishonest()


# --- 5.2 three receivers by priority -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def three() -> Run:
    run = start(**{"gnss.priority": "1", "gnss2.priority": "2", "gnss3.priority": "3", "gnss3.cable_delay_ns": "0"})
    run.power(2, False)  # a standby
    run.run(30)
    run.snapshot("standby pulled")
    run.power(2, True)
    run.run(30)
    run.snapshot("standby back")
    run.power(1, False)  # the active one
    run.run(30)
    run.snapshot("first pulled")
    run.power(1, True)
    run.run(WAIT_TO_RESTORE_S + 30)
    run.snapshot("first back")
    return run


def test_a_pulled_standby_shows_while_the_clock_stays_on_the_first(three: Run) -> None:
    off, on = three.marks["off 2"], three.marks["on 2"]
    assert all(s.active == "gnss" and s.state == "LOCKED" for s in three.seconds[off:on])
    pulled = three.snapshots["standby pulled"]
    assert receivers(pulled)["gnss2"]["state"] == "no-data"
    assert references(pulled)["gnss2"]["state"] == "no-signal"
    assert [receivers(pulled)[n]["state"] for n in ("gnss", "gnss3")] == ["3d-fix", "3d-fix"]
    back = three.snapshots["standby back"]
    assert receivers(back)["gnss2"]["state"] == "3d-fix" and references(back)["gnss2"]["state"] == "qualified"


def test_the_clock_runs_on_the_next_receiver_and_returns_to_the_first(three: Run) -> None:
    off, on = three.marks["off 1"], three.marks["on 1"]
    moves = [(t, e.old, e.new) for t, e in three.switches() if t >= off]
    assert [(old, new) for _, old, new in moves] == [("gnss", "gnss2"), ("gnss2", "gnss")]
    assert moves[0][0] - off <= NO_DATA_S
    assert WAIT_TO_RESTORE_S <= moves[1][0] - on <= WAIT_TO_RESTORE_S + QUALIFY_S + 5  # revertive, after the wait
    assert all(s.state == "LOCKED" and s.active in ("gnss", "gnss2") for s in three.seconds[off:])
    pulled = three.snapshots["first pulled"]
    assert "gnss-no-data" in alarms(pulled) and "reference-backup" in alarms(pulled)
    back = three.snapshots["first back"]
    assert references(back)["gnss"]["active"] and references(back)["gnss"]["state"] == "qualified"
    assert not alarms(back) & {"gnss-no-data", "reference-backup"}


def test_three_receivers_stay_honest(three: Run) -> None:
    assert not three.dishonest()


# --- 5.3 every surface lists the three ------------------------------------------------------------------------------
def test_status_lists_every_receiver(three: Run) -> None:
    status = three.snapshots["first pulled"]
    rows = status["receivers"]
    assert [(r["number"], r["name"], r["device"], r["priority"], r["watched"]) for r in rows] == [
        (1, "gnss", "simulated", 1, True), (2, "gnss2", "simulated", 2, False), (3, "gnss3", "simulated", 3, False)]
    assert [r["state"] for r in rows] == ["no-data", "3d-fix", "3d-fix"]
    lines = render(status).splitlines()
    assert "Receivers       : 3 ([[gnss]]; the first is watched by the integrity checks)" in lines
    listed = [line.split()[:2] for line in lines if line.startswith("   ") and " on simulated: " in line]
    assert listed == [["1", "gnss"], ["2", "gnss2"], ["3", "gnss3"]]


def test_metrics_have_a_series_per_receiver_and_reference(three: Run) -> None:
    status = three.snapshots["first pulled"]
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(lambda: status))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    up = {s.labels["receiver"]: s.value for s in families["appliance_receiver_up"].samples}
    assert up == {"gnss": 0.0, "gnss2": 1.0, "gnss3": 1.0}
    states = {(s.labels["receiver"], s.labels["state"]) for s in families["appliance_receiver_state"].samples
              if s.value == 1.0}
    assert states == {("gnss", "no-data"), ("gnss2", "3d-fix"), ("gnss3", "3d-fix")}
    edges = {s.labels["receiver"]: s.value for s in families["appliance_receiver_pps_edges"].samples
             if s.name.endswith("_total")}
    assert set(edges) == {"gnss", "gnss2", "gnss3"} and all(v > 300 for v in edges.values())
    active = {s.labels["reference"]: s.value for s in families["appliance_reference_active"].samples}
    assert active == {"gnss": 0.0, "gnss2": 1.0, "gnss3": 0.0}
    qualified = {s.labels["reference"] for s in families["appliance_reference_state"].samples
                 if s.labels["state"] == "qualified" and s.value == 1.0}
    assert qualified == {"gnss2", "gnss3"}


def test_the_mib_has_a_row_per_receiver_and_per_reference(three: Run) -> None:
    status = three.snapshots["first pulled"]
    mib = load_table()
    by_name = {o.name: o for o in mib}
    view = build(mib, status, System("d", enterprise_oid(), 5, "c", "n", "l"),
                 lambda t: leap.tai_to_utc(t, TABLE), lambda code: 1)

    def column(name: str, index: int) -> Any:
        found = view.get(by_name[name].oid + (index,))
        return None if found is None else found[1]

    assert [bytes(column("applianceReceiverName", i)) for i in (1, 2, 3)] == [b"gnss", b"gnss2", b"gnss3"]
    assert [column("applianceReceiverState", i) for i in (1, 2, 3)] == [2, 5, 5]  # noData(2), fix3d(5)
    assert [column("applianceReceiverWatched", i) for i in (1, 2, 3)] == [1, 2, 2]  # TruthValue
    assert [column("applianceReceiverRefIndex", i) for i in (1, 2, 3)] == [1, 6, 7]
    assert column("applianceReceiverName", 4) is None
    assert [bytes(column("applianceRefName", i)) for i in (1, 6, 7)] == [b"gnss", b"gnss2", b"gnss3"]
    assert column("applianceRefIsActive", 6) == 1 and column("applianceRefState", 1) == 2  # noSignal(2)
