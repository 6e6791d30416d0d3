"""The integrity checks on real receiver captures: no false alarm, and the reasons where a check must stand aside.

Each capture's epochs go through the monitor's epoch checks (position against a home surveyed over the first 30 s,
C/N0, jamming, the sky's shape, receiver flags, per-system times, the time label); captures carry no PPS, so the
phase checks rest.  A capture that cannot give a timing home position (a chart plotter on a moving boat, a timing
receiver in fixed-position mode) must say so in the survey's reason instead of alarming."""

from __future__ import annotations

import pytest
from tests.replay.gpsd_reference import CAPTURES, DATA_DIR

from appliance.edge.input_files import read_capture
from appliance.gnss.replay import capture_integrity


@pytest.mark.parametrize("name", CAPTURES)
def test_no_false_alarm_on_a_real_capture(name: str) -> None:
    result = capture_integrity(read_capture(DATA_DIR / f"{name}.log"))
    assert result.epochs > 0
    assert set(result.levels) == {"ok"}, f"{name}: {result.levels} {result.alarms} {result.worst_reasons}"


def test_a_receiver_on_a_moving_boat_gets_no_home_position() -> None:
    result = capture_integrity(read_capture(DATA_DIR / "bundg_zeus_9.log"))
    assert result.survey.startswith("surveying:") and ("scattered" in result.survey or "moving" in result.survey)


def test_a_stationary_receiver_is_surveyed_and_stays_home() -> None:
    result = capture_integrity(read_capture(DATA_DIR / "ublox-neo-m9n-nmea.log"))
    assert result.survey.startswith("fixed: surveyed: 31 fixes over 30 s")
    assert result.levels == {"ok": 61}
