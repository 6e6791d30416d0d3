"""Fuzzing the reader of a syslog collector's log (``appliance/audit/remote.py``): the file ``audit verify --against``
reads holds whatever reached the collector, and over UDP anyone can put lines there.

Contract: ``parse_log`` returns a RemoteLog for any lines (records counted, malformed ones counted, never an
exception), and ``check_against`` then returns an AnchorResult with one of the four verdicts and a bounded reason,
or ValueError when the log holds no audit record.  A log of the local chain's own records, however mutated around
them, never reads as anything but OK when the mutation left those records intact.  Inputs: token soup of the
structured data's own pieces, real forwarded messages mutated, and lines of arbitrary text.  Budget: ``fuzzing.py``.
"""

from __future__ import annotations

import hashlib

from hypothesis import event, given
from hypothesis import strategies as st

from appliance.audit.chain import AuditRecord
from appliance.audit.remote import DELETION, FRESH_CHAIN, OK, ROLLBACK, AnchorResult, check_against, parse_log
from appliance.audit.syslog import SD_ID, format_rfc5424
from tests.props.fuzzing import FUZZ, mutated_text, tokens_text


def _records(count: int) -> list[AuditRecord]:
    out, prev = [], "0" * 64
    for seq in range(1, count + 1):
        digest = hashlib.sha256(f"{seq}{prev}".encode()).hexdigest()
        out.append(AuditRecord(seq, 1_800_000_037_000_000_000 + seq, "command", "web:admin", f"event {seq}", {},
                               prev, digest))
        prev = digest
    return out


RECORDS = _records(6)
CHAIN = RECORDS[0].hash
LINES = [format_rfc5424(r, "gm1", utc_label="2027-01-15T08:00:00Z", chain_id=CHAIN).decode("utf-8", "replace")
         for r in RECORDS]
LINKS = [(r.seq, r.hash, r.prev_hash) for r in RECORDS]
TOKENS = [f"[{SD_ID}", "]", " ", "seq=", "hash=", "chain=", "prev=", '"', "\\", "1", "99", "0", "-1", "\u00b2",
          "9" * 5000, RECORDS[2].hash, CHAIN, "f" * 64, "g" * 64, "\n", "<13>1 ", "[x@1 a=\"b\"]"]


def check(lines: list[str]) -> AnchorResult | None:
    remote = parse_log(lines)
    assert remote.records + remote.malformed <= len(lines)
    try:
        result = check_against(LINKS, CHAIN, remote)
    except ValueError as exc:
        assert remote.records == 0, exc
        event("no audit records")
        return None
    assert result.verdict in (OK, ROLLBACK, DELETION, FRESH_CHAIN) and len(result.reason) < 2000
    event(f"verdict {result.verdict}")
    return result


@given(st.lists(tokens_text(TOKENS, 40), max_size=8))
@FUZZ
def test_token_soup_is_read_or_counted_never_raised(lines: list[str]) -> None:
    check(lines)


VALUES = st.one_of(tokens_text(TOKENS, 4), st.text(max_size=70), st.sampled_from(["1", "7", "\u00b2", "9" * 5000,
                                                                                    RECORDS[2].hash, CHAIN]))


@st.composite
def elements(draw: st.DrawFn) -> str:
    """One ``[audit@32473 ...]`` element of parameters drawn from plausible and hostile values."""
    names = draw(st.lists(st.sampled_from(["seq", "hash", "chain", "prev", "kind", "x"]), max_size=6))
    params = " ".join(f'{name}="{draw(VALUES)}"' for name in names)
    return draw(st.sampled_from(["", "<13>1 2027-01-15T08:00:00Z gm1 appliance - command "])) + f"[{SD_ID} {params}]"


@given(st.lists(elements(), max_size=8))
@FUZZ
def test_structured_elements_with_hostile_values_are_read_or_counted(lines: list[str]) -> None:
    check(lines)


@given(st.lists(st.text(max_size=200), max_size=8))
@FUZZ
def test_arbitrary_lines_are_skipped_or_counted(lines: list[str]) -> None:
    check(lines)


@given(st.lists(mutated_text(st.sampled_from(LINES)), max_size=6), st.lists(st.text(max_size=80), max_size=3))
@FUZZ
def test_mutated_copies_of_our_own_records_beside_the_intact_ones_stay_ok(mutants: list[str],
                                                                         noise: list[str]) -> None:
    result = check(LINES + mutants + noise)
    assert result is not None
    if all(m in LINES or SD_ID not in m for m in mutants):
        assert result.verdict == OK, result


def test_a_seq_past_python_s_integer_digit_limit_is_malformed_not_a_crash() -> None:
    line = f'[{SD_ID} seq="{"9" * 5000}" hash="{"a" * 64}"]'
    assert parse_log([line]).malformed == 1


def test_a_seq_of_unicode_digits_is_malformed_not_a_crash() -> None:
    assert parse_log([f'[{SD_ID} seq="\u00b2" hash="{"a" * 64}"]']).malformed == 1
