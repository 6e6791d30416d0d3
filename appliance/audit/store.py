"""The audit log on disk: an append-only, hash-chained SQLite table with retention, and its head file.

Edge module: SQLite and head-file I/O.  It reads no clock: every instant (a record's time, the retention cutoff) is
passed in, and the shared verification is handed the caller's clock.

Durability: WAL journal with ``synchronous=FULL``, and each append is its own committed transaction, so a record that
``append`` returned survives a kill -9 or a power cut.  Retention (``prune``) deletes the oldest records and appends
the checkpoint that anchors the rest in the same transaction, so no crash leaves a chain that does not verify.

Head file: a chain verifies just as well without its newest records, so the newest record's (seq, hash) is also kept
in ``<store>.head`` (JSON, mode 0600), replaced atomically (temp file, fsync, rename, fsync of the directory) after
each committed append or prune.  Someone editing the database with sqlite3 does not update it.  The database commits
first, so after a crash the head file may be one transaction behind: a store *ahead* of its head file is fine, one
that ends before the head file's record, or holds another hash there, was cut short or rewritten (``check_head``,
``verify``).  The store also refuses to append on top of a store that no longer reaches the head it last wrote or
read (``AuditTruncated``): sequence numbers are never reused.  ``restart_chain`` is the way on: it keeps the store
as ``<store>.truncated-<n>`` (renamed, never deleted; a copy of the head file beside it as
``<store>.truncated-<n>.head``) and starts a new one whose first record (``audit.truncated``) continues the
numbering from the recorded head and links to its hash.

A missing head file is a warning for a store that never had one (a store written before head files: the appliance
writes one at its next start), and a failure for a store that did: the first head file written marks the store
(table ``audit_meta``), so a head file deleted later is told apart.  Someone who can edit the database can clear
that mark too, as they can rewrite the head file; the signed bundles and syslog copies are the answer to that.

Verification: ``verify(full=True)`` checks the file's structure and re-hashes every record; ``verify(full=False)``
re-hashes only the records after the newest one an earlier check of this store object verified, after checking
that this record still holds the hash it had and that no record is missing (a count); either checks the head
file.  An edit in place of an older record is found by a full check only.  ``verify_shared`` is the incremental
check for untrusted callers (the console): one at a time, at most once per ``VERIFY_MIN_INTERVAL_S`` (longer after
a long check), the last result otherwise.

Chain id: the hash of the chain's record 1, kept in ``audit_meta`` when that record is committed (or, for a store
written before chain ids, at its next commit while record 1 is still there) and handed on to the store that
``restart_chain`` starts; "" when nothing tells it.  Remote copies of the records name it, so ``appliance audit
verify --against`` tells a chain started afresh (the store and its head file deleted) from the one it replaced.

Threads: one connection guarded by a lock serves appends (from the event loop) and short reads (from web threads);
``verify`` and export snapshots read on a connection of their own, so a long check never holds up an append.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from appliance.audit.chain import (CHECKPOINT, GENESIS, HEAD_NOTE, TRUNCATED, AuditError, AuditRecord, VerifyResult,
                                   build_record, checkpoint_detail, content_matches, find_anchor, head_mismatch,
                                   restart_detail, restart_notice, restart_seq, unanchored, verify_chain)
from appliance.audit.headfile import (EVIDENCE_INFIX, HEAD_SUFFIX, Head, copy_private, evidence_path, head_path_of,
                                      read_head, write_head)
from appliance.audit.shared_verify import SharedReport, SharedVerify
from appliance.edge.persist import fsync_directory
from appliance.units import NS_PER_S

__all__ = ["STORE_FILE", "AuditError", "AuditStore", "AuditTruncated", "Head", "HeadCheck", "SharedReport",
           "EVIDENCE_INFIX", "HEAD_SUFFIX", "head_path_of", "read_head"]

STORE_FILE = "audit.sqlite"
META_TABLE, HEAD_KEPT_KEY, CHAIN_ID_KEY = "audit_meta", "head_file_since_seq", "chain_id"
# Head check states: a head file the store reaches; no head file and no record; no head file, never had one; no head
# file though the store had one; a head file that cannot be read; a store that does not reach its head file.
HEAD_OK, HEAD_NONE, HEAD_MISSING, HEAD_DELETED, HEAD_UNREADABLE, HEAD_TRUNCATED = (
    "ok", "none", "missing", "deleted", "unreadable", "truncated")
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


@dataclass(frozen=True)
class HeadCheck:
    """How the store stands against its head file.  ``problem`` is one line ("" when all is well)."""

    state: str  # HEAD_OK, HEAD_NONE, HEAD_MISSING, HEAD_DELETED, HEAD_UNREADABLE or HEAD_TRUNCATED
    problem: str
    head: Head | None  # what the head file (or, for an append, this store object) recorded
    found: Head | None  # the store's newest record
    first_bad_seq: int | None = None

    @property
    def failed(self) -> bool:
        return self.state in (HEAD_DELETED, HEAD_UNREADABLE, HEAD_TRUNCATED)


class AuditTruncated(AuditError):
    """The store no longer reaches the head it recorded: appending would reuse sequence numbers (see
    ``AuditStore.restart_chain``)."""

    def __init__(self, message: str, check: HeadCheck):
        super().__init__(message)
        self.check = check


class AuditStore:
    """Append-only hash-chained audit records in one SQLite file."""

    def __init__(self, path: Path, max_age_s: int | None = None, max_records: int | None = None, *,
                 create: bool = True) -> None:
        if max_age_s is not None and max_age_s < 1:
            raise ValueError(f"max_age_s must be >= 1, not {max_age_s}")
        if max_records is not None and max_records < 1:
            raise ValueError(f"max_records must be >= 1, not {max_records}")
        self.path = Path(path)
        self.head_path = head_path_of(self.path)
        self.max_age_s, self.max_records = max_age_s, max_records
        self.head_error = ""  # why the head file could not be written last time ("" once it could)
        self._lock = threading.Lock()
        self._verified_lock = threading.Lock()
        self._verified: Head | None = None  # newest record a check of this object verified (incremental verify)
        self._shared = SharedVerify(lambda: self.verify(full=False))
        if not self.path.exists():
            if not create:
                raise AuditError(f"no audit store at {self.path}")
            _create_file(self.path)
        self._conn = self._connect()
        try:
            with self._errors("cannot open it"):
                _prepare(self._conn, self.path)
                self._head_kept = _head_kept_since(self._conn) is not None
                self._chain_id, self._chain_id_kept = _chain_id_in(self._conn)
        except BaseException:
            self._conn.close()
            raise
        # The head appends are checked against: the head file's, then each one this object writes.  An unreadable
        # or missing head file gives none (check_head says why; the appliance writes a new one at start).
        self._head, _ = read_head(self.head_path)

    # --- writing ---------------------------------------------------------------------------------------------

    def append(self, at_tai_ns: int, kind: str, actor: str, text: str,
               detail: Mapping[str, Any] | None = None) -> AuditRecord:
        """Chain a record onto the head and commit it; the record returned is durable.  ValueError for a bad
        field (an instant outside int64, an empty kind, a detail that is not JSON-able)."""
        _check_fields(at_tai_ns, kind, actor, text)
        with self._lock, self._errors("cannot append"):
            with self._write_transaction():
                newest = _newest(self._conn)
                self._check_head_locked(newest)
                record = self._chain_locked(newest, at_tai_ns, kind, actor, text, detail)
            self._committed_locked(record)
        return record

    def prune(self, now_tai_ns: int) -> int:
        """Remove the records retention no longer keeps (older than max_age_s, beyond max_records; oldest first)
        and, if any were removed, append a checkpoint naming the last one.  Returns how many were removed."""
        _check_fields(now_tai_ns, CHECKPOINT, "system", "")
        with self._lock, self._errors("cannot prune"):
            with self._write_transaction():
                # Checked before deleting: retention must not destroy what is left of a store cut short.
                newest = _newest(self._conn)
                self._check_head_locked(newest)
                last = self._last_to_prune(now_tai_ns)
                if last is None:
                    return 0
                pruned_hash = self._conn.execute(f"SELECT hash FROM {TABLE} WHERE seq = ?", (last,)).fetchone()[0]
                removed = self._conn.execute(f"DELETE FROM {TABLE} WHERE seq <= ?", (last,)).rowcount
                text = f"retention removed {removed} record(s) up to record {last}"
                # Chained after the newest record as it was: when retention removed every record (all older than
                # max_age_s) the checkpoint still takes the next seq, never record 1 again.
                record = self._chain_locked(newest, now_tai_ns, CHECKPOINT, "system", text,
                                            checkpoint_detail(last, pruned_hash, removed))
            self._committed_locked(record)
            return removed

    def restart_chain(self, at_tai_ns: int, check: HeadCheck) -> tuple[AuditRecord, Path] | None:
        """Keep a store that ``check`` found cut short or rewritten as ``<store>.truncated-<n>`` (renamed, never
        deleted) and start a new one whose first record (``audit.truncated``) carries the head the old one should
        have reached, links to its hash and takes the next seq after both.  Returns that record and where the old
        store went, or None when the store has changed since ``check`` (another caller restarted it already).
        A crash between setting the store aside and committing the new first record leaves the head file as it was
        and an empty store: the next start sets that aside too (an empty ``truncated-<n+1>``) and restarts again."""
        if check.state != HEAD_TRUNCATED or check.head is None:
            raise ValueError(f"restart_chain needs a truncated store, not one whose head check is {check.state!r}")
        with self._lock, self._errors("cannot restart the chain"):
            if _newest(self._conn) != check.found:
                return None
            found_seq = check.found.seq if check.found else 0
            evidence = self._set_aside_locked()
            detail = restart_detail(check.head.seq, check.head.hash, found_seq,
                                    check.found.hash if check.found else None, evidence.name)
            seq = restart_seq(check.head.seq, found_seq)
            record = build_record(check.head.hash, seq, at_tai_ns, TRUNCATED, "system", _restart_text(detail, seq),
                                  detail)
            with self._write_transaction():
                self._insert_locked(record)
                if self._chain_id:  # the new store goes on with the old one's chain
                    _keep_chain_id(self._conn, self._chain_id)
                    self._chain_id_kept = True
            self._committed_locked(record)
        with self._verified_lock:
            self._verified = None
        self._shared.forget()
        return record, evidence

    def _set_aside_locked(self) -> Path:
        """Rename the store (with its -wal and -shm, if another connection keeps them) to the first free
        ``<store>.truncated-<n>`` and open a new, empty store in its place."""
        self._conn.close()  # the last connection to close folds the WAL into the file
        evidence = evidence_path(self.path)
        try:
            for suffix in ("", "-wal", "-shm"):
                source = Path(f"{self.path}{suffix}")
                if source.exists():
                    os.rename(source, Path(f"{evidence}{suffix}"))
            # A copy of the head file goes with it, so that the kept store verified on its own names its loss; the
            # head file itself stays until the new chain's first record replaces it.
            copy_private(self.head_path, head_path_of(evidence))
            fsync_directory(self.path.parent)
        except OSError as exc:
            raise AuditError(f"audit store {self.path}: cannot keep it as {evidence.name}: "
                             f"{exc.strerror or exc}") from None
        finally:
            _create_file(self.path)  # the old file is gone (moved) or, when the rename failed, still there
            self._conn = self._connect()
            _prepare(self._conn, self.path)
        self._head_kept = _head_kept_since(self._conn) is not None
        self._chain_id_kept = False
        return evidence

    def _chain_locked(self, after: Head | None, at_tai_ns: int, kind: str, actor: str, text: str,
                      detail: Mapping[str, Any] | None) -> AuditRecord:
        """Insert the record that follows ``after`` (None: the first record of all)."""
        prev_seq, prev_hash = (after.seq, after.hash) if after is not None else (0, GENESIS)
        record = build_record(prev_hash, prev_seq + 1, at_tai_ns, kind, actor, text, detail)
        self._insert_locked(record)
        return record

    def _insert_locked(self, record: AuditRecord) -> None:
        self._conn.execute(f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           _row_of(record))

    def _check_head_locked(self, newest: Head | None) -> None:
        """Refuse to write on a store that no longer reaches the head last written or read: a record appended now
        would reuse the seq of one that was removed (and overwrite the head file, the evidence)."""
        if self._head is None or newest == self._head:
            return  # the common case costs nothing more than the head read the append needs anyway
        problem = _mismatch(self._conn, self._head, newest)
        if problem is not None:
            check = HeadCheck(HEAD_TRUNCATED, problem.reason, self._head, newest, problem.first_bad_seq)
            raise AuditTruncated(f"audit store {self.path}: {problem.reason}", check)

    def _committed_locked(self, record: AuditRecord) -> None:
        """After a commit: ``record`` is the head.  The head file is written now; failing to write it does not undo
        the committed record (``head_error`` says why, the next append tries again)."""
        self._head = Head(record.seq, record.hash)
        if record.seq == 1 and record.prev_hash == GENESIS:
            self._chain_id = record.hash
        try:
            if self._chain_id and not self._chain_id_kept:
                with self._write_transaction():
                    _keep_chain_id(self._conn, self._chain_id)
                self._chain_id_kept = True
        except sqlite3.Error as exc:  # it is kept at the next commit; the chain itself is committed
            self.head_error = f"cannot keep the chain id in {self.path}: {exc}"
        try:
            write_head(self.head_path, record, self.path.name)
            if not self._head_kept:  # once per store, and only once a head file exists: see the module docstring
                with self._write_transaction():
                    _mark_head_kept(self._conn, record.seq)
                self._head_kept = True
            self.head_error = ""
        except (OSError, sqlite3.Error) as exc:
            self.head_error = f"cannot write the head file {self.head_path}: {getattr(exc, 'strerror', None) or exc}"

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

    @property
    def chain_id(self) -> str:
        """The id of the chain this store holds (the hash of its record 1), "" when nothing tells it."""
        return self._chain_id

    def links(self) -> Iterator[tuple[int, str, str]]:
        """(seq, hash, prev_hash) of every record, oldest first, read in one snapshot and streamed."""
        with self._reader() as conn:
            yield from conn.execute(f"SELECT seq, hash, prev_hash FROM {TABLE} ORDER BY seq")

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

    def check_head(self) -> HeadCheck:
        """How the store stands against its head file (read now, before the store: a store can only be newer)."""
        head, unreadable = read_head(self.head_path)
        with self._lock, self._errors("cannot read"):
            return _head_check(self._conn, self.head_path, head, unreadable)

    def verify(self, full: bool = True) -> VerifyResult:
        """Check the store against its head file, then the chain: with ``full``, the SQLite file's structure
        (tables and indexes) and every record from GENESIS or from the checkpoint that records its pruning; without,
        only the records after the newest one an earlier check verified (the module docstring says what that still
        covers), or every record when there is none.  A chain restarted after a truncation is reported as long as
        the record that restarted it stands."""
        head, unreadable = read_head(self.head_path)  # first: the snapshot below is at least as new as it
        with self._reader() as conn:
            if full:
                damage = [" ".join(row[0].split()) for row in conn.execute("PRAGMA quick_check(3)")]
                if damage != ["ok"]:
                    return VerifyResult(False, 0, None, f"the database file is damaged: {'; '.join(damage)}")
            check = _head_check(conn, self.head_path, head, unreadable)
            chain, last = self._verify_chain(conn, full)
            restarts = [notice for notice in (restart_notice(r) for r in _of_kind(conn, TRUNCATED)) if notice]
            notes = [_head_note(r) for r in _of_kind(conn, HEAD_NOTE)]
        with self._verified_lock:
            self._verified = last if chain.ok else None  # a failed chain is checked in full again next time
        return _combined(check, restarts, chain, [n for n in notes if n] + ([self.head_error] if self.head_error
                                                                            else []))

    def _verify_chain(self, conn: sqlite3.Connection, full: bool) -> tuple[VerifyResult, Head | None]:
        """The chain's result and its newest record verified (None: none)."""
        first = conn.execute(f"SELECT MIN(seq) FROM {TABLE}").fetchone()[0]
        first_record = _one(conn, first)
        checkpoints = (_record_of(row) for row in
                       conn.execute(f"{_SELECT} WHERE kind = ? ORDER BY seq", (CHECKPOINT,)).fetchall())
        anchor = find_anchor(first, checkpoints, first_record)
        if anchor is None:
            return unanchored(first), None
        with self._verified_lock:
            verified = self._verified
        if not full and verified is not None and _still_verified(conn, verified, first):
            newest: list[AuditRecord] = []
            rows = conn.execute(f"{_SELECT} WHERE seq > ? ORDER BY seq", (verified.seq,))
            result = verify_chain(_tracking(rows, newest), verified.hash, verified.seq)
            earlier = verified.seq - first + 1
            if result.ok:
                result = replace(result, reason=f"{result.checked} new record(s) chained after record {verified.seq}"
                                 f"; the {earlier} up to it were verified by an earlier check (a full check "
                                 "re-hashes them)")
            return replace(result, earlier=earlier), _last_of(newest, verified)
        newest = []
        rows = conn.execute(f"{_SELECT} ORDER BY seq")  # streamed: a large store is not loaded at once
        return verify_chain(_tracking(rows, newest), anchor[1], anchor[0]), _last_of(newest, None)

    def verify_shared(self, clock_s: Callable[[], float]) -> SharedReport | None:
        """The incremental check for callers that must not be able to burn CPU with it (the console): one at a time
        for every caller together, and not again before ``VERIFY_MIN_INTERVAL_S`` (or ``VERIFY_DUTY_FACTOR`` times
        the last check's duration) has passed on ``clock_s``; meanwhile the last report (``fresh`` False).  None
        while the first check runs."""
        return self._shared.run(clock_s)

    def shared_wait_s(self, now_s: float) -> float:
        """Seconds until ``verify_shared`` computes a new result (for a Retry-After)."""
        return self._shared.wait_s(now_s)

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


def _head_kept_since(conn: sqlite3.Connection) -> int | None:
    """The seq at which this store's first head file was written, None when it never had one."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (META_TABLE,)).fetchone() is None:
        return None  # a store written before head files (older releases ignore the table: it is added on use)
    row = conn.execute(f"SELECT value FROM {META_TABLE} WHERE key = ?", (HEAD_KEPT_KEY,)).fetchone()
    return None if row is None else int(row[0])


def _mark_head_kept(conn: sqlite3.Connection, seq: int) -> None:
    conn.execute(f"CREATE TABLE IF NOT EXISTS {META_TABLE} (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
    conn.execute(f"INSERT OR IGNORE INTO {META_TABLE} (key, value) VALUES (?, ?)", (HEAD_KEPT_KEY, seq))


def _chain_id_in(conn: sqlite3.Connection) -> tuple[str, bool]:
    """(the chain id, whether audit_meta keeps it): the one kept, else record 1's hash, else ""."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (META_TABLE,)).fetchone():
        row = conn.execute(f"SELECT value FROM {META_TABLE} WHERE key = ?", (CHAIN_ID_KEY,)).fetchone()
        if row is not None and isinstance(row[0], bytes) and len(row[0]) == 32:
            return row[0].hex(), True
    row = conn.execute(f"SELECT hash FROM {TABLE} WHERE seq = 1 AND prev_hash = ?", (GENESIS,)).fetchone()
    return (row[0], False) if row is not None else ("", False)


def _keep_chain_id(conn: sqlite3.Connection, chain_id: str) -> None:
    # A BLOB: the column has INTEGER affinity, which a hex text of digits alone would be turned into.
    conn.execute(f"CREATE TABLE IF NOT EXISTS {META_TABLE} (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
    conn.execute(f"INSERT OR REPLACE INTO {META_TABLE} (key, value) VALUES (?, ?)",
                 (CHAIN_ID_KEY, bytes.fromhex(chain_id)))


def _head_check(conn: sqlite3.Connection, head_path: Path, head: Head | None, unreadable: str) -> HeadCheck:
    newest = _newest(conn)
    if unreadable:
        return HeadCheck(HEAD_UNREADABLE, f"the head file {head_path} is unreadable ({unreadable}): a store cut "
                                          "short cannot be ruled out", None, newest)
    if head is None:
        if newest is None:
            return HeadCheck(HEAD_NONE, "", None, None)
        since = _head_kept_since(conn)
        if since is not None:
            return HeadCheck(HEAD_DELETED, f"the head file {head_path} is missing, though this store has kept one "
                                           f"since record {since}: a store cut short cannot be ruled out", None, newest)
        return HeadCheck(HEAD_MISSING, f"no head file {head_path} yet (a store from before head files; the appliance "
                                       "writes one at its next start): a store cut short cannot be detected", None,
                         newest)
    problem = None if newest == head else _mismatch(conn, head, newest)
    if problem is not None:
        return HeadCheck(HEAD_TRUNCATED, problem.reason, head, newest, problem.first_bad_seq)
    return HeadCheck(HEAD_OK, "", head, newest)


def _mismatch(conn: sqlite3.Connection, head: Head, newest: Head | None) -> VerifyResult | None:
    row = conn.execute(f"SELECT hash FROM {TABLE} WHERE seq = ?", (head.seq,)).fetchone()
    first = conn.execute(f"SELECT MIN(seq) FROM {TABLE}").fetchone()[0]
    return head_mismatch(head.seq, head.hash, newest.seq if newest else 0, first, None if row is None else row[0])


def _newest(conn: sqlite3.Connection) -> Head | None:
    row = conn.execute(f"SELECT seq, hash FROM {TABLE} ORDER BY seq DESC LIMIT 1").fetchone()
    return None if row is None else Head(row[0], row[1])


def _restart_text(detail: Mapping[str, Any], seq: int) -> str:
    head_seq, found_seq, evidence = detail["head_seq"], detail["found_seq"], detail["evidence"]
    if found_seq < head_seq:
        lost = f"record {head_seq}" if found_seq + 1 == head_seq else f"records {found_seq + 1}..{head_seq}"
        what = f"found cut short: {lost} missing (it ended at record {found_seq}; the head file recorded {head_seq})"
    else:
        what = f"found rewritten: record {head_seq} no longer had the hash the head file recorded"
    return f"audit store {what}; kept as {evidence}; the chain restarts at record {seq} from the recorded head"


# --- verification helpers ---------------------------------------------------------------------------------------


def _one(conn: sqlite3.Connection, seq: int | None) -> AuditRecord | None:
    row = None if seq is None else conn.execute(f"{_SELECT} WHERE seq = ?", (seq,)).fetchone()
    return None if row is None else _record_of(row)


def _of_kind(conn: sqlite3.Connection, kind: str) -> list[AuditRecord]:
    return [_record_of(row) for row in conn.execute(f"{_SELECT} WHERE kind = ? ORDER BY seq", (kind,)).fetchall()]


def _still_verified(conn: sqlite3.Connection, verified: Head, first: int) -> bool:
    """Whether the part of the chain an earlier check verified (up to ``verified``) still stands, as far as a few
    cheap reads tell: that record holds the same hash and content, and no record is missing (a count, which SQLite
    answers without reading the records).  An edit in place of an older record needs a full check."""
    if verified.seq < first:
        return False  # retention removed it since: check in full
    record = _one(conn, verified.seq)
    if record is None or record.hash != verified.hash or not content_matches(record):
        return False
    total, last = conn.execute(f"SELECT COUNT(*), MAX(seq) FROM {TABLE}").fetchone()
    return bool(total == last - first + 1)


def _tracking(rows: Iterable[Sequence[Any]], newest: list[AuditRecord]) -> Iterator[AuditRecord]:
    """The records of ``rows``, keeping the latest one yielded in ``newest`` (what the check reached)."""
    for row in rows:
        record = _record_of(row)
        newest[:] = [record]
        yield record


def _last_of(newest: list[AuditRecord], otherwise: Head | None) -> Head | None:
    return Head(newest[0].seq, newest[0].hash) if newest else otherwise


def _head_note(record: AuditRecord) -> str:
    """A warning for a head file the appliance had to write anew because it was gone or unreadable ("" for the
    first one of a store from before head files)."""
    why = record.detail.get("reason")
    if why not in ("deleted", "unreadable"):
        return ""
    return (f"record {record.seq}: the head file was found {why} at start and written anew, so records removed "
            "from the end of the store before that could have gone unnoticed")


def _combined(check: HeadCheck, restarts: list[VerifyResult], chain: VerifyResult,
              warnings: list[str]) -> VerifyResult:
    """One result: the head file's verdict, the losses restarted chains stand for, then the chain's own."""
    failures = ([VerifyResult(False, 0, check.first_bad_seq, check.problem)] if check.failed else []) + restarts
    if check.state == HEAD_MISSING:
        warnings = [check.problem, *warnings]
    if not chain.ok:
        failures.append(chain)
    if not failures:
        return replace(chain, warnings=tuple(warnings))
    first_bad = next((f.first_bad_seq for f in failures if f.first_bad_seq is not None), None)
    return VerifyResult(False, chain.checked, first_bad, "; ".join(f.reason for f in failures),
                        warnings=tuple(warnings), earlier=chain.earlier)
