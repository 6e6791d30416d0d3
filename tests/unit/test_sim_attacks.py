"""The simulated receiver's attacks, seen through the appliance's receiver path: what each changes and what it leaves.

Bursts for consecutive seconds go through ``GnssReceiver.feed`` as the appliance's serial edge would deliver them.
"""

from __future__ import annotations

import statistics

import pytest

from appliance import leap
from appliance.events import Constellation as C
from appliance.events import FixMode, GnssEpoch, Position, TimeLabel
from appliance.gnss.integrity import Cn0Detector, ConstellationDetector, Level
from appliance.gnss.receiver import GnssReceiver
from appliance.gnss.survey import distance_m
from appliance.sim.leapsecond import first_after_expiry
from appliance.sim.receiver import SimReceiver
from appliance.sim.sky import Sky

TABLE = leap.LeapTable.load_default()
NS = 1_000_000_000
START = leap.utc_fields_to_tai(2026, 6, 1, 12, 0, 0, 0, TABLE)
SEED = 5


def receiver(table: leap.LeapTable = TABLE) -> SimReceiver:
    return SimReceiver(SEED, table)


def run(sim: SimReceiver, seconds: int, start: int = START, table: leap.LeapTable = TABLE) -> list[object]:
    """Every event of ``seconds`` bursts, each arriving 80 ms after its second in three chunks, as SimWorld sends."""
    rx = GnssReceiver(lambda: table)
    events: list[object] = []
    for k in range(seconds):
        second = start + k * NS
        data = sim.burst(second)
        step = -(-len(data) // 3)
        for i in range(3):
            events += rx.feed(data[i * step:(i + 1) * step], second + 80_000_000 + i * 5_000_000)
    return events + rx.finish()


def epochs(events: list[object]) -> list[GnssEpoch]:
    return [e for e in events if isinstance(e, GnssEpoch)]


def tracked_cn0(epoch: GnssEpoch) -> list[int]:
    return [s.cn0_dbhz for s in epoch.satellites if s.cn0_dbhz is not None]


def test_one_epoch_per_second_with_the_receivers_monitors_and_system_times():
    found = epochs(run(receiver(), 30))
    assert [e.tai_ns for e in found] == [START + k * NS for k in range(30)]
    for epoch in found:
        assert {"RMC", "GGA", "UbxTimePulse", "UbxGpsTime", "NAV-TIMEGAL", "NAV-TIMEBDS", "UbxLeap", "NAV-STATUS",
                "UbxHardware"} <= set(epoch.sources)
        assert (epoch.jam_indicator, epoch.jamming_state, epoch.spoofing_state) == (0, 1, 1)
        assert epoch.system_offsets_ns == ((C.GPS, 0), (C.GALILEO, 0), (C.BEIDOU, 0))
        assert epoch.fix_mode == FixMode.FIX_3D and epoch.time_valid


def test_one_epoch_per_second_through_a_leap_second():
    future = first_after_expiry()  # the first insertion the packaged table leaves possible
    truth = future.truth
    start = future.before_tai_ns(23, 59, 50)
    found = epochs(run(receiver(truth), 20, start, truth))
    assert [e.tai_ns for e in found] == [start + k * NS for k in range(20)]
    assert future.labels[1] in [e.utc_text for e in found]
    assert all(len(e.system_offsets_ns) == 3 and e.spoofing_state == 1 for e in found)


def test_without_attacks_the_sky_and_the_pulse_are_as_before():
    """The receiver asks the sky once a second, in order, as it always did, so the C/N0 draws are unchanged."""
    sim, sky = receiver(), Sky(SEED)
    for k in range(5):
        second = START + k * NS
        assert sim.time_error_ns(second) == 0
        sim.burst(second)
        assert sim.satellites(second) == sky.view(second)
        quiet_ps = sim.ideal_error_ps(second)
        sim.conditions.time_offset_ns = 1_000
        assert sim.ideal_error_ps(second) == quiet_ps + 1_000_000
        sim.conditions.time_offset_ns = 0


def test_time_step_and_slow_push_move_the_pulse_not_the_label():
    sim = receiver()
    quiet = [sim.edge_true_ns(START + k * NS) for k in range(20)]
    sim.conditions.time_offset_ns = -300
    sim.conditions.push_ns_per_s, sim.conditions.push_since_ns = 50.0, START + 10 * NS
    assert [sim.time_error_ns(START + k * NS) for k in (0, 10, 11, 19)] == [-300, -300, -250, 150]
    moved = [sim.edge_true_ns(START + k * NS) for k in range(20)]
    assert all(abs(m - q - sim.time_error_ns(START + k * NS)) <= 21 for k, (q, m) in enumerate(zip(quiet, moved, strict=True)))
    labels = [e.tai_ns for e in run(sim, 20) if isinstance(e, TimeLabel)]
    assert labels == [START + k * NS for k in range(20)]  # a pulse 300 ns early is still its own second


def test_whole_seconds_of_error_shift_the_label():
    sim = receiver()
    sim.conditions.time_offset_ns = 2 * NS + 400
    assert [e.tai_ns for e in epochs(run(sim, 3))] == [START + (k + 2) * NS for k in range(3)]


def test_position_push_moves_the_reported_fix_north():
    sim = receiver()
    home = epochs(run(sim, 1))[0].position
    sim.conditions.position_offset_m = (120.0, 0.0, 5.0)
    pushed = epochs(run(sim, 1))[0].position
    assert pushed.lat_deg > home.lat_deg and pushed.lon_deg == pytest.approx(home.lon_deg, abs=1e-6)
    assert pushed.alt_m == pytest.approx(home.alt_m + 5.0)
    assert distance_m(Position(pushed.lat_deg, pushed.lon_deg), Position(home.lat_deg, home.lon_deg)) == \
        pytest.approx(120.0, abs=0.1)


def test_meaconing_delays_time_keeps_position_and_makes_every_cn0_alike():
    sim = receiver()
    home = epochs(run(sim, 1))[0].position
    sim.conditions.meaconing_delay_ns = 2_000
    assert sim.time_error_ns(START) == 2_000
    (epoch,) = epochs(run(sim, 1))
    assert epoch.position == home
    cn0 = tracked_cn0(epoch)
    assert len(cn0) >= 20 and all(abs(c - 45.0) <= 0.5 for c in cn0)
    assert Cn0Detector().update(0, epoch.satellites).verdict is Level.SPOOFED


def test_single_transmitter_spoofer_reports_every_satellite_near_its_level():
    sim = receiver()
    sim.conditions.cn0_uniform_dbhz = 51.0
    cn0 = tracked_cn0(epochs(run(sim, 1))[0])
    assert len(cn0) >= 20 and all(abs(c - 51.0) <= 0.5 for c in cn0)


def test_jamming_lowers_every_cn0_loses_the_weak_and_shows_in_mon_hw():
    sim = receiver()
    before = epochs(run(sim, 1))[0]
    sim.conditions.cn0_offset_db, sim.conditions.jam_indicator, sim.conditions.jamming_state = -15.0, 200, 3
    jammed = epochs(run(sim, 1, START + NS))[0]
    assert (jammed.jam_indicator, jammed.jamming_state) == (200, 3)
    assert all(c >= 20 for c in tracked_cn0(jammed)) and len(tracked_cn0(jammed)) < len(tracked_cn0(before))
    still = {(s.constellation, s.prn): s.cn0_dbhz for s in jammed.satellites if s.cn0_dbhz is not None}
    drops = [b.cn0_dbhz - still[(b.constellation, b.prn)] for b in before.satellites
             if (b.constellation, b.prn) in still]
    assert statistics.fmean(drops) == pytest.approx(15.0, abs=1.0)


def test_spoofing_state_is_reported_in_nav_status():
    sim = receiver()
    sim.conditions.spoofing_state = 3
    assert epochs(run(sim, 1))[0].spoofing_state == 3


def test_one_system_spoofed_shows_in_its_time_and_moves_the_pulse_by_its_share():
    sim = receiver()
    sim.conditions.system_offsets_ns = {C.BEIDOU: 400}
    sats = sim.satellites(START)
    used = [s for s in sats if s.used]
    share = 400 * sum(1 for s in used if s.constellation is C.BEIDOU) / len(used)
    assert 50 < share < 200 and sim.time_error_ns(START) == round(share)
    (epoch,) = epochs(run(sim, 1))
    assert epoch.system_offsets_ns == ((C.GPS, 0), (C.GALILEO, 0), (C.BEIDOU, 400))
    found = ConstellationDetector().update(dict(epoch.system_offsets_ns))
    assert found.verdict is Level.SPOOFED and "BeiDou" in found.reason


def test_common_error_moves_every_system_time_alike():
    sim = receiver()
    sim.conditions.time_offset_ns = 700
    sim.conditions.system_offsets_ns = {C.GALILEO: -250}
    (epoch,) = epochs(run(sim, 1))
    assert epoch.system_offsets_ns == ((C.GPS, 0), (C.GALILEO, -250), (C.BEIDOU, 0))


def test_fake_sky_replaces_the_satellites():
    sim = receiver()
    real = {(s.constellation, s.prn) for s in sim.satellites(START) if s.cn0_dbhz is not None}
    sim.conditions.fake_sky_seed = 4242
    fake = {(s.constellation, s.prn) for s in epochs(run(sim, 1, START + NS))[0].satellites if s.cn0_dbhz is not None}
    assert fake == {(s.constellation, s.prn) for s in Sky(4242).view(START + NS) if s.cn0_dbhz is not None}
    assert len(fake & real) < len(real) / 2


def test_reset_means_no_fix_and_no_pulse_until_the_first_fix():
    sim = receiver()
    sim.reset(START + 5 * NS, ttff_s=10)
    assert [sim.has_fix(START + k * NS) for k in (4, 5, 14, 15)] == [True, False, False, True]
    found = epochs(run(sim, 20))
    modes = [e.fix_mode for e in found]
    assert modes == [FixMode.FIX_3D] * 5 + [FixMode.NO_FIX] * 10 + [FixMode.FIX_3D] * 5
    assert all(not e.time_valid and e.position is None and e.system_offsets_ns == () for e in found[5:15])
    assert all(tracked_cn0(e) == [] for e in found[5:15])


@pytest.mark.parametrize("seed", [1, 4242])
def test_a_fake_sky_is_never_the_real_one_whatever_the_seed(seed: int):
    sim = SimReceiver(seed, leap.LeapTable.load_default())
    real = {(s.constellation, s.prn, s.elevation_deg) for s in sim.satellites(START) if s.cn0_dbhz is not None}
    sim.conditions.fake_sky_seed = sim.fake_sky_seed()
    fake = {(s.constellation, s.prn, s.elevation_deg) for s in sim.satellites(START + NS) if s.cn0_dbhz is not None}
    assert len(fake & real) < len(real) / 2
