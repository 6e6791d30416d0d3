"""The console's TLS: its certificate (the configured one, or a self-signed one made on first start), its server
context, and the steps of a handshake on a non-blocking socket.

Edge module (files, sockets).  The self-signed certificate (ECDSA P-256, valid ten years, subject alternative names
for the host name, localhost, 127.0.0.1 and ::1 plus the listen address) and its key (mode 0600) are kept under
``state_dir`` and reused on later starts, so a browser's exception for it stays valid.  They are written atomically
and never through a symbolic link (UnsafePathError naming the path), and the appliance's own key is not read
through one either; a configured certificate and key (web.cert, web.key) are the administrator's to place, links
included.
"""

from __future__ import annotations

import datetime
import enum
import ipaddress
import socket
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from appliance.edge.persist import refuse_link, write_private


def ensure_certificate(cert: Path, key: Path, listen: str, now: datetime.datetime, own: bool = True) -> bool:
    """Make a self-signed pair at ``cert``/``key`` unless both exist.  True if one was made.  An ``own`` key (the
    appliance's, in its state directory) that is a symbolic link is refused (UnsafePathError naming it), as is a
    link where a new certificate or key would be written."""
    if own:
        refuse_link(key)
    if cert.exists() and key.exists():
        return False
    private = ec.generate_private_key(ec.SECP256R1())
    host = socket.gethostname()
    names: list[x509.GeneralName] = [x509.DNSName(host), x509.DNSName("localhost"),
                                     x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                     x509.IPAddress(ipaddress.ip_address("::1"))]
    try:
        address = ipaddress.ip_address(listen)
        if not address.is_unspecified and not address.is_loopback:
            names.append(x509.IPAddress(address))
    except ValueError:
        pass
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "time server appliance (self-signed)")])
    certificate = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                   .public_key(private.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=3650))
                   .add_extension(x509.SubjectAlternativeName(names), critical=False)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .sign(private, hashes.SHA256()))
    key.parent.mkdir(parents=True, exist_ok=True)
    write_private(key, private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
    write_private(cert, certificate.public_bytes(serialization.Encoding.PEM), mode=0o644)  # public, but not via a link
    return True


def harden(context: ssl.SSLContext) -> None:
    """TLS 1.2 at least, and no renegotiation (a client could make the server redo its costliest work at will)."""
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION


class Opening(enum.Enum):
    NOTHING_YET = "nothing yet"
    TLS = "tls"
    PLAIN_HTTP = "plain http"
    CLOSED = "closed"
    OTHER = "other"


PLAIN_HTTP_REFUSAL = b"The client sent a plain HTTP request, but this server only speaks HTTPS on this port."


def opening(raw: socket.socket) -> Opening:
    """What a new connection (non-blocking) speaks, from its first byte, peeked so the handshake still reads it."""
    try:
        first = raw.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError):
        return Opening.NOTHING_YET
    except OSError:
        return Opening.CLOSED
    if not first:
        return Opening.CLOSED
    if first == b"\x16":  # RFC 8446 5.1: a TLS record of type handshake (22) carries the ClientHello
        return Opening.TLS
    return Opening.PLAIN_HTTP if first.isalpha() else Opening.OTHER


def refuse_plain_http(raw: socket.socket) -> None:
    """Tell a client that spoke HTTP to the HTTPS port what went wrong (best effort: the socket does not block).
    Its request is read first: closing a socket with unread bytes resets the connection, answer and all."""
    head = (f"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {len(PLAIN_HTTP_REFUSAL)}\r\n"
            "Connection: close\r\n\r\n").encode("ascii")
    try:
        raw.recv(64 * 1024)
        raw.send(head + PLAIN_HTTP_REFUSAL)
        raw.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class Step(enum.Enum):
    DONE = "done"
    WANT_READ = "want read"
    WANT_WRITE = "want write"


def handshake_step(tls: ssl.SSLSocket) -> Step:
    """Advance a server-side handshake on a non-blocking socket as far as the bytes at hand allow.  A failed
    handshake raises ``ssl.SSLError`` or ``OSError``."""
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        return Step.WANT_READ
    except ssl.SSLWantWriteError:
        return Step.WANT_WRITE
    return Step.DONE
