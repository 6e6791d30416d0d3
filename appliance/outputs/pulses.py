"""Second-locked outputs: 1PPS and IRIG-B DC level shift, planned a second ahead on the local counter.

Pure core.  Once a second the appliance hands ``TimeOutputs.on_second`` the served time now, the map from served
time back to the counter (``raw_at``) and its status; for the next second S of the served clock each output plans its
edges as counter (raw) instants, and its sink carries them out: a PHC's periodic output or a GPIO line at those
instants, or a recording for tests.  An edge meant for served time T is put at raw_at(T - cable delay), so it
arrives at the far end of the cable on time; the residual is the clock's own error, which its error bound states.

1PPS: a rising edge on each second, falling ``width`` later.  While the clock is not synchronized (not serving as
stratum 1: free-running, or in holdover beyond its spec) the policy decides: ``squelch`` sends nothing, ``always``
carries on, ``flag`` carries on with the other width (``flag_width``) so a receiver can tell by the pulse.
IRIG-B (B00x): the frame of second S (``timecode.fields_for_second``) with the time quality taken from the error
bound, its 200 edges from S on.  IRIG-B AM (B12x): the same frame as 16-bit samples on a grid of the counter (a DAC
clocked from the oscillator): each sample's counter instant is mapped to the served clock and the waveform is
evaluated there, so the reference marker's positive-going zero crossing falls on the served second.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from appliance.leap import LeapTable
from appliance.protocol.irig.timecode import (ELEMENT_NS, WIDTH_NS, CodedExpression, OffsetOf, encode,
                                             fields_for_second, quality_from_bound, utc_offset)
from appliance.protocol.irig.waveform import CARRIER_HZ, am_frame_values
from appliance.units import NS_PER_S

MAX_CATCH_UP_S = 2  # after a stall, plan at most this many past seconds; older ones are lost, and counted


@dataclass(frozen=True)
class PlannedEdge:
    raw_ns: int  # when, on the local counter
    level: int  # 1 rising, 0 falling
    served_ns: int  # the served instant the edge stands for (before cable-delay compensation)


@dataclass(frozen=True)
class PpsConfig:
    width_ns: int = 100_000_000
    cable_delay_ns: int = 0
    policy: str = "squelch"  # squelch | always | flag
    flag_width_ns: int = 500_000_000

    def __post_init__(self) -> None:
        if self.policy not in ("squelch", "always", "flag"):
            raise ValueError(f"1PPS policy {self.policy!r}: expected squelch, always or flag")
        for name, width in (("width", self.width_ns), ("flag width", self.flag_width_ns)):
            if not 0 < width < NS_PER_S:
                raise ValueError(f"1PPS {name} {width} ns: must be between 0 and 1 s")


@dataclass(frozen=True)
class IrigConfig:
    expression: CodedExpression
    cable_delay_ns: int = 0
    sample_rate_hz: int | None = None  # AM (B12x) at this many samples/s; None: DC level shift (B00x)
    offset_of: OffsetOf = utc_offset  # the local time coded (IRIG time), and its offset field
    timezone: str = "UTC"  # the name of offset_of, for status

    def __post_init__(self) -> None:
        if self.sample_rate_hz is not None and not 8 * CARRIER_HZ <= self.sample_rate_hz <= 192_000:
            raise ValueError(f"IRIG-B AM sample rate {self.sample_rate_hz}/s: must be 8000 to 192000")

    @property
    def name(self) -> str:
        return f"B{'12' if self.sample_rate_hz else '00'}{self.expression.digit}"


@dataclass(frozen=True)
class AmBlock:
    """One frame of the AM output as samples on the output's sample grid."""

    first_index: int  # of the first sample on the grid (counted from the output's first sample)
    first_raw_ns: int  # when the first sample is due, on the local counter
    served_ns: int  # the frame's on-time point (the served second, before cable-delay compensation)
    rate_hz: int
    samples: bytes  # 16-bit little-endian mono
    first_tau_ns: float = 0.0  # the first sample's instant from the on-time point, on the served clock


class AmPlanner:
    """Keeps the AM output's sample grid on the counter (sample k at origin + k/rate) and fills each frame's samples.

    Frames follow each other on the same grid; a frame's first sample is the one after the previous frame's last,
    unless seconds were lost (then the grid skips ahead and the block's first_index says how far)."""

    def __init__(self, rate_hz: int):
        self.rate_hz = rate_hz
        self._origin_raw: int | None = None
        self._next = 0

    def raw_of(self, index: int) -> int:
        assert self._origin_raw is not None
        return self._origin_raw + index * NS_PER_S // self.rate_hz

    def _index_at(self, raw_ns: int) -> int:
        """The first grid index at or after ``raw_ns``."""
        assert self._origin_raw is not None
        k = max(0, -(-(raw_ns - self._origin_raw) * self.rate_hz // NS_PER_S))
        while k > 0 and self.raw_of(k - 1) >= raw_ns:
            k -= 1
        while self.raw_of(k) < raw_ns:
            k += 1
        return k

    def block(self, second_ns: int, frame: Sequence[int], cable_delay_ns: int,
              raw_at: Callable[[int], int]) -> AmBlock:
        r0 = raw_at(second_ns - cable_delay_ns)
        r1 = raw_at(second_ns + NS_PER_S - cable_delay_ns)
        if self._origin_raw is None:
            self._origin_raw, self._next = r0, 0
        first = self._next
        if self.raw_of(first) < r0 - ELEMENT_NS:  # a gap: seconds went by unplanned
            first = self._index_at(r0)
        end = max(first, self._index_at(r1))
        start_raw = self.raw_of(first)
        offsets = np.arange(end - first, dtype=np.float64) * (NS_PER_S / self.rate_hz)
        tau = (start_raw - r0 + offsets) * (NS_PER_S / (r1 - r0))
        self._next = end
        return AmBlock(first, start_raw, second_ns, self.rate_hz, am_frame_values(frame, tau).astype("<i2").tobytes(),
                       float(tau[0]) if len(tau) else 0.0)


@dataclass
class BlockRecording:
    """Keeps the most recent AM blocks: what a test looks at."""

    limit: int = 120
    blocks: deque[AmBlock] = field(default_factory=deque)

    def emit(self, block: AmBlock) -> None:
        self.blocks.append(block)
        while len(self.blocks) > self.limit:
            self.blocks.popleft()


@dataclass
class RecordingSink:
    """Keeps the planned edges (the most recent ``limit``): what a test or the console looks at."""

    limit: int = 100_000
    edges: deque[PlannedEdge] = field(default_factory=deque)

    def emit(self, edges: list[PlannedEdge]) -> None:
        self.edges.extend(edges)
        while len(self.edges) > self.limit:
            self.edges.popleft()


Sink = Callable[[list[PlannedEdge]], None]
IrigSink = Callable[[Any], None]  # list[PlannedEdge] (DC level shift) or AmBlock (AM)


def pps_edges(second_ns: int, synchronized: bool, cfg: PpsConfig, raw_at: Callable[[int], int]) -> list[PlannedEdge]:
    if not synchronized and cfg.policy == "squelch":
        return []
    width = cfg.flag_width_ns if not synchronized and cfg.policy == "flag" else cfg.width_ns
    lead = cfg.cable_delay_ns
    return [PlannedEdge(raw_at(second_ns - lead), 1, second_ns),
            PlannedEdge(raw_at(second_ns + width - lead), 0, second_ns + width)]


def irig_edges(second_ns: int, elements: list[int], cable_delay_ns: int,
               raw_at: Callable[[int], int]) -> list[PlannedEdge]:
    out = []
    for i, element in enumerate(elements):
        start = second_ns + i * ELEMENT_NS
        out.append(PlannedEdge(raw_at(start - cable_delay_ns), 1, start))
        out.append(PlannedEdge(raw_at(start + WIDTH_NS[element] - cable_delay_ns), 0, start + WIDTH_NS[element]))
    return out


@dataclass
class OutputCounters:
    seconds: int = 0
    squelched: int = 0
    lost: int = 0  # seconds that went by unplanned (the appliance stalled for longer than MAX_CATCH_UP_S)
    last_quality: int | None = None


class TimeOutputs:
    def __init__(self, pps: PpsConfig | None = None, pps_sink: Sink | None = None, irig: IrigConfig | None = None,
                 irig_sink: IrigSink | None = None):
        self.pps, self.pps_sink, self.irig, self.irig_sink = pps, pps_sink, irig, irig_sink
        self.pps_counters, self.irig_counters = OutputCounters(), OutputCounters()
        self._am = AmPlanner(irig.sample_rate_hz) if irig is not None and irig.sample_rate_hz else None
        self._planned_through: int | None = None  # the last second planned

    def on_second(self, served_now_ns: int, raw_at: Callable[[int], int], synchronized: bool,
                  error_bound_ns: int | None, table: LeapTable) -> None:
        """Plan every second from the one after the last planned up to the next one."""
        target = (served_now_ns // NS_PER_S + 1) * NS_PER_S
        first = target if self._planned_through is None else self._planned_through + NS_PER_S
        if first < target - MAX_CATCH_UP_S * NS_PER_S:
            lost = (target - MAX_CATCH_UP_S * NS_PER_S - first) // NS_PER_S
            self.pps_counters.lost += lost
            self.irig_counters.lost += lost
            first = target - MAX_CATCH_UP_S * NS_PER_S
        for second in range(first, target + 1, NS_PER_S):
            self._plan(second, raw_at, synchronized, error_bound_ns, table)
        self._planned_through = max(target, self._planned_through or target)

    def _plan(self, second: int, raw_at: Callable[[int], int], synchronized: bool, error_bound_ns: int | None,
              table: LeapTable) -> None:
        if self.pps is not None and self.pps_sink is not None:
            edges = pps_edges(second, synchronized, self.pps, raw_at)
            self.pps_counters.seconds += 1
            self.pps_counters.squelched += not edges
            self.pps_sink(edges)  # an empty plan too: a sink that runs by itself (a PHC's periodic output) stops
        if self.irig is not None and self.irig_sink is not None:
            quality = quality_from_bound(error_bound_ns)
            frame = encode(fields_for_second(second, table, quality, self.irig.offset_of), self.irig.expression)
            self.irig_counters.seconds += 1
            self.irig_counters.last_quality = quality
            if self._am is not None:
                self.irig_sink(self._am.block(second, frame, self.irig.cable_delay_ns, raw_at))
            else:
                self.irig_sink(irig_edges(second, frame, self.irig.cable_delay_ns, raw_at))

    def status(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.pps is not None:
            c = self.pps_counters
            out["pps"] = {"enabled": True, "policy": self.pps.policy, "width_ms": self.pps.width_ns / 1e6,
                          "cable_delay_ns": self.pps.cable_delay_ns, "seconds": c.seconds, "squelched": c.squelched,
                          "lost": c.lost}
        if self.irig is not None:
            c = self.irig_counters
            out["irig"] = {"enabled": True, "format": self.irig.name, "timezone": self.irig.timezone,
                           **({"sample_rate_hz": self.irig.sample_rate_hz} if self.irig.sample_rate_hz else {}),
                           "cable_delay_ns": self.irig.cable_delay_ns, "frames": c.seconds, "lost": c.lost,
                           "time_quality": c.last_quality}
        return out
