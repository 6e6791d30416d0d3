"""Small parts of the PTP port (port.py) that its modules and the edge share: the ``Send`` action, the receive filter,
transmit-timestamp bookkeeping, the port's timers, log intervals and how identities are printed.

Pure core: no I/O, no clock reads; every instant comes in as an argument.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance.protocol.ptp import codec as c
from appliance.units import NS_PER_S

TX_TIMESTAMP_TIMEOUT_NS = NS_PER_S  # a transmit timestamp later than this is given up (and counted)
OUTSTANDING_REQUESTS = 8  # our Delay_Req / Pdelay_Req exchanges remembered at once


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
