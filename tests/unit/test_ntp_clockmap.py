"""Unit tests of the NTP clock map (appliance.protocol.clockmap): arithmetic, leap seconds, era, packed layout."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.protocol.clockmap import FORMAT, PACKED_SIZE, VERSION, ClockMap, not_ready
from appliance.protocol.ntp.packet import refid
from appliance.timebase import ntp64_to_posix_ns, ntp_era, posix_ns_to_ntp64
from appliance.units import NS_PER_S

NYD_2017 = 1_483_228_800  # 2017-01-01T00:00:00Z: the leap second 2016-12-31T23:59:60Z came before it
ERA1_POSIX_S = 2_085_978_496  # 2036-02-07T06:28:16Z, start of NTP era 1


def cmap(host_anchor: int = 0, served_anchor: int = 0, rate: float = 0.0, tai_utc: int = 37, **kw: object) -> ClockMap:
    return ClockMap(True, 0, 1, -20, 0, 0, refid("GPS"), host_anchor, served_anchor, rate, tai_utc, **kw)


def test_anchor_pair_and_utc_offset():
    m = cmap(1_000 * NS_PER_S, 2_000 * NS_PER_S + 7)
    assert m.served_tai_ns(1_000 * NS_PER_S) == 2_000 * NS_PER_S + 7
    assert m.served_tai_ns(1_003 * NS_PER_S + 5) == 2_003 * NS_PER_S + 12
    assert m.served_posix_ns(1_003 * NS_PER_S) == (2_003 - 37) * NS_PER_S + 7
    assert m.ntp_ts(1_003 * NS_PER_S) == posix_ns_to_ntp64((2_003 - 37) * NS_PER_S + 7)


@pytest.mark.parametrize("rate, elapsed, correction", [
    (1000.0, NS_PER_S, 1000), (1000.0, -NS_PER_S, -1000), (-250.0, 4 * NS_PER_S, -1000),
    (1.6, NS_PER_S, 2), (-1.6, NS_PER_S, -2), (1.4, NS_PER_S, 1), (0.4, NS_PER_S, 0),
    (12.5, 3600 * NS_PER_S, 45_000), (0.0, 10**15, 0)])
def test_rate_is_applied_to_the_elapsed_host_time_and_rounded(rate, elapsed, correction):
    m = cmap(5 * NS_PER_S, 100 * NS_PER_S, rate)
    assert m.served_tai_ns(5 * NS_PER_S + elapsed) == 100 * NS_PER_S + elapsed + correction


@given(st.integers(-10**13, 10**13), st.floats(-5e4, 5e4, allow_nan=False))
def test_rate_correction_is_the_rounded_product(elapsed, rate):
    m = cmap(0, 0, rate)
    assert m.served_tai_ns(elapsed) - elapsed == round(elapsed * rate * 1e-9)
    assert abs(m.served_tai_ns(elapsed) - elapsed - elapsed * rate * 1e-9) <= 0.5 + 1e-6 * abs(elapsed) * 1e-9


def _leap_map(delta: int, tai_utc: int) -> ClockMap:
    """Host clock = TAI - tai_utc (a free-running host that ignores the leap second); leap at the 2017 new year."""
    leap_at = (NYD_2017 + tai_utc + delta) * NS_PER_S  # first TAI instant with the new offset
    return cmap(0, tai_utc * NS_PER_S, 0.0, tai_utc, leap_delta_s=delta, leap_at_tai_ns=leap_at)


def _utc(m: ClockMap, host_s: float) -> float:
    """Served UTC at ``host_s`` (seconds from the 2017 new year on the host clock), in seconds from the new year."""
    return (m.served_posix_ns(NYD_2017 * NS_PER_S + round(host_s * NS_PER_S)) - NYD_2017 * NS_PER_S) / NS_PER_S


def test_inserted_leap_second_repeats_235959_then_continues_with_the_new_offset():
    m = _leap_map(+1, 36)
    t = NYD_2017
    assert _utc(m, -1.5) == -1.5  # 23:59:58.5
    assert _utc(m, -0.5) == -0.5  # 23:59:59.5
    assert _utc(m, 0.0) == -1.0  # 23:59:60.0 is served as 23:59:59.0
    assert _utc(m, 0.5) == -0.5  # 23:59:60.5 as 23:59:59.5, again
    assert _utc(m, 1.0) == 0.0  # 00:00:00 with TAI-UTC = 37
    assert _utc(m, 2.25) == 1.25
    assert m.ntp_ts(t * NS_PER_S - NS_PER_S // 2) == m.ntp_ts(t * NS_PER_S + NS_PER_S // 2)
    assert m.served_posix_ns((t + 10) * NS_PER_S) == m.served_tai_ns((t + 10) * NS_PER_S) - 37 * NS_PER_S
    samples = [m.served_posix_ns(t * NS_PER_S + k * 50_000_000) for k in range(-40, 40)]
    assert all(b > a or b == a - NS_PER_S + 50_000_000 for a, b in zip(samples, samples[1:]))


def test_deleted_leap_second_skips_235959():
    m = _leap_map(-1, 37)
    t = NYD_2017
    assert _utc(m, -1.5) == -1.5  # 23:59:58.5
    assert _utc(m, -1.0) == 0.0  # straight to 00:00:00 with TAI-UTC = 36
    assert _utc(m, -0.5) == 0.5
    assert m.served_posix_ns(t * NS_PER_S) == m.served_tai_ns(t * NS_PER_S) - 36 * NS_PER_S


def test_a_leap_delta_without_an_instant_changes_nothing():
    m = cmap(0, 37 * NS_PER_S, tai_utc=37, leap_delta_s=1, leap_at_tai_ns=0)
    assert m.served_posix_ns(NYD_2017 * NS_PER_S) == NYD_2017 * NS_PER_S


def test_ntp_era_rollover():
    start = ERA1_POSIX_S * NS_PER_S
    m = cmap(start, start + 37 * NS_PER_S)  # host clock = served UTC
    assert ntp_era(start) == 1 and ntp_era(start - 1) == 0
    assert m.ntp_ts(start) == 0x00000000_00000000
    assert m.ntp_ts(start + NS_PER_S) == 0x00000001_00000000
    assert m.ntp_ts(start + NS_PER_S // 2) == 0x00000000_80000000
    assert m.ntp_ts(start - NS_PER_S) == 0xFFFFFFFF_00000000
    assert m.ntp_ts(start - 1) == 2**64 - 4  # one ns is 4.29 fraction units
    assert ntp64_to_posix_ns(m.ntp_ts(start + 3), start) == start + 3


def test_packed_layout():
    assert PACKED_SIZE == struct.calcsize(FORMAT) == 76 and VERSION == 1
    m = cmap(1, 2, 3.5, 37, leap_delta_s=-1, leap_at_tai_ns=9, reference_ts=2**64 - 1, poll_min=-3, generation=2**63)
    raw = m.pack()
    assert raw[:5] == bytes([1, 0, 1, 0xEC, 0xFD]) and raw[5:8] == bytes(3)  # valid, LI, stratum, precision, poll
    assert raw[16:20] == b"GPS\0" and struct.unpack_from("<d", raw, 36)[0] == 3.5


@given(st.builds(ClockMap, st.booleans(), st.integers(0, 3), st.integers(0, 255), st.integers(-128, 127),
                 st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.binary(min_size=4, max_size=4),
                 st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1),
                 st.floats(allow_nan=False, allow_infinity=False), st.integers(-2**31, 2**31 - 1),
                 st.integers(-1, 1), st.integers(-2**63, 2**63 - 1), st.integers(0, 2**64 - 1),
                 st.integers(-128, 127), st.integers(0, 2**64 - 1)))
def test_pack_unpack_round_trip(m):
    raw = m.pack()
    assert len(raw) == PACKED_SIZE
    assert ClockMap.unpack(raw) == m
    assert ClockMap.unpack(memoryview(b"\xff" + raw)[1:]) == m


def test_not_ready_is_the_host_clock_advertised_unsynchronized():
    m = not_ready(123 * NS_PER_S)
    assert not m.valid and (m.leap_indicator, m.stratum, m.reference_id, m.root_dispersion) == (3, 16, b"INIT",
                                                                                                0xFFFFFFFF)
    assert m.served_posix_ns(200 * NS_PER_S) == 200 * NS_PER_S
    assert ClockMap.unpack(m.pack()) == m
