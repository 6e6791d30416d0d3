"""The NTS-KE server (RFC 8915 §4) and the cookie keys it shares with the NTP workers.

I/O edge.  A process of its own (TLS handshakes cost milliseconds of CPU each; they never run in an NTP worker or
the appliance's main loop): TCP on ``port`` (4460), TLS 1.3 only with ALPN ``ntske/1`` (pyOpenSSL: Python's ``ssl``
module has no TLS exporter, which §5.1 needs), at most ``max_connections`` at once, each bounded to
``CONNECTION_TIMEOUT_S`` and ``nts.MAX_KE_REQUEST`` bytes, and a per-client rate limit on new connections (the same
token bucket as the NTP server's).  The protocol itself is ``appliance.protocol.ntp.nts``.

The cookie master keys live in the state directory (``nts/cookie_keys.json``, mode 0600, replaced atomically).
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

from appliance.edge.proc import die_with_parent
from appliance.protocol import limits
from appliance.protocol.ntp import nts

log = logging.getLogger("appliance.ntske")
KEYS_KEPT = 4
CONNECTION_TIMEOUT_S = 5.0
# shared counters (multiprocessing Array of 'q'), read by the service for status
COUNTERS = ("sessions", "tls_failures", "ke_errors", "rate_limited", "busy", "active", "key_id", "key_created_s",
            "heartbeat_s", "pid")


# --- cookie keys --------------------------------------------------------------------------------------------------

def load_keys(path: Path) -> list[nts.MasterKey]:
    """The master keys in ``path``, oldest first; ValueError if the file is not a key file."""
    try:
        raw = json.loads(path.read_text())
        keys = [nts.MasterKey(int(k["id"]), bytes.fromhex(k["key"]), int(k["created_s"])) for k in raw["keys"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not an NTS cookie key file ({exc})") from None
    if not keys or any(len(k.key) != nts.MASTER_KEY_LEN for k in keys):
        raise ValueError(f"{path}: no keys, or a key of the wrong length")
    return keys


def save_keys(path: Path, keys: list[nts.MasterKey]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"keys": [{"id": k.key_id, "key": k.key.hex(), "created_s": k.created_s} for k in keys]}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def rotate_if_due(path: Path, now_s: int, rotation_s: int) -> list[nts.MasterKey]:
    """The keys, with a new one added (and the oldest beyond KEYS_KEPT dropped) when the newest is ``rotation_s``
    old or there are none or the file is unreadable (said in the log)."""
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
    """A self-signed ECDSA P-256 certificate for ``names`` (DNS names and IP addresses), made once."""
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
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
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


def tls_context(cert: str, key: str) -> Any:
    from OpenSSL import SSL

    ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    ctx.set_min_proto_version(SSL.TLS1_3_VERSION)
    ctx.use_certificate_chain_file(cert)
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
        self.ctx = tls_context(config.certificate, config.private_key)
        self.limiter = limits.RateLimiter(config.rate_per_s, config.burst)
        self.slots = threading.BoundedSemaphore(config.max_connections)
        self.lock = threading.Lock()
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
        keys = rotate_if_due(Path(self.config.keys_path), now_s, self.config.rotation_s)
        if keys != self.keys:
            with self.lock:
                self.keys, self.jar = keys, nts.CookieJar(keys, os.urandom)
            self._publish_key()
        self.counters[COUNTERS.index("heartbeat_s")] = now_s

    def admit(self, sock: socket.socket, addr: Any) -> None:
        if self.limiter.check(addr[0].split("%", 1)[0], time.monotonic_ns()) is not limits.Limit.PASS:
            self._count("rate_limited")
            sock.close()
            return
        if not self.slots.acquire(blocking=False):
            self._count("busy")
            sock.close()
            return
        threading.Thread(target=self._serve, args=(sock, addr), daemon=True).start()

    def _serve(self, sock: socket.socket, addr: Any) -> None:
        self._count("active")
        try:
            self.session(sock, addr)
        finally:
            self._count("active", -1)
            self.slots.release()
            sock.close()

    def session(self, sock: socket.socket, addr: Any) -> None:
        from OpenSSL import SSL

        deadline = time.monotonic() + CONNECTION_TIMEOUT_S
        _io_timeout(sock, CONNECTION_TIMEOUT_S)
        conn = SSL.Connection(self.ctx, sock)
        conn.set_accept_state()
        try:
            conn.do_handshake()
            if conn.get_alpn_proto_negotiated() != nts.ALPN:
                raise SSL.Error("no ntske/1 ALPN")
        except (SSL.Error, OSError, NoAlpn) as exc:
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
            c2s_ctx, s2c_ctx = nts.exporter_contexts()
            c2s = conn.export_keying_material(nts.EXPORTER_LABEL, nts.KEY_LEN, c2s_ctx)
            s2c = conn.export_keying_material(nts.EXPORTER_LABEL, nts.KEY_LEN, s2c_ctx)
            with self.lock:
                jar = self.jar
            port = self.config.ntp_port if self.config.ntp_port != 123 else 0
            answer = nts.ke_respond(records, c2s, s2c, jar, port=port)
            self._count("sessions")
        except nts.KeError as exc:
            self._count("ke_errors")
            log.info("NTS-KE from %s: error %d: %s", addr[0], exc.code, exc)
            answer = nts.error_response(exc.code)
        except (SSL.Error, OSError) as exc:
            self._count("tls_failures")
            log.info("NTS-KE from %s: %s", addr[0], exc)
            return
        try:
            conn.sendall(answer)
            conn.shutdown()
        except (SSL.Error, OSError):
            pass


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
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    counters[COUNTERS.index("pid")] = os.getpid()
    server = KeServer(config, counters)
    listener = open_listener(config.listen, config.port)
    listener.settimeout(1.0)
    log.info("NTS-KE on %s port %d (TLS 1.3, ALPN ntske/1)", config.listen, config.port)
    try:
        while not stopping.is_set():
            server.tick(int(time.time()))
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
