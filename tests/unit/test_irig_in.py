"""The IRIG-B input decoder (pure core): signals rendered by the appliance's own IRIG-B output, fed in awkward chunks,
decode to the right second on the right on-time instant; garbage, noise and corrupted frames are counted, never
emitted, never raised."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance import leap
from appliance.protocol.irig.render import frames_for
from appliance.protocol.irig.timecode import (ELEMENT_NS, LS, MARK, ONE, ZERO, CodedExpression, encode,
                                             fields_for_second)
from appliance.protocol.irig.waveform import am_frame_values, am_samples, dcls_edges
from appliance.refs.irig_in import AM_UNCERTAINTY_NS, DCLS_UNCERTAINTY_NS, IrigDecoder, quality_bound_ns
from appliance.refs.model import PairedTime

NS = 1_000_000_000
TABLE = leap._default_table()
LEAP = leap.utc_fields_to_tai(2016, 12, 31, 23, 59, 55, 0, TABLE)  # 23:59:60 follows five seconds later
NEW_YEAR = leap.utc_fields_to_tai(2026, 12, 31, 23, 59, 56, 0, TABLE)
RAW0 = 987_654_321_012  # the local counter at the first frame's on-time point: the counter is not TAI
RATE = 48_000
QUALITY = 3  # IEEE 1344: within 100 ns


def decoder(digit: int = 4, year: int = 2016, **kw: object) -> IrigDecoder:
    return IrigDecoder("irig", CodedExpression(digit), TABLE, year, **kw)  # type: ignore[arg-type]


def frames(start: int, seconds: int, digit: int = 4, quality: int = QUALITY) -> list[list[int]]:
    return frames_for(CodedExpression(digit), start, seconds, TABLE, quality)


def dcls(frame_list: list[list[int]], raw0: int = RAW0) -> list[tuple[int, int]]:
    """The renderer's edges on the counter, led in by the previous frame's P0 as a live signal is."""
    lead = [(raw0 - ELEMENT_NS, 1), (raw0 - ELEMENT_NS + 8_000_000, 0)]
    return lead + [(e.t_ns + raw0, e.level) for e in dcls_edges(frame_list)]


def chunks(items: list, sizes: list[int]) -> list[list]:
    out, i, k = [], 0, 0
    while i < len(items):
        n = sizes[k % len(sizes)]
        out.append(items[i:i + n])
        i, k = i + n, k + 1
    return out


def feed_edges(d: IrigDecoder, edges: list[tuple[int, int]], sizes: list[int]) -> list[PairedTime]:
    return [p for c in chunks(edges, sizes) for p in d.feed_edges(c)]


def feed_samples(d: IrigDecoder, samples: list[int] | np.ndarray, first_raw_ns: int, sizes: list[int],
                 rate: int = RATE) -> list[PairedTime]:
    out, i = [], 0
    for c in chunks(list(samples), sizes):
        out += d.feed_samples(c, first_raw_ns + i * NS // rate, rate)
        i += len(c)
    return out


def am_raw0(rate: int = RATE) -> int:
    """The first sample's instant so that the first on-time point (after the 10 ms lead-in) is at RAW0."""
    return RAW0 - (rate // 100) * NS // rate


# --- DC level shift -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sizes", [[1], [2], [3, 7], [199, 1, 400], [10_000]])
def test_dcls_across_a_leap_second_each_confirmed_frame_on_its_rising_edge(sizes: list[int]) -> None:
    d = decoder()
    got = feed_edges(d, dcls(frames(LEAP, 10)), sizes)
    # the first frame has nothing to confirm it; every later one is emitted, exactly on Pr's rising edge
    assert [(p.edge_raw_ns, p.tai_ns) for p in got] == [(RAW0 + k * NS, LEAP + k * NS) for k in range(1, 10)]
    labels = [str(leap.tai_to_utc(p.tai_ns, TABLE))[11:19] for p in got]
    assert labels[3:6] == ["23:59:59", "23:59:60", "00:00:00"]
    assert all(p.ref == "irig" and p.uncertainty_ns == DCLS_UNCERTAINTY_NS + 100 for p in got)
    s = d.snapshot()
    assert s["frames"] == 10 and s["emitted"] == 9 and not any(s["rejects"].values()) and s["noise_pulses"] == 0
    assert s["last"]["utc"].startswith("2017-01-01T00:00:03")


@pytest.mark.parametrize("digit", [0, 1, 2, 3, 4, 5, 6, 7])
def test_every_coded_expression_through_a_new_year(digit: int) -> None:
    d = decoder(digit, year=2026)
    got = feed_edges(d, dcls(frames(NEW_YEAR, 8, digit)), [5, 3])
    assert [p.tai_ns for p in got] == [NEW_YEAR + k * NS for k in range(1, 8)]
    assert d.snapshot()["last_fields"]["year"] == 2027 and d.snapshot()["last_fields"]["day_of_year"] == 1
    if not CodedExpression(digit).has_cf:  # no time quality coded: nothing added for it
        assert got[0].uncertainty_ns == DCLS_UNCERTAINTY_NS


@pytest.mark.parametrize("digit", [2, 3])  # no year coded
def test_without_a_coded_year_a_new_year_is_seen_as_the_decoder_starts_and_across_a_gap(digit: int) -> None:
    d = decoder(digit, year=2026)  # the hint: the year it was when the input started
    got = feed_edges(d, dcls(frames(NEW_YEAR + 3 * NS, 3, digit), RAW0 + 3 * NS), [7])  # 23:59:59, 00:00:00, :01
    assert [p.tai_ns for p in got] == [NEW_YEAR + 4 * NS, NEW_YEAR + 5 * NS]
    d = decoder(digit, year=2026)
    early = dcls(frames(NEW_YEAR - 10 * NS, 3, digit), RAW0 - 10 * NS)  # 23:59:46 .. :48, then the signal is lost
    later = dcls(frames(NEW_YEAR + 40 * NS, 3, digit), RAW0 + 40 * NS)  # back at 00:00:36, day 1
    got = feed_edges(d, early, [50]) + feed_edges(d, later, [50])
    assert [p.tai_ns for p in got] == [NEW_YEAR + k * NS for k in (-9, -8, 41, 42)]
    assert d.snapshot()["last"]["utc"].startswith("2027-01-01T00:00:38")


def test_the_century_of_a_two_digit_year_is_the_one_nearest_the_hint() -> None:
    start = leap.utc_fields_to_tai(2099, 12, 31, 23, 59, 58, 0, TABLE)
    got = feed_edges(decoder(4, year=2099), dcls(frames(start, 5)), [17])
    assert [str(leap.tai_to_utc(p.tai_ns, TABLE))[:4] for p in got] == ["2099", "2100", "2100", "2100"]


def test_local_time_with_its_offset_in_the_control_functions_decodes_to_utc() -> None:
    from appliance.edge.irig.cli import offset_function

    coded = frames_for(CodedExpression(4), NEW_YEAR, 6, TABLE, QUALITY, offset_function("Asia/Kolkata"))
    d = decoder(4, year=2027)
    got = feed_edges(d, dcls(coded), [11])
    assert [p.tai_ns for p in got] == [NEW_YEAR + k * NS for k in range(1, 6)]
    assert d.snapshot()["last_fields"]["offset_half_hours"] == -11  # IST is UTC+5:30: IRIG time + offset = UTC


def test_cable_delay_comes_off_and_the_source_quality_adds_to_the_uncertainty() -> None:
    got = feed_edges(decoder(delay_ns=1_250, uncertainty_ns=50.0), dcls(frames(LEAP, 3, quality=7)), [64])
    assert [p.edge_raw_ns for p in got] == [RAW0 + k * NS - 1_250 for k in (1, 2)]
    assert got[0].uncertainty_ns == 50.0 + quality_bound_ns(7) == 50.0 + 1_000_000  # code 7: within 1 ms
    assert quality_bound_ns(0) == 0.0 and quality_bound_ns(1) == 1.0


def test_a_source_reporting_a_fault_is_never_used() -> None:
    d = decoder()
    assert feed_edges(d, dcls(frames(LEAP, 5, quality=15)), [33]) == []
    assert d.snapshot()["rejects"]["quality_fault"] == 4 and d.snapshot()["last_fields"]["time_quality"] == 15


def corrupt(frame_list: list[list[int]], k: int, element: int, value: int) -> list[list[int]]:
    out = [list(f) for f in frame_list]
    out[k][element] = value
    return out


@pytest.mark.parametrize("element,value,reason", [
    (1, ONE, "bad_bcd"),  # seconds units flipped: parity (and SBS) no longer agree
    (LS, ONE, "bad_bcd"),  # a control bit flipped: parity
    (29, ZERO, "bad_marker"),  # a position identifier lost
    (45, MARK, "bad_marker"),  # a position identifier where none belongs
])
def test_one_corrupted_frame_is_rejected_and_the_next_waits_for_a_new_confirmation(element: int, value: int,
                                                                                   reason: str) -> None:
    d = decoder()
    got = feed_edges(d, dcls(corrupt(frames(LEAP, 8), 3, element, value)), [9])
    # frame 3 rejected; frame 4 has no valid frame before it; from frame 5 on each is confirmed again
    assert [p.tai_ns for p in got] == [LEAP + k * NS for k in (1, 2, 5, 6, 7)]
    assert d.snapshot()["rejects"][reason] == 1 and sum(d.snapshot()["rejects"].values()) == 1


def test_a_well_formed_frame_naming_the_wrong_second_is_inconsistent() -> None:
    coded = frames(LEAP, 8)
    coded[3] = encode(fields_for_second(LEAP + 30 * NS, TABLE, QUALITY), CodedExpression(4))
    d = decoder()
    got = feed_edges(d, dcls(coded), [1000])
    assert [p.tai_ns for p in got] == [LEAP + k * NS for k in (1, 2, 5, 6, 7)]
    assert d.snapshot()["rejects"]["inconsistent"] == 2  # frame 3 against 2, then 4 against 3


def test_a_glitch_inside_a_frame_rejects_that_frame_as_noise() -> None:
    edges = dcls(frames(LEAP, 6))
    t = RAW0 + 2 * NS + 33 * ELEMENT_NS + 6_000_000  # in the space after element 33 of frame 2
    edges += [(t, 1), (t + 300_000, 0)]
    d = decoder()
    got = feed_edges(d, sorted(edges), [7])
    assert [p.tai_ns for p in got] == [LEAP + k * NS for k in (1, 4, 5)]
    s = d.snapshot()
    assert s["rejects"]["noise"] == 1 and s["noise_pulses"] == 1


def test_a_signal_cut_mid_frame_then_back_emits_nothing_wrong() -> None:
    edges = dcls(frames(LEAP, 3))
    cut = [e for e in edges if e[0] < RAW0 + 2 * NS + 400 * 1_000_000]  # frame 2 stops at 400 ms
    later = dcls(frames(LEAP + 60 * NS, 4), RAW0 + 60 * NS)
    d = decoder()
    got = feed_edges(d, cut, [13]) + feed_edges(d, later, [13])
    assert [p.tai_ns for p in got] == [LEAP + NS] + [LEAP + (60 + k) * NS for k in (1, 2, 3)]
    assert d.snapshot()["rejects"]["noise"] == 1  # the truncated frame, seen when the signal came back
    assert d.feed_edges(cut[:37]) == []  # a partial frame alone: nothing, and no complaint yet


def test_garbage_edges_and_malformed_input_never_raise() -> None:
    d = decoder()
    assert d.feed_edges([(None, 1), ("x",), (5,), (10, 1), (5, 0), (7, 1), (8, 1), (2**70, 0)]) == []  # type: ignore[list-item]
    assert d.feed_samples([1, 2, 3], 0, 100) == [] and d.feed_samples(["a"], 0, RATE) == []  # type: ignore[list-item]
    assert d.feed_samples([float("nan")], 0, RATE) == [] and d.feed_samples([], 0, RATE) == []
    s = d.snapshot()
    assert s["bad_input"] == 6 and s["emitted"] == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-2**40, 2**40), st.integers(0, 1)), max_size=400))
def test_random_edges_decode_to_nothing_and_never_raise(edges: list[tuple[int, int]]) -> None:
    d = decoder()
    assert d.feed_edges(sorted(edges)) == [] and d.feed_edges(edges) == []


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from([ZERO, ONE]), min_size=100, max_size=100), min_size=2, max_size=4))
def test_random_bits_between_the_right_markers_are_never_emitted(bits: list[list[int]]) -> None:
    junk = [[MARK if i in (0, 9, 19, 29, 39, 49, 59, 69, 79, 89, 99) else b for i, b in enumerate(f)] for f in bits]
    d = decoder()
    assert d.feed_edges(dcls(junk)) == []
    s = d.snapshot()
    assert s["rejects"]["bad_bcd"] + s["frames"] == len(junk) and s["rejects"]["bad_marker"] == 0


@settings(max_examples=40, deadline=None)
@given(start_s=st.integers(leap.utc_fields_to_tai(2000, 1, 1, 0, 0, 0, 0, TABLE) // NS,
                           leap.utc_fields_to_tai(2098, 12, 31, 0, 0, 0, 0, TABLE) // NS),
       raw0=st.integers(0, 2**62), digit=st.sampled_from([0, 4, 5, 7]), seed=st.integers(0, 2**32))
def test_any_start_second_decodes_exactly_on_its_edges(start_s: int, raw0: int, digit: int, seed: int) -> None:
    start = start_s * NS
    year = leap.tai_to_utc(start, TABLE).year
    rng = random.Random(seed)
    d = decoder(digit, year=year + rng.choice((-1, 0, 1)))  # a hint a year out still finds the century
    got = feed_edges(d, dcls(frames(start, 3, digit), raw0), [rng.randint(1, 300) for _ in range(5)])
    assert [(p.edge_raw_ns, p.tai_ns) for p in got] == [(raw0 + k * NS, start + k * NS) for k in (1, 2)]


# --- amplitude modulation -----------------------------------------------------------------------------------------

def awkward(n: int, seed: int = 1) -> list[int]:
    """Chunk sizes: single samples, odd splits, and chunks longer than a frame."""
    rng = random.Random(seed)
    return [rng.choice((1, 1, 2, 3, 47, 480, 4_799, 48_001, 100_003)) for _ in range(n)]


@pytest.mark.parametrize("sizes", [[1_000_000], [4_801, 13, 2_999, 1], awkward(400)])
def test_am_across_a_leap_second_in_awkward_chunks(sizes: list[int]) -> None:
    d = decoder()
    got = feed_samples(d, am_samples(frames(LEAP, 8), RATE), am_raw0(), sizes)
    assert [p.tai_ns for p in got] == [LEAP + k * NS for k in range(1, 8)]
    # the rendered on-time point is on a sample: the fitted crossing lands on it
    assert all(abs(p.edge_raw_ns - (RAW0 + k * NS)) <= 20 for k, p in enumerate(got, 1)), got
    assert all(AM_UNCERTAINTY_NS + 100 <= p.uncertainty_ns < AM_UNCERTAINTY_NS + 200 for p in got)
    s = d.snapshot()
    assert not any(s["rejects"].values()) and s["am"]["rate_hz"] == RATE and s["restarts"] == 0


def test_am_one_sample_at_a_time_through_a_new_year() -> None:
    d = decoder(2, year=2026)  # no year coded: it turns over with the day of year
    got = feed_samples(d, am_samples(frames(NEW_YEAR + 2 * NS, 4, 2), 8_000), am_raw0(8_000), [1], 8_000)
    assert [p.tai_ns for p in got][-2:] == [NEW_YEAR + 4 * NS, NEW_YEAR + 5 * NS]  # 2027-01-01 00:00:00, :01
    assert all(abs(p.edge_raw_ns - (RAW0 + (p.tai_ns - NEW_YEAR - 2 * NS))) <= 125_000 for p in got)  # a sample


def live_am(frame_list: list[list[int]], rate: int, phase_ns: float, ppm: float = 0.0) -> np.ndarray:
    """Samples on the counter's grid (sample n at n/rate) of a signal whose first on-time point is ``phase_ns`` after
    sample 0 and whose seconds last (1 + ppm) s of the counter: the renderer the live output uses, off the grid."""
    t = np.arange(len(frame_list) * rate + rate // 10) * (NS / rate)
    tau = (t - phase_ns) / (1 + ppm * 1e-6)
    out = np.zeros(len(t), dtype=np.int16)
    for k, frame in enumerate(frame_list):
        inside = (tau >= k * NS) & (tau < (k + 1) * NS)
        out[inside] = am_frame_values(frame, tau[inside] - k * NS)
    before = tau < 0  # the lead-in: the end of a frame, as wavout starts a stream
    out[before] = am_frame_values([MARK] * 100, tau[before] + NS)
    return out


@pytest.mark.parametrize("rate,phase_ns,ppm", [(48_000, 10_007_311.0, 0.0), (44_100, 15_333_333.3, 0.0),
                                               (48_000, 12_345_678.9, 100.0), (16_000, 20_000_031.0, -60.0)])
def test_am_on_time_between_samples_and_a_card_off_its_rate(rate: int, phase_ns: float, ppm: float) -> None:
    d = decoder()
    samples = live_am(frames(LEAP, 6), rate, phase_ns, ppm)
    got = feed_samples(d, samples, RAW0, awkward(300, seed=rate), rate)
    assert [p.tai_ns for p in got] == [LEAP + k * NS for k in range(1, 6)]
    for k, p in enumerate(got, 1):
        expected = RAW0 + phase_ns + k * NS * (1 + ppm * 1e-6)
        assert abs(p.edge_raw_ns - expected) < 0.05 * NS / rate, (k, p.edge_raw_ns - expected)  # a 20th of a sample


def test_am_with_noise_still_decodes_and_pure_noise_decodes_to_nothing() -> None:
    rng = np.random.default_rng(7)
    clean = np.array(am_samples(frames(LEAP, 6), RATE), dtype=np.float64)
    noisy = np.clip(clean + rng.normal(0, 1000, len(clean)), -32768, 32767).astype(np.int16)  # space/noise 19 dB
    d = decoder()
    got = feed_samples(d, noisy, am_raw0(), [4_799])
    assert [p.tai_ns for p in got] == [LEAP + k * NS for k in range(1, 6)]
    assert all(abs(p.edge_raw_ns - (RAW0 + k * NS)) < NS // RATE for k, p in enumerate(got, 1))
    d = decoder()
    assert feed_samples(d, rng.integers(-32768, 32767, 3 * RATE), 0, [4_800]) == []
    assert d.feed_samples(np.zeros(RATE, dtype=np.int16), 3 * NS, RATE) == []  # silence: no carrier


def test_a_gap_in_the_samples_starts_the_stream_again() -> None:
    samples = am_samples(frames(LEAP, 9), RATE)
    cut = len(samples) // 2
    d = decoder()
    got = d.feed_samples(samples[:cut], am_raw0(), RATE)
    # the second half arrives half a millisecond later than its samples' place: not the same stream
    got += d.feed_samples(samples[cut:], am_raw0() + cut * NS // RATE + 500_000, RATE)
    assert d.snapshot()["restarts"] == 1
    assert all(p.tai_ns in {LEAP + k * NS for k in range(1, 9)} for p in got)
    assert [p.tai_ns for p in got][-3:] == [LEAP + k * NS for k in (6, 7, 8)]


@settings(max_examples=8, deadline=None)
@given(start_s=st.integers(leap.utc_fields_to_tai(2001, 1, 1, 0, 0, 0, 0, TABLE) // NS,
                           leap.utc_fields_to_tai(2090, 1, 1, 0, 0, 0, 0, TABLE) // NS),
       raw0=st.integers(0, 2**62), seed=st.integers(0, 2**32))
def test_am_any_start_second(start_s: int, raw0: int, seed: int) -> None:
    start = start_s * NS
    d = decoder(5, year=leap.tai_to_utc(start, TABLE).year)
    first = raw0 - (RATE // 100) * NS // RATE
    got = feed_samples(d, am_samples(frames(start, 3, 5), RATE), first, awkward(100, seed))
    assert [p.tai_ns for p in got] == [start + NS, start + 2 * NS]
    assert all(abs(p.edge_raw_ns - (first + (RATE // 100 + k * RATE) * NS // RATE)) <= 20 for k, p in enumerate(got, 1))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-32768, 32767), max_size=3000), st.integers(-2**62, 2**62))
def test_random_samples_never_raise(samples: list[int], first: int) -> None:
    d = decoder()
    assert d.feed_samples(samples, first, RATE) == [] and d.feed_samples(samples, first, RATE) == []
