"""What the CPU-cost benches share: a process's own CPU time and the bootstrap intervals of their medians.

Pure but for ``process_cpu_ns`` and ``process_user_system_s`` (which read /proc); the statistics and the cost
bench's arithmetic and verdicts are tested in tests/unit/test_harness_cost.py.
"""

from __future__ import annotations

import os
import random
import statistics
from collections.abc import Sequence
from pathlib import Path

LOSS_LIMIT_PCT = 0.1  # a window losing more did not answer everything: its cost is not comparable
LATE_LIMIT_PCT = 5.0  # a window where the generator fell behind more than this (it stalled) offered another load


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


def bootstrap_ratio_of_medians(num: Sequence[float], den: Sequence[float], rounds: int = 2000, seed: int = 1,
                               floor: Sequence[float] = ()) -> tuple[float, float, float]:
    """median(num) / median(den) and its 95 % percentile bootstrap interval: each draw resamples both samples'
    windows with replacement, each on its own (they are two samples, not pairs).  With ``floor`` (a third sample:
    what both pay anyway), the ratio of what each costs above it, (median(num) - median(floor)) / (median(den) -
    median(floor)), the floor resampled on its own too.  A draw whose denominator is not positive has no ratio and
    is left out (all of them: nan)."""
    def ratio_of(n: float, d: float, f: float) -> float | None:
        return (n - f) / (d - f) if d - f > 0 else None

    base = statistics.median(floor) if floor else 0.0
    point = ratio_of(statistics.median(num), statistics.median(den), base)
    rng = random.Random(seed)
    draws = []
    for _ in range(rounds):
        d = statistics.median(rng.choices(den, k=len(den)))
        n = statistics.median(rng.choices(num, k=len(num)))
        f = statistics.median(rng.choices(floor, k=len(floor))) if floor else 0.0
        r = ratio_of(n, d, f)
        if r is not None:
            draws.append(r)
    ratio = float("nan") if point is None else point
    if not draws:
        return ratio, float("nan"), float("nan")
    low, high = _interval(draws)
    return ratio, low, high


def cost_us(cpu_ns: int, wall_s: float, replies: int, idle_ns_per_s: float) -> float:
    """CPU microseconds per reply of a window: its CPU time less the idle process's over the same wall time."""
    if replies <= 0:
        return float("nan")
    return (cpu_ns - idle_ns_per_s * wall_s) / replies / 1e3


def disturbed(load: dict) -> str:
    """Why a window's load is not the one meant (empty: it is): requests lost or skipped (the server did not answer
    everything), the generator behind its schedule (stalled itself), replies that were not valid."""
    why = []
    if load["loss_pct"] > LOSS_LIMIT_PCT:
        why.append(f"loss {load['loss_pct']:.2f} %")
    late = load.get("late", 0)
    if late > LATE_LIMIT_PCT / 100 * (late + load["offered"]):
        why.append(f"generator late for {late:,} requests")
    why += [f"{load[k]} {k}" for k in ("invalid", "nak", "kod") if load.get(k)]
    return ", ".join(why)


def verdict(ratio: float, low: float, high: float, target: float) -> tuple[str, str]:
    """PASS when the ratio is at most the target (nan: FAIL), and whether the whole interval agrees."""
    passed = ratio <= target
    decided = (high <= target) if passed else (low > target)
    return ("PASS" if passed else "FAIL"), ("decided: the whole interval on this side" if decided
                                            else "undecided: the interval straddles the target")


# --- the run ----------------------------------------------------------------------------------------------------------
