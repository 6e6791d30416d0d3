"""Local oscillator models as the clock sees them: datasheet figures and the power-law noise they imply.

Pure core.  ``OSCILLATORS`` holds datasheet-style figures for a TCXO, OCXO, double-oven OCXO and rubidium part;
``power_law`` turns a spec's three ADEV figures into power-law FM coefficients, from which the discipline, the
holdover predictor and the integrity checks take their stability model.  The noise *generator* that turns true
time into a free-running oscillator's reading lives with the simulated world (``appliance/sim/oscillator.py``).

Noise model: the one-sided PSD of fractional frequency is S_y(f) = h0 + h_1/f + h_2/f**2 (white,
flicker and random-walk FM), whose Allan variance is

    sigma_y**2(tau) = h0/(2 tau) + 2 ln2 h_1 + (2 pi**2/3) h_2 tau.

``power_law`` fits (h0, h_1, h_2) to a spec's three ADEV figures by non-negative least squares on the
*relative* residuals (every subset of the three terms is solved and the best non-negative one kept,
which is exact NNLS for three unknowns).  The table below is chosen so that fit is exact.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

REFERENCE_TEMP_C = 25.0  # temperature at which the temperature term is zero
_ADEV_TAUS_S = (1.0, 100.0, 86_400.0)


@dataclass(frozen=True)
class OscillatorSpec:
    adev_1s: float  # datasheet "short-term stability", Allan deviation at tau = 1 s
    adev_100s: float  # datasheet ADEV at tau = 100 s
    adev_1d: float  # ADEV at 1 day, aging removed, constant temperature ("long-term stability")
    aging_ppb_per_day: float  # datasheet "aging per day" after stabilisation (linear drift)
    temp_coeff_ppb_per_k: float  # datasheet "frequency vs temperature" stability / range
    initial_offset_ppb: float  # 1-sigma offset after warm-up: "frequency accuracy" incl. years of aging
    white_pm_rms_ns: float  # rms timestamping (white phase) noise of the counter reading it
    source: str  # which published class of part the figures are typical of

    def __post_init__(self) -> None:
        adevs = (self.adev_1s, self.adev_100s, self.adev_1d)
        if any(a < 0 for a in adevs) or (0 in adevs and any(adevs)):
            raise ValueError("ADEV figures must all be positive, or all zero for a noise-free spec")
        if self.initial_offset_ppb < 0 or self.white_pm_rms_ns < 0:
            raise ValueError("initial_offset_ppb and white_pm_rms_ns are 1-sigma figures, >= 0")


OSCILLATORS: dict[str, OscillatorSpec] = {
    "tcxo": OscillatorSpec(
        adev_1s=1e-9, adev_100s=1e-9, adev_1d=1e-8, aging_ppb_per_day=1.0, temp_coeff_ppb_per_k=10.0,
        initial_offset_ppb=500.0, white_pm_rms_ns=1.0,
        source="typical 10-40 MHz TCXO datasheet (+-0.5..2 ppm over -40..85 C; tempco = worst local slope)"),
    "ocxo": OscillatorSpec(
        adev_1s=1e-11, adev_100s=1.2e-11, adev_1d=2e-10, aging_ppb_per_day=0.5, temp_coeff_ppb_per_k=0.1,
        initial_offset_ppb=50.0, white_pm_rms_ns=0.3,
        source="typical single-oven SC-cut 10 MHz OCXO datasheet"),
    "ocxo-hp": OscillatorSpec(
        adev_1s=2e-12, adev_100s=2e-12, adev_1d=2e-11, aging_ppb_per_day=0.05, temp_coeff_ppb_per_k=0.01,
        initial_offset_ppb=10.0, white_pm_rms_ns=0.1,
        source="typical SC-cut double-oven OCXO datasheet (telecom grandmaster class)"),
    "rubidium": OscillatorSpec(
        adev_1s=2e-11, adev_100s=2.1e-12, adev_1d=2e-12, aging_ppb_per_day=0.05 / 30,
        temp_coeff_ppb_per_k=0.01, initial_offset_ppb=0.5, white_pm_rms_ns=0.1,
        source="typical rubidium (e.g. SRS PRS10 / Microchip LPRO-101 class, aging 0.05 ppb/month)"),
}


class PowerLaw(NamedTuple):
    """Power-law FM noise coefficients of S_y(f), in 1/Hz**(1+alpha) as usual (dimensionless y)."""

    h0: float  # white FM
    h_1: float  # flicker FM
    h_2: float  # random-walk FM

    def adev(self, tau_s: float) -> float:
        return math.sqrt(float(np.dot(_adev2_terms(tau_s), self)))


def _adev2_terms(tau_s: float) -> tuple[float, float, float]:
    return 1.0 / (2.0 * tau_s), 2.0 * math.log(2.0), 2.0 * math.pi**2 / 3.0 * tau_s


def power_law(spec: OscillatorSpec) -> PowerLaw:
    """Fit (h0, h_1, h_2) >= 0 to the spec's ADEV at 1 s, 100 s and 1 day (exact NNLS, see module doc)."""
    target = np.array([spec.adev_1s, spec.adev_100s, spec.adev_1d]) ** 2
    if not target.any():
        return PowerLaw(0.0, 0.0, 0.0)
    # dividing each row by its target makes the fit minimise relative errors, so 1 s does not dominate
    design = np.array([_adev2_terms(t) for t in _ADEV_TAUS_S]) / target[:, None]
    best, best_residual = np.zeros(3), math.inf
    for size in (3, 2, 1):
        for cols in map(list, itertools.combinations(range(3), size)):
            sub = np.linalg.lstsq(design[:, cols], np.ones(3), rcond=None)[0]
            if (sub < 0).any():
                continue
            h = np.zeros(3)
            h[cols] = sub
            residual = float(np.linalg.norm(design @ h - 1.0))
            if residual < best_residual - 1e-12:
                best, best_residual = h, residual
    return PowerLaw(*map(float, best))
