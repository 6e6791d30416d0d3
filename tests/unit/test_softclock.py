"""The software clock: served time as a piecewise-linear function of a free-running counter."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.clock.softclock import SoftClock
from appliance.units import NS_PER_S

RAW0 = 5_000_000_123  # the counter's reading when the clock starts
SERVED0 = 1_782_000_037 * NS_PER_S  # the served time it starts from

freqs = st.floats(-2000.0, 2000.0, allow_nan=False)
offsets = st.integers(0, 10**13)  # up to about three hours of counter


def test_serves_the_start_time_then_runs_at_the_counters_rate() -> None:
    clock = SoftClock(RAW0, SERVED0)
    assert clock.served_ns(RAW0) == SERVED0
    assert clock.served_ns(RAW0 + 3 * NS_PER_S + 7) == SERVED0 + 3 * NS_PER_S + 7
    assert clock.steps == 0


def test_a_frequency_offset_gains_that_many_ns_per_second() -> None:
    clock = SoftClock(RAW0, SERVED0, freq_ppb=100.0)
    assert clock.served_ns(RAW0 + NS_PER_S) == SERVED0 + NS_PER_S + 100
    assert clock.served_ns(RAW0 + 3600 * NS_PER_S) == SERVED0 + 3600 * NS_PER_S + 360_000


@settings(max_examples=200, deadline=None)
@given(f1=freqs, f2=freqs, at=offsets, later=st.integers(0, 10**12))
def test_changing_the_frequency_never_moves_the_served_time(f1: float, f2: float, at: int, later: int) -> None:
    clock = SoftClock(RAW0, SERVED0, f1)
    before = clock.served_ns(RAW0 + at)
    clock.set_frequency(f2, RAW0 + at)
    assert clock.served_ns(RAW0 + at) == before
    # ...and from there on it runs at the new rate.
    gained = clock.served_ns(RAW0 + at + later) - before - later
    assert abs(gained - later * f2 * 1e-9) <= 1.0


def test_served_time_is_continuous_across_a_frequency_change_ns_by_ns() -> None:
    clock = SoftClock(RAW0, SERVED0, 37.3)
    at = RAW0 + 10 * NS_PER_S + 1
    readings = [clock.served_ns(at + d) for d in range(-3, 0)]
    clock.set_frequency(-1500.0, at)
    readings += [clock.served_ns(at + d) for d in range(0, 4)]
    assert all(b - a == 1 for a, b in zip(readings, readings[1:]))


def test_sub_nanosecond_corrections_accumulate() -> None:
    # A servo re-anchors every second with 0.3 ppb: the served clock must gain 0.3 ns every second, not nothing
    # (rounding each re-anchor to whole ns would drop the whole correction).
    clock = SoftClock(RAW0, SERVED0)
    for k in range(1000):
        clock.set_frequency(0.3, RAW0 + k * NS_PER_S)
    gained = [clock.served_ns(RAW0 + k * NS_PER_S) - (SERVED0 + k * NS_PER_S) for k in (10, 100, 1000)]
    assert gained == [3, 30, 300]


@settings(max_examples=100, deadline=None)
@given(f=st.floats(-0.99, 0.99, allow_nan=False), seconds=st.integers(1, 3000))
def test_reanchoring_every_second_matches_one_long_segment(f: float, seconds: int) -> None:
    stepped, straight = SoftClock(RAW0, SERVED0), SoftClock(RAW0, SERVED0, f)
    for k in range(seconds):
        stepped.set_frequency(f, RAW0 + k * NS_PER_S)
    end = RAW0 + seconds * NS_PER_S
    assert abs(stepped.served_ns(end) - straight.served_ns(end)) <= 1
    assert abs(stepped.served_ns(end) - SERVED0 - seconds * NS_PER_S - f * seconds) <= 1


@settings(max_examples=200, deadline=None)
@given(f=freqs, at=offsets, delta=st.integers(-10**12, 10**12), later=st.integers(0, 10**9))
def test_a_step_adds_exactly_delta(f: float, at: int, delta: int, later: int) -> None:
    clock, twin = SoftClock(RAW0, SERVED0, f), SoftClock(RAW0, SERVED0, f)
    clock.set_frequency(f, RAW0 + 17)  # leave a fraction of a ns in the anchor
    twin.set_frequency(f, RAW0 + 17)
    clock.step(delta, RAW0 + at)
    assert clock.served_ns(RAW0 + at) == twin.served_ns(RAW0 + at) + delta
    assert clock.served_ns(RAW0 + at + later) == twin.served_ns(RAW0 + at + later) + delta
    assert (clock.steps, twin.steps) == (1, 0)


def test_steps_are_counted() -> None:
    clock = SoftClock(RAW0, SERVED0)
    clock.step(-1_000_000, RAW0 + NS_PER_S)
    clock.step(5, RAW0 + 2 * NS_PER_S)
    assert clock.steps == 2
    assert clock.served_ns(RAW0 + 2 * NS_PER_S) == SERVED0 + 2 * NS_PER_S - 1_000_000 + 5


def test_served_before_the_anchor_extends_the_current_line_backwards() -> None:
    clock = SoftClock(RAW0, SERVED0, 100.0)
    assert clock.served_ns(RAW0 - NS_PER_S) == SERVED0 - NS_PER_S - 100
    assert clock.served_ns(RAW0 - 1) == SERVED0 - 1
    anchor = RAW0 + 10 * NS_PER_S
    clock.set_frequency(-250.0, anchor)
    at_anchor = clock.served_ns(anchor)
    assert at_anchor == SERVED0 + 10 * NS_PER_S + 1000
    # A reading taken just before the change (a timestamp that arrives late) is on the new line, extended back.
    assert clock.served_ns(anchor - NS_PER_S) == at_anchor - NS_PER_S + 250
    assert clock.served_ns(anchor - 2 * NS_PER_S) == at_anchor - 2 * NS_PER_S + 500


@settings(max_examples=100, deadline=None)
@given(f=freqs, at=offsets, back=st.integers(0, 10**12))
def test_before_and_after_the_anchor_lie_on_one_line(f: float, at: int, back: int) -> None:
    clock = SoftClock(RAW0, SERVED0)
    clock.set_frequency(f, RAW0 + at)
    base = clock.served_ns(RAW0 + at)
    assert abs(clock.served_ns(RAW0 + at - back) - base + back + back * f * 1e-9) <= 1.0
