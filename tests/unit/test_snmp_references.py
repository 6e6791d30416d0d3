"""The references in SNMP: the active one, its switches, the applianceRefTable rows, and a notification per switch."""

from __future__ import annotations

from appliance import leap
from appliance.refs.selector import RefSwitched
from appliance.snmp import notify
from appliance.snmp.mibgen import enterprise_oid, load_table
from appliance.snmp.view import System, build
from appliance.status import to_dict
from tests.sim.conftest import build_sim

TABLE = leap.LeapTable.load_default()
MIB = load_table()
BY_NAME = {o.name: o for o in MIB}


def view_of(status: dict):  # noqa: ANN201
    codes: dict[str, int] = {}
    return build(MIB, status, System("d", enterprise_oid(), 5, "c", "n", "l"), lambda t: leap.tai_to_utc(t, TABLE),
                 lambda code: codes.setdefault(code, len(codes) + 1))


def test_reference_objects_follow_the_selector() -> None:
    sim = build_sim(**{"sim.ptp_upstream": "true", "sim.ptp_noise_ns": "5", "references.qualify_s": "3"})
    sim.run_s(60)
    assert sim.app.handle_command({"cmd": "world", "action": "receiver-off"})["ok"]
    sim.run_s(10)
    view = view_of(to_dict(sim.app.status()))

    def scalar(name: str):  # noqa: ANN202
        return view.get(BY_NAME[name].oid + (0,))[1]

    def column(name: str, index: int):  # noqa: ANN202
        return view.get(BY_NAME[name].oid + (index,))[1]

    assert bytes(scalar("applianceRefActive")) == b"ptp"
    assert scalar("applianceRefSwitches") == 2  # none -> gnss -> ptp
    assert bytes(scalar("applianceRefPinned")) == b""
    assert bytes(column("applianceRefName", 1)) == b"gnss" and bytes(column("applianceRefName", 2)) == b"ptp"
    assert column("applianceRefState", 1) == 2  # noSignal(2): the receiver is off
    assert column("applianceRefState", 2) == 5  # qualified(5)
    assert column("applianceRefIsActive", 2) == 1 and column("applianceRefIsActive", 1) == 2  # TruthValue
    assert column("applianceRefPriority", 2) == 2 and column("applianceRefAccuracy", 2) == 1000
    assert abs(column("applianceRefOffset", 2)) < 100


def test_every_switch_is_a_notification_naming_both_references_and_the_reason() -> None:
    [notice] = notify.for_event(RefSwitched("gnss", "ptp", "gnss no-signal (no sample for 4 s)", 0, 1480.0, 20.0), 7)
    assert notice.name == "applianceReferenceSwitch" and BY_NAME[notice.name].kind == "notification"
    assert notice.extra["applianceNotifyText"] == "gnss -> ptp: gnss no-signal (no sample for 4 s)"
    assert notice.extra["applianceNotifyTime"] == 7
    [lost] = notify.for_event(RefSwitched("ntp", None, "ntp no-signal; no qualified reference left", 0, 0.0, 0.0), 7)
    assert lost.extra["applianceNotifyText"].startswith("ntp -> none:")
