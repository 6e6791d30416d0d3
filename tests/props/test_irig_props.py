"""Property tests for IRIG-B: every second of a day holding a leap second and a year boundary encodes and decodes back
to the same instant, in every coded expression, in UTC and in local time; waveforms round-trip with their on-time
points on the second; whatever a corrupted frame decodes to, decode raises nothing but IrigDecodeError.
"""

from __future__ import annotations

import random

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance import leap
from appliance.leap import LeapTable
from appliance.protocol.irig.timecode import (ELEMENTS, MARK, ONE, ZERO, CodedExpression, IrigDecodeError, decode,
                                             encode, fields_for_second, tai_of)
from appliance.protocol.irig.waveform import (am_samples, dcls_edges, elements_from_pulses, frames_from_elements,
                                             pulses_from_edges, pulses_from_samples)

TABLE = LeapTable.load_default()
NS = 1_000_000_000
# 2016-12-31 12:00:00 UTC to 2017-01-01 12:00:00 UTC: 86 401 seconds, the leap second 23:59:60 and the new year
DAY_START = leap.utc_fields_to_tai(2016, 12, 31, 12, 0, 0, 0, TABLE)
DAY_SECONDS = 86_401
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def roundtrip(expression: CodedExpression, at: int, offset_s: int = 0) -> None:
    offset = (lambda posix_s: (offset_s, False))
    fields = fields_for_second(at, TABLE, quality=3, offset_of=offset)
    got = decode(encode(fields, expression), expression, year_hint=2016 if fields.year == 2016 else 2017)
    if expression.has_cf:
        assert got == fields
        assert tai_of(got, TABLE) == at
    else:  # the time of year (and the year where coded) come back; the control functions are not sent
        assert (got.day_of_year, got.hour, got.minute, got.second) == (fields.day_of_year, fields.hour,
                                                                       fields.minute, fields.second)


def test_every_second_of_the_day_round_trips_in_the_fullest_expression() -> None:
    expression = CodedExpression(4)  # BCD time, BCD year, CF, SBS: every group
    labels = set()
    for k in range(DAY_SECONDS):
        at = DAY_START + k * NS
        roundtrip(expression, at)
        if k in (43_199, 43_200, 43_201):
            labels.add(str(leap.tai_to_utc(at, TABLE))[:19])
    assert labels == {"2016-12-31T23:59:59", "2016-12-31T23:59:60", "2017-01-01T00:00:00"}


@FAST
@given(st.integers(0, 7), st.integers(0, DAY_SECONDS - 1), st.integers(-24, 28).map(lambda h: h * 1800))
def test_any_second_round_trips_in_any_expression_and_local_offset(digit: int, k: int, offset_s: int) -> None:
    roundtrip(CodedExpression(digit), DAY_START + k * NS, offset_s)


@FAST
@given(st.integers(0, DAY_SECONDS - 1), st.integers(0, 7), st.data())
def test_a_corrupted_frame_decodes_or_raises_irig_decode_error(k: int, digit: int, data: st.DataObject) -> None:
    e = CodedExpression(digit)
    elements = encode(fields_for_second(DAY_START + k * NS, TABLE, 3), e)
    for index in data.draw(st.lists(st.integers(0, ELEMENTS - 1), min_size=1, max_size=4)):
        elements[index] = data.draw(st.sampled_from([ZERO, ONE, MARK]))
    try:
        decode(elements, e, 2016)
    except IrigDecodeError:
        pass


@settings(max_examples=25, deadline=None)
@given(st.integers(0, DAY_SECONDS - 4), st.integers(0, 7), st.integers(0, 999_999_999))
def test_dc_level_shift_edges_put_each_reference_marker_on_its_second(k: int, digit: int, start_ns: int) -> None:
    e = CodedExpression(digit)
    frames = [encode(fields_for_second(DAY_START + (k + i) * NS, TABLE, 3), e) for i in range(3)]
    found, problems = frames_from_elements(elements_from_pulses(pulses_from_edges(dcls_edges(frames, start_ns))), e,
                                           2016)
    assert not problems
    assert [f.on_time_ns - start_ns for f in found] == [0, NS, 2 * NS]
    assert [tai_of(f.fields, TABLE) for f in found if e.has_cf] == [DAY_START + (k + i) * NS for i in range(3)
                                                                    if e.has_cf]


@pytest.mark.parametrize("rate", [8000, 44_100, 48_000, 96_000])
def test_am_zero_crossings_put_each_reference_marker_on_its_second(rate: int) -> None:
    e = CodedExpression(0)
    k = random.Random(rate).randrange(DAY_SECONDS - 2)
    frames = [encode(fields_for_second(DAY_START + (k + i) * NS, TABLE, 3), e) for i in range(2)]
    clean = am_samples(frames, rate)
    noise = random.Random(k)
    noisy = [v + round(noise.gauss(0, 300)) for v in clean]  # about -40 dB of white noise against the mark
    for samples, tolerance_ns in ((clean, 1_000), (noisy, 10_000)):
        found, problems = frames_from_elements(elements_from_pulses(pulses_from_samples(samples, rate)), e, 2016)
        assert not problems and len(found) == 2
        # the positive-going zero crossing of each reference marker, after the 10 ms lead-in (the previous frame's
        # P0), on its second: within the 16-bit rounding of a clean signal, within 10 us under the noise
        for i, frame in enumerate(found):
            assert abs(frame.on_time_ns - 10_000_000 - i * NS) < tolerance_ns, (rate, frame.on_time_ns)
            assert tai_of(frame.fields, TABLE) == DAY_START + (k + i) * NS
