"""The audit log's hash chain: what a record is, how its hash is computed, and how a chain is checked.

Pure core: no I/O, no clock reads.  Each record's hash is SHA-256 over a canonical JSON encoding of its content,
including its sequence number and the previous record's hash, so altering, removing or reordering any stored record
breaks the chain at that record.  Retention removes the oldest records and appends a ``checkpoint`` record whose
detail carries the sequence number and hash of the last record removed: the remaining chain verifies from there.

A hash chain detects edits of records in place, but not a store cut short: deleting the newest records leaves a
chain that verifies.  The store therefore keeps its head (seq, hash) in a second place, a head file, and
``head_mismatch`` says when a store does not reach it.  When the appliance finds its store cut short or rewritten it
keeps that store as evidence and starts a new one whose first record, of kind ``audit.truncated`` (``TRUNCATED``),
carries the head the old store should have reached and links to that head's hash: sequence numbers go on after it,
never reused, and ``restart_notice`` reports the loss each time the chain is verified while that record stands.

A hash chain cannot stop someone who can write both the store and its head file from rewriting the whole tail.  That
is what signed export bundles (``appliance.audit.bundle``) and remote syslog copies are for.
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
TRUNCATED = "audit.truncated"  # first record of a store that replaced one found cut short or rewritten
HEAD_NOTE = "audit.head"  # the appliance (re)wrote a head file the store did not have
HEAD_SEQ, HEAD_HASH, FOUND_SEQ, FOUND_HASH, EVIDENCE = "head_seq", "head_hash", "found_seq", "found_hash", "evidence"
# The kinds the appliance writes; others are allowed.
KINDS = ("clock.state", "reference", "alarm.raised", "alarm.cleared", "alarm.ack", "config.change", "login",
         "login.failed", "command", "output", "start", "stop", "ptp.foreign-master", CHECKPOINT, TRUNCATED, HEAD_NOTE)


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
    warnings: tuple[str, ...] = ()  # stores only: one line each, for what is suspicious without being a break
    earlier: int = 0  # stores only: records an earlier check verified, spot-checked now rather than re-hashed


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


def find_anchor(first_seq: int | None, checkpoints: Iterable[AuditRecord],
                first: AuditRecord | None = None) -> tuple[int, str] | None:
    """(seq, hash) the stored chain starts from: GENESIS when it starts at record 1 (or is empty), the recorded head
    when its first record ``first`` restarts the chain after a truncation, else the pruned record named by a
    checkpoint; None when records are gone and nothing accounts for them."""
    if first_seq is None or first_seq == 1:
        return 0, GENESIS
    restart = restart_anchor(first) if first is not None and first.seq == first_seq else None
    if restart is not None:
        return restart
    for record in checkpoints:
        pruned_seq, pruned_hash = record.detail.get(PRUNED_SEQ), record.detail.get(PRUNED_HASH)
        if record.kind == CHECKPOINT and pruned_seq == first_seq - 1 and isinstance(pruned_hash, str):
            return pruned_seq, pruned_hash
    return None


def verify_stored(records: list[AuditRecord]) -> VerifyResult:
    """Check a whole stored chain (oldest first): from GENESIS, from the checkpoint that records its pruning, or
    from the head a restarted chain names."""
    first_seq = records[0].seq if records else None
    anchor = find_anchor(first_seq, (r for r in records if r.kind == CHECKPOINT), records[0] if records else None)
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


# --- the head kept beside the store, and chains restarted after a truncation ------------------------------------


def head_mismatch(head_seq: int, head_hash: str, newest_seq: int, first_seq: int | None,
                  hash_at_head_seq: str | None) -> VerifyResult | None:
    """Why a store does not reach the head its head file records, or None when it does.

    ``newest_seq`` is the store's newest record (0 when empty), ``first_seq`` its oldest, ``hash_at_head_seq`` the
    hash of its record ``head_seq`` (None when it has none).  A store *ahead* of the head file is fine: the head file
    is written after the store commits, so a crash between the two leaves it a step behind.
    """
    head = f"seq {head_seq} (hash {_short(head_hash)})"
    if newest_seq < head_seq:
        where = "the store is empty" if newest_seq == 0 else f"the store ends at record {newest_seq}"
        return VerifyResult(False, 0, newest_seq + 1,
                            f"{_records(newest_seq + 1, head_seq)} missing: the head file records {head} but {where}")
    if hash_at_head_seq is None:
        if first_seq is not None and head_seq < first_seq:
            return None  # pruned since the head file was written: the chain's own anchor accounts for it
        return VerifyResult(False, 0, head_seq, f"record {head_seq} is missing: the head file records {head}")
    if hash_at_head_seq != head_hash:
        return VerifyResult(False, 0, head_seq, f"record {head_seq} was rewritten: its hash is "
                                                f"{_short(hash_at_head_seq)} but the head file records {head}")
    return None


def restart_detail(head_seq: int, head_hash: str, found_seq: int, found_hash: str | None,
                   evidence: str) -> dict[str, Any]:
    """Detail of the ``TRUNCATED`` record that starts a new store: the head the old store should have reached, where
    it really ended, and the file it is kept in."""
    return {HEAD_SEQ: head_seq, HEAD_HASH: head_hash, FOUND_SEQ: found_seq, FOUND_HASH: found_hash,
            EVIDENCE: evidence}


def restart_seq(head_seq: int, found_seq: int) -> int:
    """The seq of the record that restarts the chain: after every number either the head file or the store used."""
    return max(head_seq, found_seq) + 1


def restart_anchor(record: AuditRecord) -> tuple[int, str] | None:
    """(seq, hash) a ``TRUNCATED`` record chains from (the seq before it, the recorded head's hash), or None when
    ``record`` is not one or its detail does not fit its place."""
    fields = _restart_fields(record)
    if fields is None:
        return None
    head_seq, head_hash, found_seq = fields
    if record.seq != restart_seq(head_seq, found_seq):
        return None
    return record.seq - 1, head_hash


def restart_notice(record: AuditRecord) -> VerifyResult | None:
    """The loss a ``TRUNCATED`` record stands for, as a failed result naming the records lost; None when ``record``
    is not one."""
    fields = _restart_fields(record)
    if fields is None:
        return None
    head_seq, head_hash, found_seq = fields
    evidence = record.detail.get(EVIDENCE)
    kept = f"; the old store is kept as {evidence}" if isinstance(evidence, str) and evidence else ""
    head = f"{head_seq} (hash {_short(head_hash)})"
    restarted = f"record {record.seq} restarts the chain from the recorded head{kept}"
    if found_seq < head_seq:
        where = "found empty" if found_seq == 0 else f"found ending at record {found_seq}"
        return VerifyResult(False, 0, found_seq + 1, f"{_records(found_seq + 1, head_seq)} missing: the store was "
                                                     f"{where} where the head file recorded {head}; {restarted}")
    return VerifyResult(False, 0, head_seq, f"record {head_seq} was rewritten: the store no longer held the hash the "
                                            f"head file recorded for record {head}; {restarted}")


def _restart_fields(record: AuditRecord) -> tuple[int, str, int] | None:
    if record.kind != TRUNCATED:
        return None
    head_seq, head_hash, found_seq = (record.detail.get(k) for k in (HEAD_SEQ, HEAD_HASH, FOUND_SEQ))
    if not (_is_count(head_seq) and _is_count(found_seq) and isinstance(head_hash, str)):
        return None
    return head_seq, head_hash, found_seq


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _records(first: int, last: int) -> str:
    return f"record {last} is" if first == last else f"records {first}..{last} are"


def _short(digest: str) -> str:
    return digest[:12] + "..."
