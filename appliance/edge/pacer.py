"""A global request budget that makes callers wait their turn instead of refusing them.

Edge helper (it reads the monotonic clock and sleeps).  The console and the SNMP agent serve people and an NMS; the
appliance's business is time.  A per-address rate limit does not bound what many clients (or one client with many
connections) cost together, and every request costs kernel network and TLS work that no scheduling class keeps
away from the NTP and PTP workers.  A pacer bounds the total: each request takes a token from one bucket
(``rate_per_s``, burst ``burst``); when none is left the caller sleeps until its turn comes, so a flood of
closed-loop clients is slowed to the budget rather than served as fast as the CPU allows, and a request that would
wait longer than ``max_wait_s`` is refused.  Tokens are reserved in order, so waiting callers are served first come,
first served.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from appliance.protocol import dataplane  # type: ignore[attr-defined]
from appliance.units import NS_PER_S


class Pacer:
    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.rate, self.burst, self.clock, self.sleep = rate_per_s, burst, clock, sleep
        # The one token bucket (native/bucket.h): reservations may take it into debt, which is the queue.
        self._bucket = dataplane.Bucket(max(0.0, rate_per_s), float(max(1, burst)), self._now_ns())
        self._lock = threading.Lock()
        self.paced = self.refused = 0

    def _now_ns(self) -> int:
        return int(self.clock() * NS_PER_S)

    def delay_s(self) -> float:
        """Reserve a token: how long the caller must wait for it (0 now)."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            return self._bucket.reserve(self._now_ns()) / NS_PER_S

    def cancel(self) -> None:
        """Give back a reserved token (the caller will not wait for it after all)."""
        with self._lock:
            self._bucket.give_back()

    def wait(self, max_wait_s: float) -> bool:
        """Wait for a turn (True), or refuse at once if it is further away than ``max_wait_s`` (False)."""
        delay = self.delay_s()
        if delay > max_wait_s:
            self.cancel()
            self.refused += 1
            return False
        if delay > 0:
            self.paced += 1
            self.sleep(delay)
        return True
