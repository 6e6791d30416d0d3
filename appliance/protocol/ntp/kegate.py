"""Which NTS-KE connections the server holds, and which to let go: the slot bookkeeping of ``edge/ntp/ntske.py``.

Pure: no sockets, no clock (calls take ``now_ns``).  Every connection has one deadline for its whole exchange
(handshake, request, answer); one client (an IPv4 address or an IPv6 /64) holds at most ``per_client_slots``; a new
connection when every slot is held pushes out the least advanced unfinished exchange, of the client holding the
most, the oldest.  A trickle of bytes therefore holds a slot for at most the deadline and never keeps others out.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from appliance.protocol.limits import client_of

SLOTS_PER_CLIENT = 8  # at most, and at most a quarter of max_connections (an NTS client opens one at a time)


class Stage(enum.Enum):
    HELLO = "hello"  # accepted, no whole ClientHello yet (a real client sends it with its first segment)
    HANDSHAKE = "handshake"  # the ClientHello in hand, TLS not finished
    REQUEST = "request"  # TLS done, the request not yet whole
    ANSWER = "answer"  # the request whole: being answered (milliseconds; never pushed out)


# The unfinished stages, in the order they are pushed out: a trickle of bytes stays in HELLO, where a real client
# spends no time, and a client that got further has cost the server a handshake.
EVICTION_ORDER = {Stage.HELLO: 0, Stage.HANDSHAKE: 1, Stage.REQUEST: 2}


def per_client_slots(max_connections: int) -> int:
    """How many of ``max_connections`` one client may hold at once."""
    return max(1, min(SLOTS_PER_CLIENT, max_connections // 4))


@dataclass
class _Held:
    client: str
    stage: Stage
    deadline_ns: int


class KeGate:
    """The NTS-KE connections held, by key (handed out in order: a smaller key is an older connection).

    Pure: no sockets, no clock (calls take ``now_ns``).  The server asks it what to close."""

    def __init__(self, max_connections: int, per_client: int, exchange_ns: int) -> None:
        self.max_connections, self.per_client, self.exchange_ns = max_connections, per_client, exchange_ns
        self._held: dict[int, _Held] = {}
        self._next_key = 1

    def __len__(self) -> int:
        return len(self._held)

    def admit(self, address: str, now_ns: int) -> tuple[int | None, list[int]]:
        """A connection just accepted from ``address``: its key (None: refused, every slot it could take is busy
        answering) and the keys to close to make room for it."""
        client = client_of(address)
        victim: int | None = None
        if self.held_by(client) >= self.per_client:
            victim = self._oldest_waiting(client)
            if victim is None:
                return None, []
        elif len(self._held) >= self.max_connections:
            victim = self._victim()
            if victim is None:
                return None, []
        if victim is not None:
            self.release(victim)
        key, self._next_key = self._next_key, self._next_key + 1
        self._held[key] = _Held(client, Stage.HELLO, now_ns + self.exchange_ns)
        return key, [] if victim is None else [victim]

    def move(self, key: int, stage: Stage) -> bool:
        """``key`` reached ``stage`` (its deadline stays the exchange's); False when it was let go meanwhile."""
        held = self._held.get(key)
        if held is None:
            return False
        held.stage = stage
        return True

    def release(self, key: int) -> None:
        self._held.pop(key, None)

    def expired(self, now_ns: int) -> list[int]:
        """The connections past their deadline, oldest first, let go."""
        late = [k for k, h in self._held.items() if h.deadline_ns <= now_ns]
        for key in late:
            del self._held[key]
        return late

    def next_deadline_ns(self) -> int | None:
        return min((h.deadline_ns for h in self._held.values()), default=None)

    def held_by(self, client: str) -> int:
        return sum(1 for h in self._held.values() if h.client == client)

    def deadline_ns(self, key: int) -> int | None:
        held = self._held.get(key)
        return held.deadline_ns if held else None

    def client(self, key: int) -> str | None:
        held = self._held.get(key)
        return held.client if held else None

    def _oldest_waiting(self, client: str) -> int | None:
        """``client``'s least advanced unfinished exchange (the oldest of them), if any."""
        mine = [(EVICTION_ORDER[h.stage], k) for k, h in self._held.items()
                if h.client == client and h.stage in EVICTION_ORDER]
        return min(mine)[1] if mine else None

    def _victim(self) -> int | None:
        """The least advanced unfinished exchange; of those, one of the client holding the most; the oldest."""
        held: dict[str, int] = {}
        for h in self._held.values():
            held[h.client] = held.get(h.client, 0) + 1
        waiting = [(EVICTION_ORDER[h.stage], -held[h.client], k) for k, h in self._held.items()
                   if h.stage in EVICTION_ORDER]
        return min(waiting)[2] if waiting else None
