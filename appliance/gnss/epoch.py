"""Receiver records (NMEA and UBX) -> one GnssEpoch per navigation epoch.

Pure core.  An epoch is everything the receiver said about one instant.  Records that carry a time (RMC, GGA, ZDA,
NAV-PVT ...) name their epoch; records that do not (GSA, GSV, TIM-TP, MON-HW) belong to the epoch being assembled.
A record naming a different instant closes the current epoch, as does u-blox NAV-EOE or the caller after a quiet gap.
UBX navigation records name their epoch by GPS time of week (iTOW, shared by every message of one navigation epoch),
which keeps an epoch whole across a leap second, where UTC time of day and iTOW stop moving together.  NMEA and UBX
describing the same second (a timing receiver sends both) merge into one epoch.  Per-system times (NAV-TIMEGPS,
NAV-TIMEGAL, NAV-TIMEBDS) become offsets between the systems, for the integrity checks.

A receiver that states no UTC at all (an older u-blox sending NAV-SOL, NAV-TIMEGPS, NAV-SVINFO and NAV-DOP, no
NAV-PVT and no NMEA) still labels its epochs: NAV-TIMEGPS with a valid time of week, week and leap seconds gives
UTC = GPS time - leapS.  A time the receiver states in UTC (NMEA, NAV-TIMEUTC, NAV-PVT) outranks it, and it in turn
outranks a time of day derived from iTOW alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeGuard

from appliance import leap
from appliance.events import Constellation, FixMode, GnssEpoch, Position, SatInfo
from appliance.gnss import nmea, ubx
from appliance.units import NS_PER_MS

C = Constellation
DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS
SYSTEM_ORDER = tuple(ubx.SYSTEM_TIMES)  # GPS first: the reference of the offsets
GPS_EPOCH_DAYS = leap.days_from_civil(1980, 1, 6)  # GPS week 0 began at 1980-01-06T00:00:00 UTC
GPS_MINUS_TAI_S = -19  # IS-GPS-200: GPS time = TAI - 19 s
# How firmly a record names its epoch's UTC: stated by the receiver in UTC, computed from GPS time and the
# receiver's leap seconds, or derived from iTOW with an offset learnt earlier.
STATED, FROM_GPS_TIME, DERIVED = 2, 1, 0
# Position ranks (lower wins): UBX fixes in height above mean sea level, NMEA GGA/GNS, NMEA RMC/GLL (no height),
# then NAV-SOL, whose height is above the ellipsoid: it is used only where nothing states a height above mean sea
# level, so that one receiver's positions do not jump by the geoid separation from epoch to epoch.
RANK_UBX, RANK_GGA, RANK_NO_HEIGHT, RANK_ELLIPSOIDAL = 0, 1, 2, 3


def utc_text(date: tuple[int, int, int], tod_ms: int) -> str:
    """ISO 8601 with milliseconds; a leap second's tod_ms >= 86,400,000 prints as 23:59:60."""
    seconds, millis = divmod(tod_ms, 1000)
    hour, rest = divmod(min(seconds, 86_399), 3600)
    minute, second = divmod(rest, 60)
    if seconds >= 86_400:
        second = 60 + seconds - 86_400
    return f"{date[0]:04d}-{date[1]:02d}-{date[2]:02d}T{hour:02d}:{minute:02d}:{second:02d}.{millis:03d}Z"


def _itow_of(record: object) -> int | None:
    """The navigation epoch a UBX record belongs to (TIM-TP's ``tow_ms`` names the next pulse, not an epoch)."""
    return getattr(record, "itow_ms", None)


def _states_time(record: object) -> bool:
    return isinstance(record, (nmea.TimeRecord, ubx.UbxUtc))


def _gives_utc(record: object) -> TypeGuard[ubx.UbxGpsTime]:
    """NAV-TIMEGPS with a valid time of week, week and leap seconds: UTC = GPS time - leapS."""
    return (isinstance(record, ubx.UbxGpsTime) and record.tow_valid and record.week_valid
            and record.leap_valid)


def _time_rank(record: object) -> int:
    if _states_time(record):
        return STATED
    return FROM_GPS_TIME if _gives_utc(record) else DERIVED


def gps_time_utc(week: int, itow_ms: int, leap_s: int,
                 table: leap.LeapTable) -> tuple[tuple[int, int, int], int]:
    """(date, time of day in ms) of a GPS week and time of week, UTC = GPS time - the receiver's GPS-UTC ``leap_s``.

    Subtracting whole seconds cannot name an inserted 23:59:60 (it reads the next 00:00:00 or repeats 23:59:59,
    whichever leapS the receiver reports during it): where the leap table puts the instant inside an inserted
    second and the receiver's leapS is that leap second's old or new value, the label is 23:59:60."""
    gps_tai_ns = ubx.system_time_tai_ns(C.GPS, week, itow_ms * NS_PER_MS)
    if table.inserted_second_start_tai_ns(gps_tai_ns) is not None:
        if table.tai_utc_at_tai_ns(gps_tai_ns) + GPS_MINUS_TAI_S - leap_s in (0, -1):
            utc = leap.tai_to_utc(gps_tai_ns, table)
            return (utc.year, utc.month, utc.day), DAY_MS + utc.nanosecond // NS_PER_MS
    days, tod_ms = divmod(week * WEEK_MS + itow_ms - leap_s * 1000, DAY_MS)
    return leap.civil_from_days(GPS_EPOCH_DAYS + days), tod_ms


def next_date(date: tuple[int, int, int]) -> tuple[int, int, int]:
    year, month, day = date
    leap_year = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = (31, 29 if leap_year else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[month - 1]
    if day < days:
        return year, month, day + 1
    return (year + 1, 1, 1) if month == 12 else (year, month + 1, 1)


@dataclass
class _Building:
    tod_ms: int | None = None
    date: tuple[int, int, int] | None = None
    itow_ms: int | None = None  # u-blox iTOW of the epoch, once a UBX navigation record has named it
    time_rank: int = DERIVED  # how firmly tod_ms/date were named (STATED, FROM_GPS_TIME, DERIVED)
    rx_raw_ns: int = 0
    valid_votes: list[bool] = field(default_factory=list)
    nmea_modes: list[FixMode] = field(default_factory=list)  # GGA/GNS: they state the dimension
    status_modes: list[FixMode] = field(default_factory=list)  # RMC/GLL: fix or no fix, dimension unknown
    gsa_mode: FixMode | None = None
    ubx_fix: ubx.UbxFix | None = None
    positions: dict[int, Position] = field(default_factory=dict)  # rank -> position (lower rank wins)
    view: dict[tuple[Constellation, int], SatInfo] = field(default_factory=dict)
    used: set[tuple[Constellation, int]] = field(default_factory=set)
    ubx_sats: tuple[SatInfo, ...] | None = None
    sig_used: set[tuple[Constellation, int]] = field(default_factory=set)  # NAV-SIG: used on any signal
    gga_count: int | None = None
    fix_count: int | None = None  # NAV-PVT / NAV-SOL numSV: the receiver's count when it lists no satellites
    hdop: float | None = None
    jam_indicator: int | None = None
    jamming_state: int | None = None
    spoofing_state: int | None = None
    antenna_status: str | None = None
    antenna_power: str | None = None
    system_tai_ns: dict[Constellation, int] = field(default_factory=dict)  # where each system puts the epoch
    sources: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not self.sources


class EpochAssembler:
    """Feed decoded records in stream order; completed epochs come back from ``add`` and ``flush``."""

    def __init__(self, table: Callable[[], leap.LeapTable]):
        self._table = table
        self._cur = _Building()
        self._last_date: tuple[int, int, int] | None = None
        self._last_tod_ms: int | None = None
        self._itow_to_tod_ms: int | None = None  # UTC time of day minus GPS time of week, mod one day
        self._last_mode = FixMode.UNKNOWN
        self._last_view: dict[tuple[Constellation, int], SatInfo] = {}  # the sky persists between GSV reports
        self._last_ubx_sats: tuple[SatInfo, ...] = ()  # ... and between NAV-SAT / NAV-SVINFO reports
        self._last_used: set[tuple[Constellation, int]] = set()
        self._last_used_count: int | None = None

    def add(self, record: object, rx_raw_ns: int) -> list[GnssEpoch]:
        out: list[GnssEpoch] = []
        key = self._key_of(record)
        itow = _itow_of(record)
        if self._names_other_epoch(key, itow, _states_time(record)):
            out += self.flush()
        cur = self._cur
        if cur.empty():
            cur.rx_raw_ns = rx_raw_ns
        if itow is not None:
            cur.itow_ms = itow
        # A time derived from iTOW is only a guess at UTC (wrong during 23:59:60); a stated time replaces it, and
        # so does GPS time with the receiver's leap seconds, short of a stated time.
        rank = _time_rank(record)
        if key is not None and (cur.tod_ms is None or rank >= max(cur.time_rank, FROM_GPS_TIME)):
            cur.tod_ms = key[0]
            cur.date = key[1] or cur.date
            cur.time_rank = rank
        self._absorb(record)
        if isinstance(record, ubx.UbxEndOfEpoch):
            out += self.flush()
        return out

    def flush(self) -> list[GnssEpoch]:
        cur, self._cur = self._cur, _Building()
        if cur.empty():
            return []
        if cur.date is not None and cur.tod_ms is not None:
            self._last_date, self._last_tod_ms = cur.date, cur.tod_ms
        return [self._finish(cur)]

    def current_tai_ns(self) -> int | None:
        """TAI of the epoch being assembled, once a record has named it."""
        cur = self._cur
        return None if cur.date is None or cur.tod_ms is None else self._to_tai(cur.date, cur.tod_ms)

    def current_text(self) -> str | None:
        cur = self._cur
        return None if cur.date is None or cur.tod_ms is None else utc_text(cur.date, cur.tod_ms)

    # --- which instant a record names -------------------------------------------------------------------------
    def _names_other_epoch(self, key: tuple[int, object] | None, itow: int | None, stated: bool) -> bool:
        cur = self._cur
        if itow is not None and cur.itow_ms is not None:
            return itow != cur.itow_ms
        if key is None or cur.tod_ms is None:
            return False
        if stated:
            return key[0] != cur.tod_ms
        # A time of day derived from iTOW cannot read 23:59:60: during an inserted second it reads the next day's
        # 00:00:00, a whole day from the 86,400,000 ms NMEA states, and names the same epoch.
        return (key[0] - cur.tod_ms) % DAY_MS != 0

    def _key_of(self, record: object) -> tuple[int, tuple[int, int, int] | None] | None:
        if isinstance(record, nmea.TimeRecord):
            return record.tod_ms, record.date or self._infer_date(record.tod_ms)
        if isinstance(record, ubx.UbxUtc):
            if record.valid:
                self._itow_to_tod_ms = (record.tod_ms - record.itow_ms) % DAY_MS
                return record.tod_ms, record.date
            return None
        if isinstance(record, ubx.UbxGpsTime) and record.leap_valid:
            # Refreshed on every report, so that after a leap second iTOW keeps naming the epoch NMEA states.
            self._itow_to_tod_ms = (-record.leap_s * 1000) % DAY_MS
        if _gives_utc(record):
            date, tod_ms = gps_time_utc(record.week, record.itow_ms, record.leap_s, self._table())
            return tod_ms, date
        itow = getattr(record, "itow_ms", None)
        if itow is not None and self._itow_to_tod_ms is not None and not isinstance(record, ubx.UbxEndOfEpoch):
            tod = (itow + self._itow_to_tod_ms) % DAY_MS
            return tod, self._infer_date(tod)
        return None

    def _infer_date(self, tod_ms: int) -> tuple[int, int, int] | None:
        """Sentences without a date (GGA, GNS) take the last date seen, rolled over at midnight."""
        if self._cur.date is not None and self._cur.tod_ms is not None:
            return self._cur.date if tod_ms >= self._cur.tod_ms - DAY_MS // 2 else next_date(self._cur.date)
        if self._last_date is None or self._last_tod_ms is None:
            return None
        rolled = tod_ms < self._last_tod_ms - DAY_MS // 2
        return next_date(self._last_date) if rolled else self._last_date

    # --- what a record contributes ---------------------------------------------------------------------------
    def _absorb(self, r: object) -> None:
        cur = self._cur
        cur.sources.append(type(r).__name__ if not hasattr(r, "kind") else str(getattr(r, "kind")))
        if isinstance(r, nmea.TimeRecord):
            self._absorb_time(r)
        elif isinstance(r, nmea.UsedRecord):
            cur.gsa_mode = max(cur.gsa_mode or FixMode.UNKNOWN, r.fix)
            cur.used.update(r.sats)
            cur.hdop = r.hdop if r.hdop is not None else cur.hdop
        elif isinstance(r, nmea.ViewRecord):
            for const, prn, el, az, cn0 in r.sats:
                old = cur.view.get((const, prn))
                best = cn0 if old is None or (cn0 or 0) >= (old.cn0_dbhz or 0) else old.cn0_dbhz
                cur.view[(const, prn)] = SatInfo(const, prn, el if el is not None or old is None else old.elevation_deg,
                                                 az if az is not None or old is None else old.azimuth_deg, best)
        elif isinstance(r, ubx.UbxUtc):
            cur.valid_votes.append(r.valid)
        elif isinstance(r, ubx.UbxFix):
            self._absorb_fix(r)
        elif isinstance(r, ubx.UbxSolution):
            self._absorb_fix(r.fix)
        elif isinstance(r, (ubx.UbxGpsTime, ubx.UbxSystemTime)):
            if _gives_utc(r):
                cur.valid_votes.append(True)  # it vouches for the UTC it gives (GPS time - leapS)
            at_ns = ubx.epoch_time_tai_ns(r)
            if at_ns is not None:
                cur.system_tai_ns[C.GPS if isinstance(r, ubx.UbxGpsTime) else r.constellation] = at_ns
        elif isinstance(r, ubx.UbxHardware):
            cur.jam_indicator, cur.jamming_state = r.jam_indicator, r.jamming_state
            cur.antenna_status, cur.antenna_power = r.antenna_status, r.antenna_power
        elif isinstance(r, ubx.UbxPosition):
            cur.positions.setdefault(RANK_UBX, r.position)
        elif isinstance(r, (ubx.UbxSats, ubx.UbxSvInfo)):
            cur.ubx_sats = r.sats
        elif isinstance(r, ubx.UbxSignalsUsed):
            cur.sig_used.update(r.used)
        elif isinstance(r, ubx.UbxDop):
            cur.hdop = r.hdop if r.hdop is not None else cur.hdop

    def _absorb_fix(self, r: ubx.UbxFix) -> None:
        cur = self._cur
        if cur.ubx_fix is None or r.kind == "NAV-PVT":
            cur.ubx_fix = r
        if r.position is not None:
            if r.kind == "NAV-SOL":
                cur.positions.setdefault(RANK_ELLIPSOIDAL, r.position)
            else:
                cur.positions[RANK_UBX] = r.position
        if r.num_sv is not None and (cur.fix_count is None or r.kind == "NAV-PVT"):
            cur.fix_count = r.num_sv
        if r.spoofing_state is not None:
            cur.spoofing_state = r.spoofing_state

    def _absorb_time(self, r: nmea.TimeRecord) -> None:
        cur = self._cur
        if r.valid is not None:
            cur.valid_votes.append(r.valid)
        if r.mode is not None:
            (cur.status_modes if r.kind in ("RMC", "GLL") else cur.nmea_modes).append(r.mode)
        if r.position is not None:
            rank = RANK_GGA if r.position.alt_m is not None else RANK_NO_HEIGHT
            cur.positions.setdefault(rank, r.position)
        if r.kind == "GGA" and r.num_sats is not None:
            cur.gga_count = r.num_sats
        if r.hdop is not None:
            cur.hdop = r.hdop

    # --- the finished epoch -------------------------------------------------------------------------------
    def _finish(self, cur: _Building) -> GnssEpoch:
        text = tai = None
        if cur.date is not None and cur.tod_ms is not None:
            text = utc_text(cur.date, cur.tod_ms)
            tai = self._to_tai(cur.date, cur.tod_ms)
        mode = self._mode(cur)
        sats = self._satellites(cur)
        listed = cur.used or cur.sig_used or cur.ubx_sats is not None
        stated_count = cur.gga_count if cur.gga_count is not None else cur.fix_count
        if listed or stated_count is not None:
            used_count = sum(1 for s in sats if s.used) if listed else stated_count
        else:
            used_count = self._last_used_count  # said nothing about the sky: keep the last word, as for satellites
        self._last_used_count = used_count
        position = cur.positions[min(cur.positions)] if cur.positions and mode >= FixMode.FIX_2D else None
        valid = bool(cur.valid_votes) and all(cur.valid_votes) and tai is not None and mode >= FixMode.FIX_2D
        time_only = bool(cur.ubx_fix and cur.ubx_fix.time_only)
        return GnssEpoch(text, tai, valid, mode, position, sats, used_count, cur.hdop, cur.rx_raw_ns,
                         tuple(dict.fromkeys(cur.sources)), time_only, cur.jam_indicator, cur.jamming_state,
                         cur.spoofing_state, _system_offsets_ns(cur.system_tai_ns, tai), cur.antenna_status,
                         cur.antenna_power)

    def _to_tai(self, date: tuple[int, int, int], tod_ms: int) -> int | None:
        seconds, millis = divmod(tod_ms, 1000)
        hour, rest = divmod(min(seconds, 86_399), 3600)
        minute, second = divmod(rest, 60)
        second += max(0, seconds - 86_399)
        try:
            return leap.utc_fields_to_tai(*date, hour, minute, second, millis * 1_000_000, self._table())
        except ValueError:
            return None  # e.g. 23:59:60 the leap table does not know: the label is unusable, not the epoch

    def _mode(self, cur: _Building) -> FixMode:
        mode = self._stated_mode(cur)
        self._last_mode = mode
        return mode

    def _stated_mode(self, cur: _Building) -> FixMode:
        if cur.ubx_fix is not None:
            return cur.ubx_fix.mode
        said = cur.nmea_modes + cur.status_modes
        no_fix = bool(said) and all(m == FixMode.NO_FIX for m in said)
        if cur.gsa_mode is not None:
            # GSA states the dimension; RMC/GGA saying "no fix" in the same epoch overrides it.
            return FixMode.NO_FIX if no_fix else cur.gsa_mode
        if cur.nmea_modes:
            return max(cur.nmea_modes)
        if cur.status_modes and not no_fix:
            # RMC/GLL only say "valid": keep the dimension the receiver last stated (gpsd does the same).
            return max(self._last_mode, FixMode.FIX_2D)
        return FixMode.NO_FIX if no_fix else FixMode.UNKNOWN

    def _satellites(self, cur: _Building) -> tuple[SatInfo, ...]:
        if cur.view:
            self._last_view = dict(cur.view)
        if cur.ubx_sats is not None:
            self._last_ubx_sats = tuple(SatInfo(s.constellation, s.prn, s.elevation_deg, s.azimuth_deg, s.cn0_dbhz)
                                        for s in cur.ubx_sats)  # in use is said per epoch, as GSA says it
        merged = dict(cur.view) if cur.view or cur.ubx_sats else dict(self._last_view)
        ubx_sats = cur.ubx_sats if cur.ubx_sats is not None else () if cur.view else self._last_ubx_sats
        for sat in ubx_sats:
            merged[(sat.constellation, sat.prn)] = sat
        # Binary NAV-SAT states "used" per satellite from the navigation solution itself; where a receiver sends
        # it, its NMEA GSA (which can lag by an epoch) does not add to it.  NAV-SAT only speaks for a satellite's
        # primary signal, so NAV-SIG adds the satellites used on another signal alone (L5/E5a).
        gsa_used = cur.used if cur.ubx_sats is None else set()
        if cur.ubx_sats is None and not cur.used and not cur.sig_used and cur.gga_count is None:
            gsa_used = self._last_used  # an epoch that says nothing about the sky keeps the last word on it
        stated_used = gsa_used | cur.sig_used
        self._last_used = {(s.constellation, s.prn) for s in cur.ubx_sats or () if s.used} | stated_used
        out = []
        for key, sat in merged.items():
            used = sat.used or key in stated_used
            out.append(sat if sat.used == used else SatInfo(sat.constellation, sat.prn, sat.elevation_deg,
                                                             sat.azimuth_deg, sat.cn0_dbhz, used))
        for const, prn in stated_used - set(merged):  # used but not in view this epoch (no GSV sent)
            out.append(SatInfo(const, prn, used=True))
        return tuple(sorted(out, key=lambda s: (s.constellation.value, s.prn)))


def _system_offsets_ns(system_tai_ns: dict[Constellation, int],
                       label_tai_ns: int | None) -> tuple[tuple[Constellation, int], ...]:
    """Each system's instant minus GPS's (or, without GPS, minus the labelled second): the convention of
    ``GnssEpoch.system_offsets_ns``.  Against GPS, an error common to every system (the receiver's own) cancels."""
    reference = system_tai_ns.get(C.GPS, label_tai_ns)
    if reference is None:
        return ()
    return tuple((system, system_tai_ns[system] - reference) for system in SYSTEM_ORDER if system in system_tai_ns)
