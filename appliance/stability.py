"""MTIE and TDEV of the locked part of the time-quality record, judged against the G.8272 PRTC-A/B masks in words.

Single job: from the one-second rows of the time-quality record keep the seconds the clock was LOCKED, cut them into
continuous stretches (a second in another state, a missing second or a second without a phase breaks a stretch: the
statistics assume one sample every tau0 and must not see two stretches stitched together as if continuous), compute
MTIE, TDEV and ADEV over every stretch, and say per mask whether the record passes, or at which tau it fails.

Every locked second counts, not only the longest stretch: the appliance advertised clockClass 6 throughout, so the
judgement covers all of it.  A window of tau never spans a gap: MTIE(tau) is the largest over the stretches at least
tau long; TDEV and ADEV pool the stretches' variances weighted by their number of terms (which is the G.810 estimator
with the windows that would cross a gap left out).  The taus are those of the longest stretch.

Pure: rows in, numbers and sentences out (``appliance.metrics`` does the arithmetic).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from appliance import metrics
from appliance.units import NS_PER_S

LOCKED = "LOCKED"
TAU0_S = 1.0
MIN_SAMPLES = 16  # the shortest stretch worth a verdict: taus 1, 2, 4 s and TDEV with a few terms
# Consecutive samples are about a second apart (the recorder samples the status once a second on the event loop, so
# the spacing jitters); more than 1.5 s between two is a missing second, which ends a stretch.
_MAX_STEP_NS = 3 * NS_PER_S // 2
_MIN_STEP_NS = NS_PER_S // 2


class QualityRow(Protocol):
    """What this module reads of a time-quality row (``appliance.audit.tqlog.Row``)."""

    at_tai_ns: int
    span_s: int
    state: str
    phase_offset_ns: float | None


@dataclass(frozen=True)
class MaskVerdict:
    """One mask's judgement.  ``passed`` is None when there is too little locked data to judge."""

    mask: str
    passed: bool | None
    text: str
    failed_metric: str | None = None  # "MTIE" or "TDEV": the first to fail, at the smallest tau
    failed_tau_s: float | None = None
    measured_ns: float | None = None
    limit_ns: float | None = None


@dataclass(frozen=True)
class LockedStability:
    """The statistics of the locked seconds of a record and their verdicts."""

    samples: int  # locked one-second phase samples in all stretches
    stretches: int  # continuous stretches among them
    longest_s: int  # samples in the longest stretch
    taus_s: tuple[float, ...]
    mtie_ns: tuple[float, ...]
    tdev_ns: tuple[float, ...]
    adev: tuple[float, ...]
    verdicts: tuple[MaskVerdict, ...]


def locked_stretches(rows: Iterable[QualityRow]) -> list[list[float]]:
    """The phase offsets (ns) of the LOCKED one-second rows, as continuous stretches, oldest first.

    ``rows`` are time-ordered.  A row that is not one second long, not LOCKED or has no phase offset ends the current
    stretch, and so does a gap (the next row more than 1.5 s after the previous one); a row less than half a second
    after the previous one (the same second twice) is left out.
    """
    out: list[list[float]] = []
    current: list[float] = []
    last_ns: int | None = None
    for r in rows:
        phase_ns = r.phase_offset_ns
        if r.span_s != 1 or r.state != LOCKED or phase_ns is None:
            if current:
                out.append(current)
            current, last_ns = [], None
            continue
        if last_ns is not None:
            step_ns = r.at_tai_ns - last_ns
            if step_ns < _MIN_STEP_NS:
                continue
            if step_ns > _MAX_STEP_NS:
                out.append(current)
                current = []
        current.append(float(phase_ns))
        last_ns = r.at_tai_ns
    if current:
        out.append(current)
    return out


def _pooled(stretches: Sequence[Sequence[float]], taus_s: Sequence[float],
            fn: Callable[[Sequence[float], float, Sequence[float]], list[float]], terms: Callable[[int, int], int],
            reach: Callable[[int], int]) -> list[float]:
    """A deviation pooled over stretches: sqrt(sum(terms * dev**2) / sum(terms)) at each tau, over the stretches
    long enough for it (``reach(N)``: the largest averaging factor a stretch of N samples allows)."""
    sums = [0.0] * len(taus_s)
    weights = [0] * len(taus_s)
    for s in stretches:
        fits = [i for i, t in enumerate(taus_s) if round(t / TAU0_S) <= reach(len(s))]
        if not fits:
            continue
        devs = fn(s, TAU0_S, [taus_s[i] for i in fits])
        for i, dev in zip(fits, devs):
            w = terms(len(s), round(taus_s[i] / TAU0_S))
            sums[i] += w * dev * dev
            weights[i] += w
    return [math.sqrt(total / w) if w else math.nan for total, w in zip(sums, weights)]


def locked_stability(rows: Iterable[QualityRow], masks: Sequence[metrics.Mask] | None = None) -> LockedStability:
    """MTIE, TDEV and ADEV over the locked stretches of ``rows`` and a verdict per mask (default: PRTC-A, PRTC-B)."""
    chosen = list(metrics.MASKS.values()) if masks is None else list(masks)
    stretches = locked_stretches(rows)
    samples = sum(len(s) for s in stretches)
    longest = max((len(s) for s in stretches), default=0)
    if longest < MIN_SAMPLES:
        return LockedStability(samples, len(stretches), longest, (), (), (), (),
                               tuple(_no_verdict(m.name, samples, len(stretches), longest) for m in chosen))
    taus = metrics.default_taus_s(longest, TAU0_S)
    mtie = [0.0] * len(taus)
    for s in stretches:
        fits = [i for i, t in enumerate(taus) if round(t / TAU0_S) <= len(s) - 1]
        if fits:
            for i, value in zip(fits, metrics.mtie_ns(s, TAU0_S, [taus[i] for i in fits])):
                mtie[i] = max(mtie[i], value)
    tdev = _pooled(stretches, taus, metrics.tdev_ns, lambda n_s, n: n_s - 3 * n + 1, lambda n_s: (n_s - 1) // 3)
    adev = _pooled(stretches, taus, metrics.adev, lambda n_s, n: n_s - 2 * n, lambda n_s: (n_s - 2) // 2)
    verdicts = tuple(mask_verdict(m, taus, mtie, tdev, samples, len(stretches)) for m in chosen)
    return LockedStability(samples, len(stretches), longest, tuple(taus), tuple(mtie), tuple(tdev), tuple(adev),
                           verdicts)


def mask_verdict(mask: metrics.Mask, taus_s: Sequence[float], mtie_ns: Sequence[float], tdev_ns: Sequence[float],
                 samples: int, stretches: int = 1) -> MaskVerdict:
    """Pass when MTIE and TDEV are at or below the mask at every tau the mask sets a limit for; else fail at the
    smallest tau where either is above it (MTIE named first when both are).  A NaN value (no stretch long enough)
    is not judged."""
    over = f"{_seconds(samples)} of locked data" + (f" in {stretches} stretches" if stretches > 1 else "")
    judged: list[float] = []
    for tau_s, m_ns, t_ns in zip(taus_s, mtie_ns, tdev_ns):
        for metric, value, limit in (("MTIE", m_ns, mask.mtie_limit_ns(tau_s)),
                                     ("TDEV", t_ns, mask.tdev_limit_ns(tau_s))):
            if math.isnan(value) or math.isinf(limit):
                continue
            judged.append(tau_s)
            if value > limit:
                text = (f"{mask.name}: fail at τ = {_tau(tau_s)} ({metric} {_ns(value)} above the mask's "
                        f"{_ns(limit)}; {over})")
                return MaskVerdict(mask.name, False, text, metric, tau_s, value, limit)
    if not judged:
        return MaskVerdict(mask.name, None, f"{mask.name}: no verdict (the mask sets no limit at these τ)")
    text = (f"{mask.name}: pass (MTIE and TDEV below the mask at every τ from {_tau(min(judged))} to "
            f"{_tau(max(judged))} over {over})")
    return MaskVerdict(mask.name, True, text)


def _no_verdict(name: str, samples: int, stretches: int, longest: int) -> MaskVerdict:
    if not samples:
        return MaskVerdict(name, None, f"{name}: no verdict (no locked one-second data in this window)")
    return MaskVerdict(name, None, f"{name}: no verdict (the longest continuous locked stretch is {_seconds(longest)}"
                                   f", at least {MIN_SAMPLES} s are needed)")


def _seconds(n: int) -> str:
    return f"{n} s"


def _tau(tau_s: float) -> str:
    return f"{tau_s:g} s"


def _ns(value_ns: float) -> str:
    """A time error in its readable unit: 12.3 ns, 4.56 µs, 3.00 ms."""
    a = abs(value_ns)
    if a >= 1e6:
        return f"{value_ns / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{value_ns / 1e3:.2f} µs"
    return f"{value_ns:.1f} ns"
