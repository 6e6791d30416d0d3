"""Run the PTP slave port on the appliance's event loop: an upstream grandmaster as a time reference.

I/O edge.  The PTP port configured slaveOnly (refs/ptp_slave.py) decides; a ``PortRunner`` (runner.py) runs it, as
it runs the grandmaster port: the transport, its readers, one timer at the port's next due time, a transport that
cannot open (no such interface, port in use, no permission, hardware timestamps asked for and not offered) left
FAULTY with the reason in ``status()`` and tried again every ``runner.FAULT_RETRY_S`` seconds.  The port's clock is
the appliance's local time axis, ``local_of_host(host_ns)``: the kernel's software timestamps are host time already;
the NIC's hardware timestamps (``timestamping`` "hardware", or "auto" and offered) count its PHC, which the runner
reads against the host clock every ``PHC_SAMPLE_S``.  Every ``PtpMeasurement`` goes to ``on_measurement``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from appliance.edge.ptp.runner import PortRunner, PortSpec
from appliance.edge.ptp.transport import clock_identity
from appliance.protocol.ptp.port import Action, PtpPort
from appliance.refs.ptp_slave import PtpMeasurement, SlaveConfig, slave_port

log = logging.getLogger("appliance.ptp.slave")
PHC_SAMPLE_S = 1.0  # how often the NIC's PHC is read against the host clock (hardware timestamps)


def _spec(config: SlaveConfig, iface: str, timestamping: str) -> PortSpec:
    return PortSpec(iface, config.transport, config.l2_destination, config.delay_mechanism == "p2p", timestamping,
                    setting="references.ptp_timestamping", title="PTP slave port", not_up="not listening",
                    event="ptp-slave", summary=f"{config.transport}, {config.delay_mechanism}, domain {config.domain}",
                    phc_sample_s=PHC_SAMPLE_S)


class PtpSlaveService:
    """``start()`` on a running loop, ``stop()``, ``status()``.  ``port_number`` tells this port apart from a
    grandmaster port of the same clock identity (the same interface's MAC)."""

    def __init__(self, config: SlaveConfig, iface: str, local_of_host: Callable[[int], int],
                 on_measurement: Callable[[PtpMeasurement], None],
                 on_event: Callable[[str, str], None] | None = None, rng: random.Random | None = None,
                 port_number: int = 1, timestamping: str = "auto"):
        self.config, self.iface = config, iface
        self.local_of_host, self.on_measurement = local_of_host, on_measurement
        self.on_event = on_event or (lambda kind, text: None)
        self.rng, self.port_number = rng, port_number
        self.port: PtpPort | None = None
        self.runner = PortRunner(_spec(config, iface, timestamping), self, log,
                                 lambda kind, text: self.on_event(kind, text))

    def start(self) -> None:
        self.runner.start()

    def stop(self) -> None:
        self.runner.stop()

    def set_tai_utc_s(self, tai_utc_s: int | None) -> None:
        """TAI - UTC from the leap table, for an ARB master that does not mark its currentUtcOffset valid."""
        if self.port is not None:
            self.port.set_tai_utc_s(tai_utc_s)
        self.config = replace(self.config, tai_utc_s=tai_utc_s)

    def local_ns(self, ts_ns: int) -> int:
        """A transport timestamp on the local time axis: host (software) or PHC (hardware) time in."""
        return self.runner.port_ns(ts_ns)

    def status(self) -> dict[str, Any]:
        idle = {"transport": self.config.transport, "delay_mechanism": self.config.delay_mechanism,
                "domain": self.config.domain}
        return self.runner.status(idle)

    # --- the runner's owner (runner.PortOwner) ---------------------------------------------------------------------
    def attach(self, transport: Any, now_ns: int) -> PtpPort:
        if self.port is None:
            self.port = slave_port(self.config, clock_identity(transport.mac), now_ns, self.rng, self.port_number,
                                   transport.address_key)
        return self.port

    def of_host(self, host_ns: int) -> int:
        """The port's clock is the appliance's local time axis."""
        return self.local_of_host(host_ns)

    def handle(self, actions: list[Action]) -> None:
        """Each measurement to ``on_measurement``."""
        for a in actions:
            if isinstance(a, PtpMeasurement):
                try:
                    self.on_measurement(a)
                except Exception:  # a consumer's bug must not stop the port
                    log.exception("PTP slave: on_measurement failed")
