"""The executable model of the data plane's symmetric-key authentication (RFC 5905 §7.3, §9.2; RFC 8573): the MACs,
the packet trailer, verifying a request and signing a reply.

Not part of the product: the appliance checks and signs MACs in ``appliance/edge/ntp/_auth.c`` alone.  This is the
same decision written plainly, for the oracle server and for tests that sign requests as a client would.  Everything
of ``appliance.protocol.ntp.auth`` (the keys file, keys and key types) is re-exported, so a test reads one module.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from dataclasses import dataclass

from cryptography.hazmat.primitives import cmac
from cryptography.hazmat.primitives.ciphers import algorithms

from appliance.protocol.ntp.auth import *  # noqa: F401,F403  (one module for the tests)
from appliance.protocol.ntp.auth import Key, KeyTable, KeyType

HEADER_LEN = 48  # RFC 5905 §7.3: the MAC follows the fixed header
KEY_ID_LEN = 4  # RFC 5905 §7.3: the 32-bit key identifier that starts the MAC
MAC_TRAILERS = (4, 20, 24)  # RFC 7822 §7.5: crypto-NAK, 128-bit digest (MD5, AES-CMAC), 160-bit digest (SHA1)

def mac(key: Key, data: bytes) -> bytes:
    """The digest a packet carries after its key ID."""
    if key.type is KeyType.AES128:
        signer = cmac.CMAC(algorithms.AES(key.secret))  # RFC 8573 §4: AES-CMAC (RFC 4493), 128-bit tag
        signer.update(data)
        return signer.finalize()
    # RFC 5905 §7.3 and Appendix A: the legacy MAC is digest(key || message) -- not HMAC, which no peer would
    # accept.  Its weakness is why RFC 8573 deprecates MD5 in favour of AES-CMAC.
    digest = hashlib.md5 if key.type is KeyType.MD5 else hashlib.sha1
    return digest(key.secret + data).digest()


def split_mac(packet: bytes) -> tuple[bytes, int | None, bytes | None] | None:
    """``(authenticated part, key ID, digest)``; ``(packet, None, None)`` without a MAC; None if not recognised.

    Only the RFC 7822 §7.5 'MAC only' layouts after the 48-byte header are recognised: 4 zero bytes (a crypto-NAK,
    returned as key ID 0 with an empty digest), 20 bytes (MD5 or AES-CMAC) and 24 bytes (SHA1).  Anything else
    (extension fields, with or without a MAC, or a packet shorter than the header) is None: the caller decides.
    """
    packet = bytes(packet)
    if len(packet) < HEADER_LEN:
        return None
    trailer = packet[HEADER_LEN:]
    if not trailer:
        return packet, None, None
    if len(trailer) not in MAC_TRAILERS:
        return None
    key_id = int.from_bytes(trailer[:KEY_ID_LEN], "big")
    if len(trailer) == KEY_ID_LEN and key_id != 0:
        return None  # a bare key ID is only meaningful as the crypto-NAK
    return packet[:HEADER_LEN], key_id, trailer[KEY_ID_LEN:]


class Outcome(enum.Enum):
    """The auth codes of RFC 5905's peer process (§9.2): none, OK, crypto-NAK, and the error split by cause."""

    NONE = "none"  # no MAC in a layout split_mac recognises
    OK = "ok"
    BAD_MAC = "bad-mac"
    UNKNOWN_KEY = "unknown-key"
    BAD_LENGTH = "bad-length"  # the digest's size is not the key type's
    CRYPTO_NAK = "crypto-nak"


@dataclass(frozen=True)
class VerifyResult:
    outcome: Outcome
    key_id: int | None = None  # the key ID the packet named, when it named one
    key: Key | None = None  # set only when OK: the key to sign the reply with


def verify(table: KeyTable | None, packet: bytes) -> VerifyResult:
    """Check a packet's MAC against ``table`` (None: no keys configured).  Never raises on packet contents.

    A trailer split_mac does not recognise gives NONE, not an error: an attacker could as well strip the MAC, so
    NONE grants nothing, and extension fields stay the caller's business.
    """
    parts = split_mac(packet)
    if parts is None or parts[1] is None:
        return VerifyResult(Outcome.NONE)
    body, key_id, digest = parts
    if not digest:
        return VerifyResult(Outcome.CRYPTO_NAK)  # RFC 5905 §7.4: a MAC of just a zero key ID
    key = table.get(key_id) if table is not None else None
    if key is None:
        return VerifyResult(Outcome.UNKNOWN_KEY, key_id)
    if len(digest) != key.type.digest_size:
        return VerifyResult(Outcome.BAD_LENGTH, key_id)
    # Constant-time comparison, so response timing does not reveal how much of a forged digest was right.
    if not hmac.compare_digest(mac(key, body), digest):
        return VerifyResult(Outcome.BAD_MAC, key_id)
    return VerifyResult(Outcome.OK, key_id, key)


def sign(key: Key, packet_48: bytes) -> bytes:
    """The packet with its MAC appended: key ID (32-bit big-endian) and digest (RFC 5905 §7.3)."""
    header = _header(packet_48)
    return header + key.id.to_bytes(KEY_ID_LEN, "big") + mac(key, header)


def crypto_nak(packet_48: bytes) -> bytes:
    """The packet with a crypto-NAK appended: a MAC of just a zero key ID (RFC 5905 §7.4)."""
    return _header(packet_48) + bytes(KEY_ID_LEN)


def _header(packet: bytes) -> bytes:
    # Only bare headers are signed, so that every packet signed here is one split_mac recognises.
    if len(packet) != HEADER_LEN:
        raise ValueError(f"expected a {HEADER_LEN}-byte NTP header, got {len(packet)} bytes")
    return bytes(packet)
