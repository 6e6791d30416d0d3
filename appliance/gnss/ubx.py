"""u-blox UBX payloads -> typed receiver records (timing receivers' binary messages).

Pure core.  Field layouts follow the u-blox M8/F9 interface descriptions (UBX-13003221, UBX-18010854): NAV-PVT,
NAV-STATUS, NAV-POSLLH, NAV-DOP, NAV-TIMEUTC, NAV-TIMEGPS, NAV-TIMEGAL, NAV-TIMEBDS, NAV-TIMELS, NAV-SAT, NAV-SIG,
NAV-EOE, MON-HW, MON-RF, TIM-TP and TIM-SVIN, and the older NAV-SOL and NAV-SVINFO that u-blox 5 to 8 receivers send
where later ones send NAV-PVT and NAV-SAT.  Each layout is a ``struct`` format, so a short payload is a clear rejection
rather than an index error.  Each system's time of week converts to TAI here, where its week numbering is known.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from appliance.events import Constellation, FixMode, Position, Rejected, SatInfo
from appliance.gnss.survey import ecef_to_geodetic
from appliance.units import NS_PER_MS, NS_PER_S

C = Constellation
WEEK_S = 7 * 86_400
GPS_EPOCH_TAI_S = 315_964_819  # 1980-01-06T00:00:00 UTC = 1980-01-06T00:00:19 TAI; GPS time = TAI - 19 s
# Where each system's week 0 starts, in GPS weeks, and how far its time runs behind GPS time (s).  Galileo System
# Time counts like GPS time from GPS week 1024 (1999-08-22); BeiDou Time is GPS time - 14 s, its week 0 starting
# 2006-01-01T00:00:00 UTC (BDS-SIS-ICD 5.1.2, Galileo OS-SIS-ICD 5.1.2).
SYSTEM_TIMES = {C.GPS: (0, 0), C.GALILEO: (1024, 0), C.BEIDOU: (1356, 14)}
# NAV-SAT / NAV-SIG gnssId.
GNSS_IDS = {0: C.GPS, 1: C.SBAS, 2: C.GALILEO, 3: C.BEIDOU, 5: C.QZSS, 6: C.GLONASS, 7: C.NAVIC}
# NAV-STATUS / NAV-PVT gpsFix: 0 none, 1 dead reckoning only, 2 2D, 3 3D, 4 GNSS+DR, 5 time only.
_FIX = {0: FixMode.NO_FIX, 1: FixMode.NO_FIX, 2: FixMode.FIX_2D, 3: FixMode.FIX_3D, 4: FixMode.FIX_3D,
        5: FixMode.FIX_3D}
# NAV-SVINFO's one-byte svid (u-blox 8 / M8 receiver description, appendix "Satellite Numbering"): first svid, last
# svid, system, and that system's number of the first.  Not the NMEA numbering (where 33-64 are SBAS): in UBX, 33-64
# are BeiDou B6-B37.  IMES (173-182) and a GLONASS satellite whose slot is not yet known (255) have no number here.
SVIDS = ((1, 32, C.GPS, 1), (33, 64, C.BEIDOU, 6), (65, 96, C.GLONASS, 1), (120, 158, C.SBAS, 120),
         (159, 163, C.BEIDOU, 1), (193, 202, C.QZSS, 1), (211, 246, C.GALILEO, 1))
# MON-HW aStatus and MON-RF antStatus: 0 init, 1 don't know, 2 ok, 3 short, 4 open; aPower/antPower: 0 off, 1 on,
# 2 don't know.
ANTENNA_STATUS = {2: "ok", 3: "short", 4: "open"}
ANTENNA_POWER = {0: "off", 1: "on"}
# Which of several RF blocks' antenna reports speaks (MON-RF): a fault in any block, then one that knows.
_STATUS_RANK = {"short": 3, "open": 2, "ok": 1, "unknown": 0}
_POWER_RANK = {"off": 2, "on": 1, "unknown": 0}
# Where an ECEF position can be for a fixed timing antenna: the Earth's surface, give or take a few tens of km
# (the polar radius is 6,356.8 km, the equatorial 6,378.1 km).
EARTH_RADIUS_RANGE_M = (6_300_000.0, 6_450_000.0)
DOP_NONE = 9999  # NAV-SOL / NAV-DOP 99.99: no DOP (a timing receiver on a fixed position solves for time alone)


@dataclass(frozen=True, slots=True)
class UbxUtc:
    """NAV-TIMEUTC or NAV-PVT: the UTC time of the epoch at ``itow_ms``."""

    kind: str
    itow_ms: int
    date: tuple[int, int, int]
    tod_ms: int
    nano_ns: int  # signed correction to the whole second given by the date and time fields
    valid: bool
    tacc_ns: int


@dataclass(frozen=True, slots=True)
class UbxFix:
    """NAV-STATUS or NAV-PVT: the fix type and whether the receiver trusts it."""

    kind: str
    itow_ms: int
    mode: FixMode
    fix_ok: bool
    time_only: bool
    num_sv: int | None = None
    position: Position | None = None
    spoofing_state: int | None = None  # NAV-STATUS flags2 spoofDetState (0 unknown, 1 none, 2 indicated, 3 multiple)


@dataclass(frozen=True, slots=True)
class UbxPosition:
    itow_ms: int
    position: Position
    hacc_mm: int


@dataclass(frozen=True, slots=True)
class UbxDop:
    itow_ms: int
    hdop: float | None  # None for 99.99: no DOP (a timing receiver on a fixed position solves for time alone)


@dataclass(frozen=True, slots=True)
class UbxGpsTime:
    """NAV-TIMEGPS: GPS week and time of week, and the receiver's GPS-UTC leap seconds."""

    itow_ms: int
    ftow_ns: int
    week: int
    leap_s: int
    tow_valid: bool
    week_valid: bool
    leap_valid: bool


@dataclass(frozen=True, slots=True)
class UbxSystemTime:
    """NAV-TIMEGAL or NAV-TIMEBDS: where that system's own solution puts the navigation epoch at ``itow_ms``."""

    kind: str
    itow_ms: int
    constellation: Constellation
    tow_s: int
    ftow_ns: int  # signed: the epoch is at tow_s + ftow_ns of that system's week
    week: int
    leap_s: int  # that system's time minus UTC
    tow_valid: bool
    week_valid: bool
    leap_valid: bool
    tacc_ns: int


@dataclass(frozen=True, slots=True)
class UbxHardware:
    """MON-HW or MON-RF: the receiver's own interference and antenna supervisor.  No iTOW: it belongs to the epoch
    being assembled."""

    jam_indicator: int  # jamInd: 0 no CW jamming .. 255 strong
    jamming_state: int  # 0 unknown or disabled, 1 ok, 2 warning, 3 critical
    antenna_status: str | None = None  # "ok", "short", "open" or "unknown" (initialising, or no supervisor)
    antenna_power: str | None = None  # "on", "off" or "unknown"


@dataclass(frozen=True, slots=True)
class UbxLeap:
    """NAV-TIMELS: current GPS-UTC leap seconds and an announced change."""

    itow_ms: int
    current_ls: int
    current_valid: bool
    change_s: int  # +1, -1 or 0
    time_to_event_s: int | None  # seconds from this epoch to the change, None when not valid


@dataclass(frozen=True, slots=True)
class UbxSats:
    itow_ms: int
    sats: tuple[SatInfo, ...]


@dataclass(frozen=True, slots=True)
class UbxSvInfo:
    """NAV-SVINFO (u-blox 5 to 8; NAV-SAT replaces it): the satellites of every channel, in the one-byte svid
    numbering.  ``chip_gen`` is globalFlags' chip generation (0 Antaris, 1 u-blox 5, 2 u-blox 6, 3 u-blox 7,
    4 u-blox 8 / M8)."""

    itow_ms: int
    sats: tuple[SatInfo, ...]
    chip_gen: int


@dataclass(frozen=True, slots=True)
class UbxSolution:
    """NAV-SOL (u-blox 5 to 8; NAV-PVT replaces it): the navigation solution in ECEF, with its GPS week and time of
    week but no UTC.  ``fix`` is what it says as the fix records of later receivers say it; its position is
    geodetic on WGS-84 with the *ellipsoidal* height (NAV-SOL carries no geoid model, so no height above mean sea
    level)."""

    itow_ms: int
    ftow_ns: int  # signed: the solution is at itow_ms + ftow_ns of the GPS week
    week: int
    week_valid: bool  # WKNSET
    tow_valid: bool  # TOWSET
    diff_soln: bool  # DiffSoln: differential corrections applied
    ecef_cm: tuple[int, int, int]
    pacc_cm: int
    velocity_cm_s: tuple[int, int, int]
    pdop: float | None  # None where the receiver has none (99.99, e.g. in fixed-position timing mode)
    fix: UbxFix


@dataclass(frozen=True, slots=True)
class UbxSignalsUsed:
    """NAV-SIG: satellites with at least one signal whose pseudorange the navigation solution used.

    NAV-SAT's svUsed covers only a satellite's primary signal, so a dual-frequency receiver navigating on, say,
    Galileo E5a alone says "not used" there; the receiver's own count (NAV-PVT numSV, NMEA GSA) includes it.
    """

    itow_ms: int
    used: frozenset[tuple[Constellation, int]]


@dataclass(frozen=True, slots=True)
class UbxTimePulse:
    """TIM-TP: the *next* time pulse's time of week and quantization error (ps)."""

    tow_ms: int
    tow_sub_ms_frac: int  # units of 2^-32 ms
    qerr_ps: int
    qerr_valid: bool
    week: int
    utc_base: bool


@dataclass(frozen=True, slots=True)
class UbxSurvey:
    """TIM-SVIN: survey-in progress and the mean antenna position so far (ECEF, cm)."""

    duration_s: int
    mean_ecef_cm: tuple[int, int, int]
    variance_mm2: int
    observations: int
    valid: bool
    active: bool


@dataclass(frozen=True, slots=True)
class UbxEndOfEpoch:
    itow_ms: int


@dataclass(frozen=True, slots=True)
class UbxIgnored:
    kind: str


UbxRecord = (UbxUtc | UbxFix | UbxPosition | UbxDop | UbxGpsTime | UbxSystemTime | UbxHardware | UbxLeap | UbxSats
             | UbxSvInfo | UbxSolution | UbxSignalsUsed | UbxTimePulse | UbxSurvey | UbxEndOfEpoch | UbxIgnored)

NAMES = {
    (0x01, 0x01): "NAV-POSECEF", (0x01, 0x02): "NAV-POSLLH", (0x01, 0x03): "NAV-STATUS", (0x01, 0x04): "NAV-DOP",
    (0x01, 0x06): "NAV-SOL", (0x01, 0x07): "NAV-PVT", (0x01, 0x30): "NAV-SVINFO", (0x01, 0x11): "NAV-VELECEF", (0x01, 0x20): "NAV-TIMEGPS", (0x01, 0x21): "NAV-TIMEUTC",
    (0x01, 0x22): "NAV-CLOCK", (0x01, 0x24): "NAV-TIMEBDS", (0x01, 0x25): "NAV-TIMEGAL", (0x01, 0x26): "NAV-TIMELS",
    (0x01, 0x35): "NAV-SAT", (0x01, 0x3B): "NAV-SVIN", (0x01, 0x43): "NAV-SIG", (0x01, 0x61): "NAV-EOE",
    (0x0A, 0x09): "MON-HW", (0x0A, 0x38): "MON-RF", (0x0D, 0x01): "TIM-TP", (0x0D, 0x04): "TIM-SVIN",
}


def name_of(msg_class: int, msg_id: int) -> str:
    return NAMES.get((msg_class, msg_id), f"UBX-{msg_class:02X}-{msg_id:02X}")


def system_time_tai_ns(system: Constellation, week: int, tow_ns: int) -> int:
    """TAI (ns since 1970 TAI) of ``tow_ns`` into ``week`` of a system's own time (GPS, Galileo or BeiDou)."""
    week0_gps, behind_s = SYSTEM_TIMES[system]
    return (GPS_EPOCH_TAI_S + (week0_gps + week) * WEEK_S + behind_s) * NS_PER_S + tow_ns


def tai_ns_to_system_time(system: Constellation, tai_ns: int) -> tuple[int, int, int]:
    """(week, whole seconds of week, ns from that second in -0.5 s..0.5 s): the inverse of system_time_tai_ns."""
    since_ns = tai_ns - system_time_tai_ns(system, 0, 0)
    second = (since_ns + NS_PER_S // 2) // NS_PER_S
    week, tow_s = divmod(second, WEEK_S)
    return week, tow_s, since_ns - second * NS_PER_S


def epoch_time_tai_ns(record: UbxGpsTime | UbxSystemTime) -> int | None:
    """Where a per-system time record puts its epoch on the TAI axis; None unless its time of week and week are
    valid."""
    if not (record.tow_valid and record.week_valid):
        return None
    if isinstance(record, UbxGpsTime):
        return system_time_tai_ns(C.GPS, record.week, record.itow_ms * NS_PER_MS + record.ftow_ns)
    return system_time_tai_ns(record.constellation, record.week, record.tow_s * NS_PER_S + record.ftow_ns)


def decode(msg_class: int, msg_id: int, payload: bytes) -> UbxRecord | Rejected:
    """One checksummed UBX frame -> a record, UbxIgnored, or Rejected("ubx", "bad-length")."""
    decoder = _DECODERS.get((msg_class, msg_id))
    if decoder is None:
        return UbxIgnored(name_of(msg_class, msg_id))
    minimum = _MIN_LEN[(msg_class, msg_id)]
    if len(payload) < minimum:
        return Rejected("ubx", "bad-length", f"{name_of(msg_class, msg_id)}: {len(payload)} < {minimum} bytes")
    try:
        return decoder(payload)
    except (ValueError, struct.error) as exc:
        return Rejected("ubx", "bad-field", f"{name_of(msg_class, msg_id)}: {exc}")


def _tod_ms(hour: int, minute: int, sec: int) -> int:
    # Second 60 exists only as UTC's inserted 23:59:60; elsewhere it would alias the next minute's first second.
    if hour > 23 or minute > 59 or sec > 60 or (sec == 60 and (hour, minute) != (23, 59)):
        raise ValueError(f"time out of range {hour}:{minute}:{sec}")
    return ((hour * 60 + minute) * 60 + sec) * 1000


def _nav_timeutc(p: bytes) -> UbxUtc:
    itow, tacc, nano, year, month, day, hour, minute, sec, valid = struct.unpack_from("<IIiHBBBBBB", p)
    # validUTC (bit 2) means the UTC fields, leap seconds included, are trustworthy.
    ok = bool(valid & 0x04) and bool(valid & 0x01) and 1 <= month <= 12 and 1 <= day <= 31
    return UbxUtc("NAV-TIMEUTC", itow, (year, month, day), _tod_ms(hour, minute, sec), nano, ok, tacc)


def _nav_pvt(p: bytes) -> UbxFix | tuple[UbxUtc, UbxFix]:
    (itow, year, month, day, hour, minute, sec, valid, tacc, nano, fix_type, flags, _flags2, num_sv,
     lon, lat, _height, hmsl) = struct.unpack_from("<IHBBBBBBIiBBBBiiii", p)
    fix_ok = bool(flags & 0x01)
    mode = _FIX.get(fix_type, FixMode.NO_FIX) if fix_ok else FixMode.NO_FIX
    pos = Position(lat * 1e-7, lon * 1e-7, hmsl / 1000.0) if fix_ok else None
    fix = UbxFix("NAV-PVT", itow, mode, fix_ok, fix_type == 5, num_sv, pos)
    # validDate, validTime and fullyResolved together mean the UTC label can be used.
    ok_time = (valid & 0x07) == 0x07 and 1 <= month <= 12 and 1 <= day <= 31
    utc = UbxUtc("NAV-PVT", itow, (year, month, day), _tod_ms(hour, minute, sec), nano, ok_time, tacc)
    return utc, fix


def _nav_status(p: bytes) -> UbxFix:
    itow, gps_fix, flags, _fix_stat, flags2 = struct.unpack_from("<IBBBB", p)
    fix_ok = bool(flags & 0x01)
    mode = _FIX.get(gps_fix, FixMode.NO_FIX) if fix_ok else FixMode.NO_FIX
    return UbxFix("NAV-STATUS", itow, mode, fix_ok, gps_fix == 5 and fix_ok, spoofing_state=(flags2 >> 3) & 0x03)


def _nav_posllh(p: bytes) -> UbxPosition:
    itow, lon, lat, _height, hmsl, hacc, _vacc = struct.unpack_from("<IiiiiII", p)
    if not (-900_000_000 <= lat <= 900_000_000 and -1_800_000_000 <= lon <= 1_800_000_000):
        raise ValueError("position out of range")
    return UbxPosition(itow, Position(lat * 1e-7, lon * 1e-7, hmsl / 1000.0), hacc)


def _nav_dop(p: bytes) -> UbxDop:
    itow, _g, _p, _t, _v, hdop = struct.unpack_from("<IHHHHH", p)
    return UbxDop(itow, hdop / 100.0 if hdop < DOP_NONE else None)


def _nav_timegps(p: bytes) -> UbxGpsTime:
    itow, ftow, week, leap_s, valid = struct.unpack_from("<IihbB", p)
    return UbxGpsTime(itow, ftow, week, leap_s, bool(valid & 1), bool(valid & 2), bool(valid & 4))


def _nav_system_time(kind: str, system: Constellation) -> Callable[[bytes], UbxSystemTime]:
    """NAV-TIMEGAL and NAV-TIMEBDS share a layout: iTOW, tow (s), fraction (ns), week, leapS, valid, tAcc."""
    def decode_time(p: bytes) -> UbxSystemTime:
        itow, tow, ftow, week, leap_s, valid, tacc = struct.unpack_from("<IIihbBI", p)
        if valid & 1 and tow >= WEEK_S:
            raise ValueError(f"time of week {tow} s")
        return UbxSystemTime(kind, itow, system, tow, ftow, week, leap_s, bool(valid & 1), bool(valid & 2),
                             bool(valid & 4), tacc)
    return decode_time


def antenna_status_name(code: int) -> str:
    """MON-HW aStatus / MON-RF antStatus -> "ok", "short", "open" or "unknown" (initialising or no supervisor)."""
    return ANTENNA_STATUS.get(code, "unknown")


def antenna_power_name(code: int) -> str:
    """MON-HW aPower / MON-RF antPower -> "on", "off" or "unknown"."""
    return ANTENNA_POWER.get(code, "unknown")


def _mon_hw(p: bytes) -> UbxHardware:
    a_status, a_power, flags = struct.unpack_from("<BBB", p, 20)
    jam_ind = p[45]
    return UbxHardware(jam_ind, (flags >> 2) & 0x03, antenna_status_name(a_status), antenna_power_name(a_power))


def _mon_rf(p: bytes) -> UbxHardware:
    """MON-RF (F9 generation, where MON-HW is deprecated): one block per RF band; the worst band speaks, for the
    antenna a fault in any band, then a band whose supervisor knows."""
    _version, blocks = struct.unpack_from("<BB", p)
    if len(p) < 4 + 24 * blocks or blocks == 0:
        raise ValueError(f"MON-RF announces {blocks} blocks in {len(p)} bytes")
    # blockId, flags (jammingState), antStatus, antPower, then jamInd at offset 16 of each 24-byte block.
    blocks_fields = [struct.unpack_from("<BBBB12xB", p, 4 + 24 * i) for i in range(blocks)]
    status = max((antenna_status_name(b[2]) for b in blocks_fields), key=_STATUS_RANK.__getitem__)
    power = max((antenna_power_name(b[3]) for b in blocks_fields), key=_POWER_RANK.__getitem__)
    return UbxHardware(max(b[4] for b in blocks_fields), max(b[1] & 0x03 for b in blocks_fields), status, power)


def _nav_sol(p: bytes) -> UbxSolution:
    (itow, ftow, week, gps_fix, flags, x, y, z, pacc, vx, vy, vz, _sacc, pdop,
     num_sv) = struct.unpack_from("<IihBBiiiIiiiIHxB4x", p)
    fix_ok = bool(flags & 0x01)  # GPSfixOK: the fix is within the DOP and accuracy masks
    mode = _FIX.get(gps_fix, FixMode.NO_FIX) if fix_ok else FixMode.NO_FIX
    position = _ecef_position(x, y, z) if fix_ok else None
    fix = UbxFix("NAV-SOL", itow, mode, fix_ok, gps_fix == 5 and fix_ok, num_sv, position)
    return UbxSolution(itow, ftow, week, bool(flags & 0x04), bool(flags & 0x08), bool(flags & 0x02), (x, y, z), pacc,
                       (vx, vy, vz), pdop / 100.0 if pdop < DOP_NONE else None, fix)


def _ecef_position(x_cm: int, y_cm: int, z_cm: int) -> Position | None:
    """ECEF (cm) -> latitude, longitude and ellipsoidal height; None where no antenna can be (a receiver that
    zeroes its solution, say)."""
    x_m, y_m, z_m = x_cm / 100.0, y_cm / 100.0, z_cm / 100.0
    low_m, high_m = EARTH_RADIUS_RANGE_M
    if not low_m <= math.sqrt(x_m * x_m + y_m * y_m + z_m * z_m) <= high_m:
        return None
    lat_deg, lon_deg, height_m = ecef_to_geodetic(x_m, y_m, z_m)
    return Position(lat_deg, lon_deg, height_m)


def svid_to_sat(svid: int) -> tuple[Constellation, int] | None:
    """NAV-SVINFO's one-byte svid -> (system, that system's own number), None for a number the table leaves out."""
    for first, last, system, number in SVIDS:
        if first <= svid <= last:
            return system, number + svid - first
    return None


def sat_to_svid(system: Constellation, prn: int) -> int | None:
    """The inverse of ``svid_to_sat``; None for a satellite the one-byte numbering cannot name (BeiDou above B37)."""
    for first, last, sv_system, number in SVIDS:
        if sv_system is system and number <= prn <= number + last - first:
            return first + prn - number
    return None


def _nav_svinfo(p: bytes) -> UbxSvInfo:
    itow, num_ch, global_flags = struct.unpack_from("<IBB", p)
    if len(p) < 8 + 12 * num_ch:
        raise ValueError(f"NAV-SVINFO announces {num_ch} channels in {len(p)} bytes")
    sats = []
    for i in range(num_ch):
        _chn, svid, flags, _quality, cno, elev, azim, _pr_res = struct.unpack_from("<BBBBBbhi", p, 8 + 12 * i)
        sat = svid_to_sat(svid)
        if sat is None:
            continue
        el = elev if -90 <= elev <= 90 else None
        az = azim if 0 <= azim <= 360 and el is not None else None
        sats.append(SatInfo(sat[0], sat[1], el, az, cno or None, bool(flags & 0x01)))  # svUsed
    return UbxSvInfo(itow, tuple(sats), global_flags & 0x07)


def _nav_timels(p: bytes) -> UbxLeap:
    itow, _version, _src_curr, curr_ls, _src_change, ls_change, time_to_event = struct.unpack_from(
        "<IB3xBbBbi", p)
    valid = p[23]
    if ls_change not in (-1, 0, 1):
        raise ValueError(f"lsChange {ls_change}")
    return UbxLeap(itow, curr_ls, bool(valid & 1), ls_change, time_to_event if valid & 2 else None)


def _nav_sat(p: bytes) -> UbxSats:
    itow, _version, num_svs = struct.unpack_from("<IBB", p)
    if len(p) < 8 + 12 * num_svs:
        raise ValueError(f"NAV-SAT announces {num_svs} satellites in {len(p)} bytes")
    sats = []
    for i in range(num_svs):
        gnss_id, sv_id, cno, elev, azim, _pr_res, flags = struct.unpack_from("<BBBbhhI", p, 8 + 12 * i)
        const = GNSS_IDS.get(gnss_id, C.UNKNOWN)
        # elev -91 / azim outside 0..360 mean "unknown" in u-blox firmware.
        el = elev if -90 <= elev <= 90 else None
        az = azim if 0 <= azim <= 360 and el is not None else None
        sats.append(SatInfo(const, sv_id, el, az, cno or None, bool(flags & 0x08)))
    return UbxSats(itow, tuple(sats))


def _nav_sig(p: bytes) -> UbxSignalsUsed:
    itow, _version, num_sigs = struct.unpack_from("<IBB", p)
    if len(p) < 8 + 16 * num_sigs:
        raise ValueError(f"NAV-SIG announces {num_sigs} signals in {len(p)} bytes")
    used = set()
    for i in range(num_sigs):
        gnss_id, sv_id = struct.unpack_from("<BB", p, 8 + 16 * i)
        sig_flags = struct.unpack_from("<H", p, 8 + 16 * i + 10)[0]
        if sig_flags & 0x08:  # prUsed
            used.add((GNSS_IDS.get(gnss_id, C.UNKNOWN), sv_id))
    return UbxSignalsUsed(itow, frozenset(used))


def _nav_eoe(p: bytes) -> UbxEndOfEpoch:
    return UbxEndOfEpoch(struct.unpack_from("<I", p)[0])


def _tim_tp(p: bytes) -> UbxTimePulse:
    tow_ms, tow_sub, qerr, week, flags, _ref = struct.unpack_from("<IIiHBB", p)
    return UbxTimePulse(tow_ms, tow_sub, qerr, not flags & 0x10, week, bool(flags & 0x01))


def _tim_svin(p: bytes) -> UbxSurvey:
    dur, x, y, z, var, obs, valid, active = struct.unpack_from("<IiiiIIBB", p)
    return UbxSurvey(dur, (x, y, z), var, obs, bool(valid), bool(active))


_DECODERS = {
    (0x01, 0x02): _nav_posllh, (0x01, 0x03): _nav_status, (0x01, 0x04): _nav_dop, (0x01, 0x07): _nav_pvt,
    (0x01, 0x20): _nav_timegps, (0x01, 0x21): _nav_timeutc, (0x01, 0x26): _nav_timels, (0x01, 0x35): _nav_sat,
    (0x01, 0x43): _nav_sig, (0x01, 0x61): _nav_eoe, (0x0D, 0x01): _tim_tp, (0x0D, 0x04): _tim_svin,
    (0x01, 0x24): _nav_system_time("NAV-TIMEBDS", C.BEIDOU), (0x01, 0x25): _nav_system_time("NAV-TIMEGAL", C.GALILEO),
    (0x0A, 0x09): _mon_hw, (0x0A, 0x38): _mon_rf, (0x01, 0x06): _nav_sol, (0x01, 0x30): _nav_svinfo,
}
_MIN_LEN = {
    (0x01, 0x02): 28, (0x01, 0x03): 16, (0x01, 0x04): 18, (0x01, 0x07): 92, (0x01, 0x20): 16, (0x01, 0x21): 20,
    (0x01, 0x26): 24, (0x01, 0x35): 8, (0x01, 0x43): 8, (0x01, 0x61): 4, (0x0D, 0x01): 16, (0x0D, 0x04): 28,
    (0x01, 0x24): 20, (0x01, 0x25): 20, (0x0A, 0x09): 60, (0x0A, 0x38): 4, (0x01, 0x06): 52, (0x01, 0x30): 8,
}


def encode_payload(kind: str, **fields: Any) -> bytes:
    """Build the payloads the simulated receiver sends, field names as in the records above (integers in the
    message's own units; satellites as ``sats``, a sequence of per-satellite tuples in the message's block order)."""
    encoder = _ENCODERS.get(kind)
    if encoder is None:
        raise ValueError(f"no encoder for {kind}")
    return encoder(fields)


def _enc_tim_tp(f: dict[str, Any]) -> bytes:
    return struct.pack("<IIiHBB", f["tow_ms"], f.get("tow_sub", 0), f["qerr_ps"], f["week"], f.get("flags", 0x03),
                       f.get("ref", 0))


def _enc_nav_timels(f: dict[str, Any]) -> bytes:
    return struct.pack("<IB3xBbBbiHH3xB", f["itow_ms"], 0, 2, f["current_ls"], 2, f.get("change", 0),
                       f.get("time_to_event_s", 0), f.get("wn", 0), f.get("dn", 0), f.get("valid", 0x03))


def _enc_nav_status(f: dict[str, Any]) -> bytes:
    flags2 = f.get("flags2", (f.get("spoofing_state", 1) & 0x03) << 3)
    return struct.pack("<IBBBBII", f["itow_ms"], f["gps_fix"], f.get("flags", 0x0D), 0, flags2, 0, 0)


def _enc_nav_timegps(f: dict[str, Any]) -> bytes:
    return struct.pack("<IihbBI", f["itow_ms"], f.get("ftow_ns", 0), f["week"], f.get("leap_s", 0),
                       f.get("valid", 0x07), f.get("tacc_ns", 0))


def _enc_nav_system_time(f: dict[str, Any]) -> bytes:
    return struct.pack("<IIihbBI", f["itow_ms"], f["tow_s"], f.get("ftow_ns", 0), f["week"], f.get("leap_s", 0),
                       f.get("valid", 0x07), f.get("tacc_ns", 0))


def _enc_mon_hw(f: dict[str, Any]) -> bytes:
    # pinSel..pinVal, noisePerMS, agcCnt, aStatus (2 ok), aPower (1 on), flags, reserved, usedMask, VP[17], jamInd,
    # reserved[2], pinIrq, pullH, pullL: 60 bytes.
    flags = (f.get("jamming_state", 1) & 0x03) << 2
    return struct.pack("<IIIIHHBBBBI17sBxxIII", 0, 0, 0, 0, f.get("noise_per_ms", 80), f.get("agc_cnt", 5000),
                       f.get("a_status", 2), f.get("a_power", 1), flags, 0, 0, bytes(17), f.get("jam_indicator", 0),
                       0, 0, 0)


def _enc_mon_rf(f: dict[str, Any]) -> bytes:
    """``blocks``: (jamming_state, ant_status, ant_power, jam_indicator) per RF block; one ok block by default."""
    blocks: Sequence[tuple[int, int, int, int]] = f.get("blocks", ((1, 2, 1, 0),))
    out = struct.pack("<BB2x", 0, len(blocks))
    for block_id, (jamming_state, ant_status, ant_power, jam_ind) in enumerate(blocks):
        out += struct.pack("<BBBBI4xHHBbBbB3x", block_id, jamming_state & 0x03, ant_status, ant_power, 0,
                           f.get("noise_per_ms", 80), f.get("agc_cnt", 5000), jam_ind, 0, 128, 0, 128)
    return out


def _enc_nav_pvt(f: dict[str, Any]) -> bytes:
    year, month, day = f["date"]
    hour, minute, second = f["hms"]
    return struct.pack("<IHBBBBBBIiBBBBiiiiIIiiiiiIIHB5xihH", f["itow_ms"], year, month, day, hour, minute, second,
                       f.get("valid", 0x07), f.get("tacc_ns", 20), f.get("nano_ns", 0), f["fix_type"],
                       f.get("flags", 0x01), 0, f.get("num_sv", 0), f.get("lon_e7", 0), f.get("lat_e7", 0),
                       f.get("height_mm", 0), f.get("hmsl_mm", 0), f.get("hacc_mm", 500), f.get("vacc_mm", 800),
                       0, 0, 0, 0, 0, 100, 0, f.get("pdop", 112), 0, 0, 0, 0)


def _enc_nav_timeutc(f: dict[str, Any]) -> bytes:
    year, month, day = f["date"]
    hour, minute, second = f["hms"]
    return struct.pack("<IIiHBBBBBB", f["itow_ms"], f.get("tacc_ns", 20), f.get("nano_ns", 0), year, month, day,
                       hour, minute, second, f.get("valid", 0x07))


def _enc_nav_sol(f: dict[str, Any]) -> bytes:
    x, y, z = f.get("ecef_cm", (0, 0, 0))
    return struct.pack("<IihBBiiiIiiiIHxB4x", f["itow_ms"], f.get("ftow_ns", 0), f["week"], f["gps_fix"],
                       f.get("flags", 0x0D), x, y, z, f.get("pacc_cm", 100), 0, 0, 0, f.get("sacc_cm_s", 10),
                       f.get("pdop", 112), f.get("num_sv", 0))


def _enc_nav_dop(f: dict[str, Any]) -> bytes:
    return struct.pack("<IHHHHHHH", f["itow_ms"], f.get("gdop", 130), f.get("pdop", 112), f.get("tdop", 60),
                       f.get("vdop", 94), f["hdop"], f.get("ndop", 45), f.get("edop", 43))


def _enc_nav_sat(f: dict[str, Any]) -> bytes:
    """``sats``: (gnss_id, sv_id, cno, elev, azim, flags) each; flags bit 3 is svUsed."""
    sats: Sequence[tuple[int, int, int, int, int, int]] = f.get("sats", ())
    out = struct.pack("<IBB2x", f["itow_ms"], 1, len(sats))
    for gnss_id, sv_id, cno, elev, azim, flags in sats:
        out += struct.pack("<BBBbhhI", gnss_id, sv_id, cno, elev, azim, 0, flags)
    return out


def _enc_nav_svinfo(f: dict[str, Any]) -> bytes:
    """``sats``: (svid, flags, quality, cno, elev, azim) each; flags bit 0 is svUsed.  Channels numbered in order."""
    sats: Sequence[tuple[int, int, int, int, int, int]] = f.get("sats", ())
    out = struct.pack("<IBB2x", f["itow_ms"], len(sats), f.get("chip_gen", 4))
    for chn, (svid, flags, quality, cno, elev, azim) in enumerate(sats):
        out += struct.pack("<BBBBBbhi", chn, svid, flags, quality, cno, elev, azim, 0)
    return out


def _enc_tim_svin(f: dict[str, Any]) -> bytes:
    x, y, z = f.get("mean_ecef_cm", (0, 0, 0))
    return struct.pack("<IiiiIIBBxx", f.get("duration_s", 0), x, y, z, f.get("variance_mm2", 0),
                       f.get("observations", 0), f.get("valid", 0), f.get("active", 0))


_ENCODERS: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "TIM-TP": _enc_tim_tp, "NAV-TIMELS": _enc_nav_timels, "NAV-STATUS": _enc_nav_status,
    "NAV-TIMEGPS": _enc_nav_timegps, "NAV-TIMEGAL": _enc_nav_system_time, "NAV-TIMEBDS": _enc_nav_system_time,
    "MON-HW": _enc_mon_hw, "MON-RF": _enc_mon_rf, "NAV-PVT": _enc_nav_pvt, "NAV-TIMEUTC": _enc_nav_timeutc,
    "NAV-SOL": _enc_nav_sol, "NAV-DOP": _enc_nav_dop, "NAV-SAT": _enc_nav_sat, "NAV-SVINFO": _enc_nav_svinfo,
    "TIM-SVIN": _enc_tim_svin,
}
