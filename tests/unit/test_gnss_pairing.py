"""PPS pairing: each edge joined to the label of its second, everything doubtful rejected with its reason."""

from __future__ import annotations

import pytest

from appliance.events import PairedSecond, PpsEdge, Rejected, TimeLabel, TimePulseInfo
from appliance.gnss.pairing import PpsPairer

NS = 1_000_000_000
MS = 1_000_000
T0 = 1_000 * NS  # local clock at the first edge
TAI0 = 1_700_000_037 * NS


def edge(k: int, offset_ns: int = 0) -> PpsEdge:
    return PpsEdge(T0 + k * NS + offset_ns, sequence=k)


def label(k: int, delay_ns: int = 200 * MS, valid: bool = True, second: int | None = None) -> TimeLabel:
    tai_ns = TAI0 + (k if second is None else second) * NS
    return TimeLabel(tai_ns, f"second {k}", T0 + k * NS + delay_ns, valid)


def reasons(out: list) -> list[str]:
    return [r.reason for r in out if isinstance(r, Rejected)]


def test_edge_then_label_pairs_each_second():
    pairer = PpsPairer()
    paired = []
    for k in range(3):
        assert pairer.on_edge(edge(k)) == []
        paired += pairer.on_label(label(k))
    assert paired == [PairedSecond(T0 + k * NS, TAI0 + k * NS, None, k) for k in range(3)]
    assert pairer.paired == 3 and not pairer.rejected


def test_label_with_fraction_of_a_second_names_its_whole_second():
    pairer = PpsPairer()
    pairer.on_edge(edge(0))
    late_label = TimeLabel(TAI0 + 250 * MS, "second 0.25", T0 + 300 * MS, True)
    assert pairer.on_label(late_label)[0].label_tai_ns == TAI0


def test_label_without_edge_is_stale():
    pairer = PpsPairer()
    assert reasons(pairer.on_label(label(0))) == ["stale-label"]
    assert pairer.rejected["stale-label"] == 1


def test_label_arriving_too_late_is_stale_and_its_edge_unlabelled():
    pairer = PpsPairer(label_max_age_ns=500 * MS)
    pairer.on_edge(edge(0))
    assert reasons(pairer.on_label(label(0, delay_ns=600 * MS))) == ["unlabelled", "stale-label"]


def test_edge_without_label_is_unlabelled_when_the_next_edge_comes():
    pairer = PpsPairer()
    pairer.on_edge(edge(0))
    assert reasons(pairer.on_edge(edge(1))) == ["unlabelled"]
    assert pairer.on_label(label(1))[0] == PairedSecond(T0 + NS, TAI0 + NS, None, 1)


def test_two_edges_before_one_label_are_ambiguous():
    pairer = PpsPairer()
    pairer.on_edge(edge(0))
    pairer.on_edge(edge(0, offset_ns=100 * MS))  # a glitch on the PPS line
    assert reasons(pairer.on_label(label(0))) == ["ambiguous"]
    assert pairer.paired == 0
    pairer.on_edge(edge(1))
    assert isinstance(pairer.on_label(label(1))[0], PairedSecond)  # the next second pairs again


def test_invalid_label_is_rejected():
    pairer = PpsPairer()
    pairer.on_edge(edge(0))
    assert reasons(pairer.on_label(label(0, valid=False))) == ["invalid-label"]
    pairer.on_edge(edge(1))
    assert isinstance(pairer.on_label(label(1))[0], PairedSecond)


def test_invalid_label_without_an_edge_is_simply_not_used():
    pairer = PpsPairer()
    assert pairer.on_label(label(0, valid=False)) == []
    assert pairer.paired == 0 and not pairer.rejected


@pytest.mark.parametrize("named_second", [0, -1])
def test_label_not_advancing_is_rejected(named_second):
    pairer = PpsPairer()
    pairer.on_edge(edge(0))
    pairer.on_label(label(0))
    pairer.on_edge(edge(1))
    assert reasons(pairer.on_label(label(1, second=named_second))) == ["label-not-advancing"]


def test_label_may_skip_a_second():
    pairer = PpsPairer()
    pairer.on_edge(edge(0))
    pairer.on_label(label(0))
    pairer.on_edge(edge(1))
    assert pairer.on_label(label(1, second=2))[0].label_tai_ns == TAI0 + 2 * NS


def test_qerr_reported_between_pulses_rides_with_the_next_edge():
    pairer = PpsPairer()
    pairer.on_edge(edge(0))
    pairer.on_time_pulse(TimePulseInfo(-4331, None, T0 + 100 * MS))  # TIM-TP describes the *next* pulse
    first = pairer.on_label(label(0))
    pairer.on_edge(edge(1))
    second = pairer.on_label(label(1))
    assert first[0].qerr_ps is None and second[0].qerr_ps == -4331


def test_newer_qerr_replaces_an_unused_one_and_is_used_once():
    pairer = PpsPairer()
    pairer.on_time_pulse(TimePulseInfo(111, None, T0 - 900 * MS))
    pairer.on_time_pulse(TimePulseInfo(222, None, T0 - 500 * MS))
    pairer.on_edge(edge(0))
    assert pairer.on_label(label(0))[0].qerr_ps == 222
    pairer.on_edge(edge(1))
    assert pairer.on_label(label(1))[0].qerr_ps is None


def test_qerr_of_an_unlabelled_edge_is_dropped_with_it():
    pairer = PpsPairer()
    pairer.on_time_pulse(TimePulseInfo(333, None, T0 - 500 * MS))
    pairer.on_edge(edge(0))
    pairer.on_edge(edge(1))
    assert pairer.on_label(label(1))[0].qerr_ps is None


def test_qerr_delivered_before_the_edge_it_follows_still_waits_for_the_next_edge():
    """Edges and serial bytes come from different threads; the stamps, not the delivery order, decide."""
    pairer = PpsPairer()
    pairer.on_time_pulse(TimePulseInfo(444, None, T0 + 80 * MS))  # sent after edge 0, for edge 1
    pairer.on_edge(edge(0))
    assert pairer.on_label(label(0))[0].qerr_ps is None
    pairer.on_edge(edge(1))
    assert pairer.on_label(label(1))[0].qerr_ps == 444


def test_qerr_for_a_pulse_that_never_came_is_not_given_to_a_later_one():
    pairer = PpsPairer()
    pairer.on_time_pulse(TimePulseInfo(555, None, T0 - 500 * MS))  # describes edge 0, which is lost
    pairer.on_edge(edge(1))
    assert pairer.on_label(label(1))[0].qerr_ps is None


def test_cable_delay_is_taken_off_the_edge():
    pairer = PpsPairer(cable_delay_ns=57)
    pairer.on_edge(edge(0))
    assert pairer.on_label(label(0))[0].edge_raw_ns == T0 - 57


@pytest.mark.parametrize("age_ns", [0, NS, -1])
def test_label_age_limit_must_stay_within_one_second(age_ns):
    with pytest.raises(ValueError):
        PpsPairer(label_max_age_ns=age_ns)
