"""Integer-nanosecond time base and the NTP/PTP wire formats for timestamps and intervals.

Single job: convert between the package's ``int`` nanosecond axes (``posix_ns``, ``tai_ns``) and the
fixed-point formats that go on the wire.  No leap-second knowledge lives here (see ``appliance.leap``):
NTP timestamps count UTC the way POSIX does, PTP timestamps count TAI, so both are plain offsets/scalings.
"""

from __future__ import annotations

import math

from appliance.units import NS_PER_S

NTP_UNIX_OFFSET_S = 2_208_988_800  # 1900-01-01 (NTP era 0 start) to 1970-01-01, RFC 5905 §6
NTP_ERA_S = 2**32  # one NTP era, RFC 5905 §6: the seconds field wraps every 2^32 s (~136 years)

_NTP_FRAC_SCALE = 2**32  # 32.32 timestamp format: 2^32 fraction units per second
_NTP_SHORT_SCALE = 2**16  # 16.16 short format
_NTP_SHORT_MAX = 0xFFFF_FFFF
_NTP64_MASK = 2**64 - 1
_NTP_ERA_NS = NTP_ERA_S * NS_PER_S
_NTP_UNIX_OFFSET_NS = NTP_UNIX_OFFSET_S * NS_PER_S

_PTP_SECONDS_LIMIT = 2**48  # IEEE 1588-2019 §5.3.3: secondsField is UInteger48
_TI_SCALE = 2**16  # IEEE 1588-2019 §5.3.2: TimeInterval is ns * 2^16
_TI_MAX = 0x7FFF_FFFF_FFFF_FFFF
_TI_MIN = -(2**63)


def _div_round_half_up(num: int, den: int) -> int:
    """Integer division rounded to nearest (ties upward); exact for any sign, unlike float maths."""
    return (2 * num + den) // (2 * den)


def _div_ceil(num: int, den: int) -> int:
    return -((-num) // den)


# --- NTP 64-bit timestamps (RFC 5905 §6) -------------------------------------------------------------


def posix_ns_to_ntp64(posix_ns: int) -> int:
    """Encode an instant as a 64-bit NTP timestamp (32-bit seconds . 32-bit fraction), era dropped.

    The fraction is rounded to nearest; a carry into the seconds field is handled because the whole
    64-bit value is computed at once.  Instants outside era 0 (before 1900 or after 2036-02-07) simply
    wrap, as RFC 5905 §6 prescribes; the receiver recovers the era from a pivot.
    """
    ntp_ns = posix_ns + _NTP_UNIX_OFFSET_NS
    return _div_round_half_up(ntp_ns * _NTP_FRAC_SCALE, NS_PER_S) & _NTP64_MASK


def ntp64_to_posix_ns(ts: int, pivot_posix_ns: int) -> int:
    """Decode a 64-bit NTP timestamp, choosing the era that puts the result nearest ``pivot_posix_ns``.

    RFC 5905 §6: timestamps carry no era, so the era is inferred from a nearby trusted instant; this is
    correct whenever the true instant lies within +-68 years (half an era) of the pivot.  Rounding the
    fraction to the nearest ns makes ns -> ntp64 -> ns exact: one fraction unit (~0.23 ns) is finer than
    one ns, so the encoding error (<= 0.5 unit) maps back to < 0.5 ns.
    """
    if not 0 <= ts <= _NTP64_MASK:
        raise ValueError(f"NTP timestamp out of 64-bit range: {ts}")
    in_era_ns = _div_round_half_up(ts * NS_PER_S, _NTP_FRAC_SCALE)
    era0_posix_ns = in_era_ns - _NTP_UNIX_OFFSET_NS
    era = _div_round_half_up(pivot_posix_ns - era0_posix_ns, _NTP_ERA_NS)
    return era0_posix_ns + era * _NTP_ERA_NS


def ntp_era(posix_ns: int) -> int:
    """NTP era number of an instant (RFC 5905 §6): 0 from 1900, 1 from 2036-02-07T06:28:16Z, -1 before 1900."""
    return (posix_ns // NS_PER_S + NTP_UNIX_OFFSET_S) // NTP_ERA_S


def ntp_era_offset(posix_ns: int) -> int:
    """Whole seconds since the start of the instant's NTP era (RFC 5905 §6 "era offset")."""
    return (posix_ns // NS_PER_S + NTP_UNIX_OFFSET_S) % NTP_ERA_S


# --- NTP short format (RFC 5905 §6, root delay / root dispersion) --------------------------------------


def ns_to_ntp_short(duration_ns: int) -> int:
    """Encode a non-negative duration as NTP short format (16-bit seconds . 16-bit fraction).

    Root delay and root dispersion are error *bounds* (RFC 5905 §7.3), so the encoding rounds up
    (a bound must never shrink) and saturates at 0xFFFFFFFF (~65536 s).  Negative inputs, which can arise
    from measurement noise in a delay estimate, are clamped to 0.
    """
    if duration_ns <= 0:
        return 0
    return min(_div_ceil(duration_ns * _NTP_SHORT_SCALE, NS_PER_S), _NTP_SHORT_MAX)


def ntp_short_to_ns(v: int) -> int:
    """Decode NTP short format to ns, rounded down (by < 1 ns).

    Flooring gives the largest int ns not above the wire value, so any int-ns bound encoded by
    ``ns_to_ntp_short`` decodes to at least itself, and decode -> encode is the identity (a relayed
    root dispersion is not inflated by one 15 us code per hop, as rounding up here would do).
    """
    if not 0 <= v <= _NTP_SHORT_MAX:
        raise ValueError(f"NTP short value out of 32-bit range: {v}")
    return v * NS_PER_S // _NTP_SHORT_SCALE


# --- PTP Timestamp (IEEE 1588-2019 §5.3.3) -------------------------------------------------------------


def tai_ns_to_ptp(tai_ns: int) -> tuple[int, int]:
    """Split an instant into PTP (secondsField, nanosecondsField); the PTP epoch is 1970-01-01 TAI (§7.2)."""
    seconds, nanoseconds = divmod(tai_ns, NS_PER_S)
    if tai_ns < 0 or seconds >= _PTP_SECONDS_LIMIT:
        raise ValueError(f"instant {tai_ns} ns is outside the PTP timestamp range")
    return seconds, nanoseconds


def ptp_to_tai_ns(seconds: int, nanoseconds: int) -> int:
    """Join PTP timestamp fields; §5.3.3 requires nanosecondsField < 10^9."""
    if not 0 <= seconds < _PTP_SECONDS_LIMIT:
        raise ValueError(f"PTP secondsField out of UInteger48 range: {seconds}")
    if not 0 <= nanoseconds < NS_PER_S:
        raise ValueError(f"PTP nanosecondsField must be in [0, 1e9): {nanoseconds}")
    return seconds * NS_PER_S + nanoseconds


def pack_ptp_timestamp(tai_ns: int) -> bytes:
    """Serialise as the 10-byte big-endian wire Timestamp (6 bytes seconds, 4 bytes ns; §5.3.3)."""
    seconds, nanoseconds = tai_ns_to_ptp(tai_ns)
    return seconds.to_bytes(6, "big") + nanoseconds.to_bytes(4, "big")


def unpack_ptp_timestamp(b: bytes) -> int:
    """Parse a 10-byte wire Timestamp; rejects wrong lengths and out-of-range nanoseconds."""
    if len(b) != 10:
        raise ValueError(f"PTP timestamp must be 10 bytes, got {len(b)}")
    return ptp_to_tai_ns(int.from_bytes(b[:6], "big"), int.from_bytes(b[6:], "big"))


# --- PTP TimeInterval (IEEE 1588-2019 §5.3.2) ----------------------------------------------------------


def ns_to_time_interval(ns: int | float) -> int:
    """Encode a duration as TimeInterval: signed 64-bit, ns scaled by 2^16, rounded to nearest.

    §5.3.2: a value too large to represent is sent as 0x7FFFFFFFFFFFFFFF.  The standard gives no
    separate negative marker, so large negative values saturate to the same "too big" code.
    """
    if isinstance(ns, float):
        if math.isnan(ns):
            raise ValueError("TimeInterval cannot encode NaN")
        if math.isinf(ns):
            return _TI_MAX
        scaled = round(ns * _TI_SCALE)  # exact: scaling a float by a power of two loses nothing
    else:
        scaled = ns * _TI_SCALE
    return scaled if _TI_MIN <= scaled < _TI_MAX else _TI_MAX


def time_interval_to_ns(v: int) -> float:
    """Decode TimeInterval to (fractional) ns; 0x7FFFFFFFFFFFFFFF ("too big", §5.3.2) decodes to +inf."""
    if not _TI_MIN <= v <= _TI_MAX:
        raise ValueError(f"TimeInterval out of signed 64-bit range: {v}")
    if v == _TI_MAX:
        return math.inf
    return v / _TI_SCALE


# --- display helpers -----------------------------------------------------------------------------------


def s_to_ns(seconds: float) -> int:
    """Seconds (float, e.g. from configuration) to int ns, rounded to nearest."""
    return round(seconds * NS_PER_S)


def ns_to_s(ns: int) -> float:
    """Int ns to float seconds; for display and logging only (floats lose ns precision past ~104 days)."""
    return ns / NS_PER_S
