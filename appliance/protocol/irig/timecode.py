"""IRIG-B time code frames (IRIG Standard 200-16) with the IEEE 1344 / C37.118 control functions: encode and decode.

Pure core.  One frame per second of 100 elements, 10 ms each; an element is a binary zero, a binary one, or a
position identifier (``MARK``).  The frame's on-time point is the leading edge of its reference marker (element 0),
which follows the previous frame's P0 (element 99): two marks in a row begin a frame.  Element map (200-16 Table 6-2
for format B; IEEE C37.118-2005 Annex / IEEE 1344-1995 for the control functions):

====  ============================================================================================
0     Pr, the reference marker                 9, 19, ... 89, 99: position identifiers P1 ... P9, P0
1-8   seconds: units 1,2,4,8 at 1-4, tens 10,20,40 at 6-8 (5 is an index marker, always 0)
10-18 minutes: units at 10-13, tens 10,20,40 at 15-17
20-28 hours: units at 20-23, tens 10,20 at 25-26
30-41 day of year: units at 30-33, tens at 35-38, hundreds 100,200 at 40-41
50-58 year (two BCD digits: units at 50-53, tens at 55-58): BCD_YEAR, or the IEEE 1344 year in the CF field
60-78 IEEE 1344 control functions: 60 LSP, 61 LS (1: deletion), 62 DSP, 63 DST, 64 offset sign (1: negative),
      65-68 offset hours, 70 offset half hour, 71-74 time quality, 75 parity, 76-78 zero
80-97 straight binary seconds of the day: 2^0..2^8 at 80-88, 2^9..2^16 at 90-97
====  ============================================================================================

The coded expression (the last digit of B00x / B12x) chooses the groups: 0 BCD_TOY CF SBS, 1 BCD_TOY CF, 2 BCD_TOY,
3 BCD_TOY SBS, 4 BCD_TOY BCD_YEAR CF SBS, 5 BCD_TOY BCD_YEAR CF, 6 BCD_TOY BCD_YEAR, 7 BCD_TOY BCD_YEAR SBS.  Where
an expression carries CF the appliance fills it per IEEE 1344 (year included); elements of absent groups are zero.

The time coded is the IRIG time: UTC plus the configured local offset, which the offset field states the other way
round (IRIG time plus the offset field equals UTC).  An inserted leap second is coded as second 60 (SBS 86 400 at
23:59:60 UTC), and the leap-second-pending bit is set through the last minute before it and during it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from appliance import leap
from appliance.leap import LeapTable

ZERO, ONE, MARK = 0, 1, 2
ELEMENTS = 100
ELEMENT_NS = 10_000_000
WIDTH_NS = {ZERO: 2_000_000, ONE: 5_000_000, MARK: 8_000_000}  # 200-16 §3: 0.2, 0.5 and 0.8 of the element
MARKS = (0, 9, 19, 29, 39, 49, 59, 69, 79, 89, 99)

# (group, element, weight) of every BCD digit bit, least significant first
_SECONDS = ((1, 1), (2, 2), (3, 4), (4, 8), (6, 10), (7, 20), (8, 40))
_MINUTES = ((10, 1), (11, 2), (12, 4), (13, 8), (15, 10), (16, 20), (17, 40))
_HOURS = ((20, 1), (21, 2), (22, 4), (23, 8), (25, 10), (26, 20))
_DAYS = ((30, 1), (31, 2), (32, 4), (33, 8), (35, 10), (36, 20), (37, 40), (38, 80), (40, 100), (41, 200))
_YEAR = ((50, 1), (51, 2), (52, 4), (53, 8), (55, 10), (56, 20), (57, 40), (58, 80))
_SBS = tuple((80 + i, 1 << i) for i in range(9)) + tuple((90 + i, 1 << (9 + i)) for i in range(8))
LSP, LS, DSP, DST, OFFSET_SIGN, OFFSET_HALF, PARITY = 60, 61, 62, 63, 64, 70, 75
_OFFSET_HOURS = ((65, 1), (66, 2), (67, 4), (68, 8))
_QUALITY = ((71, 1), (72, 2), (73, 4), (74, 8))
QUALITY_FAULT = 15


class IrigDecodeError(ValueError):
    """A frame that is not valid IRIG-B; the message says which element or field."""


@dataclass(frozen=True)
class CodedExpression:
    digit: int

    def __post_init__(self) -> None:
        if not 0 <= self.digit <= 7:
            raise ValueError(f"IRIG-B coded expression {self.digit}: must be 0-7")

    @property
    def has_year(self) -> bool:
        """The year is coded: BCD_YEAR (4-7) or the IEEE 1344 year of the CF field (0, 1)."""
        return self.digit >= 4 or self.has_cf

    @property
    def has_cf(self) -> bool:
        return self.digit in (0, 1, 4, 5)

    @property
    def has_sbs(self) -> bool:
        return self.digit in (0, 3, 4, 7)


@dataclass(frozen=True)
class IrigFields:
    """What one frame says.  ``year`` is the full year (two digits are coded); ``second`` may be 60.
    ``offset_half_hours``: IRIG time + offset = UTC, in half hours (IEEE 1344 sign and magnitude)."""

    year: int
    day_of_year: int
    hour: int
    minute: int
    second: int
    leap_pending: bool = False
    leap_deletion: bool = False
    dst_pending: bool = False
    dst: bool = False
    offset_half_hours: int = 0
    quality: int = 0

    def seconds_of_day(self) -> int:
        return self.hour * 3600 + self.minute * 60 + self.second


@dataclass(frozen=True)
class IrigFormat:
    """A format name such as B002 (DC level shift) or B122 (AM on 1 kHz)."""

    name: str
    modulated: bool
    expression: CodedExpression

    @classmethod
    def parse(cls, name: str) -> IrigFormat:
        text = name.strip().upper()
        if len(text) != 4 or text[0] != "B" or text[1:3] not in ("00", "12") or text[3] not in "01234567":
            raise ValueError(f"IRIG format {name!r}: expected B000-B007 (DC level shift) or B120-B127 (AM, 1 kHz)")
        return cls(text, text[1:3] == "12", CodedExpression(int(text[3])))


def quality_from_bound(bound_ns: int | None) -> int:
    """IEEE 1344 time quality: the smallest code c in 1..11 with the error bound within 10^(c-10) s, 15 (fault)
    when there is no bound or it exceeds 10 s."""
    if bound_ns is None or bound_ns < 0:
        return QUALITY_FAULT
    limit_ns = 1
    for code in range(1, 12):
        if bound_ns <= limit_ns:
            return code
        limit_ns *= 10
    return QUALITY_FAULT


def _put(elements: list[int], bits: tuple[tuple[int, int], ...], value: int, what: str) -> None:
    rest = value
    for index, weight in reversed(bits):
        if rest >= weight:
            elements[index] = ONE
            rest -= weight
    if rest:
        raise ValueError(f"IRIG {what} {value} does not fit its field")


def _bcd(bits: tuple[tuple[int, int], ...], value: int, what: str, elements: list[int]) -> None:
    """BCD: each decimal digit's bits are weighted 1,2,4,8 x 10^k; written digit by digit."""
    digits: dict[int, list[tuple[int, int]]] = {}
    for index, weight in bits:
        scale = 1 if weight < 10 else 10 if weight < 100 else 100
        digits.setdefault(scale, []).append((index, weight // scale))
    if value >= 10 ** len(digits) or value < 0:
        raise ValueError(f"IRIG {what} {value} does not fit its field")
    for scale, group in digits.items():
        _put(elements, tuple((i, w * scale) for i, w in group), value // scale % 10 * scale, what)


def encode(fields: IrigFields, expression: CodedExpression) -> list[int]:
    """The 100 elements of one frame."""
    e = [ZERO] * ELEMENTS
    for index in MARKS:
        e[index] = MARK
    _bcd(_SECONDS, fields.second, "second", e)
    _bcd(_MINUTES, fields.minute, "minute", e)
    _bcd(_HOURS, fields.hour, "hour", e)
    _bcd(_DAYS, fields.day_of_year, "day of year", e)
    if expression.has_year:
        _bcd(_YEAR, fields.year % 100, "year", e)
    if expression.has_cf:
        e[LSP], e[LS] = int(fields.leap_pending), int(fields.leap_deletion)
        e[DSP], e[DST] = int(fields.dst_pending), int(fields.dst)
        half = fields.offset_half_hours
        if abs(half) > 31:
            raise ValueError(f"IRIG time offset {half / 2} h is beyond the 15.5 h the field holds")
        e[OFFSET_SIGN] = int(half < 0)
        _put(e, _OFFSET_HOURS, abs(half) // 2, "offset hours")
        e[OFFSET_HALF] = abs(half) % 2
        if not 0 <= fields.quality <= 15:
            raise ValueError(f"IRIG time quality {fields.quality}: must be 0-15")
        _put(e, _QUALITY, fields.quality, "time quality")
        e[PARITY] = sum(1 for v in e[1:PARITY] if v == ONE) % 2  # even parity over elements 1-74
    if expression.has_sbs:
        _put(e, _SBS, fields.seconds_of_day(), "straight binary seconds")
    return e


def _read_bits(elements: list[int], bits: tuple[tuple[int, int], ...]) -> int:
    return sum(weight for index, weight in bits if elements[index] == ONE)


def _read_bcd(elements: list[int], bits: tuple[tuple[int, int], ...], what: str) -> int:
    value = 0
    for scale in (1, 10, 100):
        group = [(i, w) for i, w in bits if scale <= w < scale * 10]
        if not group:
            continue
        digit = _read_bits(elements, tuple((i, w // scale) for i, w in group))
        if digit > 9:
            raise IrigDecodeError(f"{what}: BCD digit {digit} is not a decimal digit")
        value += digit * scale
    return value


def decode(elements: list[int], expression: CodedExpression, year_hint: int = 2000) -> IrigFields:
    """One frame back to its fields.  ``year_hint``: the century (and, without a coded year, the year itself)."""
    if len(elements) != ELEMENTS:
        raise IrigDecodeError(f"a frame has {ELEMENTS} elements, got {len(elements)}")
    for index, value in enumerate(elements):
        if (index in MARKS) != (value == MARK):
            what = "position identifier expected" if index in MARKS else "unexpected position identifier"
            raise IrigDecodeError(f"element {index}: {what}")
    second = _read_bcd(elements, _SECONDS, "seconds")
    minute = _read_bcd(elements, _MINUTES, "minutes")
    hour = _read_bcd(elements, _HOURS, "hours")
    day = _read_bcd(elements, _DAYS, "day of year")
    if second > 60 or minute > 59 or hour > 23 or not 1 <= day <= 366:
        raise IrigDecodeError(f"time of year out of range: day {day} {hour:02d}:{minute:02d}:{second:02d}")
    year = year_hint
    if expression.has_year:
        two = _read_bcd(elements, _YEAR, "year")
        year = year_hint - year_hint % 100 + two
    fields = IrigFields(year, day, hour, minute, second)
    if expression.has_cf:
        if sum(1 for v in elements[1:PARITY + 1] if v == ONE) % 2:
            raise IrigDecodeError("parity error (even parity over elements 1-75)")
        half = _read_bits(elements, _OFFSET_HOURS) * 2 + (elements[OFFSET_HALF] == ONE)
        fields = IrigFields(year, day, hour, minute, second, elements[LSP] == ONE, elements[LS] == ONE,
                            elements[DSP] == ONE, elements[DST] == ONE,
                            -half if elements[OFFSET_SIGN] == ONE else half, _read_bits(elements, _QUALITY))
    if expression.has_sbs:
        sbs = _read_bits(elements, _SBS)
        if sbs != fields.seconds_of_day():
            raise IrigDecodeError(f"straight binary seconds {sbs} disagree with the BCD time "
                                  f"{hour:02d}:{minute:02d}:{second:02d}")
    return fields


def frame_starts(elements: list[int]) -> list[int]:
    """Indices where a complete frame begins in a stream of elements: marks at every position-identifier place."""
    return [i for i in range(len(elements) - ELEMENTS + 1)
            if all(elements[i + m] == MARK for m in MARKS)]


# --- the time a frame codes -------------------------------------------------------------------------------------

OffsetOf = Callable[[int], tuple[int, bool]]  # POSIX second -> (local offset from UTC in s, daylight saving time)


def utc_offset(posix_s: int) -> tuple[int, bool]:
    return 0, False


def fields_for_second(tai_ns: int, table: LeapTable, quality: int, offset_of: OffsetOf = utc_offset) -> IrigFields:
    """The fields of the frame whose reference marker falls at ``tai_ns`` (the start of a UTC second).  ``offset_of``
    gives the local time offset (a whole number of half hours) and DST flag of a POSIX second."""
    utc = leap.tai_to_utc(tai_ns, table)
    if utc.nanosecond:
        raise ValueError(f"an IRIG frame starts on a whole second, not at {utc}")
    minute_posix = leap.days_from_civil(utc.year, utc.month, utc.day) * 86_400 + utc.hour * 3600 + utc.minute * 60
    offset_s, dst = offset_of(minute_posix + min(utc.second, 59))
    if offset_s % 1800:
        raise ValueError(f"local time offset {offset_s} s is not a whole number of half hours")
    next_offset_s, _ = offset_of(minute_posix + 60)
    local_minute = minute_posix + offset_s
    local_days = local_minute // 86_400
    local_year = leap.civil_from_days(local_days)[0]
    minute_of_day = local_minute % 86_400 // 60
    # a leap second at the end of this UTC minute: pending through the minute (from its second 1) and during it
    step = table.step_at(minute_posix + 60) if (utc.hour, utc.minute) == (23, 59) else 0
    return IrigFields(local_year, local_days - leap.days_from_civil(local_year, 1, 1) + 1, minute_of_day // 60,
                      minute_of_day % 60,
                      utc.second, leap_pending=step != 0 and utc.second >= 1, leap_deletion=step < 0,
                      dst_pending=next_offset_s != offset_s and utc.second >= 1, dst=dst,
                      offset_half_hours=-offset_s // 1800, quality=quality)


def tai_of(fields: IrigFields, table: LeapTable) -> int:
    """The TAI instant of a frame's reference marker (IRIG time plus its offset field is UTC)."""
    days_in_year = leap.days_from_civil(fields.year + 1, 1, 1) - leap.days_from_civil(fields.year, 1, 1)
    if fields.day_of_year > days_in_year:
        raise ValueError(f"day {fields.day_of_year} of {fields.year}, which has {days_in_year} days")
    local_minute = ((leap.days_from_civil(fields.year, 1, 1) + fields.day_of_year - 1) * 86_400
                    + fields.hour * 3600 + fields.minute * 60)
    utc_minute = local_minute + fields.offset_half_hours * 1800
    year, month, day = leap.civil_from_days(utc_minute // 86_400)
    minute_of_day = utc_minute % 86_400 // 60
    return leap.utc_fields_to_tai(year, month, day, minute_of_day // 60, minute_of_day % 60, fields.second, 0, table)
