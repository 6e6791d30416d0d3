"""Unit tests for appliance.utcoffset: which TAI-UTC offset is used and which alarms say why."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from appliance.edge.input_files import read_leap_file
from appliance.events import LeapInfo, Severity
from appliance.leap import LeapTable, UtcTime, tai_to_utc, utc_fields_to_tai, utc_to_tai
from appliance.utcoffset import LeapStatus, UtcOffset

S = 1_000_000_000
# A fixed IERS file, not the packaged one (which each new release replaces): expires 2026-12-28, last entry
# 2017-01-01 (37 s).
TABLE = read_leap_file(Path(__file__).parent.parent / "data" / "leap" / "leap-seconds-expires-2026-12-28.list")


def posix(*fields: int) -> int:
    return int(datetime(*fields, tzinfo=timezone.utc).timestamp())


def tai(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    """TAI ns of a UTC label, by the packaged table (37 s from 2017 on)."""
    return utc_fields_to_tai(year, month, day, hour, minute, second, 0, TABLE)


VALID = tai(2025, 6, 1, 12)
EXPIRED = tai(2027, 2, 1, 12)
LEAP_2027_TAI_NS = (posix(2027, 1, 1) + 38) * S  # first instant with TAI-UTC 38 s


def codes(alarms) -> list[tuple[str, Severity, bool]]:
    return [(a.code, a.severity, a.raised) for a in alarms]


def test_valid_table_and_agreeing_receiver():
    u = UtcOffset(TABLE)
    assert u.check(VALID) == []
    assert u.on_receiver(LeapInfo(37), VALID) == []
    assert u.table is TABLE
    assert u.snapshot(VALID) == LeapStatus(37, "table", TABLE.source, "2026-12-28T00:00:00.000Z", False, 0, None)


def test_receiver_contradicting_a_valid_table_raises_major_and_table_is_kept():
    u = UtcOffset(TABLE)
    alarms = u.on_receiver(LeapInfo(38), VALID)
    assert codes(alarms) == [("leap-disagreement", Severity.MAJOR, True)]
    assert "38" in alarms[0].text and "37" in alarms[0].text and alarms[0].at_ns == VALID
    assert u.table is TABLE
    assert u.snapshot(VALID).tai_utc_s == 37 and u.snapshot(VALID).source == "table"
    assert u.on_receiver(LeapInfo(38), VALID + S) == []  # not repeated every second
    assert codes(u.on_receiver(LeapInfo(37), VALID + 2 * S)) == [("leap-disagreement", Severity.MAJOR, False)]
    assert u.on_receiver(LeapInfo(37), VALID + 3 * S) == []


def test_announced_leap_after_expiry_extends_the_table():
    now = tai(2026, 12, 1)
    u = UtcOffset(TABLE)
    assert u.on_receiver(LeapInfo(37, 1, LEAP_2027_TAI_NS), now) == []
    assert u.table.entries[-1] == (posix(2027, 1, 1), 38)
    assert u.table.expires_posix_s == TABLE.expires_posix_s  # one announced change vouches for nothing else
    assert "receiver" in u.table.source
    leap_second = UtcTime(2026, 12, 31, 23, 59, 60, 0)
    with pytest.raises(ValueError):
        utc_to_tai(leap_second, TABLE)
    at = utc_to_tai(leap_second, u.table)
    assert at == LEAP_2027_TAI_NS - S and str(tai_to_utc(at, u.table)) == "2026-12-31T23:59:60.000000000Z"
    status = u.snapshot(now)
    assert (status.tai_utc_s, status.pending_change_s, status.pending_at_utc) == (37, 1, "2027-01-01T00:00:00.000Z")
    assert status.table_source == u.table.source and not status.table_expired
    assert u.on_receiver(LeapInfo(37, 1, LEAP_2027_TAI_NS), now + S) == []  # the same news again: no change
    assert len(u.table.entries) == len(TABLE.entries) + 1
    after = u.snapshot(LEAP_2027_TAI_NS)
    assert (after.tai_utc_s, after.pending_change_s, after.pending_at_utc) == (38, 0, None)


def test_announcement_before_expiry_is_refused():
    u = UtcOffset(TABLE)
    effective = (posix(2026, 7, 1) + 38) * S
    alarms = u.on_receiver(LeapInfo(37, 1, effective), tai(2026, 6, 1))
    assert codes(alarms) == [("leap-disagreement", Severity.MAJOR, True)]
    assert u.table is TABLE and u.snapshot(tai(2026, 6, 1)).pending_change_s == 0


def test_a_table_30_days_from_expiry_asks_for_a_newer_one_once_and_clears_when_one_is_loaded():
    u = UtcOffset(TABLE)
    assert u.check(tai(2026, 11, 27, 23, 59, 59)) == []
    alarms = u.check(tai(2026, 11, 28))
    assert codes(alarms) == [("leap-table-expiring", Severity.WARNING, True)]
    assert "2026-12-28T00:00:00.000Z" in alarms[0].text and "newer leap-seconds.list" in alarms[0].text
    assert u.check(tai(2026, 12, 1)) == []  # raised once, not every minute
    u.table = LeapTable(TABLE.entries, TABLE.updated_posix_s, posix(2027, 6, 28), "newer leap-seconds.list")
    assert codes(u.check(tai(2026, 12, 2))) == [("leap-table-expiring", Severity.WARNING, False)]
    assert u.check(tai(2026, 12, 3)) == []


def test_expired_table_warns_once_and_clears_when_a_valid_table_is_loaded():
    u = UtcOffset(TABLE)
    assert codes(u.check(tai(2026, 12, 27, 23, 59, 59))) == [("leap-table-expiring", Severity.WARNING, True)]
    alarms = u.check(tai(2026, 12, 28))
    assert codes(alarms) == [("leap-table-expiring", Severity.WARNING, False),
                             ("leap-table-expired", Severity.WARNING, True)]
    assert "expired" in alarms[1].text and "no receiver" in alarms[1].text
    assert u.check(tai(2026, 12, 28, 0, 1)) == [] and u.check(EXPIRED) == []
    u.table = LeapTable(TABLE.entries, TABLE.updated_posix_s, posix(2027, 12, 28), "newer leap-seconds.list")
    assert codes(u.check(EXPIRED)) == [("leap-table-expired", Severity.WARNING, False)]
    assert u.check(EXPIRED + 60 * S) == []
    assert u.snapshot(EXPIRED).table_expires_utc == "2027-12-28T00:00:00.000Z"


def test_table_without_expiry_counts_as_expired():
    u = UtcOffset(LeapTable(TABLE.entries, None, None, "undated"))
    assert codes(u.check(VALID)) == [("leap-table-expired", Severity.WARNING, True)]
    assert u.snapshot(VALID).table_expired and u.snapshot(VALID).table_expires_utc is None


def test_past_expiry_the_receivers_offset_wins():
    u = UtcOffset(TABLE)
    assert u.on_receiver(LeapInfo(38), EXPIRED) == []  # a leap the file could not list: no major alarm
    status = u.snapshot(EXPIRED)
    assert (status.tai_utc_s, status.source, status.table_expired) == (38, "receiver", True)
    assert u.table.tai_utc_at_tai_ns(EXPIRED) == 38
    [warning] = u.check(EXPIRED)
    assert warning.code == "leap-table-expired" and "receiver's UTC offset is used" in warning.text
    assert u.on_receiver(LeapInfo(38), EXPIRED + S) == []


def test_past_expiry_an_agreeing_receiver_is_the_source():
    u = UtcOffset(TABLE)
    assert u.on_receiver(LeapInfo(37), EXPIRED) == []
    assert u.table is TABLE
    assert (u.snapshot(EXPIRED).tai_utc_s, u.snapshot(EXPIRED).source) == (37, "receiver")


@pytest.mark.parametrize("offset, now", [(39, EXPIRED), (38, tai(2026, 12, 30))])
def test_past_expiry_an_impossible_receiver_offset_is_refused(offset, now):
    u = UtcOffset(TABLE)
    alarms = u.on_receiver(LeapInfo(offset), now)
    assert codes(alarms) == [("leap-disagreement", Severity.MAJOR, True)]
    assert u.table is TABLE and u.snapshot(now).tai_utc_s == 37 and u.snapshot(now).source == "table"


def test_negative_leap_announcement_is_pending():
    now = tai(2026, 12, 1)
    effective = (posix(2027, 1, 1) + 36) * S
    u = UtcOffset(TABLE)
    assert u.on_receiver(LeapInfo(37, -1, effective), now) == []
    status = u.snapshot(now)
    assert (status.pending_change_s, status.pending_at_utc) == (-1, "2027-01-01T00:00:00.000Z")
    with pytest.raises(ValueError):
        utc_to_tai(UtcTime(2026, 12, 31, 23, 59, 59, 0), u.table)  # the removed second
