"""The PTP codec as Wireshark sees it: every message type and TLV the codec writes, dissected by tshark.

One of every message (with the unicast negotiation TLVs, PATH_TRACE, the C37.238-2017 TLV, management GET and
RESPONSE of each data set, an error status) goes into a pcap twice: as UDP/IPv4 to 224.0.1.129 port 319 (event) or
320 (general), and as Ethernet II EtherType 0x88F7 to 01:1B:19:00:00:00 (01:80:C2:00:00:0E for the peer delay
messages, padded to the 60-octet minimum frame).  The pcap is written by hand with struct: no capture, no root.
tshark must mark nothing malformed and no expert error, dissect every frame as the PTPv2 message it is, and read
back the fields we wrote.  A deliberately truncated Announce proves the malformed filter can fire.
"""

from __future__ import annotations

import itertools
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from appliance.protocol.ptp import codec as c
from harness.peers import require, run

pytestmark = pytest.mark.interop

CID = bytes.fromhex("001b19fffe000001")
ME = c.PortIdentity(CID, 1)
PEER = c.PortIdentity(bytes.fromhex("0a0b0cfffe0d0e0f"), 2)
ALL = c.PortIdentity(b"\xff" * 8, 0xFFFF)
ORIGIN_S = 1_700_000_037
T_NS = ORIGIN_S * 1_000_000_000 + 123_456_789
QUALITY = c.ClockQuality(6, 0x21, 0x4E5D)
SRC_MAC = bytes.fromhex("02000000a001")
PTP_PRIMARY_MAC = bytes.fromhex("011b19000000")  # 1588-2019 Annex E
PTP_PDELAY_MAC = bytes.fromhex("0180c200000e")
PTP_PRIMARY_IP = bytes((224, 0, 1, 129))  # Annex C
PDELAY = {c.MsgType.PDELAY_REQ, c.MsgType.PDELAY_RESP, c.MsgType.PDELAY_RESP_FOLLOW_UP}

# Where tshark (packet-ptp.c) puts each message's timestamp seconds.
TS_FIELD = {c.MsgType.SYNC: "ptp.v2.sdr.origintimestamp.seconds",
            c.MsgType.DELAY_REQ: "ptp.v2.sdr.origintimestamp.seconds",
            c.MsgType.PDELAY_REQ: "ptp.v2.pdrq.origintimestamp.seconds",
            c.MsgType.PDELAY_RESP: "ptp.v2.pdrs.requestreceipttimestamp.seconds",
            c.MsgType.FOLLOW_UP: "ptp.v2.fu.preciseorigintimestamp.seconds",
            c.MsgType.DELAY_RESP: "ptp.v2.dr.receivetimestamp.seconds",
            c.MsgType.PDELAY_RESP_FOLLOW_UP: "ptp.v2.pdfu.responseorigintimestamp.seconds",
            c.MsgType.ANNOUNCE: "ptp.v2.an.origintimestamp.seconds"}


_SEQ = itertools.count(101)  # every message its own sequenceId, so a frame's fields cannot be another's


def hdr(mtype: c.MsgType, **kw: Any) -> c.Header:
    return c.Header(mtype, 0, ME, next(_SEQ), **kw)


def management(action: int, tlv: Any, target: c.PortIdentity = ME) -> c.Management:
    return c.Management(hdr(c.MsgType.MANAGEMENT), target, 1, 1, action, (tlv,))


DATA_SETS: list[tuple[int, bytes, dict[str, str]]] = [  # managementId, RESPONSE body, fields tshark must read back
    (c.DEFAULT_DATA_SET, c.DefaultDataSetBody(True, False, 1, 128, QUALITY, 128, CID, 0).pack(),
     {"ptp.v2.mm.clockclass": "6", "ptp.v2.mm.numberPorts": "1", "ptp.v2.mm.twoStep": "1"}),
    (c.CURRENT_DATA_SET, c.CurrentDataSetBody(0, 5 << 16, 7 << 16).pack(),
     {"ptp.v2.mm.offset.ns": "5", "ptp.v2.mm.pathDelay.ns": "7"}),
    (c.PARENT_DATA_SET, c.ParentDataSetBody(ME, False, 0xFFFF, 0x7FFFFFFF, 128, QUALITY, 128, CID).pack(),
     {"ptp.v2.mm.grandmasterclockclass": "6", "ptp.v2.mm.observedParentClockPhaseChangeRate": "2147483647"}),
    (c.TIME_PROPERTIES_DATA_SET, c.TimePropertiesDataSetBody(37, False, True, True, True, True, True, 0x20).pack(),
     {"ptp.v2.mm.currentutcoffset": "37", "ptp.v2.mm.li59": "1", "ptp.v2.mm.timesource": "0x20"}),
    (c.PORT_DATA_SET, c.PortDataSetBody(ME, c.MASTER, 0, 3 << 16, 1, 3, -1, c.DELAY_E2E, 0, 0x12).pack(),
     {"ptp.v2.mm.portState": "6", "ptp.v2.mm.logSyncInterval": "-1", "ptp.v2.mm.delayMechanism": "1"}),
    (c.PRIORITY1, c.OneOctetBody(128).pack(), {"ptp.v2.mm.priority1": "128"}),
    (c.PRIORITY2, c.OneOctetBody(127).pack(), {"ptp.v2.mm.priority2": "127"}),
    (c.DOMAIN, c.OneOctetBody(24).pack(), {"ptp.v2.mm.domainNumber": "24"}),
    (c.CLOCK_DESCRIPTION,
     c.ClockDescriptionBody(c.CLOCK_TYPE_ORDINARY, "IEEE 802.3", SRC_MAC, c.PROTOCOL_UDP_IPV4,
                            bytes((192, 0, 2, 1)), bytes.fromhex("001b19"), "Acme;GM-1;0001", "1;2;3", "",
                            bytes.fromhex("000000010100")).pack(),
     {"ptp.v2.mm.productDescription": "Acme;GM-1;0001", "ptp.v2.mm.physicalLayerProtocol": "IEEE 802.3"}),
]


def messages() -> list[tuple[c.Message, dict[str, str]]]:
    """Each message with the fields tshark must show for it (besides type, sequenceId and timestamp seconds)."""
    out: list[tuple[c.Message, dict[str, str]]] = [
        (c.Sync(hdr(c.MsgType.SYNC, flags=c.FLAG_TWO_STEP, log_interval=0), T_NS), {"ptp.v2.flags.twostep": "1"}),
        (c.Sync(hdr(c.MsgType.SYNC, minor_version=0), T_NS), {"ptp.v2.minorversionptp": "0"}),
        (c.DelayReq(hdr(c.MsgType.DELAY_REQ), T_NS), {"ptp.v2.controlfield": "1"}),
        (c.PdelayReq(hdr(c.MsgType.PDELAY_REQ), T_NS), {}),
        (c.PdelayResp(hdr(c.MsgType.PDELAY_RESP, flags=c.FLAG_TWO_STEP), T_NS, PEER),
         {"ptp.v2.pdrs.requestingsourceportid": "2"}),
        (c.FollowUp(hdr(c.MsgType.FOLLOW_UP, correction=1 << 16), T_NS), {"ptp.v2.correction.ns": "1"}),
        (c.DelayResp(hdr(c.MsgType.DELAY_RESP, flags=c.FLAG_UNICAST, log_interval=-4), T_NS, PEER),
         {"ptp.v2.dr.requestingsourceportid": "2", "ptp.v2.flags.unicast": "1", "ptp.v2.logmessageperiod": "-4"}),
        (c.PdelayRespFollowUp(hdr(c.MsgType.PDELAY_RESP_FOLLOW_UP), T_NS, PEER),
         {"ptp.v2.pdfu.requestingsourceportid": "2"}),
        (c.Announce(hdr(c.MsgType.ANNOUNCE, flags=0x003C, log_interval=1), T_NS, 37, 128, QUALITY, 128, CID, 0, 0x20,
                    (c.c37238_2017_tlv(3, 50), c.PathTraceTlv((CID,)))),
         {"ptp.v2.an.grandmasterclockclass": "6", "ptp.v2.an.grandmasterclockaccuracy": "0x21",
          "ptp.v2.an.origincurrentutcoffset": "37", "ptp.v2.flags.timetraceable": "1", "ptp.v2.an.tlvType": "3,8",
          "ptp.v2.an.oe.organizationSubType": "0x000002", "ptp.v2.an.oe.grandmasterID": "3",
          "ptp.v2.an.oe.totalTimeInaccuracy": "50", "ptp.v2.an.pathsequence": "0x001b19fffe000001"}),
        (c.Signaling(hdr(c.MsgType.SIGNALING, flags=c.FLAG_UNICAST), ALL,
                     (c.RequestUnicastTransmissionTlv(c.MsgType.ANNOUNCE, 1, 300),
                      c.GrantUnicastTransmissionTlv(c.MsgType.SYNC, -3, 300, True),
                      c.CancelUnicastTransmissionTlv(c.MsgType.DELAY_RESP),
                      c.AcknowledgeCancelUnicastTransmissionTlv(c.MsgType.DELAY_RESP))),
         {"ptp.v2.sig.tlv.tlvType": "4,5,6,7", "ptp.v2.sig.tlv.messageType": "0x0b,0x00,0x09,0x09",
          "ptp.v2.sig.tlv.durationField": "300,300", "ptp.v2.sig.tlv.renewalInvited": "1"}),
    ]
    for mid, body, fields in DATA_SETS:
        out.append((management(c.GET, c.ManagementTlv(mid), ALL), {"ptp.v2.mm.managementId": str(mid),
                                                                   "ptp.v2.mm.action": "0"}))
        out.append((management(c.RESPONSE, c.ManagementTlv(mid, body)),
                    {"ptp.v2.mm.managementId": str(mid), "ptp.v2.mm.action": "2", **fields}))
    out.append((management(c.SET, c.ManagementTlv(c.PRIORITY1, c.OneOctetBody(100).pack())),
                {"ptp.v2.mm.action": "1", "ptp.v2.mm.priority1": "100"}))
    out.append((management(c.RESPONSE, c.ManagementErrorStatusTlv(c.NOT_SETABLE, c.DOMAIN, "read-only")),
                {"ptp.v2.mm.managementErrorId": "5", "ptp.v2.mm.managementId": str(c.DOMAIN),
                 "ptp.v2.mm.displayData": "read-only"}))
    return out


# --- frames and the pcap, by hand -----------------------------------------------------------------------------


def _checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def udp_frame(payload: bytes, port: int) -> bytes:
    """Ethernet II / IPv4 / UDP to 224.0.1.129 (MAC 01:00:5e:00:01:81); UDP checksum 0 = none (RFC 768)."""
    udp = struct.pack("!HHHH", port, port, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 1, 17, 0, bytes((192, 0, 2, 1)),
                     PTP_PRIMARY_IP)
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    return bytes.fromhex("01005e000181") + SRC_MAC + b"\x08\x00" + ip + udp


def l2_frame(payload: bytes, dst: bytes) -> bytes:
    frame = dst + SRC_MAC + b"\x88\xf7" + payload
    return frame + bytes(max(0, 60 - len(frame)))  # the minimum frame (FCS not captured): trailing zero pad


def write_pcap(path: Path, frames: list[bytes]) -> None:
    records = [struct.pack("<IIII", ORIGIN_S + i, 0, len(f), len(f)) + f for i, f in enumerate(frames)]
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + b"".join(records))  # DLT_EN10MB


def tshark_frames(path: Path) -> list[dict[str, list[str]]]:
    """Each frame's fields, flattened: field name -> every value it has in the frame, in order."""
    out = run("tshark", "-n", "-r", str(path), "-T", "json", "--no-duplicate-keys", timeout=60).stdout

    def flatten(node: Any, into: dict[str, list[str]], tree_of: str = "") -> None:
        for key, value in node.items():
            if key == tree_of:  # a PTPText repeats itself inside its own subtree (beside its length)
                continue
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, dict):
                    flatten(v, into, key.removesuffix("_tree"))
                else:
                    into.setdefault(key, []).append(v)
    frames = []
    for packet in json.loads(out):
        fields: dict[str, list[str]] = {}
        flatten(packet["_source"]["layers"], fields)
        frames.append(fields)
    return frames


def flagged(path: Path) -> str:
    return run("tshark", "-n", "-r", str(path), "-Y", "_ws.malformed || _ws.expert.severity == error",
               timeout=60).stdout


# --- the tests ----------------------------------------------------------------------------------------------------


def test_tshark_dissects_every_message_and_tlv(tmp_path: Path) -> None:
    require("tshark")
    cases = messages()
    frames: list[bytes] = []
    for msg, _ in cases:
        wire = c.encode(msg)
        frames.append(udp_frame(wire, 319 if msg.header.message_type in c.EVENT_TYPES else 320))
        frames.append(l2_frame(wire, PTP_PDELAY_MAC if msg.header.message_type in PDELAY else PTP_PRIMARY_MAC))
    pcap = tmp_path / "ptp.pcap"
    write_pcap(pcap, frames)

    assert flagged(pcap) == ""
    assert run("tshark", "-n", "-r", str(pcap), "-Y", "!ptp", timeout=60).stdout == ""
    dissected = tshark_frames(pcap)
    assert len(dissected) == 2 * len(cases)
    assert {msg.header.message_type for msg, _ in cases} == set(c.MsgType)
    for i, fields in enumerate(dissected):
        msg, expected = cases[i // 2]
        where = f"frame {i + 1} ({type(msg).__name__} over {'UDP' if i % 2 == 0 else 'Ethernet'})"
        got = {k: ",".join(v) for k, v in fields.items()}
        assert got["ptp.v2.messagetype"] == f"0x{msg.header.message_type:02x}", where
        assert got["ptp.v2.versionptp"] == "2" and got["ptp.v2.sequenceid"] == str(msg.header.sequence_id), where
        assert got["ptp.v2.messagelength"] == str(len(c.encode(msg))), where
        if msg.header.message_type in TS_FIELD:
            assert got[TS_FIELD[msg.header.message_type]] == str(ORIGIN_S), where
        for key, value in expected.items():
            assert got.get(key) == value, f"{where}: {key} is {got.get(key)!r}, wrote {value!r}"


def test_our_decoder_reads_the_padded_ethernet_frames() -> None:
    """The other direction, without tshark: the L2 payloads, Ethernet pad included, decode to what was encoded."""
    for msg, _ in messages():
        frame = l2_frame(c.encode(msg), PTP_PRIMARY_MAC)
        decoded = c.decode(frame[14:])
        assert decoded.header.control == c.control_for(msg.header.message_type)
        assert c.encode(decoded) == c.encode(msg)


def test_the_malformed_filter_fires(tmp_path: Path) -> None:
    """A negative control: an Announce cut short after its messageLength said 64 is flagged by tshark (and by us)."""
    require("tshark")
    announce = c.encode(c.Announce(hdr(c.MsgType.ANNOUNCE), T_NS, 37, 128, QUALITY, 128, CID, 0, 0x20))[:50]
    pcap = tmp_path / "bad.pcap"
    write_pcap(pcap, [udp_frame(announce, 320), l2_frame(announce, PTP_PRIMARY_MAC)])
    assert len(flagged(pcap).splitlines()) == 2
    with pytest.raises(c.PtpDecodeError, match="truncated"):
        c.decode(announce)
