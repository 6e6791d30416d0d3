"""The appliance as a PTP slave of an upstream grandmaster, sans-IO: a time reference, not an output.

Pure core.  ``on_message(data, rx_ts_ns, source, now_ns)``, ``on_timer(now_ns)`` and ``on_tx_timestamp(token,
ts_ns)`` return lists of actions: ``Send`` (port_common.py's, performed by the edge; a ``token`` asks for the transmit
timestamp) and ``PtpMeasurement`` (one per Sync of the selected master once a path delay is known, handed to the
selector by the edge; already in UNCALIBRATED, SLAVE says the delay filter is full).  ``now_ns`` is a monotonic
clock for timers; ``rx_ts_ns`` and ``ts_ns`` are already on the appliance's local time axis (TAI ns), so a
measurement's offset is local minus master.

IEEE 1588-2019: foreign masters are qualified and forgotten as in 9.3.2.4.5 (bmca.py) and the best is chosen by the
data set comparison of 9.3.4; this port is slaveOnly, so a qualified master is always followed (9.3.3 S1) and
announce receipt timeout with none left returns it to LISTENING.  One- and two-step Sync (11.3/11.4; a Follow_Up is
matched by sequenceId and sourcePortIdentity, in either arrival order), E2E Delay_Req/Delay_Resp (11.3) and P2P
Pdelay (11.4, one- and two-step responders; the port answers Pdelay_Req too), every correctionField on the way
honoured.  The path delay passes a median-of-3 spike filter; there is no servo: the appliance's DPLL steers on the
offsets.  State machine as a table (Figure 30, slave side): LISTENING, UNCALIBRATED (a master chosen, the delay
filter filling), SLAVE, FAULTY (the edge's transport is down).

Timescales (7.2): a master announcing the PTP timescale sends TAI.  One with PTP_TIMESCALE clear (ARB) is read as
UTC by default, ``arb_timescale="utc"``: currentUtcOffset is added, from its Announce when currentUtcOffsetValid is
set, else the caller's ``tai_utc_s`` (the appliance's leap table), else the Announce's unvalidated value.  linuxptp's
ptp4l on CLOCK_REALTIME with software timestamps (or free_running) is such a master: ARB, currentUtcOffsetValid
clear, currentUtcOffset 37, UTC timestamps (clock.c sets utc_timescale; tests/interop/test_ptp_slave_peers.py
checks it on the wire).  ``arb_timescale="tai"`` takes an ARB master's timestamps as TAI.

Anything malformed, from another domain or SDO, from ourselves, or not from the selected master is dropped and
counted by reason, never raised.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, TypeAlias

from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.bmca import Candidate, ForeignMasters, best
from appliance.protocol.ptp.port_common import (
    FAULTY,
    LISTENING,
    SLAVE,
    UNCALIBRATED,
    PortStateMachine,
    Send,
    TxTimestamps,
    admit,
    answer_pdelay_req,
    clock_identity_text,
    from_each,
    interval_ns,
    keep_recent,
    pdelay_resp_follow_up,
    port_identity_text,
)
from appliance.protocol.ptp.profiles import L2_FORWARDABLE
from appliance.units import NS_PER_S

DELAY_FILTER_LENGTH = 3  # median of the last three path delays
UNSPECIFIED_LOG = 0x7F

# IEEE 1588-2019 9.2.5 Figure 30, the slave side of a slaveOnly port (RS_SLAVE: the BMCA chose a new parent).
TRANSITIONS: dict[tuple[str, str], str] = {
    (LISTENING, "RS_SLAVE"): UNCALIBRATED,
    (UNCALIBRATED, "RS_SLAVE"): UNCALIBRATED,
    (SLAVE, "RS_SLAVE"): UNCALIBRATED,
    (UNCALIBRATED, "MASTER_CLOCK_SELECTED"): SLAVE,
    (UNCALIBRATED, "ANNOUNCE_RECEIPT_TIMEOUT"): LISTENING,
    (SLAVE, "ANNOUNCE_RECEIPT_TIMEOUT"): LISTENING,
    (FAULTY, "FAULT_CLEARED"): LISTENING,
    **from_each((LISTENING, UNCALIBRATED, SLAVE), "FAULT_DETECTED", FAULTY),
}


@dataclass(frozen=True)
class SlaveConfig:
    """What the slave port runs with.  ``tai_utc_s``: TAI - UTC in seconds to read an ARB master as UTC when its
    Announce does not vouch for its own currentUtcOffset (``PtpSlave.set_tai_utc_s`` updates it)."""

    domain: int = 0
    transport: str = "udp4"  # udp4 | udp6 | l2
    delay_mechanism: str = "e2e"  # e2e | p2p
    log_min_delay_req_interval: int = 0  # until the master's Delay_Resp says otherwise (9.5.11.2)
    log_min_pdelay_req_interval: int = 0
    announce_receipt_timeout: int = 3
    arb_timescale: str = "utc"  # utc | tai: how to read a master whose Announce has PTP_TIMESCALE clear
    tai_utc_s: int | None = None
    l2_destination: str = L2_FORWARDABLE

    def __post_init__(self) -> None:
        checks = {"domain": 0 <= self.domain <= 255, "transport": self.transport in ("udp4", "udp6", "l2"),
                  "delay_mechanism": self.delay_mechanism in ("e2e", "p2p"),
                  "log_min_delay_req_interval": -7 <= self.log_min_delay_req_interval <= 7,
                  "log_min_pdelay_req_interval": -7 <= self.log_min_pdelay_req_interval <= 7,
                  "announce_receipt_timeout": 2 <= self.announce_receipt_timeout <= 255,
                  "arb_timescale": self.arb_timescale in ("utc", "tai")}
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"PTP slave setting out of range: {', '.join(f'{n}={getattr(self, n)!r}' for n in bad)}")


@dataclass(frozen=True, slots=True)
class PtpMeasurement:
    """One Sync of the selected master: at local instant ``rx_local_ns`` the local clock was ``offset_ns`` ahead of
    the master (local minus master, master read on TAI), over a path of ``path_delay_ns`` (E2E meanPathDelay or
    P2P meanLinkDelay, filtered).  ``master``: the parent port ("aabbcc.fffe.ddeeff-1"); ``gm_identity`` and the
    quality fields: the grandmaster as the parent announces it; ``utc_offset_applied_s``: what was added to the
    master's timestamps (an ARB master read as UTC), 0 for a PTP-timescale master."""

    rx_local_ns: int
    offset_ns: int
    path_delay_ns: int
    master: str
    clock_class: int
    clock_accuracy: int
    time_source: int
    steps_removed: int
    gm_identity: str
    ptp_timescale: bool = True
    utc_offset_applied_s: int = 0


SlaveAction: TypeAlias = Send | PtpMeasurement


def _ns(scaled: int) -> int:
    """A TimeInterval (ns * 2**16) to int ns, rounded half up."""
    return (scaled + 0x8000) >> 16


class PtpSlave(PortStateMachine):
    """One slave-only PTP port.  ``rng`` spreads the Delay_Req times (seeded from the clock identity if omitted)."""

    TABLE = TRANSITIONS

    def __init__(self, config: SlaveConfig, clock_identity: bytes, now_ns: int, rng: random.Random | None = None,
                 port_number: int = 1):
        self.config = config
        self.identity = c.PortIdentity(clock_identity, port_number)
        self.rng = rng if rng is not None else random.Random(int.from_bytes(clock_identity, "big"))
        self.tai_utc_s = config.tai_utc_s
        self._init_state(LISTENING, now_ns, "waiting for a qualified master")
        self.foreign = ForeignMasters(clock_identity, config.announce_receipt_timeout)
        self.parent: c.PortIdentity | None = None
        self.parent_announce: c.Announce | None = None
        self.counters: dict[str, int] = {}
        self.log_delay_req = config.log_min_delay_req_interval
        self.path_delay_ns: int | None = None
        self.last: PtpMeasurement | None = None
        self.measurements = 0
        self._delays: list[int] = []
        self._last_sync: tuple[int, int, int] | None = None  # (t1 master, t2 local, correction scaled)
        self._sync_wait: tuple[int, int, int] | None = None  # two-step Sync: (sequenceId, t2, correction)
        self._early_fup: tuple[int, int, int] | None = None  # Follow_Up before its Sync: (sequenceId, t1, correction)
        self._delay_out: dict[int, dict[str, int]] = {}  # our Delay_Req sequenceId -> t3, t4, corr
        self._pdelay_out: dict[int, dict[str, Any]] = {}  # our Pdelay_Req sequenceId -> t1..t4, corr, responder
        self._seq = {c.MsgType.DELAY_REQ: 0, c.MsgType.PDELAY_REQ: 0}
        self._pending = TxTimestamps(self._count)  # kind: the MsgType sent
        self._due: dict[str, int] = {}
        if config.delay_mechanism == "p2p":
            self._due["pdelay_req"] = now_ns

    # --- state ------------------------------------------------------------------------------------------------
    def _count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def fault(self, now_ns: int, reason: str) -> None:
        """The edge lost its transport: FAULTY, the master forgotten."""
        self._transition("FAULT_DETECTED", now_ns, reason)
        self._forget_parent()
        self.foreign.masters.clear()
        self._due.clear()
        self._pending.clear()
        self._pdelay_out.clear()
        self.path_delay_ns = None
        self._delays.clear()

    def fault_cleared(self, now_ns: int) -> None:
        self._transition("FAULT_CLEARED", now_ns, "transport usable again")
        if self.config.delay_mechanism == "p2p":
            self._due["pdelay_req"] = now_ns

    def set_tai_utc_s(self, tai_utc_s: int | None) -> None:
        """TAI - UTC from the appliance's leap table, for ARB masters that do not vouch for their own."""
        self.tai_utc_s = tai_utc_s

    def _forget_parent(self) -> None:
        self.parent, self.parent_announce = None, None
        self._last_sync = self._sync_wait = self._early_fup = None
        self._delay_out.clear()
        self.log_delay_req = self.config.log_min_delay_req_interval
        if self.config.delay_mechanism == "e2e":  # a P2P link delay belongs to the link, not to the master
            self.path_delay_ns = None
            self._delays.clear()
        self._due.pop("delay_req", None)

    def _select(self, now_ns: int) -> None:
        """9.3.4 among the qualified foreign masters; slaveOnly: the best one, if any, is the parent (9.3.3 S1)."""
        qualified = self.foreign.qualified(now_ns)
        erbest = best([Candidate.from_announce(a, self.identity) for a in qualified])
        if erbest is None:
            if self.parent is not None or self.state != LISTENING:
                gone = port_identity_text(self.parent) if self.parent else "master"
                self._forget_parent()
                self._transition("ANNOUNCE_RECEIPT_TIMEOUT", now_ns, f"{gone} silent: announce receipt timeout")
            return
        announce = next(a for a in qualified if a.header.source_port == erbest.sender)
        if erbest.sender == self.parent:
            self.parent_announce = announce  # the same master: its latest quality and time properties
            return
        old = self.parent
        self._forget_parent()
        self.parent, self.parent_announce = erbest.sender, announce
        text = port_identity_text(erbest.sender)
        self._transition("RS_SLAVE", now_ns, f"best master {text} (grandmaster "
                                        f"{clock_identity_text(erbest.gm_identity)}, class {erbest.gm_class})"
                    + (f", was {port_identity_text(old)}" if old else ""))
        self._count("master_changes")
        if self.config.delay_mechanism == "e2e":
            self._due["delay_req"] = now_ns + self._delay_req_spread_ns()

    # --- timers -----------------------------------------------------------------------------------------------
    def next_due_ns(self) -> int | None:
        times = list(self._due.values())
        expiry = self.foreign.next_expiry_ns()
        if expiry is not None:
            times.append(expiry)
        deadline = self._pending.deadline_ns()
        if deadline is not None:
            times.append(deadline)
        return min(times) if times else None

    def pending_tx(self) -> bool:
        """Transmit timestamps awaited (the edge polls the error queue soon after a send)."""
        return bool(self._pending)

    def on_timer(self, now_ns: int) -> list[SlaveAction]:
        out: list[SlaveAction] = []
        if self.foreign.expire(now_ns) or (self.parent is not None and self.parent not in self.foreign.masters):
            self._select(now_ns)
        for kind in [k for k, at in self._due.items() if at <= now_ns]:
            del self._due[kind]
            if kind == "delay_req" and self.parent is not None and self.config.delay_mechanism == "e2e":
                self._due[kind] = now_ns + self._delay_req_spread_ns()
                out.append(self._delay_req(now_ns))
            elif kind == "pdelay_req" and self.state != FAULTY and self.config.delay_mechanism == "p2p":
                self._due[kind] = now_ns + interval_ns(self.config.log_min_pdelay_req_interval)
                out.append(self._pdelay_req(now_ns))
        self._pending.expire(now_ns)
        return out

    def _delay_req_spread_ns(self) -> int:
        """A mean interval of 2**logMinDelayReqInterval (9.5.11.2), spread uniformly over +-50 % so that slaves
        started together do not stay in step (ptp4l spreads over 0..2x)."""
        return int(interval_ns(self.log_delay_req) * self.rng.uniform(0.5, 1.5))

    # --- sending ----------------------------------------------------------------------------------------------
    def _header(self, msg_type: c.MsgType, seq: int) -> c.Header:
        return c.Header(msg_type, self.config.domain, self.identity, seq, log_interval=UNSPECIFIED_LOG)

    def _next_seq(self, msg_type: c.MsgType) -> int:
        seq = self._seq[msg_type]
        self._seq[msg_type] = (seq + 1) & 0xFFFF
        return seq

    def _delay_req(self, now_ns: int) -> Send:
        seq = self._next_seq(c.MsgType.DELAY_REQ)
        self._delay_out = keep_recent(self._delay_out, seq)
        self._delay_out[seq] = {}
        self._count("tx_delay_req")
        # originTimestamp 0, as ptp4l sends it: the master answers with its receive time and our correctionField
        return Send(c.encode(c.DelayReq(self._header(c.MsgType.DELAY_REQ, seq), 0)), True,
                    token=self._pending.expect(c.MsgType.DELAY_REQ, seq, now_ns))

    def _pdelay_req(self, now_ns: int) -> Send:
        seq = self._next_seq(c.MsgType.PDELAY_REQ)
        self._pdelay_out = keep_recent(self._pdelay_out, seq)
        self._pdelay_out[seq] = {}
        self._count("tx_pdelay_req")
        return Send(c.encode(c.PdelayReq(self._header(c.MsgType.PDELAY_REQ, seq), 0)), True, peer=True,
                    token=self._pending.expect(c.MsgType.PDELAY_REQ, seq, now_ns))

    def on_tx_timestamp(self, token: int, ts_ns: int) -> list[SlaveAction]:
        kind, ctx = self._pending.take(token) or (None, None)
        if kind == c.MsgType.DELAY_REQ and ctx in self._delay_out:
            self._delay_out[ctx]["t3"] = ts_ns
            self._e2e_delay(ctx)
        elif kind == c.MsgType.PDELAY_REQ and ctx in self._pdelay_out:
            self._pdelay_out[ctx]["t1"] = ts_ns
            self._link_delay(ctx)
        elif kind == c.MsgType.PDELAY_RESP:
            return pdelay_resp_follow_up(self.identity, ctx, ts_ns, self._count)
        return []

    # --- receiving --------------------------------------------------------------------------------------------
    def on_message(self, data: bytes, rx_ts_ns: int | None, source: Any, now_ns: int) -> list[SlaveAction]:
        msg = admit(data, self.identity, self.config.domain, self._count)
        if msg is None:
            return []
        h = msg.header
        if self.state == FAULTY:
            self._count("drop_port_faulty")
            return []
        self._count("rx_" + type(msg).__name__.lower())
        if isinstance(msg, c.Announce):
            self.foreign.on_announce(msg, now_ns)
            self._select(now_ns)
            return []
        if isinstance(msg, c.PdelayReq):
            return self._on_pdelay_req(msg, source, rx_ts_ns, now_ns)
        if isinstance(msg, c.PdelayResp):
            self._on_pdelay_resp(msg, rx_ts_ns)
            return []
        if isinstance(msg, c.PdelayRespFollowUp):
            self._on_pdelay_resp_fup(msg)
            return []
        if isinstance(msg, c.Sync | c.FollowUp | c.DelayResp) and h.source_port != self.parent:
            self._count("ignored_not_parent")
            return []
        if isinstance(msg, c.Sync):
            return self._on_sync(msg, rx_ts_ns, now_ns)
        if isinstance(msg, c.FollowUp):
            return self._on_follow_up(msg, now_ns)
        if isinstance(msg, c.DelayResp):
            self._on_delay_resp(msg)
            return []
        self._count("ignored_" + type(msg).__name__.lower())  # other slaves' Delay_Req, Management, Signaling
        return []

    def _on_sync(self, msg: c.Sync, rx_ts_ns: int | None, now_ns: int) -> list[SlaveAction]:
        if rx_ts_ns is None:
            self._count("drop_no_rx_timestamp")
            return []
        h = msg.header
        if not h.flags & c.FLAG_TWO_STEP:  # one-step: originTimestamp is t1 (11.3.2)
            return self._synced(msg.origin_ts_ns, rx_ts_ns, h.correction, now_ns)
        fup = self._early_fup
        if fup is not None and fup[0] == h.sequence_id:
            self._early_fup = None
            return self._synced(fup[1], rx_ts_ns, h.correction + fup[2], now_ns)
        self._sync_wait = (h.sequence_id, rx_ts_ns, h.correction)
        return []

    def _on_follow_up(self, msg: c.FollowUp, now_ns: int) -> list[SlaveAction]:
        h = msg.header
        wait = self._sync_wait
        if wait is not None and wait[0] == h.sequence_id:
            self._sync_wait = None
            # two-step (11.3.2): t1 is preciseOriginTimestamp; the Sync's and the Follow_Up's corrections both count
            return self._synced(msg.precise_origin_ts_ns, wait[1], wait[2] + h.correction, now_ns)
        self._early_fup = (h.sequence_id, msg.precise_origin_ts_ns, h.correction)  # its Sync may still come
        return []

    def _synced(self, t1_ns: int, t2_ns: int, correction: int, now_ns: int) -> list[SlaveAction]:
        self._last_sync = (t1_ns, t2_ns, correction)
        self._count("syncs")
        announce = self.parent_announce
        if self.path_delay_ns is None or announce is None or self.parent is None:
            return []
        ptp_timescale, shift_s, _why = self.timescale(announce)
        offset_scaled = ((t2_ns - t1_ns - shift_s * NS_PER_S - self.path_delay_ns) << 16) - correction
        q = announce.gm_clock_quality
        m = PtpMeasurement(t2_ns, _ns(offset_scaled), self.path_delay_ns, port_identity_text(self.parent),
                           q.clock_class, q.clock_accuracy, announce.time_source, announce.steps_removed,
                           clock_identity_text(announce.gm_identity), ptp_timescale, shift_s)
        self.last = m
        self.measurements += 1
        if len(self._delays) >= DELAY_FILTER_LENGTH:
            self._transition("MASTER_CLOCK_SELECTED", now_ns, "path delay known and filtered")
        return [m]

    def timescale(self, announce: c.Announce) -> tuple[bool, int, str]:
        """(PTP timescale?, seconds added to the master's timestamps, why) for the master of this Announce."""
        if announce.header.flags & c.FLAG_PTP_TIMESCALE:
            return True, 0, "PTP timescale: timestamps are TAI"
        if self.config.arb_timescale == "tai":
            return False, 0, "ARB timescale read as TAI (arb_timescale=tai)"
        if announce.header.flags & c.FLAG_UTC_OFFSET_VALID:
            return False, announce.current_utc_offset, "ARB timescale read as UTC + the Announce's currentUtcOffset"
        if self.tai_utc_s is not None:
            return False, self.tai_utc_s, ("ARB timescale read as UTC + the appliance's TAI-UTC (the Announce's "
                                           "currentUtcOffsetValid is clear)")
        return False, announce.current_utc_offset, ("ARB timescale read as UTC + the Announce's currentUtcOffset, "
                                                    "which it does not mark valid")

    # --- path delay -------------------------------------------------------------------------------------------
    def _on_delay_resp(self, msg: c.DelayResp) -> None:
        seq = msg.header.sequence_id
        if msg.requesting_port != self.identity or seq not in self._delay_out:
            self._count("ignored_delay_resp_not_ours")
            return
        log = msg.header.log_interval
        if log != UNSPECIFIED_LOG and -7 <= log <= 7:  # 9.5.11.2: the master sets the slaves' request interval
            self.log_delay_req = max(log, self.config.log_min_delay_req_interval)
        self._delay_out[seq].update(t4=msg.receive_ts_ns, corr=msg.header.correction)
        self._e2e_delay(seq)

    def _e2e_delay(self, seq: int) -> None:
        t = self._delay_out.get(seq, {})
        if not {"t3", "t4"} <= t.keys():
            return
        del self._delay_out[seq]
        if self._last_sync is None:
            self._count("delay_without_sync")
            return
        t1, t2, sync_corr = self._last_sync
        # 11.3.2: meanPathDelay = [(t2 - t3) + (t4 - t1) - <corrected Sync correctionField> - Delay_Resp's] / 2
        scaled = (((t2 - t["t3"]) + (t["t4"] - t1)) << 16) - sync_corr - t["corr"]
        self._new_delay(_ns(scaled // 2))

    def _on_pdelay_req(self, msg: c.PdelayReq, source: Any, rx_ts_ns: int | None, now_ns: int) -> list[SlaveAction]:
        if self.config.delay_mechanism != "p2p":
            self._count("ignored_pdelay_req")
            return []
        return answer_pdelay_req(self.identity, msg, source, rx_ts_ns, self._pending, now_ns, self._count)

    def _on_pdelay_resp(self, msg: c.PdelayResp, rx_ts_ns: int | None) -> None:
        h = msg.header
        t = self._pdelay_out.get(h.sequence_id)
        if t is None or msg.requesting_port != self.identity:
            self._count("ignored_pdelay_resp_not_ours")
            return
        if rx_ts_ns is None:
            self._count("drop_no_rx_timestamp")
            return
        if not self._one_responder(t, "resp_from", h.source_port):
            return
        t.update(t2=msg.request_receipt_ts_ns, t4=rx_ts_ns, corr_resp=h.correction)
        if not h.flags & c.FLAG_TWO_STEP:  # one-step responder: the turnaround is in correctionField (11.4.2)
            t.update(t3=msg.request_receipt_ts_ns, corr_fup=0, fup_from=h.source_port)
        self._link_delay(h.sequence_id)

    def _on_pdelay_resp_fup(self, msg: c.PdelayRespFollowUp) -> None:
        """Over UDP it may be read before its Pdelay_Resp (another socket): kept until that comes."""
        h = msg.header
        t = self._pdelay_out.get(h.sequence_id)
        if t is None or msg.requesting_port != self.identity:
            self._count("ignored_pdelay_resp_follow_up_not_ours")
            return
        if self._one_responder(t, "fup_from", h.source_port):
            t.update(t3=msg.response_origin_ts_ns, corr_fup=h.correction)
            self._link_delay(h.sequence_id)

    def _one_responder(self, t: dict[str, Any], key: str, sender: c.PortIdentity) -> bool:
        """Record who answered (``key``: resp_from or fup_from); a second responder to one request (not a 1588
        topology) voids the exchange."""
        if t.get("void"):
            return False
        if key in t:
            self._count("pdelay_duplicate_responses" if t[key] == sender else "pdelay_multiple_responders")
            t["void"] = t[key] != sender
            return False
        t[key] = sender
        other = t.get("fup_from" if key == "resp_from" else "resp_from", sender)
        if other != sender:
            self._count("pdelay_multiple_responders")
            t["void"] = True
            return False
        return True

    def _link_delay(self, seq: int) -> None:
        t = self._pdelay_out.get(seq, {})
        if t.get("void") or t.get("done") or not {"t1", "t2", "t3", "t4", "resp_from", "fup_from"} <= t.keys():
            return
        t["done"] = True  # kept, so that a second responder to the same request is still noticed
        # 11.4.2: meanLinkDelay = [(t4 - t1) - (t3 - t2) - Pdelay_Resp's and Pdelay_Resp_Follow_Up's corrections] / 2
        scaled = (((t["t4"] - t["t1"]) - (t["t3"] - t["t2"])) << 16) - t["corr_resp"] - t["corr_fup"]
        self._new_delay(_ns(scaled // 2))

    def _new_delay(self, delay_ns: int) -> None:
        self._count("path_delays")
        self._delays = (self._delays + [delay_ns])[-DELAY_FILTER_LENGTH:]
        self.path_delay_ns = sorted(self._delays)[(len(self._delays) - 1) // 2]

    # --- the read model ---------------------------------------------------------------------------------------
    def snapshot(self, now_ns: int | None = None) -> dict[str, Any]:
        cfg, a = self.config, self.parent_announce
        grandmaster = None
        timescale = None
        if a is not None:
            q = a.gm_clock_quality
            grandmaster = {"identity": clock_identity_text(a.gm_identity), "clock_class": q.clock_class,
                           "clock_accuracy": q.clock_accuracy,
                           "offset_scaled_log_variance": q.offset_scaled_log_variance,
                           "priority1": a.gm_priority1, "priority2": a.gm_priority2, "time_source": a.time_source,
                           "steps_removed": a.steps_removed, "current_utc_offset": a.current_utc_offset,
                           "utc_offset_valid": bool(a.header.flags & c.FLAG_UTC_OFFSET_VALID),
                           "ptp_timescale": bool(a.header.flags & c.FLAG_PTP_TIMESCALE),
                           "time_traceable": bool(a.header.flags & c.FLAG_TIME_TRACEABLE)}
            ptp, shift, why = self.timescale(a)
            timescale = {"ptp_timescale": ptp, "utc_offset_applied_s": shift, "reading": why}
        masters = [{"port_identity": port_identity_text(sender),
                    "grandmaster": clock_identity_text(e.announce.gm_identity),
                    "clock_class": e.announce.gm_clock_quality.clock_class, "priority1": e.announce.gm_priority1,
                    "steps_removed": e.announce.steps_removed}
                   for sender, e in self.foreign.masters.items()]
        snap: dict[str, Any] = {
            "state": self.state, "reason": self.reason, "port_identity": port_identity_text(self.identity),
            "domain": cfg.domain, "transport": cfg.transport, "delay_mechanism": cfg.delay_mechanism,
            "arb_timescale": cfg.arb_timescale, "tai_utc_s": self.tai_utc_s,
            "master": port_identity_text(self.parent) if self.parent else None, "grandmaster": grandmaster,
            "timescale": timescale, "offset_ns": self.last.offset_ns if self.last else None,
            "path_delay_ns": self.path_delay_ns, "measurements": self.measurements,
            "log_min_delay_req_interval": self.log_delay_req, "foreign_masters": masters,
            "counters": dict(sorted(self.counters.items())),
        }
        if now_ns is not None:
            snap["state_for_s"] = self.state_for_s(now_ns)
            snap["transitions"] = self.transition_rows(now_ns)
        return snap
