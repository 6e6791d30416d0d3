"""The PTP port as the grandmaster runs it: states, BMCA outcomes, both delay mechanisms, management, the
Announces' timing (unicast negotiation: test_ptp_unicast.py)."""

from __future__ import annotations

import dataclasses

import pytest

from appliance.protocol.limits import AccessRules
from appliance.protocol.ptp import codec as c
from appliance.outputs.ptp.datasets import AnnouncedQuality, GrandmasterView, leap_flags
from appliance.protocol.ptp.fsm import LISTENING, MASTER, PASSIVE
from appliance.protocol.ptp.port import PtpPort
from appliance.protocol.ptp.port_common import Send
from appliance.protocol.ptp.profiles import load_profile, resolve

S = 1_000_000_000
OWN = bytes.fromhex("0200aafffe000001")
OTHER = bytes.fromhex("0200bbfffe000002")
SLAVE = c.PortIdentity(bytes.fromhex("0200ccfffe000003"), 1)
LOCKED = GrandmasterView(clock_class=6, clock_accuracy=0x21, offset_scaled_log_variance=0x4E5D, time_source=0x20,
                         current_utc_offset=37, utc_offset_valid=True, time_traceable=True, frequency_traceable=True,
                         error_bound_ns=40, state="LOCKED")
HOLDOVER = dataclasses.replace(LOCKED, clock_class=7, time_source=0xA0, clock_accuracy=0x23, state="HOLDOVER")
SRC = ("10.0.0.2", 320)


def make(profile: str = "default-e2e", view: GrandmasterView = LOCKED, **settings) -> PtpPort:
    config, errors, _warnings = resolve(load_profile(profile), settings)
    assert not errors
    port = PtpPort(config, OWN, view, 0, management_rules=AccessRules(("10.0.0.0/8",)))
    port.start(0)
    return port


def run(port: PtpPort, until_ns: int, step_ns: int = 10_000_000) -> list[c.Message]:
    """Advance timers to ``until_ns``; answer every timestamp request at once; return what was sent, decoded."""
    sent: list[c.Message] = []
    t = 0
    while t <= until_ns:
        for action in port.handle_timer(t, 1_800_000_000 * S + t):
            sent += _deliver(port, action, t)
        t += step_ns
    return sent


def _deliver(port: PtpPort, action: Send, t: int) -> list[c.Message]:
    out = [c.decode(action.data)]
    if action.token is not None:
        for follow in port.handle_tx_timestamp(action.token, 1_800_000_000 * S + t + 123):
            out.append(c.decode(follow.data))
    return out


def announce_from(identity: bytes, seq: int, clock_class: int = 6, priority1: int = 128) -> bytes:
    header = c.Header(c.MsgType.ANNOUNCE, 0, c.PortIdentity(identity, 1), seq, log_interval=1,
                      flags=c.FLAG_PTP_TIMESCALE)
    return c.encode(c.Announce(header, 0, 37, priority1, c.ClockQuality(clock_class, 0x21, 0x4E5D), 128, identity, 0,
                               0x20))


def test_the_grandmaster_port_runs_figure_30_without_its_slave_side() -> None:
    table = make().fsm.table
    assert all(new not in ("SLAVE", "UNCALIBRATED") for new in table.values())
    assert table[(LISTENING, "ANNOUNCE_RECEIPT_TIMEOUT")] == MASTER


def test_listens_for_the_receipt_timeout_then_masters_and_sends_two_step_sync() -> None:
    port = make()
    assert port.state == LISTENING
    run(port, 5 * S)
    assert port.state == LISTENING  # 3 announce intervals of 2 s
    sent = run(port, 7 * S)
    assert port.state == MASTER
    kinds = [type(m).__name__ for m in sent]
    assert "Announce" in kinds and "Sync" in kinds and "FollowUp" in kinds
    sync = next(m for m in sent if isinstance(m, c.Sync))
    follow = next(m for m in sent if isinstance(m, c.FollowUp))
    assert sync.header.flags & c.FLAG_TWO_STEP
    assert follow.header.sequence_id == sync.header.sequence_id
    assert follow.precise_origin_ts_ns % S == 123 or follow.precise_origin_ts_ns > 0


def test_announce_says_what_the_clock_status_says() -> None:
    port = make()
    sent = run(port, 7 * S)
    ann = next(m for m in sent if isinstance(m, c.Announce))
    assert ann.gm_clock_quality == c.ClockQuality(6, 0x21, 0x4F00)  # variance rounded up to a whole step
    assert ann.time_source == 0x20 and ann.current_utc_offset == 37 and ann.steps_removed == 0
    assert ann.gm_identity == OWN
    flags = ann.header.flags
    assert flags & c.FLAG_UTC_OFFSET_VALID and flags & c.FLAG_PTP_TIMESCALE
    assert flags & c.FLAG_TIME_TRACEABLE and flags & c.FLAG_FREQUENCY_TRACEABLE
    assert not flags & (c.FLAG_LEAP61 | c.FLAG_LEAP59)
    # holdover: an Announce goes out at once with clockClass 7 and the internal oscillator
    out = port.update_view(HOLDOVER, 7 * S)
    sent = [c.decode(a.data) for a in out] + run(port, 7 * S + 20_000_000)
    ann = next(m for m in sent if isinstance(m, c.Announce))
    assert ann.gm_clock_quality.clock_class == 7 and ann.time_source == 0xA0


def test_leap_flags_cover_the_last_day_only() -> None:
    at = 1_000_000 * S
    assert leap_flags(1, at, at - 86_000 * S) == (True, False)
    assert leap_flags(-1, at, at - 3600 * S) == (False, True)
    assert leap_flags(1, at, at - 2 * 86_400 * S) == (False, False)
    assert leap_flags(1, at, at) == (False, False)
    assert leap_flags(0, None, at) == (False, False)


def test_a_better_grandmaster_makes_the_port_passive_and_its_silence_master_again() -> None:
    port = make(view=HOLDOVER)
    run(port, 7 * S)
    assert port.state == MASTER
    port.handle_rx(announce_from(OTHER, 1), ("10.0.0.9", 320), None, 8 * S)
    assert port.state == MASTER  # one Announce does not qualify a foreign master
    port.handle_rx(announce_from(OTHER, 2), ("10.0.0.9", 320), None, 9 * S)
    assert port.state == PASSIVE
    assert "better" in port.reason
    # no Sync while passive
    sent = [c.decode(a.data) for a in port.handle_timer(10 * S, 10 * S)]
    assert not any(isinstance(m, c.Sync) for m in sent)
    # silent for 3 of its 2 s intervals: forgotten, master again
    port.handle_timer(9 * S + 6 * S + 2, 0)
    assert port.state == MASTER


def test_a_worse_grandmaster_leaves_the_port_master() -> None:
    port = make()
    run(port, 7 * S)
    for i in range(4):
        port.handle_rx(announce_from(OTHER, i, clock_class=248), ("10.0.0.9", 320), None, (8 + i) * S)
    assert port.state == MASTER
    assert port.snapshot(12 * S)["foreign_masters"][0]["qualified"]


def test_a_better_grandmaster_heard_while_listening_goes_straight_to_passive() -> None:
    port = make(view=HOLDOVER)
    port.handle_rx(announce_from(OTHER, 1, priority1=100), ("10.0.0.9", 320), None, 1 * S)
    port.handle_rx(announce_from(OTHER, 2, priority1=100), ("10.0.0.9", 320), None, 2 * S)
    assert port.state == PASSIVE


def delay_req(seq: int, correction: int = 0, flags: int = 0) -> bytes:
    return c.encode(c.DelayReq(c.Header(c.MsgType.DELAY_REQ, 0, SLAVE, seq, flags=flags, correction=correction), 0))


def test_delay_req_is_answered_with_its_receive_time() -> None:
    port = make()
    run(port, 7 * S)
    out = port.handle_rx(delay_req(42, correction=5 << 16), SRC, 1_800_000_000 * S + 777, 8 * S)
    resp = c.decode(out[0].data)
    assert isinstance(resp, c.DelayResp)
    assert resp.receive_ts_ns == 1_800_000_000 * S + 777
    assert resp.requesting_port == SLAVE and resp.header.sequence_id == 42
    assert resp.header.correction == 5 << 16
    assert out[0].to is None  # multicast request, multicast answer
    snap = port.snapshot(8 * S)
    assert snap["slaves_seen"] == 1 and snap["slaves"][0]["address"] == "10.0.0.2"
    # unicast request (hybrid): unicast answer
    out = port.handle_rx(delay_req(43, flags=c.FLAG_UNICAST), SRC, 5, 8 * S)
    assert out[0].to == SRC and c.decode(out[0].data).header.flags & c.FLAG_UNICAST


def test_delay_req_without_a_kernel_timestamp_or_before_master_is_dropped() -> None:
    port = make()
    assert port.handle_rx(delay_req(1), SRC, 5, 1 * S) == []
    run(port, 7 * S)
    assert port.handle_rx(delay_req(2), SRC, None, 8 * S) == []
    assert port.counters["drop_not_master"] == 1 and port.counters["drop_no_rx_timestamp"] == 1


@pytest.mark.parametrize("data,reason", [
    (b"\x01\x02", "truncated"),
    (bytes([0x01, 0x01]) + bytes(42), "version"),
    (b"", "truncated"),
])
def test_bad_packets_are_counted_never_raised(data: bytes, reason: str) -> None:
    port = make()
    assert port.handle_rx(data, SRC, 1, 1 * S) == []
    assert port.counters["drop_" + reason] == 1


def test_other_domain_and_own_messages_are_dropped() -> None:
    port = make()
    run(port, 7 * S)
    other = c.encode(c.DelayReq(c.Header(c.MsgType.DELAY_REQ, 5, SLAVE, 1), 0))
    own = c.encode(c.DelayReq(c.Header(c.MsgType.DELAY_REQ, 0, c.PortIdentity(OWN, 1), 1), 0))
    assert port.handle_rx(other, SRC, 1, 8 * S) == [] and port.handle_rx(own, SRC, 1, 8 * S) == []
    assert port.counters["drop_other_domain"] == 1 and port.counters["drop_own"] == 1


def test_peer_delay_request_gets_a_two_step_response() -> None:
    port = make("default-p2p")
    req = c.encode(c.PdelayReq(c.Header(c.MsgType.PDELAY_REQ, 0, SLAVE, 9, correction=3 << 16), 0))
    out = port.handle_rx(req, SRC, 1000, 1 * S)
    resp = c.decode(out[0].data)
    assert isinstance(resp, c.PdelayResp) and out[0].peer and out[0].event and out[0].token
    assert resp.request_receipt_ts_ns == 1000 and resp.requesting_port == SLAVE
    assert resp.header.flags & c.FLAG_TWO_STEP
    follow = c.decode(port.handle_tx_timestamp(out[0].token, 2000)[0].data)
    assert isinstance(follow, c.PdelayRespFollowUp)
    assert follow.response_origin_ts_ns == 2000 and follow.header.sequence_id == 9
    assert follow.header.correction == 3 << 16


def test_peer_delay_to_the_neighbour_is_measured() -> None:
    port = make("default-p2p")
    out = port.handle_timer(0, 10_000)
    req = next(a for a in out if c.decode(a.data).header.message_type == c.MsgType.PDELAY_REQ)
    seq = c.decode(req.data).header.sequence_id
    port.handle_tx_timestamp(req.token, 10_000)  # t1
    neighbour = c.PortIdentity(OTHER, 1)
    resp = c.PdelayResp(c.Header(c.MsgType.PDELAY_RESP, 0, neighbour, seq, flags=c.FLAG_TWO_STEP), 50_000,
                        port.identity)
    port.handle_rx(c.encode(resp), SRC, 10_700, 1)  # t4
    fup = c.PdelayRespFollowUp(c.Header(c.MsgType.PDELAY_RESP_FOLLOW_UP, 0, neighbour, seq), 50_100, port.identity)
    port.handle_rx(c.encode(fup), SRC, None, 1)
    assert port.peer_delay_ns == ((10_700 - 10_000) - (50_100 - 50_000)) // 2


def test_a_peer_delay_request_answered_by_two_neighbours_is_not_used() -> None:
    """Two responders to one Pdelay_Req (a hub, a bridge that is not PTP-aware) is not a 1588 link: mixing one's t2
    with the other's t3 would give a link delay of neither."""
    port = make("default-p2p")
    req = next(a for a in port.handle_timer(0, 10_000) if c.decode(a.data).header.message_type == c.MsgType.PDELAY_REQ)
    seq = c.decode(req.data).header.sequence_id
    port.handle_tx_timestamp(req.token, 10_000)
    for identity, t2 in ((OTHER, 50_000), (bytes.fromhex("0200ddfffe000004"), 90_000)):
        resp = c.PdelayResp(c.Header(c.MsgType.PDELAY_RESP, 0, c.PortIdentity(identity, 1), seq,
                                     flags=c.FLAG_TWO_STEP), t2, port.identity)
        port.handle_rx(c.encode(resp), SRC, 10_700, 1)
    fup = c.PdelayRespFollowUp(c.Header(c.MsgType.PDELAY_RESP_FOLLOW_UP, 0, c.PortIdentity(OTHER, 1), seq), 50_100,
                               port.identity)
    port.handle_rx(c.encode(fup), SRC, None, 1)
    assert port.peer_delay_ns is None and port.counters["pdelay_multiple_responders"] == 1


def management(action: int, mid: int, data: bytes = b"") -> bytes:
    header = c.Header(c.MsgType.MANAGEMENT, 0, SLAVE, 7)
    return c.encode(c.Management(header, c.PortIdentity(b"\xff" * 8, 0xFFFF), 0, 0, action,
                                 (c.ManagementTlv(mid, data),)))


@pytest.mark.parametrize("mid", [c.DEFAULT_DATA_SET, c.CURRENT_DATA_SET, c.PARENT_DATA_SET,
                                 c.TIME_PROPERTIES_DATA_SET, c.PORT_DATA_SET, c.PRIORITY1, c.PRIORITY2, c.DOMAIN])
def test_management_get_of_each_data_set(mid: int) -> None:
    port = make()
    run(port, 7 * S)
    out = port.handle_rx(management(c.GET, mid), SRC, None, 8 * S)
    reply = c.decode(out[0].data)
    assert isinstance(reply, c.Management) and reply.action == c.RESPONSE
    tlv = reply.tlvs[0]
    assert isinstance(tlv, c.ManagementTlv) and tlv.management_id == mid
    assert reply.target_port == SLAVE and reply.header.sequence_id == 7 and out[0].to == SRC
    if mid == c.DEFAULT_DATA_SET:
        body = c.DefaultDataSetBody.unpack(tlv.data)
        assert body.clock_quality.clock_class == 6 and body.clock_identity == OWN and body.two_step
    if mid == c.TIME_PROPERTIES_DATA_SET:
        body = c.TimePropertiesDataSetBody.unpack(tlv.data)
        assert body.current_utc_offset == 37 and body.utc_offset_valid and body.time_source == 0x20
    if mid == c.PORT_DATA_SET:
        body = c.PortDataSetBody.unpack(tlv.data)
        assert body.port_state == 6 and body.port_identity == port.identity


def test_management_unknown_id_set_refused_by_default_and_outside_networks_ignored() -> None:
    port = make()
    run(port, 7 * S)
    reply = c.decode(port.handle_rx(management(c.GET, 0x2FFF), SRC, None, 8 * S)[0].data)
    assert isinstance(reply.tlvs[0], c.ManagementErrorStatusTlv)
    reply = c.decode(port.handle_rx(management(c.SET, c.PRIORITY1, bytes([10, 0])), SRC, None, 8 * S)[0].data)
    assert isinstance(reply.tlvs[0], c.ManagementErrorStatusTlv) and port.priority1 == 128
    assert port.handle_rx(management(c.GET, c.DEFAULT_DATA_SET), ("192.0.2.1", 320), None, 8 * S) == []
    assert port.counters["drop_management_denied"] == 1


def test_management_set_of_priority1_when_enabled_changes_the_announce() -> None:
    port = make(management="get-set")
    run(port, 7 * S)
    reply = c.decode(port.handle_rx(management(c.SET, c.PRIORITY1, bytes([10, 0])), SRC, None, 8 * S)[0].data)
    assert reply.action == c.ACKNOWLEDGE and port.priority1 == 10
    assert port.last_set == ("priority1", 128, 10, "10.0.0.2")
    sent = run(port, 10 * S)
    assert next(m for m in sent if isinstance(m, c.Announce)).gm_priority1 == 10


def test_g8275_1_refuses_priority1_and_udp() -> None:
    _config, errors, _ = resolve(load_profile("g8275.1"), {"priority1": 100, "transport": "udp4"})
    assert any("priority1" in e for e in errors) and any("transport" in e for e in errors)
    config, errors, warnings = resolve(load_profile("default-e2e"), {"log_sync_interval": -4})
    assert not errors and config.log_sync_interval == -4 and "outside" in warnings[0]
    config, errors, _ = resolve(load_profile("g8275.1"), {"transport": "l2"})
    assert config.domain == 24 and config.log_sync_interval == -4 and config.master_only


def test_a_flood_from_one_source_is_rate_limited() -> None:
    port = make(rate_limit_per_s=10.0)
    run(port, 7 * S)
    answered = sum(1 for i in range(100) if port.handle_rx(delay_req(i), SRC, 5, 8 * S))
    assert answered == 10 and port.counters["drop_rate_limited"] == 90


def test_announced_quality_worsens_at_once_improves_only_after_holding() -> None:
    q = AnnouncedQuality()
    assert q.apply(LOCKED, 0).offset_scaled_log_variance == 0x4F00
    assert q.apply(dataclasses.replace(LOCKED, offset_scaled_log_variance=0x4E01), 1 * S).offset_scaled_log_variance \
        == 0x4F00  # same step: no change at all
    worse = q.apply(dataclasses.replace(LOCKED, clock_accuracy=0x22), 2 * S)
    assert worse.clock_accuracy == 0x22  # worse: at once
    for t in range(3, 32):
        assert q.apply(LOCKED, t * S).clock_accuracy == 0x22  # better: not yet
    assert q.apply(LOCKED, 33 * S).clock_accuracy == 0x21  # better for 30 s: now
    assert q.apply(HOLDOVER, 34 * S).clock_accuracy == 0x23  # a class change takes the values of the moment
    assert q.apply(dataclasses.replace(HOLDOVER, clock_class=6, clock_accuracy=0x20), 35 * S).clock_accuracy == 0x20


def test_path_trace_is_off_by_default_and_when_on_announces_carry_the_grandmaster() -> None:
    plain = next(m for m in run(make(), 7 * S) if isinstance(m, c.Announce))
    assert not any(isinstance(t, c.PathTraceTlv) for t in plain.tlvs)
    port = make(path_trace=True)
    ann = next(m for m in run(port, 7 * S) if isinstance(m, c.Announce))
    assert [t for t in ann.tlvs if isinstance(t, c.PathTraceTlv)] == [c.PathTraceTlv((OWN,))]
    # management: the list (a grandmaster's path is itself) and whether the option is on
    for mid, body in ((c.PATH_TRACE_LIST, OWN), (c.PATH_TRACE_ENABLE, c.OneOctetBody(1).pack())):
        reply = c.decode(port.handle_rx(management(c.GET, mid), SRC, None, 8 * S)[0].data)
        assert isinstance(reply, c.Management) and reply.tlvs[0] == c.ManagementTlv(mid, body)
    reply = c.decode(make().handle_rx(management(c.GET, c.PATH_TRACE_ENABLE), SRC, None, 8 * S)[0].data)
    assert reply.tlvs[0] == c.ManagementTlv(c.PATH_TRACE_ENABLE, c.OneOctetBody(0).pack())


def test_with_path_trace_an_announce_that_went_round_a_loop_is_discarded() -> None:
    port = make(view=HOLDOVER, path_trace=True)
    run(port, 7 * S)
    header = c.Header(c.MsgType.ANNOUNCE, 0, c.PortIdentity(OTHER, 1), 0, log_interval=1, flags=c.FLAG_PTP_TIMESCALE)

    def looped(seq: int) -> bytes:
        return c.encode(c.Announce(dataclasses.replace(header, sequence_id=seq), 0, 37, 128,
                                   c.ClockQuality(6, 0x21, 0x4E5D), 128, OTHER, 1, 0x20,
                                   (c.PathTraceTlv((OTHER, OWN)),)))
    for seq, t in ((1, 8), (2, 9), (3, 10)):
        port.handle_rx(looped(seq), ("10.0.0.9", 320), None, t * S)
    assert port.state == MASTER and port.counters["drop_announce_path_loop"] == 3  # never a foreign master


def send_times(port: PtpPort, start_ns: int, until_ns: int, step_ns: int = 1_000_000) -> dict[str, list[int]]:
    """When each Sync and Announce left, stepping the timers every ``step_ns``."""
    times: dict[str, list[int]] = {"Sync": [], "Announce": []}
    for t in range(start_ns, until_ns, step_ns):
        for action in port.handle_timer(t, 1_800_000_000 * S + t):
            name = type(c.decode(action.data)).__name__
            if name in times:
                times[name].append(t)
    return times


def closest_ns(a: list[int], b: list[int]) -> int:
    return min(abs(x - y) for x in a for y in b)


@pytest.mark.parametrize("profile,sync_ns,announce_ns", [("default-e2e", S, 2 * S), ("g8275.1", S // 16, S // 8)])
def test_announces_run_halfway_between_syncs_never_right_ahead_of_one(profile: str, sync_ns: int,
                                                                      announce_ns: int) -> None:
    port = make(profile)
    run(port, 7 * S)
    assert port.state == MASTER
    times = send_times(port, 7 * S, 17 * S)
    assert abs(len(times["Announce"]) - 10 * S // announce_ns) <= 1
    assert abs(len(times["Sync"]) - 10 * S // sync_ns) <= 1
    assert closest_ns(times["Announce"], times["Sync"]) >= min(sync_ns, announce_ns) // 2 - 1_000_000
    # an Announce sent at once for a change of quality is one more; the periodic ones keep their phase
    port.update_view(HOLDOVER, 17 * S)
    [extra] = [m for a in port.handle_timer(17 * S, 0) for m in [c.decode(a.data)] if isinstance(m, c.Announce)]
    assert extra.gm_clock_quality.clock_class == 7
    later = send_times(port, 17 * S + 1_000_000, 27 * S)
    assert closest_ns(later["Announce"], later["Sync"]) >= min(sync_ns, announce_ns) // 2 - 1_000_000
