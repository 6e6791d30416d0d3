"""An upstream PTP grandmaster as a time reference: the slave port's measurements in, phase samples out.

Pure core.  The slaveOnly PTP port (``refs/ptp_slave.py``, run by ``edge/ptp/slave_service.py``) measures the served
clock against the grandmaster; each ``PtpMeasurement`` (protocol/ptp/measure.py) is a sample, usable while the
grandmaster says its time is traceable (clockClass 6 or 7, 13 or 14 for an ARB timescale).  A simulated upstream hands
in ``PairedTime``s on the local counter instead.
"""

from __future__ import annotations

from typing import Any

from appliance.refs.model import (
    ClockView,
    Driver,
    PairedTime,
    RefSample,
    RefSpec,
    RefUsable,
    counter_sample,
)

TRACEABLE_CLASSES = (6, 7, 13, 14)


class PtpReference(Driver):
    def __init__(self, spec: RefSpec):
        super().__init__(spec)
        self.measurements = 0

    def feed(self, item: object, clock: ClockView) -> list[object]:
        if isinstance(item, PairedTime):
            return [counter_sample(item, clock)]
        m: Any = item  # a measure.PtpMeasurement
        self.measurements += 1
        usable = m.clock_class in TRACEABLE_CLASSES
        why = f"upstream grandmaster {m.gm_identity} clockClass {m.clock_class}: not traceable"
        return [RefUsable(self.spec.name, usable, why, clock.raw_ns),
                RefSample(self.spec.name, clock.raw_ns, float(m.offset_ns), self.spec.accuracy_ns)]
