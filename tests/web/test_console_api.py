"""The console's REST API, /metrics and OpenAPI document, and the audit pages, read through Flask's test client."""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate
from prometheus_client.parser import text_string_to_metric_families

from appliance import leap
from appliance.audit.bundle import PUBLIC_KEY_FILE, verify_bundle
from appliance.audit.tqlog import CSV_COLUMNS
from appliance.web.openapi import document
from tests.web.conftest import NS_PER_S, QUALITY_SECONDS, ConsoleEnv


@pytest.fixture
def api(env: ConsoleEnv) -> tuple[ConsoleEnv, Any, dict[str, str]]:
    """The env, an anonymous client and the Authorization header of an operator's token."""
    return env, env.browser().client, {"Authorization": f"Bearer {env.token('operator')}"}


# --- /metrics -----------------------------------------------------------------------------------------------------

def _families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_metrics_carry_the_status(api: tuple[ConsoleEnv, Any, dict[str, str]]) -> None:
    env, client, auth = api
    clock = env.status["clock"]
    assert client.get("/metrics").status_code == 401
    response = client.get("/metrics", headers=auth)
    assert response.status_code == 200 and response.mimetype == "text/plain"
    families = _families(response.get_data(as_text=True))

    states = {s.labels["state"]: s.value for s in families["appliance_clock_state"].samples}
    assert states[clock["state"]] == 1.0
    assert sum(states.values()) == 1.0 and {"FREERUN", "ACQUIRING", "LOCKED", "HOLDOVER"} <= set(states)
    (bound,) = families["appliance_error_bound_seconds"].samples
    assert bound.value == pytest.approx(clock["error_bound_ns"] * 1e-9)
    (clock_class,) = families["appliance_clock_class"].samples
    assert clock_class.value == clock["clock_class"]
    (phase,) = families["appliance_phase_offset_seconds"].samples
    assert phase.value == pytest.approx(clock["phase_offset_ns"] * 1e-9)
    used = {s.labels["constellation"]: s.value for s in families["appliance_satellites"].samples
            if s.labels["kind"] == "used"}
    assert used == {c["name"]: c["used"] for c in env.status["constellations"]}


def test_public_metrics_need_no_login_but_the_rest_still_does(console_env: Any) -> None:
    env = console_env(metrics_public=True)
    client = env.browser().client
    response = client.get("/metrics")
    assert response.status_code == 200
    assert "appliance_clock_class" in _families(response.get_data(as_text=True))
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert client.get("/api/v1/status").status_code == 401


# --- OpenAPI ------------------------------------------------------------------------------------------------------

def test_openapi_document_is_valid_and_describes_every_api_route(api: tuple[ConsoleEnv, Any, dict[str, str]]) -> None:
    env, client, auth = api
    served = client.get("/api/v1/openapi.json", headers=auth)
    assert served.status_code == 200
    doc = served.get_json()
    assert doc == json.loads(json.dumps(document()))
    validate(doc)
    routes = 0
    for rule in env.app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1/"):
            continue
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule[len("/api/v1"):])
        assert path in doc["paths"], f"{rule.rule} is not in the OpenAPI document"
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}:
            assert method.lower() in doc["paths"][path], f"{method} {rule.rule} is not in the OpenAPI document"
        routes += 1
    assert routes >= 12


# --- status, satellites, alarms, config ------------------------------------------------------------------------------

def test_status_satellites_alarms_and_settings(api: tuple[ConsoleEnv, Any, dict[str, str]]) -> None:
    env, client, auth = api
    status = client.get("/api/v1/status", headers=auth)
    assert status.status_code == 200 and status.get_json() == env.status

    satellites = client.get("/api/v1/satellites", headers=auth).get_json()
    assert satellites["satellites"] == env.status["satellites"] and satellites["at_tai_ns"] == env.now_tai_ns
    alarms = client.get("/api/v1/alarms", headers=auth).get_json()
    assert alarms["active"] == [a for a in env.status["alarms"] if a["raised"]] and alarms["history"] == []

    settings = client.get("/api/v1/config", headers=auth).get_json()["settings"]
    level = next(s for s in settings if s["name"] == "log.level")
    assert level["value"] == "info" and level["restart"] is False and not level["pending_restart"]
    assert {"web.port", "web.metrics_public", "state_dir"} <= {s["name"] for s in settings}


# --- time quality -------------------------------------------------------------------------------------------------

def test_quality_rows_carry_chart_times(api: tuple[ConsoleEnv, Any, dict[str, str]]) -> None:
    env, client, auth = api
    body = client.get("/api/v1/quality", headers=auth).get_json()
    rows = body["rows"]
    assert len(rows) == QUALITY_SECONDS
    assert body["until_tai_ns"] == env.now_tai_ns and body["since_tai_ns"] == env.now_tai_ns - 3600 * NS_PER_S
    table = leap.LeapTable.load_default()
    for row in (rows[0], rows[-1]):
        assert row["posix_ms"] == leap.tai_to_posix_ns(row["at_tai_ns"], table)[0] // 1_000_000
    assert all(b["posix_ms"] - a["posix_ms"] == 1000 for a, b in itertools.pairwise(rows))
    assert rows[0]["state"] == "LOCKED" and rows[-1]["state"] == "HOLDOVER" and rows[-1]["clock_class"] == 7

    thinned = client.get("/api/v1/quality?max_points=10", headers=auth).get_json()["rows"]
    assert 1 <= len(thinned) <= 10 and sum(r["span_s"] for r in thinned) == QUALITY_SECONDS
    recent = client.get("/api/v1/quality?since=-60", headers=auth).get_json()["rows"]
    assert 59 <= len(recent) <= 61
    for bad in ("since=soon", "since=-10&until=-20"):
        refused = client.get(f"/api/v1/quality?{bad}", headers=auth)
        assert refused.status_code == 400 and "error" in refused.get_json()


def test_quality_csv_parses(api: tuple[ConsoleEnv, Any, dict[str, str]]) -> None:
    _, client, auth = api
    response = client.get("/api/v1/quality.csv", headers=auth)
    assert response.status_code == 200 and response.mimetype == "text/csv"
    assert "attachment" in response.headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))
    assert len(rows) == QUALITY_SECONDS
    assert tuple(rows[0]) == CSV_COLUMNS
    assert rows[0]["utc"].endswith("Z") and rows[0]["state"] == "LOCKED" and rows[-1]["state_seconds"] == "HOLDOVER=1"
    assert all(int(r["span_s"]) == 1 and int(r["satellites_used"]) == 9 for r in rows)


def test_stability_of_the_phase_record(api: tuple[ConsoleEnv, Any, dict[str, str]]) -> None:
    _, client, auth = api
    body = client.get("/api/v1/stability", headers=auth).get_json()
    locked = 250  # the record's first 250 s are LOCKED, the rest HOLDOVER: only the locked seconds are judged
    assert QUALITY_SECONDS > locked and (body["samples"], body["stretches"], body["longest_s"]) == (locked, 1, locked)
    assert body["taus_s"] and max(body["taus_s"]) <= (locked - 1) // 3
    for name in ("adev", "mtie_ns", "tdev_ns"):
        assert len(body[name]) == len(body["taus_s"])
    assert body["masks"]
    # a 5 ns sine of period 107 s: MTIE stays below both masks, TDEV rises above 1 ns (PRTC-B) at 20 s, 3 ns at 40 s
    a, b = body["verdicts"]["PRTC-A"], body["verdicts"]["PRTC-B"]
    assert (a["passed"], a["failed_metric"], a["failed_tau_s"], a["limit_ns"]) == (False, "TDEV", 40, 3)
    assert (b["passed"], b["failed_metric"], b["failed_tau_s"], b["limit_ns"]) == (False, "TDEV", 20, 1)
    assert b["text"] == f"PRTC-B: fail at τ = 20 s (TDEV 1.6 ns above the mask's 1.0 ns; {locked} s of locked data)"
    short = client.get("/api/v1/stability?since=-10", headers=auth).get_json()
    assert short["taus_s"] == [] and short["verdicts"]["PRTC-A"]["passed"] is None and "at least 16 s" in short["note"]


# --- audit ----------------------------------------------------------------------------------------------------------

def _fill_audit(env: ConsoleEnv) -> None:
    for i in range(5):
        env.ctx.audit_append("command", "system", f"test record {i}", {"i": i})


def test_audit_records_newest_first_with_paging_and_filters(api: tuple[ConsoleEnv, Any, dict[str, str]]) -> None:
    env, client, auth = api
    _fill_audit(env)
    env.login("viewer")  # one more record, of another kind
    records = client.get("/api/v1/audit", headers=auth).get_json()["records"]
    seqs = [r["seq"] for r in records]
    assert seqs == sorted(seqs, reverse=True) == list(range(6, 0, -1))
    assert records[0]["kind"] == "login" and records[0]["actor"] == "web:viewer"
    assert records[0]["hash"] == env.ctx.audit.head().hash and records[0]["utc"].endswith("Z")
    page = client.get("/api/v1/audit?limit=2&before_seq=4", headers=auth).get_json()["records"]
    assert [r["seq"] for r in page] == [3, 2]
    assert [r["seq"] for r in client.get("/api/v1/audit?kind=login", headers=auth).get_json()["records"]] == [6]
    found = client.get("/api/v1/audit?q=RECORD 3", headers=auth).get_json()["records"]
    assert [r["text"] for r in found] == ["test record 3"]
    assert client.get("/api/v1/audit?limit=many", headers=auth).status_code == 400


def _verify(client: Any, auth: dict[str, str]) -> Any:
    return client.get("/api/v1/audit/verify", headers=auth)


def test_audit_verify_names_an_altered_record(api: tuple[ConsoleEnv, Any, dict[str, str]]) -> None:
    env, client, auth = api
    _fill_audit(env)
    with sqlite3.connect(env.ctx.audit.path) as db:  # someone edits the file by hand
        db.execute("UPDATE audit_record SET text = 'nothing happened' WHERE seq = 3")
    db.close()
    broken = _verify(client, auth).get_json()
    assert broken["ok"] is False and broken["first_bad_seq"] == 3 and "record 3" in broken["reason"]
    assert broken["fresh"] is True

    viewer = env.login("viewer")  # the page's button says the same: the result of that check, made a moment ago
    done = viewer.form("/audit/verify", {}, follow_redirects=True)
    assert done.status_code == 200
    page = done.get_data(as_text=True)
    assert re.search(r'id="verify-result"[^>]*>Chain BROKEN at record 3:', page)
    assert re.search(r"The result of the check made \d+ s ago", page)  # the real clock: the login took a moment
    (verified,) = env.records("audit.verify")  # the check made (through the API), not the result shown again
    assert (verified.detail["ok"], verified.detail["first_bad_seq"]) == (False, 3)


def test_audit_verify_is_one_check_per_10_s_for_everyone_and_incremental(console_env: Any) -> None:
    clock = [time.time()]
    env = console_env(wall_s=lambda: clock[0])
    client, auth = env.browser().client, {"Authorization": f"Bearer {env.token('operator')}"}
    _fill_audit(env)
    ok = _verify(client, auth).get_json()
    assert ok == {"ok": True, "checked": 5, "first_bad_seq": None, "reason": ok["reason"], "earlier": 0,
                  "warnings": [], "fresh": True, "age_s": 0.0}

    _fill_audit(env)
    clock[0] += 4
    again = _verify(client, auth).get_json()  # within 10 s: the last result, not a new computation
    assert again == {**ok, "fresh": False, "age_s": 4.0}
    viewer = env.login("viewer")  # another user is no different
    page = viewer.form("/audit/verify", {}, follow_redirects=True).get_data(as_text=True)
    assert "Chain OK: 5 records verified." in page and "The result of the check made 4 s ago" in page
    assert len(env.records("audit.verify")) == 1  # only the check made is recorded: clicks cannot flood the store

    clock[0] += 6
    total = env.ctx.audit.count()
    later = _verify(client, auth).get_json()  # a new check, of the records added since only
    assert (later["ok"], later["fresh"], later["earlier"], later["checked"]) == (True, True, 5, total - 5)
    assert later["reason"].startswith(f"{total - 5} new record(s) chained after record 5")
    page = viewer.form("/audit/verify", {}, follow_redirects=True).get_data(as_text=True)
    assert f"Chain OK: {total} records verified." in page

    with sqlite3.connect(env.ctx.audit.path) as db:  # the newest records deleted by hand: caught every time
        db.execute("DELETE FROM audit_record WHERE seq > 8")
    db.close()
    clock[0] += 10
    cut = _verify(client, auth).get_json()
    assert (cut["ok"], cut["fresh"], cut["first_bad_seq"]) == (False, True, 9)
    assert re.match(r"records 9\.\.\d+ are missing: the head file records seq \d+ \(hash [0-9a-f]{12}\.\.\.\) but "
                    "the store ends at record 8", cut["reason"])


def test_audit_verify_while_the_first_check_still_runs(env: ConsoleEnv) -> None:
    auth = {"Authorization": f"Bearer {env.token('operator')}"}
    viewer = env.login("viewer")
    store = env.ctx.audit
    entered, release = threading.Event(), threading.Event()
    real = store.verify

    def slow(full: bool = True) -> Any:
        entered.set()
        release.wait(10)
        return real(full=full)

    store.verify = slow  # the shared check calls it: a long check of a large store
    answers: list[Any] = []
    first = threading.Thread(target=lambda: answers.append(_verify(env.browser().client, auth)))
    first.start()
    try:
        assert entered.wait(10)
        busy = _verify(env.browser().client, auth)
        assert busy.status_code == 429 and int(busy.headers["Retry-After"]) >= 1
        assert "running" in busy.get_json()["error"]
        page = viewer.form("/audit/verify", {}, follow_redirects=True).get_data(as_text=True)
        assert "A check of the audit chain is running" in page and 'id="verify-result"' not in page
    finally:
        release.set()
        first.join(10)
    assert answers[0].status_code == 200 and answers[0].get_json()["fresh"] is True
    assert _verify(env.browser().client, auth).get_json()["fresh"] is False


def test_audit_backup_is_a_bundle_that_verifies(env: ConsoleEnv, tmp_path: Path) -> None:
    _fill_audit(env)
    operator = env.login("operator")
    response = operator.client.get("/audit/backup")
    assert response.status_code == 200 and response.mimetype == "application/json"
    assert re.fullmatch(r'attachment; filename=audit-\d{8}T\d{6}Z\.json', response.headers["Content-Disposition"])
    path = tmp_path / "backup.json"
    path.write_bytes(response.get_data())
    result = verify_bundle(path, (env.state_dir / PUBLIC_KEY_FILE).read_bytes())
    assert result.ok and result.signer_trusted, result.reason
    assert result.checked == 6  # five records and the operator's login; the download itself is audited after
    assert [r.actor for r in env.records("audit.export")] == ["web:operator"]

    token = env.token("operator")
    exported = env.browser().client.get("/api/v1/audit/export?since=-3600",
                                        headers={"Authorization": f"Bearer {token}"})
    assert exported.status_code == 200
    path.write_bytes(exported.get_data())
    assert verify_bundle(path).ok
    assert json.loads(exported.get_data())["records"][-1]["kind"] == "audit.export"
    empty = env.browser().client.get("/api/v1/audit/export?since=-7200&until=-3600",
                                     headers={"Authorization": f"Bearer {token}"})
    assert empty.status_code == 400 and empty.get_json() == {"error": "no audit records in the export range"}


# --- pages and the status answer: made once per status publication ------------------------------------------------

def test_status_answer_follows_each_publication_and_keeps_jsonify_form(api: tuple[ConsoleEnv, Any,
                                                                             dict[str, str]]) -> None:
    env, client, auth = api
    first = client.get("/api/v1/status", headers=auth)
    assert first.status_code == 200 and first.mimetype == "application/json"
    assert first.get_json() == env.status and b'": ' not in first.data  # compact, as jsonify writes it
    assert client.get("/api/v1/status", headers=auth).data == first.data
    env.with_integrity(level="suspect")  # a new publication
    second = client.get("/api/v1/status", headers=auth).get_json()
    assert second["integrity"]["level"] == "suspect" and second == env.status


def test_a_status_page_is_made_per_publication_user_and_session_never_handed_to_another(env: ConsoleEnv) -> None:
    viewer, admin = env.login("viewer"), env.login("admin")
    page = viewer.client.get("/").get_data(as_text=True)
    assert "viewer (viewer)" in page and viewer.client.get("/").get_data(as_text=True) == page
    assert "HOLDOVER" not in page
    other = admin.client.get("/").get_data(as_text=True)
    assert "admin (admin)" in other and "viewer (viewer)" not in other
    assert re.search(r'csrf-token" content="([^"]+)"', other).group(1) != \
        re.search(r'csrf-token" content="([^"]+)"', page).group(1)
    second_viewer = env.login("viewer")  # the same user in another session: its own CSRF token
    theirs = second_viewer.client.get("/").get_data(as_text=True)
    assert re.search(r'csrf-token" content="([^"]+)"', theirs).group(1) != \
        re.search(r'csrf-token" content="([^"]+)"', page).group(1)
    env.status = {**env.status, "clock": {**env.status["clock"], "state": "HOLDOVER"}}  # a new publication
    assert "HOLDOVER" in viewer.client.get("/").get_data(as_text=True)


def test_the_login_cookie_carries_a_new_csrf_secret_so_pages_do_not_reset_the_session(env: ConsoleEnv) -> None:
    viewer = env.browser()
    before = viewer.login_form_token()
    viewer.login("viewer")
    page = viewer.client.get("/")
    assert page.status_code == 200 and not page.headers.getlist("Set-Cookie")  # nothing new to keep
    meta = re.search(r'csrf-token" content="([^"]+)"', page.get_data(as_text=True)).group(1)
    assert meta != before
    assert viewer.form("/logout", {}, csrf=meta).status_code == 302  # the page's token works
