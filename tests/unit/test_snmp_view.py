"""The SNMP agent's pure parts: every MIB object has a source, the view's order and encodings, notifications,
the access gate, and the SNMPv3 users file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appliance import leap
from appliance.events import Alarm, ClockStateChanged, ReceiverState, ReceiverStateChanged, Severity
from appliance.snmp import notify
from appliance.snmp.agent import AccessGate, V3User
from appliance.snmp.mibgen import enterprise_oid, load_table
from appliance.snmp.users import SnmpConfigError, load_users, parse_receivers, save_users
from appliance.snmp.values import SCALARS, UNKNOWN_BOUND, Stamp, tables
from appliance.snmp.view import System, build, date_and_time, encode
from appliance.status import to_dict
from tests.sim.conftest import build_sim

TABLE = leap.LeapTable.load_default()
MIB = load_table()
BY_NAME = {o.name: o for o in MIB}


@pytest.fixture(scope="module")
def status() -> dict:
    sim = build_sim(seed=2, **{"clock.warmup_s": 0, "clock.qualify_s": 3})
    sim.run_s(40)
    return to_dict(sim.app.status())


def view_of(status: dict):  # noqa: ANN201
    codes: dict[str, int] = {}
    return build(MIB, status, System("d", enterprise_oid(), 5, "c", "n", "l"), lambda t: leap.tai_to_utc(t, TABLE),
                 lambda code: codes.setdefault(code, len(codes) + 1))


def test_every_readable_object_has_one_source_and_nothing_else_does() -> None:
    scalars = {o.name for o in MIB if o.kind == "scalar" and o.access not in ("not-accessible",
                                                                             "accessible-for-notify")}
    assert scalars == set(SCALARS)
    assert {o.table for o in MIB if o.kind == "column"} == set(tables(lambda c: 1))


def test_the_view_is_in_oid_order_and_answers_get_and_getnext(status: dict) -> None:
    view = view_of(status)
    oids = [oid for oid, _ in view.items()]
    assert oids == sorted(oids) and len(set(oids)) == len(oids)
    state = BY_NAME["applianceClockState"].oid + (0,)
    assert view.get(state) == ("Integer32", 3)  # locked(3)
    assert view.next(state[:-1])[0] == state  # GETNEXT of the object gives its instance
    assert view.next(oids[-1]) is None
    assert view.declares(BY_NAME["applianceSatCn0"].oid + (1, 999)) and view.get(BY_NAME["applianceSatCn0"].oid +
                                                                               (1, 999)) is None
    assert not view.declares((1, 3, 6, 1, 4, 1, 1))
    assert view.writable(BY_NAME["applianceClockForcedHoldover"].oid + (0,))
    assert not view.writable(state)
    sats = [oid for oid in oids if oid[:len(BY_NAME["applianceSatUsed"].oid)] == BY_NAME["applianceSatUsed"].oid]
    assert len(sats) == len(status["satellites"])


def test_encodings_follow_the_mib(status: dict) -> None:
    utc_of = lambda t: leap.tai_to_utc(t, TABLE)  # noqa: E731
    assert encode(BY_NAME["applianceClockForcedHoldover"], True, utc_of) == ("Integer32", 1)
    assert encode(BY_NAME["applianceClockForcedHoldover"], False, utc_of) == ("Integer32", 2)
    assert encode(BY_NAME["applianceClockState"], "holdoverExpired", utc_of) == ("Integer32", 5)
    assert encode(BY_NAME["applianceClockErrorBound"], 10**12, utc_of) == ("Unsigned32", 2**32 - 1)
    leap_second = leap.utc_fields_to_tai(2016, 12, 31, 23, 59, 60, 0, TABLE)
    kind, data = encode(BY_NAME["applianceCurrentTime"], Stamp(leap_second), utc_of)
    assert kind == "OctetString" and data == bytes([0x07, 0xE0, 12, 31, 23, 59, 60, 0, ord("+"), 0, 0])
    assert date_and_time(leap.tai_to_utc(leap_second + 300_000_000, TABLE))[7] == 3
    size = max(hi for _, hi in BY_NAME["applianceRcvName"].syntax.sizes)
    assert encode(BY_NAME["applianceRcvName"], "x" * 400, utc_of)[1] == b"x" * size
    cold = dict(status, clock={**status["clock"], "error_bound_ns": None, "phase_offset_ns": None})
    view = view_of(cold)
    assert view.get(BY_NAME["applianceClockErrorBound"].oid + (0,))[1] == UNKNOWN_BOUND
    assert view.get(BY_NAME["applianceClockPhaseOffset"].oid + (0,))[1] == -2**31


def test_ntpv4_mib_status_objects(status: dict) -> None:
    from appliance.snmp.view import NTPV4, ntp_date

    assert ntp_date(0) == bytes.fromhex("00000000" "83aa7e80" "0000000000000000")  # 1970 in NTP era 0
    assert ntp_date(2_085_978_496 * 10**9 + 500_000_000)[:8] == bytes.fromhex("00000001" "00000000")  # 2036: era 1
    posix = lambda tai: leap.tai_to_posix_ns(tai, TABLE)[0]  # noqa: E731
    codes: dict[str, int] = {}
    serving = dict(status, outputs={**status["outputs"], "ntp": {"enabled": True, "totals": {"requests": 7}}})
    view = build(MIB, serving, System("d", enterprise_oid(), 5, "c", "n", "l"), lambda t: leap.tai_to_utc(t, TABLE),
                 lambda code: codes.setdefault(code, 1), posix)
    assert view.get(NTPV4 + (2, 2, 0)) == ("Unsigned32", 1)  # stratum 1 while locked
    assert view.get(NTPV4 + (2, 1, 0)) == ("Integer32", 5)  # syncToRefclock
    assert view.get(NTPV4 + (2, 12, 0)) == ("Counter32", 7)
    assert len(view.get(NTPV4 + (2, 9, 0))[1]) == 16
    assert view.get(NTPV4 + (2, 10, 0)) == ("OctetString", b"")  # no leap second pending


def test_notifications_for_events() -> None:
    names = lambda ns: [n.name for n in ns]  # noqa: E731
    assert names(notify.for_event(ClockStateChanged("LOCKED", "HOLDOVER", "forced", 0), 1)) == [
        "applianceClockStateChange", "applianceHoldoverEntered"]
    assert names(notify.for_event(ClockStateChanged("HOLDOVER", "HOLDOVER_EXPIRED", "spec", 0), 1))[-1] == \
        "applianceHoldoverExpired"
    lost = ReceiverStateChanged(ReceiverState.FIX_3D, ReceiverState.NO_FIX, "sky", 0)
    back = ReceiverStateChanged(ReceiverState.NO_FIX, ReceiverState.TIME_ONLY, "fix", 0)
    assert names(notify.for_event(lost, 1)) == ["applianceReferenceLost"]
    assert names(notify.for_event(back, 1)) == ["applianceReferenceRegained"]
    assert notify.for_event(ReceiverStateChanged(ReceiverState.FIX_2D, ReceiverState.FIX_3D, "", 0), 1) == []
    spoof = Alarm("gnss-spoofing", Severity.CRITICAL, True, "time pushed", 0)
    assert names(notify.for_event(spoof, 1)) == ["applianceAlarmRaised", "applianceSpoofingAlarm"]
    jam = Alarm("gnss-jamming", Severity.MAJOR, False, "C/N0 back", 0)
    assert names(notify.for_event(jam, 1)) == ["applianceAlarmCleared", "applianceJammingCleared"]
    fault = notify.for_event(Alarm("ntp-not-serving", Severity.MAJOR, True, "port taken", 0), 1)
    assert names(fault) == ["applianceAlarmRaised", "applianceOutputFaultRaised"] and fault[1].output == "ntp"
    assert names(notify.for_audit("login.failed", "failed login for x", 1)) == ["authenticationFailure"]
    assert notify.for_audit("login", "x", 1) == []
    before = {"irig": {"enabled": True, "sink": {"error": ""}}}
    after = {"irig": {"enabled": True, "sink": {"error": "no WAV"}}}
    assert [(n.name, n.output) for n in notify.output_faults(before, after)] == [("applianceOutputFaultRaised",
                                                                                  "irig")]
    assert names(notify.output_faults(after, before)) == ["applianceOutputFaultCleared"]
    for notice_name in ("applianceClockStateChange", "applianceReferenceLost", "applianceAlarmRaised"):
        assert BY_NAME[notice_name].kind == "notification"


def test_the_gate_admits_only_allowed_networks_at_the_configured_rate() -> None:
    now = [0.0]
    gate = AccessGate(["127.0.0.0/8", "2001:db8::/32"], rate_per_s=2, burst=3, clock=lambda: now[0])
    assert not gate.admit("192.0.2.1") and gate.denied == 1
    assert gate.admit("::ffff:127.0.0.1") and gate.admit("2001:db8::5")
    assert [gate.admit("127.0.0.1") for _ in range(4)] == [True, True, False, False]
    now[0] += 1.0
    assert [gate.admit("127.0.0.1") for _ in range(3)] == [True, True, False]
    assert gate.limited == 3 and not gate.admit("not-an-address")


def test_users_file_and_receivers(tmp_path: Path) -> None:
    path = tmp_path / "snmp-users.toml"
    save_users(path, [V3User("nms", "SHA-256", "auth-pass-1", "AES-128", "priv-pass-1", True)])
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert load_users(path)[0].write
    path.chmod(0o644)
    with pytest.raises(SnmpConfigError, match="readable by others"):
        load_users(path)
    path.chmod(0o600)
    path.write_text('[[user]]\nname = "x"\nauth = "SHA-256"\nauth_key = "short"\n')
    path.chmod(0o600)
    with pytest.raises(SnmpConfigError, match="8\\+ characters"):
        load_users(path)
    receivers = parse_receivers("v2c:public@127.0.0.1:162, v3:nms@[::1]:1162")
    assert [(r.version, r.host, r.port, r.community_or_user) for r in receivers] == [
        ("v2c", "127.0.0.1", 162, "public"), ("v3", "::1", 1162, "nms")]
    for bad in ("v1:public@h:162", "v2c:public@h", "v3:nms@h:70000"):
        with pytest.raises(SnmpConfigError):
            parse_receivers(bad)


def test_integrity_objects_follow_the_status(status: dict) -> None:
    def value(s: dict, name: str):  # noqa: ANN202
        return view_of(s).get(BY_NAME[name].oid + (0,))

    assert value(status, "applianceIntegrityLevel") == ("Integer32", 2)  # ok(2)
    assert value(status, "applianceIntegrityReferenceUsable") == ("Integer32", 1)  # true(1)
    assert value(status, "applianceIntegrityHomeState")[1] == 1  # surveying(1): 40 s of a 3600 s survey
    assert value(status, "applianceRcvSurveyState")[1] == 2  # surveying(2)
    spoofed = {**status, "integrity": {**status["integrity"], "level": "spoofed", "usable": False, "score": 1.0,
                                       "override": "reject", "requalify_in_s": 41.2, "rejections": 3,
                                       "reasons": ["position: fix 200.0 m from the surveyed home (limit 50 m)"],
                                       "survey": {**status["integrity"]["survey"], "state": "fixed",
                                                  "source": "configured"}}}
    assert value(spoofed, "applianceIntegrityLevel")[1] == 5
    assert value(spoofed, "applianceIntegrityReferenceUsable")[1] == 2
    assert value(spoofed, "applianceIntegrityOverride")[1] == 3
    assert value(spoofed, "applianceIntegrityScore")[1] == 1000
    assert value(spoofed, "applianceIntegrityRequalifyIn")[1] == 42
    assert value(spoofed, "applianceIntegrityRejections")[1] == 3
    assert b"200.0 m" in bytes(value(spoofed, "applianceIntegrityReason")[1])
    assert value(spoofed, "applianceIntegrityHomeState")[1] == 3
    disabled = {**status, "integrity": {**status["integrity"], "enabled": False}}
    assert value(disabled, "applianceIntegrityLevel")[1] == 1
