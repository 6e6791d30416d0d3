"""The simulated timing receiver: from true time to the bytes and PPS edges a real one would produce.

Pure: every method takes the true instant it describes; the caller (an in-process driver under the scheduler, or the
pseudo-terminal writer) decides when to call it.  It models a multi-constellation timing receiver such as a u-blox
ZED-F9T: NMEA 4.11 (RMC, GGA, GSA per system, GSV per constellation, ZDA) plus UBX TIM-TP (the next pulse's
quantization error) and NAV-TIMELS (leap second announcements).  The PPS edge is quantized to the receiver's 48 MHz
clock, producing the familiar +-10 ns sawtooth that TIM-TP's qErr describes; u-blox's sign convention holds:
``qErr = ideal - actual``, so adding qErr to a measured edge removes the sawtooth.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from appliance import leap
from appliance.events import Constellation, SatInfo
from appliance.gnss.framer import nmea_sentence_bytes, ubx_frame_bytes
from appliance.gnss.ubx import encode_payload
from appliance.sim.sky import Sky

NS_PER_S = 1_000_000_000
PS_PER_NS = 1000
GPS_EPOCH_TAI_S = 315_964_819  # 1980-01-06T00:00:00 UTC = 1980-01-06T00:00:19 TAI
NOISE_CHUNK = 4096
TICK_UNITS = 125_000  # one period of a 48 MHz receiver clock, in sixths of a picosecond
SYSTEM_IDS = {Constellation.GPS: 1, Constellation.GLONASS: 2, Constellation.GALILEO: 3, Constellation.BEIDOU: 4}
GSV_TALKERS = {Constellation.GPS: ("GP", "1"), Constellation.GLONASS: ("GL", "1"),
               Constellation.GALILEO: ("GA", "7"), Constellation.BEIDOU: ("GB", "1")}


@dataclass(frozen=True)
class SimPosition:
    lat_deg: float = 46.2044
    lon_deg: float = 6.1432
    alt_m: float = 375.0


@dataclass
class SkyConditions:
    """What scenarios change: whether the antenna sees the sky, and extra receiver time error."""

    blocked: bool = False
    time_offset_ns: int = 0  # added to the receiver's idea of time (spoofing, scenarios)


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

    # --- the pulse -------------------------------------------------------------------------------------------
    def has_fix(self, second_tai_ns: int) -> bool:
        return not self.conditions.blocked

    def ideal_error_ps(self, second_tai_ns: int) -> int:
        """How far the receiver's solution puts second ``second_tai_ns`` from the truth, before quantization."""
        return self.conditions.time_offset_ns * PS_PER_NS + round(self._white_ns(second_tai_ns) * PS_PER_NS)

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

    # --- the messages after the pulse ---------------------------------------------------------------------
    def burst(self, second_tai_ns: int) -> bytes:
        """Everything the receiver sends after the pulse of ``second_tai_ns``: NMEA for it, TIM-TP for the next."""
        label_tai_ns = second_tai_ns + self.conditions.time_offset_ns // NS_PER_S * NS_PER_S
        utc = leap.tai_to_utc(label_tai_ns, self.table)
        fix = self.has_fix(second_tai_ns)
        sats = self.sky.view(second_tai_ns, blocked=not fix)
        out = [self._rmc(utc, fix), self._gga(utc, fix, sats)]
        out += self._gsa(sats, fix) + self._gsv(sats) + [self._zda(utc)]
        out.append(self._tim_tp(second_tai_ns + NS_PER_S, fix))
        out.append(self._timels(label_tai_ns))
        return b"".join(out)

    def _hms(self, utc: leap.UtcTime) -> str:
        return f"{utc.hour:02d}{utc.minute:02d}{utc.second:02d}.00"

    def _latlon(self) -> str:
        p = self.position
        lat, lon = abs(p.lat_deg), abs(p.lon_deg)
        lat_s = f"{int(lat):02d}{(lat - int(lat)) * 60:08.5f},{'N' if p.lat_deg >= 0 else 'S'}"
        lon_s = f"{int(lon):03d}{(lon - int(lon)) * 60:08.5f},{'E' if p.lon_deg >= 0 else 'W'}"
        return f"{lat_s},{lon_s}"

    def _rmc(self, utc: leap.UtcTime, fix: bool) -> bytes:
        date = f"{utc.day:02d}{utc.month:02d}{utc.year % 100:02d}"
        body = (f"GNRMC,{self._hms(utc)},A,{self._latlon()},0.010,,{date},,,A,V" if fix
                else f"GNRMC,{self._hms(utc)},V,,,,,,,{date},,,N,V")
        return nmea_sentence_bytes(body)

    def _gga(self, utc: leap.UtcTime, fix: bool, sats: tuple[SatInfo, ...]) -> bytes:
        if not fix:
            return nmea_sentence_bytes(f"GNGGA,{self._hms(utc)},,,,,0,00,99.99,,,,,,")
        used = min(12, sum(1 for s in sats if s.used))
        return nmea_sentence_bytes(f"GNGGA,{self._hms(utc)},{self._latlon()},1,{used:02d},0.62,"
                                   f"{self.position.alt_m:.1f},M,47.0,M,,")

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
        week, tow_s = divmod(gps_s, 7 * 86_400)
        flags = 0x03 if fix else 0x13  # bit 4: qErr invalid
        payload = encode_payload("TIM-TP", tow_ms=tow_s * 1000, qerr_ps=self.qerr_ps(next_second_tai_ns),
                                 week=week, flags=flags)
        return ubx_frame_bytes(0x0D, 0x01, payload)

    def _timels(self, label_tai_ns: int) -> bytes:
        gps_s = label_tai_ns // NS_PER_S - GPS_EPOCH_TAI_S
        itow_ms = gps_s % (7 * 86_400) * 1000
        current_ls = self.table.tai_utc_at_tai_ns(label_tai_ns) - 19
        change = self.table.next_change_after(label_tai_ns)
        if change is None:
            payload = encode_payload("NAV-TIMELS", itow_ms=itow_ms, current_ls=current_ls, valid=0x01)
        else:
            at_ns, delta = change
            payload = encode_payload("NAV-TIMELS", itow_ms=itow_ms, current_ls=current_ls, change=delta,
                                     time_to_event_s=(at_ns - label_tai_ns) // NS_PER_S, valid=0x03)
        return ubx_frame_bytes(0x01, 0x26, payload)
