"""The executable model of the data plane's NTS (RFC 8915 §5.7): an NTP request's NTS fields opened and checked,
the reply's fields sealed, the NAK.

Not part of the product: the appliance answers NTS requests in ``appliance/edge/ntp/_nts.c`` alone.  This is the
same decision written plainly, for the oracle server (``ntp_server.py``) and the tests.  Everything of
``appliance.protocol.ntp.nts`` (records, cookie format, master keys) is re-exported, so a test reads one module.

A request carries a Unique Identifier, one cookie, optional cookie placeholders, and an NTS Authenticator over
everything before it.  ``open_request`` checks all of it; ``seal_reply`` builds the reply's fields: the Unique
Identifier echoed, and an Authenticator whose ciphertext holds one fresh cookie per cookie and placeholder the
request carried, never more bytes than the request (no amplification).  A request whose cookie cannot be opened or
whose authenticator does not verify gets ``nak_fields``: the NTS NAK, a kiss-o'-death NTSN carrying only the Unique
Identifier.  Its reply is 52 bytes plus the identifier, and its request held a cookie and an Authenticator too: a
NAK is always shorter than its request, however long the identifier.  The identifier has no maximum (§5.3 sets only
a minimum); the server's limit on a request's length (1024 bytes, dropped unread as oversize) leaves up to 824
bytes of it beside a 104-byte cookie.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from appliance.protocol.ntp.nts import *  # noqa: F401,F403  (one module for the tests)
from appliance.protocol.ntp.nts import (AEAD_AES_SIV_CMAC_256, COOKIE_NONCE_LEN, EF_AUTHENTICATOR, EF_COOKIE,
                                        EF_COOKIE_PLACEHOLDER, EF_UNIQUE_ID, KEY_LEN, MAX_PLACEHOLDERS, MIN_UID_LEN,
                                        NAK_KISS, CookieJar, cookie_len)

__all__ = ["NAK_KISS", "NtsRequest", "extension_fields", "is_nts", "nak_fields", "open_cookie", "open_request",
           "seal_reply"]


def open_cookie(jar: CookieJar, cookie: bytes) -> tuple[bytes, bytes] | None:
    """(C2S, S2C) from a cookie this server sealed under a key it still keeps, else None."""
    if len(cookie) != cookie_len():
        return None
    head, nonce, sealed = cookie[:4], cookie[4:4 + COOKIE_NONCE_LEN], cookie[4 + COOKIE_NONCE_LEN:]
    key = next((k for k in jar.keys if k.key_id == struct.unpack("!I", head)[0]), None)
    if key is None:
        return None
    try:
        plain = AESSIV(key.key).decrypt(sealed, [head, nonce])
    except InvalidTag:
        return None
    if struct.unpack_from("!H", plain)[0] != AEAD_AES_SIV_CMAC_256:
        return None
    return plain[4:4 + KEY_LEN], plain[4 + KEY_LEN:]


def extension_fields(data: bytes, start: int = 48) -> list[tuple[int, int, int]] | None:
    """(type, offset, length) of each extension field after the header, or None if they do not tile the packet
    (RFC 7822: at least 16 bytes each, multiples of 4; NTS's own fields may be shorter, §5.3: at least 4)."""
    out = []
    pos = start
    while pos < len(data):
        if len(data) - pos < 4:
            return None
        kind, length = struct.unpack_from("!HH", data, pos)
        if length < 4 or length % 4 or pos + length > len(data):
            return None
        out.append((kind, pos, length))
        pos += length
    return out


def is_nts(data: bytes) -> bool:
    """An NTPv4 request that carries a Unique Identifier field: the server answers it as NTS or not at all."""
    fields = extension_fields(data)
    return bool(fields) and any(kind == EF_UNIQUE_ID for kind, _, _ in fields)


@dataclass(frozen=True, slots=True)
class NtsRequest:
    uid: bytes  # the Unique Identifier field's body, echoed
    cookies_wanted: int  # 1 + placeholders
    keys: tuple[bytes, bytes] | None  # (C2S, S2C) from its cookie; None: answer with the NTS NAK
    request_len: int
    reason: str = ""  # why a NAK or a drop


def open_request(data: bytes, jar: CookieJar) -> NtsRequest | str:
    """The request's NTS fields checked (§5.7); a string is a reason to drop it silently (malformed: no Unique
    Identifier to echo, no single cookie, the authenticator not last), an NtsRequest with s2c None asks for a NAK."""
    fields = extension_fields(data)
    if fields is None:
        return "nts-malformed"
    uid = cookie = None
    placeholders = 0
    auth_at = -1
    for i, (kind, pos, length) in enumerate(fields):
        body = data[pos + 4:pos + length]
        if kind == EF_UNIQUE_ID:
            if uid is not None or len(body) < MIN_UID_LEN:
                return "nts-malformed"
            uid = body
        elif kind == EF_COOKIE:
            if cookie is not None:
                return "nts-malformed"
            cookie = body
        elif kind == EF_COOKIE_PLACEHOLDER:
            placeholders += 1
        elif kind == EF_AUTHENTICATOR:
            if i != len(fields) - 1:
                return "nts-malformed"  # nothing unauthenticated may follow it (§5.6)
            auth_at = i
    if uid is None or cookie is None or auth_at < 0 or placeholders > MAX_PLACEHOLDERS:
        return "nts-malformed"
    _, apos, alen = fields[auth_at]
    parsed = _authenticator(data[apos + 4:apos + alen])
    if parsed is None:
        return "nts-malformed"
    nonce, ciphertext = parsed
    keys = open_cookie(jar, cookie)
    if keys is None:
        return NtsRequest(uid, 1 + placeholders, None, len(data), "nts-bad-cookie")
    c2s, _ = keys
    try:
        plain = AESSIV(c2s).decrypt(ciphertext, [data[:apos], nonce])
    except InvalidTag:
        return NtsRequest(uid, 1 + placeholders, None, len(data), "nts-bad-authenticator")
    if plain and extension_fields(plain, 0) is None:
        return NtsRequest(uid, 1 + placeholders, None, len(data), "nts-bad-authenticator")
    return NtsRequest(uid, 1 + placeholders, keys, len(data))


def _authenticator(body: bytes) -> tuple[bytes, bytes] | None:
    """(nonce, ciphertext) of an NTS Authenticator and Encrypted Extension Fields body (§5.6)."""
    if len(body) < 4:
        return None
    nonce_len, ct_len = struct.unpack_from("!HH", body)
    nonce_end = 4 + _pad4(nonce_len)
    if nonce_len < 16 or ct_len < 16 or nonce_end + _pad4(ct_len) > len(body):
        return None
    return body[4:4 + nonce_len], body[nonce_end:nonce_end + ct_len]


def _pad4(n: int) -> int:
    return (n + 3) & ~3


def _field(kind: int, body: bytes) -> bytes:
    body += b"\0" * (_pad4(len(body)) - len(body))
    return struct.pack("!HH", kind, 4 + len(body)) + body


def seal_reply(header: bytes, request: NtsRequest, jar: CookieJar, rand: Callable[[int], bytes]) -> bytes:
    """The reply: ``header`` (48 bytes, final), the Unique Identifier echoed, and an Authenticator whose encrypted
    fields are fresh cookies for the client, as many as it asked for and no more than keep the reply within the
    request's length."""
    assert request.keys is not None
    c2s, s2c = request.keys
    uid = _field(EF_UNIQUE_ID, request.uid)
    nonce = rand(16)
    one_cookie = len(_field(EF_COOKIE, b"\0" * cookie_len()))
    fixed = len(header) + len(uid) + 4 + 4 + 16 + 16  # authenticator header, nonce lengths, nonce, SIV tag
    count = max(0, min(request.cookies_wanted, (request.request_len - fixed) // one_cookie))
    plain = b"".join(_field(EF_COOKIE, jar.seal(c2s, s2c)) for _ in range(count))
    associated = header + uid
    ciphertext = AESSIV(s2c).encrypt(plain, [associated, nonce])
    auth_body = struct.pack("!HH", len(nonce), len(ciphertext)) + nonce + ciphertext
    return associated + _field(EF_AUTHENTICATOR, auth_body)


def nak_fields(request: NtsRequest) -> bytes:
    """The NTS NAK's extension fields (§5.7): the Unique Identifier alone; the header is a KoD NTSN."""
    return _field(EF_UNIQUE_ID, request.uid)
