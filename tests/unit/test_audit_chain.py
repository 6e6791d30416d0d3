"""The audit hash chain (appliance.audit.chain): any chain built by appending verifies; any edit, removal or
reordering of a record is caught and the first broken record is named."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.audit.chain import (CHECKPOINT, GENESIS, KINDS, AuditRecord, build_record, canonical_json,
                                   checkpoint_detail, normalize_detail, record_hash, verify_chain, verify_stored)

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8)
                           | st.floats(allow_nan=False, allow_infinity=False),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                      max_size=3), max_leaves=5)
entries = st.tuples(st.integers(min_value=0, max_value=2**62), st.sampled_from(KINDS) | st.text(min_size=1),
                    st.text(max_size=12), st.text(max_size=30), st.dictionaries(st.text(max_size=6), json_values,
                                                                                 max_size=3))


def chain_of(items: list[tuple[int, str, str, str, dict]]) -> list[AuditRecord]:
    records: list[AuditRecord] = []
    for at, kind, actor, text, detail in items:
        prev = records[-1].hash if records else GENESIS
        records.append(build_record(prev, len(records) + 1, at, kind, actor, text, detail))
    return records


def altered(record: AuditRecord, field: str) -> AuditRecord:
    value = getattr(record, field)
    if field == "detail":
        new = {**value, "forged": True} if "forged" not in value else {}
    elif isinstance(value, int):
        new = value + 1
    elif field in ("hash", "prev_hash"):
        new = ("1" if value[0] != "1" else "2") + value[1:]
    else:
        new = value + "x"
    return dataclasses.replace(record, **{field: new})


@settings(max_examples=60, deadline=None)
@given(st.lists(entries, max_size=12))
def test_any_sequence_of_appends_verifies(items: list) -> None:
    records = chain_of(items)
    result = verify_chain(records, GENESIS)
    assert result.ok and result.checked == len(records) and result.first_bad_seq is None
    assert verify_stored(records).ok


@settings(max_examples=80, deadline=None)
@given(st.lists(entries, min_size=1, max_size=8), st.data())
def test_altering_any_field_of_any_record_names_that_record(items: list, data: st.DataObject) -> None:
    records = chain_of(items)
    i = data.draw(st.integers(0, len(records) - 1))
    field = data.draw(st.sampled_from([f.name for f in dataclasses.fields(AuditRecord)]))
    records[i] = altered(records[i], field)
    result = verify_chain(records, GENESIS)
    assert not result.ok
    assert result.first_bad_seq == i + 1 and result.checked == i
    assert result.reason.startswith(f"record {i + 1}: ")


@settings(max_examples=60, deadline=None)
@given(st.lists(entries, min_size=3, max_size=8), st.data())
def test_deleting_a_middle_record_names_it(items: list, data: st.DataObject) -> None:
    records = chain_of(items)
    i = data.draw(st.integers(1, len(records) - 2))
    del records[i]
    result = verify_chain(records, GENESIS)
    assert not result.ok and result.first_bad_seq == i + 1
    assert result.reason == f"record {i + 1}: missing or out of order (record {i} is followed by record {i + 2})"


@settings(max_examples=60, deadline=None)
@given(st.lists(entries, min_size=2, max_size=8), st.data())
def test_reordering_names_the_first_displaced_record(items: list, data: st.DataObject) -> None:
    records = chain_of(items)
    i = data.draw(st.integers(0, len(records) - 2))
    j = data.draw(st.integers(i + 1, len(records) - 1))
    records[i], records[j] = records[j], records[i]
    result = verify_chain(records, GENESIS)
    assert not result.ok and result.first_bad_seq == i + 1
    assert "missing or out of order" in result.reason


def test_deleting_the_first_record_is_caught() -> None:
    records = chain_of([(1, "start", "system", "up", {}), (2, "stop", "system", "down", {})])
    result = verify_chain(records[1:], GENESIS)
    assert (result.ok, result.first_bad_seq) == (False, 1)
    assert result.reason == "record 1: missing or out of order (the start of the chain is followed by record 2)"


def test_a_rehashed_edit_breaks_the_next_link() -> None:
    records = chain_of([(i, "command", "admin", f"step {i}", {}) for i in range(4)])
    forged = build_record(records[1].prev_hash, 2, records[1].at_tai_ns, "command", "admin", "nothing happened")
    records[1] = forged  # an editor who recomputes the edited record's hash still breaks record 3
    result = verify_chain(records, GENESIS)
    assert result.first_bad_seq == 3 and result.reason == "record 3: prev_hash does not match the hash of record 2"


def test_hash_is_sha256_of_the_canonical_content() -> None:
    digest = record_hash(GENESIS, 1, 37_000_000_000, "login", "admin", "logged in über web", {"b": 1, "a": [1.5]})
    # Computed independently: sha256 of the sorted, compact, UTF-8 JSON of the content.
    content = ('{"actor":"admin","at_tai_ns":37000000000,"detail":{"a":[1.5],"b":1},"kind":"login","prev_hash":"'
               + GENESIS + '","seq":1,"text":"logged in über web"}').encode()
    assert digest == hashlib.sha256(content).hexdigest()
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'.encode()


def test_detail_is_normalized_and_checked() -> None:
    assert normalize_detail({"pair": (1, 2)}) == {"pair": [1, 2]}
    assert normalize_detail(None) == {}
    with pytest.raises(ValueError, match="JSON-able"):
        normalize_detail({"x": float("nan")})
    with pytest.raises(ValueError, match="string keys"):
        normalize_detail({"x": {1: "a"}})
    with pytest.raises(ValueError, match="JSON-able"):
        normalize_detail({"x": object()})


def _pruned(records: list[AuditRecord], through: int, at: int) -> list[AuditRecord]:
    cut = records[through:]
    last = records[through - 1]
    head = cut[-1] if cut else last
    checkpoint = build_record(head.hash, head.seq + 1, at, CHECKPOINT, "system", "pruned",
                              checkpoint_detail(last.seq, last.hash, through))
    return cut + [checkpoint]


def test_a_pruned_chain_verifies_from_its_checkpoint() -> None:
    records = chain_of([(i, "output", "system", f"r{i}", {}) for i in range(6)])
    kept = _pruned(records, 4, 99)
    assert [r.seq for r in kept] == [5, 6, 7]
    result = verify_stored(kept)
    assert result.ok and result.checked == 3


def test_a_chain_whose_first_record_is_its_checkpoint_verifies() -> None:
    records = chain_of([(i, "output", "system", f"r{i}", {}) for i in range(3)])
    kept = _pruned(records, 3, 99)
    assert [r.kind for r in kept] == [CHECKPOINT]
    assert verify_stored(kept).ok


def test_removing_records_without_a_checkpoint_is_caught() -> None:
    records = chain_of([(i, "output", "system", f"r{i}", {}) for i in range(5)])
    result = verify_stored(records[2:])
    assert (result.ok, result.first_bad_seq) == (False, 3)
    assert "no checkpoint" in result.reason
    forged_checkpoint = _pruned(records, 2, 9)
    forged_checkpoint[-1] = dataclasses.replace(forged_checkpoint[-1], detail={**forged_checkpoint[-1].detail,
                                                                              "pruned_through_hash": "f" * 64})
    assert not verify_stored(forged_checkpoint).ok
