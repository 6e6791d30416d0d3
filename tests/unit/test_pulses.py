"""1PPS and IRIG-B planning: cable delay, policies, catching up after a stall, the IRIG frame of each second."""

from __future__ import annotations

import pytest

from appliance import leap
from appliance.protocol.irig.timecode import CodedExpression, decode
from appliance.outputs.pulses import IrigConfig, PpsConfig, RecordingSink, TimeOutputs, pps_edges

NS = 1_000_000_000
TABLE = leap.LeapTable.load_default()
S = leap.utc_fields_to_tai(2024, 2, 29, 6, 30, 0, 0, TABLE)


def shifted(raw_offset: int):
    return lambda served: served + raw_offset  # a counter a fixed offset from the served clock


def test_pps_edges_leave_early_by_the_cable_delay_and_fall_after_the_width() -> None:
    edges = pps_edges(S, True, PpsConfig(width_ns=200_000_000, cable_delay_ns=150), shifted(-7))
    assert [(e.raw_ns, e.level, e.served_ns) for e in edges] == [(S - 150 - 7, 1, S),
                                                                (S + 200_000_000 - 150 - 7, 0, S + 200_000_000)]


@pytest.mark.parametrize(("policy", "widths"), [("squelch", []), ("always", [100]), ("flag", [500])])
def test_unsynchronized_policy(policy: str, widths: list[int]) -> None:
    edges = pps_edges(S, False, PpsConfig(policy=policy), shifted(0))
    assert [(f.raw_ns - r.raw_ns) // 1_000_000 for r, f in zip(edges[::2], edges[1::2])] == widths


def test_bad_pps_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="policy"):
        PpsConfig(policy="blink")
    with pytest.raises(ValueError, match="width"):
        PpsConfig(width_ns=NS)


def test_each_second_is_planned_once_and_a_long_stall_is_counted_as_lost() -> None:
    pps, irig = RecordingSink(), RecordingSink()
    out = TimeOutputs(PpsConfig(), pps.emit, IrigConfig(CodedExpression(4)), irig.emit)
    out.on_second(S + 250_000_000, shifted(0), True, 40, TABLE)
    out.on_second(S + 1_250_000_000, shifted(0), True, 40, TABLE)
    out.on_second(S + 1_900_000_000, shifted(0), True, 40, TABLE)  # early timer: nothing new
    assert [e.served_ns for e in pps.edges if e.level] == [S + NS, S + 2 * NS]
    out.on_second(S + 10_250_000_000, shifted(0), True, 40, TABLE)  # stalled 8 s: the last two are still planned
    assert [e.served_ns for e in pps.edges if e.level][-3:] == [S + 9 * NS, S + 10 * NS, S + 11 * NS]
    assert out.pps_counters.lost == 6 and out.status()["irig"]["lost"] == 6
    frame = [{2_000_000: 0, 5_000_000: 1, 8_000_000: 2}[f.served_ns - r.served_ns]
             for r, f in zip(list(irig.edges)[:200:2], list(irig.edges)[1:200:2])]
    fields = decode(frame, CodedExpression(4), 2024)
    assert (fields.day_of_year, fields.hour, fields.minute, fields.second, fields.quality) == (60, 6, 30, 1, 3)
