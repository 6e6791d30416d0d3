"""Time-error statistics of a phase record and the ITU-T G.8272 PRTC masks they are judged against.

Single job: given a time-error record TE(k·tau0) = served − true (ns, one sample every ``tau0_s``), compute
max|TE|, MTIE, TDEV and ADEV, and check a record against the PRTC-A / PRTC-B masks.  Used by the benchmarks,
the web console plots and the scenario checks.  Pure: arrays in, numbers out.

Observation intervals are integer multiples tau = n·tau0 (ITU-T G.810 Appendix II samples the record; it has
nothing to say between samples), so a tau that is not one raises instead of being silently rounded; so does a
tau too long for the record (MTIE needs a window of n+1 samples, TDEV and ADEV two terms of their sums).
Filtering the record (the standard measures wander through a measurement filter) is the caller's business:
this module judges what it is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import allantools
import numpy as np
import numpy.typing as npt

from appliance.units import NS_PER_S

Segment = tuple[float, float, float, float]  # (tau_lo_s, tau_hi_s, limit at tau=0 in ns, slope in ns/s)
_TAU_MATCH_REL = 1e-9  # how close tau must be to n·tau0 to count as that multiple (float noise only)


def _as_te(te_ns: npt.ArrayLike) -> np.ndarray:
    """The record as a 1-D float64 array; an empty or non-finite record has no meaningful statistics."""
    x = np.asarray(te_ns, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"time-error record must be a non-empty 1-D sequence, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("time-error record contains NaN or infinity")
    return x


def _factors(taus_s: Sequence[float], tau0_s: float, max_n: int) -> list[int]:
    """Averaging factors n = tau/tau0, each an exact multiple in 1..max_n."""
    if not tau0_s > 0:
        raise ValueError(f"tau0_s must be positive, got {tau0_s}")
    out = []
    for tau_s in taus_s:
        n = round(tau_s / tau0_s)
        if abs(n * tau0_s - tau_s) > _TAU_MATCH_REL * max(abs(tau_s), tau0_s):
            raise ValueError(f"tau {tau_s} s is not a multiple of tau0 {tau0_s} s")
        if not 1 <= n <= max_n:
            raise ValueError(f"tau {tau_s} s (n={n}) outside 1..{max_n}·tau0 for this record")
        out.append(n)
    return out


def max_abs_te_ns(te_ns: npt.ArrayLike) -> float:
    """max|TE| over the record: the quantity G.8272 clause 6.1 bounds (100 ns PRTC-A, 40 ns PRTC-B)."""
    return float(np.max(np.abs(_as_te(te_ns))))


def mtie_ns(te_ns: npt.ArrayLike, tau0_s: float, taus_s: Sequence[float]) -> list[float]:
    """MTIE(tau) per G.810 Appendix II.5: max over k of (max − min of x_k..x_{k+n}), n = tau/tau0, n ≤ N−1.

    A window of tau spans n+1 samples.  Sliding max/min by doubling (a sparse table): level j holds the
    max/min of every run of 2^j samples; any run of w samples is the union of two overlapping level-j runs
    with 2^j ≤ w < 2^(j+1).  O(N log N) for all taus, exact (only max, min and one subtraction).
    """
    x = _as_te(te_ns)
    widths = [n + 1 for n in _factors(taus_s, tau0_s, x.size - 1)]
    hi, lo, span = x, x, 1  # max/min of the run of `span` samples starting at each index
    result: dict[int, float] = {}
    for w in sorted(set(widths)):
        while 2 * span <= w:
            hi = np.maximum(hi[:-span], hi[span:])
            lo = np.minimum(lo[:-span], lo[span:])
            span *= 2
        shift = w - span  # second run starts this far after the first; both end inside the window
        peak = np.maximum(hi[: hi.size - shift], hi[shift:])
        trough = np.minimum(lo[: lo.size - shift], lo[shift:])
        result[w] = float(np.max(peak - trough))
    return [result[w] for w in widths]


def _allan_family(fn: Callable[..., tuple], x: np.ndarray, tau0_s: float, ns: list[int]) -> list[float]:
    """Run an allantools phase statistic at exactly the averaging factors ``ns``, in that order.

    allantools sorts and de-duplicates taus and silently drops any whose estimator has fewer than two
    terms, so callers validate ``ns`` first and the results are mapped back by averaging factor.
    """
    rate_hz = 1.0 / tau0_s
    taus_out, devs, _, _ = fn(x / NS_PER_S, rate=rate_hz, data_type="phase",
                              taus=np.array(sorted(set(ns)), dtype=np.float64) * tau0_s)
    by_n = {round(t * rate_hz): float(d) for t, d in zip(taus_out, devs)}
    return [by_n[n] for n in ns]


def tdev_ns(te_ns: npt.ArrayLike, tau0_s: float, taus_s: Sequence[float]) -> list[float]:
    """TDEV(tau) in ns, G.810 Appendix II.3, n = tau/tau0 ≤ (N−1)/3.

    allantools.tdev computes tau·MDEV/sqrt(3) with the overlapping MDEV of NIST SP 1065 eq. (14), which is
    algebraically the G.810 II.3 estimator over all N−3n+1 overlapping windows,
        TDEV² = 1/(6n²(N−3n+1)) · Σ_j [Σ_{i=j}^{j+n−1} (x_{i+2n} − 2x_{i+n} + x_i)]²
    (tests/unit/test_metrics.py checks it against that sum).  The record goes in as seconds, as allantools
    expects, and the result comes back in ns.
    """
    x = _as_te(te_ns)
    ns = _factors(taus_s, tau0_s, (x.size - 1) // 3)  # N − 3n + 1 ≥ 2 terms
    return [d * NS_PER_S for d in _allan_family(allantools.tdev, x, tau0_s, ns)]


def adev(te_ns: npt.ArrayLike, tau0_s: float, taus_s: Sequence[float]) -> list[float]:
    """Overlapping Allan deviation (fractional frequency, dimensionless) from phase, G.810 Appendix II.1
    quantity with the fully overlapping estimator of NIST SP 1065 eq. (11); n = tau/tau0 ≤ (N−2)/2."""
    x = _as_te(te_ns)
    return _allan_family(allantools.oadev, x, tau0_s, _factors(taus_s, tau0_s, (x.size - 2) // 2))  # N − 2n ≥ 2


def default_taus_s(n_samples: int, tau0_s: float) -> list[float]:
    """Taus 1, 2, 4, 10, 20, 40, 100 ... ·tau0 (Stable32's "decade" spacing), up to n ≤ (N−1)/3.

    (N−1)/3 is where TDEV, the longest-reaching estimator, still has two terms; MTIE could go further but a
    plot is easier to read when every curve shares its abscissae.
    """
    n_max = (n_samples - 1) // 3
    out: list[float] = []
    decade = 1
    while decade <= n_max:
        out += [k * decade * tau0_s for k in (1, 2, 4) if k * decade <= n_max]
        decade *= 10
    return out


def _piecewise_ns(segments: tuple[Segment, ...], tau_s: float) -> float:
    """Limit at tau: segments are (lo, hi] except the first, which includes lo (as the G.8272 tables read).
    Outside every segment the mask sets no requirement, so the limit is +inf (margin 0)."""
    for i, (lo_s, hi_s, base_ns, slope_ns_per_s) in enumerate(segments):
        if (lo_s < tau_s or (i == 0 and lo_s == tau_s)) and tau_s <= hi_s:
            return base_ns + slope_ns_per_s * tau_s
    return math.inf


@dataclass(frozen=True)
class Mask:
    """One PRTC class of G.8272: max|TE| bound (clause 6.1) and wander masks (clause 6.2, Tables 1–2)."""

    name: str
    max_te_ns: float
    mtie_segments: tuple[Segment, ...]
    tdev_segments: tuple[Segment, ...]

    def mtie_limit_ns(self, tau_s: float) -> float:
        return _piecewise_ns(self.mtie_segments, tau_s)

    def tdev_limit_ns(self, tau_s: float) -> float:
        return _piecewise_ns(self.tdev_segments, tau_s)


# G.8272 Table 1 writes the MTIE slope as 0.275e-3 µs per s (+ 0.025 µs), i.e. 0.275 ns/s in ns; that is
# what makes the sloped segment meet the flat one at 273 s (100.075 ≈ 100 ns) and at 54.5 s (39.99 ≈ 40 ns).
MASKS: dict[str, Mask] = {
    "PRTC-A": Mask("PRTC-A", 100.0,
                   mtie_segments=((0.1, 273.0, 25.0, 0.275), (273.0, math.inf, 100.0, 0.0)),
                   tdev_segments=((0.1, 100.0, 3.0, 0.0), (100.0, 1000.0, 0.0, 0.03), (1000.0, 1e4, 30.0, 0.0))),
    "PRTC-B": Mask("PRTC-B", 40.0,
                   mtie_segments=((0.1, 54.5, 25.0, 0.275), (54.5, math.inf, 40.0, 0.0)),
                   tdev_segments=((0.1, 100.0, 1.0, 0.0), (100.0, 500.0, 0.0, 0.01), (500.0, 1e5, 5.0, 0.0))),
}


@dataclass(frozen=True)
class MaskReport:
    """A record judged against one mask.  A margin is measured/limit, so ≤ 1 passes; for MTIE and TDEV it is
    the worst over the taus.  A limit of +inf means the mask says nothing at that tau (margin 0)."""

    mask: str
    taus_s: tuple[float, ...]
    max_abs_te_ns: float
    max_te_limit_ns: float
    mtie_ns: tuple[float, ...]
    mtie_limit_ns: tuple[float, ...]
    tdev_ns: tuple[float, ...]
    tdev_limit_ns: tuple[float, ...]
    margin_by_metric: dict[str, float]  # "max_te", "mtie", "tdev"
    passed_by_metric: dict[str, bool]
    worst_margin: float
    passed: bool


def _worst_margin(measured: Sequence[float], limits: Sequence[float]) -> float:
    return max((m / lim for m, lim in zip(measured, limits)), default=0.0)


def check(te_ns: npt.ArrayLike, tau0_s: float, mask: Mask,
          taus_s: Sequence[float] | None = None) -> MaskReport:
    """Judge a record against ``mask`` at ``taus_s`` (default: ``default_taus_s``)."""
    x = _as_te(te_ns)
    taus = tuple(default_taus_s(x.size, tau0_s) if taus_s is None else taus_s)
    if not taus:
        raise ValueError(f"a {x.size}-sample record is too short for any observation interval")
    mtie, tdev = tuple(mtie_ns(x, tau0_s, taus)), tuple(tdev_ns(x, tau0_s, taus))
    mtie_lim = tuple(mask.mtie_limit_ns(t) for t in taus)
    tdev_lim = tuple(mask.tdev_limit_ns(t) for t in taus)
    max_te = max_abs_te_ns(x)
    margins = {"max_te": max_te / mask.max_te_ns, "mtie": _worst_margin(mtie, mtie_lim),
               "tdev": _worst_margin(tdev, tdev_lim)}
    passed = {k: v <= 1.0 for k, v in margins.items()}
    return MaskReport(mask.name, taus, max_te, mask.max_te_ns, mtie, mtie_lim, tdev, tdev_lim,
                      margins, passed, max(margins.values()), all(passed.values()))
