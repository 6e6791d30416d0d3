"""Configuration backup archives: what is in one, its signature, its encrypted keys, and what restoring it changes.

Pure core: bytes in, bytes out; the caller reads the files, the clock and the passphrase.  An archive is one JSON
document:

- ``format``/``version`` (a reader refuses a version newer than its own), the appliance version that wrote it, when
  and on which host (labels only);
- ``files``: each a name (``console-settings.toml``, ``config.toml``, ``snmp-users.toml``, ``snmp-engine-id``,
  ``ptp-sa.cfg``), where it belongs (``place``: the state directory, or the setting that names its path, with the
  path it had) and its content (base64);
- ``users``: the console users (name, role, scrypt salt and hash) and API tokens (their SHA-256 digests, labels);
  sessions and lockouts are not kept (a restore ends every session);
- ``keys``, only when asked for: the private keys (console TLS key and certificate, session signing key, NTS-KE
  certificate and cookie keys, audit signing key) as one AES-256-GCM ciphertext under a key derived from a
  passphrase with scrypt (n=2^15, r=8, p=1, a random 16-byte salt); ``key_names`` lists them in the clear;
- ``public_key`` and ``signature``: the appliance's audit signing key (Ed25519) over the canonical JSON of
  everything else, so that any change to the file is found.

``plan`` says what restoring an archive over the current state would change, secrets masked, for the operator to
read before anything is written.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from appliance.audit.chain import canonical_json

FORMAT, VERSION = "appliance-backup", 1
SETTINGS_FILES = ("config.toml", "console-settings.toml")
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 15, 8, 1
MIN_PASSPHRASE = 12
MAX_ARCHIVE_BYTES = 64 * 1024 * 1024
_AAD = b"appliance-backup keys v1"


class BackupError(Exception):
    """An archive that cannot be made, read or trusted; the message says why, for the operator."""


@dataclass(frozen=True)
class FileItem:
    name: str
    place: str  # "state", or the setting naming the file's path ("config", "ptp.sa_file", "snmp.users_file")
    path: str  # where it was (relative to the state directory for "state")
    data: bytes
    mode: int = 0o600


@dataclass(frozen=True)
class Users:
    users: tuple[tuple[str, str, bytes, bytes, int], ...] = ()  # name, role, salt, hash, must_change
    tokens: tuple[tuple[str, str, str, float], ...] = ()  # digest, user, label, created_s


@dataclass(frozen=True)
class Contents:
    """What an archive holds (or the current state holds), keys decrypted or absent."""
    files: tuple[FileItem, ...] = ()
    users: Users = field(default_factory=Users)
    keys: tuple[FileItem, ...] = ()

    def file(self, name: str) -> FileItem | None:
        return next((f for f in self.files if f.name == name), None)


@dataclass(frozen=True)
class Archive:
    """A read, verified archive: its contents (keys still sealed until ``open_keys``) and its labels."""
    document: dict[str, Any]
    contents: Contents
    key_names: tuple[str, ...]
    fingerprint: str  # of the public key that signed it

    @property
    def has_keys(self) -> bool:
        return bool(self.document.get("keys"))


def fingerprint(public: Ed25519PublicKey) -> str:
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


# --- writing ---------------------------------------------------------------------------------------------------------

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _file_doc(f: FileItem) -> dict[str, Any]:
    return {"name": f.name, "place": f.place, "path": f.path, "mode": f.mode, "data": _b64(f.data)}


def _derive(passphrase: str, salt: bytes) -> bytes:
    return Scrypt(salt=salt, length=32, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P).derive(passphrase.encode("utf-8"))


def seal_keys(keys: Iterable[FileItem], passphrase: str, salt: bytes, nonce: bytes) -> dict[str, Any]:
    """The keys as one AES-256-GCM ciphertext under a scrypt key of ``passphrase`` (salt and nonce: random, from
    the caller)."""
    if len(passphrase) < MIN_PASSPHRASE:
        raise BackupError(f"the passphrase must have at least {MIN_PASSPHRASE} characters")
    plain = canonical_json([_file_doc(k) for k in keys])
    sealed = AESGCM(_derive(passphrase, salt)).encrypt(nonce, plain, _AAD)
    return {"kdf": {"name": "scrypt", "n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P, "salt": _b64(salt)},
            "cipher": "AES-256-GCM", "nonce": _b64(nonce), "data": _b64(sealed)}


def build(contents: Contents, signer: Ed25519PrivateKey, labels: Mapping[str, str],
          sealed_keys: dict[str, Any] | None) -> bytes:
    """The archive's bytes: ``contents`` (its keys given sealed, or None), signed by ``signer``."""
    u = contents.users
    document: dict[str, Any] = {
        "format": FORMAT, "version": VERSION, **{k: str(v) for k, v in labels.items()},
        "files": [_file_doc(f) for f in contents.files],
        "users": {"users": [{"name": n, "role": r, "salt": s.hex(), "hash": h.hex(), "must_change": m}
                            for n, r, s, h, m in u.users],
                  "tokens": [{"digest": d, "user": n, "label": lab, "created_s": c} for d, n, lab, c in u.tokens]},
        "keys": sealed_keys,
        "key_names": sorted(k.name for k in contents.keys) if sealed_keys else [],
        "public_key": signer.public_key().public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo).decode(),
    }
    document["signature"] = signer.sign(canonical_json(document)).hex()
    return json.dumps(document, indent=1, sort_keys=True).encode("utf-8") + b"\n"


# --- reading ---------------------------------------------------------------------------------------------------------

def _need(doc: Mapping[str, Any], key: str, kind: type) -> Any:
    value = doc.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BackupError(f"not a backup archive this appliance can read: {key!r} is missing or malformed")
    return value


def _unb64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise BackupError(f"not a backup archive this appliance can read: {what} is malformed")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BackupError(f"not a backup archive this appliance can read: {what} is not base64") from None


def _file_of(doc: Any, what: str) -> FileItem:
    if not isinstance(doc, dict):
        raise BackupError(f"not a backup archive this appliance can read: {what} is malformed")
    name, place, path, mode = (_need(doc, "name", str), _need(doc, "place", str), _need(doc, "path", str),
                               _need(doc, "mode", int))
    if not name or "\x00" in name + path or not 0 <= mode <= 0o777:
        raise BackupError(f"not a backup archive this appliance can read: {what} names {name!r}")
    if place == "state" and (not path or path.startswith("/") or ".." in path.split("/")):
        raise BackupError(f"refused: {what} would be written outside the state directory ({path!r})")
    return FileItem(name, place, path, _unb64(doc.get("data"), what), mode)


def read(data: bytes) -> Archive:
    """Parse and verify an archive: its format and version, its signature (BackupError saying which fails)."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise BackupError(f"refused: the file is over {MAX_ARCHIVE_BYTES // (1024 * 1024)} MiB, no backup is")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BackupError("not a backup archive: the file is not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BackupError("not a backup archive of this appliance (its format is not appliance-backup)")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise BackupError("not a backup archive this appliance can read: no version")
    if version > VERSION:
        raise BackupError(f"refused: the archive is format version {version}, made by a newer appliance "
                          f"({doc.get('appliance_version', '?')}); this one reads up to version {VERSION}: "
                          "upgrade it first")
    signature = _need(doc, "signature", str)
    try:
        public = serialization.load_pem_public_key(_need(doc, "public_key", str).encode())
    except ValueError:
        raise BackupError("refused: the archive's public key is unreadable") from None
    if not isinstance(public, Ed25519PublicKey):
        raise BackupError("refused: the archive is not signed with an Ed25519 key")
    unsigned = {k: v for k, v in doc.items() if k != "signature"}
    try:
        public.verify(bytes.fromhex(signature), canonical_json(unsigned))
    except (InvalidSignature, ValueError):
        raise BackupError("refused: the archive's signature does not verify: it was altered after it was "
                          "written (or damaged)") from None
    return Archive(doc, _contents_of(doc), tuple(str(n) for n in doc.get("key_names") or ()), fingerprint(public))


def _contents_of(doc: dict[str, Any]) -> Contents:
    files = tuple(_file_of(f, f"file {i}") for i, f in enumerate(_need(doc, "files", list)))
    u = _need(doc, "users", dict)
    try:
        users = tuple((str(x["name"]), str(x["role"]), bytes.fromhex(x["salt"]), bytes.fromhex(x["hash"]),
                       int(bool(x.get("must_change", 0)))) for x in _need(u, "users", list))
        tokens = tuple((str(x["digest"]), str(x["user"]), str(x["label"]), float(x["created_s"]))
                       for x in _need(u, "tokens", list))
    except (KeyError, TypeError, ValueError):
        raise BackupError("not a backup archive this appliance can read: its users are malformed") from None
    return Contents(files, Users(users, tokens))


def open_keys(archive: Archive, passphrase: str) -> tuple[FileItem, ...]:
    """The archive's private keys, decrypted with ``passphrase`` (BackupError when it is wrong)."""
    sealed = archive.document.get("keys")
    if not sealed:
        return ()
    kdf = _need(sealed, "kdf", dict)
    if kdf.get("name") != "scrypt" or sealed.get("cipher") != "AES-256-GCM":
        raise BackupError("not a backup archive this appliance can read: unknown key encryption")
    n, r, p = (_need(kdf, k, int) for k in ("n", "r", "p"))
    if not (2 <= n <= 2 ** 20 and 1 <= r <= 32 and 1 <= p <= 16):
        raise BackupError("refused: the archive's key derivation parameters are out of bounds")
    salt, nonce = _unb64(kdf.get("salt"), "the key salt"), _unb64(sealed.get("nonce"), "the key nonce")
    key = Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(passphrase.encode("utf-8"))
    try:
        plain = AESGCM(key).decrypt(nonce, _unb64(sealed.get("data"), "the keys"), _AAD)
    except InvalidTag:
        raise BackupError("the passphrase does not open the archive's keys (wrong passphrase)") from None
    return tuple(_file_of(k, f"key {i}") for i, k in enumerate(json.loads(plain)))


def random_bytes(n: int) -> bytes:
    """Salt and nonce material (the kernel's CSPRNG; no clock)."""
    return os.urandom(n)


def sealed_names(archive: Archive) -> str:
    """What the encrypted part holds, for the operator: key files, and settings files with their secrets."""
    return ", ".join(f"the secret settings of {n[len(SEALED_SETTINGS):]}" if n.startswith(SEALED_SETTINGS) else n
                     for n in archive.key_names)


# --- secret settings ------------------------------------------------------------------------------------------------
SEALED_SETTINGS = "settings:"  # a key item holding a settings file whole, secrets included: "settings:config.toml"


def secret_names(data: bytes) -> list[str]:
    """The write-only settings (snmp.community, auth.radius_secret ...) a settings file sets to a value."""
    from appliance.config import BY_NAME

    flat = _settings(data, "a settings file")
    return sorted(k for k, v in flat.items() if k in BY_NAME and BY_NAME[k].secret and v not in ("", (), []))


def _nested_pop(table: dict[str, Any], name: str) -> Any:
    """Remove dotted ``name`` from nested tables; its value (None when absent)."""
    parts = name.split(".")
    for part in parts[:-1]:
        table = table.get(part) if isinstance(table.get(part), dict) else None  # type: ignore[assignment]
        if table is None:
            return None
    return table.pop(parts[-1], None)


def _nested_set(table: dict[str, Any], name: str, value: Any) -> None:
    parts = name.split(".")
    for part in parts[:-1]:
        table = table.setdefault(part, {})
    table[parts[-1]] = value


def redact(data: bytes) -> bytes:
    """A settings file without its secret values (rewritten: comments are not kept); as it is when it has none."""
    import tomli_w

    names = secret_names(data)
    if not names:
        return data
    table = tomllib.loads(data.decode("utf-8"))
    for name in names:
        _nested_pop(table, name)
    head = ("# written by appliance backup: the secret settings (" + ", ".join(names) + ") are in the archive's "
            "encrypted part, or were left out\n")
    return head.encode() + tomli_w.dumps(table).encode("utf-8")


def keep_secrets(incoming: bytes, current: bytes | None) -> bytes:
    """A redacted settings file given the secret values the current one has (a restore without the keys keeps the
    secrets as they are)."""
    import tomli_w

    if current is None:
        return incoming
    secrets = set(secret_names(current))
    kept = {k: v for k, v in _settings(current, "the current settings").items() if k in secrets}
    if not kept:
        return incoming
    table = tomllib.loads(incoming.decode("utf-8"))
    given = _settings(incoming, "the archive's settings")
    for name, value in kept.items():
        if name not in given:
            _nested_set(table, name, value)
    return tomli_w.dumps(table).encode("utf-8")


# --- what a restore changes ---------------------------------------------------------------------------------------

def _settings(data: bytes | None, what: str) -> dict[str, Any]:
    from appliance.config import flatten

    if data is None:
        return {}
    try:
        return flatten(tomllib.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BackupError(f"{what} is not readable TOML: {exc}") from None


def _shown(name: str, value: Any) -> str:
    from appliance.config import BY_NAME, shown

    setting = BY_NAME.get(name)
    return repr(shown(setting, value) if setting is not None else value)


def plan(current: Contents, incoming: Contents, keys_kept: Iterable[str] = ()) -> list[str]:
    """One line per change that restoring ``incoming`` over ``current`` makes; secrets are masked."""
    lines: list[str] = []
    for name in SETTINGS_FILES:
        old_file, new_file = current.file(name), incoming.file(name)
        if new_file is None and name == "config.toml":
            continue  # the archive has no configuration file: the one in place stays
        old, new = _settings(old_file and old_file.data, f"the current {name}"), \
            _settings(new_file and new_file.data, f"the archive's {name}")
        for key in sorted(set(old) | set(new)):
            if key not in new:
                lines.append(f"{name}: {key} removed (was {_shown(key, old[key])})")
            elif key not in old:
                lines.append(f"{name}: {key} = {_shown(key, new[key])} (new)")
            elif old[key] != new[key]:
                lines.append(f"{name}: {key} = {_shown(key, new[key])} (was {_shown(key, old[key])})")
    lines.extend(_users_plan(current.users, incoming.users))
    for name in ("snmp-users.toml", "snmp-engine-id", "ptp-sa.cfg"):
        old_file, new_file = current.file(name), incoming.file(name)
        if new_file is None:
            continue
        if old_file is None:
            lines.append(f"{name}: written ({new_file.path})")
        elif old_file.data != new_file.data:
            lines.append(f"{name}: replaced ({new_file.path})")
    old_keys = {k.name: k.data for k in current.keys}
    for key in incoming.keys:
        if key.name.startswith(SEALED_SETTINGS):
            continue  # shown as the settings file it is
        if key.name not in old_keys:
            lines.append(f"key {key.name}: written")
        elif old_keys[key.name] != key.data:
            lines.append(f"key {key.name}: replaced")
    kept = sorted(set(keys_kept))
    if kept:
        lines.append(f"keys kept as they are (not restored): {', '.join(kept)}")
    return lines


def _users_plan(old: Users, new: Users) -> list[str]:
    lines = []
    before = {n: (r, s, h) for n, r, s, h, _ in old.users}
    after = {n: (r, s, h) for n, r, s, h, _ in new.users}
    for name in sorted(set(before) | set(after)):
        if name not in after:
            lines.append(f"console user {name}: removed")
        elif name not in before:
            lines.append(f"console user {name}: added ({after[name][0]})")
        else:
            if before[name][0] != after[name][0]:
                lines.append(f"console user {name}: role {after[name][0]} (was {before[name][0]})")
            if before[name][1:] != after[name][1:]:
                lines.append(f"console user {name}: password replaced")
    if {t[0] for t in old.tokens} != {t[0] for t in new.tokens}:
        lines.append(f"API tokens: {len(new.tokens)} (were {len(old.tokens)})")
    return lines
