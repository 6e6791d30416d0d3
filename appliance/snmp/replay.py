"""Replay protection of authenticated SNMPv3 writes: which SET messages were already seen inside the time window.

Pure core (no I/O, no clock reads: the agent's engine boots and time come with each call).  USM (RFC 3414 3.2.7)
accepts an authenticated message again and again as long as its msgAuthoritativeEngineBoots is the agent's and its
msgAuthoritativeEngineTime is within 150 s of the agent's snmpEngineTime: a captured SET (forced holdover) resent
within that window would run again.  The agent asks ``ReplayCache.check`` for every authenticated SET that passed
USM, before running it, with the message's ``WriteId``; a message seen before is a replay, dropped unanswered.

An entry is kept exactly as long as USM could still accept its message: until the agent's engine time is more than
``WINDOW_S`` past the message's (or the agent's engine boots moved on).  Memory is bounded: at most ``max_entries``
entries.  When the cache is full of entries still inside their window, forgetting one would let its message run
again, so the new write is refused instead (``FULL``: the agent answers resourceUnavailable, RFC 3416 4.2.5) and
counted; room comes back as entries expire, at the latest ``2 x WINDOW_S`` later.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from dataclasses import dataclass

WINDOW_S = 150  # RFC 3414 2.2.3 and 3.2.7a: the time window, in seconds of snmpEngineTime
MAX_ENTRIES = 4096  # authenticated SETs remembered at once: 27 a second, sustained over the 150 s window


@dataclass(frozen=True)
class WriteId:
    """What makes one authenticated SNMPv3 message itself: the engine boots and time it claims, its msgID and user
    (the fields USM authenticates), and a digest of the whole message, so two distinct requests that happen to
    share the rest (two managers, one user, one second, one msgID) never count as one."""

    engine_boots: int
    engine_time_s: int
    msg_id: int
    user: bytes
    digest: bytes


class Verdict(enum.Enum):
    FRESH = "fresh"  # not seen inside the window: run it (it is remembered now)
    REPLAY = "replay"  # seen before inside the window: drop it
    FULL = "full"  # the cache is full of entries still inside their window: refuse it


class ReplayCache:
    """The authenticated writes seen inside the time window; ``replayed`` and ``refused`` count the verdicts."""

    def __init__(self, max_entries: int = MAX_ENTRIES, window_s: int = WINDOW_S):
        self.max_entries, self.window_s = max_entries, window_s
        self._seen: set[WriteId] = set()
        self._expiry: list[tuple[int, int, WriteId]] = []  # (last engine time USM accepts it, boots, id): a heap
        self._boots: int | None = None
        self._order = itertools.count()  # ties in the heap: first in, first out
        self.replayed = self.refused = 0
        self.disabled_reason = ""

    def __len__(self) -> int:
        return len(self._seen)

    def disable(self, reason: str) -> None:
        """Refuse every write from now on (the agent could not make its engine boots persistent: after a restart
        an old message would be inside the window again, and this cache would be empty)."""
        self.disabled_reason = reason

    def check(self, write: WriteId, engine_boots: int, engine_time_s: int) -> Verdict:
        """The verdict on ``write`` received when the agent's engine is at ``engine_boots``, ``engine_time_s``."""
        self._expire(engine_boots, engine_time_s)
        if write in self._seen:
            self.replayed += 1
            return Verdict.REPLAY
        if self.disabled_reason or len(self._seen) >= self.max_entries:
            self.refused += 1
            return Verdict.FULL
        self._seen.add(write)
        heapq.heappush(self._expiry, (write.engine_time_s + self.window_s, next(self._order), write))
        return Verdict.FRESH

    def _expire(self, engine_boots: int, engine_time_s: int) -> None:
        if engine_boots != self._boots:  # USM takes no message of another boots value: none can be replayed
            self._seen.clear()
            self._expiry.clear()
            self._boots = engine_boots
        while self._expiry and self._expiry[0][0] < engine_time_s:
            _, _, write = heapq.heappop(self._expiry)
            self._seen.discard(write)
