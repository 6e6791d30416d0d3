"""What the CPU-cost benches share: a process's own CPU time and the bootstrap intervals of their medians.

Pure but for ``process_cpu_ns`` and ``process_user_system_s`` (which read /proc); the statistics are tested in tests/unit/test_bench_cost.py.
"""

from __future__ import annotations

import os
import random
import statistics
from collections.abc import Sequence
from pathlib import Path


def process_cpu_ns(pid: int) -> int:
    """Run time of every thread of ``pid`` so far (ns), from /proc/<pid>/task/*/schedstat (threads that ended are
    lost: measure processes whose threads live as long as they do)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            pass  # a thread that ended while we read
    return total


def process_user_system_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of ``pid`` so far (every thread), from /proc/<pid>/stat: the kernel's split of
    its run time, sampled at its clock ticks (so only a window's totals are worth reading)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick  # utime, stime: fields 14 and 15 of proc(5)


def _interval(draws: list[float]) -> tuple[float, float]:
    draws.sort()
    return draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws)) - 1]


def bootstrap_median(values: Sequence[float], rounds: int = 2000, seed: int = 1) -> tuple[float, float]:
    """95 % percentile bootstrap interval of the median of ``values``."""
    rng = random.Random(seed)
    return _interval([statistics.median(rng.choices(values, k=len(values))) for _ in range(rounds)])


def bootstrap_ratio_of_medians(num: Sequence[float], den: Sequence[float], rounds: int = 2000,
                               seed: int = 1) -> tuple[float, float, float]:
    """median(num) / median(den) and its 95 % percentile bootstrap interval: each draw resamples both samples'
    windows with replacement, each on its own (they are two samples, not pairs).  A draw whose denominator's median
    is not positive has no ratio and is left out (all of them: nan)."""
    den_median = statistics.median(den)
    ratio = statistics.median(num) / den_median if den_median > 0 else float("nan")
    rng = random.Random(seed)
    draws = []
    for _ in range(rounds):
        d = statistics.median(rng.choices(den, k=len(den)))
        n = statistics.median(rng.choices(num, k=len(num)))
        if d > 0:
            draws.append(n / d)
    if not draws:
        return ratio, float("nan"), float("nan")
    low, high = _interval(draws)
    return ratio, low, high
