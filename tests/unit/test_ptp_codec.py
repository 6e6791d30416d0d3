"""Unit tests for appliance.protocol.ptp.codec: byte-exact vectors for every message and TLV, and every rejection.

Each vector is written out field by field from IEEE 1588-2019 (Table 35 header, §13 bodies, §14-16 TLVs, §15.5.3
data sets), not produced by the codec.  The common header, octet by octet:

    0   majorSdoId (high nibble) | messageType (Table 36)     1  minorVersionPTP | versionPTP: 0x12 is v2.1
    2   messageLength (2)       4  domainNumber    5  minorSdoId     6  flagField (2, Table 37)
    8   correctionField (8, ns * 2**16)           16  messageTypeSpecific (4)
    20  sourcePortIdentity (8 clockIdentity + 2 portNumber)       30  sequenceId (2)
    32  controlField (Table 42)                   33  logMessageInterval (int8, 0x7f = unspecified)
"""

from __future__ import annotations

import dataclasses

import pytest

from appliance.protocol.ptp import codec as c

CID = bytes.fromhex("001b19fffe000001")  # our clockIdentity (EUI-64 from a MAC, as 1588-2019 §7.5.2.2.2 allows)
ME = c.PortIdentity(CID, 1)
PEER = c.PortIdentity(bytes.fromhex("0a0b0cfffe0d0e0f"), 2)
ALL = c.PortIdentity(b"\xff" * 8, 0xFFFF)  # wildcard targetPortIdentity
T_NS = 1_700_000_037_123_456_789  # Timestamp 0000 6553f125 075bcd15: 1700000037 s = 0x6553f125, 123456789 = 0x075bcd15
TS = "0000 6553f125 075bcd15"
GM_QUALITY = c.ClockQuality(6, 0x21, 0x4E5D)  # locked to GNSS, within 100 ns


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def header(mtype: c.MsgType, seq: int, **kw: object) -> c.Header:
    return c.Header(mtype, kw.pop("domain", 0), kw.pop("source_port", ME), seq, **kw)  # type: ignore[arg-type]


# --- messages: (message as built, wire bytes) ------------------------------------------------------------------

VECTORS: dict[str, tuple[c.Message, bytes]] = {
    # Sync, two-step (flagField octet 0 bit 1 -> 0x0200), control 0, logMessageInterval 0 (1 s), 44 octets.
    "sync": (c.Sync(header(c.MsgType.SYNC, 0x1234, flags=c.FLAG_TWO_STEP, log_interval=0), T_NS),
             h("00 12 002c 00 00 0200 0000000000000000 00000000 001b19fffe000001 0001 1234 00 00" + TS)),
    # Delay_Req, control 1, origin 1 s + 1 ns.
    "delay_req": (c.DelayReq(header(c.MsgType.DELAY_REQ, 7, source_port=PEER), 1_000_000_001),
                  h("01 12 002c 00 00 0000 0000000000000000 00000000 0a0b0cfffe0d0e0f 0002 0007 01 7f"
                    "0000 00000001 00000001")),
    # Pdelay_Req: Timestamp then 10 reserved octets (§13.9), control 5 (Table 42 "all others"), 54 octets.
    "pdelay_req": (c.PdelayReq(header(c.MsgType.PDELAY_REQ, 3, log_interval=0), T_NS),
                   h("02 12 0036 00 00 0000 0000000000000000 00000000 001b19fffe000001 0001 0003 05 00"
                     + TS + "00000000000000000000")),
    # Pdelay_Resp, two-step, requestReceiptTimestamp and requestingPortIdentity.
    "pdelay_resp": (c.PdelayResp(header(c.MsgType.PDELAY_RESP, 3, flags=c.FLAG_TWO_STEP), T_NS, PEER),
                    h("03 12 0036 00 00 0200 0000000000000000 00000000 001b19fffe000001 0001 0003 05 7f"
                      + TS + "0a0b0cfffe0d0e0f 0002")),
    # Follow_Up, control 2, correctionField 1.5 ns = 1.5 * 2**16 = 0x18000.
    "follow_up": (c.FollowUp(header(c.MsgType.FOLLOW_UP, 0x1234, correction=0x18000, log_interval=0), T_NS),
                  h("08 12 002c 00 00 0000 0000000000018000 00000000 001b19fffe000001 0001 1234 02 00" + TS)),
    # Delay_Resp, unicast (octet 0 bit 2 -> 0x0400), control 3, correctionField -1 ns (two's complement).
    "delay_resp": (c.DelayResp(header(c.MsgType.DELAY_RESP, 7, flags=c.FLAG_UNICAST, correction=-0x10000,
                                      log_interval=-4), T_NS, PEER),
                   h("09 12 0036 00 00 0400 ffffffffffff0000 00000000 001b19fffe000001 0001 0007 03 fc"
                     + TS + "0a0b0cfffe0d0e0f 0002")),
    # Pdelay_Resp_Follow_Up, control 5.
    "pdelay_resp_follow_up": (
        c.PdelayRespFollowUp(header(c.MsgType.PDELAY_RESP_FOLLOW_UP, 3), T_NS, PEER),
        h("0a 12 0036 00 00 0000 0000000000000000 00000000 001b19fffe000001 0001 0003 05 7f"
          + TS + "0a0b0cfffe0d0e0f 0002")),
    # Announce (§13.5), domain 24, flagField octet 1 = UTCV 0x04 | PTP 0x08 | TTRA 0x10 | FTRA 0x20 = 0x3c,
    # logMessageInterval 1; body: originTimestamp, currentUtcOffset 37, reserved, priority1 128, clockQuality
    # (class 6, accuracy 0x21, variance 0x4e5d), priority2 128, grandmasterIdentity, stepsRemoved 0, timeSource
    # 0x20 (GNSS); 64 octets.
    "announce": (c.Announce(header(c.MsgType.ANNOUNCE, 0x0101, domain=24, flags=0x003C, log_interval=1), T_NS, 37,
                            128, GM_QUALITY, 128, CID, 0, 0x20),
                 h("0b 12 0040 18 00 003c 0000000000000000 00000000 001b19fffe000001 0001 0101 05 01"
                   + TS + "0025 00 80 06 21 4e5d 80 001b19fffe000001 0000 20")),
    # Announce + C37.238-2017 TLV (tlvType 3, length 18: OUI 1c129d, subtype 000002, grandmasterID 3, reserved,
    # totalTimeInaccuracy 50 ns, 2 pad octets) + PATH_TRACE (tlvType 8, one clockIdentity): 64 + 22 + 12 = 98.
    "announce_tlvs": (
        c.Announce(header(c.MsgType.ANNOUNCE, 2, flags=0x003C, log_interval=1), T_NS, 37, 128, GM_QUALITY, 128,
                   CID, 0, 0x20, (c.c37238_2017_tlv(3, 50), c.PathTraceTlv((CID,)))),
        h("0b 12 0062 00 00 003c 0000000000000000 00000000 001b19fffe000001 0001 0002 05 01"
          + TS + "0025 00 80 06 21 4e5d 80 001b19fffe000001 0000 20"
          "0003 0012 1c129d 000002 0003 00000000 00000032 0000"
          "0008 0008 001b19fffe000001")),
    # Signaling (§13.12) to the wildcard port, unicast flag, with the four unicast negotiation TLVs (§16.1.4):
    # REQUEST Announce (0xb in the high nibble) every 2**1 s for 300 s; GRANT Sync every 2**-3 s (0xfd) for 300 s,
    # reserved octet, renewalInvited (bit 0); CANCEL and ACKNOWLEDGE_CANCEL Delay_Resp (0x9).  44+10+12+6+6 = 78.
    "signaling": (
        c.Signaling(header(c.MsgType.SIGNALING, 9, flags=c.FLAG_UNICAST), ALL,
                    (c.RequestUnicastTransmissionTlv(c.MsgType.ANNOUNCE, 1, 300),
                     c.GrantUnicastTransmissionTlv(c.MsgType.SYNC, -3, 300, True),
                     c.CancelUnicastTransmissionTlv(c.MsgType.DELAY_RESP),
                     c.AcknowledgeCancelUnicastTransmissionTlv(c.MsgType.DELAY_RESP))),
        h("0c 12 004e 00 00 0400 0000000000000000 00000000 001b19fffe000001 0001 0009 05 7f"
          "ffffffffffffffff ffff"
          "0004 0006 b0 01 0000012c"
          "0005 0008 00 fd 0000012c 00 01"
          "0006 0002 90 00"
          "0007 0002 90 00")),
    # Management (§15.4.1) GET DEFAULT_DATA_SET: target wildcard, startingBoundaryHops 1, boundaryHops 1, action 0
    # (low nibble), reserved; MANAGEMENT TLV (type 1, length 2, managementId 0x2000).  Control 4; 54 octets.
    "management_get": (
        c.Management(header(c.MsgType.MANAGEMENT, 5), ALL, 1, 1, c.GET, (c.ManagementTlv(c.DEFAULT_DATA_SET),)),
        h("0d 12 0036 00 00 0000 0000000000000000 00000000 001b19fffe000001 0001 0005 04 7f"
          "ffffffffffffffff ffff 01 01 00 00"
          "0001 0002 2000")),
    # RESPONSE (action 2) with the DEFAULT_DATA_SET body: flags TSC (bit 0), reserved, numberPorts 1, priority1,
    # clockQuality, priority2, clockIdentity, domainNumber 0, reserved.  TLV length 2 + 20 = 0x16; 74 octets.
    "management_response": (
        c.Management(header(c.MsgType.MANAGEMENT, 5), PEER, 0, 0, c.RESPONSE,
                     (c.ManagementTlv(c.DEFAULT_DATA_SET, c.DefaultDataSetBody(True, False, 1, 128, GM_QUALITY, 128,
                                                                               CID, 0).pack()),)),
        h("0d 12 004a 00 00 0000 0000000000000000 00000000 001b19fffe000001 0001 0005 04 7f"
          "0a0b0cfffe0d0e0f 0002 00 00 02 00"
          "0001 0016 2000 01 00 0001 80 06 21 4e5d 80 001b19fffe000001 00 00")),
    # MANAGEMENT_ERROR_STATUS (§15.5.4): errorId NOT_SUPPORTED 6, managementId DOMAIN 0x2007, 4 reserved octets,
    # displayData PTPText "nope" (length octet 4), one pad octet to make lengthField even: 8 + 5 + 1 = 14.
    "management_error": (
        c.Management(header(c.MsgType.MANAGEMENT, 6), PEER, 1, 1, c.RESPONSE,
                     (c.ManagementErrorStatusTlv(c.NOT_SUPPORTED, c.DOMAIN, "nope"),)),
        h("0d 12 0042 00 00 0000 0000000000000000 00000000 001b19fffe000001 0001 0006 04 7f"
          "0a0b0cfffe0d0e0f 0002 01 01 02 00"
          "0002 000e 0006 2007 00000000 04 6e6f7065 00")),
}


@pytest.mark.parametrize("name", VECTORS)
def test_encode_is_byte_exact(name: str) -> None:
    msg, wire = VECTORS[name]
    assert c.encode(msg) == wire


@pytest.mark.parametrize("name", VECTORS)
def test_decode_gives_the_fields(name: str) -> None:
    msg, wire = VECTORS[name]
    decoded = c.decode(wire)
    # decode keeps the wire controlField; the built header left it None (= Table 42's value for the type).
    assert decoded.header.control == c.control_for(msg.header.message_type)
    assert decoded == dataclasses.replace(msg, header=dataclasses.replace(msg.header, control=decoded.header.control))
    assert c.peek_header(wire) == decoded.header


def test_decoded_fields_spelled_out() -> None:
    a = c.decode(VECTORS["announce_tlvs"][1])
    assert isinstance(a, c.Announce)
    assert (a.header.sequence_id, a.header.log_interval, a.header.flags, a.header.control) == (2, 1, 0x3C, 5)
    assert (a.origin_ts_ns, a.current_utc_offset, a.gm_clock_quality.clock_class, a.time_source) == (T_NS, 37, 6, 0x20)
    assert c.parse_c37238_2017_tlv(a.tlvs[0]) == (3, 50)
    assert a.tlvs[1] == c.PathTraceTlv((CID,))
    d = c.decode(VECTORS["delay_resp"][1])
    assert isinstance(d, c.DelayResp)
    assert (d.header.correction, d.header.log_interval, d.requesting_port) == (-0x10000, -4, PEER)


def test_pmc_get_default_data_set() -> None:
    """GET DEFAULT_DATA_SET as linuxptp's pmc builds it (pmc_common.c pmc_message): version 0x12, controlField left
    at 0, logMessageInterval 0x7f, startingBoundaryHops = boundaryHops = 1 (pmc -b 1), and over its UNIX socket a
    sourcePortIdentity made from the pid (12345 = 0x3039: clockIdentity octets 6-7 its high half, 0000, and
    portNumber its low half)."""
    wire = h("0d 12 0036 00 00 0000 0000000000000000 00000000 0000000000000000 3039 0000 00 7f"
             "ffffffffffffffff ffff 01 01 00 00 0001 0002 2000")
    m = c.decode(wire)
    assert isinstance(m, c.Management)
    assert (m.action, m.target_port, m.starting_boundary_hops, m.boundary_hops) == (c.GET, ALL, 1, 1)
    assert m.tlvs == (c.ManagementTlv(c.DEFAULT_DATA_SET),)
    assert m.header.control == 0
    assert c.encode(m) == wire  # an explicit control is sent as given


def test_version_2_0_is_accepted_and_kept() -> None:
    wire = bytearray(VECTORS["sync"][1])
    wire[1] = 0x02  # minorVersionPTP 0: a 1588-2008 peer
    m = c.decode(bytes(wire))
    assert (m.header.version, m.header.minor_version) == (2, 0)
    assert c.encode(m) == bytes(wire)


def test_sdo_ids_and_message_type_specific_round_trip() -> None:
    hdr = header(c.MsgType.SYNC, 1, major_sdo_id=1, minor_sdo_id=0x5A, message_type_specific=0xDEADBEEF)
    wire = c.encode(c.Sync(hdr, 0))
    assert wire[0] == 0x10 and wire[5] == 0x5A and wire[16:20] == h("deadbeef")
    assert c.decode(wire).header == dataclasses.replace(hdr, control=0)


def test_control_none_means_table_42() -> None:
    expected = {c.MsgType.SYNC: 0, c.MsgType.DELAY_REQ: 1, c.MsgType.FOLLOW_UP: 2, c.MsgType.DELAY_RESP: 3,
                c.MsgType.MANAGEMENT: 4, c.MsgType.PDELAY_REQ: 5, c.MsgType.PDELAY_RESP: 5,
                c.MsgType.PDELAY_RESP_FOLLOW_UP: 5, c.MsgType.ANNOUNCE: 5, c.MsgType.SIGNALING: 5}
    assert {t: c.control_for(t) for t in c.MsgType} == expected


# --- TLVs and management bodies on their own -------------------------------------------------------------------

TLV_VECTORS: dict[str, tuple[object, bytes]] = {
    "management_empty": (c.ManagementTlv(c.NULL_MANAGEMENT), h("0001 0002 0000")),
    "error_status_no_text": (c.ManagementErrorStatusTlv(c.WRONG_LENGTH, c.PRIORITY1),
                             h("0002 0008 0003 2005 00000000")),
    "organization": (c.OrganizationExtensionTlv(h("0080c2"), h("000001"), h("0102")),
                     h("0003 0008 0080c2 000001 0102")),
    "organization_do_not_propagate": (c.OrganizationExtensionTlv(h("0019a7"), h("000002"), b"", 0x8000),
                                      h("8000 0006 0019a7 000002")),
    "c37238_2017_unknown": (c.c37238_2017_tlv(0xBEEF, 0xFFFFFFFF),
                            h("0003 0012 1c129d 000002 beef 00000000 ffffffff 0000")),
    "request": (c.RequestUnicastTransmissionTlv(c.MsgType.DELAY_RESP, -7, 60), h("0004 0006 90 f9 0000003c")),
    "grant_denied": (c.GrantUnicastTransmissionTlv(c.MsgType.ANNOUNCE, 0, 0, False),
                     h("0005 0008 b0 00 00000000 0000")),
    "cancel": (c.CancelUnicastTransmissionTlv(c.MsgType.SYNC), h("0006 0002 00 00")),
    "ack_cancel": (c.AcknowledgeCancelUnicastTransmissionTlv(c.MsgType.ANNOUNCE), h("0007 0002 b0 00")),
    "path_trace": (c.PathTraceTlv((CID, PEER.clock_identity)), h("0008 0010 001b19fffe000001 0a0b0cfffe0d0e0f")),
    "path_trace_empty": (c.PathTraceTlv(()), h("0008 0000")),
    "unknown": (c.Tlv(0x7F00, h("abcd")), h("7f00 0002 abcd")),  # experimental range: kept whole
}


def _signaling_with(*tlvs: object) -> c.Signaling:
    return c.Signaling(header(c.MsgType.SIGNALING, 1), ALL, tuple(tlvs))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", TLV_VECTORS)
def test_tlv_vectors(name: str) -> None:
    tlv, wire = TLV_VECTORS[name]
    assert tlv.pack() == wire  # type: ignore[attr-defined]
    assert c.decode(c.encode(_signaling_with(tlv))).tlvs == (tlv,)


BODY_VECTORS: dict[str, tuple[object, bytes]] = {
    "default": (c.DefaultDataSetBody(True, True, 1, 128, GM_QUALITY, 127, CID, 24),
                h("03 00 0001 80 06 21 4e5d 7f 001b19fffe000001 18 00")),
    # stepsRemoved 0, offsetFromMaster 5 ns, meanPathDelay 7 ns (TimeInterval = ns * 2**16)
    "current": (c.CurrentDataSetBody(0, 5 << 16, 7 << 16), h("0000 0000000000050000 0000000000070000")),
    # parentPortIdentity, parentStats 0, reserved, observedParentOffsetScaledLogVariance 0xffff, phase change rate
    # 0x7fffffff (not computed), grandmaster priority1, quality, priority2, identity: 32 octets
    "parent": (c.ParentDataSetBody(ME, False, 0xFFFF, 0x7FFFFFFF, 128, GM_QUALITY, 128, CID),
               h("001b19fffe000001 0001 00 00 ffff 7fffffff 80 06 21 4e5d 80 001b19fffe000001")),
    # currentUtcOffset 37, flags UTCV|PTP|TTRA|FTRA = 0x3c, timeSource GNSS 0x20
    "time_properties": (c.TimePropertiesDataSetBody(37, False, False, True, True, True, True, 0x20), h("0025 3c 20")),
    "time_properties_leap61": (c.TimePropertiesDataSetBody(37, True, False, True, True, False, False, 0xA0),
                               h("0025 0d a0")),
    # portIdentity, portState MASTER 6, logMinDelayReqInterval 0, peerMeanPathDelay 0, logAnnounceInterval 1,
    # announceReceiptTimeout 3, logSyncInterval -1, delayMechanism E2E 1, logMinPdelayReqInterval 0,
    # versionNumber 0x12 (minor 1, major 2): 26 octets
    "port": (c.PortDataSetBody(ME, c.MASTER, 0, 0, 1, 3, -1, c.DELAY_E2E, 0, 0x12),
             h("001b19fffe000001 0001 06 00 0000000000000000 01 03 ff 01 00 12")),
    "one_octet": (c.OneOctetBody(128), h("80 00")),
    # clockType ordinary (0x8000), physicalLayerProtocol "IEEE 802.3", physicalAddress (length 6, a MAC),
    # protocolAddress (UDP/IPv4 1, length 4, 192.0.2.1), manufacturerIdentity 001b19 + reserved, productDescription,
    # revisionData, userDescription (PTPTexts), profileIdentity 00-00-00-01-01-00 (default E2E profile): 64 octets
    "clock_description": (
        c.ClockDescriptionBody(c.CLOCK_TYPE_ORDINARY, "IEEE 802.3", h("02aabbccddee"), c.PROTOCOL_UDP_IPV4,
                               h("c0000201"), h("001b19"), "Acme;GM-1;0001", "1;2;3", "lab", h("000000010100")),
        h("8000 0a 49454545203830322e33 0006 02aabbccddee 0001 0004 c0000201 001b19 00"
          "0e 41636d653b474d2d313b30303031 05 313b323b33 03 6c6162 000000010100")),
    # the same with an empty userDescription: 63 octets, padded to 64
    "clock_description_padded": (
        c.ClockDescriptionBody(c.CLOCK_TYPE_ORDINARY, "IEEE 802.3", h("02aabbccddee"), c.PROTOCOL_UDP_IPV4,
                               h("c0000201"), h("001b19"), "Acme;GM-1;0001", "1;2;3", "", h("000000010100")),
        h("8000 0a 49454545203830322e33 0006 02aabbccddee 0001 0004 c0000201 001b19 00"
          "0e 41636d653b474d2d313b30303031 05 313b323b33 00 000000010100 00")),
}


@pytest.mark.parametrize("name", BODY_VECTORS)
def test_body_vectors(name: str) -> None:
    body, wire = BODY_VECTORS[name]
    assert body.pack() == wire  # type: ignore[attr-defined]
    assert type(body).unpack(wire) == body  # type: ignore[attr-defined]
    assert len(wire) % 2 == 0  # a management TLV's dataField is always even


@pytest.mark.parametrize("name", BODY_VECTORS)
def test_short_bodies_are_tlv_errors(name: str) -> None:
    body, wire = BODY_VECTORS[name]
    needed = len(wire) - 1 if name == "clock_description_padded" else len(wire)  # the pad octet is optional
    for cut in range(needed):
        with pytest.raises(c.PtpDecodeError) as info:
            type(body).unpack(wire[:cut])  # type: ignore[attr-defined]
        assert info.value.reason == "tlv"


def test_one_octet_signed() -> None:
    assert c.OneOctetBody(-3).pack() == h("fd 00")
    assert c.OneOctetBody.unpack(h("fd 00"), signed=True) == c.OneOctetBody(-3)
    assert c.OneOctetBody.unpack(h("fd 00")) == c.OneOctetBody(0xFD)
    with pytest.raises(ValueError):
        c.OneOctetBody(256).pack()


def test_c37238_parse_ignores_other_tlvs() -> None:
    assert c.parse_c37238_2017_tlv(c.PathTraceTlv(())) is None
    assert c.parse_c37238_2017_tlv(c.OrganizationExtensionTlv(c.C37238_OUI, h("000001"), bytes(14))) is None
    with pytest.raises(c.PtpDecodeError):
        c.parse_c37238_2017_tlv(c.OrganizationExtensionTlv(c.C37238_OUI, c.C37238_2017_SUBTYPE, bytes(4)))


def test_identifiers_match_linuxptp_and_the_standard() -> None:
    # Table 59 / Table 109 values as linuxptp tlv.h spells them.
    assert (c.CLOCK_DESCRIPTION, c.USER_DESCRIPTION, c.DEFAULT_DATA_SET, c.PORT_DATA_SET, c.PRIORITY1) == (
        0x0001, 0x0002, 0x2000, 0x2004, 0x2005)
    assert (c.TIME, c.UTC_PROPERTIES, c.TIMESCALE_PROPERTIES, c.PATH_TRACE_LIST) == (0x200F, 0x2011, 0x2013, 0x2015)
    assert (c.DELAY_MECHANISM, c.LOG_MIN_PDELAY_REQ_INTERVAL, c.GENERAL_ERROR) == (0x6000, 0x6001, 0xFFFE)
    assert (c.INITIALIZING, c.MASTER, c.SLAVE) == (1, 6, 9)


# --- rejections ----------------------------------------------------------------------------------------------


def reason_of(data: bytes) -> str:
    with pytest.raises(c.PtpDecodeError) as info:
        c.decode(data)
    assert isinstance(info.value, ValueError) and str(info.value)
    return info.value.reason


def patched(name: str, offset: int, new: bytes) -> bytes:
    wire = bytearray(VECTORS[name][1])
    wire[offset:offset + len(new)] = new
    return bytes(wire)


def test_truncated() -> None:
    assert reason_of(b"") == "truncated"
    assert reason_of(VECTORS["sync"][1][:33]) == "truncated"  # shorter than the header
    assert reason_of(VECTORS["sync"][1][:43]) == "truncated"  # shorter than messageLength
    assert reason_of(VECTORS["signaling"][1][:-1]) == "truncated"
    with pytest.raises(c.PtpDecodeError, match="truncated"):
        c.peek_header(VECTORS["sync"][1][:20])


@pytest.mark.parametrize("version_octet", [0x01, 0x03, 0x22, 0xF2, 0x00])
def test_version(version_octet: int) -> None:
    assert reason_of(patched("sync", 1, bytes((version_octet,)))) == "version"


@pytest.mark.parametrize("message_type", [0x4, 0x5, 0x6, 0x7, 0xE, 0xF])
def test_reserved_message_types(message_type: int) -> None:
    assert reason_of(patched("sync", 0, bytes((message_type,)))) == "type"
    with pytest.raises(c.PtpDecodeError, match="type"):
        c.peek_header(patched("sync", 0, bytes((message_type,))))


def test_length_shorter_than_the_body() -> None:
    assert reason_of(patched("sync", 2, h("0021"))) == "length"  # 33: shorter than the header
    assert reason_of(patched("announce", 2, h("003f"))) == "length"  # 63: one short of an Announce
    assert reason_of(patched("management_get", 2, h("002f"))) == "length"  # 47: management fixed part is 48


def test_tlv_errors() -> None:
    sig = VECTORS["signaling"][1]
    assert reason_of(patched("signaling", 44 + 2, h("0007"))) == "tlv"  # odd lengthField
    assert reason_of(patched("signaling", 44 + 2, h("00ff"))) == "tlv"  # runs past messageLength
    assert reason_of(sig[:2] + h("0030") + sig[4:]) == "tlv"  # messageLength 48 leaves 4 octets of a 10-octet TLV
    assert reason_of(sig[:2] + h("002e") + sig[4:]) == "tlv"  # messageLength 46: 2 octets, not even a TLV header
    assert reason_of(patched("signaling", 44 + 4, h("50"))) == "tlv"  # unicast TLV naming reserved messageType 5
    short_request = c.Tlv(c.TLV_REQUEST_UNICAST_TRANSMISSION, h("b001"))
    assert reason_of(c.encode(_signaling_with(short_request))) == "tlv"
    assert reason_of(c.encode(_signaling_with(c.Tlv(c.TLV_PATH_TRACE, bytes(6))))) == "tlv"
    assert reason_of(c.encode(_signaling_with(c.Tlv(c.TLV_ORGANIZATION_EXTENSION, bytes(4))))) == "tlv"
    text_too_long = c.Tlv(c.TLV_MANAGEMENT_ERROR_STATUS, h("0006 2007 00000000 05 61"))  # PTPText of 5, 1 octet
    assert reason_of(c.encode(_signaling_with(text_too_long))) == "tlv"


def test_longer_known_tlv_keeps_its_layout() -> None:
    """Octets past a known TLV's layout are ignored (a later edition may extend it)."""
    longer = c.Tlv(c.TLV_CANCEL_UNICAST_TRANSMISSION, h("9000 abcd"))
    assert c.decode(c.encode(_signaling_with(longer))).tlvs == (c.CancelUnicastTransmissionTlv(c.MsgType.DELAY_RESP),)


@pytest.mark.parametrize("name", ["sync", "announce_tlvs", "signaling", "management_error"])
def test_padding_after_message_length_is_ignored(name: str) -> None:
    msg, wire = VECTORS[name]
    for pad in (b"\0", bytes(16), b"\xff" * 7, b"\x00\x03\x00\x02\xab\xcd"):  # zeros, junk, a TLV-shaped tail
        assert c.decode(wire + pad) == c.decode(wire)


def test_decode_accepts_bytearray_and_memoryview() -> None:
    wire = VECTORS["announce_tlvs"][1]
    assert c.decode(bytearray(wire)) == c.decode(memoryview(wire)) == c.decode(wire)


# --- encode refuses what the wire cannot carry ----------------------------------------------------------------


@pytest.mark.parametrize("ts_ns", [-1, 2**48 * 1_000_000_000, 2**80])
def test_timestamp_out_of_range(ts_ns: int) -> None:
    with pytest.raises(ValueError, match="Timestamp"):
        c.encode(c.Sync(header(c.MsgType.SYNC, 1), ts_ns))
    with pytest.raises(ValueError):
        c.encode(c.DelayResp(header(c.MsgType.DELAY_RESP, 1), ts_ns, PEER))


def test_timestamp_edges() -> None:
    last = 2**48 * 1_000_000_000 - 1
    wire = c.encode(c.FollowUp(header(c.MsgType.FOLLOW_UP, 1), last))
    assert wire[34:] == h("ffff ffffffff 3b9ac9ff")
    assert c.decode(wire).precise_origin_ts_ns == last  # type: ignore[union-attr]
    assert c.encode(c.FollowUp(header(c.MsgType.FOLLOW_UP, 1), 0))[34:] == bytes(10)


@pytest.mark.parametrize("bad", [
    lambda: c.Sync(header(c.MsgType.SYNC, 0x10000), 0),  # sequenceId is 16 bits
    lambda: c.Sync(header(c.MsgType.SYNC, 1, correction=2**63), 0),
    lambda: c.Sync(header(c.MsgType.SYNC, 1, log_interval=128), 0),
    lambda: c.Sync(header(c.MsgType.SYNC, 1, version=16), 0),
    lambda: c.Sync(header(c.MsgType.SYNC, 1, major_sdo_id=16), 0),
    lambda: c.Sync(header(c.MsgType.SYNC, 1, source_port=c.PortIdentity(b"short", 1)), 0),
    lambda: c.Sync(header(c.MsgType.ANNOUNCE, 1), 0),  # header type must match the message
    lambda: c.Announce(header(c.MsgType.ANNOUNCE, 1), 0, 37, 128, GM_QUALITY, 128, b"\0" * 7, 0, 0x20),
    lambda: c.Management(header(c.MsgType.MANAGEMENT, 1), ALL, 1, 1, 16),
    lambda: _signaling_with(c.Tlv(0x7F00, b"odd")),
    lambda: _signaling_with(c.ManagementTlv(c.USER_DESCRIPTION, b"\x02ab")),  # odd dataField
    lambda: _signaling_with(c.OrganizationExtensionTlv(b"\0\0", b"\0\0\0", b"")),
    lambda: _signaling_with(c.OrganizationExtensionTlv(b"\0\0\0", b"\0\0\0", b"", 0x0009)),
    lambda: _signaling_with(c.PathTraceTlv((b"\0" * 9,))),
    lambda: _signaling_with(c.ManagementErrorStatusTlv(c.GENERAL_ERROR, 0, "x" * 256)),
    lambda: _signaling_with(c.Tlv(0x7F00, bytes(65536))),
    lambda: _signaling_with(*[c.Tlv(0x7F00, bytes(1000))] * 66),  # messageLength past 65535
])
def test_encode_raises_value_error(bad) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        c.encode(bad())


def test_decode_error_is_a_value_error_with_a_reason() -> None:
    err = c.PtpDecodeError("tlv")
    assert isinstance(err, ValueError) and err.reason == "tlv" and str(err) == "tlv"
    assert set(c.PtpDecodeError.REASONS) == {"truncated", "version", "length", "type", "tlv"}
