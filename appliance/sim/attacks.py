"""Attacks on the GNSS reference, and benign sky events, staged on the whole appliance in simulated time.

Pure (simulated scheduler only).  Each trial runs the appliance on its embedded default (the simulated receiver's
bytes, PPS and oscillator) until the clock is locked and the antenna surveyed, then starts an attack through the same
world drills an operator has (``appliance world spoof-push 100`` ...), lets it run, ends it, and watches the clock
requalify the reference.  It measures what matters to a user: whether the attack was detected, how long that took,
and the largest time error the attacker caused before the clock let go of the reference.  Benign events (satellites
rising and setting, fix loss, a leap second, a receiver reset, a briefly blocked antenna) must raise no alarm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appliance import config as cfg, leap
from appliance.events import Alarm
from appliance.gnss.guard import JAMMING, SPOOFING, GuardStatus
from appliance.sim import drills
from appliance.sim.leapsecond import first_after_expiry
from appliance.status import TimeStatus
from appliance.units import NS_PER_S

START_TAI_NS = 1_782_000_037 * NS_PER_S + 250_000_000  # 2026-06-21, a quarter second past a true second
ALARMS = (SPOOFING, JAMMING)


@dataclass
class Trial:
    """What one staged event did to the appliance."""

    name: str
    seed: int
    detected: bool = False
    detect_s: float | None = None  # attack start -> reference rejected (or the alarm, in monitor mode)
    max_te_before_ns: int | None = None  # largest |served - true| from the attack's start until the clock let go
    max_te_ns: int = 0  # largest |served - true| from the attack's start to the end of the trial
    max_te_attack_ns: int = 0  # ... while the attack ran
    alarms: list[str] = field(default_factory=list)  # spoofing/jamming alarms raised during the trial
    reasons: tuple[str, ...] = ()
    state_after_detect: str | None = None
    requalified_s: float | None = None  # attack end -> reference used again
    state_end: str = ""
    level_end: str = ""
    figures: dict[str, Any] = field(default_factory=dict)


def appliance(seed: int = 1, settings: tuple[str, ...] = (), start_tai_ns: int = START_TAI_NS,
              world_table: leap.LeapTable | None = None) -> tuple[Any, Any, Any]:
    """The appliance on its simulated world under a simulated scheduler: (runtime, world, scheduler)."""
    from appliance.runtime.platforms import simulated
    from appliance.sched import SimScheduler

    table = leap.LeapTable.load_default()
    scheduler = SimScheduler(start_tai_ns)
    config = cfg.load(None, [f"sim.seed={seed}", "integrity.survey_s=300", *settings])
    app, world = simulated(config, scheduler, table, world_table)
    world.start()
    return app, world, scheduler


def run_trial(name: str, attack: Callable[[Any], Any], *, seed: int = 1, warm_s: int = 600, attack_s: int = 120,
              recover_s: int = 240, settings: tuple[str, ...] = (),
              end: Callable[[Any], Any] | None = None) -> Trial:
    """Warm up, attack for ``attack_s``, end it (``stop-attacks`` unless ``end`` is given), watch ``recover_s``.
    ``attack`` and ``end`` act on the simulated world."""
    app, world, scheduler = appliance(seed, settings)
    raised: list[tuple[int, Alarm]] = []
    app.subscribe(lambda e: raised.append((world.true_ns(), e)) if isinstance(e, Alarm) and e.raised
                  and e.code in ALARMS else None)
    scheduler.run_for(warm_s * NS_PER_S)
    t = Trial(name, seed)
    status = app.status()
    t.figures["state_before"] = status.clock.state
    t.figures["alarms_before"] = [a.code for _, a in raised]
    raised.clear()
    start = world.true_ns()
    attack(world)
    monitor_only = _integrity(status).action == "monitor"
    worst_before = 0
    for second in range(attack_s + recover_s):
        if second == attack_s:
            (end or _drill("stop-attacks"))(world)
            stopped = world.true_ns()
        scheduler.run_for(NS_PER_S)
        status = app.status()
        integrity = _integrity(status)
        te = abs(_time_error(status))
        t.max_te_ns = max(t.max_te_ns, te)
        if second < attack_s:
            t.max_te_attack_ns = max(t.max_te_attack_ns, te)
        caught = (raised if monitor_only else []) or not integrity.usable
        if not t.detected:
            worst_before = max(worst_before, te)
            if caught:
                t.detected = True
                t.detect_s = round((world.true_ns() - start) / NS_PER_S, 1)
                t.max_te_before_ns = worst_before
                t.reasons = integrity.reasons
        elif t.state_after_detect is None and second >= (t.detect_s or 0) + 1:
            t.state_after_detect = status.clock.state
        if second >= attack_s and t.detected and t.requalified_s is None and integrity.usable and \
                integrity.level == "ok":
            t.requalified_s = round((world.true_ns() - stopped) / NS_PER_S, 1)
    if not t.detected:
        t.max_te_before_ns = worst_before
    t.alarms = sorted({a.code for _, a in raised})
    t.state_end = status.clock.state
    t.level_end = _integrity(status).level
    return t


def _integrity(status: TimeStatus) -> GuardStatus:
    """The integrity checks' verdict on the appliance's own receiver, as its snapshot shows it."""
    assert status.integrity is not None
    return status.integrity


def _time_error(status: TimeStatus) -> int:
    error = status.clock.sim_time_error_ns
    assert error is not None
    return int(error)


def _drill(action: str, value: str = "") -> Callable[[Any], Any]:
    return lambda world: drills.apply(world, action, value)


# name -> (drill, trial keyword arguments, what the user expects)
ATTACKS: dict[str, tuple[Callable[[Any], Any], dict[str, Any]]] = {
    "slow-push-10ns": (_drill("spoof-push", "10"), {}),
    "slow-push-100ns": (_drill("spoof-push", "100"), {}),
    "time-step-1us": (_drill("spoof-step", "1000"), {}),
    "position-push-50m": (_drill("spoof-position", "50"), {}),
    "meaconing-2us": (_drill("meacon", "2000"), {}),
    "jamming-15db": (_drill("jam", "15"), {}),
    "one-system-spoofed": (_drill("spoof-system", "beidou:400"), {}),
    "fake-sky": (_drill("fake-sky"), {}),
}


def _blocked_for(seconds: int) -> Callable[[Any], Any]:
    def stage(world: Any) -> None:
        world.receiver.conditions.blocked = True
        world.scheduler.call_at(world.true_ns() + seconds * NS_PER_S,
                                lambda: setattr(world.receiver.conditions, "blocked", False))
    return stage


BENIGN: dict[str, tuple[Callable[[Any], Any], dict[str, Any]]] = {
    "fix-loss-and-recovery": (_blocked_for(120), {"attack_s": 300, "recover_s": 60}),
    "antenna-briefly-blocked": (_blocked_for(5), {"attack_s": 120, "recover_s": 60}),
    "receiver-reset": (_drill("receiver-reset"), {"attack_s": 240, "recover_s": 60}),
    "rising-and-setting-1h": (lambda world: None, {"attack_s": 3600, "recover_s": 0}),
}


def attack_trial(name: str, seed: int = 1) -> Trial:
    drill, kwargs = ATTACKS[name]
    return run_trial(name, drill, seed=seed, **kwargs)


def benign_trial(name: str, seed: int = 1) -> Trial:
    drill, kwargs = BENIGN[name]
    return run_trial(name, drill, seed=seed, **kwargs)


def leap_second_trial(seed: int = 1) -> Trial:
    """A leap second inserted while the appliance watches: labels go 23:59:59, 23:59:60, 00:00:00 and nothing is
    alarmed (the label detector works in TAI, where nothing jumps)."""
    from appliance.runtime.platforms import simulated
    from appliance.sched import SimScheduler

    future = first_after_expiry()
    shipped, truth = future.table, future.truth
    start = future.before_tai_ns(23, 45, 0) + 250_000_000
    scheduler = SimScheduler(start)
    app, world = simulated(cfg.load(None, [f"sim.seed={seed}", "integrity.survey_s=300"]), scheduler, shipped, truth)
    raised: list[str] = []
    app.subscribe(lambda e: raised.append(e.code) if isinstance(e, Alarm) and e.raised and e.code in ALARMS
                  else None)
    world.start()
    t = Trial("leap-second", seed)
    usable = True
    for _ in range(30 * 60):
        scheduler.run_for(NS_PER_S)
        status = app.status()
        usable = usable and _integrity(status).usable
        t.max_te_ns = max(t.max_te_ns, abs(_time_error(status)) if status.clock.state == "LOCKED" else 0)
    t.alarms = sorted(set(raised))
    t.detected = not usable
    t.state_end = status.clock.state
    t.level_end = _integrity(status).level
    t.figures["tai_utc_end"] = status.leap.tai_utc_s
    return t
