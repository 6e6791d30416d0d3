"""An NTP worker process: a UDP socket with kernel timestamps, answered by the native data plane.

I/O edge.  Several workers bind the same address with SO_REUSEPORT and the kernel spreads clients over them.  Left to
itself the kernel picks the worker from the 4-tuple, and clients such as chronyd and ntplib send each request from a
fresh source port, so a classic BPF program (SO_ATTACH_REUSEPORT_CBPF) makes it pick by the client's IPv4 address or
IPv6 /64 instead, the rate limiter's key: one client always reaches the same worker, so per-client state (rate
limit, interleaved timestamps) stays consistent.  Receive timestamps come from the kernel (SO_TIMESTAMPING,
software): the moment the packet arrived.  Each reply's transmit timestamp is read just before it is sent, and the
kernel's own transmit timestamp comes back on the socket's error queue (SOF_TIMESTAMPING_OPT_ID numbers the
datagrams) to be kept for interleaved replies.  The data plane (``_fastpath``, driven by ``fast.py``) makes every
decision; this module opens the socket and hands it the policy: the settings, the keys file's keys, the NTS cookie
keys and the clock segment.
"""

from __future__ import annotations

import ctypes
import ipaddress
import logging
import os
import signal
import socket
import struct
import time
from dataclasses import asdict
from typing import Any

from appliance.edge.input_files import load_keys_file
from appliance.outputs.ntp.clients import RecentClients
from appliance.outputs.ntp.policy import ServerConfig
from appliance.protocol.ntp import auth
from appliance.edge.ntp.shm import CLIENT_SLOTS, ClockReader
from appliance.edge.proc import die_with_parent

log = logging.getLogger("appliance.ntp.worker")
SO_TIMESTAMPING = 37
SOF_RX_SOFTWARE, SOF_SOFTWARE = 1 << 3, 1 << 4
SOF_OPT_ID, SOF_OPT_TSONLY = 1 << 7, 1 << 11
# Receive timestamps for every datagram; transmit timestamps only for the replies that ask (the data plane adds a
# per-message control message), so that a busy server does not pay an error-queue message per reply.  The kernel
# numbers (OPT_ID) only the datagrams that ask.
TIMESTAMPING_FLAGS = SOF_RX_SOFTWARE | SOF_SOFTWARE | SOF_OPT_ID | SOF_OPT_TSONLY
SO_ATTACH_REUSEPORT_CBPF = 51
SKF_NET_OFF = -0x100000  # classic BPF: loads relative to the network (IP) header


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


class Worker:
    """A worker's state around its data plane: the socket, the clock segment, the NTS cookie keys and the clients
    the data plane counted (for status)."""

    def __init__(self, sock: socket.socket, config: ServerConfig, reader: ClockReader, keys: auth.KeyTable | None,
                 cookie_keys: Any = None):
        self.sock, self.config, self.reader, self.keys = sock, config, reader, keys
        self.cookie_keys = cookie_keys  # ntske.JarFile: NTS cookie keys, reloaded when the NTS-KE process rotates
        self.clients = RecentClients()  # the busiest clients of the last minute (monotonic ns), for status

    def publish(self, counters: dict[str, int]) -> None:
        """Counters and the busiest clients of the last minute, to shared memory."""
        self.reader.write_counters(counters)
        self.reader.write_clients(self.clients.top(CLIENT_SLOTS, time.monotonic_ns()))


def worker_main(index: int, shm_name: str, listen: str, port: int, config: dict[str, Any], keys_path: str,
                workers: int = 1, nts_keys_path: str = "") -> None:
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
    reader = ClockReader(shm_name, index, workers)
    sock = open_socket(listen, port, workers=workers)
    worker = Worker(sock, ServerConfig(**config), reader, keys, cookie_keys)
    log.info("serving NTP on %s port %d (pid %d)", listen, port, os.getpid())
    try:
        from appliance.edge.ntp.fast import serve_fast

        serve_fast(worker, lambda: stopping["now"])  # publishes the counters itself, last time included
    finally:
        sock.close()
        reader.close()


def config_dict(config: ServerConfig) -> dict[str, Any]:
    return asdict(config)
