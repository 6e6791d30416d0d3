"""NTP upstream servers as a time reference: their replies in, the consensus as phase samples out.

Pure core.  Every reply (an ``NtpSample`` from the poller, ``edge/ntp_poller.py``) enters the servers' clock
filters, selection and clustering (``refs/ntp_select.py``); each new consensus is one sample of the reference.  The
system peer's stratum and address are kept for what the appliance advertises while NTP drives its clock.  A
simulated upstream hands in ``PairedTime``s on the local counter instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from appliance.refs.model import ClockView, Driver, PairedTime, RefSpec, counter_sample
from appliance.refs.ntp_select import NtpUpstream


class NtpReference(Driver):
    def __init__(self, spec: RefSpec, min_survivors: int = 3):
        super().__init__(spec)
        self.upstream = NtpUpstream(spec.name, min_survivors=min_survivors)
        self._used_ns = 0

    def feed(self, item: object, clock: ClockView) -> list[object]:
        if isinstance(item, PairedTime):
            return [counter_sample(item, clock)]
        sample: Any = item  # an ntp_poller.NtpSample
        self.upstream.on_sample(sample)
        if sample.error:
            return []
        estimate = self.upstream.estimate(sample.host_ns)
        # Every answer gives the reference a sample: the consensus may rest on an older (shorter-delay) exchange the
        # clock filter keeps choosing, which is what it is for.
        if estimate is None or sample.host_ns <= self._used_ns:
            return []
        self._used_ns = sample.host_ns
        self.upstream_stratum, self.upstream_peer = estimate.stratum, estimate.system_peer
        return [estimate.ref_sample(clock.raw_ns)]

    def status(self) -> dict[str, Any]:
        return {"servers": [dataclasses.asdict(r) for r in self.upstream.servers()],
                "verdict": self.upstream.last_verdict}
