"""From a NIC's hardware clock (PHC) to the host clock: the map hardware timestamps go through before the served one.

Pure core.  The service samples (host CLOCK_REALTIME, PHC) pairs once a second, each the tightest of a few reads;
between two samples the PHC runs at its own rate against the host clock, which the map estimates from the last two
samples (a free-running PHC is off by tens of ppm: ignoring the rate would cost tens of microseconds a second).
When the PHC is itself the served clock (``clock.backend=phc`` on the same device), no map is needed.
"""

from __future__ import annotations

from dataclasses import dataclass


MAX_RATE_PPM = 1000.0  # a rate estimate beyond this is a step of one of the clocks, not a rate


@dataclass
class PhcMap:
    host_ns: int | None = None
    phc_ns: int | None = None
    rate: float = 0.0  # PHC seconds per host second, minus one
    samples: int = 0

    def update(self, host_ns: int, phc_ns: int) -> None:
        if self.host_ns is not None and self.phc_ns is not None and host_ns > self.host_ns:
            rate = (phc_ns - self.phc_ns) / (host_ns - self.host_ns) - 1.0
            self.rate = rate if abs(rate) <= MAX_RATE_PPM * 1e-6 else 0.0
        self.host_ns, self.phc_ns = host_ns, phc_ns
        self.samples += 1

    @property
    def ready(self) -> bool:
        return self.samples >= 2

    def host_of(self, phc_ns: int) -> int:
        """The host clock's reading when the PHC read ``phc_ns``."""
        if self.host_ns is None or self.phc_ns is None:
            raise ValueError("no PHC sample yet")
        elapsed_phc = phc_ns - self.phc_ns
        return self.host_ns + round(elapsed_phc / (1.0 + self.rate))


def tightest(reads: list[tuple[int, int, int]]) -> tuple[int, int]:
    """(host, phc) from (host before, phc, host after) triples: the one with the shortest host window, the PHC read
    taken as the window's middle."""
    before, phc, after = min(reads, key=lambda r: r[2] - r[0])
    return (before + after) // 2, phc
