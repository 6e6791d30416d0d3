"""Honest holdover after a slow spoof: what a spoofed reference taught the clock is undone, the holdover bound
includes what the model cannot know, and the integrity line dates the attack and stays clean.

Pure: the predictor and the guard's line on synthetic free phase, the discipline through its own methods.
"""

from __future__ import annotations

import numpy as np

from appliance.clock.discipline import ClockDiscipline, DisciplineParams
from appliance.clock.oscillator import OSCILLATORS, power_law
from appliance.clock.predictor import CHECKPOINT_S, HoldoverPredictor
from appliance.clock.state import ClockState
from appliance.gnss.guard import PhaseAnchor
from appliance.units import NS_PER_S

Y_PPB = -32.0  # the free-running oscillator's frequency offset (ns of phase per second)
PUSH_NS_PER_S = 1.0


def free_phase(t: int, push_from: int | None = None, seed: int = 1) -> float:
    """The reference's phase against the raw oscillator: the oscillator's ramp, noise, and a push from ``push_from``."""
    noise = np.random.default_rng((seed, t)).normal(0.0, 2.0)
    push = 0.0 if push_from is None or t < push_from else PUSH_NS_PER_S * (t - push_from)
    return Y_PPB * t + noise + push


def test_rollback_undoes_what_a_push_taught_the_predictor() -> None:
    p = HoldoverPredictor(OSCILLATORS["ocxo"])
    for t in range(600):
        p.learn(float(t), free_phase(t))
    clean = p.predict(600.0)
    for t in range(600, 660):  # a minute of a 1 ns/s push, learned as the oscillator's own
        p.learn(float(t), free_phase(t, push_from=600))
    taught = p.predict(660.0)
    assert clean is not None and taught is not None
    assert abs(taught.frequency_ppb - Y_PPB) > 10 * abs(clean.frequency_ppb - Y_PPB)
    assert p.rollback(600.0)
    undone = p.predict(660.0)
    assert undone is not None and abs(undone.frequency_ppb - clean.frequency_ppb) < 0.01
    assert undone.learned_s <= 600


def test_rollback_past_every_checkpoint_forgets_the_model() -> None:
    p = HoldoverPredictor(OSCILLATORS["ocxo"])
    for t in range(300):
        p.learn(float(t), free_phase(t))
    assert p.can_predict()
    assert not p.rollback(-1.0)
    assert not p.can_predict()  # a clock that learned nothing sound cannot hold over: it says so (FREERUN)


def test_checkpoints_are_a_minute_apart() -> None:
    p = HoldoverPredictor(OSCILLATORS["ocxo"])
    for t in range(900):
        p.learn(float(t), free_phase(t))
    times = [c.t_s for c in p._checkpoints]
    assert all(b - a >= CHECKPOINT_S - 1e-6 for a, b in zip(times, times[1:])) and len(times) >= 12


def _locked_discipline() -> ClockDiscipline:
    d = ClockDiscipline(DisciplineParams(warmup_s=0, qualify_s=3), OSCILLATORS["ocxo"], 0)
    for t in range(1, 900):
        d.on_sample(float(np.random.default_rng(t).normal(0.0, 2.0)), t * NS_PER_S)
    assert d.state is ClockState.LOCKED and d.predictor.can_predict()
    return d


def test_the_holdover_bound_grows_by_the_gap_between_the_model_and_the_clean_line() -> None:
    plain, doubted = _locked_discipline(), _locked_discipline()
    raw = 900 * NS_PER_S
    model = doubted.predictor.predict(900.0)
    assert model is not None
    line = (model.frequency_ppb + 0.05, 0.01)  # the line says 0.05 ppb more, give or take 0.01
    doubted.distrust(raw - 60 * NS_PER_S, line)
    for d in (plain, doubted):
        d.on_reference_usable(False, "GNSS integrity spoofed", raw)
        assert d.state is ClockState.HOLDOVER
    later = raw + 1000 * NS_PER_S
    extra = doubted.bound_ns(later) - plain.bound_ns(later)
    assert extra >= 0.95 * (0.05 + 3 * 0.01) * 1000  # the gap and the line's 3 sigma, per second held


def test_the_doubt_of_a_reference_widens_the_locked_bound() -> None:
    d = _locked_discipline()
    raw = 900 * NS_PER_S
    quiet = d.bound_ns(raw)
    d.on_sample(1.0, raw, doubt_ns=30.0)  # the reference sits 30 ns off the oscillator's line
    assert d.bound_ns(raw) >= quiet + 30.0 - 3.0


def test_a_push_below_the_line_s_noise_is_not_learned_into_it() -> None:
    law = power_law(OSCILLATORS["ocxo"])
    anchor = PhaseAnchor(law)
    for t in range(600):
        anchor.learn(t * NS_PER_S, free_phase(t))
    before = anchor.anchor
    assert before is not None
    for t in range(600, 1200):  # 0.1 ns/s, slower than anything a single sample shows
        anchor.learn(t * NS_PER_S, free_phase(t) + 0.1 * (t - 600))
    after = anchor.anchor
    assert after is not None
    predicted = after.phase_ns + after.frequency_ppb * (1200 * NS_PER_S - after.at_raw_ns) / NS_PER_S
    residual = free_phase(1200) + 60.0 - predicted
    assert residual > 30.0  # the push shows against the line instead of being learned into it


def test_a_gap_keeps_the_line_s_samples_so_it_refits_at_once() -> None:
    anchor = PhaseAnchor(power_law(OSCILLATORS["ocxo"]))
    for t in range(600):
        anchor.learn(t * NS_PER_S, free_phase(t))
    fitted = anchor.anchor
    assert fitted is not None
    assert anchor.learn(900 * NS_PER_S, free_phase(900))  # after five minutes away: refitted with the first sample
    assert anchor.anchor is not None and anchor.anchor.at_raw_ns == 900 * NS_PER_S


def test_a_clock_that_learned_only_from_the_attack_says_so_and_does_not_hold_over() -> None:
    d = _locked_discipline()
    d.distrust(0, None)  # the attack dated from before anything was learned
    d.on_reference_usable(False, "gnss unusable (GNSS integrity spoofed)", 900 * NS_PER_S)
    assert d.state is ClockState.FREERUN and d.bound_ns(900 * NS_PER_S) is None
    assert "no holdover: all the clock had learned came from the rejected reference" in d.reason


def test_the_status_line_says_what_the_clock_does_once_the_reference_is_rejected() -> None:
    from appliance.status import _integrity_line

    g = {"enabled": True, "level": "spoofed", "usable": False, "override": "auto", "action": "reject",
         "requalify_in_s": None, "reasons": ["phase-jump: phase +64 ns"], "ntp": None,
         "survey": {"state": "fixed", "source": "surveyed", "home": None}}
    assert "REJECTED (holding over)" in _integrity_line(g, "HOLDOVER")
    assert "REJECTED (clock free-running)" in _integrity_line(g, "FREERUN")
