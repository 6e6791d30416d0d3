"""Which TAI-UTC offset the appliance uses, and what it warns about.

Pure core.  The packaged IERS table is authoritative until it expires.  A receiver's announcement of a leap second
beyond the table's knowledge extends it.  Past expiry the receiver's current offset wins (with a warning), because a
leap second may have been decided that the file does not list.  A receiver that contradicts a still-valid table is
not believed: the table is kept and a major alarm raised, since that is what a faulty or spoofed receiver looks like.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance import leap
from appliance.events import Alarm, LeapInfo, Severity
from appliance.units import NS_PER_S

EXPIRY_NOTICE_S = 30 * 86_400  # how long before the leap table expires a warning asks for a newer one


@dataclass(frozen=True)
class LeapStatus:
    tai_utc_s: int
    source: str  # "table" or "receiver"
    table_source: str
    table_expires_utc: str | None
    table_expired: bool
    pending_change_s: int  # +1/-1 if a leap second is scheduled, else 0
    pending_at_utc: str | None  # UTC label of the first second with the new offset
    pending_at_tai_ns: int | None = None  # the same instant on the TAI axis


class UtcOffset:
    def __init__(self, table: leap.LeapTable):
        self.table = table
        self._receiver_offset_s: int | None = None
        self._alarms: dict[str, Alarm] = {}

    def on_receiver(self, info: LeapInfo, at_tai_ns: int) -> list[Alarm]:
        out: list[Alarm] = []
        self._receiver_offset_s = info.tai_utc_s
        table_offset = self.table.tai_utc_at_tai_ns(at_tai_ns)
        if info.tai_utc_s != table_offset:
            out += self._receiver_differs(info.tai_utc_s, table_offset, at_tai_ns)
        else:
            out += self._clear("leap-disagreement", at_tai_ns)
        if info.pending_change_s and info.effective_tai_ns is not None:
            out += self._announce(info, at_tai_ns)
        return out

    def check(self, at_tai_ns: int) -> list[Alarm]:
        """Raise or clear the expiry warnings; call now and then (e.g. once a minute).  ``leap-table-expiring``
        from EXPIRY_NOTICE_S before the expiry, so that a newer file is installed in time, then
        ``leap-table-expired``."""
        if self.table.is_expired(at_tai_ns):
            who = "the receiver's UTC offset is used" if self._receiver_offset_s is not None else \
                "no receiver reports the UTC offset; a new leap second would go unnoticed"
            return self._clear("leap-table-expiring", at_tai_ns) + self._raise(
                "leap-table-expired", Severity.WARNING, f"leap-second table {self.table.source} has expired; {who}",
                at_tai_ns)
        out = self._clear("leap-table-expired", at_tai_ns)
        if self.table.is_expired(at_tai_ns + EXPIRY_NOTICE_S * NS_PER_S):
            return out + self._raise(
                "leap-table-expiring", Severity.WARNING,
                f"leap-second table {self.table.source} expires {self.snapshot(at_tai_ns).table_expires_utc}: "
                f"install a newer leap-seconds.list (clock.leap_file; Debian's tzdata keeps one) before then",
                at_tai_ns)
        return out + self._clear("leap-table-expiring", at_tai_ns)

    def snapshot(self, at_tai_ns: int) -> LeapStatus:
        offset = self.table.tai_utc_at_tai_ns(at_tai_ns)
        expired = self.table.is_expired(at_tai_ns)
        nxt = self.table.next_change_after(at_tai_ns)
        expires = None
        if self.table.expires_posix_s is not None:
            expires = leap.tai_to_utc(leap.posix_to_tai_ns(self.table.expires_posix_s * NS_PER_S, self.table),
                                      self.table).iso_ms()
        source = "receiver" if expired and self._receiver_offset_s == offset else "table"
        return LeapStatus(offset, source, self.table.source, expires, expired, nxt[1] if nxt else 0,
                          leap.tai_to_utc(nxt[0], self.table).iso_ms() if nxt else None, nxt[0] if nxt else None)

    def _receiver_differs(self, receiver_s: int, table_s: int, at_tai_ns: int) -> list[Alarm]:
        if not self.table.is_expired(at_tai_ns):
            return self._raise("leap-disagreement", Severity.MAJOR,
                               f"receiver says TAI-UTC is {receiver_s} s, the valid leap table {table_s} s; "
                               f"keeping the table", at_tai_ns)
        effective = _last_possible_leap_posix_s(at_tai_ns - table_s * NS_PER_S)
        try:
            self.table = self.table.with_announcement(effective, receiver_s, "receiver")
        except ValueError as exc:
            return self._raise("leap-disagreement", Severity.MAJOR, f"receiver offset unusable: {exc}", at_tai_ns)
        return []

    def _announce(self, info: LeapInfo, at_tai_ns: int) -> list[Alarm]:
        assert info.effective_tai_ns is not None
        new_offset = info.tai_utc_s + info.pending_change_s
        effective_posix_s = info.effective_tai_ns // NS_PER_S - new_offset
        if self.table.tai_utc_at_posix_s(effective_posix_s) == new_offset:
            return []
        try:
            self.table = self.table.with_announcement(effective_posix_s, new_offset, "receiver announcement")
        except ValueError as exc:
            return self._raise("leap-disagreement", Severity.MAJOR, f"leap announcement refused: {exc}", at_tai_ns)
        return []

    def _raise(self, code: str, severity: Severity, text: str, at_ns: int) -> list[Alarm]:
        old = self._alarms.get(code)
        if old is not None and old.text == text:
            return []
        alarm = Alarm(code, severity, True, text, at_ns)
        self._alarms[code] = alarm
        return [alarm]

    def _clear(self, code: str, at_ns: int) -> list[Alarm]:
        old = self._alarms.pop(code, None)
        return [] if old is None else [Alarm(code, old.severity, False, old.text, at_ns)]


def _last_possible_leap_posix_s(posix_ns: int) -> int:
    """The latest 1 January or 1 July midnight (UTC) at or before ``posix_ns``: where an unlisted leap may sit."""
    days = posix_ns // NS_PER_S // 86_400
    year = 1970 + days // 366
    while leap.utc_fields_to_tai(year + 1, 1, 1, 0, 0, 0, 0, _ZERO) // NS_PER_S // 86_400 <= days:
        year += 1
    jul1 = leap.utc_fields_to_tai(year, 7, 1, 0, 0, 0, 0, _ZERO) // NS_PER_S
    jan1 = leap.utc_fields_to_tai(year, 1, 1, 0, 0, 0, 0, _ZERO) // NS_PER_S
    return jul1 if jul1 // 86_400 <= days else jan1


# A table with a constant zero offset turns calendar fields into POSIX seconds.
_ZERO = leap.LeapTable(((0, 0),), None, None, "calendar")
