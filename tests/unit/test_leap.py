"""Unit tests for appliance.leap: file parsing and hash check, known leap-second instants, extension."""

from __future__ import annotations

from datetime import datetime, timezone
from importlib.resources import files
from pathlib import Path

import pytest

from appliance.edge.input_files import read_leap_file
from appliance.leap import (
    LeapFileError,
    LeapTable,
    UtcTime,
    posix_to_tai_ns,
    tai_to_posix_ns,
    tai_to_utc,
    utc_fields_to_tai,
    utc_to_tai,
)
from appliance.units import NS_PER_S

NTP_2017 = "3692217600"  # 2017-01-01 in the data lines of the IERS file
# A fixed IERS file (expires 2026-12-28) for the tests of dates and hashes: the packaged file is replaced by each
# newer IERS release, and a test of "which instant is past expiry" must not change with it.
DATED_FILE = Path(__file__).parent.parent / "data" / "leap" / "leap-seconds-expires-2026-12-28.list"


def posix_s(*fields: int) -> int:
    return int(datetime(*fields, tzinfo=timezone.utc).timestamp())


@pytest.fixture(scope="module")
def packaged_text() -> str:
    return DATED_FILE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def table() -> LeapTable:
    return read_leap_file(DATED_FILE)


# --- parsing -----------------------------------------------------------------------------------------


def test_packaged_file_parses_with_valid_hash_and_is_current() -> None:
    shipped = LeapTable.load_default()
    assert shipped.entries[0] == (posix_s(1972, 1, 1), 10)
    assert shipped.entries[-1][1] >= 37 and shipped.entries[:28] == read_leap_file(DATED_FILE).entries
    # The IERS publishes a new file every six months; one that expires before mid-2027 is out of date.
    assert shipped.expires_posix_s is not None and shipped.expires_posix_s >= posix_s(2027, 6, 28)
    assert shipped.updated_posix_s is not None and shipped.updated_posix_s < shipped.expires_posix_s


def test_dated_file_parses_with_valid_hash(table: LeapTable) -> None:
    assert len(table.entries) == 28
    assert table.entries[0] == (posix_s(1972, 1, 1), 10)
    assert table.entries[-1] == (posix_s(2017, 1, 1), 37)
    assert table.expires_posix_s == posix_s(2026, 12, 28)
    assert table.updated_posix_s is not None and table.updated_posix_s < table.expires_posix_s


def test_load_default_is_shared_and_read_leap_file_matches(tmp_path) -> None:
    shipped = LeapTable.load_default()
    assert LeapTable.load_default() is shipped
    path = tmp_path / "leap-seconds.list"
    path.write_text(files("appliance").joinpath("data/leap-seconds.list").read_text(encoding="utf-8"), encoding="utf-8")
    loaded = read_leap_file(path)
    assert loaded.entries == shipped.entries and loaded.source == str(path)
    assert loaded.expires_posix_s == shipped.expires_posix_s


def test_changed_digit_fails_hash_naming_the_hash_line(packaged_text: str) -> None:
    corrupted = packaged_text.replace("#$\t3976686858", "#$\t3976686859")  # only the hash can tell
    assert corrupted != packaged_text
    hash_lineno = next(i for i, ln in enumerate(packaged_text.splitlines(), 1) if ln.startswith("#h"))
    with pytest.raises(LeapFileError, match=rf"x:{hash_lineno}: SHA-1"):
        LeapTable.parse(corrupted, "x")


def test_changed_expiry_fails_hash(packaged_text: str) -> None:
    with pytest.raises(LeapFileError, match="SHA-1"):
        LeapTable.parse(packaged_text.replace("#@\t4007404800", "#@\t4007404801"), "x")


def test_changed_data_digit_names_the_data_line(packaged_text: str) -> None:
    lineno = next(i for i, ln in enumerate(packaged_text.splitlines(), 1) if ln.startswith(NTP_2017))
    with pytest.raises(LeapFileError, match=rf"x:{lineno}: offset 39"):
        LeapTable.parse(packaged_text.replace(f"{NTP_2017}      37", f"{NTP_2017}      39"), "x")
    with pytest.raises(LeapFileError, match=rf"x:{lineno}: entry .* not a UTC midnight"):
        LeapTable.parse(packaged_text.replace(NTP_2017, "3692217601"), "x")


def test_descending_dates_and_garbage_rejected() -> None:
    with pytest.raises(LeapFileError, match=r"x:2: dates are not strictly ascending"):
        LeapTable.parse("2287785600 11\n2272060800 10\n", "x")
    with pytest.raises(LeapFileError, match=r"x:1: expected"):
        LeapTable.parse("22720608OO 10\n", "x")
    with pytest.raises(LeapFileError, match=r"x:2: no leap-second entries"):
        LeapTable.parse("# nothing here\n", "x")


def test_hash_words_may_omit_leading_zeros() -> None:
    # SHA-1 of "3900000017" "4007404800" "2272060800" "10"; the second word is 0x0028b782, written short.
    text = ("#$\t3900000017\n#@\t4007404800\n2272060800  10  # 1 Jan 1972\n"
            "#h\teeff402f 28b782 7b80da1d 645afe84 b6e3ca20\n")
    assert LeapTable.parse(text, "x").entries == ((posix_s(1972, 1, 1), 10),)
    with pytest.raises(LeapFileError, match="x:4"):
        LeapTable.parse(text.replace("28b782", "28b783"), "x")


# --- known instants ----------------------------------------------------------------------------------


def test_2016_leap_second_exists_and_maps_to_tai(table: LeapTable) -> None:
    tai_ns = utc_to_tai(UtcTime(2016, 12, 31, 23, 59, 60, 0), table)
    assert tai_ns == 1_483_228_836 * NS_PER_S
    assert str(tai_to_utc(tai_ns + 250_000_000, table)) == "2016-12-31T23:59:60.250000000Z"
    assert tai_to_utc(tai_ns + 999_999_999, table).iso_ms() == "2016-12-31T23:59:60.999Z"
    assert table.tai_utc_at_tai_ns(tai_ns + 999_999_999) == 36


def test_2017_new_year_has_offset_37(table: LeapTable) -> None:
    tai_ns = utc_fields_to_tai(2017, 1, 1, 0, 0, 0, 0, table)
    assert tai_ns == (posix_s(2017, 1, 1) + 37) * NS_PER_S
    assert table.tai_utc_at_tai_ns(tai_ns) == 37 and table.tai_utc_at_tai_ns(tai_ns - 1) == 36
    assert table.next_change_after(tai_ns - 1) == (tai_ns, 1)
    assert table.next_change_after(tai_ns) is None


def test_1998_leap_second(table: LeapTable) -> None:
    leap = UtcTime(1998, 12, 31, 23, 59, 60, 123_456_789)
    tai_ns = utc_to_tai(leap, table)
    assert tai_ns == (posix_s(1999, 1, 1) + 31) * NS_PER_S + 123_456_789
    assert tai_to_utc(tai_ns, table) == leap


def test_second_60_rejected_without_leap(table: LeapTable) -> None:
    with pytest.raises(ValueError, match="not an inserted leap second"):
        utc_to_tai(UtcTime(2016, 12, 30, 23, 59, 60, 0), table)
    with pytest.raises(ValueError):
        utc_to_tai(UtcTime(2016, 12, 31, 23, 58, 60, 0), table)


def test_before_1972_uses_first_offset(table: LeapTable) -> None:
    assert table.tai_utc_at_posix_s(0) == 10
    assert utc_fields_to_tai(1970, 1, 1, 0, 0, 0, 0, table) == 10 * NS_PER_S


def test_tai_to_posix_repeats_2359_59_with_flag(table: LeapTable) -> None:
    leap_tai_ns = 1_483_228_836 * NS_PER_S
    before = tai_to_posix_ns(leap_tai_ns - NS_PER_S + 7, table)
    during = tai_to_posix_ns(leap_tai_ns + 7, table)
    after = tai_to_posix_ns(leap_tai_ns + NS_PER_S + 7, table)
    midnight_ns = posix_s(2017, 1, 1) * NS_PER_S
    assert before == (midnight_ns - NS_PER_S + 7, False)
    assert during == (midnight_ns - NS_PER_S + 7, True)
    assert after == (midnight_ns + 7, False)
    assert posix_to_tai_ns(during[0], table, in_leap_second=True) == leap_tai_ns + 7
    assert posix_to_tai_ns(before[0], table) == leap_tai_ns - NS_PER_S + 7
    with pytest.raises(ValueError):
        posix_to_tai_ns(midnight_ns - 2 * NS_PER_S, table, in_leap_second=True)


# --- synthetic negative leap second ------------------------------------------------------------------


@pytest.fixture()
def negative_table() -> LeapTable:
    entries = ((posix_s(2017, 1, 1), 37), (posix_s(2030, 7, 1), 36))
    return LeapTable(entries, None, posix_s(2031, 1, 1), "synthetic")


def test_negative_leap_skips_2359_59(negative_table: LeapTable) -> None:
    midnight_tai_ns = (posix_s(2030, 7, 1) + 36) * NS_PER_S
    assert str(tai_to_utc(midnight_tai_ns - 1, negative_table)) == "2030-06-30T23:59:58.999999999Z"
    assert str(tai_to_utc(midnight_tai_ns, negative_table)) == "2030-07-01T00:00:00.000000000Z"
    assert negative_table.next_change_after(0) == (midnight_tai_ns, -1)
    with pytest.raises(ValueError, match="removed"):
        utc_to_tai(UtcTime(2030, 6, 30, 23, 59, 59, 0), negative_table)
    with pytest.raises(ValueError):
        utc_to_tai(UtcTime(2030, 6, 30, 23, 59, 60, 0), negative_table)
    assert utc_to_tai(UtcTime(2030, 6, 30, 23, 59, 58, 999_999_999), negative_table) == midnight_tai_ns - 1


def test_direct_construction_validates() -> None:
    with pytest.raises(ValueError):
        LeapTable(((0, 10), (86_400, 12)), None, None, "bad step")
    with pytest.raises(ValueError):
        LeapTable(((0, 10), (86_401, 11)), None, None, "not midnight")


# --- announcements and expiry ------------------------------------------------------------------------


def test_announcement_makes_future_leap_second_valid(table: LeapTable) -> None:
    leap = UtcTime(2026, 12, 31, 23, 59, 60, 0)
    with pytest.raises(ValueError):
        utc_to_tai(leap, table)
    extended = table.with_announcement(posix_s(2027, 1, 1), 38, "receiver")
    assert extended is not table and len(table.entries) == 28  # original untouched
    assert extended.entries[-1] == (posix_s(2027, 1, 1), 38)
    assert extended.source == f"{table.source} + receiver"
    tai_ns = utc_to_tai(leap, extended)
    assert tai_ns == (posix_s(2027, 1, 1) + 37) * NS_PER_S
    assert tai_to_utc(tai_ns, extended) == leap
    assert extended.with_announcement(posix_s(2027, 1, 1), 38, "again") is extended


def test_announcement_already_known_or_contradicting(table: LeapTable) -> None:
    assert table.with_announcement(posix_s(2017, 1, 1), 37, "rx") is table
    assert table.with_announcement(posix_s(2025, 6, 1), 37, "rx current offset") is table
    with pytest.raises(ValueError, match="contradicts"):
        table.with_announcement(posix_s(2017, 1, 1), 36, "rx")
    with pytest.raises(ValueError, match="expiry"):
        table.with_announcement(posix_s(2026, 7, 1), 38, "rx")
    with pytest.raises(ValueError, match="single step"):
        table.with_announcement(posix_s(2027, 1, 1), 39, "rx")


def test_is_expired_around_expiry(table: LeapTable) -> None:
    expiry_tai_ns = (posix_s(2026, 12, 28) + 37) * NS_PER_S
    assert not table.is_expired(expiry_tai_ns - 1)
    assert table.is_expired(expiry_tai_ns)
    assert LeapTable(((0, 10),), None, None, "no expiry").is_expired(0)


def test_utctime_validation_and_format() -> None:
    with pytest.raises(ValueError):
        UtcTime(2023, 2, 29, 0, 0, 0, 0)
    with pytest.raises(ValueError):
        UtcTime(2024, 1, 1, 0, 0, 61, 0)
    t = UtcTime(2024, 2, 29, 1, 2, 3, 4_999_999)
    assert str(t) == "2024-02-29T01:02:03.004999999Z" and t.iso_ms() == "2024-02-29T01:02:03.004Z"


def test_simulated_leap_second_falls_on_the_first_opportunity_after_expiry(table: LeapTable) -> None:
    from appliance.sim.leapsecond import first_after_expiry

    dated = first_after_expiry(table)  # expires 2026-12-28: the next end of June or December is 2026-12-31
    assert dated.effective_posix_s == posix_s(2027, 1, 1) and dated.new_offset_s == 38
    assert dated.labels == ["2026-12-31T23:59:59.000Z", "2026-12-31T23:59:60.000Z", "2027-01-01T00:00:00.000Z"]
    assert utc_to_tai(UtcTime(2026, 12, 31, 23, 59, 60, 0), dated.truth) == dated.before_tai_ns(23, 59, 59) + NS_PER_S
    july = LeapTable(table.entries, table.updated_posix_s, posix_s(2027, 6, 28), "to June")
    assert first_after_expiry(july).last_day == (2027, 6, 30)
    august = LeapTable(table.entries, table.updated_posix_s, posix_s(2027, 8, 2), "to August")
    assert first_after_expiry(august).effective_utc == "2028-01-01T00:00:00.000Z"
    shipped = first_after_expiry()
    assert shipped.effective_posix_s > LeapTable.load_default().expires_posix_s
