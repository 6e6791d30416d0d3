"""Holdover predictor: learn the free-running oscillator while locked, predict it when the reference is gone.

Pure core.  While LOCKED the engine hands over the oscillator's own phase against the reference (the measured offset
minus every correction the engine applied), one sample per second.  Samples are averaged into 16 s points that feed a
Kalman filter whose state is the oscillator's phase x (ns), frequency y (ppb), aging a (ppb/s) and temperature
coefficient c (ppb/K).  Its process noise comes from the oscillator's own power-law coefficients (white FM, random-walk
FM, and flicker FM folded into an equivalent random walk at the oscillator's best averaging time), its measurement
noise from the scatter of the samples about their own trend, so the filter weighs old and new data the way that
oscillator deserves: an OCXO's frequency is estimated from the last hour or so, a rubidium's from much longer.

The prediction's error bound grows with time since loss from the filter's own covariance (how well y, a and c are
known) plus the oscillator's noise over the interval: 3.sqrt(P_yy t^2 + P_ya t^3 + P_aa t^4/4) + 3.t.adev(t)
+ temperature.  Without a thermometer the datasheet coefficient times the excursion the operator allows for is added.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from appliance.clock.oscillator import OscillatorSpec, PowerLaw, power_law

POINT_S = 16  # seconds averaged into one filter update
COVERAGE = 3.0  # the bound is a 3-sigma statement
REFERENCE_TEMP_C = 25.0
GATE_SIGMA = 6.0  # a point this far outside the filter's expectation is an outlier, not news
# Enough to predict, the covariance says how well: five filter points (each 17 one-second samples over its 16 s; the
# first starts the filter, four more update it).  The one rule for holding over, learned in this run or restored
# (``enough_to_hold_over``).
MIN_LEARN_S = 5 * POINT_S
CHECKPOINT_S = 60.0  # the filter's state is kept this often, so that learning can be undone (``rollback``) ...
CHECKPOINTS_KEPT = 20  # ... this far back (20 min): what a slow push below every threshold may have taught it


@dataclass(frozen=True)
class _Checkpoint:
    t_s: float
    state: np.ndarray
    cov: np.ndarray
    learned_s: float
    last_temp: float | None
    temps_seen: tuple[float, float] | None


@dataclass(frozen=True)
class Prediction:
    """The oscillator as learned at ``origin_s`` (the moment of loss), and how far to trust it."""

    origin_s: float
    frequency_ppb: float  # the free-running oscillator's fractional frequency at origin (ns/s)
    frequency_sigma_ppb: float
    aging_ppb_per_s: float
    aging_sigma_ppb_per_s: float
    temp_coeff_ppb_per_k: float | None  # learned, when a temperature reading exists
    temp_coeff_sigma_ppb_per_k: float
    learned_s: float  # seconds of reference data the prediction rests on (gaps left out)
    cov_ya: float = 0.0  # covariance of frequency and aging estimates (ppb^2/s)

    def oscillator_ppb(self, t_s: float, temp_c: float | None = None) -> float:
        """Predicted free-running frequency at ``t_s``: the correction to apply is its negative."""
        y = self.frequency_ppb + self.aging_ppb_per_s * (t_s - self.origin_s)
        if self.temp_coeff_ppb_per_k is not None and temp_c is not None:
            y += self.temp_coeff_ppb_per_k * (temp_c - REFERENCE_TEMP_C)
        return y


class HoldoverPredictor:
    def __init__(self, spec: OscillatorSpec, learn_window_s: int = 3 * 86_400, holdover_temp_k: float = 1.0):
        self.spec = spec
        self.law: PowerLaw = power_law(spec)
        self.learn_window_s = learn_window_s
        self.holdover_temp_k = holdover_temp_k
        self.fit_window_s = best_averaging_time_s(self.law)
        self._q_white, self._q_walk = _process_noise(self.law, self.fit_window_s)
        self._acc: list[tuple[float, float, float | None]] = []
        self._state: np.ndarray | None = None
        self._cov = np.zeros((4, 4))
        self._t_s = 0.0
        self._learned_s = 0.0  # seconds of samples in the points learned (one a second); gaps do not count
        self._last_temp: float | None = None
        self._temps_seen: tuple[float, float] | None = None  # (min, max) temperature learned over
        self.outliers = 0
        self._checkpoints: deque[_Checkpoint] = deque(maxlen=CHECKPOINTS_KEPT)

    # --- learning ---------------------------------------------------------------------------------------
    def learn(self, t_s: float, free_phase_ns: float, temp_c: float | None = None) -> None:
        self._acc.append((t_s, free_phase_ns, temp_c))
        if self._acc[-1][0] - self._acc[0][0] >= POINT_S - 1e-6:
            self._update_point(self._acc)
            self._acc = []

    def shift_phase(self, delta_ns: float) -> None:
        """The reference's phase was moved on purpose by ``delta_ns`` (an operator's delay change): what was learned
        moves with it, so the step is not taken for the oscillator's doing."""
        self._acc = [(t, x + delta_ns, temp) for t, x, temp in self._acc]
        if self._state is not None:
            self._state = self._state + np.array([delta_ns, 0.0, 0.0, 0.0])
        self._checkpoints = deque((replace(c, state=c.state + np.array([delta_ns, 0.0, 0.0, 0.0]))
                                   for c in self._checkpoints), maxlen=CHECKPOINTS_KEPT)

    def interrupt(self) -> None:
        """The reference went away: a half-filled point must not join samples from after the gap."""
        self._acc = []

    def forget(self) -> None:
        """The history no longer describes the oscillator (e.g. a different oscillator was fitted)."""
        self._acc, self._state, self._learned_s, self._temps_seen = [], None, 0.0, None
        self._checkpoints.clear()

    def rollback(self, to_s: float) -> bool:
        """Undo what was learned after ``to_s`` (a reference found spoofed taught the filter its push): back to the
        newest checkpoint at or before it.  False, and everything forgotten, when no checkpoint is that old."""
        while self._checkpoints and self._checkpoints[-1].t_s > to_s:
            self._checkpoints.pop()
        if not self._checkpoints:
            self.forget()
            return False
        c = self._checkpoints[-1]
        self._acc = []
        self._state, self._cov, self._t_s = c.state.copy(), c.cov.copy(), c.t_s
        self._learned_s, self._last_temp, self._temps_seen = c.learned_s, c.last_temp, c.temps_seen
        return True

    @property
    def learned_s(self) -> float:
        """Seconds of reference data learned: the time spent learning, not the span from the first point to the
        last (a minute's lock, a free run and another minute's lock have taught two minutes, not the gap too)."""
        return self._learned_s

    @property
    def learning_s(self) -> float:
        """``learned_s`` and the samples already gathered into the next point."""
        return self._learned_s + len(self._acc)

    def seconds_until_enough(self) -> int:
        """While locked (a sample a second), how long until ``can_predict``: points are learned whole."""
        per_point = POINT_S + 1
        points = 0
        while not enough_to_hold_over(self._learned_s + points * per_point) and points <= MIN_LEARN_S:
            points += 1
        return max(0, points * per_point - len(self._acc)) if points else 0

    def can_predict(self) -> bool:
        """Enough learned to predict (``MIN_LEARN_S``): the covariance, not a waiting time, says how well."""
        return self._state is not None and enough_to_hold_over(self.learned_s)

    # --- the filter -------------------------------------------------------------------------------------
    def _update_point(self, samples: list[tuple[float, float, float | None]]) -> None:
        ts = [s[0] for s in samples]
        xs = [s[1] for s in samples]
        temps = [s[2] for s in samples]
        t, x = sum(ts) / len(ts), sum(xs) / len(xs)
        # Scatter about the samples' own straight line: the phase ramp of the oscillator's frequency offset over the
        # point's 16 s is signal, not measurement noise.
        stt = sum((u - t) ** 2 for u in ts)
        slope = sum((u - t) * (v - x) for u, v in zip(ts, xs)) / stt if stt > 0 else 0.0
        spread = math.sqrt(sum((v - x - slope * (u - t)) ** 2 for u, v in zip(ts, xs)) / max(len(xs) - 2, 1))
        r = max(spread, 0.1) ** 2 / len(xs)  # the point's variance: the scatter of its samples, averaged
        temp = None if any(v is None for v in temps) else sum(temps) / len(temps)  # type: ignore[arg-type]
        if self._state is None:
            self._start(t, x, r, temp)
            self._learned_s = float(len(samples))
            self._checkpoint()
            return
        self._predict_to(t, temp)
        if self._measure(x, r):
            self._learned_s += len(samples)
        if temp is not None:
            lo, hi = self._temps_seen or (temp, temp)
            self._temps_seen = (min(lo, temp), max(hi, temp))
        self._checkpoint()

    def _checkpoint(self) -> None:
        if self._state is not None and (not self._checkpoints or
                                        self._t_s - self._checkpoints[-1].t_s >= CHECKPOINT_S - 1e-6):
            self._checkpoints.append(_Checkpoint(self._t_s, self._state.copy(), self._cov.copy(), self._learned_s,
                                                 self._last_temp, self._temps_seen))

    def _start(self, t: float, x: float, r: float, temp: float | None) -> None:
        spec = self.spec
        self._state = np.array([x, 0.0, 0.0, 0.0])
        self._cov = np.diag([r, (5 * spec.initial_offset_ppb) ** 2 + 1.0, (3 * spec.aging_ppb_per_day / 86_400) ** 2
                             + 1e-30, (3 * spec.temp_coeff_ppb_per_k) ** 2 + 1e-12])
        self._t_s = t
        self._last_temp = temp

    def _predict_to(self, t: float, temp: float | None) -> None:
        assert self._state is not None
        dt = t - self._t_s
        if dt <= 0:
            return
        prev_temp = self._last_temp
        temp_integral = 0.0
        if temp is not None and prev_temp is not None:
            temp_integral = dt * (0.5 * (temp + prev_temp) - REFERENCE_TEMP_C)
        self._last_temp = temp
        f = np.array([[1.0, dt, 0.5 * dt * dt, temp_integral], [0.0, 1.0, dt, 0.0], [0.0, 0.0, 1.0, 0.0],
                      [0.0, 0.0, 0.0, 1.0]])
        self._state = f @ self._state
        self._cov = f @ self._cov @ f.T + self._q(dt)
        self._t_s = t

    def _q(self, dt: float) -> np.ndarray:
        qw, qr = self._q_white, self._q_walk
        q = np.zeros((4, 4))
        q[0, 0] = qw * dt + qr * dt**3 / 3
        q[0, 1] = q[1, 0] = qr * dt**2 / 2
        q[1, 1] = qr * dt
        return q

    def _measure(self, x: float, r: float) -> bool:
        """One point into the filter; False if it was gated out as an outlier."""
        assert self._state is not None
        innovation = x - self._state[0]
        s = self._cov[0, 0] + r
        if abs(innovation) > GATE_SIGMA * math.sqrt(s) and self.learned_s > 10 * POINT_S:
            self.outliers += 1
            return False
        gain = self._cov[:, 0] / s
        self._state = self._state + gain * innovation
        i_kh = np.eye(4) - np.outer(gain, [1.0, 0.0, 0.0, 0.0])
        self._cov = i_kh @ self._cov @ i_kh.T + r * np.outer(gain, gain)  # Joseph form: stays symmetric PSD
        return True

    # --- prediction ---------------------------------------------------------------------------------------
    def predict(self, origin_s: float) -> Prediction | None:
        if not self.can_predict() or self._state is None:
            return None
        dt = max(0.0, origin_s - self._t_s)
        x, y, a, c = self._state
        cov = self._cov
        y_at = y + a * dt
        var_y = cov[1, 1] + 2 * dt * cov[1, 2] + dt * dt * cov[2, 2] + self._q_walk * dt
        learned_temp = self._temps_seen is not None and self._temps_seen[1] - self._temps_seen[0] >= 0.2
        return Prediction(origin_s, float(y_at), math.sqrt(max(var_y, 0.0)), float(a), math.sqrt(cov[2, 2]),
                          float(c) if learned_temp else None, math.sqrt(cov[3, 3]), self.learned_s,
                          float(cov[1, 2] + dt * cov[2, 2]))

    def aged(self, p: Prediction, origin_s: float) -> Prediction:
        """A prediction carried on to a later ``origin_s`` without new data (a restored one, used at a loss later in
        the run): its frequency moves by the aging, and how well it is known worsens by the aging's uncertainty and
        the oscillator's random walk over the interval."""
        dt = max(0.0, origin_s - p.origin_s)
        var_y = p.frequency_sigma_ppb**2 + 2 * dt * p.cov_ya + (dt * p.aging_sigma_ppb_per_s) ** 2 + self._q_walk * dt
        return Prediction(max(origin_s, p.origin_s), p.oscillator_ppb(p.origin_s + dt), math.sqrt(max(var_y, 0.0)),
                          p.aging_ppb_per_s, p.aging_sigma_ppb_per_s, p.temp_coeff_ppb_per_k,
                          p.temp_coeff_sigma_ppb_per_k, p.learned_s, p.cov_ya + dt * p.aging_sigma_ppb_per_s**2)

    def uncertainty_ns(self, p: Prediction, dt_s: float, temp_change_k: float | None = None) -> float:
        """How far the free-running phase may have strayed from the prediction ``dt_s`` after loss (3 sigma)."""
        dt_s = max(dt_s, 0.0)
        var_estimate = (p.frequency_sigma_ppb**2 * dt_s**2 + p.cov_ya * dt_s**3
                        + p.aging_sigma_ppb_per_s**2 * dt_s**4 / 4)
        estimate = COVERAGE * math.sqrt(max(var_estimate, 0.0))
        noise = COVERAGE * dt_s * self.law.adev(max(dt_s, 1.0)) * 1e9
        if p.temp_coeff_ppb_per_k is not None and temp_change_k is not None:
            temperature = COVERAGE * p.temp_coeff_sigma_ppb_per_k * abs(temp_change_k) * dt_s
        else:  # no thermometer: the datasheet coefficient over the excursion the operator allows for
            temperature = self.spec.temp_coeff_ppb_per_k * self.holdover_temp_k * dt_s
        return estimate + noise + temperature


def enough_to_hold_over(learned_s: float) -> bool:
    """The one rule for holding over: a prediction resting on at least ``MIN_LEARN_S`` of reference data, learned in
    this run or restored from the last (whose learned seconds are counted the same way).  How good it still is
    (a restored state's age, a long holdover) is the bound's business, not this rule's."""
    return learned_s >= MIN_LEARN_S


def best_averaging_time_s(law: PowerLaw) -> float:
    """Where the oscillator's Allan deviation is lowest: the longest average that still helps (600 s .. 1 day)."""
    taus = np.logspace(math.log10(600), math.log10(86_400), 25)
    return float(taus[int(np.argmin([law.adev(tau) for tau in taus]))])


def _process_noise(law: PowerLaw, tau_s: float) -> tuple[float, float]:
    """Kalman process noise: white FM as phase diffusion (ns^2/s); random-walk FM plus flicker FM, the latter as
    the random walk with the same Allan variance at ``tau_s``, as frequency diffusion (ppb^2/s)."""
    q_white = law.h0 / 2 * 1e18
    flicker_as_walk = 2 * math.log(2) * law.h_1 * 3 / (2 * math.pi**2 * tau_s)
    q_walk = 2 * math.pi**2 * (law.h_2 + flicker_as_walk) * 1e18
    return q_white, max(q_walk, 1e-30)
