"""The oracle's receive/answer loop: ``tests/oracle/ntp_server.py`` on a real UDP socket with kernel timestamps.

Not part of the product.  It is what the data plane's worker (appliance/edge/ntp/worker.py, fast.py) does, written
plainly in Python around the executable model, so that the differential tests can send the same datagrams to both
and compare what comes back.  Receive timestamps come from the kernel; each reply's transmit timestamp is read just
before ``sendmsg``, and the kernel's own transmit timestamp comes back on the error queue (OPT_ID numbers the
datagrams) for interleaved replies.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
import time
from typing import Any

from appliance.edge.ntp.shm import ClockReader
from appliance.edge.ntp.worker import SO_TIMESTAMPING
from appliance.protocol.clockmap import ClockMap, not_ready
from tests.oracle.ntp_server import LOW_BIT, Drop, NtpServer

ORIGIN_END = 32  # the origin timestamp is bytes 24-31 of a request
SCM_TIMESTAMPING = SO_TIMESTAMPING
TX_TIMESTAMP_CMSG = [(socket.SOL_SOCKET, SO_TIMESTAMPING, struct.pack("I", 1 << 1))]  # SOF_TIMESTAMPING_TX_SOFTWARE
IP_RECVERR, IPV6_RECVERR = 11, 25
MSG_ERRQUEUE = 0x2000
SO_EE_ORIGIN_TIMESTAMPING = 4
ANC_SIZE = socket.CMSG_SPACE(48) + socket.CMSG_SPACE(64)
RECV_SIZE = 1100  # larger than the largest request accepted, so oversize is seen as such
BATCH = 64


def _timestamp_ns(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPING and len(data) >= 16:
            sec, nsec = struct.unpack_from("qq", data)
            if sec or nsec:
                return sec * 1_000_000_000 + nsec
    return None


def _opt_id(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancdata:
        if (level, kind) in ((socket.IPPROTO_IP, IP_RECVERR), (socket.IPPROTO_IPV6, IPV6_RECVERR)) and len(data) >= 16:
            _errno, origin, _type, _code, _pad, _info, ident = struct.unpack_from("=IBBBBII", data)
            if origin == SO_EE_ORIGIN_TIMESTAMPING:
                return ident
    return None


class OracleWorker:
    def __init__(self, sock: socket.socket, server: NtpServer, reader: ClockReader | None):
        self.sock, self.server, self.reader = sock, server, reader
        self.extra = {"rx_without_kernel_timestamp": 0, "tx_kernel_timestamps": 0}
        self._next_id = 0
        self._pending: dict[int, int] = {}  # OPT_ID of a sent reply -> its receive timestamp (interleaved key)

    def clock(self, now_ns: int) -> ClockMap:
        cmap = self.reader.read() if self.reader is not None else None
        return cmap if cmap is not None else not_ready(now_ns)

    def handle_datagram(self, data: bytes, addr: Any, rx_ns: int | None) -> None:
        if rx_ns is None:
            self.extra["rx_without_kernel_timestamp"] += 1
            rx_ns = time.time_ns()
        clock = self.clock(rx_ns)
        client = ipaddress.ip_address(addr[0].split("%", 1)[0]).packed
        result = self.server.handle(data, client, addr[1], rx_ns, clock)
        if isinstance(result, Drop):
            return
        tx_ns = time.time_ns()  # as late as possible: right before the reply leaves
        wire = self.server.finalize(result, tx_ns, clock)
        want_tx = result.wants_tx_timestamp
        try:
            self.sock.sendmsg([wire], TX_TIMESTAMP_CMSG if want_tx else [], 0, addr)
        except OSError:
            return
        self.server.sent(result, tx_ns)
        if not want_tx:
            return
        self._pending[self._next_id] = result.rx_key
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        if len(self._pending) > 4096:
            self._pending.pop(next(iter(self._pending)))

    def receive_batch(self) -> int:
        handled = 0
        for _ in range(BATCH):
            try:
                data, anc, flags, addr = self.sock.recvmsg(RECV_SIZE, ANC_SIZE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH):
                    continue
                raise
            if flags & socket.MSG_TRUNC:
                data = data + b"\0" * (RECV_SIZE + 1 - len(data))  # seen as oversize by the server
            if self._pending and len(data) >= ORIGIN_END and data[ORIGIN_END - 1] & LOW_BIT:
                self.drain_errqueue()  # the client may be answering a reply of this very batch
            self.handle_datagram(data, addr, _timestamp_ns(anc))
            handled += 1
        return handled

    def drain_errqueue(self) -> None:
        for _ in range(BATCH):
            try:
                _data, anc, _flags, _addr = self.sock.recvmsg(1, ANC_SIZE, MSG_ERRQUEUE)
            except (BlockingIOError, InterruptedError):
                return
            tx_ns = _timestamp_ns(anc)
            ident = _opt_id(anc)
            if tx_ns is None or ident is None:
                continue
            rx_key = self._pending.pop(ident, None)
            if rx_key is not None:
                self.server.kernel_tx(rx_key, tx_ns)
                self.extra["tx_kernel_timestamps"] += 1

    def counters(self) -> dict[str, int]:
        """In the data plane's counter names (appliance/edge/ntp/shm.py)."""
        c = self.server.counters
        values = {"requests": c.requests, "replies": c.replies, "interleaved": c.interleaved,
                  "authenticated": c.authenticated, "kod_rate": c.kod["RATE"], "kod_deny": c.kod["DENY"],
                  "kod_rstr": c.kod["RSTR"], "crypto_nak": c.kod["CRYPTO-NAK"], "nts": c.nts,
                  "nts_nak": c.kod["NTSN"], **self.extra}
        for reason, count in c.drops.items():
            name = "drop_mode" if reason.startswith("mode-") else "drop_" + reason.replace("-", "_")
            values[name] = values.get(name, 0) + count
        return values
