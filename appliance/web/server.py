"""Serving the console: cheroot (a production WSGI server) with TLS in threads of the console process.

Edge module (sockets, threads).  ``WebPart`` runs in the console's own process (``web/process.py``), which the
appliance feeds with its status twice a second; the web threads read that dict and never touch the engines.
Operator commands go the other way, as calls the appliance runs on its event loop.
"""

from __future__ import annotations

import datetime
import errno
import logging
import secrets
import selectors
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

from cheroot import wsgi
from cheroot.makefile import StreamReader, StreamWriter
from cheroot.server import HTTPConnection
from cheroot.ssl.builtin import BuiltinSSLAdapter

from appliance.edge.persist import UnsafePathError, read_private, write_private
from appliance.edge.proc import lower_priority
from appliance.units import NS_PER_MS, NS_PER_S
from appliance.web.access import WebContext
from appliance.web.admission import Admission, Limits, Readiness, Stage, request_readiness, without_expect
from appliance.web.app import create_app
from appliance.web.tls import Opening, Step, ensure_certificate, handshake_step, harden, opening, refuse_plain_http

log = logging.getLogger("appliance.web")


def secret_key(state_dir: Path) -> bytes:
    """The session-signing key, made on first start (mode 0600); sessions survive a restart.  A symbolic link in
    its place is refused (UnsafePathError naming it): a key someone else chose would let them sign sessions."""
    path = state_dir / "web-secret.key"
    try:
        data = read_private(path)
        if len(data) >= 32:
            return data
    except FileNotFoundError:
        pass
    data = secrets.token_bytes(32)
    write_private(path, data)
    return data


KEEP_ALIVE_CONNECTIONS = 64
LISTEN_BACKLOG = 128  # connections the kernel completes before the gate accepts them (it accepts at low priority)
WORKER_SOCKET_TIMEOUT_S = 10  # one wait of a worker on a client (a slow reader of an answer); Limits.worker_ns in all


def _low_priority(app: Any) -> Any:
    """A WSGI app whose worker threads lower their own priority before their first request."""
    lowered = threading.local()

    def wsgi_app(environ: dict[str, Any], start_response: Any) -> Any:
        if not getattr(lowered, "done", False):
            lower_priority()
            lowered.done = True
        return app(environ, start_response)
    return wsgi_app


class _DeadlineSocketIO(socket.SocketIO):
    """A socket's end whose every wait ends by one deadline (monotonic seconds): a client that reads or sends a
    byte now and then cannot keep a worker past it, however short each wait.  The reading end first gives back
    what the gate already read from the socket (``prefix``)."""

    def __init__(self, sock: socket.socket, mode: str, deadline_s: float, wait_s: float, prefix: bytes = b""):
        super().__init__(sock, mode)
        self.deadline_s, self.wait_s = deadline_s, wait_s
        self.prefix = bytearray(prefix)

    def _arm(self) -> None:
        left_s = self.deadline_s - time.monotonic()
        if left_s <= 0:
            raise TimeoutError("timed out")  # as a socket timeout reads: cheroot closes the connection
        self._sock.settimeout(min(left_s, self.wait_s))

    def readinto(self, b: Any) -> int:
        if not self.prefix:
            self._arm()
            return int(super().readinto(b))
        n = min(len(b), len(self.prefix))
        b[:n] = self.prefix[:n]
        del self.prefix[:n]
        return n

    def write(self, b: Any) -> int:
        self._arm()
        return int(super().write(b))


class _RequestReader(StreamReader):  # type: ignore[misc]
    """cheroot's reading end of a connection, starting with the request the gate has in hand."""

    def __init__(self, sock: socket.socket, prefix: bytes, bufsize: int, deadline_s: float, wait_s: float):
        raw = _DeadlineSocketIO(sock, "rb", deadline_s, wait_s, prefix)
        super(StreamReader, self).__init__(raw, bufsize)  # its raw: the prefixed one
        self.bytes_read = 0

    def take_unread(self) -> bytes:
        """What the client sent beyond the request just answered (a pipelined next one), read no further."""
        out = bytearray()
        while self.has_data():
            out += self.read1(self.buffer_size)
        out += self.raw.prefix
        self.raw.prefix.clear()
        return bytes(out)


class _AnswerWriter(StreamWriter):  # type: ignore[misc]
    """cheroot's writing end of a connection for one request, every write within the request's deadline."""

    def __init__(self, sock: socket.socket, bufsize: int, deadline_s: float, wait_s: float):
        super(StreamWriter, self).__init__(_DeadlineSocketIO(sock, "wb", deadline_s, wait_s), bufsize)
        self.bytes_written = 0


class _GatedConnection(HTTPConnection):  # type: ignore[misc]
    gate_key = 0

    def close(self) -> None:
        super().close()
        self.server.connection_closed(self)


class _Held:
    """A connection the gate holds: its socket (plain until the ClientHello, then TLS), what it has sent so far."""

    def __init__(self, key: int, sock: socket.socket, address: str, port: int):
        self.key, self.sock, self.address, self.port = key, sock, address, port
        self.tls: ssl.SSLSocket | None = None
        self.buffer = bytearray()
        self.conn: _GatedConnection | None = None
        self.ssl_env: dict[str, Any] = {}
        self.events = 0  # what the selector watches for it (0: not registered)

    @property
    def live(self) -> socket.socket:
        return self.tls if self.tls is not None else self.sock


RECV_BYTES = 16 * 1024
ACCEPTS_PER_TURN = 64
ACCEPT_PAUSE_NS = 100 * NS_PER_MS  # out of file descriptors: let the closing of others catch up
CAP_NOTE_NS = 10 * NS_PER_S  # at most one log line per this about clients held to their cap
_LISTEN, _WAKE = "listen", "wake"
_TIMEOUT_REPLIES = {Stage.REQUEST: "408 Request Timeout", Stage.QUEUED: "503 Service Unavailable"}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_REFUSALS = {  # requests answered by the gate itself, before any worker: (status, what the client is told)
    Readiness.TOO_LARGE: ("431 Request Header Fields Too Large", "refused: a request head over {head} bytes"),
    Readiness.BODY_TOO_LARGE: ("413 Content Too Large", "refused: the request body is larger than {body} bytes"),
    Readiness.BAD: ("400 Bad Request", "refused: the request body's length is unclear (one Content-Length, or "
                                       "Transfer-Encoding: chunked alone)")}


class Gate:
    """cheroot's connection manager, replaced: one thread (the server's accept thread) that accepts, does the TLS
    handshakes and reads each request whole, all on non-blocking sockets, and hands a worker only a request it can
    answer without waiting for the client.

    cheroot's own manager does the handshake on its accept thread with a blocking socket: one client that opens a
    connection and says nothing stops every other client for the socket timeout, and a connection with TLS done
    but no request holds a worker thread for as long.  Here a silent connection costs a file descriptor until its
    deadline (web.admission says which, and which to let go first when a client holds too many), a request body
    is read here too, under the same deadline as the head (one declared over the limit is answered 413 at once),
    and the worker threads, fewer than the connections, only ever wait on a client that reads its answer slowly,
    never past the request's overall deadline, each client on at most a few of them.  Workers give kept-alive
    connections back with ``put`` and closed ones through ``connection_closed``: both are posted to this thread,
    which alone touches the selector and the table.
    """

    def __init__(self, server: _Server, limits: Limits):
        self.server, self.limits = server, limits
        self.admission = Admission(limits)
        self.held: dict[int, _Held] = {}
        self.listener: socket.socket = server.socket
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, _LISTEN)
        self.wake_r, self.wake_w = socket.socketpair()
        for end in (self.wake_r, self.wake_w):
            end.setblocking(False)
        self.selector.register(self.wake_r, selectors.EVENT_READ, _WAKE)
        self.inbox: list[tuple[bool, _GatedConnection]] = []  # (kept alive, connection) from the workers
        self.lock = threading.Lock()
        self.stop_requested = self.serving = False
        self.accept_resume_ns: int | None = None
        self.cap_noted_ns: int | None = None

    # --- what cheroot's server calls -------------------------------------------------------------------------------
    def run(self, expiration_interval: float) -> None:
        self.serving = True
        try:
            while not self.stop_requested:
                self._turn()
        finally:
            self.serving = False

    def stop(self) -> None:
        self.stop_requested = True
        self._wake()
        give_up = time.monotonic() + 5.0
        while self.serving and time.monotonic() < give_up:
            time.sleep(0.01)

    def close(self) -> None:
        for held in list(self.held.values()):
            if self.admission.stage(held.key) is not Stage.BUSY:  # a worker closes its own
                self._close(held)
        self.held.clear()
        self.selector.close()
        self.wake_r.close()
        self.wake_w.close()

    def put(self, conn: _GatedConnection) -> None:
        """A worker is done with a request and the connection stays open (any thread)."""
        self._post(True, conn)

    def connection_closed(self, conn: _GatedConnection) -> None:
        self._post(False, conn)

    @property
    def can_add_keepalive_connection(self) -> bool:
        return self.admission.can_keep_alive()

    def stats(self) -> dict[str, Any]:
        return {"held": {stage.value: n for stage, n in self.admission.counts.items()},
                "dropped": dict(self.admission.dropped)}

    # --- the loop --------------------------------------------------------------------------------------------------
    def _post(self, kept: bool, conn: _GatedConnection) -> None:
        with self.lock:
            self.inbox.append((kept, conn))
        self._wake()

    def _wake(self) -> None:
        try:
            self.wake_w.send(b"\0")
        except OSError:  # full (a wake-up is pending anyway) or closed (stopping)
            pass

    def _turn(self) -> None:
        now = time.monotonic_ns()
        due = [t for t in (self.admission.next_deadline_ns(), self.accept_resume_ns) if t is not None]
        timeout_s = min([1.0] + [max(0.0, (t - now) / NS_PER_S) for t in due])
        events = self.selector.select(timeout_s)
        now = time.monotonic_ns()
        for key, mask in events:
            if key.data is _LISTEN:
                self._accept(now)
            elif key.data is _WAKE:
                self._drain_wake()
            elif key.data.key in self.held:  # not let go earlier in this turn
                self._guarded(key.data, now)
        self._take_inbox(now)
        self._expire(now)
        if self.accept_resume_ns is not None and now >= self.accept_resume_ns:
            self.accept_resume_ns = None
            self.selector.register(self.listener, selectors.EVENT_READ, _LISTEN)

    def _drain_wake(self) -> None:
        try:
            while self.wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _accept(self, now: int) -> None:
        for _ in range(ACCEPTS_PER_TURN):
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning("web console: cannot accept connections (%s): pausing for %d ms", exc,
                                ACCEPT_PAUSE_NS // NS_PER_MS)
                    self.selector.unregister(self.listener)
                    self.accept_resume_ns = now + ACCEPT_PAUSE_NS
                else:
                    log.debug("web console: accept: %s", exc)
                return
            sock.setblocking(False)
            key, evicted = self.admission.admit(str(addr[0]), now)
            for old in evicted:
                self._close(self.held.pop(old))
            if evicted:
                self._note_cap(key, now)
            held = self.held[key] = _Held(key, sock, str(addr[0]), int(addr[1]))
            self._watch(held, selectors.EVENT_READ)
            self._guarded(held, now)  # the ClientHello is often there already

    def _note_cap(self, key: int, now: int) -> None:
        if self.cap_noted_ns is not None and now - self.cap_noted_ns < CAP_NOTE_NS:
            return
        self.cap_noted_ns = now
        client = self.admission.client(key)
        log.info("web console: %s holds %d connections that have sent no request (at most %d per client, %d in "
                 "all): closing the oldest", client, self.admission.waiting_of(client),
                 self.limits.waiting_per_client, self.limits.waiting_total)

    def _guarded(self, held: _Held, now: int) -> None:
        """Move one connection on; whatever goes wrong with it closes it, and only it."""
        try:
            self._advance(held, now)
        except (ssl.SSLError, OSError) as exc:
            log.debug("web console: %s:%d: %s: closed", held.address, held.port, exc)
            self._drop(held, now)
        except Exception:  # noqa: BLE001 - one connection's trouble must not stop the console
            log.exception("web console: %s:%d: unexpected error: closed", held.address, held.port)
            self._drop(held, now)

    def _advance(self, held: _Held, now: int) -> None:
        stage = self.admission.stage(held.key)
        if stage is Stage.HANDSHAKE:
            self._handshake(held, now)
        elif stage in (Stage.REQUEST, Stage.IDLE):
            self._watch(held, selectors.EVENT_READ)
            self._read(held, now)

    def _handshake(self, held: _Held, now: int) -> None:
        if held.tls is None:
            kind = opening(held.sock)
            if kind is Opening.NOTHING_YET:
                return
            if kind is not Opening.TLS:
                if kind is Opening.PLAIN_HTTP:
                    refuse_plain_http(held.sock)
                if kind is not Opening.CLOSED:
                    log.debug("web console: %s:%d spoke %s, not TLS: closed", held.address, held.port, kind.value)
                self._drop(held, now)
                return
            self._watch(held, 0)  # the plain socket is handed over to TLS (and closed as itself)
            held.tls = self.server.ssl_adapter.context.wrap_socket(held.sock, server_side=True,
                                                                   do_handshake_on_connect=False)
        step = handshake_step(held.tls)
        if step is not Step.DONE:
            self._watch(held, selectors.EVENT_WRITE if step is Step.WANT_WRITE else selectors.EVENT_READ)
            return
        held.ssl_env = self.server.ssl_adapter.get_environ(held.tls)
        self._move(held, Stage.REQUEST, now)
        self._watch(held, selectors.EVENT_READ)
        self._read(held, now)  # a TLS 1.3 client sends its request with its last handshake message

    def _readiness(self, held: _Held) -> Readiness:
        """Whether ``held`` has sent a whole request; a head asking for "100 Continue" is answered here (and the
        expectation taken out of the request: the worker must not answer it again)."""
        assert held.tls is not None
        ready = request_readiness(held.buffer, self.limits.head_bytes, self.limits.body_bytes)
        if ready is Readiness.CONTINUE:
            held.buffer = bytearray(without_expect(held.buffer))
            ready = request_readiness(held.buffer, self.limits.head_bytes, self.limits.body_bytes)
            if ready is Readiness.MORE:
                held.tls.send(_CONTINUE)  # 25 bytes into an empty send buffer (an OSError closes the connection)
        return ready

    def _read(self, held: _Held, now: int) -> None:
        assert held.tls is not None
        while (ready := self._readiness(held)) is Readiness.MORE:
            try:
                data = held.tls.recv(RECV_BYTES)
            except ssl.SSLWantReadError:
                return
            except ssl.SSLWantWriteError:
                self._watch(held, selectors.EVENT_WRITE)
                return
            if not data:  # the client closed it
                self._drop(held, now)
                return
            if self.admission.stage(held.key) is Stage.IDLE:
                self._move(held, Stage.REQUEST, now)
            held.buffer += data
        refusal = _REFUSALS.get(ready)
        if refusal is not None:
            status, text = refusal
            log.debug("web console: %s:%d: %s: closed", held.address, held.port, status)
            self._reply(held, status, text.format(head=self.limits.head_bytes, body=self.limits.body_bytes))
            self._drop(held, now)
        elif self.admission.may_start(held.key):
            self._start(held, now)
        else:
            self._watch(held, 0)
            self._move(held, Stage.QUEUED, now)

    def _start(self, held: _Held, now: int) -> None:
        """Hand the connection, its request in hand, to a worker thread."""
        assert held.tls is not None
        self._watch(held, 0)
        self._move(held, Stage.BUSY, now)
        held.tls.settimeout(self.server.timeout)
        if held.conn is None:
            held.conn = self.server.ConnectionClass(self.server, held.tls, self.server.ssl_adapter.makefile)
            held.conn.remote_addr, held.conn.remote_port = held.address, held.port
            held.conn.ssl_env, held.conn.gate_key = held.ssl_env, held.key
        deadline_s, wait_s = time.monotonic() + self.limits.worker_ns / NS_PER_S, float(self.server.timeout)
        held.conn.rfile = _RequestReader(held.tls, bytes(held.buffer), held.conn.rbufsize, deadline_s, wait_s)
        held.conn.wfile = _AnswerWriter(held.tls, held.conn.wbufsize, deadline_s, wait_s)
        held.buffer.clear()
        self.server.process_conn(held.conn)

    def _take_inbox(self, now: int) -> None:
        with self.lock:
            inbox, self.inbox = self.inbox, []
        for kept, conn in inbox:
            held = self.held.get(conn.gate_key)
            if held is None or held.conn is not conn or self.admission.stage(held.key) is not Stage.BUSY:
                if kept:  # not one of ours (any more): nothing to keep it for
                    conn.close()
                continue
            if not kept:
                del self.held[held.key]
                self._start_freed(self.admission.release(held.key), now)
                continue
            assert held.tls is not None
            held.buffer = bytearray(conn.rfile.take_unread() if isinstance(conn.rfile, _RequestReader) else b"")
            held.tls.setblocking(False)
            self._move(held, Stage.REQUEST if held.buffer else Stage.IDLE, now)
            self._guarded(held, now)  # TLS may hold the next request already decrypted: no readiness will say so

    def _move(self, held: _Held, stage: Stage, now: int) -> None:
        self._start_freed(self.admission.move(held.key, stage, now), now)

    def _start_freed(self, keys: list[int], now: int) -> None:
        for key in keys:
            self._start(self.held[key], now)

    def _expire(self, now: int) -> None:
        for key, stage in self.admission.expired(now):
            held = self.held.pop(key, None)
            if held is None:
                continue
            if stage in _TIMEOUT_REPLIES and (held.buffer or stage is Stage.QUEUED):
                self._reply(held, _TIMEOUT_REPLIES[stage])
            if stage is not Stage.IDLE:
                log.debug("web console: %s:%d: %s not done within its time: closed", held.address, held.port,
                          stage.value)
            self._close(held)

    def _reply(self, held: _Held, status: str, text: str = "") -> None:
        """A last word before closing, if the socket takes it at once.  What the client has sent meanwhile is
        read first (as far as it is there): closing a socket with unread bytes resets the connection, answer and
        all."""
        body = f"{text}\n".encode("ascii") if text else b""
        head = (f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n")
        try:
            for _ in range(4):
                if not held.live.recv(RECV_BYTES):
                    break
        except (OSError, ValueError):  # nothing more at hand (want read), or gone
            pass
        try:
            held.live.send(head.encode("ascii") + body)
        except (OSError, ValueError):
            pass

    def _drop(self, held: _Held, now: int) -> None:
        if self.held.pop(held.key, None) is not None:
            self._start_freed(self.admission.release(held.key), now)
        self._close(held)

    def _close(self, held: _Held) -> None:
        self._watch(held, 0)
        try:
            if held.conn is not None:
                held.conn.close()
            else:
                held.live.close()
        except OSError as exc:
            log.debug("web console: %s:%d: closing: %s", held.address, held.port, exc)

    def _watch(self, held: _Held, events: int) -> None:
        """Make the selector watch ``held`` for ``events`` (0: not at all)."""
        if events == held.events:
            return
        if not events:
            self.selector.unregister(held.live)
        elif held.events:
            self.selector.modify(held.live, events, held)
        else:
            self.selector.register(held.live, events, held)
        held.events = events


class _Server(wsgi.Server):  # type: ignore[misc]
    ConnectionClass = _GatedConnection

    def __init__(self, *args: Any, limits: Limits, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.gate: Gate | None = None

    def prepare(self) -> None:
        """Bind and start the workers as cheroot does, then put the gate in place of cheroot's connection manager."""
        super().prepare()
        self._connections.close()  # nothing registered with it but the listening socket, which stays open
        self.gate = self._connections = Gate(self, self.limits)

    def bind(self, family: int, type: int, proto: int = 0) -> None:  # noqa: A002 - cheroot's names
        """cheroot's bind, keeping the error: cheroot reports a failed bind as a text without its errno."""
        try:
            super().bind(family, type, proto)
        except OSError as exc:
            self.bind_error = exc
            raise

    def connection_closed(self, conn: _GatedConnection) -> None:
        if self.gate is not None:
            self.gate.connection_closed(conn)

    def error_log(self, msg: str = "", level: int = 20, traceback: bool = False) -> None:
        """cheroot's errors to the appliance's log; a client that hangs up mid-answer is not one."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ssl.SSLError, ConnectionError, TimeoutError)):
            log.debug("web console: %s: %s", msg, exc)
            return
        log.log(level, "web console: %s", msg, exc_info=traceback)


LISTEN_RETRY_S = 10.0  # a console whose port is taken (or whose address is not up yet) tries again this often


class ListenError(Exception):
    """The console cannot listen where it is told to; the text says why and what to do, ``retry`` whether the
    cause may pass (another program holding the port, the address not configured yet)."""

    def __init__(self, text: str, retry: bool):
        super().__init__(text)
        self.retry = retry


def listen_problem(host: str, port: int, exc: OSError) -> ListenError:
    """Why the console cannot listen on ``host`` port ``port``, and what the operator can do about it."""
    where = f"cannot serve on {host} port {port}"
    if exc.errno == errno.EADDRINUSE:
        return ListenError(f"{where}: TCP port {port} is already in use by another program (`ss -ltnp 'sport = "
                           f":{port}'` shows which): stop it, or choose another port with web.port", True)
    if exc.errno == errno.EACCES:
        return ListenError(f"{where}: permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE; or set "
                           "web.port above 1023)", False)
    if exc.errno == errno.EADDRNOTAVAIL:
        return ListenError(f"{where}: {host} is not an address of this host (web.listen)", True)
    return ListenError(f"{where}: {exc.strerror or exc}", False)


class WebServer:
    """The console's HTTPS server: cheroot's workers behind the gate, every thread at low priority."""

    def __init__(self, wsgi_app: Any, host: str, port: int, cert: Path, key: Path, threads: int = 8,
                 limits: Limits | None = None):
        self.host, self.port = host, port
        limits = limits or Limits(keep_alive_total=KEEP_ALIVE_CONNECTIONS)
        self.server = _Server((host, port), _low_priority(wsgi_app), numthreads=threads, max=threads,
                              server_name="appliance", shutdown_timeout=2, request_queue_size=LISTEN_BACKLOG,
                              timeout=WORKER_SOCKET_TIMEOUT_S, limits=limits)
        self.server.max_request_header_size = limits.head_bytes
        # The gate has read the whole body, within limits.body_bytes; cheroot counts a chunked body's framing too
        self.server.max_request_body_size = 4 * limits.body_bytes + limits.head_bytes
        adapter = BuiltinSSLAdapter(str(cert), str(key))
        harden(adapter.context)
        self.server.ssl_adapter = adapter
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            self.server.prepare()  # binds now: an error reaches the caller
        except OSError as exc:
            raise listen_problem(self.host, self.port, getattr(self.server, "bind_error", exc)) from None
        self.port = int(self.server.bind_addr[1])  # the one bound, when asked for any (0)

        def serve() -> None:  # accepts connections and does the TLS handshakes: at low priority too
            lower_priority()
            self.server.serve()
        self._thread = threading.Thread(target=serve, name="web", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def stats(self) -> dict[str, Any]:
        """Connections held by stage, and those let go (the count since start, by reason)."""
        gate = self.server.gate
        return gate.stats() if gate is not None else {"held": {}, "dropped": {}}


class WebPart:
    """The console server of the console process; a port it cannot bind is logged and reported, not fatal: one held
    by another program is tried again every LISTEN_RETRY_S, so the console serves once it is free."""

    def __init__(self, ctx: WebContext, host: str, port: int, cert: Path, key: Path,
                 state_dir: Path):
        self.ctx, self.host, self.port = ctx, host, port
        self.cert, self.key, self.state_dir = cert, key, state_dir
        self.server: WebServer | None = None
        self.error = ""
        self._lock = threading.Lock()
        self._retry: threading.Timer | None = None
        self._stopped = False

    def start(self) -> None:
        try:
            own = self.key.parent == self.state_dir  # the appliance's own key, not one an administrator placed
            if ensure_certificate(self.cert, self.key, self.host, datetime.datetime.now(datetime.timezone.utc), own):
                log.warning("web console: made a self-signed certificate %s (set web.cert and web.key to use "
                            "your own)", self.cert)
            app = create_app(self.ctx, secret_key(self.state_dir))
            self.pacer = app.extensions["pacer"]
            self._listen(app)
        except ListenError as exc:
            self.error = str(exc) + (f"; trying again every {LISTEN_RETRY_S:g} s" if exc.retry else "")
            log.error("web console: %s", self.error)
            if exc.retry:
                self._try_later(app)
        except UnsafePathError as exc:
            self.error = str(exc)
            log.error("web console: %s", self.error)
            self.server = None
        except (OSError, ValueError, ssl.SSLError) as exc:
            self.error = f"cannot serve on {self.host} port {self.port}: {exc}"
            log.error("web console: %s", self.error)
            self.server = None
        except Exception as exc:  # noqa: BLE001 - the console failing must not take time service down with it
            self.error = f"failed to start: {exc}"
            log.exception("web console: %s", self.error)
            self.server = None

    def _listen(self, app: Any) -> None:
        """Listen and serve; ListenError if the port cannot be had."""
        server = WebServer(app, self.host, self.port, self.cert, self.key)
        server.start()
        with self._lock:
            if self._stopped:
                server.stop()
                return
            self.server, self.error = server, ""
        log.info("web console on https://%s:%d/", self.host if ":" not in self.host else f"[{self.host}]", self.port)

    def _try_later(self, app: Any) -> None:
        with self._lock:
            if self._stopped:
                return
            self._retry = threading.Timer(LISTEN_RETRY_S, self._try_again, (app,))
            self._retry.daemon = True
            self._retry.start()

    def _try_again(self, app: Any) -> None:
        try:
            self._listen(app)
        except ListenError as exc:
            if not exc.retry:
                self.error = str(exc)
                log.error("web console: %s", self.error)
                return
            self._try_later(app)  # said once already: the alarm stays raised meanwhile
        except Exception as exc:  # noqa: BLE001 - nor may a later attempt
            self.error = f"failed to start: {exc}"
            log.exception("web console: %s", self.error)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._retry is not None:
                self._retry.cancel()
        if self.server is not None:
            self.server.stop()

    def status(self) -> dict[str, Any]:
        pacer = getattr(self, "pacer", None)
        connections = self.server.stats() if self.server is not None else {"held": {}, "dropped": {}}
        return {"enabled": True, "listen": self.host, "port": self.port, "error": self.error,
                "serving": self.server is not None, "paced": pacer.paced if pacer else 0,
                "busy_refused": pacer.refused if pacer else 0, "connections": connections["held"],
                "connections_dropped": connections["dropped"]}
