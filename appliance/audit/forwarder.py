"""Send audit records to a remote syslog collector: UDP (RFC 5426), TCP with octet counting (RFC 6587) or TLS
(RFC 5425), the server's certificate checked against a configured CA, a client certificate when given.

Edge module: sockets and, for TCP and TLS, one sender thread.  ``send`` never blocks and never raises into the
caller (the audit trail appends from the event loop and the console's threads): over UDP a record is handed to the
kernel or counted as an error; over TCP and TLS it is queued, and the sender thread writes the queue in order,
reconnecting with exponential back-off (``BACKOFF_MIN_S`` doubling to ``BACKOFF_MAX_S``) while the collector is
away or slow.  The queue is bounded: when it is full the oldest queued record is dropped and counted (``dropped``
in ``status()``, a log line per overflow; the audit trail raises an alarm on it), so a dead collector costs memory
up to the bound and nothing more.  The records themselves stay in the local store: only their remote copy is lost.

TCP gives no application acknowledgement: a record written into a connection the collector has just dropped can
be lost (the verifier of remote copies tolerates gaps).  Before each write the sender looks whether the collector
has closed the connection (a syslog collector never sends anything), which catches an orderly shutdown.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import threading
from collections import deque
from dataclasses import dataclass

from appliance.audit.chain import AuditRecord
from appliance.audit.syslog import DEFAULT_FACILITY, TRANSPORTS, facility_code, format_rfc5424, octet_counted

log = logging.getLogger("appliance.audit")
DEFAULT_QUEUE_RECORDS = 10_000
BACKOFF_MIN_S, BACKOFF_MAX_S = 1.0, 60.0
CONNECT_TIMEOUT_S = 5.0
SEND_TIMEOUT_S = 10.0  # a collector that takes a frame no faster than this is dropped and connected to again
CLOSE_FLUSH_S = 2.0  # at stop, how long the queue may take to go out over a working connection


@dataclass(frozen=True)
class TlsOptions:
    """RFC 5425 settings: PEM files; an empty ``ca_file`` trusts the system's CAs, an empty ``server_name`` expects
    the target's host in the server's certificate."""

    ca_file: str = ""
    cert_file: str = ""  # client certificate, for collectors that ask for one
    key_file: str = ""  # its private key (never logged); empty: in cert_file
    server_name: str = ""


@dataclass(frozen=True)
class ForwarderStatus:
    target: str  # host:port
    sent: int  # records written to the collector (UDP: handed to the kernel)
    errors: int  # failed sends, connects and records that could not be formatted
    last_error: str | None
    transport: str = "udp"
    connected: bool = False  # TCP/TLS: a connection is up (UDP: always False)
    queued: int = 0  # TCP/TLS: records waiting to be sent
    dropped: int = 0  # TCP/TLS: records dropped from a full queue, oldest first


def tls_context(options: TlsOptions) -> ssl.SSLContext:
    """A client context that verifies the server against ``options.ca_file`` (TLS 1.2 at least, RFC 5425 as updated
    by RFC 9662); ValueError naming the file that cannot be loaded."""
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=options.ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"syslog CA file {options.ca_file}: cannot load it ({_why(exc)})") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if options.cert_file:
        try:
            context.load_cert_chain(options.cert_file, options.key_file or None)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"syslog client certificate {options.cert_file} (key {options.key_file or 'in it'}): "
                             f"cannot load it ({_why(exc)})") from None
    return context


class SyslogForwarder:
    """Sends formatted records to ``host:port`` over ``transport`` ("udp", "tcp" or "tls").  Over UDP the host is
    resolved once, here (a host that cannot be resolved leaves the forwarder counting every record as an error);
    over TCP and TLS at each connection.  ValueError for a bad facility, transport or TLS file."""

    def __init__(self, host: str, port: int = 514, facility: int | str = DEFAULT_FACILITY, *, transport: str = "udp",
                 tls: TlsOptions | None = None, hostname: str | None = None, app_name: str = "appliance",
                 queue_records: int = DEFAULT_QUEUE_RECORDS, backoff_min_s: float = BACKOFF_MIN_S,
                 backoff_max_s: float = BACKOFF_MAX_S, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 send_timeout_s: float = SEND_TIMEOUT_S) -> None:
        if transport not in TRANSPORTS:
            raise ValueError(f"syslog transport {transport!r}: expected one of {', '.join(TRANSPORTS)}")
        if queue_records < 1:
            raise ValueError(f"syslog queue of {queue_records} records: must be at least 1")
        self.facility = facility_code(facility)
        self.hostname = hostname if hostname is not None else socket.gethostname()
        self.app_name, self.transport = app_name, transport
        self._host, self._port = host, port
        self._target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._sent = self._errors = self._dropped = 0
        self._last_error: str | None = None
        self._cond = threading.Condition()
        self._sock: socket.socket | None = None
        self._address: tuple[object, ...] | None = None
        self._unusable = "closed"  # why a UDP send cannot work once the socket is gone
        self._queue: deque[bytes] = deque()
        self._queue_records = queue_records
        self._inflight: bytes | None = None  # taken from the queue, not yet written
        self._overflowing = False
        self._closing = False
        self._backoff_s = (backoff_min_s, backoff_max_s)
        self._connect_timeout_s, self._send_timeout_s = connect_timeout_s, send_timeout_s
        self._server_name = (tls.server_name if tls else "") or host
        self._context = tls_context(tls or TlsOptions()) if transport == "tls" else None
        self._thread: threading.Thread | None = None
        if transport == "udp":
            self._open_udp(host, port)
        else:
            self._thread = threading.Thread(target=self._run, name="audit-syslog", daemon=True)
            self._thread.start()

    # --- the caller's side ----------------------------------------------------------------------------------

    def send(self, record: AuditRecord, utc_label: str, chain_id: str = "") -> bool:
        """Send (UDP) or queue (TCP, TLS) one record; True if it left this host or was queued.  Never raises, never
        blocks: a full queue drops its oldest record, counted."""
        try:
            message = format_rfc5424(record, self.hostname, utc_label=utc_label, app_name=self.app_name,
                                     facility=self.facility, chain_id=chain_id)
        except ValueError as exc:
            self._note_error(f"record {record.seq} not sent: {exc}")
            return False
        if self.transport == "udp":
            return self._send_datagram(record.seq, message)
        with self._cond:
            if self._closing:
                self._note_error_locked(f"record {record.seq} not sent to {self._target}: the forwarder is closed")
                return False
            if len(self._queue) + (self._inflight is not None) >= self._queue_records:  # the one in flight counts
                self._dropped += 1
                if not self._overflowing:
                    self._overflowing = True
                    log.warning("audit syslog: the queue for %s is full (%d records): dropping the oldest until the "
                                "collector takes them again (the records stay in the local store)", self._target,
                                self._queue_records)
                if not self._queue:  # a queue of one, in flight: the new record is the one dropped
                    return False
                self._queue.popleft()
            self._queue.append(octet_counted(message))
            self._cond.notify_all()
        return True

    def status(self) -> ForwarderStatus:
        with self._cond:
            queued = len(self._queue) + (self._inflight is not None)
            return ForwarderStatus(self._target, self._sent, self._errors, self._last_error, self.transport,
                                   self.transport != "udp" and self._sock is not None, queued, self._dropped)

    def wait_sent(self, timeout_s: float) -> bool:
        """Wait until nothing is queued (TCP, TLS) or ``timeout_s`` has passed; True when nothing is."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and self._inflight is None, timeout=timeout_s)

    def close(self, flush_s: float = CLOSE_FLUSH_S) -> None:
        """Stop: over a working connection what is queued may go out for up to ``flush_s``; the rest is counted
        as dropped and logged (the records stay in the local store)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(flush_s)
            with self._cond:
                left = len(self._queue) + (self._inflight is not None)
                self._queue.clear()
                self._inflight = None
                self._dropped += left
                sock = self._sock
                self._cond.notify_all()
            if sock is not None and self._thread.is_alive():
                try:  # the socket's own shutdown, under TLS too: wakes a sendall the collector holds up
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass
            self._thread.join(flush_s)
            if left:
                log.warning("audit syslog: %d record(s) not sent to %s before stopping (they stay in the local "
                            "store)", left, self._target)
        elif self._sock is not None:
            self._sock.close()
            self._sock = None

    # --- UDP ------------------------------------------------------------------------------------------------

    def _open_udp(self, host: str, port: int) -> None:
        try:
            family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
            self._sock = socket.socket(family, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
            self._address = address
        except OSError as exc:
            self._unusable = f"cannot reach {self._target}: {exc}"
            self._note_error(self._unusable)

    def _send_datagram(self, seq: int, datagram: bytes) -> bool:
        if self._sock is None or self._address is None:
            self._note_error(f"record {seq} not sent: {self._unusable}")
            return False
        try:
            self._sock.sendto(datagram, self._address)
        except OSError as exc:  # a full buffer (BlockingIOError), EMSGSIZE ...: dropped, counted
            self._note_error(f"record {seq} not sent to {self._target}: {exc}")
            return False
        with self._cond:
            self._sent += 1
        return True

    # --- TCP and TLS: the sender thread ---------------------------------------------------------------------

    def _run(self) -> None:
        delay_s = self._backoff_s[0]
        while self._work_waiting():
            if self._sock is None or _peer_gone(self._sock, self._send_timeout_s):
                if not self._reconnect(delay_s):
                    delay_s = min(delay_s * 2, self._backoff_s[1])
                    continue
                delay_s = self._backoff_s[0]
            frame, sock = self._take(), self._sock
            if frame is None or sock is None:
                continue
            try:
                sock.sendall(frame)
            except OSError as exc:
                self._note_error(f"cannot send to {self._transport_target()}: {_why(exc)}")
                self._disconnect()
                continue
            with self._cond:
                if self._inflight is frame:
                    self._inflight = None
                    self._sent += 1
                if not self._queue and self._inflight is None:
                    self._overflowing = False
                self._cond.notify_all()
        self._disconnect()

    def _work_waiting(self) -> bool:
        """Wait for a record to send; False when it is time to stop: at close, once nothing is left to send or the
        connection is down."""
        with self._cond:
            while not self._closing and not self._queue and self._inflight is None:
                self._cond.wait()
            return not (self._closing and (self._sock is None or (not self._queue and self._inflight is None)))

    def _take(self) -> bytes | None:
        """The frame to write next: the one in flight again after a failed write, else the oldest queued.  Taken
        only over a connection, so that while the collector is away every waiting record is in the queue, where a
        full queue drops the oldest."""
        with self._cond:
            if self._inflight is None and self._queue:
                self._inflight = self._queue.popleft()
            return self._inflight

    def _reconnect(self, delay_s: float) -> bool:
        """Connect; on failure note it and wait ``delay_s`` (less when closing).  True when connected."""
        self._disconnect()
        try:
            sock = self._connect()
        except OSError as exc:
            self._note_error(f"cannot connect to {self._transport_target()}: {_why(exc)}")
            with self._cond:
                self._cond.wait_for(lambda: self._closing, timeout=delay_s)
            return False
        with self._cond:
            if self._closing and self._inflight is None and not self._queue:
                sock.close()
                return False
            self._sock = sock
            waiting = len(self._queue) + (self._inflight is not None)
        log.info("audit syslog: connected to %s; %d record(s) to send", self._transport_target(), waiting)
        return True

    def _connect(self) -> socket.socket:
        raw = socket.create_connection((self._host, self._port), timeout=self._connect_timeout_s)
        try:
            sock = raw if self._context is None else self._context.wrap_socket(raw, server_hostname=self._server_name)
            sock.settimeout(self._send_timeout_s)
        except BaseException:
            raw.close()
            raise
        return sock

    def _disconnect(self) -> None:
        with self._cond:
            sock, self._sock = self._sock, None
        if sock is not None:
            _shut(sock)

    def _transport_target(self) -> str:
        return f"{self.transport}://{self._target}"

    def _note_error(self, text: str) -> None:
        with self._cond:
            self._note_error_locked(text)

    def _note_error_locked(self, text: str) -> None:
        first = text != self._last_error
        self._errors += 1
        self._last_error = text
        if first and self.transport != "udp":
            log.warning("audit syslog: %s", text)


def _peer_gone(sock: socket.socket, timeout_s: float) -> bool:
    """Whether the collector has closed the connection: it never sends, so a readable socket is a FIN, a reset or a
    TLS close_notify (or a TLS 1.3 session ticket, which is read and let pass)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    if not readable:
        return False
    try:
        sock.setblocking(False)
        data = sock.recv(1)
    except (ssl.SSLWantReadError, BlockingIOError):
        return False
    except OSError:
        return True
    finally:
        try:
            sock.settimeout(timeout_s)
        except OSError:
            pass
    return data == b""


def _shut(sock: socket.socket) -> None:
    try:
        if isinstance(sock, ssl.SSLSocket):
            sock.settimeout(1.0)
            sock.unwrap()  # close_notify, so the collector sees an orderly end
    except (OSError, ValueError):
        pass
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the collector's certificate is not trusted: {exc.verify_message or exc.reason}"
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    return str(exc) or type(exc).__name__
