"""The fuzz budget and the byte mutators shared by the parser fuzz tests (``tests/props/test_fuzz_*.py``).

Every parser of untrusted input is fed arbitrary bytes and mutated valid encodings (from the project's own encoders
or from the real captures in ``tests/data``), and must return a valid object or raise its documented error, never
anything else, in bounded time.  Where an encoder exists, decode(encode(x)) == x.

The budget is CI-sized and reproducible: ``FUZZ`` (and ``fuzz(scale)``) is a hypothesis profile with a fixed number
of examples per test, no deadline (a loaded CI host is slow, not wrong), ``derandomize=True`` (the same examples on
every run, so a failure in CI fails again on a laptop) and no example database (nothing carried between runs).

Two environment knobs, for a longer run on a developer's machine:

- ``APPLIANCE_FUZZ_EXAMPLES=N``: examples per test (default 300; a test's ``scale`` multiplies it), e.g.
  ``APPLIANCE_FUZZ_EXAMPLES=20000 .venv/bin/python -m pytest -q -n 0 tests/props -k fuzz``;
- ``APPLIANCE_FUZZ_RANDOM=1``: draw new examples on every run instead of the fixed ones (with the example database
  on, so a failure found is replayed first next time).  A failure it finds belongs in a test as a literal case.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

DEFAULT_EXAMPLES = 300
EXAMPLES = max(1, int(os.environ.get("APPLIANCE_FUZZ_EXAMPLES", DEFAULT_EXAMPLES)))
RANDOM = os.environ.get("APPLIANCE_FUZZ_RANDOM", "") not in ("", "0")
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
           HealthCheck.large_base_example]


def fuzz(scale: float = 1.0) -> settings:
    """The fuzz profile with ``scale`` times the examples (at least 10): a heavy example costs a smaller scale."""
    extra = {} if RANDOM else {"database": None}
    return settings(max_examples=max(10, round(EXAMPLES * scale)), deadline=None, derandomize=not RANDOM,
                    suppress_health_check=_HEALTH, print_blob=True, **extra)


FUZZ = fuzz()


Edit = tuple[str, int, int, bytes]  # (kind, position, size or value, inserted bytes)
EDIT_KINDS = ("set", "flip", "insert", "delete", "repeat", "truncate")


def edits(max_edits: int = 4, max_insert: int = 16) -> st.SearchStrategy[list[Edit]]:
    """0 to ``max_edits`` edits, positions taken modulo the length of what they are applied to: a byte set or a bit
    flipped, bytes inserted, a run deleted or repeated, the end cut off.  Zero edits keeps valid inputs among the
    examples."""
    one = st.tuples(st.sampled_from(EDIT_KINDS), st.integers(0, 2**16), st.integers(0, 255),
                    st.binary(min_size=1, max_size=max_insert))
    return st.lists(one, max_size=max_edits)


def apply_edits(data: bytes, changes: list[Edit]) -> bytes:
    out = bytearray(data)
    for kind, position, size, inserted in changes:
        at = position % (len(out) + 1)
        if kind == "insert" or not out:
            out[at:at] = inserted
            continue
        at = min(at, len(out) - 1)
        if kind == "set":
            out[at] = size
        elif kind == "flip":
            out[at] ^= 1 << size % 8
        elif kind == "delete":
            del out[at:at + 1 + size % len(inserted) * 4]
        elif kind == "repeat":
            out[at:at] = out[at:at + 1 + size % len(inserted) * 4]
        else:
            del out[at:]
    return bytes(out)


def mutated(valid: bytes | st.SearchStrategy[bytes], max_edits: int = 4,
            max_insert: int = 16) -> st.SearchStrategy[bytes]:
    """``valid`` (bytes, or a strategy of them) with ``edits`` applied."""
    source = valid if isinstance(valid, st.SearchStrategy) else st.just(valid)
    return st.builds(apply_edits, source, edits(max_edits, max_insert))


def mutated_text(valid: str | st.SearchStrategy[str], max_edits: int = 4) -> st.SearchStrategy[str]:
    """Text mutated as bytes (UTF-8), then read back with undecodable bytes replaced: what a file reader that
    replaces errors would hand the parser."""
    source = valid.map(str.encode) if isinstance(valid, st.SearchStrategy) else valid.encode()
    return mutated(source, max_edits).map(lambda raw: raw.decode("utf-8", "replace"))


def tokens_text(alphabet: list[str], max_size: int = 60) -> st.SearchStrategy[str]:
    """Text built from a parser's own tokens (field separators, keywords, digits): random text rarely gets past the
    first check, token soup does."""
    return st.lists(st.sampled_from(alphabet), max_size=max_size).map("".join)
