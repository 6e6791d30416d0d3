"""What the simulated receiver says about one second, message by message: NMEA sentences and UBX frames.

Pure.  ``Report`` is everything the receiver knows about the second it labels (its UTC label, fix, sky, position,
attacks in force); each function here turns it into the bytes of one message, and ``MESSAGES`` names them by the
receiver's own message names.  ``MESSAGE_ORDER`` is the order a burst sends them in: NMEA first, then UBX navigation,
time and monitor messages.  The pulse's own message (TIM-TP, which needs the next pulse's quantization error) is the
receiver's.

Heights: the simulated antenna's ``alt_m`` is above mean sea level, and the geoid lies ``GEOID_SEPARATION_M`` above
the ellipsoid, as GGA says; UBX messages that carry a height above the ellipsoid (NAV-PVT height, NAV-SOL's ECEF)
add it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from appliance import leap
from appliance.events import Constellation, SatInfo
from appliance.gnss import ubx
from appliance.gnss.framer import nmea_sentence_bytes, ubx_frame_bytes
from appliance.gnss.survey import geodetic_to_ecef
from appliance.gnss.ubx import GPS_EPOCH_TAI_S, WEEK_S, encode_payload, tai_ns_to_system_time
from appliance.units import NS_PER_S

SYSTEM_IDS = {Constellation.GPS: 1, Constellation.GLONASS: 2, Constellation.GALILEO: 3, Constellation.BEIDOU: 4}
GSV_TALKERS = {Constellation.GPS: ("GP", "1"), Constellation.GLONASS: ("GL", "1"),
               Constellation.GALILEO: ("GA", "7"), Constellation.BEIDOU: ("GB", "1")}
# System time frames, GPS first.
SYSTEM_TIME_FRAMES = {"NAV-TIMEGPS": (Constellation.GPS, 0x20), "NAV-TIMEGAL": (Constellation.GALILEO, 0x25),
                      "NAV-TIMEBDS": (Constellation.BEIDOU, 0x24)}
SYSTEM_MINUS_GPS_LEAP_S = {Constellation.GPS: 0, Constellation.GALILEO: 0, Constellation.BEIDOU: -14}
GNSS_IDS = {system: gnss_id for gnss_id, system in ubx.GNSS_IDS.items()}
GEOID_SEPARATION_M = 47.0  # geoid above the ellipsoid at the simulated antenna (GGA's field 11)
I4_LIMIT = 2**31 - 1
NANO_LIMIT = NS_PER_S - 1  # NAV-PVT / NAV-TIMEUTC nano: -1e9 .. 1e9
NO_DOP = 9999  # u-blox's 99.99: no DOP (a timing receiver on its fixed position solves for time alone)
SURVEY_S = 3600  # the survey-in a receiver in fixed-position mode reports as completed


@dataclass(frozen=True)
class SimPosition:
    """Where the simulated antenna is: WGS-84 latitude and longitude, height above mean sea level."""

    lat_deg: float = 46.2044
    lon_deg: float = 6.1432
    alt_m: float = 375.0


@dataclass(frozen=True)
class SurveyReport:
    """A survey-in under way or done (TIM-SVIN)."""

    duration_s: int
    variance_mm2: int
    valid: bool
    active: bool


@dataclass(frozen=True)
class Report:
    """What the receiver knows about the second it labels ``label_tai_ns``."""

    label_tai_ns: int
    common_tai_ns: int  # where its solution puts the second: the truth plus the error every system shares
    utc: leap.UtcTime
    fix: bool
    time_only: bool  # fixed-position timing mode: the fix is time only (u-blox gpsFix 5)
    sats: tuple[SatInfo, ...]
    position: SimPosition
    table: leap.LeapTable
    system_offsets_ns: dict[Constellation, int]  # each system's own extra error (an attack on one system)
    spoofing_state: int
    jam_indicator: int
    jamming_state: int
    antenna_status: int  # MON-HW aStatus / MON-RF antStatus code (2 ok, 3 short, 4 open)
    antenna_power: int  # aPower / antPower code (0 off, 1 on)
    gps_leap_valid: bool  # whether NAV-TIMEGPS flags its leapS valid
    survey: SurveyReport | None = None  # the receiver's own survey-in, when one was asked for

    @property
    def week_itow_ms(self) -> tuple[int, int]:
        return week_itow_ms(self.label_tai_ns)

    @property
    def gps_fix(self) -> int:
        """u-blox gpsFix: 5 time only, 3 3D, 0 none."""
        return (5 if self.time_only else 3) if self.fix else 0

    @property
    def used(self) -> int:
        return sum(1 for s in self.sats if s.used)

    @property
    def fraction_ns(self) -> int:
        """Where the solution puts the labelled second, from it (ns): NAV-PVT / NAV-TIMEUTC ``nano``."""
        return max(-NANO_LIMIT, min(NANO_LIMIT, self.common_tai_ns - self.label_tai_ns))


def week_itow_ms(label_tai_ns: int) -> tuple[int, int]:
    """GPS week and time of week (ms) of a labelled second: the iTOW every UBX frame of its burst carries."""
    week, tow_s = divmod(label_tai_ns // NS_PER_S - GPS_EPOCH_TAI_S, WEEK_S)
    return week, tow_s * 1000


# --- NMEA ---------------------------------------------------------------------------------------------------------
def _hms(utc: leap.UtcTime) -> str:
    return f"{utc.hour:02d}{utc.minute:02d}{utc.second:02d}.00"


def _latlon(p: SimPosition) -> str:
    lat, lon = abs(p.lat_deg), abs(p.lon_deg)
    lat_s = f"{int(lat):02d}{(lat - int(lat)) * 60:08.5f},{'N' if p.lat_deg >= 0 else 'S'}"
    lon_s = f"{int(lon):03d}{(lon - int(lon)) * 60:08.5f},{'E' if p.lon_deg >= 0 else 'W'}"
    return f"{lat_s},{lon_s}"


def rmc(r: Report) -> bytes:
    utc = r.utc
    date = f"{utc.day:02d}{utc.month:02d}{utc.year % 100:02d}"
    body = (f"GNRMC,{_hms(utc)},A,{_latlon(r.position)},0.010,,{date},,,A,V" if r.fix
            else f"GNRMC,{_hms(utc)},V,,,,,,,{date},,,N,V")
    return nmea_sentence_bytes(body)


def vtg(r: Report) -> bytes:
    return nmea_sentence_bytes("GNVTG,,T,,M,0.010,N,0.019,K,A" if r.fix else "GNVTG,,T,,M,,N,,K,N")


def gga(r: Report) -> bytes:
    """A timing receiver on its fixed position keeps reporting that position here, as a u-blox does."""
    if not r.fix:
        return nmea_sentence_bytes(f"GNGGA,{_hms(r.utc)},,,,,0,00,99.99,,,,,,")
    used = min(12, r.used)
    return nmea_sentence_bytes(f"GNGGA,{_hms(r.utc)},{_latlon(r.position)},1,{used:02d},0.62,"
                               f"{r.position.alt_m:.1f},M,{GEOID_SEPARATION_M:.1f},M,,")


def gsa(r: Report) -> list[bytes]:
    out = []
    for const, system in SYSTEM_IDS.items():
        prns = [f"{s.prn:02d}" for s in r.sats if s.constellation is const and s.used][:12] if r.fix else []
        fields = ",".join(prns + [""] * (12 - len(prns)))
        out.append(nmea_sentence_bytes(f"GNGSA,A,{3 if r.fix else 1},{fields},1.12,0.62,0.94,{system}"))
    return out


def gsv(r: Report) -> list[bytes]:
    out = []
    for const, (talker, signal) in GSV_TALKERS.items():
        mine = [s for s in r.sats if s.constellation is const]
        parts = max(1, math.ceil(len(mine) / 4))
        for part in range(parts):
            blocks = ",".join(f"{s.prn:02d},{s.elevation_deg:02d},{s.azimuth_deg:03d},"
                              f"{'' if s.cn0_dbhz is None else f'{s.cn0_dbhz:02d}'}"
                              for s in mine[part * 4:part * 4 + 4])
            sep = "," if blocks else ""
            out.append(nmea_sentence_bytes(f"{talker}GSV,{parts},{part + 1},{len(mine):02d}{sep}{blocks},{signal}"))
    return out


def gll(r: Report) -> bytes:
    return nmea_sentence_bytes(f"GNGLL,{_latlon(r.position)},{_hms(r.utc)},A,A" if r.fix
                               else f"GNGLL,,,,,{_hms(r.utc)},V,N")


def zda(r: Report) -> bytes:
    utc = r.utc
    return nmea_sentence_bytes(f"GNZDA,{_hms(utc)},{utc.day:02d},{utc.month:02d},{utc.year:04d},00,00")


# --- UBX: navigation ---------------------------------------------------------------------------------------------
def _ecef_cm(p: SimPosition) -> tuple[int, int, int]:
    x, y, z = geodetic_to_ecef(p.lat_deg, p.lon_deg, p.alt_m + GEOID_SEPARATION_M)
    return round(x * 100), round(y * 100), round(z * 100)


def nav_pvt(r: Report) -> bytes:
    utc = r.utc
    p = r.position
    payload = encode_payload("NAV-PVT", itow_ms=r.week_itow_ms[1], date=(utc.year, utc.month, utc.day),
                             hms=(utc.hour, utc.minute, utc.second), valid=0x07 if r.fix else 0x00,
                             nano_ns=r.fraction_ns, fix_type=r.gps_fix, flags=0x01 if r.fix else 0x00,
                             num_sv=r.used, lat_e7=round(p.lat_deg * 1e7), lon_e7=round(p.lon_deg * 1e7),
                             height_mm=round((p.alt_m + GEOID_SEPARATION_M) * 1000), hmsl_mm=round(p.alt_m * 1000),
                             pdop=NO_DOP if r.time_only or not r.fix else 112)
    return ubx_frame_bytes(0x01, 0x07, payload)


def nav_sol(r: Report) -> bytes:
    week, itow_ms = r.week_itow_ms
    ftow_ns = max(-I4_LIMIT, min(I4_LIMIT, r.common_tai_ns - r.label_tai_ns))
    # GPSfixOK, WKNSET and TOWSET with a fix; nothing without.
    payload = encode_payload("NAV-SOL", itow_ms=itow_ms, ftow_ns=ftow_ns, week=week, gps_fix=r.gps_fix,
                             flags=0x0D if r.fix else 0x00, ecef_cm=_ecef_cm(r.position),
                             pdop=NO_DOP if r.time_only or not r.fix else 112, num_sv=r.used)
    return ubx_frame_bytes(0x01, 0x06, payload)


def nav_dop(r: Report) -> bytes:
    itow_ms = r.week_itow_ms[1]
    if r.time_only or not r.fix:
        payload = encode_payload("NAV-DOP", itow_ms=itow_ms, gdop=NO_DOP, pdop=NO_DOP, tdop=NO_DOP, vdop=NO_DOP,
                                 hdop=NO_DOP, ndop=NO_DOP, edop=NO_DOP)
    else:
        payload = encode_payload("NAV-DOP", itow_ms=itow_ms, hdop=62)  # as GGA and GSA say
    return ubx_frame_bytes(0x01, 0x04, payload)


def nav_sat(r: Report) -> bytes:
    """Every satellite in view: qualityInd 7 (locked) when tracked, 1 (searching) when not; svUsed; health ok."""
    sats = [(GNSS_IDS[s.constellation], s.prn, s.cn0_dbhz or 0, s.elevation_deg or 0, s.azimuth_deg or 0,
             (7 if s.cn0_dbhz else 1) | (0x08 if s.used else 0) | 0x10) for s in r.sats]
    return ubx_frame_bytes(0x01, 0x35, encode_payload("NAV-SAT", itow_ms=r.week_itow_ms[1], sats=sats))


def nav_svinfo(r: Report) -> bytes:
    """NAV-SVINFO numbers satellites in one byte: a BeiDou satellite above B37 has no number there and is left out,
    as a u-blox 8 would not track it."""
    sats = []
    for s in r.sats:
        svid = ubx.sat_to_svid(s.constellation, s.prn)
        if svid is None:
            continue
        tracked = bool(s.cn0_dbhz)
        flags = (0x01 if s.used else 0) | (0x0C if tracked else 0)  # svUsed; orbit and ephemeris available
        sats.append((svid, flags, 7 if tracked else 1, s.cn0_dbhz or 0, s.elevation_deg or 0, s.azimuth_deg or 0))
    return ubx_frame_bytes(0x01, 0x30, encode_payload("NAV-SVINFO", itow_ms=r.week_itow_ms[1], sats=sats))


def nav_status(r: Report) -> bytes:
    payload = encode_payload("NAV-STATUS", itow_ms=r.week_itow_ms[1], gps_fix=r.gps_fix,
                             flags=0x0D if r.fix else 0x0C, spoofing_state=r.spoofing_state)
    return ubx_frame_bytes(0x01, 0x03, payload)


# --- UBX: time ------------------------------------------------------------------------------------------------
def nav_timeutc(r: Report) -> bytes:
    utc = r.utc
    payload = encode_payload("NAV-TIMEUTC", itow_ms=r.week_itow_ms[1], date=(utc.year, utc.month, utc.day),
                             hms=(utc.hour, utc.minute, utc.second), nano_ns=r.fraction_ns,
                             valid=0x07 if r.fix else 0x00)  # validTOW, validWKN, validUTC
    return ubx_frame_bytes(0x01, 0x21, payload)


def system_time(kind: str) -> Callable[[Report], bytes]:
    """NAV-TIMEGPS/GAL/BDS: where that system's solution puts the epoch, ``common_tai_ns`` plus its own offset;
    time of week and week valid only with a fix.  GPS's iTOW is the labelled second's, so its fraction (fTOW)
    carries the whole offset, saturating at the I4 field's +-2.1 s."""
    system, msg_id = SYSTEM_TIME_FRAMES[kind]

    def frame(r: Report) -> bytes:
        week, itow_ms = r.week_itow_ms
        gps_utc_s = r.table.tai_utc_at_tai_ns(r.label_tai_ns) - 19
        valid, tacc_ns = (0x03, 10) if r.fix else (0x00, 0)
        at_ns = r.common_tai_ns + r.system_offsets_ns.get(system, 0)
        leap_s = gps_utc_s + SYSTEM_MINUS_GPS_LEAP_S[system]
        if system is Constellation.GPS:  # iTOW is GPS's own time of week: the rest goes in the fraction
            ftow_ns = max(-I4_LIMIT, min(I4_LIMIT, at_ns - r.label_tai_ns))
            valid |= 0x04 if r.fix and r.gps_leap_valid else 0
            payload = encode_payload(kind, itow_ms=itow_ms, ftow_ns=ftow_ns, week=week, leap_s=leap_s, valid=valid,
                                     tacc_ns=tacc_ns)
        else:
            sys_week, tow_s, ftow_ns = tai_ns_to_system_time(system, at_ns)
            payload = encode_payload(kind, itow_ms=itow_ms, tow_s=tow_s, ftow_ns=ftow_ns, week=sys_week,
                                     leap_s=leap_s, valid=valid, tacc_ns=tacc_ns)
        return ubx_frame_bytes(0x01, msg_id, payload)
    return frame


def nav_timels(r: Report) -> bytes:
    itow_ms = r.week_itow_ms[1]
    current_ls = r.table.tai_utc_at_tai_ns(r.label_tai_ns) - 19
    change = r.table.next_change_after(r.label_tai_ns)
    if change is None:
        payload = encode_payload("NAV-TIMELS", itow_ms=itow_ms, current_ls=current_ls, valid=0x01)
    else:
        at_ns, delta = change
        payload = encode_payload("NAV-TIMELS", itow_ms=itow_ms, current_ls=current_ls, change=delta,
                                 time_to_event_s=(at_ns - r.label_tai_ns) // NS_PER_S, valid=0x03)
    return ubx_frame_bytes(0x01, 0x26, payload)


def tim_svin(r: Report) -> bytes:
    """In fixed-position mode, a completed survey-in at the antenna's position; otherwise none running."""
    if r.survey is not None:
        s = r.survey
        x, y, z = _ecef_cm(r.position)
        payload = encode_payload("TIM-SVIN", duration_s=s.duration_s, mean_ecef_cm=(x, y, z),
                                 variance_mm2=s.variance_mm2, observations=s.duration_s, valid=int(s.valid),
                                 active=int(s.active))
        return ubx_frame_bytes(0x0D, 0x04, payload)
    x, y, z = _ecef_cm(r.position) if r.time_only else (0, 0, 0)
    payload = encode_payload("TIM-SVIN", duration_s=SURVEY_S if r.time_only else 0, mean_ecef_cm=(x, y, z),
                             variance_mm2=2_500 if r.time_only else 0, observations=SURVEY_S if r.time_only else 0,
                             valid=int(r.time_only), active=0)
    return ubx_frame_bytes(0x0D, 0x04, payload)


# --- UBX: monitors ------------------------------------------------------------------------------------------------
def mon_hw(r: Report) -> bytes:
    return ubx_frame_bytes(0x0A, 0x09, encode_payload("MON-HW", jam_indicator=r.jam_indicator,
                                                      jamming_state=r.jamming_state, a_status=r.antenna_status,
                                                      a_power=r.antenna_power))


def mon_rf(r: Report) -> bytes:
    """Two RF blocks (L1 and L5/L2, as an F9T has) on one antenna."""
    block = (r.jamming_state, r.antenna_status, r.antenna_power, r.jam_indicator)
    return ubx_frame_bytes(0x0A, 0x38, encode_payload("MON-RF", blocks=(block, block)))


MESSAGES: dict[str, Callable[[Report], bytes | list[bytes]]] = {
    "RMC": rmc, "VTG": vtg, "GGA": gga, "GSA": gsa, "GSV": gsv, "GLL": gll, "ZDA": zda,
    "NAV-PVT": nav_pvt, "NAV-SOL": nav_sol, "NAV-DOP": nav_dop, "NAV-SAT": nav_sat, "NAV-SVINFO": nav_svinfo,
    "NAV-TIMEUTC": nav_timeutc, "NAV-TIMEGPS": system_time("NAV-TIMEGPS"), "NAV-TIMEGAL": system_time("NAV-TIMEGAL"),
    "NAV-TIMEBDS": system_time("NAV-TIMEBDS"), "NAV-TIMELS": nav_timels, "NAV-STATUS": nav_status,
    "TIM-SVIN": tim_svin, "MON-HW": mon_hw, "MON-RF": mon_rf,
}
# The order of a burst.  TIM-TP (the receiver's own: it describes the next pulse) sits where it always has, after
# the NMEA and the per-epoch navigation messages.
MESSAGE_ORDER = ("RMC", "VTG", "GGA", "GSA", "GSV", "GLL", "ZDA", "NAV-PVT", "NAV-SOL", "NAV-DOP", "NAV-SAT",
                 "NAV-SVINFO", "NAV-TIMEUTC", "TIM-TP", "NAV-TIMEGPS", "NAV-TIMEGAL", "NAV-TIMEBDS", "NAV-TIMELS",
                 "NAV-STATUS", "TIM-SVIN", "MON-HW", "MON-RF")
