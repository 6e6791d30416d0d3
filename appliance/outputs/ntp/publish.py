"""From the appliance's read model to the ClockMap the NTP workers serve: one function, pure.

The reference ID names the constellations the clock was locked to (RFC 5905 §7.3: a stratum-1 server's refid is an
ASCII code of its reference: "GPS", "GAL", "BDS", "GLO", or "GNSS" for several); it is kept through holdover, which
is still within spec, and becomes "INIT" while the clock has never been synchronized.
"""

from __future__ import annotations

from appliance.events import Constellation
from appliance.protocol.clockmap import ClockMap
from appliance.protocol.ntp.packet import refid
from appliance.status import TimeStatus
from appliance.timebase import ns_to_ntp_short, posix_ns_to_ntp64
from appliance.units import NS_PER_S

PRECISION_KERNEL_SW = -20  # software kernel timestamps: about a microsecond
REFIDS = {Constellation.GPS: "GPS", Constellation.GALILEO: "GAL", Constellation.BEIDOU: "BDS",
          Constellation.GLONASS: "GLO", Constellation.QZSS: "QZSS", Constellation.NAVIC: "IRNS"}


# RFC 5905 §7.3 reference IDs of the references that are not GNSS (an NTP upstream's is its address).
KIND_REFIDS = {"ptp": "PTP", "irig": "IRIG", "pps": "PPS"}


def refid_for(status: TimeStatus, ntp_peer: str = "") -> str:
    """The reference ID of what drives the clock: the constellations, "PTP", "IRIG", "PPS", or for NTP upstream the
    system peer's IPv4 address as dotted quad (``reference_id_bytes`` packs it)."""
    active = status.references.active
    kind = next((r.kind for r in status.references.rows if r.name == active), "gnss")
    if kind == "ntp":
        return ntp_peer.rpartition(":")[0] if ntp_peer.count(":") == 1 else ntp_peer or "NTP"
    if kind in KIND_REFIDS:
        return KIND_REFIDS[kind]
    used = {s.constellation for s in status.satellites if s.used and s.constellation in REFIDS}
    if not used:
        return "GNSS"
    return REFIDS[next(iter(used))] if len(used) == 1 else "GNSS"


def reference_id_bytes(text: str) -> bytes:
    """A refid as the wire carries it: an IPv4 address as its four octets (a stratum 2+ server's upstream), else
    ASCII; an IPv6 upstream as the first four octets of its address's MD5 (RFC 5905 §7.3)."""
    import hashlib
    import ipaddress

    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return refid(text)
    if address.version == 4:
        return address.packed
    return hashlib.md5(address.packed, usedforsecurity=False).digest()[:4]


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
        reference_id=reference_id_bytes(last_refid if synchronized else "INIT"),
        host_anchor_ns=host_ns,
        served_anchor_tai_ns=served_now_tai_ns,
        rate_ppb=float(rate_ppb),
        tai_utc_s=status.leap.tai_utc_s,
        leap_delta_s=pending,
        leap_at_tai_ns=leap_at,
        reference_ts=posix_ns_to_ntp64(reference_posix) if synchronized or bound is not None else 0,
        generation=generation,
    )
