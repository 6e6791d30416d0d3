"""Network Time Security for NTPv4 (RFC 8915), sans I/O: the NTS-KE records and the server's cookies.

Pure core.  TLS and the AEAD are libraries' (the edge's TLS connection gives the exporter; ``cryptography``'s AESSIV
is AEAD_AES_SIV_CMAC_256, RFC 5297 with the nonce as the last associated-data component, RFC 5116 §5); what is here
is the protocol:

* **NTS-KE** (§4): a request is a sequence of records ending in End of Message.  ``ke_respond`` answers with Next
  Protocol NTPv4, the AEAD AES-SIV-CMAC-256, ``COOKIES_PER_KE`` cookies and End of Message, or with an Error record
  (unrecognised critical record, bad request) the RFC names.  The keys come from the TLS exporter (§5.1, label
  ``EXPORTER-network-time-security``, context protocol id || AEAD id || 0 for client-to-server, 1 for
  server-to-client).
* **ALPN** (§4): ``client_hello`` and ``alpn_offered`` read the protocols a TLS ClientHello offers, so that the edge
  can refuse one without ``ntske/1`` with ``NO_ALPN_ALERT`` (OpenSSL sends no alert when a client offers no ALPN).
* **Cookies** (§6): the server's own format, ``key id (4) || nonce (16) || AES-SIV(master key, AEAD id (2) || 0 (2) ||
  C2S || S2C)``, 104 bytes, sealed under the newest master key and opened under any key still kept, so that a
  rotation does not invalidate the cookies clients hold.
* **NTP** (§5.7): NTS requests are answered by the native data plane alone (``appliance/edge/ntp/_nts.c``: the
  cookies opened, the authenticator checked, the reply sealed); ``tests/oracle/nts_model.py`` is its executable
  model.  What is here is what both share: the cookie format and the master keys, which the NTS-KE process makes
  and rotates and the NTP workers hand to the data plane.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.hazmat.primitives.ciphers.aead import AESSIV

ALPN = b"ntske/1"
KE_PORT = 4460
EXPORTER_LABEL = b"EXPORTER-network-time-security"
PROTOCOL_NTPV4 = 0
AEAD_AES_SIV_CMAC_256 = 15
KEY_LEN = 32  # AEAD_AES_SIV_CMAC_256: 256-bit keys
COOKIES_PER_KE = 8
MAX_KE_REQUEST = 1024  # a request is a handful of short records; more is not a client's
MASTER_KEY_LEN = 64  # AES-SIV-CMAC-512 seals the cookies
COOKIE_NONCE_LEN = 16

# NTS-KE record types (§4.1)
END_OF_MESSAGE, NEXT_PROTOCOL, ERROR, WARNING, AEAD_ALGORITHM, NEW_COOKIE, SERVER, PORT = 0, 1, 2, 3, 4, 5, 6, 7
CRITICAL = 0x8000
# NTS-KE error codes (§4.1.3)
ERR_UNRECOGNIZED_CRITICAL, ERR_BAD_REQUEST, ERR_INTERNAL = 0, 1, 2

# NTP extension field types (§5.7, IANA)
EF_UNIQUE_ID, EF_COOKIE, EF_COOKIE_PLACEHOLDER, EF_AUTHENTICATOR = 0x0104, 0x0204, 0x0304, 0x0404
MIN_UID_LEN = 32
MAX_PLACEHOLDERS = 7  # a client asks for at most 8 cookies (§5.7)
NAK_KISS = "NTSN"


class KeError(ValueError):
    """An NTS-KE request the server answers with an Error record (``code``)."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


@dataclass(frozen=True, slots=True)
class Record:
    critical: bool
    type: int
    body: bytes

    def encode(self) -> bytes:
        return struct.pack("!HH", self.type | (CRITICAL if self.critical else 0), len(self.body)) + self.body


def parse_records(data: bytes) -> tuple[list[Record], bool]:
    """The records in ``data`` and whether the last complete one is End of Message.  Raises KeError(bad request)
    on a record running past the end once End of Message cannot come any more (caller: at end of stream)."""
    records: list[Record] = []
    pos = 0
    while len(data) - pos >= 4:
        kind, length = struct.unpack_from("!HH", data, pos)
        if len(data) - pos - 4 < length:
            break
        records.append(Record(bool(kind & CRITICAL), kind & ~CRITICAL, data[pos + 4:pos + 4 + length]))
        pos += 4 + length
        if records[-1].type == END_OF_MESSAGE:
            if pos != len(data):
                raise KeError(ERR_BAD_REQUEST, "data after End of Message")
            return records, True
    return records, False


def _u16s(body: bytes, what: str) -> list[int]:
    if len(body) % 2:
        raise KeError(ERR_BAD_REQUEST, f"{what}: odd length {len(body)}")
    return [v for (v,) in struct.iter_unpack("!H", body)]


@dataclass(frozen=True, slots=True)
class KeRequest:
    protocols: tuple[int, ...]
    aeads: tuple[int, ...]


def parse_ke_request(records: list[Record]) -> KeRequest:
    """A complete request's records (ending in End of Message) checked as §4 asks of a server."""
    if not records or records[-1].type != END_OF_MESSAGE or not records[-1].critical:
        raise KeError(ERR_BAD_REQUEST, "no critical End of Message")
    protocols: list[int] | None = None
    aeads: list[int] | None = None
    for rec in records[:-1]:
        if rec.type == NEXT_PROTOCOL:
            if protocols is not None or not rec.critical:
                raise KeError(ERR_BAD_REQUEST, "Next Protocol twice or not critical")
            protocols = _u16s(rec.body, "Next Protocol")
        elif rec.type == AEAD_ALGORITHM:
            if aeads is not None:
                raise KeError(ERR_BAD_REQUEST, "AEAD Algorithm twice")
            aeads = _u16s(rec.body, "AEAD Algorithm")
        elif rec.type in (ERROR, WARNING, NEW_COOKIE):
            raise KeError(ERR_BAD_REQUEST, f"record type {rec.type} is the server's to send")
        elif rec.type in (SERVER, PORT, END_OF_MESSAGE):
            if rec.type == END_OF_MESSAGE:
                raise KeError(ERR_BAD_REQUEST, "End of Message before the end")
            continue  # the client's wishes for the NTP server and port: this server answers with its own
        elif rec.critical:
            raise KeError(ERR_UNRECOGNIZED_CRITICAL, f"unrecognised critical record type {rec.type}")
    if protocols is None:
        raise KeError(ERR_BAD_REQUEST, "no Next Protocol Negotiation record")
    return KeRequest(tuple(protocols), tuple(aeads or ()))


# --- the TLS ClientHello's ALPN (§4: a server MUST refuse a client that does not offer ntske/1, RFC 7301 §3.2) ---

TLS_HANDSHAKE, TLS_CLIENT_HELLO, TLS_EXT_ALPN = 22, 1, 16
MAX_CLIENT_HELLO = 16_384  # one TLS record's worth; a client sending more is not an NTS-KE client
# A TLS alert record, fatal no_application_protocol (RFC 8446 §6, RFC 7301 §3.2), sent in clear: before the
# ServerHello no keys exist to protect it.
NO_ALPN_ALERT = bytes([21, 3, 3, 0, 2, 2, 120])


def client_hello(data: bytes) -> tuple[bytes | None, int]:
    """(the ClientHello message, 0) once ``data`` (what a TLS client sent first) holds all of it, else (None, how
    many bytes in all are needed to know more).  ValueError when the records are not a TLS handshake, or the
    ClientHello would be longer than ``MAX_CLIENT_HELLO``."""
    message = b""
    pos = 0
    while True:
        if len(data) - pos < 5:
            return None, pos + 5
        kind, length = data[pos], struct.unpack_from("!H", data, pos + 3)[0]
        if kind != TLS_HANDSHAKE or data[pos + 1] != 3 or not 0 < length <= MAX_CLIENT_HELLO:
            raise ValueError("not a TLS handshake record")  # RFC 8446 §5.1: a record holds at most 2^14 bytes
        if len(data) - pos - 5 < length:
            return None, pos + 5 + length
        message += data[pos + 5:pos + 5 + length]
        pos += 5 + length
        if len(message) >= 4:
            if message[0] != TLS_CLIENT_HELLO:
                raise ValueError("the first handshake message is not a ClientHello")
            whole = 4 + int.from_bytes(message[1:4], "big")
            if whole > MAX_CLIENT_HELLO:
                raise ValueError(f"a ClientHello of {whole} bytes")
            if len(message) >= whole:
                return message[:whole], 0


def alpn_offered(hello: bytes) -> tuple[bytes, ...]:
    """The protocols a ClientHello (``client_hello``'s message) offers in its ALPN extension; () when it has none.
    ValueError when it does not parse (RFC 8446 §4.1.2)."""
    try:
        pos = 4 + 2 + 32  # handshake header, legacy_version, random
        pos += 1 + hello[pos]  # legacy_session_id
        pos += 2 + struct.unpack_from("!H", hello, pos)[0]  # cipher_suites
        pos += 1 + hello[pos]  # legacy_compression_methods
        if pos == len(hello):
            return ()  # no extensions at all (TLS 1.2 and earlier allow it)
        end = pos + 2 + struct.unpack_from("!H", hello, pos)[0]
        pos += 2
        while pos < end:
            kind, length = struct.unpack_from("!HH", hello, pos)
            body = hello[pos + 4:pos + 4 + length]
            pos += 4 + length
            if kind == TLS_EXT_ALPN:
                names, at = [], 2
                while at < 2 + struct.unpack_from("!H", body)[0]:
                    names.append(body[at + 1:at + 1 + body[at]])
                    at += 1 + body[at]
                return tuple(names)
    except (IndexError, struct.error):
        raise ValueError("a ClientHello that does not parse") from None
    return ()


def exporter_contexts(aead: int = AEAD_AES_SIV_CMAC_256) -> tuple[bytes, bytes]:
    """The TLS exporter contexts of the client-to-server and server-to-client keys (§5.1)."""
    base = struct.pack("!HH", PROTOCOL_NTPV4, aead)
    return base + b"\x00", base + b"\x01"


def error_response(code: int) -> bytes:
    return Record(True, ERROR, struct.pack("!H", code)).encode() + Record(True, END_OF_MESSAGE, b"").encode()


@dataclass(frozen=True, slots=True)
class MasterKey:
    key_id: int  # 32 bits
    key: bytes  # MASTER_KEY_LEN
    created_s: int  # when it was made, seconds of the caller's clock (for its age and rotation)


class CookieJar:
    """The server's cookie keys: the newest seals (the NTS-KE process, here), every one kept opens (the data
    plane).  ``rand`` gives the nonces."""

    def __init__(self, keys: list[MasterKey], rand: Callable[[int], bytes]) -> None:
        if not keys:
            raise ValueError("a cookie jar needs at least one master key")
        self.keys = list(keys)
        self.rand = rand
        self._aead = {k.key_id: AESSIV(k.key) for k in keys}

    @property
    def current(self) -> MasterKey:
        return self.keys[-1]

    def seal(self, c2s: bytes, s2c: bytes, aead: int = AEAD_AES_SIV_CMAC_256) -> bytes:
        key = self.current
        nonce = self.rand(COOKIE_NONCE_LEN)
        head = struct.pack("!I", key.key_id)
        plain = struct.pack("!HH", aead, 0) + c2s + s2c
        return head + nonce + self._aead[key.key_id].encrypt(plain, [head, nonce])


def cookie_len() -> int:
    return 4 + COOKIE_NONCE_LEN + 4 + 2 * KEY_LEN + 16  # 104: a multiple of 4, as an extension field's body is


def ke_respond(records: list[Record], c2s: bytes, s2c: bytes, jar: CookieJar, server: str = "",
               port: int = 0) -> bytes:
    """The response to a complete NTS-KE request; c2s and s2c are the keys the TLS exporter gave for it (the
    caller exports them only for AES-SIV-CMAC-256, the one AEAD offered).  Raises KeError for an Error response."""
    request = parse_ke_request(records)
    if PROTOCOL_NTPV4 not in request.protocols:
        # §4.1.2: no protocol in common is an empty Next Protocol record, no cookies
        return (Record(True, NEXT_PROTOCOL, b"").encode() + Record(True, END_OF_MESSAGE, b"").encode())
    if AEAD_AES_SIV_CMAC_256 not in request.aeads:
        # §4.1.5: no AEAD algorithm in common is an empty AEAD Algorithm Negotiation record, no cookies (as chrony
        # 4.4 and later answer)
        return b"".join(r.encode() for r in (Record(True, NEXT_PROTOCOL, struct.pack("!H", PROTOCOL_NTPV4)),
                                             Record(True, AEAD_ALGORITHM, b""), Record(True, END_OF_MESSAGE, b"")))
    out = [Record(True, NEXT_PROTOCOL, struct.pack("!H", PROTOCOL_NTPV4)),
           Record(True, AEAD_ALGORITHM, struct.pack("!H", AEAD_AES_SIV_CMAC_256))]
    if server:
        out.append(Record(True, SERVER, server.encode("ascii")))
    if port:
        out.append(Record(True, PORT, struct.pack("!H", port)))
    out += [Record(False, NEW_COOKIE, jar.seal(c2s, s2c)) for _ in range(COOKIES_PER_KE)]
    out.append(Record(True, END_OF_MESSAGE, b""))
    return b"".join(r.encode() for r in out)
