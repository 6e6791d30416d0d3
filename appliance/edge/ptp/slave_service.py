"""Run the PTP slave port on the appliance's event loop: an upstream grandmaster as a time reference.

I/O edge.  The slave engine (ptp_slave.py) decides; this module opens the transport (transport.py), feeds it packets
and their timestamps mapped onto the appliance's local time axis by ``local_of_host(host_ns)``: the kernel's
software timestamps are host time already; the NIC's hardware timestamps (``timestamping`` "hardware", or "auto"
and offered) count its PHC, read against the host clock every second (transport.PhcReader) to get there.  It sends
what it asks, and hands every ``PtpMeasurement`` to ``on_measurement``.  One timer stays armed at the engine's next
due time.  A transport that cannot open (no such interface, port in use, no permission, hardware timestamps asked
for and not offered) leaves the port FAULTY with the reason in ``status()``, and it is tried again every
``FAULT_RETRY_S`` seconds, as the grandmaster port is.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from appliance.outputs.ptp.port import Send
from appliance.edge.ptp.transport import (PhcReader, TransportError, choose_timestamping, clock_identity,
                                             open_transport, send_batch)
from appliance.refs.ptp_slave import PtpMeasurement, PtpSlave, SlaveAction, SlaveConfig

log = logging.getLogger("appliance.ptp.slave")
FAULT_RETRY_S = 16.0  # ptp4l's fault_reset_interval is 2**4 s too
TX_POLL_S = 0.001  # how soon after an event message its transmit timestamp is looked for
PHC_SAMPLE_S = 1.0  # how often the NIC's PHC is read against the host clock (hardware timestamps)


class PtpSlaveService:
    """``start()`` on a running loop, ``stop()``, ``status()``.  ``port_number`` tells this port apart from a
    grandmaster port of the same clock identity (the same interface's MAC)."""

    def __init__(self, config: SlaveConfig, iface: str, local_of_host: Callable[[int], int],
                 on_measurement: Callable[[PtpMeasurement], None],
                 on_event: Callable[[str, str], None] | None = None, rng: random.Random | None = None,
                 port_number: int = 1, timestamping: str = "auto"):
        self.config, self.iface = config, iface
        self.local_of_host = local_of_host
        self.on_measurement = on_measurement
        self.on_event = on_event or (lambda kind, text: None)
        self.rng, self.port_number = rng, port_number
        self.slave: PtpSlave | None = None
        self.transport: Any = None
        self.error = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._last_state = ""
        self._watching = False
        self.want_timestamping = timestamping  # auto | hardware | software
        self.timestamping = "software"  # what status shows
        self.hardware = False
        self._phc: PhcReader | None = None  # the NIC's PHC against the host clock (hardware timestamps)

    # --- life cycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._open()

    def _open(self) -> None:
        self._retry = None
        cfg = self.config
        if self._phc is not None:  # opened again after a fault: read the PHC afresh
            self._phc.close()
            self._phc = None
        try:
            self.hardware, self.timestamping, self._phc = choose_timestamping(
                self.iface, self.want_timestamping, "references.ptp_timestamping")
            self.transport = open_transport(cfg.transport, self.iface, cfg.l2_destination,
                                            cfg.delay_mechanism == "p2p", self.hardware)
        except (TransportError, OSError) as exc:
            self.error = str(exc.strerror if isinstance(exc, TransportError) and exc.strerror else exc)
            if self.slave is not None:
                self.slave.fault(time.monotonic_ns(), self.error)
                self._note_state()
            log.error("PTP slave port not listening: %s (retrying every %.0f s)", self.error, FAULT_RETRY_S)
            self.on_event("ptp-slave-fault", self.error)
            assert self._loop is not None
            self._retry = self._loop.call_later(FAULT_RETRY_S, self._open)
            return
        self.error = ""
        now = time.monotonic_ns()
        if self.slave is None:
            self.slave = PtpSlave(cfg, clock_identity(self.transport.mac), now, self.rng, self.port_number)
        else:
            self.slave.fault_cleared(now)
        assert self._loop is not None
        for fd in self.transport.fds():
            self._loop.add_reader(fd, self._readable, fd)
        self._watching = True
        log.info("PTP slave port %s on %s (%s, %s, domain %d, %s timestamps)",
                 self.slave.snapshot()["port_identity"], self.iface, cfg.transport, cfg.delay_mechanism, cfg.domain,
                 self.timestamping)
        self._note_state()
        self._rearm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self.transport is not None and self._loop is not None:
            for fd in self.transport.fds():
                self._loop.remove_reader(fd)
            self._watching = False
            self.transport.close()
            self.transport = None
        if self._phc is not None:
            self._phc.close()
            self._phc = None

    def set_tai_utc_s(self, tai_utc_s: int | None) -> None:
        """TAI - UTC from the leap table, for an ARB master that does not mark its currentUtcOffset valid."""
        if self.slave is not None:
            self.slave.set_tai_utc_s(tai_utc_s)
        self.config = replace(self.config, tai_utc_s=tai_utc_s)

    # --- inputs -------------------------------------------------------------------------------------------------
    def _readable(self, fd: int) -> None:
        slave, transport = self.slave, self.transport
        if slave is None or transport is None:
            return
        now = time.monotonic_ns()
        actions: list[SlaveAction] = []
        for token, ts_ns in transport.tx_timestamps():
            actions += slave.on_tx_timestamp(token, self._local(ts_ns))
        for data, source, ts_ns in transport.receive(fd):
            rx = None if ts_ns is None else self._local(ts_ns)
            actions += slave.on_message(data, rx, source, now)
        self._apply(actions)
        self._rearm()

    def _on_timer(self) -> None:
        self._timer = None
        slave = self.slave
        if slave is None:
            return
        now = time.monotonic_ns()
        if self._phc is not None and now - self._phc.sampled_mono_ns >= PHC_SAMPLE_S * 1e9:
            self._phc.sample()
        if self.transport is not None:  # transmit timestamps first: a delay exchange must not wait for a packet
            for token, ts_ns in self.transport.tx_timestamps():
                self._apply(slave.on_tx_timestamp(token, self._local(ts_ns)))
        self._apply(slave.on_timer(now))
        self._rearm()

    def _local(self, ts_ns: int) -> int:
        """A transport timestamp on the local time axis: host (software) or PHC (hardware) time in."""
        return self.local_of_host(ts_ns if self._phc is None else self._phc.host_of(ts_ns))

    def _apply(self, actions: list[SlaveAction]) -> None:
        send_batch(self.transport, self._loop, self._readable, [a for a in actions if isinstance(a, Send)],
                   self._watching)
        for a in actions:
            if isinstance(a, PtpMeasurement):
                try:
                    self.on_measurement(a)
                except Exception:  # a consumer's bug must not stop the port
                    log.exception("PTP slave: on_measurement failed")
        self._note_state()

    def _note_state(self) -> None:
        slave = self.slave
        if slave is not None and slave.state != self._last_state:
            if self._last_state:
                log.info("PTP slave port: %s -> %s (%s)", self._last_state, slave.state, slave.reason)
                self.on_event("ptp-slave-state", f"{self._last_state} -> {slave.state} ({slave.reason})")
            self._last_state = slave.state

    def _rearm(self) -> None:
        slave, loop = self.slave, self._loop
        if slave is None or loop is None or self.transport is None:
            return
        due = slave.next_due_ns()
        if due is None:
            return
        delay_s = max(0.0, (due - time.monotonic_ns()) / 1e9)
        if slave.pending_tx():
            delay_s = min(delay_s, TX_POLL_S)
        if self._phc is not None:  # the PHC is read against the host clock once a second
            delay_s = min(delay_s, PHC_SAMPLE_S)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_later(delay_s, self._on_timer)

    # --- the read model ---------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        base = {"enabled": True, "interface": self.iface, "error": self.error, "timestamping": self.timestamping}
        if self.slave is None:
            cfg = self.config
            return {**base, "state": "FAULTY" if self.error else "INITIALIZING", "transport": cfg.transport,
                    "delay_mechanism": cfg.delay_mechanism, "domain": cfg.domain}
        snap = self.slave.snapshot(time.monotonic_ns())
        if self.transport is not None:
            snap["counters"]["send_errors"] = self.transport.send_errors
        return {**base, **snap}

