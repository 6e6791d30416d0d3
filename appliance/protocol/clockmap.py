"""What an NTP worker needs to know about the clock: a host-time to served-time map and the fields to advertise.

Pure core.  The main process publishes a ClockMap every second (and at every state change) into a small shared
memory segment; workers read it under a sequence counter (see ``shm.py``).  Over one second the served clock is an
affine function of the host clock to far better than a nanosecond, so a worker needs no more than an anchor pair and
a rate.  NTP counts UTC without leap seconds: during an inserted leap second the map repeats 23:59:59, as the Linux
kernel does, while the leap indicator has warned clients since the day before.  The packed layout is fixed (and
mirrored by ``native/clockmap.h``): change ``FORMAT`` and ``VERSION`` together.  The served time itself is computed
in one place, ``native/clockmap.h``, which the NTP data plane, the PTP event sender and this class (through
``dataplane``) all use.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from appliance.protocol import dataplane  # type: ignore[attr-defined]
from appliance.timebase import posix_ns_to_ntp64
from appliance.units import NS_PER_S

VERSION = 1
# valid, leap, stratum, precision, poll_min | root_delay, root_dispersion | refid | host anchor, served anchor (TAI),
# rate (ppb, double) | tai_utc, leap delta | leap_at (TAI ns) | reference ts (NTP64) | generation
FORMAT = "<BBBbbxxxII4sqqdiiqQQ"
PACKED_SIZE = struct.calcsize(FORMAT)


@dataclass(frozen=True, slots=True)
class ClockMap:
    valid: bool
    leap_indicator: int
    stratum: int
    precision: int  # log2 seconds
    root_delay: int  # NTP short
    root_dispersion: int  # NTP short
    reference_id: bytes
    host_anchor_ns: int  # host CLOCK_REALTIME (POSIX ns) at the anchor
    served_anchor_tai_ns: int  # the served clock (TAI ns) at the same instant
    rate_ppb: float  # served seconds per host second, minus one, in ppb
    tai_utc_s: int  # TAI-UTC before any pending change
    leap_delta_s: int = 0  # +1 / -1 when a leap second is scheduled
    leap_at_tai_ns: int = 0  # first TAI instant with the new offset (0: none)
    reference_ts: int = 0  # NTP64 of the last clock update
    poll_min: int = 0  # lowest poll exponent advertised in replies
    generation: int = 0

    def served_tai_ns(self, host_ns: int) -> int:
        return dataplane.served_tai_ns(self.host_anchor_ns, self.served_anchor_tai_ns, self.rate_ppb, host_ns)

    def served_posix_ns(self, host_ns: int) -> int:
        """Served UTC as POSIX counts it (what NTP timestamps encode)."""
        return dataplane.posix_of_tai(self.served_tai_ns(host_ns), self.tai_utc_s, self.leap_delta_s,
                                    self.leap_at_tai_ns)

    def ntp_ts(self, host_ns: int) -> int:
        return posix_ns_to_ntp64(self.served_posix_ns(host_ns))

    def pack(self) -> bytes:
        return struct.pack(FORMAT, self.valid, self.leap_indicator, self.stratum, self.precision, self.poll_min,
                           self.root_delay, self.root_dispersion, self.reference_id, self.host_anchor_ns,
                           self.served_anchor_tai_ns, self.rate_ppb, self.tai_utc_s, self.leap_delta_s,
                           self.leap_at_tai_ns, self.reference_ts, self.generation)

    @classmethod
    def unpack(cls, data: bytes | memoryview) -> ClockMap:
        (valid, li, stratum, precision, poll_min, root_delay, root_disp, refid, host_anchor, served_anchor, rate,
         tai_utc, leap_delta, leap_at, ref_ts, generation) = struct.unpack_from(FORMAT, data)
        return cls(bool(valid), li, stratum, precision, root_delay, root_disp, refid, host_anchor, served_anchor,
                   rate, tai_utc, leap_delta, leap_at, ref_ts, poll_min, generation)


def not_ready(host_ns: int, tai_utc_s: int = 37) -> ClockMap:
    """Before the appliance has published anything: the host clock, advertised as unsynchronized."""
    return ClockMap(False, 3, 16, -20, 0, 0xFFFFFFFF, b"INIT", host_ns, host_ns + tai_utc_s * NS_PER_S, 0.0,
                    tai_utc_s)
