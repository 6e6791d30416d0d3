"""The simulated timing receiver: from true time to the bytes and PPS edges a real one would produce.

Pure: every method takes the true instant it describes; the caller (an in-process driver under the scheduler, or the
pseudo-terminal writer) decides when to call it.  It models a multi-constellation timing receiver such as a u-blox
ZED-F9T.  By default it sends NMEA 4.11 (RMC, GGA, GSA per system, GSV per constellation, ZDA) plus UBX TIM-TP (the
next pulse's quantization error), NAV-TIMEGPS/GAL/BDS (each system's time of the epoch), NAV-TIMELS (leap second
announcements), NAV-STATUS (fix and spoofing flag) and MON-HW (jamming indicator, antenna); ``messages`` chooses
another set (``MESSAGE_SETS`` names the ones real receivers send: a configured F9T, an older u-blox 8 without NAV-PVT,
NMEA alone, a u-blox out of the box), and ``time_only`` puts it in fixed-position timing mode.  ``sim/messages.py``
says what each message contains.  The PPS edge is quantized to the receiver's 48 MHz clock, producing the familiar
+-10 ns sawtooth that TIM-TP's qErr describes; u-blox's sign convention holds: ``qErr = ideal - actual``, so adding
qErr to a measured edge removes the sawtooth.

The receiver also has a command side (``family``): a u-blox of generation 9 or 8 (``sim/ubxdevice.py``) or a Unicore
board (``sim/unicoredevice.py``) that answers what the appliance writes (``accept``).  Its configuration is what the
burst sends: the messages it enables, and its timing mode: survey-in (reported by TIM-SVIN, time-only fixes once the
survey has its duration and accuracy) or a fixed position (time-only fixes at once).  It starts as set up before (the
default message set, navigation mode); a reset brings back what its own memory keeps (factory settings unless saved).

Scenarios stage attacks by changing ``SimReceiver.conditions`` while it runs: time steps and slow pushes, position
pushes, meaconing, a spoofer's own sky or a single transmitter's uniform C/N0, jamming, one constellation spoofed,
and receiver resets.  Time errors follow one sign: positive puts the receiver's second (its pulse) late.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from appliance import leap
from appliance.events import Constellation, SatInfo
from appliance.gnss.framer import ubx_frame_bytes
from appliance.gnss.ubx import GPS_EPOCH_TAI_S, WEEK_S, encode_payload
from appliance.sim.messages import MESSAGE_ORDER, MESSAGES, Report, SimPosition, SurveyReport
from appliance.sim.sky import Sky
from appliance.units import NS_PER_S, PS_PER_NS

__all__ = ["MESSAGE_SETS", "SimPosition", "SimReceiver", "SkyConditions"]

NOISE_CHUNK = 4096
TICK_UNITS = 125_000  # one period of a 48 MHz receiver clock, in sixths of a picosecond
WGS84_A_M = 6_378_137.0
WGS84_E2 = 6.694_379_990_14e-3
UNIFORM_CN0_SPREAD_DB = 0.45  # one transmitter: every satellite within this of its level
CACHED_SKIES = 4
SURVEY_SCATTER_M = 3.0  # rms scatter of one fix in a survey-in; the mean's shrinks with the fixes averaged

# The message sets real receivers send each second, by the receiver's own message names.
MESSAGE_SETS: dict[str, frozenset[str]] = {
    # What the simulator has always sent: a ZED-F9T with NMEA and the UBX timing messages.
    "default": frozenset({"RMC", "GGA", "GSA", "GSV", "ZDA", "TIM-TP", "NAV-TIMEGPS", "NAV-TIMEGAL", "NAV-TIMEBDS",
                          "NAV-TIMELS", "NAV-STATUS", "MON-HW"}),
    # A generation-9 timing receiver (ZED-F9T) configured for UBX alone; MON-RF replaces the deprecated MON-HW.
    "ubx-gen9": frozenset({"NAV-PVT", "NAV-SAT", "NAV-TIMEUTC", "NAV-TIMELS", "NAV-STATUS", "TIM-TP", "MON-RF"}),
    # An older u-blox 8 / M8T: NAV-SOL and NAV-SVINFO where later receivers send NAV-PVT and NAV-SAT; no NMEA.
    "ubx-m8-legacy": frozenset({"NAV-SOL", "NAV-TIMEGPS", "NAV-SVINFO", "NAV-DOP", "NAV-TIMEUTC", "TIM-TP",
                                "MON-HW"}),
    # An NMEA-only receiver.
    "nmea": frozenset({"RMC", "GGA", "GSA", "GSV", "ZDA"}),
    # A u-blox as it leaves the factory: the NMEA sentences it sends unconfigured, no UBX, no ZDA.
    "factory-ublox": frozenset({"RMC", "VTG", "GGA", "GSA", "GSV", "GLL"}),
}
MESSAGE_NAMES = frozenset(MESSAGE_ORDER)

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
    antenna_status: int = 2  # MON-HW aStatus / MON-RF antStatus: 2 ok, 3 short, 4 open
    antenna_power: int = 1  # MON-HW aPower / MON-RF antPower: 1 on, 0 off
    spoofing_state: int = 1  # NAV-STATUS spoofDetState (1 no spoofing indicated)
    # One system's signals carry an extra time error (ns): its own time shows it, the combined solution moves by the
    # used-satellite-weighted mean.
    system_offsets_ns: dict[Constellation, int] = field(default_factory=dict)
    fake_sky_seed: int | None = None  # a spoofer's own constellation: Sky(fake_sky_seed) replaces the real one


class SimReceiver:
    """``messages``: the names of the messages each burst carries (``MESSAGE_SETS["default"]`` when None; see
    ``MESSAGE_ORDER`` for every name).  ``time_only``: fixed-position timing mode, where NAV-PVT, NAV-STATUS and
    NAV-SOL report a time-only fix (gpsFix 5) and GGA keeps reporting the position, as a u-blox timing receiver
    does."""

    def __init__(self, seed: int, table: leap.LeapTable, position: SimPosition | None = None,
                 white_noise_ns: float = 2.0, receiver_clock_ppb: float = 420.0,
                 messages: Iterable[str] | None = None, time_only: bool = False, family: str = "ublox9"):
        self.table = table
        self.position = position or SimPosition()
        self.family = family
        self.device = _device(family)
        first = MESSAGE_SETS["nmea"] if family in ("unicore", "nmea") else MESSAGE_SETS["default"]
        self.messages: set[str] = set(first if messages is None else messages)
        self.line_baud: int | None = None  # the appliance's line speed (not modelled: bytes are not re-timed)
        self.mute = False  # a receiver that stops answering commands (its data still flows)
        self._device_said = self._device_state()
        self._survey_since_ns: int | None = None
        unknown = self.messages - MESSAGE_NAMES
        if unknown:
            raise ValueError(f"unknown message {', '.join(sorted(unknown))}; known: {', '.join(MESSAGE_ORDER)}")
        self.time_only = time_only
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
        antenna_fault = self.conditions.antenna_status in (3, 4)  # short or open: no signal reaches the receiver
        return not self.conditions.blocked and not resetting and not antenna_fault

    def reset(self, at_true_ns: int, ttff_s: int = 30) -> None:
        """The receiver restarts at ``at_true_ns``: no fix, and no pulse, until its first fix ``ttff_s`` later; its
        configuration is what its memory kept (the factory's, unless saved to battery-backed RAM or flash)."""
        self._no_fix_ns = (at_true_ns, at_true_ns + ttff_s * NS_PER_S)
        if self.device is not None:
            self.device.reset()
            self._follow_device(at_true_ns)

    def change_firmware(self, firmware: str, at_true_ns: int) -> None:
        """The receiver comes back from an update with another firmware: a restart."""
        if self.device is not None:
            self.device.firmware = firmware
            if hasattr(self.device, "version"):  # a Unicore board reports its version as a whole
                self.device.version = type(self.device.version)(**{**vars_of(self.device.version),
                                                                   "firmware": firmware})
        self.reset(at_true_ns, 30)

    # --- the command side -------------------------------------------------------------------------------------
    def accept(self, data: bytes, true_ns: int) -> bytes:
        """What the appliance wrote to the receiver; the receiver's answers (nothing from an NMEA-only receiver or a
        mute one)."""
        if self.device is None or self.mute:
            return b""
        reply = self.device.accept(data)
        self._follow_device(true_ns)
        return bytes(reply)

    def _device_state(self) -> tuple[object, ...]:
        d = self.device
        if d is None:
            return ()
        return (frozenset(d.messages), d.timing_mode, d.survey_min_s, d.survey_acc_limit_m)

    def _follow_device(self, true_ns: int) -> None:
        """Send what the device's configuration now says, once it says something new."""
        said = self._device_state()
        if said == self._device_said:
            return
        old, self._device_said = self._device_said, said
        d = self.device
        assert d is not None
        if not old or old[0] != said[0]:
            self.messages = {m for m in d.messages if m in MESSAGE_NAMES}
        if not old or old[1:] != said[1:]:
            self._survey_since_ns = true_ns if d.timing_mode == "survey" else None
            self.time_only = d.timing_mode == "fixed"

    def survey(self, second_tai_ns: int) -> SurveyReport | None:
        """The receiver's survey-in at this second: its duration, the scatter of its mean (shrinking as fixes
        accumulate), and whether it is done (then its fixes are time only)."""
        d, since = self.device, self._survey_since_ns
        if d is None or since is None or d.timing_mode != "survey":
            return None
        duration_s = max(0, (second_tai_ns - since) // NS_PER_S)
        std_m = SURVEY_SCATTER_M / math.sqrt(1 + duration_s / 60)
        done = duration_s >= d.survey_min_s and std_m <= d.survey_acc_limit_m
        if done and not self.time_only:
            self.time_only = True
        return SurveyReport(duration_s, round((std_m * 1000) ** 2), done, not done)

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
        """Everything the receiver sends after the pulse of ``second_tai_ns``: the messages of ``self.messages`` for
        it, TIM-TP for the next.  Every UBX frame of the burst carries the iTOW of the labelled second, so they all
        join its epoch."""
        report = self.report(second_tai_ns)
        out: list[bytes] = []
        for name in MESSAGE_ORDER:
            if name not in self.messages:
                continue
            if name == "TIM-TP":
                out.append(self._tim_tp(second_tai_ns + NS_PER_S, report.fix))
                continue
            said = MESSAGES[name](report)
            out += said if isinstance(said, list) else [said]
        return b"".join(out)

    def report(self, second_tai_ns: int) -> Report:
        """What the receiver knows about the second it labels after the pulse of ``second_tai_ns``."""
        common_ns = self._common_error_ns(second_tai_ns)
        label_tai_ns = second_tai_ns + _whole_seconds_ns(common_ns + self._system_share_ns(second_tai_ns))
        c = self.conditions
        # NAV-TIMEGPS flags its leapS valid in every set but the default one, whose bytes predate the flag: the
        # appliance hears leap seconds there from NAV-TIMELS alone, once a second, as existing runs expect.
        gps_leap_valid = self.messages != MESSAGE_SETS["default"]
        survey = self.survey(second_tai_ns)
        return Report(label_tai_ns, second_tai_ns + common_ns, leap.tai_to_utc(label_tai_ns, self.table),
                      self.has_fix(second_tai_ns), self.time_only, self.satellites(second_tai_ns),
                      self._reported_position(), self.table, c.system_offsets_ns, c.spoofing_state, c.jam_indicator,
                      c.jamming_state, c.antenna_status, c.antenna_power, gps_leap_valid, survey)

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

    def _tim_tp(self, next_second_tai_ns: int, fix: bool) -> bytes:
        gps_s = next_second_tai_ns // NS_PER_S - GPS_EPOCH_TAI_S
        week, tow_s = divmod(gps_s, WEEK_S)
        flags = 0x03 if fix else 0x13  # bit 4: qErr invalid
        payload = encode_payload("TIM-TP", tow_ms=tow_s * 1000, qerr_ps=self.qerr_ps(next_second_tai_ns),
                                 week=week, flags=flags)
        return ubx_frame_bytes(0x0D, 0x01, payload)


def _device(family: str) -> Any:
    if family in ("ublox9", "ublox8"):
        from appliance.sim.ubxdevice import SimUblox

        return SimUblox(9 if family == "ublox9" else 8)
    if family == "unicore":
        from appliance.sim.unicoredevice import SimUnicore

        return SimUnicore()
    if family == "nmea":
        return None
    raise ValueError(f"receiver family {family!r}: expected ublox9, ublox8, unicore or nmea")


def vars_of(obj: Any) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


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
