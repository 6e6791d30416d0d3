"""Drive the native data plane from a worker: hand it the policy, let it serve, publish what it counted.

I/O edge.  ``_fastpath.FastPath.serve`` waits on the socket in recvmmsg itself (the socket blocking while it runs,
one system call a wake-up), reads and answers whole batches of datagrams with recvmmsg/sendmmsg and drains the
socket's error queue (the kernel transmit timestamps of interleaved replies); it returns to Python only to let the
worker publish its counters (twice a second) and notice a stop.  It answers every request itself: bare,
symmetric-key authenticated (the keys file's keys, handed over once by ``set_keys``) and NTS (RFC 8915) while it
holds the cookie master keys: ``sync_cookie_keys`` hands it the worker's keys, again whenever the key file is
reloaded after a rotation.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from appliance.edge.ntp import _fastpath  # type: ignore[attr-defined]
from appliance.edge.ntp.shm import COUNTER_NAMES
from appliance.outputs.ntp.policy import DENY_ACTIONS
from appliance.protocol import limits
from appliance.protocol.ntp.auth import KeyTable, KeyType

log = logging.getLogger("appliance.ntp.fast")
KEY_TYPES = {KeyType.MD5: 1, KeyType.SHA1: 2, KeyType.AES128: 3}  # _auth.h
NOT_YET = object()  # no cookie keys handed to the data plane yet


def key_rows(keys: KeyTable | None) -> list[tuple[int, int, bytes]]:
    """The keys file's keys as the data plane takes them: (key ID, type, secret)."""
    return [] if keys is None else [(k.id, KEY_TYPES[k.type], k.secret) for k in (keys[i] for i in keys)]


def make_fast_path(worker: Any) -> Any:
    cfg = worker.config
    rules = [(r.family, r.network, r.prefix_len, r.allow) for r in limits.AccessRules(cfg.allow, cfg.deny).table]
    fast = _fastpath.FastPath(worker.sock.fileno(), worker.reader.shm.buf, rules, DENY_ACTIONS[cfg.deny_action],
                              float(cfg.rate_per_s), int(cfg.burst), int(cfg.max_clients), int(cfg.interleaved_table),
                              int(cfg.nts_replay_table))
    fast.set_keys(key_rows(worker.keys))
    return fast


def sync_cookie_keys(worker: Any, fast: Any, pushed: Any = NOT_YET) -> Any:
    """The worker's NTS cookie jar, reloaded if its key file changed (at most once a second), handed to the data
    plane when it differs from ``pushed`` (the jar handed over last).  Returns the jar."""
    if worker.cookie_keys is None:
        return None
    jar = worker.cookie_keys.refresh(time.monotonic())
    if jar is not pushed:
        try:
            fast.set_cookie_keys([(k.key_id, k.key) for k in jar.keys] if jar is not None else [])
        except (ValueError, RuntimeError) as exc:  # then it holds none: NTS requests get plain, unauthenticated replies
            log.error("NTS cookie keys not handed to the data plane: %s", exc)
    return jar


def counters(fast: Any) -> dict[str, int]:
    """The data plane's counters, with the worker's heartbeat and pid, for the shared-memory row."""
    values = dict(zip(COUNTER_NAMES, fast.counters()))
    values.update(heartbeat_ns=time.time_ns(), pid=os.getpid(), fast_path=1)
    return values


def take_clients(worker: Any, fast: Any) -> None:
    """The clients the data plane counted since the last call, into the worker's recent window."""
    now_ns = time.monotonic_ns()
    for key, requests, error in fast.take_clients():
        worker.clients.add(key, now_ns, requests, error)


def serve_fast(worker: Any, should_stop: Callable[[], bool], publish_every_s: float = 0.5) -> None:
    fast = make_fast_path(worker)
    next_publish = 0.0
    jar = NOT_YET
    while not should_stop():
        jar = sync_cookie_keys(worker, fast, jar)
        fast.serve(200, 200)
        now = time.monotonic()
        if now >= next_publish:
            take_clients(worker, fast)
            worker.publish(counters(fast))
            next_publish = now + publish_every_s
    take_clients(worker, fast)
    worker.publish(counters(fast))
    del fast  # releases its view of the shared memory, which must go before the segment is closed
