"""Adapter from the clock service's backend interface to a kernel clock (CLOCK_REALTIME or a PHC).

I/O edge.  With a kernel clock the local counter *is* the served clock: the kernel applies every frequency change and
step itself, so the served time at a raw reading is that reading (converted to TAI for CLOCK_REALTIME, which counts
UTC; a PHC is kept in TAI as PTP does).  ``publish`` tells other programs on the host (chrony, timedatectl, anything
reading adjtimex) whether the clock is synchronized and how far off it may be, and keeps CLOCK_TAI right.
"""

from __future__ import annotations

from collections.abc import Callable

from appliance.edge.kernel_clock import KernelClock


class KernelBackend:
    def __init__(self, clock: KernelClock, to_tai_ns: Callable[[int], int]):
        self.clock = clock
        self._to_tai_ns = to_tai_ns
        self.freq_ppb = 0.0

    def served_ns(self, raw_ns: int) -> int:
        return self._to_tai_ns(raw_ns)

    def set_frequency(self, freq_ppb: float, at_raw_ns: int) -> None:
        self.clock.set_frequency(freq_ppb)
        self.freq_ppb = freq_ppb

    def step(self, delta_ns: int, at_raw_ns: int) -> None:
        self.clock.step(delta_ns)

    def publish(self, synchronized: bool, bound_ns: int | None, tai_utc_s: int) -> None:
        if self.clock.is_phc:
            return
        bound_us = 16_000_000 if bound_ns is None else max(1, bound_ns // 1000)
        self.clock.set_status(synchronized, bound_us, bound_us)
        self.clock.set_tai_offset(tai_utc_s)
