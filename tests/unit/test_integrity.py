"""GNSS integrity: survey-in, each detector's positive and negative cases, and the monitor on built sequences.

Every input is built here, second by second, from closed-form skies and deterministic "noise" (a hash of the second),
so a failure reproduces exactly.  Time axes: ``at_ns`` is the raw counter, epochs carry TAI labels on top of it.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.events import Constellation, FixMode, GnssEpoch, Position, SatInfo
from appliance.gnss.integrity import (Cn0Detector, ConstellationDetector, Detectors, DriftDetector, IntegrityMonitor,
                                      JammingDetector, LabelDetector, Level, NtpCrossCheck, PhaseJumpDetector,
                                      PositionDetector, ReceiverFlagsDetector, SkyDetector)
from appliance.gnss.survey import WGS84_A_M, SurveyIn, distance_m, ecef_to_geodetic, geodetic_to_ecef

NS = 1_000_000_000
RAW0 = 5_000 * NS  # the raw counter at t = 0
TAI0 = 1_750_000_037 * NS  # the label of t = 0
HOME = Position(46.2044, 6.1432, 375.0)
GPS, GAL = Constellation.GPS, Constellation.GALILEO
BASE_KEYS = tuple((GPS if i % 2 else GAL, i) for i in range(1, 21))
SEVERITY = {Level.OK: 0, Level.SUSPECT: 1, Level.JAMMED: 2, Level.SPOOFED: 3}


def wiggle(k: int, amplitude: float) -> float:
    """Deterministic noise in [-amplitude, amplitude): a multiplicative hash of ``k``."""
    return amplitude * (((k * 2654435761) % 1000) / 500.0 - 1.0)


def moved(position: Position, north_m: float, east_m: float = 0.0, up_m: float = 0.0) -> Position:
    lat = position.lat_deg + north_m / 111_150.0
    lon = position.lon_deg + east_m / (111_320.0 * math.cos(math.radians(position.lat_deg)))
    return Position(lat, lon, (position.alt_m or 0.0) + up_m)


def noisy_fix(t: int, scatter_m: float = 2.0) -> Position:
    return moved(HOME, wiggle(t, scatter_m), wiggle(t + 7919, scatter_m), wiggle(t + 104729, scatter_m))


def sky(t: float, keys: tuple[tuple[Constellation, int], ...] = BASE_KEYS, cn0_shift: float = 0.0,
        tracked: bool = True, az_shift: float = 0.0) -> tuple[SatInfo, ...]:
    """A plausible sky: elevations spread by PRN and drifting slowly, C/N0 following elevation, +-0.8 dB noise."""
    out = []
    for const, prn in keys:
        el = 12 + (prn * 29) % 75 + 0.002 * t
        az = (prn * 47 + 0.004 * t + az_shift) % 360
        cn0 = 30 + 18 * math.sin(math.radians(el)) + wiggle(int(t) * 31 + prn, 0.8) + cn0_shift
        out.append(SatInfo(const, prn, round(el), round(az), round(cn0) if tracked else None, tracked))
    return tuple(out)


def epoch(t: int, sats: tuple[SatInfo, ...] | None = None, position: Position | None = HOME,
          fix: FixMode = FixMode.FIX_3D, valid: bool = True, label_shift_s: int = 0,
          utc_text: str = "2025-06-30T12:00:00.000Z") -> GnssEpoch:
    return GnssEpoch(utc_text, TAI0 + (t + label_shift_s) * NS, valid, fix, position,
                     sky(t) if sats is None else sats, None, 0.7, RAW0 + t * NS + 120_000_000 + int(wiggle(t, 3e7)),
                     ("RMC", "GGA", "GSV"))


def at(t: float) -> int:
    return RAW0 + int(t * NS)


def monitor(**kw) -> IntegrityMonitor:
    return IntegrityMonitor(SurveyIn.configured(HOME), **kw)


def worst(levels) -> Level:
    return max(levels, key=SEVERITY.__getitem__, default=Level.OK)


QUIET_BOUND_NS = 30.0


def quiet_residual(t: int) -> float:
    return wiggle(t * 13 + 5, 3.0)


# --- survey-in ---------------------------------------------------------------------------------------------------
def test_wgs84_known_points() -> None:
    assert geodetic_to_ecef(0.0, 0.0, 0.0) == pytest.approx((WGS84_A_M, 0.0, 0.0))
    x, y, z = geodetic_to_ecef(90.0, 0.0, 0.0)
    assert z == pytest.approx(6_356_752.314245, abs=1e-3)  # the semi-minor axis
    assert math.hypot(x, y) < 1e-6
    assert ecef_to_geodetic(0.0, 0.0, 6_356_752.314245 + 10.0) == pytest.approx((90.0, 0.0, 10.0), abs=1e-6)


@settings(max_examples=200, deadline=None)
@given(st.floats(-90, 90), st.floats(-180, 180), st.floats(-500, 9000))
def test_ecef_round_trip_is_sub_millimetre(lat: float, lon: float, h: float) -> None:
    lat2, lon2, h2 = ecef_to_geodetic(*geodetic_to_ecef(lat, lon, h))
    back = geodetic_to_ecef(lat2, lon2, h2)
    assert math.dist(back, geodetic_to_ecef(lat, lon, h)) < 1e-3
    assert h2 == pytest.approx(h, abs=1e-3)


def test_distance_of_a_known_offset() -> None:
    assert distance_m(HOME, moved(HOME, 50.0)) == pytest.approx(50.0, rel=0.01)
    assert distance_m(HOME, moved(HOME, 0.0, 0.0, 30.0)) == pytest.approx(30.0, abs=0.01)
    # A 2D fix (no altitude) is compared horizontally only.
    assert distance_m(HOME, Position(HOME.lat_deg, HOME.lon_deg, None)) == pytest.approx(0.0, abs=1e-6)


def test_survey_converges_on_the_mean_and_fixes() -> None:
    s = SurveyIn(duration_s=120, max_std_m=10.0, min_fixes=60)
    done = [s.update(t * NS, noisy_fix(t, 3.0)) for t in range(200)]
    assert done.index(True) == 120  # the fix that completes the duration
    assert s.state == "fixed" and s.fixed_at_ns == 120 * NS
    assert s.home is not None and distance_m(s.home, HOME) < 1.0
    snap = s.snapshot()
    assert snap.state == "fixed" and snap.source == "survey" and snap.samples == 121
    assert snap.std_m is not None and 2.0 < snap.std_m < 4.0  # three axes of +-3 m uniform: sqrt(3) x 1.73 m
    assert "surveyed: 121 fixes" in snap.reason


def test_survey_refuses_a_scattered_survey() -> None:
    s = SurveyIn(duration_s=120, max_std_m=10.0)
    for t in range(400):
        s.update(t * NS, noisy_fix(t, 100.0))
    assert s.state == "surveying" and s.home is None
    assert "too scattered" in s.reason
    snap = s.snapshot()
    assert snap.std_m is not None and snap.std_m > 10.0 and snap.samples == 400


def test_survey_needs_enough_fixes_and_ignores_2d_fixes() -> None:
    s = SurveyIn(duration_s=60, max_std_m=10.0, min_fixes=60)
    for t in range(0, 300, 10):
        s.update(t * NS, noisy_fix(t))
        s.update(t * NS + 1, Position(HOME.lat_deg, HOME.lon_deg, None))  # 2D: not surveyed
    assert s.state == "surveying" and "too few fixes: 30" in s.reason
    s.restart()
    assert s.snapshot().samples == 0 and s.snapshot().home is None


def test_configured_position_starts_fixed() -> None:
    s = SurveyIn.configured(HOME)
    assert s.state == "fixed" and s.home == HOME and not s.update(0, moved(HOME, 500.0))
    assert s.snapshot().source == "configured" and s.home == HOME


# --- position -----------------------------------------------------------------------------------------------------
def test_position_quiet_fixes_are_ok_and_no_home_is_ok() -> None:
    d = PositionDetector()
    assert d.update(0, HOME, None).verdict is Level.OK
    assert all(d.update(t * NS, noisy_fix(t, 5.0), HOME).verdict is Level.OK for t in range(300))


def test_position_one_outlier_is_not_news_two_are() -> None:
    d = PositionDetector()
    d.update(0, HOME, HOME)
    assert d.update(NS, moved(HOME, 80.0), HOME).verdict is Level.OK
    assert d.update(2 * NS, HOME, HOME).verdict is Level.OK
    d.update(3 * NS, moved(HOME, 80.0), HOME)
    found = d.update(4 * NS, moved(HOME, 80.0), HOME)
    assert found.verdict is Level.SPOOFED and found.score == 1.0 and "80" in found.reason


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(-14, 14), st.floats(-14, 14), st.floats(-14, 14)), min_size=2, max_size=30))
def test_position_noise_below_the_suspect_level_never_alarms(offsets: list[tuple[float, float, float]]) -> None:
    d = PositionDetector()
    for i, (n, e, u) in enumerate(offsets):
        assert d.update(i * NS, moved(HOME, n, e, u), HOME).verdict is Level.OK


# --- phase jump and frequency ---------------------------------------------------------------------------------------
def test_phase_jump_is_suspect_on_one_sample_and_spoofed_on_two() -> None:
    d = PhaseJumpDetector()
    assert d.update(1_000.0, 995.0, QUIET_BOUND_NS).verdict is Level.OK
    assert d.update(1_500.0, 1_000.0, QUIET_BOUND_NS).verdict is Level.SUSPECT
    found = d.update(1_500.0, 1_000.0, QUIET_BOUND_NS)
    assert found.verdict is Level.SPOOFED and "+500 ns" in found.reason


def test_phase_single_outlier_then_back_is_only_suspect() -> None:
    d = PhaseJumpDetector()
    assert d.update(200.0, 0.0, QUIET_BOUND_NS).verdict is Level.SUSPECT
    assert d.update(2.0, 0.0, QUIET_BOUND_NS).verdict is Level.OK
    # Between 1.5 and 3 bounds: suspect, not spoofed.
    assert d.update(60.0, 0.0, QUIET_BOUND_NS).verdict is Level.SUSPECT


def test_phase_bound_floor_and_grown_bound() -> None:
    d = PhaseJumpDetector()
    assert d.update(25.0, 0.0, 1.0).verdict is Level.OK  # a bound of 1 ns counts as the 20 ns floor
    assert d.update(2_000.0, 0.0, 1_000.0).verdict is Level.SUSPECT  # in holdover the bound has grown
    assert d.update(2_000.0, 0.0, 5_000.0).verdict is Level.OK


def test_implausible_frequency_is_spoofed() -> None:
    d = PhaseJumpDetector()
    assert d.update(0.0, 0.0, 30.0, frequency_ppb=150.0, max_frequency_ppb=200.0).verdict is Level.OK
    found = d.update(0.0, 0.0, 30.0, frequency_ppb=-450.0, max_frequency_ppb=200.0)
    assert found.verdict is Level.SPOOFED and "-450.0 ppb" in found.reason


# --- slow push ----------------------------------------------------------------------------------------------------
def first_at_least(levels: list[Level], level: Level) -> int | None:
    return next((i for i, v in enumerate(levels) if SEVERITY[v] >= SEVERITY[level]), None)


def drift_run(rate_ns_per_s: float, start_s: int = 100, seconds: int = 400, rate_sigma_ppb: float = 0.0
              ) -> list[Level]:
    d = DriftDetector()
    levels = []
    for t in range(seconds):
        residual = quiet_residual(t) + rate_ns_per_s * max(0, t - start_s)
        levels.append(d.update(at(t), 1e6 + residual, 1e6, rate_sigma_ppb).verdict)
    return levels


@pytest.mark.parametrize(("rate", "spoofed_within_s", "suspect_within_s"), [(10.0, 12, 7), (100.0, 2, 2),
                                                                          (-10.0, 12, 7), (1000.0, 3, 3)])
def test_slow_push_is_caught_before_one_microsecond(rate: float, spoofed_within_s: int,
                                                    suspect_within_s: int) -> None:
    levels = drift_run(rate)
    assert worst(levels[:101]) is Level.OK  # the quiet part, and the push's first second
    suspect_s = first_at_least(levels, Level.SUSPECT) - 100  # type: ignore[operator]
    spoofed_s = first_at_least(levels, Level.SPOOFED) - 100  # type: ignore[operator]
    assert suspect_s <= suspect_within_s and spoofed_s <= spoofed_within_s
    if abs(rate) <= 100:
        assert abs(rate) * spoofed_s <= 200  # error accumulated at the alarm: 200 ns at most, of the 1 us allowed


def test_quiet_locked_clock_never_drifts_in_an_hour() -> None:
    assert worst(drift_run(0.0, seconds=3600)) is Level.OK
    assert worst(drift_run(2.0, start_s=0, seconds=3600)) is Level.OK  # a prediction 2 ppb off is not a push


def test_a_loose_prediction_widens_the_allowance() -> None:
    # A prediction whose frequency is only known to 5 ppb cannot call a 10 ns/s ramp a push.
    assert worst(drift_run(10.0, rate_sigma_ppb=5.0)) is Level.OK


def test_rebase_forgets_the_old_anchor_but_not_the_sum() -> None:
    d = DriftDetector()
    for t in range(5):
        d.update(at(t), 0.0, 0.0)
    d.rebase()
    levels = [d.update(at(t), 500.0, 0.0).verdict for t in range(5, 10)]  # a new anchor 500 ns away
    assert worst(levels) is Level.OK


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=3, max_size=120), st.floats(-2, 2))
def test_drift_stays_ok_for_bounded_noise_and_slow_prediction_error(noise: list[float], rate: float) -> None:
    d = DriftDetector()
    for t, e in enumerate(noise):
        assert d.update(at(t), rate * t + e, 0.0).verdict is Level.OK


# --- C/N0 ---------------------------------------------------------------------------------------------------------
def uniform_sats(n: int, cn0: int, spread: int = 0) -> tuple[SatInfo, ...]:
    return tuple(SatInfo(GPS, prn, 20 + 7 * prn, 30 * prn, cn0 + (prn % 3 - 1) * spread, True)
                 for prn in range(1, n + 1))


def test_cn0_real_sky_is_ok() -> None:
    d = Cn0Detector()
    assert all(d.update(at(t), sky(t)).verdict is Level.OK for t in range(300))


def test_cn0_all_alike_is_one_transmitter() -> None:
    found = Cn0Detector().update(0, uniform_sats(8, 45))
    assert found.verdict is Level.SPOOFED and "all alike" in found.reason
    assert Cn0Detector().update(0, uniform_sats(9, 45, spread=2)).verdict is Level.SUSPECT  # 1.6 dB
    assert Cn0Detector().update(0, uniform_sats(5, 45)).verdict is Level.OK  # too few to judge


def test_cn0_too_strong_for_the_sky() -> None:
    strong = sky(0)[:-1] + (SatInfo(GPS, 99, 80, 10, 57, True),)
    assert Cn0Detector().update(0, strong).verdict is Level.SUSPECT
    three = sky(0)[:-3] + tuple(SatInfo(GPS, 90 + i, 80, 10 + i, 58 + i, True) for i in range(3))
    assert Cn0Detector().update(0, three).verdict is Level.SPOOFED


def test_cn0_common_rise_is_spoofing_and_a_small_one_suspect() -> None:
    for shift, level in ((8.0, Level.SPOOFED), (4.0, Level.SUSPECT), (1.0, Level.OK)):
        d = Cn0Detector()
        for t in range(60):
            assert d.update(at(t), sky(t)).verdict is Level.OK
        found = d.update(at(60), sky(60, cn0_shift=shift))
        assert found.verdict is level, (shift, found)


def test_cn0_levels_returning_after_jamming_are_not_a_rise() -> None:
    cn0, jam = Cn0Detector(), JammingDetector()
    for t in range(120):
        cn0.update(at(t), sky(t)), jam.update(at(t), sky(t))
    during = [jam.update(at(t), sky(t, cn0_shift=-15)).verdict for t in range(120, 240)]
    assert during[0] is Level.JAMMED and all(v is Level.JAMMED for v in during)
    assert all(cn0.update(at(t), sky(t, cn0_shift=-15)).verdict is Level.OK for t in range(240, 241))
    after_cn0 = [cn0.update(at(t), sky(t)).verdict for t in range(241, 300)]
    after_jam = [jam.update(at(t), sky(t)).verdict for t in range(241, 300)]
    assert worst(after_cn0) is Level.OK and worst(after_jam) is Level.OK


# --- jamming ------------------------------------------------------------------------------------------------------
def test_jamming_ramp_is_caught_within_seconds_and_survives_losing_the_satellites() -> None:
    d = JammingDetector()
    for t in range(60):
        assert d.update(at(t), sky(t)).verdict is Level.OK
    ramp = [d.update(at(t), sky(t, cn0_shift=-(t - 59))).verdict for t in range(60, 80)]  # -1 dB/s
    # Down 5 dB by index 4 and 10 dB by index 9: suspect and jammed within a second of crossing each.
    assert 4 <= first_at_least(ramp, Level.SUSPECT) <= 5  # type: ignore[operator]
    assert 9 <= first_at_least(ramp, Level.JAMMED) <= 10  # type: ignore[operator]
    lost = d.update(at(80), sky(80, tracked=False))
    assert lost.verdict is Level.JAMMED and "after C/N0 collapsed" in lost.reason
    assert d.update(at(81), sky(81)).verdict is Level.OK  # back at the usual levels


def test_a_blocked_antenna_is_not_jamming() -> None:
    d = JammingDetector()
    for t in range(60):
        d.update(at(t), sky(t))
    blocked = [d.update(at(t), sky(t, tracked=False)) for t in range(60, 66)]
    assert all(f.verdict is Level.OK for f in blocked) and "blocked antenna" in blocked[0].reason
    assert all(d.update(at(t), sky(t)).verdict is Level.OK for t in range(66, 80))


def test_receiver_flags() -> None:
    d = ReceiverFlagsDetector()
    assert d.update().verdict is Level.OK
    assert d.update(jam_indicator=20, spoofing_state=1).verdict is Level.OK
    assert d.update(jam_indicator=100).verdict is Level.SUSPECT
    assert d.update(jam_indicator=200).verdict is Level.JAMMED
    assert d.update(spoofing_state=2).verdict is Level.SUSPECT
    found = d.update(jam_indicator=200, spoofing_state=3)
    assert found.verdict is Level.SPOOFED and "jamming indicator 200" in found.reason


# --- the sky's shape ----------------------------------------------------------------------------------------------
def test_sky_replaced_at_once_is_spoofed() -> None:
    d = SkyDetector()
    d.update(at(0), sky(0))
    other = tuple((GAL, prn) for prn in range(40, 60))
    found = d.update(at(1), sky(1, keys=other))
    assert found.verdict is Level.SPOOFED and "20 of 20 tracked satellites new" in found.reason


def test_sky_jumping_geometry_is_spoofed() -> None:
    d = SkyDetector()
    d.update(at(0), sky(0))
    assert d.update(at(1), sky(1, az_shift=90.0)).verdict is Level.SPOOFED
    assert SkyDetector().update(at(0), sky(0)).verdict is Level.OK


def test_sky_takeover_over_a_few_epochs_is_spoofed() -> None:
    d = SkyDetector()
    other = tuple((GAL, prn) for prn in range(40, 60))
    levels = [d.update(at(t), sky(t, keys=BASE_KEYS[4 * t:] + other[:4 * t])).verdict for t in range(6)]
    assert levels[:2] == [Level.OK, Level.OK] and levels[2] is Level.SUSPECT and levels[3] is Level.SPOOFED


def test_sky_partial_blockage_and_its_end_are_ok() -> None:
    d = SkyDetector()
    d.update(at(0), sky(0))
    assert d.update(at(1), sky(1, keys=BASE_KEYS[:10])).verdict is Level.OK
    assert d.update(at(2), sky(2)).verdict is Level.OK


@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=60))
def test_sky_rising_and_setting_one_by_one_never_alarms(adds: list[bool]) -> None:
    """One satellite rises or sets every 5 s (a real sky: every few minutes); epochs in between see no change."""
    d = SkyDetector()
    keys = list(BASE_KEYS)
    next_prn = 100
    for t, add in enumerate(adds):
        if add or len(keys) <= 6:
            keys.append((GPS, next_prn))
            next_prn += 1
        else:
            keys.pop(0)
        for second in range(5 * t, 5 * t + 5):
            assert d.update(at(second), sky(second, keys=tuple(keys))).verdict is Level.OK


# --- other opinions on the time ---------------------------------------------------------------------------------------
def test_constellations() -> None:
    d = ConstellationDetector()
    assert d.update({GPS: 0.0}).verdict is Level.OK
    assert d.update({GPS: 0.0, GAL: 20.0, Constellation.BEIDOU: -10.0}).verdict is Level.OK
    found = d.update({GPS: 0.0, GAL: 8.0, Constellation.BEIDOU: 300.0})
    assert found.verdict is Level.SPOOFED and "BeiDou is" in found.reason
    assert d.update({"GPS": 0.0, "Galileo": 60.0}).verdict is Level.SUSPECT
    assert "disagree" in d.update({GPS: 0.0, GAL: 150.0}).reason


def test_ntp_cross_check_is_coarse() -> None:
    d = NtpCrossCheck()
    assert d.update(3e6, 10e6).verdict is Level.OK  # within NTP's own uncertainty
    assert d.update(-6e6, 2e6).verdict is Level.SUSPECT  # 4 ms beyond it
    found = d.update(12e6, 2e6)
    assert found.verdict is Level.SPOOFED and "+12.0 ms" in found.reason


def test_label_jump_is_spoofed_and_a_late_epoch_only_suspect() -> None:
    d = LabelDetector()
    assert all(d.update(TAI0 + t * NS, RAW0 + t * NS + int(wiggle(t, 3e7))).verdict is Level.OK for t in range(10))
    # Buffered delivery: three epochs arrive together after a stall, then the stream is back on time.
    stalled = [d.update(TAI0 + t * NS, RAW0 + 13 * NS).verdict for t in (10, 11, 12, 13)]
    assert stalled == [Level.SUSPECT, Level.SUSPECT, Level.SUSPECT, Level.OK]
    # A label one second ahead from now on.
    jumped = [d.update(TAI0 + (t + 1) * NS, RAW0 + t * NS).verdict for t in (13, 14, 15)]
    assert jumped == [Level.SUSPECT, Level.SPOOFED, Level.OK]


# --- the monitor: benign events ---------------------------------------------------------------------------------------
def run(m: IntegrityMonitor, seconds: range, make_epoch, phase: bool | None = True, jam: int | None = None
        ) -> list[Level]:
    """One epoch (if ``make_epoch`` returns one) and one phase sample a second; the verdict level after each second."""
    levels = []
    for t in seconds:
        e = make_epoch(t)
        if e is not None:
            levels.append(m.on_epoch(at(t), e, jam_indicator=jam).level)
        if phase and e is not None and e.fix_mode == FixMode.FIX_3D:
            levels.append(m.on_phase(at(t) + 1000, 1e6 + quiet_residual(t), 1e6, QUIET_BOUND_NS).level)
    return levels


def warm(m: IntegrityMonitor, until: int = 120) -> None:
    assert worst(run(m, range(until), epoch)) is Level.OK


def rising_and_setting(t: int) -> GnssEpoch:
    swaps = t // 20  # every 20 s one satellite sets and a new one rises (a real sky: one every few minutes)
    keys = BASE_KEYS[swaps % 20:] + tuple((Constellation.BEIDOU, 100 + i) for i in range(swaps))
    return epoch(t, sats=sky(t, keys=keys[-20:]))


def fix_lost(t: int) -> GnssEpoch:
    if 200 <= t < 220:
        return epoch(t, sats=sky(t, keys=BASE_KEYS[:3]), position=None, fix=FixMode.NO_FIX, valid=False)
    return epoch(t, position=noisy_fix(t))


def leap_second(t: int) -> GnssEpoch:
    # 23:59:59, 23:59:60, 00:00:00 at t = 199, 200, 201: the label text repeats a minute's 60th second; TAI goes on.
    text = {199: "2016-12-31T23:59:59.000Z", 200: "2016-12-31T23:59:60.000Z", 201: "2017-01-01T00:00:00.000Z"}
    return epoch(t, utc_text=text.get(t, "2016-12-31T23:59:00.000Z"))


def receiver_reset(t: int) -> GnssEpoch | None:
    if 200 <= t < 208:
        return None  # silent while it restarts
    if 208 <= t < 212:
        return epoch(t, sats=(), position=None, fix=FixMode.NO_FIX, valid=False)
    return epoch(t)


def antenna_blocked(t: int) -> GnssEpoch:
    if 200 <= t < 206:
        return epoch(t, sats=sky(t, tracked=False), position=None, fix=FixMode.NO_FIX, valid=False)
    return epoch(t)


@pytest.mark.parametrize("scenario", [rising_and_setting, fix_lost, leap_second, receiver_reset, antenna_blocked],
                         ids=lambda f: f.__name__)
def test_benign_events_do_not_alarm(scenario) -> None:
    m = monitor()
    levels = run(m, range(400), scenario)
    assert worst(levels) is Level.OK, m.snapshot(at(400)).findings
    assert not m.alarms


def test_an_unknown_leap_second_is_a_label_jump() -> None:
    # The receiver inserted a second the appliance's table did not know: its labels are a second behind in TAI.
    m = monitor()
    warm(m)
    levels = run(m, range(120, 130), lambda t: epoch(t, label_shift_s=-1 if t >= 125 else 0), phase=False)
    assert levels[:5] == [Level.OK] * 5 and levels[5] is Level.SUSPECT and levels[6] is Level.SPOOFED


# --- the monitor: attacks ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("push_m", "level"), [(50.0, Level.SUSPECT), (60.0, Level.SPOOFED)])
def test_position_push_is_detected_within_five_fixes(push_m: float, level: Level) -> None:
    m = monitor()
    assert worst(run(m, range(60), lambda t: epoch(t, position=noisy_fix(t)))) is Level.OK
    levels = [m.on_epoch(at(t), epoch(t, position=moved(noisy_fix(t), push_m))).level for t in range(60, 65)]
    first = first_at_least(levels, level)
    assert first is not None and first <= 1  # the second pushed fix: 2 s after the push at 1 Hz
    assert SEVERITY[m.verdict().level] >= SEVERITY[level]
    assert any("from the surveyed home" in r for r in m.verdict().reasons)


@pytest.mark.parametrize(("rate", "within_s"), [(10.0, 12), (100.0, 2)])
def test_monitor_catches_a_slow_push(rate: float, within_s: int) -> None:
    m = monitor()
    warm(m)
    levels = []
    for t in range(120, 240):
        m.on_epoch(at(t), epoch(t))
        residual = quiet_residual(t) + rate * (t - 120)
        levels.append(m.on_phase(at(t) + 1000, 1e6 + residual, 1e6, QUIET_BOUND_NS).level)
    detected = first_at_least(levels, Level.SPOOFED)
    assert detected is not None and detected <= within_s and rate * detected < 1000
    assert m.verdict().level is Level.SPOOFED and not m.verdict().usable


def test_monitor_tells_jamming_from_a_blocked_antenna() -> None:
    m = monitor()
    warm(m)
    jammed = run(m, range(120, 130), lambda t: epoch(t, sats=sky(t, cn0_shift=-14)), phase=False)
    assert jammed[0] is Level.JAMMED
    assert any(r.startswith("jamming: C/N0 down") for r in m.verdict().reasons)
    m2 = monitor()
    warm(m2)
    assert worst(run(m2, range(120, 130), antenna_blocked, phase=False)) is Level.OK
    m3 = monitor()
    warm(m3)
    assert worst(run(m3, range(120, 125), epoch, jam=220)) is Level.JAMMED  # the receiver's own indicator


def test_three_independent_suspects_are_spoofing() -> None:
    m = monitor()
    warm(m)
    m.on_epoch(at(120), epoch(120, position=moved(HOME, 30.0)))
    m.on_epoch(at(121), epoch(121, position=moved(HOME, 30.0)))
    assert m.verdict().level is Level.SUSPECT
    assert m.on_ntp(at(121), 4e6, 1e6).level is Level.SUSPECT  # two: still only suspect
    v = m.on_constellation_offsets(at(121), {GPS: 0.0, GAL: 70.0})
    assert v.level is Level.SPOOFED and "3 independent checks suspect at once" in v.reasons
    assert 0.8 < v.score < 1.0


# --- the monitor: re-qualification ------------------------------------------------------------------------------------
def spoof_then_clean(m: IntegrityMonitor, spoof_s: range) -> None:
    for t in spoof_s:
        m.on_epoch(at(t), epoch(t))
        m.on_phase(at(t) + 1000, 1e6 + 2_000.0, 1e6, QUIET_BOUND_NS)
    assert m.verdict().level is Level.SPOOFED


def test_requalified_only_after_the_configured_consistent_time() -> None:
    m = monitor(qualification_s=60.0)
    warm(m)
    spoof_then_clean(m, range(120, 130))
    levels = {}
    for t in range(130, 200):
        m.on_epoch(at(t), epoch(t))
        levels[t] = m.on_phase(at(t) + 1000, 1e6 + quiet_residual(t), 1e6, QUIET_BOUND_NS)
    # Consistent from the first clean phase sample at t = 130: still spoofed at 189 (59 s), sound at 190 (60 s);
    # the epoch at 130 still saw the last spoofed phase sample, so the last alarm is dated there.
    assert levels[150].level is Level.SPOOFED and levels[150].requalify_in_s == pytest.approx(40.0, abs=0.01)
    assert levels[189].level is Level.SPOOFED and not levels[189].usable
    assert any("until consistent for 60 s" in r for r in levels[189].reasons)
    assert levels[190].level is Level.OK and levels[190].usable and levels[190].requalify_in_s is None
    assert levels[190].since_ns == at(190) + 1000
    snap = m.snapshot(at(200))
    assert snap.last_alarm_ns == at(130) and any("phase-jump" in r for r in snap.last_alarm_reasons)
    assert snap.alarms["phase-jump:spoofed"] >= 9


def test_requalification_restarts_on_a_suspect_and_on_silence() -> None:
    m = monitor(qualification_s=30.0)
    warm(m)
    spoof_then_clean(m, range(120, 125))
    for t in range(125, 145):
        m.on_epoch(at(t), epoch(t))
    m.on_ntp(at(145), 3e6, 0.0)  # a suspect at 145 restarts the count
    m.on_ntp(at(145), 0.0, 1e6)
    for t in range(146, 170):
        assert m.on_epoch(at(t), epoch(t)).level is Level.SPOOFED
    # Silence (epochs without a fix) is not consistency: 10 s of no fix restarts the count again.
    for t in range(170, 180):
        assert m.on_epoch(at(t), epoch(t, position=None, fix=FixMode.NO_FIX, valid=False)).level is Level.SPOOFED
    levels = {t: m.on_epoch(at(t), epoch(t)).level for t in range(180, 215)}
    assert levels[209] is Level.SPOOFED and levels[210] is Level.OK


def test_requalification_needs_fresh_evidence_not_just_time() -> None:
    m = monitor(qualification_s=30.0)
    warm(m)
    spoof_then_clean(m, range(120, 125))
    for t in range(125, 140):
        assert m.on_epoch(at(t), epoch(t)).level is Level.SPOOFED
    # Evidence stops at 139; an NTP answer at 170 (45 s after the count began) does not requalify on its own.
    v = m.on_ntp(at(170), 0.0, 1e6)
    assert v.level is Level.SPOOFED and v.requalify_in_s == pytest.approx(30.0)
    assert m.on_epoch(at(171), epoch(171)).level is Level.SPOOFED  # and the count restarts at 171


def test_jammed_is_latched_too_and_reports_its_cause() -> None:
    m = monitor(qualification_s=20.0)
    warm(m)
    run(m, range(120, 125), lambda t: epoch(t, sats=sky(t, cn0_shift=-14)), phase=False)
    v = m.on_epoch(at(125), epoch(125))
    assert v.level is Level.JAMMED and v.requalify_in_s is not None
    assert any("C/N0 down" in r for r in v.reasons)
    levels = run(m, range(126, 150), epoch)
    assert levels[-1] is Level.OK


# --- the monitor: survey and status -----------------------------------------------------------------------------------
def test_monitor_surveys_then_watches_the_position() -> None:
    m = IntegrityMonitor(SurveyIn(duration_s=60, max_std_m=10.0, min_fixes=30))
    run(m, range(30), lambda t: epoch(t, position=moved(noisy_fix(t), 30.0) if t in (10, 11) else noisy_fix(t)))
    assert m.survey.state == "surveying" and m.verdict().level is Level.OK  # no home yet: nothing to compare
    run(m, range(30, 70), lambda t: epoch(t, position=noisy_fix(t)))
    assert m.survey.state == "fixed" and distance_m(m.survey.home, HOME) < 5.0  # type: ignore[arg-type]
    levels = run(m, range(70, 75), lambda t: epoch(t, position=moved(noisy_fix(t), 80.0)), phase=False)
    assert levels[1] is Level.SPOOFED
    snap = m.snapshot(at(75))
    assert snap.survey.state == "fixed" and snap.survey.samples == 61
    assert {f.detector for f in snap.findings} == {"position", "cn0", "jamming", "sky", "label", "phase-jump", "drift"}
    assert snap.verdict.level is Level.SPOOFED and snap.verdict.findings[0].detector == "position"


def test_stale_findings_expire_and_detectors_are_replaceable() -> None:
    m = IntegrityMonitor(SurveyIn.configured(HOME), detectors=Detectors(ntp=NtpCrossCheck(margin_ns=1e6)),
                         slow_stale_s=100.0)
    assert m.on_ntp(at(0), 0.6e6, 0.0).level is Level.SUSPECT  # a tighter margin than the default
    assert m.on_epoch(at(50), epoch(50)).level is Level.SUSPECT
    assert m.on_epoch(at(101), epoch(101)).level is Level.OK  # the NTP finding is 101 s old


# --- additions: a moving antenna, unknown satellite places, a replaced sky that lingers -----------------------------
def test_survey_refuses_an_antenna_on_the_move_and_starts_over() -> None:
    s = SurveyIn(duration_s=60, max_std_m=10.0, min_fixes=30)
    for t in range(70):  # 0.5 m/s north: 35 m in 70 s, yet only ~10 m rms about the mean
        s.update(t * NS, moved(HOME, 0.5 * t))
    assert s.state == "surveying" and "the antenna moved" in s.reason
    assert s.snapshot().samples < 20  # it started over


def test_sky_unknown_places_before_a_fix_are_not_a_jump() -> None:
    d = SkyDetector()
    unknown = tuple(SatInfo(c, p, 0, 0, 40) for c, p in BASE_KEYS)
    d.update(at(0), unknown)
    assert d.update(at(1), sky(1)).verdict is Level.OK  # 0/0 means "not known yet", not "due north on the horizon"


def test_a_replaced_sky_stays_spoofed_until_the_real_one_returns() -> None:
    d = SkyDetector()
    for t in range(5):
        d.update(at(t), sky(t))
    other = tuple((GAL, prn) for prn in range(40, 60))
    assert d.update(at(5), sky(5, keys=other)).verdict is Level.SPOOFED
    for t in range(6, 120):  # the spoofer's sky stays: it never becomes the yardstick
        assert d.update(at(t), sky(t, keys=other)).verdict is Level.SPOOFED
    assert d.update(at(120), sky(120)).verdict is Level.OK  # the real sky, moved on by two minutes
    for t in range(121, 140):  # and the real sky after it is not read as yet another takeover
        assert d.update(at(t), sky(t)).verdict is Level.OK


def test_monitor_does_not_judge_the_sky_without_a_fix() -> None:
    m = monitor()
    unknown = tuple(SatInfo(s.constellation, s.prn, 45, 180, s.cn0_dbhz) for s in sky(0))
    for t in range(5):
        m.on_epoch(at(t), epoch(t, sats=unknown, position=None, fix=FixMode.NO_FIX, valid=False))
    assert m.on_epoch(at(5), epoch(5)).level is Level.OK
