"""The clock discipline engine: phase samples in; frequency and step actions, state changes and the bound out.

Pure core.  Time is the local counter's (``raw_ns``); every input carries it.  The engine runs the state machine of
``state.py``, feeds the PI servo while a qualified reference drives the clock (shortening its time constant to
acquire, then lengthening it in doublings to the oscillator's best value; a clock that has locked before keeps its
learned frequency when it re-acquires and pulls the phase in outside the loop), teaches the holdover predictor while
locked, and steers on the prediction when the reference is gone.  It keeps the error bound honest in every state: measured
while locked, grown from the prediction's uncertainty in holdover, unknown in free run.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from appliance.events import ClockStateChanged, SetFrequency, StepClock
from appliance.clock.oscillator import OscillatorSpec, PowerLaw, power_law
from appliance.clock.predictor import MIN_LEARN_S, HoldoverPredictor, Prediction, enough_to_hold_over
from appliance.clock.readiness import HoldoverReadiness, readiness
from appliance.clock.servo import PiServo, ServoParams, ServoState
from appliance.clock.state import ClockEvent, ClockState, next_state
from appliance.units import NS_PER_S

ACQUIRE_TIME_CONSTANT_S = 16.0


@dataclass(frozen=True)
class DisciplineParams:
    time_constant_s: float = 0.0  # 0: the oscillator's best (where its stability meets the reference noise)
    max_frequency_ppb: float = 2000.0
    step_threshold_ns: int = 100_000
    slew_only: bool = False
    lock_threshold_ns: int = 100
    lock_samples: int = 16
    unlock_threshold_ns: int = 1000
    unlock_samples: int = 4
    qualify_s: int = 10
    warmup_s: int = 10
    reference_timeout_s: int = 3
    holdover_spec_ns: int = 1000
    reference_accuracy_ns: int = 20
    reference_noise_ns: float = 2.0
    learn_window_s: int = 3 * 86_400
    holdover_temp_k: float = 1.0


@dataclass
class _Holdover:
    prediction: Prediction
    entry_raw_ns: int
    entry_bound_ns: float
    entry_temp_c: float | None
    forced: bool = False
    # What the model cannot know after a spoofed reference taught it: how far its frequency is from the integrity
    # check's reference line, plus that line's own 3 sigma (ppb, i.e. ns of phase per second of holdover).
    doubt_ppb: float = 0.0


@dataclass
class _Qualifier:
    good_since_ns: int | None = None
    last_ns: int | None = None

    def sample(self, raw_ns: int) -> None:
        if self.last_ns is None or raw_ns - self.last_ns > 2 * NS_PER_S:
            self.good_since_ns = raw_ns
        self.last_ns = raw_ns

    def qualified_for_s(self, raw_ns: int) -> float:
        if self.good_since_ns is None or self.last_ns is None or raw_ns - self.last_ns > 2 * NS_PER_S:
            return 0.0
        return (raw_ns - self.good_since_ns) / NS_PER_S

    def reset(self) -> None:
        self.good_since_ns = self.last_ns = None


def best_time_constant_s(law: PowerLaw, reference_noise_ns: float) -> float:
    """Where the reference's white phase noise (ADEV sqrt(3).sigma/tau) meets the oscillator's stability."""
    tau = 1.0
    while tau < 4000 and math.sqrt(3) * reference_noise_ns * 1e-9 / tau > law.adev(tau):
        tau *= 1.1
    return max(4.0, min(tau, 4000.0))


class ClockDiscipline:
    def __init__(self, params: DisciplineParams, spec: OscillatorSpec, start_raw_ns: int):
        self.p = self.base = params
        # The caller may allow a slower reference longer (its selector decides when a reference is lost; this is
        # the safety net behind it).
        self.reference_timeout_s: float = params.reference_timeout_s
        self.law = power_law(spec)
        self.spec_initial_offset_ppb = spec.initial_offset_ppb
        self.spec_white_pm_rms_ns = spec.white_pm_rms_ns
        self.target_tau_s = params.time_constant_s or best_time_constant_s(self.law, params.reference_noise_ns)
        self.servo = PiServo(self._servo_params(min(ACQUIRE_TIME_CONSTANT_S, self.target_tau_s)))
        self.predictor = HoldoverPredictor(spec, params.learn_window_s, params.holdover_temp_k)
        self.state = ClockState.FREERUN
        self.state_since_ns = start_raw_ns
        self.reason = "starting: waiting for a qualified reference"
        self.start_raw_ns = start_raw_ns
        self.freq_ppb = 0.0
        self.last_offset_ns: float | None = None
        self.locked_since_ns: int | None = None
        self.ever_locked = False
        self.usable = True
        self.forced = False
        self._holdover: _Holdover | None = None
        self._restored_prediction: Prediction | None = None
        self._qualifier = _Qualifier()
        self._recent: deque[float] = deque(maxlen=64)
        self._lock_count = self._unlock_count = 0
        self._tau_since_ns = start_raw_ns
        self._corr_anchor_ns, self._corr_ns = start_raw_ns, 0.0  # sum of every correction applied so far
        self.steps_ns: list[int] = []
        self._acquired_once = False
        self._shifting = True  # the loop's time constant is still being doubled up from an acquisition
        self._source: str | None = None  # the reference the loop was last tuned for
        self._switch_pending = False  # the next sample is the first from a new reference
        self._carried_bound_ns: float | None = None  # the bound from before a switch, until the new one is measured
        self._doubt_ns = 0.0  # the reference's latest integrity residual: where an undetected push has moved it
        self._line: tuple[float, float] | None = None  # a clean frequency estimate and its sigma, after a rejection
        self._taught_only = False  # the model was forgotten: all it knew came from a reference found spoofed
        # Re-acquisition of a clock that has locked before: the phase still to be pulled in (served minus reference,
        # removed from the loop's samples) and the frequency added outside the loop to move it (pull-in).
        self._pull_left_ns = 0.0
        self._pull_ppb = 0.0
        self._pull_at_ns = start_raw_ns
        # The free phase (offset minus every correction applied) of the latest unbroken run of samples: the
        # oscillator's own frequency against the reference, measured rather than taken from its datasheet.
        self._free_phase: deque[tuple[int, float]] = deque(maxlen=16)

    def set_reference(self, accuracy_ns: float, noise_ns: float, source: str | None = None) -> None:
        """The reference driving the clock changed, or its quality did: its accuracy is the floor of the bound, and
        a noisier reference (PTP over software timestamps, NTP) widens the lock thresholds and lengthens the loop's
        time constant, so the clock neither flaps between LOCKED and ACQUIRING nor follows the noise.  ``source``
        names the reference (a new name is a switch)."""
        switched = source != self._source
        self._source = source
        if switched and self.state in (ClockState.LOCKED, ClockState.ACQUIRING):
            # The offsets measured against the old reference say nothing of the phase against the new one: until
            # the new one has given its own, the bound the clock had still covers it (nothing moved the clock).
            self._carried_bound_ns = self.bound_ns(self._qualifier.last_ns or self.start_raw_ns)
            self._recent.clear()
            self._free_phase.clear()
            self._switch_pending = True
            self._doubt_ns = 0.0  # the new reference's samples bring their own
        b = self.base
        # A reference as quiet as the one the loop was tuned for (within 10x: GNSS, a good PTP port) keeps that
        # tuning; only a noisy one retunes it, and only when its noise moved by more than 2x since the last tuning
        # (an estimate of noise is itself noisy: the loop must not be retuned every second).
        noise = b.reference_noise_ns if noise_ns <= 10 * b.reference_noise_ns else noise_ns
        tuned = self.p.reference_noise_ns
        if int(round(accuracy_ns)) == self.p.reference_accuracy_ns and tuned / 2 <= noise <= 2 * tuned:
            return
        if tuned / 2 <= noise <= 2 * tuned:
            noise = tuned
        self.p = replace(b, reference_accuracy_ns=int(round(max(0.0, accuracy_ns))),
                         lock_threshold_ns=max(b.lock_threshold_ns, int(3 * noise)),
                         unlock_threshold_ns=max(b.unlock_threshold_ns, int(10 * noise)), reference_noise_ns=noise)
        target = b.time_constant_s or best_time_constant_s(self.law, noise)
        if target != self.target_tau_s:
            self.target_tau_s = target
            # Locked on a new reference, the loop takes its time constant at once (a noisy reference must not be
            # followed with a quiet one's bandwidth).  Acquiring, or locked and still shifting up from an acquisition
            # on the same reference (its frequency not yet learned at the longer time constants: a new estimate of
            # the reference's noise must not cut that short), it shifts up to it as usual.
            if self.servo.params.time_constant_s > target or (self.state is ClockState.LOCKED
                                                              and (switched or not self._shifting)):
                self.servo.params = self._servo_params(target)

    # --- inputs -----------------------------------------------------------------------------------------
    def on_sample(self, offset_ns: float, raw_ns: int, temp_c: float | None = None,
                  doubt_ns: float = 0.0) -> list[object]:
        """One phase-detector sample (served minus reference at ``raw_ns``); ``doubt_ns``: how far the reference sits
        from where the oscillator says it should be (an integrity residual), which the bound includes while the
        reference drives the clock."""
        if not self.usable:
            return []
        self.last_offset_ns = offset_ns
        self._doubt_ns = abs(doubt_ns) if math.isfinite(doubt_ns) else 0.0
        if self._free_phase and raw_ns - self._free_phase[-1][0] > 2 * NS_PER_S:
            self._free_phase.clear()  # a gap: the run the qualifier counts starts again
        self._free_phase.append((raw_ns, offset_ns - self._correction_ns(raw_ns)))
        self._qualifier.sample(raw_ns)
        handler = {ClockState.ACQUIRING: self._acquiring, ClockState.LOCKED: self._locked}.get(self.state)
        if handler is not None and self._switch_pending:
            self._switch_pending = False
            if self._acquired_once:
                # A new reference whose phase is off the clock's (a revertive return, GNSS back after PTP): pulled
                # in outside the loop as a re-acquisition is, staying LOCKED when it is within the unlock threshold.
                self._start_pull_in(offset_ns, raw_ns)
                if self._pull_left_ns:
                    self.predictor.interrupt()
        if handler is not None:
            return handler(offset_ns, raw_ns, temp_c)
        return self._maybe_qualify(offset_ns, raw_ns)

    def on_reference_usable(self, usable: bool, reason: str, raw_ns: int) -> list[object]:
        """The receiver says whether its time can be trusted at all (fix, integrity); False drops it at once."""
        if usable == self.usable:
            return []
        self.usable = usable
        if usable:
            return []
        self._qualifier.reset()
        return self._reference_lost(reason, raw_ns)

    def tick(self, raw_ns: int, temp_c: float | None = None) -> list[object]:
        """Once a second: notice a silent reference; steer and grow the bound in holdover."""
        out: list[object] = []
        last = self._qualifier.last_ns
        timeout_s = max(self.p.reference_timeout_s, self.reference_timeout_s)
        if self.state in (ClockState.ACQUIRING, ClockState.LOCKED) and (
                last is None or raw_ns - last > timeout_s * NS_PER_S):
            out += self._reference_lost(f"no reference sample for {timeout_s:g} s", raw_ns)
        if self._holdover is not None:
            out += self._steer_holdover(raw_ns, temp_c)
        return out

    def force_holdover(self, on: bool, raw_ns: int, who: str = "operator") -> list[object]:
        if on:
            if not self.can_hold_over():
                raise ValueError("the clock has not learned its oscillator yet: it cannot hold over")
            self.forced = True
            if self._holdover is not None:
                self._holdover.forced = True
                return []
            return self._event(ClockEvent.FORCE_HOLDOVER, f"holdover forced by {who}", raw_ns)
        self.forced = False
        if self._holdover is not None:
            self._holdover.forced = False
        return []

    def seed_frequency(self, freq_ppb: float, raw_ns: int) -> list[object]:
        """Free-run at a learned frequency correction; the servo starts acquiring from it."""
        self.servo.reset(freq_ppb, step_allowed=True)
        return self._set_frequency(self.servo.freq_ppb, raw_ns)

    def restore(self, prediction: Prediction, bound_ns: float, raw_ns: int, temp_c: float | None = None) -> list[object]:
        """Start in holdover from a learned state saved before a restart (the caller checked it is recent), under
        the same rule as a loss in this run: it must rest on enough learning (ValueError if not)."""
        if not enough_to_hold_over(prediction.learned_s):
            raise ValueError(f"the learned state rests on {prediction.learned_s:.0f} s of learning, less than the "
                             f"{MIN_LEARN_S} s a holdover needs")
        self._restored_prediction = prediction
        self.servo.reset(-prediction.frequency_ppb, step_allowed=False)
        self.ever_locked = True
        out = self._event(ClockEvent.RESTORED, "restored the learned oscillator state of the last run", raw_ns,
                          entry_bound_ns=bound_ns, temp_c=temp_c)
        return out

    # --- per-state sample handling -------------------------------------------------------------------------
    def _maybe_qualify(self, offset_ns: float, raw_ns: int) -> list[object]:
        if self.forced or (raw_ns - self.start_raw_ns) < self.p.warmup_s * NS_PER_S:
            return []
        if self._qualifier.qualified_for_s(raw_ns) < self.p.qualify_s:
            return []
        held = self._holdover is not None
        if held and abs(offset_ns) <= self.p.lock_threshold_ns:
            return self._event(ClockEvent.RELOCK, f"reference qualified for {self.p.qualify_s} s, phase "
                                                  f"{offset_ns:+.0f} ns within the lock threshold", raw_ns)
        return self._event(ClockEvent.REFERENCE_QUALIFIED, f"reference qualified for {self.p.qualify_s} s",
                           raw_ns)

    def _acquiring(self, offset_ns: float, raw_ns: int, temp_c: float | None) -> list[object]:
        out = self._run_servo(offset_ns, raw_ns)
        if self.servo.state is ServoState.LOCKED and abs(offset_ns) <= self.p.lock_threshold_ns:
            self._lock_count += 1
        else:
            self._lock_count = 0
        if self._lock_count >= self.p.lock_samples:
            out += self._event(ClockEvent.LOCK_ACHIEVED, f"phase within {self.p.lock_threshold_ns} ns for "
                                                         f"{self.p.lock_samples} s", raw_ns)
        return out

    def _locked(self, offset_ns: float, raw_ns: int, temp_c: float | None) -> list[object]:
        if abs(offset_ns) > self.p.unlock_threshold_ns:
            self._unlock_count += 1
            if self._unlock_count >= self.p.unlock_samples:
                return self._event(ClockEvent.LOCK_LOST, f"phase {offset_ns:+.0f} ns beyond "
                                                         f"{self.p.unlock_threshold_ns} ns", raw_ns)
            return []  # an outlier is not fed to the loop
        self._unlock_count = 0
        out = self._run_servo(offset_ns, raw_ns)
        self.predictor.learn((raw_ns - self.start_raw_ns) / NS_PER_S, offset_ns - self._correction_ns(raw_ns),
                             temp_c)
        return out

    def _run_servo(self, offset_ns: float, raw_ns: int) -> list[object]:
        out: list[object] = []
        self._recent.append(offset_ns)
        if len(self._recent) >= 8:
            self._carried_bound_ns = None
        loop_offset_ns = offset_ns - self._pulled_in(raw_ns)
        freq, st = self.servo.sample(loop_offset_ns, raw_ns)
        if st is ServoState.JUMP:
            step = -round(offset_ns)
            self._apply_step(step, raw_ns)
            out.append(StepClock(step, raw_ns))
            self._recent.clear()
        self._gear_shift(offset_ns, raw_ns)
        return out + self._set_frequency(freq + self._pull_ppb, raw_ns)

    def _pulled_in(self, raw_ns: int) -> float:
        """The phase still to be pulled in at ``raw_ns``, and the pull-in frequency for the next second.

        A warm re-acquisition moves the phase with a frequency added outside the loop, and takes the phase still to
        go out of the loop's samples: the loop sees only the reference's noise and any frequency error, so its
        integral is not taught the pull-in as a frequency it must unlearn afterwards (which would carry the phase on
        past the reference by a good part of the step).  The phase comes in exponentially with the acquisition time
        constant (16 s), no faster than the frequency clamp (the slew rate limit), and the last nanoseconds at 1
        ns/s so that it ends."""
        if self._pull_left_ns == 0.0:
            self._pull_ppb = 0.0
            return 0.0
        moved = self._pull_ppb * max(0, raw_ns - self._pull_at_ns) / NS_PER_S  # ppb x s = ns
        left = self._pull_left_ns + moved
        if left * self._pull_left_ns <= 0:  # done (the pull-in frequency below never overshoots by more than dt)
            left = 0.0
        self._pull_left_ns, self._pull_at_ns = left, raw_ns
        rate = min(self.p.max_frequency_ppb, max(1.0, abs(left) / ACQUIRE_TIME_CONSTANT_S), abs(left))
        self._pull_ppb = -math.copysign(rate, left) if left else 0.0
        return left

    def _start_pull_in(self, offset_ns: float | None, raw_ns: int) -> None:
        """Pull in the phase a warm re-acquisition starts from, unless it is within the reference's own noise."""
        self._pull_left_ns, self._pull_ppb, self._pull_at_ns = 0.0, 0.0, raw_ns
        if offset_ns is not None and abs(offset_ns) > max(self.p.lock_threshold_ns, 3 * self.p.reference_noise_ns):
            self._pull_left_ns = offset_ns

    def _gear_shift(self, offset_ns: float, raw_ns: int) -> None:
        """Acquire with a short time constant, then double it (after 3 time constants in the lock threshold).  In
        the threshold is judged on the mean of the last 8 samples: a noisy reference's single 3-sigma sample is not
        the phase leaving it, and would hold the loop at its acquisition time constant for good."""
        tau = self.servo.params.time_constant_s
        last = list(self._recent)[-8:] or [offset_ns]
        if abs(sum(last) / len(last)) > self.p.lock_threshold_ns:
            self._tau_since_ns = raw_ns
            return
        if tau < self.target_tau_s and raw_ns - self._tau_since_ns >= 3 * tau * NS_PER_S:
            self.servo.params = self._servo_params(min(2 * tau, self.target_tau_s))
            self._tau_since_ns = raw_ns
        if self.servo.params.time_constant_s >= self.target_tau_s:
            self._shifting = False

    # --- holdover ------------------------------------------------------------------------------------------
    def _steer_holdover(self, raw_ns: int, temp_c: float | None) -> list[object]:
        h = self._holdover
        assert h is not None
        t_s = (raw_ns - self.start_raw_ns) / NS_PER_S
        out = self._set_frequency(-h.prediction.oscillator_ppb(t_s, temp_c), raw_ns)
        if self.state is ClockState.HOLDOVER and self.bound_ns(raw_ns, temp_c) > self.p.holdover_spec_ns:
            out += self._event(ClockEvent.HOLDOVER_LIMIT, f"error bound passed the holdover spec of "
                                                          f"{self.p.holdover_spec_ns} ns", raw_ns)
        return out

    def distrust(self, since_raw_ns: int, line: tuple[float, float] | None) -> None:
        """The reference driving the clock was found spoofed: nothing it taught the holdover model since
        ``since_raw_ns`` is kept (the model goes back to its state then, or is forgotten when it had learned
        nothing before), and ``line`` (frequency ppb, sigma ppb: the integrity check's line through clean data) is
        what the next holdover's frequency is judged against."""
        self._taught_only = not self.predictor.rollback((since_raw_ns - self.start_raw_ns) / NS_PER_S)
        self._line = line

    @property
    def source(self) -> str | None:
        """The reference the loop was last tuned for: the one its samples, and the holdover model's, came from."""
        return self._source

    def reference_moved(self, delta_ns: float) -> None:
        """The active reference's phase moved on purpose by ``delta_ns`` (an operator's delay change): the holdover
        model's phase moves with it.  The loop is not told: it slews the served clock onto the reference as for any
        offset, which is what the change is for."""
        self.predictor.shift_phase(delta_ns)
        self._free_phase.clear()  # a rate measured across the move would count it as frequency

    def can_hold_over(self) -> bool:
        """One rule, whether the learning happened in this run or was restored: a prediction resting on enough
        learning (``enough_to_hold_over``) exists."""
        restored = self._restored_prediction
        return self.ever_locked and (self.predictor.can_predict() or (
            restored is not None and enough_to_hold_over(restored.learned_s)))

    def _prediction_at(self, t_s: float) -> Prediction | None:
        """What a holdover starting at ``t_s`` (seconds since start) steers on: the model fitted in this run when it
        rests on enough learning, else the restored one carried on to ``t_s`` (its frequency aged, its uncertainty
        grown: a stale state counts for less)."""
        if self.predictor.can_predict():
            return self.predictor.predict(t_s)
        p = self._restored_prediction
        if p is None or not enough_to_hold_over(p.learned_s):
            return None
        return self.predictor.aged(p, t_s)

    def _reference_lost(self, reason: str, raw_ns: int) -> list[object]:
        if self.state not in (ClockState.ACQUIRING, ClockState.LOCKED):
            return []
        event = ClockEvent.REFERENCE_LOST if self.can_hold_over() else ClockEvent.REFERENCE_LOST_COLD
        if event is ClockEvent.REFERENCE_LOST_COLD and self._taught_only:
            reason += "; no holdover: all the clock had learned came from the rejected reference"
        self._taught_only = False
        return self._event(event, reason, raw_ns)

    # --- transitions ---------------------------------------------------------------------------------------
    def _event(self, event: ClockEvent, reason: str, raw_ns: int, entry_bound_ns: float | None = None,
               temp_c: float | None = None) -> list[object]:
        new = next_state(self.state, event)
        if new is None:
            return []
        old, bound_before = self.state, self.bound_ns(raw_ns)
        self.state, self.state_since_ns, self.reason = new, raw_ns, reason
        self._enter(new, old, raw_ns, entry_bound_ns if entry_bound_ns is not None else bound_before, temp_c)
        out: list[object] = [ClockStateChanged(old.value, new.value, reason, raw_ns)]
        if self._holdover is not None and new in (ClockState.HOLDOVER,):
            out += self._steer_holdover(raw_ns, temp_c)
        return out

    def _enter(self, new: ClockState, old: ClockState, raw_ns: int, bound_ns: float | None,
               temp_c: float | None) -> None:
        self._lock_count = self._unlock_count = 0
        self._pull_left_ns = self._pull_ppb = 0.0
        if old is ClockState.LOCKED:
            self.predictor.interrupt()
        if new is ClockState.HOLDOVER and old is not ClockState.HOLDOVER:
            t_s = (raw_ns - self.start_raw_ns) / NS_PER_S
            prediction = self._prediction_at(t_s)
            assert prediction is not None, "the engine only holds over when it can predict"
            doubt = 0.0
            if self._line is not None:
                line_ppb, line_sigma_ppb = self._line
                doubt = abs(prediction.frequency_ppb - line_ppb) + 3 * line_sigma_ppb
                self._line = None
            self._holdover = _Holdover(prediction, raw_ns, bound_ns or 0.0, temp_c, self.forced, doubt)
            self.locked_since_ns = None
        elif new is ClockState.ACQUIRING:
            if self._acquired_once:
                # A clock that has locked before re-acquires from the frequency it learned (the loop's integral when
                # it lost lock, the prediction it steered on in holdover): a fresh two-sample estimate from a noisy
                # reference would be off by tens of ppb, and the loop would walk the phase microseconds away while
                # it unlearned that.  The phase is pulled in outside the loop (_pulled_in).
                self.servo.resume(self.servo.drift_ppb if old is ClockState.LOCKED else self.freq_ppb, raw_ns)
                self._start_pull_in(self.last_offset_ns, raw_ns)
            else:
                # One step at most per start, on its first acquisition: a cold clock, or a restored one whose
                # restart did not keep time after all.  Every later acquisition slews.
                self.servo.reset(self.freq_ppb if self.ever_locked else None, step_allowed=True)
            self.servo.params = self._servo_params(self._acquire_tau_s())
            self._shifting = True
            self._tau_since_ns = raw_ns
            self._holdover = None
            self._recent.clear()
        elif new is ClockState.LOCKED:
            if old in (ClockState.HOLDOVER, ClockState.HOLDOVER_EXPIRED):
                self.servo.resume(self.freq_ppb, raw_ns)  # hitless: carry on from the holdover frequency
                # The offsets from before the holdover no longer describe the phase: the bound starts from the
                # phase the relock measured.
                self._recent.clear()
                if self.last_offset_ns is not None:
                    self._recent.append(self.last_offset_ns)
            self._holdover = None
            self._line = None  # a later holdover is judged on what the clock learns from here
            self.ever_locked = True
            self._acquired_once = True
            self.locked_since_ns = raw_ns
        elif new is ClockState.FREERUN:
            self._holdover = None
            self.locked_since_ns = None

    # --- the clock's corrections ------------------------------------------------------------------------
    def _set_frequency(self, freq_ppb: float, raw_ns: int) -> list[object]:
        self._corr_ns = self._correction_ns(raw_ns)
        self._corr_anchor_ns = raw_ns
        if freq_ppb == self.freq_ppb:
            return []
        self.freq_ppb = freq_ppb
        return [SetFrequency(freq_ppb, raw_ns)]

    def _apply_step(self, step_ns: int, raw_ns: int) -> None:
        self._corr_ns = self._correction_ns(raw_ns) + step_ns
        self._corr_anchor_ns = raw_ns
        self.steps_ns.append(step_ns)

    def correction_ns(self, raw_ns: int) -> float:
        """Every correction applied to the clock since start (frequency integrated, and steps), at ``raw_ns``."""
        return self._correction_ns(raw_ns)

    def _correction_ns(self, raw_ns: int) -> float:
        return self._corr_ns + (raw_ns - self._corr_anchor_ns) * self.freq_ppb * 1e-9

    def _acquire_tau_s(self) -> float:
        """Acquire with a short time constant; from a noisy reference (NTP) not so short that the loop follows its
        noise at the frequency clamp."""
        if self.p.reference_noise_ns > self.base.reference_noise_ns:
            return min(self.target_tau_s, max(ACQUIRE_TIME_CONSTANT_S, self.target_tau_s / 8))
        return min(ACQUIRE_TIME_CONSTANT_S, self.target_tau_s)

    def _servo_params(self, tau_s: float) -> ServoParams:
        return ServoParams(tau_s, self.p.max_frequency_ppb, self.p.step_threshold_ns, self.p.slew_only)

    # --- what the clock can vouch for ------------------------------------------------------------------
    def bound_ns(self, raw_ns: int, temp_c: float | None = None) -> float | None:
        if self.state is ClockState.FREERUN:
            return None
        if self._holdover is not None and self.state in (ClockState.HOLDOVER, ClockState.HOLDOVER_EXPIRED):
            h = self._holdover
            change = None if temp_c is None or h.entry_temp_c is None else temp_c - h.entry_temp_c
            held_s = (raw_ns - h.entry_raw_ns) / NS_PER_S
            return (h.entry_bound_ns + self.predictor.uncertainty_ns(h.prediction, held_s, change)
                    + h.doubt_ppb * max(held_s, 0.0))
        spread = _rms(self._recent)
        if len(self._recent) < 8:  # a scatter not yet measured (just acquiring, just relocked): the reference's own
            spread = max(spread, self.p.reference_noise_ns)
        # + 1: the served clock reads whole nanoseconds; the doubt: a push below every integrity threshold has moved
        # the reference, and the clock with it, that far from the oscillator's own line
        bound = self.p.reference_accuracy_ns + 3 * spread + 1.0 + self._doubt_ns
        if self._carried_bound_ns is not None:
            bound = max(bound, self._carried_bound_ns)
        if self.state is ClockState.ACQUIRING and self.last_offset_ns is not None:
            bound += abs(self.last_offset_ns)
            if self.servo.state is not ServoState.LOCKED and self._qualifier.last_ns is not None:
                # No frequency estimate in the loop yet: since the last sample the phase has moved at the
                # oscillator's own rate, plus the correction still applied (a slew cut short by a lost reference,
                # say), until the servo has measured the two together.
                since_s = max(0, raw_ns - self._qualifier.last_ns) / NS_PER_S
                bound += (self._oscillator_rate_bound_ppb() + abs(self.freq_ppb)) * since_s
        return bound

    def _oscillator_rate_bound_ppb(self) -> float:
        """How fast (ppb: ns per s) the free-running oscillator may be moving the phase against the reference.

        Measured across the latest run of samples (their free phase: the offset minus every correction), with the
        3 sigma of that measurement (the readings' white noise at both ends, and the oscillator's own wander over
        the run).  The datasheet's tolerance is only the fallback before two samples: it is a 1-sigma figure, and
        a part 3.2 sigma off (a TCXO at +1616 ppb against 3 x 500) outran it by 34 ns in the half second after a
        qualifying sample."""
        if len(self._free_phase) < 2:
            return 3 * self.spec_initial_offset_ppb
        (raw0, free0), (raw1, free1) = self._free_phase[0], self._free_phase[-1]
        dt_s = (raw1 - raw0) / NS_PER_S
        if dt_s <= 0:
            return 3 * self.spec_initial_offset_ppb
        reading_ns = math.hypot(self.p.reference_noise_ns, self.spec_white_pm_rms_ns)
        noise_ppb = 3 * (math.sqrt(2) * reading_ns / dt_s + self.law.adev(max(dt_s, 1.0)) * 1e9)
        return abs(free1 - free0) / dt_s + noise_ppb

    def holdover_readiness(self, raw_ns: int, temp_c: float | None = None) -> HoldoverReadiness:
        """Whether a loss now gives HOLDOVER (the rule ``can_hold_over`` applies on a loss), and for how long it
        would stay within the holdover spec: the bound from now on, as a holdover starting now would grow it; in
        holdover, the time left on the one running."""
        held = self._holdover is not None and self.state in (ClockState.HOLDOVER, ClockState.HOLDOVER_EXPIRED)
        capable = held or self.can_hold_over()
        bound_after = self._held_bound(raw_ns, temp_c) if held else \
            self._bound_if_lost(raw_ns, temp_c) if capable else None
        return readiness(self.state.value, capable, self.predictor.learning_s, MIN_LEARN_S,
                         self.predictor.seconds_until_enough(), self.p.holdover_spec_ns, bound_after, self.ever_locked)

    def _held_bound(self, raw_ns: int, temp_c: float | None) -> Callable[[float], float]:
        """The running holdover's bound t seconds from ``raw_ns``."""
        return lambda t_s: self.bound_ns(raw_ns + int(t_s * NS_PER_S), temp_c) or 0.0

    def _bound_if_lost(self, raw_ns: int, temp_c: float | None) -> Callable[[float], float] | None:
        """The bound t seconds into a holdover that started at ``raw_ns``, as ``bound_ns`` would grow it then."""
        p = self._prediction_at((raw_ns - self.start_raw_ns) / NS_PER_S)
        entry_ns = self.bound_ns(raw_ns, temp_c)
        if p is None or entry_ns is None:
            return None
        doubt = 0.0 if self._line is None else abs(p.frequency_ppb - self._line[0]) + 3 * self._line[1]
        return lambda t_s: entry_ns + self.predictor.uncertainty_ns(p, t_s) + doubt * t_s

    def prediction(self) -> Prediction | None:
        return None if self._holdover is None else self._holdover.prediction

    def recent_offsets_ns(self) -> list[float]:
        return list(self._recent)


def _rms(values: deque[float]) -> float:
    if not values:
        return 0.0
    return math.sqrt(sum(v * v for v in values) / len(values))
