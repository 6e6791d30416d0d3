"""Real NTP worker processes on loopback: the data plane as it serves.

The workers are ``worker_main`` itself (see ntp_harness.py), serving a clock map anchored on the host clock, so a
reply's receive timestamp can be checked against the host clock directly.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import ntplib
import pytest

from tests.oracle import auth_model as auth
from tests.oracle.auth_model import Outcome
from appliance.outputs.ntp.policy import ServerConfig
from appliance.timebase import ntp64_to_posix_ns, posix_ns_to_ntp64
from appliance.units import NS_PER_S
from harness.ntp_harness import Client, NtpWorker, extension, fields, host_map, request
from tests.oracle.inprocess import InProcessWorker

KEYS_TEXT = "1 MD5 ASCII:md5-secret\n2 SHA1 HEX:00112233445566778899aabbccddeeff00112233\n" \
            "3 AES128 HEX:2b7e151628aed2a6abf7158809cf4f3c\n"
KEYS = auth.parse_keys(KEYS_TEXT)
TIMING = ("heartbeat_ns", "pid", "fast_path", "slow_path")  # not decisions


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory):
    (path := tmp_path_factory.mktemp("ntp") / "ntp.keys").write_text(KEYS_TEXT)
    return path


@pytest.fixture(scope="module")
def server(keys_file):
    with NtpWorker(ServerConfig(rate_per_s=0), keys_file) as worker:
        yield worker


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after if k not in TIMING and after[k] != before[k]}


def test_basic_request_gets_a_correct_reply(server):
    with server.client() as client:
        for version in (1, 2, 3, 4):
            data = request(version, mode=0 if version == 1 else 3)
            before = time.time_ns()
            wire = client.query(data)
            after = time.time_ns()
            assert wire is not None and len(wire) == 48
            h = fields(wire)
            assert (h.leap, h.version, h.mode, h.stratum, h.reference_id) == (0, version, 4, 1, b"GPS\0")
            assert (h.precision, h.root_delay, h.poll) == (-20, 0, 6) and 0 < h.root_dispersion < 10
            assert h.origin_ts == int.from_bytes(data[40:48], "big")
            assert h.receive_ts & 1 == 1 and h.transmit_ts & 1 == 0
            rx, tx = ntp64_to_posix_ns(h.receive_ts, before), ntp64_to_posix_ns(h.transmit_ts, before)
            assert before - 2_000_000 <= rx <= tx <= after + 2_000_000  # served clock = host clock
            assert rx - ntp64_to_posix_ns(h.reference_ts, before) < 3 * NS_PER_S
    stats = ntplib.NTPClient().request("127.0.0.1", version=4, port=server.port, timeout=2)
    server.note_datagram()
    assert (stats.leap, stats.stratum, stats.mode, stats.ref_id) == (0, 1, 4, 0x47505300)
    # Served clock = host clock: the offset is within half this exchange's own round trip (and the bound it
    # advertises), however long a busy host made that round trip.
    assert stats.delay >= 0 and abs(stats.offset) <= stats.delay / 2 + stats.root_dispersion + 1e-4


BAD = {  # datagram -> the counter its drop goes to
    b"": "drop_short", request()[:47]: "drop_short", request()[:12]: "drop_short",
    request() + bytes(1028 - 48): "drop_oversize", request() + bytes(1500 - 48): "drop_oversize",
    request() + bytes(2): "drop_malformed", request() + b"\0\0\0\x07": "drop_malformed",
    request(3) + bytes([0, 1, 0, 16]) + bytes(12): "drop_malformed", request() + bytes([0, 1, 0, 12, 0, 0, 0, 0]):
    "drop_malformed", request(0): "drop_bad_version", request(5): "drop_bad_version", request(7): "drop_bad_version",
    request(2, 6): "drop_control_query", request(4, 6): "drop_control_query", request(2, 7): "drop_control_query",
    request(4, 1): "drop_mode", request(4, 2): "drop_mode", request(4, 5): "drop_mode", request(4, 4): "drop_mode",
    request(4, 0): "drop_mode"}
BAD_COUNTS = dict(Counter(BAD.values()))


def test_bad_packets_get_no_reply_and_are_counted(server):
    before = server.settled()
    with server.client() as client:
        for data in BAD:
            client.send(data)
        good = request()
        client.send(good)
        first = client.recv(2.0)  # replies leave in order: anything answered among BAD would come first
        assert first is not None and fields(first).origin_ts == int.from_bytes(good[40:48], "big")
        assert client.pending() == []
    assert delta(server.settled(), before) == {"requests": len(BAD) + 1, "replies": 1,
                                                **BAD_COUNTS}


@pytest.fixture(scope="module")
def limited():
    with NtpWorker(ServerConfig(rate_per_s=0.1, burst=4)) as worker:
        yield worker


def test_a_flood_gets_one_kod_rate_while_another_client_is_served(limited):
    before = limited.settled()
    with limited.client("127.0.0.1") as flood, limited.client("127.0.0.2") as other:
        sent = [request(poll=3) for _ in range(12)]
        for i, data in enumerate(sent):
            flood.send(data)
            if i % 4 == 3:
                assert fields(other.query(request())).stratum == 1
        replies = [fields(r) for r in flood.pending()]
    assert len(replies) == 5
    kods = [h for h in replies if h.stratum == 0]
    assert len(kods) == 1 and [h.origin_ts for h in replies] == [int.from_bytes(d[40:48], "big") for d in sent[:5]]
    kod = kods[0]
    assert (kod.leap, kod.mode, kod.reference_id, kod.poll, kod.root_dispersion) == (3, 4, b"RATE", 3, 0)
    assert kod.receive_ts & 1 == 1 and kod.transmit_ts & 1 == 0 and kod is replies[4]
    assert delta(limited.settled(), before) == {"requests": 15, "replies": 8, "kod_rate": 1, "drop_rate_limited": 7,
                                  }


@pytest.fixture(scope="module", params=["drop", "deny", "rstr"])
def denying(request):
    config = ServerConfig(deny=("127.0.0.3/32", "127.0.1.0/24"), deny_action=request.param, rate_per_s=0)
    with NtpWorker(config) as worker:
        yield worker


def test_deny_rules(denying):
    action = denying.config.deny_action
    before = denying.settled()
    with denying.client("127.0.0.3") as denied, denying.client("127.0.1.9") as also, denying.client() as ok:
        data = request(3, poll=7)
        denied.send(request() + b"\0\0\0\x07")  # malformed: dropped before the access rules are consulted
        denied.send(data)
        also.send(request())
        assert fields(ok.query(request())).stratum == 1
        got, also_got = denied.pending(), also.pending()
    if action == "drop":
        assert got == [] and also_got == []
        assert delta(denying.settled(), before) == {"requests": 4, "replies": 1, "drop_denied": 2,
                                                     "drop_malformed": 1}
        return
    code = action.upper()
    assert len(got) == len(also_got) == 1 and len(got[0]) == 48
    h = fields(got[0])
    assert (h.leap, h.version, h.mode, h.stratum, h.reference_id, h.poll) == (3, 3, 4, 0, code.encode(), 7)
    assert (h.origin_ts, h.reference_ts, h.root_delay) == (int.from_bytes(data[40:48], "big"), 0, 0)
    assert fields(also_got[0]).reference_id == code.encode()
    assert delta(denying.settled(), before) == {"requests": 4, "replies": 3, f"kod_{action}": 2,
                                                 "drop_malformed": 1}


def test_published_maps_are_followed_and_requests_counted_once(server):
    before = server.settled()
    server.publish(host_map(valid=False, leap_indicator=3, stratum=16, reference_id=b"INIT", generation=2))
    try:
        with server.client() as client:
            h = fields(client.query(request()))
            assert (h.leap, h.stratum, h.reference_id) == (3, 16, b"INIT")
            client.send(request(4, 6))
            assert fields(client.query(request(2))).version == 2
            server.publish(host_map(leap_indicator=1, leap_delta_s=1, leap_at_tai_ns=0, generation=3))
            sent = time.time_ns()
            h, now = fields(client.query(request())), time.time_ns()  # a leap pending at no instant: no shift
            # Served clock = host clock: received within the exchange, however long a busy host made it.
            assert h.leap == 1 and sent - 2_000_000 <= ntp64_to_posix_ns(h.receive_ts, now) <= now + 2_000_000
    finally:
        server.publish(host_map(generation=4))
    assert delta(server.settled(), before) == {"requests": 4, "replies": 3, "drop_control_query": 1}


@pytest.mark.parametrize("key_id", [1, 2, 3], ids=["MD5", "SHA1", "AES128"])
def test_authenticated_requests_get_signed_replies(server, key_id):
    before = server.settled()
    with server.client() as client:
        data = auth.sign(KEYS[key_id], request())
        wire = client.query(data)
        assert wire is not None and len(wire) == len(data)
        verdict = auth.verify(KEYS, wire)
        assert verdict.outcome is Outcome.OK and verdict.key_id == key_id
        assert fields(wire).stratum == 1
        for bad in (data[:-1] + bytes([data[-1] ^ 1]), request() + (77).to_bytes(4, "big") + bytes(16)):
            nak = client.query(bad)
            assert nak is not None and len(nak) == 52 and nak[48:] == bytes(4) and fields(nak).mode == 4
    assert delta(server.settled(), before) == {"requests": 3, "replies": 3, "authenticated": 1, "crypto_nak": 2}


@pytest.mark.parametrize("key_id", [None, 1], ids=["bare", "MD5"])
def test_interleaved_reply_carries_the_kernel_transmit_time(server, key_id):
    """As chrony's interleaved client: the first reply (origin 0) asks no kernel timestamp, so the second request is
    answered with that reply's daemon transmit time; from then on each reply's kernel transmit timestamp is kept and
    the next request gets it."""
    sign = (lambda d: auth.sign(KEYS[key_id], d)) if key_id else (lambda d: d)
    before = server.settled()
    with server.client() as client:
        a = fields(client.query(sign(request())))
        b_req = sign(request(origin=a.receive_ts, receive=posix_ns_to_ntp64(time.time_ns())))
        b_wire = client.query(b_req)
        assert b_wire is not None and len(b_wire) == len(b_req)
        b = fields(b_wire)
        assert b.origin_ts == int.from_bytes(b_req[32:40], "big")  # the interleaved reply echoes the receive field
        assert b.transmit_ts == a.transmit_ts  # a's own (daemon) transmit time: the kernel's was not asked for
        local_rx_b = posix_ns_to_ntp64(time.time_ns())
        c_req = sign(request(origin=b.receive_ts, receive=local_rx_b))
        c = fields(client.query(c_req))
        assert c.origin_ts == local_rx_b and c.receive_ts != b.receive_ts and c.receive_ts & 1 == 1
        now = time.time_ns()
        kernel_tx_b = ntp64_to_posix_ns(c.transmit_ts, now)
        # b's kernel transmit time: after a's daemon transmit time (which b carried), and before b's reply was back
        # here (local_rx_b), however long a busy host made that round trip
        assert c.transmit_ts != b.transmit_ts and 0 < kernel_tx_b - ntp64_to_posix_ns(b.transmit_ts, now)
        assert kernel_tx_b <= ntp64_to_posix_ns(local_rx_b, now)
        assert kernel_tx_b < ntp64_to_posix_ns(c.receive_ts, now)
        again = request(origin=b.receive_ts, receive=local_rx_b)
        assert fields(client.query(sign(again))).origin_ts == int.from_bytes(again[40:48], "big")  # only once
        if key_id:
            assert auth.verify(KEYS, b_wire).outcome is Outcome.OK
    assert delta(server.settled(), before) == {"requests": 4, "replies": 4, "interleaved": 2,
                                                "tx_kernel_timestamps": 3, **({"authenticated": 4} if key_id else {})}


@pytest.mark.parametrize("fast", [True, False], ids=["data-plane", "oracle"])
def test_a_request_answering_a_reply_of_the_same_batch_gets_its_kernel_timestamp(fast):
    """In-process and without the poll loop: the only error-queue draining is the receive path's own, so a request
    that arrives right behind the reply it answers must still find that reply's kernel transmit timestamp."""
    with InProcessWorker(fast, ServerConfig(rate_per_s=0)) as worker, Client(worker.port) as client:
        client.send(request())
        worker.step()
        a = fields(client.recv())
        client.send(request(origin=a.receive_ts, receive=5))
        worker.step()
        b_sent = time.time_ns()  # b's reply, and with it its kernel transmit timestamp, is out by now
        b = fields(client.recv())  # interleaved with a's daemon time: a asked for no kernel timestamp
        client.send(request(origin=b.receive_ts, receive=6))
        worker.step()
        c = fields(client.recv())
    now = time.time_ns()
    assert (b.origin_ts, b.transmit_ts) == (5, a.transmit_ts)
    assert c.origin_ts == 6 and c.transmit_ts != b.transmit_ts
    # b's reply left after a's daemon time, and before the step that sent it had returned (however long a busy
    # shared host made the steps)
    assert ntp64_to_posix_ns(b.transmit_ts, now) < ntp64_to_posix_ns(c.transmit_ts, now) <= b_sent


def test_replies_are_never_larger_than_requests(server):
    requests = [request(), request() + bytes(4), auth.sign(KEYS[1], request()), auth.sign(KEYS[2], request()),
                auth.sign(KEYS[3], request())[:-1] + b"\0", request() + extension(16),
                request() + extension(28) + extension(16), request() + extension(976)]
    with server.client() as client:
        for data in requests:
            wire = client.query(data)
            assert wire is not None and len(wire) <= len(data)
            if len(data) not in (68, 72):
                assert len(wire) == 48  # extension fields (and a client's crypto-NAK) are not echoed


def mixed_traffic(worker: NtpWorker, bad: list[bytes], keys: Mapping[int, auth.Key]) -> None:
    """A fixed mix, the same for both paths: ``bad`` packets from 127.0.0.1, a flood of 9 bare requests from
    127.0.0.4 and of 7 signed (key 1) from 127.0.0.5, 3 requests from 127.0.0.3 (deny it), then from 127.0.0.6 a bad
    MAC (key 2), an unknown key, an extension field and an NTPv1 request, and from 127.0.0.7 two interleaved pairs,
    bare and signed (key 3)."""
    rng = random.Random(7)

    def req(**kw: Any) -> bytes:
        return request(transmit=rng.getrandbits(64), **kw)

    with worker.client("127.0.0.1") as c1, worker.client("127.0.0.4") as c4, worker.client("127.0.0.5") as c5, \
            worker.client("127.0.0.6") as c6, worker.client("127.0.0.7") as c7, worker.client("127.0.0.3") as c3:
        for client, packets in ((c1, bad), (c4, [req() for _ in range(9)]),
                                (c5, [auth.sign(keys[1], req()) for _ in range(7)]), (c3, [req() for _ in range(3)])):
            for data in packets:
                client.send(data)
        c6.query(auth.sign(keys[2], req())[:-1] + b"\0")
        c6.query(req() + (9).to_bytes(4, "big") + bytes(16))
        c6.query(req() + extension(16))
        c6.query(req(version=1, mode=0))
        a = fields(c7.query(req()))
        c7.query(req(origin=a.receive_ts, receive=123))
        a = fields(c7.query(auth.sign(keys[3], req())))
        c7.query(auth.sign(keys[3], req(origin=a.receive_ts, receive=456)))



def test_counters_of_a_mixed_traffic_are_the_decisions_taken(keys_file):
    config = ServerConfig(deny=("127.0.0.3/32",), deny_action="rstr", rate_per_s=0.1, burst=4)
    with NtpWorker(config, keys_file) as worker:
        mixed_traffic(worker, list(BAD), KEYS)
        row = {k: v for k, v in worker.settled().items() if k not in TIMING and v}
    expected = {"requests": len(BAD) + 9 + 7 + 3 + 4 + 4 + 1, "replies": 5 + 5 + 3 + 4 + 4 + 1,
                "interleaved": 2, "authenticated": 5 + 2, "kod_rate": 2, "kod_rstr": 3, "crypto_nak": 2,
                "drop_rate_limited": 4 + 2, "tx_kernel_timestamps": 2}
    assert row == {**expected, **BAD_COUNTS}
