"""What the NTP data plane is told to do: the server's policy, which Python builds and the native data plane applies.

Pure core.  ``ServerConfig`` is the part of the ``ntp.*`` settings a worker hands to the data plane
(``appliance/edge/ntp/_fastpath.c``) at start: the access lists (parsed into a rule table by
``appliance/protocol/limits.py``), what a denied client is told, the per-client rate limit and the sizes of the
data plane's tables.  The decisions themselves are the data plane's alone.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_REQUEST_LEN = 1024  # longer requests are dropped as oversize
DENY_ACTIONS = {"drop": 0, "deny": 1, "rstr": 2}  # a denied client: dropped, or told KoD DENY / KoD RSTR


@dataclass(frozen=True)
class ServerConfig:
    allow: tuple[str, ...] = ("0.0.0.0/0", "::/0")
    deny: tuple[str, ...] = ()
    deny_action: str = "drop"  # "drop", "deny" (KoD DENY) or "rstr" (KoD RSTR)
    rate_per_s: float = 16.0  # 0 disables rate limiting
    burst: int = 32
    max_clients: int = 65_536
    interleaved_table: int = 65_536  # receive timestamps whose transmit timestamps are kept
    nts_replay_table: int = 65_536  # NTS Unique Identifiers seen lately: a request seen again is dropped
