"""Numbered, seeded clock scenarios: each runs the simulated world and checks its own figures.

Pure.  ``appliance sim --scenario NAME [--seed N]`` runs one and prints what it measured and which checks passed;
the tests run them all.  Scenarios 1-5 and 7 drive the clock at the phase detector (ClockSim: a day costs about
two seconds); scenario 6, the leap second, runs the whole appliance on the simulated receiver's bytes, because a
leap second is about labels as much as about the clock.  Scenarios 8-15 attack the GNSS reference (spoofing,
meaconing, jamming) and 16-20 stage benign sky events that must not alarm, on the whole appliance (``sim/attacks.py``).
Scenarios 21-23 replay the hardest slow pushes the honesty sweep (``sim/honesty.py``, ``bench/honesty.py``) tried:
the served error must stay within the advertised bound every second, before, during and after the attack.
Scenario 24 holds the holdover readiness figure to what the clock then does on a loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import Any

from appliance import config as cfg
from appliance.sim.oscillator import temperature_profile_sine
from appliance.sim.clocksim import ClockSim, Record
from appliance.sim.holdover_run import holdover_trial
from appliance.sim.leapsecond import first_after_expiry
from appliance.units import NS_PER_S

DAY_S = 86_400


@dataclass
class ScenarioResult:
    number: int
    name: str
    seed: int
    figures: dict[str, Any] = field(default_factory=dict)
    checks: list[tuple[str, bool]] = field(default_factory=list)

    def check(self, description: str, passed: bool) -> None:
        self.checks.append((description, bool(passed)))

    @property
    def passed(self) -> bool:
        return all(ok for _, ok in self.checks)


def honest(rec: Record, start: int = 0) -> float:
    """Worst |TE| / bound over the record from ``start`` (<= 1 means the bound always held)."""
    ratios = [abs(te) / b for te, b in zip(rec.te_ns[start:], rec.bound_ns[start:]) if b == b and b > 0]
    return max(ratios, default=0.0)


def first_time(rec: Record, state: str, after_s: int = 0) -> int | None:
    for t, _old, new, _why in rec.transitions:
        if new == state and t >= after_s:
            return t
    return None


def s01_cold_start(seed: int) -> ScenarioResult:
    r = ScenarioResult(1, "cold-start", seed)
    sim = ClockSim("ocxo", seed=seed, initial_error_ns=3_000_000)
    t0 = sim.true_ns // NS_PER_S
    rec = sim.run(2 * 3600)
    acq, locked = first_time(rec, "ACQUIRING"), first_time(rec, "LOCKED")
    lock_i = None if locked is None else locked - t0
    r.figures.update(initial_error_ns=3_000_000, steps_ns=sim.phase_steps_ns,
                     to_acquiring_s=None if acq is None else acq - t0, to_locked_s=lock_i,
                     max_abs_te_after_lock_ns=max(abs(v) for v in rec.te_ns[lock_i:]) if lock_i else None,
                     rms_te_last_hour_ns=_rms(rec.te_ns[-3600:]), bound_end_ns=round(rec.bound_ns[-1]),
                     time_constant_s=sim.engine.servo.params.time_constant_s)
    r.check("locked within 60 s of power-up", lock_i is not None and lock_i <= 60)
    r.check("exactly one phase step (the first lock)", len(sim.phase_steps_ns) == 1)
    r.check("max |TE| after lock <= 100 ns", lock_i is not None and r.figures["max_abs_te_after_lock_ns"] <= 100)
    r.check("|TE| <= advertised bound at every second", honest(rec) <= 1.0)
    return r


def _holdover_scenario(number: int, name: str, oscillator: str, seed: int, limit_ns: float | None) -> ScenarioResult:
    r = ScenarioResult(number, name, seed)
    t = holdover_trial(oscillator, seed)
    r.figures.update(oscillator=oscillator, learned_h=t.learn_s / 3600, te_at_loss_ns=t.te_at_loss_ns,
                     te_24h_ns=t.te_end_ns, oracle_te_24h_ns=round(t.oracle_te_end_ns), bound_24h_ns=round(t.bound_end_ns),
                     state_24h=t.state_end, spec_exceeded_after_h=None if t.expired_after_s is None
                     else round(t.expired_after_s / 3600, 2))
    r.check("|TE| <= advertised bound throughout the holdover", t.worst_bound_ratio <= 1.0)
    r.check("still predicting after 24 h (HOLDOVER or HOLDOVER_EXPIRED)", t.state_end.startswith("HOLDOVER"))
    if limit_ns is not None:
        r.check(f"|TE| after 24 h <= {limit_ns:.0f} ns", abs(t.te_end_ns) <= limit_ns)
    return r


def s02_ocxo_holdover(seed: int) -> ScenarioResult:
    return _holdover_scenario(2, "ocxo-holdover-24h", "ocxo-hp", seed, 10_000)


def s03_rubidium_holdover(seed: int) -> ScenarioResult:
    return _holdover_scenario(3, "rubidium-holdover-24h", "rubidium", seed, 1_000)


def s04_gnss_flapping(seed: int) -> ScenarioResult:
    r = ScenarioResult(4, "gnss-flapping", seed)
    sim = ClockSim("ocxo", seed=seed)
    sim.run(6 * 3600)
    steps_when_locked = len(sim.phase_steps_ns)
    rng = Random(seed)
    outages, now = [], sim.true_ns // NS_PER_S
    for _ in range(12):
        start = now + rng.randint(120, 600)
        now = start + rng.randint(30, 600)
        outages.append((start, now))
    first = len(sim.record.te_ns)
    rec = sim.run(now - sim.true_ns // NS_PER_S + 600, reference=lambda s: not any(a <= s < b for a, b in outages))
    te = rec.te_ns[first:]
    jumps = [abs(b - a) for a, b in zip(te, te[1:])]
    holdovers = sum(1 for tr in rec.transitions if tr[2] == "HOLDOVER" and tr[0] > outages[0][0] - 5)
    r.figures.update(outages=len(outages), holdovers=holdovers, max_abs_te_ns=max(abs(v) for v in te),
                     max_te_change_per_s_ns=max(jumps),
                     steps_during_flapping=len(sim.phase_steps_ns) - steps_when_locked,
                     state_end=rec.state[-1])
    r.check("every outage held over (no free run)", "FREERUN" not in rec.state[first:])
    r.check("no phase step while flapping", len(sim.phase_steps_ns) == steps_when_locked)
    r.check("served time never moves more than 20 ns in a second relative to true time", max(jumps) <= 20)
    r.check("|TE| <= advertised bound throughout", honest(rec, first) <= 1.0)
    r.check("locked again at the end", rec.state[-1] == "LOCKED")
    return r


def s05_temperature_swing(seed: int) -> ScenarioResult:
    r = ScenarioResult(5, "temperature-swing", seed)
    errors = {}
    for thermometer in (True, False):
        sim = ClockSim("ocxo", seed=seed, temperature=temperature_profile_sine(25.0, 5.0, DAY_S),
                       thermometer=thermometer)
        sim.run(3 * DAY_S)
        first = len(sim.record.te_ns)
        rec = sim.run(12 * 3600, reference=False)
        errors[thermometer] = (rec.te_ns[-1], honest(rec, first), sim.engine.prediction())
    with_t, without_t = errors[True], errors[False]
    learned = with_t[2].temp_coeff_ppb_per_k if with_t[2] else None
    r.figures.update(swing_k=10.0, te_12h_with_thermometer_ns=with_t[0], te_12h_without_ns=without_t[0],
                     learned_tempco_ppb_per_k=None if learned is None else round(learned, 4),
                     true_tempco_ppb_per_k=0.1)
    r.check("learned the temperature coefficient within 30 %", learned is not None and abs(learned - 0.1) <= 0.03)
    r.check("the thermometer makes holdover at least 3x better", abs(with_t[0]) * 3 <= abs(without_t[0]))
    r.check("|TE| <= bound with the thermometer", with_t[1] <= 1.0)
    r.check("|TE| <= bound without it", without_t[1] <= 1.0)
    return r


def s06_leap_second(seed: int) -> ScenarioResult:
    from appliance.runtime.platforms import simulated
    from appliance.events import GnssEpoch, StepClock
    from appliance.sched import SimScheduler

    r = ScenarioResult(6, "leap-second", seed)
    future = first_after_expiry()
    shipped, truth, effective, new_offset_s = future.table, future.truth, future.effective_posix_s, future.new_offset_s
    start = future.before_tai_ns(23, 50, 0) + 250_000_000
    scheduler = SimScheduler(start)
    app, world = simulated(cfg.load(None, [f"sim.seed={seed}"]), scheduler, shipped, truth)
    events: list[object] = []
    app.subscribe(events.append)
    world.start()
    samples: list[tuple[int, Any]] = []
    for _ in range(20 * 60):
        scheduler.run_for(NS_PER_S)
        samples.append((world.true_ns(), app.status()))
    before = [s for t, s in samples if t < (effective + new_offset_s - 60) * NS_PER_S][-1]
    after = samples[-1][1]
    labels = [e.utc_text for e in events if isinstance(e, GnssEpoch)]
    errors = [s.clock.sim_time_error_ns for _, s in samples if s.clock.state == "LOCKED"]
    r.figures.update(labels_around=labels[labels.index(future.labels[1]) - 1:][:3]
                     if future.labels[1] in labels else None,
                     ntp_li_before=before.clock.advertised.ntp_leap_indicator,
                     ntp_li_after=after.clock.advertised.ntp_leap_indicator,
                     tai_utc_before=before.leap.tai_utc_s, tai_utc_after=after.leap.tai_utc_s,
                     max_abs_te_locked_ns=max((abs(e) for e in errors), default=None),
                     steps=sum(1 for e in events if isinstance(e, StepClock)))
    r.check("23:59:60 labelled between 23:59:59 and 00:00:00", r.figures["labels_around"] == future.labels)
    r.check("NTP leap indicator 1 in the last minute before, 0 after", (before.clock.advertised.ntp_leap_indicator,
                                                                        after.clock.advertised.ntp_leap_indicator) == (1, 0))
    r.check(f"TAI-UTC {new_offset_s - 1} -> {new_offset_s}",
            (before.leap.tai_utc_s, after.leap.tai_utc_s) == (new_offset_s - 1, new_offset_s))
    r.check("the clock stays LOCKED through the leap second",
            all(s.clock.state == "LOCKED" for t, s in samples if t > start + 5 * 60 * NS_PER_S))
    r.check("only the cold-start step (TAI knows no leap second)", r.figures["steps"] == 1)
    return r


def s07_warm_restart(seed: int) -> ScenarioResult:
    r = ScenarioResult(7, "warm-restart", seed)
    first = ClockSim("ocxo", seed=seed)
    first.run(DAY_S)
    learned = first.learned_state()
    assert learned is not None
    # The appliance restarts a minute later; the oscillator kept running, so it starts where it was (its aged
    # frequency) while its noise goes on from there.
    restart_ns = first.true_ns + 60 * NS_PER_S
    frequency_ppb = first.osc.smooth_frequency_ppb(first.true_ns) + first.osc.aging_ppb_per_s * 60

    def again() -> ClockSim:
        return ClockSim("ocxo", seed=seed + 1000, start_tai_ns=restart_ns, initial_offset_ppb=frequency_ppb)

    cold = again()
    cold_rec = cold.run(600)
    warm = again()
    warm.restore(learned)
    warm_rec = warm.run(600)
    dark = again()
    dark.restore(learned)
    dark_rec = dark.run(2 * 3600, reference=False)
    t_cold = first_time(cold_rec, "LOCKED")
    t_warm = first_time(warm_rec, "LOCKED")
    t0 = warm_rec.true_s[0]
    r.figures.update(learned_ppb=round(learned.frequency_ppb, 4), state_at_start=warm_rec.state[0],
                     cold_locked_after_s=None if t_cold is None else t_cold - t0,
                     warm_locked_after_s=None if t_warm is None else t_warm - t0,
                     no_reference_state_2h=dark_rec.state[-1], no_reference_te_2h_ns=dark_rec.te_ns[-1],
                     no_reference_bound_2h_ns=round(dark_rec.bound_ns[-1]))
    r.check("starts in HOLDOVER on the learned state", warm_rec.state[0] == "HOLDOVER")
    r.check("re-locks without a phase step", warm.phase_steps_ns == [])
    r.check("warm lock comes no later than a cold one", t_warm is not None and t_cold is not None and t_warm <= t_cold)
    r.check("without GNSS it holds over honestly for 2 h", honest(dark_rec) <= 1.0 and
            dark_rec.state[-1].startswith("HOLDOVER"))
    return r


def s24_short_lock_holdover(seed: int) -> ScenarioResult:
    """A minute of lock, then the sky is lost: the readiness figure said "capable in N s", and the clock free-runs.
    Locked again until the figure says "capable, within X ns for Y h", the same loss holds over, stays within the
    bound every second, and leaves its spec when the figure said it would."""
    r = ScenarioResult(24, "short-lock-holdover", seed)
    sim = ClockSim("ocxo", seed=seed)
    for _ in range(600):
        if sim.engine.state.value == "LOCKED":
            break
        sim.run(1)
    sim.run(60)
    short = sim.engine.holdover_readiness(sim.osc.raw_ns(sim.true_ns))
    first = len(sim.record.state)
    sim.run(30, reference=False)
    after_short = sim.record.state[first:]
    for _ in range(600):  # the sky back: lock again, and learn until the figure says capable
        if sim.engine.holdover_readiness(sim.osc.raw_ns(sim.true_ns)).capable:
            break
        sim.run(1)
    ready = sim.engine.holdover_readiness(sim.osc.raw_ns(sim.true_ns))
    first = len(sim.record.state)
    rec = sim.run(3 * 3600, reference=False)
    held = rec.state[first:]
    expired_at = next((i for i, st in enumerate(held) if st == "HOLDOVER_EXPIRED"), None)
    lost_at = next((i for i, st in enumerate(held) if st != "LOCKED"), 0)
    r.figures.update(after_60s_lock=short.text, capable_in_s=short.capable_in_s, state_after_short_loss=after_short[-1],
                     readiness_when_lost=ready.text, good_for_s=ready.good_for_s, states=">".join(dict.fromkeys(held)),
                     left_spec_after_s=None if expired_at is None else expired_at - lost_at,
                     worst_te_over_bound=round(honest(rec, first), 3))
    r.check("after a minute of lock the figure says not yet, with a countdown",
            not short.capable and short.capable_in_s is not None and short.text.startswith("capable in "))
    r.check("that loss free-runs (no holdover claimed)", "HOLDOVER" not in after_short and after_short[-1] == "FREERUN")
    r.check("once the figure says capable, the loss holds over", ready.capable and "FREERUN" not in held
            and held[lost_at] == "HOLDOVER")
    r.check("it leaves its spec within 10 s of when the figure said", expired_at is not None and
            ready.good_for_s is not None and abs((expired_at - lost_at) - ready.good_for_s) <= 10)
    r.check("|TE| <= advertised bound at every second of the holdover", honest(rec, first) <= 1.0)
    return r


# --- GNSS integrity: attacks (8-15) and benign events (16-20), on the whole appliance ----------------------------
# name -> (number, the detectors expected to speak, seconds allowed to detect, the alarm expected)
ATTACK_SCENARIOS = {
    "spoof-slow-push-10ns": (8, ("drift", "phase-jump"), 30, "gnss-spoofing"),
    "spoof-slow-push-100ns": (9, ("drift", "phase-jump"), 10, "gnss-spoofing"),
    "spoof-time-step-1us": (10, ("phase-jump",), 5, "gnss-spoofing"),
    "spoof-position-push-50m": (11, ("position",), 5, "gnss-spoofing"),
    "meaconing-2us": (12, ("phase-jump", "cn0"), 5, "gnss-spoofing"),
    "jamming-15db": (13, ("jamming", "receiver"), 5, "gnss-jamming"),
    "one-constellation-spoofed": (14, ("constellations",), 5, "gnss-spoofing"),
    "spoof-fake-sky": (15, ("sky",), 5, "gnss-spoofing"),
}
TRIAL_OF = {"spoof-slow-push-10ns": "slow-push-10ns", "spoof-slow-push-100ns": "slow-push-100ns",
            "spoof-time-step-1us": "time-step-1us", "spoof-position-push-50m": "position-push-50m",
            "meaconing-2us": "meaconing-2us", "jamming-15db": "jamming-15db",
            "one-constellation-spoofed": "one-system-spoofed", "spoof-fake-sky": "fake-sky"}
BENIGN_SCENARIOS = {"benign-rising-setting-1h": (16, "rising-and-setting-1h"),
                    "benign-fix-loss": (17, "fix-loss-and-recovery"), "benign-leap-second": (18, "leap-second"),
                    "benign-receiver-reset": (19, "receiver-reset"),
                    "benign-antenna-blocked": (20, "antenna-briefly-blocked")}


def _attack_scenario(name: str) -> Callable[[int], ScenarioResult]:
    from appliance.sim.attacks import attack_trial

    number, detectors, within_s, alarm = ATTACK_SCENARIOS[name]

    def scenario(seed: int) -> ScenarioResult:
        r = ScenarioResult(number, name, seed)
        t = attack_trial(TRIAL_OF[name], seed)
        r.figures.update(detected=t.detected, detect_s=t.detect_s, max_te_before_let_go_ns=t.max_te_before_ns,
                         max_te_ns=t.max_te_ns, alarms=t.alarms, state_after_detect=t.state_after_detect,
                         requalified_after_end_s=t.requalified_s, state_end=t.state_end,
                         reasons=list(t.reasons[:3]))
        r.check("locked and quiet before the attack", t.figures["state_before"] == "LOCKED" and
                not t.figures["alarms_before"])
        r.check(f"detected within {within_s} s", t.detected and t.detect_s is not None and t.detect_s <= within_s)
        r.check(f"by the {' or '.join(detectors)} check", any(
            reason.startswith(d + ":") for reason in t.reasons for d in detectors))
        r.check(f"alarm {alarm} raised", alarm in t.alarms)
        r.check("the clock holds over once the reference is rejected", t.state_after_detect == "HOLDOVER")
        r.check("time error before the clock let go < 1 us", (t.max_te_before_ns or 0) < 1000)
        r.check("time error < 100 ns throughout", t.max_te_ns < 100)
        r.check("reference qualified again within 120 s of the attack's end",
                t.requalified_s is not None and t.requalified_s <= 120)
        r.check("locked again at the end", t.state_end == "LOCKED")
        return r
    return scenario


def _benign_scenario(name: str) -> Callable[[int], ScenarioResult]:
    from appliance.sim.attacks import benign_trial, leap_second_trial

    number, trial = BENIGN_SCENARIOS[name]

    def scenario(seed: int) -> ScenarioResult:
        r = ScenarioResult(number, name, seed)
        t = leap_second_trial(seed) if trial == "leap-second" else benign_trial(trial, seed)
        r.figures.update(alarms=t.alarms, reference_rejected=t.detected, max_te_ns=t.max_te_ns,
                         state_end=t.state_end, integrity_end=t.level_end, **t.figures)
        r.check("no spoofing or jamming alarm", not t.alarms)
        r.check("the reference was never rejected", not t.detected)
        r.check("integrity ok at the end", t.level_end == "ok")
        r.check("locked at the end", t.state_end == "LOCKED")
        r.check("time error < 100 ns throughout", t.max_te_ns < 100)
        return r
    return scenario


# name: (number, the push); the seed is the scenario's
HONESTY_SCENARIOS = {"spoof-push-1ns-young": (21, dict(rate_ns_per_s=1.0, warm_s=120)),
                     "spoof-push-0.1ns": (22, dict(rate_ns_per_s=0.1, warm_s=600)),
                     "spoof-ramp-2ns-young": (23, dict(rate_ns_per_s=2.0, ramp=True, warm_s=100))}


def _honesty_scenario(name: str) -> Callable[[int], ScenarioResult]:
    from appliance.sim.honesty import Push, push_trial

    number, push = HONESTY_SCENARIOS[name]

    def scenario(seed: int) -> ScenarioResult:
        r = ScenarioResult(number, name, seed)
        h = push_trial(Push(seed=seed, **push))  # type: ignore[arg-type]
        r.figures.update(push=h.push.label(), seconds_with_a_bound=h.seconds, seconds_above_it=h.over_s,
                         worst_margin_ns=round(h.worst_margin_ns), worst_at_s=h.worst_at_s,
                         worst_te_ns=h.worst_te_ns, worst_bound_ns=h.worst_bound_ns, worst_state=h.worst_state,
                         rejected_after_s=h.detected_s, max_te_ns=h.max_te_ns, states=">".join(h.states))
        r.check("|served - true| within the advertised bound every second", h.kept)
        r.check("a bound advertised for most of the run", h.seconds >= (h.push.push_s + h.push.after_s) // 2)
        r.check("locked again at the end", h.states[-1] == "LOCKED")
        return r
    return scenario


SCENARIOS: dict[str, Callable[[int], ScenarioResult]] = {
    "cold-start": s01_cold_start, "ocxo-holdover-24h": s02_ocxo_holdover,
    "rubidium-holdover-24h": s03_rubidium_holdover, "gnss-flapping": s04_gnss_flapping,
    "temperature-swing": s05_temperature_swing, "leap-second": s06_leap_second, "warm-restart": s07_warm_restart,
    **{name: _attack_scenario(name) for name in ATTACK_SCENARIOS},
    **{name: _benign_scenario(name) for name in BENIGN_SCENARIOS},
    **{name: _honesty_scenario(name) for name in HONESTY_SCENARIOS},
    "short-lock-holdover": s24_short_lock_holdover,
}


def run_scenario(name: str, seed: int = 1) -> ScenarioResult:
    if name not in SCENARIOS:
        raise KeyError(f"no scenario {name!r}; known: {', '.join(SCENARIOS)}")
    return SCENARIOS[name](seed)


def _rms(values: Any) -> float:
    vals = list(values)
    return math.sqrt(sum(v * v for v in vals) / len(vals)) if vals else 0.0
