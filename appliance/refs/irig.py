"""An IRIG-B input as a time reference: decoded frames in, phase samples out.

Pure core.  The input edge (``edge/irig/input.py``) decodes a live AM or DC level shift signal (``refs/irig_in.py``)
and hands in each frame's on-time edge on the host clock with the time it marks; the served clock carried back to
that host instant, minus the time, is the sample.
"""

from __future__ import annotations

from appliance.refs.model import ClockView, Driver, PairedTime, host_sample


class IrigReference(Driver):
    def feed(self, item: object, clock: ClockView) -> list[object]:
        if not isinstance(item, PairedTime):
            raise self.refuse(item)
        return [host_sample(item, clock)]
