"""An external 1PPS input as a time reference: each edge marks a whole second, named from another reference.

Pure core.  A 1PPS edge says *when* a second begins, not *which* second: the served clock (already steered by a
reference that knows the time of day: GNSS, PTP, NTP, IRIG-B) names it.  The edge marks the whole second nearest the
served clock's time at the edge, provided the served clock is within ``max_offset_ns`` of it; further off, the time of
day is not known well enough to name the second and the edge is rejected (the clock is off by nearly half a second,
or the pulse is not on the second at all).  TAI and UTC seconds begin together (their difference is whole seconds),
so the nearest TAI second is the nearest UTC second.

``cable_delay_ns``: the pulse left its source that long before the input timestamped it; the on-time point on the
counter is the edge's instant minus the delay.  A second edge naming a second already paired (a glitch, a bounce) is
rejected, as is an edge arriving out of order.
"""

from __future__ import annotations

from typing import Any

from appliance.refs.model import PairedTime
from appliance.units import NS_PER_S

DEFAULT_MAX_OFFSET_NS = 400_000_000
DEFAULT_UNCERTAINTY_NS = 1_000.0  # a hardware-timestamped edge (PPS device, PHC extts); a GPIO edge is worse
REJECT_REASONS = ("no_time", "time_unknown", "duplicate", "out_of_order")


class ExternalPps:
    def __init__(self, name: str, max_offset_ns: int = DEFAULT_MAX_OFFSET_NS, cable_delay_ns: int = 0,
                 uncertainty_ns: float = DEFAULT_UNCERTAINTY_NS):
        if not 0 < max_offset_ns < NS_PER_S // 2:
            raise ValueError(f"max_offset_ns {max_offset_ns}: must be above 0 and below half a second (500000000), "
                             "or the nearest second is ambiguous")
        self.name, self.max_offset_ns, self.cable_delay_ns = name, max_offset_ns, cable_delay_ns
        self.uncertainty_ns = uncertainty_ns
        self.edges = 0
        self.paired = 0
        self.rejects = dict.fromkeys(REJECT_REASONS, 0)
        self._last_raw_ns: int | None = None
        self._last_second_ns: int | None = None
        self._last: PairedTime | None = None
        self.last_offset_ns: int | None = None  # served minus the second, at the last edge (paired or not)

    def on_edge(self, raw_ns: int, served_ns_at_edge: int | None) -> PairedTime | None:
        """An edge at ``raw_ns`` on the counter; ``served_ns_at_edge``: the served clock (TAI ns) at that instant, or
        None when the clock does not know the time yet."""
        self.edges += 1
        if self._last_raw_ns is not None and raw_ns <= self._last_raw_ns:
            self.rejects["out_of_order"] += 1
            return None
        self._last_raw_ns = raw_ns
        if served_ns_at_edge is None:
            self.rejects["no_time"] += 1
            return None
        on_time_served_ns = served_ns_at_edge - self.cable_delay_ns
        second_ns = (on_time_served_ns + NS_PER_S // 2) // NS_PER_S * NS_PER_S
        self.last_offset_ns = on_time_served_ns - second_ns
        if abs(self.last_offset_ns) > self.max_offset_ns:
            self.rejects["time_unknown"] += 1
            return None
        if self._last_second_ns is not None and second_ns <= self._last_second_ns:
            self.rejects["duplicate"] += 1
            return None
        self._last_second_ns = second_ns
        self.paired += 1
        self._last = PairedTime(self.name, raw_ns - self.cable_delay_ns, second_ns, self.uncertainty_ns)
        return self._last

    def snapshot(self) -> dict[str, Any]:
        last = self._last
        return {"name": self.name, "edges": self.edges, "paired": self.paired, "rejects": dict(self.rejects),
                "max_offset_ns": self.max_offset_ns, "cable_delay_ns": self.cable_delay_ns,
                "last_offset_ns": self.last_offset_ns,
                "last": None if last is None else {"tai_ns": last.tai_ns, "edge_raw_ns": last.edge_raw_ns}}
