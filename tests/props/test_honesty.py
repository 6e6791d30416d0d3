"""Honesty: across seeds, oscillators and outage times, at every simulated second |served - true| <= the bound the
appliance advertises (the number every PTP clockAccuracy, NTP root dispersion and IRIG-B quality code derives from).

Each example runs the clock at the phase detector for a few simulated hours: lock, lose GNSS at a random moment for a
random time, get it back.  The bound must hold in every state, including the seconds around each transition."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, example, given, settings, strategies as st

from appliance.sim.clocksim import ClockSim


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), oscillator=st.sampled_from(["tcxo", "ocxo", "ocxo-hp", "rubidium"]),
       lock_s=st.integers(60, 4 * 3600), outage_s=st.integers(1, 6 * 3600), initial_error_ns=st.integers(-5_000_000,
                                                                                                    5_000_000))
# A TCXO 3.2 sigma off its datasheet frequency, half a second after the reference qualifies (18,588 ns served against
# 18,554 ns when the bound took the datasheet's 3 sigma for the oscillator's rate); its neighbourhood is swept in
# test_honesty_sweep.py.
@example(seed=9999, oscillator="tcxo", lock_s=60, outage_s=1, initial_error_ns=0)
def test_served_error_never_exceeds_the_advertised_bound(seed: int, oscillator: str, lock_s: int, outage_s: int,
                                                          initial_error_ns: int) -> None:
    sim = ClockSim(oscillator, seed=seed, initial_error_ns=initial_error_ns)
    sim.run(lock_s)
    sim.run(outage_s, reference=False)
    sim.run(900)
    rec = sim.record
    worst = max((abs(te) / b, i) for i, (te, b) in enumerate(zip(rec.te_ns, rec.bound_ns)) if not math.isnan(b) and b > 0)
    assert worst[0] <= 1.0, (f"|TE| {rec.te_ns[worst[1]]:.0f} ns > bound {rec.bound_ns[worst[1]]:.0f} ns in "
                             f"{rec.state[worst[1]]} at second {worst[1]}")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), outage_at_s=st.integers(3600, 8 * 3600))
def test_bound_holds_through_a_long_holdover_after_learning(seed: int, outage_at_s: int) -> None:
    sim = ClockSim("ocxo-hp", seed=seed)
    sim.run(outage_at_s)
    first = len(sim.record.te_ns)
    sim.run(12 * 3600, reference=False)
    rec = sim.record
    assert all(abs(te) <= b for te, b in zip(rec.te_ns[first:], rec.bound_ns[first:]))
