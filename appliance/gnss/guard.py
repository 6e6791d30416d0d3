"""The GNSS reference under integrity watch: feeds the monitor, decides whether the reference may drive the clock.

Pure core.  ``ReferenceGuard`` sits between the receiver and the clock discipline.  It gives the integrity monitor
every epoch (position, C/N0, sky, the receiver's own flags, per-system times), every NTP cross-check, and every PPS
phase sample measured against a prediction of where the reference should be; from the monitor's verdict it decides
whether the reference is usable, and says so as events the composition root routes (the clock holds over, alarms are
raised, the audit trail and SNMP hear of it).

The phase prediction (``PhaseAnchor``) works on the *free phase*: the reference's phase against the raw oscillator,
i.e. the measured offset minus every correction the discipline applied.  That is what a spoofer moves and the
discipline cannot hide: while locked the clock follows the reference, so the offset alone stays small during a slow
push, but the free phase bends away from the straight line the oscillator draws.  The anchor is a least-squares line
through the last ``window_s`` of free phase taken while the verdict was ok, refitted every ``refit_s``; its error
bound grows from the fit's own uncertainty and the oscillator's Allan deviation.  After a rejection the anchor stays
frozen on the last sound data, so the way back is judged against the pre-attack oscillator.

Operator override: ``auto`` (the verdict decides), ``trust`` (use the reference whatever the verdict, alarms still
raised) and ``reject`` (hold over whatever the verdict).  ``action="monitor"`` raises alarms but never rejects.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from appliance.events import Alarm, GnssEpoch, Position, Severity
from appliance.gnss.integrity import IntegrityMonitor, IntegritySnapshot, Level, Verdict
from appliance.clock.oscillator import PowerLaw
from appliance.units import NS_PER_S

OVERRIDES = ("auto", "trust", "reject")
SPOOFING, JAMMING, SUSPECT, OVERRIDE = ("gnss-spoofing", "gnss-jamming", "gnss-integrity-suspect",
                                        "gnss-integrity-override")
INTEGRITY_CODES = (SPOOFING, JAMMING, SUSPECT, OVERRIDE)
DOUBT_SAMPLES = 4  # residuals averaged into the doubt the clock's bound carries (a push's lag: 1.5 s of it)
ANCHORS_KEPT = 20  # lines kept (one a refit, 60 s): how far back a rejection can find one fitted on sound data
HISTORY_S = 1200  # free phase kept to date an attack at its rejection
QUIET_NS = 5.0  # a residual (mean of DOUBT_SAMPLES) within this, or the line's 3 sigma, is the reference's noise
LOOKBACK_MIN_S = 30  # learning undone at a rejection: at least this much before the attack's estimated start


@dataclass(frozen=True)
class Anchor:
    """A line through the free phase: x(t) = phase_ns + frequency_ppb * (t - at_raw_ns) / 1e9."""

    at_raw_ns: int
    phase_ns: float
    frequency_ppb: float
    phase_sigma_ns: float
    frequency_sigma_ppb: float
    span_s: float
    samples: int


class PhaseAnchor:
    """Least-squares line through the recent free phase, and how far the oscillator may stray from it."""

    def __init__(self, law: PowerLaw, window_s: float = 600.0, refit_s: float = 60.0, min_span_s: float = 60.0,
                 noise_floor_ns: float = 2.0):
        self.law = law
        self.window_ns, self.refit_ns, self.min_span_ns = (int(window_s * NS_PER_S), int(refit_s * NS_PER_S),
                                                           int(min_span_s * NS_PER_S))
        self.noise_floor_ns = noise_floor_ns
        self._samples: deque[tuple[int, float]] = deque()
        self.anchor: Anchor | None = None
        self.history: deque[Anchor] = deque(maxlen=ANCHORS_KEPT)  # the lines fitted, newest last
        self._refused_at_ns = 0  # the last refit refused as inconsistent with the line

    def learn(self, raw_ns: int, free_phase_ns: float) -> bool:
        """A sample from a sound reference; True when the anchor was (re)fitted with it.  A gap (holdover, a
        rejected reference) keeps the samples before it, and does not count in the window: the free phase runs on
        through it, and a line refitted at once from them and the new ones is as good as before, where one fitted
        afresh would need the whole ``min_span_s`` first and be judged all that time on an ever older line (after
        a few attacks in a row the smallest step caught had grown fivefold)."""
        self._samples.append((raw_ns, free_phase_ns))
        # the last window's worth of samples (one a second), gaps left out, and none older than three windows
        while (len(self._samples) > self.window_ns // NS_PER_S
               or raw_ns - self._samples[0][0] > 3 * self.window_ns):
            self._samples.popleft()
        due = self.anchor is None or raw_ns - max(self.anchor.at_raw_ns, self._refused_at_ns) >= self.refit_ns
        if due and raw_ns - self._samples[0][0] >= self.min_span_ns:
            fitted = self._fit(raw_ns)
            if not self._consistent(fitted):
                self._refused_at_ns = raw_ns  # tried again a refit interval on
                return False
            self.anchor = fitted
            self.history.append(self.anchor)
            return True
        return False

    def _consistent(self, fitted: Anchor) -> bool:
        """A new line must start where the old one says the oscillator is (within two thirds of its 3-sigma bound:
        2 sigma).  A push too slow for any threshold would otherwise be learned into each refit a little, and the
        line would follow it away from the oscillator; refused, the old line ages, its bound widens, and the push
        shows in full against it."""
        predicted = self.predict(fitted.at_raw_ns)
        if predicted is None:
            return True
        expected, bound, _ = predicted
        return abs(fitted.phase_ns - expected) <= max(self.noise_floor_ns, 2 * bound / 3)

    def shift(self, delta_ns: float) -> None:
        """The reference's phase was moved by ``delta_ns`` on purpose (an operator's delay change): every sample and
        line moves with it, so the next sample lands where the line says."""
        self._samples = deque((t, x + delta_ns) for t, x in self._samples)
        self.history = deque((replace(a, phase_ns=a.phase_ns + delta_ns) for a in self.history), maxlen=ANCHORS_KEPT)
        if self.anchor is not None:
            self.anchor = replace(self.anchor, phase_ns=self.anchor.phase_ns + delta_ns)

    def forget(self) -> None:
        self._samples.clear()
        self.anchor = None
        self.history.clear()

    def revert(self, since_raw_ns: int) -> None:
        """Nothing after ``since_raw_ns`` was sound: its samples go, and the line goes back to the newest one fitted
        before it (kept as it is when there is none)."""
        while self._samples and self._samples[-1][0] > since_raw_ns:
            self._samples.pop()
        while self.history and self.history[-1].at_raw_ns > since_raw_ns:
            self.history.pop()
        if self.history:
            self.anchor = self.history[-1]

    def _fit(self, at_raw_ns: int) -> Anchor:
        ts = [(t - at_raw_ns) / NS_PER_S for t, _ in self._samples]
        xs = [x for _, x in self._samples]
        n = len(ts)
        mt, mx = sum(ts) / n, sum(xs) / n
        stt = sum((t - mt) ** 2 for t in ts) or 1e-9
        slope = sum((t - mt) * (x - mx) for t, x in zip(ts, xs)) / stt
        resid = [x - mx - slope * (t - mt) for t, x in zip(ts, xs)]
        sigma = max(self.noise_floor_ns, math.sqrt(sum(r * r for r in resid) / max(n - 2, 1)))
        slope_sigma = sigma / math.sqrt(stt)
        phase_sigma = sigma * math.sqrt(1 / n + mt * mt / stt)  # the line's value at t = 0 (now)
        return Anchor(at_raw_ns, mx - slope * mt, slope, phase_sigma, slope_sigma, (ts[-1] - ts[0]), n)

    def predict(self, raw_ns: int) -> tuple[float, float, float] | None:
        """(predicted free phase, its 3-sigma bound, the frequency uncertainty in ppb) at ``raw_ns``."""
        a = self.anchor
        if a is None:
            return None
        dt_s = max(0.0, (raw_ns - a.at_raw_ns) / NS_PER_S)
        wander_ns = dt_s * self.law.adev(max(dt_s, 1.0)) * 1e9  # the oscillator's own noise since the anchor
        fit_ns = math.hypot(a.phase_sigma_ns, a.frequency_sigma_ppb * dt_s)
        rate_sigma = a.frequency_sigma_ppb + self.law.adev(max(a.span_s, 1.0)) * 1e9
        return a.phase_ns + a.frequency_ppb * dt_s, 3 * math.hypot(fit_ns, wander_ns), rate_sigma


@dataclass(frozen=True)
class IntegrityChanged:
    """The verdict's level or the reference's usability changed (routed to the log, the audit trail and SNMP)."""

    old: str
    new: str
    usable: bool
    reason: str
    at_raw_ns: int


@dataclass(frozen=True)
class Distrust:
    """What a rejection tells the clock: nothing learned from the reference since ``since_raw_ns`` is sound, and
    the line through sound data says the oscillator runs at ``frequency_ppb`` (1 sigma ``frequency_sigma_ppb``)."""

    since_raw_ns: int
    frequency_ppb: float | None
    frequency_sigma_ppb: float


@dataclass(frozen=True)
class ReferenceUsable:
    """Tell the clock whether the GNSS reference may drive it."""

    usable: bool
    reason: str
    at_raw_ns: int
    distrust: Distrust | None = None  # set when the integrity checks rejected it


@dataclass(frozen=True)
class GuardStatus:
    enabled: bool
    action: str
    override: str
    usable: bool
    level: str
    score: float
    reasons: tuple[str, ...]
    since_raw_ns: int
    requalify_in_s: float | None
    findings: tuple[dict[str, Any], ...]
    survey: dict[str, Any]
    anchor: dict[str, Any] | None
    alarms: dict[str, int]
    last_alarm_raw_ns: int | None
    last_alarm_reasons: tuple[str, ...]
    ntp: dict[str, Any] | None
    rejections: int


class ReferenceGuard:
    def __init__(self, monitor: IntegrityMonitor, law: PowerLaw, *, enabled: bool = True, action: str = "reject",
                 anchor: PhaseAnchor | None = None, max_frequency_ppb: float | None = None):
        self.monitor, self.enabled, self.action = monitor, enabled, action
        self.anchor = anchor or PhaseAnchor(law)
        self.max_frequency_ppb = max_frequency_ppb
        self.override = "auto"
        self.usable = True
        self.rejections = 0
        self._level = Level.OK
        self._last_ntp: dict[str, Any] | None = None
        self._recent_resid: deque[tuple[int, float]] = deque(maxlen=16)
        self._doubt: deque[float] = deque(maxlen=DOUBT_SAMPLES)
        self._history: deque[tuple[int, float]] = deque(maxlen=HISTORY_S)  # (raw, free phase), for dating attacks
        self.hold_sample = False  # the last phase sample was an outlier: do not feed it to the clock
        self._held_last = False

    # --- inputs -----------------------------------------------------------------------------------------------
    def on_epoch(self, epoch: GnssEpoch) -> list[object]:
        if not self.enabled:
            return []
        offsets = dict(getattr(epoch, "system_offsets_ns", ()) or ())
        verdict = self.monitor.on_epoch(epoch.rx_raw_ns, epoch, getattr(epoch, "jam_indicator", None),
                                        getattr(epoch, "spoofing_state", None))
        if len(offsets) >= 2 and epoch.time_valid:
            verdict = self.monitor.on_constellation_offsets(epoch.rx_raw_ns, offsets)
        return self._decide(verdict, epoch.rx_raw_ns)

    def on_free_phase(self, raw_ns: int, free_phase_ns: float) -> list[object]:
        """One PPS phase sample: the reference against the raw oscillator (offset minus the clock's corrections)."""
        self.hold_sample = False
        if not self.enabled:
            return []
        self._history.append((raw_ns, free_phase_ns))
        predicted = self.anchor.predict(raw_ns)
        if predicted is None:
            if self.monitor.verdict().level is Level.OK:
                self.anchor.learn(raw_ns, free_phase_ns)
            return []
        expected, bound, rate_sigma = predicted
        self._doubt.append(free_phase_ns - expected)
        freq = self._implied_frequency(raw_ns, free_phase_ns - expected)
        verdict = self.monitor.on_phase(raw_ns, free_phase_ns, expected, bound, frequency_ppb=freq,
                                        max_frequency_ppb=self.max_frequency_ppb, rate_sigma_ppb=rate_sigma)
        jump = any(f.detector == "phase-jump" for f in verdict.findings)
        # One outlier is held back from the clock until the next sample says step or noise; never two in a row,
        # so a prediction that is merely loose cannot starve the loop.
        self.hold_sample = jump and not self._held_last
        self._held_last = self.hold_sample
        if verdict.level is Level.OK and self.usable and self.anchor.learn(raw_ns, free_phase_ns):
            self.monitor.prediction_rebased()
            self._recent_resid.clear()
        return self._decide(verdict, raw_ns)

    def doubt_ns(self) -> float:
        """How far the reference sits from the oscillator's line (the mean of the last few residuals, so its noise
        mostly cancels): a push too slow for any threshold has moved the reference, and the clock locked to it,
        that far; the clock adds it to its bound.  0 before the line exists."""
        return abs(sum(self._doubt) / len(self._doubt)) if self._doubt and self.anchor.anchor is not None else 0.0

    def _implied_frequency(self, raw_ns: int, residual_ns: float) -> float | None:
        """The residual's slope over the last 16 s: the frequency the reference implies beyond the oscillator's."""
        self._recent_resid.append((raw_ns, residual_ns))
        if len(self._recent_resid) < self._recent_resid.maxlen:  # type: ignore[operator]
            return None
        (t0, r0), (t1, r1) = self._recent_resid[0], self._recent_resid[-1]
        return (r1 - r0) / max(1e-3, (t1 - t0) / NS_PER_S)

    def on_ntp(self, raw_ns: int, server: str, offset_ns: float, uncertainty_ns: float) -> list[object]:
        self._last_ntp = {"server": server, "offset_ms": offset_ns / 1e6, "uncertainty_ms": uncertainty_ns / 1e6,
                          "at_raw_ns": raw_ns}
        if not self.enabled:
            return []
        return self._decide(self.monitor.on_ntp(raw_ns, offset_ns, uncertainty_ns), raw_ns)

    def set_override(self, mode: str, raw_ns: int, who: str) -> list[object]:
        if mode not in OVERRIDES:
            raise ValueError(f"integrity override takes {', '.join(OVERRIDES)}")
        self.override = mode
        out: list[object] = self._decide(self.monitor.verdict(), raw_ns, force=True)
        text = {"auto": None, "trust": "GNSS reference trusted by operator whatever the integrity checks say",
                "reject": "GNSS reference rejected by operator"}[mode]
        active = Alarm(OVERRIDE, Severity.WARNING, text is not None, f"{text} ({who})" if text else
                       f"integrity override cleared by {who}", raw_ns)
        return [active] + out

    def resurvey(self) -> None:
        self.monitor.survey.restart()

    def reference_moved(self, delta_ns: float) -> None:
        """An operator's audited change of a delay moves the reference's free phase by ``delta_ns`` from the next
        sample on: the phase line and the history that dates attacks move with it, so the change is neither a phase
        jump nor a push.  Only for a configured change, never for anything measured: a jump the sky makes is exactly
        what the checks are for."""
        self.anchor.shift(delta_ns)
        self._history = deque(((t, x + delta_ns) for t, x in self._history), maxlen=HISTORY_S)

    def set_home(self, position: Position | None) -> None:
        """An operator's audited change of the antenna position: the position check measures from it (None: survey
        the home in again).  Nothing else is re-run."""
        self.monitor.set_home(position)

    # --- deciding ---------------------------------------------------------------------------------------------
    def _decide(self, verdict: Verdict, raw_ns: int, force: bool = False) -> list[object]:
        out: list[object] = []
        level = verdict.level
        if level is not self._level or force:
            out += self._alarms(verdict, raw_ns)
        if self.override == "trust":
            usable = True
        elif self.override == "reject":
            usable = False
        else:
            usable = verdict.usable or self.action == "monitor"
        why = "; ".join(verdict.reasons[:3]) or "integrity checks ok"
        if level is not self._level or usable != self.usable:
            out.append(IntegrityChanged(self._level.value, level.value, usable, why, raw_ns))
        self._level = level
        if usable != self.usable:
            self.usable = usable
            if not usable:
                self.rejections += 1
            reason = (f"integrity override {self.override} by operator" if self.override != "auto" else
                      f"GNSS integrity {level.value}: {why}" if not usable else
                      f"GNSS integrity ok again: {why}")
            distrust = self._distrust(raw_ns) if not usable and self.override == "auto" else None
            out.append(ReferenceUsable(usable, reason, raw_ns, distrust))
        return out

    def _distrust(self, raw_ns: int) -> Distrust:
        """At a rejection: when the attack began, as far as the free phase tells (the residual over its trend says
        how long it has been building up; a push learned into the line leaves the trend, a step leaves the size),
        and the line fitted before then, which the prediction goes back to."""
        since = raw_ns - self._attack_age_ns(raw_ns) - LOOKBACK_MIN_S * NS_PER_S
        self.anchor.revert(since)
        self._doubt.clear()
        a = self.anchor.anchor
        return Distrust(since, None if a is None else a.frequency_ppb,
                        0.0 if a is None else a.frequency_sigma_ppb + self.anchor.law.adev(max(a.span_s, 1.0)) * 1e9)

    def _attack_age_ns(self, raw_ns: int) -> int:
        """How long the free phase has been leaving the line: back from now to the last time its residual (the mean
        of DOUBT_SAMPLES) was within the noise, plus the time a push at the rate since then took to get that far."""
        a = self.anchor.anchor
        if a is None or len(self._history) < DOUBT_SAMPLES:
            return HISTORY_S * NS_PER_S
        times = [t for t, _ in self._history]
        resid = [x - a.phase_ns - a.frequency_ppb * (t - a.at_raw_ns) / NS_PER_S for t, x in self._history]
        level = max(QUIET_NS, 3 * a.phase_sigma_ns)
        now_r = sum(resid[-DOUBT_SAMPLES:]) / DOUBT_SAMPLES
        i = len(resid) - DOUBT_SAMPLES
        while i >= 0 and abs(sum(resid[i:i + DOUBT_SAMPLES]) / DOUBT_SAMPLES) > level:
            i -= 1
        if i < 0:
            return HISTORY_S * NS_PER_S  # never within the noise in what is kept: all of it is suspect
        quiet_at = times[i + DOUBT_SAMPLES - 1]
        if abs(now_r) <= level:
            return raw_ns - quiet_at
        lead = level * (raw_ns - quiet_at) / (abs(now_r) - level)  # a ramp from zero: the part below the noise
        return int(min(HISTORY_S * NS_PER_S, raw_ns - quiet_at + lead))

    def _alarms(self, verdict: Verdict, raw_ns: int) -> list[Alarm]:
        level, why = verdict.level, "; ".join(verdict.reasons[:4]) or "integrity checks ok"
        wanted = {Level.SPOOFED: SPOOFING, Level.JAMMED: JAMMING, Level.SUSPECT: SUSPECT}.get(level)
        texts = {SPOOFING: ("GNSS spoofing detected", Severity.CRITICAL),
                 JAMMING: ("GNSS jamming detected", Severity.MAJOR),
                 SUSPECT: ("GNSS integrity suspect", Severity.WARNING)}
        out = []
        for code, (text, severity) in texts.items():
            if code == wanted:
                action = "" if self.action == "reject" else " (monitor only: reference still used)"
                out.append(Alarm(code, severity, True, f"{text}{action}: {why}", raw_ns))
            else:
                out.append(Alarm(code, severity, False, f"{text}: cleared ({why})", raw_ns))
        return out

    # --- status -----------------------------------------------------------------------------------------------
    def status(self, raw_ns: int) -> GuardStatus:
        snap: IntegritySnapshot = self.monitor.snapshot(raw_ns)
        v = snap.verdict
        s = snap.survey
        survey = {"state": s.state, "source": s.source, "home": _position(s.home), "samples": s.samples,
                  "std_m": s.std_m, "elapsed_s": s.elapsed_s, "duration_s": s.duration_s, "reason": s.reason}
        a = self.anchor.anchor
        anchor = None if a is None else {"age_s": (raw_ns - a.at_raw_ns) / NS_PER_S,
                                         "frequency_ppb": a.frequency_ppb, "frequency_sigma_ppb": a.frequency_sigma_ppb,
                                         "span_s": a.span_s, "samples": a.samples}
        findings = tuple({"detector": f.detector, "verdict": f.verdict.value, "score": round(f.score, 3),
                          "reason": f.reason} for f in sorted(snap.findings, key=lambda f: f.detector))
        return GuardStatus(self.enabled, self.action, self.override, self.usable, v.level.value, round(v.score, 3),
                           v.reasons, v.since_ns, v.requalify_in_s, findings, survey, anchor, snap.alarms,
                           snap.last_alarm_ns, snap.last_alarm_reasons, self._last_ntp, self.rejections)


def _position(p: Position | None) -> dict[str, float | None] | None:
    return None if p is None else {"lat_deg": p.lat_deg, "lon_deg": p.lon_deg, "alt_m": p.alt_m}


