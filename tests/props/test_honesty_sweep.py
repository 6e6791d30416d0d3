"""Honesty around its hardest case, searched on a grid: short locks, short outages, oscillators far off their datasheet.

The hardest known case of the random property (test_honesty.py): a TCXO drawn 3.2 sigma off its datasheet frequency
(seed 9999), half a second after the reference qualifies, before the loop has its own frequency estimate.  A bound
that grew the phase there at 3 sigma of the datasheet figure, not at the rate the clock had measured, advertised
18,554 ns while 18,588 ns was served.  Here the same run (lock, lose the reference, get it back) walks a fixed grid
around that case, and every second of it must keep |served - true| within the advertised bound, in every state."""

from __future__ import annotations

import itertools
import math

import pytest

from appliance.clock.oscillator import OSCILLATORS
from appliance.sim.clocksim import ClockSim

# 9999: the counterexample; 2816: the draw farthest from the datasheet among seeds 0..10000 (3.47 sigma); 1: ordinary
SEEDS = (9999, 2816, 1)
LOCK_S = (60, 90, 300)
OUTAGE_S = (1, 4, 30, 120)  # 4: just past the reference timeout
INITIAL_ERROR_NS = (0, 30_000, -30_000, 150_000, -150_000)  # within and beyond the step threshold
AFTER_S = 600  # back on the reference: re-acquisition and relock


def worst_second(sim: ClockSim) -> tuple[float, str]:
    """The largest |served - true| - bound over the run (negative: within it), and the state then."""
    rec = sim.record
    seconds = [(abs(te) - b, state) for te, b, state in zip(rec.te_ns, rec.bound_ns, rec.state) if not math.isnan(b)]
    return max(seconds)


def lose_and_regain(sim: ClockSim, lock_s: int, outage_s: int) -> ClockSim:
    sim.run(lock_s)
    sim.run(outage_s, reference=False)
    sim.run(AFTER_S)
    return sim


@pytest.mark.slow
@pytest.mark.parametrize("oscillator", ["tcxo", "ocxo"])
@pytest.mark.parametrize("seed", SEEDS)
def test_bound_holds_around_short_locks_and_outages(oscillator: str, seed: int) -> None:
    over = []
    for lock_s, outage_s, error_ns in itertools.product(LOCK_S, OUTAGE_S, INITIAL_ERROR_NS):
        sim = lose_and_regain(ClockSim(oscillator, seed=seed, initial_error_ns=error_ns), lock_s, outage_s)
        margin_ns, state = worst_second(sim)
        if margin_ns > 0:
            over.append((lock_s, outage_s, error_ns, round(margin_ns), state))
    assert not over, f"(lock_s, outage_s, initial_error_ns, ns over the bound, state): {over}"


@pytest.mark.parametrize("sigmas", [-8.0, -5.0, 5.0, 8.0])
def test_bound_does_not_rest_on_the_datasheet_frequency_tolerance(sigmas: float) -> None:
    """A TCXO 5 and 8 sigma off its datasheet frequency (8 sigma is past the loop's 2000 ppb clamp): the bound
    follows the frequency the clock measured, so it holds all the same."""
    offset_ppb = sigmas * OSCILLATORS["tcxo"].initial_offset_ppb
    over = []
    for outage_s, error_ns in itertools.product((1, 4), (0, 150_000, -150_000)):
        sim = ClockSim("tcxo", seed=1, initial_error_ns=error_ns, initial_offset_ppb=offset_ppb)
        margin_ns, state = worst_second(lose_and_regain(sim, 60, outage_s))
        if margin_ns > 0:
            over.append((outage_s, error_ns, round(margin_ns), state))
    assert not over, f"(outage_s, initial_error_ns, ns over the bound, state): {over}"
