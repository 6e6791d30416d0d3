"""GNSS integrity in the console: the override and survey command (POST /api/v1/integrity), its roles, CSRF and
refusals, and the dashboard and GNSS pages as rendered from a status whose verdict says ok or spoofed."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

from tests.web.conftest import SPOOFED, ConsoleEnv


def _page(response: Any) -> str:
    return html.unescape(response.get_data(as_text=True))


def _text_of(page: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', page)
    assert found, f"no #{element_id} on the page"
    return found.group(1).strip()


def test_the_status_carries_the_integrity_verdict(env: ConsoleEnv) -> None:
    client = env.browser().client
    auth = {"Authorization": f"Bearer {env.token('viewer')}"}
    integrity = client.get("/api/v1/status", headers=auth).get_json()["integrity"]
    assert integrity == env.status["integrity"]
    assert {"enabled", "action", "override", "usable", "level", "reasons", "requalify_in_s", "findings", "survey",
            "ntp"} <= set(integrity)
    assert integrity["level"] == "ok" and integrity["usable"] is True and integrity["override"] == "auto"


def test_a_viewer_may_not_override_the_integrity_verdict(env: ConsoleEnv) -> None:
    viewer = env.login("viewer")
    for action in ("trust", "reject", "auto", "resurvey"):
        refused = viewer.api("POST", "/api/v1/integrity", {"action": action})
        assert refused.status_code == 403
        assert refused.get_json() == {"error": "refused: the operator role is needed"}
    token = env.token("viewer")
    refused = env.browser().client.post("/api/v1/integrity", json={"action": "trust"},
                                        headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 403
    assert env.commands == []


def test_an_operator_overrides_with_a_session_and_its_csrf_token(env: ConsoleEnv) -> None:
    operator = env.login("operator")
    for csrf in (None, "not-a-token"):
        refused = operator.api("POST", "/api/v1/integrity", {"action": "reject"}, csrf=csrf)
        assert refused.status_code == 400 and "CSRF" in refused.get_json()["error"]
    assert env.commands == []

    done = operator.api("POST", "/api/v1/integrity", {"action": "reject"})
    assert done.status_code == 200
    assert done.get_json() == {"ok": True, "override": "reject", "usable": False, "level": "ok"}
    assert env.commands == [{"cmd": "integrity", "action": "reject", "user": "web:operator", "reason": ""}]
    seen = operator.client.get("/api/v1/status").get_json()["integrity"]  # the fake appliance applied it
    assert seen["override"] == "reject" and seen["usable"] is False

    back = operator.api("POST", "/api/v1/integrity", {"action": "auto"})
    assert back.get_json() == {"ok": True, "override": "auto", "usable": True, "level": "ok"}
    again = operator.api("POST", "/api/v1/integrity", {"action": "resurvey"})
    assert again.status_code == 200 and again.get_json()["ok"] is True
    assert [c["action"] for c in env.commands] == ["reject", "auto", "resurvey"]
    assert {c["user"] for c in env.commands} == {"web:operator"}


def test_an_operator_token_overrides_without_csrf(env: ConsoleEnv) -> None:
    client = env.browser().client
    auth = {"Authorization": f"Bearer {env.token('operator')}"}
    done = client.post("/api/v1/integrity", json={"action": "trust"}, headers=auth)
    assert done.status_code == 200
    assert done.get_json() == {"ok": True, "override": "trust", "usable": True, "level": "ok"}
    assert env.commands == [{"cmd": "integrity", "action": "trust", "user": "api:operator", "reason": ""}]
    admin = client.post("/api/v1/integrity", json={"action": "auto"},
                        headers={"Authorization": f"Bearer {env.token('admin')}"})
    assert admin.status_code == 200 and env.commands[-1]["user"] == "api:admin"


@pytest.mark.parametrize("body", [{"action": "sideways"}, {"action": "start"}, {}, {"action": None},
                                  {"action": ["trust"]}, {"action": 1}, ["trust"], "trust", None])
def test_a_bad_body_is_refused_before_the_appliance_hears_of_it(env: ConsoleEnv, body: Any) -> None:
    client = env.browser().client
    auth = {"Authorization": f"Bearer {env.token('operator')}"}
    refused = client.post("/api/v1/integrity", json=body, headers=auth)
    assert refused.status_code == 400
    error = refused.get_json()["error"]
    assert all(f'"{a}"' in error for a in ("trust", "reject", "auto", "resurvey"))
    assert env.commands == []


def test_a_body_that_is_not_json_is_refused(env: ConsoleEnv) -> None:
    client = env.browser().client
    headers = {"Authorization": f"Bearer {env.token('operator')}", "Content-Type": "application/json"}
    assert client.post("/api/v1/integrity", data="{action: trust", headers=headers).status_code == 400
    assert client.post("/api/v1/integrity", data="action=trust", headers={"Authorization": headers["Authorization"]},
                       content_type="application/x-www-form-urlencoded").status_code == 400
    assert env.commands == []


def test_the_appliance_refusing_is_a_conflict(env: ConsoleEnv) -> None:
    env.refusal = "integrity override takes auto, trust, reject"
    operator = env.login("operator")
    refused = operator.api("POST", "/api/v1/integrity", {"action": "trust"})
    assert refused.status_code == 409
    assert refused.get_json() == {"error": "integrity override takes auto, trust, reject"}
    assert env.commands == [{"cmd": "integrity", "action": "trust", "user": "web:operator", "reason": ""}]
    assert env.status["integrity"]["override"] == "auto"  # nothing changed


def test_the_dashboard_shows_the_verdict_and_offers_operators_the_override(env: ConsoleEnv) -> None:
    viewer = _page(env.login("viewer").client.get("/"))
    assert "GNSS integrity" in viewer
    assert _text_of(viewer, "integrity-level") == "ok" and 'class="state integrity-ok"' in viewer
    assert _text_of(viewer, "integrity-usable") == "reference used"
    assert _text_of(viewer, "integrity-requalify") == ""
    for button in ("integrity-trust", "integrity-reject", "integrity-auto", "holdover-start"):
        assert f'id="{button}"' not in viewer

    env.with_integrity(**SPOOFED)
    operator = _page(env.login("operator").client.get("/"))
    assert _text_of(operator, "integrity-level") == "SPOOFED" and 'class="state integrity-spoofed"' in operator
    assert _text_of(operator, "integrity-usable") == "reference REJECTED"
    assert _text_of(operator, "integrity-requalify") == "qualifies again in 43 s"  # rounded up, as the page counts down
    assert _text_of(operator, "integrity-reason") == SPOOFED["reasons"][0]
    for button, action, label in (("integrity-trust", "trust", "Trust GNSS"), ("integrity-reject", "reject",
                                                                                "Reject GNSS"),
                                  ("integrity-auto", "auto", "Automatic")):
        assert re.search(rf'<button id="{button}" data-integrity="{action}"[^>]*>{label}</button>', operator)

    env.with_integrity(override="trust", usable=True, level="jammed")
    jammed = _page(env.login("operator").client.get("/"))
    assert _text_of(jammed, "integrity-level") == "JAMMED" and "integrity-jammed" in jammed
    assert _text_of(jammed, "integrity-override") == "operator override: trust"


def test_the_dashboard_without_integrity_checks(env: ConsoleEnv) -> None:
    env.with_integrity(enabled=False)
    page = _page(env.login("viewer").client.get("/"))
    assert _text_of(page, "integrity-level") == "off" and _text_of(page, "integrity-usable") == "checks disabled"
    env.status = {**env.status, "integrity": None}  # an appliance whose status has no verdict at all
    page = _page(env.login("viewer").client.get("/"))
    assert _text_of(page, "integrity-level") == "-"
    assert env.login("viewer").client.get("/gnss").status_code == 200


def test_the_gnss_page_lists_the_findings_and_the_survey(env: ConsoleEnv) -> None:
    env.with_integrity(**SPOOFED)
    viewer = _page(env.login("viewer").client.get("/gnss"))
    assert _text_of(viewer, "rx-survey") == "fixed (configured)"
    table = re.search(r'<table id="integrity-findings">.*?</table>', viewer, re.DOTALL)
    assert table
    rows = re.findall(r"<tr class=\"verdict-(\w+)\"><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>",
                      table.group(0))
    assert rows == [("spoofed", "position", "spoofed", "4.0", "fix 200.0 m from the surveyed home (limit 50 m)"),
                    ("ok", "sky", "ok", "0.0", "0 of 38 tracked satellites new")]
    assert 'id="integrity-ntp"' in viewer and 'id="integrity-resurvey"' not in viewer
    operator = _page(env.login("operator").client.get("/gnss"))
    assert re.search(r'<button id="integrity-resurvey" data-integrity="resurvey"[^>]*>Survey again</button>', operator)
