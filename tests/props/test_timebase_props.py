"""Property tests for appliance.timebase wire formats and the appliance.leap UTC/TAI/POSIX conversions."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from appliance.leap import LeapTable, posix_to_tai_ns, tai_to_posix_ns, tai_to_utc, utc_to_tai
from appliance.timebase import (
    NS_PER_S,
    NTP_ERA_S,
    NTP_UNIX_OFFSET_S,
    ns_to_ntp_short,
    ns_to_time_interval,
    ntp64_to_posix_ns,
    ntp_era,
    ntp_era_offset,
    ntp_short_to_ns,
    pack_ptp_timestamp,
    posix_ns_to_ntp64,
    ptp_to_tai_ns,
    tai_ns_to_ptp,
    time_interval_to_ns,
    unpack_ptp_timestamp,
)

TABLE = LeapTable.load_default()
YEAR_NS = 31_556_952 * NS_PER_S  # mean Gregorian year
POSIX_1900_NS = -NTP_UNIX_OFFSET_S * NS_PER_S
POSIX_2400_NS = int(datetime(2400, 1, 1, tzinfo=timezone.utc).timestamp()) * NS_PER_S
ERA1_POSIX_S = NTP_ERA_S - NTP_UNIX_OFFSET_S  # 2036-02-07T06:28:16Z
_MICROSECOND = timedelta(microseconds=1)


# --- NTP 64-bit timestamps ---------------------------------------------------------------------------


@given(
    posix_ns=st.integers(POSIX_1900_NS, POSIX_2400_NS),
    pivot_shift_ns=st.integers(-60 * YEAR_NS, 60 * YEAR_NS),
)
@example(posix_ns=ERA1_POSIX_S * NS_PER_S - 1, pivot_shift_ns=60 * YEAR_NS)
@example(posix_ns=POSIX_1900_NS, pivot_shift_ns=-60 * YEAR_NS)
def test_ntp64_round_trip_exact(posix_ns: int, pivot_shift_ns: int) -> None:
    ts = posix_ns_to_ntp64(posix_ns)
    assert 0 <= ts < 2**64
    assert ntp64_to_posix_ns(ts, posix_ns + pivot_shift_ns) == posix_ns


@given(st.integers(POSIX_1900_NS - 200 * YEAR_NS, POSIX_2400_NS))
def test_ntp64_matches_exact_rational_oracle(posix_ns: int) -> None:
    exact = Fraction(posix_ns + NTP_UNIX_OFFSET_S * NS_PER_S, NS_PER_S) * 2**32
    assert abs(Fraction(posix_ns_to_ntp64(posix_ns)) - exact % 2**64) <= Fraction(1, 2)
    assert ntp_era(posix_ns) * NTP_ERA_S + ntp_era_offset(posix_ns) == (
        posix_ns // NS_PER_S + NTP_UNIX_OFFSET_S
    )


def test_2036_era_boundary() -> None:
    boundary_ns = ERA1_POSIX_S * NS_PER_S
    assert datetime.fromtimestamp(ERA1_POSIX_S, timezone.utc) == datetime(2036, 2, 7, 6, 28, 16, tzinfo=timezone.utc)
    assert (ntp_era(boundary_ns), ntp_era_offset(boundary_ns)) == (1, 0)
    assert (ntp_era(boundary_ns - 1), ntp_era_offset(boundary_ns - 1)) == (0, NTP_ERA_S - 1)
    assert posix_ns_to_ntp64(boundary_ns) == 0
    assert posix_ns_to_ntp64(boundary_ns - 1) == 2**64 - 4  # 1 ns = 4.29 fraction units
    for pivot_ns in (boundary_ns - 50 * YEAR_NS, boundary_ns, boundary_ns + 50 * YEAR_NS):
        assert ntp64_to_posix_ns(0, pivot_ns) == boundary_ns
        assert ntp64_to_posix_ns(2**64 - 4, pivot_ns) == boundary_ns - 1


def test_before_1970_and_beyond_2106() -> None:
    assert posix_ns_to_ntp64(0) == NTP_UNIX_OFFSET_S << 32
    assert (ntp_era(-1), ntp_era_offset(-1)) == (0, NTP_UNIX_OFFSET_S - 1)
    assert ntp_era(POSIX_1900_NS - 1) == -1
    beyond_2106_ns = (2 * NTP_ERA_S - NTP_UNIX_OFFSET_S + 5) * NS_PER_S + 500_000_000
    assert ntp_era(beyond_2106_ns) == 2
    assert posix_ns_to_ntp64(beyond_2106_ns) == (5 << 32) + 2**31
    assert ntp64_to_posix_ns((5 << 32) + 2**31, beyond_2106_ns + 30 * YEAR_NS) == beyond_2106_ns


# --- NTP short format ------------------------------------------------------------------------------


@given(st.integers(-10 * NS_PER_S, 70_000 * NS_PER_S))
def test_ntp_short_never_rounds_a_bound_down(duration_ns: int) -> None:
    v = ns_to_ntp_short(duration_ns)
    assert 0 <= v <= 0xFFFF_FFFF
    if v < 0xFFFF_FFFF:
        assert v * NS_PER_S >= duration_ns * 2**16  # encoded value >= true bound, exactly
        assert ntp_short_to_ns(v) >= duration_ns
        assert v == 0 or (v - 1) * NS_PER_S < duration_ns * 2**16  # and it is the tightest such code
    else:
        assert duration_ns * 2**16 > (0xFFFF_FFFF - 1) * NS_PER_S


@given(st.integers(0, 0xFFFF_FFFF))
def test_ntp_short_decode_encode_is_identity(v: int) -> None:
    assert ns_to_ntp_short(ntp_short_to_ns(v)) == v


# --- PTP Timestamp and TimeInterval ------------------------------------------------------------------


@given(st.integers(0, 2**48 * NS_PER_S - 1))
def test_ptp_pack_unpack_round_trip(tai_ns: int) -> None:
    packed = pack_ptp_timestamp(tai_ns)
    assert len(packed) == 10
    assert unpack_ptp_timestamp(packed) == tai_ns
    assert ptp_to_tai_ns(*tai_ns_to_ptp(tai_ns)) == tai_ns


@pytest.mark.parametrize("bad", [(-1, 0), (2**48, 0), (0, NS_PER_S), (0, -1)])
def test_ptp_fields_validated(bad: tuple[int, int]) -> None:
    with pytest.raises(ValueError):
        ptp_to_tai_ns(*bad)


def test_ptp_rejects_out_of_range_instants() -> None:
    for tai_ns in (-1, 2**48 * NS_PER_S):
        with pytest.raises(ValueError):
            pack_ptp_timestamp(tai_ns)
    with pytest.raises(ValueError):
        unpack_ptp_timestamp(b"\x00" * 6 + NS_PER_S.to_bytes(4, "big"))


@given(st.one_of(st.integers(-(2**47), 2**47 - 1), st.floats(-(2.0**46), 2.0**46, allow_nan=False)))
def test_time_interval_round_trip(ns: int | float) -> None:
    v = ns_to_time_interval(ns)
    assert -(2**63) <= v < 2**63 - 1
    assert abs(time_interval_to_ns(v) - ns) <= 1 / 65536


def test_time_interval_saturates() -> None:
    assert ns_to_time_interval(2.5) == 0x28000  # the IEEE 1588 §5.3.2 worked example
    for too_big in (2**47, -(2**47) - 1, 1e300, float("inf"), float("-inf")):
        assert ns_to_time_interval(too_big) == 0x7FFF_FFFF_FFFF_FFFF


# --- UTC / TAI / POSIX -------------------------------------------------------------------------------

# TAI instants clustered within +-2 s of every leap second (so many land inside 23:59:60), plus a broad range.
CHANGE_TAI_NS = [(eff + off) * NS_PER_S for eff, off in TABLE.entries]
near_leaps = st.builds(lambda c, d: c + d, st.sampled_from(CHANGE_TAI_NS), st.integers(-2 * NS_PER_S, 2 * NS_PER_S))
tai_instants = st.one_of(near_leaps, st.integers(-100 * YEAR_NS, 130 * YEAR_NS))


@given(tai_instants)
def test_tai_utc_tai_round_trip(tai_ns: int) -> None:
    assert utc_to_tai(tai_to_utc(tai_ns, TABLE), TABLE) == tai_ns


@given(tai_instants)
def test_tai_posix_tai_round_trip(tai_ns: int) -> None:
    posix_ns, in_leap = tai_to_posix_ns(tai_ns, TABLE)
    assert posix_to_tai_ns(posix_ns, TABLE, in_leap_second=in_leap) == tai_ns
    assert in_leap == (tai_to_utc(tai_ns, TABLE).second == 60)


@given(tai_instants)
def test_utc_labels_agree_with_datetime_outside_leap_seconds(tai_ns: int) -> None:
    t = tai_to_utc(tai_ns, TABLE)
    posix_ns, in_leap = tai_to_posix_ns(tai_ns, TABLE)
    oracle = datetime(1970, 1, 1, tzinfo=timezone.utc) + (posix_ns // 1000) * _MICROSECOND
    expected_second = 60 if in_leap else oracle.second
    fields = (t.year, t.month, t.day, t.hour, t.minute, t.second, t.nanosecond // 1000)
    assert fields == oracle.timetuple()[:5] + (expected_second, oracle.microsecond)


@given(tai_instants, st.integers(1, 3 * NS_PER_S))
def test_utc_labels_are_monotonic(tai_ns: int, step_ns: int) -> None:
    def key(t):  # labels order lexicographically, second 60 included
        return (t.year, t.month, t.day, t.hour, t.minute, t.second, t.nanosecond)

    assert key(tai_to_utc(tai_ns, TABLE)) < key(tai_to_utc(tai_ns + step_ns, TABLE))
