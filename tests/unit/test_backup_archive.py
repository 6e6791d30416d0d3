"""Backup archives: signed and versioned, keys sealed under a passphrase, refused when altered, and a restore plan
that says what changes with the secrets masked."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.backup.archive import (VERSION, BackupError, Contents, FileItem, Users, build, open_keys, plan, read,
                                      seal_keys)

SIGNER = Ed25519PrivateKey.generate()
SALT, NONCE = b"s" * 16, b"n" * 12
PASS = "correct horse battery"


def contents(settings_text: bytes = b"ntp.port = 1123\n", role: str = "operator") -> Contents:
    return Contents(
        files=(FileItem("console-settings.toml", "state", "console-settings.toml", settings_text),
               FileItem("snmp-engine-id", "state", "snmp-engine-id", b"80001f8804\n", 0o644)),
        users=Users((("alice", role, b"a" * 16, b"h" * 32, 0),), (("d" * 64, "alice", "grafana", 1.5),)),
        keys=(FileItem("web-key.pem", "state", "web-key.pem", b"-----BEGIN PRIVATE KEY-----\n"),))


def archive_bytes(c: Contents | None = None, with_keys: bool = True) -> bytes:
    c = c or contents()
    sealed = seal_keys(c.keys, PASS, SALT, NONCE) if with_keys else None
    return build(c, SIGNER, {"appliance_version": "1.0", "created_utc": "2026-12-07T10:00:00Z"}, sealed)


def test_an_archive_reads_back_what_was_written_and_its_keys_only_with_the_passphrase() -> None:
    archive = read(archive_bytes())
    assert archive.contents.files == contents().files and archive.contents.users == contents().users
    assert archive.has_keys and archive.key_names == ("web-key.pem",)
    assert open_keys(archive, PASS) == contents().keys
    with pytest.raises(BackupError, match="wrong passphrase"):
        open_keys(archive, PASS + "!")
    assert b"BEGIN PRIVATE KEY" not in archive_bytes()  # the keys are never in the clear


def test_a_short_passphrase_is_refused() -> None:
    with pytest.raises(BackupError, match="at least 12"):
        seal_keys(contents().keys, "short", SALT, NONCE)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_change_to_a_signed_field_is_refused(data: st.DataObject) -> None:
    doc = json.loads(archive_bytes())
    field = data.draw(st.sampled_from(["files", "users", "keys", "created_utc", "key_names"]))
    if field == "files":
        doc["files"][0]["data"] = base64.b64encode(b"ntp.port = 9999\n").decode()
    elif field == "users":
        doc["users"]["users"][0]["role"] = "admin"
    elif field == "keys":
        raw = bytearray(base64.b64decode(doc["keys"]["data"]))
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1
        doc["keys"]["data"] = base64.b64encode(bytes(raw)).decode()
    elif field == "created_utc":
        doc["created_utc"] = "2030-01-01T00:00:00Z"
    else:
        doc["key_names"] = []
    with pytest.raises(BackupError, match="altered"):
        read(json.dumps(doc).encode())


def test_a_newer_version_and_other_files_are_refused_with_a_clear_message() -> None:
    doc = json.loads(archive_bytes())
    doc["version"] = VERSION + 1
    with pytest.raises(BackupError, match=f"format version {VERSION + 1}.*upgrade it first"):
        read(json.dumps(doc).encode())
    with pytest.raises(BackupError, match="not JSON"):
        read(b"\x00garbage")
    with pytest.raises(BackupError, match="format is not appliance-backup"):
        read(b'{"format": "something-else", "version": 1}')


def test_a_file_placed_outside_the_state_directory_is_refused_even_when_signed() -> None:
    evil = Contents(files=(FileItem("x", "state", "../../etc/cron.d/x", b"* * * * * root sh\n"),))
    with pytest.raises(BackupError, match="outside the state directory"):
        read(archive_bytes(evil, with_keys=False))


def test_the_plan_names_each_change_and_masks_secrets() -> None:
    old = contents(b'ntp.port = 1123\nsnmp.community = "old-secret"\n')
    new = contents(b'ntp.port = 123\nsnmp.community = "new-secret"\nweb.port = 8444\n', role="admin")
    lines = plan(old, Contents(new.files, Users(new.users.users + (("bob", "viewer", b"b" * 16, b"i" * 32, 0),),
                                                new.users.tokens), ()), keys_kept=["web-key.pem"])
    text = "\n".join(lines)
    assert "console-settings.toml: ntp.port = 123 (was 1123)" in lines
    assert "console-settings.toml: snmp.community = '********' (was '********')" in lines
    assert "console-settings.toml: web.port = 8444 (new)" in lines
    assert "console user alice: role admin (was operator)" in lines and "console user bob: added (viewer)" in lines
    assert "keys kept as they are (not restored): web-key.pem" in lines
    assert "secret" not in text
    assert plan(old, old) == []


def test_an_archive_signed_by_one_key_names_that_key() -> None:
    from appliance.backup.archive import fingerprint

    assert read(archive_bytes()).fingerprint == fingerprint(SIGNER.public_key())
