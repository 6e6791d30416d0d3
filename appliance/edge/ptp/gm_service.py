"""Serve PTP as the grandmaster: the port engine on the appliance's event loop, its timestamps on the served clock.

I/O edge.  The PTP port (protocol/ptp/port.py) decides; a ``PortRunner`` (runner.py) runs it: the transport, its
readers, one timer at the port's next due time, a transport that cannot open left FAULTY with the reason and tried
again every ``runner.FAULT_RETRY_S`` seconds.  The port's clock is the served clock: this module maps the host clock
onto it through the same ``ClockMap`` the NTP workers use, hands the port the clock's quality (``publish``), and
passes on what the port notices besides what it sends (``outputs/ptp/notices.py``): management SETs, a foreign
grandmaster that out-ranks this one, the port's return to MASTER.  The Syncs (multicast and unicast-negotiated) and
the unicast Announces go out from a native thread (native_sync.py) when it is built and the port timestamps in
software over UDP (``ptp.native_sync``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from appliance.edge.ptp import native_sync
from appliance.edge.ptp.runner import PortRunner, PortSpec
from appliance.edge.ptp.transport import TransportError, UdpTransport, clock_identity
from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.outputs.ptp.notices import ManagementSet, MasterAgain, PortNotice
from appliance.protocol.clockmap import ClockMap
from appliance.protocol.limits import AccessRules
from appliance.protocol.phcmap import PhcMap
from appliance.protocol.ptp.port import Action, PtpPort
from appliance.protocol.ptp.profiles import PortConfig
from appliance.protocol.ptp.security import PortSecurity
from appliance.protocol.ptp.smpte import SyncMetadata

log = logging.getLogger("appliance.ptp")


class PtpService:
    """``start()`` on a running loop, ``publish(clock_map, view)`` every second and at every state change, ``stop()``,
    ``status()``.  ``on_event(kind, text)`` hears "ptp-fault" and "ptp-state"; ``on_notice(notice)`` hears the
    port's notices (a management SET, obeyed or refused; a foreign grandmaster that silenced it; MASTER again)."""

    def __init__(self, config: PortConfig, iface: str, clock_map: ClockMap, view: GrandmasterView,
                 management_allow: tuple[str, ...] = ("127.0.0.0/8", "::1/128"),
                 on_event: Callable[[str, str], None] | None = None, timestamping: str = "auto",
                 served_phc: str = "", on_notice: Callable[[PortNotice], None] | None = None,
                 native: str = "auto", security: PortSecurity | None = None,
                 sync_metadata: SyncMetadata | None = None):
        self.config, self.iface = config, iface
        self.security = security
        self.sync_metadata = sync_metadata
        self.native_wanted = native == "auto"
        self.native: native_sync.NativeSync | None = None
        self.native_status: dict[str, Any] = {}
        self.native_error = ""
        self.clock_map, self.view = clock_map, view
        self.management_rules = AccessRules(management_allow)
        self.on_event = on_event or (lambda kind, text: None)
        self.on_notice = on_notice or (lambda notice: None)
        self.port: PtpPort | None = None
        summary = f"{config.profile}, {config.transport}, domain {config.domain}"
        spec = PortSpec(iface, config.transport, config.l2_destination, config.delay_mechanism == "p2p", timestamping,
                        setting="ptp.timestamping", title="PTP port", not_up="not serving", event="ptp",
                        summary=summary, served_phc=served_phc)  # the PHC is read at each publish()
        self.runner = PortRunner(spec, self, log, lambda kind, text: self.on_event(kind, text))

    def start(self) -> None:
        self.runner.start()

    def stop(self) -> None:
        self._close_native()
        self.runner.stop()

    def _close_native(self) -> None:
        if self.native is not None:
            if self.native.answer_delay and self.runner.loop is not None:
                self.runner.loop.remove_reader(self.native.handoff_fd)
            self.native.close()
            self.native = None

    def _open_native(self, transport: Any, port: PtpPort, now_ns: int) -> None:
        """The native Sync sender on this transport, when wanted and possible; else the port sends its Syncs."""
        self._close_native()
        port.sync_offload = port.delay_offload = False
        port.take_stream_changes()  # of a sender gone with the transport
        if not self.native_wanted:
            return
        if not native_sync.available():
            self.native_error = "not built"
        elif not isinstance(transport, UdpTransport) or self.runner.hardware:
            self.native_error = "software timestamps over UDP only"
        else:
            # Negotiated unicast clients' Delay_Reqs are answered by the sender too (the rest handed back here).
            answer_delay = (self.config.unicast_negotiation and self.config.delay_mechanism == "e2e"
                            and self.runner.loop is not None)
            try:
                self.native = native_sync.NativeSync(transport, log, answer_delay=answer_delay)
            except (TransportError, OSError) as exc:
                self.native_error = str(exc)
                log.warning("PTP Syncs sent by the port: the native sender did not start: %s", exc)
                return
            self.native_error = ""
            self.native.sign_with(self.security)  # with ptp.spp: it signs what it sends as the port would
            self.native.publish(self.clock_map, port)
            self.native.adopt(port, now_ns)
            if answer_delay and self.runner.loop is not None:
                self.native.enable_delay(port)
                self.runner.loop.add_reader(self.native.handoff_fd, self._handed_back)

    def publish(self, clock_map: ClockMap, view: GrandmasterView) -> None:
        """The clock's map and quality, every second and at every state change (the PHC is read against the host
        clock with it)."""
        self.clock_map, self.view = clock_map, view
        if self.runner.phc is not None:
            self.runner.phc.sample()
        if self.native is not None and self.port is not None:
            self.native.publish(clock_map, self.port)
            self.native_status = self.native.take(self.port)
        if self.port is not None:
            self.runner.apply(self.port.update_view(view, time.monotonic_ns()))
            self.runner.rearm()

    @property
    def phc_map(self) -> PhcMap | None:
        """NIC PHC -> host clock; None with software timestamps or when the PHC is the served clock."""
        return None if self.runner.phc is None else self.runner.phc.map

    def served_ns(self, ts_ns: int) -> int:
        """A transport timestamp on the served clock: host (software) or PHC (hardware) time in."""
        return self.runner.port_ns(ts_ns)

    def status(self) -> dict[str, Any]:
        cfg = self.config
        status = self.runner.status({"profile": cfg.profile, "transport": cfg.transport, "domain": cfg.domain})
        if self.native_wanted:
            status["native_sync"] = {"running": self.native is not None, "error": self.native_error,
                                     **self.native_status}
        return status

    # --- the runner's owner (runner.PortOwner) ---------------------------------------------------------------------
    def attach(self, transport: Any, now_ns: int) -> PtpPort:
        """The port for a transport that opened.  The native sender opens first: the port's entry into MASTER then
        starts its streams there, or its own timers."""
        if self.port is None:
            self.port = PtpPort(self.config, clock_identity(transport.mac), self.view, now_ns,
                                address_key=transport.address_key, management_rules=self.management_rules,
                                security=self.security, sync_metadata=self.sync_metadata)
        self._open_native(transport, self.port, now_ns)
        return self.port

    def of_host(self, host_ns: int) -> int:
        """The port's clock is the served clock."""
        return self.clock_map.served_tai_ns(host_ns)

    def handle(self, actions: list[Action]) -> None:
        """After every call into the port: what it noticed is logged and passed on, whoever caused it; the native
        sender follows its streams and its state (a FAULTY port: the sender falls silent too)."""
        for notice in self.port.take_notices() if self.port else []:
            quiet = isinstance(notice, MasterAgain) or (isinstance(notice, ManagementSet) and bool(notice.refused))
            (log.info if quiet else log.warning)("%s", notice.text)
            self.on_notice(notice)
        if self.native is not None and self.port is not None:
            self.native.apply(self.port, time.monotonic_ns())

    def _handed_back(self) -> None:
        """Datagrams the native sender read from the event socket and did not answer: the port's, as if it had
        read them itself."""
        if self.native is None or self.port is None:
            return
        now_ns = time.monotonic_ns()
        actions: list[Action] = []
        for data, source, ts_ns in self.native.take_handoff():
            actions += self.port.handle_rx(data, source, None if ts_ns is None else self.served_ns(ts_ns), now_ns)
        self.runner.apply(actions)
        self.runner.rearm()
