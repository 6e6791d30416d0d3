"""The native sender's Delay_Req answers (edge/ptp/_syncsend.c set_delay) over loopback: a registered client's
Delay_Req is answered with the Delay_Resp the port would send (its receive time on the served clock); anything it may
not answer -- a client without a grant, the port not MASTER, a request with a suffix -- comes back to Python whole
with its receive timestamp; a client over its rate is dropped and counted; bad arguments are refused clearly."""

from __future__ import annotations

import os
import select
import socket
import time

import pytest

from appliance.edge.ptp import native_sync
from appliance.edge.ptp.transport import SO_TIMESTAMPING, SOF_OPT_ID, _flags
from appliance.protocol.ptp import codec as c

if not native_sync.available():
    pytest.fail("the native Sync sender was not built (pip install -e . builds it)")

from appliance.edge.ptp._syncsend import SyncSender  # noqa: E402

TAI_AHEAD_NS = 37_000_000_000
IDENTITY = c.PortIdentity(bytes.fromhex("0011223344556677"), 1)
CLIENT = c.PortIdentity(bytes.fromhex("a0a1a2a3a4a5a6a7"), 3)
DOMAIN = 44


def _udp(timestamps: bool = False) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if timestamps:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, _flags(False, True) | SOF_OPT_ID)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(2.0)
    return sock


def _port_bytes(p: c.PortIdentity) -> bytes:
    return p.clock_identity + p.port_number.to_bytes(2, "big")


class Rig:
    def __init__(self, rate_per_s: float = 16.0, burst: int = 16) -> None:
        self.event, self.general = _udp(timestamps=True), _udp()
        self.client, self.rx_general = _udp(), _udp()  # the client sends from one; Delay_Resps come to the other
        self.sender = SyncSender(self.event.fileno(), self.general.fileno(), 0,
                                 event_port=self.event.getsockname()[1],
                                 general_port=self.rx_general.getsockname()[1])
        self.sender.set_map(True, 0, TAI_AHEAD_NS, 0.0)
        template = c.encode_timestamped(c.MsgType.DELAY_RESP, DOMAIN, IDENTITY, 0, c.FLAG_UNICAST, 0, 0, 0,
                                        c.PortIdentity(bytes(8), 0))
        self.sender.set_delay(template, rate_per_s, burst)
        self.sender.set_active(True)

    def delay_req(self, seq: int, correction: int = 0, port: c.PortIdentity = CLIENT, suffix: bytes = b"") -> None:
        data = c.encode_timestamped(c.MsgType.DELAY_REQ, DOMAIN, port, seq, c.FLAG_UNICAST, 0x7F, 0, correction)
        self.client.sendto(data + suffix, self.event.getsockname())

    def handed_back(self, n: int) -> list[tuple[bytes, object, int | None]]:
        out: list = []
        deadline = time.monotonic() + 2.0
        while len(out) < n and time.monotonic() < deadline:
            if select.select([self.sender.handoff_fd()], [], [], 0.2)[0]:
                out += self.sender.take_handoff()
        return out

    def quiet(self, seconds: float = 0.2) -> bool:
        self.rx_general.settimeout(seconds)
        try:
            self.rx_general.recv(1500)
            return False
        except TimeoutError:
            return True

    def taken(self, until: str, at_least: int) -> dict:
        """The sender's figures summed over takes until ``until`` reaches ``at_least``: the sender counts an answer
        after sending it, so the client may hold the reply before the count is there (2 s at most)."""
        total: dict = {}
        deadline = time.monotonic() + 2.0
        while True:
            taken = self.sender.take()
            for key, value in taken.items():  # counts add up, lists (delay_seen) join, the rest is the latest
                if isinstance(value, (int, list)) and not isinstance(value, bool) and key in total:
                    total[key] = total[key] + value
                else:
                    total[key] = value
            if total.get(until, 0) >= at_least or time.monotonic() > deadline:
                return total
            time.sleep(0.01)

    def close(self) -> None:
        self.sender.close()
        for sock in (self.event, self.general, self.client, self.rx_general):
            sock.close()


@pytest.fixture
def rig():
    r = Rig()
    yield r
    r.close()


def test_a_registered_client_gets_the_ports_delay_resp(rig: Rig) -> None:
    rig.sender.add_client(("127.0.0.1", 0), _port_bytes(CLIENT), -3)
    before = time.time_ns()
    rig.delay_req(seq=513, correction=0x1234 << 16)
    resp = c.decode(rig.rx_general.recv(1500))
    after = time.time_ns()
    assert isinstance(resp, c.DelayResp)
    h = resp.header
    assert h.sequence_id == 513 and h.correction == 0x1234 << 16 and h.log_interval == -3
    assert h.source_port == IDENTITY and h.domain == DOMAIN and h.flags & c.FLAG_UNICAST
    assert resp.requesting_port == CLIENT
    assert before + TAI_AHEAD_NS <= resp.receive_ts_ns <= after + TAI_AHEAD_NS
    taken = rig.taken("delay_answered", 1)
    assert taken["delay_answered"] == 1 and taken["handed_off"] == 0
    (index, requests, last_seen_ns), = taken["delay_seen"]
    assert requests == 1 and 0 < last_seen_ns <= time.monotonic_ns()


def test_the_answer_is_the_codecs_octet_for_octet(rig: Rig) -> None:
    rig.sender.add_client(("127.0.0.1", 0), _port_bytes(CLIENT), 0)
    rig.delay_req(seq=7, correction=99)
    data = rig.rx_general.recv(1500)
    receive_ns = c.decode(data).receive_ts_ns
    assert data == c.encode_timestamped(c.MsgType.DELAY_RESP, DOMAIN, IDENTITY, 7, c.FLAG_UNICAST, 0, receive_ns, 99,
                                        CLIENT)


def test_what_it_may_not_answer_comes_back_whole(rig: Rig) -> None:
    other = c.PortIdentity(bytes.fromhex("b0b1b2b3b4b5b6b7"), 1)
    rig.sender.add_client(("127.0.0.1", 0), _port_bytes(CLIENT), 0)
    rig.delay_req(seq=1, port=other)  # no grant
    rig.delay_req(seq=2, suffix=bytes(8))  # a suffix: the port decides what it says
    back = rig.handed_back(2)
    assert [c.decode(data[:44]).header.sequence_id for data, _src, _ts in back] == [1, 2]
    for data, source, ts_ns in back:
        assert source == rig.client.getsockname() and ts_ns is not None and abs(ts_ns - time.time_ns()) < 5e9
    assert len(back[1][0]) == 52
    assert rig.quiet()
    rig.sender.set_active(False)  # not MASTER: the port counts it
    rig.delay_req(seq=3)
    assert [c.decode(d).header.sequence_id for d, _s, _t in rig.handed_back(1)] == [3]
    assert rig.quiet()


def test_a_removed_client_is_handed_back(rig: Rig) -> None:
    rig.sender.add_client(("127.0.0.1", 0), _port_bytes(CLIENT), 0)
    rig.delay_req(seq=1)
    rig.rx_general.recv(1500)
    assert rig.sender.remove_client(("127.0.0.1", 0), _port_bytes(CLIENT)) == 1
    rig.delay_req(seq=2)
    assert len(rig.handed_back(1)) == 1 and rig.quiet()
    assert rig.sender.remove_client(("127.0.0.1", 0), _port_bytes(CLIENT)) == 0


def test_over_its_rate_a_client_is_dropped_and_counted() -> None:
    rig = Rig(rate_per_s=0.001, burst=2)
    try:
        rig.sender.add_client(("127.0.0.1", 0), _port_bytes(CLIENT), 0)
        for seq in range(4):
            rig.delay_req(seq)
        assert [c.decode(rig.rx_general.recv(1500)).header.sequence_id for _ in range(2)] == [0, 1]
        assert rig.quiet()
        taken = rig.taken("delay_answered", 2)
        assert taken["delay_answered"] == 2 and taken["delay_rate_limited"] == 2
    finally:
        rig.close()


def test_many_clients_each_answered() -> None:
    rig = Rig()
    try:
        clients = [c.PortIdentity(os.urandom(8), n) for n in range(1, 3001)]
        for p in clients:
            rig.sender.add_client(("127.0.0.1", 0), _port_bytes(p), 0)
        for k, p in enumerate(clients[::100]):
            rig.delay_req(seq=k, port=p)
            assert c.decode(rig.rx_general.recv(1500)).requesting_port == p
        for p in clients[::2]:
            rig.sender.remove_client(("127.0.0.1", 0), _port_bytes(p))
        rig.delay_req(seq=1, port=clients[1])
        assert c.decode(rig.rx_general.recv(1500)).requesting_port == clients[1]
        rig.delay_req(seq=2, port=clients[0])
        assert len(rig.handed_back(1)) == 1
    finally:
        rig.close()


def test_bad_arguments_are_refused(rig: Rig) -> None:
    with pytest.raises(ValueError, match="54-octet"):
        rig.sender.set_delay(bytes(44), 16.0, 16)
    with pytest.raises(ValueError, match="rate"):
        rig.sender.set_delay(bytes(54), -1.0, 16)
    with pytest.raises(ValueError, match="10 octets"):
        rig.sender.add_client(("127.0.0.1", 0), bytes(9), 0)
    with pytest.raises(ValueError, match="not an IP address"):
        rig.sender.add_client(("nowhere", 0), bytes(10), 0)
    with pytest.raises(ValueError, match="log interval"):
        rig.sender.add_client(("127.0.0.1", 0), bytes(10), 300)
