"""Run the PTP port on the appliance's event loop: sockets in, port engine, sockets out.

I/O edge.  The port engine (port.py) decides; this module feeds it the packets and kernel timestamps of the
transport, maps host timestamps to the served clock through the same ``ClockMap`` the NTP workers use, and keeps one
timer armed at the engine's next due time.  A transport that cannot open (no such interface, port in use, no
permission) leaves the port FAULTY with the reason, and it is tried again every ``FAULT_RETRY_S`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from appliance.protocol.clockmap import ClockMap
from appliance.protocol.limits import AccessRules
from appliance.outputs.ptp import port as ptp_port
from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.protocol.phcmap import PhcMap
from appliance.protocol.ptp.profiles import PortConfig
from appliance.edge.ptp.transport import (PhcReader, TransportError, choose_timestamping, clock_identity,
                                             open_transport, send_batch)

log = logging.getLogger("appliance.ptp")
FAULT_RETRY_S = 16.0  # ptp4l's fault_reset_interval is 2**4 s too


class PtpService:
    def __init__(self, config: PortConfig, iface: str, clock_map: ClockMap, view: GrandmasterView,
                 management_allow: tuple[str, ...] = ("127.0.0.0/8", "::1/128"),
                 on_event: Callable[[str, str], None] | None = None, timestamping: str = "auto",
                 served_phc: str = ""):
        self.config, self.iface = config, iface
        self.clock_map, self.view = clock_map, view
        self.management_rules = AccessRules(management_allow)
        self.on_event = on_event or (lambda kind, text: None)
        self.port: ptp_port.PtpPort | None = None
        self.transport: Any = None
        self.error = ""
        self.timestamping = "software"
        self.want_timestamping = timestamping  # auto | hardware | software
        self.served_phc = served_phc  # the PHC device the clock steers (clock.backend=phc), if any
        self.hardware = False
        self._phc: PhcReader | None = None  # the NIC's PHC against the host clock, unless it is the served clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._last_state = ""
        self._watching = False  # the transport's sockets are in the event loop's epoll set

    # --- life cycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._open()

    def _open(self) -> None:
        cfg = self.config
        try:
            self.hardware = self._choose_hardware()
            self.transport = open_transport(cfg.transport, self.iface, cfg.l2_destination,
                                            cfg.delay_mechanism == "p2p", self.hardware)
        except (TransportError, OSError) as exc:
            self.error = str(exc.strerror if isinstance(exc, TransportError) and exc.strerror else exc)
            if self.port is not None:
                self.port.fault(time.monotonic_ns(), self.error)
            log.error("PTP port not serving: %s (retrying every %.0f s)", self.error, FAULT_RETRY_S)
            self.on_event("ptp-fault", self.error)
            assert self._loop is not None
            self._retry = self._loop.call_later(FAULT_RETRY_S, self._open)
            return
        self.error = ""
        now = time.monotonic_ns()
        if self.port is None:
            self.port = ptp_port.PtpPort(cfg, clock_identity(self.transport.mac), self.view, now,
                                         address_key=self.transport.address_key,
                                         management_rules=self.management_rules)
            self._apply(self.port.start(now))
        else:
            self._apply(self.port.fault_cleared(now))
        assert self._loop is not None
        for fd in self.transport.fds():
            self._loop.add_reader(fd, self._readable, fd)
        self._watching = True
        log.info("PTP port %s on %s (%s, %s, domain %d, %s timestamps)", self.port.snapshot(now)["port_identity"],
                 self.iface, cfg.profile, cfg.transport, cfg.domain, self.timestamping)
        self._rearm()

    def _choose_hardware(self) -> bool:
        """Hardware timestamps when asked for or (auto) offered; the NIC is switched on and its PHC opened."""
        if self._phc is not None:  # opened again after a fault: read the PHC afresh
            self._phc.close()
            self._phc = None
        hardware, self.timestamping, self._phc = choose_timestamping(self.iface, self.want_timestamping,
                                                                     "ptp.timestamping", self.served_phc)
        return hardware

    @property
    def phc_map(self) -> PhcMap | None:
        """NIC PHC -> host clock; None with software timestamps or when the PHC is the served clock."""
        return None if self._phc is None else self._phc.map

    def _served(self, ts_ns: int) -> int:
        """A transport timestamp on the served clock: host (software) or PHC (hardware) time in."""
        if not self.hardware:
            return self.clock_map.served_tai_ns(ts_ns)
        if self._phc is None:
            return ts_ns
        return self.clock_map.served_tai_ns(self._phc.host_of(ts_ns))

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._retry is not None:
            self._retry.cancel()
        if self.transport is not None and self._loop is not None:
            for fd in self.transport.fds():
                self._loop.remove_reader(fd)
            self._watching = False
            self.transport.close()
            self.transport = None
        if self._phc is not None:
            self._phc.close()
            self._phc = None

    # --- inputs -------------------------------------------------------------------------------------------------
    def publish(self, clock_map: ClockMap, view: GrandmasterView) -> None:
        """The clock's map and quality, every second and at every state change."""
        self.clock_map, self.view = clock_map, view
        if self._phc is not None:
            self._phc.sample()
        if self.port is not None:
            self._apply(self.port.update_view(view, time.monotonic_ns()))
            self._rearm()

    def _readable(self, fd: int) -> None:
        port, transport = self.port, self.transport
        if port is None or transport is None:
            return
        now = time.monotonic_ns()
        actions: list[ptp_port.Send] = []
        for token, ts_ns in transport.tx_timestamps():
            actions += port.handle_tx_timestamp(token, self._served(ts_ns))
        for data, source, ts_ns in transport.receive(fd):
            rx = None if ts_ns is None else self._served(ts_ns)
            actions += port.handle_rx(data, source, rx, now)
        self._apply(actions)
        self._rearm()

    def _on_timer(self) -> None:
        self._timer = None
        port = self.port
        if port is None:
            return
        # transmit timestamps first: a Follow_Up must not wait for the next readable event
        if self.transport is not None:
            for token, ts_ns in self.transport.tx_timestamps():
                self._apply(port.handle_tx_timestamp(token, self._served(ts_ns)))
        self._apply(port.handle_timer(time.monotonic_ns(), self.clock_map.served_tai_ns(time.time_ns())))
        self._rearm()

    def _apply(self, actions: list[ptp_port.Send]) -> None:
        send_batch(self.transport, self._loop, self._readable, actions, self._watching)
        port = self.port
        if port is not None and port.state != self._last_state:
            if self._last_state:
                log.info("PTP port: %s -> %s (%s)", self._last_state, port.state, port.reason)
                self.on_event("ptp-state", f"{self._last_state} -> {port.state} ({port.reason})")
            self._last_state = port.state
        last_set = getattr(port, "last_set", None)
        if last_set is not None:
            name, old, new, who = last_set
            log.warning("PTP management SET from %s: %s %d -> %d", who, name, old, new)
            self.on_event("ptp-set", f"{name} {old} -> {new} by PTP management from {who}")
            port.last_set = None  # type: ignore[union-attr]

    def _rearm(self) -> None:
        port, loop = self.port, self._loop
        if port is None or loop is None:
            return
        due = port.next_due_ns()
        if due is None:
            return
        # Event-message transmit timestamps arrive on the error queue (POLLERR wakes the readers); the timer also
        # polls it within 1 ms of a send so a Follow_Up never waits for the next packet.
        delay_s = max(0.0, (due - time.monotonic_ns()) / 1e9)
        if port._pending:
            delay_s = min(delay_s, 0.001)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_later(delay_s, self._on_timer)

    # --- the read model -------------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        base = {"enabled": True, "interface": self.iface, "error": self.error, "timestamping": self.timestamping}
        if self.port is None:
            return {**base, "state": "FAULTY" if self.error else "INITIALIZING", "profile": self.config.profile,
                    "transport": self.config.transport, "domain": self.config.domain}
        snap = self.port.snapshot(time.monotonic_ns())
        if self.transport is not None:
            snap["counters"]["send_errors"] = self.transport.send_errors
        return {**base, **snap}
