"""Captures of the simulated receiver in each message set (tests/data/gnss/sim-*.log), replayed.

Each is a cold start: five seconds without a fix, then fifty-five with one.  Every set that carries time labels its
fixed epochs, every set carries the sky, and the UBX sets carry the antenna supervisor; the files are exactly what
``tests/replay/sim_captures.py`` records from the seed.
"""

from __future__ import annotations

from functools import cache

import pytest
from tests.replay.sim_captures import SECONDS, TTFF_S, path_of, record, start_tai_ns

from appliance import leap
from appliance.edge.input_files import read_capture
from appliance.events import FixMode, GnssEpoch, ReceiverState, TimeLabel
from appliance.gnss.receiver import GnssReceiver
from appliance.gnss.replay import ReplayResult, replay_bytes
from appliance.sim.receiver import MESSAGE_SETS
from appliance.units import NS_PER_S

TABLE = leap.LeapTable.load_default()
SETS = sorted(MESSAGE_SETS)
NMEA_SETS = {"default", "nmea", "factory-ublox"}  # an RMC states the (invalid) time even without a fix
ANTENNA_SETS = {"default", "ubx-gen9", "ubx-m8-legacy"}  # MON-HW or MON-RF


@cache
def replayed(message_set: str) -> ReplayResult:
    return replay_bytes(read_capture(path_of(message_set)), TABLE)


@pytest.mark.parametrize("message_set", SETS)
def test_the_capture_is_what_the_seeded_simulator_records(message_set):
    assert path_of(message_set).read_bytes() == record(message_set, TABLE)


@pytest.mark.parametrize("message_set", SETS)
def test_replay_reaches_labelled_fixed_epochs_with_satellites(message_set):
    result = replayed(message_set)
    epochs = result.epochs
    assert len(epochs) == SECONDS and not result.receiver.rejected
    cold, fixed = epochs[:TTFF_S], epochs[TTFF_S:]
    assert all(e.fix_mode == FixMode.NO_FIX and not e.time_valid and e.position is None for e in cold)
    if message_set in NMEA_SETS:
        assert all(e.tai_ns is not None for e in cold)  # RMC states the second, flagged invalid
    else:
        assert all(e.tai_ns is None for e in cold)  # NAV-PVT / NAV-TIMEUTC / NAV-TIMEGPS: no valid time at all
    start = start_tai_ns(TABLE)
    assert [e.tai_ns for e in fixed] == [start + i * NS_PER_S for i in range(TTFF_S, SECONDS)]
    assert all(e.time_valid and e.fix_mode == FixMode.FIX_3D and e.position is not None for e in fixed)
    assert all(len(e.satellites) > 20 and e.used_count == sum(s.used for s in e.satellites) > 20 for e in fixed)
    assert {(e.antenna_status, e.antenna_power) for e in fixed} == (
        {("ok", "on")} if message_set in ANTENNA_SETS else {(None, None)})


@pytest.mark.parametrize("message_set", SETS)
def test_the_receiver_labels_each_fixed_second_once_and_ends_with_a_fix(message_set):
    gnss = GnssReceiver(lambda: TABLE, device=message_set)
    data = read_capture(path_of(message_set))
    events = []
    for i in range(0, len(data), 997):
        events += gnss.feed(data[i:i + 997], i * 1_000)
    events += gnss.finish()
    labels = [e for e in events if isinstance(e, TimeLabel)]
    epochs = [e for e in events if isinstance(e, GnssEpoch)]
    valid = [label for label in labels if label.valid]
    assert [label.tai_ns for label in valid] == [e.tai_ns for e in epochs if e.time_valid]
    assert len(valid) == SECONDS - TTFF_S
    assert gnss.state is ReceiverState.FIX_3D


def test_the_legacy_set_reports_the_ellipsoidal_height():
    """NAV-SOL carries ECEF alone: the height is above the ellipsoid, the geoid separation (47 m) above GGA's."""
    legacy = replayed("ubx-m8-legacy").epochs[-1].position
    nmea = replayed("nmea").epochs[-1].position
    assert abs(legacy.alt_m - nmea.alt_m - 47.0) < 0.01
    assert abs(legacy.lat_deg - nmea.lat_deg) < 1e-6 and abs(legacy.lon_deg - nmea.lon_deg) < 1e-6
