"""The disciplined clock as the rest of the appliance sees it: phase detector, engine, clock backend, quality.

Pure core.  Takes phase samples and whether a reference drives the clock; runs them through the phase detector and the discipline
engine; applies the engine's actions to the clock backend it was given (a SoftClock, or the kernel clock through its
edge adapter); and answers ``status`` with the clock's state, error bound and everything it advertises, all computed
from the measured bound (never from configuration).  Also builds the learned state that survives a restart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol

from appliance.events import ClockStateChanged, PairedSecond, SetFrequency, StepClock
from appliance.clock import quality
from appliance.clock.discipline import ClockDiscipline, DisciplineParams
from appliance.clock.oscillator import OSCILLATORS
from appliance.clock.learned import LearnedState
from appliance.clock.phase import phase_offset_ns
from appliance.clock.predictor import Prediction, enough_to_hold_over
from appliance.clock.readiness import HoldoverReadiness
from appliance.clock.state import ClockState
from appliance.units import NS_PER_S

# A published snapshot is served until the next one (twice a second) and IRIG-B frames are built a second ahead:
# what it advertises must still hold then, while a holdover bound grows.
ADVERTISE_AHEAD_NS = 2 * NS_PER_S


class ClockBackend(Protocol):
    """What the service needs from the clock it steers."""

    def served_ns(self, raw_ns: int) -> int: ...

    def set_frequency(self, freq_ppb: float, at_raw_ns: int) -> None: ...

    def step(self, delta_ns: int, at_raw_ns: int) -> None: ...


@dataclass(frozen=True)
class ClockSnapshot:
    state: str
    state_since_raw_ns: int
    reason: str
    error_bound_ns: int | None
    frequency_ppb: float
    phase_offset_ns: float | None
    locked_since_raw_ns: int | None
    holdover_since_raw_ns: int | None
    forced_holdover: bool
    time_constant_s: float
    learned_s: float
    predicted_frequency_ppb: float | None
    predicted_aging_ppb_per_day: float | None
    steps: int
    advertised: quality.Advertised
    holdover: HoldoverReadiness | None = None  # could it hold over now, and for how long within spec


class ClockService:
    def __init__(self, params: DisciplineParams, oscillator: str, backend: ClockBackend, start_raw_ns: int,
                 profile: str = "default-e2e", degraded: str = "A"):
        self.oscillator = oscillator
        self.spec = OSCILLATORS[oscillator]
        self.engine = ClockDiscipline(params, self.spec, start_raw_ns)
        self.backend = backend
        self.profile, self.degraded = profile, degraded
        self.samples = 0
        self.reference_kind = "gnss"  # the kind of reference driving the clock (its timeSource)
        self.upstream_stratum: int | None = None  # the NTP upstream's stratum while NTP drives the clock

    # --- inputs -------------------------------------------------------------------------------------------
    def measure(self, paired: PairedSecond) -> tuple[float, float]:
        """(offset, free phase) of a paired second: served minus reference, and the reference against the raw
        oscillator (the offset minus every correction the discipline applied), which no steering can hide."""
        offset = phase_offset_ns(self.backend.served_ns(paired.edge_raw_ns), paired)
        return offset, offset - self.engine.correction_ns(paired.edge_raw_ns)

    def on_paired(self, paired: PairedSecond, temp_c: float | None = None) -> list[object]:
        return self.on_offset(self.measure(paired)[0], paired.edge_raw_ns, temp_c)

    def on_offset(self, offset_ns: float, raw_ns: int, temp_c: float | None = None,
                  doubt_ns: float = 0.0) -> list[object]:
        self.samples += 1
        return self._apply(self.engine.on_sample(offset_ns, raw_ns, temp_c, doubt_ns))

    def distrust(self, since_raw_ns: int, line: tuple[float, float] | None) -> None:
        """The active reference was found spoofed: undo what it taught the holdover model since ``since_raw_ns``,
        and judge the next holdover's frequency against ``line`` (see ClockDiscipline.distrust)."""
        self.engine.distrust(since_raw_ns, line)

    @property
    def reference_source(self) -> str | None:
        """The reference the clock was last steered by (and its holdover model learned from), in holdover too."""
        return self.engine.source

    def reference_moved(self, delta_ns: float) -> None:
        """The active reference's free phase moved on purpose (an operator's delay change): see ClockDiscipline."""
        self.engine.reference_moved(delta_ns)

    def on_reference(self, usable: bool, reason: str, raw_ns: int) -> list[object]:
        """The reference selector says whether any reference drives the clock (False: hold over)."""
        return self._apply(self.engine.on_reference_usable(usable, reason, raw_ns))

    def set_reference(self, accuracy_ns: float, noise_ns: float, source: str | None = None) -> None:
        """The active reference's accuracy (the bound's floor) and noise (lock thresholds, loop time constant)."""
        self.engine.set_reference(accuracy_ns, noise_ns, source)

    def tick(self, raw_ns: int, temp_c: float | None = None) -> list[object]:
        return self._apply(self.engine.tick(raw_ns, temp_c))

    def force_holdover(self, on: bool, raw_ns: int, who: str) -> list[object]:
        return self._apply(self.engine.force_holdover(on, raw_ns, who))

    def _apply(self, actions: list[object]) -> list[object]:
        for action in actions:
            if isinstance(action, SetFrequency):
                self.backend.set_frequency(action.freq_ppb, action.at_raw_ns)
            elif isinstance(action, StepClock):
                self.backend.step(action.delta_ns, action.at_raw_ns)
        return [a for a in actions if isinstance(a, (ClockStateChanged, StepClock))]

    # --- what the clock says about itself ----------------------------------------------------------------
    @property
    def state(self) -> ClockState:
        return self.engine.state

    @property
    def phase_ns(self) -> float | None:
        """The latest phase against the reference (served minus reference), None before the first sample."""
        return self.engine.last_offset_ns

    def correction_ns(self, raw_ns: int) -> float:
        """Every correction the discipline applied up to ``raw_ns``: what turns an offset into a free phase."""
        return self.engine.correction_ns(raw_ns)

    def bound_ns(self, raw_ns: int) -> float | None:
        return self.engine.bound_ns(raw_ns)

    def slew_cap_ns_per_s(self) -> float:
        """The fastest phase ramp the loop follows without losing lock: a type-2 loop lags a ramp by about half of
        rate x time constant, which must stay within the lock threshold."""
        e = self.engine
        return e.p.lock_threshold_ns / e.servo.params.time_constant_s

    def set_reference_timeout(self, timeout_s: float) -> None:
        """How long the loop waits without a sample before it lets go of the reference."""
        self.engine.reference_timeout_s = timeout_s

    def snapshot(self, raw_ns: int, pending_change_s: int = 0, seconds_to_change: int | None = None,
                 temp_c: float | None = None) -> ClockSnapshot:
        e = self.engine
        bound = e.bound_ns(raw_ns, temp_c)
        ahead = e.bound_ns(raw_ns + ADVERTISE_AHEAD_NS, temp_c)
        if bound is not None and ahead is not None:
            bound = max(bound, ahead)  # what is published is read until the next snapshot, and framed ahead
        bound_int = None if bound is None else int(math.ceil(bound))
        in_spec = e.state is ClockState.HOLDOVER
        adv = quality.advertise(e.state.value, bound_int, self._tdev_s(), self.profile, in_spec, pending_change_s,
                                seconds_to_change, self.degraded, reference_kind=self.reference_kind,
                                upstream_stratum=self.upstream_stratum)
        p = e.prediction() or (e.predictor.predict((raw_ns - e.start_raw_ns) / NS_PER_S)
                               if e.predictor.can_predict() else None)
        holdover_since = e.state_since_ns if e.state in (ClockState.HOLDOVER, ClockState.HOLDOVER_EXPIRED) else None
        return ClockSnapshot(e.state.value, e.state_since_ns, e.reason, bound_int, e.freq_ppb, e.last_offset_ns,
                             e.locked_since_ns, holdover_since, e.forced, e.servo.params.time_constant_s,
                             e.predictor.learned_s, None if p is None else p.frequency_ppb,
                             None if p is None else p.aging_ppb_per_s * 86_400, len(e.steps_ns), adv,
                             e.holdover_readiness(raw_ns, temp_c))

    def _tdev_s(self) -> float | None:
        e = self.engine
        if e.state in (ClockState.LOCKED, ClockState.ACQUIRING):
            tdev = quality.tdev_at_tau0_s(e.recent_offsets_ns())
            return None if tdev is None else tdev * 1e-9
        if e.state in (ClockState.HOLDOVER, ClockState.HOLDOVER_EXPIRED):
            return e.law.adev(1.0) / 3**0.5  # the oscillator alone: TDEV(1 s) = ADEV(1 s) / sqrt(3)
        return None

    # --- surviving a restart -----------------------------------------------------------------------------
    def learned_state(self, raw_ns: int, saved_at_tai_ns: int) -> LearnedState | None:
        e = self.engine
        if not e.predictor.can_predict() or e.state not in (ClockState.LOCKED, ClockState.HOLDOVER):
            return None
        now_s = (raw_ns - e.start_raw_ns) / NS_PER_S
        p = e.prediction() or e.predictor.predict(now_s)
        assert p is not None
        bound = e.bound_ns(raw_ns) or 0.0
        # In holdover the prediction dates from the loss: age it to now, since restore ages it from the save.
        dt = max(0.0, now_s - p.origin_s)
        sigma = (max(0.0, p.frequency_sigma_ppb**2 + 2 * dt * p.cov_ya + (dt * p.aging_sigma_ppb_per_s) ** 2)) ** 0.5
        return LearnedState(saved_at_tai_ns=saved_at_tai_ns, oscillator=self.oscillator, state=e.state.value,
                            frequency_ppb=-p.oscillator_ppb(now_s), frequency_sigma_ppb=sigma,
                            aging_ppb_per_s=p.aging_ppb_per_s, aging_sigma_ppb_per_s=p.aging_sigma_ppb_per_s,
                            temp_coeff_ppb_per_k=p.temp_coeff_ppb_per_k, error_bound_ns=int(bound),
                            locked_seconds=int(e.predictor.learned_s))

    def seed_frequency(self, freq_ppb: float, raw_ns: int) -> None:
        """Start from a learned frequency (a warm start whose phase nobody vouches for): FREERUN, but running at
        the right rate, so acquisition is short."""
        self._apply(self.engine.seed_frequency(freq_ppb, raw_ns))

    @staticmethod
    def can_restore(learned: LearnedState) -> bool:
        """The rule a loss in this run is held to (``enough_to_hold_over``), for a state learned in the last one."""
        return enough_to_hold_over(float(learned.locked_seconds))

    def restore(self, learned: LearnedState, downtime_s: float, raw_ns: int) -> list[object]:
        """Hold over at once on what the last run learned.  The bound covers the time the appliance was down.  A
        state that rests on too little learning (``can_restore``) only seeds the frequency, as a loss in this run
        after so little learning would free-run."""
        if not self.can_restore(learned):
            self.seed_frequency(learned.frequency_ppb, raw_ns)
            return []
        origin_s = (raw_ns - self.engine.start_raw_ns) / NS_PER_S
        aged = -learned.frequency_ppb + learned.aging_ppb_per_s * downtime_s
        sigma = (learned.frequency_sigma_ppb**2 + (learned.aging_sigma_ppb_per_s * downtime_s) ** 2) ** 0.5
        p = Prediction(origin_s, aged, sigma, learned.aging_ppb_per_s, learned.aging_sigma_ppb_per_s,
                       learned.temp_coeff_ppb_per_k, abs(learned.temp_coeff_ppb_per_k or 0.0) * 0.2,
                       float(learned.locked_seconds))
        predictor = self.engine.predictor
        downtime_bound = predictor.uncertainty_ns(replace(p, origin_s=0.0), downtime_s)
        return self._apply(self.engine.restore(p, learned.error_bound_ns + downtime_bound, raw_ns))
