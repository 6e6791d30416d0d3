"""Verification of the audit chain on behalf of untrusted callers (the console, the REST API): one check at a time
for everybody, and not again before a pause that grows with the last check's duration, so that asking cannot burn
the appliance's CPU.

Edge only for its lock (the web threads share it); no I/O, and the caller's clock is passed in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from appliance.audit.chain import VerifyResult

VERIFY_MIN_INTERVAL_S = 10.0  # at most one check this often, for every caller together
VERIFY_DUTY_FACTOR = 10.0  # ... and not again before 10 times as long as the last one took (<= 10 % of a core)


@dataclass(frozen=True)
class SharedReport:
    """A result of ``verify_shared``: the check's result, when it finished and how long it took (the caller's
    clock, seconds), and whether it was computed for this call or is the last one's."""

    result: VerifyResult
    at_s: float
    took_s: float
    fresh: bool



class SharedVerify:
    """One check at a time for every caller together, and at most one per max(min_interval_s, duty_factor x the
    last one's duration): a caller in between gets the last report."""

    def __init__(self, verify: Callable[[], VerifyResult], min_interval_s: float = VERIFY_MIN_INTERVAL_S,
                 duty_factor: float = VERIFY_DUTY_FACTOR):
        self._verify, self.min_interval_s, self.duty_factor = verify, min_interval_s, duty_factor
        self._lock = threading.Lock()
        self._running = False
        self._last: SharedReport | None = None
        self._next_s = 0.0

    def run(self, clock_s: Callable[[], float]) -> SharedReport | None:
        started_s = clock_s()
        with self._lock:
            last = self._last
            # A clock stepped back (before the last report) does not keep the last result forever.
            waiting = last is not None and last.at_s - last.took_s <= started_s < self._next_s
            if self._running or waiting:
                return None if last is None else replace(last, fresh=False)
            self._running = True
        try:
            result = self._verify()
        finally:
            with self._lock:
                self._running = False
        done_s = clock_s()
        took_s = max(0.0, done_s - started_s)
        with self._lock:
            self._last = SharedReport(result, done_s, took_s, True)
            self._next_s = started_s + max(self.min_interval_s, self.duty_factor * took_s)
            return self._last

    def wait_s(self, now_s: float) -> float:
        with self._lock:
            return max(0.0, self._next_s - now_s) if self._last is not None else self.min_interval_s

    def forget(self) -> None:
        with self._lock:
            self._last, self._next_s = None, 0.0
