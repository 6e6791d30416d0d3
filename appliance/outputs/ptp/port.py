"""One PTP port of the grandmaster, sans-IO: bytes and timestamps in, actions out.

Pure core.  ``handle_rx(data, source, rx_ts_ns, now_ns)``, ``handle_timer(now_ns, served_ns)`` and
``handle_tx_timestamp(token, tx_ts_ns)`` return lists of actions (``Send``); the edge (transport.py) sends them and
reports transmit timestamps back.  ``now_ns`` is a monotonic clock for timers; ``rx_ts_ns``, ``tx_ts_ns`` and
``served_ns`` are on the served clock (TAI ns, the PTP timescale), which the edge maps from kernel timestamps.

The port state machine is a table (``TRANSITIONS``, IEEE 1588-2019 9.2.5 Figure 30 for a port that never becomes a
slave); the BMCA (bmca.py) recommends MASTER or PASSIVE.  The port is two-step: a Sync leaves with an estimate and
its Follow_Up carries the transmit timestamp; the same for Pdelay_Resp and Pdelay_Resp_Follow_Up.  Both delay
mechanisms are served, and unicast negotiation (16.1) grants Announce, Sync and Delay_Resp streams to clients within
the profile's limits.  Anything malformed, from another domain, from ourselves, over a client's rate or outside the
allowed networks is dropped and counted by reason, never raised.  Each Sync's transmit timestamp is held against
the slot it was due in (``sync_lateness``, lateness.py): how late the port sends under load, in its status.

With a ``PortSecurity`` (security.py: IEEE 1588-2019 16.14, linuxptp's sa_file), every message the port sends leaves
its public entry points signed (an AUTHENTICATION TLV last), and every message it receives is checked before it is
decoded: an unsigned one (unless accepted) or a wrongly signed one is dropped and counted as ``drop_auth_<reason>``.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import wraps
from typing import Any

from appliance.protocol.limits import AccessRules, Limit, RateLimiter
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp import gptp
from appliance.protocol.ptp.bmca import Candidate, Decision, ForeignMasters, best, decide
from appliance.outputs.ptp.datasets import AnnouncedQuality, GrandmasterView
from appliance.outputs.ptp.lateness import SyncLateness
from appliance.outputs.ptp.notices import ManagementSet, MasterAgain, Outranked, PortNotice
from appliance.protocol.ptp.port_common import (DISABLED, FAULTY, INITIALIZING, LISTENING, MASTER, PASSIVE,
                                                PORT_STATE_CODES, PRE_MASTER, PortStateMachine, Send, TxTimestamps,
                                                admit, answer_pdelay_req, interval_ns, keep_recent,
                                                pdelay_resp_follow_up, port_identity_text)
from appliance.protocol.ptp.fsm import MASTER_FSM
from appliance.protocol.ptp.profiles import PortConfig
from appliance.protocol.ptp.gptp import LinkState
from appliance.protocol.ptp.security import PortSecurity
from appliance.protocol.ptp.smpte import SyncMetadata
from appliance.protocol.ptp.smpte import unpack as smpte_unpack
from appliance.units import NS_PER_S

MAX_SLAVES_SEEN = 1024
SNAPSHOT_SLAVES = 64  # the most recent slaves the status lists
SLAVE_ACTIVE_NS = 60 * NS_PER_S  # a slave heard within this is active
MAX_NOTICES = 256  # notices the edge has not taken yet; beyond, the oldest go (the edge takes them after every call)
ALL_PORTS = c.PortIdentity(b"\xff" * 8, 0xFFFF)
# The managementIds a SET names, for the notice of a refused one (Table 59).
MANAGEMENT_NAMES = {c.PRIORITY1: "priority1", c.PRIORITY2: "priority2", c.DOMAIN: "domain",
                    c.SLAVE_ONLY: "slaveOnly", c.LOG_ANNOUNCE_INTERVAL: "logAnnounceInterval",
                    c.ANNOUNCE_RECEIPT_TIMEOUT: "announceReceiptTimeout", c.LOG_SYNC_INTERVAL: "logSyncInterval",
                    c.PATH_TRACE_ENABLE: "pathTraceEnable", c.DEFAULT_DATA_SET: "DEFAULT_DATA_SET",
                    c.TIME_PROPERTIES_DATA_SET: "TIME_PROPERTIES_DATA_SET"}

# The port states a grandmaster port takes (Table 20) and its transitions (Figure 30 without its slave side, fsm.py).
STATE_CODES = {state: PORT_STATE_CODES[state] for state in (INITIALIZING, FAULTY, DISABLED, LISTENING, PRE_MASTER,
                                                            MASTER, PASSIVE)}
TRANSITIONS = MASTER_FSM


@dataclass
class Grant:
    log_interval: int
    expires_ns: int


@dataclass
class UnicastClient:
    address: Any
    port: c.PortIdentity
    grants: dict[int, Grant] = field(default_factory=dict)  # by message type
    sequence: dict[int, int] = field(default_factory=dict)  # next sequenceId per message type
    sent_sync: int = 0
    first_granted_ns: int = 0


@dataclass
class SlaveSeen:
    port: c.PortIdentity
    address: str
    first_seen_ns: int
    last_seen_ns: int
    requests: int = 0
    mechanism: str = "e2e"


def _next_slot(at_ns: int, step_ns: int, now_ns: int) -> int:
    """The next message of a periodic stream: one interval after the last, or, when the timer fired more than an
    interval late, one interval from now -- a late Sync is sent late rather than dropped, and a stall is not
    followed by a burst of catch-up messages."""
    nxt = at_ns + step_ns
    return nxt if nxt > now_ns else now_ns + step_ns


def _address_text(address: Any) -> str:
    if isinstance(address, tuple):
        return str(address[0])
    if isinstance(address, bytes | bytearray) and len(address) == 6:
        return ":".join(f"{b:02x}" for b in address)
    return str(address)


def _outgoing(method: Callable[..., list[Send]]) -> Callable[..., list[Send]]:
    """A public entry point: what it returns to the edge passes through the port's egress (``_egress``: the
    majorSdoId of 802.1AS, its Follow_Up information TLV, then the AUTHENTICATION TLV), once: entry points that call
    one another apply it at the outermost."""

    @wraps(method)
    def entry(self: PtpPort, *args: Any, **kwargs: Any) -> list[Send]:
        if not self._egress_on:
            return method(self, *args, **kwargs)
        self._entry_depth += 1
        try:
            out = method(self, *args, **kwargs)
        finally:
            self._entry_depth -= 1
        if self._entry_depth:
            return out
        return [replace(send, data=self._egress(send.data)) for send in out]

    return entry


class PtpPort(PortStateMachine):
    TABLE = TRANSITIONS

    def __init__(self, config: PortConfig, clock_identity: bytes, view: GrandmasterView, now_ns: int,
                 port_number: int = 1, address_key: Callable[[Any], Any] | None = None,
                 management_rules: AccessRules | None = None, security: PortSecurity | None = None,
                 sync_metadata: SyncMetadata | None = None):
        self.config = config
        # SMPTE ST 2059-2: the synchronization metadata sent every second while MASTER (UTC, 30000/1001 unless the
        # edge gives the zone and the frame rate)
        self.sync_metadata = (sync_metadata or SyncMetadata()) if config.smpte_tlv else None
        self.last_metadata: dict[str, int] | None = None  # the fields of the latest metadata sent
        self.security = security  # sign what is sent, check what is received (None: neither)
        self._entry_depth = 0
        # IEEE 802.1AS: the link's rate ratio, delay and asCapable from the peer delay exchanges (None: not gPTP)
        self.link = LinkState(config.neighbor_prop_delay_thresh_ns) if config.as_capable_required else None
        self._fui = gptp.follow_up_info() if config.follow_up_info else b""
        self._egress_on = security is not None or config.major_sdo_id != 0 or bool(self._fui)
        self.identity = c.PortIdentity(clock_identity, port_number)
        self.quality = AnnouncedQuality()
        self.view = self.quality.apply(view, now_ns)
        self.priority1, self.priority2 = config.priority1, config.priority2
        self._init_state(INITIALIZING, now_ns, "starting")
        self.decision: Decision | None = None
        self.foreign = ForeignMasters(clock_identity, config.announce_receipt_timeout)
        self.address_key = address_key or (lambda a: a[0] if isinstance(a, tuple) else a)
        self.limiter = RateLimiter(config.rate_limit_per_s, max(8, int(config.rate_limit_per_s)), 65536)
        self.management_rules = management_rules
        self.counters: dict[str, int] = {}
        self.slaves: OrderedDict[tuple[c.PortIdentity, str], SlaveSeen] = OrderedDict()
        self.clients: dict[tuple[Any, c.PortIdentity], UnicastClient] = {}
        self.peer_delay_ns: int | None = None
        self._seq: dict[int, int] = {}
        self._pending = TxTimestamps(self._count)  # kind: the MsgType sent
        self._pdelay_out: dict[int, dict[str, int]] = {}  # our Pdelay_Req sequenceId -> timestamps
        self._timers: list[tuple[int, int, str, Any]] = []
        self._timer_seq = itertools.count()
        self._due: dict[tuple[str, Any], int] = {}  # live due time per timer key (older heap entries are stale)
        self.last_set: tuple[str, int, int, str] | None = None  # the latest management SET: (name, old, new, who)
        self.notices: list[PortNotice] = []  # for the edge: SETs, a foreign master's takeover, MASTER again
        self.outranked_by: tuple[bytes, c.PortIdentity] | None = None  # the foreign master that made it PASSIVE
        self.log_sync = config.log_sync_interval
        self.log_announce = config.log_announce_interval
        self.sync_lateness = SyncLateness()  # each Sync's transmit timestamp against its slot
        self._announce_cache: dict[tuple[int, bool], tuple[Any, bytes]] = {}  # (interval, unicast) -> said, bytes
        # Set by the edge when a native sender sends the Syncs and the unicast Announces: the port then keeps no
        # "sync", "u-sync" or "u-announce" timers and says instead which streams start (MASTER entered; a grant, or
        # its interval changed) and stop (a grant ended); the sender is told apart whether the port is MASTER.
        self.sync_offload = False
        # Set by the edge when the native sender answers the Delay_Reqs of negotiated clients itself: the port then
        # says which clients' Delay_Resp grants start (or change interval) and end, as ("start"/"stop", key,
        # "delay"), and answers the rest it is handed as ever.
        self.delay_offload = False
        self._stream_changes: list[tuple[str, Any, str]] = []

    # --- state --------------------------------------------------------------------------------------------
    def _event(self, event: str, now_ns: int, reason: str) -> list[Send]:
        """Take ``event`` through the table, then the new state's entry actions (timers started)."""
        if not self._transition(event, now_ns, reason):
            return []
        new = self.state
        if new == MASTER and self.outranked_by is not None:
            self._notice(MasterAgain(reason, self.outranked_by[0]))
            self.outranked_by = None
        if new == MASTER:
            self._at(now_ns + self.announce_phase_ns(self.log_sync, self.log_announce), "announce")
            if self.sync_metadata is not None:
                self._at(now_ns + self.announce_phase_ns(self.log_sync, 0), "smpte")
            if self.config.multicast:
                if self.sync_offload:
                    self._stream_changes.append(("start", None, "sync"))
                else:
                    self._at(now_ns, "sync")
            for key, client in self.clients.items():  # negotiated streams resume
                sync, announce = client.grants.get(c.MsgType.SYNC), client.grants.get(c.MsgType.ANNOUNCE)
                if self.sync_offload:  # offloaded streams resume with the sender
                    continue
                if sync is not None:
                    self._at(now_ns, "u-sync", key)
                if announce is not None:
                    phase = 0 if sync is None else self.announce_phase_ns(sync.log_interval, announce.log_interval)
                    self._at(now_ns + phase, "u-announce", key)
        elif new == LISTENING:
            self._at(now_ns + self._receipt_timeout_ns(), "listening")
        if new in (LISTENING, MASTER, PASSIVE) and self.config.delay_mechanism == "p2p":
            self._at(now_ns, "pdelay")
        return []

    @_outgoing
    def start(self, now_ns: int) -> list[Send]:
        out = self._event("INIT_COMPLETE", now_ns, "initialized")
        if self.config.master_only:  # a masterOnly port does not wait to hear a better master (G.8275.x)
            out += self._event("RS_MASTER", now_ns, "masterOnly port (profile)")
        return out

    @_outgoing
    def fault(self, now_ns: int, reason: str) -> list[Send]:
        return self._event("FAULT_DETECTED", now_ns, reason)

    @_outgoing
    def fault_cleared(self, now_ns: int) -> list[Send]:
        self._event("FAULT_CLEARED", now_ns, "transport usable again")
        return self.start(now_ns)

    def _receipt_timeout_ns(self) -> int:
        return self.config.announce_receipt_timeout * interval_ns(self.log_announce)

    def _run_bmca(self, now_ns: int) -> list[Send]:
        qualified = self.foreign.qualified(now_ns)
        erbest = best([Candidate.from_announce(a, self.identity, self.config.local_priority) for a in qualified],
                      self.config.dataset_comparison == "g8275")
        d = decide(self._d0(), erbest, self.state == LISTENING, self.config.master_only,
                   self.config.dataset_comparison == "g8275")
        self.decision = d
        if d.state == MASTER:
            return self._event("RS_MASTER", now_ns, d.reason)
        if d.state == PASSIVE:
            out = self._event("RS_PASSIVE", now_ns, d.reason)
            self._note_outranked(erbest, d.reason)
            return out
        return []

    def _note_outranked(self, erbest: Candidate | None, reason: str) -> None:
        """A foreign grandmaster keeps this port PASSIVE, silent: tell the edge who (once per master and sender)."""
        if self.state != PASSIVE or erbest is None or (erbest.gm_identity, erbest.sender) == self.outranked_by:
            return
        self.outranked_by = (erbest.gm_identity, erbest.sender)
        entry = self.foreign.masters.get(erbest.sender)
        self._notice(Outranked(erbest.gm_identity, erbest.gm_priority1, erbest.gm_class, erbest.gm_accuracy,
                               erbest.gm_variance, erbest.gm_priority2, erbest.steps_removed, erbest.sender,
                               entry.source if entry is not None else "", reason))

    def _notice(self, notice: PortNotice) -> None:
        self.notices.append(notice)
        del self.notices[:-MAX_NOTICES]

    def take_notices(self) -> list[PortNotice]:
        """What happened since the last call besides what was sent (management SETs, a foreign master's takeover,
        MASTER again), oldest first, for the edge to log, alarm and audit."""
        taken, self.notices = self.notices, []
        return taken

    def _d0(self) -> Candidate:
        v = self.view
        return Candidate(self.priority1, self.identity.clock_identity, v.clock_class, v.clock_accuracy,
                         v.offset_scaled_log_variance, self.priority2, 0, self.identity, self.identity,
                         self.config.local_priority)

    @_outgoing
    def update_view(self, view: GrandmasterView, now_ns: int) -> list[Send]:
        """The clock's quality changed (or the second ticked): re-run the BMCA when what we announce changed, and
        tell the network at once rather than at the next Announce."""
        view = self.quality.apply(view, now_ns)
        changed = _announced(view) != _announced(self.view)
        quality_changed = (view.clock_class, view.clock_accuracy, view.offset_scaled_log_variance) != (
            self.view.clock_class, self.view.clock_accuracy, self.view.offset_scaled_log_variance)
        self.view = view
        out: list[Send] = []
        if quality_changed and self.state in (MASTER, PASSIVE):
            out += self._run_bmca(now_ns)
        if changed and self.state == MASTER:
            self._at(now_ns, "announce-now")  # one extra Announce; the periodic ones keep their phase
        return out

    # --- timers -------------------------------------------------------------------------------------------
    @staticmethod
    def announce_phase_ns(log_sync: int, log_announce: int) -> int:
        """Announces run half of the shorter interval after the Syncs, so that a Sync never leaves right behind an
        Announce of ours: it would queue behind it after its transmit timestamp (in the NIC or a switch without
        PTP support: a path delay the slave cannot measure), and in software its timing would depend on what went
        just before it.  Halfway also spreads the port's sends evenly."""
        return min(interval_ns(log_sync), interval_ns(log_announce)) // 2

    def _at(self, at_ns: int, kind: str, key: Any = None) -> None:
        self._due[(kind, key)] = at_ns
        heapq.heappush(self._timers, (at_ns, next(self._timer_seq), kind, key))

    def pending_tx(self) -> bool:
        """Transmit timestamps awaited (the edge polls for them soon after a send)."""
        return bool(self._pending)

    def next_due_ns(self) -> int | None:
        while self._timers:
            at, _, kind, key = self._timers[0]
            if self._due.get((kind, key)) == at:
                return at
            heapq.heappop(self._timers)
        return None

    @_outgoing
    def handle_timer(self, now_ns: int, served_ns: int) -> list[Send]:
        out: list[Send] = []
        while self._timers and self._timers[0][0] <= now_ns:
            at, _, kind, key = heapq.heappop(self._timers)
            if self._due.get((kind, key)) != at:
                continue
            del self._due[(kind, key)]
            out += self._fire(kind, key, at, now_ns, served_ns)
        self._pending.expire(now_ns)
        return out

    def _fire(self, kind: str, key: Any, at: int, now_ns: int, served_ns: int) -> list[Send]:
        if kind == "listening":
            if self.state == LISTENING:
                if self.foreign.qualified(now_ns):
                    self.state_since_ns = now_ns  # leave LISTENING through the BMCA below
                    return self._bmca_after_listening(now_ns)
                return self._event("ANNOUNCE_RECEIPT_TIMEOUT", now_ns, "no better master heard")
            return []
        if kind == "foreign":
            out = []
            if self.foreign.expire(now_ns) and self.state in (MASTER, PASSIVE):
                out = self._run_bmca(now_ns)
            self._schedule_foreign()
            return out
        if kind in ("announce", "announce-now", "sync", "smpte") and self.state == MASTER and self.link is not None \
                and not self.link.as_capable:  # 802.1AS: nothing is sent to a port that is not asCapable
            if kind != "announce-now":
                every = {"announce": interval_ns(self.log_announce), "sync": interval_ns(self.log_sync)}.get(
                    kind, NS_PER_S)
                self._at(_next_slot(at, every, now_ns), kind)
            self._count(f"held_{kind.removesuffix('-now')}_not_as_capable")
            return []
        if kind == "announce" and self.state == MASTER:
            self._at(_next_slot(at, interval_ns(self.log_announce), now_ns), "announce")
            return [self._announce(served_ns)] if self.config.multicast else []
        if kind == "smpte" and self.state == MASTER and self.sync_metadata is not None:
            self._at(_next_slot(at, NS_PER_S, now_ns), "smpte")
            return [self._smpte(served_ns)]
        if kind == "announce-now" and self.state == MASTER:
            return [self._announce(served_ns)] if self.config.multicast else []
        if kind == "sync" and self.state == MASTER and self.config.multicast:
            self._at(_next_slot(at, interval_ns(self.log_sync), now_ns), "sync")
            return self._sync(served_ns, None, self.log_sync, now_ns, at)
        if kind == "pdelay" and self.state in (LISTENING, MASTER, PASSIVE):
            self._at(now_ns + interval_ns(self.config.log_min_pdelay_req_interval), "pdelay")
            return self._pdelay_req(served_ns, now_ns)
        if kind.startswith("u-"):
            return self._unicast_timer(kind, key, at, now_ns, served_ns)
        return []

    def _bmca_after_listening(self, now_ns: int) -> list[Send]:
        d = self._run_bmca(now_ns)
        if self.state == LISTENING:  # the BMCA kept it listening (cannot happen with a qualified master)
            return self._event("ANNOUNCE_RECEIPT_TIMEOUT", now_ns, "listening ended")
        return d

    def _schedule_foreign(self) -> None:
        nxt = self.foreign.next_expiry_ns()
        if nxt is not None:
            self._at(nxt, "foreign")

    # --- sending ------------------------------------------------------------------------------------------
    def _next_seq(self, msg_type: int, client: UnicastClient | None = None) -> int:
        table = client.sequence if client is not None else self._seq
        seq = table.get(msg_type, 0)
        table[msg_type] = (seq + 1) & 0xFFFF
        return seq

    def _header(self, msg_type: c.MsgType, seq: int, log_interval: int = 0x7F, flags: int = 0,
                correction: int = 0) -> c.Header:
        return c.Header(msg_type, self.config.domain, self.identity, seq, flags=flags, correction=correction,
                        log_interval=log_interval)

    def _count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def _announce(self, served_ns: int, client: UnicastClient | None = None, log_interval: int | None = None) -> Send:
        """An Announce: encoded once for what it says (the view, priorities, interval, flags), then per client and
        second only its sequenceId and originTimestamp rewritten (``codec.restamp``)."""
        log = self.log_announce if log_interval is None else log_interval
        self._count("tx_announce")
        data = c.restamp(self._announce_bytes(log, client is not None), self._next_seq(c.MsgType.ANNOUNCE, client),
                         max(0, served_ns))
        return Send(data, False, client.address if client else None)

    def _announce_bytes(self, log_interval: int, unicast: bool) -> bytes:
        said = (self.view, self.priority1, self.priority2)
        cached = self._announce_cache.get((log_interval, unicast))
        if cached is None or cached[0] != said:
            cached = self._announce_cache[(log_interval, unicast)] = (said, self._encode_announce(unicast,
                                                                                                 log_interval))
        return cached[1]

    def _encode_announce(self, unicast: bool, log_interval: int) -> bytes:
        """What an Announce says now, with sequenceId and originTimestamp 0 (``_announce`` fills them in)."""
        v = self.view
        flags = ((c.FLAG_LEAP61 if v.leap61 else 0) | (c.FLAG_LEAP59 if v.leap59 else 0)
                 | (c.FLAG_UTC_OFFSET_VALID if v.utc_offset_valid else 0)
                 | (c.FLAG_PTP_TIMESCALE if v.ptp_timescale else 0)
                 | (c.FLAG_TIME_TRACEABLE if v.time_traceable else 0)
                 | (c.FLAG_FREQUENCY_TRACEABLE if v.frequency_traceable else 0)
                 | (c.FLAG_UNICAST if unicast else 0))
        tlvs: tuple[Any, ...] = ()
        if self.config.c37238_tlv:
            bound = v.error_bound_ns
            tlvs = (c.c37238_2017_tlv(self.config.grandmaster_id,
                                      0xFFFFFFFF if bound is None else min(bound, 0xFFFFFFFE)),)
        if self.config.path_trace:  # 16.2.3: a grandmaster's path is itself
            tlvs += (c.PathTraceTlv((self.identity.clock_identity,)),)
        msg = c.Announce(self._header(c.MsgType.ANNOUNCE, 0, log_interval, flags), 0, v.current_utc_offset,
                         self.priority1, c.ClockQuality(v.clock_class, v.clock_accuracy, v.offset_scaled_log_variance),
                         self.priority2, self.identity.clock_identity, 0, v.time_source, tlvs)
        return c.encode(msg)

    def _egress(self, data: bytes) -> bytes:
        """A message on its way out: majorSdoId set, a Follow_Up given the 802.1AS information TLV, then signed."""
        if self.config.major_sdo_id:
            data = gptp.set_major_sdo_id(data, self.config.major_sdo_id)
        if self._fui and data[0] & 0x0F == c.MsgType.FOLLOW_UP:
            data = gptp.with_follow_up_info(data, self._fui)
        if self.security is not None:
            data = self.security.sign(data)
        return data

    def _smpte(self, served_ns: int) -> Send:
        """ST 2059-2's management message: to all ports and clocks, the SMPTE organization extension TLV in place
        of a management TLV, action COMMAND (no answer expected), multicast, a general message (port 320)."""
        assert self.sync_metadata is not None
        header = self._header(c.MsgType.MANAGEMENT, self._next_seq(c.MsgType.MANAGEMENT), 0x7F)
        tlv = self.sync_metadata.tlv(served_ns, self.view)
        self.last_metadata = smpte_unpack(tlv.data)
        msg = c.Management(header, c.PortIdentity(b"\xff" * 8, 0xFFFF), 0, 0, c.COMMAND, (tlv,))
        self._count("tx_smpte_metadata")
        return Send(c.encode(msg), False, None)

    def _sync(self, served_ns: int, client: UnicastClient | None, log_interval: int, now_ns: int,
              slot_ns: int) -> list[Send]:
        """A two-step Sync for the slot due at ``slot_ns`` (monotonic).  The slot goes with it onto the served clock
        through the pair the edge read together (``now_ns``, ``served_ns``), so that its transmit timestamp, on the
        served clock too, tells how late it left (``sync_lateness``)."""
        seq = self._next_seq(c.MsgType.SYNC, client)
        flags = c.FLAG_TWO_STEP | (c.FLAG_UNICAST if client is not None else 0)
        to = client.address if client is not None else None
        slot_served_ns = served_ns - (now_ns - slot_ns)
        token = self._pending.expect(c.MsgType.SYNC, (seq, to, log_interval, flags, slot_served_ns), now_ns)
        self._count("tx_sync")
        data = c.encode_timestamped(c.MsgType.SYNC, self.config.domain, self.identity, seq, flags, log_interval,
                                    max(0, served_ns))
        return [Send(data, True, to, token=token)]

    @_outgoing
    def handle_tx_timestamp(self, token: int, tx_ts_ns: int) -> list[Send]:
        kind, ctx = self._pending.take(token) or (None, None)
        if kind == c.MsgType.SYNC:
            seq, to, log_interval, flags, slot_served_ns = ctx
            self.sync_lateness.add(tx_ts_ns - slot_served_ns)
            self._count("tx_follow_up")
            return [Send(c.encode_timestamped(c.MsgType.FOLLOW_UP, self.config.domain, self.identity, seq,
                                              flags & c.FLAG_UNICAST, log_interval, tx_ts_ns), False, to)]
        if kind == c.MsgType.PDELAY_RESP:
            return pdelay_resp_follow_up(self.identity, ctx, tx_ts_ns, self._count)
        if kind == c.MsgType.PDELAY_REQ:
            out = self._pdelay_out.get(ctx)
            if out is not None:
                out["t1"] = tx_ts_ns
                self._peer_delay(ctx)
        return []

    # --- peer delay ---------------------------------------------------------------------------------------
    def _pdelay_req(self, served_ns: int, now_ns: int) -> list[Send]:
        if self.link is not None and self._pdelay_out:  # the previous exchange did not complete
            self.link.lost()
            self._pdelay_out.clear()
        seq = self._next_seq(c.MsgType.PDELAY_REQ)
        token = self._pending.expect(c.MsgType.PDELAY_REQ, seq, now_ns)
        self._pdelay_out = keep_recent(self._pdelay_out, seq)
        self._pdelay_out[seq] = {}
        self._count("tx_pdelay_req")
        return [Send(c.encode(c.PdelayReq(self._header(c.MsgType.PDELAY_REQ, seq), max(0, served_ns))), True,
                     None, peer=True, token=token)]

    def _peer_delay(self, seq: int) -> None:
        t = self._pdelay_out.get(seq, {})
        if not {"t1", "t2", "t3", "t4"} <= t.keys():
            return
        del self._pdelay_out[seq]
        if self.link is not None:  # 802.1AS: the link delay with the neighbor rate ratio
            self.link.exchange(t["t1"], t["t2"], t["t3"], t["t4"], t.get("corr", 0))
            self.peer_delay_ns = self.link.link_delay_ns
            return
        delay = ((t["t4"] - t["t1"]) - (t["t3"] - t["t2"]) - t.get("corr", 0)) // 2
        self.peer_delay_ns = delay if self.peer_delay_ns is None else (self.peer_delay_ns * 7 + delay) // 8

    # --- receiving ----------------------------------------------------------------------------------------
    @_outgoing
    def handle_rx(self, data: bytes, source: Any, rx_ts_ns: int | None, now_ns: int) -> list[Send]:
        if self.security is not None and isinstance(data, bytes | bytearray | memoryview):
            checked, why = self.security.verify(bytes(data))
            if checked is None:
                self._count("drop_auth_" + why)
                return []
            data = checked
        msg = admit(data, self.identity, self.config.domain, self._count, self.config.major_sdo_id)
        if msg is None:
            return []
        self._count("rx_" + type(msg).__name__.lower())
        if self.state in (INITIALIZING, FAULTY, DISABLED):
            self._count("drop_port_not_ready")
            return []
        if isinstance(msg, c.Announce):
            return self._on_announce(msg, source, now_ns)
        if isinstance(msg, (c.DelayReq, c.PdelayReq, c.Management, c.Signaling)):
            if self.limiter.check(self.address_key(source), now_ns) is not Limit.PASS:
                self._count("drop_rate_limited")
                return []
        if isinstance(msg, c.DelayReq):
            return self._on_delay_req(msg, source, rx_ts_ns, now_ns)
        if isinstance(msg, c.PdelayReq):
            return self._on_pdelay_req(msg, source, rx_ts_ns, now_ns)
        if isinstance(msg, c.PdelayResp):
            return self._on_pdelay_resp(msg, rx_ts_ns)
        if isinstance(msg, c.PdelayRespFollowUp):
            return self._on_pdelay_resp_fup(msg)
        if isinstance(msg, c.Management):
            return self._on_management(msg, source, now_ns)
        if isinstance(msg, c.Signaling):
            return self._on_signaling(msg, source, now_ns)
        self._count("ignored_" + type(msg).__name__.lower())  # Sync/Follow_Up/Delay_Resp of another master
        return []

    def _on_announce(self, msg: c.Announce, source: Any, now_ns: int) -> list[Send]:
        if self.config.path_trace and any(isinstance(t, c.PathTraceTlv) and self.identity.clock_identity in t.path
                                          for t in msg.tlvs):
            self._count("drop_announce_path_loop")  # 16.2.5: our own Announce came back round a loop
            return []
        newly = self.foreign.on_announce(msg, now_ns, _address_text(source))
        self._schedule_foreign()
        if self.state == LISTENING:
            return self._run_bmca(now_ns) if newly else []
        if self.state in (MASTER, PASSIVE, PRE_MASTER):
            return self._run_bmca(now_ns)
        return []

    def _seen(self, port: c.PortIdentity, source: Any, now_ns: int, mechanism: str) -> None:
        key = (port, _address_text(source))
        entry = self.slaves.get(key)
        if entry is None:
            if len(self.slaves) >= MAX_SLAVES_SEEN:
                self.slaves.popitem(last=False)
            entry = self.slaves[key] = SlaveSeen(port, key[1], now_ns, now_ns, mechanism=mechanism)
        else:
            self.slaves.move_to_end(key)
        entry.last_seen_ns = now_ns
        entry.requests += 1

    def _on_delay_req(self, msg: c.DelayReq, source: Any, rx_ts_ns: int | None, now_ns: int) -> list[Send]:
        if self.state != MASTER:
            self._count("drop_not_master")
            return []
        if self.config.delay_mechanism != "e2e":
            self._count("drop_wrong_delay_mechanism")
            return []
        if rx_ts_ns is None:
            self._count("drop_no_rx_timestamp")
            return []
        unicast = bool(msg.header.flags & c.FLAG_UNICAST)
        if unicast and self.config.unicast_negotiation:
            client = self.clients.get((self.address_key(source), msg.header.source_port))
            if client is None or c.MsgType.DELAY_RESP not in client.grants:
                self._count("drop_no_grant")
                return []
        self._seen(msg.header.source_port, source, now_ns, "e2e")
        log_interval = self.config.log_min_delay_req_interval
        if unicast and self.config.unicast_negotiation:
            log_interval = client.grants[c.MsgType.DELAY_RESP].log_interval  # type: ignore[union-attr]
        self._count("tx_delay_resp")
        data = c.encode_timestamped(c.MsgType.DELAY_RESP, self.config.domain, self.identity, msg.header.sequence_id,
                                    c.FLAG_UNICAST if unicast else 0, log_interval, rx_ts_ns, msg.header.correction,
                                    msg.header.source_port)
        return [Send(data, False, source if unicast else None)]

    def _on_pdelay_req(self, msg: c.PdelayReq, source: Any, rx_ts_ns: int | None, now_ns: int) -> list[Send]:
        if self.config.delay_mechanism != "p2p":
            self._count("drop_wrong_delay_mechanism")
            return []
        if rx_ts_ns is not None:
            self._seen(msg.header.source_port, source, now_ns, "p2p")
        return answer_pdelay_req(self.identity, msg, source, rx_ts_ns, self._pending, now_ns, self._count)

    def _on_pdelay_resp(self, msg: c.PdelayResp, rx_ts_ns: int | None) -> list[Send]:
        t = self._pdelay_out.get(msg.header.sequence_id)
        if t is None or msg.requesting_port != self.identity or rx_ts_ns is None:
            return []
        t["t2"], t["t4"], t["corr"] = msg.request_receipt_ts_ns, rx_ts_ns, msg.header.correction >> 16
        if not msg.header.flags & c.FLAG_TWO_STEP:
            t["t3"] = msg.request_receipt_ts_ns
        self._peer_delay(msg.header.sequence_id)
        return []

    def _on_pdelay_resp_fup(self, msg: c.PdelayRespFollowUp) -> list[Send]:
        t = self._pdelay_out.get(msg.header.sequence_id)
        if t is None or msg.requesting_port != self.identity:
            return []
        t["t3"] = msg.response_origin_ts_ns
        t["corr"] = t.get("corr", 0) + (msg.header.correction >> 16)
        self._peer_delay(msg.header.sequence_id)
        return []

    # --- management (15) ------------------------------------------------------------------------------------
    def _on_management(self, msg: c.Management, source: Any, now_ns: int) -> list[Send]:
        cfg = self.config
        if cfg.management == "off":
            self._count("drop_management_off")
            return []
        if msg.target_port.clock_identity not in (self.identity.clock_identity, ALL_PORTS.clock_identity) or \
                msg.target_port.port_number not in (self.identity.port_number, 0xFFFF):
            self._count("drop_management_not_for_us")
            return []
        if self.management_rules is not None and isinstance(source, tuple) and \
                not self.management_rules.is_allowed(source[0]):
            self._count("drop_management_denied")
            return []
        if msg.action not in (c.GET, c.SET) or len(msg.tlvs) != 1 or not isinstance(msg.tlvs[0], c.ManagementTlv):
            self._count("drop_management_unsupported")
            return []
        tlv = msg.tlvs[0]
        if msg.action == c.SET:
            reply_tlv = self._management_set(tlv, source)
        else:
            reply_tlv = self._management_get(tlv.management_id)
        header = c.Header(c.MsgType.MANAGEMENT, cfg.domain, self.identity, msg.header.sequence_id,
                          flags=msg.header.flags & c.FLAG_UNICAST)
        hops = max(0, msg.starting_boundary_hops - msg.boundary_hops)
        reply = c.Management(header, msg.header.source_port, hops, hops,
                             c.RESPONSE if msg.action == c.GET else c.ACKNOWLEDGE, (reply_tlv,))
        self._count("tx_management")
        return [Send(c.encode(reply), False, source)]

    def _management_get(self, mid: int) -> Any:
        body = self._dataset(mid)
        if body is None:
            self._count("management_no_such_id")
            return c.ManagementErrorStatusTlv(c.NOT_SUPPORTED, mid)
        return c.ManagementTlv(mid, body)

    def _management_set(self, tlv: c.ManagementTlv, source: Any) -> Any:
        """PRIORITY1 and PRIORITY2, when the settings and the profile allow it.  Every SET that got this far (its
        source allowed) becomes a notice, obeyed or refused."""
        mid, who = tlv.management_id, _address_text(source)
        name = {c.PRIORITY1: "priority1", c.PRIORITY2: "priority2"}.get(mid)
        if self.config.management != "get-set" or name is None or name not in self.config.management_set:
            self._count("management_set_refused")
            self._notice(ManagementSet(MANAGEMENT_NAMES.get(mid, f"managementId 0x{mid:04x}"), None, None, None, who,
                                       "not settable"))
            return c.ManagementErrorStatusTlv(c.NOT_SETABLE, mid)
        try:
            value = c.OneOctetBody.unpack(tlv.data).value
        except c.PtpDecodeError:
            self._notice(ManagementSet(name, None, None, None, who, "wrong length"))
            return c.ManagementErrorStatusTlv(c.WRONG_LENGTH, mid)
        old = getattr(self, name)
        setattr(self, name, value)
        self._count("management_set")
        self.last_set = (name, old, value, who)
        self._notice(ManagementSet(name, old, value, getattr(self.config, name), who))
        return c.ManagementTlv(mid, c.OneOctetBody(value).pack())

    def _dataset(self, mid: int) -> bytes | None:
        v, cfg = self.view, self.config
        quality = c.ClockQuality(v.clock_class, v.clock_accuracy, v.offset_scaled_log_variance)
        if mid == c.DEFAULT_DATA_SET:
            return c.DefaultDataSetBody(True, cfg.slave_only, 1, self.priority1, quality, self.priority2,
                                        self.identity.clock_identity, cfg.domain).pack()
        if mid == c.CURRENT_DATA_SET:
            return c.CurrentDataSetBody(0, 0, 0).pack()
        if mid == c.PARENT_DATA_SET:
            return c.ParentDataSetBody(self.identity, False, 0xFFFF, 0x7FFFFFFF, self.priority1, quality,
                                       self.priority2, self.identity.clock_identity).pack()
        if mid == c.TIME_PROPERTIES_DATA_SET:
            return c.TimePropertiesDataSetBody(v.current_utc_offset, v.leap61, v.leap59, v.utc_offset_valid,
                                               v.ptp_timescale, v.time_traceable, v.frequency_traceable,
                                               v.time_source).pack()
        if mid == c.PORT_DATA_SET:
            return c.PortDataSetBody(self.identity, STATE_CODES[self.state], cfg.log_min_delay_req_interval,
                                     (self.peer_delay_ns or 0) << 16, self.log_announce, cfg.announce_receipt_timeout,
                                     self.log_sync, 1 if cfg.delay_mechanism == "e2e" else 2,
                                     cfg.log_min_pdelay_req_interval, 0x12).pack()
        if mid == c.PRIORITY1:
            return c.OneOctetBody(self.priority1).pack()
        if mid == c.PRIORITY2:
            return c.OneOctetBody(self.priority2).pack()
        if mid == c.DOMAIN:
            return c.OneOctetBody(cfg.domain).pack()
        if mid == c.PATH_TRACE_LIST:  # 15.5.3.3.x: pathTraceDS.list; a grandmaster's is itself
            return self.identity.clock_identity if cfg.path_trace else b""
        if mid == c.PATH_TRACE_ENABLE:
            return c.OneOctetBody(1 if cfg.path_trace else 0).pack()
        if mid == c.NULL_MANAGEMENT:
            return b""
        return None

    # --- unicast negotiation (16.1) --------------------------------------------------------------------------
    def _on_signaling(self, msg: c.Signaling, source: Any, now_ns: int) -> list[Send]:
        if msg.target_port not in (self.identity, ALL_PORTS) and msg.target_port.clock_identity != b"\xff" * 8:
            self._count("drop_signaling_not_for_us")
            return []
        replies: list[Any] = []
        key = (self.address_key(source), msg.header.source_port)
        for tlv in msg.tlvs:
            if isinstance(tlv, c.RequestUnicastTransmissionTlv):
                replies.append(self._grant(key, source, tlv, now_ns))
            elif isinstance(tlv, c.CancelUnicastTransmissionTlv):
                client = self.clients.get(key)
                if client is not None:
                    if client.grants.pop(int(tlv.message_type), None) is not None:
                        self._stream_stopped(key, int(tlv.message_type))
                    if not client.grants:
                        del self.clients[key]
                self._count("unicast_cancelled")
                replies.append(c.AcknowledgeCancelUnicastTransmissionTlv(tlv.message_type))
        if not replies:
            return []
        header = self._header(c.MsgType.SIGNALING, self._next_seq(c.MsgType.SIGNALING), flags=c.FLAG_UNICAST)
        self._count("tx_signaling")
        return [Send(c.encode(c.Signaling(header, msg.header.source_port, tuple(replies))), False, source)]

    def _grant(self, key: tuple[Any, c.PortIdentity], source: Any, tlv: Any, now_ns: int) -> Any:
        cfg = self.config
        mtype = int(tlv.message_type)
        limits = {c.MsgType.ANNOUNCE: cfg.unicast_log_announce_interval, c.MsgType.SYNC: cfg.unicast_log_sync_interval,
                  c.MsgType.DELAY_RESP: cfg.unicast_log_delay_resp_interval}
        rng = limits.get(c.MsgType(mtype)) if mtype in limits else None

        def deny(why: str) -> Any:
            self._count("unicast_denied_" + why)
            return c.GrantUnicastTransmissionTlv(tlv.message_type, tlv.log_inter_message_period, 0, False)

        if not cfg.unicast_negotiation:
            return deny("not_offered")
        if rng is None:
            return deny("message_type")
        if not rng[0] <= tlv.log_inter_message_period <= rng[1]:
            return deny("rate")
        if self.state != MASTER:
            return deny("not_master")
        client = self.clients.get(key)
        if client is None:
            if len(self.clients) >= cfg.unicast_max_clients:
                return deny("capacity")
            client = self.clients[key] = UnicastClient(source, key[1], first_granted_ns=now_ns)
        duration = min(max(tlv.duration_s, cfg.unicast_duration_s[0]), cfg.unicast_duration_s[1])
        expires = now_ns + duration * NS_PER_S
        old = client.grants.get(mtype)
        client.grants[mtype] = Grant(tlv.log_inter_message_period, expires)
        self._at(expires, "u-expire", (key, mtype))
        if mtype in (c.MsgType.SYNC, c.MsgType.ANNOUNCE) and (old is None or old.log_interval !=
                                                                tlv.log_inter_message_period):
            self._phase_streams(client, key, mtype, now_ns)
        if mtype == c.MsgType.DELAY_RESP and self.delay_offload and (old is None or old.log_interval !=
                                                                     tlv.log_inter_message_period):
            self._stream_changes.append(("start", key, "delay"))
        self._count("unicast_granted")
        return c.GrantUnicastTransmissionTlv(tlv.message_type, tlv.log_inter_message_period, duration, True)

    def _phase_streams(self, client: UnicastClient, key: Any, granted: int, now_ns: int) -> None:
        """A new or changed Sync or Announce stream to a client: the Sync stream (re)starts now, or keeps its phase,
        and the Announce stream runs half an interval off it (``announce_phase_ns``)."""
        if self.sync_offload:
            self._stream_changes.append(("start", key, "sync" if granted == c.MsgType.SYNC else "announce"))
            return
        sync, announce = client.grants.get(c.MsgType.SYNC), client.grants.get(c.MsgType.ANNOUNCE)
        if granted == c.MsgType.SYNC:
            self._at(now_ns, "u-sync", key)
        if announce is None:
            return
        if sync is None:
            self._at(now_ns, "u-announce", key)
            return
        step = interval_ns(sync.log_interval)
        at = self._due.get(("u-sync", key), now_ns) - step + self.announce_phase_ns(sync.log_interval,
                                                                                   announce.log_interval)
        self._at(at if at >= now_ns else at + step, "u-announce", key)  # the first Announce slot from now

    def _stream_stopped(self, key: Any, mtype: int) -> None:
        if self.delay_offload and mtype == c.MsgType.DELAY_RESP:
            self._stream_changes.append(("stop", key, "delay"))
        if self.sync_offload and mtype in (c.MsgType.SYNC, c.MsgType.ANNOUNCE):
            self._stream_changes.append(("stop", key, "sync" if mtype == c.MsgType.SYNC else "announce"))

    def take_stream_changes(self) -> list[tuple[str, Any, str]]:
        """With ``sync_offload``, in order since the last call: ("start", key, kind) for a client whose Sync or
        Announce stream (kind "sync" or "announce") (re)starts now, ("stop", key, kind) for one whose grant ended
        (with ``delay_offload`` also kind "delay": a Delay_Resp grant),
        and ("start", None, "sync") for the multicast Syncs when the port becomes MASTER."""
        changes, self._stream_changes = self._stream_changes, []
        return changes

    def announce_stream(self, key: Any) -> int | None:
        """The log interval of a client's granted Announce stream; None when there is none."""
        client = self.clients.get(key)
        grant = client.grants.get(c.MsgType.ANNOUNCE) if client is not None else None
        return None if grant is None else grant.log_interval

    def unicast_announce(self, log_interval: int) -> bytes:
        """What a unicast Announce at this interval says now, with sequenceId and originTimestamp 0."""
        return self._announce_bytes(log_interval, True)

    def sync_stream(self, key: Any) -> tuple[int, bytes, bytes] | None:
        """A Sync stream as a native sender needs it: its log interval, the two-step Sync and its Follow_Up as the
        port sends them with sequenceId 0 and a zero timestamp (the sender changes only those two); key None: the
        multicast stream.  None when there is no such stream (the grant is gone)."""
        if key is None:
            log_interval, flags = self.log_sync, 0
        else:
            client = self.clients.get(key)
            grant = client.grants.get(c.MsgType.SYNC) if client is not None else None
            if grant is None:
                return None
            log_interval, flags = grant.log_interval, c.FLAG_UNICAST
        cfg = self.config
        sync = c.encode_timestamped(c.MsgType.SYNC, cfg.domain, self.identity, 0, c.FLAG_TWO_STEP | flags,
                                    log_interval, 0)
        follow_up = c.encode_timestamped(c.MsgType.FOLLOW_UP, cfg.domain, self.identity, 0, flags, log_interval, 0)
        return log_interval, sync, follow_up

    def sync_sequence(self, key: Any) -> dict[int, int]:
        """The sequenceId table (by message type) a stream counts in: the client's, or the port's for key None; a
        native sender starts from it and hands the next one back."""
        if key is None:
            return self._seq
        client = self.clients.get(key)
        return client.sequence if client is not None else {}

    def delay_resp_template(self) -> bytes:
        """A unicast Delay_Resp of this port, for a native sender to fill in (correctionField, sequenceId,
        logMessageInterval, receiveTimestamp, requestingPortIdentity)."""
        return c.encode_timestamped(c.MsgType.DELAY_RESP, self.config.domain, self.identity, 0, c.FLAG_UNICAST, 0, 0,
                                    0, c.PortIdentity(bytes(8), 0))

    def add_offloaded_delay(self, answered: int, rate_limited: int, handoff_dropped: int) -> None:
        """Delay_Reqs a native sender answered, dropped over the rate, or could not hand back (its ring full)."""
        if answered + rate_limited:
            self._count("rx_delayreq", answered + rate_limited)
        if answered:
            self._count("tx_delay_resp", answered)
        if rate_limited:
            self._count("drop_rate_limited", rate_limited)
        if handoff_dropped:
            self._count("drop_handoff_full", handoff_dropped)

    def seen_offloaded(self, port: c.PortIdentity, source: Any, requests: int, last_seen_ns: int) -> None:
        """A client whose Delay_Reqs a native sender answered: ``requests`` since the last call, the latest at
        ``last_seen_ns`` (monotonic), into the table of slaves seen."""
        self._seen(port, source, last_seen_ns, "e2e")
        self.slaves[(port, _address_text(source))].requests += requests - 1

    def add_offloaded(self, taken: dict[str, Any]) -> None:
        """What a native sender sent since it was last asked (its ``take()``): counted as the port's own Syncs and
        Follow_Ups, their lateness into ``sync_lateness``."""
        self._count("tx_sync", taken["syncs"])
        self._count("tx_announce", taken["announces"])
        self._count("tx_follow_up", taken["follow_ups"])
        if taken["timestamps_lost"]:
            self._count("tx_timestamp_missing", taken["timestamps_lost"])
        self.sync_lateness.merge(taken["late_bins"], taken["late_count"], taken["late_over_1ms"],
                                 taken["late_max_ns"])

    def _unicast_timer(self, kind: str, key: Any, at: int, now_ns: int, served_ns: int) -> list[Send]:
        if kind == "u-expire":
            client_key, mtype = key
            client = self.clients.get(client_key)
            if client is not None:
                grant = client.grants.get(mtype)
                if grant is not None and grant.expires_ns <= now_ns:
                    del client.grants[mtype]
                    self._stream_stopped(client_key, mtype)
                    self._count("unicast_expired")
                if not client.grants:
                    del self.clients[client_key]
            return []
        client = self.clients.get(key)
        mtype = c.MsgType.SYNC if kind == "u-sync" else c.MsgType.ANNOUNCE
        grant = client.grants.get(mtype) if client is not None else None
        if client is None or grant is None or self.state != MASTER:
            return []
        step = interval_ns(grant.log_interval)
        self._at(_next_slot(at, step, now_ns), kind, key)
        if mtype == c.MsgType.SYNC:
            client.sent_sync += 1
            return self._sync(served_ns, client, grant.log_interval, now_ns, at)
        return [self._announce(served_ns, client, grant.log_interval)]

    # --- the read model ----------------------------------------------------------------------------------------
    def _slaves_active(self, now_ns: int) -> int:
        """Slaves heard within the last minute: ``slaves`` is in order of the latest request, so counted from the
        newest back to the first older one."""
        since, active = now_ns - SLAVE_ACTIVE_NS, 0
        for slave in reversed(self.slaves.values()):
            if slave.last_seen_ns <= since:
                break
            active += 1
        return active

    def snapshot(self, now_ns: int) -> dict[str, Any]:
        cfg = self.config
        masters = []
        qualified = {id(a) for a in self.foreign.qualified(now_ns)}
        for sender, entry in self.foreign.masters.items():
            a = entry.announce
            masters.append({
                "port_identity": port_identity_text(sender), "grandmaster": a.gm_identity.hex(),
                "clock_class": a.gm_clock_quality.clock_class, "clock_accuracy": a.gm_clock_quality.clock_accuracy,
                "priority1": a.gm_priority1, "priority2": a.gm_priority2, "steps_removed": a.steps_removed,
                "qualified": id(a) in qualified, "last_seen_s_ago": round((now_ns - entry.received_ns[-1]) / 1e9, 1)})
        slaves = [{"port_identity": port_identity_text(s.port), "address": s.address, "mechanism": s.mechanism,
                   "requests": s.requests, "last_seen_s_ago": round((now_ns - s.last_seen_ns) / 1e9, 1)}
                  for s in itertools.islice(reversed(self.slaves.values()), SNAPSHOT_SLAVES)]
        return {
            "state": self.state, "reason": self.reason, "state_for_s": self.state_for_s(now_ns),
            "port_identity": port_identity_text(self.identity), "profile": cfg.profile, "transport": cfg.transport,
            "domain": cfg.domain, "delay_mechanism": cfg.delay_mechanism, "priority1": self.priority1,
            "priority2": self.priority2, "log_sync_interval": self.log_sync,
            "log_announce_interval": self.log_announce, "clock_class": self.view.clock_class,
            "clock_accuracy": self.view.clock_accuracy, "time_source": self.view.time_source,
            "peer_delay_ns": self.peer_delay_ns, "foreign_masters": masters,
            "slaves_seen": len(self.slaves), "slaves_active": self._slaves_active(now_ns),
            "slaves": slaves, "unicast_clients": len(self.clients),
            "counters": dict(sorted(self.counters.items())),
            "sync_lateness": self.sync_lateness.snapshot(),
            "transitions": self.transition_rows(now_ns),
            "security": None if self.security is None else self.security.snapshot(),
            "smpte_metadata": self.last_metadata,
            "gptp": None if self.link is None else self.link.snapshot(),
        }


def _announced(v: GrandmasterView) -> tuple[Any, ...]:
    """What, when it changes, is worth an Announce at once: the state-level fields.  clockAccuracy and
    offsetScaledLogVariance follow the measured bound and stability second by second; they go out with the next
    regular Announce (so do the C37.238 TLV's inaccuracy)."""
    return (v.clock_class, v.time_source, v.current_utc_offset, v.utc_offset_valid, v.leap61, v.leap59,
            v.time_traceable, v.frequency_traceable, v.ptp_timescale)
