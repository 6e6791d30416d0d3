"""Frozen event records that flow from the edges through the core to the outputs.  Pure data, no I/O."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Constellation(str, enum.Enum):
    GPS = "GPS"
    GLONASS = "GLONASS"
    GALILEO = "Galileo"
    BEIDOU = "BeiDou"
    QZSS = "QZSS"
    NAVIC = "NavIC"
    SBAS = "SBAS"
    UNKNOWN = "unknown"


class FixMode(enum.IntEnum):
    """Fix dimension, numbered as gpsd's TPV ``mode`` (0 unknown, 1 none, 2 2D, 3 3D)."""

    UNKNOWN = 0
    NO_FIX = 1
    FIX_2D = 2
    FIX_3D = 3


class ReceiverState(str, enum.Enum):
    """What the appliance knows about its receiver, worst first."""

    DISCONNECTED = "disconnected"  # device absent or failing; the reader is retrying
    NO_DATA = "no-data"  # device open, nothing decodable arriving
    NO_FIX = "no-fix"  # receiver talks but has no valid time/position
    FIX_2D = "2d-fix"
    FIX_3D = "3d-fix"
    TIME_ONLY = "time-only"  # timing receiver on a surveyed/fixed position (u-blox gpsFix 5)


class Severity(str, enum.Enum):
    """ITU-T X.733 perceived severities (the alarm catalogue in ``alarms.py`` gives each alarm its one severity)."""

    INFO = "info"
    WARNING = "warning"
    MINOR = "minor"
    MAJOR = "major"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class SatInfo:
    """One satellite as the receiver sees it.  ``prn`` is the constellation's own number (1-based)."""

    constellation: Constellation
    prn: int
    elevation_deg: int | None = None
    azimuth_deg: int | None = None
    cn0_dbhz: int | None = None
    used: bool = False


@dataclass(frozen=True, slots=True)
class Position:
    lat_deg: float
    lon_deg: float
    alt_m: float | None = None  # above mean sea level where the receiver says so (u-blox NAV-SOL: the ellipsoid)


@dataclass(frozen=True, slots=True)
class PpsEdge:
    """A pulse-per-second edge stamped on the local clock (``raw_ns``); ``sequence`` from the PPS source."""

    raw_ns: int
    sequence: int
    source: str = "pps"


@dataclass(frozen=True, slots=True)
class TimeLabel:
    """The receiver's statement "the PPS edge that began this second was ``tai_ns``".

    ``rx_raw_ns`` is when the statement's first byte arrived on the local clock; pairing uses it to reject
    stale labels.  ``valid`` is the receiver's own time-validity flag.
    """

    tai_ns: int
    utc_text: str
    rx_raw_ns: int
    valid: bool
    source: str = "nmea"


@dataclass(frozen=True, slots=True)
class ReceiverWrite:
    """Bytes the core asks the receiver's line to send (a set-up command, a poll)."""

    ref: str
    data: bytes
    what: str


@dataclass(frozen=True, slots=True)
class ReceiverBaud:
    """The core asks the receiver's line to change speed (hunting for the receiver's rate, or following a change it
    just made in the receiver)."""

    ref: str
    baud: int


@dataclass(frozen=True, slots=True)
class ReceiverNews:
    """What the set-up found or did to a receiver (its identity, the set-up's outcome): logged and audited."""

    ref: str
    text: str
    at_ns: int


@dataclass(frozen=True, slots=True)
class ReceiverFault:
    """A receiver's own fault raised or cleared: antenna, set-up, answering, restart (``code`` from the alarm
    catalogue; the router joins every receiver's into one alarm per code)."""

    ref: str
    code: str
    active: bool
    text: str
    at_ns: int


@dataclass(frozen=True, slots=True)
class TimePulseInfo:
    """u-blox TIM-TP: the quantization error of the *next* pulse, in picoseconds."""

    qerr_ps: int
    pulse_tai_ns: int | None
    rx_raw_ns: int


@dataclass(frozen=True, slots=True)
class LeapInfo:
    """What the receiver says about UTC: TAI-UTC now and a scheduled change (+1/-1 at ``effective_tai_ns``)."""

    tai_utc_s: int
    pending_change_s: int = 0
    effective_tai_ns: int | None = None
    source: str = "receiver"


@dataclass(frozen=True, slots=True)
class GnssEpoch:
    """Everything one receiver epoch said, assembled from its sentences/frames."""

    utc_text: str | None  # ISO 8601 with milliseconds, "Z"; None if the epoch carried no time
    tai_ns: int | None
    time_valid: bool
    fix_mode: FixMode
    position: Position | None
    satellites: tuple[SatInfo, ...] = ()
    used_count: int | None = None  # satellites used, when the receiver reports a count but not the list
    hdop: float | None = None
    rx_raw_ns: int = 0
    sources: tuple[str, ...] = ()  # sentence / frame types that contributed
    time_only: bool = False  # timing receiver in fixed-position mode (u-blox gpsFix 5)
    jam_indicator: int | None = None  # u-blox MON-HW jamInd: 0 no CW jamming .. 255 strong
    jamming_state: int | None = None  # MON-HW jammingState: 0 unknown/disabled, 1 ok, 2 warning, 3 critical
    spoofing_state: int | None = None  # NAV-STATUS spoofDetState: 0 unknown, 1 none, 2 indicated, 3 multiple
    # Where each system's own time solution (NAV-TIMEGPS/GAL/BDS) puts this epoch, in ns on the TAI axis, minus where
    # GPS puts it (GPS's own entry is then 0), or minus ``tai_ns`` when GPS did not report.  Positive: that system
    # says the epoch is later.  Only systems reporting a valid time of week and week; () when none did.
    system_offsets_ns: tuple[tuple[Constellation, int], ...] = ()
    # The receiver's antenna supervisor (u-blox MON-HW aStatus/aPower, MON-RF antStatus/antPower): "ok", "short",
    # "open" or "unknown"; power "on", "off" or "unknown".  None when the receiver did not say this epoch.
    antenna_status: str | None = None
    antenna_power: str | None = None


@dataclass(frozen=True, slots=True)
class ReceiverStateChanged:
    old: ReceiverState
    new: ReceiverState
    reason: str
    at_ns: int


@dataclass(frozen=True, slots=True)
class DeviceEvent:
    """The serial edge opened, lost or failed to open the receiver's device."""

    device: str
    connected: bool
    reason: str
    at_ns: int


@dataclass(frozen=True, slots=True)
class ClockStateChanged:
    """The disciplined clock changed state; ``at_ns`` is on the raw axis from the engine, TAI once routed."""

    old: str
    new: str
    reason: str
    at_ns: int


@dataclass(frozen=True, slots=True)
class SetFrequency:
    """Action: run the served clock at (1 + freq_ppb * 1e-9) times the local oscillator's rate from ``at_raw_ns``."""

    freq_ppb: float
    at_raw_ns: int


@dataclass(frozen=True, slots=True)
class StepClock:
    """Action: jump the served clock by ``delta_ns`` at ``at_raw_ns`` (first lock only, never after)."""

    delta_ns: int
    at_raw_ns: int


@dataclass(frozen=True, slots=True)
class Alarm:
    code: str
    severity: Severity
    raised: bool
    text: str
    at_ns: int


@dataclass(frozen=True, slots=True)
class PairedSecond:
    """A PPS edge joined to the label of its second: the input to the phase detector."""

    edge_raw_ns: int
    label_tai_ns: int
    qerr_ps: int | None = None
    sequence: int = 0


@dataclass(frozen=True, slots=True)
class Rejected:
    """An input the core threw away, with the reason it is counted under."""

    what: str
    reason: str
    detail: str = ""
    extra: dict = field(default_factory=dict, compare=False)
