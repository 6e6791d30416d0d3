"""Fuzzing the leap-second file parser (``appliance/leap.py``), which reads an operator-supplied IERS/tzdata
``leap-seconds.list``.

Contract: ``LeapTable.parse`` returns a table or raises LeapFileError naming the file and line, never another error,
for any text: the packaged file byte-edited (its hash then usually fails), files written from arbitrary valid tables
(with and without their hash line: those parse back to the same table), and token soup.  A table it returns converts
any instant to a UTC label and back; a receiver's announcement is folded in or refused with ValueError.
Budget: ``fuzzing.py``.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources

from hypothesis import event, given
from hypothesis import strategies as st

from appliance import leap
from appliance.leap import LeapFileError, LeapTable
from appliance.timebase import NTP_UNIX_OFFSET_S
from appliance.units import NS_PER_S
from tests.props.fuzzing import FUZZ, mutated_text, tokens_text

PACKAGED = resources.files("appliance").joinpath("data/leap-seconds.list").read_text(encoding="utf-8")
DAY_S = 86_400
LINE = re.compile(r"^(?P<source>[^:]+):(?P<line>\d+): ")


def render(entries: list[tuple[int, int]], updated_s: int, expires_s: int, with_hash: bool, style: int) -> str:
    """A leap-seconds.list for ``entries`` (posix_s, TAI-UTC), as IERS writes it (style 0) or with other spacing
    and comments a parser must take (styles 1, 2)."""
    sep = ["\t", "  ", " \t "][style]
    lines = ["# leap-seconds.list written by the fuzz test", f"#${sep}{updated_s + NTP_UNIX_OFFSET_S}",
             f"#@{sep}{expires_s + NTP_UNIX_OFFSET_S}", "#"]
    for posix_s, offset_s in entries:
        comment = ["", "  # a comment", "#tight"][style]
        lines.append(f"{posix_s + NTP_UNIX_OFFSET_S}{sep}{offset_s}{comment}")
    if with_hash:
        digits = f"{updated_s + NTP_UNIX_OFFSET_S}{expires_s + NTP_UNIX_OFFSET_S}" + "".join(
            f"{p + NTP_UNIX_OFFSET_S}{o}" for p, o in entries)
        digest = hashlib.sha1(digits.encode()).digest()
        words = [f"{int.from_bytes(digest[i:i + 4], 'big'):x}" for i in range(0, 20, 4)]
        lines.append("#h" + sep + " ".join(words))
    return "\n".join(lines) + "\n"


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[tuple[int, int]], int, int]:
    """Entries at UTC midnights, strictly ascending, stepping by +-1 s (the file has no sign: TAI-UTC stays >= 0); an
    update and an expiry date."""
    posix_s = draw(st.integers(0, 40_000)) * DAY_S
    offset_s = draw(st.integers(0, 50))
    entries = [(posix_s, offset_s)]
    for _ in range(draw(st.integers(0, 30))):
        posix_s += draw(st.integers(1, 4000)) * DAY_S
        offset_s += draw(st.sampled_from([1, 1, 1, -1])) if offset_s else 1
        entries.append((posix_s, offset_s))
    return entries, draw(st.integers(0, posix_s)), posix_s + draw(st.integers(0, 20_000)) * DAY_S


@FUZZ
@given(tables(), st.booleans(), st.integers(0, 2))
def test_a_written_table_parses_back(table: tuple, with_hash: bool, style: int) -> None:
    entries, updated_s, expires_s = table
    parsed = LeapTable.parse(render(entries, updated_s, expires_s, with_hash, style), "written.list")
    assert (list(parsed.entries), parsed.updated_posix_s, parsed.expires_posix_s) == (entries, updated_s, expires_s)


def parse_or_problem(text: str) -> LeapTable | None:
    """The table, or None after checking the LeapFileError names the source and a line within the text."""
    try:
        return LeapTable.parse(text, "fuzzed.list")
    except LeapFileError as exc:
        found = LINE.match(str(exc))
        assert found and found["source"] == "fuzzed.list", str(exc)
        assert 1 <= int(found["line"]) <= max(1, text.count("\n") + 1) + 1, str(exc)
        event(f"leap file: refused ({str(exc).split(': ', 1)[1][:24]})")
        return None


LEAP_TOKENS = ["#", "#$", "#@", "#h", " ", "\t", "\n", "\r\n", "0", "1", "37", "-1", "2272060800", "3692217600",
               "4023129600", "86400", "9" * 5000, "a9bad145", "0x1", "\u0663", "\u00a0", "+5", "1_0"]


numbers = st.one_of(st.integers(0, 2**40).map(str), st.sampled_from(["", "9" * 5000, "1" * 4301, "0x10", "\u0663",
                                                                    "+5", "1_0", "-1", "37"]))
lines = st.builds(lambda mark, a, sep, b, tail: f"{mark}{a}{sep}{b}{tail}",
                  st.sampled_from(["", "", "", "#$ ", "#@\t", "#h ", "#"]), numbers, st.sampled_from([" ", "\t", ""]),
                  numbers, st.sampled_from(["", " # 1 Jan 1972", " extra", "#"]))


@FUZZ
@given(st.one_of(mutated_text(PACKAGED, max_edits=3), tokens_text(LEAP_TOKENS, 40), st.text(max_size=200),
                 st.lists(lines, max_size=6).map("\n".join),
                 tables().flatmap(lambda t: mutated_text(render(*t, with_hash=True, style=0), max_edits=2))))
def test_any_text_parses_or_raises_leap_file_error(text: str) -> None:
    table = parse_or_problem(text)
    if table is None:
        return
    event("leap file: parsed")
    first_s = table.entries[0][0]
    for posix_s in (first_s - DAY_S, first_s, table.entries[-1][0] - 1, table.entries[-1][0] + DAY_S):
        tai_ns = leap.posix_to_tai_ns(posix_s * NS_PER_S, table)
        assert leap.utc_to_tai(leap.tai_to_utc(tai_ns, table), table) == tai_ns
    table.is_expired(0)
    table.next_change_after(0)


@FUZZ
@given(tables(), st.integers(-(10**12), 10**12), st.integers(-100, 100))
def test_an_announcement_is_folded_in_or_refused(table: tuple, effective_s: int, tai_utc_s: int) -> None:
    entries, updated_s, expires_s = table
    base = LeapTable(tuple(entries), updated_s, expires_s, "fuzzed")
    try:
        folded = base.with_announcement(effective_s, tai_utc_s, "receiver")
    except ValueError:
        return
    assert folded.tai_utc_at_posix_s(effective_s) == tai_utc_s
    assert folded.entries[:len(entries)] == base.entries


def test_a_number_too_long_for_int_is_a_leap_file_error() -> None:
    """Found by the fuzz test above: int() refuses more than 4300 digits with a ValueError naming no line."""
    for text, line in ((f"2272060800 {'1' * 5000}\n", 1), (f"#$ {'9' * 5000}\n2272060800 10\n", 1),
                       (f"2272060800 10\n#@\t{'9' * 4301}\n", 2)):
        try:
            LeapTable.parse(text, "long.list")
        except LeapFileError as exc:
            assert str(exc).startswith(f"long.list:{line}: ") and len(str(exc)) < 200
        else:
            raise AssertionError("parsed")
