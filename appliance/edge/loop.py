"""Timers on the host's real time: the scheduler interface over an asyncio event loop.

I/O edge (reads the host clock).  The axis is the host's CLOCK_REALTIME, or whatever the caller maps it to (the
appliance runs it on TAI, so that the simulated receiver running live stamps the seconds a client on this host sees).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from appliance.sched import Callback, TimerHandle, guarded


class AsyncioScheduler:
    """Real-time scheduler on an asyncio loop.  ``clock_ns`` gives the axis (default: host CLOCK_REALTIME)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, clock_ns: Callable[[], int] = time.time_ns):
        self._loop = loop
        self._clock_ns = clock_ns

    def now_ns(self) -> int:
        return self._clock_ns()

    def call_at(self, at_ns: int, callback: Callback) -> TimerHandle:
        handle = TimerHandle(at_ns)
        delay_s = max(0, at_ns - self._clock_ns()) / 1e9
        handle.attach(self._loop.call_later(delay_s, guarded(handle, callback)))
        return handle

    def call_later(self, delay_ns: int, callback: Callback) -> TimerHandle:
        return self.call_at(self._clock_ns() + delay_ns, callback)
