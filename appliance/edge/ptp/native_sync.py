"""Hand the grandmaster port's unicast Sync streams to the native sender (``_syncsend.c``) and back.

I/O edge.  With ``PtpPort.sync_offload`` set, the port keeps no timer per client for its Syncs: it says which
clients' Sync streams start (a grant, or a new interval) and stop (expired, cancelled), and this module gives each one
to a ``SyncSender`` thread with the client's addresses, the port's Sync and Follow_Up as templates and the first slot.
The thread sends on a socket of its own in the port's event-socket group (``UdpTransport.open_sync_socket``), so the
interpreter -- its garbage collector, the status publication, a burst of Delay_Reqs -- no longer stands between a
slot and its Sync.  The port still decides everything else; the service publishes the clock map to the thread each
second, tells it whether the port is MASTER, and adds what it sent (counters, lateness) to the port's own figures.
``available()`` is False when the module was not built (the port then sends the Syncs itself).
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from appliance.protocol.clockmap import ClockMap
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.port_common import interval_ns

try:
    from appliance.edge.ptp import _syncsend  # type: ignore[attr-defined]
except ImportError:  # built optionally (setup.py)
    _syncsend = None

REALTIME_PRIORITY = 1  # SCHED_FIFO 1 when allowed: above every normal thread, below the kernel's own


def available() -> bool:
    return _syncsend is not None


class NativeSync:
    """One sender thread for one transport: ``apply(port)`` after every call into the port, ``publish(map)``, then
    ``take(port)`` to fold its figures in, ``close()`` before the transport closes."""

    def __init__(self, transport: Any, log: logging.Logger) -> None:
        self.log = log
        self.sock: socket.socket = transport.open_sync_socket()
        try:
            self.sender = _syncsend.SyncSender(self.sock.fileno(), transport.general.fileno(), REALTIME_PRIORITY)
        except OSError:
            self.sock.close()
            raise
        self.streams: dict[Any, tuple[int, int]] = {}  # client key -> (sender index, log interval)
        self.realtime = False
        self.active = False

    def adopt(self, port: Any, now_ns: int) -> None:
        """Every client the port already grants Syncs to (a transport opened again): their streams start now."""
        port.sync_offload = True
        port.take_stream_changes()
        for key, client in port.clients.items():
            if c.MsgType.SYNC in client.grants:
                self._start(port, key, now_ns)

    def apply(self, port: Any, now_ns: int) -> None:
        for what, key in port.take_stream_changes():
            if what == "start":
                self._start(port, key, now_ns)
            else:
                self._stop(port, key)
        active = port.state == "MASTER"
        if active != self.active:
            self.sender.set_active(active)
            self.active = active

    def _start(self, port: Any, key: Any, now_ns: int) -> None:
        client = port.clients.get(key)
        grant = client.grants.get(c.MsgType.SYNC) if client is not None else None
        if grant is None:
            return
        seq = self._stop(port, key)
        if seq is None:
            seq = client.sequence.get(c.MsgType.SYNC, 0)
        sync, follow_up = port.unicast_sync_templates(grant.log_interval)
        index = self.sender.add(client.address, sync, follow_up, interval_ns(grant.log_interval), now_ns, seq)
        self.streams[key] = (index, grant.log_interval)

    def _stop(self, port: Any, key: Any) -> int | None:
        """The stream ends; the client's next Sync sequenceId goes back to the port (None: there was none)."""
        held = self.streams.pop(key, None)
        if held is None:
            return None
        sent, seq, _slot = self.sender.remove(held[0])
        client = port.clients.get(key)
        if client is not None:
            client.sequence[c.MsgType.SYNC] = seq
            client.sent_sync += sent
        return seq

    def publish(self, clock_map: ClockMap) -> None:
        self.sender.set_map(True, clock_map.host_anchor_ns, clock_map.served_anchor_tai_ns, clock_map.rate_ppb)

    def take(self, port: Any) -> dict[str, Any]:
        """Its figures since the last take, folded into the port's; what status shows of the sender itself."""
        taken = self.sender.take()
        port.add_offloaded(taken)
        self.realtime = taken["realtime"]
        return {"streams": taken["streams"], "realtime": taken["realtime"], "send_errors": taken["send_errors"]}

    def close(self) -> None:
        self.sender.close()
        self.sock.close()
        self.streams.clear()
