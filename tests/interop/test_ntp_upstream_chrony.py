"""NtpUpstream fed by the real poller against real NTP servers on loopback: two chronyd instances serving the host
clock, and one deliberately wrong server.

Two chronyd (``peers.Chronyd``: ``setpriv --bounding-set -sys_time chronyd -x``, so neither can adjust nor gain the
right to adjust this machine's clock) run as servers, ``local stratum 1`` on free loopback ports: their time is the
host clock.  The wrong server is a small UDP responder in this file answering with the host clock plus 30 ms.  Three
servers, of which two agree: the consensus must be the host clock within its uncertainty (the root distances its own
exchanges measured: half their round trips, however long) and the wrong one a named falseticker; with only one
chronyd beside it there is no majority.  Two chronyd rather than a chronyd and a
fake honest server, so that the majority is made of real servers.  A missing chronyd fails the test under CI=true
and skips it elsewhere (``peers.require``).
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Self

import pytest

from appliance.edge.ntp_poller import NtpCrossCheckPoller
from appliance.refs.ntp_select import FALSETICKER, PHI, SURVIVOR, NtpEstimate, NtpUpstream
from appliance.timebase import ns_to_ntp_short, posix_ns_to_ntp64
from harness.peers import Chronyd, eventually
from harness.procs import free_udp_port

pytestmark = [pytest.mark.interop]
MS = 1_000_000
TIMEOUT_S = 1.0
WRONG_BY_NS = 30 * MS
WRONG_DISPERSION_NS = 1 * MS  # the root dispersion the wrong server advertises
ROUNDS = 4
# ntplib carries timestamps as float seconds since 1900 (about a microsecond apart) and the root dispersion travels in
# the NTP short format (1/65536 s): the slack on bounds made of what the exchanges measured, not an allowance for load.
SLACK_NS = 100_000


class WrongNtpServer:
    """Answers every mode-3 request on loopback with a stratum-1 reply carrying the host clock plus ``offset_ns``
    (root dispersion ``WRONG_DISPERSION_NS``, echoing the request's transmit timestamp)."""

    def __init__(self, offset_ns: int) -> None:
        self.offset_ns = offset_ns
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"wrong-ntp-{self.port}", daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not select.select([self.sock], [], [], 0.05)[0]:
                continue
            data, addr = self.sock.recvfrom(2048)
            if len(data) >= 48 and data[0] & 0x7 == 3:
                self.sock.sendto(self._reply(data), addr)

    def _reply(self, request: bytes) -> bytes:
        now = posix_ns_to_ntp64(time.time_ns() + self.offset_ns)
        head = struct.pack("!BBbbII4s", 4 << 3 | 4, 1, 6, -20, 0, ns_to_ntp_short(WRONG_DISPERSION_NS), b"GPS\0")
        return head + struct.pack("!Q", now & ~0xFFFFFFFF) + request[40:48] + struct.pack("!QQ", now, now)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


def _chronyd_server(port: int) -> Chronyd:
    return Chronyd("\n".join([f"port {port}", "bindaddress 127.0.0.1", "allow 127.0.0.1", "local stratum 1"]))


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, str, str]]:
    """Two chronyd serving the host clock and the wrong server, as the poller's server names."""
    port1, port2 = free_udp_port(), free_udp_port()
    with _chronyd_server(port1) as c1, _chronyd_server(port2) as c2, WrongNtpServer(WRONG_BY_NS) as wrong:
        names = (f"127.0.0.1:{port1}", f"127.0.0.1:{port2}", f"127.0.0.1:{wrong.port}")
        for name, chrony in ((names[0], c1), (names[1], c2)):
            probe = NtpCrossCheckPoller([name], 10.0, TIMEOUT_S, lambda host_ns: host_ns, lambda _: None)
            log = chrony.output()
            eventually(lambda p=probe: not p.poll_once()[0].error, 10, f"chronyd answering (log:\n{log})")
        yield names


def _poll(names: tuple[str, ...], served_ahead_ns: int = 0) -> NtpUpstream:
    upstream = NtpUpstream(name="ntp", min_survivors=2, servers=names)
    poller = NtpCrossCheckPoller(names, 10.0, TIMEOUT_S, lambda host_ns: host_ns + served_ahead_ns,
                                 upstream.on_sample)
    for _ in range(ROUNDS):
        samples = poller.poll_once()
        assert all(not s.error for s in samples), samples
    return upstream


def _assert_consensus(upstream: NtpUpstream, est: NtpEstimate, expected_ns: int, polled_for_ns: int) -> None:
    """The consensus (served minus servers) against the truth, ``expected_ns``, within bounds made of what this test's
    own exchanges measured, however long a busy host made their round trips.  The chronyd serve the host clock and
    advertise no root delay or dispersion of their own, so each survivor's pick is within half its exchange's round
    trip of the truth and its interval (its root distance: that, grown at PHI since, plus its jitter) holds the
    truth; so does the truechimers' common interval, and the weighted mean of offsets each within its own distance
    is within the combined distance: the estimate's uncertainty."""
    rows = {row.server: row for row in upstream.servers()}
    for name in est.survivors:
        row = rows[name]
        assert row.delay_ns is not None and row.distance_ns is not None and row.jitter_ns is not None, row
        assert row.distance_ns <= row.delay_ns / 2 + row.jitter_ns + PHI * polled_for_ns + SLACK_NS, row
    low, high = est.intersection_ns
    assert low - SLACK_NS <= expected_ns <= high + SLACK_NS, est
    assert abs(est.offset_ns - expected_ns) <= est.uncertainty_ns + SLACK_NS, est
    assert 0 < est.uncertainty_ns <= max(rows[name].distance_ns for name in est.survivors) + est.jitter_ns, (est, rows)


def test_the_consensus_is_the_host_clock_and_the_wrong_server_a_falseticker(servers: tuple[str, str, str]) -> None:
    chrony1, chrony2, wrong = servers
    started_ns = time.time_ns()
    upstream = _poll(servers)
    now_ns = time.time_ns()
    est = upstream.estimate(now_ns)
    rows = {row.server: row for row in upstream.servers()}
    assert est is not None, (upstream.last_verdict, rows)
    _assert_consensus(upstream, est, 0, now_ns - started_ns)  # served (the host clock) minus the consensus
    assert [f.server for f in est.falsetickers] == [wrong], est
    assert set(est.survivors) == {chrony1, chrony2} and est.system_peer in (chrony1, chrony2)
    assert est.stratum == 1
    assert rows[wrong].state == FALSETICKER and "misses the majority" in rows[wrong].reason
    # The wrong server stamps the host clock plus 30 ms inside the exchange: its pick is within half that exchange's
    # round trip of it, plus the dispersion it advertises.
    assert rows[wrong].delay_ns is not None, rows[wrong]
    assert abs(rows[wrong].offset_ns - WRONG_BY_NS) <= rows[wrong].delay_ns / 2 + WRONG_DISPERSION_NS + SLACK_NS
    for name in (chrony1, chrony2):
        assert rows[name].state == SURVIVOR and rows[name].reach == 2**ROUNDS - 1 and rows[name].polls == ROUNDS
    low, high = est.intersection_ns
    assert low <= est.offset_ns <= high


def test_a_served_time_carried_away_shows_in_the_consensus(servers: tuple[str, str, str]) -> None:
    started_ns = time.time_ns()
    upstream = _poll(servers, served_ahead_ns=50 * MS)
    now_ns = time.time_ns()
    est = upstream.estimate(now_ns)
    assert est is not None, upstream.last_verdict
    _assert_consensus(upstream, est, 50 * MS, now_ns - started_ns)  # the served clock is 50 ms ahead of the servers
    assert [f.server for f in est.falsetickers] == [servers[2]]  # the wrong one is still the odd one out


def test_one_honest_and_one_wrong_server_are_no_majority(servers: tuple[str, str, str]) -> None:
    upstream = _poll((servers[0], servers[2]))
    assert upstream.estimate(time.time_ns()) is None
    assert "no majority" in upstream.last_verdict
