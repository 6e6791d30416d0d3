"""A plausible sky for the simulated receiver: satellites of GPS, GLONASS, Galileo and BeiDou moving over an antenna.

Pure and deterministic from a seed.  Orbits are not propagated; each satellite follows a smooth pass (azimuth drifting,
elevation a slow sinusoid) with periods of a few hours, which is all a time server's status pages and integrity checks
need: satellites rise and set, C/N0 follows elevation, the set in use changes slowly.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from appliance.events import Constellation, SatInfo
from appliance.units import NS_PER_S

# (constellation, satellites simulated, usable PRNs)
FLEETS = ((Constellation.GPS, 24, 32), (Constellation.GLONASS, 18, 24), (Constellation.GALILEO, 20, 36),
          (Constellation.BEIDOU, 24, 46))
ELEVATION_MASK_DEG = 10
MAX_USED_PER_SYSTEM = 12  # NMEA GSA carries at most twelve satellites per system


@dataclass(frozen=True)
class _Pass:
    constellation: Constellation
    prn: int
    az0_deg: float
    az_rate_deg_per_s: float
    el_phase: float
    el_period_s: float
    cn0_bias_db: float


class Sky:
    def __init__(self, seed: int):
        rng = random.Random(seed * 7919 + 17)
        self._passes: list[_Pass] = []
        for const, count, prns in FLEETS:
            for prn in sorted(rng.sample(range(1, prns + 1), count)):
                self._passes.append(_Pass(const, prn, rng.uniform(0, 360), rng.uniform(-0.01, 0.01),
                                          rng.uniform(0, 2 * math.pi), rng.uniform(4, 12) * 3600,
                                          rng.gauss(0, 1.5)))
        self._rng = random.Random(seed)
        self.cn0_offset_db = 0.0  # scenarios lower it (jamming, a blocked antenna)

    def view(self, true_ns: int, blocked: bool = False) -> tuple[SatInfo, ...]:
        """Satellites above the horizon at ``true_ns``; the best of each system (up to twelve) marked used."""
        t_s = true_ns / NS_PER_S
        visible: list[SatInfo] = []
        for p in self._passes:
            el = 75 * math.sin(2 * math.pi * t_s / p.el_period_s + p.el_phase) - 5
            if el < 0:
                continue
            az = (p.az0_deg + p.az_rate_deg_per_s * t_s) % 360
            cn0 = 28 + 20 * math.sin(math.radians(el)) + p.cn0_bias_db + self._rng.gauss(0, 0.7) + self.cn0_offset_db
            tracked = not blocked and cn0 >= 20
            visible.append(SatInfo(p.constellation, p.prn, round(el), round(az) % 360,  # 359.5 rounds to 0, not 360
                                      round(cn0) if tracked else None))
        return self._mark_used(visible)

    @staticmethod
    def _mark_used(visible: list[SatInfo]) -> tuple[SatInfo, ...]:
        out: list[SatInfo] = []
        for const, _, _ in FLEETS:
            mine = [s for s in visible if s.constellation is const]
            usable = sorted((s for s in mine if s.cn0_dbhz and (s.elevation_deg or 0) >= ELEVATION_MASK_DEG),
                            key=lambda s: -(s.cn0_dbhz or 0))[:MAX_USED_PER_SYSTEM]
            chosen = {s.prn for s in usable}
            out += [SatInfo(s.constellation, s.prn, s.elevation_deg, s.azimuth_deg, s.cn0_dbhz, s.prn in chosen)
                    for s in mine]
        return tuple(out)
