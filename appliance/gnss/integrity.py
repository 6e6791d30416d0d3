"""GNSS integrity: is the sky the appliance listens to real, and is its time still the time?

Pure core: no I/O, no clock reads; every input carries its own instant (``at_ns``, on one axis the caller never steps,
e.g. the raw counter).  Small detectors each answer one question with a ``Finding`` (detector, verdict, score 0..1,
reason); ``IntegrityMonitor`` combines their latest findings into a ``Verdict`` and latches an alarm, so a reference
once called spoofed or jammed is sound again only after ``qualification_s`` of consistent data.

The detectors and what each is for:
  position       the fix moved away from the surveyed home: a spoofer drags position along with time (a timing
                 receiver's time error follows its position error, ~3.3 ns per metre).
  phase-jump     the measured phase leaves the holdover prediction by more than k times its error bound, or implies
                 a frequency the oscillator cannot have: a time step or a meaconed (replayed) signal.
  drift          a two-sided CUSUM on the rate of (phase - prediction): the slow "carry-off" push that stays inside
                 any phase bound until it is too late.
  cn0            carrier-to-noise: all alike (one transmitter), a common rise (a spoofer overpowering the sky), or
                 too strong for an outdoor antenna.
  jamming        C/N0 collapsing on every tracked satellite while they stay tracked (a blocked antenna loses them).
  receiver       the receiver's own monitors: MON-HW jamInd, NAV-STATUS spoofDetState.
  sky            most tracked satellites replaced at once, or the same satellites jumping across the sky.
  constellations per-system time solutions disagreeing: a spoofer rarely fakes every system consistently.
  ntp            a coarse external cross-check: GNSS time milliseconds away from NTP beyond NTP's uncertainty.
  label          the receiver's time label jumping whole seconds against the local clock (a leap second does not:
                 its label is continuous in TAI).

Thresholds are constructor arguments; ``suspect`` sits at half of the alarm threshold throughout unless said otherwise,
and a score of 0.5 means "suspect", 1.0 "alarm".
"""

from __future__ import annotations

import enum
import math
import statistics
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from appliance.events import Constellation, FixMode, GnssEpoch, Position, SatInfo
from appliance.gnss.survey import SurveyIn, SurveySnapshot, distance_m
from appliance.units import NS_PER_S

SatKey = tuple[Constellation, int]


class Level(str, enum.Enum):
    OK = "ok"
    SUSPECT = "suspect"
    JAMMED = "jammed"
    SPOOFED = "spoofed"  # worst: time may be wrong, not merely absent


SEVERITY = {Level.OK: 0, Level.SUSPECT: 1, Level.JAMMED: 2, Level.SPOOFED: 3}


@dataclass(frozen=True, slots=True)
class Finding:
    detector: str
    verdict: Level
    score: float  # 0..1: 0.5 at the suspect threshold, 1.0 at the alarm threshold
    reason: str


def _ok(detector: str, reason: str, score: float = 0.0) -> Finding:
    return Finding(detector, Level.OK, score, reason)


def _grade(detector: str, value: float, suspect_at: float, alarm_at: float, alarm: Level, reason: str) -> Finding:
    """A "higher is worse" measure against its thresholds."""
    verdict = alarm if value >= alarm_at else Level.SUSPECT if value >= suspect_at else Level.OK
    return Finding(detector, verdict, min(1.0, max(0.0, value / alarm_at)), reason)


def _worst(detector: str, findings: Iterable[Finding]) -> Finding:
    """One finding out of a detector's sub-checks: the worst verdict, the highest score, every non-ok reason."""
    found = list(findings)
    worst = max(found, key=lambda f: (SEVERITY[f.verdict], f.score))
    bad = list(dict.fromkeys(f.reason for f in found if f.verdict is not Level.OK))
    return Finding(detector, worst.verdict, max(f.score for f in found), "; ".join(bad) or worst.reason)


def _tracked(satellites: Iterable[SatInfo]) -> dict[SatKey, SatInfo]:
    """Satellites the receiver actually receives (a C/N0), as opposed to those it only expects from the almanac."""
    return {(s.constellation, s.prn): s for s in satellites if s.cn0_dbhz is not None}


# --- position ----------------------------------------------------------------------------------------------------
class PositionDetector:
    """The fix against the surveyed home.  Two consecutive fixes must agree, so one multipath outlier is not news."""

    def __init__(self, threshold_m: float = 50.0, suspect_m: float | None = None, confirm: int = 2,
                 max_age_s: float = 10.0):
        self.threshold_m, self.suspect_m = threshold_m, suspect_m if suspect_m is not None else threshold_m / 2
        self.max_age_ns = int(max_age_s * NS_PER_S)
        self._recent: deque[tuple[int, float]] = deque(maxlen=confirm)

    def rebase(self) -> None:
        """The home moved (an operator's change): distances to the old one say nothing any more."""
        self._recent.clear()

    def update(self, at_ns: int, position: Position | None, home: Position | None) -> Finding:
        if home is None:
            return _ok("position", "no home position yet (surveying)")
        if position is None:
            return _ok("position", "no measured position this epoch")
        self._recent.append((at_ns, distance_m(position, home)))
        fresh = [d for t, d in self._recent if at_ns - t <= self.max_age_ns]
        if len(fresh) < (self._recent.maxlen or 1):
            return _ok("position", f"{fresh[-1]:.1f} m from home (confirming)")
        moved = min(fresh)
        return _grade("position", moved, self.suspect_m, self.threshold_m, Level.SPOOFED,
                      f"fix {moved:.1f} m from the surveyed home (limit {self.threshold_m:.0f} m)")


# --- phase against the holdover prediction ---------------------------------------------------------------------
class PhaseJumpDetector:
    """|phase - predicted| beyond k x the prediction's error bound, on ``confirm`` samples in a row; and a frequency
    the oscillator cannot have.  The bound is the clock's own honest 3-sigma statement, so beyond it is already
    unexpected; k gives margin for a bound that is a little optimistic."""

    def __init__(self, k: float = 3.0, suspect_k: float | None = None, min_bound_ns: float = 20.0, confirm: int = 2):
        self.k, self.suspect_k = k, suspect_k if suspect_k is not None else k / 2
        self.min_bound_ns, self.confirm = min_bound_ns, confirm
        self._beyond = 0

    def update(self, phase_ns: float, predicted_phase_ns: float, error_bound_ns: float,
               frequency_ppb: float | None = None, max_frequency_ppb: float | None = None) -> Finding:
        residual = phase_ns - predicted_phase_ns
        bound = max(error_bound_ns, self.min_bound_ns)
        excess = abs(residual) / bound
        self._beyond = self._beyond + 1 if excess >= self.k else 0
        why = f"phase {residual:+.0f} ns from the prediction, {excess:.1f} x its {bound:.0f} ns bound"
        if excess >= self.k and self._beyond < self.confirm:
            phase = Finding("phase-jump", Level.SUSPECT, 0.5, why + " (one sample)")
        else:
            phase = _grade("phase-jump", excess, self.suspect_k, self.k, Level.SPOOFED, why)
        if frequency_ppb is None or not max_frequency_ppb:
            return phase
        freq = _grade("phase-jump", abs(frequency_ppb) / max_frequency_ppb, 1.0, 1.0, Level.SPOOFED,
                      f"implied frequency {frequency_ppb:+.1f} ppb beyond the oscillator's +-{max_frequency_ppb:.1f}")
        return _worst("phase-jump", (phase, freq))


class DriftDetector:
    """A slow push: two-sided CUSUM on the rate of r = phase - prediction.

    Each second adds the residual's change minus an allowance (``allowance_ns_per_s``, or three times the
    prediction's own frequency uncertainty if larger): a ramp faster than the allowance accumulates, white phase
    noise does not (its changes telescope back to the noise itself).  A median of three samples first removes single
    outliers.  A change beyond ``clip_ns`` per second is a step, the jump detector's business (and the end of a
    spoofing episode must not read as a push the other way): it counts, clipped, only when the next change is as
    large and the same way, i.e. a fast ramp.  Alarm at ``threshold_ns`` accumulated: a 100 ns/s push alarms within
    ~2 s, a 10 ns/s one within ~10 s, both far below 1 us of error; a quiet clock's few ns never get there.
    ``rebase`` when the caller re-anchors its prediction.  The sums are capped at ``cap`` x the threshold, so once a
    push ends the detector says "ok" after a few tens of seconds rather than the push's whole length.
    """

    def __init__(self, allowance_ns_per_s: float = 5.0, threshold_ns: float = 40.0, suspect_ns: float | None = None,
                 clip_ns: float = 200.0, max_gap_s: float = 30.0, cap: float = 2.0):
        self.allowance, self.threshold_ns = allowance_ns_per_s, threshold_ns
        self.cap_ns = cap * threshold_ns  # a capped sum: a push that ends is "ok" again within seconds
        self.suspect_ns = suspect_ns if suspect_ns is not None else threshold_ns / 2
        self.clip_ns, self.max_gap_ns = clip_ns, int(max_gap_s * NS_PER_S)
        self._window: deque[tuple[int, float]] = deque(maxlen=3)
        self._last: tuple[int, float] | None = None  # the last filtered residual
        self._step: float | None = None  # a large change held until the next one says step or ramp
        self.up = self.down = 0.0

    def rebase(self) -> None:
        """The prediction was re-anchored: residuals before and after are not comparable.  The sums are kept."""
        self._window.clear()
        self._last, self._step = None, None

    def reset(self) -> None:
        """Start afresh: the alarm is latched, and from here the sums say whether the data drifts *now*."""
        self.rebase()
        self.up = self.down = 0.0

    def _changes(self, change: float, limit: float) -> list[float]:
        """The changes to accumulate: small ones as they are; a large one only once the next confirms a ramp."""
        step, self._step = self._step, None
        if abs(change) <= limit:
            return [change]
        if step is not None and step * change > 0:
            return [math.copysign(limit, step), math.copysign(limit, change)]
        self._step = change
        return []

    def update(self, at_ns: int, phase_ns: float, predicted_phase_ns: float, rate_sigma_ppb: float = 0.0) -> Finding:
        if self._window and at_ns - self._window[-1][0] > self.max_gap_ns:
            self.rebase()
        self._window.append((at_ns, phase_ns - predicted_phase_ns))
        if len(self._window) < 3:
            return _ok("drift", "collecting samples")
        filtered = (self._window[1][0], statistics.median(r for _, r in self._window))
        if self._last is not None:
            dt_s = max(1e-3, (filtered[0] - self._last[0]) / NS_PER_S)
            allowance = max(self.allowance, 3 * rate_sigma_ppb) * dt_s
            for change in self._changes(filtered[1] - self._last[1], self.clip_ns * max(1.0, dt_s)):
                self.up = min(self.cap_ns, max(0.0, self.up + change - allowance))
                self.down = min(self.cap_ns, max(0.0, self.down - change - allowance))
        self._last = filtered
        drift = max(self.up, self.down)
        sign = "+" if self.up >= self.down else "-"
        return _grade("drift", drift, self.suspect_ns, self.threshold_ns, Level.SPOOFED,
                      f"phase drifting {sign} from the prediction: {drift:.0f} ns beyond "
                      f"{max(self.allowance, 3 * rate_sigma_ppb):.1f} ns/s accumulated")


# --- signal strength ---------------------------------------------------------------------------------------------
class _Cn0Baseline:
    """Each satellite's usual C/N0: a slow average (``tau_s``) that stands still while the sky is dimmed as a whole,
    so levels returning after jamming or a blockage read as a return, not a rise."""

    def __init__(self, tau_s: float = 300.0, hold_below_db: float = 3.0, forget_s: float = 600.0):
        self.tau_s, self.hold_below_db, self.forget_ns = tau_s, hold_below_db, int(forget_s * NS_PER_S)
        self.level: dict[SatKey, float] = {}
        self._seen: dict[SatKey, int] = {}
        self._last_ns: int | None = None

    def compare(self, at_ns: int, cn0: Mapping[SatKey, float]) -> dict[SatKey, float]:
        """Now minus usual for every tracked satellite with a history; then learn from now."""
        deltas = {k: c - self.level[k] for k, c in cn0.items() if k in self.level}
        dt_s = 0.0 if self._last_ns is None else max(0.0, (at_ns - self._last_ns) / NS_PER_S)
        self._last_ns = at_ns
        dimmed = bool(deltas) and statistics.fmean(deltas.values()) < -self.hold_below_db
        alpha = min(1.0, dt_s / self.tau_s)
        for k, c in cn0.items():
            if k not in self.level:
                self.level[k] = c
            elif not dimmed:
                self.level[k] += alpha * (c - self.level[k])
            self._seen[k] = at_ns
        for k in [k for k, t in self._seen.items() if at_ns - t > self.forget_ns]:
            del self.level[k], self._seen[k]
        return deltas


class Cn0Detector:
    """C/N0 a real sky does not produce.  Satellites at different elevations arrive at different strengths (a spread
    of several dB); a single spoofing transmitter delivers them all alike.  A common rise above each satellite's own
    usual level means a stronger signal took over.  Above ~55 dB-Hz is more than an outdoor antenna receives."""

    def __init__(self, min_sats: int = 6, uniform_std_db: float = 1.0, uniform_suspect_db: float = 2.0,
                 strong_dbhz: float = 55.0, strong_count: int = 3, rise_db: float = 6.0, common_fraction: float = 0.75,
                 baseline_tau_s: float = 300.0):
        self.min_sats, self.uniform_std_db, self.uniform_suspect_db = min_sats, uniform_std_db, uniform_suspect_db
        self.strong_dbhz, self.strong_count = strong_dbhz, strong_count
        self.rise_db, self.common_fraction = rise_db, common_fraction
        self._baseline = _Cn0Baseline(baseline_tau_s)

    def update(self, at_ns: int, satellites: Iterable[SatInfo]) -> Finding:
        cn0 = {k: float(s.cn0_dbhz) for k, s in _tracked(satellites).items()}  # type: ignore[arg-type]
        deltas = self._baseline.compare(at_ns, cn0)
        return _worst("cn0", (self._uniform(cn0), self._strong(cn0), self._rise(deltas)))

    def _uniform(self, cn0: Mapping[SatKey, float]) -> Finding:
        if len(cn0) < self.min_sats:
            return _ok("cn0", f"{len(cn0)} satellites tracked: too few to judge the spread")
        spread = statistics.pstdev(cn0.values())
        verdict = (Level.SPOOFED if spread <= self.uniform_std_db else
                   Level.SUSPECT if spread <= self.uniform_suspect_db else Level.OK)
        score = 1.0 if spread <= self.uniform_std_db else self.uniform_std_db / spread
        return Finding("cn0", verdict, score, f"C/N0 of {len(cn0)} satellites all alike: {spread:.1f} dB spread "
                                              f"(a real sky spreads more than {self.uniform_suspect_db:.1f} dB)")

    def _strong(self, cn0: Mapping[SatKey, float]) -> Finding:
        strong = sum(1 for c in cn0.values() if c > self.strong_dbhz)
        return _grade("cn0", strong / self.strong_count, 1 / self.strong_count, 1.0, Level.SPOOFED,
                      f"{strong} satellites above {self.strong_dbhz:.0f} dB-Hz, stronger than an outdoor sky")

    def _rise(self, deltas: Mapping[SatKey, float]) -> Finding:
        if len(deltas) < 4:
            return _ok("cn0", "too few satellites with a C/N0 history")
        rising = sum(1 for d in deltas.values() if d >= self.rise_db / 2) / len(deltas)
        mean = statistics.fmean(deltas.values())
        if rising < self.common_fraction:
            return _ok("cn0", f"C/N0 {mean:+.1f} dB from usual")
        return _grade("cn0", mean, self.rise_db / 2, self.rise_db, Level.SPOOFED,
                      f"C/N0 rose {mean:+.1f} dB on {rising:.0%} of satellites at once")


class JammingDetector:
    """Jamming raises the noise floor under every satellite at once: C/N0 falls together while the satellites stay
    tracked (a jammer closing in, or a weak one).  A blocked or disconnected antenna instead loses the satellites
    outright at their usual levels: that is lost signal, for the fix and holdover logic, not jamming.  Once C/N0 has
    collapsed, losing the satellites afterwards stays "jammed" until they return at their usual levels.  A strong
    jammer switched on at full power looks like a blockage here; the receiver's jamInd tells them apart."""

    def __init__(self, drop_db: float = 10.0, min_sats: int = 4, common_fraction: float = 0.75,
                 baseline_tau_s: float = 300.0):
        self.drop_db, self.min_sats, self.common_fraction = drop_db, min_sats, common_fraction
        self._baseline = _Cn0Baseline(baseline_tau_s)
        self._collapsed = False

    def update(self, at_ns: int, satellites: Iterable[SatInfo]) -> Finding:
        cn0 = {k: float(s.cn0_dbhz) for k, s in _tracked(satellites).items()}  # type: ignore[arg-type]
        deltas = self._baseline.compare(at_ns, cn0)
        if len(deltas) < self.min_sats:
            if self._collapsed:
                return Finding("jamming", Level.JAMMED, 1.0, f"satellites lost after C/N0 collapsed "
                                                             f"({len(cn0)} still tracked)")
            return _ok("jamming", f"{len(cn0)} satellites tracked: too few to judge (satellites lost at their usual "
                                  f"levels are a blocked antenna, not jamming)")
        mean = statistics.fmean(deltas.values())
        falling = sum(1 for d in deltas.values() if d <= -self.drop_db / 2) / len(deltas)
        if falling < self.common_fraction:
            self._collapsed = False
            return _ok("jamming", f"C/N0 {mean:+.1f} dB from usual", min(1.0, max(0.0, -mean / self.drop_db)))
        found = _grade("jamming", -mean, self.drop_db / 2, self.drop_db, Level.JAMMED,
                       f"C/N0 down {-mean:.1f} dB on {falling:.0%} of {len(deltas)} tracked satellites")
        self._collapsed = found.verdict is Level.JAMMED or (self._collapsed and found.verdict is not Level.OK)
        return found


class ReceiverFlagsDetector:
    """The receiver's own monitors, when it has them: u-blox MON-HW jamInd (0 none .. 255 strong CW jamming) and
    NAV-STATUS spoofDetState (0 unknown, 1 none, 2 spoofing indicated, 3 multiple indications)."""

    def __init__(self, jam_suspect: int = 80, jam_alarm: int = 160):
        self.jam_suspect, self.jam_alarm = jam_suspect, jam_alarm

    def update(self, jam_indicator: int | None = None, spoofing_state: int | None = None) -> Finding:
        found = [_ok("receiver", "receiver reports no interference")]
        if jam_indicator is not None:
            found.append(_grade("receiver", jam_indicator, self.jam_suspect, self.jam_alarm, Level.JAMMED,
                                f"receiver jamming indicator {jam_indicator}/255"))
        if spoofing_state in (2, 3):
            verdict = Level.SPOOFED if spoofing_state == 3 else Level.SUSPECT
            text = "multiple spoofing indications" if spoofing_state == 3 else "spoofing indicated"
            found.append(Finding("receiver", verdict, 1.0 if spoofing_state == 3 else 0.5, f"receiver: {text}"))
        return _worst("receiver", found)


# --- the sky's shape ------------------------------------------------------------------------------------------------
def _angle_deg(a: SatInfo, b: SatInfo) -> float | None:
    """Angle between two look directions; well behaved at the zenith, where azimuth means little."""
    if None in (a.elevation_deg, a.azimuth_deg, b.elevation_deg, b.azimuth_deg):
        return None
    if (a.elevation_deg, a.azimuth_deg) == (0, 0) or (b.elevation_deg, b.azimuth_deg) == (0, 0):
        return None  # SiRF and others report 0/0 for a satellite whose place they do not know yet
    e1, e2 = math.radians(a.elevation_deg), math.radians(b.elevation_deg)  # type: ignore[arg-type]
    daz = math.radians(a.azimuth_deg - b.azimuth_deg)  # type: ignore[operator]
    cos = math.sin(e1) * math.sin(e2) + math.cos(e1) * math.cos(e2) * math.cos(daz)
    return math.degrees(math.acos(max(-1.0, min(1.0, cos))))


class SkyDetector:
    """Satellites rise and set one by one (a few an hour), and move across the sky by a fraction of a degree a minute.
    A spoofer switching in its own constellation replaces most of the tracked set within seconds (compared with the
    sky ``window_s`` ago as well as the last, so a takeover spread over a few epochs counts too); one replaying
    another place or time moves the same satellites across the sky.  Epochs with too few tracked satellites (a
    blockage, a reset) are not compared; after ``max_gap_s`` without a usable sky it is learned afresh."""

    def __init__(self, replaced_fraction: float = 0.5, min_sats: int = 4, jump_deg: float = 5.0,
                 rate_deg_per_s: float = 0.05, window_s: float = 10.0, max_gap_s: float = 900.0):
        self.replaced_fraction, self.min_sats = replaced_fraction, min_sats
        self.jump_deg, self.rate_deg_per_s = jump_deg, rate_deg_per_s
        self.window_ns, self.max_gap_ns = int(window_s * NS_PER_S), int(max_gap_s * NS_PER_S)
        self._skies: deque[tuple[int, dict[SatKey, SatInfo]]] = deque()
        self._trusted: tuple[int, dict[SatKey, SatInfo]] | None = None  # the real sky, while a replaced one shows

    def update(self, at_ns: int, satellites: Iterable[SatInfo]) -> Finding:
        now = _tracked(satellites)
        if len(now) < self.min_sats:
            return _ok("sky", f"{len(now)} satellites tracked: too few to compare")
        if self._skies and at_ns - self._skies[-1][0] > self.max_gap_ns:
            self._skies.clear()
        if self._trusted is not None:
            return self._against_trusted(at_ns, now)
        found = self._against_recent(at_ns, now)
        if found.verdict is Level.SPOOFED and self._skies and len(self._skies) > 1:
            self._trusted = self._skies[0]  # the sky before the change: what must come back
        return found

    def _against_trusted(self, at_ns: int, now: dict[SatKey, SatInfo]) -> Finding:
        """A replaced sky stays spoofed for as long as it shows; the real one returning (moved on by the time that
        passed) is sound again.  After ``max_gap_s`` the remembered sky is too old to judge by and is forgotten."""
        since_ns, trusted = self._trusted  # type: ignore[misc]
        self._skies.append((at_ns, now))
        while len(self._skies) > 1 and at_ns - self._skies[0][0] > self.window_ns:
            self._skies.popleft()
        elapsed_s = (at_ns - since_ns) / NS_PER_S
        if elapsed_s > self.max_gap_ns / NS_PER_S:
            self._trusted = None
            return _ok("sky", "sky relearned")
        fraction, why = self._replaced(now, trusted)
        limit = self.jump_deg + self.rate_deg_per_s * elapsed_s
        angles = [a for k in now.keys() & trusted.keys() if (a := _angle_deg(now[k], trusted[k])) is not None]
        moved = sum(1 for a in angles if a > limit) / len(angles) if len(angles) >= self.min_sats else 0.0
        if fraction < self.replaced_fraction / 2 and moved < self.replaced_fraction / 2:
            self._trusted = None
            self._skies.clear()  # the replaced skies in the window are not the yardstick for the next epochs
            self._skies.append((at_ns, now))
            return _ok("sky", "the real sky is back")
        return Finding("sky", Level.SPOOFED, 1.0, f"still not the real sky: {why} against the sky before the change"
                                                   f" {elapsed_s:.0f} s ago; {moved:.0%} moved beyond {limit:.0f} deg")

    def _against_recent(self, at_ns: int, now: dict[SatKey, SatInfo]) -> Finding:
        while self._skies and at_ns - self._skies[0][0] > self.window_ns and len(self._skies) > 1:
            self._skies.popleft()
        skies = list(self._skies)
        self._skies.append((at_ns, now))
        if not skies:
            return _ok("sky", "sky learned")
        last_ns, last = skies[-1]
        replaced = [self._replaced(now, before) for _, before in (skies[0], skies[-1])]
        gap_s = (at_ns - last_ns) / NS_PER_S
        limit = self.jump_deg + self.rate_deg_per_s * gap_s
        angles = [a for k in now.keys() & last.keys() if (a := _angle_deg(now[k], last[k])) is not None]
        moved = sum(1 for a in angles if a > limit) / len(angles) if len(angles) >= self.min_sats else 0.0
        half = self.replaced_fraction / 2
        return _worst("sky", [_grade("sky", fraction, half, self.replaced_fraction, Level.SPOOFED, why)
                              for fraction, why in replaced] +
                      [_grade("sky", moved, half, self.replaced_fraction, Level.SPOOFED,
                              f"{moved:.0%} of satellites jumped more than {limit:.0f} deg across the sky")])

    @staticmethod
    def _replaced(now: Mapping[SatKey, SatInfo], before: Mapping[SatKey, SatInfo]) -> tuple[float, str]:
        """The share replaced: as many new as gone.  A partial blockage (or its end) only removes (or adds)."""
        new, gone = len(now.keys() - before.keys()), len(before.keys() - now.keys())
        return (min(new / len(now), gone / len(before)),
                f"{new} of {len(now)} tracked satellites new, {gone} of {len(before)} gone at once")


# --- other opinions on the time ---------------------------------------------------------------------------------------
class ConstellationDetector:
    """Per-system time solutions (receiver-calibrated, so inter-system biases are already removed) should agree to tens
    of ns; each is compared with the median of the others, which names the odd one out when three or more report."""

    def __init__(self, threshold_ns: float = 100.0):
        self.threshold_ns = threshold_ns

    def update(self, offsets_ns: Mapping[Constellation | str, float]) -> Finding:
        if len(offsets_ns) < 2:
            return _ok("constellations", "fewer than two systems to compare")
        names = {k: k.value if isinstance(k, Constellation) else str(k) for k in offsets_ns}
        gaps = {k: abs(v - statistics.median(o for j, o in offsets_ns.items() if j != k))
                for k, v in offsets_ns.items()}
        worst = max(gaps, key=lambda k: gaps[k])
        who = (f"{names[worst]} is {gaps[worst]:.0f} ns from the others" if len(offsets_ns) >= 3 else
               f"{' and '.join(names.values())} disagree by {gaps[worst]:.0f} ns")
        return _grade("constellations", gaps[worst], self.threshold_ns / 2, self.threshold_ns, Level.SPOOFED, who)


class NtpCrossCheck:
    """GNSS time against NTP servers: coarse (milliseconds), but independent of the sky, so it bounds how far a patient
    spoofer can carry the clock.  ``offset_ns`` is NTP's time minus the served time, ``uncertainty_ns`` NTP's own
    (e.g. root distance)."""

    def __init__(self, margin_ns: float = 5_000_000.0):
        self.margin_ns = margin_ns

    def update(self, offset_ns: float, uncertainty_ns: float) -> Finding:
        excess = max(0.0, abs(offset_ns) - uncertainty_ns)
        return _grade("ntp", excess, self.margin_ns / 2, self.margin_ns, Level.SPOOFED,
                      f"NTP says {offset_ns / 1e6:+.1f} ms (+-{uncertainty_ns / 1e6:.1f} ms)")


class LabelDetector:
    """The receiver's labelled second against the local clock: the difference is constant but for arrival jitter, and
    through a leap second too (labels are TAI).  A new difference seen on two epochs in a row is a time jump; a
    single odd epoch (a late or buffered delivery) is only suspect.  ``rx_raw_ns`` must be on a never-stepped axis."""

    def __init__(self, tolerance_ns: int = NS_PER_S // 2):
        self.tolerance_ns = tolerance_ns
        self._ref: int | None = None
        self._pending: int | None = None

    def update(self, tai_ns: int, rx_raw_ns: int) -> Finding:
        diff = tai_ns - rx_raw_ns
        if self._ref is None or abs(diff - self._ref) < self.tolerance_ns:
            self._ref, self._pending = diff, None
            return _ok("label", "time label continuous")
        jump_s = (diff - self._ref) / NS_PER_S
        if self._pending is not None and abs(diff - self._pending) < self.tolerance_ns:
            self._ref, self._pending = diff, None
            return Finding("label", Level.SPOOFED, 1.0, f"time label jumped {jump_s:+.1f} s against the local clock")
        self._pending = diff
        return Finding("label", Level.SUSPECT, 0.5, f"time label {jump_s:+.1f} s off for one epoch")


# --- the monitor ------------------------------------------------------------------------------------------------------
@dataclass
class Detectors:
    """The monitor's detectors; replace any to change its thresholds."""

    position: PositionDetector = field(default_factory=PositionDetector)
    jump: PhaseJumpDetector = field(default_factory=PhaseJumpDetector)
    drift: DriftDetector = field(default_factory=DriftDetector)
    cn0: Cn0Detector = field(default_factory=Cn0Detector)
    jamming: JammingDetector = field(default_factory=JammingDetector)
    receiver: ReceiverFlagsDetector = field(default_factory=ReceiverFlagsDetector)
    sky: SkyDetector = field(default_factory=SkyDetector)
    constellations: ConstellationDetector = field(default_factory=ConstellationDetector)
    ntp: NtpCrossCheck = field(default_factory=NtpCrossCheck)
    label: LabelDetector = field(default_factory=LabelDetector)


@dataclass(frozen=True)
class Verdict:
    level: Level
    score: float  # the contributing scores combined as independent evidence: 1 - prod(1 - s)
    reasons: tuple[str, ...]  # "detector: reason" for every contribution, and the latch's own
    findings: tuple[Finding, ...]  # the non-ok findings behind the level (current, not latched)
    at_ns: int
    since_ns: int  # when this level began
    requalify_in_s: float | None = None  # latched: consistent data still needed before "ok"

    @property
    def usable(self) -> bool:
        """Whether the reference may drive the clock: suspect is reported, not acted on."""
        return self.level in (Level.OK, Level.SUSPECT)


@dataclass(frozen=True)
class IntegritySnapshot:
    verdict: Verdict
    findings: tuple[Finding, ...]  # every detector's latest (fresh) finding
    survey: SurveySnapshot
    alarms: dict[str, int]  # "detector:verdict" -> how many non-ok findings
    last_alarm_ns: int | None
    last_alarm_reasons: tuple[str, ...]


class IntegrityMonitor:
    """Feed it every epoch and phase sample (and NTP or per-system offsets when available); read the ``Verdict``."""

    def __init__(self, survey: SurveyIn | None = None, qualification_s: float = 60.0, *,
                 detectors: Detectors | None = None, evidence_gap_s: float = 5.0, stale_s: float = 30.0,
                 slow_stale_s: float = 3600.0, escalate_suspects: int = 3):
        self.survey = survey if survey is not None else SurveyIn()
        self.d = detectors if detectors is not None else Detectors()
        self.qualification_ns = int(qualification_s * NS_PER_S)
        self.evidence_gap_ns = int(evidence_gap_s * NS_PER_S)
        self._stale_ns = int(stale_s * NS_PER_S)
        self._slow_stale_ns = int(slow_stale_s * NS_PER_S)  # NTP and per-system checks arrive minutes apart
        self.escalate_suspects = escalate_suspects
        self._latest: dict[str, tuple[int, Finding]] = {}
        self._latched: tuple[Level, float, tuple[str, ...]] | None = None
        self._consistent_since: int | None = None
        self._last_evidence: int | None = None
        self._verdict = Verdict(Level.OK, 0.0, (), (), 0, 0)
        self.alarms: Counter[str] = Counter()
        self.last_alarm_ns: int | None = None
        self.last_alarm_reasons: tuple[str, ...] = ()

    # --- inputs ---------------------------------------------------------------------------------------------------
    def on_epoch(self, at_ns: int, epoch: GnssEpoch, jam_indicator: int | None = None,
                 spoofing_state: int | None = None) -> Verdict:
        """One receiver epoch; ``jam_indicator`` (MON-HW jamInd) and ``spoofing_state`` (NAV-STATUS) when sent."""
        d = self.d
        # A timing receiver in fixed-position mode (time-only fixes) reports the position it was given: compared with
        # home all the same (a changed fixed position moves the time it serves), and surveyed when home is unknown.
        measured = epoch.position if epoch.fix_mode >= FixMode.FIX_2D else None
        if measured is not None and epoch.fix_mode == FixMode.FIX_3D and self._verdict.level is Level.OK:
            self.survey.update(at_ns, measured)  # only a sound sky is surveyed
        home = self.survey.home if self.survey.state == SurveyIn.FIXED else None
        self._record(at_ns, d.position.update(at_ns, measured, home))
        self._record(at_ns, d.cn0.update(at_ns, epoch.satellites))
        self._record(at_ns, d.jamming.update(at_ns, epoch.satellites))
        if epoch.fix_mode >= FixMode.FIX_2D:  # before a fix a receiver's idea of where satellites are is a guess
            self._record(at_ns, d.sky.update(at_ns, epoch.satellites))
        if jam_indicator is not None or spoofing_state is not None:  # sent every few epochs: the last word stands
            self._record(at_ns, d.receiver.update(jam_indicator, spoofing_state))
        if epoch.time_valid and epoch.tai_ns is not None:
            self._record(at_ns, d.label.update(epoch.tai_ns, epoch.rx_raw_ns))
        sound_fix = epoch.time_valid and epoch.fix_mode == FixMode.FIX_3D
        return self._evaluate(at_ns, evidence=sound_fix)

    def on_phase(self, at_ns: int, phase_ns: float, predicted_phase_ns: float, error_bound_ns: float, *,
                 frequency_ppb: float | None = None, max_frequency_ppb: float | None = None,
                 rate_sigma_ppb: float = 0.0) -> Verdict:
        """One phase sample of this reference against the holdover prediction (the same axis for both)."""
        self._record(at_ns, self.d.jump.update(phase_ns, predicted_phase_ns, error_bound_ns, frequency_ppb,
                                               max_frequency_ppb))
        self._record(at_ns, self.d.drift.update(at_ns, phase_ns, predicted_phase_ns, rate_sigma_ppb))
        return self._evaluate(at_ns, evidence=True)

    def on_constellation_offsets(self, at_ns: int, offsets_ns: Mapping[Constellation | str, float]) -> Verdict:
        self._record(at_ns, self.d.constellations.update(offsets_ns))
        return self._evaluate(at_ns, evidence=False)

    def on_ntp(self, at_ns: int, offset_ns: float, uncertainty_ns: float) -> Verdict:
        self._record(at_ns, self.d.ntp.update(offset_ns, uncertainty_ns))
        return self._evaluate(at_ns, evidence=False)

    def set_home(self, position: Position | None) -> None:
        """An operator's change of the antenna position: the position check measures from ``position`` from the
        next fix on (None: the home is surveyed in again).  Nothing else is re-run."""
        if position is None:
            self.survey.restart()
        else:
            self.survey = SurveyIn.configured(position)
        self.d.position.rebase()

    def prediction_rebased(self) -> None:
        """The caller re-anchored the prediction it passes to ``on_phase`` (only ever while the verdict is ok)."""
        self.d.drift.rebase()

    # --- outputs --------------------------------------------------------------------------------------------------
    def verdict(self) -> Verdict:
        return self._verdict

    def snapshot(self, at_ns: int) -> IntegritySnapshot:
        return IntegritySnapshot(self._verdict, tuple(f for _, f in self._fresh(at_ns)), self.survey.snapshot(),
                                 dict(self.alarms), self.last_alarm_ns, self.last_alarm_reasons)

    # --- combining ------------------------------------------------------------------------------------------------
    def _record(self, at_ns: int, finding: Finding) -> None:
        self._latest[finding.detector] = (at_ns, finding)
        if finding.verdict is not Level.OK:
            self.alarms[f"{finding.detector}:{finding.verdict.value}"] += 1

    def _fresh(self, at_ns: int) -> list[tuple[int, Finding]]:
        def ttl(name: str) -> int:
            return self._slow_stale_ns if name in ("ntp", "constellations") else self._stale_ns
        return [(t, f) for name, (t, f) in self._latest.items() if at_ns - t <= ttl(name)]

    def _raw(self, at_ns: int) -> tuple[Level, float, tuple[str, ...], tuple[Finding, ...]]:
        fresh = [f for _, f in self._fresh(at_ns)]
        bad = tuple(f for f in fresh if f.verdict is not Level.OK)
        if not bad:
            return Level.OK, max((f.score for f in fresh), default=0.0), (), ()
        level = max((f.verdict for f in bad), key=SEVERITY.__getitem__)
        reasons = tuple(f"{f.detector}: {f.reason}" for f in bad)
        if level is Level.SUSPECT and len(bad) >= self.escalate_suspects:
            level = Level.SPOOFED  # independent checks each mildly surprised at once: together, not mild
            reasons += (f"{len(bad)} independent checks suspect at once",)
        return level, 1 - math.prod(1 - f.score for f in bad), reasons, bad

    def _evaluate(self, at_ns: int, evidence: bool) -> Verdict:
        level, score, reasons, bad = self._raw(at_ns)
        if level in (Level.SPOOFED, Level.JAMMED):
            if self._latched is None:
                self.d.drift.reset()  # latched now: an attack that goes on shows as fresh drift, one that ends not
            held = self._latched[0] if self._latched else Level.OK
            self._latched = (max(level, held, key=SEVERITY.__getitem__), score, reasons)
            self._consistent_since = None
            self.last_alarm_ns, self.last_alarm_reasons = at_ns, reasons
        elif level is not Level.OK:
            self._consistent_since = None
        elif evidence and self._latched is not None:
            gap = self._last_evidence is None or at_ns - self._last_evidence > self.evidence_gap_ns
            if self._consistent_since is None or gap:
                self._consistent_since = at_ns  # consistent means sound data throughout, not silence
        if evidence:
            self._last_evidence = at_ns
        requalify_in_s = None
        if self._latched is not None and level not in (Level.SPOOFED, Level.JAMMED):
            evidence_fresh = self._last_evidence is not None and at_ns - self._last_evidence <= self.evidence_gap_ns
            since = self._consistent_since
            consistent_ns = at_ns - since if since is not None and evidence_fresh else 0
            if consistent_ns >= self.qualification_ns:
                self._latched = None
            else:
                held, held_score, held_reasons = self._latched
                requalify_in_s = (self.qualification_ns - consistent_ns) / NS_PER_S
                note = (f"{held.value} until consistent for {self.qualification_ns / NS_PER_S:.0f} s: "
                        f"{consistent_ns / NS_PER_S:.0f} s so far")
                level, score, reasons = held, max(score, held_score), (note,) + held_reasons + reasons
        since = self._verdict.since_ns if level is self._verdict.level else at_ns
        self._verdict = Verdict(level, score, reasons, bad, at_ns, since, requalify_in_s)
        return self._verdict
