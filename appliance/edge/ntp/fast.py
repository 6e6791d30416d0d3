"""Drive the native fast path from a worker: it answers bare and NTS requests, the Python server answers the rest.

I/O edge.  ``_fastpath.FastPath.serve`` waits on the socket in recvmmsg itself (the socket blocking while it runs,
one system call a wake-up), reads and answers whole batches of datagrams with recvmmsg/sendmmsg, and returns the
requests it leaves to Python (those carrying a MAC or extension fields other than NTS's, with the access and rate
decisions already taken, or everything while no clock map is published yet).
When built with libcrypto (``_fastpath.NTS``) it answers NTS requests (RFC 8915) itself while it holds the cookie
master keys: ``sync_cookie_keys`` hands it the worker's keys, again whenever the key file is reloaded after a
rotation, and the Python server keeps the same jar for what it answers.  It also drains the socket's error queue,
so the kernel transmit timestamps of replies the Python server sent come back through ``take_kernel_tx`` for its
interleaved table.  Counters of both paths are merged into the worker's shared-memory row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from appliance.edge.ntp import _fastpath  # type: ignore[attr-defined]
from appliance.protocol.limits import Limit
from appliance.edge.ntp.shm import COUNTER_NAMES

log = logging.getLogger("appliance.ntp.fast")
DENY_ACTIONS = {"drop": 0, "deny": 1, "rstr": 2}
ADMISSION = {0: Limit.PASS, 1: Limit.KOD, -1: None}
NTS_IN_C = bool(getattr(_fastpath, "NTS", 0))
NOT_YET = object()  # no keys handed to the fast path yet


def make_fast_path(worker: Any) -> Any:
    server = worker.server
    cfg = server.config
    rules = [(r.family, r.network, r.prefix_len, r.allow) for r in server.access.table]
    return _fastpath.FastPath(worker.sock.fileno(), worker.reader.shm.buf, rules, DENY_ACTIONS[cfg.deny_action],
                              float(cfg.rate_per_s), int(cfg.burst), int(cfg.max_clients), int(cfg.interleaved_table),
                              int(cfg.nts_replay_table))


def sync_cookie_keys(worker: Any, fast: Any, pushed: Any = NOT_YET) -> Any:
    """The worker's NTS cookie jar, reloaded if its key file changed (at most once a second), given to the Python
    server and, when it differs from ``pushed`` (the jar handed over last), to the fast path.  Returns the jar."""
    if worker.cookie_keys is not None:
        worker.server.cookies = worker.cookie_keys.refresh(time.monotonic())
    jar = worker.server.cookies
    if NTS_IN_C and jar is not pushed:
        try:
            fast.set_cookie_keys([(k.key_id, k.key) for k in jar.keys] if jar is not None else [])
        except (ValueError, RuntimeError) as exc:  # then the fast path holds none: NTS goes to the Python server
            log.error("NTS cookie keys not handed to the fast path: %s", exc)
    return jar


def merged_counters(worker: Any, fast: Any) -> dict[str, int]:
    values = worker.counters()
    for name, value in zip(COUNTER_NAMES, fast.counters()):
        values[name] = values.get(name, 0) + value
    values["fast_path"] = 1
    return values


def take_clients(worker: Any, fast: Any) -> None:
    """The clients the fast path counted since the last call, into the worker's recent window (a fast path built
    before it counted clients has no ``take_clients``: only the Python path's are known then)."""
    take = getattr(fast, "take_clients", None)
    if take is None:
        return
    now_ns = time.monotonic_ns()
    for key, requests, error in take():
        worker.clients.add(key, now_ns, requests, error)


def serve_fast(worker: Any, should_stop: Callable[[], bool], publish_every_s: float = 0.5) -> None:
    fast = make_fast_path(worker)
    worker.after_send = fast.note_sent
    next_publish = 0.0
    jar = NOT_YET
    while not should_stop():
        jar = sync_cookie_keys(worker, fast, jar)
        slow = fast.serve(200, 64)
        for rx_key, tx_ns in fast.take_kernel_tx():  # before the requests that may ask for them (interleaved)
            worker.server.kernel_tx(rx_key, tx_ns)
        for data, addr, rx_ns, admission in slow:
            worker.extra["slow_path"] += 1
            worker.handle_datagram(data, addr, rx_ns, ADMISSION[admission])
        now = time.monotonic()
        if now >= next_publish:
            take_clients(worker, fast)
            worker.publish(merged_counters(worker, fast))
            next_publish = now + publish_every_s
    take_clients(worker, fast)
    worker.publish(merged_counters(worker, fast))
    worker.after_send = None
    del fast  # releases its view of the shared memory, which must go before the segment is closed
