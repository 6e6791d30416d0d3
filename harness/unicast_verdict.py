"""The unicast PTP load's verdict: whose a late Sync is (the grandmaster's, or the host's that held its sender off
the CPU), what keeps a run from the target, and the largest client count that met it.

Pure (the lines of a kernel trace and the appliance's published late Syncs in, figures out); ``bench/ptp_unicast.py``
gathers what it judges, ``tests/unit/test_harness_unicast_verdict.py`` tests it.
"""

from __future__ import annotations

import bisect
import re

from harness.kernel_trace import overlap_s

OWN_LISTED = 64  # late Syncs not shown to be the host's, listed in the results (and their trace kept, --keep-logs)
TRACE_TS = re.compile(r"^\s*.+?-\d+\s+\[\d+\]\s+\S+\s+([\d.]+):")
TARGET_CLIENTS = 10000  # issue 23: 10,000 clients, every Sync within 1 ms of its slot, nothing unanswered


def canary_slowdown(canary: tuple[list[tuple[float, int]], float], t0_s: float, t1_s: float) -> float:
    """How many times slower than its median the canary's work ran over [t0_s, t1_s] (its wake-ups there, their mean
    wall time over the run's median); 1.0 when it did not run there."""
    samples, median_ns = canary
    i, j = bisect.bisect_left(samples, (t0_s,)), bisect.bisect_right(samples, (t1_s, 1 << 62))
    inside = [w for _, w in samples[i:j]]
    return max(1.0, sum(inside) / len(inside) / median_ns) if inside and median_ns > 0 else 1.0


def served(r: dict) -> bool:
    """Every client granted and every Sync on time with its Follow_Up: a two-step Sync without its Follow_Up, or a
    Sync that comes in a late burst, is no use to a slave, so both count as missed."""
    return (r["granted"] == r["clients_requested"] and r["denied"] == 0 and r["no_reply"] == 0
            and r["syncs_missed"] == 0 and r["sync_late_slots"] == 0
            and r["follow_ups"] >= r["syncs_received"] * 0.999)


def own_late(late: dict) -> int:
    """Syncs over 1 ms late that are the grandmaster's.  Without SCHED_FIFO nothing is set apart (its own threads
    may have held the sender off).  With it, the host's are: those the sender was held off its CPU for beyond
    1 ms (a SCHED_FIFO thread is held off only by the hypervisor or a higher-priority thread); with --ftrace,
    instead, each late Sync the trace classified (``traced``: held time or silent timer gaps account for all but
    1 ms of it), the rest (more than the status keeps) judged."""
    if not late.get("realtime"):
        return late["late_over_1ms"]
    traced = late.get("traced")
    if isinstance(traced, dict):
        return late["late_over_1ms"] - traced["host"]
    return late["late_over_1ms"] - late.get("held", 0)


def classify_late(late_syncs: list, gaps: list[tuple[float, float]], t0_s: float, t1_s: float,
                  span: tuple[float, float] | None = None,
                  canary: tuple[list[tuple[float, int]], float] | None = None,
                  contention: list[tuple[float, float]] = (), takes: tuple[int, int] | None = None,
                  kernel: list[tuple[float, float]] = ()) -> dict:
    """The Syncs over 1 ms late that the window counted (from the status's latest late Syncs: slot ns, lateness
    us, held us and the number of the sender's take that counted it; with ``takes`` (t1, t2], those of the takes
    after t1 up to t2, as the window's counts, else those whose slot is in [t0_s, t1_s], monotonic s): the host's when the largest of its held time, the silent timer gaps between
    its slot and its sending (the vCPU not running) and, with the canary, the part of its lateness the vCPU's
    slowdown there accounts for (lateness x (1 - 1/f): at the usual speed the stretch would have taken lateness / f)
    leaves it within 1 ms.  Outside the ``span`` the trace kept, gaps do not count (``untraced``).  ``slow``: of
    the host's, those only the canary's slowdown accounts for.  ``contended``, for the record (not set apart): of
    the rest, those the sender's waits for contended kernel locks between slot and send would account for.
    ``kernel``: stretches a kernel thread kept the CPU after the sender's wake-up was due (the kernel did not
    preempt it), the host's like silent gaps; ``kernel_held``: of the host's, those that needed them."""
    def counted(slot_ns: int, take: int | None) -> bool:
        if takes is not None and take is not None:
            return takes[0] < take <= takes[1]
        return t0_s <= slot_ns / 1e9 <= t1_s

    listed = [(slot / 1e9, late_us, held_us) for slot, late_us, held_us, *take in late_syncs
              if counted(slot, take[0] if take else None)]
    host = untraced = slow = contended = kernel_held = 0
    held_off = sorted(list(gaps) + list(kernel))
    own: list[list[float]] = []  # the first OWN_LISTED not shown to be the host's: [slot s, lateness us, held us]
    for slot_s, late_us, held_us in listed:
        traced = span is None or span[0] <= slot_s and slot_s + late_us / 1e6 <= span[1]
        untraced += not traced
        silent_us = overlap_s(gaps, slot_s, slot_s + late_us / 1e6) * 1e6 if traced else 0.0
        off_us = overlap_s(held_off, slot_s, slot_s + late_us / 1e6) * 1e6 if traced else 0.0
        f = canary_slowdown(canary, slot_s, slot_s + late_us / 1e6) if canary else 1.0
        slow_us = late_us * (1.0 - 1.0 / f)
        if late_us - max(held_us, off_us) > 1000 >= late_us - slow_us:
            slow += 1
        is_host = late_us - max(held_us, off_us, slow_us) <= 1000
        kernel_held += is_host and late_us - max(held_us, silent_us, slow_us) > 1000
        host += is_host
        if not is_host and len(own) < OWN_LISTED:
            own.append([slot_s, late_us, held_us])
        lock_us = overlap_s(list(contention), slot_s, slot_s + late_us / 1e6) * 1e6 if traced else 0.0
        contended += not is_host and late_us - lock_us <= 1000
    return {"listed": len(listed), "host": host, "untraced": untraced, "slow": slow, "contended": contended,
            "kernel_held": kernel_held,
            "contention_max_us": max((b - a for a, b in contention), default=0.0) * 1e6,
            "silent_gaps_over_1ms": sum(1 for a, b in gaps if t0_s <= a <= t1_s and b - a > 1e-3), "own": own}


def trace_excerpts(text: str, late: list[list[float]], before_s: float = 1e-3, after_s: float = 5e-4) -> str:
    """The trace's lines from ``before_s`` ahead of each late Sync's slot to ``after_s`` past its sending (slot +
    lateness), each stretch under a heading: what the grandmaster's CPU did while a Sync the verdict could not set
    apart waited."""
    spans = sorted((slot_s - before_s, slot_s + late_us / 1e6 + after_s, slot_s, late_us, held_us)
                   for slot_s, late_us, held_us in late)
    out = [[f"# Sync slot {slot_s:.6f} s, {late_us:.0f} us late, {held_us:.0f} us held"]
           for _, _, slot_s, late_us, held_us in spans]
    lo, hi = min((a for a, *_ in spans), default=0.0), max((b for _, b, *_ in spans), default=-1.0)
    for line in text.splitlines():
        m = TRACE_TS.match(line)
        if m is None:
            continue
        t = float(m.group(1))
        if not lo <= t <= hi:  # most of a 300 MB trace: outside every stretch
            continue
        for k, (a, b, *_rest) in enumerate(spans):
            if a <= t <= b:
                out[k].append(line)
    return "\n".join(line for chunk in out for line in chunk) + "\n"


def target_failures(r: dict) -> list[str]:
    """What keeps a run from the target (issue 23): every client granted, no Sync missed or late, no Delay_Req or
    negotiation unanswered, every Sync sent within 1 ms of its slot by the grandmaster's own transmit timestamps."""
    out = []
    if r["granted"] < r["clients_requested"] or r["denied"] or r["no_reply"]:
        out.append(f"negotiation: {r['denied']} denied, {r['no_reply']} unanswered")
    if r["syncs_missed"] or r["sync_late_slots"]:
        out.append(f"{r['syncs_missed']} Syncs missed, {r['sync_late_slots']} slots late at the clients")
    if r["follow_ups"] < r["syncs_received"] * 0.999:  # as served(): no use to a slave
        out.append(f"{r['syncs_received'] - r['follow_ups']} of {r['syncs_received']} Syncs without their "
                   f"Follow_Up at the clients")
    unanswered = r["delay_req_sent"] - r["delay_resp_received"]
    if unanswered > 0:
        out.append(f"{unanswered} Delay_Req unanswered")
    ring = r.get("gm_udp", {}).get("link_gm_tx_dropped", 0)
    if ring and out:  # where the missing went: still the run's failure, named
        out.append(f"{ring} datagrams the clients' end of the link dropped (its receive rings full)")
    if r.get("rx_queue_drops") and out:  # the measurement's own limit: still a failure, not the grandmaster's
        out.append(f"{r['rx_queue_drops']} datagrams the load generator's own sockets dropped (it fell behind: "
                   f"the harness's limit at this count, not a figure of the grandmaster's)")
    late = r.get("lateness")
    if not isinstance(late, dict):
        out.append(f"Sync lateness not measured ({late})")
    elif own_late(late) or not late["syncs"]:
        out.append(f"{own_late(late)} of {late['syncs']} Syncs over 1 ms after their slot, not shown to be the "
                   f"host's (max {late['max_us'] / 1e3:.2f} ms)")
    return out


def passing_count(runs: list[dict]) -> int | None:
    """The largest count of TARGET_CLIENTS or more such that every run of it and of every count from
    TARGET_CLIENTS up to it met the target (repeats of a count are one verdict: a count that passed once and broke
    once did not pass, and a larger count that passed does not make up for it), or None.  A count above it that
    broke says where the grandmaster breaks; it does not undo the target."""
    by_count: dict[int, list[dict]] = {}
    for r in runs:
        by_count.setdefault(r["clients_requested"], []).append(r)
    best = None
    for n in sorted(c for c in by_count if c >= TARGET_CLIENTS):
        if any(r["target_failures"] for r in by_count[n]):
            break
        best = n
    return best


def target_verdict(runs: list[dict]) -> str:
    """PASS or FAIL, with the runs it stands on."""
    n = passing_count(runs)
    if n is not None:
        k = sum(1 for r in runs if r["clients_requested"] == n)
        return f"PASS at {n:,} ({k} run{'s' if k != 1 else ''}, every one met it)"
    big = [r for r in runs if r["clients_requested"] >= TARGET_CLIENTS]
    if not big:
        return f"FAIL, no run of {TARGET_CLIENTS:,} clients or more"
    broke = sum(1 for r in big if r["target_failures"])
    return f"FAIL ({broke} of {len(big)} runs of {TARGET_CLIENTS:,} clients or more broke it)"
