"""Reference selection: which of several time references drives the clock, and switching between them hitlessly.

Pure core.  Every reference (GNSS receivers, a PTP upstream grandmaster, NTP upstream servers, an IRIG-B input, an
external 1PPS) hands in ``RefSample``s: served time minus the reference at a local counter instant, with the sample's
own uncertainty.  The selector keeps, per reference, a qualification state:

* ``disabled``      the operator took it out of selection;
* ``no-signal``     no sample for ``timeout_s`` (or none yet);
* ``unusable``      its source says it cannot be trusted (receiver without fix, GNSS integrity rejected, ...);
* ``qualifying``    samples arriving, not yet for ``qualify_s`` without a gap;
* ``qualified``     may drive the clock;
* ``disqualified``  it disagrees with the other references beyond the sum of their bounds.

The highest-priority qualified reference is *active* (priority 1 is the highest; the operator may pin one).  Revertive
policy returns to a better reference once it has been qualified for ``wait_to_restore_s``; non-revertive stays on the
active one until it fails.  When none is left the clock holds over.

References sampled at different instants are compared at one instant, on their *free phase* (offset minus every
correction the discipline had applied, which the caller passes with each sample): each one's latest free phase is
carried to that instant at the oscillator's drift (fitted on the steadiest live reference), so neither the clock's
steering and first-lock step nor an oscillator running fast reads as disagreement.

Hitless switching (phase build-out): when the clock falls back to a reference of the same or lower priority while
its phase is sound (locked, or just into holdover), the new reference's phase against the clock is measured (the
median of its recent samples, against the old reference's while that one is still measured), so the loop carries on
from the phase it was holding.  Up to ``step_limit_ns`` of that difference goes to the loop; the rest is built out:
subtracted from the new reference's samples and kept until the next switch (``slew_ns_per_s`` 0, the default, as a telecom
clock's phase build-out does), or slewed away at ``slew_ns_per_s`` so the clock ends on the new reference without ever
moving faster than that, nor faster than the loop can follow without losing lock (``set_slew_cap``).  A return to a
higher-priority reference (revertive, or GNSS back) is not built out: the better reference is followed, and the
discipline slews there (it never steps after its first lock).

The loop gets one sample per second from the active reference (``LoopSample``): high-rate references (PTP at 16
Sync/s) are averaged over the second, low-rate ones (NTP polls) are held between samples, extrapolated with the
corrections applied meanwhile, so the discipline sees the 1 Hz stream it was designed for.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections import deque
from dataclasses import dataclass, field

from appliance.refs.model import RefSample, RefSpec
from appliance.units import NS_PER_S

WINDOW_SAMPLES = 64  # recent samples kept per reference (free phase)
COMPARE_WINDOW_NS = 16 * NS_PER_S  # recent samples: jitter and drift are judged over the last 16 s
# The active reference's noise, which tunes the loop, over a longer window: from 16 samples of a 1 Hz reference the
# estimate swings by 2x and more, and each swing retuned the loop's time constant and lock thresholds.
TUNING_WINDOW_NS = 64 * NS_PER_S
RECENT_SAMPLES = 3  # a reference's phase now: the median of its latest three samples (one outlier cannot move it)
HOLD_ABOVE_NS = 1_500_000_000  # a reference sampled less often than this is held between samples for the loop
LOOP_INTERVAL_NS = 900_000_000  # one loop sample per second (a PPS is 1 s +- jitter apart: 0.9 s lets each through)


class RefState(str, enum.Enum):
    DISABLED = "disabled"
    NO_SIGNAL = "no-signal"
    UNUSABLE = "unusable"
    QUALIFYING = "qualifying"
    QUALIFIED = "qualified"
    DISQUALIFIED = "disqualified"


@dataclass(frozen=True)
class SelectorPolicy:
    revertive: bool = True
    wait_to_restore_s: float = 60.0
    step_limit_ns: float = 20.0
    slew_ns_per_s: float = 0.0  # 0: a built-out phase is kept until the next switch
    disagree_margin_ns: float = 0.0  # added to the sum of two references' bounds before they disagree


# --- events --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RefStateChanged:
    ref: str
    old: str
    new: str
    reason: str
    at_raw_ns: int


@dataclass(frozen=True)
class RefSwitched:
    """The active reference changed (``None``: none left, the clock holds over)."""

    old: str | None
    new: str | None
    reason: str
    at_raw_ns: int
    buildout_ns: float  # the phase difference built out at the switch (0 if none)
    step_ns: float  # the part of the difference handed to the loop (within the step limit)


@dataclass(frozen=True)
class LoopSample:
    """What the discipline gets: the active reference's offset (build-out removed) at ``raw_ns``."""

    ref: str
    raw_ns: int
    offset_ns: float
    uncertainty_ns: float
    doubt_ns: float = 0.0  # the active reference's latest RefSample.doubt_ns


@dataclass(frozen=True)
class Disagreement:
    """Two references whose difference exceeds the sum of their bounds."""

    a: str
    b: str
    difference_ns: float  # a minus b (time), i.e. offset_b - offset_a
    allowed_ns: float


@dataclass(frozen=True)
class RefView:
    """One reference as status shows it."""

    name: str
    kind: str
    priority: int
    state: str
    reason: str
    since_raw_ns: int
    active: bool
    pinned: bool
    offset_ns: float | None  # served minus reference, the latest sample (build-out not removed)
    jitter_ns: float | None  # rms of the recent samples about their median
    uncertainty_ns: float | None  # the latest sample's own bound
    accuracy_ns: float
    samples: int
    last_sample_raw_ns: int | None
    buildout_ns: float


@dataclass
class _Ref:
    spec: RefSpec
    state: RefState = RefState.NO_SIGNAL
    reason: str = "no sample yet"
    since_raw_ns: int = 0
    enabled: bool = True
    usable: bool = True
    unusable_reason: str = ""
    disagrees: str = ""  # why it is disqualified ("" when it agrees)
    good_since_ns: int | None = None
    last_raw_ns: int | None = None
    qualified_since_ns: int | None = None
    last: RefSample | None = None
    samples: int = 0
    # (raw_ns, offset_ns, uncertainty_ns, correction_ns): recent samples with the discipline's correction then
    hist: deque[tuple[int, float, float, float]] = field(default_factory=lambda: deque(maxlen=WINDOW_SAMPLES))

    def recent(self, raw_ns: int, window_ns: int = COMPARE_WINDOW_NS) -> list[tuple[int, float, float, float]]:
        window = max(window_ns, int(2 * self.spec.timeout_s * NS_PER_S))
        return [s for s in self.hist if raw_ns - s[0] <= window]

    def live(self, raw_ns: int) -> bool:
        return (self.enabled and self.usable and self.last_raw_ns is not None
                and raw_ns - self.last_raw_ns <= self.spec.timeout_s * NS_PER_S)


class ReferenceSelector:
    def __init__(self, specs: list[RefSpec], policy: SelectorPolicy, start_raw_ns: int):
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"reference names must be unique: {names}")
        if not specs:
            raise ValueError("at least one reference is needed")
        self.policy = policy
        self.refs = {s.name: _Ref(s, since_raw_ns=start_raw_ns, enabled=s.enabled) for s in specs}
        for r in self.refs.values():
            if not r.enabled:
                r.state, r.reason = RefState.DISABLED, "disabled in the settings"
        self.active: str | None = None
        self.pinned: str | None = None
        self.switches = 0
        self.disagreements: list[Disagreement] = []
        self._buildout_ns = 0.0
        self._buildout_at_ns = start_raw_ns
        self._acc: list[tuple[int, float, float]] = []  # active reference samples since the last loop sample
        self._doubt_ns = 0.0  # the active reference's latest doubt (RefSample.doubt_ns)
        self._last_loop_ns: int | None = None
        self.hold_phase = True  # the clock's phase is worth keeping at a switch (the caller: it is locked)
        self.phase_bound_ns: float | None = None  # in holdover, what the clock still vouches for (the caller)
        self._correction_ns = 0.0  # the discipline's corrections up to the latest sample or tick
        self.slew_cap_ns_per_s = math.inf  # the loop's own limit on following a moving phase (set_slew_cap)
        self._handed_ns: int | None = None  # the sample a switch handed to the loop at once

    # --- inputs --------------------------------------------------------------------------------------------
    def on_sample(self, sample: RefSample, correction_ns: float = 0.0) -> list[object]:
        """A sample of one reference; ``correction_ns``: every correction the discipline applied up to
        ``sample.raw_ns``.  Returns events and, when the loop is due one, a ``LoopSample``."""
        r = self.refs.get(sample.ref)
        if r is None or not math.isfinite(sample.offset_ns) or not math.isfinite(sample.uncertainty_ns):
            return []
        self._correction_ns = correction_ns
        t = sample.raw_ns
        if r.last_raw_ns is None or t - r.last_raw_ns > r.spec.timeout_s * NS_PER_S:
            r.good_since_ns = t
        r.last_raw_ns, r.last = t, sample
        r.samples += 1
        r.hist.append((t, sample.offset_ns, max(sample.uncertainty_ns, 0.0), correction_ns))
        out = self._evaluate(t)
        if self.active == sample.ref and t != self._handed_ns:  # (== : a switch just handed it to the loop)
            self._acc.append((t, sample.offset_ns, sample.uncertainty_ns))
            self._doubt_ns = sample.doubt_ns
            if self._last_loop_ns is None or t - self._last_loop_ns >= LOOP_INTERVAL_NS:
                out.append(self._loop_sample(t))
        return out

    def set_usable(self, name: str, usable: bool, reason: str, raw_ns: int) -> list[object]:
        """The source's own verdict (receiver fix, integrity, upstream quality)."""
        r = self.refs.get(name)
        if r is None or (r.usable == usable and r.unusable_reason == reason):
            return []
        r.usable, r.unusable_reason = usable, "" if usable else reason
        if not usable:
            r.good_since_ns = None  # qualification starts again once it is usable
        return self._evaluate(raw_ns)

    def tick(self, raw_ns: int, correction_ns: float = 0.0) -> list[object]:
        """Once a second: timeouts, qualification, disagreement; a held loop sample for a slow reference."""
        self._correction_ns = correction_ns
        out = self._evaluate(raw_ns)
        a = self.refs.get(self.active) if self.active else None
        if (a is not None and _interval_ns(a) > HOLD_ABOVE_NS
                and (self._last_loop_ns is None or raw_ns - self._last_loop_ns >= NS_PER_S)):
            t_last, _offset, unc, _corr = a.hist[-1]
            if raw_ns - t_last < a.spec.timeout_s * NS_PER_S:
                # Held: the reference's last phase carried to now (the oscillator's drift since, and every
                # correction the loop applied since).
                self._acc.append((raw_ns, self._held(a, raw_ns), unc))
                out.append(self._loop_sample(raw_ns))
        return out

    def enable(self, name: str, on: bool, raw_ns: int, who: str) -> list[object]:
        r = self._named(name)
        r.enabled = on
        if not on and self.pinned == name:
            self.pinned = None
        r.good_since_ns = None
        return self._evaluate(raw_ns, why=f"{name} {'enabled' if on else 'disabled'} by {who}")

    def pin(self, name: str | None, raw_ns: int, who: str) -> list[object]:
        """Use ``name`` whenever it is qualified (None: automatic selection again)."""
        if name is not None:
            r = self._named(name)
            if not r.enabled:
                raise ValueError(f"reference {name} is disabled: enable it before pinning it")
        released = self.pinned is not None and name is None
        self.pinned = name
        # Unpinned, a revertive selector returns to the best reference at once: the operator asked for it.
        return self._evaluate(raw_ns, why=f"pinned to {name} by {who}" if name else f"unpinned by {who}",
                              unpinned=released)

    def _named(self, name: str) -> _Ref:
        r = self.refs.get(name)
        if r is None:
            raise ValueError(f"no reference named {name!r} (known: {', '.join(self.refs)})")
        return r

    # --- the state of each reference, and the choice -------------------------------------------------------------
    def _evaluate(self, raw_ns: int, why: str = "", unpinned: bool = False) -> list[object]:
        out: list[object] = []
        self._crosscheck(raw_ns)
        for r in self.refs.values():
            new, reason = self._state_of(r, raw_ns)
            if new is not r.state:
                out.append(RefStateChanged(r.spec.name, r.state.value, new.value, reason, raw_ns))
                r.state, r.since_raw_ns = new, raw_ns
                r.qualified_since_ns = raw_ns if new is RefState.QUALIFIED else None
            r.reason = reason
        out += self._choose(raw_ns, why, unpinned)
        return out

    def _state_of(self, r: _Ref, raw_ns: int) -> tuple[RefState, str]:
        s = r.spec
        if not r.enabled:
            return RefState.DISABLED, "disabled by the operator"
        if r.last_raw_ns is None:
            return RefState.NO_SIGNAL, "no sample yet"
        silent_s = (raw_ns - r.last_raw_ns) / NS_PER_S
        if silent_s > s.timeout_s:
            r.good_since_ns = None
            return RefState.NO_SIGNAL, f"no sample for {silent_s:.0f} s"
        if not r.usable:
            return RefState.UNUSABLE, r.unusable_reason
        if r.disagrees:
            return RefState.DISQUALIFIED, r.disagrees
        if r.good_since_ns is None:
            r.good_since_ns = r.last_raw_ns
        good_s = (raw_ns - r.good_since_ns) / NS_PER_S
        # Qualified it stays while its samples run on without a gap since it qualified (a gap restarts them).
        unbroken = r.qualified_since_ns is not None and r.good_since_ns <= r.qualified_since_ns
        if (r.state is RefState.QUALIFIED and unbroken) or good_s >= s.qualify_s:
            return RefState.QUALIFIED, f"samples for {good_s:.0f} s"
        return RefState.QUALIFYING, f"samples for {good_s:.0f} of {s.qualify_s:.0f} s"

    def _choose(self, raw_ns: int, why: str, unpinned: bool = False) -> list[object]:
        qualified = [r for r in self.refs.values() if r.state is RefState.QUALIFIED]
        current = self.refs.get(self.active) if self.active else None
        best = min(qualified, key=lambda r: (r.spec.priority, r.spec.name), default=None)
        pinned = self.refs.get(self.pinned) if self.pinned else None
        reason = ""
        if pinned is not None and pinned.state is RefState.QUALIFIED:
            choice, reason = pinned, why or f"pinned to {pinned.spec.name}"
        elif current is not None and current.state is RefState.QUALIFIED:
            choice = current
            if (best is not None and best is not current and best.spec.priority < current.spec.priority
                    and self.policy.revertive):
                waited_s = (raw_ns - (best.qualified_since_ns or raw_ns)) / NS_PER_S
                if waited_s >= self.policy.wait_to_restore_s or unpinned:
                    choice = best
                    reason = why if unpinned else (f"{best.spec.name} (priority {best.spec.priority}) qualified "
                                                   f"for {waited_s:.0f} s: revertive")
        elif best is not None:
            lost = "" if current is None else f"{current.spec.name} {current.state.value} ({why or current.reason}); "
            choice, reason = best, f"{lost}{best.spec.name} is the best qualified reference"
        else:
            choice = None
            reason = ("" if current is None else
                      f"{current.spec.name} {current.state.value} ({current.reason}); no qualified reference left")
        if choice is current:
            return []
        out: list[object] = [self._switch(current, choice, reason, raw_ns)]
        if choice is not None and choice.hist:
            # The loop hears from the new reference at once (its latest sample, moved by the corrections applied
            # since): it must not wait for the next one and time out in between.
            t, _offset, unc, _corr = choice.hist[-1]
            self._acc = [(raw_ns, self._held(choice, raw_ns), unc)]
            out.append(self._loop_sample(raw_ns))
            self._handed_ns = self._last_loop_ns = t  # that sample is used; the loop's next one is due a second on
        return out

    def _held(self, r: _Ref, raw_ns: int) -> float:
        """A reference's latest sample carried to ``raw_ns``: its free phase moved at the oscillator's drift, plus the
        corrections the loop has applied up to now."""
        t, offset, _unc, corr = r.hist[-1]
        return offset - corr + self.drift_ns_per_s(raw_ns) * (raw_ns - t) / NS_PER_S + self._correction_ns

    def _switch(self, old: _Ref | None, new: _Ref | None, reason: str, raw_ns: int) -> RefSwitched:
        step = buildout = 0.0
        # Build out on a fallback from a reference that went away; not from one set aside as wrong (the clock may
        # already have followed it part of the way: the reference that outvoted it is the better guide).
        fallback = (new is not None and old is not None and new.spec.priority >= old.spec.priority
                    and old.state is not RefState.DISQUALIFIED)
        # Out of holdover onto a reference coarser than what the clock still vouches for: carry on from the clock's
        # phase too (0: the loop held no reference).
        coarser = (new is not None and old is None and self.phase_bound_ns is not None
                   and new.spec.accuracy_ns > self.phase_bound_ns)
        if new is not None and (fallback or coarser) and self.hold_phase:
            # The loop carries on from the phase it holds: the old reference's (its build-out removed) while that
            # one is still measured, else the clock's own.  Phases over the whole recent window: a noisy reference's
            # last few samples would put their noise into the build-out.
            rate = self.drift_ns_per_s(raw_ns)
            new_phase = self._offset_over_window(new, raw_ns, rate)
            old_phase = None if old is None else self._offset_over_window(old, raw_ns, rate)
            held = 0.0 if old_phase is None else old_phase - self.buildout_ns(raw_ns)
            if new_phase is not None:
                diff = new_phase - held
                step = max(-self.policy.step_limit_ns, min(self.policy.step_limit_ns, diff))
                buildout = diff - step
        self.active = None if new is None else new.spec.name
        self._buildout_ns, self._buildout_at_ns = buildout, raw_ns
        self._acc.clear()
        self._doubt_ns = 0.0 if new is None or new.last is None else new.last.doubt_ns
        self._last_loop_ns = None
        self.switches += 1
        return RefSwitched(None if old is None else old.spec.name, self.active, reason, raw_ns, buildout, step)

    def buildout_ns(self, raw_ns: int) -> float:
        """The phase still built out of the active reference's samples at ``raw_ns``."""
        b = self._buildout_ns
        rate = self._slew_rate()
        if rate <= 0 or b == 0:
            return b
        left = abs(b) - rate * max(0, raw_ns - self._buildout_at_ns) / NS_PER_S
        return math.copysign(max(0.0, left), b)

    def _slew_rate(self) -> float:
        return min(self.policy.slew_ns_per_s, self.slew_cap_ns_per_s)

    def set_slew_cap(self, cap_ns_per_s: float, raw_ns: int) -> None:
        """How fast the loop can follow a moving phase without losing lock (the caller: from its time constant and
        lock threshold); the build-out is never slewed away faster."""
        if cap_ns_per_s == self.slew_cap_ns_per_s:
            return
        self._buildout_ns, self._buildout_at_ns = self.buildout_ns(raw_ns), raw_ns  # what is left, at the old rate
        self.slew_cap_ns_per_s = cap_ns_per_s

    def _loop_sample(self, raw_ns: int) -> LoopSample:
        assert self.active is not None
        acc = self._acc
        offset = sum(o for _, o, _ in acc) / len(acc)
        unc = max(u for _, _, u in acc)
        self._acc = []
        self._last_loop_ns = raw_ns
        return LoopSample(self.active, raw_ns, offset - self.buildout_ns(raw_ns), unc, self._doubt_ns)

    # --- references against each other -------------------------------------------------------------------------
    def drift_ns_per_s(self, raw_ns: int) -> float:
        """How fast the oscillator runs against the references: the least-squares slope of the free phase (offset
        minus the discipline's corrections, so the loop's steps and steering are not in it) of the live reference with
        the smallest bound (0 until one has 4 s of samples)."""
        best: tuple[float, float] | None = None
        for r in self.refs.values():
            rec = r.recent(raw_ns)
            # A reference silent for a moment still says how the oscillator ran (at a switch the one just lost is
            # usually the best guide); one its source rejects or the others outvote does not.
            if (not r.enabled or not r.usable or r.disagrees or len(rec) < 5
                    or rec[-1][0] - rec[0][0] < 4 * NS_PER_S):
                continue
            slope = _slope([(t, o - c) for t, o, _, c in rec])
            bound = self._bound(r, rec)
            if best is None or bound < best[0]:
                best = (bound, slope)
        return 0.0 if best is None else best[1]

    def _free_now(self, name: str, raw_ns: int, drift_ns_per_s: float) -> float | None:
        """The reference's free phase at ``raw_ns``: the median of its latest samples' free phase, each carried to
        ``raw_ns`` at the oscillator's drift.  Differences between references are differences of their offsets."""
        rec = self.refs[name].recent(raw_ns)[-RECENT_SAMPLES:]  # the latest few: a step shows within two samples
        if not rec:
            return None
        return statistics.median(o - c + drift_ns_per_s * (raw_ns - t) / NS_PER_S for t, o, _, c in rec)

    def _offset_over_window(self, r: _Ref, raw_ns: int, drift_ns_per_s: float) -> float | None:
        """The reference's offset at ``raw_ns`` from the median of all its recent samples' free phase."""
        rec = r.recent(raw_ns)
        if not rec:
            return None
        return statistics.median(o - c + drift_ns_per_s * (raw_ns - t) / NS_PER_S
                                 for t, o, _, c in rec) + self._correction_ns

    def offset_now(self, name: str, raw_ns: int, drift_ns_per_s: float | None = None) -> float | None:
        """The reference's offset at ``raw_ns`` (served minus reference), from its latest samples and the latest
        correction the caller passed."""
        rate = self.drift_ns_per_s(raw_ns) if drift_ns_per_s is None else drift_ns_per_s
        free = self._free_now(name, raw_ns, rate)
        return None if free is None else free + self._correction_ns

    def _crosscheck(self, raw_ns: int) -> None:
        """Compare every pair of live references at one instant.  A reference most of the others (at least two)
        dispute is disqualified; otherwise, of two that disagree, the one of lower priority is (priority says which
        one the operator trusts; whether a GNSS reference is spoofed is the integrity checks' business, and they
        hear of every other reference's opinion)."""
        rate = self.drift_ns_per_s(raw_ns)
        live: dict[str, tuple[float, float]] = {}
        for name, r in self.refs.items():
            rec = r.recent(raw_ns)
            if not r.live(raw_ns) or not rec:
                r.disagrees = ""
                continue
            now = self._free_now(name, raw_ns, rate)
            assert now is not None
            live[name] = (now, self._bound(r, rec))
        self.disagreements = []
        agree: dict[str, set[str]] = {n: set() for n in live}
        differ: dict[str, set[str]] = {n: set() for n in live}
        names = sorted(live)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                diff = live[b][0] - live[a][0]
                allowed = live[a][1] + live[b][1] + self.policy.disagree_margin_ns
                if abs(diff) > allowed:
                    differ[a].add(b)
                    differ[b].add(a)
                    self.disagreements.append(Disagreement(a, b, diff, allowed))
                else:
                    agree[a].add(b)
                    agree[b].add(a)
        # The majority first: a reference most of the others (two at least) dispute is wrong.
        outvoted = {n for n in live if len(differ[n]) >= 2 and len(differ[n]) > len(agree[n])}
        for name in live:
            r = self.refs[name]
            verdict = ""
            if name in outvoted:
                verdict = "disagrees with " + ", ".join(sorted(differ[name]))
            else:
                # Else priority says whom the operator trusts: a reference disputed by a higher-priority one that
                # is not itself outvoted is the one set aside.
                better = sorted(o for o in differ[name] if o not in outvoted
                                and (self.refs[o].spec.priority, o) < (r.spec.priority, name))
                if better:
                    verdict = f"disagrees with {', '.join(better)}, of higher priority"
            if verdict:
                r.good_since_ns = None  # once it agrees again it qualifies anew
                d = next(x for x in self.disagreements if name in (x.a, x.b))
                r.disagrees = f"{verdict} ({abs(d.difference_ns):.0f} ns apart, bound {d.allowed_ns:.0f} ns)"
            else:
                r.disagrees = ""

    def _bound(self, r: _Ref, recent: list[tuple[int, float, float, float]]) -> float:
        unc = statistics.median(u for _, _, u, _ in recent)
        # Its scatter is not known from fewer than four samples: count its accuracy again for it meanwhile.
        scatter = _jitter(recent) if len(recent) >= 4 else max(r.spec.accuracy_ns, unc)
        return max(r.spec.accuracy_ns, unc) + 3 * scatter

    # --- the read model --------------------------------------------------------------------------------------------
    def views(self, raw_ns: int) -> list[RefView]:
        out = []
        for name, r in sorted(self.refs.items(), key=lambda kv: (kv[1].spec.priority, kv[0])):
            rec = r.recent(raw_ns)
            out.append(RefView(name, r.spec.kind, r.spec.priority, r.state.value, r.reason, r.since_raw_ns,
                               name == self.active, name == self.pinned,
                               None if r.last is None else r.last.offset_ns,
                               _jitter(rec) if len(_fresh(rec)) >= 4 else None,  # not known from fewer
                               None if r.last is None else r.last.uncertainty_ns, r.spec.accuracy_ns, r.samples,
                               r.last_raw_ns, self.buildout_ns(raw_ns) if name == self.active else 0.0))
        return out

    def active_quality(self, raw_ns: int) -> tuple[float, float] | None:
        """(accuracy, noise) of the active reference: its bound without the scatter, and the scatter."""
        r = self.refs.get(self.active) if self.active else None
        if r is None:
            return None
        rec = r.recent(raw_ns)
        if not rec:
            return r.spec.accuracy_ns, r.spec.noise_ns
        noise = _jitter(r.recent(raw_ns, TUNING_WINDOW_NS))
        return max(r.spec.accuracy_ns, statistics.median(u for _, _, u, _ in rec)), max(r.spec.noise_ns, noise)


def _interval_ns(r: _Ref) -> int:
    """The reference's usual sample interval (median of its recent ones; 0 until it has two samples)."""
    times = [t for t, _, _, _ in r.hist]
    if len(times) < 2:
        return 0
    return int(statistics.median(b - a for a, b in zip(times, times[1:])))


def _slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope in ns/s."""
    n = len(points)
    t0 = points[0][0]
    xs = [(t - t0) / NS_PER_S for t, _ in points]
    mx, my = sum(xs) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, (_, y) in zip(xs, points)) / sxx


def _fresh(recent: list[tuple[int, float, float, float]]) -> list[tuple[int, float, float, float]]:
    """The samples that are new measurements: one repeating the one before (an NTP clock filter choosing the same
    exchange again) would only repeat the loop's steering."""
    return [s for i, s in enumerate(recent) if i == 0 or s[1] != recent[i - 1][1]]


def _jitter(recent: list[tuple[int, float, float, float]]) -> float:
    """The samples' own noise, from the median absolute second difference of their free phase: robust (an outlier
    touches two differences of many), blind to a steady drift (the oscillator's) and to the loop's steering."""
    fresh = _fresh(recent)
    if len(fresh) < 4:
        return 0.0
    x = [o - c for _, o, _, c in fresh]  # free phase: the loop's own steering is not the reference's noise
    second = sorted(abs(c - 2 * b + a) for a, b, c in zip(x, x[1:], x[2:]))
    # White noise of rms s: second differences have rms s*sqrt(6), and their median |.| is 0.6745 of that.
    return statistics.median(second) / (0.6745 * math.sqrt(6.0))
