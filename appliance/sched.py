"""Timers behind one interface, and the simulated scheduler where time jumps from timer to timer.

Both count time on the scheduler's own axis in int nanoseconds.  In the simulation that axis is true time (TAI ns);
in real time it is the host's CLOCK_REALTIME converted to TAI by the caller-supplied offset function, so that the
simulated receiver running live stamps the same seconds a client on this host sees.  The simulated scheduler is pure; the
asyncio one, an I/O edge (it reads the host clock), is ``appliance/edge/loop.py``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Protocol

Callback = Callable[[], None]


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class TimerHandle:
    """Returned by ``call_at``; ``cancel()`` makes the timer a no-op (and cancels the timer it is attached to)."""

    __slots__ = ("at_ns", "cancelled", "_native")

    def __init__(self, at_ns: int):
        self.at_ns = at_ns
        self.cancelled = False
        self._native: Cancellable | None = None

    def attach(self, native: Cancellable) -> None:
        """The underlying timer (an event loop's, or the next timer of a series) that ``cancel`` must reach."""
        self._native = native

    def cancel(self) -> None:
        self.cancelled = True
        if self._native is not None:
            self._native.cancel()


def guarded(handle: TimerHandle, callback: Callback) -> Callback:
    """``callback``, unless ``handle`` was cancelled before it ran."""
    def run() -> None:
        if not handle.cancelled:
            callback()
    return run


class Scheduler(Protocol):
    def now_ns(self) -> int: ...

    def call_at(self, at_ns: int, callback: Callback) -> TimerHandle: ...

    def call_later(self, delay_ns: int, callback: Callback) -> TimerHandle: ...


class SimScheduler:
    """Discrete-event scheduler: ``run_until`` jumps from timer to timer, so a simulated day costs seconds."""

    def __init__(self, start_ns: int = 0):
        self._now_ns = start_ns
        self._heap: list[tuple[int, int, TimerHandle, Callback]] = []
        self._seq = itertools.count()

    def now_ns(self) -> int:
        return self._now_ns

    def call_at(self, at_ns: int, callback: Callback) -> TimerHandle:
        handle = TimerHandle(max(at_ns, self._now_ns))
        heapq.heappush(self._heap, (handle.at_ns, next(self._seq), handle, callback))
        return handle

    def call_later(self, delay_ns: int, callback: Callback) -> TimerHandle:
        return self.call_at(self._now_ns + max(0, delay_ns), callback)

    def pending(self) -> int:
        return sum(1 for _, _, h, _ in self._heap if not h.cancelled)

    def run_until(self, end_ns: int) -> int:
        """Run every timer due at or before ``end_ns`` in time order; returns how many ran."""
        ran = 0
        while self._heap and self._heap[0][0] <= end_ns:
            at_ns, _, handle, callback = heapq.heappop(self._heap)
            if handle.cancelled:
                continue
            self._now_ns = at_ns
            callback()
            ran += 1
        self._now_ns = max(self._now_ns, end_ns)
        return ran

    def run_for(self, duration_ns: int) -> int:
        return self.run_until(self._now_ns + duration_ns)


def every(scheduler: Scheduler, period_ns: int, callback: Callback, first_at_ns: int | None = None,
          phase_ns: int = 0) -> TimerHandle:
    """Call ``callback`` every ``period_ns`` on the grid ``k*period + phase`` (no drift from callback latency).

    Each slot fires at most once, even if the timer fires a little before its slot by the scheduler's clock (asyncio's
    clock resolution, a slewed host clock); a late callback skips the slots it missed.
    Returns a handle whose ``cancel()`` stops the series.
    """
    series = TimerHandle(0)

    def next_slot(after_ns: int) -> int:
        return ((after_ns - phase_ns) // period_ns + 1) * period_ns + phase_ns

    def fire() -> None:
        if series.cancelled:
            return
        callback()
        arm(next_slot(max(scheduler.now_ns(), series.at_ns)))

    def arm(at_ns: int) -> None:
        if not series.cancelled:
            inner = scheduler.call_at(at_ns, fire)
            series.attach(inner)  # so cancel() reaches the pending timer
            series.at_ns = at_ns

    arm(first_at_ns if first_at_ns is not None else next_slot(scheduler.now_ns()))
    return series
