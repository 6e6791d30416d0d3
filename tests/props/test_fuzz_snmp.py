"""Fuzzing the SNMP agent (``appliance/snmp/agent.py``) through its UDP socket: the real agent on its own event loop
on a loopback port (``Running`` from ``tests/unit/test_snmp_limits.py``, given an SNMPv3 user without
authentication for the test), fed arbitrary bytes, BER values of any tag, valid SNMPv1 and SNMPv2c GET, GETNEXT,
GETBULK and SET requests (right and wrong community, arbitrary OIDs, up to 400 variable bindings, non-repeaters and
max-repetitions up to 2**31 - 1), SNMPv3 messages (requests the agent serves, with any msgMaxSize; and any engine,
user, flags, security model or context), and all of these with bytes set, flipped, inserted, deleted, repeated or
cut off.

Contract, per datagram: after it, a GET of sysDescr from the same socket (a request-id of its own) is answered
within a generous 5 s (a liveness check, not a timing test); every datagram that comes back decodes as one SNMP
message (v1, v2c or v3, nothing after it), at most one answers the fuzzed datagram, and that one is within the
agent's bound (``appliance/snmp/limits.py``): at most 65507 bytes and 256 variable bindings (an SNMPv1 error
response, which carries the request's bindings back, at most the request's size), at most the msgMaxSize of an
SNMPv3 request, and unless the request decodes as a GET, GETNEXT or SET (answered whole or tooBig, bounded by the
MIB rather than by the request) at most max(8 x the datagram, 484) bytes; no log record at ERROR or with a
traceback, and no request failed inside the agent (its ``failed`` counter, answered genErr, stays 0).
Budget: ``tests/props/fuzzing.py``."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from pyasn1.codec.ber import decoder, encoder
from pysnmp.entity import config
from pysnmp.proto import api
from pysnmp.proto.mpmod.rfc3412 import SNMPv3Message

from appliance.snmp import limits
from appliance.snmp.agent import MAX_MESSAGE_BYTES
from harness.snmp_wire import V1, V2C, encode_request
from tests.props.fuzzing import fuzz, mutated
from tests.unit.test_snmp_limits import ROW_COUNT, ROWS, SYS_DESCR, SYSTEM, Running, no_traceback

PROBE_ID = 0x7FFFFFF0  # the probe's request-id: the fuzzed requests draw theirs below it
PROBE = encode_request([SYS_DESCR], request_id=PROBE_ID)
PROBE_TIMEOUT_S = 5.0
V3_USER = b"fuzz"  # an SNMPv3 user without authentication, added to the agent for the test
NAMES = {V2C.GetRequestPDU.tagSet: "a GET", V2C.GetNextRequestPDU.tagSet: "a GETNEXT",
         V2C.SetRequestPDU.tagSet: "a SET", V2C.GetBulkRequestPDU.tagSet: "a GETBULK"}
WHOLE = {V2C.GetRequestPDU.tagSet, V2C.GetNextRequestPDU.tagSet, V2C.SetRequestPDU.tagSet}  # answered whole or tooBig

# --- requests ---------------------------------------------------------------------------------------------------
arcs = st.one_of(st.integers(0, 300), st.integers(0, 2**64))
any_oid = st.builds(lambda first, second, rest: (first, second, *rest), st.integers(0, 2), st.integers(0, 39),
                    st.lists(arcs, max_size=12))
known_oid = st.one_of(st.sampled_from([SYS_DESCR, SYSTEM, ROWS, (1, 3, 6, 1, 2, 1, 1, 3, 0), (1, 3), (0, 0),
                                       ROWS + (ROW_COUNT, 0), (1, 3, 6, 1, 6, 3, 15, 1, 1, 4, 0)]),
                      st.integers(1, ROW_COUNT + 1).map(lambda i: ROWS + (i, 0)))
oid_lists = st.one_of(st.lists(st.one_of(known_oid, any_oid), max_size=8),
                      st.builds(lambda oid, n: [oid] * n, known_oid, st.integers(0, 400)))
counts = st.one_of(st.integers(0, 10), st.sampled_from([64, 65, 255, 256, 10_000, 2**31 - 1]),
                   st.integers(0, 2**31 - 1))
communities = st.sampled_from(["public", "public", "public", "private", "", "publi", "Public", "x" * 300])


def set_values(version: str, n: int) -> st.SearchStrategy[list[Any]]:
    module = V1 if version == "v1" else V2C
    one = st.one_of(st.just(module.Null("")), st.integers(-(2**31), 2**31 - 1).map(module.Integer),
                    st.binary(max_size=300).map(module.OctetString))
    return st.lists(one, min_size=n, max_size=n)


@st.composite
def snmp_requests(draw: st.DrawFn, versions: tuple[str, ...] = ("v1", "v2c", "v2c")) -> bytes:
    """A well-formed SNMPv1 or SNMPv2c request (GETBULK in v2c only)."""
    version = draw(st.sampled_from(versions))
    operation = draw(st.sampled_from(["get", "next", "set"] + (["bulk", "bulk"] if version == "v2c" else [])))
    oids = draw(oid_lists)
    values = draw(set_values(version, len(oids))) if operation == "set" else None
    return encode_request(oids, draw(communities), non_repeaters=draw(counts), max_repetitions=draw(counts),
                          request_id=draw(st.integers(0, PROBE_ID - 1)), operation=operation, version=version,
                          values=values)


def tlv(tag: int, content: bytes) -> bytes:
    """One BER tag-length-value (definite length), any content."""
    n = len(content)
    length = bytes([n]) if n < 0x80 else bytes([0x80 | (n.bit_length() + 7) // 8]) + n.to_bytes(
        (n.bit_length() + 7) // 8, "big")
    return bytes([tag]) + length + content


def integer(value: int) -> bytes:
    return tlv(0x02, value.to_bytes(max(1, (value.bit_length() + 8) // 8), "big", signed=True))


def octets(value: bytes) -> bytes:
    return tlv(0x04, value)


def pdu_of(message: bytes) -> bytes:
    """The PDU of an encoded v2c request, re-encoded alone (the last element of the message's SEQUENCE)."""
    decoded, _ = decoder.decode(message, asn1Spec=V2C.Message())
    return bytes(encoder.encode(V2C.apiMessage.get_pdu(decoded)))


@st.composite
def v3_messages(draw: st.DrawFn, engine_id: bytes) -> bytes:
    """An SNMPv3 message (RFC 3412, USM).  Half of them a request the agent serves: its engine, the user it knows
    without authentication (``fuzz``), flags noAuthNoPriv, any msgMaxSize it takes, a plaintext scoped PDU (any v2c
    request); the others with any engine, user, flags, security model, msgMaxSize, context, or octets standing for
    an encrypted scoped PDU."""
    good = draw(st.booleans())

    def field(right: object, other: st.SearchStrategy[Any]) -> Any:
        return right if good else draw(st.just(right) | other)

    engine = field(engine_id, st.sampled_from([b"", b"\x80\x00\x1f\x88\x80" + bytes(8)]) | st.binary(max_size=40))
    usm = tlv(0x30, octets(engine) + integer(draw(st.integers(0, 2**31 - 1))) +
              integer(draw(st.integers(0, 2**31 - 1))) +
              octets(field(V3_USER, st.sampled_from([b"", b"admin", b"x" * 40]))) +
              octets(field(b"", st.sampled_from([bytes(12), bytes(24)]))) + octets(field(b"", st.binary(max_size=8))))
    pdu = pdu_of(draw(snmp_requests(versions=("v2c",))))
    scoped = tlv(0x30, octets(field(engine_id, st.sampled_from([b"", engine]))) +
                 octets(field(b"", st.sampled_from([b"ctx", b"c" * 1000]))) + pdu) \
        if field(True, st.booleans()) else octets(draw(st.binary(max_size=64)))
    header = tlv(0x30, integer(draw(st.integers(0, 2**31 - 1))) +
                 integer(draw(st.sampled_from([484, 600, 1500, 65507, 2**31 - 1]) | st.integers(484, 70_000)
                              if good else st.sampled_from([484, 483, 0]) | st.integers(0, 2**31 - 1))) +
                 octets(bytes([field(4, st.sampled_from([0, 5, 7, 1, 3]) | st.integers(0, 255))])) +
                 integer(field(3, st.sampled_from([0, 1, 2, 4]))))
    return tlv(0x30, integer(3) + header + octets(usm) + scoped)


def datagrams(engine_id: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=300),
        st.builds(tlv, st.integers(0, 255), st.binary(max_size=40) | st.sampled_from([b"", b"\x02\x01\x01"])),
        snmp_requests(),
        mutated(snmp_requests(), max_edits=1),
        mutated(snmp_requests()),
        v3_messages(engine_id),
        mutated(v3_messages(engine_id), max_edits=2),
        st.sampled_from([b"", b"\x30\x00", b"\x30\x80", b"\x30\x84\xff\xff\xff\xff", b"\x30" + b"\x80" * 40,
                         b"\x02\x01\x01", b"0\x82\xff\xe3" + bytes(65507 - 4)]),
    )


# --- what comes back -----------------------------------------------------------------------------------------------
def decode_message(data: bytes) -> tuple[str, Any, Any]:
    """(version, message, PDU) of one whole SNMP message; PyAsn1Error (or ValueError) if it is not one."""
    version = int(api.decodeMessageVersion(data))
    if version == 3:
        message, rest = decoder.decode(data, asn1Spec=SNMPv3Message())
        scoped = message["msgData"]
        pdu = scoped["plaintext"]["data"].getComponent() if scoped.getName() == "plaintext" else None
    else:
        module = {0: V1, 1: V2C}[version]
        message, rest = decoder.decode(data, asn1Spec=module.Message())
        pdu = module.apiMessage.get_pdu(message)
    assert not rest, f"{len(rest)} bytes after the message"
    return f"v{version + 1 if version < 2 else 3}", message, pdu


def read_request(data: bytes) -> tuple[Any, int | None]:
    """The tag set of the fuzzed datagram's PDU (None when it decodes as no message) and its SNMPv3 msgMaxSize."""
    try:
        version, message, pdu = decode_message(data)
    except Exception:  # noqa: BLE001 - whatever the decoder raises (pyasn1 raises TypeError on some tags)
        return None, None
    return getattr(pdu, "tagSet", None), int(message["msgGlobalData"]["msgMaxSize"]) if version == "v3" else None


def varbind_count(pdu: Any) -> int:
    return len(pdu.getComponentByPosition(3)) if pdu is not None and len(pdu) == 4 else 0


def exchange(port: int, data: bytes) -> list[bytes]:
    """Send ``data`` then the probe from one socket; every datagram received until the probe's answer, that last."""
    received: list[bytes] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        if data:
            sock.sendto(data, ("127.0.0.1", port))
        sock.sendto(PROBE, ("127.0.0.1", port))
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while True:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                reply = sock.recv(65535)
            except TimeoutError:
                raise AssertionError(f"the probe was not answered within {PROBE_TIMEOUT_S} s after "
                                     f"{data[:64].hex()}... ({len(data)} bytes)") from None
            received.append(reply)
            version, _, pdu = decode_message(reply)
            if version == "v2" and int(V2C.apiPDU.get_request_id(pdu)) == PROBE_ID:
                return received


def add_v3_user(running: Running) -> bytes:
    """Give the running agent an SNMPv3 user without authentication (as ``snmp.v3_allow_without_privacy`` does), on
    its own loop; the agent's engine ID."""
    agent = running.agent
    assert agent is not None

    async def configure() -> None:
        config.add_v3_user(agent.engine, V3_USER.decode())
        config.add_vacm_user(agent.engine, 3, V3_USER.decode(), "noAuthNoPriv", readSubTree=(1, 3, 6, 1))

    asyncio.run_coroutine_threadsafe(configure(), running.loop).result(10)
    return bytes(agent.engine.snmpEngineID)


def test_every_datagram_leaves_the_agent_answering_within_its_bound(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with Running() as running:
        agent = running.agent
        assert agent is not None
        engine_id = add_v3_user(running)

        @fuzz(0.5)  # each example a round trip through pysnmp: half the examples
        @given(datagrams(engine_id))
        def one(data: bytes) -> None:
            caplog.clear()
            *answers, probe = exchange(running.port, data)
            _, _, pdu = decode_message(probe)
            assert V2C.apiPDU.get_error_status(pdu) == 0 and varbind_count(pdu) == 1, probe.hex()
            kind, max_size = read_request(data)
            event(f"snmp: {len(answers)} answer(s) to {NAMES.get(kind, 'no request')}")
            assert len(answers) <= 1, [a[:100].hex() for a in answers]
            for answer in answers:
                version, _, reply_pdu = decode_message(answer)
                status = int(V2C.apiPDU.get_error_status(reply_pdu)) if reply_pdu is not None and \
                    len(reply_pdu) == 4 else None
                event(f"snmp: {version} {reply_pdu.__class__.__name__}, error-status {status}")
                assert len(answer) <= MAX_MESSAGE_BYTES
                if max_size is not None:  # SNMPv3: no larger than the manager said it accepts
                    assert len(answer) <= max_size, (len(answer), max_size, data[:200].hex())
                if version == "v1" and status:  # RFC 1157: an error response carries the request's bindings back
                    assert len(answer) <= len(data), (len(answer), len(data), data[:200].hex())
                else:
                    assert varbind_count(reply_pdu) <= limits.MAX_VARBINDS
                if kind not in WHOLE:  # GETBULK, a report, anything else: held to the factor
                    bound = max(limits.REPLY_FACTOR * len(data), limits.MIN_REPLY_BYTES)
                    assert len(answer) <= bound, (len(answer), len(data), data[:200].hex())
            no_traceback(caplog)
            assert agent.guard.failed == 0, caplog.text

        one()
    no_traceback(caplog)


def test_a_datagram_tagged_other_than_a_sequence_is_dropped_without_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    """Found by the fuzz test above: a datagram whose first tag is a constructed application, context or private
    one (first byte 0x60-0x7f, 0xa0-0xbf or 0xe0-0xff: b"\\xa0\\x00" is enough) makes pyasn1 raise TypeError while
    pysnmp reads the message version (``pysnmp.proto.api.verdec.decode_message_version`` catches only
    PyAsn1Error), so the exception leaves the agent's datagram callback and the event loop logs "Exception in
    callback ..." with a traceback at ERROR, once for every such datagram.  The agent still answers the next one."""
    caplog.set_level(logging.INFO)
    with Running() as running:
        for data in (b"\xa0\x00", b"\x60\x00", b"\xa1\x03\x02\x01\x01", b"\xfe\x00", b"\x7f\x00\x00"):
            *answers, _ = exchange(running.port, data)
            assert not answers
    no_traceback(caplog)
