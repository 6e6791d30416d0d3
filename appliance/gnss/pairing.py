"""Join each PPS edge to the receiver's label of its second: the edge gives the fraction, the label the second.

Pure core.  A receiver sends the time of a second *after* that second's pulse (NMEA 0183 and u-blox both do), so an
edge waits for the first label that arrives within ``label_max_age_ns`` after it.  Everything that cannot be paired
unambiguously is rejected with its reason rather than guessed:

* ``unlabelled``: no label followed the edge in time (the receiver is late or silent);
* ``stale-label``: a label arrived with no recent edge (the pulse is missing, or the label is late);
* ``ambiguous``: two edges are waiting for one label (a glitch on the PPS line), so neither can be named;
* ``invalid-label``: the receiver itself says the time of an edge's second is not valid (a label it disowns
  with no edge waiting is simply not used);
* ``label-not-advancing``: the label names a second at or before the last paired one.

The quantization error a timing receiver reports for the next pulse (u-blox TIM-TP qErr) rides along to the phase
detector with the edge it belongs to: the first edge stamped within a second after the report arrived, whichever of
the two reaches the pairer first.
"""

from __future__ import annotations

from collections import Counter

from appliance.events import PairedSecond, PpsEdge, Rejected, TimeLabel, TimePulseInfo
from appliance.units import NS_PER_S


class PpsPairer:
    def __init__(self, label_max_age_ns: int = 900_000_000, cable_delay_ns: int = 0):
        if not 0 < label_max_age_ns < NS_PER_S:
            raise ValueError("label_max_age_ns must be within one second or pairing becomes ambiguous")
        self.label_max_age_ns = label_max_age_ns
        self.cable_delay_ns = cable_delay_ns
        self._edges: list[PpsEdge] = []
        self._next_pulse: TimePulseInfo | None = None
        self._qerr_for_edge: dict[int, int] = {}
        self._last_label_s: int | None = None
        self.paired = 0
        self.rejected: Counter[str] = Counter()
        self.last: PairedSecond | None = None

    def on_edge(self, edge: PpsEdge) -> list[Rejected]:
        out = self._expire(edge.raw_ns)
        self._edges.append(edge)
        pulse = self._next_pulse
        if pulse is not None and edge.raw_ns - NS_PER_S < pulse.rx_raw_ns <= edge.raw_ns:
            self._qerr_for_edge[edge.sequence] = pulse.qerr_ps
            self._next_pulse = None
        elif pulse is not None and pulse.rx_raw_ns <= edge.raw_ns - NS_PER_S:
            self._next_pulse = None  # the pulse it described never came; it says nothing about this one
        # A report stamped after this edge (its thread got here first) describes the next pulse: keep it.
        return out

    def on_time_pulse(self, info: TimePulseInfo) -> None:
        """TIM-TP arrives between pulses and describes the next one."""
        self._next_pulse = info

    def on_label(self, label: TimeLabel) -> list[PairedSecond | Rejected]:
        out: list[PairedSecond | Rejected] = list(self._expire(label.rx_raw_ns))
        waiting = [e for e in self._edges if 0 <= label.rx_raw_ns - e.raw_ns <= self.label_max_age_ns]
        if not label.valid:
            # The receiver disowns this second: an edge it belongs to cannot be used, and without one there is
            # nothing to pair (a receiver without a fix usually stops its pulse too).
            self._edges = [e for e in self._edges if e not in waiting]
            return out + [self._reject("invalid-label", f"{label.utc_text} marked invalid by the receiver")
                          for _ in waiting]
        if not waiting:
            return out + [self._reject("stale-label", f"{label.utc_text}: no PPS edge in the last "
                                                      f"{self.label_max_age_ns // 1_000_000} ms")]
        self._edges = [e for e in self._edges if e not in waiting]
        if len(waiting) > 1:
            return out + [self._reject("ambiguous", f"{len(waiting)} edges before {label.utc_text}")]
        edge = waiting[0]
        qerr = self._qerr_for_edge.pop(edge.sequence, None)
        second_s = label.tai_ns // NS_PER_S
        if self._last_label_s is not None and second_s <= self._last_label_s:
            return out + [self._reject("label-not-advancing", f"{label.utc_text} after second {self._last_label_s}")]
        self._last_label_s = second_s
        paired = PairedSecond(edge.raw_ns - self.cable_delay_ns, second_s * NS_PER_S, qerr, edge.sequence)
        self.paired += 1
        self.last = paired
        return out + [paired]

    def _expire(self, now_raw_ns: int) -> list[Rejected]:
        stale = [e for e in self._edges if now_raw_ns - e.raw_ns > self.label_max_age_ns]
        if not stale:
            return []
        self._edges = [e for e in self._edges if e not in stale]
        for e in stale:
            self._qerr_for_edge.pop(e.sequence, None)
        return [self._reject("unlabelled", f"edge #{e.sequence} got no label within "
                                           f"{self.label_max_age_ns // 1_000_000} ms") for e in stale]

    def _reject(self, reason: str, detail: str) -> Rejected:
        self.rejected[reason] += 1
        return Rejected("pps", reason, detail)
