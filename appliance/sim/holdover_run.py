"""One holdover trial in the simulated world: learn while locked, lose GNSS, measure the error a day later.

Pure.  Used by the scenarios and the holdover benchmark.  Alongside the appliance's own time error it computes what an
oracle would have achieved: an oracle that knows, at the moment of loss, the oscillator's true (predictable)
frequency and its true aging rate, and steers on them perfectly.  The ratio of the two says how much of the error is
the predictor's fault rather than the oscillator's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from appliance.sim.clocksim import ClockSim
from appliance.units import NS_PER_S


@dataclass(frozen=True)
class HoldoverTrial:
    oscillator: str
    seed: int
    learn_s: int
    holdover_s: int
    te_at_loss_ns: float
    te_end_ns: float
    oracle_te_end_ns: float
    bound_end_ns: float
    worst_bound_ratio: float  # max over the holdover of |TE| / bound (honest when <= 1)
    state_end: str
    expired_after_s: float | None


def holdover_trial(oscillator: str, seed: int, learn_s: int = 2 * 86_400, holdover_s: int = 86_400) -> HoldoverTrial:
    sim = ClockSim(oscillator, seed=seed)
    sim.run(learn_s)
    loss_ns = sim.true_ns
    osc = sim.osc
    x_loss, y_loss, aging = osc.phase_error_ns(loss_ns), osc.smooth_frequency_ppb(loss_ns), osc.aging_ppb_per_s
    first = len(sim.record.te_ns)
    te_loss = sim.record.te_ns[-1]
    rec = sim.run(holdover_s, reference=False)
    end_ns = sim.true_ns
    dt_s = (end_ns - loss_ns) / NS_PER_S
    oracle = te_loss + osc.phase_error_ns(end_ns) - x_loss - y_loss * dt_s - 0.5 * aging * dt_s**2
    ratios = [abs(te) / b for te, b in zip(rec.te_ns[first:], rec.bound_ns[first:]) if b == b and b > 0]
    expired = [t for t, _old, new, _why in rec.transitions if new == "HOLDOVER_EXPIRED" and t * NS_PER_S >= loss_ns]
    return HoldoverTrial(oscillator, seed, learn_s, holdover_s, te_loss, rec.te_ns[-1], oracle, rec.bound_ns[-1],
                         max(ratios, default=math.nan), rec.state[-1],
                         (expired[0] - loss_ns / NS_PER_S) if expired else None)
