"""How late the grandmaster's Syncs leave: each Sync's transmit timestamp against the slot it was due in.

Pure core.  ``SyncLateness.add(lateness_ns)`` takes one Sync; memory is fixed whatever the count: a log-linear
histogram of whole microseconds (1 us wide bins below 32 us, then 16 bins per octave, each at most 1/16 of its value
wide, up to about 67 s, the last bin open-ended), the exact maximum and the count over 1 ms.  ``snapshot()`` is what
the status shows; ``window(before, after)`` is the statistic of the Syncs between two snapshots (the scale bench
reads the status around its measurement window).  A quantile is the upper edge of the bin that holds it (never below
the true value, at most 1/16 above), capped at the maximum.
"""

from __future__ import annotations

from typing import Any

from appliance.protocol import dataplane  # type: ignore[attr-defined]
from appliance.units import NS_PER_MS, NS_PER_US

SUB_BITS = 4  # 2**4 = 16 bins per octave
SUB = 1 << SUB_BITS
TOP_SHIFT = 22  # the last octave starts at 2**26 us (~67 s)
N_BINS = (TOP_SHIFT << SUB_BITS) + 2 * SUB
assert N_BINS == dataplane.LATENESS_BINS
LATE_NS = NS_PER_MS  # the target: every Sync within 1 ms of its slot


def bin_of(lateness_us: int) -> int:
    """The bin of a lateness in whole microseconds (negative counts as 0: on time): ``native/lateness.h``, which the
    PTP event sender fills its histogram with too."""
    return dataplane.lateness_bin(max(-1, min(lateness_us, 2**62)))


def bin_edges_us(index: int) -> tuple[int, int]:
    """[low, high) of a bin in us (the last bin's high is its nominal edge; it holds everything above too)."""
    if index < 2 * SUB:
        return index, index + 1
    shift, top = divmod(index, SUB)
    shift -= 1
    mantissa = top + SUB
    return mantissa << shift, (mantissa + 1) << shift


class SyncLateness:
    """Count, count over 1 ms, maximum and the histogram of Sync lateness (transmit time minus slot)."""

    __slots__ = ("bins", "count", "over_1ms", "max_ns")

    def __init__(self) -> None:
        self.bins = [0] * N_BINS
        self.count = 0
        self.over_1ms = 0
        self.max_ns = 0

    def add(self, lateness_ns: int) -> None:
        self.bins[bin_of(lateness_ns // NS_PER_US)] += 1
        self.count += 1
        if lateness_ns > LATE_NS:
            self.over_1ms += 1
        if lateness_ns > self.max_ns:
            self.max_ns = lateness_ns

    def merge(self, bins: list[tuple[int, int]], count: int, over_1ms: int, max_ns: int) -> None:
        """Syncs counted elsewhere into the same bins (a native sender's): (bin index, count) pairs."""
        for index, n in bins:
            self.bins[index] += n
        self.count += count
        self.over_1ms += over_1ms
        self.max_ns = max(self.max_ns, max_ns)

    def quantile_us(self, q: float) -> float:
        return quantile_us(self.bins, self.count, q, self.max_ns / NS_PER_US)

    def snapshot(self) -> dict[str, Any]:
        """syncs, late_over_1ms, p50/p99/max in us, and the non-empty bins as [low_us, high_us, count]."""
        return {"syncs": self.count, "late_over_1ms": self.over_1ms, "p50_us": self.quantile_us(0.5),
                "p99_us": self.quantile_us(0.99), "max_us": self.max_ns / NS_PER_US,
                "bins": [[*bin_edges_us(i), n] for i, n in enumerate(self.bins) if n]}


def quantile_us(bins: list[int], count: int, q: float, max_us: float) -> float:
    """The q-quantile of a histogram indexed by bin: its bin's upper edge, at most ``max_us``; 0 when empty."""
    if count <= 0:
        return 0.0
    rank = max(1, -(-int(q * count * 1_000_000) // 1_000_000))  # ceil(q * count) without float surprises
    seen = 0
    for index, n in enumerate(bins):
        seen += n
        if seen >= rank:
            return float(min(bin_edges_us(index)[1], max_us)) if index < N_BINS - 1 else max_us
    return max_us


def window(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The Syncs between two snapshots of one port: their count, count over 1 ms, p50 and p99, and their maximum:
    exact when the maximum rose in between, else the upper edge of the highest bin that grew (capped at the earlier
    maximum, which it cannot exceed)."""
    old = {(lo, hi): n for lo, hi, n in before.get("bins", [])}
    grown = sorted((lo, hi, n - old.get((lo, hi), 0)) for lo, hi, n in after.get("bins", []))
    grown = [(lo, hi, n) for lo, hi, n in grown if n > 0]
    count = after["syncs"] - before["syncs"]
    if after["max_us"] > before["max_us"]:
        max_us = after["max_us"]
    else:
        max_us = min(float(grown[-1][1]), after["max_us"]) if grown else 0.0
    bins = [0] * N_BINS
    for lo, _hi, n in grown:
        bins[bin_of(lo)] += n
    return {"syncs": count, "late_over_1ms": after["late_over_1ms"] - before["late_over_1ms"],
            "p50_us": quantile_us(bins, count, 0.5, max_us), "p99_us": quantile_us(bins, count, 0.99, max_us),
            "max_us": max_us}
