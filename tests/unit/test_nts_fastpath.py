"""NTS (RFC 8915) in the native NTP fast path (appliance/edge/ntp/_fastpath.c, _nts.c), against appliance/protocol/
ntp/nts.py and the Python server.

Requests are built here with ``cryptography``'s AES-SIV; replies are opened with it and their cookies with the jar
(``nts.CookieJar``).  Each test drives an in-process worker (harness/ntp_harness.py) one receive step at a
time on a loopback socket: the fast path decides, its counters are the fast path's own, merged as the worker
publishes them.  The cross-check sends the same requests (mutated valid ones, and authentic requests of odd
shapes) to a fast-path worker and a Python-path worker holding the same keys: same drops, same counters, replies
of the same shape.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESSIV
from hypothesis import event, given
from hypothesis import strategies as st

from tests.oracle.ntp_server import ServerConfig
from tests.oracle import nts_model as nts
from tests.oracle.inprocess import InProcessWorker
from tests.props.fuzzing import apply_edits, edits, fuzz

TIMING = {"heartbeat_ns", "pid", "fast_path", "slow_path", "tx_kernel_timestamps", "rx_without_kernel_timestamp"}
C2S, S2C = bytes(range(32)), bytes(range(100, 132))


def jar(*ids: int) -> nts.CookieJar:
    return nts.CookieJar([nts.MasterKey(i, bytes([i]) * nts.MASTER_KEY_LEN, 1000 * i) for i in ids], os.urandom)


def require_nts_in_c() -> None:
    """The data plane is always built with libcrypto (setup.py refuses to build without it)."""
    from appliance.edge.ntp import _fastpath

    assert _fastpath.NTS


def ntp_header(transmit: bytes | None = None, origin: int = 0, receive: int = 0) -> bytes:
    return (bytes([0x23, 0, 6, 0xEC]) + bytes(20) + origin.to_bytes(8, "big") + receive.to_bytes(8, "big")
            + (transmit or os.urandom(8)))


def nts_request(cookie: bytes, c2s: bytes = C2S, placeholders: int = 0, uid: bytes | None = None,
                nonce: bytes | None = None, encrypted: bytes = b"", before_auth: bytes = b"",
                placeholder_len: int = 104, header: bytes | None = None) -> bytes:
    """An NTS request: header, Unique Identifier, cookie, placeholders, ``before_auth`` (other fields), then the
    Authenticator over all of it with ``encrypted`` as its plaintext."""
    body = (header or ntp_header()) + nts._field(nts.EF_UNIQUE_ID, os.urandom(32) if uid is None else uid)
    body += nts._field(nts.EF_COOKIE, cookie)
    body += b"".join(nts._field(nts.EF_COOKIE_PLACEHOLDER, bytes(placeholder_len)) for _ in range(placeholders))
    body += before_auth
    nonce = os.urandom(16) if nonce is None else nonce
    ct = AESSIV(c2s).encrypt(encrypted, [body, nonce])
    auth = struct.pack("!HH", len(nonce), len(ct)) + nonce + bytes(-len(nonce) % 4) + ct
    return body + nts._field(nts.EF_AUTHENTICATOR, auth)


def reply_cookies(reply: bytes, s2c: bytes = S2C) -> list[bytes]:
    """The new cookies of a sealed reply (raises InvalidTag when its authenticator is not the server's)."""
    fields = nts.extension_fields(reply)
    assert fields is not None and [k for k, _, _ in fields] == [nts.EF_UNIQUE_ID, nts.EF_AUTHENTICATOR]
    _, apos, alen = fields[-1]
    parsed = nts._authenticator(reply[apos + 4:apos + alen])
    assert parsed is not None
    nonce, ct = parsed
    plain = AESSIV(s2c).decrypt(ct, [reply[:apos], nonce])
    inner = nts.extension_fields(plain, 0)
    assert inner is not None and all(k == nts.EF_COOKIE for k, _, _ in inner)
    return [plain[p + 4:p + n] for _, p, n in inner]


def uid_of(data: bytes) -> bytes:
    kind, pos, length = nts.extension_fields(data)[0]
    assert kind == nts.EF_UNIQUE_ID
    return data[pos + 4:pos + length]


def counters(worker: InProcessWorker) -> dict[str, int]:
    return {k: v for k, v in worker.counters().items() if k not in TIMING}


def exchange(worker: InProcessWorker, datagrams: list[bytes], source: str = "127.0.0.1") -> list[bytes]:
    """Send, let the worker answer (one step), and collect what came back."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.bind((source, 0))
        client.setblocking(False)
        return worker.exchange(client, datagrams)


class Probe:
    """A worker and the counter changes of what it is sent."""

    def __init__(self, worker: InProcessWorker):
        self.worker = worker

    def ask(self, *datagrams: bytes) -> tuple[list[bytes], dict[str, int]]:
        before = counters(self.worker)
        replies = exchange(self.worker, list(datagrams))
        after = counters(self.worker)
        return replies, {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


@pytest.fixture(scope="module")
def fast() -> Iterator[Probe]:
    require_nts_in_c()
    with InProcessWorker(True, ServerConfig(rate_per_s=0), jar(1, 2)) as worker:
        yield Probe(worker)


def test_a_valid_request_gets_fresh_cookies_sealed_under_the_current_key(fast: Probe) -> None:
    current = jar(1, 2)
    for placeholders in (0, 1, 7):
        data = nts_request(current.seal(C2S, S2C), placeholders=placeholders)
        (reply,), changes = fast.ask(data)
        assert changes == {"requests": 1, "replies": 1, "nts": 1}  # the fast path's own counters
        assert len(reply) == len(data)  # placeholders as long as a cookie: every cookie asked for fits
        assert reply[0] == 0x24 and reply[1] == 1 and reply[12:16] == b"GPS\0" and reply[24:32] == data[40:48]
        assert uid_of(reply) == uid_of(data)
        cookies = reply_cookies(reply)
        assert len(cookies) == 1 + placeholders and len(set(cookies)) == len(cookies)
        assert all(len(c) == nts.cookie_len() and c[:4] == b"\0\0\0\2" for c in cookies)  # under key 2
        assert all(nts.open_cookie(current, c) == (C2S, S2C) for c in cookies)


def test_a_cookie_under_an_older_key_still_held_opens(fast: Probe) -> None:
    old = jar(1).seal(C2S, S2C)
    (reply,), changes = fast.ask(nts_request(old))
    assert changes["nts"] == 1 and reply_cookies(reply)[0][:4] == b"\0\0\0\2"


def test_the_reply_is_never_larger_than_the_request(fast: Probe) -> None:
    """Short placeholders ask for cookies that do not fit: the reply carries as many as fit."""
    for placeholders, placeholder_len in ((7, 12), (3, 40), (1, 12)):
        data = nts_request(jar(2).seal(C2S, S2C), placeholders=placeholders, placeholder_len=placeholder_len)
        (reply,), _ = fast.ask(data)
        fixed = 48 + 36 + 40  # header, UID field, authenticator without cookies
        assert len(reply) <= len(data)
        assert len(reply_cookies(reply)) == min(1 + placeholders, (len(data) - fixed) // 108)


def test_a_bad_cookie_or_authenticator_gets_the_nts_nak(fast: Probe) -> None:
    cookie = jar(2).seal(C2S, S2C)
    tampered = bytes([cookie[0]]) + cookie[1:30] + bytes([cookie[30] ^ 1]) + cookie[31:]
    for data in (nts_request(tampered), nts_request(cookie, c2s=bytes(32)), nts_request(jar(9).seal(C2S, S2C)),
                 nts_request(cookie[:-4]), nts_request(cookie, encrypted=b"\0\1\0\x03")):  # encrypted: no tiling
        (reply,), changes = fast.ask(data)
        assert changes == {"requests": 1, "replies": 1, "nts_nak": 1}
        assert reply[0] >> 6 == 3 and reply[1] == 0 and reply[12:16] == b"NTSN" and reply[24:32] == data[40:48]
        assert reply[48:] == nts._field(nts.EF_UNIQUE_ID, uid_of(data))


def test_a_replayed_request_is_dropped_and_a_forged_one_does_not_block_the_genuine(fast: Probe) -> None:
    data = nts_request(jar(2).seal(C2S, S2C))
    assert fast.ask(data)[1]["nts"] == 1
    assert fast.ask(data) == ([], {"requests": 1, "drop_nts_replay": 1})
    genuine = nts_request(jar(2).seal(C2S, S2C))
    forged = bytearray(genuine)
    forged[-1] ^= 1
    assert fast.ask(bytes(forged))[1]["nts_nak"] == 1
    assert fast.ask(genuine)[1]["nts"] == 1


def test_the_replay_table_keeps_the_last_n_identifiers() -> None:
    require_nts_in_c()
    cookie = jar(1).seal(C2S, S2C)
    with InProcessWorker(True, ServerConfig(rate_per_s=0, nts_replay_table=2), jar(1)) as worker:
        probe = Probe(worker)
        a, b, c = (nts_request(cookie, uid=bytes([i]) * 40) for i in (1, 2, 3))  # not 32 bytes: kept as a digest
        for data in (a, b, c):
            assert probe.ask(data)[1]["nts"] == 1
        assert probe.ask(c)[1] == {"requests": 1, "drop_nts_replay": 1}
        assert probe.ask(b)[1] == {"requests": 1, "drop_nts_replay": 1}
        a2 = nts_request(cookie, uid=bytes([1]) * 40)  # forgotten: the table holds the last two
        assert probe.ask(a2)[1]["nts"] == 1


MALFORMED = {
    "short UID": dict(uid=b"u" * 28),
    "two UIDs": dict(before_auth=nts._field(nts.EF_UNIQUE_ID, b"v" * 32)),
    "two cookies": dict(before_auth=nts._field(nts.EF_COOKIE, b"c" * 104)),
    "eight placeholders": dict(placeholders=8, placeholder_len=12),
    "short nonce": dict(nonce=b"n" * 12),
}


@pytest.mark.parametrize("why", MALFORMED)
def test_malformed_requests_are_dropped(fast: Probe, why: str) -> None:
    data = nts_request(jar(2).seal(C2S, S2C), **MALFORMED[why])
    assert fast.ask(data) == ([], {"requests": 1, "drop_nts_malformed": 1})


def test_a_field_after_the_authenticator_or_a_ciphertext_past_its_end_is_malformed(fast: Probe) -> None:
    data = nts_request(jar(2).seal(C2S, S2C))
    after = data + nts._field(0x0204, b"x" * 12)
    auth = len(data) - (4 + 4 + 16 + 16)
    too_long = bytearray(data)
    too_long[auth + 6:auth + 8] = (16 + 4).to_bytes(2, "big")  # the ciphertext length runs past the field
    for bad in (after, bytes(too_long)):
        assert fast.ask(bad) == ([], {"requests": 1, "drop_nts_malformed": 1})


def test_keys_rotate_and_without_keys_an_nts_request_gets_an_unauthenticated_reply() -> None:
    require_nts_in_c()
    with InProcessWorker(True, ServerConfig(rate_per_s=0), jar(1, 2)) as worker:
        probe = Probe(worker)
        under_1 = jar(1).seal(C2S, S2C)
        assert probe.ask(nts_request(under_1))[1]["nts"] == 1
        worker.use_cookies(jar(2, 3))  # rotated: key 1 is no longer held
        (nak,), changes = probe.ask(nts_request(under_1))
        assert changes["nts_nak"] == 1 and nak[12:16] == b"NTSN"
        (reply,), _ = probe.ask(nts_request(jar(2).seal(C2S, S2C)))
        assert reply_cookies(reply)[0][:4] == b"\0\0\0\3"  # sealed under the newest
        worker.fast.set_cookie_keys([])  # none held (a moment at start): answered as plain NTP, which an NTS
        (reply,), changes = probe.ask(nts_request(jar(3).seal(C2S, S2C)))  # client rejects as unauthenticated
        assert changes == {"requests": 1, "replies": 1} and len(reply) == 48


def test_bad_keys_are_refused() -> None:
    require_nts_in_c()
    with InProcessWorker(True, ServerConfig(rate_per_s=0), jar(1)) as worker:
        for keys in ([(1, b"k" * 31)], [(1, b"k" * 64), (2, b"k" * 32)], [(2**32, b"k" * 64)],
                     [(i, b"k" * 64) for i in range(17)]):
            with pytest.raises(ValueError):
                worker.fast.set_cookie_keys(keys)


def test_an_interleaved_nts_request_gets_the_kernel_transmit_time_as_the_python_server_gives() -> None:
    require_nts_in_c()
    keys = jar(1)
    for fast_path in (True, False):
        with InProcessWorker(fast_path, ServerConfig(rate_per_s=0), keys) as worker:
            first = exchange(worker, [nts_request(keys.seal(C2S, S2C))])[0]
            receive = int.from_bytes(first[32:40], "big")
            worker.step()  # the kernel transmit timestamp comes back
            data = nts_request(keys.seal(C2S, S2C), header=ntp_header(origin=receive, receive=12345))
            (reply,) = exchange(worker, [data])
            assert reply[24:32] == (12345).to_bytes(8, "big"), fast_path  # origin: the request's receive field
            assert int.from_bytes(reply[40:48], "big") >= int.from_bytes(first[40:48], "big") - 2**32 // 1000
            assert counters(worker)["interleaved"] == 1 and len(reply_cookies(reply)) == 1


# --- the cross-check: the C path and the Python path, same requests ---------------------------------------------

KEYS = jar(1, 2)
COOKIES = {"current": KEYS.seal(C2S, S2C), "older": jar(1).seal(C2S, S2C), "unknown": jar(5).seal(C2S, S2C),
           "wrong aead": jar(2).seal(C2S, S2C, aead=16), "short": KEYS.seal(C2S, S2C)[:100],
           "tampered": KEYS.seal(C2S, S2C)[:-1] + b"\0"}


def _both_paths(replay_table: int) -> Iterator[tuple[InProcessWorker, InProcessWorker]]:
    """The C path and the Python path, same config and keys, with a replay table of ``replay_table``."""
    require_nts_in_c()
    config = ServerConfig(rate_per_s=0, nts_replay_table=replay_table)
    with InProcessWorker(True, config, KEYS) as c_path, InProcessWorker(False, config, KEYS) as python_path:
        yield c_path, python_path


@pytest.fixture(scope="module")
def both() -> Iterator[tuple[InProcessWorker, InProcessWorker]]:
    yield from _both_paths(64)


def shape(reply: bytes) -> Any:
    """What must agree between the paths: the length, the header but for its timestamps, the extension fields'
    kinds and lengths, the UID echoed, and for a sealed reply how many cookies it holds."""
    fields = nts.extension_fields(reply) or []
    sealed = [k for k, _, _ in fields] == [nts.EF_UNIQUE_ID, nts.EF_AUTHENTICATOR]
    cookies = len(reply_cookies(reply)) if sealed else None
    return (len(reply), reply[:16], [(k, n) for k, _, n in fields], uid_of(reply) if fields else None, cookies)


def crosscheck(paths: tuple[InProcessWorker, InProcessWorker], data: bytes) -> None:
    outcomes = []
    for worker in paths:
        before = counters(worker)
        replies = exchange(worker, [data])
        after = counters(worker)
        changes = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        outcomes.append((changes, sorted(shape(r) for r in replies)))
    for name in outcomes[1][0]:
        event(f"both paths: {name}")
    assert outcomes[0] == outcomes[1]


@fuzz(0.5)
@given(st.sampled_from(sorted(COOKIES)), st.integers(0, 3), edits(max_edits=3, max_insert=8))
def test_mutated_requests_get_the_same_verdict_from_both_paths(both, cookie: str, placeholders: int,
                                                               changes: list) -> None:
    crosscheck(both, apply_edits(nts_request(COOKIES[cookie], placeholders=placeholders), changes))


kinds = st.sampled_from([0x0104, 0x0204, 0x0304, 0x0404, 0x0504, 0x1234, 0x8104])
field_lists = st.lists(st.tuples(kinds, st.one_of(st.binary(min_size=12, max_size=40), st.binary(max_size=11))),
                       max_size=2).map(lambda fs: b"".join(nts._field(kind, body) for kind, body in fs))


@fuzz(0.5)
@given(st.sampled_from(["current", "older"] * 3 + sorted(COOKIES)), st.integers(0, 9),
       st.sampled_from([12, 16, 100, 104, 108, 4]), st.sampled_from([32, 32, 12, 28, 31, 33, 40, 64]), field_lists,
       st.binary(min_size=16, max_size=24), st.one_of(st.just(b""), field_lists, st.binary(max_size=48)),
       st.sampled_from([True, True, False]), st.booleans())
def test_authentic_requests_of_odd_shapes_get_the_same_verdict_from_both_paths(
        both, cookie: str, placeholders: int, placeholder_len: int, uid_len: int, others: bytes, nonce: bytes,
        encrypted: bytes, right_key: bool, replayed: bool) -> None:
    """Authenticators that verify (or not: ``right_key``) over requests of every shape: UIDs of any length,
    placeholders of any number and size, unknown fields, nonces longer than 16 bytes, encrypted fields that do or
    do not tile, identifiers seen before."""
    uid = bytes([uid_len]) * uid_len if replayed else os.urandom(uid_len)
    data = nts_request(COOKIES[cookie], C2S if right_key else bytes(32), placeholders, uid, nonce, encrypted,
                       others, placeholder_len)
    crosscheck(both, data)


@pytest.fixture(scope="module")
def small_tables() -> Iterator[tuple[InProcessWorker, InProcessWorker]]:
    yield from _both_paths(3)


POOL = [bytes([i]) * n for i, n in enumerate((32, 32, 32, 36, 40, 64), start=1)]


@fuzz(0.3)
@given(st.lists(st.integers(0, len(POOL) - 1), min_size=1, max_size=12))
def test_the_replay_table_forgets_as_the_python_one_does(small_tables, picks: list[int]) -> None:
    """A table of 3, identifiers drawn from 6: each authentic request is remembered or a replay alike."""
    for i in picks:
        crosscheck(small_tables, nts_request(COOKIES["current"], uid=POOL[i]))


def test_a_rate_kod_for_an_authentic_request_carries_cookies_on_both_paths() -> None:
    require_nts_in_c()
    keys = jar(1)
    config = ServerConfig(rate_per_s=0.001, burst=1)
    for fast_path in (True, False):
        with InProcessWorker(fast_path, config, keys) as worker:
            probe = Probe(worker)
            assert probe.ask(nts_request(keys.seal(C2S, S2C)))[1]["nts"] == 1
            (kod,), changes = probe.ask(nts_request(keys.seal(C2S, S2C)))
            assert changes == {"requests": 1, "replies": 1, "kod_rate": 1}, fast_path
            assert kod[12:16] == b"RATE" and len(reply_cookies(kod)) == 1
            assert probe.ask(nts_request(keys.seal(C2S, S2C)))[1] == {"requests": 1, "drop_rate_limited": 1}
