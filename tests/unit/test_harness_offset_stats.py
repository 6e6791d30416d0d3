"""The PTP offset bench's statistics (harness/offset_stats.py): windows of 10 Syncs at every rate, the bootstrap of the
candidate / ptp4l ratio with windows resampled alone or as time-aligned pairs, and the verdict on the target."""

from __future__ import annotations

import random

from harness.offset_stats import bootstrap_mean, bootstrap_ratio, print_windows, window_stats


def _noise(seed: int, n: int, scale: float) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(0, scale) for _ in range(n)]


def test_windows_are_ten_syncs_at_every_rate() -> None:
    assert window_stats(_noise(1, 100, 500), 1.0)["size"] == 10
    w = window_stats(_noise(1, 1600, 500), 16.0)
    assert w["size"] == 10 and len(w["rms_ns"]) == 160


def test_a_shared_disturbance_cancels_in_the_paired_interval() -> None:
    """Both measured at once: a busy stretch of the host makes both noisier together.  Resampled as pairs, the
    ratio's interval is narrower than when each side is resampled alone."""
    rng = random.Random(3)
    ref, cand = [], []
    for i in range(60):
        level = rng.choice([300.0, 3000.0])  # what the host did in window i, to both
        ref.append(_noise(100 + i, 10, level))
        cand.append(_noise(500 + i, 10, level))

    def rms(ws: list[list[float]]) -> float:
        xs = [x for w in ws for x in w]
        return (sum(x * x for x in xs) / len(xs)) ** 0.5

    _, low_alone, high_alone = bootstrap_ratio(ref, cand, rms)
    point, low_paired, high_paired = bootstrap_ratio(ref, cand, rms, paired=True)
    assert low_paired <= point <= high_paired
    assert high_paired - low_paired < high_alone - low_alone


def _run(mean_ns: float, scale: float, seed: int) -> dict:
    xs = [mean_ns + x for x in _noise(seed, 400, scale)]
    return {"ok": True, "windows": window_stats(xs, 16.0)}


def test_the_verdict_names_what_failed(capsys) -> None:
    res = {"transport": "udp4", "rate": 16.0,
           "rounds": [{"reference": _run(0, 1000, r), "candidate": _run(0, 500, 10 + r)} for r in range(3)]}
    print_windows(res, paired=True)
    assert capsys.readouterr().out.splitlines()[-1].endswith("PASS")
    worse = {**res, "rounds": [{"reference": _run(0, 500, r), "candidate": _run(200, 1000, 10 + r)}
                               for r in range(3)]}
    print_windows(worse, paired=True)
    last = capsys.readouterr().out.splitlines()[-1]
    assert "FAIL on median window rms" in last and "p99|offset|" in last and "mean" in last


def test_a_mean_at_the_truth_passes_when_the_reference_is_off(capsys) -> None:
    """ptp4l's mean is off the true 0 by more than the target; a candidate whose whole interval is within +/-50 ns
    of 0 meets the mean target, one whose interval reaches past it does not."""
    res = {"transport": "udp4", "rate": 1.0,
           "rounds": [{"reference": _run(-200, 500, r), "candidate": _run(10, 100, 10 + r)} for r in range(3)]}
    print_windows(res, paired=True)
    assert capsys.readouterr().out.splitlines()[-1].endswith("PASS")
    off = {**res, "rounds": [{"reference": _run(-200, 500, r), "candidate": _run(45, 300, 10 + r)} for r in range(3)]}
    print_windows(off, paired=True)
    assert "FAIL on mean" in capsys.readouterr().out.splitlines()[-1]


def test_the_interval_of_the_mean_holds_its_point() -> None:
    windows = [[5 + x for x in _noise(seed, 10, 100)] for seed in range(60)]
    point, low, high = bootstrap_mean(windows)
    assert low < point < high and high - low < 100
