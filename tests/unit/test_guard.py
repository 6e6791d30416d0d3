"""The integrity guard between the receiver and the clock: the phase anchor, rejecting and requalifying, overrides."""

from __future__ import annotations

from appliance.events import Alarm
from appliance.gnss.guard import (JAMMING, OVERRIDE, SPOOFING, IntegrityChanged, PhaseAnchor, ReferenceGuard,
                                  ReferenceUsable)
from appliance.gnss.integrity import IntegrityMonitor
from appliance.gnss.survey import SurveyIn
from appliance.clock.oscillator import OSCILLATORS, power_law

NS = 1_000_000_000
LAW = power_law(OSCILLATORS["ocxo"])
FREQ_PPB = 37.5  # the free-running oscillator against the reference: the free phase ramps 37.5 ns/s


def noise(t: int) -> float:
    return ((t * 2654435761) % 1000) / 250.0 - 2.0  # +-2 ns, deterministic


def free_phase(t: int) -> float:
    return 1000.0 + FREQ_PPB * t + noise(t)


def guard(**kw) -> ReferenceGuard:
    from appliance.events import Position

    return ReferenceGuard(IntegrityMonitor(SurveyIn.configured(Position(46.2, 6.1, 375.0)), 30.0), LAW, **kw)


def feed(g: ReferenceGuard, seconds: range, push: float = 0.0, start: int = 0) -> list[object]:
    out: list[object] = []
    for t in seconds:
        out += g.on_free_phase(t * NS, free_phase(t) + push * max(0, t - start))
    return out


def test_the_anchor_fits_the_oscillator_line_and_bounds_its_own_error() -> None:
    a = PhaseAnchor(LAW)
    for t in range(120):
        a.learn(t * NS, free_phase(t))
    assert a.anchor is not None and abs(a.anchor.frequency_ppb - FREQ_PPB) < 0.05
    expected, bound, rate_sigma = a.predict(180 * NS)
    assert abs(expected - (1000.0 + FREQ_PPB * 180)) < 5.0
    assert 0 < bound < 20 and rate_sigma < 0.5
    assert a.predict(3600 * NS)[1] > bound  # the bound grows with time since the anchor


def test_a_quiet_reference_stays_usable_and_silent() -> None:
    g = guard()
    out = feed(g, range(900))
    assert g.usable and not [e for e in out if isinstance(e, (ReferenceUsable, Alarm))]


def test_a_push_rejects_the_reference_then_it_requalifies() -> None:
    g = guard()
    feed(g, range(300))
    out = feed(g, range(300, 330), push=100.0, start=300)
    rejected = [e for e in out if isinstance(e, ReferenceUsable)]
    assert rejected and not rejected[0].usable and "spoof" in rejected[0].reason
    assert any(isinstance(e, Alarm) and e.code == SPOOFING and e.raised for e in out)
    assert any(isinstance(e, IntegrityChanged) and e.new == "spoofed" for e in out)
    assert not g.usable and g.rejections == 1
    out = feed(g, range(330, 460))  # the push ends: the phase is back on the oscillator's line
    assert g.usable and any(isinstance(e, ReferenceUsable) and e.usable for e in out)
    assert any(isinstance(e, Alarm) and e.code == SPOOFING and not e.raised for e in out)


def test_one_outlier_is_held_back_but_never_two_in_a_row() -> None:
    g = guard()
    feed(g, range(300))
    g.on_free_phase(300 * NS, free_phase(300) + 80.0)
    assert g.hold_sample
    g.on_free_phase(301 * NS, free_phase(301) + 80.0)
    assert not g.hold_sample


def test_monitor_only_alarms_but_keeps_the_reference() -> None:
    g = guard(action="monitor")
    feed(g, range(300))
    out = feed(g, range(300, 330), push=100.0, start=300)
    assert g.usable and any(isinstance(e, Alarm) and e.code == SPOOFING and e.raised and "monitor only" in e.text
                            for e in out)


def test_operator_overrides() -> None:
    g = guard()
    feed(g, range(300))
    out = g.set_override("reject", 300 * NS, "alice")
    assert not g.usable and any(isinstance(e, Alarm) and e.code == OVERRIDE and e.raised and "alice" in e.text
                                for e in out)
    g.set_override("trust", 301 * NS, "alice")
    feed(g, range(301, 330), push=100.0, start=301)
    assert g.usable  # trusted whatever the verdict ...
    assert g.monitor.verdict().level.value == "spoofed"  # ... which still says what it sees
    out = g.set_override("auto", 330 * NS, "alice")
    assert not g.usable and any(isinstance(e, Alarm) and e.code == OVERRIDE and not e.raised for e in out)
    try:
        g.set_override("maybe", 331 * NS, "alice")
    except ValueError as exc:
        assert "trust" in str(exc)
    else:
        raise AssertionError("a bad override was accepted")


def test_disabled_guard_says_nothing() -> None:
    g = guard(enabled=False)
    assert feed(g, range(300, 330), push=1000.0, start=300) == [] and g.usable
    assert JAMMING != SPOOFING


def _findings(out: list[object]) -> list[object]:
    return [e for e in out if isinstance(e, (ReferenceUsable, Alarm, IntegrityChanged))]


def _after_a_step(change: bool) -> tuple[ReferenceGuard, list[object]]:
    """Five minutes on the oscillator's line, then the free phase 50 ns lower (what gnss.cable_delay_ns 0 -> 50
    does), with the operator's change told to the guard or not."""
    g = guard()
    feed(g, range(300))
    if change:
        g.reference_moved(-50.0)
    out: list[object] = []
    for t in range(300, 600):
        out += g.on_free_phase(t * NS, free_phase(t) - 50.0)
    return g, out


def test_an_operators_delay_change_moves_the_line_with_it_and_is_no_phase_jump() -> None:
    g, out = _after_a_step(change=True)
    assert not _findings(out) and g.usable and g.monitor.verdict().level.value == "ok"
    assert all(f.verdict.value == "ok" for f in g.monitor.snapshot(599 * NS).findings)


def test_the_same_50_ns_step_without_a_change_is_a_phase_jump() -> None:
    _, out = _after_a_step(change=False)
    changed = [e for e in out if isinstance(e, IntegrityChanged)]
    assert changed and "phase-jump" in changed[0].reason, changed
    assert any(isinstance(e, Alarm) and e.raised for e in out)


def _epoch(t: int, where):
    from appliance.events import FixMode, GnssEpoch

    return GnssEpoch(rx_raw_ns=t * NS, tai_ns=None, utc_text="", fix_mode=FixMode.FIX_3D, time_only=False,
                     position=where, satellites=(), time_valid=True)


def test_an_operators_position_change_reanchors_the_home() -> None:
    from appliance.events import Position

    g = guard()
    moved = Position(46.21, 6.1, 375.0)  # 1.1 km north of the configured home: the antenna was moved
    before = []
    for t in range(5):
        before += g.on_epoch(_epoch(t, moved))
    assert any(isinstance(e, IntegrityChanged) and "position" in e.reason for e in before)
    g2 = guard()
    g2.set_home(moved)
    after = []
    for t in range(5):
        after += g2.on_epoch(_epoch(t, moved))
    assert not _findings(after) and g2.monitor.survey.home == moved and g2.monitor.survey.source == "configured"
    g2.set_home(None)
    assert g2.monitor.survey.state == "surveying" and g2.monitor.survey.home is None
