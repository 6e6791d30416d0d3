"""The time-quality log: what the clock was doing each second, kept for a year, for traceability (MiFID II RTS 25).

Single job: store one ``QualitySample`` per second in SQLite, thin it as it ages (one row per minute after
``full_rate_s``, one per hour after ``minute_rate_s``, none after ``keep_s``) while keeping the worst case an auditor
asks about, and answer time-range queries and CSV exports.  Edge module: it does file I/O (SQLite) and holds a
``threading`` lock, so the event loop can ``add`` while web threads ``query``.  It never reads a clock: ``compact``
takes ``now_tai_ns``.

Durability: ``add`` only buffers; ``flush`` commits the buffer in one transaction (WAL, synchronous=NORMAL), and the
caller flushes every few seconds.  A crash or power loss therefore loses at most the seconds added since the last
flush (with synchronous=NORMAL a power loss may also roll back the last committed flush or two; an application crash
loses nothing committed).  Queries see flushed rows only.

A merged row keeps, over the seconds it covers: the largest |phase offset| with its sign, the mean frequency (each
second with a frequency weighs the same), the largest error bound (unknown in any second makes the row's bound
unknown: unknown is worse than any number), the smallest satellite count, the largest (worst) PTP clockClass, the
worst state (any non-LOCKED state beats LOCKED; see ``STATE_SEVERITY``) with the seconds spent in each state, and the
number of seconds covered.  Minute and hour rows start on UTC minutes and hours when a leap table is given (the minute
holding 23:59:60 then covers 61 s), else on TAI ones.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TextIO

from appliance import leap
from appliance.events import ReceiverState
from appliance.units import NS_PER_S

if TYPE_CHECKING:
    from appliance.status import TimeStatus

FORMAT_NAME = "appliance time-quality log"
FORMAT_VERSION = 1
MINUTE_S = 60
HOUR_S = 3600
# Worst first wins a merge.  Ordered by what is advertised: LOCKED clockClass 6, HOLDOVER 7 (or degraded),
# HOLDOVER_EXPIRED degraded, ACQUIRING and FREERUN 248 (IEEE 1588-2019 Table 4).  Unknown names rank worst of all.
STATE_SEVERITY = {"LOCKED": 0, "HOLDOVER": 1, "HOLDOVER_EXPIRED": 2, "ACQUIRING": 3, "FREERUN": 4}
_UNKNOWN_SEVERITY = 5
# A stored row never spans more than an hour holding a leap second, so a range query looks back this far by start.
_LOOKBACK_NS = (HOUR_S + 2) * NS_PER_S
CSV_COLUMNS = ("utc", "tai_ns", "span_s", "state", "phase_offset_ns", "frequency_ppb", "error_bound_ns",
               "satellites_used", "clock_class", "state_seconds")

_SCHEMA = """
CREATE TABLE tq_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE tq_rows (
    at_tai_ns INTEGER NOT NULL,      -- start of the interval (a sample: the second it describes)
    end_tai_ns INTEGER NOT NULL,     -- end of the last second covered (exclusive)
    resolution_s INTEGER NOT NULL,   -- 1 for a sample, 60 or 3600 once merged
    span_s INTEGER NOT NULL,         -- seconds covered
    state TEXT NOT NULL,             -- worst state in the interval
    state_seconds TEXT,              -- JSON {state: seconds}; NULL when all span_s seconds were in ``state``
    phase_offset_ns REAL,
    frequency_ppb REAL,
    frequency_s INTEGER NOT NULL,    -- seconds that had a frequency: the weight of the mean in later merges
    error_bound_ns INTEGER,
    satellites_used INTEGER,
    clock_class INTEGER
);
CREATE INDEX tq_rows_at ON tq_rows (at_tai_ns);
"""
# The sync monitor's downstream clients: one row per poll of a target, thinned as it ages like the clock's rows
# (added to logs of format version 1 as they are opened: a log written before has no monitor rows, and one written
# after reads the same in an older appliance).
_MONITOR_SCHEMA = """
CREATE TABLE IF NOT EXISTS tq_monitor (
    at_tai_ns INTEGER NOT NULL,      -- the poll's end (served time)
    target TEXT NOT NULL,
    kind TEXT NOT NULL,              -- ntp or ptp
    state TEXT NOT NULL,             -- ok, over-limit, unreachable
    offset_ns INTEGER,               -- the target minus the served time; NULL when it did not answer
    delay_ns INTEGER,
    limit_ns INTEGER NOT NULL,
    error TEXT NOT NULL DEFAULT '',
    span_s INTEGER NOT NULL DEFAULT 0,   -- 0 for one poll; 60 or 3600 once merged (TAI minutes and hours)
    polls INTEGER NOT NULL DEFAULT 1,
    failures INTEGER NOT NULL DEFAULT 0  -- polls without an answer
);
CREATE INDEX IF NOT EXISTS tq_monitor_at ON tq_monitor (at_tai_ns);
"""
MONITOR_CSV_COLUMNS = ("utc", "tai_ns", "target", "kind", "state", "offset_ns", "delay_ns", "limit_ns", "error",
                       "span_s", "polls", "failures")
# Worst first wins a merge of monitor rows.
MONITOR_SEVERITY = {"ok": 0, "waiting": 0, "over-limit": 1, "unreachable": 2}
_COLUMNS = ("at_tai_ns, end_tai_ns, span_s, state, state_seconds, phase_offset_ns, frequency_ppb, frequency_s, "
            "error_bound_ns, satellites_used, clock_class")


class QualityLogError(ValueError):
    """The log file is not a time-quality log, is corrupt, or cannot be read or written; the message names it."""


@dataclass(frozen=True)
class QualitySample:
    """What the clock was doing in one second (``at_tai_ns``: the second it describes)."""

    at_tai_ns: int
    state: str
    phase_offset_ns: float | None = None
    frequency_ppb: float | None = None
    error_bound_ns: int | None = None
    satellites_used: int | None = None
    clock_class: int | None = None


@dataclass(frozen=True)
class Row:
    """One stored or merged interval of ``span_s`` seconds starting at ``at_tai_ns``, worst case kept."""

    at_tai_ns: int
    span_s: int
    state: str
    state_seconds: dict[str, int]
    phase_offset_ns: float | None
    frequency_ppb: float | None
    error_bound_ns: int | None
    satellites_used: int | None
    clock_class: int | None


class _Rec(NamedTuple):
    """A row with what later merges need and readers do not (its end and the weight of its mean frequency)."""

    at_tai_ns: int
    end_tai_ns: int
    span_s: int
    state_seconds: dict[str, int]
    phase_offset_ns: float | None
    frequency_ppb: float | None
    frequency_s: int
    error_bound_ns: int | None
    satellites_used: int | None
    clock_class: int | None

    def row(self) -> Row:
        return Row(self.at_tai_ns, self.span_s, worst_state(self.state_seconds), dict(self.state_seconds),
                   self.phase_offset_ns, self.frequency_ppb, self.error_bound_ns, self.satellites_used,
                   self.clock_class)


@dataclass(frozen=True)
class MonitorSample:
    """One poll of one downstream client of the sync monitor, or (``span_s`` 60 or 3600) the polls of a TAI minute
    or hour merged, worst case kept: the worst state, the largest |offset| with its sign, the largest delay, the
    last limit and error, and how many polls there were and how many failed."""

    at_tai_ns: int
    target: str
    kind: str
    state: str
    offset_ns: int | None
    delay_ns: int | None
    limit_ns: int
    error: str = ""
    span_s: int = 0
    polls: int = 1
    failures: int = 0


def monitor_samples(status: TimeStatus, after_tai_ns: dict[str, int]) -> list[MonitorSample]:
    """The sync monitor's polls that ``status`` shows and the record does not have yet (``after_tai_ns``: the last
    poll recorded per target, updated here).  A poll that failed carries no offset, whatever the last answer was."""
    out = []
    for row in status.monitor:
        at = row.last_poll_tai_ns
        if at is None or at <= after_tai_ns.get(row.target, -1):
            continue
        after_tai_ns[row.target] = at
        answered = row.last_answer_tai_ns == at
        out.append(MonitorSample(at, row.target, row.kind, row.state, row.offset_ns if answered else None,
                                 row.delay_ns if answered else None, row.limit_ns, "" if answered else row.error,
                                 failures=0 if answered else 1))
    return out


def sample_from_status(status: TimeStatus) -> QualitySample:
    """The quality sample for the second ``status`` describes.  Satellites used: none while the receiver is
    disconnected or silent (its last epoch is stale then), else the receiver's own count, else the used satellites in
    its list, else unknown."""
    clock, receiver = status.clock, status.receiver
    used: int | None
    if receiver.state in (ReceiverState.DISCONNECTED, ReceiverState.NO_DATA):
        used = 0
    elif receiver.last_epoch is not None and receiver.last_epoch.used_count is not None:
        used = receiver.last_epoch.used_count
    elif status.satellites:
        used = sum(1 for sat in status.satellites if sat.used)
    else:
        used = None
    return QualitySample(status.at_tai_ns, clock.state, clock.phase_offset_ns, clock.frequency_ppb,
                         clock.error_bound_ns, used, clock.clock_class)


def worst_state(state_seconds: dict[str, int]) -> str:
    """The state that names an interval: the most severe one with any seconds in it."""
    return max(state_seconds, key=lambda s: (STATE_SEVERITY.get(s, _UNKNOWN_SEVERITY), s))


def ordered_state_seconds(state_seconds: dict[str, int]) -> list[tuple[str, int]]:
    """(state, seconds) pairs, least severe first (LOCKED first, the state naming the row last)."""
    return sorted(state_seconds.items(), key=lambda kv: (STATE_SEVERITY.get(kv[0], _UNKNOWN_SEVERITY), kv[0]))


def utc_labeler(table: leap.LeapTable) -> Callable[[int], str]:
    """ISO 8601 UTC labels for ``export_csv`` (``2016-12-31T23:59:60Z``; milliseconds only when not on a second)."""
    def label(tai_ns: int) -> str:
        t = leap.tai_to_utc(tai_ns, table)
        return t.iso_ms() if t.nanosecond else str(t)[:19] + "Z"
    return label


class TimeQualityLog:
    """The per-second quality record in one SQLite file; thread-safe (one connection, one lock)."""

    def __init__(self, path: Path, full_rate_s: int = 86_400, minute_rate_s: int = 30 * 86_400,
                 keep_s: int = 365 * 86_400, leap_table: leap.LeapTable | None = None):
        if not 0 < full_rate_s <= minute_rate_s <= keep_s:
            raise ValueError(f"ages must satisfy 0 < full_rate_s <= minute_rate_s <= keep_s, got {full_rate_s}, "
                             f"{minute_rate_s}, {keep_s}")
        self.path = Path(path)
        self.full_rate_s, self.minute_rate_s, self.keep_s = full_rate_s, minute_rate_s, keep_s
        self._table = leap_table
        self._lock = threading.Lock()  # the connection
        self._pending_lock = threading.Lock()  # the buffer only, so add() never waits for a query
        self._pending: list[QualitySample] = []
        self._pending_monitor: list[MonitorSample] = []
        self._conn = _open(self.path)

    def __enter__(self) -> TimeQualityLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush and close; the log cannot be used afterwards."""
        try:
            self.flush()
        finally:
            with self._lock:
                self._conn.close()

    # --- writing ------------------------------------------------------------------------------------------------

    def add(self, sample: QualitySample) -> None:
        """Buffer one second; it is stored by the next ``flush``."""
        with self._pending_lock:
            self._pending.append(sample)

    def add_many(self, samples: Iterable[QualitySample]) -> None:
        with self._pending_lock:
            self._pending.extend(samples)

    def add_monitor(self, samples: Iterable[MonitorSample]) -> None:
        """Buffer sync-monitor polls; stored by the next ``flush``."""
        with self._pending_lock:
            self._pending_monitor.extend(samples)

    def flush(self) -> int:
        """Commit the buffered seconds in one transaction; returns how many.  On failure they stay buffered."""
        with self._pending_lock:
            batch, self._pending = self._pending, []
            polls, self._pending_monitor = self._pending_monitor, []
        if not batch and not polls:
            return 0
        try:
            with self._lock, self._errors(), self._conn:
                self._conn.executemany(
                    f"INSERT INTO tq_rows (resolution_s, {_COLUMNS}) VALUES (1, ?, ?, 1, ?, NULL, ?, ?, ?, ?, ?, ?)",
                    (_sample_values(s) for s in batch))
                self._conn.executemany(f"INSERT INTO tq_monitor ({_MONITOR_COLUMNS}) VALUES ({', '.join('?' * 11)})",
                                       (_monitor_values(p) for p in polls))
        except BaseException:
            with self._pending_lock:
                self._pending[:0] = batch
                self._pending_monitor[:0] = polls
            raise
        return len(batch)

    def compact(self, now_tai_ns: int) -> None:
        """Thin rows as they age: drop what ended ``keep_s`` before now, merge whole hours older than
        ``minute_rate_s`` and whole minutes older than ``full_rate_s``.  Cheap when run often (it touches only what
        aged since the last run); one transaction."""
        self.flush()
        with self._lock, self._errors(), self._conn:
            self._conn.execute("DELETE FROM tq_rows WHERE end_tai_ns <= ?", (now_tai_ns - self.keep_s * NS_PER_S,))
            self._conn.execute("DELETE FROM tq_monitor WHERE at_tai_ns < ?", (now_tai_ns - self.keep_s * NS_PER_S,))
            self._merge_older(now_tai_ns - self.minute_rate_s * NS_PER_S, HOUR_S)
            self._merge_older(now_tai_ns - self.full_rate_s * NS_PER_S, MINUTE_S)
            self._merge_monitor(now_tai_ns - self.minute_rate_s * NS_PER_S, HOUR_S)
            self._merge_monitor(now_tai_ns - self.full_rate_s * NS_PER_S, MINUTE_S)

    def _merge_monitor(self, cutoff_tai_ns: int, bucket_s: int) -> None:
        """Merge each target's finer monitor rows per TAI bucket wholly before the cutoff."""
        bucket_ns = bucket_s * NS_PER_S
        limit = cutoff_tai_ns - cutoff_tai_ns % bucket_ns
        cursor = self._conn.execute(f"SELECT {_MONITOR_COLUMNS} FROM tq_monitor WHERE span_s < ? AND at_tai_ns < ? "
                                    "ORDER BY target, at_tai_ns, rowid", (bucket_s, limit))
        groups: dict[tuple[str, int], list[MonitorSample]] = {}
        for values in cursor:
            sample = MonitorSample(*values)
            groups.setdefault((sample.target, sample.at_tai_ns - sample.at_tai_ns % bucket_ns), []).append(sample)
        if not groups:
            return
        self._conn.execute("DELETE FROM tq_monitor WHERE span_s < ? AND at_tai_ns < ?", (bucket_s, limit))
        self._conn.executemany(f"INSERT INTO tq_monitor ({_MONITOR_COLUMNS}) VALUES ({', '.join('?' * 11)})",
                               (_monitor_values(_merge_polls(group, at, bucket_s))
                                for (_, at), group in groups.items()))

    def _merge_older(self, cutoff_tai_ns: int, bucket_s: int) -> None:
        """Merge, per bucket wholly before the cutoff, its finer rows with any row already at this resolution."""
        limit = self._bucket_start(cutoff_tai_ns, bucket_s)
        finer = self._select("resolution_s < ? AND at_tai_ns < ?", (bucket_s, limit))
        if not finer:
            return
        first = self._bucket_start(finer[0].at_tai_ns, bucket_s)
        same = self._select("resolution_s = ? AND at_tai_ns >= ? AND at_tai_ns < ?", (bucket_s, first, limit))
        recs = sorted(finer + same, key=lambda r: r.at_tai_ns) if same else finer
        merged = [_merge(group, start) for start, group in self._buckets(recs, bucket_s)]
        self._conn.execute("DELETE FROM tq_rows WHERE resolution_s < ? AND at_tai_ns < ?", (bucket_s, limit))
        self._conn.execute("DELETE FROM tq_rows WHERE resolution_s = ? AND at_tai_ns >= ? AND at_tai_ns < ?",
                           (bucket_s, first, limit))
        self._conn.executemany(f"INSERT INTO tq_rows (resolution_s, {_COLUMNS}) VALUES (?{', ?' * 11})",
                               ((bucket_s, *_stored(rec)) for rec in merged))

    # --- reading ------------------------------------------------------------------------------------------------

    def query(self, since_tai_ns: int, until_tai_ns: int, max_points: int | None = None) -> list[Row]:
        """Rows overlapping [since, until), oldest first.  With ``max_points`` neighbours are merged by the same
        rules into at most that many rows (each starting at its first member)."""
        if max_points is not None and max_points < 1:
            raise ValueError(f"max_points must be >= 1, got {max_points}")
        with self._lock, self._errors():
            recs = self._select("at_tai_ns >= ? AND at_tai_ns < ? AND end_tai_ns > ?",
                                (since_tai_ns - _LOOKBACK_NS, until_tai_ns, since_tai_ns))
        if max_points is not None and len(recs) > max_points:
            recs = _thin(recs, max_points)
        return [rec.row() for rec in recs]

    def tail(self, count: int) -> list[Row]:
        """The ``count`` most recent rows, oldest first."""
        with self._lock, self._errors():
            recs = self._select("1 ORDER BY at_tai_ns DESC, rowid DESC LIMIT ?", (count,), ordered=False)
        return [rec.row() for rec in reversed(recs)]

    def export_csv(self, since_tai_ns: int, until_tai_ns: int, out: TextIO, utc_label: Callable[[int], str]) -> int:
        """Write a header line and one line per row overlapping [since, until); returns the number of rows.
        Unknown values are empty cells; ``state_seconds`` reads ``LOCKED=3599;HOLDOVER=1``, worst last."""
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        rows = self.query(since_tai_ns, until_tai_ns)
        for r in rows:
            writer.writerow((utc_label(r.at_tai_ns), r.at_tai_ns, r.span_s, r.state, _cell(r.phase_offset_ns),
                             _cell(r.frequency_ppb), _cell(r.error_bound_ns), _cell(r.satellites_used),
                             _cell(r.clock_class), _state_cell(r.state_seconds)))
        return len(rows)

    def monitor_polls(self, since_tai_ns: int, until_tai_ns: int) -> list[MonitorSample]:
        """The sync monitor's polls in [since, until), oldest first (by target within one instant)."""
        with self._lock, self._errors():
            cursor = self._conn.execute(f"SELECT {_MONITOR_COLUMNS} FROM tq_monitor WHERE at_tai_ns >= ? AND "
                                        "at_tai_ns < ? ORDER BY at_tai_ns, target", (since_tai_ns, until_tai_ns))
            return [MonitorSample(*values) for values in cursor]

    def export_monitor_csv(self, since_tai_ns: int, until_tai_ns: int, out: TextIO,
                           utc_label: Callable[[int], str]) -> int:
        """The sync monitor's polls in [since, until) as CSV, one line per poll of a target (a failed poll has empty
        offset and delay and its reason) or per merged minute or hour (``span_s``); returns the number of lines
        after the header."""
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(MONITOR_CSV_COLUMNS)
        polls = self.monitor_polls(since_tai_ns, until_tai_ns)
        for p in polls:
            writer.writerow((utc_label(p.at_tai_ns), p.at_tai_ns, p.target, p.kind, p.state, _cell(p.offset_ns),
                             _cell(p.delay_ns), p.limit_ns, p.error, p.span_s, p.polls, p.failures))
        return len(polls)

    # --- helpers ------------------------------------------------------------------------------------------------

    def _select(self, where: str, params: Sequence[object], ordered: bool = True) -> list[_Rec]:
        order = " ORDER BY at_tai_ns, rowid" if ordered else ""
        cursor = self._conn.execute(f"SELECT {_COLUMNS} FROM tq_rows WHERE {where}{order}", params)
        return [_loaded(values) for values in cursor]

    def _bucket_start(self, at_tai_ns: int, bucket_s: int) -> int:
        """Start of the UTC (with a leap table) or TAI minute/hour holding an instant."""
        bucket_ns = bucket_s * NS_PER_S
        if self._table is None:
            return at_tai_ns - at_tai_ns % bucket_ns
        posix_ns, _ = leap.tai_to_posix_ns(at_tai_ns, self._table)  # 23:59:60 reads as 23:59:59: same minute
        return leap.posix_to_tai_ns(posix_ns - posix_ns % bucket_ns, self._table)

    def _buckets(self, recs: list[_Rec], bucket_s: int) -> Iterator[tuple[int, list[_Rec]]]:
        """Group time-ordered rows by bucket; one bucket computation per bucket, not per row."""
        start = end = None
        group: list[_Rec] = []
        for rec in recs:
            if end is None or rec.at_tai_ns >= end:
                if group:
                    yield start, group  # type: ignore[misc]
                start = self._bucket_start(rec.at_tai_ns, bucket_s)
                end = self._bucket_start(start + (bucket_s + 1) * NS_PER_S, bucket_s)  # 59, 60 or 61 s later
                group = []
            group.append(rec)
        if group:
            yield start, group  # type: ignore[misc]

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise QualityLogError(f"time-quality log {self.path}: {exc}") from exc


def _open(path: Path) -> sqlite3.Connection:
    """Open or create the log; a file that is not one (or is corrupt) raises QualityLogError naming it."""
    try:
        conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
    except sqlite3.Error as exc:
        raise QualityLogError(f"time-quality log {path}: cannot open: {exc}") from exc
    try:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            with conn:
                conn.executescript("BEGIN;" + _SCHEMA + "COMMIT;")
                conn.executemany("INSERT INTO tq_meta VALUES (?, ?)",
                                 (("format", FORMAT_NAME), ("version", str(FORMAT_VERSION))))
        _check_format(conn, path, tables)
        conn.executescript(_MONITOR_SCHEMA)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.Error as exc:
        conn.close()
        raise QualityLogError(f"{path} is not a readable time-quality log: {exc}") from exc
    except QualityLogError:
        conn.close()
        raise
    return conn


def _check_format(conn: sqlite3.Connection, path: Path, tables: set[str]) -> None:
    if tables and not {"tq_meta", "tq_rows"} <= tables:
        raise QualityLogError(f"{path} is an SQLite database but not a time-quality log "
                              f"(tables: {', '.join(sorted(tables))})")
    meta = dict(conn.execute("SELECT key, value FROM tq_meta"))
    if meta.get("format") != FORMAT_NAME:
        raise QualityLogError(f"{path} is not a time-quality log (format {meta.get('format')!r})")
    if meta.get("version") != str(FORMAT_VERSION):
        raise QualityLogError(f"{path}: time-quality log version {meta.get('version')} is not supported "
                              f"(this appliance reads version {FORMAT_VERSION})")


def _sample_values(s: QualitySample) -> tuple[object, ...]:
    """Column values of a one-second row (numbers made plain: SQLite refuses numpy integers)."""
    return (int(s.at_tai_ns), int(s.at_tai_ns) + NS_PER_S, str(s.state), _plain(s.phase_offset_ns, float),
            _plain(s.frequency_ppb, float), 0 if s.frequency_ppb is None else 1, _plain(s.error_bound_ns, int),
            _plain(s.satellites_used, int), _plain(s.clock_class, int))


_MONITOR_COLUMNS = "at_tai_ns, target, kind, state, offset_ns, delay_ns, limit_ns, error, span_s, polls, failures"


def _monitor_values(p: MonitorSample) -> tuple[object, ...]:
    return (int(p.at_tai_ns), str(p.target), str(p.kind), str(p.state), _plain(p.offset_ns, int),
            _plain(p.delay_ns, int), int(p.limit_ns), str(p.error), int(p.span_s), int(p.polls), int(p.failures))


def _merge_polls(polls: Sequence[MonitorSample], at_tai_ns: int, span_s: int) -> MonitorSample:
    """One row for a target's polls of one bucket (time-ordered), worst case kept (see ``MonitorSample``)."""
    offsets = [p.offset_ns for p in polls if p.offset_ns is not None]
    delays = [p.delay_ns for p in polls if p.delay_ns is not None]
    errors = [p.error for p in polls if p.error]
    last = polls[-1]
    return MonitorSample(at_tai_ns, last.target, last.kind,
                         max((p.state for p in polls), key=lambda s: MONITOR_SEVERITY.get(s, 3)),
                         max(offsets, key=abs) if offsets else None, max(delays) if delays else None,
                         last.limit_ns, errors[-1] if errors else "", span_s, sum(p.polls for p in polls),
                         sum(p.failures for p in polls))


def _plain(value: float | int | None, kind: type) -> float | int | None:
    return None if value is None else kind(value)


def _loaded(values: tuple) -> _Rec:  # type: ignore[type-arg]
    at, end, span, state, seconds, phase, freq, freq_s, bound, sats, cls = values
    return _Rec(at, end, span, {state: span} if seconds is None else json.loads(seconds), phase, freq, freq_s,
                bound, sats, cls)


def _stored(rec: _Rec) -> tuple[object, ...]:
    state = worst_state(rec.state_seconds)
    seconds = None if rec.state_seconds == {state: rec.span_s} else json.dumps(rec.state_seconds, sort_keys=True)
    return (rec.at_tai_ns, rec.end_tai_ns, rec.span_s, state, seconds, rec.phase_offset_ns, rec.frequency_ppb,
            rec.frequency_s, rec.error_bound_ns, rec.satellites_used, rec.clock_class)


def _merge(recs: Sequence[_Rec], at_tai_ns: int) -> _Rec:
    """One row for several, worst case kept (see the module docstring)."""
    seconds: Counter[str] = Counter()
    for rec in recs:
        seconds.update(rec.state_seconds)
    phases = [r.phase_offset_ns for r in recs if r.phase_offset_ns is not None]
    frequency_s = sum(r.frequency_s for r in recs)
    weighted = sum(r.frequency_ppb * r.frequency_s for r in recs if r.frequency_ppb is not None)
    bounds = [r.error_bound_ns for r in recs]
    return _Rec(
        at_tai_ns, max(r.end_tai_ns for r in recs), sum(r.span_s for r in recs), dict(seconds),
        max(phases, key=abs) if phases else None,
        weighted / frequency_s if frequency_s else None, frequency_s,
        None if None in bounds else max(bounds),  # type: ignore[type-var]
        min((r.satellites_used for r in recs if r.satellites_used is not None), default=None),
        max((r.clock_class for r in recs if r.clock_class is not None), default=None))


def _thin(recs: list[_Rec], max_points: int) -> list[_Rec]:
    """Merge time-ordered rows into at most ``max_points`` groups of equal width (whole seconds) by start."""
    first = recs[0].at_tai_ns
    extent_ns = recs[-1].at_tai_ns - first + 1
    width_ns = -(-extent_ns // (max_points * NS_PER_S)) * NS_PER_S
    groups: dict[int, list[_Rec]] = {}
    for rec in recs:
        groups.setdefault((rec.at_tai_ns - first) // width_ns, []).append(rec)
    return [_merge(group, group[0].at_tai_ns) for group in groups.values()]


def _cell(value: float | int | None) -> str:
    return "" if value is None else repr(value)


def _state_cell(state_seconds: dict[str, int]) -> str:
    return ";".join(f"{state}={seconds}" for state, seconds in ordered_state_seconds(state_seconds))
