"""IRIG-B waveforms: DC level shift as an edge schedule, amplitude modulation on 1 kHz as samples; and back.

Pure core.  DC level shift (B00x, 200-16 §3.2): each element starts with a rising edge and falls after 2, 5 or 8 ms;
the reference marker's rising edge is the on-time point.  Amplitude modulation (B12x): a 1 kHz sine, ten cycles per
element, at the mark amplitude for the first 2, 5 or 8 cycles and at the space amplitude for the rest, mark to space
10:3 (200-16 allows 3:1 to 6:1); the on-time point is the positive-going zero crossing that starts the reference
marker, and every amplitude change falls on a zero crossing.

Decoding goes the other way with no knowledge of the sender: pulse widths from edges (DC level shift); for AM, carrier
cycles from positive-going zero crossings, each cycle's peak, marks and spaces from a threshold half-way between the
two amplitude levels found in the signal, then the same widths.  Both yield elements with the time of their leading
edge, and frames where the position identifiers line up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from appliance.protocol.irig.timecode import (ELEMENT_NS, ELEMENTS, MARK, ONE, WIDTH_NS, ZERO, CodedExpression,
                                             IrigDecodeError, IrigFields, decode, frame_starts)

CARRIER_HZ = 1000
MARK_TO_SPACE = (10, 3)
FULL_SCALE = 32_767
MARK_AMPLITUDE = 0.9  # of full scale


@dataclass(frozen=True)
class Edge:
    t_ns: int  # from the start of the signal
    level: int  # 1 after a rising edge, 0 after a falling one


@dataclass(frozen=True)
class DecodedFrame:
    on_time_ns: int  # the reference marker's leading edge, from the start of the signal
    fields: IrigFields
    elements: tuple[int, ...] = ()


def dcls_edges(frames: Sequence[Sequence[int]], start_ns: int = 0) -> list[Edge]:
    """The edges of consecutive frames, the first reference marker at ``start_ns``."""
    edges = []
    for k, frame in enumerate(frames):
        for i, element in enumerate(frame):
            t = start_ns + (k * ELEMENTS + i) * ELEMENT_NS
            edges.append(Edge(t, 1))
            edges.append(Edge(t + WIDTH_NS[element], 0))
    return edges


def am_samples(frames: Sequence[Sequence[int]], rate_hz: int, lead_in: bool = True) -> list[int]:
    """16-bit samples of consecutive frames at ``rate_hz``.  With ``lead_in`` the signal starts with the previous
    frame's P0 (one element, 10 ms), so the first reference marker follows a position identifier as every other does
    and its zero crossing has a sample before it; its on-time point is then at sample ``rate_hz // 100``."""
    if rate_hz < 8 * CARRIER_HZ:
        raise ValueError(f"AM IRIG-B needs at least {8 * CARRIER_HZ} samples/s for its 1 kHz carrier, not {rate_hz}")
    mark = MARK_AMPLITUDE * FULL_SCALE
    space = mark * MARK_TO_SPACE[1] / MARK_TO_SPACE[0]
    out = []
    if lead_in:
        for n in range(rate_hz // 100):
            cycle = n * CARRIER_HZ // rate_hz
            out.append(round((mark if cycle < 8 else space) * math.sin(2 * math.pi * CARRIER_HZ * n / rate_hz)))
    for frame in frames:
        for n in range(rate_hz):  # one second
            element = frame[n * ELEMENTS // rate_hz]
            cycle = n * CARRIER_HZ // rate_hz % 10  # which of the element's ten carrier cycles
            amplitude = mark if cycle < WIDTH_NS[element] // 1_000_000 else space
            out.append(round(amplitude * math.sin(2 * math.pi * CARRIER_HZ * n / rate_hz)))
    return out


def am_frame_values(frame: Sequence[int], tau_ns: npt.NDArray[np.float64]) -> npt.NDArray[np.int16]:
    """16-bit samples of one frame's AM signal at the instants ``tau_ns`` from its on-time point (0 <= tau < 1 s;
    instants outside are clamped into the frame).  The live output's sample instants are the counter's, mapped to the
    served clock, so they need not fall on a whole number of nanoseconds or on a regular grid of the frame."""
    tau = np.clip(tau_ns, 0.0, 1e9 - 1.0)
    mark = MARK_AMPLITUDE * FULL_SCALE
    space = mark * MARK_TO_SPACE[1] / MARK_TO_SPACE[0]
    marked_ms = np.array([WIDTH_NS[e] // 1_000_000 for e in frame], dtype=np.int64)  # carrier cycles at mark level
    ms = (tau // 1_000_000).astype(np.int64)  # which carrier cycle of the frame
    amplitude = np.where(ms % 10 < marked_ms[ms // 10], mark, space)
    return np.rint(amplitude * np.sin(2 * np.pi * (tau % 1_000_000) / 1e6)).astype(np.int16)


# --- decoding -------------------------------------------------------------------------------------------------------

def _classify(width_ns: int) -> int | None:
    if 1_000_000 <= width_ns < 3_500_000:
        return ZERO
    if 3_500_000 <= width_ns < 6_500_000:
        return ONE
    if 6_500_000 <= width_ns <= 9_500_000:
        return MARK
    return None


def elements_from_pulses(pulses: Iterable[tuple[int, int]]) -> list[tuple[int, int | None]]:
    """(leading edge ns, width ns) pulses -> (leading edge, element or None for a width no element has)."""
    return [(t, _classify(w)) for t, w in pulses]


def pulses_from_edges(edges: Iterable[Edge]) -> list[tuple[int, int]]:
    pulses, rise = [], None
    for e in sorted(edges, key=lambda e: e.t_ns):
        if e.level and rise is None:
            rise = e.t_ns
        elif not e.level and rise is not None:
            pulses.append((rise, e.t_ns - rise))
            rise = None
    return pulses


def pulses_from_samples(samples: Sequence[int], rate_hz: int) -> list[tuple[int, int]]:
    """Mark pulses of an AM signal: (time of the zero crossing that starts the mark, its length), in ns."""
    crossings = []  # interpolated positive-going zero crossings, in samples
    for n in range(1, len(samples)):
        a, b = samples[n - 1], samples[n]
        if a < 0 <= b or (n == 1 and a == 0 < b):
            crossings.append(n - 1 + (-a / (b - a) if b != a else 0.0))
    if len(crossings) < 3:
        raise IrigDecodeError("no 1 kHz carrier found")
    peaks = [max(abs(v) for v in samples[int(c0) + 1:int(c1) + 1]) for c0, c1 in zip(crossings, crossings[1:])]
    high, low = max(peaks), min(peaks)
    if high < 1.5 * max(low, 1):
        raise IrigDecodeError("no amplitude modulation found (mark and space amplitudes are alike)")
    threshold = (high + low) / 2
    diffs = sorted(c1 - c0 for c0, c1 in zip(crossings, crossings[1:]))
    period = diffs[len(diffs) // 2]  # samples per carrier cycle (the median is blind to a jump in phase)
    pulses, start = [], None
    for i, peak in enumerate(peaks):
        if peak >= threshold and start is None:
            start = i
        elif peak < threshold and start is not None:
            t0 = _fit_start(crossings[start:i + 1], period)
            pulses.append((round(t0 * 1e9 / rate_hz), round((i - start) * period * 1e9 / rate_hz)))
            start = None
    return pulses


def _fit_start(crossings: Sequence[float], period: float) -> float:
    """The first of a pulse's evenly spaced zero crossings, from the crossings inside it: the first and the last sit
    where the amplitude changes, so a line between a sample at one amplitude and a sample at the other crosses zero
    off the true crossing (by up to a fifth of a sample).  The mean of the inner ones, each moved back by its number of
    periods, averages the noise on any one of them over the pulse's cycles."""
    inner = crossings[1:-1]
    if not inner:
        return crossings[0]
    return sum(c - (j + 1) * period for j, c in enumerate(inner)) / len(inner)


def frames_from_elements(elements: Sequence[tuple[int, int | None]], expression: CodedExpression,
                         year_hint: int = 2000) -> tuple[list[DecodedFrame], list[str]]:
    """Frames found in a stream of (time, element); and a message for each frame that could not be read."""
    values = [MARK + 1 if e is None else e for _, e in elements]  # an unreadable width matches nothing
    frames, problems = [], []
    for i in frame_starts(values):
        t0 = elements[i][0]
        late = [k for k in range(ELEMENTS) if abs(elements[i + k][0] - t0 - k * ELEMENT_NS) > ELEMENT_NS // 10]
        if late:
            problems.append(f"frame at {t0} ns: element {late[0]} is off its 10 ms slot")
            continue
        try:
            frame = values[i:i + ELEMENTS]
            frames.append(DecodedFrame(t0, decode(frame, expression, year_hint), tuple(frame)))
        except IrigDecodeError as exc:
            problems.append(f"frame at {t0} ns: {exc}")
    return frames, problems
