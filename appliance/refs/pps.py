"""An external 1PPS input as a time reference: edges in, phase samples out.

Pure core.  Each edge, stamped on the host clock by the PPS device's reader, marks the whole second the served clock
is nearest to (``refs/pps_in.py`` says when it can tell); the served clock carried back to the edge, minus that
second, is the sample.  Until the served clock knows the second (it is past FREERUN) edges are counted, not used.
"""

from __future__ import annotations

from typing import Any

from appliance.events import PpsEdge
from appliance.refs.model import ClockView, Driver, RefSpec, host_sample
from appliance.refs.pps_in import ExternalPps


class PpsReference(Driver):
    def __init__(self, spec: RefSpec, pps: ExternalPps):
        super().__init__(spec)
        self.pps = pps

    def feed(self, item: object, clock: ClockView) -> list[object]:
        if not isinstance(item, PpsEdge):
            raise self.refuse(item)
        served = clock.served_at_past_host(item.raw_ns) if clock.knows_time else None
        paired = self.pps.on_edge(item.raw_ns, served)
        return [] if paired is None else [host_sample(paired, clock)]

    def status(self) -> dict[str, Any]:
        return self.pps.snapshot()
