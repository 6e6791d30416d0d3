"""Inside the kernel, for the PTP benches: how long each PTP frame a grandmaster sends spends between the veth
driver's start of transmission, where the software transmit timestamp is taken, and the peer's netif_rx, where the
receiver's software timestamp is taken (tracefs events, no kprobes needed).  Both ends are in one kernel path on the
sending CPU, so a long transit is a stall of that CPU; a stall with no guest event at all on that CPU inside it (no
interrupt, IPI, softirq or context switch) is time the guest never saw, i.e. taken by the hypervisor.

Used by ptp_sync_transit.py, ptp_offset.py, console_load.py and snmp_load.py (``--ftrace``).  Needs root.
"""

from __future__ import annotations

import bisect
import math
import re
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRACEFS = Path("/sys/kernel/tracing")
TRACE_EVENTS = ("net:net_dev_start_xmit", "net:netif_rx_entry", "irq:irq_handler_entry", "irq:softirq_entry",
                "irq_vectors:local_timer_entry", "irq_vectors:reschedule_entry", "irq_vectors:call_function_entry",
                "irq_vectors:call_function_single_entry", "irq_vectors:irq_work_entry", "sched:sched_switch",
                "ipi:ipi_send_cpu")
TRACE_LINE = re.compile(r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>[\d.]+):\s+"
                        r"(?P<event>\w+):\s*(?P<fields>.*)$")
PTP_FRAME_LEN = 86  # a 44-byte PTP message (Sync, Follow_Up) in UDPv4 over Ethernet
STALL_S = 10e-6  # a transit this long is a stall: the median is about 2 us
FOLLOW_UP_WITHIN_S = 0.02  # a 44-byte frame this soon after a Sync is its Follow_Up


class KernelTrace:
    """tracefs events over one observation window (mounted if it is not).  ``clock="mono"`` stamps the events
    with CLOCK_MONOTONIC (time.monotonic()), to line them up with samples taken outside the kernel."""

    def __init__(self, clock: str | None = None, events: tuple[str, ...] = TRACE_EVENTS, cpus: str | None = None,
                 buffer_kb: int = 40000) -> None:
        if not (TRACEFS / "set_event").exists():
            subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True)
        size = (TRACEFS / "buffer_size_kb").read_text()  # "1408", or "7 (expanded: 1408)" before first use
        # given back after each window ("X" when the CPUs' buffers differ: the default then)
        self._buffer_kb = size.split("expanded:")[-1].strip(" )\n")
        if not self._buffer_kb.isdigit():
            self._buffer_kb = "1408"
        self._clock = clock
        self._events, self._cpus, self._kb = events, cpus, buffer_kb  # cpus: a hex mask ("1": CPU 0 alone)
        self._old_cpus = (TRACEFS / "tracing_cpumask").read_text().strip()
        self._old_clock = re.search(r"\[(\w+)\]", (TRACEFS / "trace_clock").read_text())

    def _write(self, name: str, text: str) -> None:
        (TRACEFS / name).write_text(text)

    def start(self) -> None:
        self.arm()
        self.on()

    def arm(self, filters: dict[str, str] | None = None) -> None:
        """Everything but turning it on: the buffer's allocation stalls the CPUs for a while (hundreds of ms for
        hundreds of MB), so a measurement arms before it starts and turns tracing on when its window opens."""
        self._write("tracing_on", "0")
        self._write("trace", "")
        if self._clock:
            self._write("trace_clock", self._clock)
        if self._cpus:  # the traced CPUs' buffers only: the others stay small
            mask = int(self._cpus, 16)
            for cpu_dir in sorted((TRACEFS / "per_cpu").glob("cpu*")):
                if mask >> int(cpu_dir.name[3:]) & 1:
                    self._write(f"per_cpu/{cpu_dir.name}/buffer_size_kb", str(self._kb))
        else:
            self._write("buffer_size_kb", str(self._kb))
        if self._cpus:
            self._write("tracing_cpumask", self._cpus)
        self._filtered = list(filters or {})
        for event, expression in (filters or {}).items():  # "raw_syscalls:sys_enter": "common_pid == 1510"
            self._write(f"events/{event.replace(':', '/')}/filter", expression)
        self._write("set_event", "\n".join(self._events) + "\n")

    def on(self) -> None:
        self._write("tracing_on", "1")

    def stop(self) -> str:
        self._write("tracing_on", "0")
        # events the full buffer overwrote (the oldest go first): a window longer than the buffer holds
        self.overrun = 0
        for stats in sorted((TRACEFS / "per_cpu").glob("cpu*/stats")):
            m = re.search(r"^overrun: (\d+)", stats.read_text(), re.M)
            self.overrun += int(m.group(1)) if m else 0
        text = (TRACEFS / "trace").read_text()
        self._write("set_event", "")
        for event in getattr(self, "_filtered", []):
            self._write(f"events/{event.replace(':', '/')}/filter", "0")
        self._write("trace", "")
        self._write("buffer_size_kb", self._buffer_kb)
        if self._cpus:
            self._write("tracing_cpumask", self._old_cpus)
        if self._clock and self._old_clock:
            self._write("trace_clock", self._old_clock.group(1))
        return text


@dataclass(frozen=True)
class Frame:
    """One PTP frame's way through the sending CPU: start of transmit and peer receive, in trace-clock seconds."""

    dev: str
    cpu: int
    t_xmit_s: float
    t_rx_s: float
    silent: bool  # no guest event on the sending CPU between the two

    @property
    def transit_s(self) -> float:
        return self.t_rx_s - self.t_xmit_s


NET_EVENTS = ("net_dev_start_xmit", "netif_rx_entry")


class Trace:
    """One window's events: the PTP frames in it, and when each CPU showed a guest event (an interrupt, IPI,
    softirq or context switch: anything but the frames' own transmit and receive)."""

    def __init__(self, text: str) -> None:
        self.events: list[tuple[str, int, float, str, str]] = []
        for line in text.splitlines():
            m = TRACE_LINE.match(line)
            if m:
                self.events.append((m["comm"], int(m["cpu"]), float(m["ts"]), m["event"], m["fields"]))
        self._all: dict[int, list[float]] = {}  # every event's time, by CPU
        for _, cpu, ts, _, _ in self.events:
            self._all.setdefault(cpu, []).append(ts)
        for times in self._all.values():
            times.sort()
        self._guest: dict[int, list[float]] = {}
        for _, cpu, ts, event, _ in self.events:
            if event not in NET_EVENTS:
                self._guest.setdefault(cpu, []).append(ts)
        for times in self._guest.values():
            times.sort()

    def first_after(self, cpu: int, t_s: float) -> float | None:
        """The first event of any kind on ``cpu`` after ``t_s``."""
        times = self._all.get(cpu, [])
        i = bisect.bisect_right(times, t_s)
        return times[i] if i < len(times) else None

    def busy(self, cpu: int, t0_s: float, t1_s: float) -> bool:
        """A guest event on ``cpu`` strictly between the two instants."""
        times = self._guest.get(cpu, [])
        i = bisect.bisect_right(times, t0_s)
        return i < len(times) and times[i] < t1_s

    def frames(self, comm: str | None = None, devs: tuple[str, ...] | None = None) -> list[Frame]:
        """Every 44-byte PTP frame sent by process ``comm`` and/or on one of ``devs``, in the order sent."""
        started: dict[str, tuple[float, int, str]] = {}
        out: list[Frame] = []
        for who, cpu, ts, event, fields in self.events:
            if event == "net_dev_start_xmit" and f" len={PTP_FRAME_LEN} " in f"{fields} ":
                dev = re.search(r"dev=(\S+)", fields)
                skb = re.search(r"skbaddr=(\S+)", fields)
                if skb and dev and (comm is None or who == comm) and (devs is None or dev.group(1) in devs):
                    started[skb.group(1)] = (ts, cpu, dev.group(1))
            elif event == "netif_rx_entry":
                skb = re.search(r"skbaddr=(\S+)", fields)
                begun = started.pop(skb.group(1), None) if skb else None
                if begun is not None:
                    t0, on_cpu, dev_name = begun
                    out.append(Frame(dev_name, on_cpu, t0, ts, not self.busy(on_cpu, t0, ts)))
        out.sort(key=lambda f: f.t_xmit_s)
        return out


def frames(text: str, comm: str | None = None, devs: tuple[str, ...] | None = None) -> list[Frame]:
    return Trace(text).frames(comm, devs)


def syncs(sent: list[Frame]) -> list[Frame]:
    """The Syncs among one grandmaster's 44-byte frames: a two-step Sync is followed within milliseconds by its
    Follow_Up, and the next Sync comes an interval later."""
    out: list[Frame] = []
    last_sync: Frame | None = None
    for f in sent:
        if last_sync is not None and f.t_xmit_s - last_sync.t_xmit_s < FOLLOW_UP_WITHIN_S:
            last_sync = None  # its Follow_Up
            continue
        out.append(f)
        last_sync = f
    return out


def summarize_frames(sent: list[Frame]) -> dict[str, Any]:
    long = [f for f in sent if f.transit_s > STALL_S]
    return {"frames": len(sent), "over_10us": len(long), "silent_over_10us": sum(1 for f in long if f.silent),
            "max_us": max((f.transit_s for f in sent), default=math.nan) * 1e6,
            "median_us": statistics.median([f.transit_s for f in sent]) * 1e6 if sent else math.nan}


def kernel_transits(text: str, comm: str) -> dict[str, Any]:
    """The veth transmit-to-peer-receive time of each 44-byte PTP frame sent by ``comm``, from a trace."""
    return summarize_frames(frames(text, comm=comm))


def merge_kernel(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """kernel_transits of several windows as one: counts summed, the largest stall, the median of the medians."""
    return {**{k: sum(w[k] for w in windows) for k in ("frames", "over_10us", "silent_over_10us")},
            "max_us": max(w["max_us"] for w in windows),
            "median_us": statistics.median([w["median_us"] for w in windows])}



# Where the sender's own events are the ones wanted (a filter on its thread id keeps the rest of the CPU's load out
# of the buffer and the trace's cost low): system calls and transmits.
THREAD_EVENTS = ("raw_syscalls:sys_enter", "lock:contention_begin", "lock:contention_end")
WAKE_EVENTS = ("sched:sched_switch", "timer:hrtimer_start", "timer:hrtimer_expire_entry", "irq:softirq_entry",
               "irq:softirq_exit", "irq:irq_handler_entry", "irq_vectors:local_timer_entry",
               "irq_vectors:reschedule_entry", "irq_vectors:call_function_single_entry", "ipi:ipi_send_cpu",
               "raw_syscalls:sys_enter", "exceptions:page_fault_user",
               "exceptions:page_fault_kernel", "workqueue:workqueue_execute_start")
HRTIMER_START = re.compile(r"hrtimer=(\S+) function=\S+ expires=(\d+)")
HRTIMER_EXPIRE = re.compile(r"hrtimer=(\S+) function=")
TIMER_LATE_S = 50e-6  # a timer interrupt later than this on a CPU silent meanwhile: the vCPU was not running
RUNNING_SILENT_S = 200e-6  # no event this long while a thread that makes a system call every few us is current


def parsed(text: str | Trace) -> Trace:
    """A trace's text parsed once, for the functions below to share (a 20 s window is about 300 MB)."""
    return text if isinstance(text, Trace) else Trace(text)


def silent_timer_gaps(text: str | Trace, cpu: int, comm: str | tuple[str, ...] | None = None
                      ) -> list[tuple[float, float]]:
    """Stretches in which ``cpu`` had a timer due, took its interrupt more than TIMER_LATE_S late, and showed no
    event at all from the timer's expiry for more than TIMER_LATE_S (a trace of WAKE_EVENTS, mono clock): a guest
    that is running takes a due timer interrupt (user code cannot mask it), so the vCPU was not running -- the
    hypervisor's time, whether the CPU was idle or running a thread (a stretch the kernel's steal accounting does
    not always see).  The stretch runs from the expiry to the CPU's first event after it: interrupts that were
    pending meanwhile (an IPI, the timer itself) are delivered together when the vCPU runs again.  With ``comm``
    also every stretch over RUNNING_SILENT_S with no event at all (no system call, fault, interrupt or
    switch) while that thread was current: a loop that enters the kernel every few microseconds did not run
    (its thread CPU time still runs on: the hypervisor's exits it does not count as steal).  ``comm`` may name
    several such threads (the canary too: a few microseconds of work between its wake-up and its next sleep).
    Sorted (start, end) in trace-clock seconds."""
    comms = (comm,) if isinstance(comm, str) else tuple(comm or ())
    trace = parsed(text)
    armed: dict[str, float] = {}
    out: list[tuple[float, float]] = []
    current, last_s = "", None
    for who, on_cpu, ts, event, fields in trace.events:
        if on_cpu != cpu:
            continue
        if last_s is not None and current in comms and ts - last_s > RUNNING_SILENT_S:
            out.append((last_s, ts))
        last_s = ts
        current = who
        if event == "sched_switch":
            m = re.search(r"next_comm=(.+?) next_pid=", fields)
            current = m.group(1) if m else ""
        elif event == "hrtimer_start":
            m = HRTIMER_START.search(fields)
            if m:
                armed[m.group(1)] = int(m.group(2)) / 1e9
        elif event == "hrtimer_expire_entry":
            m = HRTIMER_EXPIRE.search(fields)
            expiry = armed.pop(m.group(1), None) if m else None
            if expiry is not None and TIMER_LATE_S < ts - expiry < 1.0:
                first = trace.first_after(cpu, expiry)
                if first is not None and first - expiry > TIMER_LATE_S:
                    out.append((expiry, min(first, ts)))
    out.sort()
    return out


# Kernel threads by name (the trace gives no flags): per-CPU workers, softirq threads and the kernel's own daemons.
KERNEL_THREAD = re.compile(r"^(kworker/|ksoftirqd/|kswapd|kcompactd|khugepaged|kthreadd$|rcu|migration/|cpuhp/|"
                           r"irq_work/|watchdog/|idle_inject/)")
WORK_FUNCTION = re.compile(r"function (\S+)")


def kernel_holds(text: str | Trace, cpu: int, comm: str) -> list[tuple[float, float, str]]:
    """Stretches in which thread ``comm`` on ``cpu`` was due to run -- its own timed wake-up had expired -- while a
    kernel thread kept the CPU: (expiry, the kernel thread's switch away, work functions it ran meanwhile),
    trace-clock s.  On a kernel that does not preempt kernel code (``Dynamic Preempt: none``) a
    SCHED_FIFO thread waits out a worker's whole item however low the worker's priority; it is the kernel's
    time, not the waiting thread's.  A stretch starts at the expiry only if a kernel thread was then current, and
    ends at that thread's first switch away."""
    trace = parsed(text)
    mine: set[str] = set()  # timers ``comm`` armed to wake itself
    due: float | None = None
    current, works = "", []
    out: list[tuple[float, float, str]] = []
    for who, on_cpu, ts, event, fields in trace.events:
        if on_cpu != cpu:
            continue
        if event == "hrtimer_start" and who == comm and "function=hrtimer_wakeup" in fields:
            m = HRTIMER_START.search(fields)
            if m:
                mine.add(m.group(1))
        elif event == "hrtimer_expire_entry":
            m = HRTIMER_EXPIRE.search(fields)
            if m and m.group(1) in mine:
                mine.discard(m.group(1))
                if KERNEL_THREAD.match(who) and due is None:
                    due, current, works = ts, who, []
        elif event == "workqueue_execute_start" and due is not None:
            m = WORK_FUNCTION.search(fields)
            if m and m.group(1) not in works:
                works.append(m.group(1))
        elif event == "sched_switch" and due is not None:
            prev = re.search(r"prev_comm=(.+?) prev_pid=", fields)
            if prev and prev.group(1) == current:
                out.append((due, ts, ",".join(works)))
            due = None
    return out


def contention_spans(text: str | Trace, cpu: int, comm: str) -> list[tuple[float, float]]:
    """Stretches in which thread ``comm`` on ``cpu`` waited for a kernel lock someone else held (the lock
    tracepoints contention_begin .. contention_end: spinning or sleeping), sorted (start, end), trace-clock s."""
    out: list[tuple[float, float]] = []
    begun: float | None = None
    for who, on_cpu, ts, event, _ in parsed(text).events:
        if on_cpu != cpu or who != comm:
            continue
        if event == "contention_begin":
            begun = ts if begun is None else begun
        elif event == "contention_end" and begun is not None:
            out.append((begun, ts))
            begun = None
    return out


def ipis_sent(text: str | Trace, cpu: int, comm: str) -> int:
    """How many inter-processor interrupts thread ``comm`` on ``cpu`` sent (ipi_send_cpu while it was current): on a
    virtual machine each is an exit to the hypervisor, charged to the thread that sends it."""
    return sum(1 for who, on_cpu, _, event, _ in parsed(text).events
               if on_cpu == cpu and who == comm and event == "ipi_send_cpu")


def traced_span(text: str, cpu: int) -> tuple[float, float] | None:
    """The first and last event on ``cpu`` (the trace file is in time order): what the buffer kept, since it drops
    the oldest when it fills."""
    lines = text.splitlines()
    found = []
    for ordered in (lines, reversed(lines)):
        for line in ordered:
            m = TRACE_LINE.match(line)
            if m and int(m["cpu"]) == cpu:
                found.append(float(m["ts"]))
                break
    return (found[0], found[1]) if len(found) == 2 else None


def overlap_s(gaps: list[tuple[float, float]], t0_s: float, t1_s: float) -> float:
    """How much of [t0_s, t1_s] the (sorted, possibly overlapping) gaps cover."""
    total, reach = 0.0, t0_s
    for start, end in gaps[:bisect.bisect_left(gaps, (t1_s, t1_s))]:
        start, end = max(start, reach), min(end, t1_s)
        if end > start:
            total += end - start
            reach = end
    return total
