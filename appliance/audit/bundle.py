"""Signed export bundles of the audit log, and the appliance's signing key.

Edge module: reads and writes the key files in the state directory and the bundle files; reads no clock.

A bundle is one JSON file holding a contiguous run of records (oldest first, every field), the anchor they chain
from, the chain head when it was written, the public key and an Ed25519 signature over the canonical encoding
(``chain.canonical_json``) of everything but the signature.  Whoever holds the appliance's public key (handed over
out of band, e.g. from ``<state_dir>/audit-signing.pub``) can check that nothing in it was altered, added or left out.
Fingerprints are the SHA-256 of the key's DER SubjectPublicKeyInfo, which
``openssl pkey -pubin -in audit-signing.pub -outform DER | sha256sum`` prints too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from appliance.audit.chain import AuditError, AuditRecord, VerifyResult, canonical_json, verify_chain
from appliance.audit.store import AuditStore
from appliance.edge.persist import UnsafePathError, fsync_directory, read_private, refuse_link, replace_file, write_temp

KEY_FILE, PUBLIC_KEY_FILE = "audit-signing.key", "audit-signing.pub"
BUNDLE_FORMAT, BUNDLE_VERSION = "appliance-audit-bundle", 1
SIGNATURE_ALGORITHM = "Ed25519"
_RECORD_FIELDS = {"seq": int, "at_tai_ns": int, "kind": str, "actor": str, "text": str, "detail": dict,
                  "prev_hash": str, "hash": str}
_SIGNATURE_HEX = re.compile(r"[0-9a-f]{128}")  # strict: every changed character changes the signature bytes
_KEY_MODE, _PUBLIC_MODE, _DIR_MODE = 0o600, 0o644, 0o700


@dataclass(frozen=True)
class ExportResult:
    path: Path
    records: int
    first_seq: int
    last_seq: int
    key_fingerprint: str


# --- the signing key -----------------------------------------------------------------------------------------


def load_or_create_key(state_dir: Path) -> Ed25519PrivateKey:
    """The appliance's audit signing key from ``<state_dir>/audit-signing.key`` (PEM, mode 0600), created on first
    use; ``audit-signing.pub`` beside it is (re)written when missing or stale.  AuditError naming the file if the
    key cannot be read or is not an Ed25519 key, or when a symbolic link is where the key belongs (raised from the
    UnsafePathError naming it): a key someone else chose, or one written into a file someone else reads, is never
    used."""
    state_dir = Path(state_dir)
    key_path = state_dir / KEY_FILE
    try:
        state_dir.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
        try:
            key = _parse_private_key(read_private(key_path), key_path)
        except FileNotFoundError:
            key = _create_key(state_dir, key_path)
        _ensure_public_file(state_dir / PUBLIC_KEY_FILE, key.public_key())
    except UnsafePathError as exc:
        raise AuditError(f"audit signing key refused: {exc.strerror or exc}") from exc
    except OSError as exc:
        raise AuditError(f"audit signing key {key_path}: {exc.strerror or exc}") from None
    return key


def _parse_private_key(pem: bytes, path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise AuditError(f"audit signing key {path}: not a readable unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise AuditError(f"audit signing key {path}: not an Ed25519 key")
    return key


def _create_key(state_dir: Path, key_path: Path) -> Ed25519PrivateKey:
    refuse_link(key_path)  # one planted since the read (a dangling one is refused there already)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    temp = write_temp(state_dir, pem, _KEY_MODE, prefix=".audit-")
    try:
        # Atomic and exclusive, and never through a link: a link's name is taken, so this fails rather than follow
        # it.  (write_private would rename over the path: safe from links too, but two processes could then each
        # sign with a key of their own.)
        os.link(temp, key_path)
    except FileExistsError:
        return _parse_private_key(read_private(key_path), key_path)  # another process created it first
    finally:
        temp.unlink(missing_ok=True)
    fsync_directory(state_dir)
    return key


def _ensure_public_file(path: Path, public: Ed25519PublicKey) -> None:
    pem = public_key_pem(public)
    try:
        if path.read_bytes() == pem:
            return
    except FileNotFoundError:
        pass
    replace_file(path, pem, _PUBLIC_MODE, prefix=".audit-")


def public_key_pem(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def key_fingerprint(public: Ed25519PublicKey) -> str:
    """Hex SHA-256 of the DER SubjectPublicKeyInfo."""
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def load_public_key(pem: bytes, origin: str = "public key") -> Ed25519PublicKey:
    """An Ed25519 public key from PEM; ValueError naming ``origin`` otherwise."""
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{origin}: not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{origin}: not an Ed25519 public key")
    return key


# --- export --------------------------------------------------------------------------------------------------


def export_bundle(store: AuditStore, since_tai_ns: int, until_tai_ns: int, key: Ed25519PrivateKey, path: Path,
                  label_of: Callable[[int], str] | None = None) -> ExportResult:
    """Write the records stamped in [since_tai_ns, until_tai_ns) as a signed bundle at ``path`` (atomically).
    ``label_of`` turns a tai_ns into a UTC label added beside each instant for human readers.  ValueError when the
    range is empty or holds no record."""
    if until_tai_ns <= since_tai_ns:
        raise ValueError("the export range is empty: until must be after since")
    records, head = store.snapshot_span(since_tai_ns, until_tai_ns)
    if not records or head is None:
        raise ValueError("no audit records in the export range")
    document = _document(records, head, since_tai_ns, until_tai_ns, key.public_key(), label_of)
    signature = key.sign(canonical_json(document))
    document["signature"] = {"algorithm": SIGNATURE_ALGORITHM, "value": signature.hex()}
    text = json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    replace_file(Path(path), text.encode("utf-8"), _PUBLIC_MODE, prefix=".audit-")
    return ExportResult(Path(path), len(records), records[0].seq, records[-1].seq, key_fingerprint(key.public_key()))


def _document(records: list[AuditRecord], head: AuditRecord, since_tai_ns: int, until_tai_ns: int,
              public: Ed25519PublicKey, label_of: Callable[[int], str] | None) -> dict[str, Any]:
    span: dict[str, Any] = {"since_tai_ns": since_tai_ns, "until_tai_ns": until_tai_ns}
    if label_of is not None:
        span |= {"since_utc": label_of(since_tai_ns), "until_utc": label_of(until_tai_ns)}
    return {
        "format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "range": span,
        "anchor": {"seq": records[0].seq - 1, "hash": records[0].prev_hash},
        "head": {"seq": head.seq, "hash": head.hash},
        "records": [_record_json(r, label_of) for r in records],
        "public_key": public_key_pem(public).decode("ascii"), "public_key_sha256": key_fingerprint(public),
    }


def _record_json(record: AuditRecord, label_of: Callable[[int], str] | None) -> dict[str, Any]:
    out = {name: getattr(record, name) for name in _RECORD_FIELDS}
    if label_of is not None:
        out["at_utc"] = label_of(record.at_tai_ns)  # signed, but not part of the hash chain
    return out


# --- verification ---------------------------------------------------------------------------------------------


def verify_bundle(path: Path, trusted_public_key_pem: bytes | None = None) -> VerifyResult:
    """Check a bundle's signature (against the trusted key when given, else against the key it carries, which then
    only asserts itself) and the chain of its records from its anchor.  A problem in a record is named by its seq.
    OSError if the file cannot be read; ValueError if the trusted key is not an Ed25519 PEM public key."""
    raw = Path(path).read_bytes()
    trusted = None if trusted_public_key_pem is None else load_public_key(trusted_public_key_pem, "trusted key")
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return _failed(f"not a readable audit bundle: invalid JSON ({_shorten(str(exc))})")
    parsed = _parse_document(document)
    if isinstance(parsed, str):
        return _failed(parsed)
    records, anchor_seq, anchor_hash, embedded = parsed
    chain = verify_chain(records, anchor_hash, anchor_seq)
    signer = trusted if trusted is not None else embedded
    fingerprint = key_fingerprint(signer)
    signature_problem = _signature_problem(document, signer, trusted is not None, key_fingerprint(embedded))
    if not chain.ok:
        also = f"; {signature_problem}" if signature_problem else ""
        return VerifyResult(False, chain.checked, chain.first_bad_seq, chain.reason + also, fingerprint, False)
    if signature_problem:
        return VerifyResult(False, chain.checked, None, signature_problem, fingerprint, False)
    span = f"{len(records)} record(s), seq {records[0].seq}-{records[-1].seq}"
    if trusted is not None:
        return VerifyResult(True, chain.checked, None, f"{span}, signed by the trusted key {fingerprint}",
                            fingerprint, True)
    return VerifyResult(True, chain.checked, None, f"{span}, signed by key {fingerprint}, which is only "
                        "self-asserted: check it against the appliance's audit-signing.pub", fingerprint, False)


def _failed(reason: str) -> VerifyResult:
    return VerifyResult(False, 0, None, reason)


def _parse_document(document: Any) -> tuple[list[AuditRecord], int, str, Ed25519PublicKey] | str:
    """The bundle's records, anchor and embedded key, or a one-line problem."""
    if not isinstance(document, dict) or document.get("format") != BUNDLE_FORMAT:
        return "not an audit bundle (no \"format\": \"appliance-audit-bundle\")"
    if document.get("version") != BUNDLE_VERSION:
        return f"audit bundle version {_shorten(repr(document.get('version')))}, this release reads {BUNDLE_VERSION}"
    anchor, items = document.get("anchor"), document.get("records")
    if not (isinstance(anchor, dict) and _is_int(anchor.get("seq")) and isinstance(anchor.get("hash"), str)):
        return "audit bundle: the anchor is missing or malformed"
    if not isinstance(items, list) or not items:
        return "audit bundle: it holds no records"
    records = []
    for position, item in enumerate(items):
        record = _parse_record(item, anchor["seq"] + 1 + position)
        if isinstance(record, str):
            return record
        records.append(record)
    pem = document.get("public_key")
    try:
        embedded = load_public_key(pem.encode("ascii") if isinstance(pem, str) else b"", "the bundle's public key")
    except (ValueError, UnicodeEncodeError) as exc:
        return f"signature: {exc}"
    return records, anchor["seq"], anchor["hash"], embedded


def _parse_record(item: Any, expected_seq: int) -> AuditRecord | str:
    seq = item.get("seq") if isinstance(item, dict) else None
    name = f"record {seq if _is_int(seq) else expected_seq}"
    if not isinstance(item, dict):
        return f"{name}: not a JSON object"
    for field_name, kind in _RECORD_FIELDS.items():
        value = item.get(field_name)
        if not isinstance(value, kind) or (kind is int and not _is_int(value)):
            return f"{name}: field {field_name} is missing or not a{'n' if kind is int else ''} {kind.__name__}"
    return AuditRecord(**{field_name: item[field_name] for field_name in _RECORD_FIELDS})


def _signature_problem(document: dict[str, Any], signer: Ed25519PublicKey, trusted: bool,
                       embedded_fingerprint: str) -> str | None:
    signature = document.get("signature")
    if not isinstance(signature, dict) or signature.get("algorithm") != SIGNATURE_ALGORITHM:
        return f"signature: missing, or not an {SIGNATURE_ALGORITHM} signature"
    value = signature.get("value")
    if not isinstance(value, str) or not _SIGNATURE_HEX.fullmatch(value):
        return "signature: not 128 lowercase hex digits"
    if document.get("public_key_sha256") != embedded_fingerprint:
        return "signature: the public key's fingerprint does not match the key"
    signed = {k: v for k, v in document.items() if k != "signature"}
    try:
        signer.verify(bytes.fromhex(value), canonical_json(signed))
    except InvalidSignature:
        if trusted:
            return (f"signature does not verify against the trusted key {key_fingerprint(signer)} (the bundle "
                    f"names key {embedded_fingerprint})")
        return "signature does not match the bundle's contents: altered after signing"
    except ValueError as exc:  # canonical_json refuses NaN/Infinity an editor may have put in
        return f"signature: the contents cannot be encoded canonically ({exc})"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shorten(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
