"""Scenario 1: the simulated timing receiver, seen through the appliance's GNSS path.

Clear sky, then the antenna blocked and restored, then the receiver switched off and on, then a leap second.
Each checks what an operator would see: receiver state, alarms, satellites, PPS pairing and the UTC labels.
"""

from __future__ import annotations

import statistics

from appliance.events import Alarm, Constellation, GnssEpoch, PairedSecond, ReceiverState
from appliance.sim.leapsecond import first_after_expiry
from tests.sim.conftest import NS_PER_S, build_sim


def test_clear_sky_gives_a_3d_fix_with_gps_and_beidou_and_every_pulse_paired(sim) -> None:
    sim.run_s(60)
    status = sim.app.status()
    assert status.receiver.state is ReceiverState.FIX_3D
    used = {c.name: c.used for c in status.constellations}
    assert used["GPS"] >= 4 and used["BeiDou"] >= 4 and sum(used.values()) >= 16
    assert status.pps.paired >= 59 and status.pps.rejected == {}
    assert status.receiver.rejected == {}
    assert status.clock.state == "LOCKED" and not status.alarms
    seconds = [p.label_tai_ns for p in sim.of_type(PairedSecond)]
    assert all(b - a == NS_PER_S for a, b in zip(seconds, seconds[1:]))


def test_qerr_reported_for_each_pulse_removes_the_sawtooth(sim) -> None:
    sim.run_s(300)
    rx = sim.world.receiver
    paired = sim.of_type(PairedSecond)
    assert len(paired) >= 295
    # The appliance attaches to each edge the qErr the receiver announced for exactly that pulse.
    assert paired[0].qerr_ps is None  # the first pulse had no TIM-TP before it
    paired = paired[1:]
    assert all(p.qerr_ps == rx.qerr_ps(p.label_tai_ns) for p in paired)
    assert max(abs(p.qerr_ps) for p in paired) <= 10_417
    raw_err = [rx.edge_true_ns(p.label_tai_ns) - p.label_tai_ns for p in paired]
    corrected = [e + p.qerr_ps / 1000 for e, p in zip(raw_err, paired)]
    assert 5.0 < statistics.pstdev(raw_err) < 8.0  # a +-10.4 ns sawtooth (48 MHz) plus 2 ns noise
    assert statistics.pstdev(corrected) < 2.5


def test_blocked_antenna_raises_no_fix_stops_pairing_and_recovers(sim) -> None:
    sim.run_s(20)
    sim.world.receiver.conditions.blocked = True
    sim.run_s(30)
    status = sim.app.status()
    assert status.receiver.state is ReceiverState.NO_FIX
    assert "gnss-no-fix" in {a.code for a in status.alarms}
    paired_during = status.pps.paired
    sim.run_s(5)
    assert sim.app.status().pps.paired == paired_during
    sim.world.receiver.conditions.blocked = False
    sim.run_s(10)
    status = sim.app.status()
    assert status.receiver.state is ReceiverState.FIX_3D
    assert status.pps.paired > paired_during
    assert not {a.code for a in status.alarms} & {"gnss-no-fix", "gnss-no-data", "gnss-disconnected"}
    assert status.pps.rejected == {}
    cleared = [a for a in sim.of_type(Alarm) if a.code == "gnss-no-fix" and not a.raised]
    assert len(cleared) == 1


def test_silent_receiver_is_no_data_after_the_timeout_then_recovers(sim) -> None:
    sim.run_s(10)
    sim.world.receiver_powered = False
    sim.run_s(4)
    assert sim.app.status().receiver.state is ReceiverState.FIX_3D  # within the 5 s timeout
    sim.run_s(3)
    status = sim.app.status()
    assert status.receiver.state is ReceiverState.NO_DATA
    assert "gnss-no-data" in {a.code for a in status.alarms}
    sim.world.receiver_powered = True
    sim.run_s(3)
    assert sim.app.status().receiver.state is ReceiverState.FIX_3D


def test_leap_second_announced_by_the_receiver_is_labelled_235960_and_time_stays_continuous() -> None:
    future = first_after_expiry()  # the first insertion the packaged table leaves possible
    sim = build_sim(start_utc=(*future.last_day, 23, 57, 0), world_table=future.truth)
    sim.run_s(60)
    before = sim.app.status().leap
    assert before.pending_change_s == 1 and before.pending_at_utc == future.effective_utc
    sim.run_s(150)
    labels = [e.utc_text for e in sim.of_type(GnssEpoch)]
    i = labels.index(future.labels[1])
    assert labels[i - 1:i + 2] == future.labels  # 23:59:59, 23:59:60, 00:00:00
    seconds = [p.label_tai_ns for p in sim.of_type(PairedSecond)]
    assert all(b - a == NS_PER_S for a, b in zip(seconds, seconds[1:]))  # TAI knows no leap second
    after = sim.app.status()
    assert after.leap.tai_utc_s == future.new_offset_s and after.leap.pending_change_s == 0
    assert after.receiver.rejected == {} and after.pps.rejected == {}


def test_constellations_are_counted_by_system_not_by_talker(sim) -> None:
    sim.run_s(5)
    epoch = sim.of_type(GnssEpoch)[-1]
    systems = {s.constellation for s in epoch.satellites}
    assert systems == {Constellation.GPS, Constellation.GLONASS, Constellation.GALILEO, Constellation.BEIDOU}
