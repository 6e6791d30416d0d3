"""A RADIUS client for console logins: PAP Access-Requests, answers checked as RFC 3579 and BlastRADIUS ask.

Edge module (UDP sockets).  pyrad builds the request (the User-Password hidden as RFC 2865 5.2 says) with a
Message-Authenticator (RFC 3579 3.2) and checks each answer: its identifier, its Response Authenticator (RFC 2865 3)
and its Message-Authenticator, which must be there and be right (CVE-2024-3596, "BlastRADIUS": an answer without one
could be forged).  An answer that fails is discarded and logged, as RFC 2865 says, and the client keeps listening
until the server's timeout; a server that gave no valid answer in time counts as not answering.  The attribute that
names the role is read from the checked answer's bytes, a standard attribute by name or a vendor one as
``VENDOR_ID:TYPE``.  Secrets are never logged.
"""

from __future__ import annotations

import io
import logging
import socket
import time
from dataclasses import dataclass

from pyrad import packet
from pyrad.dictionary import Dictionary

log = logging.getLogger("appliance.web.auth")

# The few attributes the client sends or reads (RFC 2865 5, RFC 3579 3.2).
_DICTIONARY = """
ATTRIBUTE User-Name 1 string
ATTRIBUTE User-Password 2 string encrypt=1
ATTRIBUTE Service-Type 6 integer
ATTRIBUTE Filter-Id 11 string
ATTRIBUTE Reply-Message 18 string
ATTRIBUTE Class 25 octets
ATTRIBUTE Vendor-Specific 26 octets
ATTRIBUTE NAS-Identifier 32 string
ATTRIBUTE Proxy-State 33 octets
ATTRIBUTE Message-Authenticator 80 octets
"""
STANDARD_ATTRIBUTES = {"Filter-Id": 11, "Reply-Message": 18, "Class": 25}
VENDOR_SPECIFIC = 26
DEFAULT_PORT = 1812
SERVICE_TYPE_LOGIN = 1
MAX_ANSWER = 4096


@dataclass(frozen=True)
class Answer:
    """A checked answer of one server: accepted or not, and the role attribute's values (of an Access-Accept)."""
    accepted: bool
    values: tuple[str, ...] = ()


def dictionary() -> Dictionary:
    return Dictionary(io.StringIO(_DICTIONARY))


def parse_attribute(text: str) -> tuple[int, int]:
    """``Filter-Id`` -> (0, 11); ``9:1`` (VENDOR_ID:TYPE) -> (9, 1).  ValueError naming the text otherwise."""
    text = text.strip()
    if text in STANDARD_ATTRIBUTES:
        return 0, STANDARD_ATTRIBUTES[text]
    vendor, colon, kind = text.partition(":")
    if colon and vendor.isdigit() and kind.isdigit() and 0 < int(vendor) < 2 ** 24 and 0 < int(kind) < 256:
        return int(vendor), int(kind)
    raise ValueError(f"RADIUS role attribute {text!r}: expected one of {', '.join(STANDARD_ATTRIBUTES)} or "
                     "VENDOR_ID:TYPE (a vendor attribute)")


def attribute_values(raw: bytes, wanted: tuple[int, int]) -> tuple[str, ...]:
    """The values of attribute ``wanted`` (vendor, type) in a RADIUS packet's bytes, as text."""
    vendor, kind = wanted
    found = []
    for code, value in _attributes(raw[20:]):
        if vendor == 0 and code == kind:
            found.append(value)
        elif vendor and code == VENDOR_SPECIFIC and len(value) >= 4 and int.from_bytes(value[:4], "big") == vendor:
            found += [sub for sub_code, sub in _attributes(value[4:]) if sub_code == kind]
    return tuple(v.decode("utf-8", "replace") for v in found)


def _attributes(data: bytes) -> list[tuple[int, bytes]]:
    out, at = [], 0
    while at + 2 <= len(data):
        code, length = data[at], data[at + 1]
        if length < 2 or at + length > len(data):
            break
        out.append((code, data[at + 2:at + length]))
        at += length
    return out


def authenticate(server: tuple[str, int], secret: bytes, user: str, password: str, timeout_s: float,
                 role_attribute: tuple[int, int], nas_id: str = "appliance") -> Answer | None:
    """Ask ``server`` (host, port) about ``user``/``password``: its checked answer, or None when it gave none in
    ``timeout_s`` (down, unreachable, or only answers that failed the checks)."""
    request = packet.AuthPacket(code=packet.AccessRequest, secret=secret, dict=dictionary())
    request.authenticator = packet.Packet.CreateAuthenticator()
    request.add_message_authenticator()  # first, as RFC 3579 and the BlastRADIUS advice want it
    request["User-Name"] = user
    request["User-Password"] = request.PwCrypt(password)
    request["Service-Type"] = SERVICE_TYPE_LOGIN
    request["NAS-Identifier"] = nas_id
    wire = request.RequestPacket()
    where = f"{server[0]}:{server[1]}"
    try:
        family = socket.getaddrinfo(server[0], server[1], type=socket.SOCK_DGRAM)[0]
    except OSError as exc:
        log.warning("RADIUS server %s: cannot resolve it: %s", where, exc)
        return None
    with socket.socket(family[0], socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(family[4])
            sock.send(wire)
        except OSError as exc:
            log.warning("RADIUS server %s: cannot send to it: %s", where, exc)
            return None
        return _await_answer(sock, request, where, timeout_s, role_attribute)


def _await_answer(sock: socket.socket, request: packet.AuthPacket, where: str, timeout_s: float,
                  role_attribute: tuple[int, int]) -> Answer | None:
    deadline = time.monotonic() + timeout_s
    for _ in range(64):  # bounded: a flood of bad answers cannot hold the login longer than the timeout anyway
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            raw = sock.recv(MAX_ANSWER)
        except socket.timeout:
            break
        except OSError as exc:  # ICMP port unreachable: nobody listens there
            log.warning("RADIUS server %s: no answer: %s", where, exc)
            return None
        answer = _checked(request, raw, where, role_attribute)
        if answer is not None:
            return answer
    log.warning("RADIUS server %s: no valid answer within %.1f s", where, timeout_s)
    return None


def _checked(request: packet.AuthPacket, raw: bytes, where: str, role_attribute: tuple[int, int]) -> Answer | None:
    """The answer in ``raw`` if it passes every check; None (and a log line saying which check) if not."""
    try:
        reply = request.CreateReply(packet=raw)
    except Exception as exc:  # noqa: BLE001 - pyrad raises PacketError and others on malformed bytes
        log.warning("RADIUS server %s: answer discarded: malformed (%s)", where, exc)
        return None
    if reply.code not in (packet.AccessAccept, packet.AccessReject):
        log.warning("RADIUS server %s: answer discarded: code %d is no Access-Accept or -Reject", where, reply.code)
        return None
    if reply.message_authenticator is None:
        log.warning("RADIUS server %s: answer discarded: it has no Message-Authenticator (required against "
                    "forged answers, RFC 3579, CVE-2024-3596)", where)
        return None
    if not request.VerifyReply(reply, raw, enforce_ma=True):
        log.warning("RADIUS server %s: answer discarded: wrong Response Authenticator or Message-Authenticator "
                    "(a different shared secret, or a forged answer)", where)
        return None
    accepted = reply.code == packet.AccessAccept
    return Answer(accepted, attribute_values(raw, role_attribute) if accepted else ())
