"""The audit log on disk: an append-only, hash-chained SQLite table with retention.

Edge module: SQLite file I/O.  It reads no clock: every instant (a record's time, the retention cutoff) is passed in.

Durability: WAL journal with ``synchronous=FULL``, and each append is its own committed transaction, so a record that
``append`` returned survives a kill -9 or a power cut.  Retention (``prune``) deletes the oldest records and appends
the checkpoint that anchors the rest in the same transaction, so no crash leaves a chain that does not verify.

Threads: one connection guarded by a lock serves appends (from the event loop) and short reads (from web threads);
``verify`` and export snapshots read on a connection of their own, so a long check never holds up an append.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from appliance.audit.chain import (CHECKPOINT, GENESIS, AuditError, AuditRecord, VerifyResult, build_record,
                                   checkpoint_detail, find_anchor, unanchored, verify_chain)
from appliance.units import NS_PER_S

__all__ = ["STORE_FILE", "AuditError", "AuditStore"]

STORE_FILE = "audit.sqlite"
APPLICATION_ID = 0x41554454  # "AUDT" in the SQLite header: marks the file as ours
FORMAT_VERSION = 1  # PRAGMA user_version
TABLE = "audit_record"
COLUMNS = ("seq", "at_tai_ns", "kind", "actor", "text", "detail", "prev_hash", "hash")
_SCHEMA = (
    (f"CREATE TABLE {TABLE} (seq INTEGER PRIMARY KEY, at_tai_ns INTEGER NOT NULL, kind TEXT NOT NULL, "
     "actor TEXT NOT NULL, text TEXT NOT NULL, detail TEXT NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL)"),
    f"CREATE INDEX {TABLE}_at ON {TABLE} (at_tai_ns)",
    f"CREATE INDEX {TABLE}_kind ON {TABLE} (kind)",
)
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM {TABLE}"
_BUSY_TIMEOUT_S = 10.0  # another process (the CLI) may briefly hold the write lock
_INT64 = 2**63
_FILE_MODE, _DIR_MODE = 0o600, 0o700


class AuditStore:
    """Append-only hash-chained audit records in one SQLite file."""

    def __init__(self, path: Path, max_age_s: int | None = None, max_records: int | None = None, *,
                 create: bool = True) -> None:
        if max_age_s is not None and max_age_s < 1:
            raise ValueError(f"max_age_s must be >= 1, not {max_age_s}")
        if max_records is not None and max_records < 1:
            raise ValueError(f"max_records must be >= 1, not {max_records}")
        self.path = Path(path)
        self.max_age_s, self.max_records = max_age_s, max_records
        self._lock = threading.Lock()
        if not self.path.exists():
            if not create:
                raise AuditError(f"no audit store at {self.path}")
            _create_file(self.path)
        self._conn = self._connect()
        try:
            with self._errors("cannot open it"):
                _prepare(self._conn, self.path)
        except BaseException:
            self._conn.close()
            raise

    # --- writing ---------------------------------------------------------------------------------------------

    def append(self, at_tai_ns: int, kind: str, actor: str, text: str,
               detail: Mapping[str, Any] | None = None) -> AuditRecord:
        """Chain a record onto the head and commit it; the record returned is durable.  ValueError for a bad
        field (an instant outside int64, an empty kind, a detail that is not JSON-able)."""
        _check_fields(at_tai_ns, kind, actor, text)
        with self._lock, self._errors("cannot append"), self._write_transaction():
            return self._append_locked(at_tai_ns, kind, actor, text, detail)

    def prune(self, now_tai_ns: int) -> int:
        """Remove the records retention no longer keeps (older than max_age_s, beyond max_records; oldest first)
        and, if any were removed, append a checkpoint naming the last one.  Returns how many were removed."""
        _check_fields(now_tai_ns, CHECKPOINT, "system", "")
        with self._lock, self._errors("cannot prune"), self._write_transaction():
            last = self._last_to_prune(now_tai_ns)
            if last is None:
                return 0
            pruned_hash = self._conn.execute(f"SELECT hash FROM {TABLE} WHERE seq = ?", (last,)).fetchone()[0]
            removed = self._conn.execute(f"DELETE FROM {TABLE} WHERE seq <= ?", (last,)).rowcount
            text = f"retention removed {removed} record(s) up to record {last}"
            self._append_locked(now_tai_ns, CHECKPOINT, "system", text, checkpoint_detail(last, pruned_hash, removed))
            return removed

    def _append_locked(self, at_tai_ns: int, kind: str, actor: str, text: str,
                       detail: Mapping[str, Any] | None) -> AuditRecord:
        head = self._conn.execute(f"SELECT seq, hash FROM {TABLE} ORDER BY seq DESC LIMIT 1").fetchone()
        prev_seq, prev_hash = head if head is not None else (0, None)
        record = build_record(prev_hash or GENESIS, prev_seq + 1, at_tai_ns, kind, actor, text, detail)
        self._conn.execute(f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           _row_of(record))
        return record

    def _last_to_prune(self, now_tai_ns: int) -> int | None:
        first, last, total = self._conn.execute(f"SELECT MIN(seq), MAX(seq), COUNT(*) FROM {TABLE}").fetchone()
        if not total:
            return None
        through = first - 1
        if self.max_records is not None and total > self.max_records:
            through = first + (total + 1 - self.max_records) - 1  # +1: room for the checkpoint itself
        if self.max_age_s is not None:
            # Only the oldest *prefix* goes (a chain can only lose its start); a record stamped in the future
            # keeps everything after it, rather than losing records younger than max_age_s.
            cutoff = now_tai_ns - self.max_age_s * NS_PER_S
            young = self._conn.execute(f"SELECT MIN(seq) FROM {TABLE} WHERE at_tai_ns >= ?",
                                       (_clamp64(cutoff),)).fetchone()[0]
            through = max(through, last if young is None else young - 1)
        return through if through >= first else None

    @contextmanager
    def _write_transaction(self) -> Iterator[None]:
        self._conn.execute("BEGIN IMMEDIATE")  # takes the write lock now: the head read below stays the head
        try:
            yield
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:  # a failed COMMIT (disk full) leaves it open: the next BEGIN would fail
                self._conn.rollback()
            raise

    # --- reading ---------------------------------------------------------------------------------------------

    def head(self) -> AuditRecord | None:
        """The newest record, or None for an empty store."""
        with self._lock, self._errors("cannot read"):
            row = self._conn.execute(f"{_SELECT} ORDER BY seq DESC LIMIT 1").fetchone()
        return None if row is None else _record_of(row)

    def count(self) -> int:
        with self._lock, self._errors("cannot read"):
            return int(self._conn.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0])

    def records(self, since_tai_ns: int | None = None, until_tai_ns: int | None = None,
                kinds: Sequence[str] | None = None, search: str | None = None, limit: int | None = 200,
                before_seq: int | None = None) -> list[AuditRecord]:
        """Records newest first: since_tai_ns <= at < until_tai_ns, kind in ``kinds``, ``search`` a case-insensitive
        substring of the text, actor or kind, seq < ``before_seq`` (the next page); at most ``limit`` (None: all)."""
        where, params = _filters(since_tai_ns, until_tai_ns, kinds, search, before_seq)
        sql = f"{_SELECT}{where} ORDER BY seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(int(limit), 0))
        with self._lock, self._errors("cannot read"):
            rows = self._conn.execute(sql, params).fetchall()
        return [_record_of(row) for row in rows]

    def snapshot_span(self, since_tai_ns: int, until_tai_ns: int) -> tuple[list[AuditRecord], AuditRecord | None]:
        """(records, head) read in one snapshot: the contiguous run of records, oldest first, from the first to
        the last record stamped in [since_tai_ns, until_tai_ns) (records between them are included whatever their
        stamps, so the run is a verifiable piece of the chain), and the newest record at that moment."""
        with self._reader() as conn:
            first, last = conn.execute(f"SELECT MIN(seq), MAX(seq) FROM {TABLE} WHERE at_tai_ns >= ? AND "
                                       "at_tai_ns < ?", (_clamp64(since_tai_ns), _clamp64(until_tai_ns))).fetchone()
            head_row = conn.execute(f"{_SELECT} ORDER BY seq DESC LIMIT 1").fetchone()
            head = None if head_row is None else _record_of(head_row)
            if first is None:
                return [], head
            rows = conn.execute(f"{_SELECT} WHERE seq BETWEEN ? AND ? ORDER BY seq", (first, last)).fetchall()
            return [_record_of(row) for row in rows], head

    def verify(self) -> VerifyResult:
        """Check the SQLite file's structure (tables and indexes), then the whole stored chain, from GENESIS or from
        the checkpoint that records its pruning."""
        with self._reader() as conn:
            damage = [" ".join(row[0].split()) for row in conn.execute("PRAGMA quick_check(3)")]
            if damage != ["ok"]:
                return VerifyResult(False, 0, None, f"the database file is damaged: {'; '.join(damage)}")
            first = conn.execute(f"SELECT MIN(seq) FROM {TABLE}").fetchone()[0]
            checkpoints = (_record_of(row) for row in
                           conn.execute(f"{_SELECT} WHERE kind = ? ORDER BY seq", (CHECKPOINT,)).fetchall())
            anchor = find_anchor(first, checkpoints)
            if anchor is None:
                return unanchored(first)
            rows = conn.execute(f"{_SELECT} ORDER BY seq")  # streamed: a large store is not loaded at once
            return verify_chain((_record_of(row) for row in rows), anchor[1], anchor[0])

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        with self._errors("cannot read"):
            conn = self._connect()
            try:
                conn.execute("BEGIN")  # one snapshot for the whole read, even while appends go on
                yield conn
            finally:
                conn.close()

    # --- plumbing --------------------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> AuditStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(str(self.path), timeout=_BUSY_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise AuditError(f"audit store {self.path}: cannot open it: {exc}") from None
        conn.create_function("audit_contains", 2, _contains, deterministic=True)
        return conn

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise AuditError(f"audit store {self.path}: {doing}: {exc}") from None


def _create_file(path: Path) -> None:
    """Create the empty database file readable by its owner only (SQLite gives -wal and -shm the same mode)."""
    try:
        path.parent.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, _FILE_MODE))
    except FileExistsError:
        pass  # another process created it first: fine, _prepare decides whether it is usable
    except OSError as exc:
        raise AuditError(f"audit store {path}: cannot create it: {exc.strerror or exc}") from None


def _prepare(conn: sqlite3.Connection, path: Path) -> None:
    """Check that the file is an audit store (or empty), create the schema if empty, set WAL and FULL sync."""
    if not _is_empty(conn):
        _check_ours(conn, path)  # before any write: a foreign database is left exactly as it was
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("BEGIN IMMEDIATE")
    try:
        if _is_empty(conn):  # checked again under the write lock: two processes may race to create it
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version={FORMAT_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.rollback()
        raise


def _is_empty(conn: sqlite3.Connection) -> bool:
    tables = conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]
    return tables == 0 and conn.execute("PRAGMA application_id").fetchone()[0] == 0


def _check_ours(conn: sqlite3.Connection, path: Path) -> None:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if app_id != APPLICATION_ID:
        raise AuditError(f"audit store {path}: not an audit store (an SQLite database of something else)")
    if version != FORMAT_VERSION:
        raise AuditError(f"audit store {path}: format version {version}, this release reads {FORMAT_VERSION}")
    columns = tuple(row[1] for row in conn.execute(f"PRAGMA table_info({TABLE})"))
    if columns != COLUMNS:
        raise AuditError(f"audit store {path}: table {TABLE} has columns {columns}, expected {COLUMNS}")


def _check_fields(at_tai_ns: int, kind: str, actor: str, text: str) -> None:
    if isinstance(at_tai_ns, bool) or not isinstance(at_tai_ns, int) or not -_INT64 <= at_tai_ns < _INT64:
        raise ValueError(f"at_tai_ns must be an int within int64, not {at_tai_ns!r}")
    if not isinstance(kind, str) or not kind:
        raise ValueError("kind must be a non-empty string")
    if not isinstance(actor, str) or not isinstance(text, str):
        raise ValueError("actor and text must be strings")


def _filters(since_tai_ns: int | None, until_tai_ns: int | None, kinds: Sequence[str] | None, search: str | None,
             before_seq: int | None) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if since_tai_ns is not None:
        clauses.append("at_tai_ns >= ?")
        params.append(_clamp64(since_tai_ns))
    if until_tai_ns is not None:
        clauses.append("at_tai_ns < ?")
        params.append(_clamp64(until_tai_ns))
    if kinds is not None:
        kinds = list(kinds)
        clauses.append(f"kind IN ({', '.join('?' * len(kinds))})" if kinds else "0")
        params += kinds
    if search:
        clauses.append("(audit_contains(text, ?) OR audit_contains(actor, ?) OR audit_contains(kind, ?))")
        params += [search.casefold()] * 3
    if before_seq is not None:
        clauses.append("seq < ?")
        params.append(before_seq)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _contains(haystack: object, needle_casefolded: str) -> bool:
    # SQLite's LIKE and lower() fold ASCII only; an operator searching "größe" or "ÉTAT" expects a match.
    return isinstance(haystack, str) and needle_casefolded in haystack.casefold()


def _clamp64(ns: int) -> int:
    return max(-_INT64, min(_INT64 - 1, ns))


def _row_of(record: AuditRecord) -> tuple[Any, ...]:
    detail = json.dumps(record.detail, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return (record.seq, record.at_tai_ns, record.kind, record.actor, record.text, detail, record.prev_hash,
            record.hash)


def _record_of(row: Sequence[Any]) -> AuditRecord:
    seq, at_tai_ns, kind, actor, text, detail_text, prev_hash, digest = row
    try:
        detail = json.loads(detail_text)
    except (TypeError, ValueError):
        detail = {"unreadable detail": detail_text}  # an edited row still loads; its hash will not match
    if not isinstance(detail, dict):
        detail = {"unreadable detail": detail_text}
    return AuditRecord(seq, at_tai_ns, kind, actor, text, detail, prev_hash, digest)
