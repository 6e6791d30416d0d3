"""The slave role of a PTP port: following the parent the BMCA chose, and measuring it.

Pure core.  ``SlaveRole`` is a part of the port (port.py), taken by a slaveOnly port (fsm.SLAVE_ONLY_FSM).  The best
qualified master (9.3.4; a slaveOnly port always follows it, 9.3.3 S1) becomes the parent: UNCALIBRATED while the
path delay filter fills, SLAVE once it is full and a Sync has been measured; a new parent starts over, and with no
master left (announce receipt timeout) the port listens again.  Syncs, Follow_Ups and Delay_Resps of the parent go to
the measurement (measure.py), which yields a ``PtpMeasurement`` per Sync once the path delay is known; E2E Delay_Reqs
leave at a mean of 2**logMinDelayReqInterval, spread over +-50 %.  The peer delay mechanism runs in the port itself,
master or slave (pdelay.py); its link delays are this role's path delays.  With unicast negotiation (G.8275.2) the
role asks its configured masters for Announce and its parent for Sync and Delay_Resp (unicast.GrantRequests), and
sends its Delay_Reqs to the parent.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.bmca import Candidate, ForeignMasters
from appliance.protocol.ptp.fsm import (ANNOUNCE_RECEIPT_TIMEOUT, MASTER_CLOCK_SELECTED, OPERATIONAL, RS_SLAVE,
                                        UNCALIBRATED)
from appliance.protocol.ptp.measure import DelayFilter, PtpMeasurement, SlaveMeasure
from appliance.protocol.ptp.port_common import (Send, Timers, TxTimestamps, clock_identity_text, interval_ns,
                                                port_identity_text)
from appliance.protocol.ptp.profiles import PortConfig
from appliance.protocol.ptp.unicast import ALL_PORTS, REQUEST_RETRY_NS, GrantRequests, for_us


class SlaveRole:
    """The port's slave side; the attributes below are the port's."""

    config: PortConfig
    identity: c.PortIdentity
    state: str
    timers: Timers
    pending: TxTimestamps
    foreign: ForeignMasters
    path: DelayFilter
    measure: SlaveMeasure
    requests: GrantRequests
    rng: random.Random
    parent: c.PortIdentity | None
    parent_announce: c.Announce | None
    count: Callable[..., None]
    next_seq: Callable[..., int]
    header: Callable[..., c.Header]
    _event: Callable[[str, int, str], list[Any]]

    def set_tai_utc_s(self, tai_utc_s: int | None) -> None:
        """TAI - UTC from the appliance's leap table, for ARB masters that do not vouch for their own."""
        self.measure.tai_utc_s = tai_utc_s

    def _follow(self, erbest: Candidate, qualified: list[c.Announce], now_ns: int) -> list[Any]:
        """S1: the best master is the parent.  The same one: its latest Announce kept; a new one: calibrate anew."""
        announce = next(a for a in qualified if a.header.source_port == erbest.sender)
        if erbest.sender == self.parent:
            self.parent_announce = announce  # the same master: its latest quality and time properties
            return []
        old = self.parent
        self._forget_parent()
        self.parent, self.parent_announce = erbest.sender, announce
        reason = (f"best master {port_identity_text(erbest.sender)} (grandmaster "
                  f"{clock_identity_text(erbest.gm_identity)}, class {erbest.gm_class})"
                  + (f", was {port_identity_text(old)}" if old else ""))
        out = self._event(RS_SLAVE, now_ns, reason)
        self.count("master_changes")
        if self.config.delay_mechanism == "e2e":
            self.timers.at(now_ns + self._delay_req_spread_ns(), "delay_req")
        if self.config.unicast_negotiation:
            self.timers.at(now_ns, "u-request")  # the new parent's Sync and Delay_Resp
        return out

    def _master_lost(self, now_ns: int) -> list[Any]:
        """No qualified master left: the parent forgotten, listening again."""
        gone = port_identity_text(self.parent) if self.parent else "master"
        self._forget_parent()
        return self._event(ANNOUNCE_RECEIPT_TIMEOUT, now_ns, f"{gone} silent: announce receipt timeout")

    def _forget_parent(self) -> None:
        self.parent, self.parent_announce = None, None
        self.measure.forget_master()
        if self.config.delay_mechanism == "e2e":  # a P2P link delay belongs to the link, not to the master
            self.path.clear()
        self.timers.cancel("delay_req")

    # --- Delay_Req (E2E) --------------------------------------------------------------------------------------------
    def _delay_req_timer(self, now_ns: int) -> list[Send]:
        if self.parent is None or self.config.delay_mechanism != "e2e":
            return []
        self.timers.at(now_ns + self._delay_req_spread_ns(), "delay_req")
        seq = self.next_seq(c.MsgType.DELAY_REQ)
        self.measure.delay_req_sent(seq)
        self.count("tx_delay_req")
        unicast = self.config.unicast_negotiation
        header = self.header(c.MsgType.DELAY_REQ, seq, flags=c.FLAG_UNICAST if unicast else 0)
        # originTimestamp 0, as ptp4l sends it: the master answers with its receive time and our correctionField
        return [Send(c.encode(c.DelayReq(header, 0)), True, self._parent_address() if unicast else None,
                     token=self.pending.expect(c.MsgType.DELAY_REQ, seq, now_ns))]

    def _delay_req_spread_ns(self) -> int:
        """A mean interval of 2**logMinDelayReqInterval (9.5.11.2), spread uniformly over +-50 % so that slaves
        started together do not stay in step (ptp4l spreads over 0..2x)."""
        return int(interval_ns(self.measure.log_delay_req) * self.rng.uniform(0.5, 1.5))

    # --- from the parent --------------------------------------------------------------------------------------------
    def _from_master(self, msg: c.Sync | c.FollowUp | c.DelayResp, rx_ts_ns: int | None,
                     now_ns: int) -> list[PtpMeasurement]:
        if self.parent is None:
            self.count("ignored_" + type(msg).__name__.lower())  # another master's, or a peer's
            return []
        if msg.header.source_port != self.parent:
            self.count("ignored_not_parent")
            return []
        if isinstance(msg, c.DelayResp):
            self.path_delay(self.measure.delay_resp(msg))
            return []
        if isinstance(msg, c.FollowUp):
            return self._synced(self.measure.follow_up(msg), now_ns)
        if rx_ts_ns is None:
            self.count("drop_no_rx_timestamp")
            return []
        return self._synced(self.measure.sync(msg, rx_ts_ns), now_ns)

    def _synced(self, synced: tuple[int, int, int] | None, now_ns: int) -> list[PtpMeasurement]:
        if synced is None:
            return []
        m = self.measure.measurement(synced, self.path.value_ns, self.parent, self.parent_announce)
        if m is None:
            return []
        if self.path.full and self.state == UNCALIBRATED:
            self._event(MASTER_CLOCK_SELECTED, now_ns, "path delay known and filtered")
        return [m]

    def path_delay(self, delay_ns: int | None) -> None:
        """A path delay measured: E2E from our Delay_Req exchanges, or the peer delay mechanism's link delay."""
        if delay_ns is None:
            return
        self.count("path_delays")
        self.path.add(delay_ns)

    # --- unicast negotiation, the slave's side (16.1) ---------------------------------------------------------------
    def _parent_address(self) -> Any:
        entry = self.foreign.masters.get(self.parent) if self.parent is not None else None
        return None if entry is None else entry.address

    def _request_grants(self, now_ns: int) -> list[Send]:
        """The grants due to be asked for or renewed, one Signaling message per master."""
        if self.state not in OPERATIONAL:
            return []
        self.timers.at(now_ns + REQUEST_RETRY_NS, "u-request")
        out = []
        for address, tlvs in self.requests.due(self._parent_address(), now_ns).items():
            header = self.header(c.MsgType.SIGNALING, self.next_seq(c.MsgType.SIGNALING), flags=c.FLAG_UNICAST)
            self.count("tx_signaling")
            out.append(Send(c.encode(c.Signaling(header, ALL_PORTS, tuple(tlvs))), False, address))
        return out

    def _on_grants(self, msg: c.Signaling, source: Any, now_ns: int) -> list[Send]:
        if not for_us(msg.target_port, self.identity):
            self.count("drop_signaling_not_for_us")
            return []
        for tlv in msg.tlvs:
            if isinstance(tlv, c.GrantUnicastTransmissionTlv | c.CancelUnicastTransmissionTlv):
                self.requests.answered(source, tlv, now_ns)
        return []
