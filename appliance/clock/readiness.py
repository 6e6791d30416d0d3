"""Holdover readiness: whether the clock could hold over if its reference went now, and for how long within spec.

Pure core.  The engine says what it knows (its state, how much it has learned and how much is still to learn, and its
error bound as a function of time since a loss); this module turns it into the figure operators read: "capable in
3 min" while the first lock is still learning, "capable, within 1000 ns for 4.2 h" once it would hold over, the time
left within spec while it does, or why it cannot.  The same rule decides the clock's own transition on a loss
(``predictor.enough_to_hold_over``), so the figure and what the clock then does agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

HORIZON_S = 30 * 86_400  # a bound still within spec this far out is "for more than 30 days"
_BISECTIONS = 40  # to 1 s over the horizon: 2^22 s > 30 days, the rest is margin


@dataclass(frozen=True)
class HoldoverReadiness:
    """``capable``: a loss now gives HOLDOVER (not FREERUN).  ``capable_in_s``: while locked and still learning, the
    seconds of lock left until it does.  ``within_ns``/``good_for_s``: the holdover spec, and how long a holdover
    starting now (or the one running) stays within it.  ``text``: the one line the operator reads."""

    capable: bool
    text: str
    capable_in_s: int | None = None
    within_ns: int | None = None
    good_for_s: int | None = None


def good_for_s(bound_after_ns: Callable[[float], float], limit_ns: float, horizon_s: int = HORIZON_S) -> int:
    """Seconds until ``bound_after_ns(t)`` (non-decreasing in t) passes ``limit_ns``: 0 if it already has, the
    horizon if it never does within it.  Bounded: a doubling search, then bisection to the second."""
    if bound_after_ns(0.0) > limit_ns:
        return 0
    lo, hi = 0, 1
    while hi < horizon_s and bound_after_ns(float(hi)) <= limit_ns:
        lo, hi = hi, 2 * hi
    if hi >= horizon_s:
        if bound_after_ns(float(horizon_s)) <= limit_ns:
            return horizon_s
        hi = horizon_s
    for _ in range(_BISECTIONS):
        if hi - lo <= 1:
            break
        mid = (lo + hi) // 2
        if bound_after_ns(float(mid)) <= limit_ns:
            lo = mid
        else:
            hi = mid
    return lo


def readiness(state: str, capable: bool, learning_s: float, needed_s: float, left_s: int, spec_ns: int,
              bound_after_ns: Callable[[float], float] | None, ever_locked: bool) -> HoldoverReadiness:
    """The readiness figure from the engine's state.  ``learning_s``/``needed_s``: seconds learned and needed,
    ``left_s``: seconds of lock until enough.  ``bound_after_ns(t)``: the bound t seconds after a loss now (or t
    seconds further into the holdover running), None when there is nothing to hold over on."""
    if state == "HOLDOVER_EXPIRED":
        return HoldoverReadiness(True, f"holding over, past its {spec_ns} ns spec", within_ns=spec_ns, good_for_s=0)
    if capable and bound_after_ns is not None:
        good = good_for_s(bound_after_ns, spec_ns)
        if state == "HOLDOVER":
            return HoldoverReadiness(True, f"holding over, within {spec_ns} ns for {duration_text(good)} more",
                                     within_ns=spec_ns, good_for_s=good)
        if good == 0:
            return HoldoverReadiness(True, f"capable, but beyond its {spec_ns} ns spec at once (the bound is "
                                           f"{bound_after_ns(0.0):.0f} ns)", within_ns=spec_ns, good_for_s=0)
        return HoldoverReadiness(True, f"capable, within {spec_ns} ns for {duration_text(good)}", within_ns=spec_ns,
                                 good_for_s=good)
    if capable:
        return HoldoverReadiness(True, "capable", within_ns=spec_ns)
    left = max(1, left_s)
    if state == "LOCKED":
        return HoldoverReadiness(False, f"capable in {duration_text(left)}", capable_in_s=left, within_ns=spec_ns)
    why = ("learns only while locked: nothing learned yet" if learning_s <= 0 and not ever_locked else
           f"learned {learning_s:.0f} s (of at least {needed_s:.0f} s), {duration_text(left)} more of lock needed")
    return HoldoverReadiness(False, f"not capable: {why}", within_ns=spec_ns)


def duration_text(seconds: int) -> str:
    """"45 s", "3 min", "4.2 h", "more than 30 days"."""
    if seconds >= HORIZON_S:
        return f"more than {HORIZON_S // 86_400} days"
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"
