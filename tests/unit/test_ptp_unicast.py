"""The grandmaster port's unicast negotiation (IEEE 1588-2019 16.1): grants, denials, cancels, expiry, the granted
streams' phases, and the streams it hands a native sender instead of sending them itself."""

from __future__ import annotations

import ast
import inspect

from appliance.edge.ptp import native_sync
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.fsm import MASTER
from tests.unit.test_ptp_port import OTHER, SLAVE, SRC, S, closest_ns, make, run, send_times


def signaling(*tlvs: object, source: c.PortIdentity = SLAVE) -> bytes:
    header = c.Header(c.MsgType.SIGNALING, 44, source, 1, flags=c.FLAG_UNICAST)
    return c.encode(c.Signaling(header, c.PortIdentity(b"\xff" * 8, 0xFFFF), tuple(tlvs)))  # type: ignore[arg-type]


def test_unicast_negotiation_grants_streams_and_cancels() -> None:
    port = make("g8275.2")
    run(port, 1 * S)
    assert port.state == MASTER  # masterOnly: no listening
    req = signaling(c.RequestUnicastTransmissionTlv(c.MsgType.ANNOUNCE, 0, 300),
                    c.RequestUnicastTransmissionTlv(c.MsgType.SYNC, -3, 30),
                    c.RequestUnicastTransmissionTlv(c.MsgType.DELAY_RESP, -3, 5000))
    out = port.handle_rx(req, SRC, None, 2 * S)
    grants = c.decode(out[0].data).tlvs
    assert [g.duration_s for g in grants] == [300, 60, 1000]  # clamped into 60..1000 s
    assert all(isinstance(g, c.GrantUnicastTransmissionTlv) and g.renewal_invited for g in grants)
    syncs = [m for a in port.handle_timer(3 * S, 0) for m in [c.decode(a.data)] if isinstance(m, c.Sync)]
    sent = []
    for t in range(3 * S, 4 * S, 10_000_000):
        for a in port.handle_timer(t, 0):
            m = c.decode(a.data)
            if isinstance(m, c.Sync):
                assert a.to == SRC and m.header.flags & c.FLAG_UNICAST and m.header.log_interval == -3
                sent.append(m)
    assert 7 <= len(sent) + len(syncs) <= 10  # 8 a second
    seqs = [m.header.sequence_id for m in sent]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    # a unicast Delay_Req from the client is answered; from a stranger it is not
    dreq = c.encode(c.DelayReq(c.Header(c.MsgType.DELAY_REQ, 44, SLAVE, 3, flags=c.FLAG_UNICAST), 0))
    assert c.decode(port.handle_rx(dreq, SRC, 99, 4 * S)[0].data).receive_ts_ns == 99
    assert port.handle_rx(dreq, ("10.0.0.77", 320), 99, 4 * S) == []
    # the Sync grant expires after 60 s; cancel of the rest is acknowledged
    port.handle_timer(63 * S, 0)
    assert c.MsgType.SYNC not in port.clients[("10.0.0.2", SLAVE)].grants
    out = port.handle_rx(signaling(c.CancelUnicastTransmissionTlv(c.MsgType.ANNOUNCE),
                                   c.CancelUnicastTransmissionTlv(c.MsgType.DELAY_RESP)), SRC, None, 64 * S)
    assert all(isinstance(t, c.AcknowledgeCancelUnicastTransmissionTlv) for t in c.decode(out[0].data).tlvs)
    assert port.clients == {}


def test_unicast_denied_outside_the_profile_rates_and_beyond_capacity() -> None:
    port = make("g8275.2", unicast_max_clients=1)
    run(port, 1 * S)
    too_fast = port.handle_rx(signaling(c.RequestUnicastTransmissionTlv(c.MsgType.SYNC, -8, 60)), SRC, None, 2 * S)
    assert c.decode(too_fast[0].data).tlvs[0].duration_s == 0
    port.handle_rx(signaling(c.RequestUnicastTransmissionTlv(c.MsgType.SYNC, 0, 60)), SRC, None, 2 * S)
    second = c.PortIdentity(OTHER, 1)
    out = port.handle_rx(signaling(c.RequestUnicastTransmissionTlv(c.MsgType.SYNC, 0, 60), source=second),
                         ("10.0.0.3", 320), None, 2 * S)
    assert c.decode(out[0].data).tlvs[0].duration_s == 0
    assert port.counters["unicast_denied_capacity"] == 1 and port.counters["unicast_denied_rate"] == 1


def test_unicast_announces_run_halfway_between_the_clients_syncs() -> None:
    port = make("g8275.2")
    run(port, 1 * S)
    # Announce granted first (as ptp4l asks), Sync a little later: the Announce stream is moved off the Syncs.
    port.handle_rx(signaling(c.RequestUnicastTransmissionTlv(c.MsgType.ANNOUNCE, 0, 300)), SRC, None, 2 * S)
    port.handle_rx(signaling(c.RequestUnicastTransmissionTlv(c.MsgType.SYNC, 0, 300)), SRC, None,
                   2 * S + 300_000_000)
    times = send_times(port, 2 * S + 300_000_000, 12 * S)
    assert len(times["Sync"]) == 10 and len(times["Announce"]) >= 9
    assert closest_ns(times["Announce"], times["Sync"]) >= S // 2 - 1_000_000


def test_offloaded_unicast_syncs_are_announced_as_stream_changes_not_sent() -> None:
    """With a native sender taking the Syncs and unicast Announces, the port says which clients' streams start and
    stop, sends neither itself (Delay_Resps still), and counts what the sender reports as its own."""
    port = make("g8275.2")
    port.sync_offload = True
    run(port, 1 * S)
    req = signaling(c.RequestUnicastTransmissionTlv(c.MsgType.ANNOUNCE, 0, 300),
                    c.RequestUnicastTransmissionTlv(c.MsgType.SYNC, -3, 300))
    port.handle_rx(req, SRC, None, 2 * S)
    key = ("10.0.0.2", SLAVE)
    assert port.take_stream_changes() == [("start", key, "announce"), ("start", key, "sync")]
    kinds = {type(c.decode(a.data)).__name__ for t in range(2 * S, 4 * S, 10_000_000) for a in port.handle_timer(t, 0)}
    assert "Sync" not in kinds and "Announce" not in kinds  # both the sender's
    # the same interval again is a renewal: the stream runs on; a new interval restarts it
    port.handle_rx(signaling(c.RequestUnicastTransmissionTlv(c.MsgType.SYNC, -3, 300)), SRC, None, 5 * S)
    assert port.take_stream_changes() == []
    port.handle_rx(signaling(c.RequestUnicastTransmissionTlv(c.MsgType.SYNC, -4, 300)), SRC, None, 6 * S)
    assert port.take_stream_changes() == [("start", key, "sync")]
    log_interval, sync, fup = port.sync_stream(key)
    assert log_interval == -4
    assert c.decode(sync).header.log_interval == -4 and c.decode(sync).header.flags & c.FLAG_UNICAST
    assert isinstance(c.decode(fup), c.FollowUp) and len(sync) == len(fup) == 44
    port.handle_rx(signaling(c.CancelUnicastTransmissionTlv(c.MsgType.SYNC)), SRC, None, 7 * S)
    assert port.take_stream_changes() == [("stop", key, "sync")]
    # a grant that expires stops its stream too
    port.handle_rx(signaling(c.RequestUnicastTransmissionTlv(c.MsgType.SYNC, -3, 60)), SRC, None, 8 * S)
    port.handle_timer(69 * S, 0)
    assert port.take_stream_changes() == [("start", key, "sync"), ("stop", key, "sync")]
    assert port.announce_stream(key) == 0 and c.decode(port.unicast_announce(0)).header.flags & c.FLAG_UNICAST
    port.add_offloaded({"announces": 3, "syncs": 8, "follow_ups": 7, "timestamps_lost": 1, "late_bins": [(3, 6), (40, 1)],
                        "late_count": 7, "late_over_1ms": 0, "late_max_ns": 70_000})
    snap = port.snapshot(70 * S)
    assert snap["counters"]["tx_sync"] == 8 and snap["counters"]["tx_follow_up"] == 7
    assert snap["counters"]["tx_announce"] == 3
    assert snap["counters"]["tx_timestamp_missing"] == 1
    assert snap["sync_lateness"]["syncs"] == 7 and snap["sync_lateness"]["max_us"] == 70.0


def test_an_offloaded_multicast_sync_stream_starts_whenever_the_port_becomes_master() -> None:
    port = make("default-e2e")
    port.sync_offload = True
    sent = run(port, 10 * S)
    assert port.state == MASTER and port.take_stream_changes() == [("start", None, "sync")]
    assert not any(isinstance(m, c.Sync) for m in sent) and any(isinstance(m, c.Announce) for m in sent)
    log_interval, sync, fup = port.sync_stream(None)
    assert log_interval == port.log_sync and not c.decode(sync).header.flags & c.FLAG_UNICAST
    port.sync_sequence(None)[c.MsgType.SYNC] = 41  # what a sender hands back
    port.fault(11 * S, "link down")
    port.fault_cleared(12 * S)
    run(port, 30 * S)
    assert port.state == MASTER and port.take_stream_changes() == [("start", None, "sync")]
    assert port.sync_sequence(None)[c.MsgType.SYNC] == 41


def test_the_port_has_every_attribute_the_native_sender_uses() -> None:
    """native_sync.py drives the port through ``port.<name>``: each of those names is the port's."""
    tree = ast.parse(inspect.getsource(native_sync))
    used = {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "port"}
    port = make("g8275.2")
    assert {"announce_phase_ns", "sync_stream", "take_stream_changes"} <= used
    assert [name for name in sorted(used) if not hasattr(port, name)] == []
    assert port.announce_phase_ns(-3, 0) == 62_500_000
