"""The leap-second table and the UTC <-> TAI (and POSIX <-> TAI) conversions that depend on it.

Single job: hold one validated table of TAI-UTC offsets (from the IERS ``leap-seconds.list`` file, possibly
extended by a GNSS receiver's announcement) and convert instants between the ``tai_ns`` axis, broken-down
UTC labels (which may read 23:59:60) and ``posix_ns`` (which cannot).  Pure integer arithmetic: ``datetime``
cannot represent second 60.  Instants before the first entry (1972-01-01) use the first entry's offset
(10 s); UTC before 1972 had fractional, rate-offset steps that no caller of this appliance needs.
"""

from __future__ import annotations

import bisect
import hashlib
import importlib.resources
import operator
from dataclasses import dataclass, field
from functools import cache

from appliance.timebase import NTP_UNIX_OFFSET_S
from appliance.units import NS_PER_S

_S_PER_DAY = 86_400
_EFFECTIVE_S = operator.itemgetter(0)  # sort key of a table entry: its effective posix_s
Entry = tuple[int, int]  # (posix_s of the UTC midnight it takes effect, TAI-UTC s)


class LeapFileError(ValueError):
    """A leap-seconds file is malformed, inconsistent or fails its hash check."""


@dataclass(frozen=True)
class LeapTable:
    """TAI-UTC offsets: ``entries`` are (posix_s of the UTC midnight it takes effect, TAI-UTC s), ascending."""

    entries: tuple[Entry, ...]
    updated_posix_s: int | None
    expires_posix_s: int | None
    source: str
    # TAI instant (ns) from which each entry's offset applies: effective UTC midnight + new offset.
    _change_tai_ns: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problem = _entries_problem(self.entries)
        if problem is not None:
            raise ValueError(f"{self.source}: {problem[1]}")
        changes = tuple((eff_s + off_s) * NS_PER_S for eff_s, off_s in self.entries)
        object.__setattr__(self, "_change_tai_ns", changes)


    @classmethod
    def parse(cls, text: str, source: str) -> LeapTable:
        """Parse and validate IERS/tzdata ``leap-seconds.list`` text; raises LeapFileError naming the line."""
        updated, expires, hash_line, entries, linenos = _scan(text, source)
        problem = _entries_problem(tuple(entries))
        if problem is not None:
            lineno = linenos[problem[0]] if entries else text.count("\n") + 1  # empty: blame end of file
            raise LeapFileError(f"{source}:{lineno}: {problem[1]}")
        if hash_line is not None:
            _check_hash(text, source, hash_line)
        return cls(tuple(entries), updated, expires, source)

    @classmethod
    def load_default(cls) -> LeapTable:
        """The table packaged with the appliance (parsed once; tables are immutable)."""
        return _default_table()


    def tai_utc_at_posix_s(self, posix_s: int) -> int:
        """TAI-UTC in force at a POSIX second (an inserted 23:59:60, which POSIX labels as the repeated
        23:59:59, still has the old offset)."""
        i = bisect.bisect_right(self.entries, posix_s, key=_EFFECTIVE_S) - 1
        return self.entries[max(i, 0)][1]

    def tai_utc_at_tai_ns(self, tai_ns: int) -> int:
        """TAI-UTC in force at a TAI instant; unambiguous, and the old offset throughout 23:59:60."""
        i = bisect.bisect_right(self._change_tai_ns, tai_ns) - 1
        return self.entries[max(i, 0)][1]

    def is_expired(self, at_tai_ns: int) -> bool:
        """True at or after the file's expiry.  A table without an expiry is treated as expired: nothing
        vouches that it lists every leap second up to now."""
        if self.expires_posix_s is None:
            return True
        expiry_tai_ns = (self.expires_posix_s + self.tai_utc_at_posix_s(self.expires_posix_s)) * NS_PER_S
        return at_tai_ns >= expiry_tai_ns

    def next_change_after(self, tai_ns: int) -> tuple[int, int] | None:
        """(tai_ns of the first instant with the new offset, +1 or -1) for the next known change, or None."""
        i = max(bisect.bisect_right(self._change_tai_ns, tai_ns), 1)  # entry 0 is a start, not a change
        if i >= len(self.entries):
            return None
        return self._change_tai_ns[i], self.entries[i][1] - self.entries[i - 1][1]

    def step_at(self, effective_posix_s: int) -> int:
        """+1/-1 if a leap second takes effect at this UTC midnight (posix_s), else 0."""
        i = bisect.bisect_left(self.entries, effective_posix_s, key=_EFFECTIVE_S)
        if i == 0 or i >= len(self.entries) or self.entries[i][0] != effective_posix_s:
            return 0
        return self.entries[i][1] - self.entries[i - 1][1]

    def inserted_second_start_tai_ns(self, tai_ns: int) -> int | None:
        """If ``tai_ns`` lies inside an inserted 23:59:60, the TAI ns at which that second began."""
        i = bisect.bisect_right(self._change_tai_ns, tai_ns)
        if i == 0 or i >= len(self.entries) or self.entries[i][1] - self.entries[i - 1][1] != 1:
            return None
        start = self._change_tai_ns[i] - NS_PER_S
        return start if tai_ns >= start else None


    def with_announcement(self, effective_posix_s: int, tai_utc_s: int, source: str) -> LeapTable:
        """Fold in a receiver's announced (or current) TAI-UTC, effective at a UTC midnight.

        Returns ``self`` when the table already implies that offset at that date; a new table with one
        appended entry when the announcement lies beyond the last entry and steps by +-1.  Raises
        ValueError if it contradicts the table, including a change dated on or before the file's expiry
        (IERS guarantees no unlisted leap before then, so the receiver, not the file, is wrong).
        The expiry is kept: an announcement tells of one change, not that no other will follow.
        """
        if self.tai_utc_at_posix_s(effective_posix_s) == tai_utc_s:
            return self
        last_posix_s, last_off_s = self.entries[-1]
        if effective_posix_s <= last_posix_s:
            raise ValueError(f"announcement {tai_utc_s} s at {effective_posix_s} contradicts {self.source}")
        if self.expires_posix_s is not None and effective_posix_s <= self.expires_posix_s:
            raise ValueError(f"announced change at {effective_posix_s} precedes expiry of {self.source}")
        if abs(tai_utc_s - last_off_s) != 1:
            raise ValueError(f"announcement {tai_utc_s} s is not a single step from {last_off_s} s")
        entries = self.entries + ((effective_posix_s, tai_utc_s),)
        return LeapTable(entries, self.updated_posix_s, self.expires_posix_s, f"{self.source} + {source}")


@cache
def _default_table() -> LeapTable:
    text = importlib.resources.files("appliance").joinpath("data/leap-seconds.list").read_text(encoding="utf-8")
    return LeapTable.parse(text, "appliance/data/leap-seconds.list")


def _entries_problem(entries: tuple[Entry, ...]) -> tuple[int, str] | None:
    """(index, message) of the first invalid entry, or None.  A leap second is exactly one second and is the
    last second of a UTC month (ITU-R TF.460-6 Annex 1 §2.1-2.2), so entries step by +-1 at UTC midnights."""
    if not entries:
        return 0, "no leap-second entries"
    for i, (eff_s, off_s) in enumerate(entries):
        if eff_s % _S_PER_DAY:
            return i, f"entry {eff_s} is not a UTC midnight"
        if i and eff_s <= entries[i - 1][0]:
            return i, "dates are not strictly ascending"
        if i and abs(off_s - entries[i - 1][1]) != 1:
            return i, f"offset {off_s} s is not a +-1 s step from {entries[i - 1][1]} s"
    return None


def _scan(text: str, source: str) -> tuple[int | None, int | None, int | None, list[Entry], list[int]]:
    """Split the file into (#$ posix_s, #@ posix_s, #h line number, entries, entry line numbers)."""
    updated = expires = hash_line = None
    entries: list[Entry] = []
    linenos: list[int] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.startswith("#$"):
            updated = _ntp_field(line[2:], source, lineno)
        elif line.startswith("#@"):
            expires = _ntp_field(line[2:], source, lineno)
        elif line.startswith("#h"):
            hash_line = lineno
        elif line.strip() and not line.startswith("#"):
            fields = line.split("#", 1)[0].split()
            if len(fields) < 2 or not all(f.isascii() and f.isdigit() for f in fields[:2]):
                raise LeapFileError(f"{source}:{lineno}: expected '<NTP seconds> <TAI-UTC>'")
            entries.append((_decimal(fields[0], source, lineno) - NTP_UNIX_OFFSET_S,
                            _decimal(fields[1], source, lineno)))
            linenos.append(lineno)
    return updated, expires, hash_line, entries, linenos


def _ntp_field(rest: str, source: str, lineno: int) -> int:
    """The #$ / #@ value (NTP seconds) as posix_s."""
    value = rest.strip()
    if not (value.isascii() and value.isdigit()):
        raise LeapFileError(f"{source}:{lineno}: expected an NTP timestamp, got {value[:40]!r}")
    return _decimal(value, source, lineno) - NTP_UNIX_OFFSET_S


def _decimal(digits: str, source: str, lineno: int) -> int:
    """An ASCII decimal field as an int; LeapFileError for one longer than int() converts (4300 digits)."""
    try:
        return int(digits)
    except ValueError:
        raise LeapFileError(f"{source}:{lineno}: a number of {len(digits)} digits is out of range") from None


def _check_hash(text: str, source: str, hash_line: int) -> None:
    """IERS ntp/sources/README: SHA-1 over the digits of the #$ line, the #@ line and the first two fields
    of every data line (comments and whitespace ignored), written as five 32-bit hex words whose leading
    zeros may be dropped, so words are compared as numbers."""
    lines = text.splitlines()
    stamps = [ln[2:] for ln in lines if ln.startswith("#$")] + [ln[2:] for ln in lines if ln.startswith("#@")]
    data = ["".join(ln.split("#", 1)[0].split()[:2]) for ln in lines if ln.strip() and not ln.startswith("#")]
    digits = "".join(c for c in "".join(stamps + data) if c in "0123456789")
    digest = hashlib.sha1(digits.encode("ascii")).digest()
    actual = [int.from_bytes(digest[i : i + 4], "big") for i in range(0, 20, 4)]
    try:
        declared = [int(w, 16) for w in lines[hash_line - 1][2:].split()]
    except ValueError:
        raise LeapFileError(f"{source}:{hash_line}: malformed hash line") from None
    if declared != actual:
        raise LeapFileError(f"{source}:{hash_line}: SHA-1 hash does not match the file contents")


# --- broken-down UTC ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UtcTime:
    """A UTC label; ``second`` may be 60 (validity against a table is checked by ``utc_to_tai``)."""

    year: int
    month: int
    day: int
    hour: int
    minute: int
    second: int
    nanosecond: int

    def __post_init__(self) -> None:
        if not (1 <= self.month <= 12 and 1 <= self.day <= _days_in_month(self.year, self.month)):
            raise ValueError(f"invalid date {self.year}-{self.month}-{self.day}")
        if not (0 <= self.hour <= 23 and 0 <= self.minute <= 59 and 0 <= self.second <= 60):
            raise ValueError(f"invalid time {self.hour}:{self.minute}:{self.second}")
        if not 0 <= self.nanosecond < NS_PER_S:
            raise ValueError(f"nanosecond out of range: {self.nanosecond}")

    def __str__(self) -> str:
        return f"{self._iso_seconds()}.{self.nanosecond:09d}Z"

    def iso_ms(self) -> str:
        """ISO 8601 with milliseconds, truncated toward the past like the seconds label itself."""
        return f"{self._iso_seconds()}.{self.nanosecond // 1_000_000:03d}Z"

    def _iso_seconds(self) -> str:
        return (f"{self.year:04d}-{self.month:02d}-{self.day:02d}"
                f"T{self.hour:02d}:{self.minute:02d}:{self.second:02d}")


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (H. Hinnant's days_from_civil)."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """Inverse of ``_days_from_civil`` (H. Hinnant's civil_from_days)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date."""
    return _days_from_civil(year, month, day)


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day count since 1970-01-01."""
    return _civil_from_days(days)


def _days_in_month(year: int, month: int) -> int:
    return _days_from_civil(year + month // 12, month % 12 + 1, 1) - _days_from_civil(year, month, 1)


# --- conversions -------------------------------------------------------------------------------------------


def tai_to_posix_ns(tai_ns: int, table: LeapTable) -> tuple[int, bool]:
    """POSIX time of a TAI instant, and whether it lies in an inserted leap second.  During 23:59:60 POSIX
    repeats 23:59:59, as the Linux kernel does while it reports TIME_OOP (adjtimex(2))."""
    posix_ns = tai_ns - table.tai_utc_at_tai_ns(tai_ns) * NS_PER_S
    if table.inserted_second_start_tai_ns(tai_ns) is not None:
        return posix_ns - NS_PER_S, True  # the old offset would already read 00:00:00
    return posix_ns, False


def posix_to_tai_ns(posix_ns: int, table: LeapTable, in_leap_second: bool = False) -> int:
    """Inverse of ``tai_to_posix_ns``.  ``in_leap_second`` selects the repeated 23:59:59 (= 23:59:60);
    it is a ValueError when no leap second is inserted at the end of that second.  A POSIX second removed
    by a negative leap (which a correct kernel never shows) maps with the old offset."""
    posix_s = posix_ns // NS_PER_S
    if in_leap_second:
        if table.step_at(posix_s + 1) != 1:
            raise ValueError(f"no inserted leap second follows POSIX second {posix_s}")
        return posix_ns + (table.tai_utc_at_posix_s(posix_s) + 1) * NS_PER_S
    return posix_ns + table.tai_utc_at_posix_s(posix_s) * NS_PER_S


def tai_to_utc(tai_ns: int, table: LeapTable) -> UtcTime:
    """Broken-down UTC label of a TAI instant; reads 23:59:60 inside an inserted leap second and never
    reads the 23:59:59 that a negative leap second removes."""
    posix_ns, in_leap = tai_to_posix_ns(tai_ns, table)
    posix_s, nanosecond = divmod(posix_ns, NS_PER_S)
    days, sod = divmod(posix_s, _S_PER_DAY)
    year, month, day = _civil_from_days(days)
    second = 60 if in_leap else sod % 60
    return UtcTime(year, month, day, sod // 3600, sod // 60 % 60, second, nanosecond)


def utc_to_tai(t: UtcTime, table: LeapTable) -> int:
    """TAI ns of a UTC label.  ValueError for :60 without an inserted leap second at the end of that
    minute's day, and for a 23:59:59 that a negative leap second removed."""
    days = _days_from_civil(t.year, t.month, t.day)
    posix_s = days * _S_PER_DAY + t.hour * 3600 + t.minute * 60 + min(t.second, 59)
    if t.second == 60:
        if (t.hour, t.minute) != (23, 59) or table.step_at(posix_s + 1) != 1:
            raise ValueError(f"{t} is not an inserted leap second")
        return posix_to_tai_ns(posix_s * NS_PER_S + t.nanosecond, table, in_leap_second=True)
    if (t.hour, t.minute, t.second) == (23, 59, 59) and table.step_at(posix_s + 1) == -1:
        raise ValueError(f"{t} was removed by a negative leap second")
    return posix_to_tai_ns(posix_s * NS_PER_S + t.nanosecond, table)


def utc_fields_to_tai(year: int, month: int, day: int, hour: int, minute: int, second: int,
                      nanosecond: int, table: LeapTable) -> int:
    """``utc_to_tai`` from separate fields, for decoders (NMEA) that already hold them."""
    return utc_to_tai(UtcTime(year, month, day, hour, minute, second, nanosecond), table)
