"""The dashboard's Downstream clients table: one row per sync-monitor target with its state, offset, delay and
limit, and a summary line; no table when no target is configured."""

from __future__ import annotations

import copy

from tests.web.conftest import ConsoleEnv


def test_downstream_clients_table(env: ConsoleEnv) -> None:
    page = env.login("viewer").client.get("/").get_data(as_text=True)
    assert "Downstream clients" not in page  # nothing monitored: no table
    status = copy.deepcopy(env.status)
    base = {"limit_ns": 1_000_000, "last_poll_tai_ns": 1, "polls": 5}
    status["monitor"] = [
        {**base, "target": "192.0.2.7:123", "kind": "ntp", "state": "ok", "offset_ns": -2500, "delay_ns": 81_000,
         "last_answer_tai_ns": 1, "last_answer_utc": "2026-12-07T23:00:00.000Z", "error": "", "answers": 5},
        {**base, "target": "10.0.0.9", "kind": "ptp", "state": "unreachable", "offset_ns": None, "delay_ns": None,
         "last_answer_tai_ns": None, "last_answer_utc": "", "error": "no NSM answer within 1 s", "answers": 0}]
    env.status = status  # this test's own: the status is shared by the session's tests
    page = env.login("viewer").client.get("/").get_data(as_text=True)
    assert "Downstream clients" in page and "2 clients measured" in page
    assert "1 ok, 0 over their limit, 1 unreachable" in page
    assert '<tr id="monitor-192.0.2.7:123" class="monitor-ok"><td>192.0.2.7:123</td><td>NTP</td><td>ok</td>' in page
    assert "-2.500 µs" in page and "81.000 µs" in page and "1000.000 µs" in page and "5/5" in page
    assert '<td>PTP</td><td>unreachable</td><td>-</td><td>-</td>' in page and "no NSM answer within 1 s" in page
