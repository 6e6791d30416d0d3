"""From the appliance's read model to the ClockMap the NTP workers serve: one function, pure.

The reference ID names the constellations the clock was locked to (RFC 5905 §7.3: a stratum-1 server's refid is an
ASCII code of its reference: "GPS", "GAL", "BDS", "GLO", or "GNSS" for several); it is kept through holdover, which
is still within spec, and becomes "INIT" while the clock has never been synchronized.
"""

from __future__ import annotations

from appliance.events import Constellation
from appliance.outputs.ntp.clockmap import ClockMap
from appliance.outputs.ntp.packet import refid
from appliance.status import TimeStatus
from appliance.timebase import NS_PER_S, ns_to_ntp_short, posix_ns_to_ntp64

PRECISION_KERNEL_SW = -20  # software kernel timestamps: about a microsecond
REFIDS = {Constellation.GPS: "GPS", Constellation.GALILEO: "GAL", Constellation.BEIDOU: "BDS",
          Constellation.GLONASS: "GLO", Constellation.QZSS: "QZSS", Constellation.NAVIC: "IRNS"}


def refid_for(status: TimeStatus) -> str:
    used = {s.constellation for s in status.satellites if s.used and s.constellation in REFIDS}
    if not used:
        return "GNSS"
    return REFIDS[next(iter(used))] if len(used) == 1 else "GNSS"


def clock_map(status: TimeStatus, host_ns: int, served_now_tai_ns: int, rate_ppb: float, last_refid: str,
              generation: int) -> ClockMap:
    """The map anchored at ``host_ns``, where the served clock reads ``served_now_tai_ns`` and runs ``rate_ppb``
    fast against the host clock."""
    clock = status.clock
    adv = clock.advertised
    synchronized = adv is not None and adv.ntp_stratum == 1
    pending = status.leap.pending_change_s
    leap_at = status.leap.pending_at_tai_ns or 0 if pending else 0
    reference = clock.holdover_since_ns if clock.holdover_since_ns else served_now_tai_ns // NS_PER_S * NS_PER_S
    reference_posix = reference - status.leap.tai_utc_s * NS_PER_S
    bound = clock.error_bound_ns
    return ClockMap(
        valid=True,
        leap_indicator=adv.ntp_leap_indicator if adv else 3,
        stratum=adv.ntp_stratum if adv else 16,
        precision=PRECISION_KERNEL_SW,
        root_delay=0,
        root_dispersion=ns_to_ntp_short(adv.ntp_root_dispersion_ns if adv else 16 * NS_PER_S),
        reference_id=refid(last_refid if synchronized else "INIT"),
        host_anchor_ns=host_ns,
        served_anchor_tai_ns=served_now_tai_ns,
        rate_ppb=float(rate_ppb),
        tai_utc_s=status.leap.tai_utc_s,
        leap_delta_s=pending,
        leap_at_tai_ns=leap_at,
        reference_ts=posix_ns_to_ntp64(reference_posix) if synchronized or bound is not None else 0,
        generation=generation,
    )
