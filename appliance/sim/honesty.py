"""The product's promise under a slow spoofing push: the served error never above the bound the clock advertises.

Pure (simulated scheduler only).  ``push_trial`` runs the whole appliance on its simulated world (the receiver's
bytes, PPS and oscillator), locks and learns for ``warm_s``, then pushes the receiver's time: at a constant rate, or
on a ramp whose rate grows from zero to ``rate_ns_per_s`` over the push (an attacker who starts below every
threshold).  After ``push_s`` the attack stops and the trial watches ``after_s`` more.  Every second it compares
|served - true| with the bound the clock advertised then (clockAccuracy, NTP root dispersion and the rest are all
computed from it); a clock in FREERUN advertises none and promises nothing.  A young oscillator model (a short
warm-up) is the hard case: little history to outweigh what the push teaches it.

``sweep`` runs a grid of such trials; the worst margin it finds is what ``bench/honesty.py`` prints and what the
numbered scenarios 21 and up replay.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import product

from appliance.sim import drills
from appliance.sim.attacks import appliance
from appliance.status import TimeStatus
from appliance.units import NS_PER_S


@dataclass(frozen=True)
class Push:
    """One attack of the sweep: ``rate_ns_per_s`` constant, or reached at the end of a ramp."""

    seed: int = 1
    rate_ns_per_s: float = 1.0
    ramp: bool = False
    warm_s: int = 120
    oscillator: str = "ocxo"
    push_s: int = 400
    after_s: int = 600

    def label(self) -> str:
        shape = "ramp to" if self.ramp else "push"
        return f"{shape} {self.rate_ns_per_s:g} ns/s, {self.oscillator}, warm {self.warm_s} s, seed {self.seed}"


@dataclass
class Honesty:
    """What one push did to the promise."""

    push: Push
    seconds: int = 0  # seconds with a bound advertised
    over_s: int = 0  # of those, seconds with |served - true| above it
    worst_margin_ns: float = float("-inf")  # max over seconds of |served - true| - bound (negative: always within)
    worst_at_s: int = 0  # seconds after the attack's start
    worst_te_ns: int = 0
    worst_bound_ns: int = 0
    worst_state: str = ""
    detected_s: int | None = None  # attack start -> reference rejected
    max_te_ns: int = 0
    states: list[str] = field(default_factory=list)  # each state the clock was in, in order

    @property
    def kept(self) -> bool:
        return self.over_s == 0


def push_trial(push: Push) -> Honesty:
    """Stage ``push`` on a fresh simulated appliance and measure the served error against the advertised bound."""
    app, world, scheduler = appliance(push.seed, (f"clock.oscillator={push.oscillator}",))
    scheduler.run_for(push.warm_s * NS_PER_S)
    out = Honesty(push)
    conditions = world.receivers[0].receiver.conditions
    if not push.ramp:
        drills.apply(world, "spoof-push", f"{push.rate_ns_per_s:g}")
    for second in range(1, push.push_s + push.after_s + 1):
        if push.ramp and second <= push.push_s:  # error = a t^2 / 2, the rate a t reaching rate_ns_per_s at push_s
            conditions.time_offset_ns = round(push.rate_ns_per_s * second * second / (2 * push.push_s))
        if second == push.push_s + 1:
            drills.apply(world, "stop-attacks")
            conditions = world.receivers[0].receiver.conditions
        scheduler.run_for(NS_PER_S)
        status = app.status()
        _measure(out, second, status)
        if out.detected_s is None and status.integrity is not None and not status.integrity.usable:
            out.detected_s = second
    return out


def _measure(out: Honesty, second: int, status: TimeStatus) -> None:
    snap = status.clock
    if not out.states or out.states[-1] != snap.state:
        out.states.append(snap.state)
    assert snap.sim_time_error_ns is not None
    te = int(snap.sim_time_error_ns)
    out.max_te_ns = max(out.max_te_ns, abs(te))
    if snap.error_bound_ns is None:
        return  # FREERUN: nothing advertised, nothing promised
    out.seconds += 1
    margin = abs(te) - snap.error_bound_ns
    if margin > 0:
        out.over_s += 1
    if margin > out.worst_margin_ns:
        out.worst_margin_ns, out.worst_at_s = margin, second
        out.worst_te_ns, out.worst_bound_ns, out.worst_state = te, snap.error_bound_ns, snap.state


def grid(rates: Iterable[float] = (0.1, 0.3, 1.0, 2.0, 5.0), seeds: Iterable[int] = (1, 2),
         warms: Iterable[int] = (100, 160, 600), oscillators: Iterable[str] = ("ocxo", "rubidium"),
         ramps: Iterable[bool] = (False, True), push_s: int = 400, after_s: int = 600) -> list[Push]:
    """Every combination, in a stable order."""
    return [Push(seed, rate, ramp, warm, osc, push_s, after_s)
            for osc, ramp, rate, warm, seed in product(oscillators, ramps, rates, warms, seeds)]


def sweep(pushes: Iterable[Push]) -> list[Honesty]:
    return [push_trial(p) for p in pushes]
