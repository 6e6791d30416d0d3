"""The clock discipline engine on realistic paths: the clock simulation (oscillator, receiver, soft clock, service)
drives it a second at a time, and each test reads what a user would see: states, reasons, steps, |TE|, the bound."""

from __future__ import annotations

import pytest

from appliance.clock.discipline import DisciplineParams
from appliance.sim.clocksim import DEFAULT_START_TAI_NS, ClockSim
from appliance.units import NS_PER_S

T0 = DEFAULT_START_TAI_NS // NS_PER_S
HOUR = 3600
STEP_NS = 3_000_000  # initial error of the served clock: beyond the step threshold


def moves(sim: ClockSim, after_s: int = 0) -> list[tuple[int, str, str, str]]:
    """Transitions as (seconds since start, old, new, reason), every one of them explained."""
    out = [(t - T0, old, new, why) for t, old, new, why in sim.record.transitions if t - T0 >= after_s]
    assert all(why.strip() for *_, why in out), out
    return out


def path(sim: ClockSim, after_s: int = 0) -> list[str]:
    return [new for _, _, new, _ in moves(sim, after_s)]


def now_s(sim: ClockSim) -> int:
    return sim.true_ns // NS_PER_S - T0


def raw_now(sim: ClockSim) -> int:
    return sim.osc.raw_ns(sim.true_ns)


def honest_from(sim: ClockSim, i: int) -> None:
    rec = sim.record
    for te, b, state in zip(rec.te_ns[i:], rec.bound_ns[i:], rec.state[i:]):
        assert state == "FREERUN" or abs(te) <= b, (te, b, state)


def locked_sim(hours: float = 2, seed: int = 1, **kw) -> ClockSim:
    sim = ClockSim("ocxo", seed=seed, initial_error_ns=STEP_NS, **kw)
    sim.run(int(hours * HOUR))
    assert sim.engine.state.value == "LOCKED" and len(sim.phase_steps_ns) == 1
    return sim


@pytest.mark.parametrize("oscillator", ["ocxo", "tcxo", "rubidium"])
def test_cold_start_acquires_steps_once_and_locks_within_60_s(oscillator: str) -> None:
    sim = ClockSim(oscillator, seed=1, initial_error_ns=STEP_NS)
    sim.run(60)
    assert [(old, new) for _, old, new, _ in moves(sim)] == [("FREERUN", "ACQUIRING"), ("ACQUIRING", "LOCKED")]
    assert moves(sim)[-1][0] <= 60
    # one step: the initial error plus what the oscillator drifted before it
    assert len(sim.phase_steps_ns) == 1 and abs(sim.phase_steps_ns[0] + STEP_NS) < 0.01 * STEP_NS
    locked_at = moves(sim)[-1][0]
    sim.run(600)
    assert sim.clock.steps == 1 and path(sim) == ["ACQUIRING", "LOCKED"]
    assert max(abs(te) for te in sim.record.te_ns[locked_at:]) < 100
    honest_from(sim, 0)


@pytest.mark.parametrize(("warmup_s", "qualify_s"), [(120, 30), (5, 60), (10, 10)])
def test_no_acquiring_before_warm_up_and_qualification(warmup_s: int, qualify_s: int) -> None:
    sim = ClockSim("ocxo", seed=2, params=DisciplineParams(warmup_s=warmup_s, qualify_s=qualify_s))
    sim.run(max(warmup_s, qualify_s) + 60)
    t_acq = moves(sim)[0][0]
    assert moves(sim)[0][1:3] == ("FREERUN", "ACQUIRING")
    assert t_acq >= max(warmup_s, qualify_s)
    assert t_acq <= max(warmup_s, qualify_s + 1) + 2
    assert set(sim.record.state[:t_acq - 1]) == {"FREERUN"}


def test_a_gap_in_the_reference_restarts_qualification() -> None:
    sim = ClockSim("ocxo", seed=2, params=DisciplineParams(warmup_s=10, qualify_s=30))
    sim.run(120, reference=lambda s: not 20 <= s - T0 <= 25)
    assert moves(sim)[0][0] >= 26 + 30


def test_reference_lost_while_locked_holds_over_then_expires_past_the_spec() -> None:
    sim = locked_sim()
    lost_at, first = now_s(sim), len(sim.record.te_ns)
    sim.run(2 * HOUR, reference=False)
    held = moves(sim, lost_at)
    assert [(old, new) for _, old, new, _ in held] == [("LOCKED", "HOLDOVER"), ("HOLDOVER", "HOLDOVER_EXPIRED")]
    assert held[0][0] - lost_at <= sim.params.reference_timeout_s + 1
    assert "no reference" in held[0][3] and "holdover spec" in held[1][3]
    bounds = sim.record.bound_ns[first + held[0][0] - lost_at:]
    assert all(b >= a for a, b in zip(bounds, bounds[1:]))  # the bound only grows in holdover
    i = next(k for k, s in enumerate(sim.record.state) if s == "HOLDOVER_EXPIRED")
    assert sim.record.bound_ns[i - 1] <= sim.params.holdover_spec_ns < sim.record.bound_ns[i]
    honest_from(sim, first)


@pytest.mark.parametrize("outage_s", [600, 1200])
def test_a_short_outage_relocks_directly_without_a_step(outage_s: int) -> None:
    sim = locked_sim()
    lost_at = now_s(sim)
    sim.run(outage_s, reference=False)
    back_at = now_s(sim)
    sim.run(300)
    held = moves(sim, lost_at)
    assert [new for _, _, new, _ in held] == ["HOLDOVER", "LOCKED"]
    assert "within the lock threshold" in held[1][3]
    assert held[1][0] - back_at <= sim.params.qualify_s + 2
    assert sim.phase_steps_ns == sim.phase_steps_ns[:1] and sim.clock.steps == 1
    honest_from(sim, lost_at)  # including the relock itself: the bound starts from the phase it measured


def test_a_long_outage_reacquires_then_locks_and_never_steps_again() -> None:
    sim = locked_sim()
    lost_at = now_s(sim)
    sim.run(3 * HOUR, reference=False)
    assert abs(sim.record.te_ns[-1]) > sim.params.lock_threshold_ns  # drifted beyond the lock threshold
    sim.run(900)
    assert path(sim, lost_at) == ["HOLDOVER", "HOLDOVER_EXPIRED", "ACQUIRING", "LOCKED"]
    assert len(sim.phase_steps_ns) == 1 and sim.clock.steps == 1
    assert abs(sim.record.te_ns[-1]) < 50
    honest_from(sim, lost_at)


def test_forced_holdover_ignores_a_good_reference_until_released_and_returns_hitlessly() -> None:
    sim = locked_sim()
    forced_at, first = now_s(sim), len(sim.record.te_ns)
    sim.force_holdover(True)
    assert moves(sim, forced_at)[0][1:3] == ("LOCKED", "HOLDOVER") and "forced" in moves(sim, forced_at)[0][3]
    sim.run(1200)  # the reference stays good all along
    assert set(sim.record.state[first:]) == {"HOLDOVER"} and sim.engine.forced
    released_at = len(sim.record.te_ns)
    sim.force_holdover(False)
    sim.run(120)
    assert path(sim, forced_at) == ["HOLDOVER", "LOCKED"]
    assert moves(sim, forced_at)[-1][0] - now_s(sim) + 120 <= sim.params.qualify_s + 2
    te = sim.record.te_ns[released_at - 5:]
    assert max(abs(b - a) for a, b in zip(te, te[1:])) <= 5  # no phase step on the way back
    assert sim.clock.steps == 1
    honest_from(sim, first)


def test_forcing_during_a_real_holdover_keeps_it_when_the_reference_returns() -> None:
    sim = locked_sim()
    lost_at = now_s(sim)
    sim.run(120, reference=False)
    sim.force_holdover(True)
    sim.run(300)
    assert path(sim, lost_at) == ["HOLDOVER"]
    sim.force_holdover(False)
    sim.run(60)
    assert path(sim, lost_at) == ["HOLDOVER", "LOCKED"]


def test_forcing_holdover_before_anything_is_learned_is_refused_clearly() -> None:
    sim = ClockSim("ocxo", seed=3, initial_error_ns=STEP_NS)
    for seconds, state in ((1, "FREERUN"), (15, "ACQUIRING"), (25, "LOCKED")):
        sim.run(seconds)
        while sim.engine.state.value != state:
            sim.run(1)
        with pytest.raises(ValueError, match="not learned"):
            sim.force_holdover(True)
        assert sim.engine.state.value == state and not sim.engine.forced


def test_reference_unusable_drops_it_at_once_and_pulses_are_ignored_until_usable() -> None:
    sim = locked_sim()
    at = now_s(sim)
    events = sim.service.on_reference(False, "receiver no-fix: no satellites", raw_now(sim))
    assert [(e.old, e.new) for e in events] == [("LOCKED", "HOLDOVER")] and "no-fix" in events[0].reason
    assert sim.service.on_reference(False, "receiver no-fix: still none", raw_now(sim)) == []
    sim.run(120)  # pulses keep coming, but the receiver said its time is not to be trusted
    assert set(sim.record.state[-120:]) == {"HOLDOVER"}
    sim.service.on_reference(True, "receiver 3d-fix", raw_now(sim))
    sim.run(60)
    # (transitions from direct service calls are not in the simulation's record: only the relock is)
    assert [(old, new) for _, old, new, _ in moves(sim, at)] == [("HOLDOVER", "LOCKED")]
    assert moves(sim, at)[0][0] - (at + 120) >= sim.params.qualify_s


def test_reference_unusable_before_learning_means_freerun() -> None:
    sim = ClockSim("ocxo", seed=1)
    sim.run(15)
    assert sim.engine.state.value == "ACQUIRING"
    events = sim.service.on_reference(False, "receiver disconnected: unplugged", raw_now(sim))
    assert [(e.old, e.new) for e in events] == [("ACQUIRING", "FREERUN")]


def test_losing_the_reference_right_after_the_first_lock_is_an_honest_free_run() -> None:
    sim = ClockSim("ocxo", seed=1, initial_error_ns=STEP_NS)
    sim.run(35)
    assert sim.engine.state.value == "LOCKED" and not sim.engine.can_hold_over()
    lost_at = now_s(sim)
    sim.run(600, reference=False)
    assert path(sim, lost_at) == ["FREERUN"] and "no reference" in moves(sim, lost_at)[0][3]
    assert sim.engine.bound_ns(raw_now(sim)) is None  # it knows nothing it could vouch for
    sim.run(300)
    assert path(sim, lost_at) == ["FREERUN", "ACQUIRING", "LOCKED"]
    assert len(sim.phase_steps_ns) == 1  # a step only on the first lock


def test_outliers_while_locked_are_not_fed_to_the_loop_and_a_run_of_them_loses_lock() -> None:
    sim = locked_sim(hours=1)
    assert sim.engine.servo.params.time_constant_s == pytest.approx(sim.engine.target_tau_s)  # geared up
    edge = sim.rx.edge_true_ns
    bad: set[int] = set()
    sim.rx.edge_true_ns = lambda s: edge(s) + (200_000 if s // NS_PER_S in bad else 0)  # type: ignore[method-assign]
    freq, recent = sim.engine.freq_ppb, sim.engine.recent_offsets_ns()
    bad.add(sim.true_ns // NS_PER_S + 1)
    sim.run(1)
    assert sim.engine.state.value == "LOCKED" and sim.engine.freq_ppb == freq
    assert sim.engine.recent_offsets_ns() == recent and abs(sim.record.te_ns[-1]) < 50
    at = now_s(sim)
    bad.update(range(sim.true_ns // NS_PER_S + 1, sim.true_ns // NS_PER_S + 10_000))  # the reference jumps 200 us
    sim.run(4)
    assert path(sim, at) == ["ACQUIRING"] and "beyond" in moves(sim, at)[0][3]
    assert sim.engine.servo.params.time_constant_s == 16.0  # acquiring again, with the short time constant
    sim.run(900)
    assert path(sim, at) == ["ACQUIRING", "LOCKED"]
    assert len(sim.phase_steps_ns) == 1  # slewed to the new reference, never stepped


def test_a_warm_reacquisition_pulls_the_phase_in_without_teaching_the_loop_a_false_frequency() -> None:
    """The reference moves 5 us (a fallback's leftover, a rerouted upstream): the clock re-acquires from the frequency
    it learned, pulls the phase in on a frequency outside the loop and never overshoots the reference."""
    sim = locked_sim(hours=1)
    edge = sim.rx.edge_true_ns
    at = now_s(sim)
    sim.rx.edge_true_ns = lambda s: edge(s) + (5_000 if s // NS_PER_S > T0 + at else 0)  # type: ignore[method-assign]
    learned_ppb = sim.engine.servo.drift_ppb
    sim.run(4)
    assert path(sim, at) == ["ACQUIRING"] and "beyond" in moves(sim, at)[0][3]
    drifts, tes = [], []
    for _ in range(300):
        sim.run(1)
        drifts.append(sim.engine.servo.drift_ppb)
        tes.append(sim.record.te_ns[-1] + 5_000)  # against the moved reference (5 us later: the clock follows to -5 us)
    assert path(sim, at) == ["ACQUIRING", "LOCKED"]
    assert moves(sim, at)[-1][0] - at <= 16 * 5 + 16 + 10  # 5 us to within the threshold at 16 s, then 16 s in it
    # The loop's frequency is left alone (a PI loop pulling 5 us through its integral would move it by tens of ppb)
    # and the phase comes in from one side: no overshoot past the reference beyond its noise.
    assert max(abs(d - learned_ppb) for d in drifts) < 1.0, max(abs(d - learned_ppb) for d in drifts)
    assert tes[0] > 4000 and min(tes) > -50 and abs(tes[-1]) < 50, (tes[0], min(tes), tes[-1])
    assert len(sim.phase_steps_ns) == 1  # slewed, never stepped
