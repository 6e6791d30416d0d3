"""The peer delay mechanism of a PTP port (IEEE 1588-2019 11.4): the two-step responder, and our own requests'
exchanges turned into link delays.

Pure core.  ``answer_pdelay_req`` and ``pdelay_resp_follow_up`` answer a neighbour's Pdelay_Req (11.4.2 c: two-step,
t2 in the Pdelay_Resp, t3 in its Follow_Up with the request's correctionField).  ``PeerDelay`` keeps our Pdelay_Req
exchanges by sequenceId until t1..t4 are in (one- and two-step responders; over UDP a Pdelay_Resp_Follow_Up may be read
before its Pdelay_Resp), and hands back a complete ``Exchange``.  A request answered by two responders (not a 1588
topology: a hub, or a non-PTP bridge) is void.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.port_common import Send, TxTimestamps, keep_recent


@dataclass(frozen=True, slots=True)
class Exchange:
    """One complete exchange: t1 our Pdelay_Req sent, t2 its receipt at the neighbour, t3 the neighbour's Pdelay_Resp
    sent, t4 its receipt here (ns), and the Pdelay_Resp's and Pdelay_Resp_Follow_Up's correctionFields (ns * 2**16)."""

    t1_ns: int
    t2_ns: int
    t3_ns: int
    t4_ns: int
    correction_scaled: int

    def mean_link_delay_ns(self) -> int:
        """11.4.2: meanLinkDelay = [(t4 - t1) - (t3 - t2) - corrections] / 2, rounded half up."""
        scaled = (((self.t4_ns - self.t1_ns) - (self.t3_ns - self.t2_ns)) << 16) - self.correction_scaled
        return (scaled // 2 + 0x8000) >> 16


class PeerDelay:
    """Our Pdelay_Req exchanges, by sequenceId; ``count(name)`` hears what is ignored."""

    def __init__(self, identity: c.PortIdentity, count: Callable[[str], None]) -> None:
        self.identity = identity
        self._count = count
        self._out: dict[int, dict[str, Any]] = {}  # sequenceId -> t1..t4, corrections, responders, done / void

    def sent(self, seq: int) -> None:
        self._out = keep_recent(self._out, seq)
        self._out[seq] = {}

    def outstanding(self) -> bool:
        """A request sent whose exchange has not completed (nor been voided)."""
        return any(not (t.get("done") or t.get("void")) for t in self._out.values())

    def clear(self) -> None:
        self._out.clear()

    def transmitted(self, seq: int, t1_ns: int) -> Exchange | None:
        t = self._out.get(seq)
        if t is None:
            return None
        t["t1"] = t1_ns
        return self._complete(seq)

    def response(self, msg: c.PdelayResp, rx_ts_ns: int | None) -> Exchange | None:
        h = msg.header
        t = self._out.get(h.sequence_id)
        if t is None or msg.requesting_port != self.identity:
            self._count("ignored_pdelay_resp_not_ours")
            return None
        if rx_ts_ns is None:
            self._count("drop_no_rx_timestamp")
            return None
        if not self._one_responder(t, "resp_from", h.source_port):
            return None
        t.update(t2=msg.request_receipt_ts_ns, t4=rx_ts_ns, corr_resp=h.correction)
        if not h.flags & c.FLAG_TWO_STEP:  # one-step responder: the turnaround is in correctionField (11.4.2)
            t.update(t3=msg.request_receipt_ts_ns, corr_fup=0, fup_from=h.source_port)
        return self._complete(h.sequence_id)

    def follow_up(self, msg: c.PdelayRespFollowUp) -> Exchange | None:
        """Over UDP it may be read before its Pdelay_Resp (another socket): kept until that comes."""
        h = msg.header
        t = self._out.get(h.sequence_id)
        if t is None or msg.requesting_port != self.identity:
            self._count("ignored_pdelay_resp_follow_up_not_ours")
            return None
        if not self._one_responder(t, "fup_from", h.source_port):
            return None
        t.update(t3=msg.response_origin_ts_ns, corr_fup=h.correction)
        return self._complete(h.sequence_id)

    def _one_responder(self, t: dict[str, Any], key: str, sender: c.PortIdentity) -> bool:
        """Record who answered (``key``: resp_from or fup_from); a second responder to one request voids it."""
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

    def _complete(self, seq: int) -> Exchange | None:
        t = self._out[seq]
        if t.get("void") or t.get("done") or not {"t1", "t2", "t3", "t4", "resp_from", "fup_from"} <= t.keys():
            return None
        t["done"] = True  # kept, so that a second responder to the same request is still noticed
        return Exchange(t["t1"], t["t2"], t["t3"], t["t4"], t["corr_resp"] + t["corr_fup"])


def answer_pdelay_req(identity: c.PortIdentity, req: c.PdelayReq, source: Any, rx_ts_ns: int | None,
                      pending: TxTimestamps, now_ns: int, count: Callable[[str], None]) -> list[Send]:
    """The two-step answer to a Pdelay_Req (11.4.2 c): Pdelay_Resp with requestReceiptTimestamp t2; its transmit
    timestamp t3 goes out in the Pdelay_Resp_Follow_Up (``pdelay_resp_follow_up``), which carries the request's
    correctionField.  To the sender if it came unicast, else to the peer-delay multicast address.  None for a
    request without a receive timestamp."""
    if rx_ts_ns is None:
        count("drop_no_rx_timestamp")
        return []
    h = req.header
    to = source if h.flags & c.FLAG_UNICAST else None
    token = pending.expect(c.MsgType.PDELAY_RESP, (h.sequence_id, to, h.source_port, h.correction, h.domain), now_ns)
    header = c.Header(c.MsgType.PDELAY_RESP, h.domain, identity, h.sequence_id, flags=c.FLAG_TWO_STEP)
    count("tx_pdelay_resp")
    return [Send(c.encode(c.PdelayResp(header, rx_ts_ns, h.source_port)), True, to, peer=True, token=token)]


def pdelay_resp_follow_up(identity: c.PortIdentity, context: Any, tx_ts_ns: int,
                          count: Callable[[str], None]) -> list[Send]:
    """The Pdelay_Resp_Follow_Up of a Pdelay_Resp sent at ``tx_ts_ns`` (its ``pending`` context)."""
    seq, to, requester, correction, domain = context
    header = c.Header(c.MsgType.PDELAY_RESP_FOLLOW_UP, domain, identity, seq, correction=correction)
    count("tx_pdelay_resp_follow_up")
    return [Send(c.encode(c.PdelayRespFollowUp(header, tx_ts_ns, requester)), False, to, peer=True)]
