"""Signed audit bundles (appliance.audit.bundle): the key is created once and kept private; an exported bundle
verifies; any edit of a record or of the signature fails, naming the record's seq or the signature."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from appliance.audit import bundle
from appliance.audit.bundle import export_bundle, key_fingerprint, load_or_create_key, public_key_pem, verify_bundle
from appliance.audit.chain import AuditError, canonical_json
from appliance.audit.store import AuditStore

S = 1_000_000_000
T0 = 1_800_000_037 * S


@pytest.fixture()
def exported(tmp_path: Path) -> tuple[Path, Ed25519PrivateKey]:
    """A bundle of records 4-8 out of a store of 10 (one per second from T0)."""
    key = load_or_create_key(tmp_path / "state")
    with AuditStore(tmp_path / "state" / "audit.sqlite") as store:
        for i in range(10):
            store.append(T0 + i * S, "alarm.raised" if i % 2 else "login", "admin", f"event {i}", {"i": i, "f": 0.1})
        done = export_bundle(store, T0 + 3 * S, T0 + 8 * S, key, tmp_path / "bundle.json", label_of=lambda ns: f"L{ns}")
    assert (done.records, done.first_seq, done.last_seq) == (5, 4, 8)
    return tmp_path / "bundle.json", key


def edit(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document, indent=1))


def test_key_is_created_once_private_and_published(tmp_path: Path) -> None:
    state = tmp_path / "state"
    key = load_or_create_key(state)
    assert stat.S_IMODE(os.stat(state / bundle.KEY_FILE).st_mode) == 0o600
    assert (state / bundle.PUBLIC_KEY_FILE).read_bytes() == public_key_pem(key.public_key())
    (state / bundle.PUBLIC_KEY_FILE).unlink()
    again = load_or_create_key(state)
    assert key_fingerprint(again.public_key()) == key_fingerprint(key.public_key())
    assert (state / bundle.PUBLIC_KEY_FILE).exists()
    assert [p.name for p in state.iterdir() if p.name.startswith(".")] == []  # no temp files left behind


def test_a_bad_key_file_is_named(tmp_path: Path) -> None:
    (tmp_path / bundle.KEY_FILE).write_text("not a key")
    with pytest.raises(AuditError, match=f"{tmp_path / bundle.KEY_FILE}: not a readable"):
        load_or_create_key(tmp_path)


def test_the_bundle_holds_every_field_and_verifies(exported: tuple[Path, Ed25519PrivateKey]) -> None:
    path, key = exported
    document = json.loads(path.read_text())
    assert [r["seq"] for r in document["records"]] == [4, 5, 6, 7, 8]
    assert set(document["records"][0]) == {"seq", "at_tai_ns", "kind", "actor", "text", "detail", "prev_hash", "hash",
                                           "at_utc"}
    assert document["anchor"] == {"seq": 3, "hash": document["records"][0]["prev_hash"]}
    assert document["head"]["seq"] == 10
    assert document["public_key_sha256"] == key_fingerprint(key.public_key())
    result = verify_bundle(path, None)
    assert result.ok and result.checked == 5 and not result.signer_trusted
    assert "only self-asserted" in result.reason and key_fingerprint(key.public_key()) in result.reason
    trusted = verify_bundle(path, public_key_pem(key.public_key()))
    assert trusted.ok and trusted.signer_trusted and "trusted key" in trusted.reason


@pytest.mark.parametrize("field", ["seq", "at_tai_ns", "kind", "actor", "text", "detail", "prev_hash", "hash"])
def test_editing_any_field_of_a_record_names_its_seq(exported: tuple[Path, Ed25519PrivateKey], field: str) -> None:
    path, _ = exported

    def change(document: dict) -> None:
        record = document["records"][2]  # seq 6
        value = record[field]
        record[field] = (value + 1 if isinstance(value, int) else {**value, "x": 1} if isinstance(value, dict)
                         else value.replace(value[0], "f" if value[0] != "f" else "e", 1))
    edit(path, change)
    result = verify_bundle(path, None)
    assert not result.ok and result.first_bad_seq == 6
    assert result.reason.startswith("record 6: ") and "signature" in result.reason


def test_editing_one_byte_of_a_record_text_fails_naming_it(exported: tuple[Path, Ed25519PrivateKey]) -> None:
    path, _ = exported
    data = path.read_bytes()
    at = data.index(b'"event 7"') + 1
    path.write_bytes(data[:at] + b"E" + data[at + 1:])
    result = verify_bundle(path, None)
    assert (result.ok, result.first_bad_seq) == (False, 8)
    assert result.reason.startswith("record 8: hash does not match its content")


def test_removing_a_record_or_editing_the_label_fails(exported: tuple[Path, Ed25519PrivateKey]) -> None:
    path, _ = exported
    original = path.read_bytes()
    edit(path, lambda d: d["records"].pop())  # the tail: the chain still links, only the signature can tell
    assert verify_bundle(path, None).reason == "signature does not match the bundle's contents: altered after signing"
    path.write_bytes(original)
    edit(path, lambda d: d["records"].pop(1))
    result = verify_bundle(path, None)
    assert result.first_bad_seq == 5 and "missing" in result.reason
    path.write_bytes(original)
    edit(path, lambda d: d["records"][0].update(at_utc="somewhen else"))
    assert verify_bundle(path, None).reason.startswith("signature does not match")


def test_every_byte_of_the_signature_matters(exported: tuple[Path, Ed25519PrivateKey]) -> None:
    path, _ = exported
    original = path.read_bytes()
    value = json.loads(original)["signature"]["value"]
    start = original.index(value.encode())
    for offset in range(0, len(value), 7):
        flipped = "0" if value[offset] != "0" else "1"
        path.write_bytes(original[:start + offset] + flipped.encode() + original[start + offset + 1:])
        result = verify_bundle(path, None)
        assert not result.ok and result.first_bad_seq is None and result.reason.startswith("signature")
    path.write_bytes(original.replace(value.encode(), value.upper().encode()))
    assert verify_bundle(path, None).reason == "signature: not 128 lowercase hex digits"


def test_an_edit_re_signed_by_another_key_fails_against_the_trusted_key(
        exported: tuple[Path, Ed25519PrivateKey]) -> None:
    path, key = exported
    intruder = Ed25519PrivateKey.generate()
    document = json.loads(path.read_text())
    document["records"][0]["text"] = "forged"
    del document["signature"]
    document["public_key"] = public_key_pem(intruder.public_key()).decode()
    document["public_key_sha256"] = key_fingerprint(intruder.public_key())
    document["signature"] = {"algorithm": "Ed25519", "value": intruder.sign(canonical_json(document)).hex()}
    path.write_text(json.dumps(document))
    result = verify_bundle(path, public_key_pem(key.public_key()))
    assert not result.ok and result.first_bad_seq == 4
    assert result.reason.startswith("record 4: hash does not match its content; signature does not verify against "
                                    f"the trusted key {key_fingerprint(key.public_key())}")


def test_a_fully_re_signed_forgery_only_passes_as_self_asserted(tmp_path: Path) -> None:
    real, intruder = load_or_create_key(tmp_path / "real"), Ed25519PrivateKey.generate()
    with AuditStore(tmp_path / "forged.sqlite") as store:
        store.append(T0, "login", "mallory", "nothing happened")
        export_bundle(store, T0, T0 + S, intruder, tmp_path / "forged.json")
    self_asserted = verify_bundle(tmp_path / "forged.json", None)
    assert self_asserted.ok and not self_asserted.signer_trusted
    assert self_asserted.signer_fingerprint == key_fingerprint(intruder.public_key())
    result = verify_bundle(tmp_path / "forged.json", public_key_pem(real.public_key()))
    assert not result.ok and result.reason.startswith("signature does not verify against the trusted key")


def test_unreadable_and_foreign_files(tmp_path: Path, exported: tuple[Path, Ed25519PrivateKey]) -> None:
    with pytest.raises(OSError):
        verify_bundle(tmp_path / "missing.json", None)
    (tmp_path / "x.json").write_text("{\"format\": \"something\"}")
    assert verify_bundle(tmp_path / "x.json", None).reason.startswith("not an audit bundle")
    (tmp_path / "y.json").write_text("{\"records\": [")
    assert verify_bundle(tmp_path / "y.json", None).reason.startswith("not a readable audit bundle: invalid JSON")
    with pytest.raises(ValueError, match="trusted key: not a PEM public key"):
        verify_bundle(exported[0], b"garbage")


def test_an_empty_range_is_refused(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    with AuditStore(tmp_path / "audit.sqlite") as store:
        store.append(T0, "start", "system", "up")
        with pytest.raises(ValueError, match="no audit records"):
            export_bundle(store, T0 + S, T0 + 2 * S, key, tmp_path / "b.json")
        with pytest.raises(ValueError, match="until must be after since"):
            export_bundle(store, T0, T0, key, tmp_path / "b.json")
    assert not (tmp_path / "b.json").exists()
