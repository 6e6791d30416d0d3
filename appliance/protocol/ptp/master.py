"""The master role of a PTP port: what it sends while MASTER, and the unicast streams it grants.

Pure core.  ``MasterRole`` is a part of the port (port.py).  Entering MASTER starts the Announce stream, the multicast
Sync stream (or tells the native sender to: native_api.py), the SMPTE metadata and the negotiated clients' streams.
The port is two-step: a Sync leaves with an estimate and its Follow_Up carries the transmit timestamp; each Sync's
transmit timestamp is held against the slot it was due in (``sync_lateness``, lateness.py): how late the port sends
under load.  Announces run half an interval off the Syncs (``announce_phase_ns``).  A Delay_Req is answered with its
receive time (11.3); a unicast one only for a client granted Delay_Resp.  Signaling (16.1) asks for, renews and
cancels grants (unicast.py); each granted stream runs on its own timer, at the granted interval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.outputs.ptp.lateness import SyncLateness
from appliance.outputs.ptp.notices import MasterAgain, PortNotice
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.extensions import Extensions
from appliance.protocol.ptp.fsm import MASTER
from appliance.protocol.ptp.port_common import Send, Timers, TxTimestamps, interval_ns
from appliance.protocol.ptp.profiles import PortConfig
from appliance.protocol.ptp.unicast import Negotiation, SlavesSeen, StreamChange, UnicastClient, for_us
from appliance.units import NS_PER_S

MASTER_TIMERS = ("announce", "announce-now", "sync", "smpte")
UNICAST_TIMERS = ("u-sync", "u-announce", "u-expire")
_STREAM = {c.MsgType.SYNC: "sync", c.MsgType.ANNOUNCE: "announce", c.MsgType.DELAY_RESP: "delay"}


def next_slot(at_ns: int, step_ns: int, now_ns: int) -> int:
    """The next message of a periodic stream: one interval after the last, or, when the timer fired more than an
    interval late, one interval from now -- a late Sync is sent late rather than dropped, and a stall is not
    followed by a burst of catch-up messages."""
    nxt = at_ns + step_ns
    return nxt if nxt > now_ns else now_ns + step_ns


def announce_phase_ns(log_sync: int, log_announce: int) -> int:
    """Announces run half of the shorter interval after the Syncs, so that a Sync never leaves right behind an
    Announce of ours: it would queue behind it after its transmit timestamp (in the NIC or a switch without PTP
    support: a path delay the slave cannot measure), and in software its timing would depend on what went just before
    it.  Halfway also spreads the port's sends evenly."""
    return min(interval_ns(log_sync), interval_ns(log_announce)) // 2


def encode_announce(config: PortConfig, identity: c.PortIdentity, view: GrandmasterView, priority1: int,
                    priority2: int, unicast: bool, log_interval: int) -> bytes:
    """What an Announce says now, with sequenceId and originTimestamp 0 (filled in per message: ``codec.restamp``)."""
    v = view
    flags = ((c.FLAG_LEAP61 if v.leap61 else 0) | (c.FLAG_LEAP59 if v.leap59 else 0)
             | (c.FLAG_UTC_OFFSET_VALID if v.utc_offset_valid else 0)
             | (c.FLAG_PTP_TIMESCALE if v.ptp_timescale else 0)
             | (c.FLAG_TIME_TRACEABLE if v.time_traceable else 0)
             | (c.FLAG_FREQUENCY_TRACEABLE if v.frequency_traceable else 0)
             | (c.FLAG_UNICAST if unicast else 0))
    tlvs: tuple[Any, ...] = ()
    if config.c37238_tlv:
        bound = v.error_bound_ns
        tlvs = (c.c37238_2017_tlv(config.grandmaster_id, 0xFFFFFFFF if bound is None else min(bound, 0xFFFFFFFE)),)
    if config.path_trace:  # 16.2.3: a grandmaster's path is itself
        tlvs += (c.PathTraceTlv((identity.clock_identity,)),)
    header = c.Header(c.MsgType.ANNOUNCE, config.domain, identity, 0, flags=flags, log_interval=log_interval)
    return c.encode(c.Announce(header, 0, v.current_utc_offset, priority1,
                               c.ClockQuality(v.clock_class, v.clock_accuracy, v.offset_scaled_log_variance),
                               priority2, identity.clock_identity, 0, v.time_source, tlvs))


class MasterRole:
    """The port's master side; the attributes below are the port's."""

    config: PortConfig
    identity: c.PortIdentity
    view: GrandmasterView
    priority1: int
    priority2: int
    log_sync: int
    log_announce: int
    timers: Timers
    pending: TxTimestamps
    extensions: Extensions
    negotiation: Negotiation
    slaves: SlavesSeen
    sync_lateness: SyncLateness
    sync_offload: bool
    delay_offload: bool
    outranked_by: tuple[bytes, c.PortIdentity] | None
    address_key: Callable[[Any], Any]
    _stream_changes: list[tuple[str, Any, str]]
    _announce_cache: dict[tuple[int, bool], tuple[Any, bytes]]
    state: str
    count: Callable[..., None]
    notice: Callable[[PortNotice], None]
    next_seq: Callable[..., int]
    header: Callable[..., c.Header]

    # --- entering MASTER ----------------------------------------------------------------------------------------
    def _master_entered(self, now_ns: int, reason: str) -> None:
        """MASTER's entry actions: its streams start, and whoever silenced it is told it is master again."""
        if self.outranked_by is not None:
            self.notice(MasterAgain(reason, self.outranked_by[0]))
            self.outranked_by = None
        self.timers.at(now_ns + announce_phase_ns(self.log_sync, self.log_announce), "announce")
        if self.extensions.sync_metadata is not None:
            self.timers.at(now_ns + announce_phase_ns(self.log_sync, 0), "smpte")
        if self.config.multicast:
            if self.sync_offload:
                self._stream_changes.append(("start", None, "sync"))
            else:
                self.timers.at(now_ns, "sync")
        if self.sync_offload:  # offloaded streams resume with the sender
            return
        for key, client in self.negotiation.clients.items():  # negotiated streams resume
            sync, announce = client.grants.get(c.MsgType.SYNC), client.grants.get(c.MsgType.ANNOUNCE)
            if sync is not None:
                self.timers.at(now_ns, "u-sync", key)
            if announce is not None:
                phase = 0 if sync is None else announce_phase_ns(sync.log_interval, announce.log_interval)
                self.timers.at(now_ns + phase, "u-announce", key)

    # --- the multicast streams --------------------------------------------------------------------------------------
    def _master_timer(self, kind: str, at: int, now_ns: int, served_ns: int) -> list[Send]:
        if self.state != MASTER:
            return []
        periodic = {"announce": interval_ns(self.log_announce), "sync": interval_ns(self.log_sync),
                    "smpte": NS_PER_S}
        if self.extensions.held():  # 802.1AS: nothing is sent to a port that is not asCapable
            if kind in periodic:
                self.timers.at(next_slot(at, periodic[kind], now_ns), kind)
            self.count(f"held_{kind.removesuffix('-now')}_not_as_capable")
            return []
        if kind == "smpte":
            if self.extensions.sync_metadata is None:
                return []
            self.timers.at(next_slot(at, NS_PER_S, now_ns), kind)
            header = self.header(c.MsgType.MANAGEMENT, self.next_seq(c.MsgType.MANAGEMENT))
            self.count("tx_smpte_metadata")
            return [Send(self.extensions.metadata_message(header, served_ns, self.view), False, None)]
        if kind in periodic and (kind != "sync" or self.config.multicast):
            self.timers.at(next_slot(at, periodic[kind], now_ns), kind)
        if not self.config.multicast:
            return []
        if kind == "sync":
            return self._sync(served_ns, None, self.log_sync, now_ns, at)
        return [self._announce(served_ns)]

    def _announce(self, served_ns: int, client: UnicastClient | None = None, log_interval: int | None = None) -> Send:
        """An Announce: encoded once for what it says (the view, priorities, interval, flags), then per client and
        second only its sequenceId and originTimestamp rewritten (``codec.restamp``)."""
        log = self.log_announce if log_interval is None else log_interval
        self.count("tx_announce")
        data = c.restamp(self.announce_bytes(log, client is not None), self.next_seq(c.MsgType.ANNOUNCE, client),
                         max(0, served_ns))
        return Send(data, False, client.address if client else None)

    def announce_bytes(self, log_interval: int, unicast: bool) -> bytes:
        """What an Announce at this interval says now, with sequenceId and originTimestamp 0."""
        said = (self.view, self.priority1, self.priority2)
        cached = self._announce_cache.get((log_interval, unicast))
        if cached is None or cached[0] != said:
            data = encode_announce(self.config, self.identity, self.view, self.priority1, self.priority2, unicast,
                                   log_interval)
            cached = self._announce_cache[(log_interval, unicast)] = (said, data)
        return cached[1]

    def _sync(self, served_ns: int, client: UnicastClient | None, log_interval: int, now_ns: int,
              slot_ns: int) -> list[Send]:
        """A two-step Sync for the slot due at ``slot_ns`` (monotonic).  The slot goes with it onto the served clock
        through the pair the edge read together (``now_ns``, ``served_ns``), so that its transmit timestamp, on the
        served clock too, tells how late it left (``sync_lateness``)."""
        seq = self.next_seq(c.MsgType.SYNC, client)
        flags = c.FLAG_TWO_STEP | (c.FLAG_UNICAST if client is not None else 0)
        to = client.address if client is not None else None
        slot_served_ns = served_ns - (now_ns - slot_ns)
        token = self.pending.expect(c.MsgType.SYNC, (seq, to, log_interval, flags, slot_served_ns), now_ns)
        self.count("tx_sync")
        data = c.encode_timestamped(c.MsgType.SYNC, self.config.domain, self.identity, seq, flags, log_interval,
                                    max(0, served_ns))
        return [Send(data, True, to, token=token)]

    def _follow_up(self, context: Any, tx_ts_ns: int) -> list[Send]:
        seq, to, log_interval, flags, slot_served_ns = context
        self.sync_lateness.add(tx_ts_ns - slot_served_ns)
        self.count("tx_follow_up")
        return [Send(c.encode_timestamped(c.MsgType.FOLLOW_UP, self.config.domain, self.identity, seq,
                                          flags & c.FLAG_UNICAST, log_interval, tx_ts_ns), False, to)]

    # --- answering Delay_Req (11.3) -------------------------------------------------------------------------------
    def _on_delay_req(self, msg: c.DelayReq, source: Any, rx_ts_ns: int | None, now_ns: int) -> list[Send]:
        cfg = self.config
        if self.state != MASTER:
            self.count("drop_not_master")
            return []
        if cfg.delay_mechanism != "e2e":
            self.count("drop_wrong_delay_mechanism")
            return []
        if rx_ts_ns is None:
            self.count("drop_no_rx_timestamp")
            return []
        unicast = bool(msg.header.flags & c.FLAG_UNICAST)
        log_interval = cfg.log_min_delay_req_interval
        if unicast and cfg.unicast_negotiation:
            grant = self.negotiation.grant((self.address_key(source), msg.header.source_port), c.MsgType.DELAY_RESP)
            if grant is None:
                self.count("drop_no_grant")
                return []
            log_interval = grant.log_interval
        self.slaves.seen(msg.header.source_port, source, now_ns, "e2e")
        self.count("tx_delay_resp")
        data = c.encode_timestamped(c.MsgType.DELAY_RESP, cfg.domain, self.identity, msg.header.sequence_id,
                                    c.FLAG_UNICAST if unicast else 0, log_interval, rx_ts_ns, msg.header.correction,
                                    msg.header.source_port)
        return [Send(data, False, source if unicast else None)]

    # --- unicast negotiation (16.1) ---------------------------------------------------------------------------------
    def _on_signaling(self, msg: c.Signaling, source: Any, now_ns: int) -> list[Send]:
        if not for_us(msg.target_port, self.identity):
            self.count("drop_signaling_not_for_us")
            return []
        replies: list[Any] = []
        key = (self.address_key(source), msg.header.source_port)
        for tlv in msg.tlvs:
            if isinstance(tlv, c.RequestUnicastTransmissionTlv):
                reply, change = self.negotiation.request(key, source, tlv, now_ns, self.state == MASTER)
                if reply.duration_s:
                    grant = self.negotiation.grant(key, int(tlv.message_type))
                    assert grant is not None
                    self.timers.at(grant.expires_ns, "u-expire", (key, int(tlv.message_type)))
                replies.append(reply)
            elif isinstance(tlv, c.CancelUnicastTransmissionTlv):
                change = self.negotiation.cancel(key, int(tlv.message_type))
                replies.append(c.AcknowledgeCancelUnicastTransmissionTlv(tlv.message_type))
            else:
                continue
            if change is not None:
                self._stream_changed(change, now_ns)
        if not replies:
            return []
        header = self.header(c.MsgType.SIGNALING, self.next_seq(c.MsgType.SIGNALING), flags=c.FLAG_UNICAST)
        self.count("tx_signaling")
        return [Send(c.encode(c.Signaling(header, msg.header.source_port, tuple(replies))), False, source)]

    def _stream_changed(self, change: StreamChange, now_ns: int) -> None:
        """A granted stream starts or stops: its timers, or the native sender's streams (``take_stream_changes``)."""
        kind = _STREAM.get(c.MsgType(change.message_type))
        offloaded = self.delay_offload if kind == "delay" else self.sync_offload
        if kind is None or (kind == "delay" and not offloaded):
            return
        if offloaded:
            self._stream_changes.append(("start" if change.start else "stop", change.key, kind))
        elif change.start:
            self._phase_streams(change.key, change.message_type, now_ns)

    def _phase_streams(self, key: Any, granted: int, now_ns: int) -> None:
        """A new or changed Sync or Announce stream to a client: the Sync stream (re)starts now, or keeps its phase,
        and the Announce stream runs half an interval off it (``announce_phase_ns``)."""
        sync = self.negotiation.grant(key, c.MsgType.SYNC)
        announce = self.negotiation.grant(key, c.MsgType.ANNOUNCE)
        if granted == c.MsgType.SYNC:
            self.timers.at(now_ns, "u-sync", key)
        if announce is None:
            return
        if sync is None:
            self.timers.at(now_ns, "u-announce", key)
            return
        step = interval_ns(sync.log_interval)
        due = self.timers.due_ns("u-sync", key)
        at = (now_ns if due is None else due) - step + announce_phase_ns(sync.log_interval, announce.log_interval)
        self.timers.at(at if at >= now_ns else at + step, "u-announce", key)  # the first Announce slot from now

    def _unicast_timer(self, kind: str, key: Any, at: int, now_ns: int, served_ns: int) -> list[Send]:
        if kind == "u-expire":
            client_key, mtype = key
            change = self.negotiation.expire(client_key, mtype, now_ns)
            if change is not None:
                self._stream_changed(change, now_ns)
            return []
        client = self.negotiation.clients.get(key)
        mtype = c.MsgType.SYNC if kind == "u-sync" else c.MsgType.ANNOUNCE
        grant = client.grants.get(mtype) if client is not None else None
        if client is None or grant is None or self.state != MASTER:
            return []
        self.timers.at(next_slot(at, interval_ns(grant.log_interval), now_ns), kind, key)
        if mtype == c.MsgType.SYNC:
            client.sent_sync += 1
            return self._sync(served_ns, client, grant.log_interval, now_ns, at)
        return [self._announce(served_ns, client, grant.log_interval)]
