"""UBX NAV-SOL and NAV-SVINFO (u-blox 5 to 8), the antenna supervisor in MON-HW and MON-RF, and the simulator's
encoders, from hand-built payloads (layouts from the u-blox 8 / M8 receiver description, UBX-13003221)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.events import Constellation as C
from appliance.events import FixMode, Rejected, SatInfo
from appliance.gnss import ubx

ITOW = 494_575_000
# The first NAV-SOL of gpsd's ublox-8-time.log (a u-blox 8 near Grenoble): 2D fix, DGPS, 6 satellites.
GRENOBLE_ECEF_CM = (447_748_408, 45_537_294, 450_468_730)


def nav_sol(gps_fix=2, flags=0xDF, ecef_cm=GRENOBLE_ECEF_CM, pdop=167, num_sv=6, ftow=-112_313) -> bytes:
    return struct.pack("<IihBBiiiIiiiIHxB4x", ITOW, ftow, 1977, gps_fix, flags, *ecef_cm, 366, 1, -2, 3, 11, pdop,
                       num_sv)


def test_nav_sol_gives_the_fix_its_gps_time_and_a_position_above_the_ellipsoid():
    sol = ubx.decode(0x01, 0x06, nav_sol())
    assert isinstance(sol, ubx.UbxSolution)
    assert (sol.itow_ms, sol.ftow_ns, sol.week, sol.week_valid, sol.tow_valid, sol.diff_soln) == (
        ITOW, -112_313, 1977, True, True, True)
    assert (sol.ecef_cm, sol.pacc_cm, sol.velocity_cm_s, sol.pdop) == (GRENOBLE_ECEF_CM, 366, (1, -2, 3), 1.67)
    fix = sol.fix
    assert (fix.kind, fix.itow_ms, fix.mode, fix.fix_ok, fix.time_only, fix.num_sv) == (
        "NAV-SOL", ITOW, FixMode.FIX_2D, True, False, 6)
    # gpsd's TPV for this epoch: lat 45.218541146, lon 5.807177490, altHAE 278.8789 (altMSL 230.2311).
    assert fix.position.lat_deg == pytest.approx(45.218541146, abs=1e-9)
    assert fix.position.lon_deg == pytest.approx(5.807177490, abs=1e-9)
    assert fix.position.alt_m == pytest.approx(278.8789, abs=1e-3)


@pytest.mark.parametrize("gps_fix, flags, mode, time_only", [
    (5, 0x0D, FixMode.FIX_3D, True), (3, 0x0D, FixMode.FIX_3D, False), (4, 0x0D, FixMode.FIX_3D, False),
    (1, 0x0D, FixMode.NO_FIX, False), (3, 0x0C, FixMode.NO_FIX, False), (5, 0x0C, FixMode.NO_FIX, False),
    (0, 0x00, FixMode.NO_FIX, False), (9, 0x0D, FixMode.NO_FIX, False),
])
def test_nav_sol_fix_types(gps_fix, flags, mode, time_only):
    fix = ubx.decode(0x01, 0x06, nav_sol(gps_fix=gps_fix, flags=flags)).fix
    assert (fix.mode, fix.time_only, fix.fix_ok) == (mode, time_only, bool(flags & 1))
    assert (fix.position is not None) == bool(flags & 1)


def test_nav_sol_week_and_time_of_week_flags():
    sol = ubx.decode(0x01, 0x06, nav_sol(flags=0x01))
    assert not sol.week_valid and not sol.tow_valid and not sol.diff_soln


def test_nav_sol_in_timing_mode_has_no_dop_and_a_zeroed_solution_no_position():
    sol = ubx.decode(0x01, 0x06, nav_sol(gps_fix=5, flags=0x0D, ecef_cm=(0, 0, 0), pdop=9999, num_sv=18))
    assert sol.pdop is None and sol.fix.position is None and sol.fix.time_only and sol.fix.num_sv == 18


def test_nav_sol_position_off_the_earth_is_not_a_position():
    assert ubx.decode(0x01, 0x06, nav_sol(ecef_cm=(2_000_000_000, 0, 0))).fix.position is None


def svinfo_block(chn, svid, flags, cno, elev, azim, quality=7) -> bytes:
    return struct.pack("<BBBBBbhi", chn, svid, flags, quality, cno, elev, azim, -332)


def test_nav_svinfo_lists_every_channel_in_the_systems_own_numbers():
    blocks = [svinfo_block(1, 5, 0x0F, 37, 44, 201), svinfo_block(5, 7, 0x0C, 0, 10, 65),
              svinfo_block(17, 193, 0x10, 0, -91, 0), svinfo_block(9, 70, 0x0C, 33, 48, 155),
              svinfo_block(22, 123, 0x0C, 45, 32, 146), svinfo_block(30, 255, 0x00, 20, 5, 90)]
    payload = struct.pack("<IBBxx", ITOW, len(blocks), 4) + b"".join(blocks)
    assert ubx.decode(0x01, 0x30, payload) == ubx.UbxSvInfo(ITOW, (
        SatInfo(C.GPS, 5, 44, 201, 37, True), SatInfo(C.GPS, 7, 10, 65, None, False),
        SatInfo(C.QZSS, 1, None, None, None, False), SatInfo(C.GLONASS, 6, 48, 155, 33, False),
        SatInfo(C.SBAS, 123, 32, 146, 45, False)), 4)  # svid 255: a GLONASS satellite of unknown slot, left out


@pytest.mark.parametrize("svid, sat", [
    (1, (C.GPS, 1)), (32, (C.GPS, 32)), (33, (C.BEIDOU, 6)), (64, (C.BEIDOU, 37)), (65, (C.GLONASS, 1)),
    (96, (C.GLONASS, 32)), (120, (C.SBAS, 120)), (158, (C.SBAS, 158)), (159, (C.BEIDOU, 1)), (163, (C.BEIDOU, 5)),
    (193, (C.QZSS, 1)), (197, (C.QZSS, 5)), (211, (C.GALILEO, 1)), (246, (C.GALILEO, 36)),
    (0, None), (97, None), (119, None), (164, None), (173, None), (182, None), (203, None), (210, None),
    (247, None), (255, None),
])
def test_svinfo_satellite_numbering(svid, sat):
    assert ubx.svid_to_sat(svid) == sat
    if sat is not None:
        assert ubx.sat_to_svid(*sat) == svid


def test_satellites_the_one_byte_numbering_cannot_name():
    assert ubx.sat_to_svid(C.BEIDOU, 38) is None and ubx.sat_to_svid(C.NAVIC, 1) is None


def test_nav_svinfo_announcing_more_channels_than_it_carries():
    payload = struct.pack("<IBBxx", ITOW, 3, 4) + svinfo_block(1, 5, 0x0F, 37, 44, 201)
    assert ubx.decode(0x01, 0x30, payload).reason == "bad-field"


@pytest.mark.parametrize("class_id, length", [((0x01, 0x06), 52), ((0x01, 0x30), 8)])
def test_short_legacy_payloads_are_rejected_as_bad_length(class_id, length):
    for short in (b"", bytes(length - 1)):
        result = ubx.decode(*class_id, short)
        assert isinstance(result, Rejected) and (result.what, result.reason) == ("ubx", "bad-length")


# --- the antenna supervisor ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("a_status, status", [(0, "unknown"), (1, "unknown"), (2, "ok"), (3, "short"), (4, "open"),
                                              (200, "unknown")])
@pytest.mark.parametrize("a_power, power", [(0, "off"), (1, "on"), (2, "unknown"), (7, "unknown")])
def test_mon_hw_antenna_status_and_power(a_status, status, a_power, power):
    hw = ubx.decode(0x0A, 0x09, ubx.encode_payload("MON-HW", a_status=a_status, a_power=a_power, jam_indicator=9))
    assert (hw.antenna_status, hw.antenna_power, hw.jam_indicator) == (status, power, 9)


def test_mon_hw_encoder_defaults_to_an_antenna_that_is_ok_and_powered():
    hw = ubx.decode(0x0A, 0x09, ubx.encode_payload("MON-HW"))
    assert (hw.antenna_status, hw.antenna_power) == ("ok", "on")


@pytest.mark.parametrize("blocks, status, power", [
    (((1, 2, 1, 3),), "ok", "on"),
    (((1, 2, 1, 3), (1, 4, 1, 5)), "open", "on"),  # one band sees the cable open: that is news
    (((1, 3, 1, 3), (1, 4, 1, 5)), "short", "on"),
    (((1, 1, 2, 3), (1, 2, 1, 5)), "ok", "on"),  # a band whose supervisor knows speaks over one that does not
    (((1, 2, 0, 3), (1, 2, 1, 5)), "ok", "off"),
    (((1, 0, 2, 3),), "unknown", "unknown"),
])
def test_mon_rf_antenna_of_several_bands(blocks, status, power):
    hw = ubx.decode(0x0A, 0x38, ubx.encode_payload("MON-RF", blocks=blocks))
    assert (hw.antenna_status, hw.antenna_power) == (status, power)
    assert hw.jam_indicator == max(b[3] for b in blocks)


# --- the simulator's encoders -------------------------------------------------------------------------------------
def test_nav_pvt_round_trips():
    payload = ubx.encode_payload("NAV-PVT", itow_ms=ITOW, date=(2016, 12, 31), hms=(23, 59, 60), fix_type=5,
                                 num_sv=14, lat_e7=462_044_000, lon_e7=61_432_000, height_mm=422_000,
                                 hmsl_mm=375_000, nano_ns=-12, tacc_ns=21)
    utc, fix = ubx.decode(0x01, 0x07, payload)
    assert utc == ubx.UbxUtc("NAV-PVT", ITOW, (2016, 12, 31), 86_400_000, -12, True, 21)
    assert (fix.mode, fix.time_only, fix.num_sv) == (FixMode.FIX_3D, True, 14)
    assert fix.position.lat_deg == pytest.approx(46.2044) and fix.position.alt_m == 375.0


def test_nav_timeutc_round_trips():
    payload = ubx.encode_payload("NAV-TIMEUTC", itow_ms=ITOW, date=(2024, 2, 29), hms=(1, 2, 3), valid=0x03)
    assert ubx.decode(0x01, 0x21, payload) == ubx.UbxUtc("NAV-TIMEUTC", ITOW, (2024, 2, 29), 3_723_000, 0, False, 20)


def test_nav_sol_round_trips():
    payload = ubx.encode_payload("NAV-SOL", itow_ms=ITOW, week=2300, gps_fix=3, ecef_cm=GRENOBLE_ECEF_CM, num_sv=9)
    sol = ubx.decode(0x01, 0x06, payload)
    assert (sol.week, sol.ecef_cm, sol.fix.num_sv, sol.fix.mode) == (2300, GRENOBLE_ECEF_CM, 9, FixMode.FIX_3D)


def test_nav_dop_round_trips_and_99_99_is_no_dop():
    assert ubx.decode(0x01, 0x04, ubx.encode_payload("NAV-DOP", itow_ms=ITOW, hdop=62)) == ubx.UbxDop(ITOW, 0.62)
    assert ubx.decode(0x01, 0x04, ubx.encode_payload("NAV-DOP", itow_ms=ITOW, hdop=9999)) == ubx.UbxDop(ITOW, None)


def test_nav_sat_round_trips():
    payload = ubx.encode_payload("NAV-SAT", itow_ms=ITOW, sats=[(0, 4, 25, 48, 216, 0x0F), (2, 10, 0, -91, 0, 0)])
    assert ubx.decode(0x01, 0x35, payload) == ubx.UbxSats(ITOW, (SatInfo(C.GPS, 4, 48, 216, 25, True),
                                                                 SatInfo(C.GALILEO, 10, None, None, None, False)))


def test_nav_svinfo_round_trips():
    payload = ubx.encode_payload("NAV-SVINFO", itow_ms=ITOW, sats=[(211, 0x0D, 7, 40, 30, 100), (40, 0x04, 4, 0, 5, 7)])
    assert ubx.decode(0x01, 0x30, payload) == ubx.UbxSvInfo(ITOW, (SatInfo(C.GALILEO, 1, 30, 100, 40, True),
                                                                   SatInfo(C.BEIDOU, 13, 5, 7, None, False)), 4)


def test_no_encoder_for_an_unknown_message():
    with pytest.raises(ValueError, match="no encoder"):
        ubx.encode_payload("NAV-CLOCK", itow_ms=0)


# --- whatever the bytes, a record or a rejection ------------------------------------------------------------------
LEGACY = [(0x01, 0x06), (0x01, 0x30), (0x0A, 0x09), (0x0A, 0x38)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(LEGACY), st.one_of(st.binary(max_size=120), st.binary(min_size=52, max_size=52)))
def test_random_payloads_never_raise(class_id, payload):
    result = ubx.decode(*class_id, payload)
    assert isinstance(result, (Rejected, ubx.UbxSolution, ubx.UbxSvInfo, ubx.UbxHardware))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 60), st.binary(min_size=12 * 60, max_size=12 * 60), st.integers(0, 12 * 60))
def test_svinfo_with_any_channel_count_and_length_never_raises(num_ch, blocks, keep):
    payload = struct.pack("<IBBxx", ITOW, num_ch, 4) + blocks[:keep]
    result = ubx.decode(0x01, 0x30, payload)
    if len(payload) >= 8 + 12 * num_ch:
        assert isinstance(result, ubx.UbxSvInfo) and len(result.sats) <= num_ch
    else:
        assert isinstance(result, Rejected) and result.reason == "bad-field"
