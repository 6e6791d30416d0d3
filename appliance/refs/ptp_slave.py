"""The appliance as a PTP slave of an upstream grandmaster: the settings of the reference's port, and that port.

Pure core.  The port is the appliance's one PTP port engine (protocol/ptp/port.py), configured slaveOnly: it runs
Figure 31 of IEEE 1588-2019 (fsm.py), follows the best qualified master (9.3.4; slaveOnly: 9.3.3 S1), and its slave
role (slave.py, measure.py) yields one ``PtpMeasurement`` per Sync of that master once a path delay is known, which
the edge (edge/ptp/slave_service.py) hands to the selector through refs/ptp.py.  Its clock is the appliance's local
time axis (TAI ns), so a measurement's offset is local minus master.  It answers neither management nor unicast
negotiation, and sends no Announce or Sync; with the peer delay mechanism it answers Pdelay_Req.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.protocol.ptp.measure import PtpMeasurement
from appliance.protocol.ptp.port import PtpPort
from appliance.protocol.ptp.profiles import L2_FORWARDABLE, PortConfig

__all__ = ["PtpMeasurement", "SlaveConfig", "slave_port"]

# A slaveOnly clock's own data set: clockClass 255 (IEEE 1588-2019 7.6.2.5), nothing it could serve.
SLAVE_ONLY_VIEW = GrandmasterView(clock_class=255)


@dataclass(frozen=True)
class SlaveConfig:
    """What the slave port runs with.  ``tai_utc_s``: TAI - UTC in seconds to read an ARB master as UTC when its
    Announce does not vouch for its own currentUtcOffset (``PtpPort.set_tai_utc_s`` updates it)."""

    domain: int = 0
    transport: str = "udp4"  # udp4 | udp6 | l2
    delay_mechanism: str = "e2e"  # e2e | p2p
    log_min_delay_req_interval: int = 0  # until the master's Delay_Resp says otherwise (9.5.11.2)
    log_min_pdelay_req_interval: int = 0
    announce_receipt_timeout: int = 3
    arb_timescale: str = "utc"  # utc | tai: how to read a master whose Announce has PTP_TIMESCALE clear
    tai_utc_s: int | None = None
    l2_destination: str = L2_FORWARDABLE

    def __post_init__(self) -> None:
        checks = {"domain": 0 <= self.domain <= 255, "transport": self.transport in ("udp4", "udp6", "l2"),
                  "delay_mechanism": self.delay_mechanism in ("e2e", "p2p"),
                  "log_min_delay_req_interval": -7 <= self.log_min_delay_req_interval <= 7,
                  "log_min_pdelay_req_interval": -7 <= self.log_min_pdelay_req_interval <= 7,
                  "announce_receipt_timeout": 2 <= self.announce_receipt_timeout <= 255,
                  "arb_timescale": self.arb_timescale in ("utc", "tai")}
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"PTP slave setting out of range: {', '.join(f'{n}={getattr(self, n)!r}' for n in bad)}")

    def port_config(self) -> PortConfig:
        """The port's configuration: slaveOnly, multicast, no management, no unicast negotiation."""
        return PortConfig(
            profile="slave-only", transport=self.transport, delay_mechanism=self.delay_mechanism, domain=self.domain,
            priority1=255, priority2=255, local_priority=128, log_announce_interval=1,
            announce_receipt_timeout=self.announce_receipt_timeout, log_sync_interval=0,
            log_min_delay_req_interval=self.log_min_delay_req_interval,
            log_min_pdelay_req_interval=self.log_min_pdelay_req_interval, dataset_comparison="ieee1588",
            management="off", management_set=(), l2_destination=self.l2_destination, multicast=True,
            unicast_negotiation=False, unicast_max_clients=0, unicast_duration_s=(60, 1000),
            unicast_log_announce_interval=(-3, 0), unicast_log_sync_interval=(-7, 0),
            unicast_log_delay_resp_interval=(-7, 0), c37238_tlv=False, grandmaster_id=0, master_only=False,
            slave_only=True, arb_timescale=self.arb_timescale, tai_utc_s=self.tai_utc_s)


def slave_port(config: SlaveConfig, clock_identity: bytes, now_ns: int, rng: random.Random | None = None,
               port_number: int = 1, address_key: Callable[[Any], Any] | None = None) -> PtpPort:
    """The reference's port, INITIALIZING until ``start``.  ``rng`` spreads its Delay_Req times (seeded from the
    clock identity if omitted); ``address_key``: the transport's (what a peer is rate-limited by)."""
    return PtpPort(config.port_config(), clock_identity, SLAVE_ONLY_VIEW, now_ns, port_number, address_key, rng=rng)
