"""Real NTP worker processes on loopback, without the rest of the appliance, and a tiny UDP client.

``NtpWorker`` creates a ClockSegment, publishes a ClockMap anchored at the current host time (synchronized, stratum
1, refid GPS, rate 0: the served clock *is* the host clock), spawns ``worker_main`` (once, or as several workers
sharing the port) with the ``spawn`` start method on 127.0.0.1 at a free port, and waits until it answers.
(``tests/oracle/inprocess.py`` runs the data plane, or its executable model, in this process, a step at a time.)  Test traffic stays on loopback (any 127.0.0.0/8 source works) and never touches port 123.
"""

from __future__ import annotations

import multiprocessing
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance.protocol.clockmap import ClockMap
from appliance.protocol.ntp.packet import HEADER_LEN, MODE_CLIENT, NtpHeader, decode, refid
from appliance.outputs.ntp.policy import ServerConfig
from appliance.edge.ntp.shm import ClockSegment
from appliance.edge.ntp.worker import config_dict, worker_main
from appliance.timebase import ns_to_ntp_short, posix_ns_to_ntp64
from appliance.units import NS_PER_S

TAI_UTC_S = 37
PROBE_SOURCE = "127.0.0.254"  # the readiness probe's address; tests use others
SETTLE_NS = 50_000_000


def host_map(host_ns: int | None = None, **changes: Any) -> ClockMap:
    """A synchronized stratum-1 GPS map on which the served clock equals the host clock."""
    now = time.time_ns() if host_ns is None else host_ns
    fields: dict[str, Any] = dict(valid=True, leap_indicator=0, stratum=1, precision=-20, root_delay=0,
                                  root_dispersion=ns_to_ntp_short(20_000), reference_id=refid("GPS"),
                                  host_anchor_ns=now, served_anchor_tai_ns=now + TAI_UTC_S * NS_PER_S,
                                  rate_ppb=0.0, tai_utc_s=TAI_UTC_S,
                                  reference_ts=posix_ns_to_ntp64(now // NS_PER_S * NS_PER_S), generation=1)
    fields.update(changes)
    return ClockMap(**fields)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(version: int = 4, mode: int = MODE_CLIENT, transmit: int | None = None, origin: int = 0,
            receive: int = 0, poll: int = 6) -> bytes:
    """A 48-byte client request; the transmit field is random (as chrony's) unless given."""
    xmt = random.getrandbits(64) if transmit is None else transmit
    return NtpHeader(0, version, mode, 0, poll, -20, 0, 0, bytes(4), 0, origin, receive, xmt).encode()


class Client:
    """A UDP socket on a loopback source address, with a receive timeout."""

    def __init__(self, port: int, source: str = "127.0.0.1", timeout_s: float = 1.0, owner: NtpWorker | None = None):
        self.port = port
        self.owner = owner  # counts the datagrams sent, so that the worker's counters can be awaited
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((source, 0))
        self.sock.settimeout(timeout_s)

    def send(self, data: bytes) -> None:
        self.sock.sendto(data, ("127.0.0.1", self.port))
        if self.owner is not None:
            self.owner.note_datagram()

    def recv(self, timeout_s: float | None = None) -> bytes | None:
        if timeout_s is not None:
            self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(2048)
        except (TimeoutError, socket.timeout):
            return None

    def pending(self) -> list[bytes]:
        """Whatever has already arrived, without waiting."""
        out = []
        timeout = self.sock.gettimeout()
        self.sock.setblocking(False)  # with a timeout set, Python would wait for it even with MSG_DONTWAIT
        try:
            while True:
                out.append(self.sock.recv(2048))
        except BlockingIOError:
            return out
        finally:
            self.sock.settimeout(timeout)

    def query(self, data: bytes, timeout_s: float = 1.0) -> bytes | None:
        """Send and wait for the reply whose origin is this request's transmit field (others are discarded)."""
        self.send(data)
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            reply = self.recv(left)
            if reply is None:
                return None
            if len(reply) >= HEADER_LEN and len(data) >= HEADER_LEN and reply[24:32] in (data[40:48], data[32:40]):
                return reply
        return None

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class NtpWorker:
    """``workers`` worker processes (``worker_main``) sharing 127.0.0.1:port, fed by their own clock segment."""

    def __init__(self, config: ServerConfig = ServerConfig(), keys_path: str | Path = "",
                 clock: ClockMap | None = None, workers: int = 1):
        self.config = config
        self.keys_path = str(keys_path)
        self.workers = workers
        self.segment = ClockSegment(workers)
        self.segment.publish(clock or host_map())
        self.datagrams = 0  # sent by this worker's clients, beside the readiness probe
        self.last_send_ns = 0
        self.port = free_udp_port()
        ctx = multiprocessing.get_context("spawn")
        self.processes = [ctx.Process(target=worker_main, daemon=True, name=f"ntp-test-worker-{self.port}-{i}",
                                      args=(i, self.segment.name, "127.0.0.1", self.port, config_dict(config),
                                            self.keys_path, workers)) for i in range(workers)]

    def start(self, timeout_s: float = 15.0) -> NtpWorker:
        """Start the processes, wait for their first counter rows (their sockets are bound), then until one probe
        from PROBE_SOURCE is answered: the probe is the first request."""
        try:
            for process in self.processes:
                process.start()
            self.wait_counters(lambda _: all(self.segment.counters(i)["pid"] == p.pid
                                             for i, p in enumerate(self.processes)), timeout_s)
            with Client(self.port, PROBE_SOURCE, timeout_s=2.0) as probe:
                if probe.query(request()) is None:
                    raise RuntimeError(f"NTP worker on port {self.port} does not answer")
        except BaseException:
            self.stop()
            raise
        return self

    def counters(self) -> dict[str, int]:
        """The counter row (summed over the workers; the oldest heartbeat)."""
        rows = [self.segment.counters(i) for i in range(self.workers)]
        total = {name: sum(row[name] for row in rows) for name in rows[0]}
        return {**total, "heartbeat_ns": min(row["heartbeat_ns"] for row in rows), "pid": rows[0]["pid"]}

    def wait_counters(self, predicate: Callable[[dict[str, int]], bool], timeout_s: float = 5.0) -> dict[str, int]:
        """The counter row once ``predicate`` holds (rows are published every 0.5 s)."""
        deadline = time.monotonic() + timeout_s
        row = self.counters()
        while not predicate(row):
            if time.monotonic() > deadline or not all(p.is_alive() for p in self.processes):
                raise AssertionError(f"counters did not reach the expected state: {row}")
            time.sleep(0.05)
            row = self.counters()
        return row

    def client(self, source: str = "127.0.0.1", timeout_s: float = 1.0) -> Client:
        return Client(self.port, source, timeout_s, owner=self)

    def note_datagram(self) -> None:
        """One more datagram sent to the worker (``client()`` calls this; call it for other senders)."""
        self.datagrams += 1
        self.last_send_ns = time.time_ns()

    def settled(self, timeout_s: float = 5.0) -> dict[str, int]:
        """The counter row once every datagram sent (and the probe) has been counted, published at least 50 ms after
        the last one was sent: by then the kernel transmit timestamps of the replies have been drained too."""
        return self.wait_counters(lambda row: row["requests"] == self.datagrams + 1 and
                                  row["heartbeat_ns"] >= self.last_send_ns + SETTLE_NS, timeout_s)

    def publish(self, clock: ClockMap) -> None:
        self.segment.publish(clock)

    def stop(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            if process.pid is not None:
                process.join(timeout=5)
                if process.is_alive():
                    process.kill()
                    process.join(timeout=5)
        self.segment.close()

    def __enter__(self) -> NtpWorker:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def extension(n: int) -> bytes:
    """An RFC 7822 extension field of ``n`` bytes (an unassigned type, zero value)."""
    return bytes([0x02, 0x04]) + n.to_bytes(2, "big") + bytes(n - 4)


def fields(reply: bytes) -> NtpHeader:
    return decode(reply)
