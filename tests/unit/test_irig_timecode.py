"""IRIG-B frames: hand-checked bit patterns, field rules (leap second, offsets, quality), decoding errors."""

from __future__ import annotations

import pytest

from appliance import leap
from appliance.leap import LeapTable
from appliance.protocol.irig.timecode import (MARK, ONE, ZERO, CodedExpression, IrigDecodeError, IrigFields,
                                             IrigFormat, decode, encode, fields_for_second, frame_starts,
                                             quality_from_bound, tai_of)

TABLE = LeapTable.load_default()


def pattern(elements: list[int]) -> str:
    return "".join("P" if e == MARK else str(e) for e in elements)


def tai(year: int, month: int, day: int, hour: int, minute: int, second: int) -> int:
    return leap.utc_fields_to_tai(year, month, day, hour, minute, second, 0, TABLE)


# Written out by hand from IRIG 200-16 Table 6-2 and IEEE C37.118 (groups of ten elements, P = position identifier).
# 2017-03-15 12:34:56 UTC is day 074; B004 codes BCD time, BCD year, IEEE 1344 CF and SBS 45296
# (= 2^15 + 2^13 + 2^12 + 2^7 + 2^6 + 2^5 + 2^4); quality 3 (< 100 ns); 19 ones in elements 1-74, so parity 1.
B004_2017_03_15_123456 = ("P01100101P" "001001100P" "010001000P" "001001110P" "000000000P"
                          "111001000P" "000000000P" "011001000P" "000011110P" "000110100P")
# 2016-12-31 23:59:60 UTC, the inserted leap second, day 366: seconds 60, leap second pending set, year 16 in the CF
# field, quality 15 (fault), 23 ones in 1-74 so parity 1, SBS 86400 (= 2^16 + 2^14 + 2^12 + 2^8 + 2^7).
B000_2016_12_31_235960 = ("P00000011P" "100101010P" "110000100P" "011000110P" "110000000P"
                          "011001000P" "100000000P" "011111000P" "000000011P" "000101010P")


def test_known_instant_matches_the_hand_checked_pattern() -> None:
    fields = fields_for_second(tai(2017, 3, 15, 12, 34, 56), TABLE, quality=3)
    assert (fields.year, fields.day_of_year, fields.hour, fields.minute, fields.second) == (2017, 74, 12, 34, 56)
    assert pattern(encode(fields, CodedExpression(4))) == B004_2017_03_15_123456


def test_leap_second_matches_the_hand_checked_pattern() -> None:
    fields = fields_for_second(tai(2016, 12, 31, 23, 59, 60), TABLE, quality=15)
    assert fields.second == 60 and fields.leap_pending and not fields.leap_deletion
    assert pattern(encode(fields, CodedExpression(0))) == B000_2016_12_31_235960


@pytest.mark.parametrize("digit", range(8))
def test_groups_absent_from_an_expression_are_zero(digit: int) -> None:
    e = CodedExpression(digit)
    elements = encode(fields_for_second(tai(2017, 3, 15, 12, 34, 56), TABLE, quality=3), e)
    assert any(elements[i] == ONE for i in range(50, 59)) == e.has_year
    assert any(elements[i] == ONE for i in range(60, 79) if i != 69) == e.has_cf
    assert any(elements[i] == ONE for i in range(80, 99) if i != 89) == e.has_sbs
    assert decode(elements, e, 2017).seconds_of_day() == 12 * 3600 + 34 * 60 + 56


def test_leap_pending_through_the_last_minute_and_the_leap_second_then_clear() -> None:
    flags = {s: fields_for_second(tai(2016, 12, 31, 23, 59, s), TABLE, 4).leap_pending for s in (0, 1, 30, 59, 60)}
    assert flags == {0: False, 1: True, 30: True, 59: True, 60: True}
    after = fields_for_second(tai(2017, 1, 1, 0, 0, 0), TABLE, 4)
    assert not after.leap_pending and (after.year, after.day_of_year, after.seconds_of_day()) == (2017, 1, 0)
    assert not fields_for_second(tai(2017, 12, 31, 23, 59, 30), TABLE, 4).leap_pending  # no leap at the end of 2017


def test_local_offset_is_stated_as_irig_time_plus_offset_equals_utc() -> None:
    def india(posix_s: int) -> tuple[int, bool]:
        return 5 * 3600 + 1800, False

    at = tai(2016, 12, 31, 23, 59, 60)
    fields = fields_for_second(at, TABLE, 4, india)
    assert (fields.year, fields.day_of_year, fields.hour, fields.minute, fields.second) == (2017, 1, 5, 29, 60)
    assert fields.offset_half_hours == -11  # IRIG time - 5:30 = UTC
    elements = encode(fields, CodedExpression(0))
    assert (elements[64], elements[65], elements[66], elements[67], elements[68], elements[70]) == (1, 1, 0, 1, 0, 1)
    # SBS counts the coded (local) time: 5:29:60 reads 19800, as the next second 5:30:00 does (IEEE 1344)
    assert decode(elements, CodedExpression(0), 2017).seconds_of_day() == 5 * 3600 + 29 * 60 + 60
    assert tai_of(decode(elements, CodedExpression(0), 2017), TABLE) == at


def test_daylight_saving_pending_in_the_minute_before_the_change() -> None:
    change = 1_490_490_000  # 2017-03-26 01:00:00 UTC: Central Europe moves from +1 h to +2 h (DST)

    def europe(posix_s: int) -> tuple[int, bool]:
        return (7200, True) if posix_s >= change else (3600, False)

    before = fields_for_second(tai(2017, 3, 26, 0, 59, 30), TABLE, 4, europe)
    after = fields_for_second(tai(2017, 3, 26, 1, 0, 0), TABLE, 4, europe)
    assert before.dst_pending and not before.dst and (before.hour, before.minute) == (1, 59)
    assert after.dst and not after.dst_pending and (after.hour, after.minute, after.offset_half_hours) == (3, 0, -4)


@pytest.mark.parametrize(("bound_ns", "quality"), [(None, 15), (0, 1), (1, 1), (2, 2), (10, 2), (68, 3), (100, 3),
                                                   (101, 4), (999_999, 7), (1_000_001, 8), (10 * 10**9, 11),
                                                   (10 * 10**9 + 1, 15)])
def test_time_quality_from_the_error_bound(bound_ns: int | None, quality: int) -> None:
    assert quality_from_bound(bound_ns) == quality


def test_decode_names_what_is_wrong() -> None:
    e = CodedExpression(0)
    good = encode(fields_for_second(tai(2017, 3, 15, 12, 34, 56), TABLE, quality=3), e)
    with pytest.raises(IrigDecodeError, match="element 19: position identifier expected"):
        decode(good[:19] + [ZERO] + good[20:], e)
    flipped = good.copy()
    flipped[72] = ZERO if flipped[72] == ONE else ONE
    with pytest.raises(IrigDecodeError, match="parity"):
        decode(flipped, e)
    bad_digit = good.copy()
    bad_digit[1:5] = [ONE, ONE, ONE, ONE]  # seconds units 15
    with pytest.raises(IrigDecodeError, match="not a decimal digit"):
        decode(bad_digit, CodedExpression(2))
    sbs = good.copy()
    sbs[80] = ONE
    with pytest.raises(IrigDecodeError, match="straight binary seconds"):
        decode(sbs, CodedExpression(3))
    with pytest.raises(IrigDecodeError, match="100 elements"):
        decode(good[:99], e)


def test_frames_are_found_where_the_position_identifiers_line_up() -> None:
    e = CodedExpression(4)
    frames = [encode(fields_for_second(tai(2017, 3, 15, 12, 34, s), TABLE, 3), e) for s in (1, 2, 3)]
    stream = [ZERO] * 37 + frames[0] + frames[1] + frames[2][:50]
    assert frame_starts(stream) == [37, 137]


@pytest.mark.parametrize("name", ["B003", "b127", "B120"])
def test_format_names(name: str) -> None:
    fmt = IrigFormat.parse(name)
    assert fmt.modulated == (name[1] == "1") and fmt.expression.digit == int(name[3])


@pytest.mark.parametrize("name", ["B008", "B220", "A000", "B12", "IRIG"])
def test_bad_format_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="B000-B007"):
        IrigFormat.parse(name)


def test_fields_refuse_what_the_code_cannot_hold() -> None:
    with pytest.raises(ValueError, match="quality"):
        encode(IrigFields(2017, 1, 0, 0, 0, quality=16), CodedExpression(0))
    with pytest.raises(ValueError, match="whole second"):
        fields_for_second(tai(2017, 1, 1, 0, 0, 0) + 5, TABLE, 4)
