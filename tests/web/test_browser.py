"""The web console in a real browser: Debian's Chromium driven by Playwright against ``appliance run`` over HTTPS.

An operator logs in, sees LOCKED, forces holdover and sees HOLDOVER and clockClass 7 on the dashboard without a
reload, finds the command in the audit log, verifies the chain and downloads a signed backup; a viewer tries to
change a setting and is refused with nothing changed.  A screenshot of each page is kept in artifacts/web/.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.interop.peers import require
from tests.interop.procs import ENV, appliance, free_tcp_port, stop, wait_for
from tests.interop.ptp_appliance import seed_learned_state

pytestmark = [pytest.mark.interop]
ARTIFACTS = Path(__file__).parents[2] / "artifacts" / "web"
FAST = ["--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3", "--set", "ntp.enabled=false"]
PASSWORDS = {"operator": "operator-pass-1", "viewer": "viewer-pass-12"}


def add_user(state: Path, name: str, role: str) -> None:
    out = subprocess.run([sys.executable, "-m", "appliance", "user", "add", name, "--role", role, "--password-stdin",
                          "--set", f"state_dir={state}"], input=PASSWORDS[name] + "\n", capture_output=True,
                         text=True, env=ENV, timeout=30)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, subprocess.Popen]]:
    state = tmp_path_factory.mktemp("console") / "state"
    state.mkdir()
    seed_learned_state(state)  # as after a restart: the clock knows its oscillator, so it may hold over
    add_user(state, "operator", "operator")
    add_user(state, "viewer", "viewer")
    port = free_tcp_port()
    proc = appliance("run", "--set", f"state_dir={state}", *FAST, "--set", "web.listen=127.0.0.1",
                     "--set", f"web.port={port}")
    try:
        wait_for(state, lambda s: s["clock"]["state"] == "LOCKED", timeout_s=60)
        yield f"https://127.0.0.1:{port}", state, proc
    finally:
        code, err = stop(proc)
        (ARTIFACTS / "appliance.log").parent.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "appliance.log").write_text(err)
        assert code == 0, err
        for secret in PASSWORDS.values():
            assert secret not in err, "a password reached the log"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    chromium = require("chromium")
    from playwright.sync_api import sync_playwright  # the package only: the browser is Debian's

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def login(browser: object, base: str, user: str, password: str) -> object:
    context = browser.new_context(ignore_https_errors=True, accept_downloads=True,  # type: ignore[attr-defined]
                                  viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.goto(base + "/login")
    page.fill("#user", user)
    page.fill("#password", password)
    page.click("#login")
    page.wait_for_url(base + "/")
    return page


def shot(page: object, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]


def test_operator_forces_holdover_sees_it_live_and_finds_it_in_the_audit_log(
        console: tuple[str, Path, subprocess.Popen], browser: object) -> None:
    base, state, _ = console
    page = login(browser, base, "operator", PASSWORDS["operator"])
    expect(page.locator("#state")).to_have_text("LOCKED", timeout=20_000)
    expect(page.locator("#clock-class")).to_have_text("6")
    shot(page, "dashboard-locked")
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    page.click("#holdover-start")
    expect(page.locator("#state")).to_have_text("HOLDOVER", timeout=20_000)
    expect(page.locator("#clock-class")).to_have_text("7", timeout=20_000)
    assert navigations == [], "the dashboard changed without a reload"
    shot(page, "dashboard-holdover")

    page.goto(base + "/audit")
    row = page.locator("#audit tbody tr", has_text="forced holdover start")
    assert row.count() == 1 and "web:operator" in row.inner_text()
    assert page.locator("#audit tbody tr", has_text="clock LOCKED -> HOLDOVER").count() == 1
    page.click("#verify-chain")
    assert "Chain OK" in page.text_content("#verify-result")
    shot(page, "audit")
    with page.expect_download() as info:
        page.click("#backup")
    bundle = Path(info.value.path())
    from appliance.audit.bundle import verify_bundle

    trusted = (state / "audit-signing.pub").read_bytes()
    result = verify_bundle(bundle, trusted)
    assert result.ok, result.reason
    assert any("forced holdover start" in r["text"] for r in json.loads(bundle.read_text())["records"])

    for name in ("gnss", "plots", "alarms", "config"):
        page.goto(base + "/" + name)
        if name == "gnss":
            page.wait_for_selector("#sats tbody tr", timeout=10_000)
            page.wait_for_selector("#skyplot canvas", timeout=10_000)
        if name == "plots":
            page.wait_for_selector("#plot-bound canvas", timeout=15_000)
        shot(page, name)
    page.goto(base + "/")
    page.click("#holdover-stop")
    expect(page.locator("#state")).not_to_have_text("HOLDOVER", timeout=20_000)
    page.context.close()


def test_viewer_is_refused_a_setting_change_and_nothing_changes(console: tuple[str, Path, subprocess.Popen],
                                                                 browser: object) -> None:
    base, state, _ = console
    page = login(browser, base, "viewer", PASSWORDS["viewer"])
    page.goto(base + "/config")
    row = page.locator("#setting-log-level")
    row.locator("input[name=value]").fill("debug")
    row.locator("button").click()
    assert "the admin role is needed" in page.text_content("#refused")
    shot(page, "config-refused")
    assert not (state / "console-settings.toml").exists()
    settings = page.request.get(base + "/api/v1/config").json()["settings"]
    assert next(s for s in settings if s["name"] == "log.level")["value"] == "info"
    page.goto(base + "/users")
    assert "the admin role is needed" in page.text_content("#refused")
    page.context.close()
