"""The DPLL's loop filter: a proportional-integral servo, ``sample(offset_ns, local_ns) -> (freq_ppb, state)``.

Pure core.  ``offset_ns`` is served time minus reference (positive: the clock is ahead), ``local_ns`` the local clock
reading of the measurement; the result is the frequency correction (ppb) to apply to the local oscillator, and the
servo's state.  Like linuxptp's pi.c, the first two samples estimate the frequency error directly; after that, if the
offset is beyond the step threshold (and stepping is allowed) the servo asks for one phase step (JUMP), then runs
as a PI loop.  Gains follow from the loop time constant tau with damping 1/sqrt(2): kp = sqrt(2)/tau, ki = 1/tau^2,
so the loop's natural frequency is 1/tau.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from appliance.units import NS_PER_S


class ServoState(str, enum.Enum):
    UNLOCKED = "unlocked"  # collecting the samples for the first frequency estimate
    JUMP = "jump"  # the caller must step the clock by -offset, then keep sampling
    LOCKED = "locked"  # PI tracking


@dataclass(frozen=True)
class ServoParams:
    time_constant_s: float
    max_frequency_ppb: float = 2000.0
    step_threshold_ns: int = 100_000  # first lock: offsets beyond this are stepped, not slewed
    slew_only: bool = False  # never step, even on first lock

    @property
    def kp_per_s(self) -> float:
        return math.sqrt(2.0) / self.time_constant_s

    @property
    def ki_per_s2(self) -> float:
        return 1.0 / self.time_constant_s**2


class PiServo:
    def __init__(self, params: ServoParams, initial_freq_ppb: float = 0.0):
        if params.time_constant_s <= 0 or params.max_frequency_ppb <= 0:
            raise ValueError("time constant and frequency clamp must be positive")
        self.params = params
        self.freq_ppb = self._clamp(initial_freq_ppb)
        self.drift_ppb = self.freq_ppb  # the integral term: the frequency the loop has learned
        self.state = ServoState.UNLOCKED
        self.step_allowed = not params.slew_only
        self._first: tuple[float, int] | None = None
        self._last_local_ns: int | None = None

    def reset(self, freq_ppb: float | None = None, step_allowed: bool = False) -> None:
        """Start acquiring again from ``freq_ppb`` (e.g. the holdover frequency); stepping only if allowed."""
        if freq_ppb is not None:
            self.freq_ppb = self.drift_ppb = self._clamp(freq_ppb)
        self.state = ServoState.UNLOCKED
        self.step_allowed = step_allowed and not self.params.slew_only
        self._first = None
        self._last_local_ns = None

    def resume(self, freq_ppb: float, local_ns: int) -> None:
        """Continue tracking from ``freq_ppb`` without re-estimating: a hitless return from holdover."""
        self.freq_ppb = self.drift_ppb = self._clamp(freq_ppb)
        self.state = ServoState.LOCKED
        self.step_allowed = False
        self._last_local_ns = local_ns

    def sample(self, offset_ns: float, local_ns: int) -> tuple[float, ServoState]:
        if self.state is ServoState.UNLOCKED:
            return self._acquire(offset_ns, local_ns)
        dt_s = 1.0 if self._last_local_ns is None else max(0.0, (local_ns - self._last_local_ns) / NS_PER_S)
        self._last_local_ns = local_ns
        self.drift_ppb = self._clamp(self.drift_ppb - self.params.ki_per_s2 * offset_ns * dt_s)
        self.freq_ppb = self._clamp(self.drift_ppb - self.params.kp_per_s * offset_ns)
        self.state = ServoState.LOCKED
        return self.freq_ppb, self.state

    def _acquire(self, offset_ns: float, local_ns: int) -> tuple[float, ServoState]:
        if self._first is None:
            self._first = (offset_ns, local_ns)
            return self.freq_ppb, ServoState.UNLOCKED
        first_offset, first_local = self._first
        dt_s = (local_ns - first_local) / NS_PER_S
        if dt_s <= 0:
            return self.freq_ppb, ServoState.UNLOCKED
        # The offset grew by (oscillator error + our correction) * dt: cancel the whole rate.
        self.drift_ppb = self.freq_ppb = self._clamp(self.freq_ppb - (offset_ns - first_offset) / dt_s)
        self._last_local_ns = local_ns
        if self.step_allowed and abs(offset_ns) > self.params.step_threshold_ns:
            self.step_allowed = False  # one step per acquisition, then slew
            self.state = ServoState.JUMP
            return self.freq_ppb, ServoState.JUMP
        self.step_allowed = False
        self.state = ServoState.LOCKED
        return self.sample(offset_ns, local_ns)

    def _clamp(self, freq_ppb: float) -> float:
        limit = self.params.max_frequency_ppb
        return max(-limit, min(limit, freq_ppb))
