"""The simulated timing receiver: from true time to the bytes and PPS edges a real one would produce.

Pure: every method takes the true instant it describes; the caller (an in-process driver under the scheduler, or the
pseudo-terminal writer) decides when to call it.  It models a multi-constellation timing receiver such as a u-blox
ZED-F9T: NMEA 4.11 (RMC, GGA, GSA per system, GSV per constellation, ZDA) plus UBX TIM-TP (the next pulse's
quantization error), NAV-TIMEGPS/GAL/BDS (each system's time of the epoch), NAV-TIMELS (leap second announcements),
NAV-STATUS (fix and spoofing flag) and MON-HW (jamming indicator).  The PPS edge is quantized to the receiver's 48 MHz
clock, producing the familiar +-10 ns sawtooth that TIM-TP's qErr describes; u-blox's sign convention holds:
``qErr = ideal - actual``, so adding qErr to a measured edge removes the sawtooth.

Scenarios stage attacks by changing ``SimReceiver.conditions`` while it runs: time steps and slow pushes, position
pushes, meaconing, a spoofer's own sky or a single transmitter's uniform C/N0, jamming, one constellation spoofed,
and receiver resets.  Time errors follow one sign: positive puts the receiver's second (its pulse) late.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np

from appliance import leap
from appliance.events import Constellation, SatInfo
from appliance.gnss.framer import nmea_sentence_bytes, ubx_frame_bytes
from appliance.gnss.ubx import GPS_EPOCH_TAI_S, WEEK_S, encode_payload, tai_ns_to_system_time
from appliance.sim.sky import Sky
from appliance.units import NS_PER_S, PS_PER_NS

NOISE_CHUNK = 4096
TICK_UNITS = 125_000  # one period of a 48 MHz receiver clock, in sixths of a picosecond
SYSTEM_IDS = {Constellation.GPS: 1, Constellation.GLONASS: 2, Constellation.GALILEO: 3, Constellation.BEIDOU: 4}
GSV_TALKERS = {Constellation.GPS: ("GP", "1"), Constellation.GLONASS: ("GL", "1"),
               Constellation.GALILEO: ("GA", "7"), Constellation.BEIDOU: ("GB", "1")}
# System time frames sent each second, GPS first.
SYSTEM_TIME_FRAMES = ((Constellation.GPS, 0x20, "NAV-TIMEGPS"), (Constellation.GALILEO, 0x25, "NAV-TIMEGAL"),
                      (Constellation.BEIDOU, 0x24, "NAV-TIMEBDS"))
SYSTEM_MINUS_GPS_LEAP_S = {Constellation.GPS: 0, Constellation.GALILEO: 0, Constellation.BEIDOU: -14}
WGS84_A_M = 6_378_137.0
WGS84_E2 = 6.694_379_990_14e-3
UNIFORM_CN0_SPREAD_DB = 0.45  # one transmitter: every satellite within this of its level
CACHED_SKIES = 4
I4_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class SimPosition:
    lat_deg: float = 46.2044
    lon_deg: float = 6.1432
    alt_m: float = 375.0

FAKE_SKY_SEED = 4242  # the spoofer's constellation (fake-sky), unless that is the real sky's own seed


@dataclass
class SkyConditions:
    """What scenarios change at run time: whether the antenna sees the sky, and the attacks on it (none by default)."""

    blocked: bool = False
    time_offset_ns: int = 0  # added to the receiver's time error (a time step)
    push_ns_per_s: float = 0.0  # slow carry-off: the time error grows this fast ...
    push_since_ns: int | None = None  # ... from this true instant on
    position_offset_m: tuple[float, float, float] = (0.0, 0.0, 0.0)  # north, east, up added to the reported fix
    meaconing_delay_ns: int = 0  # the whole sky re-broadcast late: time error + delay, C/N0 all alike
    meacon_cn0_dbhz: float = 45.0  # the re-radiating antenna's level
    cn0_uniform_dbhz: float | None = None  # a spoofer's single transmitter: every satellite near this level
    cn0_offset_db: float = 0.0  # added to every C/N0 (jamming: negative); below 20 dB-Hz a satellite is lost
    jam_indicator: int = 0  # MON-HW jamInd the receiver reports
    jamming_state: int = 1  # MON-HW jammingState (1 ok)
    spoofing_state: int = 1  # NAV-STATUS spoofDetState (1 no spoofing indicated)
    # One system's signals carry an extra time error (ns): its own time shows it, the combined solution moves by the
    # used-satellite-weighted mean.
    system_offsets_ns: dict[Constellation, int] = field(default_factory=dict)
    fake_sky_seed: int | None = None  # a spoofer's own constellation: Sky(fake_sky_seed) replaces the real one


class SimReceiver:
    def __init__(self, seed: int, table: leap.LeapTable, position: SimPosition | None = None,
                 white_noise_ns: float = 2.0, receiver_clock_ppb: float = 420.0):
        self.table = table
        self.position = position or SimPosition()
        self.sky = Sky(seed)
        self.conditions = SkyConditions()
        self._seed = seed
        self._noise_ns = white_noise_ns
        self._noise_chunk: int | None = None
        self._noise_values: list[float] = []
        self._rx_clock_ppb = receiver_clock_ppb
        self._tick_phase = random.Random(seed).randrange(TICK_UNITS)
        self._no_fix_ns: tuple[int, int] | None = None  # [from, until) after a reset
        self._fake_skies: dict[int, Sky] = {}
        self._skies: dict[tuple[object, ...], tuple[SatInfo, ...]] = {}

    # --- the pulse -------------------------------------------------------------------------------------------
    def has_fix(self, second_tai_ns: int) -> bool:
        resetting = self._no_fix_ns is not None and self._no_fix_ns[0] <= second_tai_ns < self._no_fix_ns[1]
        return not self.conditions.blocked and not resetting

    def reset(self, at_true_ns: int, ttff_s: int = 30) -> None:
        """The receiver restarts at ``at_true_ns``: no fix, and no pulse, until its first fix ``ttff_s`` later."""
        self._no_fix_ns = (at_true_ns, at_true_ns + ttff_s * NS_PER_S)

    def time_error_ns(self, second_tai_ns: int) -> int:
        """Where the attacks put the receiver's second (positive: late): step + push + meaconing delay + the
        used-satellite-weighted share of the per-system offsets.  Without attacks, 0."""
        return self._common_error_ns(second_tai_ns) + self._system_share_ns(second_tai_ns)

    def ideal_error_ps(self, second_tai_ns: int) -> int:
        """How far the receiver's solution puts second ``second_tai_ns`` from the truth, before quantization."""
        return self.time_error_ns(second_tai_ns) * PS_PER_NS + round(self._white_ns(second_tai_ns) * PS_PER_NS)

    def _common_error_ns(self, second_tai_ns: int) -> int:
        """The part of the time error every system shares."""
        c = self.conditions
        error_ns = c.time_offset_ns + c.meaconing_delay_ns
        if c.push_since_ns is not None and second_tai_ns >= c.push_since_ns:
            error_ns += round(c.push_ns_per_s * (second_tai_ns - c.push_since_ns) / NS_PER_S)
        return error_ns

    def _system_share_ns(self, second_tai_ns: int) -> int:
        offsets = self.conditions.system_offsets_ns
        if not offsets:
            return 0  # and the sky is not consulted: without attacks, the C/N0 draws stay as they were
        used = [s for s in self.satellites(second_tai_ns) if s.used]
        return round(sum(offsets.get(s.constellation, 0) for s in used) / len(used)) if used else 0

    def qerr_ps(self, second_tai_ns: int) -> int:
        """ideal - actual for this second's pulse: the pulse leaves on the nearest tick of the receiver's clock."""
        # Exact arithmetic in sixths of a picosecond: one 48 MHz tick is 125,000 of them (20,833.3 ps), so a
        # receiver clock exactly on frequency puts every pulse at the same point of the sawtooth, as a real one does.
        ideal = (second_tai_ns * PS_PER_NS + self.ideal_error_ps(second_tai_ns)) * 6
        seconds = second_tai_ns // NS_PER_S
        # The receiver's clock runs fast by receiver_clock_ppb (ns per second), so its tick grid slides.
        grid = (self._tick_phase + round(seconds * self._rx_clock_ppb * PS_PER_NS * 6)) % TICK_UNITS
        past_tick = (ideal - grid) % TICK_UNITS
        return round((past_tick if past_tick <= TICK_UNITS // 2 else past_tick - TICK_UNITS) / 6)

    def edge_true_ns(self, second_tai_ns: int) -> int:
        """True instant (ns) of the pulse the receiver actually emits for this second."""
        error_ps = self.ideal_error_ps(second_tai_ns) - self.qerr_ps(second_tai_ns)
        return second_tai_ns + round(error_ps / PS_PER_NS)

    def _white_ns(self, second_tai_ns: int) -> float:
        # A function of (seed, second), so asking about a pulse twice, or out of order, gives the same answer;
        # drawn 4096 seconds at a time because a day of simulation asks 86,400 times.
        chunk, index = divmod(second_tai_ns // NS_PER_S, NOISE_CHUNK)
        if chunk != self._noise_chunk:
            rng = np.random.default_rng([self._seed, chunk])
            self._noise_values = (rng.standard_normal(NOISE_CHUNK) * self._noise_ns).tolist()
            self._noise_chunk = chunk
        return self._noise_values[index]

    # --- the sky ----------------------------------------------------------------------------------------------
    def satellites(self, second_tai_ns: int) -> tuple[SatInfo, ...]:
        """The satellites the receiver reports for this second, attacks included.

        Computed once per second and conditions (the sky draws its C/N0 noise in call order), so asking again, as
        the pulse and the burst both do, gives the same answer."""
        c = self.conditions
        fix = self.has_fix(second_tai_ns)
        key = (second_tai_ns, fix, c.fake_sky_seed, c.cn0_offset_db, self._uniform_dbhz(), self.sky.cn0_offset_db)
        if key not in self._skies:
            sky = self.sky if c.fake_sky_seed is None else self._fake_sky(c.fake_sky_seed)
            sats = _view(sky, second_tai_ns, not fix, c.cn0_offset_db)
            level = self._uniform_dbhz()
            if level is not None and fix:
                sats = self._alike(sats, level + c.cn0_offset_db, second_tai_ns)
            self._skies[key] = sats
            while len(self._skies) > CACHED_SKIES:
                del self._skies[next(iter(self._skies))]
        return self._skies[key]

    def _uniform_dbhz(self) -> float | None:
        c = self.conditions
        if c.cn0_uniform_dbhz is not None:
            return c.cn0_uniform_dbhz
        return c.meacon_cn0_dbhz if c.meaconing_delay_ns else None

    def fake_sky_seed(self) -> int:
        """The seed of a spoofer's own constellation: never the real sky's (a fake sky drawn from the receiver's own
        seed would be the real one, satellite for satellite: no attack at all)."""
        return FAKE_SKY_SEED if self._seed != FAKE_SKY_SEED else FAKE_SKY_SEED + 1

    def _fake_sky(self, seed: int) -> Sky:
        if seed not in self._fake_skies:
            self._fake_skies[seed] = Sky(seed)
        return self._fake_skies[seed]

    def _alike(self, sats: tuple[SatInfo, ...], level_dbhz: float, second_tai_ns: int) -> tuple[SatInfo, ...]:
        """One transmitter (a spoofer, a meacon) delivers every satellite at its own level, whatever the elevation."""
        rng = random.Random(f"{self._seed}:{second_tai_ns}")
        out = []
        for s in sats:
            cn0 = level_dbhz + rng.uniform(-UNIFORM_CN0_SPREAD_DB, UNIFORM_CN0_SPREAD_DB)
            tracked = cn0 >= 20
            out.append(SatInfo(s.constellation, s.prn, s.elevation_deg, s.azimuth_deg,
                               round(cn0) if tracked else None, s.used and tracked))
        return tuple(out)

    # --- the messages after the pulse ---------------------------------------------------------------------
    def burst(self, second_tai_ns: int) -> bytes:
        """Everything the receiver sends after the pulse of ``second_tai_ns``: NMEA and UBX for it, TIM-TP for the
        next.  Every UBX frame of the burst carries the iTOW of the labelled second, so they all join its epoch."""
        common_ns = self._common_error_ns(second_tai_ns)
        label_tai_ns = second_tai_ns + _whole_seconds_ns(common_ns + self._system_share_ns(second_tai_ns))
        utc = leap.tai_to_utc(label_tai_ns, self.table)
        fix = self.has_fix(second_tai_ns)
        sats = self.satellites(second_tai_ns)
        position = self._reported_position()
        out = [self._rmc(utc, fix, position), self._gga(utc, fix, sats, position)]
        out += self._gsa(sats, fix) + self._gsv(sats) + [self._zda(utc)]
        out.append(self._tim_tp(second_tai_ns + NS_PER_S, fix))
        out += self._system_times(label_tai_ns, second_tai_ns + common_ns, fix)
        out.append(self._timels(label_tai_ns))
        out += [self._nav_status(label_tai_ns, fix), self._mon_hw()]
        return b"".join(out)

    def _reported_position(self) -> SimPosition:
        """The antenna's position plus the pushed offset (north, east, up), on the WGS 84 ellipsoid's local radii."""
        p = self.position
        north_m, east_m, up_m = self.conditions.position_offset_m
        if not (north_m or east_m or up_m):
            return p
        lat = math.radians(p.lat_deg)
        w = math.sqrt(1 - WGS84_E2 * math.sin(lat) ** 2)
        meridian_m = WGS84_A_M * (1 - WGS84_E2) / w ** 3 + p.alt_m
        parallel_m = (WGS84_A_M / w + p.alt_m) * math.cos(lat)
        return SimPosition(p.lat_deg + math.degrees(north_m / meridian_m),
                           p.lon_deg + math.degrees(east_m / parallel_m), p.alt_m + up_m)

    def _hms(self, utc: leap.UtcTime) -> str:
        return f"{utc.hour:02d}{utc.minute:02d}{utc.second:02d}.00"

    def _latlon(self, p: SimPosition) -> str:
        lat, lon = abs(p.lat_deg), abs(p.lon_deg)
        lat_s = f"{int(lat):02d}{(lat - int(lat)) * 60:08.5f},{'N' if p.lat_deg >= 0 else 'S'}"
        lon_s = f"{int(lon):03d}{(lon - int(lon)) * 60:08.5f},{'E' if p.lon_deg >= 0 else 'W'}"
        return f"{lat_s},{lon_s}"

    def _rmc(self, utc: leap.UtcTime, fix: bool, position: SimPosition) -> bytes:
        date = f"{utc.day:02d}{utc.month:02d}{utc.year % 100:02d}"
        body = (f"GNRMC,{self._hms(utc)},A,{self._latlon(position)},0.010,,{date},,,A,V" if fix
                else f"GNRMC,{self._hms(utc)},V,,,,,,,{date},,,N,V")
        return nmea_sentence_bytes(body)

    def _gga(self, utc: leap.UtcTime, fix: bool, sats: tuple[SatInfo, ...], position: SimPosition) -> bytes:
        if not fix:
            return nmea_sentence_bytes(f"GNGGA,{self._hms(utc)},,,,,0,00,99.99,,,,,,")
        used = min(12, sum(1 for s in sats if s.used))
        return nmea_sentence_bytes(f"GNGGA,{self._hms(utc)},{self._latlon(position)},1,{used:02d},0.62,"
                                   f"{position.alt_m:.1f},M,47.0,M,,")

    def _gsa(self, sats: tuple[SatInfo, ...], fix: bool) -> list[bytes]:
        out = []
        for const, system in SYSTEM_IDS.items():
            prns = [f"{s.prn:02d}" for s in sats if s.constellation is const and s.used][:12] if fix else []
            fields = ",".join(prns + [""] * (12 - len(prns)))
            out.append(nmea_sentence_bytes(f"GNGSA,A,{3 if fix else 1},{fields},1.12,0.62,0.94,{system}"))
        return out

    def _gsv(self, sats: tuple[SatInfo, ...]) -> list[bytes]:
        out = []
        for const, (talker, signal) in GSV_TALKERS.items():
            mine = [s for s in sats if s.constellation is const]
            parts = max(1, math.ceil(len(mine) / 4))
            for part in range(parts):
                blocks = ",".join(f"{s.prn:02d},{s.elevation_deg:02d},{s.azimuth_deg:03d},"
                                  f"{'' if s.cn0_dbhz is None else f'{s.cn0_dbhz:02d}'}"
                                  for s in mine[part * 4:part * 4 + 4])
                sep = "," if blocks else ""
                out.append(nmea_sentence_bytes(f"{talker}GSV,{parts},{part + 1},{len(mine):02d}{sep}{blocks},{signal}"))
        return out

    def _zda(self, utc: leap.UtcTime) -> bytes:
        return nmea_sentence_bytes(f"GNZDA,{self._hms(utc)},{utc.day:02d},{utc.month:02d},{utc.year:04d},00,00")

    def _tim_tp(self, next_second_tai_ns: int, fix: bool) -> bytes:
        gps_s = next_second_tai_ns // NS_PER_S - GPS_EPOCH_TAI_S
        week, tow_s = divmod(gps_s, WEEK_S)
        flags = 0x03 if fix else 0x13  # bit 4: qErr invalid
        payload = encode_payload("TIM-TP", tow_ms=tow_s * 1000, qerr_ps=self.qerr_ps(next_second_tai_ns),
                                 week=week, flags=flags)
        return ubx_frame_bytes(0x0D, 0x01, payload)

    def _system_times(self, label_tai_ns: int, common_tai_ns: int, fix: bool) -> list[bytes]:
        """NAV-TIMEGPS/GAL/BDS: where each system's solution puts the epoch, ``common_tai_ns`` (the truth plus the
        error all systems share) plus that system's own offset; time of week and week valid only with a fix.

        leapS is filled but not flagged valid, so the appliance hears leap seconds once a second, from NAV-TIMELS, as
        before: flagged, NAV-TIMEGPS would add a LeapInfo event every second and hand the epoch assembler an
        iTOW-to-UTC mapping, changing what existing simulation runs see.  GPS's iTOW is the labelled second's, so
        its fraction (fTOW) carries the whole offset, saturating at the I4 field's +-2.1 s."""
        week, itow_ms = _week_itow_ms(label_tai_ns)
        gps_utc_s = self.table.tai_utc_at_tai_ns(label_tai_ns) - 19
        valid, tacc_ns = (0x03, 10) if fix else (0x00, 0)
        out = []
        for system, msg_id, kind in SYSTEM_TIME_FRAMES:
            at_ns = common_tai_ns + self.conditions.system_offsets_ns.get(system, 0)
            leap_s = gps_utc_s + SYSTEM_MINUS_GPS_LEAP_S[system]
            if system is Constellation.GPS:  # iTOW is GPS's own time of week: the rest goes in the fraction
                ftow_ns = max(-I4_LIMIT, min(I4_LIMIT, at_ns - label_tai_ns))
                payload = encode_payload(kind, itow_ms=itow_ms, ftow_ns=ftow_ns, week=week, leap_s=leap_s,
                                         valid=valid, tacc_ns=tacc_ns)
            else:
                sys_week, tow_s, ftow_ns = tai_ns_to_system_time(system, at_ns)
                payload = encode_payload(kind, itow_ms=itow_ms, tow_s=tow_s, ftow_ns=ftow_ns, week=sys_week,
                                         leap_s=leap_s, valid=valid, tacc_ns=tacc_ns)
            out.append(ubx_frame_bytes(0x01, msg_id, payload))
        return out

    def _nav_status(self, label_tai_ns: int, fix: bool) -> bytes:
        payload = encode_payload("NAV-STATUS", itow_ms=_week_itow_ms(label_tai_ns)[1], gps_fix=3 if fix else 0,
                                 flags=0x0D if fix else 0x0C, spoofing_state=self.conditions.spoofing_state)
        return ubx_frame_bytes(0x01, 0x03, payload)

    def _mon_hw(self) -> bytes:
        c = self.conditions
        return ubx_frame_bytes(0x0A, 0x09, encode_payload("MON-HW", jam_indicator=c.jam_indicator,
                                                          jamming_state=c.jamming_state))

    def _timels(self, label_tai_ns: int) -> bytes:
        itow_ms = _week_itow_ms(label_tai_ns)[1]
        current_ls = self.table.tai_utc_at_tai_ns(label_tai_ns) - 19
        change = self.table.next_change_after(label_tai_ns)
        if change is None:
            payload = encode_payload("NAV-TIMELS", itow_ms=itow_ms, current_ls=current_ls, valid=0x01)
        else:
            at_ns, delta = change
            payload = encode_payload("NAV-TIMELS", itow_ms=itow_ms, current_ls=current_ls, change=delta,
                                     time_to_event_s=(at_ns - label_tai_ns) // NS_PER_S, valid=0x03)
        return ubx_frame_bytes(0x01, 0x26, payload)


def _week_itow_ms(label_tai_ns: int) -> tuple[int, int]:
    """GPS week and time of week (ms) of a labelled second: the iTOW every UBX frame of its burst carries."""
    week, tow_s = divmod(label_tai_ns // NS_PER_S - GPS_EPOCH_TAI_S, WEEK_S)
    return week, tow_s * 1000


def _whole_seconds_ns(error_ns: int) -> int:
    """The whole seconds of a time error, towards zero: a pulse a little early is still labelled its own second."""
    whole_ns = abs(error_ns) // NS_PER_S * NS_PER_S
    return whole_ns if error_ns >= 0 else -whole_ns


def _view(sky: Sky, true_ns: int, blocked: bool, extra_db: float) -> tuple[SatInfo, ...]:
    """Sky.view with ``extra_db`` more on every C/N0: the sky applies it, and its own 20 dB-Hz tracking threshold."""
    own_db = sky.cn0_offset_db
    sky.cn0_offset_db = own_db + extra_db
    try:
        return sky.view(true_ns, blocked=blocked)
    finally:
        sky.cn0_offset_db = own_db
