"""The sync monitor's core: target settings, the NTP exchange's arithmetic and checks, nsm's report, hysteresis and the
over-limit alarm, unreachable targets."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance import config
from appliance.monitor import (ALARM_CODE, alarm_code, NsmParser, NsmReport, SyncMonitor, Target, failed, nsm_answer, ntp_answer,
                               ntp_offset_delay_ns, ntp_request, targets_of)
from appliance.protocol.ntp import packet
from appliance.timebase import posix_ns_to_ntp64
from appliance.units import NS_PER_S

T0 = 1_800_000_000 * NS_PER_S  # a POSIX instant in 2027
NTP = Target("192.0.2.7:123", "ntp", "192.0.2.7", 123, 1_000_000)


# --- settings ---------------------------------------------------------------------------------------------------
def test_targets_are_named_and_limits_override_per_target() -> None:
    targets = targets_of(["192.0.2.7", "[2001:db8::1]:1123"], ["192.0.2.9", "02:00:00:00:00:01"], 1000,
                         ["192.0.2.7=50", "192.0.2.9=70"])
    assert [(t.name, t.kind, t.port, t.limit_ns) for t in targets] == [
        ("192.0.2.7:123", "ntp", 123, 50), ("[2001:db8::1]:1123", "ntp", 1123, 1000),
        ("192.0.2.9", "ptp", 319, 70), ("02:00:00:00:00:01", "ptp", 319, 1000)]


@pytest.mark.parametrize("pairs, words", [
    (["monitor.ptp_targets=slave.example"], "monitor.ptp_targets: 'slave.example'"),
    (["monitor.ptp_targets=192.0.2.9"], "needs monitor.ptp_interface"),
    (["monitor.ntp_targets=192.0.2.7", "monitor.limits=192.0.2.8=5"], "'192.0.2.8' is not a monitored target"),
    (["monitor.ntp_targets=192.0.2.7", "monitor.limits=192.0.2.7=0"], "expected TARGET=NS"),
    (["monitor.ntp_targets=192.0.2.7,192.0.2.7:123"], "targets listed twice: 192.0.2.7:123"),
    (["monitor.ntp_targets=192.0.2.7:99999"], "monitor.ntp_targets"),
    (["monitor.interval_s=0"], "monitor.interval_s"),
])
def test_bad_monitor_settings_are_configuration_errors_naming_the_setting(pairs: list[str], words: str) -> None:
    with pytest.raises(config.ConfigError) as err:
        config.load(None, pairs)
    assert words in str(err.value)


def test_good_monitor_settings_load() -> None:
    c = config.load(None, ["monitor.ntp_targets=127.0.0.1:11123", "monitor.ptp_targets=10.0.0.2",
                           "monitor.ptp_interface=veth0", "monitor.limits=127.0.0.1:11123=5000"])
    assert c.monitor.ntp_targets == ("127.0.0.1:11123",) and c.monitor.nsm_path == "nsm"


# --- NTP --------------------------------------------------------------------------------------------------------
def test_offset_and_delay_follow_rfc5905() -> None:
    # The target is 300 ns ahead; 1000 ns each way; it holds the request 50 ns.
    t1 = T0
    t2 = t1 + 1000 + 300
    t3 = t2 + 50
    t4 = t3 - 300 + 1000
    assert ntp_offset_delay_ns(t1, t2, t3, t4) == (300, 2000)


@given(st.integers(-10**12, 10**12), st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 10**6))
def test_offset_is_exact_for_any_symmetric_path(offset_ns: int, one_way_ns: int, start_ns: int, hold_ns: int) -> None:
    t1 = T0 + start_ns
    t2 = t1 + one_way_ns + offset_ns
    t3 = t2 + hold_ns
    t4 = t3 - offset_ns + one_way_ns
    assert ntp_offset_delay_ns(t1, t2, t3, t4) == (offset_ns, 2 * one_way_ns)


@given(st.integers(-10**12, 10**12), st.integers(0, 10**9), st.integers(-10**9, 10**9))
def test_an_asymmetric_path_moves_the_offset_by_half_the_difference(offset_ns: int, there_ns: int,
                                                                    extra_ns: int) -> None:
    back_ns = max(0, there_ns + extra_ns)
    t1 = T0
    t2 = t1 + there_ns + offset_ns
    t4 = t2 - offset_ns + back_ns
    got, delay = ntp_offset_delay_ns(t1, t2, t2, t4)
    assert delay == there_ns + back_ns
    assert abs(got - (offset_ns + (there_ns - back_ns) / 2)) <= 0.5


def _reply(xmt: int, receive_ns: int, transmit_ns: int, **changes: object) -> bytes:
    h = packet.NtpHeader(0, 4, packet.MODE_SERVER, 2, 0, -20, 0, 0, b"\x7f\0\0\x01", 0, xmt,
                         posix_ns_to_ntp64(receive_ns), posix_ns_to_ntp64(transmit_ns))
    return h.with_(**changes).encode()


def test_an_ntp_exchange_measures_the_target_against_the_served_times() -> None:
    request, xmt = ntp_request(T0)
    assert packet.decode(request).mode == packet.MODE_CLIENT and packet.decode(request).transmit_ts == xmt
    answer = ntp_answer(NTP.name, _reply(xmt, T0 + 40_000 + 5_000, T0 + 45_010), xmt, T0, T0 + 80_010, 7)
    assert (answer.offset_ns, answer.delay_ns, answer.error, answer.at_tai_ns) == (5_000, 80_000, "", 7)


@pytest.mark.parametrize("changes, words", [
    ({"mode": packet.MODE_CLIENT}, "not server"),
    ({"origin_ts": 12345}, "does not echo"),
    ({"stratum": 0, "reference_id": b"RATE"}, "kiss-o'-death 'RATE'"),
    ({"leap": 3}, "unsynchronised"),
    ({"transmit_ts": 0}, "no receive or transmit"),
])
def test_a_reply_that_cannot_be_used_is_a_failed_poll(changes: dict[str, object], words: str) -> None:
    _, xmt = ntp_request(T0)
    answer = ntp_answer(NTP.name, _reply(xmt, T0, T0, **changes), xmt, T0, T0 + 1000, 0)
    assert answer.offset_ns is None and words in answer.error
    assert "shorter" in ntp_answer(NTP.name, b"\0" * 20, xmt, T0, T0, 0).error


# --- PTP (nsm) --------------------------------------------------------------------------------------------------
NSM_BLOCK = """NSM MEASUREMENT COMPLETE
\t\toffset                                -1234
\t\tportState                             SLAVE
\t\tparentPortAddress                     1 10.99.0.1
\tparentDataset
\t\tparentPortIdentity                    aabbcc.fffe.000001-1
\t\tgm.ClockClass                         6
\tcurrentDataset
\t\tstepsRemoved                          1
\t\toffsetFromMaster                      -12.0
\t\tmeanPathDelay                         5321.5
\ttimePropertiesDataset
\t\tcurrentUtcOffset                      37
\tlastSyncTimestamp    1800000000.000000000
"""


def test_nsm_blocks_are_read_line_by_line_and_noise_is_ignored() -> None:
    parser = NsmParser()
    lines = ["nsm[12.3]: selected /dev/ptp0\n"] + NSM_BLOCK.splitlines(True)
    reports = [r for r in (parser.feed(line) for line in lines) if r is not None]
    assert reports == [NsmReport(-1234, "SLAVE", -12.0, 5321.5)]
    # A block cut short by an unrelated line still yields its offset; a block without one yields nothing.
    cut = [parser.feed(line) for line in NSM_BLOCK.splitlines(True)[:3] + ["nsm[1.0]: recv message failed\n"]]
    assert cut[-1] == NsmReport(-1234, "SLAVE")
    assert [parser.feed(x) for x in ("NSM MEASUREMENT COMPLETE\n", "\tlastSyncTimestamp 0.0\n")] == [None, None]


def test_the_nsm_offset_is_turned_into_slave_minus_served() -> None:
    # nsm says host - slave = -1234 ns: the slave leads the host by 1234; the served clock leads the host by 200.
    answer = nsm_answer("10.99.0.2", NsmReport(-1234, "SLAVE", -12.0, 5321.5), 200, 9)
    assert (answer.offset_ns, answer.delay_ns) == (1034, 5322)


# --- states and the alarm ---------------------------------------------------------------------------------------
def _ok(target: str, at_s: int, offset_ns: int) -> object:
    from appliance.monitor import Answer

    return Answer(target, at_s * NS_PER_S, offset_ns, 100)


def test_over_limit_needs_two_answers_beyond_and_clears_below_80_percent() -> None:
    mon = SyncMonitor([NTP], 16 * NS_PER_S)
    assert mon.rows(0)[0].state == "waiting"
    assert mon.record(_ok(NTP.name, 0, 2_000_000)) == []  # one answer beyond: not yet
    raised = mon.record(_ok(NTP.name, 16, -2_000_000))
    assert [(a.code, a.raised) for a in raised] == [(f"{ALARM_CODE}@{NTP.name}", True)]
    assert "NTP 192.0.2.7:123 beyond its limit (limit 1 ms, offset -2,000,000 ns)" in raised[0].text
    assert mon.rows(16 * NS_PER_S)[0].state == "over-limit"
    # Between 80 % and 100 % of the limit: neither clears nor raises again.
    assert mon.record(_ok(NTP.name, 32, 900_000)) == [] and mon.record(_ok(NTP.name, 48, 900_000)) == []
    assert mon.record(_ok(NTP.name, 64, 100)) == []
    cleared = mon.record(_ok(NTP.name, 80, 100))
    assert [(a.code, a.raised) for a in cleared] == [(alarm_code(NTP.name), False)]
    assert mon.rows(80 * NS_PER_S)[0].state == "ok"


def test_each_target_beyond_its_limit_has_an_alarm_of_its_own() -> None:
    from appliance.alarms import AlarmBook, spec_of

    other = Target("10.0.0.2", "ptp", "10.0.0.2", 319, 500)
    mon = SyncMonitor([NTP, other], NS_PER_S, raise_after=1, clear_after=1)
    first = mon.record(_ok(other.name, 1, 600))
    assert [(a.code, a.raised) for a in first] == [(alarm_code("10.0.0.2"), True)]
    assert "PTP 10.0.0.2 beyond its limit (limit 500 ns" in first[0].text
    second = mon.record(_ok(NTP.name, 2, 5_000_000))
    assert [(a.code, a.raised) for a in second] == [(alarm_code(NTP.name), True)]
    assert mon.record(_ok(NTP.name, 3, 5_000_000)) == []  # still beyond: no news
    book = AlarmBook()
    book.apply(first + second)
    rows = {r.code: r for r in book.rows()}
    assert set(rows) == {alarm_code("10.0.0.2"), alarm_code(NTP.name)}
    # each an instance of the catalogue's entry 70: its severity, cause and action, an ID and a title of its own
    ids = {r.id for r in rows.values()}
    assert len(ids) == 2 and all(i // 100_000 == 70 for i in ids)
    assert all(r.severity.value == "minor" and r.action == spec_of(ALARM_CODE).action for r in rows.values())
    assert rows[alarm_code(NTP.name)].title.endswith(f": {NTP.name}")
    cleared = mon.record(_ok(other.name, 4, 10))
    assert [(a.code, a.raised) for a in cleared] == [(alarm_code("10.0.0.2"), False)]


def test_a_client_that_answers_unsynchronised_is_said_so_not_unreachable() -> None:
    _, xmt = ntp_request(T0)
    mon = SyncMonitor([NTP], 16 * NS_PER_S)
    for at_s in (0, 16):
        mon.record(ntp_answer(NTP.name, _reply(xmt, T0, T0, leap=3, stratum=16), xmt, T0, T0 + 1000, at_s * NS_PER_S))
    row = mon.rows(16 * NS_PER_S)[0]
    assert (row.state, row.error) == ("unsynchronised", "target unsynchronised (leap 3, stratum 16)")
    mon.record(failed(NTP.name, 32 * NS_PER_S, "timeout"))
    mon.record(failed(NTP.name, 48 * NS_PER_S, "timeout"))
    assert mon.rows(48 * NS_PER_S)[0].state == "unreachable"  # silent now


def test_failures_make_a_target_unreachable_and_an_answer_brings_it_back() -> None:
    mon = SyncMonitor([NTP], 16 * NS_PER_S)
    mon.record(failed(NTP.name, 0, "no NTP answer within 1 s"))
    row = mon.rows(0)[0]
    assert (row.state, row.error, row.offset_ns) == ("unreachable", "no NTP answer within 1 s", None)
    mon.record(_ok(NTP.name, 16, 10))
    assert mon.rows(16 * NS_PER_S)[0].state == "ok"
    mon.record(failed(NTP.name, 32, "timeout"))
    assert mon.rows(32 * NS_PER_S)[0].state == "ok"  # one miss after answers: not yet
    mon.record(failed(NTP.name, 48, "timeout"))
    row = mon.rows(48 * NS_PER_S)[0]
    assert row.state == "unreachable" and row.offset_ns == 10 and row.last_answer_tai_ns == 16 * NS_PER_S


def test_a_silent_poller_makes_its_targets_unreachable_after_three_intervals() -> None:
    mon = SyncMonitor([NTP], 16 * NS_PER_S)
    mon.check(0)
    assert mon.rows(48 * NS_PER_S)[0].state == "waiting"
    assert mon.rows(49 * NS_PER_S)[0].state == "unreachable"
    mon.record(_ok(NTP.name, 50, 10))
    assert mon.rows(98 * NS_PER_S)[0].state == "ok"
    row = mon.rows(99 * NS_PER_S)[0]
    assert row.state == "unreachable" and "no poll result for over 48 s" in row.error


@given(st.lists(st.integers(-3_000, 3_000), max_size=60))
def test_hysteresis_never_flaps_faster_than_its_counts(offsets: list[int]) -> None:
    target = Target("t", "ntp", "t", 123, 1000)
    mon = SyncMonitor([target], NS_PER_S)
    changes = []
    for i, offset in enumerate(offsets):
        for alarm in mon.record(_ok("t", i, offset)):
            changes.append((i, alarm.raised))
    for (i, raised), (j, _) in zip(changes, changes[1:]):
        assert j - i >= 2  # a raise and its clear (or a clear and the next raise) are two answers apart at least
    raised_now = bool(changes) and changes[-1][1]
    assert raised_now == (mon.rows(len(offsets) * NS_PER_S)[0].state == "over-limit")


# --- the time-quality record --------------------------------------------------------------------------------------
def test_polls_go_into_the_quality_record_once_each_export_as_csv_and_thin_as_they_age(tmp_path: Path) -> None:
    from appliance.audit.tqlog import MONITOR_CSV_COLUMNS, TimeQualityLog, monitor_samples

    def status_at(at_ns: int) -> Any:  # what monitor_samples reads of a TimeStatus
        return SimpleNamespace(monitor=mon.rows(at_ns))

    mon = SyncMonitor([NTP], NS_PER_S)
    recorded: dict[str, int] = {}
    log = TimeQualityLog(tmp_path / "quality.sqlite")
    mon.record(_ok(NTP.name, 10, 1234))
    for _ in range(2):  # the same poll seen in two seconds' statuses is recorded once
        log.add_monitor(monitor_samples(status_at(10 * NS_PER_S), recorded))
    mon.record(failed(NTP.name, 11 * NS_PER_S, "no NTP answer within 1 s"))
    mon.record(failed(NTP.name, 12 * NS_PER_S, "no NTP answer within 1 s"))
    log.add_monitor(monitor_samples(status_at(12 * NS_PER_S), recorded))
    log.flush()
    out = io.StringIO()
    assert log.export_monitor_csv(0, 20 * NS_PER_S, out, str) == 2
    lines = out.getvalue().splitlines()
    assert lines[0] == ",".join(MONITOR_CSV_COLUMNS)
    assert lines[1] == f"{10 * NS_PER_S},{10 * NS_PER_S},192.0.2.7:123,ntp,ok,1234,100,1000000,,0,1,0"
    assert lines[2] == (f"{12 * NS_PER_S},{12 * NS_PER_S},192.0.2.7:123,ntp,unreachable,,,1000000,"
                        "no NTP answer within 1 s,0,1,1")
    # Older than full_rate_s: a TAI minute's polls become one row, worst case kept.
    log.compact(60 * NS_PER_S + log.full_rate_s * NS_PER_S)
    merged = log.monitor_polls(0, 20 * NS_PER_S)
    assert [(p.at_tai_ns, p.state, p.offset_ns, p.delay_ns, p.error, p.span_s, p.polls, p.failures)
            for p in merged] == [(0, "unreachable", 1234, 100, "no NTP answer within 1 s", 60, 2, 1)]
    log.compact(60 * NS_PER_S + log.full_rate_s * NS_PER_S)  # again: nothing more to merge
    assert len(log.monitor_polls(0, 20 * NS_PER_S)) == 1
    log.compact(1 + log.keep_s * NS_PER_S)  # kept for keep_s, then dropped
    assert log.monitor_polls(0, 20 * NS_PER_S) == []
    log.close()


def test_metrics_show_each_target_offset_delay_and_up() -> None:
    from prometheus_client.core import Metric

    from appliance.status import _plain
    from appliance.web.metrics import _monitor

    mon = SyncMonitor([NTP, Target("10.0.0.2", "ptp", "10.0.0.2", 319, 500)], NS_PER_S)
    mon.record(_ok(NTP.name, 1, -2500))
    mon.record(failed("10.0.0.2", NS_PER_S, "no NSM answer within 1 s"))
    import dataclasses

    rows = [_plain(dataclasses.asdict(r)) for r in mon.rows(NS_PER_S)]
    families: dict[str, Metric] = {m.name: m for m in _monitor(rows)}
    values = {(m.name, tuple(s.labels.values())): s.value for m in families.values() for s in m.samples}
    assert values[("appliance_monitor_offset_seconds", ("192.0.2.7:123", "ntp"))] == pytest.approx(-2.5e-6)
    assert values[("appliance_monitor_delay_seconds", ("192.0.2.7:123", "ntp"))] == pytest.approx(1e-7)
    assert values[("appliance_monitor_up", ("192.0.2.7:123", "ntp"))] == 1.0
    assert values[("appliance_monitor_up", ("10.0.0.2", "ptp"))] == 0.0
    assert values[("appliance_monitor_state", ("10.0.0.2", "ptp", "unreachable"))] == 1.0


def test_console_saved_monitor_settings_that_clash_are_set_aside_not_fatal(tmp_path: Path) -> None:
    from appliance.config import CONSOLE_FILE

    # Each value passes alone; together the PTP targets have no interface to send on.
    (tmp_path / CONSOLE_FILE).write_text('[monitor]\nptp_targets = ["192.0.2.9"]\ninterval_s = 5\n')
    c = config.load(None, [f"state_dir={tmp_path}"])
    assert c.monitor.ptp_targets == () and c.monitor.interval_s == 16
    assert any("needs monitor.ptp_interface" in note and "set aside" in note for note in c.notes), c.notes
    (tmp_path / CONSOLE_FILE).write_text('[monitor]\nntp_targets = ["192.0.2.7"]\n')
    assert config.load(None, [f"state_dir={tmp_path}"]).monitor.ntp_targets == ("192.0.2.7",)


def test_the_status_screen_lists_each_client() -> None:
    from appliance.status import render

    base = {"limit_ns": 1_000_000, "last_poll_tai_ns": 1, "polls": 5, "answers": 5, "last_answer_tai_ns": 1,
            "last_answer_utc": ""}
    monitor = [{**base, "target": "192.0.2.7:123", "kind": "ntp", "state": "ok", "offset_ns": -2500,
                "delay_ns": 81_000, "error": ""},
               {**base, "target": "10.0.0.9", "kind": "ptp", "state": "unreachable", "offset_ns": None,
                "delay_ns": None, "error": "no NSM answer within 1 s"}]
    lines = _rendered_lines(render, monitor)
    assert "Client NTP      : 192.0.2.7:123 ok (-2.500 us, delay 81000 ns)" in lines
    assert "Client PTP      : 10.0.0.9 unreachable (-): no NSM answer within 1 s" in lines


def _rendered_lines(render: Any, monitor: list[dict[str, Any]]) -> list[str]:
    from tests.unit.test_status import build

    from appliance.status import to_dict

    d = to_dict(build())
    d["monitor"] = monitor
    return render(d).splitlines()


@given(st.lists(st.tuples(st.integers(0, 3599), st.one_of(st.none(), st.integers(-10**9, 10**9))), min_size=1,
                max_size=40))
def test_merged_monitor_rows_keep_the_worst_case(polls: list[tuple[int, int | None]]) -> None:
    from appliance.audit.tqlog import MonitorSample, _merge_polls

    samples = [MonitorSample(at * NS_PER_S, "t", "ntp", "ok" if offset is not None else "unreachable", offset,
                             None if offset is None else 10, 1000, "" if offset is not None else "timeout",
                             failures=int(offset is None)) for at, offset in sorted(polls, key=lambda p: p[0])]
    row = _merge_polls(samples, 0, 3600)
    offsets = [o for _, o in polls if o is not None]
    assert row.polls == len(polls) and row.failures == len(polls) - len(offsets)
    if offsets:  # the largest |offset| with its sign (of either sign when both have it)
        assert row.offset_ns in offsets and abs(row.offset_ns) == max(abs(o) for o in offsets)
    else:
        assert row.offset_ns is None and row.delay_ns is None
    assert row.state == ("unreachable" if row.failures else "ok")
