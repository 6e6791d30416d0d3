"""Unit tests of the sans-I/O NTP server (tests.oracle.ntp_server): every reply field against its docstring."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.oracle import auth_model as auth
from tests.oracle.auth_model import Key, KeyTable, KeyType, Outcome
from appliance.protocol.clockmap import ClockMap, not_ready
from appliance.protocol.limits import Limit
from appliance.protocol.ntp.packet import NtpHeader, decode, refid
from tests.oracle.ntp_server import Drop, NtpServer, Reply, ServerConfig
from appliance.timebase import posix_ns_to_ntp64
from appliance.units import NS_PER_S

H0 = 1_780_000_000 * NS_PER_S  # host clock at the anchor (2026)
SYNC = ClockMap(True, 0, 1, -20, 0x0000_0010, 0x0000_0042, refid("GPS"), H0, H0 + 37 * NS_PER_S + 123_456, 250.0, 37,
                reference_ts=posix_ns_to_ntp64(H0 - NS_PER_S), poll_min=4, generation=7)
UNSYNC = not_ready(H0)
CLIENT, OTHER, DENIED = b"\xc0\x00\x02\x0a", b"\xc0\x00\x02\x0b", b"\xc6\x33\x64\x01"
PORT = 40123
KEYS = KeyTable([Key(1, KeyType.MD5, b"md5secret"), Key(2, KeyType.SHA1, bytes(range(20))),
                 Key(3, KeyType.AES128, bytes.fromhex("2b7e151628aed2a6abf7158809cf4f3c"))])
NO_LIMIT = ServerConfig(rate_per_s=0)


def req(version: int = 4, mode: int = 3, xmt: int = 0x1122334455667788, origin: int = 0, receive: int = 0,
        poll: int = 6) -> bytes:
    return NtpHeader(0, version, mode, 0, poll, -6, 0, 0, bytes(4), 0, origin, receive, xmt).encode()


def answer(server: NtpServer, data: bytes, rx: int = H0 + 5 * NS_PER_S, tx: int | None = None,
           clock: ClockMap = SYNC, client: bytes = CLIENT, port: int = PORT, **kw: object) -> tuple[Reply, bytes]:
    reply = server.handle(data, client, port, rx, clock, **kw)
    assert isinstance(reply, Reply), reply
    return reply, server.finalize(reply, rx + 20_000 if tx is None else tx, clock)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_reply_fields_come_from_the_request_and_the_map(version):
    server = NtpServer(NO_LIMIT)
    rx, tx = H0 + 5 * NS_PER_S, H0 + 5 * NS_PER_S + 30_001
    reply, wire = answer(server, req(version, poll=2), rx, tx)
    h = decode(wire)
    assert len(wire) == 48 and not reply.interleaved and not reply.kod and reply.key is None
    assert (h.version, h.mode, h.leap, h.stratum, h.reference_id) == (version, 4, 0, 1, b"GPS\0")
    assert (h.precision, h.root_delay, h.root_dispersion, h.reference_ts) == (-20, 0x10, 0x42, SYNC.reference_ts)
    assert h.poll == 4  # max(request poll 2, poll_min 4)
    assert h.origin_ts == 0x1122334455667788
    assert h.receive_ts == SYNC.ntp_ts(rx) | 1 and h.receive_ts & 1 == 1
    assert h.transmit_ts == SYNC.ntp_ts(tx) & ~1 and h.transmit_ts & 1 == 0
    assert decode(answer(server, req(version, poll=9))[1]).poll == 9
    assert server.counters.requests == server.counters.replies == 2


def test_unsynchronized_map_is_advertised_as_such():
    h = decode(answer(NtpServer(NO_LIMIT), req(), clock=UNSYNC)[1])
    assert (h.leap, h.stratum, h.reference_id, h.root_dispersion) == (3, 16, b"INIT", 0xFFFFFFFF)


def test_ntpv1_mode_0_is_a_client_request_unless_it_comes_from_port_123():
    server = NtpServer(NO_LIMIT)
    h = decode(answer(server, req(1, 0))[1])
    assert (h.version, h.mode) == (1, 4)
    assert server.handle(req(1, 0), CLIENT, 123, H0, SYNC) == Drop("mode-0")


@pytest.mark.parametrize("version, mode, reason", [(4, 0, "mode-0"), (2, 0, "mode-0"), (4, 1, "mode-1"),
                                                   (4, 2, "mode-2"), (4, 4, "mode-4"), (3, 5, "mode-5"),
                                                   (2, 6, "control-query"), (4, 6, "control-query"),
                                                   (2, 7, "control-query"), (1, 7, "control-query")])
def test_modes_other_than_client_are_dropped(version, mode, reason):
    server = NtpServer(NO_LIMIT)
    assert server.handle(req(version, mode), CLIENT, PORT, H0, SYNC) == Drop(reason)
    assert server.counters.drops == {reason: 1} and server.counters.requests == 1 and server.counters.replies == 0


@pytest.mark.parametrize("data, reason", [
    (b"", "short"), (req()[:47], "short"), (req()[:20], "short"), (req() + bytes(1024 - 48 + 4), "oversize"),
    (req() + bytes(2), "malformed"), (req() + bytes(1), "malformed"),
    (req() + b"\0\0\0\x01", "malformed"),  # a bare key ID is only the crypto-NAK when it is zero
    (req() + bytes(8), "malformed"),  # not a MAC layout, too short for an extension field
    (req(3) + bytes([0, 1, 0, 16]) + bytes(12), "malformed"),  # extension fields need NTPv4
    (req() + bytes([0, 1, 0, 12]) + bytes(12), "malformed"),  # field length below 16
    (req() + bytes([0, 1, 0, 18]) + bytes(14), "malformed"),  # not a multiple of 4 (and 2 bytes too short)
    (req() + bytes([0, 1, 0, 32]) + bytes(12), "malformed"),  # runs past the end
    (bytes([0 << 3 | 3]) + req()[1:], "bad-version"), (bytes([5 << 3 | 3]) + req()[1:], "bad-version"),
    (bytes([7 << 3 | 3]) + req()[1:], "bad-version")], ids=lambda v: f"{len(v)}B" if isinstance(v, bytes) else v)
def test_bad_shapes_are_dropped_with_their_reason(data, reason):
    server = NtpServer(NO_LIMIT)
    assert server.handle(data, CLIENT, PORT, H0, SYNC) == Drop(reason)
    assert server.counters.drops == {reason: 1} and server.counters.requests == 1


def _signed(key: Key, data: bytes | None = None) -> bytes:
    return auth.sign(key, req() if data is None else data)


requests_st = st.one_of(
    st.binary(max_size=1100),
    st.builds(lambda first, body, tail: bytes([first]) + body + tail, st.integers(0, 255), st.binary(min_size=47,
              max_size=47), st.sampled_from([b"", bytes(4), b"\0\0\0\x02", bytes(20), bytes(24), bytes(16),
                                             bytes([0, 2, 0, 16]) + bytes(12), bytes([0, 2, 0, 28]) + bytes(24)])),
    st.builds(lambda key, first: bytes([first]) + _signed(key)[1:], st.sampled_from(list(KEYS.values())),
              st.integers(0, 255)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=requests_st, port=st.sampled_from([123, 40000]), limited=st.booleans(),
       admitted=st.sampled_from([None, Limit.PASS, Limit.KOD]))
def test_any_request_gives_a_drop_or_a_reply_no_larger_than_itself(data, port, limited, admitted):
    server = NtpServer(ServerConfig(rate_per_s=0.5, burst=1) if limited else NO_LIMIT, KEYS)
    for i in range(3):  # the third is over the rate when limited
        result = server.handle(data, CLIENT, port, H0 + i, SYNC, admitted)
        assert isinstance(result, (Reply, Drop))
        if isinstance(result, Reply):
            wire = server.finalize(result, H0 + i + 1000, SYNC)
            assert 48 <= len(wire) <= len(data)
            server.sent(result, H0 + i + 1000)


@pytest.mark.parametrize("action, code", [("deny", "DENY"), ("rstr", "RSTR")])
def test_denied_clients_get_the_configured_kiss_o_death(action, code):
    server = NtpServer(ServerConfig(deny=("198.51.100.0/24",), deny_action=action, rate_per_s=0))
    rx = H0 + 9 * NS_PER_S
    reply, wire = answer(server, req(3, poll=5), rx, client=DENIED)
    h = decode(wire)
    assert reply.kod == code and len(wire) == 48
    assert (h.leap, h.version, h.mode, h.stratum, h.reference_id, h.poll) == (3, 3, 4, 0, code.encode(), 5)
    assert (h.root_delay, h.root_dispersion, h.reference_ts, h.origin_ts) == (0, 0, 0, 0x1122334455667788)
    assert h.receive_ts == SYNC.ntp_ts(rx) | 1
    assert server.counters.kod == {code: 1}
    assert decode(answer(server, req())[1]).stratum == 1  # others are served
    assert decode(answer(server, req(), client=b"\0" * 10 + b"\xff\xff" + DENIED)[1]).reference_id == code.encode()


def test_denied_clients_are_dropped_by_default():
    server = NtpServer(ServerConfig(deny=("198.51.100.0/24",), rate_per_s=0))
    assert server.handle(req(), DENIED, PORT, H0, SYNC) == Drop("denied")
    assert server.counters.drops == {"denied": 1} and server.counters.replies == 0


def test_rate_limit_allows_a_burst_then_one_kod_rate_a_second_then_drops():
    server = NtpServer(ServerConfig(rate_per_s=1, burst=3))
    results = [server.handle(req(), CLIENT, PORT, H0 + i * 1000, SYNC) for i in range(8)]
    assert [type(r).__name__ for r in results[:3]] == ["Reply"] * 3 and not any(r.kod for r in results[:3])
    kod = results[3]
    assert isinstance(kod, Reply) and kod.kod == "RATE"
    h = decode(server.finalize(kod, H0 + 5000, SYNC))
    assert (h.leap, h.stratum, h.reference_id, h.origin_ts) == (3, 0, b"RATE", 0x1122334455667788)
    assert results[4:] == [Drop("rate-limited")] * 4
    assert isinstance(server.handle(req(), OTHER, PORT, H0 + 9000, SYNC), Reply)  # another client: unaffected
    later = server.handle(req(), CLIENT, PORT, H0 + NS_PER_S + 8000, SYNC)  # one token refilled after a second
    assert isinstance(later, Reply) and not later.kod
    assert server.counters.kod == {"RATE": 1} and server.counters.drops == {"rate-limited": 4}
    assert server.counters.requests == 10 and server.counters.replies == 6


@pytest.mark.parametrize("key_id", [1, 2, 3])
def test_signed_requests_get_replies_signed_with_the_same_key(key_id):
    server = NtpServer(NO_LIMIT, KEYS)
    data = _signed(KEYS[key_id])
    reply, wire = answer(server, data)
    assert reply.key == KEYS[key_id] and len(wire) == len(data)
    verdict = auth.verify(KEYS, wire)
    assert verdict.outcome is Outcome.OK and verdict.key_id == key_id
    assert decode(wire).origin_ts == 0x1122334455667788 and server.counters.authenticated == 1


@pytest.mark.parametrize("table, data", [
    (KEYS, _signed(KEYS[1])[:-1] + b"\0"),  # bad MAC
    (KEYS, _signed(KEYS[2])[:-1] + b"\0"),
    (KEYS, req() + (9).to_bytes(4, "big") + bytes(16)),  # unknown key
    (KEYS, req() + (1).to_bytes(4, "big") + bytes(20)),  # an MD5 key with a SHA1-sized digest
    (None, _signed(KEYS[3]))])  # no keys at all
def test_bad_macs_and_unknown_keys_get_a_crypto_nak(table, data):
    server = NtpServer(NO_LIMIT, table)
    reply, wire = answer(server, data)
    assert reply.crypto_nak and reply.key is None
    assert len(wire) == 52 and wire[48:] == bytes(4)
    h = decode(wire)
    assert (h.mode, h.stratum, h.origin_ts) == (4, 1, 0x1122334455667788)
    assert server.counters.kod == {"CRYPTO-NAK": 1} and server.counters.authenticated == 0


def test_a_crypto_nak_from_a_client_is_answered_unsigned():
    reply, wire = answer(NtpServer(NO_LIMIT, KEYS), req() + bytes(4))
    assert len(wire) == 48 and not reply.crypto_nak and reply.key is None


def test_signed_kod_rate_over_the_rate():
    server = NtpServer(ServerConfig(rate_per_s=1, burst=1), KEYS)
    answer(server, _signed(KEYS[3]))
    reply, wire = answer(server, _signed(KEYS[3]))
    assert reply.kod == "RATE" and len(wire) == 68 and auth.verify(KEYS, wire).outcome is Outcome.OK


@pytest.mark.parametrize("fields", [[16], [28], [16, 20, 936]])
def test_extension_fields_are_ignored_and_the_reply_carries_none(fields):
    data = req() + b"".join(bytes([0x01, 0x04]) + n.to_bytes(2, "big") + bytes(n - 4) for n in fields)
    reply, wire = answer(NtpServer(NO_LIMIT, KEYS), data)
    assert len(wire) == 48 and reply.key is None and not reply.crypto_nak and decode(wire).stratum == 1


def _exchange(server: NtpServer, data: bytes, rx: int, tx: int, kernel_tx: int | None = None) -> NtpHeader:
    reply, wire = answer(server, data, rx, tx)
    server.sent(reply, tx)
    if kernel_tx is not None:
        server.kernel_tx(reply.rx_key, kernel_tx)
    return decode(wire)


def test_interleaved_reply_carries_the_kernel_transmit_time_of_the_previous_reply_once():
    server = NtpServer(NO_LIMIT)
    rx_a, tx_a, ktx_a = H0 + NS_PER_S, H0 + NS_PER_S + 40_000, H0 + NS_PER_S + 47_000
    a = _exchange(server, req(xmt=0xA), rx_a, tx_a, ktx_a)
    rx_b = H0 + 3 * NS_PER_S
    b_req = req(xmt=0xB, origin=a.receive_ts, receive=0xC1)  # chrony: receive = its rx time of reply A
    reply, wire = answer(server, b_req, rx_b, H0 + 4 * NS_PER_S)
    b = decode(wire)
    assert reply.interleaved and server.counters.interleaved == 1
    assert b.origin_ts == 0xC1  # the request's receive field
    assert b.receive_ts == SYNC.ntp_ts(rx_b) | 1
    assert b.transmit_ts == SYNC.ntp_ts(ktx_a) & ~1 != a.transmit_ts
    server.sent(reply, H0 + 4 * NS_PER_S)
    again = decode(answer(server, req(xmt=0xD, origin=a.receive_ts, receive=0xC1))[1])
    assert again.origin_ts == 0xD  # only once: basic now
    chained = decode(answer(server, req(xmt=0xE, origin=b.receive_ts, receive=0xC2))[1])
    assert chained.origin_ts == 0xC2 and chained.transmit_ts == SYNC.ntp_ts(H0 + 4 * NS_PER_S) & ~1


def test_without_a_kernel_timestamp_the_daemon_transmit_time_is_used():
    server = NtpServer(NO_LIMIT)
    a = _exchange(server, req(), H0, H0 + 40_000)
    server.kernel_tx(a.receive_ts ^ 2, H0 + 99_000)  # someone else's: ignored
    b = decode(answer(server, req(xmt=2, origin=a.receive_ts, receive=3))[1])
    assert b.transmit_ts == a.transmit_ts and b.origin_ts == 3


@pytest.mark.parametrize("version, receive, known", [(3, 5, True), (4, 0x1122334455667788, True), (4, 5, False)])
def test_requests_that_are_not_interleaved_get_basic_replies(version, receive, known):
    server = NtpServer(NO_LIMIT)
    a = _exchange(server, req(), H0, H0 + 40_000, H0 + 45_000)
    origin = a.receive_ts if known else a.receive_ts ^ 2
    reply, wire = answer(server, req(version, origin=origin, receive=receive))
    assert not reply.interleaved and decode(wire).origin_ts == 0x1122334455667788


def test_kods_and_crypto_naks_are_not_kept_for_interleaving():
    server = NtpServer(ServerConfig(rate_per_s=1, burst=2), KEYS)
    _exchange(server, req(), H0, H0 + 1000)
    nak = _exchange(server, _signed(KEYS[1])[:-1] + b"\0", H0 + 2000, H0 + 3000, H0 + 3500)
    kod = _exchange(server, req(), H0 + 4000, H0 + 5000, H0 + 5500)
    assert kod.reference_id == b"RATE" and len(server._tx) == 1
    later = NtpServer(NO_LIMIT, KEYS)
    later._tx = server._tx
    for h in (kod, nak):
        assert not answer(later, req(origin=h.receive_ts, receive=1))[0].interleaved


def test_interleaved_table_is_bounded():
    server = NtpServer(ServerConfig(rate_per_s=0, interleaved_table=2))
    first, *_ = [_exchange(server, req(), H0 + i * 1000, H0 + i * 1000 + 500) for i in range(3)]
    assert len(server._tx) == 2
    assert not answer(server, req(origin=first.receive_ts, receive=1))[0].interleaved


def test_admitted_requests_skip_access_rate_and_counting():
    server = NtpServer(ServerConfig(deny=("198.51.100.0/24",), deny_action="deny", rate_per_s=1, burst=1))
    before = server.limiter.counters()
    reply, wire = answer(server, req(), client=DENIED, admitted=Limit.PASS)
    assert not reply.kod and decode(wire).stratum == 1
    kod, _ = answer(server, req(), client=DENIED, admitted=Limit.KOD)
    assert kod.kod == "RATE"
    assert server.handle(req(4, 6), DENIED, PORT, H0, SYNC, Limit.PASS) == Drop("control-query")  # shape still
    assert server.limiter.counters() == before
    assert server.counters.requests == 0 and server.counters.replies == 2
