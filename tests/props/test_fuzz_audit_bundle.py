"""Fuzzing the audit bundle reader (``appliance/audit/bundle.py`` ``verify_bundle``): a bundle is a file anyone can
hand an auditor, so its reader takes arbitrary bytes.

Contract: ``verify_bundle`` returns a VerifyResult for any file content (raising only OSError for an unreadable
file, ValueError for a trusted key that is not an Ed25519 PEM public key), and it says ok only for a document that
is, as JSON, the one that was signed.  Inputs: arbitrary bytes, the bytes of a real exported bundle edited, and its
JSON with a value anywhere replaced by arbitrary JSON (nested deep, too).  Budget: ``fuzzing.py``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import event, given
from hypothesis import strategies as st

from appliance.audit.bundle import (export_bundle, key_fingerprint, load_or_create_key, load_public_key, public_key_pem,
                                    verify_bundle)
from appliance.audit.chain import VerifyResult
from appliance.audit.store import AuditStore
from tests.props.fuzzing import FUZZ, fuzz, mutated

S = 1_000_000_000
T0 = 1_800_000_037 * S


def _exported() -> tuple[bytes, bytes]:
    """A real bundle of three records, and the public key that signed it (PEM)."""
    with tempfile.TemporaryDirectory(prefix="audit-fuzz-") as tmp:
        state = Path(tmp) / "state"
        key = load_or_create_key(state)
        with AuditStore(state / "audit.sqlite") as store:
            for i in range(4):
                store.append(T0 + i * S, "config.change", "web:admin", f"event {i} \u00e9", {"i": i, "f": 0.5})
            export_bundle(store, T0 + S, T0 + 4 * S, key, Path(tmp) / "bundle.json", label_of=lambda ns: f"L{ns}")
        return (Path(tmp) / "bundle.json").read_bytes(), public_key_pem(key.public_key())


BUNDLE, PUBLIC_PEM = _exported()
SIGNED = json.loads(BUNDLE)
SIGNER = key_fingerprint(load_public_key(PUBLIC_PEM))
OTHER_PEM = public_key_pem(Ed25519PrivateKey.from_private_bytes(bytes(32)).public_key())


def verify(data: bytes, trusted: bytes | None = None) -> VerifyResult:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        f.write(data)
        f.flush()
        result = verify_bundle(Path(f.name), trusted)
    assert isinstance(result, VerifyResult) and isinstance(result.reason, str) and len(result.reason) < 1000
    event(f"bundle: {'ok' if result.ok else result.reason.split(':')[0][:30]}")
    return result


def assert_ok_only_if_signed(data: bytes, result: VerifyResult) -> None:
    if result.ok:
        assert json.loads(data) == SIGNED


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-(2**80), 2**80),
              st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)


def paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON document: dict keys and list indices down to the leaves."""
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += paths(value, prefix + (i,))
    return out


PATHS = paths(SIGNED)[1:]


def nested(depth: int) -> Any:
    return json.loads("[" * depth + "]" * depth)


@st.composite
def edited_documents(draw: st.DrawFn) -> bytes:
    """The signed document with one to three values replaced, deleted or nested deep."""
    document = json.loads(BUNDLE)
    for _ in range(draw(st.integers(1, 3))):
        *parents, last = draw(st.sampled_from(PATHS))
        node = document
        try:
            for part in parents:
                node = node[part]
            what = draw(st.sampled_from(["replace", "replace", "delete", "deep"]))
            if what == "delete":
                del node[last]
            else:
                node[last] = draw(json_values) if what == "replace" else [nested(draw(st.integers(50, 900)))]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed or replaced this place
    text = json.dumps(document, allow_nan=False)
    if draw(st.booleans()):  # about as deep as json.loads recurses, or deeper
        depth = draw(st.integers(900, 3000))
        text = text.replace("[]", "[" * depth + "]" * depth, 1)
    return text.encode()


@FUZZ
@given(st.one_of(st.binary(max_size=300), mutated(BUNDLE, max_edits=3)))
def test_any_bytes_verify_to_a_result(data: bytes) -> None:
    assert_ok_only_if_signed(data, verify(data))


@fuzz(1.0)
@given(edited_documents())
def test_an_edited_bundle_never_verifies(data: bytes) -> None:
    assert_ok_only_if_signed(data, verify(data))


@fuzz(0.3)
@given(st.sampled_from([PUBLIC_PEM, OTHER_PEM]), st.one_of(st.just(BUNDLE), mutated(BUNDLE, max_edits=2)))
def test_against_a_trusted_key(trusted: bytes, data: bytes) -> None:
    result = verify(data, trusted)
    assert_ok_only_if_signed(data, result)
    assert not (result.ok and trusted == OTHER_PEM)
    if data == BUNDLE:
        assert result.ok == (trusted == PUBLIC_PEM) and result.signer_trusted == result.ok


@fuzz(0.3)
@given(mutated(PUBLIC_PEM, max_edits=3))
def test_a_trusted_key_file_is_a_key_or_value_error(pem: bytes) -> None:
    try:
        result = verify(BUNDLE, pem)
    except ValueError:
        return
    # An edit PEM ignores (a header's spelling, base64 padding) may leave the same key; any other is another key.
    assert result.ok == (result.signer_fingerprint == SIGNER) and result.signer_trusted == result.ok
