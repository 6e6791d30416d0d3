"""The NTP cost bench's pure parts (bench/ntp_cost.py, bench/cost.py): the bootstrap of a ratio of medians, a
window's cost per reply less the idle process's CPU, which windows the host disturbed, and the verdict."""

from __future__ import annotations

import math
import statistics

from harness.cost import bootstrap_median, bootstrap_ratio_of_medians, cost_us, disturbed, verdict


def _load(**over) -> dict:
    return {"offered": 100_000, "late": 0, "valid": 100_000, "loss_pct": 0.0, "invalid": 0, "nak": 0, "kod": 0} | over


def test_the_ratio_is_that_of_the_medians_and_its_interval_holds_it() -> None:
    num = [5.0, 5.2, 4.9, 5.1, 9.0, 5.0, 5.05]  # one window the host slowed: the median does not follow it
    den = [10.0, 10.4, 9.8, 10.2, 10.1, 10.0, 30.0]
    ratio, low, high = bootstrap_ratio_of_medians(num, den)
    assert ratio == statistics.median(num) / statistics.median(den) == 0.5
    assert low <= ratio <= high
    assert 0.45 < low and high < 0.56  # the outliers do not widen it much


def test_samples_without_spread_give_a_point_interval() -> None:
    assert bootstrap_ratio_of_medians([3.0] * 7, [4.0] * 7) == (0.75, 0.75, 0.75)
    assert bootstrap_median([2.5] * 5) == (2.5, 2.5)


def test_the_interval_is_reproducible_and_narrows_with_more_windows() -> None:
    few_num, few_den = [1.0, 1.3, 0.8, 1.1, 0.9], [2.0, 2.5, 1.7, 2.2, 1.9]
    assert bootstrap_ratio_of_medians(few_num, few_den) == bootstrap_ratio_of_medians(few_num, few_den)
    _, low, high = bootstrap_ratio_of_medians(few_num, few_den)
    _, low_many, high_many = bootstrap_ratio_of_medians(few_num * 6, few_den * 6)
    assert high_many - low_many < high - low


def test_each_sample_is_resampled_on_its_own() -> None:
    # Two samples of different sizes (a server measured in more windows): no pairing is assumed.
    ratio, low, high = bootstrap_ratio_of_medians([1.0, 2.0, 3.0], [2.0, 2.0, 4.0, 4.0, 4.0])
    assert ratio == 0.5 and low <= 0.5 <= high and low >= 1.0 / 4.0 and high <= 3.0 / 2.0


def test_a_denominator_without_a_positive_median_has_no_ratio() -> None:
    ratio, low, high = bootstrap_ratio_of_medians([1.0, 1.0], [0.0, 0.0])
    assert math.isnan(ratio) and math.isnan(low) and math.isnan(high)


def test_above_a_floor_the_ratio_is_of_what_each_costs_over_it() -> None:
    # 8 and 10 us a reply over a 7 us floor both pay: 1 us against 3 us
    ratio, low, high = bootstrap_ratio_of_medians([8.0] * 5, [10.0] * 5, floor=[7.0] * 5)
    assert math.isclose(ratio, 1 / 3) and math.isclose(low, 1 / 3) and math.isclose(high, 1 / 3)
    # a floor at or over the denominator leaves nothing to compare
    ratio, low, high = bootstrap_ratio_of_medians([8.0] * 3, [10.0] * 3, floor=[10.0] * 3)
    assert math.isnan(ratio) and math.isnan(low)


def test_the_cost_of_a_window_is_its_cpu_less_the_idle_process_per_reply() -> None:
    # 0.5 s of CPU in a 2 s window, idle 1 ms/s, 100,000 replies: (500 - 2) ms / 100,000 = 4.98 us
    assert math.isclose(cost_us(500_000_000, 2.0, 100_000, 1_000_000.0), 4.98)
    assert math.isnan(cost_us(500_000_000, 2.0, 0, 0.0))


def test_a_window_that_lost_requests_or_whose_generator_fell_behind_is_disturbed() -> None:
    assert disturbed(_load()) == ""
    assert "loss" in disturbed(_load(loss_pct=0.5))
    assert disturbed(_load(loss_pct=0.05)) == ""  # within the 0.1 % allowed
    assert "late" in disturbed(_load(late=6_000))
    assert disturbed(_load(late=4_000)) == ""
    assert "nak" in disturbed(_load(nak=1)) and "invalid" in disturbed(_load(invalid=2))


def test_the_verdict_is_the_ratio_against_the_target_and_says_whether_the_interval_agrees() -> None:
    assert verdict(0.4, 0.35, 0.45, 0.5) == ("PASS", "decided: the whole interval on this side")
    assert verdict(0.48, 0.45, 0.55, 0.5)[0] == "PASS" and verdict(0.48, 0.45, 0.55, 0.5)[1].startswith("undecided")
    assert verdict(0.86, 0.8, 0.9, 0.5) == ("FAIL", "decided: the whole interval on this side")
    assert verdict(0.52, 0.45, 0.6, 0.5)[1].startswith("undecided")
    assert verdict(float("nan"), float("nan"), float("nan"), 0.5)[0] == "FAIL"
