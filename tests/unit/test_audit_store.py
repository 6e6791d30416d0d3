"""The audit store (appliance.audit.store): appends are durable across kill -9, edits made behind its back are named
by verify, retention keeps the chain verifiable, and a file that is not an audit store is refused by name."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.audit.chain import CHECKPOINT, GENESIS
from appliance.audit.store import AuditError, AuditStore, AuditTruncated

ROOT = Path(__file__).resolve().parents[2]
S = 1_000_000_000
T0 = 1_800_000_037 * S


def filled(path: Path, n: int, **kwargs: object) -> AuditStore:
    store = AuditStore(path, **kwargs)  # type: ignore[arg-type]
    for i in range(n):
        store.append(T0 + i * S, "command" if i % 2 else "alarm.raised", "admin" if i % 3 else "system",
                     f"event number {i}", {"i": i})
    return store


def raw(path: Path, sql: str, *params: object) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(sql, params)
    conn.close()


def test_append_returns_what_is_stored_and_chains(tmp_path: Path) -> None:
    with AuditStore(tmp_path / "audit.sqlite") as store:
        assert store.head() is None and store.count() == 0 and store.verify().ok
        first = store.append(T0, "start", "system", "appliance started", {"version": "0.1", "pair": (1, 2)})
        second = store.append(T0 + S, "login", "admin", "admin logged in")
        assert (first.seq, first.prev_hash, second.seq, second.prev_hash) == (1, GENESIS, 2, first.hash)
        assert first.detail == {"version": "0.1", "pair": [1, 2]}
        assert store.records() == [second, first]
        assert store.head() == second and store.count() == 2


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), st.text(min_size=1, max_size=10), st.text(max_size=10),
                          st.text(max_size=40), st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5)
                                                                | st.floats(allow_nan=False, allow_infinity=False),
                                                                max_size=3)), max_size=8))
def test_whatever_is_appended_reads_back_identically_and_verifies(entries: list) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "audit.sqlite"
        with AuditStore(path) as store:
            appended = [store.append(*entry) for entry in entries]
        with AuditStore(path) as store:
            assert store.records(limit=None) == appended[::-1]
            result = store.verify()
            assert result.ok and result.checked == len(entries)


def test_records_filter_search_and_page(tmp_path: Path) -> None:
    with filled(tmp_path / "audit.sqlite", 10) as store:
        store.append(T0 + 20 * S, "config.change", "Jürgen", "set ntp.port to 1123 ÜBER the console")
        assert [r.seq for r in store.records(limit=3)] == [11, 10, 9]
        assert [r.seq for r in store.records(limit=3, before_seq=9)] == [8, 7, 6]
        assert [r.seq for r in store.records(since_tai_ns=T0 + 2 * S, until_tai_ns=T0 + 5 * S)] == [5, 4, 3]
        assert [r.seq for r in store.records(kinds=["alarm.raised"], limit=None)] == [9, 7, 5, 3, 1]
        assert store.records(kinds=[]) == []
        assert [r.seq for r in store.records(search="über")] == [11]  # case-insensitive beyond ASCII
        assert [r.seq for r in store.records(search="JÜRGEN")] == [11]
        assert [r.seq for r in store.records(search="CONFIG.")] == [11]
        assert [r.seq for r in store.records(search="number 1")] == [2]


def test_bad_fields_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with AuditStore(tmp_path / "audit.sqlite") as store:
        for args in [(2**63, "start", "system", "x"), (1.5, "start", "system", "x"), (T0, "", "system", "x")]:
            with pytest.raises(ValueError):
                store.append(*args)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="JSON-able"):
            store.append(T0, "start", "system", "x", {"bad": float("inf")})
        assert store.count() == 0


_CHILD = """
import sys
from pathlib import Path
from appliance.audit.store import AuditStore
store = AuditStore(Path(sys.argv[1]), max_records=int(sys.argv[2]) or None)
print("open", flush=True)
i = 0
while True:
    record = store.append(1_800_000_000_000_000_000 + i, "command", "tester", f"line {i}", {"i": i})
    print(record.seq, flush=True)
    if record.seq % 7 == 0:
        store.prune(1_800_000_000_000_000_000 + i)
    i += 1
"""


def test_every_committed_record_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "audit.sqlite"
    rng = random.Random(5)
    committed: set[int] = set()
    for round_ in range(5):
        max_records = 0 if round_ % 2 == 0 else 25  # odd rounds also prune (delete + checkpoint) while being killed
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path), str(max_records)], cwd=ROOT,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        if round_ > 0:  # round 0 may be killed while the store is still being created
            assert child.stdout.readline() == "open\n"
        time.sleep(rng.uniform(0.05, 0.4))
        child.send_signal(signal.SIGKILL)
        output = child.stdout.read()
        child.wait()
        committed |= {int(line) for line in output.splitlines() if line.isdigit()}
        with AuditStore(path) as store:
            result = store.verify()
            assert result.ok, f"round {round_}: {result.reason}"
            present = {r.seq for r in store.records(limit=None)}
            head = store.head()
        if committed:
            assert head is not None and head.seq >= max(committed)
            first = min(present)
            assert {seq for seq in committed if seq >= first} <= present, f"round {round_}: lost records"
    assert len(committed) > 20  # the rounds really appended something


def test_an_edited_record_is_named(tmp_path: Path) -> None:
    path = tmp_path / "audit.sqlite"
    filled(path, 30).close()
    raw(path, "UPDATE audit_record SET text = 'nothing to see' WHERE seq = 17")
    with AuditStore(path) as store:
        result = store.verify()
    assert (result.ok, result.first_bad_seq, result.checked) == (False, 17, 16)
    assert result.reason == "record 17: hash does not match its content"


def test_a_deleted_record_and_a_broken_detail_are_named(tmp_path: Path) -> None:
    path = tmp_path / "audit.sqlite"
    filled(path, 10).close()
    raw(path, "UPDATE audit_record SET detail = '{not json' WHERE seq = 8")
    raw(path, "DELETE FROM audit_record WHERE seq = 4")
    with AuditStore(path) as store:
        result = store.verify()
    assert result.first_bad_seq == 4 and "missing" in result.reason
    raw(path, "DELETE FROM audit_record WHERE seq <= 3")  # pruned by hand: no checkpoint accounts for it
    with AuditStore(path) as store:
        result = store.verify()
    assert result.first_bad_seq == 5 and "no checkpoint" in result.reason


def test_a_store_whose_last_record_was_tampered_still_opens_but_is_not_written_on(tmp_path: Path) -> None:
    path = tmp_path / "audit.sqlite"
    filled(path, 5).close()
    raw(path, "UPDATE audit_record SET hash = ? WHERE seq = 5", "ab" * 32)
    with AuditStore(path) as store:
        assert store.head().hash == "ab" * 32  # type: ignore[union-attr]
        # Appending would chain onto the forged hash and overwrite the head file that shows the forgery.
        with pytest.raises(AuditTruncated, match="record 5 was rewritten: its hash is abababababab"):
            store.append(T0 + 9 * S, "start", "system", "restarted")
        assert store.count() == 5
        result = store.verify()
    assert (result.ok, result.first_bad_seq) == (False, 5)
    assert result.reason.startswith("record 5 was rewritten") and "record 5: hash does not match" in result.reason


def test_prune_by_count_writes_a_checkpoint_and_keeps_the_chain_verifiable(tmp_path: Path) -> None:
    with filled(tmp_path / "audit.sqlite", 30, max_records=10) as store:
        removed_hash = store.records(limit=None)[-21].hash  # record 21
        assert store.prune(T0 + 40 * S) == 21
        assert store.count() == 10
        checkpoint = store.head()
        assert checkpoint is not None
        assert (checkpoint.seq, checkpoint.kind, checkpoint.actor) == (31, CHECKPOINT, "system")
        assert checkpoint.detail == {"pruned_through_seq": 21, "pruned_through_hash": removed_hash,
                                     "pruned_records": 21}
        assert checkpoint.at_tai_ns == T0 + 40 * S
        assert store.verify().ok
        assert store.prune(T0 + 41 * S) == 0 and store.count() == 10  # nothing more to remove: no new checkpoint
        for i in range(15):
            store.append(T0 + (50 + i) * S, "output", "system", f"more {i}")
        assert store.prune(T0 + 70 * S) == 16 and store.count() == 10
        result = store.verify()
        assert result.ok and result.checked == 10, result.reason


def test_prune_by_age_removes_only_the_old_prefix(tmp_path: Path) -> None:
    with filled(tmp_path / "audit.sqlite", 10, max_age_s=5) as store:
        store.append(T0, "clock.state", "system", "stamped early: the clock was stepped back")  # seq 11
        assert store.prune(T0 + 10 * S) == 5  # records 1-5 are older than 5 s; 11 is old but follows young ones
        assert [r.seq for r in store.records(limit=None)][-1] == 6
        assert store.verify().ok
        assert store.prune(T0 + 100 * S) == 7  # everything is old now: only the checkpoint remains
        remaining = store.records(limit=None)
        assert [r.kind for r in remaining] == [CHECKPOINT] and remaining[0].detail["pruned_through_seq"] == 12
        assert remaining[0].seq == 13  # the next seq, not record 1 again: numbers are never reused
        assert store.verify().ok


def test_concurrent_appends_and_reads(tmp_path: Path) -> None:
    store = AuditStore(tmp_path / "audit.sqlite")
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(40):
                store.append(T0 + i, "command", f"user{n}", f"cmd {i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(40):
                store.records(limit=5)
                store.head()
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert store.count() == 160 and [r.seq for r in store.records(limit=None)] == list(range(160, 0, -1))
    assert store.verify().ok
    store.close()


def test_the_file_is_private_and_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "state" / "audit.sqlite"
    filled(path, 1).close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_what_is_not_an_audit_store_is_refused_by_name(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    raw(other, "CREATE TABLE users (name TEXT)")
    with pytest.raises(AuditError, match=f"{other}: not an audit store"):
        AuditStore(other)
    conn = sqlite3.connect(other)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # left exactly as it was
    conn.close()
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(AuditError, match=f"audit store {garbage}: cannot open it: file is not a database"):
        AuditStore(garbage)
    with pytest.raises(AuditError, match=f"no audit store at {tmp_path / 'missing.sqlite'}"):
        AuditStore(tmp_path / "missing.sqlite", create=False)
    newer = tmp_path / "newer.sqlite"
    filled(newer, 1).close()
    raw(newer, "PRAGMA user_version = 7")
    with pytest.raises(AuditError, match="format version 7"):
        AuditStore(newer)


def test_a_damaged_file_is_reported_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "audit.sqlite"
    filled(path, 2000).close()
    raw(path, "PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    for page in (3, len(data) // 4096 - 3):  # an index page and a table page, say
        data[page * 4096:(page + 1) * 4096] = b"\x55" * 4096
    path.write_bytes(data)
    try:
        with AuditStore(path) as store:
            result = store.verify()
    except AuditError as exc:
        assert str(exc).startswith(f"audit store {path}: ")
    else:
        assert not result.ok and result.reason.startswith("the database file is damaged: ")


def test_a_closed_store_says_so(tmp_path: Path) -> None:
    store = filled(tmp_path / "audit.sqlite", 1)
    store.close()
    with pytest.raises(AuditError, match="cannot append"):
        store.append(T0, "stop", "system", "late")
