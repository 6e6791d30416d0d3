"""Run one sans-IO PTP port (protocol/ptp/port.py) on the appliance's event loop: its transport, readers, one timer,
faults.

I/O edge.  The grandmaster port (gm_service.py) and the upstream reference's slaveOnly port (slave_service.py) each
run through one ``PortRunner``.  It opens the transport (transport.py) with the timestamping asked for, watches its
sockets, calls the port (``handle_rx``, ``handle_timer``, ``handle_tx_timestamp``, ``start``, ``fault``), reads
transmit timestamps at every wake-up (a Follow_Up or a delay exchange must not wait for the next packet), sends the
port's ``Send`` actions, keeps one timer armed at the port's next due time and logs its state changes.  Timestamps
reach the port on its clock: a hardware timestamp is read through the NIC's PHC onto the host clock (unless that PHC
is the served clock itself), and the host clock onto the port's by the service's ``of_host``.  A transport that
cannot open (no such interface, port in use, no permission, hardware timestamps asked for and not offered) leaves the
port FAULTY with the reason, and it is tried again every ``FAULT_RETRY_S`` seconds.  What differs between the two
ports -- the port itself, its clock, what else its actions mean, what it names itself -- comes in as a ``PortSpec``
and from the service, its ``PortOwner``.

The timer is a timerfd in the loop's epoll set (``DeadlineTimer``): asyncio's own timers wake through epoll_wait's
timeout, which Python rounds up to the millisecond, so a Sync left up to 1 ms after its slot before any work was
done (median 0.58 ms at 1,000 unicast clients, bench/ptp_unicast.py).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from appliance.edge.ptp.transport import PhcReader, TransportError, choose_timestamping, open_transport, send_batch
from appliance.protocol.ptp.port import Action, PtpPort
from appliance.protocol.ptp.port_common import Send, port_identity_text

FAULT_RETRY_S = 16.0  # ptp4l's fault_reset_interval is 2**4 s too
TX_POLL_S = 0.001  # how soon after an event message its transmit timestamp is looked for
CLOCK_MONOTONIC, TFD_TIMER_ABSTIME = 1, 1  # time.monotonic_ns() reads CLOCK_MONOTONIC
TFD_NONBLOCK, TFD_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc if hasattr(libc, "timerfd_create") else None
    except OSError:
        return None


_LIBC = _libc()


class DeadlineTimer:
    """One timer at an absolute monotonic instant, to the microsecond: a timerfd (CLOCK_MONOTONIC, absolute) watched
    by the loop; ``at(due_ns)`` moves it earlier (one system call), ``close()`` removes it.  Where there
    is no timerfd, the loop's own timer (millisecond wake-ups).  ``at`` never moves it later: a wake-up before the
    instant is harmless (the runner looks and arms it again), and it saves a system call per packet."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]):
        self.loop, self.callback = loop, callback
        self.armed_ns: int | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._spec = _Itimerspec()
        self.fd = _LIBC.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC) if _LIBC is not None else -1
        if self.fd >= 0:
            loop.add_reader(self.fd, self._expired)

    def at(self, due_ns: int) -> None:
        """Fire at ``due_ns`` (monotonic) or before."""
        due_ns = max(due_ns, 1)  # an it_value of zero would disarm it; a past instant fires at once
        if self.armed_ns is not None and self.armed_ns <= due_ns:
            return
        self.armed_ns = due_ns
        if self.fd < 0:
            if self._handle is not None:
                self._handle.cancel()
            self._handle = self.loop.call_later(max(0.0, (due_ns - time.monotonic_ns()) / 1e9), self._fired)
            return
        spec = self._spec
        spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(due_ns, 1_000_000_000)
        if _LIBC.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime")

    def _expired(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:  # moved after it expired, before the loop got to it
            return
        self._fired()

    def _fired(self) -> None:
        self.armed_ns = self._handle = None
        self.callback()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
        self.armed_ns = self._handle = None


class PortOwner(Protocol):
    """The service a runner runs a port for."""

    def attach(self, transport: Any, now_ns: int) -> PtpPort:
        """The port for a transport that opened: made the first time, the same one after a fault."""

    def of_host(self, host_ns: int) -> int:
        """A host clock instant on the port's clock: the served clock, or the appliance's local time axis."""

    def handle(self, actions: list[Action]) -> None:
        """After every call into the port: what the service does with its actions besides sending them."""


@dataclass(frozen=True)
class PortSpec:
    """One port as its runner opens it, and names it in the log and in events."""

    iface: str
    transport: str  # udp4 | udp6 | l2
    l2_destination: str
    p2p: bool  # the peer-delay multicast group is joined too
    timestamping: str  # auto | hardware | software
    setting: str  # the setting a refusal of hardware timestamps names
    title: str  # "PTP port": how its log lines begin
    not_up: str  # "not serving": what its fault log line says
    event: str  # "ptp": its on_event kinds are <event>-fault and <event>-state
    summary: str  # "default-e2e, udp4, domain 0": said when the port opens
    served_phc: str = ""  # the PHC the clock steers: its hardware timestamps are served time already
    phc_sample_s: float | None = None  # read the NIC's PHC against the host clock this often (None: the service does)


class PortRunner:
    """``start()`` on a running loop, ``stop()``, ``status(idle)``; ``apply(actions)`` and ``rearm()`` for what the
    service gives its port from outside (the grandmaster's clock quality)."""

    def __init__(self, spec: PortSpec, owner: PortOwner, log: logging.Logger,
                 on_event: Callable[[str, str], None]):
        self.spec, self.owner, self.log, self.on_event = spec, owner, log, on_event
        self.port: PtpPort | None = None
        self.transport: Any = None
        self.error = ""
        self.timestamping = "software"  # what status shows
        self.hardware = False
        self.phc: PhcReader | None = None  # the NIC's PHC against the host clock, unless it is the served clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: DeadlineTimer | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._last_state = ""
        self._watching = False  # the transport's sockets are in the event loop's epoll set

    # --- life cycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._open()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop it runs on, once started."""
        return self._loop

    @property
    def retrying(self) -> bool:
        """The transport would not open; another try is due in FAULT_RETRY_S."""
        return self._retry is not None

    def choose_timestamping(self) -> bool:
        """Hardware timestamps when asked for or (auto) offered: the NIC switched on and its PHC opened (afresh, on
        a retry).  TransportError when asked for and not offered."""
        if self.phc is not None:
            self.phc.close()
            self.phc = None
        spec = self.spec
        self.hardware, self.timestamping, self.phc = choose_timestamping(spec.iface, spec.timestamping,
                                                                         spec.setting, spec.served_phc)
        return self.hardware

    def _open(self) -> None:
        self._retry = None
        spec = self.spec
        try:
            self.choose_timestamping()
            self.transport = open_transport(spec.transport, spec.iface, spec.l2_destination, spec.p2p, self.hardware)
        except (TransportError, OSError) as exc:
            self._fault(str(exc.strerror if isinstance(exc, TransportError) and exc.strerror else exc))
            return
        self.error = ""
        now_ns = time.monotonic_ns()
        port = self.port = self.owner.attach(self.transport, now_ns)
        assert self._loop is not None
        for fd in self.transport.fds():
            self._loop.add_reader(fd, self.on_readable, fd)
        self._watching = True
        self.log.info("%s %s on %s (%s, %s timestamps)", spec.title, port_identity_text(port.identity),
                      spec.iface, spec.summary, self.timestamping)
        self.apply(port.start(now_ns))
        self.rearm()

    def _fault(self, error: str) -> None:
        self.error = error
        if self.port is not None:
            self.apply(self.port.fault(time.monotonic_ns(), error))
        self.log.error("%s %s: %s (retrying every %.0f s)", self.spec.title, self.spec.not_up, error, FAULT_RETRY_S)
        self.on_event(f"{self.spec.event}-fault", error)
        assert self._loop is not None
        self._retry = self._loop.call_later(FAULT_RETRY_S, self._open)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.close()
        if self._retry is not None:
            self._retry.cancel()
        self._timer = self._retry = None
        if self.transport is not None and self._loop is not None:
            for fd in self.transport.fds():
                self._loop.remove_reader(fd)
            self._watching = False
            self.transport.close()
            self.transport = None
        if self.phc is not None:
            self.phc.close()
            self.phc = None

    # --- the port's inputs and actions ------------------------------------------------------------------------
    def port_ns(self, ts_ns: int) -> int:
        """A transport timestamp on the port's clock: host (software) or PHC (hardware) time in."""
        if self.hardware and self.phc is None:  # the PHC is the served clock: its timestamps are served time
            return ts_ns
        return self.owner.of_host(ts_ns if self.phc is None else self.phc.host_of(ts_ns))

    def on_readable(self, fd: int) -> None:
        port, transport = self.port, self.transport
        if port is None or transport is None:
            return
        now_ns = time.monotonic_ns()
        actions = self._transmitted()
        for data, source, ts_ns in transport.receive(fd):
            actions += port.handle_rx(data, source, None if ts_ns is None else self.port_ns(ts_ns), now_ns)
        self.apply(actions)
        self.rearm()

    def on_timer(self) -> None:
        """The timer: the PHC read when due, the port's timers (what is due goes out first: a Sync is sent as close
        to its slot as can be), then the transmit timestamps waiting (among them, on a software-timestamping
        transport, those of the Syncs just sent: their Follow_Ups go out in the same wake-up).  The port's clock is
        read right after the monotonic clock: the port maps a Sync's slot onto its clock through this pair."""
        if self.port is None:
            return
        every_s = self.spec.phc_sample_s
        if self.phc is not None and every_s is not None and \
                time.monotonic_ns() - self.phc.sampled_mono_ns >= every_s * 1e9:
            self.phc.sample()
        now_ns = time.monotonic_ns()
        self.apply(self.port.handle_timer(now_ns, self.owner.of_host(time.time_ns())))
        self.apply(self._transmitted())
        self.rearm()

    def _transmitted(self) -> list[Action]:
        """Transmit timestamps from the error queue, handed to the port."""
        actions: list[Action] = []
        if self.transport is not None and self.port is not None:
            for token, ts_ns in self.transport.tx_timestamps():
                actions += self.port.handle_tx_timestamp(token, self.port_ns(ts_ns))
        return actions

    def apply(self, actions: list[Action]) -> None:
        """Send the ``Send``s, let the service handle the rest, and log a state change."""
        sends = [a for a in actions if isinstance(a, Send)]
        send_batch(self.transport, self._loop, self.on_readable, sends, self._watching)
        self.owner.handle(actions)
        self._note_state()

    def _note_state(self) -> None:
        port = self.port
        if port is None or port.state == self._last_state:
            return
        if self._last_state:
            self.log.info("%s: %s -> %s (%s)", self.spec.title, self._last_state, port.state, port.reason)
            self.on_event(f"{self.spec.event}-state", f"{self._last_state} -> {port.state} ({port.reason})")
        self._last_state = port.state

    def rearm(self) -> None:
        """One timer at the port's next due time.  Transmit timestamps arrive on the error queue (POLLERR wakes the
        readers); the timer also polls it within TX_POLL_S of a send, so a Follow_Up never waits for the next
        packet; and it reads the PHC every ``phc_sample_s``."""
        port, loop = self.port, self._loop
        if port is None or loop is None or self.transport is None:
            return
        due_ns = port.next_due_ns()
        if due_ns is None:
            return
        now_ns = time.monotonic_ns()
        if port.pending_tx():
            due_ns = min(due_ns, now_ns + int(TX_POLL_S * 1e9))
        if self.phc is not None and self.spec.phc_sample_s is not None:
            due_ns = min(due_ns, now_ns + int(self.spec.phc_sample_s * 1e9))
        if self._timer is None:
            self._timer = DeadlineTimer(loop, self.on_timer)
        self._timer.at(due_ns)

    # --- the read model ---------------------------------------------------------------------------------------
    def status(self, idle: dict[str, Any]) -> dict[str, Any]:
        """The port's status: its snapshot, or before there is a port its state and ``idle`` (what the service is
        configured as)."""
        base = {"enabled": True, "interface": self.spec.iface, "error": self.error, "timestamping": self.timestamping}
        if self.port is None:
            return {**base, "state": "FAULTY" if self.error else "INITIALIZING", **idle}
        snap = self.port.snapshot(time.monotonic_ns())
        if self.transport is not None:
            snap["counters"]["send_errors"] = self.transport.send_errors
        return {**base, **snap}
