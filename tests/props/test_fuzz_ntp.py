"""Fuzzing the NTP parsers: the packet codec, the MAC trailer and keys file, the server's request handling, and the
cross-check poller's server names and reply handling.

Contracts: ``packet.decode`` returns a header or raises ValueError (fewer than 48 bytes), and re-encodes to the bytes
it read; ``auth.split_mac`` and ``auth.verify`` never raise on packet contents, and no altered signed packet verifies;
``auth.parse_keys`` returns a table or raises KeysFileError whose text never quotes a secret; ``NtpServer.handle``
returns a Drop (with a known reason) or a Reply whose wire form is a server packet no larger than the request, and
every request is counted once; ``ntp_poller.parse_server`` returns (host, port) or raises ValueError, and the poller
turns whatever a server answers into an ``NtpSample`` (with ``error`` set when it cannot be used), never raising.
Budget: ``tests/props/fuzzing.py``.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import ntplib
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from appliance.edge import ntp_poller
from tests.oracle.ntp_server import Drop, NtpServer, Reply, ServerConfig
from appliance.protocol.clockmap import ClockMap, not_ready
from appliance.protocol.ntp import packet
from tests.oracle import auth_model as auth
from tests.oracle.auth_model import Key, KeysFileError, KeyTable, KeyType, Outcome
from appliance.protocol.ntp.packet import HEADER_LEN, NtpHeader, refid
from appliance.timebase import posix_ns_to_ntp64
from appliance.units import NS_PER_S
from tests.props.fuzzing import FUZZ, apply_edits, edits, fuzz, mutated, mutated_text, tokens_text

H0 = 1_780_000_000 * NS_PER_S
SYNC = ClockMap(True, 0, 1, -20, 0x10, 0x42, refid("GPS"), H0, H0 + 37 * NS_PER_S, 250.0, 37,
                reference_ts=posix_ns_to_ntp64(H0 - NS_PER_S), poll_min=4, generation=7)
KEYS = KeyTable([Key(1, KeyType.MD5, b"md5secret"), Key(2, KeyType.SHA1, bytes(range(20))),
                 Key(3, KeyType.AES128, bytes.fromhex("2b7e151628aed2a6abf7158809cf4f3c"))])
DROP_REASONS = {"short", "oversize", "malformed", "bad-version", "control-query", "denied", "rate-limited"} | {
    f"mode-{m}" for m in range(8)}

u8, u32, u64 = st.integers(0, 0xFF), st.integers(0, 0xFFFFFFFF), st.integers(0, 2**64 - 1)
i8 = st.integers(-128, 127)
headers = st.builds(NtpHeader, st.integers(0, 3), st.integers(0, 7), st.integers(0, 7), u8, i8, i8, u32, u32,
                    st.binary(min_size=4, max_size=4), u64, u64, u64, u64)
client_headers = st.builds(NtpHeader, st.integers(0, 3), st.integers(1, 4), st.just(3), u8, i8, i8, u32, u32,
                           st.binary(min_size=4, max_size=4), u64, u64, u64, u64)


def extension(kind: int, value: bytes) -> bytes:
    """An RFC 7822 extension field: type, length (a multiple of 4, at least 16), value padded."""
    body = value + bytes(-len(value) % 4)
    body += bytes(max(0, 12 - len(body)))
    return kind.to_bytes(2, "big") + (4 + len(body)).to_bytes(2, "big") + body


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """Well-formed client requests: bare, signed with each key (or a crypto-NAK), or with extension fields."""
    wire = draw(client_headers).encode()
    trailer = draw(st.sampled_from(["none", "md5", "sha1", "aes", "nak", "ext"]))
    if trailer in ("md5", "sha1", "aes"):
        return auth.sign(KEYS[{"md5": 1, "sha1": 2, "aes": 3}[trailer]], wire)
    if trailer == "nak":
        return auth.crypto_nak(wire)
    if trailer == "ext":
        fields = draw(st.lists(st.tuples(st.integers(0, 0xFFFF), st.binary(max_size=40)), min_size=1, max_size=3))
        return wire + b"".join(extension(k, v) for k, v in fields)
    return wire


packets = st.one_of(st.binary(max_size=200), mutated(requests()), mutated(headers.map(NtpHeader.encode)))


# --- the packet codec ------------------------------------------------------------------------------------------
@FUZZ
@given(packets)
def test_decode_takes_any_bytes_and_reencodes_what_it_read(data: bytes) -> None:
    try:
        header = packet.decode(data)
    except ValueError:
        assert len(data) < HEADER_LEN
        return
    assert header.encode() == data[:HEADER_LEN]


@FUZZ
@given(headers)
def test_header_round_trips(header: NtpHeader) -> None:
    assert packet.decode(header.encode()) == header


# --- authentication ------------------------------------------------------------------------------------------
@FUZZ
@given(packets)
def test_split_mac_and_verify_never_raise(data: bytes) -> None:
    parts = auth.split_mac(data)
    if parts is not None:
        body, key_id, digest = parts
        assert body + (b"" if key_id is None else key_id.to_bytes(4, "big") + (digest or b"")) == data
    for table in (KEYS, None):
        result = auth.verify(table, data)
        assert isinstance(result.outcome, Outcome)
        assert (result.key is not None) == (result.outcome is Outcome.OK)


@FUZZ
@given(client_headers, st.sampled_from([1, 2, 3]), edits())
def test_no_altered_signed_packet_verifies(header: NtpHeader, key_id: int, changes: list) -> None:
    signed = auth.sign(KEYS[key_id], header.encode())
    assert auth.verify(KEYS, signed).outcome is Outcome.OK
    altered = apply_edits(signed, changes)
    if auth.verify(KEYS, altered).outcome is Outcome.OK:
        assert altered == signed


SECRET_MARK = "Zq9"  # every secret drawn below starts so: a problem message must never contain it
KEY_TOKENS = [" ", "\t", "\n", "#", "1", "65534", "65535", "0", "x", "MD5", "md5", "M", "SHA1", "SHA-1", "AES128",
              "AES-128-CMAC", "HEX:", "ASCII:", "00", "ff", "0123456789abcdef" * 2, "\u00e9", "\x00", "\r"]
key_lines = st.builds(
    lambda ident, kind, secret, tail: f"{ident} {kind} {SECRET_MARK}{secret}{tail}",
    st.sampled_from(["1", "2", "65534", "0", "65535", "x", "", "01", "\u0661", "\u00b2", "9" * 5000, "0" * 4400 + "1"]),
    st.sampled_from(["MD5", "SHA1", "AES128", "AES-128-CMAC", "M", "RSA", "", "HEX:"]),
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=40),
    st.sampled_from(["", " # comment", " extra", "\t"]))
keys_files = st.one_of(
    st.text(max_size=300), tokens_text(KEY_TOKENS, 80),
    st.lists(key_lines, max_size=6).map("\n".join),
    mutated_text("# ntpd keys\n1 MD5 md5secret\n2 SHA1 HEX:000102030405060708090a0b0c0d0e0f10111213\n"
                 "3 AES128 HEX:2b7e151628aed2a6abf7158809cf4f3c\n4 ASCII:plain\n"))


@FUZZ
@given(keys_files)
def test_parse_keys_returns_a_table_or_names_every_problem_without_a_secret(text: str) -> None:
    try:
        table = auth.parse_keys(text)
    except KeysFileError as exc:
        event("keys: refused")
        assert exc.problems and SECRET_MARK not in str(exc)
        assert all(p.startswith("keys file line ") for p in exc.problems)
        return
    event(f"keys: {min(len(table), 2)}+ keys")
    assert all(isinstance(table[k], Key) for k in table)


def test_a_key_id_too_long_for_int_is_a_problem_of_its_line() -> None:
    """Found by the fuzz test above: int() refuses more than 4300 digits with a bare ValueError."""
    with pytest.raises(KeysFileError) as caught:
        auth.parse_keys("1 MD5 fine\n" + "9" * 5000 + " MD5 Zq9secret\n")
    assert caught.value.problems == ["keys file line 2: key ID must be a decimal number in 1..65534"]


# --- the server ----------------------------------------------------------------------------------------------
@st.composite
def server_cases(draw: st.DrawFn) -> tuple[NtpServer, list[tuple[bytes, int]]]:
    config = draw(st.sampled_from([ServerConfig(rate_per_s=0), ServerConfig(rate_per_s=1.0, burst=2),
                                   ServerConfig(deny=("192.0.2.0/24",), deny_action="rstr", rate_per_s=0)]))
    keys = draw(st.sampled_from([KEYS, None]))
    datagrams = draw(st.lists(st.tuples(packets, st.sampled_from([123, 40123])), min_size=1, max_size=4))
    return NtpServer(config, keys), datagrams


@FUZZ
@given(server_cases(), st.sampled_from([SYNC, not_ready(H0)]))
def test_server_drops_or_answers_every_datagram_with_a_server_packet_no_larger(case, clock: ClockMap) -> None:
    server, datagrams = case
    for i, (data, port) in enumerate(datagrams):
        rx = H0 + i * NS_PER_S // 4
        # A reply to the previous request's receive timestamp makes some requests interleaved.
        outcome = server.handle(data, b"\xc0\x00\x02\x0a", port, rx, clock)
        event(f"server: {outcome.reason if isinstance(outcome, Drop) else 'reply'}")
        if isinstance(outcome, Drop):
            assert outcome.reason in DROP_REASONS
            continue
        assert isinstance(outcome, Reply)
        wire = server.finalize(outcome, rx + 20_000, clock)
        server.sent(outcome, rx + 20_000)
        assert len(wire) <= len(data) and len(wire) in (48, 52, 68, 72)
        request, reply = packet.decode(data), packet.decode(wire)
        assert (reply.mode, reply.version) == (4, request.version)
        if len(wire) > HEADER_LEN and not outcome.crypto_nak:
            assert auth.verify(KEYS, wire).outcome is Outcome.OK
    c = server.counters
    assert c.requests == len(datagrams) == c.replies + sum(c.drops.values())


# --- the cross-check poller --------------------------------------------------------------------------------------
SERVER_TOKENS = ["[", "]", ":", "::1", "1", "123", "65535", "65536", "0", "ntp.example", " ", "fe80::1%eth0", "-",
                 "\u0661", "\u00b2", "9" * 5000, "0x1f", "+1", "."]


@FUZZ
@given(st.one_of(st.text(max_size=40), tokens_text(SERVER_TOKENS, 10)))
def test_parse_server_gives_a_host_and_port_or_value_error(text: str) -> None:
    try:
        host, port = ntp_poller.parse_server(text)
    except ValueError as exc:
        assert str(exc).startswith("NTP server"), exc  # the configuration error names what it is about
        return
    assert host and isinstance(host, str) and 0 < port < 65536


def test_a_port_of_other_digits_is_a_bad_port() -> None:
    """Found by the fuzz test above: str.isdigit() takes '²' and 5000 digits, which int() refuses."""
    for text in ("ntp.example:\u00b2", "[::1]:" + "9" * 5000, "ntp.example:\u0661\u0662\u0663"):
        with pytest.raises(ValueError, match=r"^NTP server .*: bad port"):
            ntp_poller.parse_server(text)


class ScriptedClient:
    """ntplib's NTPClient from the moment a datagram arrives: the reply is the template, its origin timestamp set to
    the request's transmit timestamp (as a server echoes it), then edited; ntplib parses it as it would."""

    def __init__(self, template: NtpHeader, echo: bool, changes: list) -> None:
        self.template, self.echo, self.changes = template, echo, changes

    def request(self, host: str, version: int = 2, port: object = "ntp", timeout: float = 5) -> ntplib.NTPStats:
        sent = ntplib.system_to_ntp_time(time.time())
        header = self.template
        if self.echo:
            origin = ntplib._to_int(sent) << 32 | ntplib._to_frac(sent)
            header = header.with_(origin_ts=origin)
        stats = ntplib.NTPStats()
        stats.from_data(apply_edits(header.encode(), self.changes))  # NTPException when short, as ntplib raises
        stats.dest_timestamp = ntplib.system_to_ntp_time(time.time())
        return stats


def served_or_fail(host_ns: int) -> int:
    if host_ns % 7 == 0:
        raise RuntimeError("no served time yet")
    return host_ns + 1234


@fuzz(0.5)
@given(st.builds(NtpHeader, st.integers(0, 3), st.just(4), st.sampled_from([4, 4, 4, 3, 5]),
                 st.sampled_from([0, 1, 2, 15, 16, 255]), i8, i8, u32, u32, st.binary(min_size=4, max_size=4), u64,
                 u64, u64, u64),
       st.booleans(), edits(max_edits=2))
def test_poller_turns_any_reply_into_a_sample(template: NtpHeader, echo: bool, changes: list) -> None:
    samples: list[ntp_poller.NtpSample] = []
    poller = ntp_poller.NtpCrossCheckPoller(["192.0.2.1"], 64, 1, served_or_fail, samples.append)
    poller._client = ScriptedClient(template, echo, changes)  # type: ignore[assignment]
    (sample,) = poller.poll_once()
    event(f"poller: {sample.error.split(' ')[0] or 'sample'}")
    assert samples == [sample]
    if sample.error:
        assert (sample.offset_ns, sample.uncertainty_ns) == (0, 0)
    else:
        assert 1 <= sample.stratum <= 15 and sample.uncertainty_ns >= 0 and sample.delay_ns >= 0
    status = poller.status()["192.0.2.1"]
    assert status["polls"] == 1 and status["failures"] == int(bool(sample.error))


# --- the data plane against its executable model -------------------------------------------------------------------
# The data plane (appliance/edge/ntp/_fastpath.c) makes every decision; tests/oracle/ntp_server.py is the same
# decision written plainly.  Both, each on a loopback socket with the same clock map, get the same datagrams: they
# must drop the same ones for the same reasons and answer the rest with the same bytes (but for the receive and
# transmit timestamps, read from each one's own clock).  Not pure (loopback sockets, shared memory), but
# fast: a worker's step answers what arrived, and loopback delivers a datagram before sendto returns.
# Counters that depend on timing or on which path did the work (the kernel's transmit timestamps come back when they
# come back), not on what was decided.
TIMING = {"heartbeat_ns", "pid", "fast_path", "slow_path", "tx_kernel_timestamps", "rx_without_kernel_timestamp"}


@pytest.fixture(scope="module")
def both_paths() -> Iterator[tuple[Any, Any]]:
    from tests.oracle.inprocess import InProcessWorker
    from harness.ntp_harness import host_map

    with InProcessWorker(True, ServerConfig(rate_per_s=0), keys=KEYS) as fast, \
            InProcessWorker(False, ServerConfig(rate_per_s=0), keys=KEYS) as python:
        clock = host_map()
        for worker in (fast, python):
            worker.segment.publish(clock)
        yield fast, python


def _counters(worker: Any) -> dict[str, int]:
    return {k: v for k, v in worker.counters().items() if k not in TIMING and v}


@fuzz(0.5)
@given(st.lists(st.one_of(packets, st.binary(min_size=1020, max_size=1100)), min_size=1, max_size=3))
def test_the_data_plane_drops_and_answers_as_its_model(both_paths, datagrams: list[bytes]) -> None:
    fast, python = both_paths
    before = [_counters(w) for w in both_paths]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.bind(("127.0.0.1", 0))
        client.setblocking(False)
        replies = [w.exchange(client, datagrams) for w in both_paths]
    deltas = [{k: v - b.get(k, 0) for k, v in _counters(w).items() if v != b.get(k, 0)}
              for w, b in zip(both_paths, before)]
    for name in deltas[1]:
        event(f"both paths: {name}")
    assert deltas[0] == deltas[1]
    # Replies leave in batches of the data plane's, one at a time from the model: compare them as sets.
    fast_replies, python_replies = (sorted((len(r), r[:32]) for r in path) for path in replies)
    assert fast_replies == python_replies
