"""One rule for holding over, whether the clock learned in this run or restored what the last run learned: a
prediction resting on at least MIN_LEARN_S of reference data (gaps left out).  The same learned duration gives the
same outcome on a loss, and the readiness figure says beforehand what that outcome will be."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from appliance.clock.learned import LearnedState
from appliance.clock.predictor import MIN_LEARN_S, POINT_S, enough_to_hold_over
from appliance.clock.readiness import HORIZON_S, duration_text, good_for_s
from appliance.clock.service import ClockService
from appliance.sim.clocksim import ClockSim

NS = 1_000_000_000


def locked(seed: int = 1) -> ClockSim:
    sim = ClockSim("ocxo", seed=seed)
    for _ in range(300):
        if sim.engine.state.value == "LOCKED":
            return sim
        sim.run(1)
    raise AssertionError("never locked")


def raw_now(sim: ClockSim) -> int:
    return sim.osc.raw_ns(sim.true_ns)


def saved(sim: ClockSim) -> LearnedState:
    """What the last run would have saved, learned enough or not (the save itself keeps only states that are)."""
    learned = sim.learned_state()
    if learned is not None:
        return learned
    return LearnedState(saved_at_tai_ns=sim.true_ns, oscillator="ocxo", state="LOCKED",
                        frequency_ppb=sim.engine.freq_ppb, frequency_sigma_ppb=0.05, aging_ppb_per_s=0.0,
                        aging_sigma_ppb_per_s=1e-6, temp_coeff_ppb_per_k=None,
                        error_bound_ns=int(sim.engine.bound_ns(raw_now(sim)) or 0),
                        locked_seconds=int(sim.engine.predictor.learned_s))


def outcome_in_run(sim: ClockSim) -> str:
    first = len(sim.record.state)
    sim.run(3, reference=False)
    return sim.record.state[first + 2]


def outcome_restored(learned: LearnedState, after: ClockSim) -> str:
    restarted = ClockSim("ocxo", seed=99, start_tai_ns=after.true_ns + 30 * NS,
                         initial_offset_ppb=after.osc.smooth_frequency_ppb(after.true_ns))
    restarted.restore(learned)
    return restarted.run(3, reference=False).state[-1]


@pytest.mark.parametrize("lock_s", [30, 60, 75, 90, 150, 400])
def test_the_same_learning_gives_the_same_outcome_in_run_and_after_a_restart(lock_s: int) -> None:
    sim = locked()
    sim.run(lock_s)
    ready = sim.engine.holdover_readiness(raw_now(sim))
    learned = saved(sim)
    in_run = outcome_in_run(sim)
    assert in_run == outcome_restored(learned, sim)
    assert in_run == ("HOLDOVER" if ready.capable else "FREERUN")
    assert ready.capable == enough_to_hold_over(learned.locked_seconds)
    if not ready.capable:
        assert ready.text == f"capable in {duration_text(ready.capable_in_s)}" and 0 < ready.capable_in_s <= 90


def test_a_minute_of_lock_is_not_enough_and_the_countdown_says_when_it_will_be() -> None:
    sim = locked()
    sim.run(60)
    ready = sim.engine.holdover_readiness(raw_now(sim))
    assert not ready.capable and ready.capable_in_s is not None
    sim.run(ready.capable_in_s - 1)
    assert not sim.engine.holdover_readiness(raw_now(sim)).capable
    sim.run(1)
    now_ready = sim.engine.holdover_readiness(raw_now(sim))
    assert now_ready.capable and now_ready.text.startswith("capable, within 1000 ns for ")
    assert outcome_in_run(sim) == "HOLDOVER"


def test_a_gap_does_not_count_as_learning() -> None:
    """A minute's lock, a free run, twenty seconds more: a minute and twenty of learning, not the free run too (the
    old count spanned the gap, so such a state looked long-learned, was saved and came back as HOLDOVER)."""
    sim = locked()
    sim.run(60)
    assert outcome_in_run(sim) == "FREERUN"
    sim.run(600, reference=False)
    for _ in range(120):
        if sim.engine.state.value == "LOCKED":
            break
        sim.run(1)
    sim.run(10)
    learned_s = sim.engine.predictor.learned_s
    assert learned_s < MIN_LEARN_S
    learned = saved(sim)
    assert outcome_in_run(sim) == "FREERUN" == outcome_restored(learned, sim)


def test_a_restored_state_that_learned_too_little_only_seeds_the_frequency() -> None:
    sim = locked()
    sim.run(60)
    learned = saved(sim)
    assert not ClockService.can_restore(learned)
    assert outcome_restored(learned, sim) == "FREERUN"
    assert ClockService.can_restore(dataclasses.replace(learned, locked_seconds=MIN_LEARN_S))


@settings(max_examples=60, deadline=None)
@given(points=st.integers(0, 20), extra_s=st.integers(0, POINT_S - 1))
def test_the_rule_is_one_threshold_on_the_seconds_learned(points: int, extra_s: int) -> None:
    learned_s = points * POINT_S + extra_s
    assert enough_to_hold_over(learned_s) == (learned_s >= MIN_LEARN_S)
    state = LearnedState(saved_at_tai_ns=0, oscillator="ocxo", state="LOCKED", frequency_ppb=0.0,
                         frequency_sigma_ppb=0.1, aging_ppb_per_s=0.0, aging_sigma_ppb_per_s=0.0,
                         temp_coeff_ppb_per_k=None, error_bound_ns=30, locked_seconds=learned_s)
    assert ClockService.can_restore(state) == enough_to_hold_over(learned_s)


def test_a_restored_prediction_used_later_is_aged_and_its_holdover_stays_honest() -> None:
    first = ClockSim("ocxo", seed=3)
    first.run(3600)
    learned = first.learned_state()
    assert learned is not None
    later = ClockSim("ocxo", seed=4, start_tai_ns=first.true_ns + 60 * NS,
                     initial_offset_ppb=first.osc.smooth_frequency_ppb(first.true_ns))
    later.restore(learned)
    for _ in range(120):
        if later.engine.state.value == "LOCKED":
            break
        later.run(1)
    later.run(40)  # relocked, and learned less than the rule asks in this run: the restored state still counts
    assert later.engine.state.value == "LOCKED" and not later.engine.predictor.can_predict()
    ready = later.engine.holdover_readiness(raw_now(later))
    assert ready.capable and ready.good_for_s
    first_i = len(later.record.te_ns)
    rec = later.run(2 * 3600, reference=False)
    assert rec.state[first_i + 4] == "HOLDOVER" and "FREERUN" not in rec.state[first_i:]
    assert all(abs(te) <= b for te, b in zip(rec.te_ns[first_i:], rec.bound_ns[first_i:]))
    restored = later.engine._restored_prediction
    assert restored is not None
    aged = later.engine.predictor.aged(restored, restored.origin_s + 3600)
    assert aged.frequency_sigma_ppb > restored.frequency_sigma_ppb  # a stale state counts for less
    assert aged.frequency_ppb == pytest.approx(restored.frequency_ppb + 3600 * restored.aging_ppb_per_s)


def test_good_for_is_when_the_bound_reaches_the_limit() -> None:
    assert good_for_s(lambda t: 10.0 + 2.0 * t, 1000.0) == 495
    assert good_for_s(lambda t: 2000.0, 1000.0) == 0
    assert good_for_s(lambda t: 10.0, 1000.0) == HORIZON_S
    assert duration_text(45) == "45 s" and duration_text(180) == "3 min" and duration_text(15_120) == "4.2 h"
