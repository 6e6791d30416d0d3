"""Unit tests for the simulated local oscillators (appliance.clock.oscillator)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from appliance.clock.oscillator import OSCILLATORS, REFERENCE_TEMP_C, OscillatorSpec, PowerLaw, power_law
from appliance.sim.oscillator import CHUNK_STEPS, SimOscillator, temperature_profile_sine, temperature_profile_steps

S_NS = 1_000_000_000
DAY_S = 86_400


def noise_free(spec: OscillatorSpec, **changes: float) -> OscillatorSpec:
    return dataclasses.replace(spec, adev_1s=0.0, adev_100s=0.0, adev_1d=0.0, white_pm_rms_ns=0.0, **changes)


# --- parameter table and power-law derivation -------------------------------------------------


def test_table_has_the_four_classes_with_sources() -> None:
    assert set(OSCILLATORS) == {"tcxo", "ocxo", "ocxo-hp", "rubidium"}
    for spec in OSCILLATORS.values():
        assert spec.source
        assert min(spec.adev_1s, spec.adev_100s, spec.adev_1d, spec.aging_ppb_per_day) > 0
    # better classes are better where their datasheets say so
    assert OSCILLATORS["tcxo"].adev_1s > OSCILLATORS["ocxo"].adev_1s > OSCILLATORS["ocxo-hp"].adev_1s
    assert OSCILLATORS["rubidium"].adev_1d < OSCILLATORS["ocxo-hp"].adev_1d
    assert OSCILLATORS["rubidium"].aging_ppb_per_day < OSCILLATORS["ocxo-hp"].aging_ppb_per_day


@pytest.mark.parametrize("name", sorted(OSCILLATORS))
def test_power_law_reproduces_table_adev(name: str) -> None:
    spec = OSCILLATORS[name]
    law = power_law(spec)
    assert all(h >= 0 for h in law)
    for tau_s, table in ((1.0, spec.adev_1s), (100.0, spec.adev_100s), (DAY_S, spec.adev_1d)):
        assert law.adev(tau_s) == pytest.approx(table, rel=0.10)


def test_power_law_of_pure_white_fm_and_noise_free_spec() -> None:
    white = dataclasses.replace(OSCILLATORS["rubidium"], adev_1s=1e-11, adev_100s=1e-12,
                                adev_1d=1e-11 / math.sqrt(DAY_S))
    law = power_law(white)
    assert law.h0 == pytest.approx(2e-22, rel=1e-6)
    assert law.h_1 == pytest.approx(0.0, abs=1e-30) and law.h_2 == pytest.approx(0.0, abs=1e-35)
    assert power_law(noise_free(OSCILLATORS["ocxo"])) == PowerLaw(0.0, 0.0, 0.0)


def test_inconsistent_adev_figures_fall_back_to_non_negative_fit() -> None:
    # 100 s worse than both 1 s and 1 d cannot be fitted exactly; the fit must stay non-negative
    odd = dataclasses.replace(OSCILLATORS["ocxo"], adev_1s=1e-11, adev_100s=5e-11, adev_1d=1e-11)
    assert all(h >= 0 for h in power_law(odd))


def test_spec_rejects_partly_zero_adev() -> None:
    with pytest.raises(ValueError):
        dataclasses.replace(OSCILLATORS["ocxo"], adev_100s=0.0)


# --- determinism and the query contract -----------------------------------------------------------


def readings(seed: int, name: str = "ocxo", steps: int = 5000) -> list[int]:
    osc = SimOscillator(OSCILLATORS[name], seed)
    return [osc.raw_ns(k * S_NS // 4) for k in range(steps)]


def test_same_seed_same_readings_and_different_seed_differs() -> None:
    assert readings(7) == readings(7)
    assert readings(7) != readings(8)


def test_trajectory_does_not_depend_on_query_pattern() -> None:
    dense, sparse = SimOscillator(OSCILLATORS["tcxo"], 3), SimOscillator(OSCILLATORS["tcxo"], 3)
    dense_values = {t: dense.phase_error_ns(t) for t in range(0, 3 * CHUNK_STEPS * S_NS, S_NS // 3)}
    for t in range(0, 3 * CHUNK_STEPS * S_NS, 977 * (S_NS // 3)):
        assert sparse.phase_error_ns(t) == dense_values[t]


def test_raw_readings_never_go_backwards_even_for_dense_queries() -> None:
    osc = SimOscillator(OSCILLATORS["tcxo"], 11)  # 1 ns white PM: dense queries would jitter back
    rng = np.random.default_rng(0)
    times = np.cumsum(rng.integers(0, 3, 20_000)) + 5 * S_NS
    raws = [osc.raw_ns(int(t)) for t in times]
    assert all(b >= a for a, b in zip(raws, raws[1:]))


def test_backwards_query_beyond_one_step_raises() -> None:
    osc = SimOscillator(OSCILLATORS["ocxo"], 1, start_true_ns=10 * S_NS)
    with pytest.raises(ValueError):
        osc.raw_ns(9 * S_NS)  # before start
    osc.raw_ns(100 * S_NS)
    osc.raw_ns(99 * S_NS + 1)  # within one step back: allowed
    osc.frequency_offset_ppb(99 * S_NS)  # exactly one step back: allowed
    with pytest.raises(ValueError):
        osc.raw_ns(99 * S_NS - 1)
    with pytest.raises(ValueError):
        osc.frequency_offset_ppb(98 * S_NS)


def test_one_step_back_works_across_a_chunk_boundary() -> None:
    osc = SimOscillator(OSCILLATORS["ocxo"], 1)
    boundary_ns = CHUNK_STEPS * S_NS
    after = osc.phase_error_ns(boundary_ns + S_NS // 2)
    before = osc.phase_error_ns(boundary_ns - S_NS // 2)  # lives in the previous chunk
    fresh = SimOscillator(OSCILLATORS["ocxo"], 1)
    assert before == fresh.phase_error_ns(boundary_ns - S_NS // 2)
    assert after == fresh.phase_error_ns(boundary_ns + S_NS // 2)


@pytest.mark.parametrize("name", sorted(OSCILLATORS))
def test_chunk_boundaries_do_not_jump(name: str) -> None:
    osc = SimOscillator(OSCILLATORS[name], 5, initial_offset_ppb=0.0)
    for chunk in (1, 2, 3):
        boundary_ns = chunk * CHUNK_STEPS * S_NS
        left, at, right = (osc.phase_error_ns(boundary_ns + d) for d in (-1, 0, 1))
        # 1 ns apart the phase can only move by frequency (< 1e-5 ppb-ish fractions of a ns)
        assert abs(at - left) < 1e-3 and abs(right - at) < 1e-3


def test_frequency_is_the_slope_of_the_phase_within_a_step() -> None:
    osc = SimOscillator(OSCILLATORS["tcxo"], 2)
    for k in (0, 17, CHUNK_STEPS - 1, CHUNK_STEPS, 10_000):
        t0 = k * S_NS
        slope_ppb = osc.phase_error_ns(t0 + S_NS // 2) - osc.phase_error_ns(t0)  # ns per 0.5 s
        assert 2 * slope_ppb == pytest.approx(osc.frequency_offset_ppb(t0 + S_NS // 4), abs=1e-3)


# --- deterministic terms --------------------------------------------------------------------------


@pytest.mark.parametrize("start_true_ns", [0, 1_700_000_000 * S_NS + 123])
def test_offset_and_aging_show_in_phase_and_frequency(start_true_ns: int) -> None:
    spec = noise_free(OSCILLATORS["tcxo"], aging_ppb_per_day=2.0)
    osc = SimOscillator(spec, 1, start_true_ns=start_true_ns, initial_offset_ppb=150.0)
    aging_ppb_per_s = 2.0 / DAY_S
    assert osc.aging_ppb_per_s == pytest.approx(aging_ppb_per_s)
    for t_ns in range(0, 3 * DAY_S * S_NS, 3_333 * S_NS + 7):
        t_s = t_ns / S_NS
        expected_ns = 150.0 * t_s + 0.5 * aging_ppb_per_s * t_s**2
        assert abs(osc.raw_ns(start_true_ns + t_ns) - start_true_ns - t_ns - expected_ns) <= 1.0
        assert osc.frequency_offset_ppb(start_true_ns + t_ns) == pytest.approx(150.0 + aging_ppb_per_s * t_s)


def test_initial_offset_is_drawn_from_the_spec_sigma() -> None:
    offsets = [SimOscillator(OSCILLATORS["ocxo"], seed).initial_offset_ppb for seed in range(400)]
    assert np.std(offsets) == pytest.approx(OSCILLATORS["ocxo"].initial_offset_ppb, rel=0.15)


def test_constant_temperature_offset_follows_the_coefficient() -> None:
    spec = noise_free(OSCILLATORS["tcxo"], aging_ppb_per_day=0.0)
    osc = SimOscillator(spec, 1, temperature=lambda _t: REFERENCE_TEMP_C + 2.0, initial_offset_ppb=0.0)
    assert osc.temp_coeff_ppb_per_k == spec.temp_coeff_ppb_per_k
    assert osc.frequency_offset_ppb(0) == pytest.approx(2.0 * spec.temp_coeff_ppb_per_k)
    assert osc.raw_ns(1000 * S_NS) - 1000 * S_NS == round(2.0 * spec.temp_coeff_ppb_per_k * 1000)


def test_diurnal_temperature_swing_is_integrated_into_phase() -> None:
    spec = noise_free(OSCILLATORS["ocxo"], aging_ppb_per_day=0.0)
    profile = temperature_profile_sine(mean_c=REFERENCE_TEMP_C, amplitude_c=5.0, period_s=DAY_S)
    osc = SimOscillator(spec, 1, temperature=profile, initial_offset_ppb=0.0)
    swing_ppb = 5.0 * spec.temp_coeff_ppb_per_k
    omega = 2 * math.pi / DAY_S
    for t_s in (0.0, 3600.5, DAY_S / 4, DAY_S / 2, 70_000.25):
        t_ns = int(t_s * S_NS)
        assert osc.temperature_c(t_ns) == pytest.approx(REFERENCE_TEMP_C + 5.0 * math.sin(omega * t_s))
        assert osc.frequency_offset_ppb(t_ns) == pytest.approx(swing_ppb * math.sin(omega * t_s), abs=1e-9)
        integral_ns = swing_ppb * (1 - math.cos(omega * t_s)) / omega
        assert osc.phase_error_ns(t_ns) == pytest.approx(integral_ns, abs=1e-3)


def test_temperature_defaults_to_reference_without_profile() -> None:
    osc = SimOscillator(OSCILLATORS["ocxo"], 1)
    assert osc.temperature_c(12 * S_NS) == REFERENCE_TEMP_C


def test_step_profile_with_ramp() -> None:
    profile = temperature_profile_steps(20.0, [(100 * S_NS, 30.0), (1000 * S_NS, 25.0)], ramp_s=10.0)
    assert profile(0) == 20.0 and profile(100 * S_NS - 1) == 20.0
    assert profile(105 * S_NS) == pytest.approx(25.0)
    assert profile(110 * S_NS) == 30.0 and profile(999 * S_NS) == 30.0
    assert profile(2000 * S_NS) == 25.0
    instant = temperature_profile_steps(20.0, [(100 * S_NS, 30.0)])
    assert instant(100 * S_NS - 1) == 20.0 and instant(100 * S_NS) == 30.0
    with pytest.raises(ValueError):
        temperature_profile_steps(20.0, [(2, 1.0), (1, 2.0)])


def test_configurable_grid_step() -> None:
    spec = noise_free(OSCILLATORS["rubidium"])
    osc = SimOscillator(spec, 1, tau0_ns=100 * S_NS, initial_offset_ppb=0.3)
    expected_ns = 0.3 * DAY_S + 0.5 * osc.aging_ppb_per_s * DAY_S**2
    assert osc.raw_ns(DAY_S * S_NS) - DAY_S * S_NS == round(expected_ns)
    with pytest.raises(ValueError):
        SimOscillator(spec, 1, tau0_ns=0)
