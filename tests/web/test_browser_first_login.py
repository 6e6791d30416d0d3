"""The first login, in a real browser: Debian's Chromium driven by Playwright against ``appliance run`` over HTTPS.

A fresh appliance (no users) makes ``admin`` and writes its password to ``initial-admin-password``.  Logging in
with it leads to the page that asks for a new password, not to the dashboard; every other page leads back there and
the API answers 403 "password change required".  Once a new password is chosen the browser lands on the dashboard,
the file is gone and the audit log says so.  Screenshots are kept in artifacts/web/.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from harness.procs import appliance, free_tcp_port, stop, wait_for
from tests.web.test_browser import browser  # noqa: F401, F811  (the fixture: Debian's Chromium under Playwright)

pytestmark = [pytest.mark.interop]
ARTIFACTS = Path(__file__).parents[2] / "artifacts" / "web"
NEW_PASSWORD = "my-own-admin-passphrase-7"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``appliance run`` on an empty state directory: its first start."""
    state = tmp_path_factory.mktemp("first-start") / "state"
    port = free_tcp_port()
    proc: subprocess.Popen = appliance("run", "--set", f"state_dir={state}", "--set", "clock.warmup_s=0",
                                       "--set", "ntp.enabled=false", "--set", "web.listen=127.0.0.1",
                                       "--set", f"web.port={port}")
    try:
        wait_for(state, lambda s: bool(s["outputs"]["web"].get("serving")), timeout_s=60)
        yield f"https://127.0.0.1:{port}", state
    finally:
        code, err = stop(proc)
        assert code == 0, err
        assert NEW_PASSWORD not in err, "a password reached the log"
        assert "initial-admin-password" in err  # the log names the file (never the password)


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_the_first_login_is_sent_to_change_the_initial_password_then_to_the_dashboard(
        fresh: tuple[str, Path], browser: Any) -> None:
    base, state = fresh
    initial_file = state / "initial-admin-password"
    initial = initial_file.read_text().strip()
    page = browser.new_context(ignore_https_errors=True, viewport={"width": 1400, "height": 1000}).new_page()
    page.goto(base + "/login")
    page.fill("#user", "admin")
    page.fill("#password", initial)
    page.click("#login")
    page.wait_for_url(base + "/password")
    expect(page.locator("#must-change")).to_contain_text("The initial password may not be kept")
    shot(page, "first-login-password")

    page.goto(base + "/")  # the dashboard is not reached before the change
    page.wait_for_url(base + "/password")
    refused = page.request.get(base + "/api/v1/status")
    assert refused.status == 403 and refused.json()["error"].startswith("password change required")

    page.fill("#current", initial)
    page.fill("#new-password", NEW_PASSWORD)
    page.fill("#again", NEW_PASSWORD)
    page.click("#change-password")
    page.wait_for_url(base + "/")
    expect(page.locator("body")).to_have_attribute("data-page", "dashboard")
    expect(page.locator("p.flash.ok")).to_contain_text("Password changed.")
    expect(page.locator("#state")).not_to_be_empty(timeout=10_000)
    shot(page, "first-login-dashboard")
    assert page.request.get(base + "/api/v1/status").status == 200
    assert not initial_file.exists()
    audit = page.request.get(base + "/api/v1/audit?kind=user.password,user.change").json()["records"]
    texts = [r["text"] for r in audit]
    assert "admin changed their password" in texts
    assert f"initial admin password file {initial_file} deleted: the password was changed" in texts
    page.context.close()

    again = browser.new_context(ignore_https_errors=True).new_page()  # the next login goes straight in
    again.goto(base + "/login")
    again.fill("#user", "admin")
    again.fill("#password", NEW_PASSWORD)
    again.click("#login")
    again.wait_for_url(base + "/")
    again.context.close()
