"""The clock state machine, as a transition table: what each (state, event) pair leads to.

Pure core.  The engine classifies what happened into one of the events below (it knows whether the clock could hold
over, whether the phase is within the lock threshold); the table says where that leads; everything else about a
transition (servo resets, predictions, alarms) lives with the engine's entry actions.  A pair not in the table is
ignored: e.g. a reference qualifying while the operator forces holdover.
"""

from __future__ import annotations

import enum


class ClockState(str, enum.Enum):
    FREERUN = "FREERUN"  # never locked (or nothing learned): time is whatever the oscillator says
    ACQUIRING = "ACQUIRING"  # a qualified reference drives the loop; not yet within the lock threshold
    LOCKED = "LOCKED"  # tracking the reference within the lock threshold
    HOLDOVER = "HOLDOVER"  # reference gone (or forced away); steering on the learned prediction, within spec
    HOLDOVER_EXPIRED = "HOLDOVER_EXPIRED"  # still predicting, but the error bound is past the holdover spec


class ClockEvent(str, enum.Enum):
    REFERENCE_QUALIFIED = "reference-qualified"  # good for the qualification time (and warm-up is over)
    RELOCK = "relock"  # qualified, and the phase is already within the lock threshold
    LOCK_ACHIEVED = "lock-achieved"
    LOCK_LOST = "lock-lost"  # phase beyond the unlock threshold while the reference is still there
    REFERENCE_LOST = "reference-lost"  # ... and the clock has learned enough to hold over
    REFERENCE_LOST_COLD = "reference-lost-cold"  # ... and it has not
    HOLDOVER_LIMIT = "holdover-limit"  # the error bound passed the holdover spec
    FORCE_HOLDOVER = "force-holdover"  # operator command
    RESTORED = "restored"  # a recent learned state was restored at start


S, E = ClockState, ClockEvent
TRANSITIONS: dict[tuple[ClockState, ClockEvent], ClockState] = {
    (S.FREERUN, E.REFERENCE_QUALIFIED): S.ACQUIRING,
    (S.FREERUN, E.RELOCK): S.ACQUIRING,
    (S.FREERUN, E.RESTORED): S.HOLDOVER,
    (S.ACQUIRING, E.LOCK_ACHIEVED): S.LOCKED,
    (S.ACQUIRING, E.REFERENCE_LOST): S.HOLDOVER,
    (S.ACQUIRING, E.REFERENCE_LOST_COLD): S.FREERUN,
    (S.ACQUIRING, E.FORCE_HOLDOVER): S.HOLDOVER,
    (S.LOCKED, E.REFERENCE_LOST): S.HOLDOVER,
    (S.LOCKED, E.REFERENCE_LOST_COLD): S.FREERUN,  # locked too briefly to have learned the oscillator
    (S.LOCKED, E.LOCK_LOST): S.ACQUIRING,
    (S.LOCKED, E.FORCE_HOLDOVER): S.HOLDOVER,
    (S.HOLDOVER, E.REFERENCE_QUALIFIED): S.ACQUIRING,
    (S.HOLDOVER, E.RELOCK): S.LOCKED,
    (S.HOLDOVER, E.HOLDOVER_LIMIT): S.HOLDOVER_EXPIRED,
    (S.HOLDOVER_EXPIRED, E.REFERENCE_QUALIFIED): S.ACQUIRING,
    (S.HOLDOVER_EXPIRED, E.RELOCK): S.LOCKED,
}
del S, E


def next_state(state: ClockState, event: ClockEvent) -> ClockState | None:
    """The state ``event`` leads to from ``state``, or None if the table has no such transition."""
    return TRANSITIONS.get((state, event))
