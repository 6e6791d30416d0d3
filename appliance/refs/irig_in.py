"""IRIG-B as a time reference: a streaming decoder for a live DC level shift or AM input.

Pure core: every instant is an argument (the local counter's ``raw_ns`` of an edge, or of a chunk's first sample),
nothing here reads a clock or a device.  Two feeds, state kept across calls so a pulse or a frame may straddle them:

- ``feed_edges``: DC level shift (B00x) as (raw_ns, level) edges, e.g. a GPIO line's timestamped edge events.
- ``feed_samples``: AM (B12x) as chunks of signed 16-bit samples, the first one's instant given, at a nominal rate.
  Carrier cycles run from one positive-going zero crossing to the next; a cycle is at the mark amplitude when its peak
  is above the half-way point between the two levels of the last ~200 cycles (robust percentiles, so one glitch does
  not move it); a run of mark cycles is a pulse, its length an element.

Both become (leading edge, width) pulses.  A frame begins at a reference marker Pr: a position identifier 10 ms after
another (P0).  Its 100 elements must each sit on their own 10 ms slot (within 1 ms), the position identifiers where
IRIG 200-16 puts them, and the BCD, parity and straight binary seconds must agree (``timecode.decode``).  The frame's
on-time point is Pr's leading edge, as the appliance's renderer places it (``waveform.dcls_edges``: Pr's rising edge;
``am_samples``: the positive-going zero crossing that starts Pr).  For AM it is refined by a least-squares line through
the frame's carrier zero crossings (the carrier is phase-coherent with the frame), leaving out those next to an
amplitude change, whose interpolation is biased: far better than one crossing, and blind to a sound card's rate error.

A frame is emitted as a ``PairedTime`` only when the frame before it, one second earlier on the counter, was valid
and coded exactly one second less (TAI, so a leap second in between is a second like any other).  Frames coded with
IEEE 1344 time quality 15 (fault) are never emitted.  Rejects are counted by reason, never raised.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from appliance import leap
from appliance.leap import LeapTable
from appliance.protocol.irig.timecode import (
    ELEMENT_NS,
    ELEMENTS,
    MARK,
    MARKS,
    QUALITY_FAULT,
    WIDTH_NS,
    CodedExpression,
    IrigFields,
    decode,
    tai_of,
)
from appliance.protocol.irig.waveform import CARRIER_HZ, elements_from_pulses
from appliance.refs.model import PairedTime
from appliance.units import NS_PER_S

SLOT_TOLERANCE_NS = ELEMENT_NS // 10  # as waveform.frames_from_elements: an element more than 1 ms off is not on it
MIN_RATE_HZ, MAX_RATE_HZ = 8 * CARRIER_HZ, 192_000
REJECT_REASONS = ("noise", "bad_marker", "bad_bcd", "inconsistent", "quality_fault")
DCLS_UNCERTAINTY_NS = 10_000.0  # a GPIO edge event's kernel timestamp: interrupt latency, tens of µs at worst
AM_UNCERTAINTY_NS = 5_000_000.0  # a sound card's samples anchored to host time on arrival (see irig_in_edge)
_MAX_PULSES = 4 * ELEMENTS  # pulses kept: a frame and a half, with room for noise; a flood of glitches is cut
_WINDOW_CYCLES = 200  # carrier cycles whose peaks set the mark/space threshold: 20 elements
_MIN_FIT_CROSSINGS = 10


def quality_bound_ns(quality: int) -> float:
    """The error bound an IEEE 1344 time-quality code states: 0 locked, c in 1..11 within 10^(c-10) s."""
    return 0.0 if quality <= 0 else float(10 ** (quality - 1))


@dataclass(frozen=True)
class _Frame:
    on_time_ns: int  # Pr's leading edge as the pulses place it
    tai_ns: int


class _AmDemod:
    """Carrier cycles of an AM signal into mark pulses.  Samples are indexed from the stream's first; sample n is at
    ``origin_raw_ns + n / rate``; positions between samples (zero crossings) are float sample indices."""

    def __init__(self, rate_hz: int, origin_raw_ns: int):
        self.rate_hz, self.origin_raw_ns = rate_hz, origin_raw_ns
        self.next_index = 0  # of the next sample expected
        self._tail = np.zeros(0, dtype=np.int32)  # the samples from _tail_start on, still needed
        self._tail_start = 0
        self._last_crossing: float | None = None
        self._peaks: deque[int] = deque(maxlen=_WINDOW_CYCLES)
        self.levels: tuple[float, float] | None = None  # (space, mark) peak amplitude
        self._run_start: float | None = None
        self._run_end = 0.0
        self._unread: list[tuple[float, float, int, bool]] = []  # cycles waiting for the amplitude levels
        self._armed = False  # the signal went below -h since the last crossing
        self._loudest = 0
        self.crossings: deque[tuple[float, bool]] = deque(maxlen=3 * CARRIER_HZ)  # (position, mark cycle follows)
        self.carrier_losses = 0

    def raw_of(self, position: float) -> int:
        whole = math.floor(position)
        q, r = divmod(whole * NS_PER_S, self.rate_hz)
        return self.origin_raw_ns + q + round((r + (position - whole) * NS_PER_S) / self.rate_hz)

    def position_of(self, raw_ns: int) -> float:
        return (raw_ns - self.origin_raw_ns) * self.rate_hz / NS_PER_S

    def feed(self, chunk: npt.NDArray[np.int32]) -> list[tuple[int, int]]:
        """The chunk's samples (the next ones of the stream) -> mark pulses completed: (leading edge, width) ns."""
        start = self.next_index
        self.next_index += len(chunk)
        buf = np.concatenate((self._tail, chunk)) if len(self._tail) else chunk
        base = self._tail_start if len(self._tail) else start
        first_new = start - base  # the pairs (n-1, n) with n >= first_new have not been looked at
        lo = max(first_new, 1)
        a, b = buf[lo - 1:-1], buf[lo:]
        hits = self._schmitt(buf, lo, np.nonzero((a < 0) & (b >= 0))[0] + lo)
        pulses: list[tuple[int, int]] = []
        if len(hits):
            prev, here = buf[hits - 1].astype(np.float64), buf[hits].astype(np.float64)
            positions = (base + hits - 1 + (-prev / (here - prev))).tolist()
            pulses = self._cycles(buf, base, positions)
        keep_from = base + len(buf) - 1 if self._last_crossing is None else min(math.floor(self._last_crossing),
                                                                             base + len(buf) - 1)
        if base + len(buf) - keep_from > self.rate_hz // 100:  # 10 ms without a crossing: no carrier
            self._lose_carrier()
            keep_from = base + len(buf) - 1
        self._tail, self._tail_start = buf[keep_from - base:].copy(), keep_from
        return pulses

    def _schmitt(self, buf: npt.NDArray[np.int32], lo: int, hits: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
        """The crossings that follow a dip below -h since the last one: noise near zero does not cross twice.  h is
        half the space amplitude once the levels are known, a twentieth of the largest sample seen until then."""
        self._loudest = max(self._loudest, int(np.abs(buf[lo - 1:]).max()) if len(buf) >= lo else 0)
        h = 0.5 * self.levels[0] if self.levels is not None else 0.05 * self._loudest
        below = np.nonzero(buf[lo - 1:] < -h)[0] + lo - 1
        kept, armed, last = [], self._armed, lo - 1
        for n in hits.tolist():
            if not armed:
                k = int(np.searchsorted(below, last))
                armed = k < len(below) and below[k] <= n - 1
            if armed:
                kept.append(n)
                armed, last = False, n
        k = int(np.searchsorted(below, last))
        self._armed = armed or k < len(below)
        return np.array(kept, dtype=np.intp)

    def _lose_carrier(self) -> None:
        self.carrier_losses += self._last_crossing is not None
        self._last_crossing, self._run_start, self._unread = None, None, []

    def _cycles(self, buf: npt.NDArray[np.int32], base: int, positions: list[float]) -> list[tuple[int, int]]:
        nominal = self.rate_hz / CARRIER_HZ
        cycles = self._unread
        c0 = self._last_crossing
        for c1 in positions:
            if c0 is not None:
                segment = buf[math.floor(c0) + 1 - base:math.floor(c1) + 1 - base]
                peak = int(np.abs(segment).max()) if len(segment) else 0
                cycles.append((c0, c1, peak, 0.7 * nominal <= c1 - c0 <= 1.3 * nominal))
                if cycles[-1][3]:
                    self._peaks.append(peak)
            c0 = c1
        self._last_crossing = c0
        threshold = self._threshold()
        if threshold is None and len(cycles) < _WINDOW_CYCLES:
            return []  # levels not known yet: the cycles wait for them (a stream's first P0 and Pr among them)
        self._unread = []
        pulses = []
        for c0, c1, peak, regular in cycles:
            mark = regular and threshold is not None and peak >= threshold
            self.crossings.append((c0, mark))
            if mark:
                if self._run_start is None:
                    self._run_start = c0
                self._run_end = c1
            elif self._run_start is not None:
                t0 = self.raw_of(self._run_start)
                pulses.append((t0, self.raw_of(self._run_end) - t0))
                self._run_start = None
        return pulses

    def _threshold(self) -> float | None:
        if len(self._peaks) < 2 * 10:  # two elements: each has at least two cycles at either level
            return None
        low, high = np.percentile(np.fromiter(self._peaks, dtype=np.float64), (10, 90))
        if high < 1.5 * max(low, 1.0):  # no modulation (200-16 allows 3:1 to 6:1)
            self.levels = None
            return None
        self.levels = (float(low), float(high))
        return float(low + high) / 2

    def refine(self, on_time_ns: int) -> tuple[int, float] | None:
        """Pr's zero crossing from a line through the frame's clean crossings (elements 0-98): (raw ns, standard
        error ns), or None when too few are at hand."""
        period = self.rate_hz / CARRIER_HZ
        c_first = self.position_of(on_time_ns)
        marks = list(self.crossings)
        ks, cs = [], []
        for (c, mark), (_, mark_before) in zip(marks[1:], marks):
            k = round((c - c_first) / period)
            if 0 <= k < (ELEMENTS - 1) * 10 and mark == mark_before and abs(c - c_first - k * period) < period / 4:
                ks.append(k)
                cs.append(c)
        if len(ks) < _MIN_FIT_CROSSINGS:
            return None
        k_arr, c_arr = np.array(ks, dtype=np.float64), np.array(cs, dtype=np.float64) - c_first
        k_mean = k_arr.mean()
        sxx = float(((k_arr - k_mean) ** 2).sum())
        if sxx <= 0:
            return None
        slope = float(((k_arr - k_mean) * (c_arr - c_arr.mean())).sum()) / sxx
        intercept = float(c_arr.mean()) - slope * k_mean
        residual = c_arr - (intercept + slope * k_arr)
        sigma = math.sqrt(float((residual ** 2).sum()) / max(len(ks) - 2, 1))
        stderr = sigma * math.sqrt(1 / len(ks) + k_mean ** 2 / sxx)
        if abs(intercept) > period / 4:
            return None
        return self.raw_of(c_first + intercept), stderr * NS_PER_S / self.rate_hz

    def snapshot(self) -> dict[str, Any]:
        return {"rate_hz": self.rate_hz, "samples": self.next_index, "carrier_losses": self.carrier_losses,
                "levels": None if self.levels is None else [round(v) for v in self.levels]}


class IrigDecoder:
    """A live IRIG-B input: pulses in, confirmed ``PairedTime`` out.

    ``expression``: the coded expression the source sends (the last digit of B00x/B12x); ``year_hint``: this year,
    for expressions without a coded year (then the year turns over when the day of year does) and for the century of
    a two-digit year.  ``uncertainty_ns``: how well the feed's instants sit on the local counter (edge timestamping,
    or the AM stream's anchor; by default ``DCLS_UNCERTAINTY_NS`` or ``AM_UNCERTAINTY_NS`` by the feed in use); the
    AM fit's standard error and the source's own IEEE 1344 time quality, when coded, are added to it.  ``delay_ns``:
    the cable and receiver delay, taken off every on-time point.  Without control functions the code is read as UTC.
    """

    def __init__(self, name: str, expression: CodedExpression, table: LeapTable, year_hint: int,
                 uncertainty_ns: float | None = None, delay_ns: int = 0):
        self.name, self.expression, self.table = name, expression, table
        self.uncertainty_ns, self.delay_ns = uncertainty_ns, delay_ns
        self._year = year_hint
        self._confirmed: _Frame | None = None  # the last frame emitted: what later frames' years are chosen by
        self._pulses: deque[tuple[int, int | None]] = deque()  # (leading edge ns, element or None)
        self._candidates: deque[int] = deque()  # leading edges of reference markers whose frame is not in yet
        self._rise: int | None = None
        self._last_end_ns = 0  # of the last pulse
        self._last_edge_ns: int | None = None
        self._am: _AmDemod | None = None
        self._previous: _Frame | None = None
        self._last_fields: IrigFields | None = None
        self._last: PairedTime | None = None
        self.frames = 0  # valid frames decoded
        self.emitted = 0
        self.rejects = dict.fromkeys(REJECT_REASONS, 0)
        self.noise_pulses = 0  # pulses of a width no element has, or out of order
        self.bad_input = 0  # malformed edges or chunks
        self.restarts = 0  # AM streams begun again (a gap in the samples, a new rate)

    # --- feeds ----------------------------------------------------------------------------------------------------
    def feed_edges(self, edges: Iterable[tuple[int, int]]) -> list[PairedTime]:
        """DC level shift edges, oldest first: (raw_ns, level after the edge: 1 rising, 0 falling)."""
        out: list[PairedTime] = []
        for edge in edges:
            try:
                raw_ns, level = int(edge[0]), bool(edge[1])
            except (TypeError, ValueError, IndexError, OverflowError):  # OverflowError: an infinite float time
                self.bad_input += 1
                continue
            if self._last_edge_ns is not None and raw_ns < self._last_edge_ns:
                self.noise_pulses += 1  # time ran backwards: drop what was in progress
                self._rise = None
                self._forget()
            self._last_edge_ns = raw_ns
            if level:
                if self._rise is not None:
                    self.noise_pulses += 1  # a falling edge went missing
                self._rise = raw_ns
            elif self._rise is not None:
                out += self._pulse(self._rise, raw_ns - self._rise)
                self._rise = None
        return out

    def feed_samples(self, samples: Sequence[int] | npt.NDArray[Any], first_sample_raw_ns: int,
                     rate_hz: int) -> list[PairedTime]:
        """AM: the next chunk of 16-bit samples, its first sample at ``first_sample_raw_ns`` on the counter.  A chunk
        more than a sample off where the stream's nominal rate puts it, or at another rate, starts the stream again."""
        try:
            chunk = np.clip(np.asarray(samples, dtype=np.int64).reshape(-1), -32768, 32767).astype(np.int32)
            first_ns, rate = int(first_sample_raw_ns), int(rate_hz)
        except (TypeError, ValueError, OverflowError):
            self.bad_input += 1
            return []
        if not MIN_RATE_HZ <= rate <= MAX_RATE_HZ:
            self.bad_input += 1
            return []
        if not len(chunk):
            return []
        am = self._am
        if am is None or am.rate_hz != rate or abs(first_ns - am.raw_of(am.next_index)) > NS_PER_S // rate:
            if am is not None:
                self.restarts += 1
                self._forget()  # the new stream's instants have nothing to do with the old one's
            am = self._am = _AmDemod(rate, first_ns)
        out: list[PairedTime] = []
        for t_ns, width_ns in am.feed(chunk):
            out += self._pulse(t_ns, width_ns)
        return out

    def new_stream(self) -> None:
        """What follows is another stream (a new writer, a re-opened file): start over, keeping the counts."""
        self._am, self._rise, self._last_edge_ns = None, None, None
        self._forget()

    # --- frames ---------------------------------------------------------------------------------------------------
    def _forget(self) -> None:
        """Drop the pulses and frames so far: what comes next is not on the same time line."""
        self._pulses.clear()
        self._candidates.clear()
        self._previous = None

    def _pulse(self, t_ns: int, width_ns: int) -> list[PairedTime]:
        (_, element), = elements_from_pulses([(t_ns, width_ns)])
        if element is None:
            self.noise_pulses += 1
        previous = self._pulses[-1] if self._pulses else None
        if previous is not None and t_ns <= previous[0]:
            self.noise_pulses += 1
            return []
        self._pulses.append((t_ns, element))
        previous_end_ns, self._last_end_ns = self._last_end_ns, t_ns + width_ns
        if element == MARK and previous is not None and previous[1] == MARK and (
                abs(t_ns - previous[0] - ELEMENT_NS) <= SLOT_TOLERANCE_NS  # P0 then Pr: a frame starts (200-16 §3.1)
                or abs(t_ns - previous_end_ns - (ELEMENT_NS - WIDTH_NS[MARK])) <= SLOT_TOLERANCE_NS):  # P0 cut short
            self._candidates.append(t_ns)
        out = []
        while self._candidates and t_ns >= self._candidates[0] + (ELEMENTS - 1) * ELEMENT_NS - SLOT_TOLERANCE_NS:
            paired = self._frame(self._candidates.popleft())
            if paired is not None:
                out.append(paired)
        horizon = (self._candidates[0] if self._candidates else t_ns) - 2 * ELEMENT_NS
        while self._pulses and (self._pulses[0][0] < horizon or len(self._pulses) > _MAX_PULSES):
            self._pulses.popleft()
        return out

    def _elements(self, t0: int) -> list[int] | None:
        """The frame's 100 elements from the pulses on its slots; None unless every slot holds one readable pulse."""
        slots: list[int | None] = [None] * ELEMENTS
        filled = [False] * ELEMENTS
        for t, element in self._pulses:
            if t < t0 - SLOT_TOLERANCE_NS:
                continue
            if t > t0 + (ELEMENTS - 1) * ELEMENT_NS + SLOT_TOLERANCE_NS:
                break
            k = (t - t0 + SLOT_TOLERANCE_NS) // ELEMENT_NS
            if abs(t - t0 - k * ELEMENT_NS) > SLOT_TOLERANCE_NS or filled[k] or element is None:
                return None  # a stray pulse, two in one slot, or one of no element's width
            slots[k], filled[k] = element, True
        if not all(filled):
            return None
        return [e for e in slots if e is not None]

    def _frame(self, t0: int) -> PairedTime | None:
        elements = self._elements(t0)
        if elements is None:
            self.rejects["noise"] += 1
            return None
        if any((i in MARKS) != (e == MARK) for i, e in enumerate(elements)):
            self.rejects["bad_marker"] += 1
            return None
        try:
            fields, tai_ns = self._dated(decode(elements, self.expression, self._year), t0)
        except ValueError:  # IrigDecodeError: BCD, range, parity, SBS; or a day or :60 the calendar does not have
            self.rejects["bad_bcd"] += 1
            return None
        self.frames += 1
        self._last_fields = fields
        previous, self._previous = self._previous, _Frame(t0, tai_ns)
        if previous is None or abs(t0 - previous.on_time_ns - NS_PER_S) > SLOT_TOLERANCE_NS:
            return None  # the first of a run: nothing to confirm it yet
        if tai_ns - previous.tai_ns != NS_PER_S:
            self.rejects["inconsistent"] += 1
            return None
        if self.expression.has_cf and fields.quality == QUALITY_FAULT:
            self.rejects["quality_fault"] += 1
            return None
        return self._emit(t0, tai_ns, fields)

    def _dated(self, fields: IrigFields, t0: int) -> tuple[IrigFields, int]:
        """The frame's fields with the year the code leaves open, and its TAI instant.  The open part is the century
        of a two-digit year, or the year itself; of the three candidates, the one whose distance from the last frame
        emitted matches the counter's (so a new year, or a century, is passed even across a gap in the signal).
        Before any was emitted: the one a second after the frame just before, else the one nearest the year we are
        in.  Only emitted frames move the year: a stray frame cannot shift the year of those after it.  ValueError
        when no candidate is a real instant."""
        base, step = (fields.year, 100) if self.expression.has_year else (self._year, 1)
        options = []
        for year in (base - step, base, base + step):
            candidate = dataclasses.replace(fields, year=year)
            try:
                options.append((candidate, tai_of(candidate, self.table)))
            except ValueError:  # day 366 of a common year, a :60 no leap second took
                continue
        if not options:
            return fields, tai_of(fields, self.table)  # raises: the reason, for nobody but a debugger
        confirmed, previous = self._confirmed, self._previous
        if confirmed is not None:
            return min(options, key=lambda o: abs(o[1] - confirmed.tai_ns - (t0 - confirmed.on_time_ns)))
        if previous is not None and abs(t0 - previous.on_time_ns - NS_PER_S) <= SLOT_TOLERANCE_NS:
            following = [o for o in options if o[1] - previous.tai_ns == NS_PER_S]
            if following:  # the second after the frame before: a new year as the decoder starts
                return following[0]
        return min(options, key=lambda o: abs(o[0].year - self._year))

    def _emit(self, t0: int, tai_ns: int, fields: IrigFields) -> PairedTime:
        on_time_ns, fit_ns = t0, 0.0
        if self._am is not None:
            refined = self._am.refine(t0)
            if refined is not None:
                on_time_ns, fit_ns = refined
        source_ns = quality_bound_ns(fields.quality) if self.expression.has_cf else 0.0
        base_ns = self.uncertainty_ns
        if base_ns is None:
            base_ns = AM_UNCERTAINTY_NS if self._am is not None else DCLS_UNCERTAINTY_NS
        paired = PairedTime(self.name, on_time_ns - self.delay_ns, tai_ns, base_ns + fit_ns + source_ns)
        self.emitted += 1
        self._year, self._confirmed = fields.year, _Frame(t0, tai_ns)
        self._last = paired
        return paired

    # --- status ---------------------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        f, last = self._last_fields, self._last
        return {
            "name": self.name, "expression": self.expression.digit, "frames": self.frames, "emitted": self.emitted,
            "rejects": dict(self.rejects), "noise_pulses": self.noise_pulses, "bad_input": self.bad_input,
            "restarts": self.restarts,
            "last": None if last is None else {
                "tai_ns": last.tai_ns, "edge_raw_ns": last.edge_raw_ns, "uncertainty_ns": last.uncertainty_ns,
                "utc": str(leap.tai_to_utc(last.tai_ns, self.table))},
            "last_fields": None if f is None else {
                "year": f.year, "day_of_year": f.day_of_year, "time": f"{f.hour:02d}:{f.minute:02d}:{f.second:02d}",
                "time_quality": f.quality if self.expression.has_cf else None,
                "leap_pending": f.leap_pending, "leap_deletion": f.leap_deletion, "dst_pending": f.dst_pending,
                "dst": f.dst, "offset_half_hours": f.offset_half_hours},
            "am": None if self._am is None else self._am.snapshot(),
        }
