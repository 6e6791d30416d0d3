"""The audit chain anchored off the box: the structured data and framing of forwarded records, the collector's
address, and ``appliance audit verify --against FILE`` naming a rollback, a deletion and a fresh chain (what the
operator reads, and the exit status)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from appliance import leap
from appliance.audit import cli
from appliance.audit.chain import GENESIS, AuditRecord
from appliance.audit.remote import DELETION, FRESH_CHAIN, OK, ROLLBACK, check_against, parse_log
from appliance.audit.store import AuditStore
from appliance.audit.syslog import SyslogTarget, format_rfc5424, octet_counted, parse_target

TABLE = leap.LeapTable.load_default()
S = 1_000_000_000
T0 = leap.utc_fields_to_tai(2026, 12, 3, 10, 0, 0, 0, TABLE)
HASH, PREV, CHAIN = "ab" * 32, "cd" * 32, "ef" * 32


# --- what a forwarded record looks like ------------------------------------------------------------------------


def test_structured_data_carries_seq_hash_prev_and_chain() -> None:
    record = AuditRecord(41, T0, "login", "admin", "admin logged in", {}, PREV, HASH)
    message = format_rfc5424(record, "gm1", utc_label="2026-12-03T10:00:00Z", chain_id=CHAIN)
    assert message == (b'<109>1 2026-12-03T10:00:00Z gm1 appliance - login [audit@32473 seq="41" kind="login" '
                       b'actor="admin" hash="' + HASH.encode() + b'" prev="' + PREV.encode() + b'" chain="'
                       + CHAIN.encode() + b'"] \xef\xbb\xbfadmin logged in')
    parsed = parse_log([message.decode("utf-8")])
    assert parsed.records == 1 and list(parsed.chains) == [CHAIN]
    assert parsed.chains[CHAIN].hashes[41] == (bytes.fromhex(HASH), 1)


def test_octet_counting_frames_are_length_space_message() -> None:
    message = "<110>1 - gm1 appliance - start - \ufeffé".encode()
    assert octet_counted(message) == b"%d " % len(message) + message
    assert octet_counted(b"x") == b"1 x"


@pytest.mark.parametrize(("text", "target"), [
    ("192.0.2.1:514", SyslogTarget("udp", "192.0.2.1", 514)), ("::1:5514", SyslogTarget("udp", "::1", 5514)),
    ("tls://collector.example", SyslogTarget("tls", "collector.example", 6514)),
    ("TCP://[2001:db8::1]:601", SyslogTarget("tcp", "2001:db8::1", 601)),
    ("udp://loghost", SyslogTarget("udp", "loghost", 514))])
def test_collector_addresses(text: str, target: SyslogTarget) -> None:
    assert parse_target(text) == target


@pytest.mark.parametrize("text", ["loghost", "ftp://loghost:21", "tls://loghost:0", "tcp://loghost:70000",
                                  "tls://bad host:6514"])
def test_bad_collector_addresses_are_named(text: str) -> None:
    with pytest.raises(ValueError, match="audit.syslog"):
        parse_target(text)


def test_a_parser_reads_what_an_escaped_actor_became_and_skips_other_lines() -> None:
    record = AuditRecord(2, T0, "login.failed", 'ev"il]\\', "x", {}, PREV, HASH)
    line = format_rfc5424(record, "gm1", utc_label="-", chain_id=CHAIN).decode("utf-8")
    parsed = parse_log(["Dec  3 10:00:00 other sshd[1]: unrelated", "2026-12-03T10:00:01Z gm1 " + line,
                        '<13>1 - gm1 appliance - start [audit@32473 seq="x" hash="nothex"]'])
    assert (parsed.records, parsed.malformed, parsed.first_malformed_line) == (1, 1, 3)


# --- verify --against --------------------------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="appliance")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["audit", *argv])


def audit(state: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.run(parse(*argv), state, TABLE, now_tai_ns=T0 + 3600 * S)
    out, err = capsys.readouterr()
    return code, out, err


def append(state: Path, count: int, first_at_s: int = 0) -> str:
    """Append ``count`` records to the store in ``state`` and return its chain id."""
    with AuditStore(state / "audit.sqlite") as store:
        for i in range(count):
            store.append(T0 + (first_at_s + i) * S, "command", "admin", f"command {first_at_s + i}")
        return store.chain_id


def collector_log(state: Path, log: Path) -> None:
    """What a collector wrote of every record now in the store (one RFC 5424 line each, as rsyslog's
    RSYSLOG_SyslogProtocol23Format writes them), appended to ``log``."""
    with AuditStore(state / "audit.sqlite") as store, open(log, "a", encoding="utf-8") as out:
        for record in reversed(store.records(limit=None)):
            out.write(format_rfc5424(record, "gm1", utc_label="-", chain_id=store.chain_id).decode("utf-8") + "\n")


def keep_copy(state: Path, copy: Path) -> None:
    copy.mkdir()
    for name in ("audit.sqlite", "audit.sqlite.head"):
        shutil.copy2(state / name, copy / name)


def put_back(copy: Path, state: Path) -> None:
    for name in ("audit.sqlite", "audit.sqlite.head"):
        shutil.copy2(copy / name, state / name)


@pytest.fixture()
def box(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(state dir with 10 records, the collector's log of all 10, a consistent copy of the store at 6 records)."""
    state, older, log = tmp_path / "state", tmp_path / "older", tmp_path / "collector.log"
    state.mkdir()
    append(state, 6)
    keep_copy(state, older)
    append(state, 4, first_at_s=6)
    collector_log(state, log)
    return state, log, older


def test_the_untouched_chain_matches_the_remote_log(box: tuple[Path, Path, Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    state, log, _ = box
    code, out, err = audit(state, capsys, "verify", "--against", str(log))
    lines = out.splitlines()
    assert code == 0 and err == ""
    assert lines[0].startswith("audit chain OK: 10 records, head seq 10")
    assert lines[1].startswith(f"audit anchor {log} OK: 10 record(s) of seq 1..10 match the remote log hash for "
                               "hash; local head seq 10")


def test_a_rollback_to_an_older_consistent_copy_is_named(box: tuple[Path, Path, Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    state, log, older = box
    put_back(older, state)
    assert audit(state, capsys, "verify")[0] == 0  # fine on its own
    code, out, _ = audit(state, capsys, "verify", "--against", str(log))
    assert code == 1
    assert out.splitlines()[0].startswith("audit chain OK: 6 records")
    assert f"audit anchor {log} ROLLBACK: the remote log holds records up to seq 10" in out
    assert "but the local chain ends at seq 6: records 7..10 are gone from the box" in out


def test_a_rollback_written_on_from_the_older_copy_is_named_at_the_first_record_that_differs(
        box: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    state, log, older = box
    put_back(older, state)
    append(state, 5, first_at_s=100)  # the appliance goes on from record 6: records 7..11, other hashes
    collector_log(state, log)
    code, out, _ = audit(state, capsys, "verify", "--against", str(log))
    assert code == 1
    assert f"audit anchor {log} ROLLBACK: record 7 differs: the remote log holds hash" in out
    assert "the local chain was rolled back to before record 7 and written anew" in out


def test_a_deleted_store_and_head_file_are_named(box: tuple[Path, Path, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    state, log, _ = box
    (state / "audit.sqlite").unlink()
    (state / "audit.sqlite.head").unlink()
    code, out, _ = audit(state, capsys, "verify", "--against", str(log))
    assert code == 1
    assert out == (f"audit anchor {log} DELETION: the local audit chain is gone (no audit store at "
                   f"{state / 'audit.sqlite'}) but the remote log holds chain {_chain_of(log)[:16]}... "
                   "(seq 1..10, 10 record(s))\n")


def test_an_emptied_store_is_a_deletion(box: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    state, log, _ = box
    (state / "audit.sqlite").unlink()
    (state / "audit.sqlite.head").unlink()
    AuditStore(state / "audit.sqlite").close()
    code, out, _ = audit(state, capsys, "verify", "--against", str(log))
    assert code == 1 and f"DELETION: the local audit chain is gone (the store {state / 'audit.sqlite'} is empty)" in out


def test_a_chain_started_afresh_is_named(box: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    state, log, _ = box
    old_chain = _chain_of(log)
    (state / "audit.sqlite").unlink()
    (state / "audit.sqlite.head").unlink()
    new_chain = append(state, 3, first_at_s=200)  # the appliance started again on nothing
    code, out, _ = audit(state, capsys, "verify", "--against", str(log))
    assert code == 1 and new_chain != old_chain
    assert out.splitlines()[0].startswith("audit chain OK: 3 records")  # fine on its own
    assert (f"audit anchor {log} FRESH CHAIN: the remote log holds chain {old_chain[:16]}... (seq 1..10, "
            f"10 record(s), the last at line 10), which the local chain {new_chain[:16]}... (seq 1..3) does not "
            "continue") in out


def test_records_not_yet_forwarded_and_records_lost_in_transit_are_notes(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    state, log = tmp_path / "state", tmp_path / "collector.log"
    state.mkdir()
    append(state, 8)
    collector_log(state, log)
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:2] + lines[3:6]) + "\n")  # record 3 lost, 7 and 8 not sent yet
    code, out, _ = audit(state, capsys, "verify", "--against", str(log))
    assert code == 0
    assert "OK: 5 record(s) of seq 1..6 match the remote log hash for hash" in out
    assert "audit anchor note: 1 local record(s) up to seq 6 have no remote copy" in out
    assert "audit anchor note: the newest 2 local record(s) (after seq 6) have no remote copy yet" in out


def test_a_pruned_store_is_checked_from_the_record_before_its_first(tmp_path: Path) -> None:
    state, log = tmp_path / "state", tmp_path / "collector.log"
    state.mkdir()
    append(state, 5)
    collector_log(state, log)
    held = parse_log(log.read_text().splitlines())
    with AuditStore(state / "audit.sqlite") as store:
        links = [link for link in store.links() if link[0] >= 3]  # records 1 and 2 pruned here
        assert check_against(links, store.chain_id, held).verdict == OK
        forged = [(3, links[0][1], "00" * 32)] + links[1:]  # record 3 claims another predecessor
        result = check_against(forged, store.chain_id, held)
    assert (result.verdict, result.reason.startswith("record 2 differs")) == (ROLLBACK, True)


def test_verdicts_without_chain_ids_rest_on_the_hashes() -> None:
    def line(seq: int, digest: str) -> str:
        return f'<110>1 - gm1 appliance - command [audit@32473 seq="{seq}" hash="{digest}" prev="{GENESIS}"]'
    held = parse_log([line(1, HASH), line(2, PREV)])
    assert check_against([(1, HASH, GENESIS)], "", held).verdict == ROLLBACK
    assert check_against([(1, PREV, GENESIS)], "", held).verdict == ROLLBACK
    assert check_against([(1, HASH, GENESIS), (2, PREV, HASH)], "", held).verdict == OK
    assert check_against([], "", held).verdict == DELETION
    assert check_against(None, CHAIN, held, "gone").verdict == DELETION
    assert FRESH_CHAIN != OK


def test_a_remote_log_without_audit_records_cannot_be_checked(box: tuple[Path, Path, Path], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    state, _, _ = box
    other = tmp_path / "messages"
    other.write_text("Dec  3 10:00:00 gm1 appliance: start\n")
    code, out, err = audit(state, capsys, "verify", "--against", str(other))
    assert (code, out) == (2, "")
    assert err == (f"appliance: audit: the remote log {other} holds no audit records (no [audit@32473 seq=... "
                   "hash=...] structured data): write it with a template that keeps the structured data, such as "
                   "rsyslog's RSYSLOG_SyslogProtocol23Format\n")
    code, _, err = audit(state, capsys, "verify", "--against", str(tmp_path / "nope.log"))
    assert code == 2 and err.startswith(f"appliance: audit: cannot read the remote log {tmp_path / 'nope.log'}: ")


def _chain_of(log: Path) -> str:
    return next(iter(parse_log(log.read_text().splitlines()).chains))
