"""What every PTP port engine does the same way, the grandmaster's (outputs/ptp/port.py) and the slave's
(refs/ptp_slave.py): the ``Send`` action, the state-table machinery, the receive filter, transmit-timestamp
bookkeeping, the two-step Pdelay responder and how port identities are printed.

Pure core: no I/O, no clock reads; every instant comes in as an argument.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from appliance.protocol.ptp import codec as c
from appliance.units import NS_PER_S

# portState (IEEE 1588-2019 8.2.15.3.1, Table 20): the names both engines' transition tables use, and their codes
INITIALIZING, FAULTY, DISABLED, LISTENING, PRE_MASTER, MASTER, PASSIVE, UNCALIBRATED, SLAVE = (
    "INITIALIZING", "FAULTY", "DISABLED", "LISTENING", "PRE_MASTER", "MASTER", "PASSIVE", "UNCALIBRATED", "SLAVE")
PORT_STATE_CODES = {INITIALIZING: 1, FAULTY: 2, DISABLED: 3, LISTENING: 4, PRE_MASTER: 5, MASTER: 6, PASSIVE: 7,
                    UNCALIBRATED: 8, SLAVE: 9}
TX_TIMESTAMP_TIMEOUT_NS = NS_PER_S  # a transmit timestamp later than this is given up (and counted)
OUTSTANDING_REQUESTS = 8  # our Delay_Req / Pdelay_Req exchanges remembered at once
HISTORY_LENGTH = 32  # state transitions kept; the snapshot shows the latest SNAPSHOT_TRANSITIONS
SNAPSHOT_TRANSITIONS = 8


@dataclass(frozen=True, slots=True)
class Send:
    """An action: send this message.  The edge performs it and, for a ``token``, reports its transmit timestamp."""

    data: bytes
    event: bool  # event message (port 319, timestamped) or general (320)
    to: Any = None  # None: the port's multicast destination; else a transport address (unicast)
    peer: bool = False  # a peer delay message (Ethernet: 01:80:C2:00:00:0E)
    token: int | None = None  # the transport reports this message's transmit timestamp under this token


def interval_ns(log_interval: int) -> int:
    """A logMessageInterval (log2 seconds, IEEE 1588-2019 7.7.2.1) in ns."""
    return int(NS_PER_S * 2.0 ** log_interval)


def clock_identity_text(identity: bytes) -> str:
    """A clockIdentity as linuxptp prints it: aabbcc.fffe.ddeeff."""
    h = identity.hex()
    return f"{h[:6]}.{h[6:10]}.{h[10:]}"


def port_identity_text(port: c.PortIdentity) -> str:
    """A portIdentity as linuxptp prints it: aabbcc.fffe.ddeeff-1."""
    return f"{clock_identity_text(port.clock_identity)}-{port.port_number}"


def from_each(states: Iterable[str], event: str, new: str) -> dict[tuple[str, str], str]:
    """Rows of a transition table: ``event`` takes each of ``states`` to ``new`` (Figure 30's "from any state")."""
    return {(state, event): new for state in states}


class PortStateMachine:
    """The state half of a port engine: ``state`` (Table 20), since when and why, driven by the engine's table
    of (state, event) -> state (IEEE 1588-2019 9.2.5 Figure 30); entry actions stay with the engine.  A base of the
    engines, for its attributes are theirs (``port.state``, ``port.reason``)."""

    TABLE: ClassVar[Mapping[tuple[str, str], str]] = {}

    def _init_state(self, state: str, now_ns: int, reason: str) -> None:
        self.state, self.state_since_ns, self.reason = state, now_ns, reason
        self.transitions: list[tuple[int, str, str, str]] = []  # (now, old, new, reason), the latest 32

    def _transition(self, event: str, now_ns: int, reason: str) -> bool:
        """Take ``event``; False when the table has no row for it in this state."""
        new = self.TABLE.get((self.state, event))
        if new is None:
            return False
        old, self.state, self.state_since_ns, self.reason = self.state, new, now_ns, reason
        self.transitions = (self.transitions + [(now_ns, old, new, reason)])[-HISTORY_LENGTH:]
        return True

    def state_for_s(self, now_ns: int) -> float:
        return round((now_ns - self.state_since_ns) / NS_PER_S, 1)

    def transition_rows(self, now_ns: int) -> list[dict[str, Any]]:
        """The latest transitions, as the status shows them."""
        return [{"s_ago": round((now_ns - t) / NS_PER_S, 1), "from": old, "to": new, "reason": why}
                for t, old, new, why in self.transitions[-SNAPSHOT_TRANSITIONS:]]


def admit(data: Any, identity: c.PortIdentity, domain: int, count: Callable[[str], None],
          major_sdo_id: int = 0) -> c.Message | None:
    """A received message decoded, or None, the drop counted by reason: not bytes, malformed, our own (looped
    back), another domain (7.1) or another standards organization's (majorSdoId other than the port's: 0, or 1
    for IEEE 802.1AS; 7.5.2.2)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        count("drop_not_bytes")
        return None
    try:
        msg = c.decode(bytes(data))
    except c.PtpDecodeError as exc:
        count("drop_" + exc.reason)
        return None
    h = msg.header
    for dropped, why in ((h.source_port.clock_identity == identity.clock_identity, "drop_own"),
                         (h.domain != domain, "drop_other_domain"), (h.major_sdo_id != major_sdo_id, "drop_other_sdo")):
        if dropped:
            count(why)
            return None
    return msg


def keep_recent(exchanges: dict[int, Any], sequence_id: int) -> dict[int, Any]:
    """Our request exchanges by sequenceId, without those OUTSTANDING_REQUESTS or more behind ``sequence_id``."""
    return {k: v for k, v in exchanges.items() if (sequence_id - k) & 0xFFFF < OUTSTANDING_REQUESTS}


class TxTimestamps:
    """Event messages sent and awaiting their transmit timestamps: each under a token the edge reports it with,
    taken once (statime's timestamp context); one not reported within TX_TIMESTAMP_TIMEOUT_NS is given up.  ``count``
    (name, n) hears of those given up ("tx_timestamp_missing") and of reports for none awaited ("tx_timestamp_late")."""

    def __init__(self, count: Callable[[str, int], None]) -> None:
        self._count = count
        self._tokens = itertools.count(1)
        self._waiting: dict[int, tuple[Any, Any, int]] = {}  # token -> (kind, context, deadline)

    def expect(self, kind: Any, context: Any, now_ns: int) -> int:
        token = next(self._tokens)
        self._waiting[token] = (kind, context, now_ns + TX_TIMESTAMP_TIMEOUT_NS)
        return token

    def take(self, token: int) -> tuple[Any, Any] | None:
        """(kind, context) of the message sent under ``token``; None if unknown or already given up."""
        waiting = self._waiting.pop(token, None)
        if waiting is None:
            self._count("tx_timestamp_late", 1)
            return None
        return waiting[:2]

    def expire(self, now_ns: int) -> None:
        """Give up those past their deadline."""
        late = [token for token, (_, _, deadline) in self._waiting.items() if deadline <= now_ns]
        for token in late:
            del self._waiting[token]
        if late:
            self._count("tx_timestamp_missing", len(late))

    def deadline_ns(self) -> int | None:
        return min((deadline for _, _, deadline in self._waiting.values()), default=None)

    def clear(self) -> None:
        self._waiting.clear()

    def __bool__(self) -> bool:
        return bool(self._waiting)


def answer_pdelay_req(identity: c.PortIdentity, req: c.PdelayReq, source: Any, rx_ts_ns: int | None,
                      pending: TxTimestamps, now_ns: int, count: Callable[[str], None]) -> list[Send]:
    """The two-step answer to a Pdelay_Req (IEEE 1588-2019 11.4.2 c): Pdelay_Resp with requestReceiptTimestamp t2;
    its transmit timestamp t3 goes out in the Pdelay_Resp_Follow_Up (``pdelay_resp_follow_up``), which carries the
    request's correctionField.  To the sender if it came unicast, else to the peer-delay multicast address.  None
    for a request without a receive timestamp."""
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


class Timers:
    """A port's one-shot timers, one per (kind, key): ``at`` arms one (again: the new instant replaces the old),
    ``pop(now_ns)`` takes the earliest due, ``next_ns`` says when the next is due.  A heap with the live instant of
    each timer beside it; entries that were re-armed or cancelled are dropped as they surface."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, str, Any]] = []
        self._order = itertools.count()
        self._due: dict[tuple[str, Any], int] = {}

    def at(self, at_ns: int, kind: str, key: Any = None) -> None:
        self._due[(kind, key)] = at_ns
        heapq.heappush(self._heap, (at_ns, next(self._order), kind, key))

    def due_ns(self, kind: str, key: Any = None) -> int | None:
        return self._due.get((kind, key))

    def cancel(self, kind: str, key: Any = None) -> None:
        self._due.pop((kind, key), None)

    def _drop_stale(self) -> None:
        while self._heap:
            at, _, kind, key = self._heap[0]
            if self._due.get((kind, key)) == at:
                return
            heapq.heappop(self._heap)

    def next_ns(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop(self, now_ns: int) -> tuple[int, str, Any] | None:
        """(instant, kind, key) of the earliest timer due at ``now_ns``, disarmed; None when none is."""
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now_ns:
            return None
        at, _, kind, key = heapq.heappop(self._heap)
        del self._due[(kind, key)]
        return at, kind, key
