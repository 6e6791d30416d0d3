"""Survey-in: average the receiver's 3D fixes into the antenna's timing home position, or take a configured one.

Pure core.  A timing receiver solves for time alone once it knows where its antenna is, and every metre of position
error is up to ~3.3 ns of time error; the integrity checks also need a home to notice a position that moves (a
spoofer drags the solution along with the time).  Fixes are averaged in Earth-centred, Earth-fixed coordinates on
the WGS-84 ellipsoid (NIMA TR8350.2 ch. 4 for the constants, the usual closed form out, a fixed-point iteration back),
so the mean is a point in space, not a mean of angles.  The receiver's altitude above mean sea level is used as the
height: the geoid separation is constant at one antenna, so distances and the mean are unaffected.

States: ``surveying`` (averaging) -> ``fixed`` (the mean is the home).  The survey completes once it has run for
``duration_s``, holds at least ``min_fixes`` fixes, the fixes' 3D scatter about their mean is at most ``max_std_m``,
and the first fixes and the last agree within it (a receiver on a moving platform scatters little over a short
survey, but it is no timing antenna: it starts over); otherwise it keeps surveying (a scattered survey is refused,
not accepted late).  No I/O, no clock:
every fix carries its own ``at_ns``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from appliance.events import Position
from appliance.units import NS_PER_S

WGS84_A_M = 6_378_137.0  # semi-major axis
WGS84_F = 1 / 298.257223563  # flattening
WGS84_E2 = WGS84_F * (2 - WGS84_F)  # first eccentricity squared

Ecef = tuple[float, float, float]
MOTION_FIXES = 10  # fixes averaged at each end of a survey to tell a moving antenna from a scattered one


def _mean(points: Iterable[Ecef]) -> Ecef:
    pts = list(points)
    return (sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts), sum(p[2] for p in pts) / len(pts))


def geodetic_to_ecef(lat_deg: float, lon_deg: float, height_m: float) -> Ecef:
    """WGS-84 latitude, longitude (degrees) and height (m) -> ECEF x, y, z (m)."""
    lat, lon = math.radians(lat_deg), math.radians(lon_deg)
    sin_lat, cos_lat = math.sin(lat), math.cos(lat)
    n = WGS84_A_M / math.sqrt(1 - WGS84_E2 * sin_lat * sin_lat)  # prime vertical radius of curvature
    return ((n + height_m) * cos_lat * math.cos(lon), (n + height_m) * cos_lat * math.sin(lon),
            (n * (1 - WGS84_E2) + height_m) * sin_lat)


def ecef_to_geodetic(x_m: float, y_m: float, z_m: float) -> tuple[float, float, float]:
    """ECEF (m) -> WGS-84 latitude, longitude (degrees) and height (m); sub-millimetre near the Earth's surface.

    Iterates lat = atan2(z + e^2 N sin(lat), p), which converges in a few steps for any point near the surface, and
    takes the height as p cos(lat) + z sin(lat) - a^2/N, which stays well-conditioned at the poles.
    """
    p = math.hypot(x_m, y_m)
    lon = math.atan2(y_m, x_m)
    lat = math.atan2(z_m, p * (1 - WGS84_E2))
    for _ in range(8):
        sin_lat = math.sin(lat)
        n = WGS84_A_M / math.sqrt(1 - WGS84_E2 * sin_lat * sin_lat)
        lat = math.atan2(z_m + WGS84_E2 * n * sin_lat, p)
    sin_lat, cos_lat = math.sin(lat), math.cos(lat)
    n = WGS84_A_M / math.sqrt(1 - WGS84_E2 * sin_lat * sin_lat)
    height = p * cos_lat + z_m * sin_lat - WGS84_A_M * WGS84_A_M / n
    return math.degrees(lat), math.degrees(lon), height


def position_to_ecef(position: Position, default_alt_m: float = 0.0) -> Ecef:
    """A fix -> ECEF; a 2D fix (no altitude) takes ``default_alt_m`` (e.g. the home's) so only the horizontal counts."""
    alt = position.alt_m if position.alt_m is not None else default_alt_m
    return geodetic_to_ecef(position.lat_deg, position.lon_deg, alt)


def distance_m(a: Position, b: Position) -> float:
    """Straight-line distance between two fixes; horizontal only if either lacks an altitude."""
    if a.alt_m is None or b.alt_m is None:
        a = Position(a.lat_deg, a.lon_deg, 0.0)
        b = Position(b.lat_deg, b.lon_deg, 0.0)
    return math.dist(position_to_ecef(a), position_to_ecef(b))


@dataclass(frozen=True)
class SurveySnapshot:
    """What ``status`` shows about the home position."""

    state: str  # "surveying" | "fixed"
    source: str  # "survey" | "configured"
    home: Position | None  # the mean (fixed), or the running mean (surveying), None before the first fix
    samples: int
    std_m: float | None  # 3D rms scatter of the fixes about their mean
    elapsed_s: float
    duration_s: float
    max_std_m: float
    started_at_ns: int | None
    fixed_at_ns: int | None
    reason: str


class SurveyIn:
    """Averages 3D fixes into a home position; ``update`` returns True on the fix that completes the survey."""

    SURVEYING, FIXED = "surveying", "fixed"

    def __init__(self, duration_s: float = 3600.0, max_std_m: float = 10.0, min_fixes: int = 60):
        self.duration_s, self.max_std_m, self.min_fixes = duration_s, max_std_m, min_fixes
        self.state = self.SURVEYING
        self.source = "survey"
        self.home: Position | None = None
        self.home_ecef: Ecef | None = None
        self.fixed_at_ns: int | None = None
        self.reason = "waiting for 3D fixes"
        self._note = ""
        self._restart()

    @classmethod
    def configured(cls, position: Position) -> SurveyIn:
        """Start fixed at an operator-configured (surveyed elsewhere) position."""
        s = cls()
        s.state, s.source, s.home = cls.FIXED, "configured", position
        s.home_ecef = position_to_ecef(position)
        s.reason = "position configured by the operator"
        return s

    def restart(self) -> None:
        """Forget the home and survey again (operator command, or the antenna was moved)."""
        self.state, self.source, self.home, self.home_ecef = self.SURVEYING, "survey", None, None
        self.fixed_at_ns = None
        self.reason = "survey restarted"
        self._note = ""
        self._restart()

    def _restart(self) -> None:
        self._n = 0
        self._origin: Ecef | None = None  # the first fix: sums are kept about it, for numerical comfort
        self._mean = [0.0, 0.0, 0.0]  # Welford running mean and sum of squared deviations, about the origin
        self._m2 = 0.0
        self._first_ns: int | None = None
        self._last_ns: int | None = None
        self._head: list[Ecef] = []  # the first fixes, and the latest: an antenna on the move is refused
        self._tail: deque[Ecef] = deque(maxlen=MOTION_FIXES)

    # --- input ---------------------------------------------------------------------------------------------
    def update(self, at_ns: int, position: Position) -> bool:
        """One 3D fix.  Fixes without an altitude (2D) are not surveyed.  True when this fix completes the survey."""
        if self.state == self.FIXED or position.alt_m is None:
            return False
        x, y, z = position_to_ecef(position)
        if self._origin is None:
            self._origin, self._first_ns = (x, y, z), at_ns
        if len(self._head) < MOTION_FIXES:
            self._head.append((x, y, z))
        self._tail.append((x, y, z))
        ox, oy, oz = self._origin
        self._n += 1
        self._last_ns = at_ns
        for i, v in enumerate((x - ox, y - oy, z - oz)):
            d = v - self._mean[i]
            self._mean[i] += d / self._n
            self._m2 += d * (v - self._mean[i])
        return self._maybe_fix(at_ns)

    def _maybe_fix(self, at_ns: int) -> bool:
        elapsed = self.elapsed_s()
        std = self.std_m()
        if elapsed < self.duration_s:
            self.reason = f"surveying: {elapsed:.0f} of {self.duration_s:.0f} s, {self._n} fixes{self._note}"
            return False
        if self._n < self.min_fixes:
            self.reason = f"too few fixes: {self._n} < {self.min_fixes} after {elapsed:.0f} s"
            return False
        if std is None or std > self.max_std_m:
            self.reason = f"fixes too scattered: {std:.1f} m rms > {self.max_std_m:.1f} m"
            return False
        moved = math.dist(_mean(self._head), _mean(self._tail))
        if moved > self.max_std_m:
            self._restart()
            self._note = f" (started over: the antenna moved {moved:.1f} m during the survey)"
            self.reason = "antenna moving" + self._note
            return False
        self.state, self.fixed_at_ns = self.FIXED, at_ns
        self.home_ecef = self._mean_ecef()
        self.home = self._mean_position()
        self.reason = f"surveyed: {self._n} fixes over {elapsed:.0f} s, {std:.2f} m rms"
        return True

    # --- results --------------------------------------------------------------------------------------------
    def elapsed_s(self) -> float:
        if self._first_ns is None or self._last_ns is None:
            return 0.0
        return (self._last_ns - self._first_ns) / NS_PER_S

    def std_m(self) -> float | None:
        """3D rms scatter of the fixes about their mean (sqrt of the summed per-axis variances)."""
        return None if self._n < 2 else math.sqrt(self._m2 / (self._n - 1))

    def _mean_ecef(self) -> Ecef | None:
        if self._origin is None:
            return None
        return (self._origin[0] + self._mean[0], self._origin[1] + self._mean[1], self._origin[2] + self._mean[2])

    def _mean_position(self) -> Position | None:
        ecef = self._mean_ecef()
        if ecef is None:
            return None
        lat, lon, alt = ecef_to_geodetic(*ecef)
        return Position(lat, lon, alt)

    def snapshot(self) -> SurveySnapshot:
        if self.state == self.FIXED:
            home, samples, std = self.home, self._n, (self.std_m() if self.source == "survey" else 0.0)
        else:
            home, samples, std = self._mean_position(), self._n, self.std_m()
        return SurveySnapshot(self.state, self.source, home, samples, std, self.elapsed_s(), self.duration_s,
                              self.max_std_m, self._first_ns, self.fixed_at_ns, self.reason)
