"""Unit tests for appliance.stability: which seconds of the time-quality record count (LOCKED, one second each,
continuous stretches never stitched across a gap) and the PRTC-A/B verdicts in words."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from appliance import metrics
from appliance.stability import MIN_SAMPLES, locked_stability, locked_stretches, mask_verdict
from appliance.units import NS_PER_S

T0 = 1_800_000_000 * NS_PER_S


@dataclass(frozen=True)
class R:
    at_tai_ns: int
    state: str
    phase_offset_ns: float | None
    span_s: int = 1


def rows(states_phases: list[tuple[str, float | None]], start_ns: int = T0) -> list[R]:
    return [R(start_ns + i * NS_PER_S, state, phase) for i, (state, phase) in enumerate(states_phases)]


# --- the locked-only selection ----------------------------------------------------------------------------------

def test_only_locked_one_second_rows_with_a_phase_count_and_other_states_cut_the_stretches() -> None:
    record = rows([("ACQUIRING", 3e6), ("LOCKED", 1.0), ("LOCKED", 2.0), ("HOLDOVER", None), ("LOCKED", 3.0),
                   ("LOCKED", None), ("LOCKED", 4.0), ("LOCKED", 5.0), ("FREERUN", 9e5)])
    assert locked_stretches(record) == [[1.0, 2.0], [3.0], [4.0, 5.0]]


def test_a_missing_second_cuts_a_stretch_but_the_sampling_jitter_does_not() -> None:
    jitter = [R(T0, "LOCKED", 1.0), R(T0 + 1_200_000_000, "LOCKED", 2.0), R(T0 + 2_100_000_000, "LOCKED", 3.0)]
    assert locked_stretches(jitter) == [[1.0, 2.0, 3.0]]
    gap = [R(T0, "LOCKED", 1.0), R(T0 + NS_PER_S, "LOCKED", 2.0), R(T0 + 3 * NS_PER_S, "LOCKED", 3.0)]
    assert locked_stretches(gap) == [[1.0, 2.0], [3.0]]
    twice = [R(T0, "LOCKED", 1.0), R(T0 + 100_000_000, "LOCKED", 9.0), R(T0 + NS_PER_S, "LOCKED", 2.0)]
    assert locked_stretches(twice) == [[1.0, 2.0]]


def test_merged_rows_are_not_one_second_samples() -> None:
    merged = [R(T0, "LOCKED", 1.0, span_s=60), R(T0 + 60 * NS_PER_S, "LOCKED", 2.0)]
    assert locked_stretches(merged) == [[2.0]]


def test_the_first_lock_step_does_not_reach_the_statistics() -> None:
    """A 3 ms acquisition followed by a few ns of locked wander: the statistics see the ns only."""
    rng = np.random.default_rng(7)
    locked = list(rng.normal(0.0, 0.5, 600))
    record = rows([("ACQUIRING", 3e6 * (1 - k / 30)) for k in range(30)] + [("LOCKED", p) for p in locked])
    result = locked_stability(record)
    assert result.samples == result.longest_s == 600 and result.stretches == 1
    assert max(result.mtie_ns) < 30.0
    assert result.mtie_ns == tuple(metrics.mtie_ns(locked, 1.0, result.taus_s))
    assert all(v.passed for v in result.verdicts)


def test_two_stretches_are_judged_without_stitching_them_together() -> None:
    """Two flat stretches 1 µs apart: stitched, MTIE would see a 1 µs step; judged apart, MTIE is 0."""
    record = rows([("LOCKED", 0.0)] * 100 + [("HOLDOVER", None)] * 10 + [("LOCKED", 1000.0)] * 100)
    result = locked_stability(record)
    assert (result.samples, result.stretches, result.longest_s) == (200, 2, 100)
    assert max(result.mtie_ns) == 0.0 and max(result.tdev_ns) < 1e-9  # float noise of the seconds conversion
    assert all(v.passed for v in result.verdicts)
    assert "200 s of locked data in 2 stretches" in result.verdicts[0].text


def test_tdev_is_pooled_over_stretches_weighted_by_their_terms() -> None:
    rng = np.random.default_rng(11)
    a, b = list(rng.normal(0, 1.0, 200)), list(rng.normal(0, 5.0, 100))
    result = locked_stability(rows([("LOCKED", p) for p in a] + [("FREERUN", None)] + [("LOCKED", p) for p in b]))
    tau = result.taus_s[0]
    ta, tb = metrics.tdev_ns(a, 1.0, [tau])[0], metrics.tdev_ns(b, 1.0, [tau])[0]
    wa, wb = 200 - 3 + 1, 100 - 3 + 1
    assert result.tdev_ns[0] == pytest.approx(math.sqrt((wa * ta**2 + wb * tb**2) / (wa + wb)))
    assert result.mtie_ns[0] == max(metrics.mtie_ns(a, 1.0, [tau])[0], metrics.mtie_ns(b, 1.0, [tau])[0])
    # taus beyond the shorter stretch come from the longer one alone
    long_tau = result.taus_s[-1]
    assert long_tau > (100 - 1) // 3
    assert result.tdev_ns[-1] == pytest.approx(metrics.tdev_ns(a, 1.0, [long_tau])[0])


def test_too_little_locked_data_gives_no_verdict_and_says_why() -> None:
    result = locked_stability(rows([("ACQUIRING", 1e6)] * 50 + [("LOCKED", 1.0)] * (MIN_SAMPLES - 1)))
    assert result.taus_s == () and all(v.passed is None for v in result.verdicts)
    assert result.verdicts[0].text == (f"PRTC-A: no verdict (the longest continuous locked stretch is "
                                       f"{MIN_SAMPLES - 1} s, at least {MIN_SAMPLES} s are needed)")
    nothing = locked_stability(rows([("FREERUN", None)] * 30))
    assert nothing.verdicts[1].text == "PRTC-B: no verdict (no locked one-second data in this window)"


# --- the verdict ------------------------------------------------------------------------------------------------

PRTC_A, PRTC_B = metrics.MASKS["PRTC-A"], metrics.MASKS["PRTC-B"]
TAUS = [1.0, 2.0, 4.0, 10.0, 20.0, 40.0, 100.0, 200.0, 400.0]


def test_a_record_below_both_masks_passes_and_says_over_what() -> None:
    mtie, tdev = [5.0] * len(TAUS), [0.5] * len(TAUS)
    for mask in (PRTC_A, PRTC_B):
        v = mask_verdict(mask, TAUS, mtie, tdev, samples=1234)
        assert v.passed is True and v.failed_tau_s is None
        assert v.text == (f"{mask.name}: pass (MTIE and TDEV below the mask at every τ from 1 s to 400 s over "
                          "1234 s of locked data)")


def test_a_record_fails_at_the_smallest_tau_above_the_mask() -> None:
    # the MTIE masks: 25 + 0.275 τ ns, flat from 273 s (PRTC-A, at 100 ns) or from 54.5 s (PRTC-B, at 40 ns)
    mtie = [5.0, 5.0, 5.0, 20.0, 25.0, 30.0, 45.0, 50.0, 50.0]
    tdev = [0.5] * len(TAUS)
    a = mask_verdict(PRTC_A, TAUS, mtie, tdev, samples=1200)
    assert a.passed is True
    b = mask_verdict(PRTC_B, TAUS, mtie, tdev, samples=1200)
    assert (b.passed, b.failed_metric, b.failed_tau_s, b.measured_ns, b.limit_ns) == (False, "MTIE", 100.0, 45.0, 40.0)
    assert b.text == "PRTC-B: fail at τ = 100 s (MTIE 45.0 ns above the mask's 40.0 ns; 1200 s of locked data)"


def test_tdev_can_fail_where_mtie_passes_and_mtie_is_named_first_at_the_same_tau() -> None:
    tdev = [0.5, 0.5, 2.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]  # PRTC-B TDEV limit 1 ns up to 100 s
    v = mask_verdict(PRTC_B, TAUS, [5.0] * len(TAUS), tdev, samples=1200)
    assert (v.passed, v.failed_metric, v.failed_tau_s) == (False, "TDEV", 4.0)
    both = mask_verdict(PRTC_A, TAUS, [3e6] * len(TAUS), [3e6] * len(TAUS), samples=100)
    assert (both.failed_metric, both.failed_tau_s) == ("MTIE", 1.0)
    assert both.text.startswith("PRTC-A: fail at τ = 1 s (MTIE 3.00 ms above the mask's 25.3 ns")


def test_a_tau_no_stretch_reaches_is_not_judged() -> None:
    v = mask_verdict(PRTC_A, [1.0, 2.0], [5.0, math.nan], [0.5, math.nan], samples=40)
    assert v.passed is True and "every τ from 1 s to 1 s" in v.text
