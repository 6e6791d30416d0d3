"""A leap second the simulated world inserts at the first opportunity after the packaged table's expiry.

The IERS guarantees no unlisted leap second before a leap-seconds.list expires, so a simulated insertion must fall
after it: on the last day of June or December following the expiry. Each new packaged file moves the date, and the
scenarios, trials and tests that simulate a leap second take it from here instead of writing it out.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance import leap

DAY_S = 86_400


@dataclass(frozen=True)
class FutureLeap:
    """One inserted leap second: ``truth`` is ``table`` with it announced (TAI-UTC one more from ``effective``)."""

    table: leap.LeapTable
    truth: leap.LeapTable
    effective_posix_s: int  # 00:00:00 UTC of 1 January or 1 July, the first instant with the new offset
    new_offset_s: int

    @property
    def last_day(self) -> tuple[int, int, int]:
        """(year, month, day) of the UTC day that ends with 23:59:60."""
        return leap.civil_from_days(self.effective_posix_s // DAY_S - 1)

    def before_tai_ns(self, hour: int, minute: int, second: int) -> int:
        """TAI ns of hh:mm:ss UTC on the last day (before the inserted second)."""
        return leap.utc_fields_to_tai(*self.last_day, hour, minute, second, 0, self.table)

    @property
    def labels(self) -> list[str]:
        """The three receiver labels around the insertion: 23:59:59, 23:59:60, then 00:00:00 of the next day."""
        day = "%04d-%02d-%02d" % self.last_day
        return [f"{day}T23:59:59.000Z", f"{day}T23:59:60.000Z", self.effective_utc]

    @property
    def effective_utc(self) -> str:
        return "%04d-%02d-%02dT00:00:00.000Z" % leap.civil_from_days(self.effective_posix_s // DAY_S)


def first_after_expiry(table: leap.LeapTable | None = None) -> FutureLeap:
    """The first positive leap second ``table`` (default: the packaged one) leaves possible."""
    table = table or leap.LeapTable.load_default()
    after_s = table.expires_posix_s if table.expires_posix_s is not None else table.entries[-1][0]
    year, month, _ = leap.civil_from_days(after_s // DAY_S)
    year, month = (year, 7) if month < 7 else (year + 1, 1)
    effective = leap.days_from_civil(year, month, 1) * DAY_S
    offset = table.entries[-1][1] + 1
    return FutureLeap(table, table.with_announcement(effective, offset, "scenario"), effective, offset)
