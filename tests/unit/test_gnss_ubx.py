"""UBX payload decoding from hand-built payloads (layouts from the u-blox M8/F9 interface descriptions)."""

from __future__ import annotations

import struct

import pytest

from appliance.events import Constellation as C
from appliance.events import FixMode, Position, Rejected, SatInfo
from appliance.gnss import ubx

ITOW = 237_887_000


def nav_pvt(fix_type=3, flags=0x01, valid=0x07, hms=(18, 4, 29), nano=-119_216, num_sv=23) -> bytes:
    head = struct.pack("<IHBBBBBBIiBBBBiiii", ITOW, 2021, 2, 23, *hms, valid, 21, nano, fix_type, flags, 0, num_sv,
                       -1_213_141_350, 440_688_540, 1_118_500, 1_139_862)
    return head + bytes(92 - len(head))


def test_nav_pvt_gives_utc_and_fix():
    utc, fix = ubx.decode(0x01, 0x07, nav_pvt())
    assert utc == ubx.UbxUtc("NAV-PVT", ITOW, (2021, 2, 23), (18 * 3600 + 4 * 60 + 29) * 1000, -119_216, True, 21)
    assert (fix.kind, fix.itow_ms, fix.mode, fix.fix_ok, fix.time_only, fix.num_sv) == (
        "NAV-PVT", ITOW, FixMode.FIX_3D, True, False, 23)
    assert fix.position == Position(pytest.approx(44.068854), pytest.approx(-121.314135), 1139.862)


def test_nav_pvt_time_not_fully_resolved_is_not_valid():
    utc, _ = ubx.decode(0x01, 0x07, nav_pvt(valid=0x03))
    assert not utc.valid


def test_nav_pvt_without_gnss_fix_ok_has_no_fix_and_no_position():
    _, fix = ubx.decode(0x01, 0x07, nav_pvt(flags=0x00))
    assert fix.mode == FixMode.NO_FIX and fix.position is None


def test_nav_pvt_time_only():
    _, fix = ubx.decode(0x01, 0x07, nav_pvt(fix_type=5))
    assert fix.time_only and fix.mode == FixMode.FIX_3D


@pytest.mark.parametrize("gps_fix, flags, mode, time_only", [
    (5, 0x0D, FixMode.FIX_3D, True), (3, 0x0D, FixMode.FIX_3D, False), (2, 0x0D, FixMode.FIX_2D, False),
    (3, 0x0C, FixMode.NO_FIX, False), (0, 0x0C, FixMode.NO_FIX, False),
])
def test_nav_status(gps_fix, flags, mode, time_only):
    payload = struct.pack("<IBBBBII", ITOW, gps_fix, flags, 0, 0x08 | 0x10, 0, 0)  # spoofDetState 3
    status = ubx.decode(0x01, 0x03, payload)
    assert (status.mode, status.time_only, status.fix_ok) == (mode, time_only, bool(flags & 1))
    assert status.spoofing_state == 3


def test_nav_posllh():
    payload = struct.pack("<IiiiiII", ITOW, -688_066_651, 447_654_405, 13_684, 43_156, 8_900, 14_580)
    assert ubx.decode(0x01, 0x02, payload) == ubx.UbxPosition(ITOW, Position(44.7654405, -68.8066651, 43.156), 8_900)


def test_nav_posllh_out_of_range_is_a_bad_field():
    payload = struct.pack("<IiiiiII", ITOW, 0, 900_000_001, 0, 0, 0, 0)
    assert ubx.decode(0x01, 0x02, payload).reason == "bad-field"


def test_nav_dop():
    payload = struct.pack("<IHHHHHHH", ITOW, 219, 189, 111, 164, 95, 74, 59)
    assert ubx.decode(0x01, 0x04, payload) == ubx.UbxDop(ITOW, 0.95)


def test_nav_timegps():
    payload = struct.pack("<IihbBI", ITOW, 321_732, 2146, 18, 0x07, 1031)
    assert ubx.decode(0x01, 0x20, payload) == ubx.UbxGpsTime(ITOW, 321_732, 2146, 18, True, True, True)


def timeutc(hms=(18, 4, 29), valid=0x07, date=(2021, 2, 23)) -> bytes:
    return struct.pack("<IIiHBBBBBB", ITOW, 1031, 321_732, *date, *hms, valid)


def test_nav_timeutc():
    assert ubx.decode(0x01, 0x21, timeutc()) == ubx.UbxUtc("NAV-TIMEUTC", ITOW, (2021, 2, 23), 65_069_000, 321_732,
                                                            True, 1031)


def test_nav_timeutc_needs_valid_utc():
    assert not ubx.decode(0x01, 0x21, timeutc(valid=0x03)).valid


def test_nav_timeutc_leap_second_and_misplaced_second_60():
    assert ubx.decode(0x01, 0x21, timeutc((23, 59, 60), date=(2016, 12, 31))).tod_ms == 86_400_000
    assert ubx.decode(0x01, 0x21, timeutc((12, 0, 60))).reason == "bad-field"


def test_nav_timels_with_announced_leap_second():
    payload = ubx.encode_payload("NAV-TIMELS", itow_ms=ITOW, current_ls=17, change=1, time_to_event_s=3600)
    assert ubx.decode(0x01, 0x26, payload) == ubx.UbxLeap(ITOW, 17, True, 1, 3600)


def test_nav_timels_event_time_not_valid():
    payload = ubx.encode_payload("NAV-TIMELS", itow_ms=ITOW, current_ls=18, valid=0x01)
    assert ubx.decode(0x01, 0x26, payload).time_to_event_s is None


def test_nav_timels_impossible_change_is_a_bad_field():
    payload = ubx.encode_payload("NAV-TIMELS", itow_ms=ITOW, current_ls=18, change=2)
    assert ubx.decode(0x01, 0x26, payload).reason == "bad-field"


def sat_block(gnss_id, sv_id, cno, elev, azim, used) -> bytes:
    return struct.pack("<BBBbhhI", gnss_id, sv_id, cno, elev, azim, 0, 0x08 | 0x07 if used else 0x04)


def test_nav_sat():
    blocks = [sat_block(0, 4, 25, 48, 216, True), sat_block(6, 12, 29, 20, 84, False),
              sat_block(3, 21, 0, -91, 0, False), sat_block(9, 1, 30, 10, 20, True)]
    payload = struct.pack("<IBBxx", ITOW, 1, len(blocks)) + b"".join(blocks)
    assert ubx.decode(0x01, 0x35, payload) == ubx.UbxSats(ITOW, (
        SatInfo(C.GPS, 4, 48, 216, 25, True), SatInfo(C.GLONASS, 12, 20, 84, 29, False),
        SatInfo(C.BEIDOU, 21, None, None, None, False), SatInfo(C.UNKNOWN, 1, 10, 20, 30, True)))


def test_nav_sat_announcing_more_satellites_than_it_carries():
    payload = struct.pack("<IBBxx", ITOW, 1, 3) + sat_block(0, 4, 25, 48, 216, True)
    assert ubx.decode(0x01, 0x35, payload).reason == "bad-field"


def sig_block(gnss_id, sv_id, sig_id, pr_used) -> bytes:
    return struct.pack("<BBBBhBBBBH4x", gnss_id, sv_id, sig_id, 0, 0, 30, 7, 0, 0, 0x29 if pr_used else 0x01)


def test_nav_sig_lists_satellites_with_a_used_signal():
    blocks = [sig_block(2, 10, 0, False), sig_block(2, 10, 4, True), sig_block(0, 8, 0, True),
              sig_block(0, 8, 7, True), sig_block(1, 131, 0, False)]
    payload = struct.pack("<IBBxx", ITOW, 0, len(blocks)) + b"".join(blocks)
    assert ubx.decode(0x01, 0x43, payload) == ubx.UbxSignalsUsed(ITOW, frozenset({(C.GALILEO, 10), (C.GPS, 8)}))


def test_nav_eoe():
    assert ubx.decode(0x01, 0x61, struct.pack("<I", ITOW)) == ubx.UbxEndOfEpoch(ITOW)


def test_tim_tp():
    payload = struct.pack("<IIiHBB", 237_870_000, 0, -4331, 2146, 0x03, 0)
    assert ubx.decode(0x0D, 0x01, payload) == ubx.UbxTimePulse(237_870_000, 0, -4331, True, 2146, True)
    invalid = struct.pack("<IIiHBB", 237_870_000, 0, -4331, 2146, 0x12, 0)
    assert ubx.decode(0x0D, 0x01, invalid) == ubx.UbxTimePulse(237_870_000, 0, -4331, False, 2146, False)


def test_tim_tp_round_trips_through_the_simulator_encoder():
    payload = ubx.encode_payload("TIM-TP", tow_ms=1000, qerr_ps=-1234, week=2300)
    assert ubx.decode(0x0D, 0x01, payload) == ubx.UbxTimePulse(1000, 0, -1234, True, 2300, True)


def test_tim_svin():
    payload = struct.pack("<IiiiIIBBxx", 86_400, 130_000_000, -460_000_000, 445_000_000, 2_500, 86_400, 1, 0)
    assert ubx.decode(0x0D, 0x04, payload) == ubx.UbxSurvey(86_400, (130_000_000, -460_000_000, 445_000_000),
                                                            2_500, 86_400, True, False)


def test_nav_status_round_trips_through_the_simulator_encoder():
    status = ubx.decode(0x01, 0x03, ubx.encode_payload("NAV-STATUS", itow_ms=ITOW, gps_fix=5))
    assert status.time_only and status.mode == FixMode.FIX_3D and status.itow_ms == ITOW


@pytest.mark.parametrize("state", [0, 1, 2, 3])
def test_nav_status_spoofing_state_round_trips(state):
    status = ubx.decode(0x01, 0x03, ubx.encode_payload("NAV-STATUS", itow_ms=ITOW, gps_fix=3, spoofing_state=state))
    assert status.spoofing_state == state and status.mode == FixMode.FIX_3D


def mon_hw(flags: int, jam_ind: int) -> bytes:
    """MON-HW as the M8/F9 interface description lays it out: flags at offset 22, jamInd at 45, 60 bytes."""
    payload = bytearray(60)
    payload[20:22] = bytes([2, 1])  # aStatus ok, aPower on
    payload[22], payload[45] = flags, jam_ind
    return bytes(payload)


def test_mon_hw_jamming_indicator_and_state():
    assert ubx.decode(0x0A, 0x09, mon_hw(0x0D, 187)) == ubx.UbxHardware(187, 3, "ok", "on")  # jammingState 3
    assert ubx.decode(0x0A, 0x09, mon_hw(0x01, 4)) == ubx.UbxHardware(4, 0, "ok", "on")


@pytest.mark.parametrize("jam, state", [(0, 1), (200, 3), (255, 2)])
def test_mon_hw_round_trips_through_the_simulator_encoder(jam, state):
    payload = ubx.encode_payload("MON-HW", jam_indicator=jam, jamming_state=state)
    assert len(payload) == 60
    assert ubx.decode(0x0A, 0x09, payload) == ubx.UbxHardware(jam, state, "ok", "on")


def test_nav_timegps_round_trips_through_the_simulator_encoder():
    payload = ubx.encode_payload("NAV-TIMEGPS", itow_ms=ITOW, ftow_ns=-312, week=2146, leap_s=18, valid=0x03,
                                 tacc_ns=10)
    assert ubx.decode(0x01, 0x20, payload) == ubx.UbxGpsTime(ITOW, -312, 2146, 18, True, True, False)


def test_nav_timegal_and_timebds():
    gal = struct.pack("<IIihbBI", ITOW, 237_905, 400_123, 1122, 18, 0x07, 9)
    assert ubx.decode(0x01, 0x25, gal) == ubx.UbxSystemTime("NAV-TIMEGAL", ITOW, C.GALILEO, 237_905, 400_123, 1122,
                                                            18, True, True, True, 9)
    bds = struct.pack("<IIihbBI", ITOW, 237_891, -77, 790, 4, 0x01, 12)
    assert ubx.decode(0x01, 0x24, bds) == ubx.UbxSystemTime("NAV-TIMEBDS", ITOW, C.BEIDOU, 237_891, -77, 790, 4,
                                                            True, False, False, 12)


@pytest.mark.parametrize("kind, msg_id, system", [("NAV-TIMEGAL", 0x25, C.GALILEO), ("NAV-TIMEBDS", 0x24, C.BEIDOU)])
def test_system_time_round_trips_through_the_simulator_encoder(kind, msg_id, system):
    payload = ubx.encode_payload(kind, itow_ms=ITOW, tow_s=604_799, ftow_ns=499_999_999, week=1300, leap_s=4)
    assert ubx.decode(0x01, msg_id, payload) == ubx.UbxSystemTime(kind, ITOW, system, 604_799, 499_999_999, 1300, 4,
                                                                  True, True, True, 0)


def test_valid_time_of_week_beyond_the_week_is_a_bad_field():
    payload = ubx.encode_payload("NAV-TIMEGAL", itow_ms=ITOW, tow_s=604_800, week=1300)
    assert ubx.decode(0x01, 0x25, payload).reason == "bad-field"


NS = 1_000_000_000
TAI_2006 = (1_136_073_600 + 33) * NS  # 2006-01-01T00:00:00 UTC on the TAI axis (TAI-UTC 33 s then)


def test_system_time_epochs_on_the_tai_axis():
    assert ubx.system_time_tai_ns(C.GPS, 0, 0) == 315_964_819 * NS  # 1980-01-06T00:00:00 UTC, TAI-UTC 19 s
    # Galileo System Time counts from GPS week 1024 (1999-08-22) and keeps GPS time's seconds.
    assert ubx.system_time_tai_ns(C.GALILEO, 0, 0) == ubx.system_time_tai_ns(C.GPS, 1024, 0)
    assert ubx.system_time_tai_ns(C.GALILEO, 1100, 5 * NS) == ubx.system_time_tai_ns(C.GPS, 2124, 5 * NS)
    # BeiDou Time began at 2006-01-01T00:00:00 UTC and runs 14 s behind GPS time.
    assert ubx.system_time_tai_ns(C.BEIDOU, 0, 0) == TAI_2006
    assert ubx.system_time_tai_ns(C.BEIDOU, 0, 0) == ubx.system_time_tai_ns(C.GPS, 1356, 14 * NS)


@pytest.mark.parametrize("system", [C.GPS, C.GALILEO, C.BEIDOU])
@pytest.mark.parametrize("tai_ns", [TAI_2006 + 7 * 86_400 * NS - 1, 1_780_315_837 * NS + 700_000_000,
                                    1_780_315_837 * NS - 300])
def test_tai_to_system_time_is_the_inverse_with_a_fraction_of_at_most_half_a_second(system, tai_ns):
    week, tow_s, frac_ns = ubx.tai_ns_to_system_time(system, tai_ns)
    assert 0 <= tow_s < 604_800 and -NS // 2 <= frac_ns < NS // 2
    assert ubx.system_time_tai_ns(system, week, tow_s * NS + frac_ns) == tai_ns


def test_epoch_time_needs_a_valid_time_of_week_and_week():
    gps = ubx.UbxGpsTime(1_000, -20, 2146, 18, True, True, False)
    assert ubx.epoch_time_tai_ns(gps) == ubx.system_time_tai_ns(C.GPS, 2146, 1_000_000_000 - 20)
    no_week = ubx.UbxSystemTime("NAV-TIMEBDS", 1_000, C.BEIDOU, 986, 0, 790, 4, True, False, True, 0)
    assert ubx.epoch_time_tai_ns(no_week) is None


MIN_LENGTHS = {(0x01, 0x02): 28, (0x01, 0x03): 16, (0x01, 0x04): 18, (0x01, 0x07): 92, (0x01, 0x20): 16,
               (0x01, 0x21): 20, (0x01, 0x24): 20, (0x01, 0x25): 20, (0x01, 0x26): 24, (0x01, 0x35): 8,
               (0x01, 0x43): 8, (0x01, 0x61): 4, (0x0A, 0x09): 60, (0x0D, 0x01): 16, (0x0D, 0x04): 28,
               (0x01, 0x06): 52, (0x01, 0x30): 8, (0x0A, 0x38): 4}


@pytest.mark.parametrize("class_id", sorted(MIN_LENGTHS))
def test_short_payload_is_rejected_as_bad_length(class_id):
    result = ubx.decode(*class_id, bytes(MIN_LENGTHS[class_id] - 1))
    assert isinstance(result, Rejected) and (result.what, result.reason) == ("ubx", "bad-length")
    assert ubx.name_of(*class_id) in result.detail


@pytest.mark.parametrize("class_id", sorted(MIN_LENGTHS))
def test_minimum_length_payload_of_zeros_decodes_or_is_a_bad_field(class_id):
    result = ubx.decode(*class_id, bytes(MIN_LENGTHS[class_id]))
    assert not isinstance(result, Rejected) or result.reason == "bad-field"


def test_unknown_message_is_ignored_by_name():
    assert ubx.decode(0x01, 0x01, bytes(20)) == ubx.UbxIgnored("NAV-POSECEF")
    assert ubx.decode(0x27, 0x03, b"") == ubx.UbxIgnored("UBX-27-03")


def test_mon_rf_reports_the_worst_band() -> None:
    import struct

    from appliance.gnss.ubx import UbxHardware, decode

    def block(block_id: int, jamming_state: int, jam_ind: int) -> bytes:
        b = bytearray(24)
        b[0], b[1], b[16] = block_id, jamming_state, jam_ind
        return bytes(b)

    payload = struct.pack("<BB2x", 0, 2) + block(0, 1, 12) + block(1, 2, 140)
    assert decode(0x0A, 0x38, payload) == UbxHardware(140, 2, "unknown", "off")  # antStatus 0 (init), antPower 0
    short = struct.pack("<BB2x", 0, 3) + block(0, 1, 12)
    assert decode(0x0A, 0x38, short).__class__.__name__ == "Rejected"
