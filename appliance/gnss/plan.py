"""What the appliance sets up in a GNSS receiver, whatever its family: one plan, built from the settings.

Pure core.  The family encoders turn it into their own commands: ``gnss/ubxcfg.py`` into UBX CFG-VALSET items (u-blox
generation 9 and later) or CFG-* messages (M8T and older), ``gnss/unicore.py`` into Unicore ASCII commands.  The
antenna cable delay is compensated in one place only, the appliance (``gnss.cable_delay_ns`` on every PPS edge, live
and audited): every plan sets the receiver's own cable delay to 0.
"""

from __future__ import annotations

from dataclasses import dataclass

# The messages the appliance reads, by the receiver's own names.  u-blox: UBX for time, fix, sky, receiver health
# and survey-in, plus the NMEA sentences an NMEA-only tool on the same line would expect.
# NAV-TIMEGPS/GAL/BDS give each system's own time of the epoch, which the integrity checks compare.
UBX_MESSAGES = ("NAV-PVT", "NAV-STATUS", "NAV-TIMEUTC", "NAV-TIMEGPS", "NAV-TIMEGAL", "NAV-TIMEBDS", "NAV-TIMELS",
                "NAV-SAT", "TIM-TP", "TIM-SVIN", "MON-HW", "MON-RF")
NMEA_MESSAGES = ("RMC", "GGA", "GSA", "GSV", "ZDA")
FAMILIES = ("ublox9", "ublox8", "unicore")
STORES = ("ram", "bbr", "flash")


@dataclass(frozen=True)
class ReceiverPlan:
    """The receiver's set-up.  Positions are WGS-84; ``fixed_height_m`` is above the ellipsoid (what receivers take
    in timing mode), not above mean sea level."""

    mode: str = "survey"  # "survey": survey-in, then fixed; "fixed": the position below
    survey_min_s: int = 3600
    survey_acc_limit_m: float = 10.0
    fixed_lat_deg: float = 0.0
    fixed_lon_deg: float = 0.0
    fixed_height_m: float = 0.0  # above the WGS-84 ellipsoid
    fixed_acc_m: float = 1.0  # how well the fixed position is known
    pulse_period_ms: int = 1000
    pulse_length_ms: int = 100
    pulse_rising: bool = True  # the edge on the second rises
    constellations: tuple[str, ...] = ("gps", "galileo", "beidou", "glonass")  # empty: the receiver's own choice
    baud: int = 9600
    store: str = "ram"  # "ram", or also "bbr" / "flash"
    cable_delay_ns: int = 0  # always 0: the appliance compensates the cable delay

    def __post_init__(self) -> None:
        if self.mode not in ("survey", "fixed"):
            raise ValueError(f"timing mode {self.mode!r}: expected survey or fixed")
        if self.store not in STORES:
            raise ValueError(f"store {self.store!r}: expected one of {', '.join(STORES)}")
        if not 0 < self.pulse_length_ms < self.pulse_period_ms:
            raise ValueError(f"pulse length {self.pulse_length_ms} ms must be within the period")
