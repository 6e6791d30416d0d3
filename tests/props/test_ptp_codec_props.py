"""Property tests for appliance.protocol.ptp.codec: every message and TLV round-trips, and no input escapes decode.

Properties: decode(encode(m)) == m for every message with every TLV; the bytes are stable (encode . decode is the
identity on encoded messages); whatever decode accepts re-encodes to something it decodes the same (the fuzz
stability ntpd-rs and statime test); random bytes, header-shaped bytes and mutated messages raise nothing but
PtpDecodeError; any truncation is "truncated", "length" or "tlv"; trailing padding is ignored; the management data
set bodies round-trip and their unpack fails only with PtpDecodeError("tlv").
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.protocol.ptp import codec as c

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

u8, u16, u32 = st.integers(0, 0xFF), st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFFFF)
i8, i16, i32, i64 = (st.integers(-(2**(n - 1)), 2**(n - 1) - 1) for n in (8, 16, 32, 64))
nibble = st.integers(0, 0xF)
identities = st.binary(min_size=8, max_size=8)
ports = st.builds(c.PortIdentity, identities, u16)
qualities = st.builds(c.ClockQuality, u8, u8, u16)
timestamps = st.integers(0, 2**48 * 1_000_000_000 - 1)
msg_types = st.sampled_from(list(c.MsgType))
even_bytes = st.binary(max_size=40).map(lambda b: b[:len(b) & ~1])
texts = st.text(max_size=60)  # at most 240 UTF-8 octets: inside PTPText's 255
KNOWN_TLV_TYPES = {c.TLV_MANAGEMENT, c.TLV_MANAGEMENT_ERROR_STATUS, c.TLV_ORGANIZATION_EXTENSION,
                   c.TLV_REQUEST_UNICAST_TRANSMISSION, c.TLV_GRANT_UNICAST_TRANSMISSION,
                   c.TLV_CANCEL_UNICAST_TRANSMISSION, c.TLV_ACKNOWLEDGE_CANCEL_UNICAST_TRANSMISSION, c.TLV_PATH_TRACE,
                   c.TLV_ORGANIZATION_EXTENSION_PROPAGATE, c.TLV_ORGANIZATION_EXTENSION_DO_NOT_PROPAGATE}

tlvs_any = st.one_of(
    st.builds(c.Tlv, u16.filter(lambda t: t not in KNOWN_TLV_TYPES), even_bytes),
    st.builds(c.ManagementTlv, u16, even_bytes),
    st.builds(c.ManagementErrorStatusTlv, u16, u16, texts),
    st.builds(c.OrganizationExtensionTlv, st.binary(min_size=3, max_size=3), st.binary(min_size=3, max_size=3),
              even_bytes, st.sampled_from([0x0003, 0x4000, 0x8000])),
    st.builds(c.RequestUnicastTransmissionTlv, msg_types, i8, u32),
    st.builds(c.GrantUnicastTransmissionTlv, msg_types, i8, u32, st.booleans()),
    st.builds(c.CancelUnicastTransmissionTlv, msg_types),
    st.builds(c.AcknowledgeCancelUnicastTransmissionTlv, msg_types),
    st.builds(c.PathTraceTlv, st.lists(identities, max_size=6).map(tuple)),
    st.builds(c.c37238_2017_tlv, u16, u32),
)
tlv_lists = st.lists(tlvs_any, max_size=4).map(tuple)


def headers(mtype: c.MsgType, control: st.SearchStrategy[int | None] = u8) -> st.SearchStrategy[c.Header]:
    return st.builds(c.Header, st.just(mtype), u8, ports, u16, u16, i64, i8, st.just(2), st.integers(0, 1),
                     nibble, u8, control, u32)


def message_of(control: st.SearchStrategy[int | None]) -> st.SearchStrategy[c.Message]:
    def hd(t: c.MsgType) -> st.SearchStrategy[c.Header]:
        return headers(t, control)
    return st.one_of(
        st.builds(c.Sync, hd(c.MsgType.SYNC), timestamps, tlv_lists),
        st.builds(c.DelayReq, hd(c.MsgType.DELAY_REQ), timestamps, tlv_lists),
        st.builds(c.PdelayReq, hd(c.MsgType.PDELAY_REQ), timestamps, tlv_lists),
        st.builds(c.PdelayResp, hd(c.MsgType.PDELAY_RESP), timestamps, ports, tlv_lists),
        st.builds(c.FollowUp, hd(c.MsgType.FOLLOW_UP), timestamps, tlv_lists),
        st.builds(c.DelayResp, hd(c.MsgType.DELAY_RESP), timestamps, ports, tlv_lists),
        st.builds(c.PdelayRespFollowUp, hd(c.MsgType.PDELAY_RESP_FOLLOW_UP), timestamps, ports, tlv_lists),
        st.builds(c.Announce, hd(c.MsgType.ANNOUNCE), timestamps, i16, u8, qualities, u8, identities, u16, u8,
                  tlv_lists),
        st.builds(c.Signaling, hd(c.MsgType.SIGNALING), ports, tlv_lists),
        st.builds(c.Management, hd(c.MsgType.MANAGEMENT), ports, u8, u8, nibble, tlv_lists),
    )


messages = message_of(u8)

bodies = st.one_of(
    st.builds(c.DefaultDataSetBody, st.booleans(), st.booleans(), u16, u8, qualities, u8, identities, u8),
    st.builds(c.CurrentDataSetBody, u16, i64, i64),
    st.builds(c.ParentDataSetBody, ports, st.booleans(), u16, i32, u8, qualities, u8, identities),
    st.builds(c.TimePropertiesDataSetBody, i16, *[st.booleans()] * 6, u8),
    st.builds(c.PortDataSetBody, ports, u8, i8, i64, i8, u8, i8, u8, i8, u8),
    st.builds(c.OneOctetBody, u8),
    st.builds(c.ClockDescriptionBody, u16, texts, st.binary(max_size=16), u16, st.binary(max_size=16),
              st.binary(min_size=3, max_size=3), texts, texts, texts, st.binary(min_size=6, max_size=6)),
)
BODY_TYPES = (c.DefaultDataSetBody, c.CurrentDataSetBody, c.ParentDataSetBody, c.TimePropertiesDataSetBody,
              c.PortDataSetBody, c.OneOctetBody, c.ClockDescriptionBody)


def decode_or_reason(data: bytes) -> c.Message | str:
    """decode's result, or the reason it gave; anything else it raises fails the test."""
    try:
        return c.decode(data)
    except c.PtpDecodeError as exc:
        assert exc.reason in c.PtpDecodeError.REASONS
        return exc.reason


# --- round trips ---------------------------------------------------------------------------------------------


@FAST
@given(messages)
def test_encode_decode_round_trip(msg: c.Message) -> None:
    wire = c.encode(msg)
    assert c.decode(wire) == msg
    assert c.peek_header(wire) == msg.header
    assert int.from_bytes(wire[2:4], "big") == len(wire)


@FAST
@given(messages)
def test_bytes_are_stable(msg: c.Message) -> None:
    wire = c.encode(msg)
    assert c.encode(c.decode(wire)) == wire


@FAST
@given(message_of(st.none()))
def test_default_control_is_table_42(msg: c.Message) -> None:
    decoded = c.decode(c.encode(msg))
    control = c.control_for(msg.header.message_type)
    assert decoded == dataclasses.replace(msg, header=dataclasses.replace(msg.header, control=control))


@FAST
@given(messages, st.binary(max_size=64))
def test_padding_after_message_length_is_ignored(msg: c.Message, pad: bytes) -> None:
    wire = c.encode(msg)
    assert c.decode(wire + pad) == msg


@FAST
@given(messages, st.data())
def test_every_truncation_is_rejected(msg: c.Message, data: st.DataObject) -> None:
    wire = c.encode(msg)
    cut = data.draw(st.integers(0, len(wire) - 1))
    assert decode_or_reason(wire[:cut]) in ("truncated", "length", "tlv")


@FAST
@given(bodies)
def test_bodies_round_trip(body: object) -> None:
    raw = body.pack()  # type: ignore[attr-defined]
    assert len(raw) % 2 == 0
    assert type(body).unpack(raw) == body  # type: ignore[attr-defined]


@FAST
@given(st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFFFF))
def test_c37238_round_trip(grandmaster_id: int, inaccuracy_ns: int) -> None:
    tlv = c.c37238_2017_tlv(grandmaster_id, inaccuracy_ns)
    decoded = c.decode(c.encode(c.Signaling(c.Header(c.MsgType.SIGNALING, 0, c.PortIdentity(bytes(8), 1), 0),
                                            c.PortIdentity(bytes(8), 1), (tlv,)))).tlvs[0]
    assert c.parse_c37238_2017_tlv(decoded) == (grandmaster_id, inaccuracy_ns)


@FAST
@given(st.one_of(st.integers(max_value=-1), st.integers(min_value=2**48 * 1_000_000_000)))
def test_timestamps_outside_the_wire_range_are_refused(ts_ns: int) -> None:
    hdr = c.Header(c.MsgType.SYNC, 0, c.PortIdentity(bytes(8), 1), 0)
    try:
        c.encode(c.Sync(hdr, ts_ns))
    except ValueError:
        return
    raise AssertionError(f"{ts_ns} encoded")


# --- fuzz: nothing but PtpDecodeError escapes ------------------------------------------------------------------


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes(data: bytes) -> None:
    decode_or_reason(data)
    try:
        c.peek_header(data)
    except c.PtpDecodeError:
        pass


# The fixed body after the 34-octet header, §13 (Pdelay_Req's 10 reserved octets included).
BODY_OCTETS = {c.MsgType.SYNC: 10, c.MsgType.DELAY_REQ: 10, c.MsgType.PDELAY_REQ: 20, c.MsgType.PDELAY_RESP: 20,
               c.MsgType.FOLLOW_UP: 10, c.MsgType.DELAY_RESP: 20, c.MsgType.PDELAY_RESP_FOLLOW_UP: 20,
               c.MsgType.ANNOUNCE: 30, c.MsgType.SIGNALING: 10, c.MsgType.MANAGEMENT: 14}


@st.composite
def tlv_area(draw: st.DrawFn) -> bytes:
    """TLV-shaped octets: a known or random type, a value, and a lengthField that is usually right."""
    area = b""
    for _ in range(draw(st.integers(0, 3))):
        tlv_type = draw(st.one_of(st.sampled_from(sorted(KNOWN_TLV_TYPES)), u16))
        value = draw(even_bytes)
        length = len(value) + draw(st.sampled_from([0] * 8 + [1, -1, 2, 100]))
        area += tlv_type.to_bytes(2, "big") + max(0, length).to_bytes(2, "big") + value
    return area + draw(st.sampled_from([b""] * 6 + [b"\0", b"\x80\x01\x02"]))  # now and then a stray octet


@st.composite
def header_shaped(draw: st.DrawFn) -> bytes:
    """A plausible header (version 2.x, a defined type, messageLength usually right) before a random body of the
    right size and a TLV-shaped tail, so that most examples get past the header into the bodies and TLVs."""
    mtype = draw(msg_types)
    body = draw(st.binary(min_size=BODY_OCTETS[mtype], max_size=BODY_OCTETS[mtype])) + draw(tlv_area())
    length = 34 + len(body) + draw(st.sampled_from([0] * 8 + [-1, -2, 1, 2, -40]))
    head = bytes((draw(nibble) << 4 | mtype, draw(st.sampled_from([0x02, 0x12]))))
    return head + max(0, length).to_bytes(2, "big") + draw(st.binary(min_size=30, max_size=30)) + body


def assert_stable(data: bytes) -> None:
    result = decode_or_reason(data)
    if isinstance(result, str):
        return
    try:
        again = c.encode(result)
    except ValueError as exc:  # a nanosecondsField >= 10**9 can push a timestamp past 2**48 s; nothing else may
        assert "Timestamp" in str(exc), exc
        return
    assert c.decode(again) == result


@settings(max_examples=1000, deadline=None)
@given(header_shaped())
def test_header_shaped_bytes(data: bytes) -> None:
    assert_stable(data)


@st.composite
def signaling_with_random_tlvs(draw: st.DrawFn) -> bytes:
    """A valid Signaling header and body, then a TLV-shaped area, messageLength covering it all."""
    hdr = c.Header(c.MsgType.SIGNALING, 0, c.PortIdentity(bytes(8), 1), 0)
    wire = c.encode(c.Signaling(hdr, c.PortIdentity(bytes(8), 1))) + draw(tlv_area())
    return wire[:2] + len(wire).to_bytes(2, "big") + wire[4:]


@settings(max_examples=1000, deadline=None)
@given(signaling_with_random_tlvs())
def test_random_tlvs(data: bytes) -> None:
    assert_stable(data)


@FAST
@given(messages, st.data())
def test_mutated_messages(msg: c.Message, data: st.DataObject) -> None:
    wire = bytearray(c.encode(msg))
    for _ in range(data.draw(st.integers(1, 4))):
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(u8)
    assert_stable(bytes(wire))


@FAST
@given(st.sampled_from(BODY_TYPES), st.binary(max_size=80))
def test_body_unpack_fails_only_with_tlv(body_type: type, data: bytes) -> None:
    try:
        body_type.unpack(data)
    except c.PtpDecodeError as exc:
        assert exc.reason == "tlv"


@FAST
@given(st.sampled_from([c.MsgType.SYNC, c.MsgType.DELAY_REQ, c.MsgType.FOLLOW_UP, c.MsgType.DELAY_RESP]), u8, ports,
       u16, u16, i64, i8, timestamps, ports)
def test_the_steady_state_encoder_writes_what_encode_writes(mtype: c.MsgType, domain: int, source: c.PortIdentity,
                                                            seq: int, flags: int, correction: int, log_interval: int,
                                                            ts_ns: int, requesting: c.PortIdentity) -> None:
    header = c.Header(mtype, domain, source, seq, flags=flags, correction=correction, log_interval=log_interval)
    if mtype == c.MsgType.DELAY_RESP:
        want = c.encode(c.DelayResp(header, ts_ns, requesting))
        got = c.encode_timestamped(mtype, domain, source, seq, flags, log_interval, ts_ns, correction, requesting)
    else:
        cls = {c.MsgType.SYNC: c.Sync, c.MsgType.DELAY_REQ: c.DelayReq, c.MsgType.FOLLOW_UP: c.FollowUp}[mtype]
        want = c.encode(cls(header, ts_ns))
        got = c.encode_timestamped(mtype, domain, source, seq, flags, log_interval, ts_ns, correction)
    assert got == want


@FAST
@given(u16, timestamps, u16, timestamps, qualities, tlv_lists)
def test_a_restamped_announce_is_the_announce_encoded_with_that_sequence_and_timestamp(
        seq0: int, ts0: int, seq: int, ts_ns: int, quality: c.ClockQuality, tlvs: tuple[c.AnyTlv, ...]) -> None:
    def announce(s: int, t: int) -> bytes:
        header = c.Header(c.MsgType.ANNOUNCE, 44, c.PortIdentity(b"\x02" * 8, 1), s, flags=0x0404, log_interval=0)
        return c.encode(c.Announce(header, t, 37, 128, quality, 128, b"\x02" * 8, 0, 0x20, tlvs))

    assert c.restamp(announce(seq0, ts0), seq, ts_ns) == announce(seq, ts_ns)


def test_the_steady_state_encoder_refuses_what_encode_refuses() -> None:
    port = c.PortIdentity(b"\x02" * 8, 1)
    for bad in (dict(ts_ns=-1), dict(ts_ns=2**48 * 10**9), dict(sequence_id=0x10000), dict(domain=256)):
        args = dict(message_type=c.MsgType.SYNC, domain=0, source_port=port, sequence_id=1, flags=0, log_interval=0,
                    ts_ns=0) | bad
        try:
            c.encode_timestamped(**args)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad}")
    for mtype, requesting in ((c.MsgType.ANNOUNCE, None), (c.MsgType.SYNC, port)):
        try:
            c.encode_timestamped(mtype, 0, port, 1, 0, 0, 0, requesting_port=requesting)
        except ValueError:
            continue
        raise AssertionError(f"accepted {mtype!r} with {requesting}")
