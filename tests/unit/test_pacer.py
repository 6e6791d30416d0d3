"""The global request budget: waits rather than refuses, in order, and refuses only beyond the longest wait."""

from __future__ import annotations

from appliance.edge.pacer import Pacer


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)


def test_burst_then_paced_in_order_then_refused() -> None:
    t = FakeTime()
    p = Pacer(10.0, 3, t.clock, t.sleep)
    assert all(p.wait(1.0) for _ in range(3)) and t.slept == []  # the burst
    assert p.wait(1.0) and abs(t.slept[-1] - 0.1) < 1e-9  # the next waits a tenth of a second ...
    assert p.wait(1.0) and abs(t.slept[-1] - 0.2) < 1e-9  # ... the one after it, two tenths
    for _ in range(8):
        assert p.wait(1.0)
    assert not p.wait(1.0) and p.refused == 1  # more than a second away: refused, its token given back
    t.now = 10.0
    assert p.wait(0.0) and p.paced == 10


def test_a_rate_of_zero_is_no_budget() -> None:
    t = FakeTime()
    p = Pacer(0.0, 1, t.clock, t.sleep)
    assert all(p.wait(0.0) for _ in range(1000)) and t.slept == []
