"""The MIB view: every object instance the agent serves, in OID order, built from the MIB's table and a status.

Pure core.  ``build(table, status, ...)`` walks the objects the MIB declares (``mibgen.load_table``), asks
``values`` for each one's value, encodes it by the MIB's syntax (enumeration labels to numbers, TruthValue, UTF-8
text up to its size, DateAndTime in UTC, integers clamped to their range) and adds the SNMPv2-MIB system group
(RFC 3418) and the NTPv4-MIB (RFC 5907) entity information and status scalars, and the standard counters the agent
keeps (SNMPv2-MIB snmp group, SNMP-MPD-MIB snmpMPDStats, SNMP-USER-BASED-SM-MIB usmStats).  GET is a lookup,
GETNEXT a bisection.  Values are (pysnmp type name, Python value) pairs; the agent makes pysnmp objects of them.
``agent_items`` are the objects whose values the agent itself counts: it lays them over a view between rebuilds
(``MibView.replaced``), so a manager reads those counters as they are now.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from appliance.leap import UtcTime
from appliance.snmp.values import AGENT_SCALARS, SCALARS, Snap, Stamp, tables

OID = tuple[int, ...]
Value = tuple[str, Any]
SYSTEM = (1, 3, 6, 1, 2, 1, 1)  # SNMPv2-MIB system group (RFC 3418)
NTPV4 = (1, 3, 6, 1, 2, 1, 197, 1)  # NTPv4-MIB ntpSnmpMIBObjects (RFC 5907): ntpEntInfo .1, ntpEntStatus .2
NTP_UNIX_OFFSET_S = 2_208_988_800
# The standard counters the agent keeps (appliance/snmp/agent.py STANDARD_COUNTERS), by name: Counter32 scalars.
STANDARD_COUNTERS: dict[str, OID] = {
    # SNMPv2-MIB snmp group (RFC 3418)
    "snmpInPkts": (1, 3, 6, 1, 2, 1, 11, 1), "snmpInBadVersions": (1, 3, 6, 1, 2, 1, 11, 3),
    "snmpInBadCommunityNames": (1, 3, 6, 1, 2, 1, 11, 4), "snmpInBadCommunityUses": (1, 3, 6, 1, 2, 1, 11, 5),
    "snmpInASNParseErrs": (1, 3, 6, 1, 2, 1, 11, 6), "snmpSilentDrops": (1, 3, 6, 1, 2, 1, 11, 31),
    "snmpProxyDrops": (1, 3, 6, 1, 2, 1, 11, 32),
    # SNMP-MPD-MIB snmpMPDStats (RFC 3412)
    "snmpUnknownSecurityModels": (1, 3, 6, 1, 6, 3, 11, 2, 1, 1), "snmpInvalidMsgs": (1, 3, 6, 1, 6, 3, 11, 2, 1, 2),
    "snmpUnknownPDUHandlers": (1, 3, 6, 1, 6, 3, 11, 2, 1, 3),
    # SNMP-USER-BASED-SM-MIB usmStats (RFC 3414)
    "usmStatsUnsupportedSecLevels": (1, 3, 6, 1, 6, 3, 15, 1, 1, 1),
    "usmStatsNotInTimeWindows": (1, 3, 6, 1, 6, 3, 15, 1, 1, 2),
    "usmStatsUnknownUserNames": (1, 3, 6, 1, 6, 3, 15, 1, 1, 3),
    "usmStatsUnknownEngineIDs": (1, 3, 6, 1, 6, 3, 15, 1, 1, 4),
    "usmStatsWrongDigests": (1, 3, 6, 1, 6, 3, 15, 1, 1, 5),
    "usmStatsDecryptionErrors": (1, 3, 6, 1, 6, 3, 15, 1, 1, 6),
}
_BASE_KIND = {"Integer32": "Integer32", "INTEGER": "Integer32", "Unsigned32": "Unsigned32", "Gauge32": "Gauge32",
              "Counter32": "Counter32", "Counter64": "Counter64", "TimeTicks": "TimeTicks",
              "OCTET STRING": "OctetString", "OBJECT IDENTIFIER": "ObjectIdentifier", "IpAddress": "IpAddress"}
_LIMITS = {"Integer32": (-2**31, 2**31 - 1), "Unsigned32": (0, 2**32 - 1), "Gauge32": (0, 2**32 - 1),
           "Counter32": (0, 2**32 - 1), "Counter64": (0, 2**64 - 1), "TimeTicks": (0, 2**32 - 1)}


@dataclass(frozen=True)
class System:
    descr: str
    object_id: OID
    uptime_ticks: int  # hundredths of a second since the agent started
    contact: str
    name: str
    location: str


class MibView:
    def __init__(self, items: list[tuple[OID, Value]], declared: Sequence[OID], writable: Sequence[OID]):
        items.sort(key=lambda item: item[0])
        self._oids = [oid for oid, _ in items]
        self._values = [value for _, value in items]
        self._declared = sorted(declared)
        self._writable = set(writable)

    def __len__(self) -> int:
        return len(self._oids)

    def items(self) -> list[tuple[OID, Value]]:
        return list(zip(self._oids, self._values))

    def get(self, oid: OID) -> Value | None:
        i = bisect.bisect_left(self._oids, oid)
        return self._values[i] if i < len(self._oids) and self._oids[i] == oid else None

    def next(self, oid: OID) -> tuple[OID, Value] | None:
        i = bisect.bisect_right(self._oids, oid)
        return (self._oids[i], self._values[i]) if i < len(self._oids) else None

    def declares(self, oid: OID) -> bool:
        """Whether ``oid`` names an instance of an object the view knows (so a missing one is noSuchInstance)."""
        i = bisect.bisect_right(self._declared, oid)
        return i > 0 and oid[:len(self._declared[i - 1])] == self._declared[i - 1]

    def writable(self, oid: OID) -> bool:
        return oid in self._writable

    def replaced(self, items: Sequence[tuple[OID, Value]]) -> MibView:
        """This view with the values of ``items`` put in where their OIDs already are (others are left out)."""
        values = list(self._values)
        for oid, value in items:
            i = bisect.bisect_left(self._oids, oid)
            if i < len(self._oids) and self._oids[i] == oid:
                values[i] = value
        return MibView(list(zip(self._oids, values)), self._declared, self._writable)  # sorted already: O(n)


def date_and_time(utc: UtcTime) -> bytes:
    """SNMPv2-TC DateAndTime, 11 octets, in UTC (second 60 is allowed)."""
    return bytes([utc.year >> 8, utc.year & 0xFF, utc.month, utc.day, utc.hour, utc.minute, utc.second,
                  utc.nanosecond // 100_000_000, ord("+"), 0, 0])


def encode(obj: Any, value: Any, utc_of: Callable[[int], UtcTime]) -> Value:
    """A Python value as the object's syntax asks (see the module docstring)."""
    syntax = obj.syntax
    kind = _BASE_KIND.get(syntax.base, "OctetString")
    if isinstance(value, Stamp):
        return "OctetString", date_and_time(utc_of(value.tai_ns))
    if syntax.tc == "TruthValue" or isinstance(value, bool):
        return "Integer32", 1 if value else 2
    if isinstance(value, str) and kind == "Integer32":
        return "Integer32", syntax.value_of(value)
    if kind == "OctetString":
        data = value if isinstance(value, bytes) else str(value).encode("utf-8", "replace")
        limit = max((hi for _, hi in syntax.sizes), default=255 if syntax.tc == "DisplayString" else 65535)
        return kind, data[:limit]
    lo, hi = _LIMITS.get(kind, (-2**63, 2**64))
    for rlo, rhi in syntax.ranges:
        lo, hi = max(lo, rlo), min(hi, rhi)
    return kind, int(max(lo, min(hi, int(value))))


def ntp_date(posix_ns: int) -> bytes:
    """RFC 5905 NTP date format (128 bits: era, era offset, 64-bit fraction): RFC 5907's NtpDateTime."""
    seconds, ns = divmod(posix_ns + NTP_UNIX_OFFSET_S * 1_000_000_000, 1_000_000_000)
    era, offset = divmod(seconds, 2**32)
    return era.to_bytes(4, "big", signed=True) + offset.to_bytes(4, "big") + ((ns << 64) // 1_000_000_000).to_bytes(
        8, "big")


def ntpv4(status: dict[str, Any], uptime_ticks: int, posix_ns: Callable[[int], int]) -> list[tuple[OID, Value]]:
    """The NTPv4-MIB (RFC 5907) entity information and status scalars, for the appliance as an NTP server."""
    adv = status["clock"].get("advertised") or {}
    ntp = status["outputs"].get("ntp") or {}
    totals = ntp.get("totals") or {}
    stratum = int(adv.get("ntp_stratum", 16))
    dispersion = f"{adv.get('ntp_root_dispersion_ns', 0) / 1e6:.6f} ms"
    phase = status["clock"].get("phase_offset_ns")
    leap_at = status["leap"].get("pending_at_tai_ns")
    usable = status["receiver"]["state"] in ("2d-fix", "3d-fix", "time-only")

    def text(value: str) -> Value:
        return "OctetString", value.encode()[:255]
    return [
        (NTPV4 + (1, 1, 0), text("appliance")),  # ntpEntSoftwareName
        (NTPV4 + (1, 2, 0), text(status["version"])),  # ntpEntSoftwareVersion
        (NTPV4 + (1, 3, 0), text("gm-appliance project")),  # ntpEntSoftwareVendor
        (NTPV4 + (1, 4, 0), text(f"GNSS grandmaster time server ({status['mode']})")),  # ntpEntSystemType
        (NTPV4 + (1, 5, 0), ("Unsigned32", 1_000_000_000)),  # ntpEntTimeResolution: divisions of a second (ns)
        (NTPV4 + (1, 6, 0), ("Integer32", -20)),  # ntpEntTimePrecision, log2 s, as the server advertises
        (NTPV4 + (1, 7, 0), text(dispersion)),  # ntpEntTimeDistance: root distance (root delay is 0)
        (NTPV4 + (2, 1, 0), ("Integer32", 1 if not ntp.get("enabled") else 5 if stratum == 1 else 2)),  # CurrentMode
        (NTPV4 + (2, 2, 0), ("Unsigned32", max(1, min(16, stratum)))),  # ntpEntStatusStratum
        (NTPV4 + (2, 3, 0), ("Unsigned32", 0)),  # ntpEntStatusActiveRefSourceId: 0, a reference clock
        (NTPV4 + (2, 4, 0), text(status["receiver"]["name"] if usable else "")),  # ActiveRefSourceName
        (NTPV4 + (2, 5, 0), text("" if phase is None else f"{phase / 1e9:.9f} s")),  # ntpEntStatusActiveOffset
        (NTPV4 + (2, 6, 0), ("Unsigned32", 1 if usable else 0)),  # ntpEntStatusNumberOfRefSources
        (NTPV4 + (2, 7, 0), text(dispersion)),  # ntpEntStatusDispersion
        (NTPV4 + (2, 8, 0), ("TimeTicks", uptime_ticks % 2**32)),  # ntpEntStatusEntityUptime
        (NTPV4 + (2, 9, 0), ("OctetString", ntp_date(posix_ns(status["at_tai_ns"])))),  # ntpEntStatusDateTime
        (NTPV4 + (2, 10, 0), ("OctetString", b"" if leap_at is None else ntp_date(posix_ns(leap_at)))),  # LeapSecond
        (NTPV4 + (2, 11, 0), ("Integer32", int(status["leap"]["pending_change_s"]))),  # LeapSecDirection
        (NTPV4 + (2, 12, 0), ("Counter32", int(totals.get("requests", 0)) % 2**32)),  # ntpEntStatusInPkts
        (NTPV4 + (2, 13, 0), ("Counter32", int(totals.get("replies", 0)) % 2**32)),  # ntpEntStatusOutPkts
        (NTPV4 + (2, 14, 0), ("Counter32", int(totals.get("drop_bad_version", 0)) % 2**32)),  # BadVersion
        (NTPV4 + (2, 15, 0), ("Counter32", (int(totals.get("drop_malformed", 0)) + int(totals.get("drop_short", 0))
                                           + int(totals.get("drop_mode", 0))) % 2**32)),  # ProtocolError
    ]


def standard_counters(snmp: dict[str, Any]) -> list[tuple[OID, Value]]:
    """The standard counters in the SNMP agent's status (``outputs.snmp.standard``), as Counter32 instances."""
    counts = snmp.get("standard") or {}
    return [(oid + (0,), ("Counter32", int(counts[name]) % 2**32)) for name, oid in STANDARD_COUNTERS.items()
            if name in counts]


def agent_items(table: Sequence[Any], status: dict[str, Any]) -> list[tuple[OID, Value]]:
    """The instances whose values the agent counts itself: the standard counters and the appliance MIB's
    ``AGENT_SCALARS``, from ``status`` (whose ``outputs.snmp`` carries the agent's counters)."""
    snap = Snap(status)
    items = standard_counters(status["outputs"].get("snmp") or {})
    for obj in table:
        if obj.name in AGENT_SCALARS:
            items.append((obj.oid + (0,), encode(obj, SCALARS[obj.name](snap), _no_utc)))
    return items


def _no_utc(tai_ns: int) -> UtcTime:
    raise ValueError("the agent's own counters carry no DateAndTime")


def _index_suffix(index: tuple[Any, ...], columns: dict[str, Any]) -> OID:
    out: list[int] = []
    for value, name in index:
        syntax = columns[name].syntax
        out.append(syntax.value_of(value) if isinstance(value, str) else int(value))
    return tuple(out)


def build(table: Sequence[Any], status: dict[str, Any], system: System, utc_of: Callable[[int], UtcTime],
          alarm_index: Callable[[str], int], posix_ns: Callable[[int], int] | None = None) -> MibView:
    """The view of ``status`` through the MIB objects of ``table`` (mibgen.MibObject), with the SNMPv2-MIB system
    group and, given ``posix_ns`` (TAI ns -> POSIX ns), the NTPv4-MIB entity objects."""
    snap = Snap(status)
    items: list[tuple[OID, Value]] = [
        (SYSTEM + (1, 0), ("OctetString", system.descr.encode()[:255])),
        (SYSTEM + (2, 0), ("ObjectIdentifier", system.object_id)),
        (SYSTEM + (3, 0), ("TimeTicks", system.uptime_ticks % 2**32)),
        (SYSTEM + (4, 0), ("OctetString", system.contact.encode()[:255])),
        (SYSTEM + (5, 0), ("OctetString", system.name.encode()[:255])),
        (SYSTEM + (6, 0), ("OctetString", system.location.encode()[:255])),
        (SYSTEM + (7, 0), ("Integer32", 72)),  # applications + end-to-end (RFC 3418 sysServices)
    ]
    declared: list[OID] = [SYSTEM + (i,) for i in range(1, 8)]
    if posix_ns is not None:
        standard = ntpv4(status, system.uptime_ticks, posix_ns)
        items += standard
        declared += [oid[:-1] for oid, _ in standard]
    counters = standard_counters(status["outputs"].get("snmp") or {})
    items += counters
    declared += [oid[:-1] for oid, _ in counters]
    writable: list[OID] = []
    by_name = {o.name: o for o in table}
    row_sources = tables(alarm_index)
    for obj in table:
        if obj.kind != "scalar" or obj.access in ("not-accessible", "accessible-for-notify"):
            continue
        declared.append(obj.oid)
        if obj.writable:
            writable.append(obj.oid + (0,))
        value = SCALARS[obj.name](snap)
        if value is not None:
            items.append((obj.oid + (0,), encode(obj, value, utc_of)))
    tables_seen: dict[str, list[Any]] = {}
    for obj in table:
        if obj.kind == "column":
            tables_seen.setdefault(obj.table, []).append(obj)
    for table_name, columns in tables_seen.items():
        rows = row_sources[table_name](snap)
        readable = [c for c in columns if c.access not in ("not-accessible", "accessible-for-notify")]
        index_names = columns[0].indices
        for column in readable:
            declared.append(column.oid)
        for index, values in rows:
            suffix = _index_suffix(tuple(zip(index, index_names)), by_name)
            for column in readable:
                value = values.get(column.name)
                if value is not None:
                    items.append((column.oid + suffix, encode(column, value, utc_of)))
    return MibView(items, declared, writable)
