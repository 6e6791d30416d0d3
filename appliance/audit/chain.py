"""The audit log's hash chain: what a record is, how its hash is computed, and how a chain is checked.

Pure core: no I/O, no clock reads.  Each record's hash is SHA-256 over a canonical JSON encoding of its content,
including its sequence number and the previous record's hash, so altering, removing or reordering any stored record
breaks the chain at that record.  Retention removes the oldest records and appends a ``checkpoint`` record whose
detail carries the sequence number and hash of the last record removed: the remaining chain verifies from there.

A hash chain detects edits of records in place; it cannot stop someone who can write the store from rewriting its
whole tail.  That is what signed export bundles (``appliance.audit.bundle``) and remote syslog copies are for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

GENESIS = "0" * 64  # prev_hash of record 1
CHECKPOINT = "checkpoint"
PRUNED_SEQ, PRUNED_HASH, PRUNED_COUNT = "pruned_through_seq", "pruned_through_hash", "pruned_records"
# The kinds the appliance writes; others are allowed.
KINDS = ("clock.state", "reference", "alarm.raised", "alarm.cleared", "config.change", "login", "login.failed",
         "command", "output", "start", "stop", "ptp.foreign-master", CHECKPOINT)


class AuditError(Exception):
    """An audit store, key or bundle cannot be used (the message names the file)."""


@dataclass(frozen=True)
class AuditRecord:
    """One entry of the audit log.  ``detail`` is JSON-able and must not be mutated."""

    seq: int  # 1, 2, 3 ... without gaps
    at_tai_ns: int
    kind: str  # e.g. "alarm.raised"; see KINDS
    actor: str  # a user name, "system", "snmp:<user>" ...
    text: str  # one human-readable line
    detail: dict[str, Any] = field(hash=False)
    prev_hash: str  # hex SHA-256 of the previous record, GENESIS for record 1
    hash: str  # hex SHA-256 of this record's content (record_hash)


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of checking a chain (or a bundle).  ``reason`` is one line: what is wrong, or what was checked."""

    ok: bool
    checked: int  # records found intact before the first problem
    first_bad_seq: int | None
    reason: str
    signer_fingerprint: str | None = None  # bundles only: SHA-256 of the signing key
    signer_trusted: bool = False  # bundles only: the signature was checked against a key the caller trusts


def canonical_json(value: Any) -> bytes:
    """The one byte encoding that is hashed and signed: sorted keys, no spaces, UTF-8, no NaN/Infinity."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def normalize_detail(detail: Mapping[str, Any] | None) -> dict[str, Any]:
    """``detail`` as it will read back from storage (tuples become lists); ValueError if it is not JSON-able."""
    if detail is None:
        return {}
    if not isinstance(detail, Mapping) or not all(isinstance(k, str) for k in _all_keys(detail)):
        raise ValueError("audit detail must be a mapping with string keys")
    try:
        return json.loads(canonical_json(dict(detail)))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"audit detail is not JSON-able: {exc}") from None


def _all_keys(value: Any) -> Iterable[Any]:
    # json.dumps would turn 1 into "1" silently and fail on mixed key types: refuse non-string keys at any depth.
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield key
            yield from _all_keys(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            yield from _all_keys(inner)


def record_hash(prev_hash: str, seq: int, at_tai_ns: int, kind: str, actor: str, text: str,
                detail: Mapping[str, Any]) -> str:
    """Hex SHA-256 of a record's canonical content (everything but its own hash)."""
    content = {"prev_hash": prev_hash, "seq": seq, "at_tai_ns": at_tai_ns, "kind": kind, "actor": actor,
               "text": text, "detail": detail}
    return hashlib.sha256(canonical_json(content)).hexdigest()


def build_record(prev_hash: str, seq: int, at_tai_ns: int, kind: str, actor: str, text: str,
                 detail: Mapping[str, Any] | None = None) -> AuditRecord:
    """A new record linked to ``prev_hash`` (the caller supplies the next seq)."""
    clean = normalize_detail(detail)
    digest = record_hash(prev_hash, seq, at_tai_ns, kind, actor, text, clean)
    return AuditRecord(seq, at_tai_ns, kind, actor, text, clean, prev_hash, digest)


def content_matches(record: AuditRecord) -> bool:
    """True when the record's stored hash is the hash of its content."""
    try:
        expected = record_hash(record.prev_hash, record.seq, record.at_tai_ns, record.kind, record.actor,
                               record.text, record.detail)
    except (TypeError, ValueError):
        return False  # content that cannot even be encoded was not written by append
    return expected == record.hash


def verify_chain(records: Iterable[AuditRecord], anchor_hash: str, anchor_seq: int | None = None) -> VerifyResult:
    """Walk ``records`` in the order given and name the first record that breaks the chain.

    ``anchor_hash`` is the hash the first record must link to (GENESIS, or a pruned record's hash) and
    ``anchor_seq`` that record's seq (0 for GENESIS, the default then); with no anchor_seq the first record may
    have any seq.  ``first_bad_seq`` is the seq the chain expected at the break, so a missing or moved record is
    named by its own number.
    """
    prev_hash = anchor_hash
    prev_seq = anchor_seq if anchor_seq is not None else (0 if anchor_hash == GENESIS else None)
    checked = 0
    for record in records:
        position = record.seq if prev_seq is None else prev_seq + 1
        if not content_matches(record):
            return VerifyResult(False, checked, position, f"record {position}: hash does not match its content")
        if record.seq != position:
            after = _predecessor(prev_seq)
            return VerifyResult(False, checked, position, f"record {position}: missing or out of order "
                                                          f"({after} is followed by record {record.seq})")
        if record.prev_hash != prev_hash:
            link = _link_name(prev_seq, checked, anchor_hash)
            return VerifyResult(False, checked, position, f"record {position}: prev_hash does not match {link}")
        prev_hash, prev_seq = record.hash, record.seq
        checked += 1
    origin = _anchor_name(anchor_seq, anchor_hash)
    return VerifyResult(True, checked, None, f"{checked} record(s) chained from {origin}")


def _predecessor(prev_seq: int | None) -> str:
    return "the start of the chain" if not prev_seq else f"record {prev_seq}"


def _link_name(prev_seq: int | None, checked: int, anchor_hash: str) -> str:
    if checked:
        return f"the hash of record {prev_seq}"
    if anchor_hash == GENESIS and not prev_seq:
        return "the genesis hash"
    return "the anchor" + (f" (the hash of pruned record {prev_seq})" if prev_seq else "")


def _anchor_name(anchor_seq: int | None, anchor_hash: str) -> str:
    if anchor_hash == GENESIS and not anchor_seq:
        return "genesis"
    return f"the anchor after record {anchor_seq}" if anchor_seq else f"the anchor {anchor_hash[:16]}..."


def find_anchor(first_seq: int | None, checkpoints: Iterable[AuditRecord]) -> tuple[int, str] | None:
    """(seq, hash) the stored chain starts from: GENESIS when it starts at record 1 (or is empty), else the
    pruned record named by a checkpoint; None when records are gone and no checkpoint accounts for them."""
    if first_seq is None or first_seq == 1:
        return 0, GENESIS
    for record in checkpoints:
        pruned_seq, pruned_hash = record.detail.get(PRUNED_SEQ), record.detail.get(PRUNED_HASH)
        if record.kind == CHECKPOINT and pruned_seq == first_seq - 1 and isinstance(pruned_hash, str):
            return pruned_seq, pruned_hash
    return None


def verify_stored(records: list[AuditRecord]) -> VerifyResult:
    """Check a whole stored chain (oldest first): from GENESIS, or from the checkpoint that records its pruning."""
    first_seq = records[0].seq if records else None
    anchor = find_anchor(first_seq, (r for r in records if r.kind == CHECKPOINT))
    if anchor is None:
        return unanchored(first_seq or 0)
    return verify_chain(records, anchor[1], anchor[0])


def unanchored(first_seq: int) -> VerifyResult:
    """The result for a chain whose oldest records are gone without a checkpoint."""
    return VerifyResult(False, 0, first_seq, f"record {first_seq}: the records before it are gone and no "
                                             "checkpoint records their pruning")


def checkpoint_detail(pruned_seq: int, pruned_hash: str, pruned_count: int) -> dict[str, Any]:
    """Detail of the checkpoint record retention appends after removing records up to ``pruned_seq``."""
    return {PRUNED_SEQ: pruned_seq, PRUNED_HASH: pruned_hash, PRUNED_COUNT: pruned_count}
