"""NTP symmetric keys (RFC 5905 §7.3; RFC 8573): the keys file, read into the table the data plane is handed.

Pure core: ``parse_keys`` takes the keys file's text (``edge/input_files.py`` reads it).  The MACs themselves are
checked and made by the data plane alone (``appliance/edge/ntp/_auth.c``; its model is
``tests/oracle/auth_model.py``).  The file is the one chrony and
ntpd both read (``ID TYPE KEY`` a line), so an operator can reuse an existing one.  Like the configuration loader,
parsing collects every problem before raising, and no message ever quotes a token from a key line: any of them might
be a secret typed in the wrong column.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field


MIN_KEY_ID, MAX_KEY_ID = 1, 65534  # ntpd's range (0 is the crypto-NAK); chrony accepts it too
ASCII_MAX = 20  # ntpd: an unprefixed key longer than this must be hex
AES128_KEY_LEN = 16
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


class KeyType(enum.Enum):
    """A MAC algorithm, with the size of the digest it puts on the wire."""

    MD5 = ("MD5", 16)
    SHA1 = ("SHA1", 20)
    AES128 = ("AES128", 16)  # AES-CMAC, RFC 8573 §4

    def __init__(self, _name: str, digest_size: int):
        self.digest_size = digest_size


# Spellings of chrony ("AES128"), ntpd ("M", "AES128CMAC") and OpenSSL ("AES-128-CMAC"), upper-cased.
_TYPE_NAMES = {"MD5": KeyType.MD5, "M": KeyType.MD5, "SHA1": KeyType.SHA1, "SHA-1": KeyType.SHA1,
               "AES128": KeyType.AES128, "AES128CMAC": KeyType.AES128, "AES-128-CMAC": KeyType.AES128}


@dataclass(frozen=True)
class Key:
    """One symmetric key.  The secret is left out of ``repr`` because reprs end up in logs."""

    id: int
    type: KeyType
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not MIN_KEY_ID <= self.id <= MAX_KEY_ID:
            raise ValueError(f"key ID {self.id} outside {MIN_KEY_ID}..{MAX_KEY_ID}")
        if not self.secret:
            raise ValueError(f"key {self.id}: empty secret")
        if self.type is KeyType.AES128 and len(self.secret) != AES128_KEY_LEN:
            raise ValueError(f"key {self.id}: AES128 needs a 16-byte secret, not {len(self.secret)} bytes")


class KeyTable(Mapping[int, Key]):
    """An immutable key ID -> Key mapping."""

    def __init__(self, keys: Iterable[Key] = ()):
        table: dict[int, Key] = {}
        for key in keys:
            if key.id in table:
                raise ValueError(f"key {key.id} given twice")
            table[key.id] = key
        self._keys = table

    def __getitem__(self, key_id: int) -> Key:
        return self._keys[key_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


class KeysFileError(Exception):
    """A keys file with one or more problems; ``problems`` holds one line each, none quoting a secret."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


class _Bad(Exception):
    """A problem on one line; private, so no library exception (whose text might quote a secret) is caught."""


# --- the keys file ------------------------------------------------------------------------------------------

def parse_keys(text: str, origin: str = "keys file") -> KeyTable:
    """Parse keys-file text; raises KeysFileError listing every problem, each with its line number."""
    problems: list[str] = []
    keys: list[Key] = []
    first_line: dict[int, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = _fields(line)
        if not fields:
            continue
        where = f"{origin} line {number}"
        key = _parse_line(fields, where, problems)
        if key is None:
            continue
        if key.id in first_line:
            problems.append(f"{where}: key {key.id} already defined on line {first_line[key.id]}")
            continue
        first_line[key.id] = number
        keys.append(key)
    if problems:
        raise KeysFileError(problems)
    return KeyTable(keys)


def _fields(line: str) -> list[str]:
    """Whitespace-separated fields up to a comment: ntpd ends a line at a field starting with '#'."""
    fields = line.split()
    return next((fields[:i] for i, word in enumerate(fields) if word.startswith("#")), fields)


def _parse_line(fields: list[str], where: str, problems: list[str]) -> Key | None:
    """One key, or None with every problem of the line appended to ``problems``."""
    if len(fields) == 2:
        fields = [fields[0], "MD5", fields[1]]  # chrony: TYPE may be left out and defaults to MD5
    if len(fields) != 3:
        problems.append(f"{where}: expected 'ID TYPE KEY', found {len(fields)} fields")
        return None
    key_id, key_type, secret = None, _TYPE_NAMES.get(fields[1].upper()), None
    # At most 5 digits before int(): it refuses over 4300 with a ValueError no problem list would hold.
    if fields[0].isascii() and fields[0].isdigit() and len(fields[0]) <= 5 and \
            MIN_KEY_ID <= int(fields[0]) <= MAX_KEY_ID:
        key_id = int(fields[0])
    else:
        problems.append(f"{where}: key ID must be a decimal number in {MIN_KEY_ID}..{MAX_KEY_ID}")
    if key_type is None:
        problems.append(f"{where}: unsupported key type (expected MD5, SHA1 or AES128)")
    else:
        try:
            secret = _secret(fields[2], key_type)
        except _Bad as exc:
            problems.append(f"{where}: {exc}")
    if key_id is None or key_type is None or secret is None:
        return None
    return Key(key_id, key_type, secret)


def _secret(text: str, key_type: KeyType) -> bytes:
    """Decode a KEY field: chrony's HEX:/ASCII: prefixes, else ntpd's rule (longer than 20 and all hex: hex)."""
    if text.startswith("HEX:"):
        secret = _hex(text[4:])
    elif text.startswith("ASCII:"):
        secret = _ascii(text[6:])
    elif len(text) > ASCII_MAX:
        if not set(text) <= _HEX_DIGITS:
            raise _Bad(f"an unprefixed key longer than {ASCII_MAX} characters must be hex digits")
        secret = _hex(text)
    else:
        secret = _ascii(text)
    if not secret:
        raise _Bad("empty key")
    if key_type is KeyType.AES128 and len(secret) != AES128_KEY_LEN:
        raise _Bad(f"AES128 key must be {AES128_KEY_LEN} bytes (32 hex digits), not {len(secret)} bytes")
    return secret


def _hex(text: str) -> bytes:
    if not set(text) <= _HEX_DIGITS or len(text) % 2:
        raise _Bad("hex key must be an even number of hex digits")
    return bytes.fromhex(text)


def _ascii(text: str) -> bytes:
    if not all("!" <= c <= "~" for c in text):  # printable, no spaces (ntpd's rule)
        raise _Bad("ASCII key must be printable ASCII without spaces")
    return text.encode("ascii")


# --- MACs and the packet trailer --------------------------------------------------------------------------
