"""The audit signing key is never read or written through a symbolic link planted where it belongs (a key someone
else chose would sign exports; a link to a file someone else reads would hand them the key)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from appliance import leap
from appliance.audit import bundle, cli
from appliance.audit.chain import AuditError
from appliance.audit.store import AuditStore
from appliance.edge.persist import UnsafePathError

TABLE = leap.LeapTable.load_default()
T0 = leap.utc_fields_to_tai(2026, 12, 3, 10, 0, 0, 0, TABLE)


@pytest.mark.parametrize("target_exists", [False, True])
def test_a_link_where_the_key_belongs_is_refused_naming_it(tmp_path: Path, target_exists: bool) -> None:
    elsewhere = tmp_path / "elsewhere.pem"
    if target_exists:
        bundle.load_or_create_key(tmp_path / "other")  # a real key someone else holds
        elsewhere.write_bytes((tmp_path / "other" / bundle.KEY_FILE).read_bytes())
    state = tmp_path / "state"
    state.mkdir()
    (state / bundle.KEY_FILE).symlink_to(elsewhere)
    with pytest.raises(AuditError, match=f"{state / bundle.KEY_FILE} is a symbolic link where a private file "
                                         "belongs") as raised:
        bundle.load_or_create_key(state)
    assert isinstance(raised.value.__cause__, UnsafePathError)
    assert elsewhere.exists() == target_exists  # nothing written through the link
    assert (state / bundle.KEY_FILE).is_symlink()


def test_export_with_a_linked_key_fails_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with AuditStore(tmp_path / "audit.sqlite") as store:
        store.append(T0, "start", "system", "appliance started")
    (tmp_path / bundle.KEY_FILE).symlink_to(tmp_path / "planted.pem")
    parser = argparse.ArgumentParser(prog="appliance")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["audit", "export", "--since", "2026-12-03T00:00:00Z", str(tmp_path / "out.json")])
    assert cli.run(args, tmp_path, TABLE, now_tai_ns=T0 + 10**9) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"appliance: audit: audit signing key refused: {tmp_path / bundle.KEY_FILE} is a "
                          "symbolic link where a private file belongs")
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "planted.pem").exists()
