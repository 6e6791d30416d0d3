"""The web console's security as a user meets it: authentication on every route, CSRF, tokens, roles, login backoff
and lockout, secrets kept out of logs and the audit trail, security headers and cookie flags, the rate limiter."""

from __future__ import annotations

import html
import json
import logging
import re
import time
from typing import Any

import pytest

from appliance import config as cfg
from appliance.web.settings_edit import load_overrides
from tests.web.conftest import PASSWORDS, ConsoleEnv

SAMPLE_ARGS = {"name": "log.level", "filename": "console.js", "code": "clock-unlocked"}
NOT_A_TOKEN = "tk_" + "A" * 43


def _routes(env: ConsoleEnv) -> list[tuple[str, str, str]]:
    """(endpoint, method, path) of every route of the app, with sample values for its variables."""
    out = []
    for rule in env.app.url_map.iter_rules():
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", lambda m: SAMPLE_ARGS[m.group(1)], rule.rule)
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            out.append((rule.endpoint, method, path))
    return out


def _page(response: Any) -> str:
    return html.unescape(response.get_data(as_text=True))


def _flashed(response: Any, category: str = "error") -> list[str]:
    return [html.unescape(m) for m in re.findall(rf'<p class="flash {category}"[^>]*>([^<]*)</p>',
                                                 response.get_data(as_text=True))]


def _new_token(users_page: Any) -> str:
    found = re.search(r'<code id="new-token">([^<]+)</code>', users_page.get_data(as_text=True))
    assert found, "the users page shows no new token"
    return found.group(1)


# --- authentication everywhere ------------------------------------------------------------------------------------

@pytest.mark.parametrize("metrics_public", [False, True])
def test_every_route_refuses_a_client_without_session_or_token(console_env: Any, metrics_public: bool) -> None:
    env = console_env(metrics_public=metrics_public)
    client = env.browser().client
    open_endpoints = {"static", "views.login"} | ({"metrics"} if metrics_public else set())
    checked = set()
    for endpoint, method, path in _routes(env):
        body = {"value": "debug", "action": "start"} if path.startswith("/api/") else None
        plain = client.open(path, method=method, json=body)
        forged = client.open(path, method=method, json=body, headers={"Authorization": f"Bearer {NOT_A_TOKEN}"})
        if endpoint in open_endpoints:
            if method == "GET":
                assert plain.status_code == 200, (method, path)
            continue
        checked.add(endpoint)
        if path.startswith("/api/") or endpoint == "metrics":
            for response in (plain, forged):
                assert response.status_code == 401, (method, path)
                assert response.is_json and "error" in response.get_json(), (method, path)
        else:
            assert plain.status_code == 302, (method, path)
            assert plain.headers["Location"].startswith("/login"), (method, path)
            assert forged.status_code == 401 or forged.headers["Location"].startswith("/login"), (method, path)
    # the walk saw the pages, the writes and the API (a route added later is covered by the same walk)
    assert {"views.dashboard", "views.config_change", "views.users_change", "views.logout", "views.audit_backup",
            "api.status", "api.holdover", "api.integrity", "api.config_change", "api.audit_export", "api.openapi"} <= checked
    assert ("metrics" in checked) is not metrics_public
    assert env.commands == [] and env.live == []
    assert not env.overrides.exists()
    assert env.setting("log.level") == "info"
    assert env.ctx.audit.count() == 0  # nothing ran that audits


def test_a_page_sends_an_anonymous_user_to_login_and_back(env: ConsoleEnv) -> None:
    browser = env.browser()
    response = browser.client.get("/gnss")
    assert response.status_code == 302 and response.headers["Location"] == "/login?next=/gnss"
    login_page = browser.client.get(response.headers["Location"])
    assert 'name="next" value="/gnss"' in login_page.get_data(as_text=True)
    done = browser.login("viewer", next_path="/gnss")
    assert done.status_code == 302 and done.headers["Location"] == "/gnss"
    assert browser.client.get("/gnss").status_code == 200


def test_login_never_redirects_to_another_site(env: ConsoleEnv) -> None:
    for target in ("//evil.example/", "https://evil.example/", "/\\evil.example/", "/\t/evil.example/"):
        response = env.browser().login("viewer", next_path=target)
        assert response.status_code == 302
        assert response.headers["Location"] == "/", target


def test_session_expires_and_logout_ends_it(console_env: Any) -> None:
    env = console_env(session_timeout_s=600)
    clock = [time.time()]
    env.ctx.wall_s = lambda: clock[0]
    browser = env.login("operator")
    assert browser.client.get("/").status_code == 200
    clock[0] += 599
    assert browser.client.get("/").status_code == 200
    clock[0] += 2
    expired = browser.client.get("/")
    assert expired.status_code == 302 and expired.headers["Location"].startswith("/login")
    assert browser.client.get("/api/v1/status").status_code == 401

    browser = env.login("operator")
    kept = _cookie(browser)
    out = browser.form("/logout", {})
    assert out.status_code == 302 and out.headers["Location"] == "/login"
    assert browser.client.get("/").status_code == 302
    assert [r.actor for r in env.records("logout")] == ["web:operator"]
    # The session cookie, kept or copied from before the logout, opens nothing: its server record is gone.
    replay = env.browser()
    replay.client.set_cookie("appliance_session", kept, domain="localhost")
    assert replay.client.get("/").status_code == 302
    assert replay.client.get("/api/v1/status").status_code == 401


def _cookie(browser: Any) -> str:
    cookie = browser.client.get_cookie("appliance_session", domain="localhost")
    assert cookie is not None
    return cookie.value


def test_a_password_change_ends_the_users_sessions(env: ConsoleEnv) -> None:
    operator, admin = env.login("operator"), env.login("admin")
    assert operator.client.get("/").status_code == 200
    done = admin.form("/users", {"action": "password", "name": "operator", "password": "a-new-long-passphrase-1"})
    assert done.status_code == 302
    assert operator.client.get("/").status_code == 302
    assert operator.api("GET", "/api/v1/status", csrf=False).status_code == 401
    assert admin.client.get("/").status_code == 200  # another user's sessions are untouched
    assert env.browser().login("operator", "a-new-long-passphrase-1").status_code == 302


# --- CSRF ---------------------------------------------------------------------------------------------------------

def test_a_form_post_without_the_right_csrf_token_changes_nothing(env: ConsoleEnv) -> None:
    admin = env.login("admin")
    other_sessions_token = env.login("viewer").csrf()  # a real token, but of another session
    for csrf in (None, "not-a-token", other_sessions_token):
        refused = admin.form("/config", {"name": "log.level", "value": "debug"}, csrf=csrf)
        assert refused.status_code == 400, csrf
        assert "refused" in _page(refused) and "CSRF" in _page(refused)
    no_referrer = admin.form("/config", {"name": "log.level", "value": "debug"}, referer=False)
    assert no_referrer.status_code == 400  # over HTTPS the referrer must be this site too
    assert env.setting("log.level") == "info" and not env.overrides.exists()
    assert env.records("config.change") == []

    done = admin.form("/config", {"name": "log.level", "value": "debug"})
    assert done.status_code == 302
    assert env.setting("log.level") == "debug"


def test_an_api_write_with_a_session_needs_the_csrf_header(env: ConsoleEnv) -> None:
    operator = env.login("operator")
    for csrf in (None, "not-a-token"):
        refused = operator.api("POST", "/api/v1/holdover", {"action": "start"}, csrf=csrf)
        assert refused.status_code == 400 and refused.is_json and "CSRF" in refused.get_json()["error"]
    assert env.commands == []
    done = operator.api("POST", "/api/v1/holdover", {"action": "start"})
    assert done.status_code == 200 and done.get_json() == {"ok": True, "state": "HOLDOVER"}
    assert env.commands == [{"cmd": "holdover", "action": "start", "user": "web:operator", "reason": ""}]


def test_login_form_needs_its_csrf_token(env: ConsoleEnv) -> None:
    browser = env.browser()
    browser.login_form_token()
    response = browser.client.post("/login", data={"user": "admin", "password": PASSWORDS["admin"]})
    assert response.status_code == 400 and "expired" in _page(response)
    assert browser.client.get("/").status_code == 302  # not logged in


# --- API tokens ---------------------------------------------------------------------------------------------------

def test_bearer_tokens_read_and_write_without_csrf(env: ConsoleEnv) -> None:
    client = env.browser().client
    operator, admin = env.token("operator"), env.token("admin")
    assert client.get("/api/v1/status", headers={"Authorization": f"Bearer {operator}"}).status_code == 200
    assert client.get("/", headers={"Authorization": f"Bearer {operator}"}).status_code == 200

    held = client.post("/api/v1/holdover", json={"action": "stop"}, headers={"Authorization": f"Bearer {operator}"})
    assert held.status_code == 200
    assert env.commands == [{"cmd": "holdover", "action": "stop", "user": "api:operator", "reason": ""}]
    changed = client.put("/api/v1/config/log.level", json={"value": "warning"},
                         headers={"Authorization": f"Bearer {admin}"})
    assert changed.status_code == 200
    assert changed.get_json() == {"name": "log.level", "old": "info", "value": "warning", "applied": True,
                                  "restart_needed": False}
    assert [r.actor for r in env.records("config.change")] == ["api:admin"]

    bad = client.get("/api/v1/status", headers={"Authorization": f"Bearer {NOT_A_TOKEN}"})
    assert bad.status_code == 401 and bad.get_json() == {"error": "invalid token"}
    empty = client.get("/api/v1/status", headers={"Authorization": "Bearer "})
    assert empty.status_code == 401


def test_admin_makes_a_token_in_the_console_and_revoking_it_stops_it(env: ConsoleEnv) -> None:
    admin = env.login("admin")
    made = admin.form("/users", {"action": "token", "name": "operator", "label": "grafana"})
    assert made.status_code == 302
    token = _new_token(admin.client.get("/users"))
    assert 'id="new-token"' not in admin.client.get("/users").get_data(as_text=True)  # shown once

    api = env.browser().client
    auth = {"Authorization": f"Bearer {token}"}
    assert api.get("/api/v1/audit", headers=auth).status_code == 200
    assert api.post("/api/v1/holdover", json={"action": "start"}, headers=auth).status_code == 200
    assert env.commands[-1]["user"] == "api:operator"

    (token_id,) = [t[3] for t in env.ctx.users.tokens("operator")]
    assert admin.form("/users", {"action": "revoke", "token_id": token_id}).status_code == 302
    assert api.get("/api/v1/status", headers=auth).status_code == 401
    assert api.post("/api/v1/holdover", json={"action": "stop"}, headers=auth).status_code == 401
    assert len(env.commands) == 1
    texts = [r.text for r in env.records("user.change")]
    assert texts == [f"API token {token_id} revoked", "API token 'grafana' created for operator"]
    assert not any(token in json.dumps([r.text, r.detail]) for r in env.records())


# --- roles --------------------------------------------------------------------------------------------------------

def test_a_viewer_reads_but_changes_nothing(env: ConsoleEnv) -> None:
    viewer = env.login("viewer")
    page = viewer.client.get("/config")
    assert page.status_code == 200 and "Only admins may change settings." in _page(page)
    refused = viewer.form("/config", {"name": "log.level", "value": "debug"})
    assert refused.status_code == 403 and "the admin role is needed" in _page(refused)
    assert viewer.api("PUT", "/api/v1/config/log.level", {"value": "debug"}).status_code == 403
    assert env.setting("log.level") == "info" and not env.overrides.exists() and env.live == []

    held = viewer.api("POST", "/api/v1/holdover", {"action": "start"})
    assert held.status_code == 403 and held.get_json() == {"error": "refused: the operator role is needed"}
    assert env.commands == []
    assert viewer.client.get("/users").status_code == 403
    assert viewer.form("/users", {"action": "role", "name": "viewer", "role": "admin"}).status_code == 403
    assert env.ctx.users.role_of("viewer") == "viewer"
    assert viewer.client.get("/audit/backup").status_code == 403
    assert viewer.client.get("/api/v1/audit/export").status_code == 403
    assert 'id="backup"' not in viewer.client.get("/audit").get_data(as_text=True)


def test_an_operator_holds_over_but_does_not_configure(env: ConsoleEnv) -> None:
    operator = env.login("operator")
    held = operator.api("POST", "/api/v1/holdover", {"action": "start"})
    assert held.status_code == 200
    assert env.commands == [{"cmd": "holdover", "action": "start", "user": "web:operator", "reason": ""}]
    assert operator.api("POST", "/api/v1/holdover", {"action": "sideways"}).status_code == 400
    assert len(env.commands) == 1

    assert operator.form("/config", {"name": "log.level", "value": "debug"}).status_code == 403
    assert operator.api("PUT", "/api/v1/config/log.level", {"value": "debug"}).status_code == 403
    assert env.setting("log.level") == "info" and not env.overrides.exists()
    assert operator.client.get("/users").status_code == 403


def test_an_admin_changes_settings_validated_saved_and_audited(env: ConsoleEnv) -> None:
    admin = env.login("admin")
    refused = admin.form("/config", {"name": "log.level", "value": "LOUD"}, follow_redirects=True)
    _, message = cfg.check_value(cfg.BY_NAME["log.level"], "LOUD", from_text=True)
    assert message and _flashed(refused) == [message]  # the settings table's own words
    assert env.setting("log.level") == "info" and not env.overrides.exists()
    api_refused = admin.api("PUT", "/api/v1/config/web.port", {"value": 70000})
    assert api_refused.status_code == 400
    assert api_refused.get_json()["error"] == cfg.check_value(cfg.BY_NAME["web.port"], 70000)[1]
    unknown = admin.api("PUT", "/api/v1/config/no.such", {"value": 1})
    assert unknown.status_code == 400 and "unknown setting" in unknown.get_json()["error"]
    misspelt = admin.api("PUT", "/api/v1/config/gnss.cable_dely_ns", {"value": 1})
    assert misspelt.get_json()["error"] == "unknown setting 'gnss.cable_dely_ns' (did you mean gnss.cable_delay_ns?)"
    assert env.records("config.change") == []

    done = admin.form("/config", {"name": "log.level", "value": "debug"}, follow_redirects=True)
    assert _flashed(done, "ok") == ["log.level = 'debug': applied."]
    assert env.live == [("log.level", "debug")] and env.setting("log.level") == "debug"
    assert env.overrides == env.state_dir / "console-settings.toml"
    assert load_overrides(env.state_dir) == {"log.level": "debug"}

    later = admin.form("/config", {"name": "web.port", "value": "9443"}, follow_redirects=True)
    assert _flashed(later, "ok") == ["web.port = 9443: saved; takes effect after a restart."]
    assert load_overrides(env.state_dir) == {"log.level": "debug", "web.port": 9443}
    row = next(r for r in env.ctx.settings.rows() if r["name"] == "web.port")
    assert row["pending_restart"] and row["running"] == 8443 and row["value"] == 9443

    port, level = env.records("config.change")
    assert level.actor == "web:admin" and level.text == "log.level: 'info' -> 'debug'"
    assert level.detail | {"client": None} == {"setting": "log.level", "old": "info", "new": "debug",
                                               "applied": True, "client": None}
    assert port.text == "web.port: 8443 -> 9443 (takes effect after a restart)" and port.detail["applied"] is False


def test_a_change_of_role_takes_effect_at_once(env: ConsoleEnv) -> None:
    viewer, admin = env.login("viewer"), env.login("admin")
    assert viewer.api("POST", "/api/v1/holdover", {"action": "start"}).status_code == 403
    assert admin.form("/users", {"action": "role", "name": "viewer", "role": "operator"}).status_code == 302
    # The session opened as a viewer ends with the change; the next login carries the new role.
    assert viewer.api("POST", "/api/v1/holdover", {"action": "start"}, csrf=False).status_code == 401
    assert env.commands == []
    viewer = env.login("viewer")
    assert viewer.api("POST", "/api/v1/holdover", {"action": "start"}).status_code == 200
    assert env.commands == [{"cmd": "holdover", "action": "start", "user": "web:viewer", "reason": ""}]
    assert admin.form("/users", {"action": "remove", "name": "viewer"}).status_code == 302
    assert viewer.client.get("/").status_code == 302  # a removed user's session ends


# --- failed logins ------------------------------------------------------------------------------------------------

def test_failed_logins_back_off_then_lock_and_are_audited(console_env: Any) -> None:
    # Backoff starts after the third failure in a row, so four failures are needed to see it before the lockout.
    env = console_env(lockout_failures=4, lockout_s=60)
    clock = [time.time()]  # host time, moved on by hand
    env.ctx.wall_s = lambda: clock[0]
    browser = env.browser()

    def attempt(password: str) -> tuple[int, str]:
        response = browser.login("operator", password)
        (message,) = _flashed(response)
        return response.status_code, message

    wrong = ["wrong-pass-0001", "wrong-pass-0002", "wrong-pass-0003", "wrong-pass-0004"]
    for password in wrong[:3]:
        assert attempt(password) == (401, "Wrong user name or password.")
    clock[0] += 0.2
    assert attempt(PASSWORDS["operator"]) == (401, "Too many failed logins: wait 1 s.")  # even the right one
    clock[0] += 1.5
    assert attempt(wrong[3]) == (401, "This account is locked: try again in 60 s.")
    clock[0] += 30
    assert attempt(PASSWORDS["operator"]) == (401, "This account is locked: try again in 30 s.")
    assert browser.client.get("/").status_code == 302
    assert env.ctx.users.users()[1].locked_until_s > clock[0]

    clock[0] += 31
    ok = browser.login("operator")
    assert ok.status_code == 302 and browser.client.get("/").status_code == 200
    nobody = env.browser().login("nobody", "whatever-pass-1")
    assert nobody.status_code == 401 and "Wrong user name or password." in _page(nobody)

    failed = list(reversed(env.records("login.failed")))
    assert [r.detail["reason"] for r in failed] == ["bad credentials"] * 3 + ["wait", "locked", "locked",
                                                                              "bad credentials"]
    assert [r.actor for r in failed] == ["web:operator"] * 6 + ["web:(unknown user)"]  # no unknown name is kept
    assert [r.text.endswith("(account locked)") for r in failed] == [False] * 4 + [True, False, False]
    (login,) = env.records("login")
    assert login.actor == "web:operator" and login.text == "operator logged in (operator)"


def test_no_password_or_token_reaches_the_logs_or_the_audit_store(env: ConsoleEnv,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secrets = [*PASSWORDS.values(), "wrong-secret-1", "new-user-pass-2", "new-viewer-pass-3"]
    admin = env.login("admin")
    assert env.browser().login("operator", "wrong-secret-1").status_code == 401
    assert admin.form("/users", {"action": "add", "name": "auditor", "role": "viewer",
                                 "password": "new-user-pass-2"}).status_code == 302
    assert admin.form("/users", {"action": "password", "name": "viewer",
                                 "password": "new-viewer-pass-3"}).status_code == 302
    assert admin.form("/users", {"action": "add", "name": "short", "role": "viewer",
                                 "password": "short"}).status_code == 302  # refused: too short
    assert admin.form("/users", {"action": "token", "name": "admin", "label": "ci"}).status_code == 302
    token = _new_token(admin.client.get("/users"))
    secrets.append(token)
    api = env.browser().client
    assert api.get("/api/v1/status", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert api.get("/api/v1/status", headers={"Authorization": "Bearer tk_leaked-guess-1"}).status_code == 401
    assert admin.form("/config", {"name": "log.level", "value": "debug"}, csrf="forged-csrf").status_code == 400
    secrets.append("tk_leaked-guess-1")
    assert env.ctx.users.role_of("auditor") == "viewer"

    logged = caplog.text + "".join(str(r.args) + (r.exc_text or "") for r in caplog.records)
    audited = json.dumps([[r.kind, r.actor, r.text, r.detail] for r in env.records()])
    assert len(env.records()) >= 5
    for secret in secrets:
        assert secret not in logged, secret
        assert secret not in audited, secret


# --- headers, cookies, rate limit ----------------------------------------------------------------------------------

def test_security_headers_and_session_cookie_flags(env: ConsoleEnv) -> None:
    browser = env.browser()
    login_page = browser.client.get("/login")
    logged_in = browser.login("viewer")
    responses = [login_page, logged_in, browser.client.get("/"), browser.client.get("/api/v1/status"),
                 env.browser().client.get("/api/v1/status"), env.browser().client.get("/config")]
    for response in responses:
        csp = response.headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Cache-Control"] == "no-store"
        assert response.headers["Strict-Transport-Security"].startswith("max-age=")

    for response in (login_page, logged_in):
        (cookie,) = [c for c in response.headers.getlist("Set-Cookie") if c.startswith("appliance_session=")]
        flags = {part.strip().split("=")[0].lower(): part.strip() for part in cookie.split(";")[1:]}
        assert "secure" in flags and "httponly" in flags
        assert flags["samesite"] == "SameSite=Strict"


def test_the_rate_limiter_answers_429_past_the_burst(console_env: Any) -> None:
    env = console_env(rate_per_s=1, rate_burst=5)
    client = env.browser().client
    assert [client.get("/login").status_code for _ in range(5)] == [200] * 5
    assert client.get("/login").status_code == 429
    api = client.get("/api/v1/status", headers={"Authorization": f"Bearer {NOT_A_TOKEN}"})
    assert api.status_code == 429 and api.get_json() == {"error": "too many requests"}
    assert env.browser("192.0.2.7").client.get("/login").status_code == 200  # another address has its own bucket
