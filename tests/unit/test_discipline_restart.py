"""A restart that did not keep time after all: the restored clock holds over, then steps once on its first
acquisition rather than slewing a reboot's worth of error at the frequency clamp."""

from __future__ import annotations

from appliance.clock.learned import LearnedState
from appliance.sim.clocksim import ClockSim

NS = 1_000_000_000


def learned_then_restarted(seed: int, initial_error_ns: int = 0) -> tuple[LearnedState, ClockSim]:
    """An hour locked, then the appliance restarts a minute later on the same (still running) oscillator."""
    first = ClockSim("ocxo", seed=seed)
    first.run(3600)
    learned = first.learned_state()
    assert learned is not None
    later = ClockSim("ocxo", seed=seed + 1, start_tai_ns=first.true_ns + 60 * NS, initial_error_ns=initial_error_ns,
                     initial_offset_ppb=first.osc.smooth_frequency_ppb(first.true_ns))
    return learned, later


def test_restored_clock_far_off_steps_once_then_slews_forever_after() -> None:
    learned, later = learned_then_restarted(5, initial_error_ns=5_000_000)
    later.restore(learned)
    rec = later.run(300)
    states = [new for _t, _old, new, _why in rec.transitions]
    assert states[:3] == ["HOLDOVER", "ACQUIRING", "LOCKED"]
    assert len(later.phase_steps_ns) == 1 and abs(later.phase_steps_ns[0] + 5_000_000) < 10_000
    later.force_holdover(True)
    later.run(60)
    later.force_holdover(False)
    later.run(120)
    assert len(later.phase_steps_ns) == 1  # the operator's holdover and return never step
    assert later.record.state[-1] == "LOCKED"


def test_restored_clock_that_kept_time_never_steps() -> None:
    learned, later = learned_then_restarted(7)
    later.restore(learned)
    later.run(300)
    assert later.phase_steps_ns == [] and later.record.state[-1] == "LOCKED"


def test_seeded_frequency_free_runs_on_time_and_acquires_without_claiming_holdover() -> None:
    learned, later = learned_then_restarted(9)
    later.service.seed_frequency(learned.frequency_ppb, later.osc.raw_ns(later.true_ns))
    rec = later.run(600, reference=False)
    assert set(rec.state) == {"FREERUN"} and all(b != b for b in rec.bound_ns)  # no bound claimed
    assert abs(rec.te_ns[-1]) < 1_000  # yet 10 minutes of free run drift less than a microsecond
    rec = later.run(120)
    assert rec.state[-1] == "LOCKED"
