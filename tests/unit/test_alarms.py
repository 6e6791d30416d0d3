"""The alarm book: raised once, cleared once, no floods; alarm groups keep exactly one member active."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.alarms import CLOCK_ALARMS, CLOCK_CODES, RECEIVER_ALARMS, RECEIVER_CODES, AlarmBook
from appliance.events import Alarm, ReceiverState, Severity


def raised(code: str = "gnss-no-fix", text: str = "GNSS receiver has no fix", at: int = 1) -> Alarm:
    return Alarm(code, Severity.MAJOR, True, text, at)


def cleared(code: str = "gnss-no-fix", text: str = "", at: int = 2) -> Alarm:
    return Alarm(code, Severity.MAJOR, False, text, at)


def test_an_alarm_is_raised_once() -> None:
    book = AlarmBook()
    alarm = raised()
    assert book.apply([alarm]) == [alarm]
    assert book.active == {"gnss-no-fix": alarm} and list(book.history) == [alarm]


def test_raising_again_with_the_same_text_is_a_no_op() -> None:
    book = AlarmBook()
    book.apply([raised(at=1)])
    assert book.apply([raised(at=2), raised(at=3)]) == []
    assert book.active["gnss-no-fix"].at_ns == 1 and len(book.history) == 1


def test_raising_again_with_new_text_updates_it() -> None:
    book = AlarmBook()
    book.apply([raised(text="no fix (antenna)")])
    update = raised(text="no fix (jamming)", at=5)
    assert book.apply([update]) == [update]
    assert book.active["gnss-no-fix"].text == "no fix (jamming)" and len(book.history) == 2


def test_an_alarm_is_cleared_once_and_never_before_it_was_raised() -> None:
    book = AlarmBook()
    assert book.apply([cleared()]) == []
    book.apply([raised()])
    assert book.apply([cleared()]) == [cleared()]
    assert book.apply([cleared(at=3)]) == []
    assert book.active == {} and [a.raised for a in book.history] == [True, False]


def test_history_is_bounded() -> None:
    book = AlarmBook(history=4)
    for k in range(10):
        book.apply([raised(at=k), cleared(at=k)])
    assert len(book.history) == 4 and book.active == {}


def test_set_group_raises_the_wanted_alarm_with_its_detail() -> None:
    book = AlarmBook()
    out = book.set_group(RECEIVER_CODES, RECEIVER_ALARMS[ReceiverState.NO_FIX], "no satellites", 7)
    assert [(a.code, a.severity, a.raised, a.text, a.at_ns) for a in out] == [
        ("gnss-no-fix", Severity.MAJOR, True, "GNSS receiver has no fix (no satellites)", 7)]
    assert book.set_group(RECEIVER_CODES, RECEIVER_ALARMS[ReceiverState.NO_FIX], "no satellites", 8) == []


def test_set_group_swaps_one_member_for_another() -> None:
    book = AlarmBook()
    book.set_group(RECEIVER_CODES, RECEIVER_ALARMS[ReceiverState.NO_DATA], "", 1)
    out = book.set_group(RECEIVER_CODES, RECEIVER_ALARMS[ReceiverState.DISCONNECTED], "unplugged", 2)
    assert [(a.code, a.raised) for a in out] == [("gnss-no-data", False), ("gnss-disconnected", True)]
    assert set(book.active) == {"gnss-disconnected"}
    out = book.set_group(RECEIVER_CODES, None, "fix", 3)
    assert [(a.code, a.raised) for a in out] == [("gnss-disconnected", False)] and book.active == {}


def test_set_group_leaves_other_groups_alone() -> None:
    book = AlarmBook()
    book.set_group(RECEIVER_CODES, RECEIVER_ALARMS[ReceiverState.NO_FIX], "", 1)
    book.apply([raised("leap-disagreement", "receiver says 38 s")])
    book.set_group(CLOCK_CODES, CLOCK_ALARMS["HOLDOVER"], "no reference sample for 3 s", 2)
    book.set_group(CLOCK_CODES, None, "relocked", 3)
    assert set(book.active) == {"gnss-no-fix", "leap-disagreement"}


def test_a_shared_code_takes_the_text_of_the_current_state() -> None:
    # FREERUN and ACQUIRING share "clock-unlocked": the active alarm must say which one the clock is in now.
    book = AlarmBook()
    book.set_group(CLOCK_CODES, CLOCK_ALARMS["FREERUN"], "starting", 1)
    out = book.set_group(CLOCK_CODES, CLOCK_ALARMS["ACQUIRING"], "reference qualified for 10 s", 2)
    assert [(a.code, a.raised) for a in out] == [("clock-unlocked", True)]
    assert book.active["clock-unlocked"].text.startswith("clock acquiring")
    assert len(book.active) == 1


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([None, *CLOCK_ALARMS]), max_size=30))
def test_a_group_never_has_more_than_the_wanted_alarm_active(states: list[str | None]) -> None:
    book = AlarmBook()
    for at, state in enumerate(states):
        wanted = None if state is None else CLOCK_ALARMS[state]
        changed = book.set_group(CLOCK_CODES, wanted, f"because {state}", at)
        active = [code for code in book.active if code in CLOCK_CODES]
        assert active == ([] if wanted is None else [wanted[0]])
        if wanted is not None:
            assert book.active[wanted[0]].text.startswith(wanted[2])
        # nothing is reported twice in one go
        assert len({(a.code, a.raised, a.text) for a in changed}) == len(changed)
    latest = {a.code: a for a in book.history}  # the history tells the same story as the active set
    assert {code for code, a in latest.items() if a.raised} == set(book.active)
    assert all(book.active[code] == a for code, a in latest.items() if a.raised)
