"""The console's connection table (web.admission): caps per client and in all, deadlines per stage, worker slots,
and when a request is whole.  Pure: every instant is passed in."""

from __future__ import annotations

import pytest

from appliance.units import NS_PER_S
from appliance.web.admission import (Admission, Limits, Readiness, Stage, client_of, request_readiness,
                                     without_expect)

LIMITS = Limits(waiting_per_client=3, waiting_total=5, keep_alive_total=2, busy_per_client=2)


def test_a_client_over_its_cap_loses_its_oldest_connection_still_in_the_handshake_first() -> None:
    table = Admission(LIMITS)
    a, _ = table.admit("10.0.0.1", 0)
    b, _ = table.admit("10.0.0.1", 1)
    c, _ = table.admit("10.0.0.1", 2)
    table.move(a, Stage.REQUEST, 3)  # the oldest has finished its handshake: a browser's, more likely than not
    d, evicted = table.admit("10.0.0.1", 4)
    assert evicted == [b]
    assert table.stage(b) is None and table.stage(d) is Stage.HANDSHAKE
    assert table.dropped["evicted"] == 1
    table.move(c, Stage.REQUEST, 5)
    table.move(d, Stage.REQUEST, 5)
    _, evicted = table.admit("10.0.0.1", 6)
    assert evicted == [a]  # none left in the handshake: the oldest waiting for its request


def test_a_flooding_client_never_pushes_out_another_clients_connections() -> None:
    table = Admission(LIMITS)
    other, _ = table.admit("10.0.0.2", 0)
    flood = [table.admit("10.0.0.1", t)[0] for t in range(1, 20)]
    assert table.stage(other) is Stage.HANDSHAKE
    assert sum(table.stage(k) is not None for k in flood) == LIMITS.waiting_per_client


def test_the_total_cap_takes_from_the_client_holding_the_most() -> None:
    table = Admission(LIMITS)
    first_of_many = table.admit("10.0.0.1", 0)[0]
    for t in range(1, 3):
        table.admit("10.0.0.1", t)
    few = [table.admit("10.0.0.2", t)[0] for t in range(3, 5)]
    _, evicted = table.admit("10.0.0.3", 5)
    assert evicted == [first_of_many]
    assert all(table.stage(k) is Stage.HANDSHAKE for k in few)


def test_connections_that_served_a_request_do_not_count_against_the_waiting_cap() -> None:
    table = Admission(LIMITS)
    kept = [table.admit("10.0.0.1", 0)[0] for _ in range(3)]
    for key in kept:
        table.move(key, Stage.IDLE, 1)
    assert table.admit("10.0.0.1", 2)[1] == []


@pytest.mark.parametrize(("stage", "timeout_ns"), [(Stage.REQUEST, LIMITS.request_ns), (Stage.IDLE, LIMITS.idle_ns),
                                                    (Stage.QUEUED, LIMITS.queued_ns)])
def test_each_stage_has_its_own_deadline_from_when_it_began(stage: Stage, timeout_ns: int) -> None:
    table = Admission(LIMITS)
    key, _ = table.admit("10.0.0.1", 0)
    assert table.next_deadline_ns() == LIMITS.handshake_ns
    table.move(key, stage, 7 * NS_PER_S)
    assert table.next_deadline_ns() == 7 * NS_PER_S + timeout_ns
    assert table.expired(7 * NS_PER_S + timeout_ns - 1) == []
    assert table.expired(7 * NS_PER_S + timeout_ns) == [(key, stage)]
    assert table.stage(key) is None and len(table) == 0


def test_a_busy_connection_has_no_deadline_and_timeouts_are_counted_by_stage() -> None:
    table = Admission(LIMITS)
    busy, _ = table.admit("10.0.0.1", 0)
    table.move(busy, Stage.BUSY, 0)
    silent, _ = table.admit("10.0.0.1", 0)
    idle, _ = table.admit("10.0.0.1", 0)
    table.move(idle, Stage.IDLE, 0)
    assert sorted(table.expired(10**15)) == sorted([(silent, Stage.HANDSHAKE), (idle, Stage.IDLE)])
    assert table.stage(busy) is Stage.BUSY and table.next_deadline_ns() is None
    assert table.dropped == {"evicted": 0, "handshake timeout": 1, "request timeout": 0, "queued timeout": 0}


def test_a_client_gets_its_share_of_the_workers_and_its_next_request_starts_when_one_is_free() -> None:
    table = Admission(LIMITS)
    keys = [table.admit("10.0.0.1", 0)[0] for _ in range(3)]
    other, _ = table.admit("10.0.0.2", 0)
    for key in keys[:2]:
        assert table.may_start(key)
        table.move(key, Stage.BUSY, 1)
    assert not table.may_start(keys[2]) and table.may_start(other)
    table.move(keys[2], Stage.QUEUED, 2)
    assert table.move(keys[0], Stage.IDLE, 3) == [keys[2]]  # kept alive: its worker is free
    table.move(keys[2], Stage.BUSY, 3)
    assert table.release(keys[1]) == []  # closed: nothing queued any more
    assert table.release(keys[1]) == []  # twice is harmless


def test_the_keep_alive_limit_counts_idle_connections() -> None:
    table = Admission(LIMITS)
    for _ in range(2):
        assert table.can_keep_alive()
        table.move(table.admit("10.0.0.1", 0)[0], Stage.IDLE, 0)
    assert not table.can_keep_alive()


@pytest.mark.parametrize(("address", "client"), [
    ("192.0.2.7", "192.0.2.7"), ("::ffff:192.0.2.7", "192.0.2.7"), ("2001:db8:1:2:a::1", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff::9", "2001:db8:1:2::/64"), ("fe80::1%eth0", "fe80::/64"), ("/run/console.sock", "/run/console.sock")])
def test_a_client_is_an_ipv4_address_or_an_ipv6_64(address: str, client: str) -> None:
    assert client_of(address) == client


HEAD = b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"


@pytest.mark.parametrize(("buffer", "readiness"), [
    (b"", Readiness.MORE),
    (b"GET /login HTTP/1.1\r\nHost: x\r\n", Readiness.MORE),
    (b"GET /login HTTP/1.1\r\nHost: x\r\n\r\n", Readiness.READY),
    (b"\r\nGET / HTTP/1.1\r\n\r\n", Readiness.READY),
    (b"GET / HTTP/1.1\n\n", Readiness.READY),  # bare line feeds: the parser answers 400
    (HEAD + b"abc", Readiness.MORE),
    (HEAD + b"abcde", Readiness.READY),
    (b"POST / HTTP/1.1\r\ncontent-length: 999999\r\n\r\n", Readiness.BODY_TOO_LARGE),  # refused before it is read
    (b"GET /login HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n", Readiness.BODY_TOO_LARGE),  # whatever the method
    (b"POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", Readiness.BODY_TOO_LARGE),
    (b"POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", Readiness.MORE),
    (b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", Readiness.BAD),
    (b"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n", Readiness.BAD),
    (b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", Readiness.BAD),  # smuggling
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", Readiness.BAD),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n", Readiness.MORE),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", Readiness.MORE),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n", Readiness.READY),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", Readiness.READY),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n", Readiness.BAD),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", Readiness.BAD),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n", Readiness.BODY_TOO_LARGE),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1\r\nx\r\n" * 1001, Readiness.BODY_TOO_LARGE),
    (b"POST / HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", Readiness.CONTINUE),
    (b"POST / HTTP/1.1\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n", Readiness.BODY_TOO_LARGE),
    (b"GET /" + b"a" * 200, Readiness.TOO_LARGE),
    (b"\r\n" * 101, Readiness.TOO_LARGE),
])
def test_a_request_is_whole_when_its_head_and_small_body_are_in(buffer: bytes, readiness: Readiness) -> None:
    assert request_readiness(buffer, head_bytes=200, body_bytes=1000) is readiness


def test_an_answered_expectation_is_taken_out_of_the_request() -> None:
    asked = b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nab"
    assert without_expect(asked) == b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"
    assert request_readiness(without_expect(asked), head_bytes=200, body_bytes=1000) is Readiness.READY
