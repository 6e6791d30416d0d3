"""The PI servo, tested on recorded offset sequences: what it answers to a clock that runs off frequency.

The recordings are made here by a tiny closed loop: an oscillator ``error_ppb`` off frequency, read once a second
with white phase noise, whose frequency correction is whatever the servo answered (and whose phase is stepped when
the servo says JUMP).  The expected behaviour is stored as assertions; one short sequence is frozen verbatim.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.clock.servo import PiServo, ServoParams, ServoState
from appliance.units import NS_PER_S


def record(servo: PiServo, seconds: int, error_ppb: float = 50.0, noise_ns: float = 2.0, seed: int = 1,
           phase_ns: float = 0.0) -> list[tuple[float, float, ServoState, float]]:
    """(offset measured, frequency answered, state, learned frequency) for each second of the closed loop."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(seconds):
        offset = phase_ns + rng.normal(0.0, noise_ns)
        freq, state = servo.sample(offset, k * NS_PER_S)
        if state is ServoState.JUMP:
            phase_ns -= offset  # the caller steps the clock by -offset
        rows.append((offset, freq, state, servo.drift_ppb))
        phase_ns += error_ppb + freq  # one second at (error + correction) ppb, in ns
    return rows


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_converges_on_a_50_ppb_clock_with_2_ns_noise(seed: int) -> None:
    rows = record(PiServo(ServoParams(16.0)), 300, error_ppb=50.0, noise_ns=2.0, seed=seed)
    settled = rows[120:]  # about 7.5 time constants
    assert max(abs(offset) for offset, *_ in settled) < 10.0
    assert all(abs(learned + 50.0) < 0.5 for *_, learned in settled)
    # The answer itself carries the proportional term's response to the noise, but averages to the error.
    assert all(abs(freq + 50.0) < 1.0 for _, freq, *_ in settled)
    assert abs(np.mean([freq for _, freq, *_ in settled]) + 50.0) < 0.05
    assert {state for _, _, state, _ in rows[1:]} == {ServoState.LOCKED}


def test_a_longer_time_constant_converges_too_but_more_slowly() -> None:
    fast = record(PiServo(ServoParams(16.0)), 2000, noise_ns=0.0)
    slow = record(PiServo(ServoParams(64.0)), 2000, noise_ns=0.0)
    # Both see the first-sample proportional kick, then pull the phase in; the slow loop takes longer.
    first_in = [next(k for k in range(2, 2000) if all(abs(o) < 1.0 for o, *_ in rows[k:])) for rows in (fast, slow)]
    assert first_in[0] < first_in[1] < 2000
    assert abs(slow[-1][1] + 50.0) < 1e-3


def test_the_first_two_samples_estimate_the_frequency() -> None:
    servo = PiServo(ServoParams(16.0))
    assert servo.sample(100.0, 0) == (0.0, ServoState.UNLOCKED)
    freq, state = servo.sample(200.0, 2 * NS_PER_S)  # grew 100 ns in 2 s: the clock is 50 ppb fast
    assert state is ServoState.LOCKED
    assert servo.drift_ppb == pytest.approx(-50.0, abs=0.01)
    assert freq == pytest.approx(-50.0 - math.sqrt(2) / 16 * 200.0, abs=0.01)  # plus the proportional term


def test_the_estimate_cancels_the_rate_seen_under_the_current_correction() -> None:
    servo = PiServo(ServoParams(16.0), initial_freq_ppb=-30.0)  # already correcting 30 ppb of a 50 ppb error
    servo.sample(0.0, 0)
    servo.sample(20.0, NS_PER_S)
    assert servo.drift_ppb == pytest.approx(-50.0, abs=0.01)


def test_a_second_sample_at_the_same_instant_does_not_estimate() -> None:
    servo = PiServo(ServoParams(16.0))
    servo.sample(0.0, 5 * NS_PER_S)
    assert servo.sample(500.0, 5 * NS_PER_S) == (0.0, ServoState.UNLOCKED)
    servo.sample(50.0, 6 * NS_PER_S)
    assert servo.drift_ppb == pytest.approx(-50.0, abs=0.01)


def test_jumps_once_when_the_first_offset_is_beyond_the_step_threshold() -> None:
    rows = record(PiServo(ServoParams(16.0, step_threshold_ns=100_000)), 120, phase_ns=1_000_000.0)
    states = [state for _, _, state, _ in rows]
    assert states[:2] == [ServoState.UNLOCKED, ServoState.JUMP]
    assert states.count(ServoState.JUMP) == 1
    assert rows[1][1] == pytest.approx(-50.0, abs=3.0)  # the jump sample still carries the frequency estimate
    assert max(abs(offset) for offset, *_ in rows[2:]) < 100.0
    assert abs(rows[-1][0]) < 10.0


@pytest.mark.parametrize("phase_ns", [50_000.0, -99_000.0])
def test_offsets_within_the_step_threshold_are_slewed(phase_ns: float) -> None:
    rows = record(PiServo(ServoParams(16.0, step_threshold_ns=100_000)), 400, phase_ns=phase_ns, noise_ns=0.0)
    assert ServoState.JUMP not in {state for _, _, state, _ in rows}
    assert abs(rows[-1][0]) < 10.0


def test_slew_only_never_jumps_even_when_reset_with_stepping_allowed() -> None:
    servo = PiServo(ServoParams(16.0, slew_only=True))
    rows = record(servo, 50, phase_ns=5_000_000.0)
    servo.reset(step_allowed=True)
    rows += record(servo, 50, phase_ns=5_000_000.0)
    assert ServoState.JUMP not in {state for _, _, state, _ in rows}


def test_the_frequency_is_clamped_at_max_frequency_ppb() -> None:
    rows = record(PiServo(ServoParams(16.0, max_frequency_ppb=2000.0)), 60, error_ppb=3000.0)
    assert all(freq == -2000.0 for _, freq, *_ in rows[1:])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e7, 1e7, allow_nan=False), min_size=1, max_size=40),
       st.floats(1.0, 500.0), st.booleans())
def test_any_offset_sequence_stays_clamped_and_jumps_at_most_once(offsets: list[float], limit: float,
                                                                  slew_only: bool) -> None:
    servo = PiServo(ServoParams(16.0, max_frequency_ppb=limit, slew_only=slew_only))
    answers = [servo.sample(offset, k * NS_PER_S) for k, offset in enumerate(offsets)]
    assert all(abs(freq) <= limit and abs(servo.drift_ppb) <= limit for freq, _ in answers)
    jumps = [k for k, (_, state) in enumerate(answers) if state is ServoState.JUMP]
    if slew_only or len(offsets) < 2 or abs(offsets[1]) <= servo.params.step_threshold_ns:
        assert jumps == []
    else:
        assert jumps == [1]


def test_reset_reacquires_from_the_given_frequency_without_stepping_unless_allowed() -> None:
    servo = PiServo(ServoParams(16.0))
    record(servo, 100)
    servo.reset(-42.0)
    assert (servo.state, servo.freq_ppb, servo.drift_ppb) == (ServoState.UNLOCKED, -42.0, -42.0)
    assert servo.sample(1_000_000.0, 0) == (-42.0, ServoState.UNLOCKED)
    assert servo.sample(1_000_008.0, NS_PER_S)[1] is ServoState.LOCKED  # no step: not allowed
    assert servo.drift_ppb == pytest.approx(-50.0, abs=0.01)

    before = servo.freq_ppb
    servo.reset(step_allowed=True)  # no frequency given: keeps the one it had
    assert servo.freq_ppb == before and servo.state is ServoState.UNLOCKED
    servo.sample(1_000_000.0, 10 * NS_PER_S)
    assert servo.sample(1_000_000.0, 11 * NS_PER_S)[1] is ServoState.JUMP


def test_resume_keeps_the_frequency_and_tracks_at_once_without_stepping() -> None:
    servo = PiServo(ServoParams(16.0))
    record(servo, 100)
    servo.resume(-48.0, 100 * NS_PER_S)
    assert (servo.state, servo.freq_ppb, servo.drift_ppb) == (ServoState.LOCKED, -48.0, -48.0)
    freq, state = servo.sample(10.0, 101 * NS_PER_S)  # first sample after resume: PI, no re-estimate
    assert state is ServoState.LOCKED
    assert freq == pytest.approx(-48.0 - 10.0 / 256 - math.sqrt(2) / 16 * 10.0)
    rows = record(servo, 30, phase_ns=2_000_000.0)  # even a huge offset is never stepped after resume
    assert ServoState.JUMP not in {state for _, _, state, _ in rows}


def test_rejects_non_positive_time_constant_or_clamp() -> None:
    with pytest.raises(ValueError):
        PiServo(ServoParams(0.0))
    with pytest.raises(ValueError):
        PiServo(ServoParams(16.0, max_frequency_ppb=0.0))


# A frozen recording: (offset ns, local ns) and the exact frequencies the servo answered (tau 16 s).
FROZEN_INPUT = [(12.5, 1_000_000_000), (63.0, 2_000_000_100), (60.2, 3_000_000_050), (52.9, 4_000_000_300),
                (47.1, 5_000_000_000), (40.4, 6_000_000_200), (35.8, 7_000_000_000), (29.6, 8_000_000_400),
                (25.3, 9_000_000_100), (20.1, 10_000_000_000)]
FROZEN_OUTPUT = [0.0, -56.06846085184456, -56.056129716671464, -55.617535455498896, -55.288867358943335,
                 -54.8544779612621, -54.58773528411108, -54.15535257494151, -53.874110775405306, -53.49300698478249]


def test_frozen_regression_vector() -> None:
    servo = PiServo(ServoParams(16.0))
    answers = [servo.sample(offset, local) for offset, local in FROZEN_INPUT]
    assert [state for _, state in answers] == [ServoState.UNLOCKED] + [ServoState.LOCKED] * 9
    assert [freq for freq, _ in answers] == pytest.approx(FROZEN_OUTPUT, rel=1e-12, abs=1e-12)
