"""PTP integrity protection: the AUTHENTICATION TLV (IEEE 1588-2019 16.14, immediate security processing of
Annex P) as linuxptp 4.x writes and checks it, and its security association file (``sa_file``).

Pure core: ``parse_sa_file`` takes the file's text (``edge/input_files.py`` reads it).  The file is linuxptp's, so an operator
hands the appliance and its ptp4l slaves the same one::

    [security_association]
    spp 1                      # Security Parameters Pointer, 0..255
    seqid_window 3             # (read, kept for the file's sake: a grandmaster receives no Sync to check)
    allow_mutable 0            # 1: correctionField left out of the ICV (a transparent clock may change it)
    1 SHA256-128 HEX:<64 hex digits>    # key id, algorithm, [length], key (HEX:, B64:, ASCII: or plain text)

Algorithms: SHA256-128 (HMAC-SHA256 cut to 16 octets), SHA256 (32 octets), AES128 and AES256 (CMAC, 16 octets).
A message is signed by appending, as its last TLV, ``tlvType 0x8009, lengthField, spp, secParamIndicator 0,
keyID, ICV``, with messageLength counting it; the ICV is the MAC of the message from its first octet up to the ICV
(correctionField as zero when the association allows it mutable).  A received message is authentic when its last
TLV is such a TLV of the port's spp whose key is known and whose ICV matches; it is then handed on without the TLV.

Like the NTP keys file, parsing collects every problem with its line number before raising, and no message quotes a
token of a key line: it may be a secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import cmac
from cryptography.hazmat.primitives.ciphers import algorithms

TLV_AUTHENTICATION = 0x8009
HEADER_LEN = 34
_AUTH_HEAD = struct.Struct("!HHBBI")  # tlvType, lengthField, SPP, secParamIndicator, keyID
AUTH_HEAD_LEN = _AUTH_HEAD.size  # 10
_CORRECTION = slice(8, 16)
MAX_KEY_ID = 2**32 - 1
SEC_PARAM_RES, SEC_PARAM_SEQNUM, SEC_PARAM_DELAYED = 0x01, 0x02, 0x04

# algorithm name (linuxptp's) -> (ICV octets, key length required or 0 for any)
ALGORITHMS: dict[str, tuple[int, int]] = {"SHA256-128": (16, 0), "SHA256": (32, 0), "AES128": (16, 16),
                                          "AES256": (16, 32)}

# Each message type's body (header included), where its TLVs start: IEEE 1588-2019 13.6 to 13.13, 15.4.1.
BODY_LEN = {0x0: 44, 0x1: 44, 0x2: 54, 0x3: 54, 0x8: 44, 0x9: 54, 0xA: 54, 0xB: 64, 0xC: 44, 0xD: 48}

# Why a received message was refused (counted as ``drop_auth_<reason>``).
REASONS = ("unsigned", "not_last", "spp", "sec_param", "key", "length", "icv")


class SaFileError(Exception):
    """A security association file with problems; ``problems`` holds one line each, none quoting a secret."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Key:
    key_id: int
    algorithm: str
    secret: bytes = field(repr=False)

    @property
    def icv_len(self) -> int:
        return ALGORITHMS[self.algorithm][0]

    def mac(self, data: bytes) -> bytes:
        """The ICV of ``data`` under this key."""
        if self.algorithm.startswith("SHA256"):
            return hmac.new(self.secret, data, hashlib.sha256).digest()[:self.icv_len]
        c = cmac.CMAC(algorithms.AES(self.secret))
        c.update(data)
        return c.finalize()


@dataclass(frozen=True)
class SecurityAssociation:
    spp: int
    keys: Mapping[int, Key]
    seqid_window: int = 3
    allow_mutable: bool = False


def _key_bytes(text: str) -> bytes:
    if text.startswith("HEX:"):
        digits = text[4:]
        if len(digits) % 2 or not digits:
            raise ValueError("a HEX: key needs an even, non-zero number of hex digits")
        try:
            return bytes.fromhex(digits)
        except ValueError:
            raise ValueError("a HEX: key holds a character that is not a hex digit") from None
    if text.startswith("B64:"):
        try:
            return base64.b64decode(text[4:], validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("a B64: key is not valid Base64") from None
    return (text[6:] if text.startswith("ASCII:") else text).encode("utf-8")


def _int(token: str, lo: int, hi: int, what: str) -> int:
    try:
        value = int(token)
    except ValueError:
        raise ValueError(f"{what} is not a number") from None
    if not lo <= value <= hi:
        raise ValueError(f"{what} {value} is outside {lo}..{hi}")
    return value


def parse_sa_file(text: str, origin: str = "sa_file") -> dict[int, SecurityAssociation]:
    """The security associations of an sa_file, by spp; raises SaFileError listing every problem."""
    problems: list[str] = []
    found: dict[int, dict] = {}
    current: dict | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{origin} line {number}"
        if line.lower() == "[security_association]":
            current = None
            continue
        words = line.split()
        try:
            if words[0] == "spp" and len(words) == 2:
                spp = _int(words[1], 0, 255, "spp")
                if spp in found:
                    raise ValueError(f"spp {spp} is defined twice")
                current = found[spp] = {"spp": spp, "keys": {}, "seqid_window": 3, "allow_mutable": False}
                continue
            if current is None:
                raise ValueError("a setting or key before the association's spp line")
            if words[0] == "seqid_window" and len(words) == 2:
                current["seqid_window"] = _int(words[1], 0, 0x7FFF, "seqid_window")
            elif words[0] == "allow_mutable" and len(words) == 2:
                current["allow_mutable"] = bool(_int(words[1], 0, 1, "allow_mutable"))
            elif words[0] in ("seqnum_length", "res_length") and len(words) == 2:
                if _int(words[1], 0, 0xFFFF, words[0]) != 0:
                    raise ValueError(f"{words[0]} other than 0 is not supported (nor by linuxptp)")
            elif len(words) in (3, 4) and words[0].isdigit():
                key_id = _int(words[0], 1, MAX_KEY_ID, "key id")
                algorithm = words[1].upper()
                if algorithm not in ALGORITHMS:
                    raise ValueError(f"key {key_id}: unknown algorithm (known: {', '.join(ALGORITHMS)})")
                secret = _key_bytes(words[-1])
                if len(words) == 4 and _int(words[2], 1, 4096, f"key {key_id}: length") != len(secret):
                    raise ValueError(f"key {key_id}: the key is not of the length its line gives")
                needed = ALGORITHMS[algorithm][1]
                if needed and len(secret) != needed:
                    raise ValueError(f"key {key_id}: {algorithm} needs a {needed}-octet key")
                if not secret:
                    raise ValueError(f"key {key_id}: empty key")
                if key_id in current["keys"]:
                    raise ValueError(f"key {key_id} is defined twice in spp {current['spp']}")
                current["keys"][key_id] = Key(key_id, algorithm, secret)
            else:
                raise ValueError("not a setting (spp, seqid_window, allow_mutable) nor a key line "
                                 "('id algorithm [length] key')")
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
    for spp, sa in found.items():
        if not sa["keys"]:
            problems.append(f"{origin}: spp {spp} has no key")
    if problems:
        raise SaFileError(problems)
    return {spp: SecurityAssociation(**sa) for spp, sa in found.items()}


def _icv_input(message: bytes, allow_mutable: bool) -> bytes:
    if allow_mutable:
        return message[:_CORRECTION.start] + bytes(8) + message[_CORRECTION.stop:]
    return message


@dataclass
class PortSecurity:
    """One port's security: the association and key it signs with, whether unsigned messages are accepted, and what
    it has signed and refused."""

    association: SecurityAssociation
    key_id: int
    accept_unsigned: bool = False
    signed: int = 0
    verified: int = 0
    accepted_unsigned: int = 0
    refused: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.key_id not in self.association.keys:
            raise ValueError(f"ptp.active_key_id {self.key_id} is not a key of spp {self.association.spp}")

    @classmethod
    def from_file(cls, associations: Mapping[int, SecurityAssociation], spp: int, key_id: int,
                  accept_unsigned: bool = False) -> PortSecurity:
        if spp not in associations:
            raise ValueError(f"ptp.spp {spp} is not in the security association file "
                             f"(it has {', '.join(map(str, sorted(associations))) or 'none'})")
        return cls(associations[spp], key_id, accept_unsigned)

    @property
    def key(self) -> Key:
        return self.association.keys[self.key_id]

    def sign(self, message: bytes) -> bytes:
        """``message`` (messageLength = its length) with the AUTHENTICATION TLV appended, its ICV computed."""
        key = self.key
        total = len(message) + AUTH_HEAD_LEN + key.icv_len
        body = (message[:2] + struct.pack("!H", total) + message[4:]
                + _AUTH_HEAD.pack(TLV_AUTHENTICATION, AUTH_HEAD_LEN - 4 + key.icv_len, self.association.spp, 0,
                                  key.key_id))
        self.signed += 1
        return body + key.mac(_icv_input(body, self.association.allow_mutable))

    def verify(self, message: bytes) -> tuple[bytes | None, str]:
        """(the message without its AUTHENTICATION TLV, "") when authentic; (the message, "") when unsigned and
        unsigned messages are accepted; else (None, reason), the refusal counted."""
        verdict, why = check(message, self.association)
        if verdict is not None:
            self.verified += 1
            return verdict, ""
        if why == "unsigned" and self.accept_unsigned:
            self.accepted_unsigned += 1
            return message, ""
        self.refused[why] = self.refused.get(why, 0) + 1
        return None, why

    def snapshot(self) -> dict:
        return {"spp": self.association.spp, "key_id": self.key_id, "algorithm": self.key.algorithm,
                "allow_mutable": self.association.allow_mutable, "accept_unsigned": self.accept_unsigned,
                "signed": self.signed, "verified": self.verified, "accepted_unsigned": self.accepted_unsigned,
                "refused": dict(self.refused), "refused_total": sum(self.refused.values())}


def check(message: bytes, association: SecurityAssociation) -> tuple[bytes | None, str]:
    """(the message without its AUTHENTICATION TLV, "") when its last TLV is a valid one under ``association``;
    else (None, reason) with a reason of ``REASONS``."""
    if len(message) < HEADER_LEN:
        return None, "unsigned"
    length = struct.unpack_from("!H", message, 2)[0]
    if length > len(message) or length < HEADER_LEN:
        return None, "unsigned"
    message = message[:length]
    start = _auth_start(message)
    if isinstance(start, str):
        return None, start
    _t, tlv_len, spp, indicator, key_id = _AUTH_HEAD.unpack_from(message, start)
    if spp != association.spp:
        return None, "spp"
    if indicator & (SEC_PARAM_RES | SEC_PARAM_SEQNUM | SEC_PARAM_DELAYED):
        return None, "sec_param"
    key = association.keys.get(key_id)
    if key is None:
        return None, "key"
    if tlv_len != AUTH_HEAD_LEN - 4 + key.icv_len or start + 4 + tlv_len != length:
        return None, "length"
    icv_at = length - key.icv_len
    if not hmac.compare_digest(key.mac(_icv_input(message[:icv_at], association.allow_mutable)), message[icv_at:]):
        return None, "icv"
    return message[:2] + struct.pack("!H", start) + message[4:start], ""


def _auth_start(message: bytes) -> int | str:
    """Where the AUTHENTICATION TLV that ends the message starts, or why there is none: the TLVs are walked from
    the end of the message type's body; the last one must be an AUTHENTICATION TLV that ends the message."""
    body = BODY_LEN.get(message[0] & 0x0F)
    length = len(message)
    if body is None or body > length:
        return "unsigned"
    offset, last, seen_auth = body, None, False
    while offset + 4 <= length:
        kind, size = struct.unpack_from("!HH", message, offset)
        last, seen_auth = offset, seen_auth or kind == TLV_AUTHENTICATION
        offset += 4 + size
    if last is None or offset != length:
        return "not_last" if seen_auth else "unsigned"
    if struct.unpack_from("!H", message, last)[0] != TLV_AUTHENTICATION:
        return "not_last" if seen_auth else "unsigned"
    if length - last < AUTH_HEAD_LEN:
        return "length"
    return last
