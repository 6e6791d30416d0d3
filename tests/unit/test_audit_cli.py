"""``appliance audit verify/export/show`` through appliance.audit.cli.run: what the operator reads, and the exit
status (0 fine, 1 broken, 2 could not be done)."""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

import pytest

from appliance import leap
from appliance.audit import cli
from appliance.audit.store import AuditStore

TABLE = leap.LeapTable.load_default()
S = 1_000_000_000
T0 = leap.utc_fields_to_tai(2026, 12, 3, 10, 0, 0, 0, TABLE)
NOW = T0 + 3600 * S  # 11:00 UTC


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="appliance")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["audit", *argv])


def audit(state: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.run(parse(*argv), state, TABLE, now_tai_ns=NOW)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def state(tmp_path: Path) -> Path:
    """A state directory whose store holds one record per 10 minutes from 10:00 to 10:50 UTC."""
    events = [("start", "system", "appliance started"), ("login", "admin", "admin logged in from 192.0.2.7"),
              ("config.change", "admin", "ntp.port: 123 -> 1123"),
              ("alarm.raised", "system", "GNSS receiver has no fix"),
              ("login.failed", "mallory", "bad password\nsecond line"), ("alarm.cleared", "system", "GNSS fix back")]
    with AuditStore(tmp_path / "audit.sqlite") as store:
        for i, (kind, actor, text) in enumerate(events):
            store.append(T0 + i * 600 * S, kind, actor, text)
    return tmp_path


def test_verify_reports_ok_with_the_head(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with AuditStore(state / "audit.sqlite") as store:
        head = store.head()
    assert head is not None
    assert audit(state, capsys, "verify") == (0, f"audit chain OK: 6 records, head seq 6 hash {head.hash}\n", "")


def test_verify_names_the_first_broken_record(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conn = sqlite3.connect(state / "audit.sqlite")
    with conn:
        conn.execute("UPDATE audit_record SET actor = 'nobody' WHERE seq = 3")
    conn.close()
    assert audit(state, capsys, "verify") == (
        1, "audit chain BROKEN at record 3: hash does not match its content\n", "")


def test_verify_an_empty_store_and_a_missing_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert audit(tmp_path, capsys, "verify") == (
        2, "", f"appliance: audit: no audit store at {tmp_path / 'audit.sqlite'}\n")
    assert not (tmp_path / "audit.sqlite").exists()  # verifying never creates a store
    AuditStore(tmp_path / "audit.sqlite").close()
    assert audit(tmp_path, capsys, "verify")[:2] == (0, "audit chain OK: 0 records (the store is empty)\n")


def test_verify_a_file_that_is_not_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "audit.sqlite").write_bytes(b"\0garbage" * 200)
    code, out, err = audit(tmp_path, capsys, "verify")
    assert (code, out) == (2, "")
    assert err.startswith(f"appliance: audit: audit store {tmp_path / 'audit.sqlite'}: cannot open it:")


def test_export_then_verify_the_bundle(state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = tmp_path / "out" / "bundle.json"
    bundle.parent.mkdir()
    code, out, err = audit(state, capsys, "export", "--since", "2026-12-03T10:10:00Z", "--until", "-20m", str(bundle))
    assert (code, err) == (0, "")
    assert out.startswith(f"exported 3 record(s), seq 2-4, to {bundle}, signed by key ")
    assert (state / "audit-signing.key").exists() and (state / "audit-signing.pub").exists()
    code, out, _ = audit(state, capsys, "verify", "--bundle", str(bundle))
    assert code == 0 and out.startswith("audit bundle OK: 3 record(s), seq 2-4, signed by key ")
    assert "only self-asserted" in out
    code, out, _ = audit(state, capsys, "verify", "--bundle", str(bundle), "--public-key",
                         str(state / "audit-signing.pub"))
    assert code == 0 and "signed by the trusted key" in out
    bundle.write_text(bundle.read_text().replace("ntp.port: 123 -> 1123", "ntp.port: 123 -> 123"))
    code, out, _ = audit(state, capsys, "verify", "--bundle", str(bundle), "--public-key",
                         str(state / "audit-signing.pub"))
    assert code == 1
    assert out.startswith(f"audit bundle {bundle} BROKEN at record 3: hash does not match its content; signature")


def test_export_and_verify_errors(state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = str(tmp_path / "b.json")
    assert audit(state, capsys, "export", "--since", "yesterday", target) == (
        2, "", "appliance: audit: bad time 'yesterday': expected " + cli.TIME_HELP + "\n")
    assert audit(state, capsys, "export", "--since", "2026-12-03T10:00:00+01:00", target)[2] == (
        "appliance: audit: bad time '2026-12-03T10:00:00+01:00': give it in UTC (ending in Z)\n")
    assert audit(state, capsys, "export", "--since", "2026-02-30T00:00:00Z", target)[0] == 2
    assert audit(state, capsys, "export", "--since", "now", "--until", "-1h", target)[2] == (
        "appliance: audit: --until -1h is not after --since now\n")
    assert audit(state, capsys, "export", "--since", "-5m", target)[2] == (
        "appliance: audit: no audit records in the export range\n")
    code, _, err = audit(state, capsys, "export", "--since", "-7d", str(tmp_path / "no" / "dir" / "b.json"))
    assert code == 2 and err.startswith(f"appliance: audit: cannot write {tmp_path / 'no' / 'dir' / 'b.json'}: ")
    assert audit(state, capsys, "verify", "--bundle", target) == (
        2, "", f"appliance: audit: cannot read bundle {target}: No such file or directory\n")
    audit(state, capsys, "export", "--since", "-7d", target)
    assert audit(state, capsys, "verify", "--bundle", target, "--public-key", str(tmp_path / "none.pub")) == (
        2, "", f"appliance: audit: cannot read public key {tmp_path / 'none.pub'}: No such file or directory\n")


def test_show_prints_the_latest_records_oldest_first(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = audit(state, capsys, "show", "--last", "2")
    assert code == 0
    assert out.splitlines() == [
        "      5 2026-12-03T10:40:00.000Z login.failed  mallory      bad password\\x0asecond line",
        "      6 2026-12-03T10:50:00.000Z alarm.cleared system       GNSS fix back"]
    assert [line.split()[0] for line in audit(state, capsys, "show", "--kind", "login", "--kind",
                                               "login.failed")[1].splitlines()] == ["2", "5"]
    assert [line.split()[0] for line in audit(state, capsys, "show", "--search", "gnss")[1].splitlines()] == ["4", "6"]
    assert audit(state, capsys, "show", "--search", "nothing like it") == (0, "", "no audit records match\n")
    assert audit(state, capsys, "show", "--last", "0")[0] == 2


def test_parse_time_forms() -> None:
    assert cli.parse_time("now", TABLE, NOW) == NOW
    assert cli.parse_time("-7d", TABLE, NOW) == NOW - 7 * 86_400 * S
    assert cli.parse_time("-90s", TABLE, NOW) == NOW - 90 * S
    assert cli.parse_time("2026-12-03T10:00:00Z", TABLE, NOW) == T0
    assert cli.parse_time("2026-12-03 10:00:00.25", TABLE, NOW) == T0 + S // 4
    assert cli.parse_time("2026-12-03", TABLE, NOW) == T0 - 10 * 3600 * S
    leap_second = cli.parse_time("2016-12-31T23:59:60Z", TABLE, NOW)
    assert str(leap.tai_to_utc(leap_second, TABLE)) == "2016-12-31T23:59:60.000000000Z"
    with pytest.raises(ValueError, match="not an inserted leap second"):
        cli.parse_time("2017-06-30T23:59:60Z", TABLE, NOW)
