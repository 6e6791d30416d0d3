"""NTP over IPv6 and dual stack: a worker listening on "::" answers ::1 and 127.0.0.1 alike, and an
IPv4 client reaching it through the dual-stack socket (as ::ffff:127.0.0.1) is one client, not two."""

from __future__ import annotations

import multiprocessing
import socket
import time


from appliance.protocol.ntp.packet import decode
from appliance.outputs.ntp.policy import ServerConfig
from appliance.edge.ntp.shm import ClockSegment
from appliance.edge.ntp.worker import config_dict, worker_main
from harness.ntp_harness import host_map, request


def _free_port_v6() -> int:
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.bind(("::1", 0))
        return s.getsockname()[1]


def _query(family: int, host: str, port: int, data: bytes, timeout_s: float = 1.0) -> bytes | None:
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout_s)
        s.sendto(data, (host, port))
        try:
            return s.recv(2048)
        except (TimeoutError, socket.timeout):
            return None


def test_dual_stack_worker_answers_ipv6_and_ipv4_clients() -> None:
    segment = ClockSegment(1)
    segment.publish(host_map())
    port = _free_port_v6()
    config = ServerConfig(rate_per_s=1.0, burst=3)
    proc = multiprocessing.get_context("spawn").Process(
        target=worker_main, daemon=True, args=(0, segment.name, "::", port, config_dict(config), "", 1))
    proc.start()
    try:
        deadline = time.monotonic() + 15
        reply6 = None
        while reply6 is None and time.monotonic() < deadline:
            reply6 = _query(socket.AF_INET6, "::1", port, request(), 0.3)
        assert reply6 is not None and decode(reply6).stratum == 1 and decode(reply6).mode == 4
        # The IPv4 client arrives as ::ffff:127.0.0.1 and is judged (and rate limited) as 127.0.0.1: after its
        # burst of 3, it gets a KoD RATE.
        replies4 = [_query(socket.AF_INET, "127.0.0.1", port, request()) for _ in range(4)]
        assert all(r is not None for r in replies4)
        assert [decode(r).stratum for r in replies4[:3]] == [1, 1, 1]
        assert decode(replies4[3]).stratum == 0 and decode(replies4[3]).reference_id == b"RATE"
    finally:
        proc.terminate()
        proc.join(10)
        segment.close()
