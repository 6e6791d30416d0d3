"""The NTS-KE server (RFC 8915 §4) and the cookie keys it shares with the NTP workers.

I/O edge.  A process of its own, at the console's idle priority (TLS handshakes cost milliseconds of CPU each;
they never run in an NTP worker or the appliance's main loop, nor take CPU from them): TCP on ``port`` (4460),
TLS 1.3 only with ALPN ``ntske/1`` (pyOpenSSL: Python's ``ssl`` module has no TLS exporter, which §5.1 needs; a
ClientHello without ``ntske/1`` is refused with the no_application_protocol alert before OpenSSL sees it), and a
per-client rate limit on new connections (the same token bucket as the NTP server's).  The protocol itself is
``appliance.protocol.ntp.nts``.

Connections are held by ``KeGate``: the whole exchange (handshake, request, answer) within
``CONNECTION_TIMEOUT_S`` of the accept, at most ``max_connections`` at once and ``per_client_slots`` of them per
client (an IPv4 address or an IPv6 /64).  A client over its share pushes out its own oldest unfinished exchange; a
new connection when every slot is held pushes out an unfinished handshake: first one that has not even sent its
whole ClientHello, of the client holding the most, the oldest.  A trickle of bytes therefore holds a slot for at
most the deadline and never keeps others out, and a real client, whose handshake takes milliseconds, gets in
beside it.

The cookie master keys live in the state directory (``nts/cookie_keys.json``, mode 0600, replaced atomically,
never written or read through a symbolic link: ``appliance.edge.persist.write_private``/``read_private``).
This process makes the first, rotates every ``rotation_s`` and keeps ``KEYS_KEPT``, so a cookie stays good for
at least ``(KEYS_KEPT - 1) x rotation_s``; the workers reload the file when it changes.  Without a configured
certificate a self-signed one (ECDSA P-256, the names and addresses of ``nts_server_names``) is made in the state
directory once, for clients told to trust it (chrony: ``ntstrustedcerts``).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import logging
import os
import signal
import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.edge.persist import read_private, refuse_link, write_private
from appliance.edge.proc import die_with_parent, lower_priority
from appliance.protocol import limits
from appliance.protocol.ntp import nts
from appliance.protocol.ntp.kegate import KeGate, Stage, client_of, per_client_slots
from appliance.units import NS_PER_S

log = logging.getLogger("appliance.ntske")
KEYS_KEPT = 4
CONNECTION_TIMEOUT_S = 5.0  # the whole exchange: TLS handshake, request and answer (milliseconds on a good link)
DEADLINE_SLACK_NS = NS_PER_S // 10  # a read timed out this close to the exchange's deadline ran into it
CAP_NOTE_NS = 10 * NS_PER_S  # at most one log line per this about connections pushed out
# shared counters (multiprocessing Array of 'q'), read by the service for status
COUNTERS = ("sessions", "tls_failures", "ke_errors", "rate_limited", "busy", "active", "key_id", "key_created_s",
            "heartbeat_s", "pid", "evicted", "timed_out", "no_alpn")


# --- cookie keys --------------------------------------------------------------------------------------------------

def load_keys(path: Path) -> list[nts.MasterKey]:
    """The master keys in ``path``, oldest first; ValueError if the file is not a key file."""
    try:
        raw = json.loads(read_private(path))
        keys = [nts.MasterKey(int(k["id"]), bytes.fromhex(k["key"]), int(k["created_s"])) for k in raw["keys"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not an NTS cookie key file ({exc})") from None
    if not keys or any(len(k.key) != nts.MASTER_KEY_LEN for k in keys):
        raise ValueError(f"{path}: no keys, or a key of the wrong length")
    return keys


def save_keys(path: Path, keys: list[nts.MasterKey]) -> None:
    """Write the key file atomically, 0600; UnsafePathError naming ``path`` when it is a symbolic link."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    doc = {"keys": [{"id": k.key_id, "key": k.key.hex(), "created_s": k.created_s} for k in keys]}
    write_private(path, json.dumps(doc).encode(), mode=0o600)


def rotate_if_due(path: Path, now_s: int, rotation_s: int) -> list[nts.MasterKey]:
    """The keys, with a new one added (and the oldest beyond KEYS_KEPT dropped) when the newest is ``rotation_s``
    old or there are none or the file is unreadable (said in the log).  A symbolic link at ``path`` raises
    UnsafePathError naming it: the keys are never read from or written into a file someone else planted."""
    try:
        keys = load_keys(path)
    except FileNotFoundError:
        keys = []
    except ValueError as exc:
        log.error("%s; starting a new one (cookies issued before are no longer accepted)", exc)
        keys = []
    if keys and now_s - keys[-1].created_s < rotation_s:
        return keys
    key_id = (keys[-1].key_id + 1) & 0xFFFFFFFF if keys else int.from_bytes(os.urandom(4), "big")
    keys = (keys + [nts.MasterKey(key_id, os.urandom(nts.MASTER_KEY_LEN), now_s)])[-KEYS_KEPT:]
    save_keys(path, keys)
    log.info("NTS cookie key %08x in use (%d kept)", key_id, len(keys))
    return keys


class JarFile:
    """A worker's view of the key file: the jar, reloaded when the file changes (checked at most once a second)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self.jar: nts.CookieJar | None = None
        self.refresh(force=True)

    def refresh(self, now_s: float = 0.0, force: bool = False) -> nts.CookieJar | None:
        if not force and now_s - self._checked < 1.0:
            return self.jar
        self._checked = now_s
        try:
            st = self.path.stat()
        except OSError:
            return self.jar
        stamp = (st.st_mtime_ns, st.st_ino)
        if stamp != self._stamp:
            try:
                self.jar = nts.CookieJar(load_keys(self.path), os.urandom)
                self._stamp = stamp
            except (OSError, ValueError) as exc:
                log.error("NTS cookie keys not reloaded: %s", exc)
        return self.jar


# --- certificate ----------------------------------------------------------------------------------------------------

def ensure_certificate(cert_path: Path, key_path: Path, names: tuple[str, ...]) -> None:
    """A self-signed ECDSA P-256 certificate for ``names`` (DNS names and IP addresses), made once.  UnsafePathError
    naming the path when either file is a symbolic link (the appliance's own key is never read or written through
    one)."""
    refuse_link(key_path)
    refuse_link(cert_path)
    if cert_path.exists() and key_path.exists():
        return
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else "appliance")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=825))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_private(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()), mode=0o600)
    write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)  # public, for clients
    log.info("made a self-signed NTS-KE certificate for %s: %s", ", ".join(names), cert_path)


# --- the server -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeConfig:
    listen: str
    port: int
    certificate: str
    private_key: str
    keys_path: str
    rotation_s: int
    ntp_port: int  # advertised in a Port record when not 123
    rate_per_s: float
    burst: int
    max_connections: int


class NoAlpn(Exception):
    """A client that does not offer ntske/1."""


def own_key(config: KeConfig) -> bool:
    """Whether the private key is the appliance's own (beside the cookie keys, in the state directory): read without
    following a link.  An operator's key may be a link (certbot's live/ directory is made of them)."""
    return Path(config.private_key).parent == Path(config.keys_path).parent


def tls_context(cert: str, key: str, private: bool = False) -> Any:
    """The server's TLS context; ``private``: ``key`` is read with ``read_private`` (UnsafePathError on a link)."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from OpenSSL import SSL

    ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    ctx.set_min_proto_version(SSL.TLS1_3_VERSION)
    ctx.use_certificate_chain_file(cert)
    if private:
        ctx.use_privatekey(load_pem_private_key(read_private(Path(key)), None))
    else:
        ctx.use_privatekey_file(key)
    ctx.check_privatekey()

    def select_alpn(_conn: Any, offered: list[bytes]) -> bytes:
        if nts.ALPN not in offered:  # raised here, pyOpenSSL ends the handshake with a fatal alert (RFC 8915 §4)
            raise NoAlpn(f"client offered {offered!r}, not ntske/1")
        return nts.ALPN

    ctx.set_alpn_select_callback(select_alpn)
    return ctx


class KeServer:
    def __init__(self, config: KeConfig, counters: Any) -> None:
        self.config = config
        self.counters = counters
        self.ctx = tls_context(config.certificate, config.private_key, own_key(config))
        self.limiter = limits.RateLimiter(config.rate_per_s, config.burst)
        self.gate = KeGate(config.max_connections, per_client_slots(config.max_connections),
                           int(CONNECTION_TIMEOUT_S * NS_PER_S))
        self.socks: dict[int, socket.socket] = {}
        self.gate_lock = threading.Lock()  # the gate and socks: the accept loop and the session threads
        self.lock = threading.Lock()
        self.cap_noted_ns: int | None = None
        self.key_error = ""
        self.keys = rotate_if_due(Path(config.keys_path), int(time.time()), config.rotation_s)
        self.jar = nts.CookieJar(self.keys, os.urandom)
        self._publish_key()

    def _count(self, name: str, delta: int = 1) -> None:
        with self.lock:
            self.counters[COUNTERS.index(name)] += delta

    def _publish_key(self) -> None:
        self.counters[COUNTERS.index("key_id")] = self.jar.current.key_id
        self.counters[COUNTERS.index("key_created_s")] = self.jar.current.created_s

    def tick(self, now_s: int) -> None:
        try:
            keys = rotate_if_due(Path(self.config.keys_path), now_s, self.config.rotation_s)
        except OSError as exc:  # a link planted at the key file, a full disk: serve on with the keys held
            if str(exc) != self.key_error:
                log.error("NTS cookie keys not rotated: %s", exc)
            self.key_error = str(exc)
            return
        self.key_error = ""
        if keys != self.keys:
            with self.lock:
                self.keys, self.jar = keys, nts.CookieJar(keys, os.urandom)
            self._publish_key()
        self.counters[COUNTERS.index("heartbeat_s")] = now_s

    def admit(self, sock: socket.socket, addr: Any) -> None:
        now = time.monotonic_ns()
        if self.limiter.check(addr[0].split("%", 1)[0], now) is not limits.Limit.PASS:
            self._count("rate_limited")
            sock.close()
            return
        with self.gate_lock:
            key, evicted = self.gate.admit(str(addr[0]), now)
            for old in evicted:
                self._cut(old)
            if key is not None:
                self.socks[key] = sock
        if key is None:
            self._count("busy")
            sock.close()
            return
        if evicted:
            self._count("evicted", len(evicted))
            self._note(now, f"connections that had not finished their key exchange closed to make room (the newest "
                            f"from {client_of(str(addr[0]))}; at most {self.gate.per_client} per client, "
                            f"{self.gate.max_connections} in all)")
        try:
            threading.Thread(target=self._serve, args=(sock, addr, key, now), daemon=True).start()
        except RuntimeError as exc:  # no more threads: this connection only is let go
            log.warning("NTS-KE from %s: not served: %s", addr[0], exc)
            self._finish(key, sock)

    def reap(self, now_ns: int) -> float:
        """Cut the connections past their deadline; the seconds until the next one is due (at most 1)."""
        with self.gate_lock:
            late = self.gate.expired(now_ns)
            for key in late:
                self._cut(key)
            due = self.gate.next_deadline_ns()
        if late:
            self._count("timed_out", len(late))
            self._note(now_ns, f"{len(late)} connection(s) closed unfinished {CONNECTION_TIMEOUT_S:g} s after "
                               "their accept")
        return 1.0 if due is None else min(1.0, max(0.01, (due - now_ns) / NS_PER_S))

    def _cut(self, key: int) -> None:
        """End ``key``'s exchange now (gate_lock held): its thread's next or current read or write fails, and the
        thread closes the socket (never closed here: its descriptor could be reused under the thread)."""
        sock = self.socks.get(key)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _note(self, now_ns: int, what: str) -> None:
        """A log line about connections let go, at most one per CAP_NOTE_NS (a flood must not flood the log)."""
        if self.cap_noted_ns is not None and now_ns - self.cap_noted_ns < CAP_NOTE_NS:
            return
        self.cap_noted_ns = now_ns
        log.info("NTS-KE: %s (counted in status: evicted, timed_out)", what)

    def _was_cut(self, key: int) -> bool:
        """Whether the gate let ``key`` go (pushed out or late): counted and noted there, not as a failure.  A
        connection whose own read ran into the exchange's deadline before the reaper came round is let go and
        counted late here: the same connection, whichever of the two saw the deadline first."""
        with self.gate_lock:
            if self.gate.client(key) is None:
                return True
            deadline = self.gate.deadline_ns(key)
            if deadline is None or time.monotonic_ns() < deadline - DEADLINE_SLACK_NS:
                return False
            self.gate.release(key)
        self._count("timed_out")
        return True

    def _finish(self, key: int, sock: socket.socket) -> None:
        with self.gate_lock:
            self.gate.release(key)
            self.socks.pop(key, None)
            sock.close()

    def _serve(self, sock: socket.socket, addr: Any, key: int, accepted_ns: int) -> None:
        self._count("active")
        try:
            self.session(sock, addr, key, accepted_ns)
        finally:
            self._count("active", -1)
            self._finish(key, sock)

    def _move(self, key: int, stage: Stage) -> bool:
        with self.gate_lock:
            return self.gate.move(key, stage)

    def session(self, sock: socket.socket, addr: Any, key: int, accepted_ns: int) -> None:
        from OpenSSL import SSL

        deadline = accepted_ns / NS_PER_S + CONNECTION_TIMEOUT_S  # time.monotonic's scale
        if not self._offers_ntske(sock, addr, key, deadline) or not self._move(key, Stage.HANDSHAKE):
            return
        _io_timeout(sock, max(0.01, deadline - time.monotonic()))
        conn = SSL.Connection(self.ctx, sock)
        conn.set_accept_state()
        try:
            conn.do_handshake()
            if conn.get_alpn_proto_negotiated() != nts.ALPN:
                raise SSL.Error("no ntske/1 ALPN")
            if not self._move(key, Stage.REQUEST):
                raise OSError("closed to make room for another client")
        except (SSL.Error, OSError, NoAlpn) as exc:
            if not self._was_cut(key):
                self._count("tls_failures")
                log.info("NTS-KE from %s: TLS failed: %s", addr[0], exc or type(exc).__name__)
            return
        data = b""
        try:
            while True:
                records, complete = nts.parse_records(data)
                if complete:
                    break
                if len(data) >= nts.MAX_KE_REQUEST or time.monotonic() > deadline:
                    raise nts.KeError(nts.ERR_BAD_REQUEST, "request too long or too slow")
                _io_timeout(sock, max(0.01, deadline - time.monotonic()))
                try:
                    chunk = conn.recv(nts.MAX_KE_REQUEST)
                except SSL.ZeroReturnError:  # the client closed its side (TLS close_notify): ours still writes
                    chunk = b""
                if not chunk:
                    raise nts.KeError(nts.ERR_BAD_REQUEST, "connection closed before End of Message")
                data += chunk
            self._move(key, Stage.ANSWER)
            c2s_ctx, s2c_ctx = nts.exporter_contexts()
            c2s = conn.export_keying_material(nts.EXPORTER_LABEL, nts.KEY_LEN, c2s_ctx)
            s2c = conn.export_keying_material(nts.EXPORTER_LABEL, nts.KEY_LEN, s2c_ctx)
            with self.lock:
                jar = self.jar
            port = self.config.ntp_port if self.config.ntp_port != 123 else 0
            answer = nts.ke_respond(records, c2s, s2c, jar, port=port)
            self._count("sessions")
        except nts.KeError as exc:
            if self._was_cut(key):
                return
            self._count("ke_errors")
            log.info("NTS-KE from %s: error %d: %s", addr[0], exc.code, exc)
            answer = nts.error_response(exc.code)
        except (SSL.Error, OSError) as exc:
            if not self._was_cut(key):
                self._count("tls_failures")
                log.info("NTS-KE from %s: %s", addr[0], exc or type(exc).__name__)
            return
        try:
            _io_timeout(sock, max(0.01, deadline - time.monotonic()))
            conn.sendall(answer)
            conn.shutdown()
        except (SSL.Error, OSError):
            pass

    def _offers_ntske(self, sock: socket.socket, addr: Any, key: int, deadline: float) -> bool:
        """Whether the client's ClientHello offers ntske/1, read ahead of OpenSSL (left in the socket for it).  One
        that does not is answered with the no_application_protocol alert (RFC 8915 §4, RFC 7301 §3.2: OpenSSL sends
        none when a client offers no ALPN at all) and closed; one that sent no whole ClientHello before the deadline
        is closed; bytes that are not a TLS handshake are left for OpenSSL to refuse."""
        try:
            hello, want = None, 5
            while hello is None:
                _io_timeout(sock, max(0.01, deadline - time.monotonic()))
                data = sock.recv(want, socket.MSG_PEEK | socket.MSG_WAITALL)
                if len(data) < want:
                    raise OSError("no whole ClientHello within the deadline" if data else "closed")
                hello, want = nts.client_hello(data)
            offered = nts.alpn_offered(hello)
        except ValueError:
            return True  # not TLS, or a ClientHello that does not parse: OpenSSL says so
        except OSError as exc:
            if not self._was_cut(key):
                self._count("tls_failures")
                log.info("NTS-KE from %s: TLS failed: %s", addr[0], exc.strerror or exc)
            return False
        if nts.ALPN in offered:
            return True
        self._count("tls_failures")
        self._count("no_alpn")
        log.info("NTS-KE from %s: no ntske/1 offered (ALPN %s): refused with the no_application_protocol alert",
                 addr[0], b", ".join(offered).decode("ascii", "replace") or "none")
        try:
            sock.recv(want or len(data))  # read, so that closing sends the alert and a FIN, not a reset
            sock.sendall(nts.NO_ALPN_ALERT)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        return False


def _io_timeout(sock: socket.socket, seconds: float) -> None:
    """A blocking socket whose reads and writes give up after ``seconds`` (OpenSSL then reports a want-read or
    want-write, taken as a failed session): pyOpenSSL cannot use a socket in Python's timeout mode."""
    sock.setblocking(True)
    tv = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)


def open_listener(listen: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ipaddress.ip_address(listen).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((listen, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def ke_main(config: KeConfig, counters: Any) -> None:
    """Entry point of the NTS-KE process (spawned by the NTP service)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s nts-ke: %(message)s")
    die_with_parent()
    lower_priority()  # before any thread starts: the session threads inherit it
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    counters[COUNTERS.index("pid")] = os.getpid()
    server = KeServer(config, counters)
    listener = open_listener(config.listen, config.port)
    log.info("NTS-KE on %s port %d (TLS 1.3, ALPN ntske/1)", config.listen, config.port)
    ticked_s: int | None = None
    try:
        while not stopping.is_set():
            if int(time.time()) != ticked_s:  # once a second, not at every accept of a flood
                ticked_s = int(time.time())
                server.tick(ticked_s)
            listener.settimeout(server.reap(time.monotonic_ns()))
            try:
                sock, addr = listener.accept()
            except socket.timeout:
                continue
            except OSError as exc:
                log.warning("accept: %s", exc)
                time.sleep(0.1)
                continue
            server.admit(sock, addr)
    finally:
        listener.close()
