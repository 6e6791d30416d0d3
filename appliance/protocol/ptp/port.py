"""One PTP port, sans-IO: bytes and timestamps in, actions out.  The appliance runs it twice: as its grandmaster
output, and as the slaveOnly port of its upstream PTP reference.

Pure core.  Every call returns a list of actions: ``Send`` (port_common.py; the edge sends it and, for a ``token``,
reports the transmit timestamp) and, from the slave role, ``PtpMeasurement`` (measure.py):

    handle_rx(data, source, rx_ts_ns, now_ns)   a datagram received, with its receive timestamp (None: none)
    handle_timer(now_ns, clock_ns)              the timers due at ``now_ns``; ``clock_ns``: the port's clock now
    handle_tx_timestamp(token, tx_ts_ns)        the transmit timestamp of a ``Send`` with a ``token``
    start(now_ns), fault(now_ns, reason)        the transport opened (or is usable again), or is lost

``now_ns`` is monotonic, for timers; ``rx_ts_ns``, ``tx_ts_ns`` and ``clock_ns`` are on the port's clock (TAI ns, the
PTP timescale): the served clock for the grandmaster, the local clock for the reference; the edge maps its kernel
timestamps onto it.

The port state machine is a table (fsm.py): Figure 30 without its slave side for the grandmaster, Figure 31 for a
slaveOnly port; the BMCA (bmca.py) recommends a state, and entering one runs its entry actions here.  The roles are
parts of the port: the master role (master.py) sends Announce, Sync and Follow_Up and answers Delay_Req and unicast
negotiation (unicast.py); the slave role (slave.py) follows and measures its parent (measure.py).  Whatever its
state, the port answers Pdelay_Req and, with the peer delay mechanism, measures its link (pdelay.py); answers
management (management.py); and passes what it sends and receives through the profile's and the security settings'
extensions (extensions.py: 802.1AS, SMPTE ST 2059-2, the AUTHENTICATION TLV).  A native sender may take over its Sync
streams (native_api.py).  Anything malformed, from another domain or SDO, from ourselves, over a client's rate or
outside the allowed networks is dropped and counted by reason, never raised.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from functools import wraps
from typing import Any, TypeAlias

from appliance.outputs.ptp.datasets import AnnouncedQuality, GrandmasterView
from appliance.outputs.ptp.lateness import SyncLateness
from appliance.outputs.ptp.notices import Outranked, PortNotice
from appliance.protocol.limits import AccessRules, Limit, RateLimiter
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp import management
from appliance.protocol.ptp.bmca import Candidate, Decision, ForeignMasters, best, decide
from appliance.protocol.ptp.extensions import Extensions
from appliance.protocol.ptp.fsm import (ANNOUNCE_RECEIPT_TIMEOUT, FAULT_CLEARED, FAULT_DETECTED, INIT_COMPLETE,
                                        INITIALIZING, LISTENING, MASTER, OPERATIONAL, PASSIVE, RS_MASTER, RS_PASSIVE,
                                        SLAVE, UNCALIBRATED, StateMachine, table_for)
from appliance.protocol.ptp.master import MASTER_TIMERS, UNICAST_TIMERS, MasterRole
from appliance.protocol.ptp.measure import DelayFilter, PtpMeasurement, SlaveMeasure, ns
from appliance.protocol.ptp.native_api import NativeSenderApi
from appliance.protocol.ptp.pdelay import Exchange, PeerDelay, answer_pdelay_req, pdelay_resp_follow_up
from appliance.protocol.ptp.port_common import Send, Timers, TxTimestamps, admit, interval_ns
from appliance.protocol.ptp.port_status import master_snapshot, slave_snapshot
from appliance.protocol.ptp.profiles import PortConfig
from appliance.protocol.ptp.security import PortSecurity
from appliance.protocol.ptp.smpte import SyncMetadata
from appliance.protocol.ptp.slave import SlaveRole
from appliance.protocol.ptp.unicast import GrantRequests, Negotiation, SlavesSeen, address_text
from appliance.protocol.ptp.unicast import address_key as unicast_address_key

Action: TypeAlias = Send | PtpMeasurement
MAX_NOTICES = 256  # notices the edge has not taken yet; beyond, the oldest go (the edge takes them after every call)
# Timers that belong to a state's activity, not to a grant: a fault stops them (the grants' run on, to expire).
STATE_TIMERS = ("listening", "foreign", "pdelay", "delay_req", "u-request") + MASTER_TIMERS
RATE_LIMITED = (c.DelayReq, c.PdelayReq, c.Management, c.Signaling)


def _outgoing(method: Callable[..., list[Action]]) -> Callable[..., list[Action]]:
    """A public entry point: what it returns to the edge passes through the port's egress (extensions.py: majorSdoId
    of 802.1AS, its Follow_Up information TLV, then the AUTHENTICATION TLV), once: entry points that call one another
    apply it at the outermost."""

    @wraps(method)
    def entry(self: PtpPort, *args: Any, **kwargs: Any) -> list[Action]:
        if not self.extensions.egress_on:
            return method(self, *args, **kwargs)
        self._entry_depth += 1
        try:
            out = method(self, *args, **kwargs)
        finally:
            self._entry_depth -= 1
        if self._entry_depth:
            return out
        egress = self.extensions.egress
        return [replace(a, data=egress(a.data)) if isinstance(a, Send) else a for a in out]

    return entry


class PtpPort(MasterRole, SlaveRole, NativeSenderApi):
    """One port.  ``view``: what its clock says of itself (the grandmaster's quality; a slaveOnly port's is
    clockClass 255).  ``address_key`` turns a source into what a client is known by (the IP, or the MAC);
    ``rng`` spreads the slave role's Delay_Req times (seeded from the clock identity if omitted)."""

    def __init__(self, config: PortConfig, clock_identity: bytes, view: GrandmasterView, now_ns: int,
                 port_number: int = 1, address_key: Callable[[Any], Any] | None = None,
                 management_rules: AccessRules | None = None, security: PortSecurity | None = None,
                 sync_metadata: SyncMetadata | None = None, rng: random.Random | None = None):
        self.config = config
        self.identity = c.PortIdentity(clock_identity, port_number)
        self.fsm = StateMachine(table_for(config.slave_only), INITIALIZING, now_ns, "starting")
        self.extensions = Extensions(config, security, sync_metadata)
        self._entry_depth = 0
        self.quality = AnnouncedQuality()
        self.view = self.quality.apply(view, now_ns)
        self.priority1, self.priority2 = config.priority1, config.priority2
        self.log_sync, self.log_announce = config.log_sync_interval, config.log_announce_interval
        self.decision: Decision | None = None
        self.foreign = ForeignMasters(clock_identity, config.announce_receipt_timeout)
        self.address_key = address_key or unicast_address_key
        self.limiter = RateLimiter(config.rate_limit_per_s, max(8, int(config.rate_limit_per_s)), 65536)
        self.management_rules = management_rules
        self.counters: dict[str, int] = {}
        self.timers = Timers()
        self.pending = TxTimestamps(self.count)  # kind: the MsgType sent
        self.sequence: dict[int, int] = {}  # next sequenceId by message type (a unicast client has its own)
        self.peer = PeerDelay(self.identity, self.count)
        self.path = DelayFilter()  # E2E path delays, or the peer delay mechanism's link delays
        # the master role
        self.negotiation = Negotiation(config, self.count)
        self.slaves = SlavesSeen()
        self.sync_lateness = SyncLateness()  # each Sync's transmit timestamp against its slot
        self._announce_cache: dict[tuple[int, bool], tuple[Any, bytes]] = {}  # (interval, unicast) -> said, bytes
        self.last_set: tuple[str, int, int, str] | None = None  # the latest management SET: (name, old, new, who)
        self.notices: list[PortNotice] = []  # for the edge: SETs, a foreign master's takeover, MASTER again
        self.outranked_by: tuple[bytes, c.PortIdentity] | None = None  # the foreign master that made it PASSIVE
        # Set by the edge when a native sender sends the Syncs and the unicast Announces, and answers negotiated
        # clients' Delay_Reqs (native_api.py).
        self.sync_offload = self.delay_offload = False
        self._stream_changes: list[tuple[str, Any, str]] = []
        # the slave role
        self.parent: c.PortIdentity | None = None
        self.parent_announce: c.Announce | None = None
        self.measure = SlaveMeasure(self.identity, config.log_min_delay_req_interval, config.arb_timescale,
                                    config.tai_utc_s, self.count)
        self.rng = rng if rng is not None else random.Random(int.from_bytes(clock_identity, "big"))
        self.requests = GrantRequests(config, self.address_key)

    # --- state --------------------------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        return self.fsm.state

    @property
    def reason(self) -> str:
        return self.fsm.reason

    @property
    def peer_delay_ns(self) -> int | None:
        """The link delay of the peer delay mechanism (802.1AS: with the neighbor rate ratio); None with E2E."""
        link = self.extensions.link
        if link is not None:
            return link.link_delay_ns
        return self.path.value_ns if self.config.delay_mechanism == "p2p" else None

    @property
    def path_delay_ns(self) -> int | None:
        """The slave role's path delay: E2E meanPathDelay, or the P2P link delay, filtered."""
        return self.path.value_ns

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def notice(self, notice: PortNotice) -> None:
        self.notices.append(notice)
        del self.notices[:-MAX_NOTICES]

    def take_notices(self) -> list[PortNotice]:
        """What happened since the last call besides what was sent (management SETs, a foreign master's takeover,
        MASTER again), oldest first, for the edge to log, alarm and audit."""
        taken, self.notices = self.notices, []
        return taken

    def _event(self, event: str, now_ns: int, reason: str) -> list[Action]:
        """Take ``event`` through the table, then the new state's entry actions (timers started)."""
        if not self.fsm.take(event, now_ns, reason):
            return []
        new = self.state
        if new == MASTER:
            self._master_entered(now_ns, reason)
        elif new == LISTENING and self.fsm.table.get((LISTENING, ANNOUNCE_RECEIPT_TIMEOUT)) is not None:
            self.timers.at(now_ns + self.config.announce_receipt_timeout * interval_ns(self.log_announce),
                           "listening")
        elif new == LISTENING and self.config.slave_only and self.config.unicast_negotiation:
            self.timers.at(now_ns, "u-request")
        if new in (LISTENING, MASTER, PASSIVE) and self.config.delay_mechanism == "p2p":
            self.timers.at(now_ns, "pdelay")
        return []

    @_outgoing
    def start(self, now_ns: int) -> list[Action]:
        """The transport is open (again, after a fault): INITIALIZING, then LISTENING (a masterOnly port: MASTER)."""
        self._event(FAULT_CLEARED, now_ns, "transport usable again")
        out = self._event(INIT_COMPLETE, now_ns, "initialized")
        if self.config.master_only:  # a masterOnly port does not wait to hear a better master (G.8275.x)
            out += self._event(RS_MASTER, now_ns, "masterOnly port (profile)")
        return out

    fault_cleared = start

    @_outgoing
    def fault(self, now_ns: int, reason: str) -> list[Action]:
        """The edge lost its transport: FAULTY; what the port heard and measured is forgotten (grants run on)."""
        out = self._event(FAULT_DETECTED, now_ns, reason)
        self._forget_parent()
        self.foreign.masters.clear()
        self.pending.clear()
        self.peer.clear()
        self.path.clear()
        for kind in STATE_TIMERS:
            self.timers.cancel(kind)
        return out

    @_outgoing
    def update_view(self, view: GrandmasterView, now_ns: int) -> list[Action]:
        """The clock's quality changed (or the second ticked): re-run the BMCA when what we announce changed, and
        tell the network at once rather than at the next Announce."""
        view = self.quality.apply(view, now_ns)
        changed = _announced(view) != _announced(self.view)
        quality_changed = (view.clock_class, view.clock_accuracy, view.offset_scaled_log_variance) != (
            self.view.clock_class, self.view.clock_accuracy, self.view.offset_scaled_log_variance)
        self.view = view
        out: list[Action] = []
        if quality_changed and self.state in (MASTER, PASSIVE):
            out += self._run_bmca(now_ns)
        if changed and self.state == MASTER:
            self.timers.at(now_ns, "announce-now")  # one extra Announce; the periodic ones keep their phase
        return out

    # --- the BMCA -------------------------------------------------------------------------------------------------
    def _run_bmca(self, now_ns: int) -> list[Action]:
        cfg = self.config
        qualified = self.foreign.qualified(now_ns)
        alternate = cfg.dataset_comparison == "g8275"
        erbest = best([Candidate.from_announce(a, self.identity, cfg.local_priority) for a in qualified], alternate)
        d = decide(self._d0(), erbest, self.state == LISTENING, cfg.master_only, alternate, cfg.slave_only)
        self.decision = d
        if d.state == MASTER:
            return self._event(RS_MASTER, now_ns, d.reason)
        if d.state == PASSIVE:
            out = self._event(RS_PASSIVE, now_ns, d.reason)
            self._note_outranked(erbest, d.reason)
            return out
        if d.state == SLAVE and erbest is not None:
            return self._follow(erbest, qualified, now_ns)
        if self.parent is not None or self.state in (UNCALIBRATED, SLAVE):
            return self._master_lost(now_ns)
        return []

    def _d0(self) -> Candidate:
        v = self.view
        return Candidate(self.priority1, self.identity.clock_identity, v.clock_class, v.clock_accuracy,
                         v.offset_scaled_log_variance, self.priority2, 0, self.identity, self.identity,
                         self.config.local_priority)

    def _note_outranked(self, erbest: Candidate | None, reason: str) -> None:
        """A foreign grandmaster keeps this port PASSIVE, silent: tell the edge who (once per master and sender)."""
        if self.state != PASSIVE or erbest is None or (erbest.gm_identity, erbest.sender) == self.outranked_by:
            return
        self.outranked_by = (erbest.gm_identity, erbest.sender)
        entry = self.foreign.masters.get(erbest.sender)
        self.notice(Outranked(erbest.gm_identity, erbest.gm_priority1, erbest.gm_class, erbest.gm_accuracy,
                              erbest.gm_variance, erbest.gm_priority2, erbest.steps_removed, erbest.sender,
                              entry.source if entry is not None else "", reason))

    def _on_announce(self, msg: c.Announce, source: Any, now_ns: int) -> list[Action]:
        if self.config.path_trace and any(isinstance(t, c.PathTraceTlv) and self.identity.clock_identity in t.path
                                          for t in msg.tlvs):
            self.count("drop_announce_path_loop")  # 16.2.5: our own Announce came back round a loop
            return []
        newly = self.foreign.on_announce(msg, now_ns, address_text(source), source)
        self._schedule_foreign()
        if self.state == LISTENING and not (newly or self.config.slave_only):
            return []  # a master listens out its receipt timeout unless a master newly qualifies
        return self._run_bmca(now_ns)

    def _schedule_foreign(self) -> None:
        nxt = self.foreign.next_expiry_ns()
        if nxt is not None:
            self.timers.at(nxt, "foreign")

    # --- timers ---------------------------------------------------------------------------------------------------
    def next_due_ns(self) -> int | None:
        due, deadline = self.timers.next_ns(), self.pending.deadline_ns()
        return min((t for t in (due, deadline) if t is not None), default=None)

    def pending_tx(self) -> bool:
        """Transmit timestamps awaited (the edge polls for them soon after a send)."""
        return bool(self.pending)

    @_outgoing
    def handle_timer(self, now_ns: int, clock_ns: int) -> list[Action]:
        """The timers due at ``now_ns``; what goes out now carries ``clock_ns``, the port's clock read with it."""
        out: list[Action] = []
        while (due := self.timers.pop(now_ns)) is not None:
            at, kind, key = due
            out += self._fire(kind, key, at, now_ns, clock_ns)
        self.pending.expire(now_ns)
        return out

    def _fire(self, kind: str, key: Any, at: int, now_ns: int, clock_ns: int) -> list[Action]:
        if kind == "listening":
            if self.state != LISTENING:
                return []
            if not self.foreign.qualified(now_ns):
                return self._event(ANNOUNCE_RECEIPT_TIMEOUT, now_ns, "no better master heard")
            out = self._run_bmca(now_ns)  # leave LISTENING through the BMCA
            return out if self.state != LISTENING else self._event(ANNOUNCE_RECEIPT_TIMEOUT, now_ns, "listening ended")
        if kind == "foreign":
            expired = self.foreign.expire(now_ns)
            out: list[Action] = []
            if (expired or (self.parent is not None and self.parent not in self.foreign.masters)) and \
                    self.state in (MASTER, PASSIVE, UNCALIBRATED, SLAVE):
                out = self._run_bmca(now_ns)
            self._schedule_foreign()
            return out
        if kind == "pdelay":
            if self.state not in OPERATIONAL:
                return []
            self.timers.at(now_ns + interval_ns(self.config.log_min_pdelay_req_interval), "pdelay")
            return self._pdelay_req(clock_ns, now_ns)
        if kind == "delay_req":
            return self._delay_req_timer(now_ns)
        if kind == "u-request":
            return self._request_grants(now_ns)
        if kind in UNICAST_TIMERS:
            return self._unicast_timer(kind, key, at, now_ns, clock_ns)
        return self._master_timer(kind, at, now_ns, clock_ns)

    # --- sending --------------------------------------------------------------------------------------------------
    def next_seq(self, msg_type: int, client: Any = None) -> int:
        """The next sequenceId of ``msg_type``: the port's, or a unicast client's own."""
        table = client.sequence if client is not None else self.sequence
        seq = table.get(msg_type, 0)
        table[msg_type] = (seq + 1) & 0xFFFF
        return seq

    def header(self, msg_type: c.MsgType, seq: int, log_interval: int = 0x7F, flags: int = 0) -> c.Header:
        return c.Header(msg_type, self.config.domain, self.identity, seq, flags=flags, log_interval=log_interval)

    @_outgoing
    def handle_tx_timestamp(self, token: int, tx_ts_ns: int) -> list[Action]:
        kind, ctx = self.pending.take(token) or (None, None)
        if kind == c.MsgType.SYNC:
            return list(self._follow_up(ctx, tx_ts_ns))
        if kind == c.MsgType.PDELAY_RESP:
            return list(pdelay_resp_follow_up(self.identity, ctx, tx_ts_ns, self.count))
        if kind == c.MsgType.PDELAY_REQ:
            self._link_delay(self.peer.transmitted(ctx, tx_ts_ns))
        elif kind == c.MsgType.DELAY_REQ:
            self.path_delay(self.measure.delay_req_transmitted(ctx, tx_ts_ns))
        return []

    # --- peer delay (11.4) ----------------------------------------------------------------------------------------
    def _pdelay_req(self, clock_ns: int, now_ns: int) -> list[Action]:
        link = self.extensions.link
        if link is not None and self.peer.outstanding():  # 802.1AS: the previous exchange did not complete
            link.lost()
            self.peer.clear()
        seq = self.next_seq(c.MsgType.PDELAY_REQ)
        token = self.pending.expect(c.MsgType.PDELAY_REQ, seq, now_ns)
        self.peer.sent(seq)
        self.count("tx_pdelay_req")
        return [Send(c.encode(c.PdelayReq(self.header(c.MsgType.PDELAY_REQ, seq), max(0, clock_ns))), True, None,
                     peer=True, token=token)]

    def _link_delay(self, exchange: Exchange | None) -> None:
        if exchange is None:
            return
        if self.extensions.link is not None:  # 802.1AS: the link delay with the neighbor rate ratio
            self.extensions.link.exchange(exchange.t1_ns, exchange.t2_ns, exchange.t3_ns, exchange.t4_ns,
                                          ns(exchange.correction_scaled))
        self.path_delay(exchange.mean_link_delay_ns())

    def _on_pdelay_req(self, msg: c.PdelayReq, source: Any, rx_ts_ns: int | None, now_ns: int) -> list[Action]:
        if self.config.delay_mechanism != "p2p":
            self.count("drop_wrong_delay_mechanism")
            return []
        if rx_ts_ns is not None:
            self.slaves.seen(msg.header.source_port, source, now_ns, "p2p")
        return list(answer_pdelay_req(self.identity, msg, source, rx_ts_ns, self.pending, now_ns, self.count))

    # --- receiving ------------------------------------------------------------------------------------------------
    @_outgoing
    def handle_rx(self, data: bytes, source: Any, rx_ts_ns: int | None, now_ns: int) -> list[Action]:
        if isinstance(data, bytes | bytearray | memoryview):
            checked, why = self.extensions.ingress(data)
            if checked is None:
                self.count("drop_auth_" + why)
                return []
            data = checked
        msg = admit(data, self.identity, self.config.domain, self.count, self.config.major_sdo_id)
        if msg is None:
            return []
        self.count("rx_" + type(msg).__name__.lower())
        if self.state not in OPERATIONAL:
            self.count("drop_port_not_ready")
            return []
        if isinstance(msg, c.Announce):
            return self._on_announce(msg, source, now_ns)
        if isinstance(msg, RATE_LIMITED) and self.limiter.check(self.address_key(source), now_ns) is not Limit.PASS:
            self.count("drop_rate_limited")
            return []
        if isinstance(msg, c.Sync | c.FollowUp | c.DelayResp):
            return list(self._from_master(msg, rx_ts_ns, now_ns))
        if isinstance(msg, c.DelayReq):
            return list(self._on_delay_req(msg, source, rx_ts_ns, now_ns))
        if isinstance(msg, c.PdelayReq):
            return self._on_pdelay_req(msg, source, rx_ts_ns, now_ns)
        if isinstance(msg, c.PdelayResp):
            self._link_delay(self.peer.response(msg, rx_ts_ns))
        elif isinstance(msg, c.PdelayRespFollowUp):
            self._link_delay(self.peer.follow_up(msg))
        elif isinstance(msg, c.Management):
            reply = management.answer(self, msg, source)
            return [] if reply is None else [Send(c.encode(reply), False, source)]
        elif isinstance(msg, c.Signaling):
            return list(self._on_grants(msg, source, now_ns) if self.config.slave_only
                        else self._on_signaling(msg, source, now_ns))
        else:
            self.count("ignored_" + type(msg).__name__.lower())
        return []

    # --- the read model -------------------------------------------------------------------------------------------
    def snapshot(self, now_ns: int) -> dict[str, Any]:
        return slave_snapshot(self, now_ns) if self.config.slave_only else master_snapshot(self, now_ns)


def _announced(v: GrandmasterView) -> tuple[Any, ...]:
    """What, when it changes, is worth an Announce at once: the state-level fields.  clockAccuracy and
    offsetScaledLogVariance follow the measured bound and stability second by second; they go out with the next
    regular Announce (so do the C37.238 TLV's inaccuracy)."""
    return (v.clock_class, v.time_source, v.current_utc_offset, v.utc_offset_valid, v.leap61, v.leap59,
            v.time_traceable, v.frequency_traceable, v.ptp_timescale)
