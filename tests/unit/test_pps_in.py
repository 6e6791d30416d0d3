"""An external 1PPS input (pure core): each edge marks the whole second nearest the served clock, when the served
clock is close enough to name it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance import leap
from appliance.refs.model import PairedTime
from appliance.refs.pps_in import DEFAULT_MAX_OFFSET_NS, ExternalPps

NS = 1_000_000_000
TABLE = leap._default_table()
S = leap.utc_fields_to_tai(2016, 12, 31, 23, 59, 58, 0, TABLE)  # a leap second two seconds on
RAW = 55_555_555_555  # the counter at the edge


def test_an_edge_names_the_nearest_second_of_the_served_clock() -> None:
    pps = ExternalPps("pps-in")
    assert pps.on_edge(RAW, S + 2_000) == PairedTime("pps-in", RAW, S, 1_000.0)
    assert pps.on_edge(RAW + NS, S + NS - 399_000_000) == PairedTime("pps-in", RAW + NS, S + NS, 1_000.0)
    assert pps.on_edge(RAW + 2 * NS, S + 2 * NS + 399_999_999).tai_ns == S + 2 * NS  # type: ignore[union-attr]
    assert str(leap.tai_to_utc(S + 2 * NS, TABLE)).startswith("2016-12-31T23:59:60")  # a second like any other
    s = pps.snapshot()
    assert s["paired"] == 3 and s["edges"] == 3 and not any(s["rejects"].values())
    assert s["last"] == {"tai_ns": S + 2 * NS, "edge_raw_ns": RAW + 2 * NS} and s["last_offset_ns"] == 399_999_999


def test_a_served_clock_too_far_off_or_without_time_cannot_name_the_second() -> None:
    pps = ExternalPps("pps-in")
    assert pps.on_edge(RAW, S + 400_000_001) is None
    assert pps.on_edge(RAW + NS, S + NS - 450_000_000) is None
    assert pps.on_edge(RAW + 2 * NS, None) is None
    assert pps.snapshot()["rejects"] == {"no_time": 1, "time_unknown": 2, "duplicate": 0, "out_of_order": 0}
    tight = ExternalPps("pps-in", max_offset_ns=1_000_000)
    assert tight.on_edge(RAW, S + 1_000_001) is None and tight.on_edge(RAW + NS, S + NS - 999_999) is not None


def test_cable_delay_moves_the_on_time_point_back() -> None:
    pps = ExternalPps("pps-in", cable_delay_ns=150)  # about 30 m of coax
    # the edge reached the input 150 ns after the second began at the source
    assert pps.on_edge(RAW, S + 150) == PairedTime("pps-in", RAW - 150, S, 1_000.0)
    assert pps.last_offset_ns == 0
    late = ExternalPps("pps-in", cable_delay_ns=-NS // 10, max_offset_ns=NS // 4)  # a negative delay is a lead
    assert late.on_edge(RAW, S - 200_000_000) == PairedTime("pps-in", RAW + NS // 10, S, 1_000.0)


def test_a_glitch_naming_a_second_already_paired_and_edges_out_of_order_are_rejected() -> None:
    pps = ExternalPps("pps-in", uncertainty_ns=20_000.0)
    assert pps.on_edge(RAW, S) == PairedTime("pps-in", RAW, S, 20_000.0)
    assert pps.on_edge(RAW + 100_000_000, S + 100_000_000) is None  # a bounce 100 ms later: the same second
    assert pps.on_edge(RAW - 1, S) is None  # time ran backwards
    assert pps.on_edge(RAW + NS, S + NS) is not None
    assert pps.snapshot()["rejects"] == {"no_time": 0, "time_unknown": 0, "duplicate": 1, "out_of_order": 1}


@pytest.mark.parametrize("bad", [0, -1, NS // 2, NS])
def test_the_window_must_leave_the_nearest_second_unambiguous(bad: int) -> None:
    with pytest.raises(ValueError, match="half a second"):
        ExternalPps("pps-in", max_offset_ns=bad)


@settings(max_examples=300, deadline=None)
@given(second=st.integers(0, 2**33), offset=st.integers(-NS // 2 + 1, NS // 2 - 1),
       delay=st.integers(-1_000_000, 1_000_000), raw=st.integers(-2**62, 2**62))
def test_paired_exactly_when_within_the_window(second: int, offset: int, delay: int, raw: int) -> None:
    pps = ExternalPps("pps-in", cable_delay_ns=delay)
    got = pps.on_edge(raw, second * NS + offset + delay)
    if abs(offset) <= DEFAULT_MAX_OFFSET_NS:
        assert got == PairedTime("pps-in", raw - delay, second * NS, 1_000.0)
    else:
        assert got is None and pps.rejects["time_unknown"] == 1
