"""GnssReceiver: state as an operator sees it, time labels as soon as the receiver speaks, counted rejections."""

from __future__ import annotations

import calendar
import struct

import pytest

from appliance import leap
from appliance.events import (DeviceEvent, GnssEpoch, LeapInfo, ReceiverState, ReceiverStateChanged, TimeLabel,
                              TimePulseInfo)
from appliance.gnss import ubx
from appliance.gnss.framer import nmea_sentence_bytes, ubx_frame_bytes
from appliance.gnss.receiver import GnssReceiver

TABLE = leap.LeapTable.load_default()
MS = 1_000_000
S = 1_000_000_000
FIX = "4807.038,N,01131.000,E"


def receiver() -> GnssReceiver:
    return GnssReceiver(lambda: TABLE, device="/dev/ttyTEST")


def rmc(hhmmss: str, status: str = "A") -> bytes:
    return nmea_sentence_bytes(f"GPRMC,{hhmmss},{status},{FIX},0.0,0.0,230324,,,A")


def gga(hhmmss: str, quality: int = 1) -> bytes:
    return nmea_sentence_bytes(f"GPGGA,{hhmmss},{FIX},{quality},08,0.9,545.4,M,46.9,M,,")


def states(events: list) -> list[ReceiverState]:
    return [e.new for e in events if isinstance(e, ReceiverStateChanged)]


def of_type(events: list, kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


def test_states_from_disconnected_to_fix_and_back_to_no_data_on_silence():
    rx = receiver()
    assert rx.state is ReceiverState.DISCONNECTED
    assert states(rx.feed(b"\r\n", 0)) == [ReceiverState.NO_DATA]
    events = rx.feed(rmc("123519") + gga("123519"), 100 * MS)
    events += rx.feed(rmc("123520"), 1_100 * MS)  # the next second closes the first epoch
    assert states(events) == [ReceiverState.FIX_3D]
    closing = rx.tick(5_000 * MS)  # 3.9 s since the last good sentence: the last epoch closes, the state stays
    assert [e.used_count for e in of_type(closing, GnssEpoch)] == [8] and states(closing) == []
    assert states(rx.tick(6_200 * MS)) == [ReceiverState.NO_DATA]
    assert rx.tick(7_000 * MS) == []


def test_quiet_gap_closes_the_epoch_without_waiting_for_the_next_second():
    rx = receiver()
    rx.feed(rmc("123519") + gga("123519"), 0)
    events = rx.tick(400 * MS)
    assert [e.utc_text for e in of_type(events, GnssEpoch)] == ["2024-03-23T12:35:19.000Z"]
    assert rx.state is ReceiverState.FIX_3D


def test_receiver_without_fix_is_no_fix_and_noise_alone_is_no_data():
    rx = receiver()
    events = rx.feed(rmc("123519", "V") + gga("123519", 0), 0) + rx.tick(400 * MS)
    assert states(events) == [ReceiverState.NO_DATA, ReceiverState.NO_FIX]
    noisy = receiver()
    events = noisy.feed(b"\x00\xff" * 500, 0) + noisy.tick(10 * S)
    assert states(events) == [ReceiverState.NO_DATA]
    assert noisy.snapshot().rejected == {} and noisy.epochs == 0  # noise is counted once its run ends


def test_disconnect_then_reconnect():
    rx = receiver()
    rx.feed(rmc("123519") + gga("123519"), 0)
    events = rx.on_device(DeviceEvent("/dev/ttyTEST", False, "read error: EIO", 500 * MS), 500 * MS)
    assert len(of_type(events, GnssEpoch)) == 1  # what was assembled is not lost
    assert states(events) == [ReceiverState.FIX_3D, ReceiverState.DISCONNECTED]
    assert rx.snapshot().device_error == "read error: EIO"
    assert rx.tick(20 * S) == []
    assert states(rx.on_device(DeviceEvent("/dev/ttyTEST", True, "reopened", 0), 21 * S)) == [ReceiverState.NO_DATA]
    assert rx.snapshot().reconnects == 1


def test_partial_frame_before_the_loss_never_joins_bytes_after_it():
    rx = receiver()
    head = rmc("123519")[:20]  # "$GPRMC,123519,A,4807" ...
    rx.feed(head, 0)
    rx.on_device(DeviceEvent("/dev/ttyTEST", False, "unplugged", 100 * MS), 100 * MS)
    rx.on_device(DeviceEvent("/dev/ttyTEST", True, "reopened", 2 * S), 2 * S)
    tail = rmc("123519")[20:]  # would complete the sentence with a valid checksum
    events = rx.feed(tail + rmc("123521") + gga("123521"), 2 * S) + rx.tick(3 * S)
    assert [e.utc_text[11:19] for e in of_type(events, GnssEpoch)] == ["12:35:21"]
    assert rx.snapshot().rejected == {"nmea:truncated": 1, "bytes:noise": 1}


def test_time_label_is_emitted_as_soon_as_the_validity_bearing_sentence_arrives():
    rx = receiver()
    first = rx.feed(nmea_sentence_bytes("GPZDA,123519.00,23,03,2024,00,00"), 10 * MS)
    assert of_type(first, TimeLabel) == []  # ZDA names the second but does not vouch for it
    labelled = rx.feed(rmc("123519"), 20 * MS)
    (label,) = of_type(labelled, TimeLabel)
    assert of_type(labelled, GnssEpoch) == []  # before the epoch closes
    assert (label.utc_text, label.rx_raw_ns, label.valid, label.source) == ("2024-03-23T12:35:19.000Z", 20 * MS,
                                                                           True, "TimeRecord")
    assert label.tai_ns == (calendar.timegm((2024, 3, 23, 12, 35, 19)) + 37) * S
    assert of_type(rx.feed(gga("123519"), 30 * MS), TimeLabel) == []  # once per epoch
    nxt = rx.feed(gga("123520"), 1_030 * MS)
    assert [type(e) for e in nxt if isinstance(e, (GnssEpoch, TimeLabel))] == [GnssEpoch, TimeLabel]


def test_receiver_saying_no_fix_labels_its_second_invalid():
    rx = receiver()
    (label,) = of_type(rx.feed(rmc("123519", "V"), 0), TimeLabel)
    assert not label.valid


def test_rejections_are_counted_by_reason():
    rx = receiver()
    bad = rmc("123519").replace(b"*", b"0*")
    rx.feed(bad + b"$GPRMC,1235\r\n" + nmea_sentence_bytes("GPRMC,1x3519,A,,,,,,,230394,,,A") + b"zz\r\n", 0)
    rx.feed(nmea_sentence_bytes("SDDPT,5.3,0.4,") + ubx_frame_bytes(0x0D, 0x01, b"\x00" * 3), 10 * MS)
    snap = rx.snapshot()
    assert snap.rejected == {"nmea:bad-checksum": 1, "nmea:no-checksum": 1, "nmea:bad-field": 1,
                             "bytes:noise": 1, "ubx:bad-length": 1}
    assert snap.ignored == {"DPT": 1}
    assert snap.frames == {"nmea": 2, "ubx": 1}
    assert snap.last_rejects[-1].startswith("ubx:bad-length")


def test_tim_tp_qerr_becomes_time_pulse_info():
    rx = receiver()
    valid = ubx.encode_payload("TIM-TP", tow_ms=1000, qerr_ps=-4331, week=2146)
    invalid = ubx.encode_payload("TIM-TP", tow_ms=2000, qerr_ps=999, week=2146, flags=0x13)
    events = rx.feed(ubx_frame_bytes(0x0D, 0x01, valid) + ubx_frame_bytes(0x0D, 0x01, invalid), 7 * MS)
    assert of_type(events, TimePulseInfo) == [TimePulseInfo(-4331, None, 7 * MS)]


@pytest.mark.parametrize("time_to_event_s", [3600, 3601])
def test_nav_timels_announcement_names_the_midnight_of_the_change(time_to_event_s):
    """At 23:00:00 on 2016-12-31 u-blox counts 3600 s, to the start of 23:59:60; the new offset takes effect one
    second later, at 2017-01-01T00:00:00Z, which is the instant the leap table and LeapInfo name."""
    rx = receiver()
    itow = 6 * 86_400_000 + 23 * 3_600_000 + 17_000
    utc = struct.pack("<IIiHBBBBBB", itow, 20, 0, 2016, 12, 31, 23, 0, 0, 0x07)
    announcement = ubx.encode_payload("NAV-TIMELS", itow_ms=itow, current_ls=17, change=1,
                                      time_to_event_s=time_to_event_s)
    events = rx.feed(ubx_frame_bytes(0x01, 0x21, utc) + ubx_frame_bytes(0x01, 0x26, announcement), 0)
    (info,) = of_type(events, LeapInfo)
    assert info == LeapInfo(36, 1, (1_483_228_800 + 37) * S)
    assert TABLE.next_change_after((1_483_225_200 + 36) * S) == (info.effective_tai_ns, 1)


def test_nav_timegps_reports_the_current_offset():
    rx = receiver()
    events = rx.feed(ubx_frame_bytes(0x01, 0x20, struct.pack("<IihbBI", 1000, 0, 2146, 18, 0x07, 10)), 0)
    assert of_type(events, LeapInfo) == [LeapInfo(37)]


def test_counters_never_reset_while_running():
    rx = receiver()
    rx.feed(b"junk$GPRMC*00\r\n" + rmc("123519"), 0)
    before = rx.snapshot()
    rx.on_device(DeviceEvent("/dev/ttyTEST", False, "lost", S), S)
    rx.on_device(DeviceEvent("/dev/ttyTEST", True, "back", 2 * S), 2 * S)
    after = rx.snapshot()
    assert all(after.rejected.get(k, 0) >= v for k, v in before.rejected.items())
    assert all(after.frames.get(k, 0) >= v for k, v in before.frames.items()) and after.epochs >= before.epochs


def test_a_device_that_cannot_be_opened_is_news_from_the_first_failed_open():
    rx = receiver()
    assert rx.snapshot().state_since_ns is None  # disconnected since start: no instant to count a duration from
    events = rx.on_device(DeviceEvent("/dev/ttyTEST", False, "cannot open /dev/ttyTEST: No such file or directory",
                                      7 * S), 2 * S)
    changed = of_type(events, ReceiverStateChanged)
    assert [(e.old, e.new, e.reason) for e in changed] == [
        (ReceiverState.DISCONNECTED, ReceiverState.DISCONNECTED, "cannot open /dev/ttyTEST: No such file or directory")]
    snap = rx.snapshot()
    assert snap.state_since_ns == 2 * S and snap.device_error.endswith("No such file or directory")
    # the same failure again (a retry) is not news; another one is, and the state's start stays put
    assert rx.on_device(DeviceEvent("/dev/ttyTEST", False, snap.device_error, 0), 3 * S) == []
    again = rx.on_device(DeviceEvent("/dev/ttyTEST", False, "cannot open /dev/ttyTEST: Permission denied", 0), 4 * S)
    assert [e.reason for e in of_type(again, ReceiverStateChanged)] == ["cannot open /dev/ttyTEST: Permission denied"]
    assert rx.snapshot().state_since_ns == 2 * S
    assert rx.tick(60 * S) == []  # silence is not a second alarm while the device is gone


def test_a_device_that_comes_back_clears_the_error_and_one_that_fails_later_reports_it():
    rx = receiver()
    rx.on_device(DeviceEvent("/dev/ttyTEST", False, "cannot open /dev/ttyTEST: No such file or directory", 0), 1 * S)
    opened = rx.on_device(DeviceEvent("/dev/ttyTEST", True, "opened /dev/ttyTEST at 9600 baud", 0), 5 * S)
    assert states(opened) == [ReceiverState.NO_DATA] and rx.snapshot().device_error == ""
    rx.feed(rmc("123519") + gga("123519"), 6 * S)
    lost = rx.on_device(DeviceEvent("/dev/ttyTEST", False, "/dev/ttyTEST failed: the device went away", 0), 7 * S)
    assert states(lost) == [ReceiverState.FIX_3D, ReceiverState.DISCONNECTED]
    assert rx.snapshot().state_since_ns == 7 * S
