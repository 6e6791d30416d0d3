"""The time-quality log (appliance.audit.tqlog) and ``appliance quality`` (appliance.audit.tqcli): three simulated days
around the 2016-12-31 leap second, with an acquisition, a two-hour holdover and single-second events, thinned as they
age and read back the way an auditor or an operator would (rows, worst cases, CSV, the table)."""

from __future__ import annotations

import argparse
import csv
import io
import sqlite3
import threading
from pathlib import Path

import pytest

from appliance import leap
from appliance.audit import tqcli
from appliance.audit.tqlog import (CSV_COLUMNS, QualityLogError, QualitySample, Row, TimeQualityLog,
                                   sample_from_status, utc_labeler)
from appliance.events import Constellation, FixMode, GnssEpoch, Position, ReceiverState, SatInfo
from appliance.gnss.receiver import ReceiverSnapshot
from appliance.status import ClockStatus, PpsStatus, TimeStatus, summarize
from appliance.utcoffset import LeapStatus

S = 1_000_000_000
DAY = 86_400
TABLE = leap.LeapTable.load_default()
LABEL = utc_labeler(TABLE)


def utc(text: str) -> int:
    """TAI ns of 'YYYY-MM-DDTHH:MM:SS' (UTC; :60 allowed at a leap second)."""
    date, clock = text.split("T")
    return leap.utc_fields_to_tai(*map(int, date.split("-")), *map(int, clock.split(":")), 0, TABLE)


START, END = utc("2016-12-30T00:00:00"), utc("2017-01-02T00:00:00")  # 3 UTC days and one 23:59:60
SECONDS = (END - START) // S
ACQUIRED = utc("2016-12-30T00:10:00")
HOLDOVER_FROM, HOLDOVER_TO = utc("2016-12-30T06:00:00"), utc("2016-12-30T08:00:00")
BOUND_PEAK = utc("2016-12-30T14:15:16")  # one second with a 5 us bound
FEW_SATS = utc("2016-12-31T03:02:01")  # one second with 4 satellites
BLIP = utc("2016-12-31T12:34:56")  # one second of holdover
PHASE_PEAK = utc("2017-01-01T09:08:07")  # one second 250 ns behind


def sample(t: int) -> QualitySample:
    i = (t - START) // S
    freq = 10.0 + (0.5 if i % 2 else -0.5)  # every whole minute averages exactly 10 ppb
    if t < ACQUIRED:
        return QualitySample(t, "ACQUIRING", None, freq, None, 9, 248)
    if HOLDOVER_FROM <= t < HOLDOVER_TO:
        return QualitySample(t, "HOLDOVER", None, freq, 100 + (t - HOLDOVER_FROM) // S // 10, 0, 7)
    if t == BLIP:
        return QualitySample(t, "HOLDOVER", None, freq, 100, 0, 7)
    phase = -250.0 if t == PHASE_PEAK else float(i % 21 - 10)
    return QualitySample(t, "LOCKED", phase, freq, 5000 if t == BOUND_PEAK else 40, 4 if t == FEW_SATS else 9, 6)


@pytest.fixture(scope="module")
def samples() -> list[QualitySample]:
    return [sample(START + k * S) for k in range(SECONDS)]


def filled(path: Path, samples: list[QualitySample], **kwargs: object) -> TimeQualityLog:
    log = TimeQualityLog(path, leap_table=TABLE, **kwargs)  # type: ignore[arg-type]
    log.add_many(samples)
    assert log.flush() == len(samples)
    return log


def at(rows: list[Row], text: str) -> Row:
    (row,) = [r for r in rows if r.at_tai_ns == utc(text)]
    return row


def spans(rows: list[Row]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for r in rows:
        counts[r.span_s] = counts.get(r.span_s, 0) + 1
    return counts


# --- ageing with the default bands: a day at full rate, then minutes -------------------------------------------


def test_last_day_kept_per_second_older_days_per_minute(tmp_path, samples):
    log = filled(tmp_path / "q.sqlite", samples)
    log.compact(END)
    rows = log.query(START, END)
    recent = [r for r in rows if r.at_tai_ns >= END - DAY * S]
    older = [r for r in rows if r.at_tai_ns < END - DAY * S]
    assert len(recent) == DAY and spans(recent) == {1: DAY}
    assert len(older) == 2 * 1440 and spans(older) == {60: 2 * 1440 - 1, 61: 1}
    assert LABEL(next(r for r in older if r.span_s == 61).at_tai_ns) == "2016-12-31T23:59:00Z"
    assert sum(r.span_s for r in rows) == SECONDS  # no second lost
    assert [r.at_tai_ns for r in rows] == sorted(r.at_tai_ns for r in rows)
    log.compact(END)  # again at the same instant: nothing changes
    assert log.query(START, END) == rows
    log.close()


def test_minute_rows_keep_the_worst_second(tmp_path, samples):
    with filled(tmp_path / "q.sqlite", samples) as log:
        log.compact(END)
        rows = log.query(START, END)
    blip = at(rows, "2016-12-31T12:34:00")
    assert (blip.state, blip.state_seconds, blip.clock_class) == ("HOLDOVER", {"LOCKED": 59, "HOLDOVER": 1}, 7)
    assert blip.error_bound_ns == 100 and blip.satellites_used == 0
    assert at(rows, "2016-12-30T14:15:00").error_bound_ns == 5000
    assert at(rows, "2016-12-31T03:02:00").satellites_used == 4
    quiet = at(rows, "2016-12-31T03:03:00")
    assert (quiet.state, quiet.state_seconds, quiet.error_bound_ns, quiet.satellites_used) == (
        "LOCKED", {"LOCKED": 60}, 40, 9)
    assert quiet.phase_offset_ns == 10.0 and quiet.frequency_ppb == pytest.approx(10.0)
    assert at(rows, "2017-01-01T09:08:07").phase_offset_ns == -250.0  # still per second


# --- ageing with short bands: seconds, minutes, hours, then gone ------------------------------------------------


def test_rows_thin_to_minutes_then_hours_then_expire(tmp_path, samples):
    log = filled(tmp_path / "q.sqlite", samples, full_rate_s=DAY, minute_rate_s=2 * DAY, keep_s=4 * DAY)

    log.compact(END)
    rows = log.query(START, END)
    assert spans(rows) == {3600: 24, 60: 1439, 61: 1, 1: DAY}
    first = at(rows, "2016-12-30T00:00:00")
    assert first.state == "ACQUIRING" and first.state_seconds == {"ACQUIRING": 600, "LOCKED": 3000}
    assert first.error_bound_ns is None  # ten minutes without a bound: the hour's bound is unknown
    assert first.clock_class == 248
    for hour in ("2016-12-30T06:00:00", "2016-12-30T07:00:00"):
        row = at(rows, hour)
        assert (row.state, row.phase_offset_ns, row.satellites_used, row.clock_class) == ("HOLDOVER", None, 0, 7)
    assert at(rows, "2016-12-30T07:00:00").error_bound_ns == 100 + 7199 // 10  # the bound grew all along
    assert at(rows, "2016-12-30T14:00:00").error_bound_ns == 5000

    log.compact(END + DAY * S)
    rows = log.query(START, END)
    assert spans(rows) == {3600: 47, 3601: 1, 60: 1440}
    hour = at(rows, "2016-12-31T12:00:00")
    assert hour.state == "HOLDOVER" and hour.state_seconds == {"LOCKED": 3599, "HOLDOVER": 1}
    assert (hour.error_bound_ns, hour.clock_class, hour.satellites_used) == (100, 7, 0)
    assert at(rows, "2016-12-31T03:00:00").satellites_used == 4
    assert at(rows, "2016-12-31T23:00:00").span_s == 3601  # the hour holding 23:59:60
    assert at(rows, "2017-01-01T09:08:00").phase_offset_ns == -250.0

    log.compact(END + 2 * DAY * S)
    rows = log.query(START, END)
    assert spans(rows) == {3600: 47, 3601: 1}  # 2016-12-30 is more than 4 days old and gone
    assert LABEL(rows[0].at_tai_ns) == "2016-12-31T00:00:00Z"
    peak = at(rows, "2017-01-01T09:00:00")
    assert peak.phase_offset_ns == -250.0  # sign kept through two merges
    assert peak.frequency_ppb == pytest.approx(10.0)
    assert at(rows, "2016-12-31T12:00:00").state_seconds == {"LOCKED": 3599, "HOLDOVER": 1}

    log.compact(END + 4 * DAY * S)
    assert log.query(START, END) == []
    log.close()


def test_minutes_follow_tai_without_a_leap_table(tmp_path):
    t0 = utc("2017-01-01T00:00:00")
    with TimeQualityLog(tmp_path / "q.sqlite", full_rate_s=60, minute_rate_s=DAY, keep_s=DAY) as log:
        log.add_many(QualitySample(t0 + k * S, "LOCKED", 1.0, 0.0, 40, 9, 6) for k in range(180))
        log.compact(t0 + 600 * S)
        rows = log.query(t0, t0 + 180 * S)
    assert all(r.at_tai_ns % (60 * S) == 0 for r in rows[1:])
    assert LABEL(rows[1].at_tai_ns).endswith(":23Z")  # TAI minutes start at UTC :23 while TAI-UTC is 37 s
    assert sum(r.span_s for r in rows) == 180


# --- queries ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compacted(tmp_path_factory, samples) -> TimeQualityLog:
    log = filled(tmp_path_factory.mktemp("q") / "q.sqlite", samples)
    log.compact(END)  # 2016-12-30 and -31 per minute, 2017-01-01 per second
    return log


def test_query_returns_rows_overlapping_the_range(compacted):
    rows = compacted.query(utc("2016-12-31T12:00:30"), utc("2016-12-31T13:00:00"))
    assert len(rows) == 60 and LABEL(rows[0].at_tai_ns) == "2016-12-31T12:00:00Z"  # covers 12:00:30
    assert LABEL(rows[-1].at_tai_ns) == "2016-12-31T12:59:00Z"
    assert len(compacted.query(utc("2017-01-01T10:00:00"), utc("2017-01-01T11:00:00"))) == 3600
    assert compacted.query(END, END + DAY * S) == []


def test_max_points_merges_on_the_fly_by_the_same_rules(compacted):
    rows = compacted.query(START, END, max_points=500)
    assert len(rows) <= 500
    assert sum(r.span_s for r in rows) == SECONDS
    assert [r.at_tai_ns for r in rows] == sorted(r.at_tai_ns for r in rows)
    assert max(r.error_bound_ns or 0 for r in rows) == 5000
    assert min(r.satellites_used for r in rows) == 0
    assert sum(r.state_seconds.get("HOLDOVER", 0) for r in rows) == 7200 + 1
    assert min(r.phase_offset_ns for r in rows if r.phase_offset_ns is not None) == -250.0

    hour = compacted.query(utc("2017-01-01T09:00:00"), utc("2017-01-01T10:00:00"), max_points=60)
    assert len(hour) == 60 and {r.span_s for r in hour} == {60}
    assert at(hour, "2017-01-01T09:08:00").phase_offset_ns == -250.0

    (whole,) = compacted.query(START, END, max_points=1)
    assert whole.state == "ACQUIRING" and whole.error_bound_ns is None and whole.span_s == SECONDS
    assert whole.state_seconds == {"ACQUIRING": 600, "HOLDOVER": 7201, "LOCKED": SECONDS - 7801}

    few = compacted.query(utc("2017-01-01T09:00:00"), utc("2017-01-01T09:00:10"), max_points=100)
    assert len(few) == 10 and {r.span_s for r in few} == {1}  # already few enough: untouched


# --- durability and foreign files ------------------------------------------------------------------------------


def test_flushed_seconds_survive_and_unflushed_ones_wait(tmp_path):
    path, t0 = tmp_path / "q.sqlite", utc("2017-01-01T00:00:00")
    writer = TimeQualityLog(path)
    writer.add_many(QualitySample(t0 + k * S, "LOCKED", 1.5, -3.25, 40, 9, 6) for k in range(10))
    writer.flush()
    writer.add(QualitySample(t0 + 10 * S, "HOLDOVER", None, None, 90, 0, 7))
    with TimeQualityLog(path) as reader:  # what a crash now would leave
        assert len(reader.query(t0, t0 + DAY * S)) == 10
    writer.close()
    with TimeQualityLog(path) as reopened:
        rows = reopened.query(t0, t0 + DAY * S)
    assert len(rows) == 11
    assert rows[0] == Row(t0, 1, "LOCKED", {"LOCKED": 1}, 1.5, -3.25, 40, 9, 6)
    assert rows[-1] == Row(t0 + 10 * S, 1, "HOLDOVER", {"HOLDOVER": 1}, None, None, 90, 0, 7)


def test_adds_and_queries_from_several_threads(tmp_path):
    t0 = utc("2017-01-01T00:00:00")
    log, errors = TimeQualityLog(tmp_path / "q.sqlite"), []

    def read() -> None:
        try:
            for _ in range(50):
                log.query(t0, t0 + DAY * S, max_points=10)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for r in readers:
        r.start()
    for k in range(2000):
        log.add(QualitySample(t0 + k * S, "LOCKED", 0.0, 0.0, 40, 9, 6))
        if k % 100 == 99:
            log.flush()
    for r in readers:
        r.join()
    assert errors == [] and len(log.query(t0, t0 + DAY * S)) == 2000
    log.close()


def test_a_file_that_is_not_a_log_is_named_in_the_error(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"certainly not SQLite\n" * 200)
    with pytest.raises(QualityLogError, match="junk.sqlite"):
        TimeQualityLog(junk)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER)")
    conn.close()
    with pytest.raises(QualityLogError, match=r"other\.sqlite is an SQLite database but not a time-quality log"):
        TimeQualityLog(other)
    newer = tmp_path / "newer.sqlite"
    TimeQualityLog(newer).close()
    with sqlite3.connect(newer) as conn:
        conn.execute("UPDATE tq_meta SET value = '9' WHERE key = 'version'")
    conn.close()
    with pytest.raises(QualityLogError, match="newer.sqlite: time-quality log version 9 is not supported"):
        TimeQualityLog(newer)


# --- CSV and the command line ------------------------------------------------------------------------------------


@pytest.fixture
def state_dir(tmp_path) -> Path:
    """A log holding 2016-12-31T23:59:50Z .. 2017-01-01T00:00:10Z per second, 23:59:60 included."""
    first = utc("2016-12-31T23:59:50")
    with TimeQualityLog(tmp_path / "quality.sqlite") as log:
        log.add_many(sample(first + k * S) for k in range(22))
    return tmp_path


def cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="appliance")
    tqcli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["quality", *argv])


def test_csv_reads_23_59_60_at_the_leap_second(state_dir):
    out = io.StringIO()
    with TimeQualityLog(state_dir / "quality.sqlite") as log:
        assert log.export_csv(utc("2016-12-31T23:59:58"), utc("2017-01-01T00:00:02"), out, LABEL) == 5
    records = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert tuple(records[0]) == CSV_COLUMNS
    assert [r["utc"] for r in records] == ["2016-12-31T23:59:58Z", "2016-12-31T23:59:59Z", "2016-12-31T23:59:60Z",
                                          "2017-01-01T00:00:00Z", "2017-01-01T00:00:01Z"]
    assert [int(r["tai_ns"]) - int(records[0]["tai_ns"]) for r in records] == [0, S, 2 * S, 3 * S, 4 * S]
    assert records[2] == {"utc": "2016-12-31T23:59:60Z", "tai_ns": str(utc("2016-12-31T23:59:60")), "span_s": "1",
                          "state": "LOCKED", "phase_offset_ns": records[2]["phase_offset_ns"],
                          "frequency_ppb": records[2]["frequency_ppb"], "error_bound_ns": "40",
                          "satellites_used": "9", "clock_class": "6", "state_seconds": "LOCKED=1"}
    assert float(records[2]["phase_offset_ns"]) in {float(v) for v in range(-10, 11)}


def test_csv_of_merged_minutes(compacted):
    out = io.StringIO()
    compacted.export_csv(utc("2016-12-31T23:58:00"), utc("2017-01-01T00:00:00"), out, LABEL)
    records = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [(r["utc"], r["span_s"], r["state"]) for r in records] == [
        ("2016-12-31T23:58:00Z", "60", "LOCKED"), ("2016-12-31T23:59:00Z", "61", "LOCKED")]
    out = io.StringIO()
    compacted.export_csv(utc("2016-12-30T00:09:00"), utc("2016-12-30T00:11:00"), out, LABEL)
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows[1][3:] == ["ACQUIRING", "", "10.0", "", "9", "248", "ACQUIRING=60"]
    assert rows[2][3] == "LOCKED" and rows[2][6] == "40"


def test_cli_export_to_a_file(state_dir, capsys):
    target = state_dir / "out.csv"
    args = cli("export", "--since", "2016-12-31T23:59:60Z", "--until", "2017-01-01T00:00:02Z", str(target))
    assert tqcli.run(args, state_dir, TABLE) == 0
    records = list(csv.DictReader(target.open(newline="")))
    assert [r["utc"] for r in records] == ["2016-12-31T23:59:60Z", "2017-01-01T00:00:00Z", "2017-01-01T00:00:01Z"]
    assert capsys.readouterr().out.strip() == (f"3 row(s) from 2016-12-31T23:59:60Z to 2017-01-01T00:00:02Z "
                                               f"written to {target}")


def test_cli_export_relative_to_now_on_stdout(state_dir, capsys):
    now = utc("2017-01-01T00:00:11")
    assert tqcli.run(cli("export", "--since", "-15s"), state_dir, TABLE, now_tai_ns=now) == 0
    captured = capsys.readouterr()
    records = list(csv.DictReader(io.StringIO(captured.out)))
    assert len(records) == 15 and records[0]["utc"] == "2016-12-31T23:59:57Z"  # 15 s back, 23:59:60 among them
    assert captured.err.strip().startswith("15 row(s) from 2016-12-31T23:59:57Z to 2017-01-01T00:00:11Z")
    assert tqcli.run(cli("export", "--since", "-1h", "--until", "-10s", "-"), state_dir, TABLE, now_tai_ns=now) == 0
    assert len(list(csv.DictReader(io.StringIO(capsys.readouterr().out)))) == 12
    assert tqcli.run(cli("export", "--since", "-7d", "--until", "now"), state_dir, TABLE, now_tai_ns=now) == 0
    assert len(list(csv.DictReader(io.StringIO(capsys.readouterr().out)))) == 22


def test_cli_show_prints_the_latest_rows(state_dir, capsys):
    assert tqcli.run(cli("show", "--last", "3"), state_dir, TABLE) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["UTC", "SPAN", "s"]
    assert [line.split()[0] for line in lines[1:]] == ["2017-01-01T00:00:08Z", "2017-01-01T00:00:09Z",
                                                       "2017-01-01T00:00:10Z"]
    assert lines[1].split()[1:3] == ["1", "LOCKED"]


def test_cli_show_lists_seconds_per_state_of_merged_rows(tmp_path, capsys):
    t0 = utc("2016-12-31T12:34:00")
    with TimeQualityLog(tmp_path / "quality.sqlite", full_rate_s=60, leap_table=TABLE) as log:
        log.add_many(sample(t0 + k * S) for k in range(60))
        log.compact(t0 + 600 * S)
    assert tqcli.run(cli("show", "--last", "1"), tmp_path, TABLE) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.startswith("2016-12-31T12:34:00Z") and "HOLDOVER" in row and row.endswith("LOCKED 59, HOLDOVER 1")


@pytest.mark.parametrize("argv, message", [
    (("export", "--since", "yesterday"), "bad time 'yesterday': expected ISO UTC like 2026-12-03T10:00:00Z"),
    (("export", "--since", "2017-01-01T00:00:00Z", "--until", "2016-12-31T00:00:00Z"), "is not before --until"),
    (("export", "--since", "2016-12-30T23:59:60Z"), "not an inserted leap second"),
    (("show", "--last", "0"), "--last 0: must be at least 1"),
])
def test_cli_bad_input_is_one_line_and_exit_2(state_dir, capsys, argv, message):
    assert tqcli.run(cli(*argv), state_dir, TABLE, now_tai_ns=utc("2017-01-01T00:00:11")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("appliance: quality: ") and message in err


def test_cli_missing_log_unwritable_file_and_foreign_log(state_dir, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert tqcli.run(cli("show"), empty, TABLE) == 2
    assert f"no time-quality log at {empty / 'quality.sqlite'}" in capsys.readouterr().err
    nowhere = state_dir / "no-such-dir" / "out.csv"
    assert tqcli.run(cli("export", "--since", "-1h", str(nowhere)), state_dir, TABLE) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(nowhere) in err
    (empty / "quality.sqlite").write_bytes(b"\x00garbage" * 100)
    assert tqcli.run(cli("show"), empty, TABLE) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(empty / "quality.sqlite") in err


# --- the appliance's status, once a second ---------------------------------------------------------------------


def status(receiver_state: ReceiverState = ReceiverState.FIX_3D, used_count: int | None = None,
           sats: tuple[SatInfo, ...] = ()) -> TimeStatus:
    now = utc("2017-01-01T00:00:00")
    epoch = GnssEpoch("2016-12-31T23:59:59.000Z", now - S, True, FixMode.FIX_3D, Position(46.2, 6.1), sats,
                      used_count)
    return TimeStatus(
        now, "2017-01-01T00:00:00.000Z", "simulated", "0.1.0", now - 3600 * S,
        ReceiverSnapshot("gnss0", "simulated", receiver_state, now - 3600 * S, epoch), sats, summarize(sats),
        PpsStatus("simulated", 3600, 3600), LeapStatus(37, "table", "default", None, False, 0, None),
        ClockStatus("HOLDOVER", now - 60 * S, "reference lost", 120, -1.25, None, clock_class=7))


def test_sample_from_status_reads_the_clock_and_the_satellites_used():
    gps = Constellation.GPS
    sats = (SatInfo(gps, 1, used=True), SatInfo(gps, 2, used=True), SatInfo(gps, 3, used=False))
    s = sample_from_status(status(sats=sats))
    assert s == QualitySample(utc("2017-01-01T00:00:00"), "HOLDOVER", None, -1.25, 120, 2, 7)
    assert sample_from_status(status(used_count=11, sats=sats)).satellites_used == 11
    assert sample_from_status(status(ReceiverState.DISCONNECTED, used_count=11)).satellites_used == 0
    assert sample_from_status(status()).satellites_used is None
