"""Simulated local oscillators: turn ``true_ns`` into the reading of a free-running oscillator.

Single job: from datasheet-style figures (``appliance.clock.oscillator.OSCILLATORS``), produce the phase
(``raw_ns``) and the fractional frequency (ppb) a TCXO, OCXO or rubidium oscillator would show at a given true
instant, with power-law frequency noise (fitted by ``power_law``), aging and temperature sensitivity.  Pure: no clock
reads, no I/O, no threads; every random number comes from numpy Generators built from the caller's seed.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

import numpy as np

from appliance.clock.oscillator import REFERENCE_TEMP_C, OscillatorSpec, PowerLaw, power_law

DEFAULT_TAU0_NS = 1_000_000_000  # the noise grid: one frequency value per second
CHUNK_STEPS = 4096  # grid steps generated per numpy batch; must be a multiple of _BLOCK
_BLOCK = 64  # AR(1) filters run as (block x block) matrix products, carried between blocks
_FLICKER_FIRST_POLE_TAU0 = 1.5  # fastest flicker time constant, in grid steps (tuned: flat to +-1.3 %)
_FLICKER_SLOWEST_POLE_S = 1e8  # flicker floor holds out to ~1e6..1e7 s


def _flicker_poles(tau0_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Time constants (s) and variance weights (per unit h_1) of the AR(1) sum approximating 1/f FM.

    A Lorentzian of variance w = h_1 ln(r) per pole, poles spaced by r = 10 in time constant, sums to
    S_y = h_1/f between the extreme corners.  The fastest pole is re-weighted so the discrete series'
    ADEV at tau0, sum_i w_i (1 - phi_i), equals the floor 2 ln2 h_1 exactly; the resulting ADEV stays
    within +-1.3 % of the floor from tau0 to ~1e-3 of the slowest time constant (checked analytically).
    """
    first_s = _FLICKER_FIRST_POLE_TAU0 * tau0_s
    count = max(2, math.ceil(math.log10(_FLICKER_SLOWEST_POLE_S / first_s)) + 1)
    tau_c_s = first_s * 10.0 ** np.arange(count)
    weight = np.full(count, math.log(10.0))
    one_minus_phi = -np.expm1(-tau0_s / tau_c_s)
    weight[0] = (2 * math.log(2) - np.dot(weight[1:], one_minus_phi[1:])) / one_minus_phi[0]
    return tau_c_s, weight


class _FrequencyNoise:
    """White + flicker + random-walk FM, as the mean fractional frequency (ppb) of each tau0 step."""

    def __init__(self, law: PowerLaw, tau0_s: float, rng: np.random.Generator) -> None:
        self._rng = rng
        self._white_sigma = math.sqrt(law.h0 / (2 * tau0_s))
        # Brownian frequency with diffusion D = 2 pi^2 h_2 gives sigma^2 = D tau / 3
        self._walk_sigma = math.sqrt(2 * math.pi**2 * law.h_2 * tau0_s)
        self._walk = 0.0
        tau_c_s, weight = _flicker_poles(tau0_s)
        phi = np.exp(-tau0_s / tau_c_s)
        self._drive = np.sqrt(law.h_1 * weight * (1 - phi**2))  # stationary variance h_1 * weight
        # Zero start: the flicker memory begins at power-up (adds no extra offset to initial_offset_ppb).
        self._state = np.zeros(len(phi))
        lag = np.arange(_BLOCK)[:, None] - np.arange(_BLOCK)[None, :]
        impulse = np.where(lag >= 0, phi[:, None, None] ** np.maximum(lag, 0), 0.0)
        self._impulse_t = impulse.transpose(0, 2, 1)
        self._decay = phi[:, None] ** np.arange(1, _BLOCK + 1)

    def next_chunk(self, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """(total, smooth) frequency in ppb per step; smooth leaves out white FM, which no one can predict."""
        normals = self._rng.standard_normal((2 + len(self._state), steps))
        walk = self._walk + np.cumsum(self._walk_sigma * normals[1])
        self._walk = float(walk[-1])
        smooth = 1e9 * (walk + self._flicker(normals[2:]))
        return smooth + 1e9 * self._white_sigma * normals[0], smooth

    def _flicker(self, normals: np.ndarray) -> np.ndarray:
        """Run every AR(1) pole over the chunk: block matrix products, then carry state across blocks."""
        if not self._drive.any():
            return np.zeros(normals.shape[1])
        poles, steps = normals.shape
        blocks = steps // _BLOCK
        drive = (normals * self._drive[:, None]).reshape(poles, blocks, _BLOCK)
        from_rest = drive @ self._impulse_t  # response of each block started from zero state
        starts = np.empty((poles, blocks))
        state, decay_block = self._state, self._decay[:, -1]
        for b in range(blocks):
            starts[:, b] = state
            state = decay_block * state + from_rest[:, b, -1]
        self._state = state
        return (from_rest + starts[:, :, None] * self._decay[:, None, :]).sum(axis=0).reshape(steps)


class SimOscillator:
    """A free-running oscillator read at true instants.

    raw_ns(t) = t + round(phase_error_ns(t) + white PM), where the phase error integrates the initial
    offset, linear aging (both analytically), the temperature term and the power-law noise (both on a
    tau0 grid, linearly interpolated between grid points).  Noise is generated lazily, CHUNK_STEPS
    grid steps at a time, from a stream independent of how the oscillator is queried.

    Query contract: ``raw_ns``, ``phase_error_ns`` and ``frequency_offset_ppb`` share one cursor.
    Queries must not precede ``start_true_ns`` nor fall more than one grid step (tau0) before the
    latest instant queried so far; both raise ValueError.  For non-decreasing queries ``raw_ns`` is
    non-decreasing: like a real counter, a reading is clamped to the previous one, which only matters
    for queries spaced by less than a few ``white_pm_rms_ns``.  White PM draws come from their own
    stream, one per ``raw_ns`` call, so readings depend on the sequence of queries (same seed + same
    queries -> same readings) while ``phase_error_ns`` and the frequency do not.
    """

    def __init__(
        self,
        spec: OscillatorSpec,
        seed: int,
        temperature: Callable[[int], float] | None = None,
        start_true_ns: int = 0,
        initial_offset_ppb: float | None = None,
        *,
        tau0_ns: int = DEFAULT_TAU0_NS,
        reference_temp_c: float = REFERENCE_TEMP_C,
    ) -> None:
        if tau0_ns <= 0:
            raise ValueError("tau0_ns must be positive")
        self.spec = spec
        self.power_law = power_law(spec)
        self.tau0_ns = tau0_ns
        self.start_true_ns = start_true_ns
        self.aging_ppb_per_s = spec.aging_ppb_per_day / 86_400.0
        self.temp_coeff_ppb_per_k = spec.temp_coeff_ppb_per_k
        self.reference_temp_c = reference_temp_c
        self._temperature = temperature
        offset_rng, noise_rng, pm_rng = map(np.random.default_rng, np.random.SeedSequence(seed).spawn(3))
        if initial_offset_ppb is None:
            initial_offset_ppb = float(offset_rng.normal(0.0, spec.initial_offset_ppb))
        self.initial_offset_ppb = float(initial_offset_ppb)
        self._noise = _FrequencyNoise(self.power_law, tau0_ns * 1e-9, noise_rng)
        self._pm_rng, self._pm_next = pm_rng, 0
        self._pm: list[float] = []
        # Grid window: _phase[i] is the phase (ns) at grid point _k_first + i, _freq[i] the noise
        # frequency (ppb) over step _k_first + i.  Keeping one step before the chunk allows the
        # one-step-backwards queries of the contract.
        self._k_first, self._k_end = -1, -1
        self._phase, self._freq, self._smooth = [0.0, 0.0], [0.0], [0.0]
        self._temp_ppb_end = self._temperature_ppb(start_true_ns)
        self._latest_ns, self._last_query_ns, self._last_raw_ns = start_true_ns, start_true_ns, start_true_ns

    def raw_ns(self, true_ns: int) -> int:
        """The oscillator's reading at ``true_ns`` (int ns, includes white PM; see class contract)."""
        error_ns = self.phase_error_ns(true_ns)
        if self.spec.white_pm_rms_ns:
            error_ns += self._next_white_pm_ns()
        raw = true_ns + round(error_ns)
        if true_ns >= self._last_query_ns and raw < self._last_raw_ns:
            raw = self._last_raw_ns  # a counter never runs backwards
        self._last_query_ns, self._last_raw_ns = true_ns, raw
        return raw

    def phase_error_ns(self, true_ns: int) -> float:
        """raw - true before white PM and rounding: the oracle for phase and ADEV checks."""
        i, frac = self._locate(true_ns)
        t_s = (true_ns - self.start_true_ns) * 1e-9
        p0 = self._phase[i]
        deterministic_ns = (self.initial_offset_ppb + 0.5 * self.aging_ppb_per_s * t_s) * t_s
        return deterministic_ns + p0 + (self._phase[i + 1] - p0) * frac

    def frequency_offset_ppb(self, true_ns: int) -> float:
        """Fractional frequency offset now: initial + aging + temperature + noise (mean over the step)."""
        i, _ = self._locate(true_ns)
        t_s = (true_ns - self.start_true_ns) * 1e-9
        return (self.initial_offset_ppb + self.aging_ppb_per_s * t_s + self._temperature_ppb(true_ns)
                + self._freq[i])

    def smooth_frequency_ppb(self, true_ns: int) -> float:
        """The predictable part of the frequency now: everything but white FM (the holdover oracle's knowledge)."""
        i, _ = self._locate(true_ns)
        t_s = (true_ns - self.start_true_ns) * 1e-9
        return (self.initial_offset_ppb + self.aging_ppb_per_s * t_s + self._temperature_ppb(true_ns)
                + self._smooth[i])

    def temperature_c(self, true_ns: int) -> float:
        """The profile's temperature, or the reference temperature when no profile was given."""
        return self.reference_temp_c if self._temperature is None else float(self._temperature(true_ns))

    def _temperature_ppb(self, true_ns: int) -> float:
        if self._temperature is None:
            return 0.0
        return self.temp_coeff_ppb_per_k * (float(self._temperature(true_ns)) - self.reference_temp_c)

    def _locate(self, true_ns: int) -> tuple[int, float]:
        """Index into the grid window of the step holding ``true_ns``, and the fraction into it."""
        if true_ns < self.start_true_ns or true_ns < self._latest_ns - self.tau0_ns:
            raise ValueError(f"query at {true_ns} ns goes back more than one step before "
                             f"{self._latest_ns} ns (or before start {self.start_true_ns} ns)")
        self._latest_ns = max(self._latest_ns, true_ns)
        k, rem_ns = divmod(true_ns - self.start_true_ns, self.tau0_ns)
        while k > self._k_end:
            self._advance()
        return k - self._k_first, rem_ns / self.tau0_ns

    def _advance(self) -> None:
        """Generate the next CHUNK_STEPS grid steps, keeping the last step of the previous window."""
        k_start, steps, tau0_s = self._k_end + 1, CHUNK_STEPS, self.tau0_ns * 1e-9
        noise_ppb, smooth_ppb = self._noise.next_chunk(steps)
        temp_ppb = self._grid_temperature_ppb(k_start, steps)
        # trapezoid: the temperature term's mean over each step; ppb * s = ns
        step_ns = (noise_ppb + 0.5 * (temp_ppb[:-1] + temp_ppb[1:])) * tau0_s
        phase = self._phase[-1] + np.cumsum(step_ns)
        self._phase = self._phase[-2:] + phase.tolist()
        self._freq = self._freq[-1:] + noise_ppb.tolist()
        self._smooth = self._smooth[-1:] + smooth_ppb.tolist()
        self._k_first, self._k_end = k_start - 1, k_start + steps - 1

    def _grid_temperature_ppb(self, k_start: int, steps: int) -> np.ndarray:
        """Temperature term at grid points k_start .. k_start + steps (the first one carried over)."""
        if self._temperature is None:
            return np.zeros(steps + 1)
        t0 = self.start_true_ns + k_start * self.tau0_ns
        later = [self._temperature_ppb(t0 + j * self.tau0_ns) for j in range(1, steps + 1)]
        values = np.array([self._temp_ppb_end, *later])
        self._temp_ppb_end = later[-1]
        return values

    def _next_white_pm_ns(self) -> float:
        if self._pm_next >= len(self._pm):
            self._pm = (self._pm_rng.standard_normal(CHUNK_STEPS) * self.spec.white_pm_rms_ns).tolist()
            self._pm_next = 0
        self._pm_next += 1
        return self._pm[self._pm_next - 1]


def temperature_profile_sine(mean_c: float, amplitude_c: float, period_s: float,
                             phase_s: float = 0.0) -> Callable[[int], float]:
    """T(true_ns) = mean + amplitude * sin(2 pi (t - phase_s) / period), e.g. a diurnal swing."""
    omega = 2.0 * math.pi / period_s

    def temperature_c(true_ns: int) -> float:
        return mean_c + amplitude_c * math.sin(omega * (true_ns * 1e-9 - phase_s))

    return temperature_c


def temperature_profile_steps(initial_c: float, steps: Sequence[tuple[int, float]],
                              ramp_s: float = 0.0) -> Callable[[int], float]:
    """Piecewise-constant temperature: from each (true_ns, temp_c) step on, the new temperature.

    With ``ramp_s`` > 0 each change is a linear ramp of that length starting at the step's instant
    (an enclosure door opening, an air-conditioning failure); steps must be sorted and not overlap.
    """
    times = [t for t, _ in steps]
    if times != sorted(times):
        raise ValueError("steps must be sorted by true_ns")
    levels = [initial_c, *(c for _, c in steps)]
    ramp_ns = ramp_s * 1e9

    def temperature_c(true_ns: int) -> float:
        i = bisect.bisect_right(times, true_ns)  # levels[i] is the level reached by now
        if i == 0 or ramp_ns <= 0 or true_ns - times[i - 1] >= ramp_ns:
            return levels[i]
        frac = (true_ns - times[i - 1]) / ramp_ns
        return levels[i - 1] + (levels[i] - levels[i - 1]) * frac

    return temperature_c
