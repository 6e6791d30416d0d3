"""The clock state machine's transition table: every (state, event) pair, and random walks through it."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.clock.state import TRANSITIONS, ClockEvent, ClockState, next_state

S, E = ClockState, ClockEvent

# Written out from the module's documentation, independently of its table.
DOCUMENTED: dict[tuple[ClockState, ClockEvent], ClockState] = {
    # a qualified reference starts the loop; a restored learned state holds over at once
    (S.FREERUN, E.REFERENCE_QUALIFIED): S.ACQUIRING,
    (S.FREERUN, E.RELOCK): S.ACQUIRING,
    (S.FREERUN, E.RESTORED): S.HOLDOVER,
    (S.ACQUIRING, E.LOCK_ACHIEVED): S.LOCKED,
    (S.ACQUIRING, E.REFERENCE_LOST): S.HOLDOVER,
    (S.ACQUIRING, E.REFERENCE_LOST_COLD): S.FREERUN,
    (S.ACQUIRING, E.FORCE_HOLDOVER): S.HOLDOVER,
    (S.LOCKED, E.REFERENCE_LOST): S.HOLDOVER,
    (S.LOCKED, E.REFERENCE_LOST_COLD): S.FREERUN,  # locked, but not long enough to have learned anything
    (S.LOCKED, E.LOCK_LOST): S.ACQUIRING,
    (S.LOCKED, E.FORCE_HOLDOVER): S.HOLDOVER,
    (S.HOLDOVER, E.REFERENCE_QUALIFIED): S.ACQUIRING,
    (S.HOLDOVER, E.RELOCK): S.LOCKED,
    (S.HOLDOVER, E.HOLDOVER_LIMIT): S.HOLDOVER_EXPIRED,
    (S.HOLDOVER_EXPIRED, E.REFERENCE_QUALIFIED): S.ACQUIRING,
    (S.HOLDOVER_EXPIRED, E.RELOCK): S.LOCKED,
}
del S, E

ALL_PAIRS = list(itertools.product(ClockState, ClockEvent))


@pytest.mark.parametrize(("state", "event"), ALL_PAIRS, ids=[f"{s.name}-{e.name}" for s, e in ALL_PAIRS])
def test_every_pair_leads_to_the_documented_state_or_nowhere(state: ClockState, event: ClockEvent) -> None:
    assert next_state(state, event) is DOCUMENTED.get((state, event))


def test_the_table_holds_only_documented_pairs() -> None:
    assert TRANSITIONS == DOCUMENTED


def test_a_lost_reference_never_leaves_the_clock_claiming_lock() -> None:
    # Whatever the engine knows, losing the reference while ACQUIRING or LOCKED moves the clock somewhere.
    for state in (ClockState.ACQUIRING, ClockState.LOCKED):
        for event in (ClockEvent.REFERENCE_LOST, ClockEvent.REFERENCE_LOST_COLD):
            assert next_state(state, event) not in (None, ClockState.LOCKED, ClockState.ACQUIRING)


def test_operator_holdover_is_ignored_where_there_is_nothing_to_hold() -> None:
    assert next_state(ClockState.FREERUN, ClockEvent.FORCE_HOLDOVER) is None
    assert next_state(ClockState.HOLDOVER, ClockEvent.FORCE_HOLDOVER) is None
    assert next_state(ClockState.HOLDOVER_EXPIRED, ClockEvent.FORCE_HOLDOVER) is None


def test_a_restored_state_only_applies_at_start() -> None:
    assert [s for s in ClockState if next_state(s, ClockEvent.RESTORED) is not None] == [ClockState.FREERUN]


def test_every_state_is_reachable_from_freerun_and_has_a_way_out() -> None:
    seen, frontier = {ClockState.FREERUN}, [ClockState.FREERUN]
    while frontier:
        state = frontier.pop()
        for event in ClockEvent:
            new = next_state(state, event)
            if new is not None and new not in seen:
                seen.add(new)
                frontier.append(new)
    assert seen == set(ClockState)
    assert all(any(next_state(s, e) not in (None, s) for e in ClockEvent) for s in ClockState)


def test_every_event_is_used() -> None:
    assert {event for _, event in TRANSITIONS} == set(ClockEvent)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list(ClockEvent)), max_size=60))
def test_random_walks_stay_in_the_enum_and_only_a_cold_loss_returns_to_freerun(events: list[ClockEvent]) -> None:
    state = ClockState.FREERUN
    for event in events:
        new = next_state(state, event)
        if new is None:
            continue
        assert isinstance(new, ClockState) and new in ClockState
        if new is ClockState.FREERUN:
            assert event is ClockEvent.REFERENCE_LOST_COLD
        if new is ClockState.HOLDOVER_EXPIRED:
            assert (state, event) == (ClockState.HOLDOVER, ClockEvent.HOLDOVER_LIMIT)
        if new is ClockState.LOCKED:
            assert event in (ClockEvent.LOCK_ACHIEVED, ClockEvent.RELOCK)
        state = new
