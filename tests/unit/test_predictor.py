"""The holdover predictor on synthetic free-running phase: x(t) = x0 + y t + a t^2/2 (+ c * temperature) + noise."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.clock.oscillator import OSCILLATORS
from appliance.clock.predictor import MIN_LEARN_S, HoldoverPredictor, Prediction

HOUR = 3600
# A quiet oscillator whose datasheet allows for real aging, so an hour or two of data can resolve it.
QUIET = dataclasses.replace(OSCILLATORS["rubidium"], aging_ppb_per_day=5.0, initial_offset_ppb=50.0,
                            temp_coeff_ppb_per_k=1.0)
X0, Y, A = 100.0, 20.0, 2e-5  # ns, ppb, ppb/s (1.7 ppb/day)


def feed(p: HoldoverPredictor, start_s: int, stop_s: int, y: float = Y, a: float = A, noise_ns: float = 2.0,
         seed: int = 1, temp: Callable[[int], float | None] = lambda _t: None, tempco: float = 0.0) -> None:
    rng = np.random.default_rng((seed, start_s))
    heat = 0.0  # integral of tempco * (T - 25) over time: the phase the temperature added
    for t in range(start_s, stop_s):
        temp_c = temp(t)
        if temp_c is not None:
            heat += tempco * (temp_c - 25.0)
        p.learn(float(t), X0 + y * t + 0.5 * a * t * t + heat + rng.normal(0.0, noise_ns), temp_c)


def learned(spec=QUIET, seconds: int = 2 * HOUR, **kw) -> HoldoverPredictor:
    p = HoldoverPredictor(spec)
    feed(p, 0, seconds, **kw)
    return p


def test_estimates_frequency_and_aging_within_tolerance() -> None:
    p = HoldoverPredictor(QUIET)
    feed(p, 0, HOUR)
    early = p.predict(float(HOUR))
    feed(p, HOUR, 4 * HOUR)
    late = p.predict(float(4 * HOUR))
    assert early is not None and late is not None
    assert abs(late.frequency_ppb - (Y + A * 4 * HOUR)) < 0.005  # the frequency at the moment of loss
    assert abs(late.aging_ppb_per_s - A) < 1e-6  # 5 %
    assert abs(late.frequency_ppb - (Y + A * 4 * HOUR)) < 4 * late.frequency_sigma_ppb
    assert abs(late.aging_ppb_per_s - A) < 4 * late.aging_sigma_ppb_per_s
    # More data, tighter estimates.
    assert late.frequency_sigma_ppb < early.frequency_sigma_ppb
    assert late.aging_sigma_ppb_per_s < early.aging_sigma_ppb_per_s / 2
    assert late.learned_s > early.learned_s


def test_an_ocxo_frequency_is_learned_to_its_own_stability() -> None:
    p = learned(OSCILLATORS["ocxo"], 2 * HOUR)
    pred = p.predict(float(2 * HOUR))
    assert pred is not None
    assert abs(pred.frequency_ppb - (Y + A * 2 * HOUR)) < 3 * pred.frequency_sigma_ppb
    assert pred.frequency_sigma_ppb < 0.1


def test_the_frequency_offset_is_signal_not_measurement_noise() -> None:
    # Same noise, different oscillator frequency: how well the filter knows y must not depend on how large y is.
    slow, fast = (learned(QUIET, HOUR, y=y, a=0.0).predict(float(HOUR)) for y in (0.0, 200.0))
    assert slow is not None and fast is not None
    assert fast.frequency_sigma_ppb == pytest.approx(slow.frequency_sigma_ppb, rel=0.01)
    assert fast.frequency_ppb == pytest.approx(200.0, abs=5 * fast.frequency_sigma_ppb)


def test_prediction_extrapolates_frequency_to_the_origin() -> None:
    p = learned(seconds=2 * HOUR)
    now, later = p.predict(float(2 * HOUR)), p.predict(float(3 * HOUR))
    assert now is not None and later is not None
    assert later.origin_s == 3 * HOUR
    assert later.frequency_ppb == pytest.approx(now.frequency_ppb + now.aging_ppb_per_s * HOUR, abs=1e-9)
    assert later.frequency_sigma_ppb > now.frequency_sigma_ppb
    assert now.oscillator_ppb(2 * HOUR + 100.0) == pytest.approx(now.frequency_ppb + 100.0 * now.aging_ppb_per_s)


@pytest.mark.parametrize("spec", [QUIET, OSCILLATORS["ocxo"], OSCILLATORS["tcxo"]], ids=["quiet", "ocxo", "tcxo"])
def test_uncertainty_starts_at_zero_and_grows_monotonically(spec) -> None:
    p = learned(spec, HOUR)
    pred = p.predict(float(HOUR))
    assert pred is not None
    assert p.uncertainty_ns(pred, 0.0) == 0.0
    grid = [0.0, 0.5, 1.0, 2.0, 10.0] + [60.0 * k for k in range(1, 4 * 24 * 60, 7)]
    bounds = [p.uncertainty_ns(pred, dt) for dt in grid]
    assert all(b > a for a, b in zip(bounds, bounds[1:]))


@settings(max_examples=100, deadline=None)
@given(sy=st.floats(0.0, 10.0), sa=st.floats(0.0, 1e-4), corr=st.floats(0.0, 1.0), dt=st.floats(0.0, 1e6),
       more=st.floats(0.001, 1e6))
def test_uncertainty_is_monotonic_for_any_filter_covariance(sy: float, sa: float, corr: float, dt: float,
                                                             more: float) -> None:
    # A prediction at (or after) the last filter point has y and a positively correlated.
    p = HoldoverPredictor(OSCILLATORS["ocxo"])
    pred = Prediction(0.0, 10.0, sy, 1e-5, sa, None, 0.0, 3600.0, cov_ya=corr * sy * sa)
    assert p.uncertainty_ns(pred, dt + more) >= p.uncertainty_ns(pred, dt)


def test_without_a_thermometer_the_datasheet_tempco_times_the_allowed_excursion_is_added() -> None:
    spec = OSCILLATORS["ocxo"]
    cool, hot = HoldoverPredictor(spec, holdover_temp_k=0.0), HoldoverPredictor(spec, holdover_temp_k=2.0)
    pred = Prediction(0.0, 10.0, 0.01, 0.0, 1e-7, None, 0.0, 3600.0)
    for dt in (1.0, 600.0, 86_400.0):
        assert hot.uncertainty_ns(pred, dt) - cool.uncertainty_ns(pred, dt) == pytest.approx(
            2.0 * spec.temp_coeff_ppb_per_k * dt)


def test_outliers_are_gated_and_do_not_move_the_estimate() -> None:
    gated, twin = learned(seconds=HOUR), learned(seconds=HOUR)
    rng = np.random.default_rng(7)
    for t in range(HOUR, HOUR + 60):  # a minute of samples 5 us off (a reference gone bad)
        gated.learn(float(t), X0 + Y * t + 0.5 * A * t * t + 5000.0 + rng.normal(0.0, 2.0))
    feed(twin, HOUR, HOUR + 60)  # the twin saw good data instead
    feed(gated, HOUR + 60, HOUR + 600)
    feed(twin, HOUR + 60, HOUR + 600)
    assert gated.outliers >= 2 and twin.outliers == 0
    a, b = gated.predict(HOUR + 600.0), twin.predict(HOUR + 600.0)
    assert a is not None and b is not None
    assert abs(a.frequency_ppb - b.frequency_ppb) < 0.1 * b.frequency_sigma_ppb
    assert abs(a.aging_ppb_per_s - b.aging_ppb_per_s) < 0.1 * b.aging_sigma_ppb_per_s


def test_temperature_coefficient_is_learned_when_temperature_varies() -> None:
    def swing(t: int) -> float:
        return 25.0 + 5.0 * math.sin(2 * math.pi * t / 7200)

    p = learned(OSCILLATORS["ocxo"], 6 * HOUR, temp=swing, tempco=0.1, a=0.0)
    pred = p.predict(float(6 * HOUR))
    assert pred is not None and pred.temp_coeff_ppb_per_k is not None
    assert pred.temp_coeff_ppb_per_k == pytest.approx(0.1, abs=0.01)
    assert pred.temp_coeff_sigma_ppb_per_k < 0.01
    assert pred.frequency_ppb == pytest.approx(Y, abs=0.05)
    # The predicted frequency follows the temperature with the learned coefficient.
    assert pred.oscillator_ppb(pred.origin_s, 35.0) - pred.oscillator_ppb(pred.origin_s, 25.0) == pytest.approx(
        10 * pred.temp_coeff_ppb_per_k)


@pytest.mark.parametrize("temp", [lambda _t: 25.0, lambda _t: 31.0, lambda _t: None], ids=["25C", "31C", "none"])
def test_temperature_coefficient_is_none_when_temperature_does_not_vary(temp) -> None:
    pred = learned(OSCILLATORS["ocxo"], HOUR, temp=temp).predict(float(HOUR))
    assert pred is not None and pred.temp_coeff_ppb_per_k is None
    assert pred.oscillator_ppb(pred.origin_s, 40.0) == pred.frequency_ppb  # no coefficient, no correction


def test_predicts_only_after_enough_history() -> None:
    p = HoldoverPredictor(OSCILLATORS["ocxo"])
    assert not p.can_predict() and p.predict(0.0) is None and p.learned_s == 0.0
    t = 0
    while not p.can_predict():
        feed(p, t, t + 1)
        t += 1
        assert t < MIN_LEARN_S + 3 * 16, "never became able to predict"
    assert p.learned_s >= MIN_LEARN_S and t >= MIN_LEARN_S
    assert p.predict(float(t)) is not None


def test_forget_starts_over() -> None:
    p = learned(seconds=HOUR)
    p.forget()
    assert not p.can_predict() and p.learned_s == 0.0 and p.predict(float(HOUR)) is None
    feed(p, HOUR, 2 * HOUR)
    assert p.can_predict() and p.learned_s < HOUR
