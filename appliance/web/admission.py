"""Which console connections the server holds before a worker serves them, for how long, and which it lets go.

Pure core: no sockets, no clock (every call that needs the time takes ``now_ns``).  The console's server (web.server)
does the I/O and asks this table what to do.  A connection is in one stage at a time:

- ``HANDSHAKE``: accepted, TLS not finished (it must finish within ``handshake_ns`` of the accept);
- ``REQUEST``: TLS done, or a kept-alive connection whose next request has begun; the whole request, head and body,
  must arrive within ``request_ns`` (one deadline for all of it, however the client spreads its bytes);
- ``IDLE``: kept alive between two requests, nothing sent yet (closed after ``idle_ns``);
- ``QUEUED``: a whole request in hand, waiting for one of its client's worker slots (at most ``queued_ns``);
- ``BUSY``: a worker thread is answering it (no deadline here: the server gives the worker's socket one overall
  deadline, ``worker_ns``, past which it waits on that client no longer).

Connections that have not yet delivered a request (``HANDSHAKE`` and ``REQUEST``: nobody is logged in on them yet)
are capped per client and in total.  A new connection over a cap displaces the oldest waiting one of the client
with the most (first those still in the handshake): a client that floods its own slots only ever pushes out its own
connections, and a real browser behind the same address still gets in, since its handshake takes milliseconds.  A
client has at most ``busy_per_client`` of the worker threads at once; its further requests wait their turn.  A client
is an IPv4 address or an IPv6 /64 (one host's share of a network, as a provider hands them out).

A worker is handed only a whole request (``request_readiness``): a body is read by the server before any worker is
involved, and a request that declares a body over ``MAX_BODY_BYTES`` is refused at once (413), whatever its method.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from appliance.protocol.limits import client_of
from appliance.units import NS_PER_S


class Stage(enum.Enum):
    HANDSHAKE = "handshake"
    REQUEST = "request"
    IDLE = "idle"
    QUEUED = "queued"
    BUSY = "busy"


WAITING = (Stage.HANDSHAKE, Stage.REQUEST)  # nothing asked yet: the stages an attacker can hold for free

# The largest request body the console takes.  Its largest legitimate bodies are a setting changed through the API
# (PUT /api/v1/config/NAME, {"value": ...}: a list of trap receivers or a location string, under 4 KiB) and the
# users form (a name, a role, a password of at most 1024 characters); nothing is uploaded (the audit backup is a
# download).  64 KiB leaves ample room and is the application's own limit (MAX_CONTENT_LENGTH) too.
MAX_BODY_BYTES = 64 * 1024
CHUNK_LINE_BYTES = 1024  # a chunk-size line with its extensions (RFC 9112 7.1)


@dataclass(frozen=True)
class Limits:
    handshake_ns: int = 3 * NS_PER_S  # a TLS handshake is two round trips: milliseconds, seconds over a bad link
    request_ns: int = 5 * NS_PER_S  # from the end of the handshake (or the first byte after an idle wait)
    idle_ns: int = 10 * NS_PER_S  # a kept-alive connection between requests
    queued_ns: int = 10 * NS_PER_S
    waiting_per_client: int = 16  # a browser opens about six connections to a host
    waiting_total: int = 256  # with the kept-alive ones, well inside a default limit of 1024 open files
    keep_alive_total: int = 64
    busy_per_client: int = 4  # of the server's worker threads (8)
    head_bytes: int = 32 * 1024
    body_bytes: int = MAX_BODY_BYTES
    # All a worker may spend waiting on one client for one request (reading the rest of a request the parser asks
    # for, writing the answer to a slow reader): a minute is ample for the largest answer (an audit backup) over a
    # slow link, and bounds what a client that stops reading can hold.
    worker_ns: int = 60 * NS_PER_S

    def timeout_ns(self, stage: Stage) -> int | None:
        return {Stage.HANDSHAKE: self.handshake_ns, Stage.REQUEST: self.request_ns, Stage.IDLE: self.idle_ns,
                Stage.QUEUED: self.queued_ns}.get(stage)


@dataclass
class _Entry:
    client: str
    stage: Stage
    deadline_ns: int | None


class Admission:
    """The connections the server holds, by key (handed out in order: a smaller key is an older connection)."""

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self._entries: dict[int, _Entry] = {}
        self._next_key = 1
        self.counts = {stage: 0 for stage in Stage}  # read from other threads: values change, keys never do
        self.dropped = {"evicted": 0, "handshake timeout": 0, "request timeout": 0, "queued timeout": 0}

    def __len__(self) -> int:
        return len(self._entries)

    def stage(self, key: int) -> Stage | None:
        entry = self._entries.get(key)
        return entry.stage if entry else None

    def client(self, key: int) -> str:
        return self._entries[key].client

    def admit(self, address: str, now_ns: int) -> tuple[int, list[int]]:
        """A connection just accepted from ``address``: its key, and the keys to close to make room for it."""
        client = client_of(address)
        evict: list[int] = []
        if self._waiting(client) >= self.limits.waiting_per_client:
            evict.append(self._oldest_waiting(client))
        elif sum(self.counts[s] for s in WAITING) >= self.limits.waiting_total:
            evict.append(self._oldest_waiting(self._busiest_waiting_client()))
        for key in evict:
            self.release(key)
            self.dropped["evicted"] += 1
        key, self._next_key = self._next_key, self._next_key + 1
        self._entries[key] = _Entry(client, Stage.HANDSHAKE, now_ns + self.limits.handshake_ns)
        self.counts[Stage.HANDSHAKE] += 1
        return key, evict

    def move(self, key: int, stage: Stage, now_ns: int) -> list[int]:
        """``key`` enters ``stage`` now (its deadline restarts).  If it leaves a worker, the queued connection of its
        client that may start in its place (none or one)."""
        entry = self._entries[key]
        was = entry.stage
        self.counts[was] -= 1
        self.counts[stage] += 1
        timeout = self.limits.timeout_ns(stage)
        entry.stage, entry.deadline_ns = stage, None if timeout is None else now_ns + timeout
        return self._next_queued(entry.client) if was is Stage.BUSY and stage is not Stage.BUSY else []

    def may_start(self, key: int) -> bool:
        """Whether a worker may take ``key``'s request now (its client has a free worker slot)."""
        client = self._entries[key].client
        busy = sum(1 for e in self._entries.values() if e.client == client and e.stage is Stage.BUSY)
        return busy < self.limits.busy_per_client

    def release(self, key: int) -> list[int]:
        """Forget ``key`` (closed).  If it held a worker, the queued connection of its client that may start."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return []
        self.counts[entry.stage] -= 1
        return self._next_queued(entry.client) if entry.stage is Stage.BUSY else []

    def can_keep_alive(self) -> bool:
        """Whether one more connection may stay open between requests (the keep-alive limit)."""
        return self.counts[Stage.IDLE] < self.limits.keep_alive_total

    def expired(self, now_ns: int) -> list[tuple[int, Stage]]:
        """The connections past their stage's deadline, oldest first, and the stage each was in (counted as
        dropped, except idle ones: closing a kept-alive connection is ordinary housekeeping)."""
        late = [(k, e.stage) for k, e in self._entries.items() if e.deadline_ns is not None and e.deadline_ns <= now_ns]
        for key, stage in late:
            self.release(key)
            if stage is not Stage.IDLE:
                self.dropped[f"{stage.value} timeout"] += 1
        return late

    def next_deadline_ns(self) -> int | None:
        deadlines = [e.deadline_ns for e in self._entries.values() if e.deadline_ns is not None]
        return min(deadlines) if deadlines else None

    def waiting_of(self, client: str) -> int:
        return self._waiting(client)

    def _next_queued(self, client: str) -> list[int]:
        return [k for k, e in self._entries.items() if e.client == client and e.stage is Stage.QUEUED][:1]

    def _waiting(self, client: str) -> int:
        return sum(1 for e in self._entries.values() if e.client == client and e.stage in WAITING)

    def _oldest_waiting(self, client: str) -> int:
        """The oldest connection of ``client`` still in its handshake, else its oldest waiting for a request."""
        mine = [(e.stage is not Stage.HANDSHAKE, k) for k, e in self._entries.items()
                if e.client == client and e.stage in WAITING]
        return min(mine)[1]

    def _busiest_waiting_client(self) -> str:
        per_client: dict[str, int] = {}
        for e in self._entries.values():
            if e.stage in WAITING:
                per_client[e.client] = per_client.get(e.client, 0) + 1
        return max(per_client, key=lambda c: per_client[c])


class Readiness(enum.Enum):
    MORE = "more"  # keep reading
    READY = "ready"  # a whole request: a worker can answer it without waiting for the client
    CONTINUE = "continue"  # a head that asks for "100 Continue": answer it (without_expect) and read on
    TOO_LARGE = "too large"  # a request head longer than the limit (431)
    BODY_TOO_LARGE = "body too large"  # a body declared, or sent, over the limit (413)
    BAD = "bad"  # a body whose length cannot be told for sure (400): never guessed, as a smuggled request would be


_HEX = frozenset(b"0123456789abcdefABCDEF")


def _head_end(buffer: bytes) -> tuple[int, int] | None:
    """(where the request starts, where its head ends) in ``buffer``, or None while the head is incomplete."""
    start = len(buffer) - len(buffer.lstrip(b"\r\n"))  # RFC 9112 2.2: empty lines before a request are ignored
    ends = [i + len(sep) for sep in (b"\r\n\r\n", b"\n\n") if (i := buffer.find(sep, start)) >= 0]
    return (start, min(ends)) if ends else None


def _body_headers(head: bytes) -> tuple[list[bytes], list[bytes], bool]:
    """The Content-Length values, the Transfer-Encoding values and whether ``Expect: 100-continue`` is asked."""
    lengths: list[bytes] = []
    codings: list[bytes] = []
    expect = False
    for line in head.split(b"\n")[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"content-length":
            lengths.append(value)
        elif name == b"transfer-encoding":
            codings.append(value)
        elif name == b"expect" and value == b"100-continue":
            expect = True
    return lengths, codings, expect


def request_readiness(buffer: bytes, head_bytes: int, body_bytes: int) -> Readiness:
    """Whether ``buffer`` (what a connection has sent since its last request) holds a whole request: its head and
    all of its body, sized by Content-Length or chunked (RFC 9112 6.3).  A body declared or sent over
    ``body_bytes`` is refused before it is read; so is a body whose length is unclear (both Content-Length and
    Transfer-Encoding, several lengths, a coding other than chunked); a head that HTTP's parser will refuse for
    another reason is ready (the parser answers 400)."""
    found = _head_end(buffer)
    if found is None:
        return Readiness.TOO_LARGE if len(buffer) > head_bytes else Readiness.MORE
    start, end = found
    lengths, codings, expect = _body_headers(bytes(buffer[start:end]))
    if codings:
        if lengths or codings != [b"chunked"]:
            return Readiness.BAD
        ready = _chunked_readiness(buffer, end, head_bytes, body_bytes)
    elif not lengths:
        return Readiness.READY  # no body
    elif len(lengths) != 1 or not lengths[0].isdigit():
        return Readiness.BAD
    elif int(lengths[0]) > body_bytes:
        return Readiness.BODY_TOO_LARGE
    else:
        ready = Readiness.READY if len(buffer) - end >= int(lengths[0]) else Readiness.MORE
    return Readiness.CONTINUE if expect and ready in (Readiness.MORE, Readiness.READY) else ready


def _chunked_readiness(buffer: bytes, pos: int, head_bytes: int, body_bytes: int) -> Readiness:
    """Whether a chunked body starting at ``pos`` is whole (its last chunk and trailer section in hand).  Its
    encoding may take at most four times the data's size (many tiny chunks with long extensions are refused)."""
    if len(buffer) - pos > 4 * body_bytes + head_bytes:
        return Readiness.BODY_TOO_LARGE
    total = 0
    while True:
        eol = buffer.find(b"\n", pos)
        if eol < 0:
            return Readiness.BAD if len(buffer) - pos > CHUNK_LINE_BYTES else Readiness.MORE
        size_text = bytes(buffer[pos:eol]).rstrip(b"\r").split(b";", 1)[0].strip()
        if not size_text or len(size_text) > 8 or not set(size_text) <= _HEX:
            return Readiness.BAD
        size, pos = int(size_text, 16), eol + 1
        if size == 0:
            break
        total += size
        if total > body_bytes:
            return Readiness.BODY_TOO_LARGE
        if len(buffer) < pos + size + 2:
            return Readiness.MORE
        if buffer[pos + size:pos + size + 2] != b"\r\n":
            return Readiness.BAD
        pos += size + 2
    trailers = pos
    while (eol := buffer.find(b"\n", pos)) >= 0:
        line, pos = bytes(buffer[pos:eol]).rstrip(b"\r"), eol + 1
        if not line:
            return Readiness.READY
    return Readiness.TOO_LARGE if len(buffer) - trailers > head_bytes else Readiness.MORE


def without_expect(buffer: bytes) -> bytes:
    """``buffer`` with its request head's ``Expect: 100-continue`` line taken out: the server has answered it, so
    the worker must not answer it again."""
    found = _head_end(buffer)
    if found is None:
        return bytes(buffer)
    start, end = found
    lines = bytes(buffer[start:end]).split(b"\n")
    kept = [line for line in lines if not (line.partition(b":")[0].strip().lower() == b"expect"
                                           and line.partition(b":")[2].strip().lower() == b"100-continue")]
    return bytes(buffer[:start]) + b"\n".join(kept) + bytes(buffer[end:])
