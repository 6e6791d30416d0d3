"""Best master clock algorithm: data set comparison, foreign-master qualification and the state decision.

Pure core.  IEEE 1588-2019 9.3.4 (Figures 34 and 35) compares two announced clocks first by their grandmaster's
attributes and, for the same grandmaster, by topology; ITU-T G.8275.1 6.3.1 / G.8275.2 6.7.1 replace it with the
alternate comparison (no priority1, localPriority before the tie-break, the grandmaster identity only among
clockClass <= 127).  9.3.2.4.5 qualifies a foreign master once it has sent FOREIGN_MASTER_THRESHOLD Announces inside
FOREIGN_MASTER_TIME_WINDOW announce intervals; a master silent for announceReceiptTimeout of its intervals is
forgotten.  9.3.3 (Figure 33) decides the port's recommended state for an ordinary clock of one port, slaveOnly or
not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.protocol.ptp.codec import Announce, PortIdentity
from appliance.units import NS_PER_S

FOREIGN_MASTER_THRESHOLD = 2  # 9.3.2.4.5
FOREIGN_MASTER_TIME_WINDOW = 4  # announce intervals, 9.3.2.4.5
MAX_STEPS_REMOVED = 255  # 9.3.2.5 d): Announces with stepsRemoved >= 255 are not qualified
MAX_FOREIGN_MASTERS = 16  # bounded table: the oldest entry goes when a new master appears

A_BETTER, A_BETTER_TOPO, EQUAL, B_BETTER_TOPO, B_BETTER = 2, 1, 0, -1, -2


@dataclass(frozen=True, slots=True)
class Candidate:
    """A data set to compare (9.3.4 Table 31): the announced grandmaster plus the path it came by."""

    gm_priority1: int
    gm_identity: bytes
    gm_class: int
    gm_accuracy: int
    gm_variance: int
    gm_priority2: int
    steps_removed: int
    sender: PortIdentity  # sourcePortIdentity of the Announce (ourselves for D0)
    receiver: PortIdentity  # the port that received it (ourselves for D0)
    local_priority: int = 128  # G.8275.x: the receiving port's (or, for D0, the clock's) localPriority

    @classmethod
    def from_announce(cls, msg: Announce, receiver: PortIdentity, local_priority: int = 128) -> Candidate:
        q = msg.gm_clock_quality
        return cls(msg.gm_priority1, msg.gm_identity, q.clock_class, q.clock_accuracy, q.offset_scaled_log_variance,
                   msg.gm_priority2, msg.steps_removed, msg.header.source_port, receiver, local_priority)


def _cmp(a: object, b: object) -> int:
    """+1 when a is smaller (better), -1 when larger, 0 when equal."""
    return (a < b) - (a > b)  # type: ignore[operator]


def _topology(a: Candidate, b: Candidate) -> int:
    """Figure 35: the same grandmaster reached by two paths."""
    if a.steps_removed > b.steps_removed + 1:
        return B_BETTER
    if a.steps_removed + 1 < b.steps_removed:
        return A_BETTER
    if a.steps_removed > b.steps_removed:
        return B_BETTER if _ident(a.receiver) < _ident(a.sender) else B_BETTER_TOPO
    if a.steps_removed < b.steps_removed:
        return A_BETTER if _ident(b.receiver) < _ident(b.sender) else A_BETTER_TOPO
    by_sender = _cmp(_ident(a.sender), _ident(b.sender))
    if by_sender:
        return A_BETTER_TOPO if by_sender > 0 else B_BETTER_TOPO
    by_port = _cmp(a.receiver.port_number, b.receiver.port_number)
    return A_BETTER_TOPO if by_port > 0 else B_BETTER_TOPO if by_port < 0 else EQUAL


def _ident(p: PortIdentity) -> tuple[bytes, int]:
    return p.clock_identity, p.port_number


def compare(a: Candidate, b: Candidate, alternate: bool = False) -> int:
    """A_BETTER/A_BETTER_TOPO (> 0), EQUAL, or B_BETTER_TOPO/B_BETTER (< 0)."""
    if alternate:
        return _compare_g8275(a, b)
    if a.gm_identity != b.gm_identity:  # Figure 34, part 1
        for x, y in ((a.gm_priority1, b.gm_priority1), (a.gm_class, b.gm_class), (a.gm_accuracy, b.gm_accuracy),
                     (a.gm_variance, b.gm_variance), (a.gm_priority2, b.gm_priority2),
                     (a.gm_identity, b.gm_identity)):
            c = _cmp(x, y)
            if c:
                return A_BETTER if c > 0 else B_BETTER
    return _topology(a, b)


def _compare_g8275(a: Candidate, b: Candidate) -> int:
    """G.8275.1 Figure 4 (G.8275.2 Figure 3 is the same)."""
    for x, y in ((a.gm_class, b.gm_class), (a.gm_accuracy, b.gm_accuracy), (a.gm_variance, b.gm_variance),
                 (a.gm_priority2, b.gm_priority2), (a.local_priority, b.local_priority)):
        c = _cmp(x, y)
        if c:
            return A_BETTER if c > 0 else B_BETTER
    if a.gm_class <= 127 and a.gm_identity != b.gm_identity:
        return A_BETTER if a.gm_identity < b.gm_identity else B_BETTER
    return _topology(a, b)


@dataclass
class ForeignMaster:
    announce: Announce
    received_ns: list[int] = field(default_factory=list)  # monotonic receipt times inside the window
    source: str = ""  # the address its latest Announce came from (an alarm and the audit trail name it)
    address: object = None  # that address as the transport gave it (a slave's unicast messages go there)

    def interval_ns(self) -> int:
        log = self.announce.header.log_interval
        log = 1 if log == 0x7F or not -7 <= log <= 7 else log
        return int(NS_PER_S * 2.0 ** log)


class ForeignMasters:
    """The foreign master data set of one port (9.3.2.4)."""

    def __init__(self, own_clock_identity: bytes, receipt_timeout: int):
        self.own = own_clock_identity
        self.receipt_timeout = receipt_timeout
        self.masters: dict[PortIdentity, ForeignMaster] = {}

    def on_announce(self, msg: Announce, now_ns: int, source: str = "", address: object = None) -> bool:
        """Record an Announce (from ``address``, shown as ``source``); True if it made a new master qualified (the
        caller then runs the BMCA)."""
        sender = msg.header.source_port
        if sender.clock_identity == self.own or msg.steps_removed >= MAX_STEPS_REMOVED:
            return False
        entry = self.masters.get(sender)
        if entry is None:
            if len(self.masters) >= MAX_FOREIGN_MASTERS:
                oldest = min(self.masters, key=lambda k: self.masters[k].received_ns[-1])
                del self.masters[oldest]
            entry = self.masters[sender] = ForeignMaster(msg)
        was = self._qualified(entry, now_ns)
        entry.announce, entry.source, entry.address = msg, source, address
        entry.received_ns.append(now_ns)
        window = FOREIGN_MASTER_TIME_WINDOW * entry.interval_ns()
        entry.received_ns = [t for t in entry.received_ns if now_ns - t <= window][-FOREIGN_MASTER_TIME_WINDOW:]
        return not was and self._qualified(entry, now_ns)

    def _qualified(self, entry: ForeignMaster, now_ns: int) -> bool:
        window = FOREIGN_MASTER_TIME_WINDOW * entry.interval_ns()
        recent = [t for t in entry.received_ns if now_ns - t <= window]
        return len(recent) >= FOREIGN_MASTER_THRESHOLD

    def expire(self, now_ns: int) -> bool:
        """Forget masters silent for announceReceiptTimeout of their intervals; True if any was forgotten."""
        gone = [k for k, e in self.masters.items()
                if now_ns - e.received_ns[-1] > self.receipt_timeout * e.interval_ns()]
        for key in gone:
            del self.masters[key]
        return bool(gone)

    def qualified(self, now_ns: int) -> list[Announce]:
        return [e.announce for e in self.masters.values() if self._qualified(e, now_ns)]

    def next_expiry_ns(self) -> int | None:
        times = [e.received_ns[-1] + self.receipt_timeout * e.interval_ns() + 1 for e in self.masters.values()]
        return min(times) if times else None


def best(candidates: list[Candidate], alternate: bool = False) -> Candidate | None:
    top: Candidate | None = None
    for c in candidates:
        if top is None or compare(c, top, alternate) > 0:
            top = c
    return top


@dataclass(frozen=True, slots=True)
class Decision:
    state: str  # "MASTER" | "PASSIVE" | "SLAVE" | "LISTENING"
    code: str  # 9.3.3 decision code: M1, M2, P1, P2, S1 (taken as PASSIVE unless slaveOnly), or "listening"
    reason: str


def decide(d0: Candidate, erbest: Candidate | None, listening: bool, master_only: bool = False,
           alternate: bool = False, slave_only: bool = False) -> Decision:
    """9.3.3 for an ordinary clock with one port.  A slaveOnly port follows the best master there is (S1), and
    listens while there is none.  Any other port of the appliance follows no clock: where the standard would make it
    a slave (S1), it stays PASSIVE, silent, and says why."""
    if master_only:
        return Decision("MASTER", "M1", "masterOnly port (profile)")
    if slave_only:
        if erbest is None:
            return Decision("LISTENING", "listening", "no qualified master")
        return Decision("SLAVE", "S1", f"best master {erbest.gm_identity.hex()} (class {erbest.gm_class})")
    if erbest is None:
        if listening:
            return Decision("LISTENING", "listening", "waiting for announce receipt timeout")
        return Decision("MASTER", "M1" if d0.gm_class <= 127 else "M2", "no qualified foreign master")
    c = compare(d0, erbest, alternate)
    gm = erbest.gm_identity.hex()
    if c > 0:
        return Decision("MASTER", "M1" if d0.gm_class <= 127 else "M2",
                        f"better than the best foreign master {gm} (class {erbest.gm_class})")
    if d0.gm_class <= 127:
        return Decision("PASSIVE", "P1", f"grandmaster {gm} (class {erbest.gm_class}) is better")
    return Decision("PASSIVE", "S1", f"grandmaster {gm} (class {erbest.gm_class}) is better; this appliance does "
                                     "not follow it")
