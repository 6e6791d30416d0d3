"""An NTP worker process: a UDP socket with kernel timestamps, feeding the sans-I/O server.

I/O edge.  Several workers bind the same address with SO_REUSEPORT and the kernel spreads clients over them.  Left to
itself the kernel picks the worker from the 4-tuple, and clients such as chronyd and ntplib send each request from a
fresh source port, so a classic BPF program (SO_ATTACH_REUSEPORT_CBPF) makes it pick by the client's IPv4 address or
IPv6 /64 instead, the rate limiter's key: one client always reaches the same worker, so per-client state (rate
limit, interleaved timestamps) stays consistent.  Receive timestamps come from the kernel (SO_TIMESTAMPING,
software): the moment the packet arrived, not when Python got to it.  Each reply's transmit timestamp is read just
before ``sendto``, and the kernel's own transmit timestamp comes back on the socket's error queue
(SOF_TIMESTAMPING_OPT_ID numbers the datagrams) to be kept for interleaved replies.  The hot loop can be the C fast
path (``_fastpath``) when it is built; it makes the same decisions as ``server.py`` on the common path and hands
everything else here.
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import logging
import os
import select
import signal
import socket
import struct
import time
from dataclasses import asdict
from typing import Any

from appliance.protocol.clockmap import ClockMap, not_ready
from appliance.outputs.ntp.clients import RecentClients, client_key
from appliance.outputs.ntp.server import LOW_BIT, Drop, NtpServer, ServerConfig
from appliance.edge.input_files import load_keys_file
from appliance.edge.ntp.shm import CLIENT_SLOTS, ClockReader
from appliance.edge.proc import die_with_parent

log = logging.getLogger("appliance.ntp.worker")
SO_TIMESTAMPING = 37
SCM_TIMESTAMPING = SO_TIMESTAMPING
SOF_TX_SOFTWARE, SOF_RX_SOFTWARE, SOF_SOFTWARE = 1 << 1, 1 << 3, 1 << 4
SOF_OPT_ID, SOF_OPT_TSONLY = 1 << 7, 1 << 11
# Receive timestamps for every datagram; transmit timestamps only for the replies that ask (per-message control
# message), so that a busy server does not pay an error-queue message per reply.  The kernel numbers (OPT_ID) only
# the datagrams that ask.
TIMESTAMPING_FLAGS = SOF_RX_SOFTWARE | SOF_SOFTWARE | SOF_OPT_ID | SOF_OPT_TSONLY
TX_TIMESTAMP_CMSG = [(socket.SOL_SOCKET, SO_TIMESTAMPING, struct.pack("I", SOF_TX_SOFTWARE))]
IP_RECVERR, IPV6_RECVERR = 11, 25
MSG_ERRQUEUE = 0x2000
SO_EE_ORIGIN_TIMESTAMPING = 4
ANC_SIZE = socket.CMSG_SPACE(48) + socket.CMSG_SPACE(64)
RECV_SIZE = 1100  # larger than the largest request we accept, so oversize is seen as such
BATCH = 64
SO_ATTACH_REUSEPORT_CBPF = 51
SKF_NET_OFF = -0x100000  # classic BPF: loads relative to the network (IP) header
ORIGIN_END = 32  # the origin timestamp is bytes 24-31 of a request


def client_affinity_filter(workers: int) -> list[tuple[int, int, int, int]]:
    """Classic BPF choosing a worker socket from the client's address, modulo ``workers``: the source IPv4 address,
    or the first 8 bytes (the /64) of an IPv6 one XOR-folded.  Instructions are (code, jt, jf, k)."""
    ld_b, ld_w, rsh, jeq, mod, xor_x, tax, ret_a = 0x30, 0x20, 0x74, 0x15, 0x94, 0xAC, 0x07, 0x16
    return [(ld_b, 0, 0, SKF_NET_OFF), (rsh, 0, 0, 4), (jeq, 3, 0, 6),  # IP version 6: skip the IPv4 part
            (ld_w, 0, 0, SKF_NET_OFF + 12), (mod, 0, 0, workers), (ret_a, 0, 0, 0),  # IPv4 source address
            (ld_w, 0, 0, SKF_NET_OFF + 8), (tax, 0, 0, 0), (ld_w, 0, 0, SKF_NET_OFF + 12), (xor_x, 0, 0, 0),
            (mod, 0, 0, workers), (ret_a, 0, 0, 0)]


def _attach_client_affinity(sock: socket.socket, workers: int) -> None:
    code = client_affinity_filter(workers)
    insns = (ctypes.c_uint8 * (8 * len(code))).from_buffer_copy(
        b"".join(struct.pack("=HBBI", op, jt, jf, k & 0xFFFFFFFF) for op, jt, jf, k in code))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, struct.pack("HL", len(code), ctypes.addressof(insns)))


def open_socket(listen: str, port: int, reuseport: bool = True, workers: int = 1) -> socket.socket:
    """A UDP socket bound to ``listen:port`` with kernel receive and transmit timestamps; with ``workers`` > 1, the
    reuseport group picks the socket by client address (``client_affinity_filter``)."""
    family = socket.AF_INET6 if ipaddress.ip_address(listen).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # "::" serves IPv4 clients too
        if reuseport:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, TIMESTAMPING_FLAGS)
        sock.bind((listen, port))
        if reuseport and workers > 1:
            try:
                _attach_client_affinity(sock, workers)  # after bind: the program belongs to the reuseport group
            except OSError as exc:  # Linux < 4.5: served all the same, but spread by 4-tuple
                log.warning("clients spread over workers by source port, not address: %s", exc)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def probe_port(listen: str, port: int) -> None:
    """Raise OSError if someone else already serves this address: SO_REUSEPORT would otherwise share it silently."""
    family = socket.AF_INET6 if ipaddress.ip_address(listen).version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        if family == socket.AF_INET6:
            probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        probe.bind((listen, port))


def _timestamp_ns(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPING and len(data) >= 16:
            sec, nsec = struct.unpack_from("qq", data)
            if sec or nsec:
                return sec * 1_000_000_000 + nsec
    return None


def _client_bytes(host: str) -> bytes:
    return ipaddress.ip_address(host.split("%", 1)[0]).packed


class Worker:
    """The Python receive/answer loop (also the slow path under the C fast path)."""

    def __init__(self, sock: socket.socket, server: NtpServer, reader: ClockReader | None,
                 cookie_keys: Any = None):
        self.sock, self.server, self.reader = sock, server, reader
        self.cookie_keys = cookie_keys  # ntske.JarFile: NTS cookie keys, reloaded when the NTS-KE process rotates
        self.extra = {"rx_without_kernel_timestamp": 0, "tx_kernel_timestamps": 0, "slow_path": 0}
        self.clients = RecentClients()  # the busiest clients of the last minute (monotonic ns), for status
        self._next_id = 0
        self._pending: dict[int, int] = {}  # OPT_ID of a sent reply -> its receive timestamp (interleaved key)
        # The fast path numbers datagrams itself: it is told of every send here, with the interleaved key of the
        # reply (0 for a KoD or crypto-NAK, whose transmit times are not kept).
        self.after_send: Any = None

    def clock(self, now_ns: int) -> ClockMap:
        cmap = self.reader.read() if self.reader is not None else None
        return cmap if cmap is not None else not_ready(now_ns)

    def handle_datagram(self, data: bytes, addr: Any, rx_ns: int | None, admitted: Any = None) -> None:
        if rx_ns is None:
            self.extra["rx_without_kernel_timestamp"] += 1
            rx_ns = time.time_ns()
        clock = self.clock(rx_ns)
        if self.cookie_keys is not None:
            self.server.cookies = self.cookie_keys.refresh(time.monotonic())
        client = _client_bytes(addr[0])
        if admitted is None:  # counted by the server here (else by the fast path, which notes its clients itself)
            self.clients.add(client_key(client), time.monotonic_ns())
        result = self.server.handle(data, client, addr[1], rx_ns, clock, admitted)
        if isinstance(result, Drop):
            return
        tx_ns = time.time_ns()  # as late as possible: right before the reply leaves
        wire = self.server.finalize(result, tx_ns, clock)
        want_tx = result.wants_tx_timestamp
        try:
            self.sock.sendmsg([wire], TX_TIMESTAMP_CMSG if want_tx else [], 0, addr)
        except OSError as exc:
            log.debug("send to %s failed: %s", addr, exc)
            return
        self.server.sent(result, tx_ns)
        if not want_tx:
            return
        if self.after_send is not None:
            self.after_send(result.rx_key)
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
                # Its origin may be one of our receive timestamps (interleaved): the client may be answering a reply
                # of this very batch, whose kernel transmit timestamp is already on the error queue.
                self.drain_errqueue()
            self.handle_datagram(data, addr, _timestamp_ns(anc))
            handled += 1
        return handled

    def drain_errqueue(self) -> None:
        """Kernel transmit timestamps of earlier replies: keep them for interleaved answers."""
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
        c = self.server.counters
        values = {"requests": c.requests, "replies": c.replies, "interleaved": c.interleaved,
                  "authenticated": c.authenticated, "kod_rate": c.kod["RATE"], "kod_deny": c.kod["DENY"],
                  "kod_rstr": c.kod["RSTR"], "crypto_nak": c.kod["CRYPTO-NAK"], "nts": c.nts,
                  "nts_nak": c.kod["NTSN"], "heartbeat_ns": time.time_ns(),
                  "pid": os.getpid(), **self.extra}
        for reason, count in c.drops.items():
            name = "drop_mode" if reason.startswith("mode-") else "drop_" + reason.replace("-", "_")
            values[name] = values.get(name, 0) + count
        return values

    def serve(self, should_stop: Any, publish_every_s: float = 0.5) -> None:
        poller = select.poll()
        poller.register(self.sock, select.POLLIN | select.POLLERR)
        next_publish = 0.0
        while not should_stop():
            for _fd, events in poller.poll(200):
                if events & select.POLLERR:
                    self.drain_errqueue()
                if events & select.POLLIN:
                    self.receive_batch()
            now = time.monotonic()
            if self.reader is not None and now >= next_publish:
                self.publish()
                next_publish = now + publish_every_s

    def publish(self, counters: dict[str, int] | None = None) -> None:
        """Counters (the server's unless given) and the busiest clients of the last minute, to shared memory."""
        assert self.reader is not None
        self.reader.write_counters(self.counters() if counters is None else counters)
        self.reader.write_clients(self.clients.top(CLIENT_SLOTS, time.monotonic_ns()))


def _opt_id(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancdata:
        if (level, kind) in ((socket.IPPROTO_IP, IP_RECVERR), (socket.IPPROTO_IPV6, IPV6_RECVERR)) and len(data) >= 16:
            _errno, origin, _type, _code, _pad, _info, ident = struct.unpack_from("=IBBBBII", data)
            if origin == SO_EE_ORIGIN_TIMESTAMPING:
                return ident
    return None


def worker_main(index: int, shm_name: str, listen: str, port: int, config: dict[str, Any], keys_path: str,
                fast_path: bool, workers: int = 1, nts_keys_path: str = "") -> None:
    """Entry point of a worker process (spawned by the appliance); ``workers``: how many share the port."""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s ntp-worker-{index}: %(message)s")
    die_with_parent()
    stopping = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stopping.update(now=True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the appliance decides when workers stop
    keys = load_keys_file(keys_path) if keys_path else None
    cookie_keys = None
    if nts_keys_path:
        from pathlib import Path

        from appliance.edge.ntp.ntske import JarFile

        cookie_keys = JarFile(Path(nts_keys_path))
    server = NtpServer(ServerConfig(**config), keys, cookie_keys.jar if cookie_keys else None)
    reader = ClockReader(shm_name, index, workers)
    sock = open_socket(listen, port, workers=workers)
    worker = Worker(sock, server, reader, cookie_keys)
    log.info("serving NTP on %s port %d (pid %d, %s)", listen, port, os.getpid(),
             "fast path" if fast_path else "python path")
    try:
        if fast_path:
            from appliance.edge.ntp.fast import serve_fast

            serve_fast(worker, lambda: stopping["now"])  # writes the merged counters itself, last time included
        else:
            worker.serve(lambda: stopping["now"])
            worker.publish()
    finally:
        sock.close()
        reader.close()


def config_dict(config: ServerConfig) -> dict[str, Any]:
    return asdict(config)
