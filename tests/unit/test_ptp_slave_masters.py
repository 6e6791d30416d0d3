"""The PTP port configured slaveOnly, as the upstream reference runs it: its Delay_Req timing, choosing and losing
masters, faults, how it reads a master's timescale, what it drops without raising, and unicast negotiation."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp import fsm
from appliance.protocol.ptp.fsm import FAULTY, LISTENING, SLAVE, UNCALIBRATED
from appliance.protocol.ptp.port import PtpPort
from appliance.protocol.ptp.port_common import clock_identity_text
from appliance.refs.ptp_slave import SLAVE_ONLY_VIEW, SlaveConfig
from tests.unit.test_ptp_slave import (GM_A, GM_B, OWN, PTP_FLAGS, Master, calibrate, make, measurements,
                                       qualify, request, sends)

S = 1_000_000_000


# --- Delay_Req timing -----------------------------------------------------------------------------------------


def test_delay_requests_are_spread_around_the_interval_and_follow_the_masters_interval() -> None:
    slave = make(log_min_delay_req_interval=0)
    m = Master(slave)
    t = qualify(m)
    times = []
    for _ in range(40):
        send, t = request(slave, t)
        m.announce(t)
        times.append(t)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(S // 2 <= g <= 3 * S // 2 for g in gaps) and len(set(gaps)) > 30
    # the master says logMessageInterval 2 in its Delay_Resp: requests every 4 s (+- 50 %) from then on
    m.sync(t)
    send, t = request(slave, t)
    seq = c.decode(send.data).header.sequence_id
    slave.handle_tx_timestamp(send.token, m.local(m.true_ns))
    resp = c.DelayResp(m.header(c.MsgType.DELAY_RESP, seq, log=2), m.true_ns, c.PortIdentity(OWN, 1))
    slave.handle_rx(c.encode(resp), None, None, t)
    _, later = request(slave, t)
    _, after = request(slave, later)
    assert 2 * S <= after - later <= 6 * S
    assert slave.snapshot(0)["log_min_delay_req_interval"] == 2


def test_the_same_seed_gives_the_same_schedule() -> None:
    def schedule() -> list[int]:
        slave = make()
        qualify(Master(slave))
        t, out = S, []
        for _ in range(5):
            _, t = request(slave, t)
            out.append(t)
        return out
    assert schedule() == schedule()


def test_a_missing_transmit_timestamp_is_given_up_and_counted() -> None:
    slave = make()
    m = Master(slave)
    t = qualify(m)
    _send, t = request(slave, t)
    assert slave.pending_tx()
    slave.handle_timer(t + S // 4, t + S // 4)
    assert slave.pending_tx() and "tx_timestamp_missing" not in slave.counters
    slave.handle_timer(t + S, t + S)
    assert slave.counters["tx_timestamp_missing"] == 1


# --- masters ------------------------------------------------------------------------------------------------------


def test_the_better_of_two_masters_is_followed_and_the_other_ignored() -> None:
    slave = make()
    worse = Master(slave, identity=GM_B, clock_class=248, offset_ns=9_999_999)
    better = Master(slave, identity=GM_A, clock_class=6, offset_ns=1_000)
    worse.announce(0)
    worse.announce(S)
    assert slave.snapshot(0)["master"] == "0200cc.fffe.000003-1"
    better.announce(S)
    better.announce(2 * S)
    snap = slave.snapshot(0)
    assert snap["master"] == "0200bb.fffe.000002-1" and snap["grandmaster"]["clock_class"] == 6
    assert slave.counters["master_changes"] == 2 and slave.state == UNCALIBRATED
    t = calibrate(better, 2 * S)
    assert not worse.sync(t) and slave.counters["ignored_not_parent"] >= 1
    [meas] = measurements(better.sync(t))
    assert meas.offset_ns == 1_000 and meas.gm_identity == clock_identity_text(GM_A)


def test_priority1_beats_clock_class_and_a_change_of_master_recalibrates() -> None:
    slave = make()
    a = Master(slave, identity=GM_A, clock_class=6)
    t = calibrate(a, qualify(a), exchanges=3)
    a.sync(t)
    assert slave.state == SLAVE
    b = Master(slave, identity=GM_B, clock_class=248, priority1=10)
    b.announce(t)
    b.announce(t + S)
    assert slave.state == UNCALIBRATED and slave.snapshot(0)["master"] == "0200cc.fffe.000003-1"
    assert slave.path_delay_ns is None  # E2E: the delay belongs to the old master's path
    assert not measurements(b.sync(t + S))


def test_announce_receipt_timeout_returns_to_listening_and_a_new_announce_brings_it_back() -> None:
    slave = make()
    m = Master(slave)
    t = calibrate(m, qualify(m))
    assert measurements(m.sync(t))
    # the master falls silent: announceReceiptTimeout (3) of its 2 s intervals after the last Announce
    expiry = slave.next_due_ns()
    assert expiry is not None
    while slave.state != LISTENING:
        t = slave.next_due_ns() or t + S
        slave.handle_timer(t, t)
    assert t == S + 3 * 2 * S + 1 and "announce receipt timeout" in slave.reason
    assert slave.snapshot(0)["master"] is None and slave.path_delay_ns is None
    assert not m.sync(t)  # Syncs of a forgotten master are not measured
    assert qualify(m, t) and slave.state == UNCALIBRATED


def test_fault_and_recovery() -> None:
    slave = make("p2p")
    m = Master(slave)
    qualify(m)
    slave.fault(2 * S, "interface gone")
    assert slave.state == FAULTY and slave.snapshot(0)["master"] is None
    assert not m.announce(2 * S) and slave.counters["drop_port_not_ready"] == 1
    assert slave.next_due_ns() is None
    slave.fault_cleared(3 * S)
    assert slave.state == LISTENING and slave.next_due_ns() == 3 * S


def test_the_port_runs_figure_31_the_slave_only_state_machine() -> None:
    table = make().fsm.table
    assert table is fsm.SLAVE_ONLY_FSM
    assert table[(LISTENING, "RS_SLAVE")] == UNCALIBRATED
    assert table[(UNCALIBRATED, "MASTER_CLOCK_SELECTED")] == SLAVE
    assert table[(SLAVE, "ANNOUNCE_RECEIPT_TIMEOUT")] == LISTENING
    assert table[(SLAVE, "FAULT_DETECTED")] == FAULTY
    assert "MASTER" not in {state for pair in table.items() for state in (pair[0][0], pair[1])}


# --- timescales -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags,arb,tai_utc,shift", [
    (PTP_FLAGS, "utc", None, 0),  # PTP timescale: TAI on the wire
    (c.FLAG_PTP_TIMESCALE, "utc", 35, 0),
    (c.FLAG_UTC_OFFSET_VALID, "utc", 35, 37),  # ARB, offset vouched for by the master: its own
    (0, "utc", 36, 36),  # ARB, not vouched for: the appliance's TAI - UTC
    (0, "utc", None, 37),  # ... or, lacking that, the Announce's value anyway
    (c.FLAG_UTC_OFFSET_VALID, "tai", 36, 0),  # ARB read as TAI
])
def test_timescale_interpretation(flags: int, arb: str, tai_utc: int | None, shift: int) -> None:
    slave = make(arb_timescale=arb, tai_utc_s=tai_utc)
    # the master's clock runs UTC when it is ARB-as-UTC; the slave's local clock is TAI, 2 us ahead of the truth
    m = Master(slave, offset_ns=2_000 + shift * S, flags=flags, utc_offset=37)
    t = calibrate(m, qualify(m))
    [meas] = measurements(m.sync(t))
    assert meas.offset_ns == 2_000 and meas.utc_offset_applied_s == shift
    assert meas.ptp_timescale == bool(flags & c.FLAG_PTP_TIMESCALE)
    ts = slave.snapshot(0)["timescale"]
    assert ts["utc_offset_applied_s"] == shift and ts["reading"]


def test_the_appliances_tai_utc_can_be_updated() -> None:
    slave = make(tai_utc_s=36)
    slave.set_tai_utc_s(37)
    m = Master(slave, offset_ns=37 * S, flags=0)
    t = calibrate(m, qualify(m))
    assert measurements(m.sync(t))[0].offset_ns == 0


# --- what is dropped ----------------------------------------------------------------------------------------------


def test_wrong_domain_sdo_version_garbage_and_own_messages_are_counted_not_raised() -> None:
    slave = make()
    m = Master(slave)
    other_domain = Master(slave, identity=GM_B, domain=4)
    other_domain.announce(0)
    announce = c.encode(c.Announce(m.header(c.MsgType.ANNOUNCE, 1), 0, 37, 128, c.ClockQuality(6, 0x21, 0x4E5D),
                                   128, GM_A, 0, 0x20))
    gptp = bytes([0x1B]) + announce[1:]  # majorSdoId 1 (802.1AS)
    v1 = announce[:1] + bytes([0x01]) + announce[2:]
    own = c.encode(c.Sync(c.Header(c.MsgType.SYNC, 0, c.PortIdentity(OWN, 1), 1), 0))
    for data in (gptp, v1, own, b"", b"\x00" * 10, announce[:40], bytes(range(256))):
        assert slave.handle_rx(data, None, 1, 0) == []
    assert slave.handle_rx("not bytes", None, 1, 0) == []  # type: ignore[arg-type]
    counted = slave.counters
    assert counted["drop_other_domain"] == 1 and counted["drop_other_sdo"] == 1 and counted["drop_version"] == 2
    assert counted["drop_own"] == 1 and counted["drop_truncated"] >= 2 and counted["drop_not_bytes"] == 1
    assert slave.state == LISTENING and not slave.foreign.masters


def test_a_peer_delay_request_from_an_ethernet_source_is_answered() -> None:
    """Over L2 a message's source is its sender's MAC: the port keys it as the transport does (it used to reach the
    rate limiter as a 6-octet address, which raised)."""
    slave = make("p2p", transport="l2")
    req = c.PdelayReq(c.Header(c.MsgType.PDELAY_REQ, 0, c.PortIdentity(GM_A, 1), 1), 0)
    [resp] = slave.handle_rx(c.encode(req), b"\x02\x00\xbb\x00\x00\x02", 1_000, 0)
    assert isinstance(c.decode(resp.data), c.PdelayResp) and slave.counters["tx_pdelay_resp"] == 1


def test_an_event_message_without_a_receive_timestamp_is_counted() -> None:
    slave = make()
    m = Master(slave)
    t = calibrate(m, qualify(m))
    sync = c.Sync(m.header(c.MsgType.SYNC, 900), m.true_ns)
    assert slave.handle_rx(c.encode(sync), None, None, t) == []
    assert slave.counters["drop_no_rx_timestamp"] == 1


def test_the_snapshot_says_what_a_status_page_needs() -> None:
    slave = make()
    m = Master(slave, offset_ns=500, flags=0)
    t = calibrate(m, qualify(m))
    m.sync(t)
    snap = slave.snapshot(t)
    assert snap["state"] == UNCALIBRATED and snap["offset_ns"] == 500 - 37 * S and snap["path_delay_ns"] == 50_000
    assert snap["grandmaster"]["identity"] == "0200bb.fffe.000002" and not snap["grandmaster"]["ptp_timescale"]
    assert snap["timescale"]["utc_offset_applied_s"] == 37 and "ARB" in snap["timescale"]["reading"]
    assert snap["counters"]["rx_announce"] == 2
    assert [row["to"] for row in snap["transitions"]] == [LISTENING, UNCALIBRATED]
    assert snap["foreign_masters"][0]["clock_class"] == 6


# --- unicast negotiation (G.8275.2) ------------------------------------------------------------------------------


def requested(actions: list) -> list[tuple[int, int]]:
    """(messageType, logInterMessagePeriod) of each REQUEST_UNICAST_TRANSMISSION sent, all to the master."""
    out = []
    for send in sends(actions):
        msg = c.decode(send.data)
        if isinstance(msg, c.Signaling):
            assert send.to == ("10.0.0.1", 320) and msg.header.flags & c.FLAG_UNICAST
            out += [(int(t.message_type), t.log_inter_message_period) for t in msg.tlvs]
    return out


def granted(m: Master, *message_types: c.MsgType, duration_s: int = 300) -> bytes:
    tlvs = tuple(c.GrantUnicastTransmissionTlv(t, 0, duration_s, True) for t in message_types)
    return c.encode(c.Signaling(m.header(c.MsgType.SIGNALING, 1, c.FLAG_UNICAST), c.PortIdentity(OWN, 1), tlvs))


def test_with_unicast_negotiation_the_slave_asks_for_announce_then_its_parents_sync_and_delay_resp() -> None:
    config = replace(SlaveConfig().port_config(), unicast_negotiation=True, multicast=False,
                     unicast_masters=(("10.0.0.1", 320),))
    slave = PtpPort(config, OWN, SLAVE_ONLY_VIEW, 0, rng=random.Random(1))
    slave.start(0)
    m = Master(slave)
    assert requested(slave.handle_timer(0, 0)) == [(c.MsgType.ANNOUNCE, 1)]
    assert requested(slave.handle_timer(S // 2, S // 2)) == []  # unanswered: asked again after a second
    assert requested(slave.handle_timer(S, S)) == [(c.MsgType.ANNOUNCE, 1)]
    slave.handle_rx(granted(m, c.MsgType.ANNOUNCE), ("10.0.0.1", 320), None, S)
    assert requested(slave.handle_timer(2 * S, 2 * S)) == []  # granted for 300 s: renewed after 150 s
    t = qualify(m, 2 * S)
    assert slave.state == UNCALIBRATED
    assert requested(slave.handle_timer(t, t)) == [(c.MsgType.SYNC, 0), (c.MsgType.DELAY_RESP, 0)]
    slave.handle_rx(granted(m, c.MsgType.SYNC, c.MsgType.DELAY_RESP, duration_s=60), ("10.0.0.1", 320), None, t)
    m.sync(t)
    send, t = request(slave, t)
    assert send.to == ("10.0.0.1", 320) and c.decode(send.data).header.flags & c.FLAG_UNICAST  # to the parent
    renewed: dict[int, list[int]] = {}  # the master announcing on and granting each request: when each is renewed
    for now in range(t + S, t + 160 * S, S):
        m.announce(now)
        kinds = [kind for kind, _log in requested(slave.handle_timer(now, now))]
        for kind in kinds:
            renewed.setdefault(kind, []).append(now)
        if kinds:
            slave.handle_rx(granted(m, *kinds, duration_s=300 if c.MsgType.ANNOUNCE in kinds else 60),
                            ("10.0.0.1", 320), None, now)
    assert renewed[c.MsgType.SYNC] == renewed[c.MsgType.DELAY_RESP] == [t + n * 30 * S for n in range(1, 6)]
    [announce] = renewed[c.MsgType.ANNOUNCE]  # granted at 1 s for 300 s: renewed at the first step from 151 s
    assert 151 * S <= announce < 152 * S
    assert slave.state in (UNCALIBRATED, SLAVE)


def test_settings_out_of_range_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="delay_mechanism"):
        SlaveConfig(delay_mechanism="auto")
    with pytest.raises(ValueError, match="arb_timescale"):
        SlaveConfig(arb_timescale="gps")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 255), st.sampled_from(list(c.MsgType)))
def test_no_input_raises(payload: bytes, domain: int, kind: c.MsgType) -> None:
    slave = make("p2p")
    header = bytes([int(kind), 0x02]) + len(payload).to_bytes(2, "big") + bytes([domain])
    for data in (payload, header + payload):
        slave.handle_rx(data, None, 5, 0)
    slave.handle_timer(10 * S, 10 * S)
