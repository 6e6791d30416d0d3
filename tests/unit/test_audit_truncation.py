"""A store cut short is caught (appliance.audit.store's head file): deleting the newest records with sqlite3 makes
``appliance audit verify`` fail naming them, a deleted head file is reported, a store a step ahead of its head file
(a crash between the commit and the head write) is fine, the running appliance never reuses a sequence number but
keeps the store cut short as evidence, starts a new chain after the recorded head and raises an alarm, and
``verify(full=False)`` re-hashes only what is new yet still catches a truncation every time."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance import config as cfg
from appliance import leap
from appliance.audit.chain import GENESIS, HEAD_NOTE, TRUNCATED, build_record
from appliance.audit.service import AUDIT_HEAD_MISSING, AUDIT_TRUNCATED, AuditPart
from appliance.audit.store import (HEAD_DELETED, HEAD_MISSING, HEAD_OK, HEAD_TRUNCATED, AuditStore, AuditTruncated,
                                   head_path_of, read_head)
from appliance.cli import main
from appliance.runtime.platforms import simulated
from appliance.sched import SimScheduler

S = 1_000_000_000
T0 = 1_800_000_037 * S


def filled(path: Path, n: int, **kwargs: object) -> AuditStore:
    store = AuditStore(path, **kwargs)  # type: ignore[arg-type]
    for i in range(n):
        store.append(T0 + i * S, "command", "admin", f"event number {i}", {"i": i})
    return store


def sql(path: Path, statement: str, *params: object) -> None:
    """What someone with a shell on the appliance does: sqlite3 audit.sqlite "..."."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(statement, params)
    conn.close()


def verify_cli(state: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["audit", "verify", "--set", f"state_dir={state}"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def state(tmp_path: Path) -> Path:
    """A state directory whose store holds records 1..60, and the hash of record 60."""
    filled(tmp_path / "audit.sqlite", 60).close()
    return tmp_path


def head_hash(state: Path) -> str:
    head, _ = read_head(head_path_of(state / "audit.sqlite"))
    assert head is not None and head.seq == 60
    return head.hash


# --- appliance audit verify -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("kept", "missing"), [(59, "record 60 is"), (40, "records 41..60 are"),
                                               (2, "records 3..60 are"), (0, "records 1..60 are")])
def test_verify_names_the_records_cut_from_the_end(state: Path, capsys: pytest.CaptureFixture[str], kept: int,
                                                   missing: str) -> None:
    digest = head_hash(state)
    sql(state / "audit.sqlite", "DELETE FROM audit_record WHERE seq > ?", kept)
    code, out, err = verify_cli(state, capsys)
    where = "the store is empty" if kept == 0 else f"the store ends at record {kept}"
    assert (code, err) == (1, "")
    assert out == f"audit chain BROKEN: {missing} missing: the head file records seq 60 (hash {digest[:12]}...) " \
                  f"but {where}\n"


def test_verify_names_a_rewritten_head_record(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A newest record replaced by one whose hash was recomputed chains perfectly; the head file still tells."""
    digest = head_hash(state)
    with AuditStore(state / "audit.sqlite") as store:
        before, original = store.records(limit=2)[1], store.records(limit=1)[0]
    forged = build_record(before.hash, 60, original.at_tai_ns, "command", "admin", "nothing happened")
    sql(state / "audit.sqlite", "UPDATE audit_record SET text = ?, detail = '{}', hash = ? WHERE seq = 60",
        forged.text, forged.hash)
    code, out, _ = verify_cli(state, capsys)
    assert code == 1
    assert out == (f"audit chain BROKEN: record 60 was rewritten: its hash is {forged.hash[:12]}... but the head "
                   f"file records seq 60 (hash {digest[:12]}...)\n")


def test_a_store_ahead_of_its_head_file_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A crash between the commit and the head write leaves the head file a step behind: that is fine."""
    path = tmp_path / "audit.sqlite"
    with filled(path, 10) as store:
        behind = head_path_of(path).read_bytes()
        newest = store.append(T0 + 20 * S, "command", "admin", "committed; then the crash, before the head write")
    head_path_of(path).write_bytes(behind)
    assert verify_cli(tmp_path, capsys)[:2] == (0, f"audit chain OK: 11 records, head seq 11 hash {newest.hash}\n")
    with AuditStore(path) as store:
        assert store.check_head().state == HEAD_OK
        assert store.append(T0 + 21 * S, "command", "admin", "goes on").seq == 12  # not refused


def test_a_prune_that_removed_the_head_files_record_is_fine_after_a_crash(tmp_path: Path) -> None:
    """Retention may remove the head file's record itself (everything is old); a crash before the head write then
    leaves a head file naming a record that is gone, but accounted for by the checkpoint."""
    path = tmp_path / "audit.sqlite"
    with filled(path, 5, max_records=1) as store:
        behind = head_path_of(path).read_bytes()  # seq 5
        assert store.prune(T0 + 30 * S) == 5  # records 1..5 go; checkpoint 6 names record 5
        head_path_of(path).write_bytes(behind)
    with AuditStore(path) as store:
        assert store.check_head().state == HEAD_OK
        result = store.verify()
        assert result.ok and result.checked == 1, result.reason
        assert store.append(T0 + 31 * S, "command", "admin", "goes on").seq == 7


def test_a_deleted_head_file_is_reported(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head_path_of(state / "audit.sqlite").unlink()
    code, out, _ = verify_cli(state, capsys)
    assert code == 1
    assert out == (f"audit chain BROKEN: the head file {state / 'audit.sqlite.head'} is missing, though this store "
                   "has kept one since record 1: a store cut short cannot be ruled out\n")


def test_a_store_from_before_head_files_passes_with_a_warning(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head_path_of(state / "audit.sqlite").unlink()
    sql(state / "audit.sqlite", "DROP TABLE audit_meta")  # as an older release left it
    code, out, _ = verify_cli(state, capsys)
    assert code == 0
    ok, warning = out.splitlines()
    assert ok.startswith("audit chain OK: 60 records, head seq 60 hash ")
    assert warning.startswith(f"audit chain warning: no head file {state / 'audit.sqlite.head'} yet (a store from "
                              "before head files")


def test_an_unreadable_head_file_and_a_missing_store(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = head_path_of(state / "audit.sqlite")
    saved = head.read_bytes()
    head.write_text("{not json")
    code, out, _ = verify_cli(state, capsys)
    assert code == 1 and out.startswith(f"audit chain BROKEN: the head file {head} is unreadable (not an audit head")
    head.write_bytes(saved)
    for name in ("audit.sqlite", "audit.sqlite-wal", "audit.sqlite-shm"):
        (state / name).unlink(missing_ok=True)
    code, out, _ = verify_cli(state, capsys)
    assert code == 1
    assert out == (f"audit chain BROKEN: the store {state / 'audit.sqlite'} is missing but its head file {head} "
                   f"records seq 60 (hash {json.loads(saved)['hash'][:12]}...)\n")
    assert not (state / "audit.sqlite").exists()  # verifying never creates a store


def test_the_head_file_is_private_and_names_the_newest_record(tmp_path: Path) -> None:
    path = tmp_path / "state" / "audit.sqlite"
    with filled(path, 3) as store:
        newest = store.head()
    head = json.loads(head_path_of(path).read_text())
    assert newest is not None
    assert head == {"format": "appliance-audit-head", "version": 1, "store": "audit.sqlite", "seq": 3,
                    "hash": newest.hash, "at_tai_ns": newest.at_tai_ns}
    assert stat.S_IMODE(os.stat(head_path_of(path)).st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir() if "head" in p.name) == ["audit.sqlite.head"]  # no temp left


def test_the_store_refuses_to_write_on_a_store_cut_short(state: Path) -> None:
    with AuditStore(state / "audit.sqlite") as store:
        sql(state / "audit.sqlite", "DELETE FROM audit_record WHERE seq > 57")  # while it is open, too
        with pytest.raises(AuditTruncated, match=r"records 58\.\.60 are missing"):
            store.append(T0, "command", "admin", "would be record 58 again")
        with pytest.raises(AuditTruncated):
            store.prune(T0)  # retention must not remove what is left either
        assert [r.seq for r in store.records(limit=1)] == [57]
        assert store.check_head().state == HEAD_TRUNCATED


# --- the running appliance ------------------------------------------------------------------------------------


class Trail:
    """The audit trail as ``appliance run`` builds it: a simulated runtime, its alarms, and the AuditPart."""

    def __init__(self, state: Path) -> None:
        self.table = leap.LeapTable.load_default()
        self.runtime, _ = simulated(cfg.load(None, ["sim.seed=1"]), SimScheduler(T0 + 3600 * S), self.table)
        self.loop = asyncio.new_event_loop()
        self.store = AuditStore(state / "audit.sqlite")
        self.part = AuditPart(self.loop, self.store, self.runtime.status, self.runtime.now_tai_ns,
                              lambda: self.table, self.runtime.subscribe, alarm=self.runtime.alarm)

    def run_loop(self) -> None:
        self.loop.run_until_complete(asyncio.sleep(0))  # alarms raised off the loop are delivered on it

    def alarms(self) -> dict[str, str]:
        return {a.code: a.text for a in self.runtime.status().alarms if a.raised}

    def close(self) -> None:
        self.part.stop()
        self.loop.close()


@pytest.fixture()
def trail_of(state: Path) -> Iterator[Callable[[], Trail]]:
    made: list[Trail] = []

    def make() -> Trail:
        made.append(Trail(state))
        return made[-1]

    yield make
    for trail in made:
        if not trail.part.closed:
            trail.close()


def test_a_store_cut_short_is_kept_and_a_new_chain_continues_after_the_recorded_head(
        state: Path, trail_of: Callable[[], Trail], capsys: pytest.CaptureFixture[str]) -> None:
    digest = head_hash(state)
    sql(state / "audit.sqlite", "DELETE FROM audit_record WHERE seq > 40")
    trail = trail_of()
    trail.part.start()
    trail.run_loop()
    assert "records 41..60 missing" in trail.alarms()[AUDIT_TRUNCATED]
    assert "chain restarts at record 61" in trail.part.status()["chain_restarted"]

    evidence = state / "audit.sqlite.truncated-1"  # the store cut short, as it was: never deleted
    with AuditStore(evidence, create=False) as kept:
        assert [r.seq for r in kept.records(limit=None)] == list(range(40, 0, -1))
        assert kept.verify().reason.startswith("records 41..60 are missing: the head file records seq 60")
    assert stat.S_IMODE(os.stat(evidence).st_mode) == stat.S_IMODE(os.stat(f"{evidence}.head").st_mode) == 0o600
    records = list(reversed(trail.store.records(limit=None)))
    marker = records[0]
    assert (marker.seq, marker.kind, marker.prev_hash) == (61, TRUNCATED, digest)  # numbering goes on: no reuse
    assert marker.detail == {"head_seq": 60, "head_hash": digest, "found_seq": 40,
                             "found_hash": marker.detail["found_hash"], "evidence": "audit.sqlite.truncated-1"}
    assert [r.seq for r in records] == list(range(61, 61 + len(records)))
    assert {"start", "alarm.raised"} <= {r.kind for r in records}
    alarm_record = next(r for r in records if r.kind == "alarm.raised")
    assert alarm_record.detail.get("code") == AUDIT_TRUNCATED

    result = trail.store.verify()
    assert (result.ok, result.first_bad_seq) == (False, 41)
    assert result.reason == (f"records 41..60 are missing: the store was found ending at record 40 where the head "
                             f"file recorded 60 (hash {digest[:12]}...); record 61 restarts the chain from the "
                             "recorded head; the old store is kept as audit.sqlite.truncated-1")
    assert result.checked == len(records)  # the new chain itself is whole
    trail.close()

    # Every later check says so again, after a restart too, and nothing else is wrong.
    code, out, _ = verify_cli(state, capsys)
    assert code == 1 and out.startswith("audit chain BROKEN: records 41..60 are missing")
    again = trail_of()
    again.part.start()
    again.run_loop()
    assert AUDIT_TRUNCATED not in again.alarms()  # raised once, when it was found
    assert again.store.verify(full=False).first_bad_seq == 41
    assert not (state / "audit.sqlite.truncated-2").exists()
    # ... and a new break in the new chain is named beside it
    sql(state / "audit.sqlite", "UPDATE audit_record SET text = 'edited' WHERE seq = 62")
    code, out, _ = verify_cli(state, capsys)
    assert code == 1 and "records 41..60 are missing" in out and "record 62: hash does not match" in out


def test_a_store_cut_short_while_the_appliance_runs(state: Path, trail_of: Callable[[], Trail]) -> None:
    trail = trail_of()
    trail.part.start()
    head = trail.store.head()
    assert head is not None and head.kind == "start"
    sql(state / "audit.sqlite", "DELETE FROM audit_record WHERE seq > 55")  # someone with a shell, meanwhile
    written = trail.part.append(trail.runtime.now_tai_ns(), "command", "admin", "holdover start")
    assert written is not None and written.seq == head.seq + 2  # after the record that restarts the chain
    trail.run_loop()
    assert AUDIT_TRUNCATED in trail.alarms()
    marker = trail.store.records(kinds=[TRUNCATED])[0]
    assert (marker.seq, marker.prev_hash, marker.detail["found_seq"]) == (head.seq + 1, head.hash, 55)
    assert trail.part.failures == 0
    assert trail.store.verify().reason.startswith(f"records 56..{head.seq} are missing")


def test_a_rewritten_store_restarts_the_chain_too(state: Path, trail_of: Callable[[], Trail]) -> None:
    digest = head_hash(state)
    sql(state / "audit.sqlite", "UPDATE audit_record SET hash = ? WHERE seq = 60", "cd" * 32)
    trail = trail_of()
    trail.part.start()
    marker = list(reversed(trail.store.records(limit=None)))[0]
    assert (marker.seq, marker.prev_hash, marker.detail["found_seq"]) == (61, digest, 60)
    result = trail.store.verify()
    assert not result.ok and result.reason.startswith("record 60 was rewritten")


def test_a_store_deleted_outright_restarts_the_chain(state: Path, trail_of: Callable[[], Trail]) -> None:
    digest = head_hash(state)
    for name in ("audit.sqlite", "audit.sqlite-wal", "audit.sqlite-shm"):
        (state / name).unlink(missing_ok=True)
    trail = trail_of()
    trail.part.start()
    marker = list(reversed(trail.store.records(limit=None)))[0]
    assert (marker.seq, marker.prev_hash, marker.detail["found_seq"]) == (61, digest, 0)
    assert trail.store.verify().reason.startswith("records 1..60 are missing: the store was found empty")


def test_a_deleted_head_file_is_written_anew_with_a_warning(state: Path, trail_of: Callable[[], Trail]) -> None:
    head_path_of(state / "audit.sqlite").unlink()
    trail = trail_of()
    assert trail.store.check_head().state == HEAD_DELETED
    trail.part.start()
    trail.run_loop()
    assert AUDIT_HEAD_MISSING in trail.alarms()
    (note,) = trail.store.records(kinds=[HEAD_NOTE])
    assert note.seq == 61 and note.detail == {"reason": "deleted"}
    result = trail.store.verify()
    assert result.ok and result.warnings == (
        "record 61: the head file was found deleted at start and written anew, so records removed from the end of "
        "the store before that could have gone unnoticed",)


def test_a_store_from_before_head_files_gets_one_at_start(state: Path, trail_of: Callable[[], Trail]) -> None:
    head_path_of(state / "audit.sqlite").unlink()
    sql(state / "audit.sqlite", "DROP TABLE audit_meta")
    trail = trail_of()
    assert trail.store.check_head().state == HEAD_MISSING
    trail.part.start()
    trail.run_loop()
    assert AUDIT_HEAD_MISSING not in trail.alarms() and AUDIT_TRUNCATED not in trail.alarms()
    (note,) = trail.store.records(kinds=[HEAD_NOTE])
    assert note.detail == {"reason": "new"}
    result = trail.store.verify()
    assert result.ok and result.warnings == ()
    assert trail.store.check_head().state == HEAD_OK


# --- incremental verification ---------------------------------------------------------------------------------


def test_incremental_verify_rehashes_only_new_records_and_still_catches_a_truncation(tmp_path: Path) -> None:
    path = tmp_path / "audit.sqlite"
    with filled(path, 50) as store:
        first = store.verify(full=False)  # nothing verified before: every record
        assert (first.ok, first.checked, first.earlier) == (True, 50, 0)
        for i in range(3):
            store.append(T0 + (60 + i) * S, "login", "admin", f"login {i}")
        later = store.verify(full=False)
        assert (later.ok, later.checked, later.earlier) == (True, 3, 50), later.reason
        assert later.reason == ("3 new record(s) chained after record 50; the 50 up to it were verified by an earlier "
                                "check (a full check re-hashes them)")
        assert store.verify(full=False).checked == 0

        # An edit in place of an older record is the full check's to find ...
        sql(path, "UPDATE audit_record SET text = 'nothing happened' WHERE seq = 10")
        assert store.verify(full=False).ok
        broken = store.verify(full=True)
        assert (broken.ok, broken.first_bad_seq) == (False, 10)
        assert store.verify(full=False).first_bad_seq == 10  # a failed check is followed by full ones
        sql(path, "UPDATE audit_record SET text = 'event number 9' WHERE seq = 10")
        assert store.verify(full=True).ok

        # ... a deleted older record, a rewritten verified record and a truncation are the incremental one's too.
        sql(path, "DELETE FROM audit_record WHERE seq = 20")
        assert store.verify(full=False).first_bad_seq == 20


def test_incremental_verify_catches_a_truncation_every_time(tmp_path: Path) -> None:
    path = tmp_path / "audit.sqlite"
    with filled(path, 30) as store:
        assert store.verify(full=False).ok
        sql(path, "DELETE FROM audit_record WHERE seq > 25")
        for _ in range(2):
            result = store.verify(full=False)
            assert (result.ok, result.first_bad_seq) == (False, 26)
            assert result.reason.startswith("records 26..30 are missing: the head file records seq 30")


def test_incremental_verify_notices_a_rewritten_verified_record(tmp_path: Path) -> None:
    path = tmp_path / "audit.sqlite"
    with filled(path, 10) as store:
        assert store.verify(full=False).ok
        sql(path, "UPDATE audit_record SET hash = ? WHERE seq = 10", "ef" * 32)
        result = store.verify(full=False)
        assert not result.ok and result.first_bad_seq == 10 and "record 10: hash does not match" in result.reason


# --- the shared check for the console -------------------------------------------------------------------------


def test_the_shared_check_runs_at_most_once_per_interval(tmp_path: Path) -> None:
    now = [1000.0]
    with filled(tmp_path / "audit.sqlite", 5) as store:
        first = store.verify_shared(lambda: now[0])
        assert first is not None and first.fresh and first.result.checked == 5
        store.append(T0 + 9 * S, "login", "admin", "in")
        now[0] += 9.9
        cached = store.verify_shared(lambda: now[0])
        assert cached is not None and not cached.fresh and cached.result == first.result and cached.at_s == 1000.0
        assert store.shared_wait_s(now[0]) == pytest.approx(0.1)
        now[0] += 0.1
        fresh = store.verify_shared(lambda: now[0])
        assert fresh is not None and fresh.fresh and (fresh.result.checked, fresh.result.earlier) == (1, 5)
        now[0] -= 3600  # the host clock stepped back: not stuck on the old result
        assert store.verify_shared(lambda: now[0]).fresh  # type: ignore[union-attr]


def test_a_long_shared_check_spaces_out_the_next(tmp_path: Path) -> None:
    ticks = iter([0.0, 4.0, 20.0, 39.0, 40.0, 41.0])  # a check from 0 to 4 s: the next not before 40 s
    with filled(tmp_path / "audit.sqlite", 2) as store:
        assert store.verify_shared(lambda: next(ticks)).fresh  # type: ignore[union-attr]
        assert not store.verify_shared(lambda: next(ticks)).fresh  # type: ignore[union-attr]  # 20 s
        assert not store.verify_shared(lambda: next(ticks)).fresh  # type: ignore[union-attr]  # 39 s
        assert store.verify_shared(lambda: next(ticks)).fresh  # type: ignore[union-attr]  # 40 s (ends 41 s)


def test_genesis_is_what_an_empty_store_chains_from(tmp_path: Path) -> None:
    with AuditStore(tmp_path / "audit.sqlite") as store:
        assert store.check_head().state == "none" and store.verify().ok
        record = store.append(T0, "start", "system", "first")
        assert record.prev_hash == GENESIS and store.check_head().state == HEAD_OK
