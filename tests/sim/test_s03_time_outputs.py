"""Time outputs under simulation: the 1PPS and IRIG-B DC level shift edges sit on the true second within
the clock's error bound, the time-quality bits follow the bound through forced holdover, and 1PPS is squelched once
the clock leaves its holdover spec.

The edges are planned on the simulated oscillator's counter; where one happens in true time is found by inverting
the oscillator (the counter without its white phase noise, as an edge would be clocked out).
"""

from __future__ import annotations

from appliance.outputs.irig.timecode import CodedExpression
from appliance.outputs.irig.waveform import frames_from_elements
from tests.sim.conftest import NS_PER_S, Sim, build_sim

SETTINGS = {"clock.warmup_s": 0, "clock.qualify_s": 3, "pps_out.sink": "record", "irig_out.format": "B000",
            "clock.holdover_spec_ns": 50, "clock.holdover_temp_k": 20}


def true_of(sim: Sim, raw_ns: int) -> int:
    """The true instant at which the counter reads ``raw_ns``, for a reading within a second or two of now: from the
    counter now and its frequency now (over a second an OCXO's frequency wanders far below a nanosecond's worth)."""
    osc, now = sim.world.oscillator, sim.world.true_ns()
    counter_now = sim.world.counter_ns(now)
    return now + round((raw_ns - counter_now) / (1 + osc.smooth_frequency_ppb(now) * 1e-9))


class Checker:
    """After each simulated second: the bound and synchronization then, and the true-time error of every rising
    edge planned since (the oscillator answers only near the present, so edges are placed as they are planned)."""

    def __init__(self, sim: Sim):
        self.sim = sim
        self.bounds: dict[int, tuple[int | None, bool]] = {}
        self.errors: list[tuple[int, int]] = []  # (served second, true - served ns) of rising edges
        self._seen = {"pps": 0, "irig": 0}

    def run(self, seconds: int) -> None:
        for _ in range(seconds):
            self.sim.run_s(1)
            s = self.sim.app.status()
            self.bounds[s.at_tai_ns // NS_PER_S] = (s.clock.error_bound_ns, s.clock.advertised.ntp_stratum == 1)
            for name, record in (("pps", self.sim.app.pps_record), ("irig", self.sim.app.irig_record)):
                edges = list(record.edges)
                for edge in edges[self._seen[name]:]:
                    if edge.level == 1:
                        error = true_of(self.sim, edge.raw_ns) - edge.served_ns
                        self.errors.append((edge.served_ns // NS_PER_S, error))
                self._seen[name] = len(edges)


def irig_qualities(sim: Sim) -> list[tuple[int, int]]:
    """(second, time quality) of every recorded IRIG-B frame, decoded from the planned edges."""
    edges = list(sim.app.irig_record.edges)
    pulses = [(rise.served_ns, fall.served_ns - rise.served_ns) for rise, fall in zip(edges[::2], edges[1::2])]
    elements = [(t, {2: 0, 5: 1, 8: 2}[w // 1_000_000]) for t, w in pulses]
    frames, problems = frames_from_elements(elements, CodedExpression(0), 2026)
    assert not problems
    return [(f.on_time_ns // NS_PER_S, f.fields.quality) for f in frames]


def test_edges_on_the_second_within_the_bound_and_quality_follows_holdover() -> None:
    sim = build_sim(seed=3, **SETTINGS)
    check = Checker(sim)
    bounds = check.bounds
    for _ in range(120):
        check.run(1)
        if sim.app.status().clock.state == "LOCKED":
            break
    assert sim.app.status().clock.state == "LOCKED"
    locked_from = max(bounds)
    check.run(60)

    # locked: every rising edge within the bound of its true second
    checked = 0
    for second, error in check.errors:
        bound, synced = bounds.get(second - 1, (None, False))
        if second <= locked_from + 1 or bound is None or not synced or second > locked_from + 60:
            continue
        assert abs(error) <= bound, (second, error, bound)
        checked += 1
    assert checked > 55 * 101  # a minute of 1PPS and of IRIG-B's 100 elements

    # forced holdover: the bound grows, the quality code with it; past the spec 1PPS stops
    for _ in range(30):  # once it has learned its oscillator (a few filter points after lock)
        if sim.app.handle_command({"cmd": "holdover", "action": "start", "user": "test"})["ok"]:
            break
        check.run(10)
    assert sim.app.status().clock.state == "HOLDOVER"
    held_from = max(bounds)
    check.run(600)
    qualities = [q for second, q in irig_qualities(sim) if second > held_from + 1]
    assert qualities == sorted(qualities), "the time quality never improves while the bound grows"
    assert qualities[0] <= 4 and qualities[-1] >= 5, (qualities[0], qualities[-1])
    for second, quality in irig_qualities(sim):
        bound = bounds.get(second - 1, (None, False))[0]
        if bound is not None and second > held_from + 2:
            assert quality >= 1 and bound <= 10 ** (quality - 1), (second, quality, bound)
    unsynced = [s for s, (_, synced) in bounds.items() if s > held_from and not synced]
    assert unsynced, "holdover left its 50 ns spec"
    late = [e for e in sim.app.pps_record.edges if e.served_ns // NS_PER_S > unsynced[0] + 2]
    assert late == [], "1PPS squelched while not synchronized"
    status = sim.app.status().outputs
    assert status["pps"]["squelched"] > 0 and status["irig"]["time_quality"] == qualities[-1]
