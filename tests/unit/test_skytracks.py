"""Unit tests for appliance.web.skytracks: the sky plot's tracks, one bounded ring per satellite."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.units import NS_PER_S
from appliance.web.skytracks import SkyTracks

T0 = 1_800_000_000 * NS_PER_S


def status(at_s: float, *sats: tuple[str, int, int | None, int | None]) -> dict[str, Any]:
    return {"at_tai_ns": T0 + int(at_s * NS_PER_S),
            "satellites": [{"constellation": c, "prn": prn, "azimuth_deg": az, "elevation_deg": el, "cn0_dbhz": 40,
                            "used": True} for c, prn, az, el in sats]}


def test_a_satellite_is_sampled_once_per_interval_and_kept_oldest_first() -> None:
    sky = SkyTracks(keep_s=60, every_s=10)
    for k in range(50):  # two publications a second for 25 s
        sky.add(status(k / 2, ("GPS", 12, 100 + k, 40), ("Galileo", 5, 200, 20)))
    tracks = sky.tracks()
    assert [(t["constellation"], t["prn"]) for t in tracks] == [("GPS", 12), ("Galileo", 5)]
    assert tracks[0]["points"] == [[100, 40], [120, 40], [140, 40]]  # at 0, 10 and 20 s


def test_satellites_without_a_position_are_left_out_and_old_points_are_forgotten() -> None:
    sky = SkyTracks(keep_s=30, every_s=10)
    sky.add(status(0, ("BeiDou", 23, 10, 50), ("GLONASS", 3, None, None)))
    for t in (10, 20, 30, 40):
        sky.add(status(t, ("BeiDou", 23, 10 + t, 50)))
    assert sky.tracks() == [{"constellation": "BeiDou", "prn": 23, "points": [[20, 50], [30, 50], [40, 50], [50, 50]]}]
    sky.add(status(100, ("GPS", 1, 0, 10)))  # BeiDou 23 set: forgotten once its last point is older than keep_s
    assert [t["prn"] for t in sky.tracks()] == [1]


def test_a_snapshot_taken_by_a_reader_does_not_change_under_it() -> None:
    sky = SkyTracks(keep_s=60, every_s=10)
    sky.add(status(0, ("GPS", 7, 1, 1)))
    before = sky.tracks()
    sky.add(status(10, ("GPS", 7, 2, 2)))
    assert before[0]["points"] == [[1, 1]] and sky.tracks()[0]["points"] == [[1, 1], [2, 2]]


def test_bad_intervals_are_refused() -> None:
    with pytest.raises(ValueError):
        SkyTracks(keep_s=10, every_s=20)
