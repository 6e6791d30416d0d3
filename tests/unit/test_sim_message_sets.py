"""The simulated receiver's message sets: the default burst is byte for byte what it always was, each named set sends
exactly its messages, and each reaches the appliance as epochs, labels, fixes and satellites where it carries them."""

from __future__ import annotations

import hashlib

import pytest

from appliance import leap
from appliance.events import Constellation, FixMode, GnssEpoch, ReceiverState, TimeLabel
from appliance.gnss import nmea, ubx
from appliance.gnss.framer import Framer, NmeaFrame, UbxFrame
from appliance.gnss.receiver import GnssReceiver
from appliance.sim.messages import MESSAGE_ORDER
from appliance.sim.receiver import MESSAGE_SETS, SimReceiver
from appliance.units import NS_PER_S

TABLE = leap.LeapTable.load_default()
START_TAI_NS = 1_830_000_000 * NS_PER_S
UBX_SETS = ("default", "ubx-gen9", "ubx-m8-legacy")


def kinds(data: bytes) -> list[str]:
    """Message names in a burst, in order: the NMEA sentence type or the UBX name."""
    framer = Framer()
    out = []
    for frame in framer.feed(data) + framer.flush():
        if isinstance(frame, NmeaFrame):
            out.append(frame.text[3:frame.text.index(",")])
        else:
            assert isinstance(frame, UbxFrame)
            out.append(ubx.name_of(frame.msg_class, frame.msg_id))
    return out


def run(rx: SimReceiver, seconds: int = 5) -> tuple[list[object], GnssReceiver]:
    gnss = GnssReceiver(lambda: TABLE)
    events: list[object] = []
    for i in range(seconds):
        events += gnss.feed(rx.burst(START_TAI_NS + i * NS_PER_S), i * NS_PER_S)
        events += gnss.tick(i * NS_PER_S + NS_PER_S // 2)
    return events + gnss.finish(), gnss


def test_the_default_burst_is_unchanged_byte_for_byte():
    """Digest of bursts from before message sets existed: seeds, attacks and simulation runs depend on these bytes."""
    digest = hashlib.sha256()
    for seed in (1, 7):
        rx = SimReceiver(seed, TABLE)
        for i in range(120):
            if i == 50:
                rx.conditions.blocked = True
            if i == 60:
                rx.conditions.blocked, rx.conditions.time_offset_ns = False, 1_500_000_000
            if i == 80:
                rx.conditions.system_offsets_ns = {Constellation.GALILEO: 300}
            digest.update(rx.burst(START_TAI_NS + i * NS_PER_S))
    assert digest.hexdigest() == "4a2f5f6b723e3b2893dd242c1e4659edebac125d8bfca442c168936f7f1df0ef"


def test_the_default_set_is_what_the_simulator_has_always_sent():
    rx = SimReceiver(3, TABLE)
    assert rx.messages == set(MESSAGE_SETS["default"]) and not rx.time_only
    assert list(dict.fromkeys(kinds(rx.burst(START_TAI_NS)))) == [
        "RMC", "GGA", "GSA", "GSV", "ZDA", "TIM-TP", "NAV-TIMEGPS", "NAV-TIMEGAL", "NAV-TIMEBDS", "NAV-TIMELS",
        "NAV-STATUS", "MON-HW"]


@pytest.mark.parametrize("name", sorted(MESSAGE_SETS))
def test_each_set_sends_exactly_its_messages_in_order(name):
    sent = kinds(SimReceiver(3, TABLE, messages=MESSAGE_SETS[name]).burst(START_TAI_NS))
    assert set(sent) == MESSAGE_SETS[name]
    order = [MESSAGE_ORDER.index(k) for k in dict.fromkeys(sent)]
    assert order == sorted(order)


def test_the_named_sets():
    assert MESSAGE_SETS["ubx-gen9"] == {"NAV-PVT", "NAV-SAT", "NAV-TIMEUTC", "NAV-TIMELS", "NAV-STATUS", "TIM-TP",
                                        "MON-RF"}
    assert MESSAGE_SETS["ubx-m8-legacy"] == {"NAV-SOL", "NAV-TIMEGPS", "NAV-SVINFO", "NAV-DOP", "NAV-TIMEUTC",
                                             "TIM-TP", "MON-HW"}
    assert MESSAGE_SETS["nmea"] == {"RMC", "GGA", "GSA", "GSV", "ZDA"}
    assert MESSAGE_SETS["factory-ublox"] == {"RMC", "VTG", "GGA", "GSA", "GSV", "GLL"}


def test_an_unknown_message_name_is_refused():
    with pytest.raises(ValueError, match="NAV-FOO"):
        SimReceiver(3, TABLE, messages={"RMC", "NAV-FOO"})


def test_a_factory_ublox_sends_no_ubx():
    assert b"\xb5b" not in SimReceiver(3, TABLE, messages=MESSAGE_SETS["factory-ublox"]).burst(START_TAI_NS)


def test_message_sets_are_seeded():
    for name, messages in MESSAGE_SETS.items():
        a, b = (SimReceiver(11, TABLE, messages=messages, time_only=True) for _ in range(2))
        assert all(a.burst(START_TAI_NS + i * NS_PER_S) == b.burst(START_TAI_NS + i * NS_PER_S) for i in range(3)), name


@pytest.mark.parametrize("name", sorted(MESSAGE_SETS))
def test_each_set_gives_labelled_fixed_epochs(name):
    events, gnss = run(SimReceiver(5, TABLE, messages=MESSAGE_SETS[name]))
    epochs = [e for e in events if isinstance(e, GnssEpoch)]
    labels = [e for e in events if isinstance(e, TimeLabel)]
    assert len(epochs) == len(labels) == 5
    assert [label.tai_ns for label in labels] == [e.tai_ns for e in epochs] == [
        START_TAI_NS + i * NS_PER_S for i in range(5)]
    assert all(e.time_valid and e.fix_mode == FixMode.FIX_3D and e.position is not None for e in epochs)
    assert all(len(e.satellites) > 20 and e.used_count and e.used_count > 20 for e in epochs)
    assert gnss.state is ReceiverState.FIX_3D and not gnss.rejected


@pytest.mark.parametrize("name", UBX_SETS)
def test_time_only_receivers_report_gps_fix_5_and_gga_keeps_the_position(name):
    rx = SimReceiver(5, TABLE, messages=MESSAGE_SETS[name] | {"GGA", "NAV-PVT", "NAV-STATUS", "NAV-SOL"},
                     time_only=True)
    framer = Framer()
    fixes, gga = [], []
    for frame in framer.feed(rx.burst(START_TAI_NS)):
        if isinstance(frame, UbxFrame):
            decoded = ubx.decode(frame.msg_class, frame.msg_id, frame.payload)
            for record in decoded if isinstance(decoded, tuple) else (decoded,):
                record = record.fix if isinstance(record, ubx.UbxSolution) else record
                fixes += [record] if isinstance(record, ubx.UbxFix) else []
        else:
            gga += [r for r in [nmea.decode(frame.text)] if isinstance(r, nmea.TimeRecord) and r.kind == "GGA"]
    assert sorted(f.kind for f in fixes) == ["NAV-PVT", "NAV-SOL", "NAV-STATUS"]
    assert all(f.time_only and f.mode == FixMode.FIX_3D for f in fixes)
    assert gga and gga[0].position is not None and gga[0].mode == FixMode.FIX_3D


@pytest.mark.parametrize("name", UBX_SETS)
def test_a_time_only_receiver_is_time_only(name):
    events, gnss = run(SimReceiver(5, TABLE, messages=MESSAGE_SETS[name], time_only=True))
    epochs = [e for e in events if isinstance(e, GnssEpoch)]
    assert gnss.state is ReceiverState.TIME_ONLY and all(e.time_only and e.time_valid for e in epochs)


@pytest.mark.parametrize("name, status, power", [("ubx-gen9", "open", "on"), ("ubx-m8-legacy", "short", "off"),
                                                 ("default", "ok", "on")])
def test_the_antenna_reaches_the_epoch(name, status, power):
    rx = SimReceiver(5, TABLE, messages=MESSAGE_SETS[name])
    rx.conditions.antenna_status, rx.conditions.antenna_power = {"open": 4, "short": 3, "ok": 2}[status], int(
        power == "on")
    events, _ = run(rx, seconds=2)
    epochs = [e for e in events if isinstance(e, GnssEpoch)]
    assert {(e.antenna_status, e.antenna_power) for e in epochs} == {(status, power)}


def test_without_a_fix_nothing_is_vouched_for():
    for name, messages in MESSAGE_SETS.items():
        rx = SimReceiver(5, TABLE, messages=messages)
        rx.conditions.blocked = True
        events, gnss = run(rx, seconds=3)
        assert not any(e.time_valid for e in events if isinstance(e, GnssEpoch)), name
        assert not any(e.valid for e in events if isinstance(e, TimeLabel)), name
        assert gnss.state is ReceiverState.NO_FIX, name
