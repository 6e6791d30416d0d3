"""The PTP port configured slaveOnly, as the upstream reference runs it: delay and offset arithmetic (E2E, P2P, one-
and two-step, corrections).  Its masters, timescales and drops: test_ptp_slave_masters.py."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.fsm import SLAVE, UNCALIBRATED
from appliance.protocol.ptp.measure import PtpMeasurement
from appliance.protocol.ptp.port import PtpPort
from appliance.protocol.ptp.port_common import Send
from appliance.refs.ptp_slave import SlaveConfig, slave_port

S = 1_000_000_000
OWN = bytes.fromhex("0200aafffe000001")
GM_A = bytes.fromhex("0200bbfffe000002")
GM_B = bytes.fromhex("0200ccfffe000003")
BASE_NS = 1_700_000_000 * S  # true time (the master's clock) at the start of every scenario
PTP_FLAGS = c.FLAG_PTP_TIMESCALE | c.FLAG_UTC_OFFSET_VALID


@dataclass
class Master:
    """A scripted grandmaster on a link to the slave.  True time is the master's clock; the slave's local clock
    reads true + ``offset_ns``; every message crosses the link in ``delay_ns`` plus the residence time of a
    transparent clock, which it adds to correctionField."""

    slave: PtpPort
    identity: bytes = GM_A
    offset_ns: int = 0
    delay_ns: int = 50_000
    two_step: bool = True
    flags: int = PTP_FLAGS
    utc_offset: int = 37
    clock_class: int = 6
    priority1: int = 128
    domain: int = 0
    true_ns: int = BASE_NS
    seq: int = 0

    @property
    def port(self) -> c.PortIdentity:
        return c.PortIdentity(self.identity, 1)

    def header(self, kind: c.MsgType, seq: int, flags: int = 0, correction_ns: int = 0, log: int = 0) -> c.Header:
        return c.Header(kind, self.domain, self.port, seq, flags=flags, correction=correction_ns << 16,
                        log_interval=log)

    def local(self, true_ns: int) -> int:
        return true_ns + self.offset_ns

    def announce(self, now_ns: int) -> list:
        self.seq += 1
        msg = c.Announce(self.header(c.MsgType.ANNOUNCE, self.seq, self.flags, log=1), self.true_ns, self.utc_offset,
                         self.priority1, c.ClockQuality(self.clock_class, 0x21, 0x4E5D), 128, self.identity, 0, 0x20)
        return self.slave.handle_rx(c.encode(msg), ("10.0.0.1", 320), None, now_ns)

    def sync(self, now_ns: int, residence_ns: int = 0, fup_first: bool = False, origin_ns: int | None = None,
             fup_correction_ns: int = 0) -> list:
        """One Sync (and Follow_Up): sent at the master's ``true_ns`` (its origin timestamp unless ``origin_ns``)."""
        self.seq += 1
        t1 = self.true_ns
        t2 = self.local(t1 + self.delay_ns + residence_ns + fup_correction_ns)
        if not self.two_step:
            sync = c.Sync(self.header(c.MsgType.SYNC, self.seq, self.flags, residence_ns), t1)
            return self.slave.handle_rx(c.encode(sync), ("10.0.0.1", 319), t2, now_ns)
        sync = c.Sync(self.header(c.MsgType.SYNC, self.seq, self.flags | c.FLAG_TWO_STEP, residence_ns),
                      0 if origin_ns is None else origin_ns)
        fup = c.FollowUp(self.header(c.MsgType.FOLLOW_UP, self.seq, self.flags, fup_correction_ns), t1)
        first = [(c.encode(fup), None, 320), (c.encode(sync), t2, 319)]
        out: list = []
        for data, ts, port in (first if fup_first else reversed(first)):
            out += self.slave.handle_rx(data, ("10.0.0.1", port), ts, now_ns)
        return out

    def answer(self, send: Send, now_ns: int, residence_ns: int = 0, turnaround_ns: int = 10_000,
               one_step_responder: bool = False, tx_first: bool = True, fup_first: bool = False) -> list:
        """The slave's Delay_Req or Pdelay_Req, sent at true ``true_ns``: its transmit timestamp, then the reply."""
        req = c.decode(send.data)
        t_true = self.true_ns
        tx = self.local(t_true)
        out = self.slave.handle_tx_timestamp(send.token, tx) if tx_first else []
        arrive = t_true + self.delay_ns + residence_ns
        seq, own = req.header.sequence_id, req.header.source_port
        if isinstance(req, c.DelayReq):
            resp = c.DelayResp(self.header(c.MsgType.DELAY_RESP, seq, correction_ns=residence_ns), arrive, own)
            out += self.slave.handle_rx(c.encode(resp), ("10.0.0.1", 320), None, now_ns)
        else:
            t3 = arrive + turnaround_ns
            t4 = self.local(t3 + self.delay_ns)
            if one_step_responder:  # 11.4.2: requestReceiptTimestamp 0, the turnaround in correctionField
                resp = c.PdelayResp(self.header(c.MsgType.PDELAY_RESP, seq, correction_ns=residence_ns
                                                + turnaround_ns), 0, own)
                out += self.slave.handle_rx(c.encode(resp), ("10.0.0.1", 319), t4, now_ns)
            else:
                resp = c.PdelayResp(self.header(c.MsgType.PDELAY_RESP, seq, c.FLAG_TWO_STEP), arrive, own)
                fup = c.PdelayRespFollowUp(self.header(c.MsgType.PDELAY_RESP_FOLLOW_UP, seq,
                                                       correction_ns=residence_ns), t3, own)
                both = [(c.encode(resp), t4, 319), (c.encode(fup), None, 320)]
                for data, ts, port in (reversed(both) if fup_first else both):
                    out += self.slave.handle_rx(data, ("10.0.0.1", port), ts, now_ns)
        if not tx_first:
            out += self.slave.handle_tx_timestamp(send.token, tx)
        return out

    def advance(self, ns: int) -> None:
        self.true_ns += ns


def sends(actions: list) -> list[Send]:
    return [a for a in actions if isinstance(a, Send)]


def measurements(actions: list) -> list[PtpMeasurement]:
    return [a for a in actions if isinstance(a, PtpMeasurement)]


def make(mechanism: str = "e2e", **config) -> PtpPort:
    port = slave_port(SlaveConfig(delay_mechanism=mechanism, **config), OWN, 0, random.Random(1))
    port.start(0)
    return port


def qualify(m: Master, now_ns: int = 0) -> int:
    """Two Announces, one second apart: the master is qualified and chosen.  Returns the time after them."""
    m.announce(now_ns)
    m.announce(now_ns + S)
    return now_ns + S


def request(slave: PtpPort, now_ns: int) -> tuple[Send, int]:
    """Run the timers until the slave sends its next Delay_Req / Pdelay_Req."""
    t = now_ns
    while True:
        due = slave.next_due_ns()
        assert due is not None
        t = max(t, due)
        out = sends(slave.handle_timer(t, t))
        if out:
            return out[0], t


def calibrate(m: Master, now_ns: int, exchanges: int = 1, **answer) -> int:
    """Syncs and delay exchanges until a path delay is known; returns the time."""
    t = now_ns
    for _ in range(exchanges):
        m.sync(t)
        send, t = request(m.slave, t)
        m.answer(send, t, **answer)
        m.advance(S // 4)
    return t


# --- the arithmetic -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("two_step", [True, False])
def test_e2e_offset_and_delay_with_transparent_clock_corrections(two_step: bool) -> None:
    slave = make()
    m = Master(slave, offset_ns=123_456, delay_ns=40_000, two_step=two_step)
    t = qualify(m)
    assert slave.state == UNCALIBRATED and slave.snapshot(0)["master"] == "0200bb.fffe.000002-1"
    assert not measurements(m.sync(t, residence_ns=7_000))  # no path delay yet
    send, t = request(slave, t)
    assert c.decode(send.data).header.source_port == c.PortIdentity(OWN, 1) and send.event and send.token
    m.answer(send, t, residence_ns=3_000)
    assert slave.path_delay_ns == 40_000
    m.advance(S)
    [meas] = measurements(m.sync(t, residence_ns=11_000, fup_correction_ns=2_000 if two_step else 0))
    assert meas.offset_ns == 123_456 and meas.path_delay_ns == 40_000
    assert meas.rx_local_ns == m.true_ns + 40_000 + 11_000 + (2_000 if two_step else 0) + 123_456
    assert meas.master == "0200bb.fffe.000002-1" and meas.gm_identity == "0200bb.fffe.000002"
    assert (meas.clock_class, meas.clock_accuracy, meas.time_source, meas.steps_removed) == (6, 0x21, 0x20, 0)
    assert meas.ptp_timescale and meas.utc_offset_applied_s == 0


def test_a_follow_up_before_its_sync_and_a_timestamp_after_the_delay_resp() -> None:
    slave = make()
    m = Master(slave, offset_ns=-5_000_000, delay_ns=20_000)
    t = qualify(m)
    m.sync(t, fup_first=True)
    send, t = request(slave, t)
    m.answer(send, t, tx_first=False)
    assert slave.path_delay_ns == 20_000
    [meas] = measurements(m.sync(t, fup_first=True))
    assert meas.offset_ns == -5_000_000


def test_two_step_sync_takes_t1_from_the_follow_up_not_the_sync() -> None:
    slave = make()
    m = Master(slave, offset_ns=1_000, delay_ns=10_000)
    t = calibrate(m, qualify(m))
    [meas] = measurements(m.sync(t, origin_ns=m.true_ns - 777_777))
    assert meas.offset_ns == 1_000


def test_a_follow_up_with_another_sequence_id_or_from_another_port_is_not_matched() -> None:
    slave = make()
    m = Master(slave, offset_ns=0, delay_ns=10_000)
    t = calibrate(m, qualify(m))
    sync = c.Sync(m.header(c.MsgType.SYNC, 500, m.flags | c.FLAG_TWO_STEP), 0)
    assert not slave.handle_rx(c.encode(sync), None, m.local(m.true_ns), t)
    stray = c.FollowUp(m.header(c.MsgType.FOLLOW_UP, 501, m.flags), m.true_ns)
    assert not slave.handle_rx(c.encode(stray), None, None, t)
    other = c.FollowUp(c.Header(c.MsgType.FOLLOW_UP, 0, c.PortIdentity(GM_A, 2), 500), m.true_ns)
    assert not slave.handle_rx(c.encode(other), None, None, t)
    assert slave.counters["ignored_not_parent"] == 1


@pytest.mark.parametrize("one_step_responder", [False, True])
def test_p2p_link_delay_from_one_and_two_step_responders(one_step_responder: bool) -> None:
    slave = make("p2p")
    m = Master(slave, offset_ns=987_654, delay_ns=30_000)
    send, t = request(slave, 0)  # peer delay runs from the start, master or not
    req = c.decode(send.data)
    assert isinstance(req, c.PdelayReq) and send.peer and send.event
    m.answer(send, t, residence_ns=0, turnaround_ns=250_000, one_step_responder=one_step_responder)
    assert slave.path_delay_ns == 30_000
    t = qualify(m, t)
    m.advance(S)
    [meas] = measurements(m.sync(t, residence_ns=5_000))
    assert meas.offset_ns == 987_654 and meas.path_delay_ns == 30_000
    assert slave.counters.get("tx_delay_req", 0) == 0


def test_a_pdelay_resp_follow_up_read_before_its_pdelay_resp() -> None:
    slave = make("p2p")
    m = Master(slave, delay_ns=30_000)
    send, t = request(slave, 0)
    m.answer(send, t, fup_first=True)
    assert slave.path_delay_ns == 30_000 and "pdelay_multiple_responders" not in slave.counters


def test_p2p_delay_with_several_responders_is_not_used() -> None:
    slave = make("p2p")
    m = Master(slave, delay_ns=30_000)
    send, t = request(slave, 0)
    m.answer(send, t)
    delay = slave.path_delay_ns
    send, t = request(slave, t)
    seq = c.decode(send.data).header.sequence_id
    slave.handle_tx_timestamp(send.token, m.local(m.true_ns))
    for ident in (GM_A, GM_B):
        head = c.Header(c.MsgType.PDELAY_RESP, 0, c.PortIdentity(ident, 1), seq, flags=c.FLAG_TWO_STEP)
        slave.handle_rx(c.encode(c.PdelayResp(head, m.true_ns, c.PortIdentity(OWN, 1))), None,
                        m.local(m.true_ns + 1_000_000), t)
    fup = c.PdelayRespFollowUp(c.Header(c.MsgType.PDELAY_RESP_FOLLOW_UP, 0, c.PortIdentity(GM_A, 1), seq),
                               m.true_ns + 100, c.PortIdentity(OWN, 1))
    slave.handle_rx(c.encode(fup), None, None, t)
    assert slave.counters["pdelay_multiple_responders"] == 1 and slave.path_delay_ns == delay
    # a one-step responder completes at once; a second one to the same request is still noticed
    send, t = request(slave, t)
    seq = c.decode(send.data).header.sequence_id
    slave.handle_tx_timestamp(send.token, m.local(m.true_ns))
    for ident in (GM_A, GM_B):
        head = c.Header(c.MsgType.PDELAY_RESP, 0, c.PortIdentity(ident, 1), seq)
        slave.handle_rx(c.encode(c.PdelayResp(head, 0, c.PortIdentity(OWN, 1))), None, m.local(m.true_ns + 60_000),
                        t)
    assert slave.counters["pdelay_multiple_responders"] == 2


def test_the_slave_answers_peer_delay_requests_two_step() -> None:
    slave = make("p2p")
    requester = c.PortIdentity(GM_A, 1)
    req = c.PdelayReq(c.Header(c.MsgType.PDELAY_REQ, 0, requester, 42, correction=5 << 16), 0)
    [resp] = slave.handle_rx(c.encode(req), ("10.0.0.1", 319), 1_000_000, 0)
    decoded = c.decode(resp.data)
    assert isinstance(decoded, c.PdelayResp) and decoded.header.flags & c.FLAG_TWO_STEP
    assert decoded.request_receipt_ts_ns == 1_000_000 and decoded.requesting_port == requester
    assert resp.peer and resp.event and resp.token is not None
    [fup] = slave.handle_tx_timestamp(resp.token, 1_300_000)
    follow = c.decode(fup.data)
    assert isinstance(follow, c.PdelayRespFollowUp) and follow.response_origin_ts_ns == 1_300_000
    assert follow.header.correction == 5 << 16 and follow.header.sequence_id == 42 and not fup.event


def test_the_path_delay_filter_drops_a_single_spike() -> None:
    slave = make()
    m = Master(slave, offset_ns=0, delay_ns=20_000)
    t = calibrate(m, qualify(m), exchanges=3)
    assert slave.path_delay_ns == 20_000 and slave.state == UNCALIBRATED
    m.sync(t)
    assert slave.state == SLAVE  # three delays filtered, and a Sync measured
    m.delay_ns = 20_000
    send, t = request(slave, t)
    m.answer(send, t, residence_ns=0)
    m.delay_ns, saved = 5_000_000, m.delay_ns  # one exchange with a scheduling spike on the way back
    m.sync(t)
    m.delay_ns = saved
    send, t = request(slave, t)
    m.answer(send, t)
    assert slave.path_delay_ns == 20_000


def test_a_delay_resp_for_another_slave_or_an_unknown_request_is_ignored() -> None:
    slave = make()
    m = Master(slave)
    t = qualify(m)
    m.sync(t)
    send, t = request(slave, t)
    seq = c.decode(send.data).header.sequence_id
    slave.handle_tx_timestamp(send.token, m.local(m.true_ns))
    for requester, s in ((c.PortIdentity(GM_B, 1), seq), (c.PortIdentity(OWN, 1), seq + 100)):
        resp = c.DelayResp(m.header(c.MsgType.DELAY_RESP, s), m.true_ns, requester)
        slave.handle_rx(c.encode(resp), None, None, t)
    assert slave.path_delay_ns is None and slave.counters["ignored_delay_resp_not_ours"] == 2


# --- the property -------------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(offset_ns=st.integers(-86_400 * S, 86_400 * S), delay_ns=st.integers(0, 10_000_000),
       sync_residence_ns=st.integers(0, 1_000_000), back_residence_ns=st.integers(0, 1_000_000),
       two_step=st.booleans(), mechanism=st.sampled_from(["e2e", "p2p"]), one_step_responder=st.booleans())
def test_offset_and_delay_are_recovered_for_any_true_offset_and_symmetric_delay(
        offset_ns: int, delay_ns: int, sync_residence_ns: int, back_residence_ns: int, two_step: bool,
        mechanism: str, one_step_responder: bool) -> None:
    slave = make(mechanism)
    m = Master(slave, offset_ns=offset_ns, delay_ns=delay_ns, two_step=two_step)
    t = qualify(m)
    if mechanism == "e2e":
        m.sync(t, residence_ns=sync_residence_ns)
    send, t = request(slave, t)
    m.answer(send, t, residence_ns=back_residence_ns, one_step_responder=one_step_responder)
    m.advance(S)
    [meas] = measurements(m.sync(t, residence_ns=sync_residence_ns))
    assert meas.offset_ns == offset_ns and meas.path_delay_ns == delay_ns
