"""Where each satellite has been on the sky lately, for the GNSS page's sky plot: a bounded ring per satellite.

Single job: the status carries the satellites' azimuth and elevation at one instant; the console process feeds every
published status to ``SkyTracks.add`` and the sky plot draws ``tracks()``.  A satellite is sampled at most once per
``every_s`` seconds of status time and kept for ``keep_s``; a satellite not seen for ``keep_s`` is forgotten, so the
memory is bounded by satellites in view x keep_s / every_s points.  The tracks start when the console process starts
(nothing is stored on disk: a plot of the last half hour, not a record).

Pure: no clock reads (time is the status's own ``at_tai_ns``), no I/O.  One writer (the thread that receives the
publications) replaces an immutable snapshot; readers (web threads) take the snapshot whole, so no lock is needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from appliance.units import NS_PER_S

KEEP_S = 1800
EVERY_S = 10
Key = tuple[str, int]  # (constellation, prn)
Point = tuple[int, int, int]  # (at_tai_ns, azimuth_deg, elevation_deg)


class SkyTracks:
    """The recent (azimuth, elevation) of every satellite with a position, oldest first."""

    def __init__(self, keep_s: int = KEEP_S, every_s: int = EVERY_S):
        if not 0 < every_s <= keep_s:
            raise ValueError(f"expected 0 < every_s <= keep_s, got {every_s}, {keep_s}")
        self.keep_ns, self.every_ns = keep_s * NS_PER_S, every_s * NS_PER_S
        self._tracks: dict[Key, tuple[Point, ...]] = {}

    def add(self, status: Mapping[str, Any]) -> None:
        """Take the satellites of one published status (a ``to_dict`` status)."""
        at_ns = int(status.get("at_tai_ns") or 0)
        tracks = self._tracks
        updated: dict[Key, tuple[Point, ...]] = {}
        changed = False
        for sat in status.get("satellites") or ():
            az, el = sat.get("azimuth_deg"), sat.get("elevation_deg")
            if az is None or el is None:
                continue
            key = (str(sat.get("constellation")), int(sat.get("prn", 0)))
            points = tracks.get(key, ())
            if points and 0 <= at_ns - points[-1][0] < self.every_ns:
                continue
            if points and at_ns < points[-1][0]:  # status time went back (a restart of the world): start again
                points = ()
            updated[key] = points + ((at_ns, int(az), int(el)),)
            changed = True
        oldest_ns = at_ns - self.keep_ns
        kept: dict[Key, tuple[Point, ...]] = {}
        for key, points in (tracks | updated).items():
            if points[0][0] < oldest_ns:
                changed = True
                points = tuple(p for p in points if p[0] >= oldest_ns)
            if points:
                kept[key] = points
        if changed:
            self._tracks = kept  # one reference swap: a reader sees the old snapshot or the new one

    def tracks(self) -> list[dict[str, Any]]:
        """``[{"constellation", "prn", "points": [[azimuth_deg, elevation_deg], ...]}]``, points oldest first."""
        return [{"constellation": c, "prn": prn, "points": [[az, el] for _, az, el in points]}
                for (c, prn), points in sorted(self._tracks.items())]
