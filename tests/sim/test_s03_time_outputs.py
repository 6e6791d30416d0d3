"""Time outputs under simulation: the 1PPS and IRIG-B DC level shift edges sit on the true second within
the clock's error bound, the time-quality bits follow the bound through forced holdover, and 1PPS is squelched once
the clock leaves its holdover spec.

The edges are planned on the simulated oscillator's counter; where one happens in true time is found by inverting
the oscillator (the counter without its white phase noise, as an edge would be clocked out).
"""

from __future__ import annotations

import numpy as np

from appliance.protocol.irig.timecode import CodedExpression, tai_of
from appliance.edge.irig.wavout import lead_in
from appliance.protocol.irig.waveform import elements_from_pulses, frames_from_elements, pulses_from_samples
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
            for name, record in (("pps", self.sim.app.pulses.pps_record), ("irig", self.sim.app.pulses.irig_record)):
                edges = list(record.edges)
                for edge in edges[self._seen[name]:]:
                    if edge.level == 1:
                        error = true_of(self.sim, edge.raw_ns) - edge.served_ns
                        self.errors.append((edge.served_ns // NS_PER_S, error))
                self._seen[name] = len(edges)


def irig_qualities(sim: Sim) -> list[tuple[int, int]]:
    """(second, time quality) of every recorded IRIG-B frame, decoded from the planned edges."""
    edges = list(sim.app.pulses.irig_record.edges)
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
    late = [e for e in sim.app.pulses.pps_record.edges if e.served_ns // NS_PER_S > unsynced[0] + 2]
    assert late == [], "1PPS squelched while not synchronized"
    status = sim.app.status().outputs.present()
    assert status["pps"]["squelched"] > 0 and status["irig"]["time_quality"] == qualities[-1]


AM_SETTINGS = {"clock.warmup_s": 0, "clock.qualify_s": 3, "irig_out.format": "B122", "irig_out.sample_rate": 48_000}
# how well the decoder places a zero crossing in clean 16-bit samples at 48 kHz (least squares over a pulse's cycles);
# tests/unit/test_irig_timecode.py checks it against rendered signals
AM_DECODE_NS = 20


def test_am_zero_crossings_on_the_second_within_the_bound() -> None:
    """The live AM output (B122 at 48 kHz): the positive-going zero crossing that starts each reference marker,
    found by the decoder in the samples, is within the error bound of the true second the frame names, and the frame
    names that second."""
    sim = build_sim(seed=5, **AM_SETTINGS)
    for _ in range(120):
        sim.run_s(1)
        if sim.app.status().clock.state == "LOCKED":
            break
    assert sim.app.status().clock.state == "LOCKED"
    sim.run_s(3)
    record = sim.app.pulses.irig_record
    last = record.blocks[-1].first_index
    now = sim.app.status()
    bounds: dict[int, int | None] = {now.at_tai_ns // NS_PER_S: now.clock.error_bound_ns}
    truth: dict[int, int] = {}  # block first index -> the true instant of its first sample
    for _ in range(40):
        sim.run_s(1)
        s = sim.app.status()
        bounds[s.at_tai_ns // NS_PER_S] = s.clock.error_bound_ns
        for block in record.blocks:
            if block.first_index > last:
                truth[block.first_index] = true_of(sim, block.first_raw_ns)
                last = block.first_index
    blocks = [b for b in record.blocks if b.first_index in truth]
    assert all(b.first_index + len(b.samples) // 2 == c.first_index for b, c in zip(blocks, blocks[1:])), \
        "frames follow each other on one sample grid"
    lead = lead_in(blocks[0])  # what a WAV segment starts with: the previous frame's P0
    samples = [v for b in [lead, *(b.samples for b in blocks)] for v in np.frombuffer(b, "<i2").tolist()]
    frames, problems = frames_from_elements(elements_from_pulses(pulses_from_samples(samples, 48_000)),
                                            CodedExpression(2), 2026)
    assert not problems
    assert len(frames) == len(blocks)
    offset_ns = [(b.first_index - blocks[0].first_index + len(lead) // 2) * NS_PER_S / 48_000 for b in blocks]
    errors = []
    for frame, block, block_ns in zip(frames, blocks, offset_ns):
        second = block.served_ns
        assert tai_of(frame.fields, sim.app.leap_table()) == second, "the frame names the second it starts"
        # the crossing falls where the planner put it: the block's first sample is first_tau after it
        assert abs(frame.on_time_ns - block_ns + block.first_tau_ns) <= AM_DECODE_NS
        error = (truth[block.first_index] - second) + (frame.on_time_ns - block_ns)  # ints first: a float of
        # an instant this size has 256 ns steps
        bound = bounds.get(second // NS_PER_S - 1)
        assert bound is not None and abs(error) <= bound + AM_DECODE_NS, (second, error, bound)
        errors.append(error)
    assert max(errors) - min(errors) > 0, "the error follows the clock (the check is not vacuous)"
