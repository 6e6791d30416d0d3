"""What the grandmaster port notices besides what it sends -- management SETs, a foreign grandmaster that out-ranks it,
its return to MASTER -- and how each becomes an audit record and an alarm: in the port, through the PTP output, through
the service and its runner on a stand-in link, and through the runtime into the audit store."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from appliance import config as cfg, leap
from appliance.audit.recorder import entry_for
from appliance.audit.service import AuditPart
from appliance.audit.store import AuditStore
from appliance.edge.ptp import gm_service as svc
from appliance.edge.ptp import runner as run
from appliance.edge.ptp import transport as tr
from appliance.events import Alarm, Severity
from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.outputs.ptp.notices import ManagementSet, MasterAgain, Outranked
from appliance.protocol.ptp.fsm import LISTENING, MASTER, PASSIVE
from appliance.protocol.ptp.port import PtpPort
from appliance.protocol.clockmap import ClockMap
from appliance.protocol.limits import AccessRules
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.profiles import load_profile, resolve
from appliance.runtime.outputs import PTP_MANAGED, PTP_OUTRANKED, PtpOutput
from appliance.runtime.platforms import simulated
from appliance.sched import SimScheduler
from tests.unit.test_ptp_hardware_timestamps import _FakeTransport

S = 1_000_000_000
OWN = bytes.fromhex("0200aafffe000001")
ROGUE = bytes.fromhex("0200eefffe00000e")
ROGUE2 = bytes.fromhex("0200fffffe00000f")
SLAVE = c.PortIdentity(bytes.fromhex("0200ccfffe000003"), 1)
LOCKED = GrandmasterView(clock_class=6, clock_accuracy=0x21, offset_scaled_log_variance=0x4E5D, time_source=0x20,
                         current_utc_offset=37, utc_offset_valid=True, time_traceable=True, frequency_traceable=True,
                         error_bound_ns=40, state="LOCKED")
ROGUE_AT = ("10.9.9.9", 320)
OPERATOR_AT = ("10.0.0.2", 320)


def make(**settings: Any) -> PtpPort:
    config, errors, _warnings = resolve(load_profile("default-e2e"), settings)
    assert not errors
    port = PtpPort(config, OWN, LOCKED, 0, management_rules=AccessRules(("10.0.0.0/8",)))
    port.start(0)
    return port


def to_master(port: PtpPort) -> None:
    t = 0
    while port.state != MASTER:
        port.handle_timer(t, 1_800_000_000 * S + t)
        t += 100_000_000
        assert t < 20 * S


def rogue_announce(seq: int, identity: bytes = ROGUE, priority1: int = 0, log_interval: int = 1) -> bytes:
    """An Announce that out-ranks the appliance: priority1 0 beats any data set whose priority1 is above it."""
    header = c.Header(c.MsgType.ANNOUNCE, 0, c.PortIdentity(identity, 1), seq, log_interval=log_interval,
                      flags=c.FLAG_PTP_TIMESCALE)
    return c.encode(c.Announce(header, 0, 37, priority1, c.ClockQuality(6, 0x21, 0x4E5D), 128, identity, 0, 0x20))


def management(action: int, mid: int, data: bytes = b"") -> bytes:
    header = c.Header(c.MsgType.MANAGEMENT, 0, SLAVE, 7)
    return c.encode(c.Management(header, c.PortIdentity(b"\xff" * 8, 0xFFFF), 0, 0, action,
                                 (c.ManagementTlv(mid, data),)))


# --- the port -----------------------------------------------------------------------------------------------------
def test_a_rogue_master_is_noticed_with_who_and_from_where_and_master_again_when_it_goes() -> None:
    port = make()
    to_master(port)
    assert port.take_notices() == []
    port.handle_rx(rogue_announce(1), ROGUE_AT, None, 8 * S)
    assert port.state == MASTER and port.take_notices() == []  # one Announce does not qualify it
    port.handle_rx(rogue_announce(2), ROGUE_AT, None, 9 * S)
    assert port.state == PASSIVE
    [notice] = port.take_notices()
    assert isinstance(notice, Outranked)
    assert (notice.gm_identity, notice.gm_priority1, notice.gm_class, notice.gm_accuracy, notice.source) == (
        ROGUE, 0, 6, 0x21, "10.9.9.9")
    assert notice.sender == c.PortIdentity(ROGUE, 1) and "better" in notice.reason
    assert "0200ee.fffe.00000e" in notice.text and "priority1 0" in notice.text and "10.9.9.9" in notice.text
    # more of its Announces: nothing new to say
    port.handle_rx(rogue_announce(3), ROGUE_AT, None, 10 * S)
    assert port.take_notices() == []
    # silent for 3 of its 2 s intervals: forgotten, MASTER again
    port.handle_timer(10 * S + 6 * S + 2, 0)
    assert port.state == MASTER
    [again] = port.take_notices()
    assert isinstance(again, MasterAgain) and again.was_outranked_by == ROGUE


def test_a_second_better_rogue_is_noticed_too_and_listening_goes_straight_to_passive() -> None:
    port = make()
    assert port.state == LISTENING
    for seq in (1, 2):
        port.handle_rx(rogue_announce(seq, priority1=10), ROGUE_AT, None, seq * S)
    assert port.state == PASSIVE
    assert [n.gm_priority1 for n in port.take_notices()] == [10]  # type: ignore[union-attr]
    for seq in (1, 2):
        port.handle_rx(rogue_announce(seq, ROGUE2, priority1=0), ("10.9.9.10", 320), None, (2 + seq) * S)
    [notice] = port.take_notices()
    assert isinstance(notice, Outranked) and notice.gm_identity == ROGUE2 and notice.source == "10.9.9.10"


def test_a_worse_foreign_master_is_not_noticed() -> None:
    port = make()
    to_master(port)
    for seq in range(4):
        port.handle_rx(rogue_announce(seq, priority1=200), ROGUE_AT, None, (8 + seq) * S)
    assert port.state == MASTER and port.take_notices() == []


def test_every_management_set_from_an_allowed_source_is_noticed_obeyed_or_refused() -> None:
    port = make(management="get-set")
    to_master(port)
    port.handle_rx(management(c.SET, c.PRIORITY1, bytes([10, 0])), OPERATOR_AT, None, 8 * S)
    port.handle_rx(management(c.SET, c.DOMAIN, bytes([4, 0])), OPERATOR_AT, None, 8 * S)
    port.handle_rx(management(c.SET, c.PRIORITY2, b""), OPERATOR_AT, None, 8 * S)
    port.handle_rx(management(c.SET, c.PRIORITY1, bytes([0, 0])), ("192.0.2.1", 320), None, 8 * S)  # not allowed
    port.handle_rx(management(c.GET, c.PRIORITY1), OPERATOR_AT, None, 8 * S)
    assert port.take_notices() == [
        ManagementSet("priority1", 128, 10, 128, "10.0.0.2"),
        ManagementSet("domain", None, None, None, "10.0.0.2", "not settable"),
        ManagementSet("priority2", None, None, None, "10.0.0.2", "wrong length"),
    ]
    assert port.priority1 == 10 and port.take_notices() == []
    read_only = make()
    to_master(read_only)
    read_only.handle_rx(management(c.SET, c.PRIORITY1, bytes([10, 0])), OPERATOR_AT, None, 8 * S)
    assert read_only.take_notices() == [ManagementSet("priority1", None, None, None, "10.0.0.2", "not settable")]
    assert read_only.priority1 == 128


# --- the PTP output: audit records and alarms ----------------------------------------------------------------------
class _Recorder:
    def __init__(self) -> None:
        self.alarms: list[Alarm] = []
        self.records: list[tuple[str, str, str, dict[str, Any]]] = []

    def output(self, service: Any = None) -> PtpOutput:
        out = PtpOutput(service, lambda: None, self.alarms.append, lambda: 1_800_000_000 * S)
        out.audit_to(lambda kind, actor, text, detail: self.records.append((kind, actor, text, detail)))
        return out


OUTRANKED = Outranked(ROGUE, 0, 6, 0x21, 0x4E5D, 128, 0, c.PortIdentity(ROGUE, 1), "10.9.9.9",
                      "grandmaster 0200eefffe00000e (class 6) is better")


def test_a_management_set_is_a_config_change_by_its_source_and_a_warning_until_set_back() -> None:
    rec = _Recorder()
    out = rec.output()
    out.on_notice(ManagementSet("priority1", 128, 0, 128, "10.0.0.2"))
    kind, actor, text, detail = rec.records[-1]
    assert (kind, actor) == ("config.change", "ptp-mgmt:10.0.0.2")
    assert "ptp.priority1: 128 -> 0" in text
    assert detail == {"setting": "ptp.priority1", "old": 128, "new": 0, "applied": True, "saved": False,
                      "configured": 128, "source": "10.0.0.2", "via": "ptp-management"}
    alarm = rec.alarms[-1]
    assert (alarm.code, alarm.severity, alarm.raised) == (PTP_MANAGED, Severity.WARNING, True)
    assert "priority1 0 (configured 128)" in alarm.text and "10.0.0.2" in alarm.text
    # a second setting changed: the alarm says both
    out.on_notice(ManagementSet("priority2", 128, 90, 128, "127.0.0.1"))
    assert rec.alarms[-1].raised and "priority1 0" in rec.alarms[-1].text and "priority2 90" in rec.alarms[-1].text
    # back to the configured values: the alarm clears once both are
    out.on_notice(ManagementSet("priority1", 0, 128, 128, "10.0.0.2"))
    assert rec.alarms[-1].raised and "priority1" not in rec.alarms[-1].text
    out.on_notice(ManagementSet("priority2", 90, 128, 128, "127.0.0.1"))
    assert not rec.alarms[-1].raised and rec.alarms[-1].code == PTP_MANAGED
    assert [r[0] for r in rec.records] == ["config.change"] * 4


def test_a_refused_set_is_a_command_record_and_no_alarm() -> None:
    rec = _Recorder()
    rec.output().on_notice(ManagementSet("domain", None, None, None, "10.0.0.2", "not settable"))
    assert rec.alarms == []
    kind, actor, text, detail = rec.records[-1]
    assert (kind, actor, detail["refused"], detail["setting"]) == ("command", "ptp-mgmt:10.0.0.2", "not settable",
                                                                    "domain")
    assert "refused" in text


def test_an_outranking_master_is_a_major_alarm_and_a_record_naming_it_cleared_when_master_again() -> None:
    rec = _Recorder()
    out = rec.output()
    out.on_notice(OUTRANKED)
    kind, actor, text, detail = rec.records[-1]
    assert (kind, actor) == ("ptp.foreign-master", "ptp-master:10.9.9.9")
    assert detail["grandmaster"] == "0200ee.fffe.00000e" and detail["source"] == "10.9.9.9"
    assert (detail["priority1"], detail["clock_class"], detail["clock_accuracy"]) == (0, 6, 0x21)
    alarm = rec.alarms[-1]
    assert (alarm.code, alarm.severity, alarm.raised) == (PTP_OUTRANKED, Severity.MAJOR, True)
    for word in ("0200ee.fffe.00000e", "priority1 0", "clockClass 6", "clockAccuracy 0x21", "10.9.9.9"):
        assert word in alarm.text
    # the audit trail's alarm record carries the same text
    assert entry_for(alarm).kind == "alarm.raised" and "0200ee.fffe.00000e" in entry_for(alarm).text
    out.on_notice(MasterAgain("no qualified foreign master", ROGUE))
    assert (rec.alarms[-1].code, rec.alarms[-1].raised) == (PTP_OUTRANKED, False)


# --- through the service and its runner, on a stand-in link ----------------------------------------------------------
class _Link(_FakeTransport):
    """The hardware-timestamps tests' stand-in transport, made readable: ``deliver`` queues a datagram and wakes the
    loop's reader through its pipe."""

    def __init__(self) -> None:
        super().__init__(hardware=False)
        self.inbox: list[tuple[bytes, object, int | None]] = []

    def deliver(self, data: bytes, source: object) -> None:
        self.inbox.append((data, source, None))
        os.write(self._w, b"!")

    def address_key(self, source: object) -> object:
        return source[0] if isinstance(source, tuple) else source

    def receive(self, fd: int) -> list[tuple[bytes, object, int | None]]:
        os.read(self._r, 4096)
        inbox, self.inbox = self.inbox, []
        return inbox


def test_a_rogue_announce_through_the_runner_raises_the_alarm_and_the_record_and_master_again_clears_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tr, "hardware_info", lambda iface: tr.HardwareInfo(tr.SOF_RX_SOFTWARE, -1))
    links: list[_Link] = []
    monkeypatch.setattr(run, "open_transport", lambda *args, **kwargs: links.append(_Link()) or links[-1])
    config, _, _ = resolve(load_profile("default-e2e"), {"log_announce_interval": -3, "log_sync_interval": -3,
                                                         "management": "get-set"})
    rec = _Recorder()
    output = rec.output()
    service = svc.PtpService(config, "eth1", ClockMap(True, 0, 1, -20, 0, 0, b"GPS\0", 0, 0, 0.0, 37), LOCKED,
                             ("10.0.0.0/8",), on_event=output.on_event, timestamping="software",
                             on_notice=output.on_notice)
    output.thing = service

    async def until(predicate: Any, timeout_s: float = 3.0) -> None:
        for _ in range(int(timeout_s / 0.01)):
            if predicate():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"not reached: {service.status()['state']}, {rec.alarms}")

    async def scenario() -> None:
        service.start()
        try:
            await until(lambda: service.status()["state"] == MASTER)
            link = links[0]
            for seq in range(2):  # two Announces inside its window qualify it (every 0.5 s it says)
                link.deliver(rogue_announce(seq, log_interval=-1), ROGUE_AT)
                await asyncio.sleep(0.05)
            await until(lambda: any(a.code == PTP_OUTRANKED and a.raised for a in rec.alarms))
            assert service.status()["state"] == PASSIVE
            link.deliver(management(c.SET, c.PRIORITY1, bytes([1, 0])), OPERATOR_AT)
            await until(lambda: any(r[0] == "config.change" for r in rec.records))
            # the rogue falls silent: forgotten after 3 of its intervals, and the port is MASTER again
            await until(lambda: any(a.code == PTP_OUTRANKED and not a.raised for a in rec.alarms))
            assert service.status()["state"] == MASTER
        finally:
            service.stop()

    asyncio.run(scenario())
    outranked = [a for a in rec.alarms if a.code == PTP_OUTRANKED]
    assert [a.raised for a in outranked] == [True, False]
    assert "0200ee.fffe.00000e" in outranked[0].text and "10.9.9.9" in outranked[0].text
    kinds = [(kind, actor) for kind, actor, _text, _detail in rec.records]
    assert kinds == [("ptp.foreign-master", "ptp-master:10.9.9.9"), ("config.change", "ptp-mgmt:10.0.0.2")]
    assert any(a.code == PTP_MANAGED and a.raised and "priority1 1" in a.text for a in rec.alarms)


# --- through the runtime, into the audit store -------------------------------------------------------------------------
class _IdleService:
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def status(self) -> dict[str, Any]:
        return {}


def test_the_runtime_hands_the_ptp_output_its_audit_trail_and_both_record_land_in_the_store(tmp_path: Path) -> None:
    table = leap.LeapTable.load_default()
    scheduler = SimScheduler(leap.utc_fields_to_tai(2026, 6, 1, 12, 0, 0, 0, table))
    runtime, _world = simulated(cfg.load(None, ["sim.seed=1"]), scheduler, table)
    output = PtpOutput(_IdleService(), lambda: None, runtime.alarm, runtime.now_tai_ns)
    runtime.add(output)  # before the audit trail is open, as `appliance run` adds its parts
    output.on_notice(ManagementSet("priority1", 128, 5, 128, "10.0.0.3"))  # no trail yet: nothing breaks
    store = AuditStore(tmp_path / "audit.sqlite")
    trail = AuditPart(None, store, runtime.status, runtime.now_tai_ns, lambda: table,  # type: ignore[arg-type]
                      runtime.subscribe)
    runtime.subscribe(trail.on_event)
    runtime.audit_to(trail.on_command)

    output.on_notice(ManagementSet("priority1", 5, 0, 128, "10.0.0.2"))
    output.on_notice(OUTRANKED)
    assert {a.code for a in runtime.status().alarms if a.raised} >= {PTP_MANAGED, PTP_OUTRANKED}
    output.on_notice(MasterAgain("no qualified foreign master", ROGUE))
    assert PTP_OUTRANKED not in {a.code for a in runtime.status().alarms if a.raised}

    records = list(reversed(store.records(limit=None)))
    rows = [(r.kind, r.actor, r.detail.get("code")) for r in records]
    assert rows == [("config.change", "ptp-mgmt:10.0.0.2", None), ("alarm.raised", "system", PTP_MANAGED),
                    ("ptp.foreign-master", "ptp-master:10.9.9.9", None), ("alarm.raised", "system", PTP_OUTRANKED),
                    ("alarm.cleared", "system", PTP_OUTRANKED)]
    foreign = records[2]
    assert foreign.detail["grandmaster"] == "0200ee.fffe.00000e" and foreign.detail["priority1"] == 0
    assert "10.9.9.9" in records[3].text and "priority1 0" in records[3].text
    store.close()
