"""IEEE 802.1AS (profile gptp): the neighbor rate ratio and link delay, asCapable, the Follow_Up information TLV,
majorSdoId 1 on every message, and a grandmaster port that sends Announce and Sync only once its link is
asCapable."""

from __future__ import annotations

import struct

import pytest

from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp import gptp
from appliance.protocol.ptp.profiles import load_profile
from tests.unit.test_ptp_port import S, make

PEER = c.PortIdentity(bytes.fromhex("0200ddfffe000004"), 1)
BASE = 1_800_000_000 * S


def test_the_profile() -> None:
    p = load_profile("gptp")
    assert (p.transports, p.delay_mechanism, p.major_sdo_id, p.l2_destination) == (("l2",), "p2p", 1,
                                                                                 "01:80:C2:00:00:0E")
    assert p.follow_up_info and p.as_capable_required and p.path_trace and p.neighbor_prop_delay_thresh_ns == 800
    assert (p.priority1, p.log_sync_interval, p.log_announce_interval) == (246, -3, 0)


def test_rate_ratio_and_link_delay_of_a_neighbour_running_fast() -> None:
    link = gptp.LinkState(thresh_ns=10_000)
    ratio = 1 + 50e-6  # the neighbour's clock runs 50 ppm fast
    for n in range(4):
        t1 = n * S
        t2 = round(1000 + (t1 + 500) * ratio)  # 500 ns on the wire, in its time scale
        t3 = t2 + round(20_000 * ratio)  # it answers 20 us later
        t4 = t1 + 500 + 20_000 + 500
        link.exchange(t1, t2, t3, t4)
    assert link.rate_ratio == pytest.approx(ratio, abs=1e-9)
    assert abs(link.link_delay_ns - 500) <= 2 and link.as_capable


def test_as_capable_needs_a_measured_link_under_the_threshold_and_responses() -> None:
    link = gptp.LinkState(thresh_ns=800)
    assert not link.as_capable and link.why_not() == "link delay not measured yet"
    link.exchange(0, 100, 200, 1_000)
    assert not link.as_capable  # one exchange: no rate ratio yet
    link.exchange(S, S + 100, S + 200, S + 1_000)
    assert link.as_capable and link.link_delay_ns == 450  # ((t4 - t1) - (t3 - t2)) / 2
    for _ in range(3):
        link.lost()
    assert link.as_capable  # allowedLostResponses 3
    link.lost()
    assert not link.as_capable and "4 peer delay responses lost" in link.why_not()
    slow = gptp.LinkState(thresh_ns=800)
    slow.exchange(0, 100, 200, 3_000)
    slow.exchange(S, S + 100, S + 200, S + 3_000)
    assert not slow.as_capable and "over neighborPropDelayThresh 800 ns" in slow.why_not()


def test_the_follow_up_information_tlv_and_majorsdoid() -> None:
    tlv = gptp.follow_up_info()
    assert tlv[:4] == struct.pack("!HH", 3, 28) and tlv[4:10] == bytes.fromhex("0080C2000001") and len(tlv) == 32
    fu = c.encode_timestamped(c.MsgType.FOLLOW_UP, 0, PEER, 7, 0, -3, 5 * S)
    with_tlv = gptp.set_major_sdo_id(gptp.with_follow_up_info(fu, tlv), 1)
    assert with_tlv[0] == 0x18 and struct.unpack_from("!H", with_tlv, 2)[0] == len(with_tlv) == 76
    decoded = c.decode(with_tlv)
    assert decoded.header.major_sdo_id == 1 and isinstance(decoded.tlvs[0], c.OrganizationExtensionTlv)


def _peer_answers(port, sent: list[bytes], t: int) -> None:
    """A neighbour answering each of our Pdelay_Reqs (majorSdoId 1): 700 ns each way, 10 us turnaround."""
    for data in list(sent):
        if data[0] & 0x0F != c.MsgType.PDELAY_REQ:
            continue
        sent.remove(data)
        seq = struct.unpack_from("!H", data, 30)[0]
        t1 = BASE + t  # the port's transmit timestamp was reported as BASE + t
        h = c.Header(c.MsgType.PDELAY_RESP, 0, PEER, seq, flags=c.FLAG_TWO_STEP, major_sdo_id=1)
        resp = c.encode(c.PdelayResp(h, t1 + 700, port.identity))
        fup = c.encode(c.PdelayRespFollowUp(c.Header(c.MsgType.PDELAY_RESP_FOLLOW_UP, 0, PEER, seq, major_sdo_id=1),
                                            t1 + 10_700, port.identity))
        port.handle_rx(resp, "peer", t1 + 11_400, t)
        port.handle_rx(fup, "peer", None, t)


def test_a_gptp_port_stays_silent_until_its_link_is_as_capable_then_sends_it_all_as_802_1as() -> None:
    port = make("gptp")
    out: list[bytes] = []
    t = 0
    while t <= 8 * S:
        for action in port.handle_timer(t, BASE + t):
            out.append(action.data)
            if action.token is not None:
                out += [f.data for f in port.handle_tx_timestamp(action.token, BASE + t)]
        _peer_answers(port, out, t)
        t += 10_000_000
    snap = port.snapshot(t)
    assert snap["gptp"]["as_capable"] and snap["gptp"]["link_delay_ns"] == 700
    assert all(d[0] >> 4 == 1 for d in out)  # majorSdoId 1 on everything
    messages = [c.decode(d) for d in out]
    kinds = {type(m).__name__ for m in messages}
    assert {"Sync", "FollowUp", "Announce"} <= kinds
    for m in messages:
        if isinstance(m, c.FollowUp):
            assert m.tlvs and m.tlvs[0].organization_id == gptp.IEEE_8021_OUI
        if isinstance(m, c.Announce):
            assert any(isinstance(x, c.PathTraceTlv) for x in m.tlvs)


def test_a_gptp_port_drops_messages_of_another_sdo() -> None:
    port = make("gptp")
    h = c.Header(c.MsgType.PDELAY_REQ, 0, PEER, 1)  # majorSdoId 0: plain 1588
    assert port.handle_rx(c.encode(c.PdelayReq(h, 0)), "peer", BASE, S) == []
    assert port.counters["drop_other_sdo"] == 1


def test_the_link_on_the_status_line_and_in_prometheus() -> None:
    from appliance import status as status_text
    from appliance.web.metrics import _ptp
    ptp = {"enabled": True, "interface": "eth1", "state": "MASTER", "reason": "BMCA", "profile": "gptp",
           "transport": "l2", "domain": 0, "counters": {},
           "gptp": {"as_capable": True, "why_not": "", "link_delay_ns": 612, "neighbor_rate_ratio": 1.000000025}}
    assert "802.1AS link asCapable, delay 612 ns, neighbor rate ratio 1.000000025" in status_text._ptp_line(ptp)
    down = ptp | {"gptp": {"as_capable": False, "why_not": "link delay not measured yet", "link_delay_ns": None,
                           "neighbor_rate_ratio": None}}
    assert "802.1AS link NOT asCapable: link delay not measured yet" in status_text._ptp_line(down)
    families = {f.name: f for f in _ptp(ptp)}
    assert families["appliance_ptp_as_capable"].samples[0].value == 1.0
    assert families["appliance_ptp_link_delay_seconds"].samples[0].value == pytest.approx(612e-9)
    info = families["appliance_ptp_port_info"].samples[0]
    assert info.labels == {"profile": "gptp", "transport": "l2", "domain": "0", "state": "MASTER"}
