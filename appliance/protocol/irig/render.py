"""What the appliance's IRIG-B output would send over a span of seconds, and reading such a signal back.

Pure core: the caller gives the start instant (TAI ns, on a whole UTC second), the leap table, the time quality and
the local-offset function; nothing here reads a clock or a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from appliance.leap import LeapTable
from appliance.protocol.irig.timecode import (ONE, CodedExpression, IrigFormat, OffsetOf, utc_offset, encode,
                                             fields_for_second)
from appliance.protocol.irig.waveform import DecodedFrame, frames_from_elements
from appliance.units import NS_PER_S

# the expressions tried, most informative first, when a signal's format is not known
AUTODETECT_ORDER = (4, 0, 5, 1, 7, 3, 6, 2)


def frames_for(expression: CodedExpression, start_tai_ns: int, seconds: int, table: LeapTable, quality: int,
               offset_of: OffsetOf = utc_offset) -> list[list[int]]:
    """The elements of ``seconds`` consecutive frames, the first at ``start_tai_ns``."""
    return [encode(fields_for_second(start_tai_ns + k * NS_PER_S, table, quality, offset_of), expression)
            for k in range(seconds)]


@dataclass(frozen=True)
class Decoded:
    format_digit: int
    frames: list[DecodedFrame]
    problems: list[str]


def decode_elements(elements: Sequence[tuple[int, int | None]], fmt: IrigFormat | None, year_hint: int) -> Decoded:
    """Frames of a signal.  Without a format, the coded expression that reads every frame and best explains it: each
    of its groups (year, CF, SBS) that carries something counts for it, each that is empty in every frame against it
    (an absent group reads as zeros, so B122 would also read as a B126 of the year 2000); ties go to the simpler one.
    With IEEE 1344 control functions B000/B004 and B001/B005 are the same signal (the CF field carries the year
    where BCD_YEAR would); they are reported as B004/B005.  If none reads every frame, the one that reads the most."""
    if fmt is not None:
        frames, problems = frames_from_elements(elements, fmt.expression, year_hint)
        return Decoded(fmt.expression.digit, frames, problems)
    complete, best = [], None
    for digit in AUTODETECT_ORDER:
        frames, problems = frames_from_elements(elements, CodedExpression(digit), year_hint)
        result = Decoded(digit, frames, problems)
        if frames and not problems:
            complete.append((_evidence(result), -_groups(digit), result))
        elif best is None or len(frames) > len(best.frames):
            best = result
    if complete:
        return max(complete, key=lambda c: (c[0], c[1]))[2]
    assert best is not None
    return best


_GROUP_ELEMENTS = {"year": range(50, 59), "cf": [i for i in range(60, 79) if i != 69],
                   "sbs": [i for i in range(80, 98) if i != 89]}


def _groups(digit: int) -> int:
    e = CodedExpression(digit)
    return int(e.has_year) + int(e.has_cf) + int(e.has_sbs)


def _evidence(result: Decoded) -> int:
    e = CodedExpression(result.format_digit)
    claimed = [name for name, present in (("year", e.has_year), ("cf", e.has_cf),
                                          ("sbs", e.has_sbs)) if present]
    score = 0
    for name in claimed:
        used = any(f.elements[i] == ONE for f in result.frames for i in _GROUP_ELEMENTS[name])
        score += 1 if used else -1
    return score
