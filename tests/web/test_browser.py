"""The web console in a real browser: Debian's Chromium driven by Playwright against ``appliance run`` over HTTPS.

An operator logs in, sees LOCKED, forces holdover and sees HOLDOVER and clockClass 7 on the dashboard without a
reload, finds the command in the audit log, verifies the chain and downloads a signed backup; a viewer tries to
change a setting and is refused with nothing changed.  References: the dashboard lists GNSS, a PTP upstream and NTP;
the operator pins PTP, unpins, disables and enables NTP, and finds it all in the audit log.  GNSS integrity: on the
console of a fake appliance whose status the test sets, the dashboard's card follows the verdict to SPOOFED and the
operator's override buttons; on the real appliance, a spoofed position (a world drill) turns the card SPOOFED until
the attack ends and the reference qualifies again.  A screenshot of each page is kept in artifacts/web/.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from harness.peers import require
from harness.procs import ENV, appliance, free_tcp_port, stop, wait_for
from harness.ptp_appliance import seed_learned_state
from tests.web.conftest import PASSWORDS as FAKE_PASSWORDS
from tests.web.conftest import SPOOFED, ConsoleEnv

pytestmark = [pytest.mark.interop]
ARTIFACTS = Path(__file__).parents[2] / "artifacts" / "web"
FAST = ["--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3", "--set", "ntp.enabled=false"]
HOME = "46.2044,6.1432,375"  # the simulated antenna's position: no survey-in to wait for
INTEGRITY = ["--set", f"integrity.position={HOME}", "--set", "integrity.qualification_s=10"]
PASSWORDS = {"operator": "operator-pass-1", "viewer": "viewer-pass-12"}


def serving(status: dict) -> bool:
    """The console listens: at idle CPU priority on a busy host it may come up well after the clock locks."""
    return bool(status["outputs"].get("web", {}).get("serving"))


def add_user(state: Path, name: str, role: str, password: str | None = None) -> None:
    """A console user made as an admin makes one, with ``appliance user add``."""
    out = subprocess.run([sys.executable, "-m", "appliance", "user", "add", name, "--role", role, "--password-stdin",
                          "--set", f"state_dir={state}"], input=(password or PASSWORDS[name]) + "\n",
                         capture_output=True, text=True, env=ENV, timeout=30)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, subprocess.Popen]]:
    state = tmp_path_factory.mktemp("console") / "state"
    state.mkdir()
    seed_learned_state(state)  # as after a restart: the clock knows its oscillator, so it may hold over
    add_user(state, "operator", "operator")
    add_user(state, "viewer", "viewer")
    port = free_tcp_port()
    proc = appliance("run", "--set", f"state_dir={state}", *FAST, *INTEGRITY, "--set", "web.listen=127.0.0.1",
                     "--set", f"web.port={port}")
    try:
        wait_for(state, lambda s: s["clock"]["state"] == "LOCKED" and serving(s), timeout_s=60)
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


def confirm(page: Any, reason: str) -> None:
    """Answer the console's confirmation of a dangerous action: an empty reason is not taken, then ``reason`` is."""
    dialog = page.locator("#confirm")
    expect(dialog).to_be_visible(timeout=5_000)
    page.click("#confirm-ok")  # no reason yet: the dialog stays
    expect(dialog).to_be_visible()
    page.fill("#confirm-reason", reason)
    page.click("#confirm-ok")
    expect(dialog).to_be_hidden(timeout=5_000)


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
    confirm(page, "antenna maintenance")  # a dangerous action asks for confirmation and a reason
    expect(page.locator("#state")).to_have_text("HOLDOVER", timeout=20_000)
    expect(page.locator("#clock-class")).to_have_text("7", timeout=20_000)
    assert navigations == [], "the dashboard changed without a reload"
    shot(page, "dashboard-holdover")

    page.goto(base + "/audit")
    row = page.locator("#audit tbody tr", has_text="forced holdover start")
    assert row.count() == 1 and "web:operator" in row.inner_text()
    assert "(reason: antenna maintenance)" in row.inner_text()
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
    expect(row.locator("select")).to_be_disabled()  # the page offers a viewer nothing to change
    assert row.locator("button").count() == 0
    page.evaluate("""() => {  // the form an admin's page posts, sent all the same: the appliance refuses it
      const form = Object.assign(document.createElement("form"), { method: "post", action: "/config" });
      const token = document.querySelector('meta[name="csrf-token"]').content;
      for (const [name, value] of [["csrf_token", token], ["name", "log.level"], ["value", "debug"]])
        form.appendChild(Object.assign(document.createElement("input"), { type: "hidden", name, value }));
      document.body.appendChild(form);
      form.submit();
    }""")
    page.wait_for_selector("#refused")
    assert "the admin role is needed" in page.text_content("#refused")
    shot(page, "config-refused")
    assert not (state / "console-settings.toml").exists()
    settings = page.request.get(base + "/api/v1/config").json()["settings"]
    assert next(s for s in settings if s["name"] == "log.level")["value"] == "info"
    page.goto(base + "/users")
    assert "the admin role is needed" in page.text_content("#refused")
    page.context.close()


# --- GNSS integrity -------------------------------------------------------------------------------------------------

@pytest.fixture
def fake_console(console_env: Callable[..., ConsoleEnv], tmp_path: Path) -> Iterator[tuple[str, ConsoleEnv]]:
    """The console of a fake appliance (tests/web/conftest.py) served over HTTPS on loopback: the test sets the status
    the pages poll (``env.status``) and reads the commands they send (``env.commands``)."""
    from werkzeug.serving import make_server

    from appliance.web.tls import ensure_certificate

    env = console_env()
    cert, key = tmp_path / "web.crt", tmp_path / "web.key"
    ensure_certificate(cert, key, "127.0.0.1", datetime.datetime.now(datetime.UTC))
    server = make_server("127.0.0.1", 0, env.app, threaded=True, ssl_context=(str(cert), str(key)))
    thread = threading.Thread(target=server.serve_forever, name="fake-console", daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_port}", env
    finally:
        server.shutdown()
        thread.join(10)


def _spoofed(env: ConsoleEnv) -> None:
    """The fake appliance's status turns spoofed: the verdict, its alarm, the clock holding over."""
    status = env.with_integrity(**SPOOFED)
    alarm = {"code": "gnss-spoofing", "severity": "critical", "raised": True, "at_ns": env.now_tai_ns,
             "text": "GNSS spoofing detected: " + SPOOFED["reasons"][0]}
    env.status = {**status, "alarms": [alarm, *status["alarms"]],
                  "clock": {**status["clock"], "state": "HOLDOVER", "reason": "GNSS integrity spoofed"}}


def test_integrity_card_follows_the_verdict_and_the_operator_overrides_it(
        fake_console: tuple[str, ConsoleEnv], browser: object) -> None:
    base, env = fake_console
    page: Any = login(browser, base, "operator", FAKE_PASSWORDS["operator"])
    card = page.locator("#integrity")
    expect(card).to_contain_text("GNSS integrity")
    expect(page.locator("#integrity-level")).to_have_text("ok")
    expect(page.locator("#integrity-usable")).to_have_text("reference used")
    expect(page.locator("#integrity-reason")).to_have_text("all checks ok")
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))

    page.click("#integrity-reject")  # the fake appliance applies the override to the status it publishes
    confirm(page, "site survey")
    expect(page.locator("#command-result")).to_have_text(
        "integrity reject: override reject, verdict ok, reference REJECTED", timeout=10_000)
    expect(page.locator("#integrity-usable")).to_have_text("reference REJECTED", timeout=10_000)
    expect(page.locator("#integrity-override")).to_have_text("operator override: reject")
    page.click("#integrity-auto")
    expect(page.locator("#integrity-usable")).to_have_text("reference used", timeout=10_000)
    expect(page.locator("#integrity-override")).to_have_text("")
    assert env.commands == [{"cmd": "integrity", "action": "reject", "user": "web:operator", "reason": "site survey"},
                            {"cmd": "integrity", "action": "auto", "user": "web:operator", "reason": ""}]
    shot(page, "dashboard-integrity-ok")

    _spoofed(env)  # the next poll shows it, without a reload
    level = page.locator("#integrity-level")
    expect(level).to_have_text("SPOOFED", timeout=10_000)
    expect(level).to_have_class("state integrity-spoofed")
    expect(level).to_have_css("background-color", "rgb(130, 80, 223)")  # not the clock states' colours
    expect(page.locator("#integrity-usable")).to_have_text("reference REJECTED")
    expect(page.locator("#integrity-requalify")).to_have_text("qualifies again in 43 s")
    expect(page.locator("#integrity-reason")).to_have_text(SPOOFED["reasons"][0])
    expect(page.locator("#alarms li.critical")).to_contain_text("GNSS spoofing detected")
    expect(page.locator("#state")).to_have_text("HOLDOVER")
    assert navigations == [], "the dashboard changed without a reload"
    shot(page, "dashboard-integrity-spoofed")

    page.goto(base + "/gnss")
    rows = page.locator("#integrity-findings tbody tr")
    expect(rows).to_have_count(2, timeout=10_000)
    expect(rows.nth(0)).to_contain_text("position")
    expect(rows.nth(0)).to_contain_text("spoofed")
    expect(rows.nth(0)).to_have_class("verdict-spoofed")
    expect(page.locator("#rx-survey")).to_have_text("fixed (configured)")
    expect(page.locator("#survey-detail")).to_have_text("46.204400, 6.143200, 375.0 m")
    expect(page.locator("#integrity-ntp")).to_have_text("NTP cross-check via ntp.example: +0.42 ms (± 3.50 ms)")
    expect(page.locator("#gnss-integrity")).to_have_text("SPOOFED")
    page.wait_for_selector("#skyplot canvas", timeout=10_000)
    shot(page, "gnss-integrity-spoofed")
    page.click("#integrity-resurvey")
    expect(page.locator("#rx-survey")).to_have_text("surveying", timeout=10_000)
    expect(page.locator("#survey-detail")).to_contain_text("surveying 0 / 0 s, 0 fixes")
    assert env.commands[-1] == {"cmd": "integrity", "action": "resurvey", "user": "web:operator", "reason": ""}
    page.context.close()


def test_a_viewer_sees_the_verdict_but_no_override(fake_console: tuple[str, ConsoleEnv], browser: object) -> None:
    base, env = fake_console
    _spoofed(env)
    page: Any = login(browser, base, "viewer", FAKE_PASSWORDS["viewer"])
    expect(page.locator("#integrity-level")).to_have_text("SPOOFED")
    for button in ("#integrity-trust", "#integrity-reject", "#integrity-auto", "#holdover-start"):
        expect(page.locator(button)).to_have_count(0)
    page.goto(base + "/gnss")
    expect(page.locator("#integrity-findings tbody tr")).to_have_count(2, timeout=10_000)
    expect(page.locator("#integrity-resurvey")).to_have_count(0)
    refused = page.request.post(base + "/api/v1/integrity", data={"action": "trust"},
                                headers={"X-CSRFToken": page.locator('meta[name="csrf-token"]').get_attribute(
                                    "content"), "Referer": base + "/"})
    assert refused.status == 403
    assert env.commands == []
    page.context.close()


def world(state: Path, action: str, value: str = "") -> None:
    out = subprocess.run([sys.executable, "-m", "appliance", "world", action, *([value] if value else []),
                          "--set", f"state_dir={state}"], capture_output=True, text=True, env=ENV, timeout=30,
                         check=False)
    assert out.returncode == 0, out.stderr


def test_a_spoofed_position_turns_the_card_spoofed_until_the_reference_qualifies_again(
        console: tuple[str, Path, subprocess.Popen], browser: object) -> None:
    base, state, _ = console
    page: Any = login(browser, base, "operator", PASSWORDS["operator"])
    expect(page.locator("#integrity-level")).to_have_text("ok", timeout=20_000)
    expect(page.locator("#integrity-usable")).to_have_text("reference used")
    page.goto(base + "/gnss")
    expect(page.locator("#rx-survey")).to_have_text("fixed (configured)", timeout=10_000)
    expect(page.locator("#integrity-findings tbody tr", has_text="position")).to_have_count(1, timeout=10_000)
    page.goto(base + "/")

    world(state, "spoof-position", "200")
    try:
        expect(page.locator("#integrity-level")).to_have_text("SPOOFED", timeout=20_000)
        expect(page.locator("#integrity-usable")).to_have_text("reference REJECTED")
        expect(page.locator("#integrity-reason")).to_contain_text("from the surveyed home")
        expect(page.locator("#alarms li.critical")).to_contain_text("GNSS spoofing detected", timeout=10_000)
        expect(page.locator("#state")).not_to_have_text("LOCKED", timeout=10_000)
        shot(page, "dashboard-spoofed-live")
        page.goto(base + "/gnss")
        expect(page.locator("#integrity-findings tbody tr.verdict-spoofed")).to_contain_text("position",
                                                                                           timeout=10_000)
        shot(page, "gnss-spoofed-live")
        page.goto(base + "/")
    finally:
        world(state, "stop-attacks")
    expect(page.locator("#integrity-requalify")).to_contain_text("qualifies again in", timeout=20_000)
    expect(page.locator("#integrity-level")).to_have_text("ok", timeout=60_000)
    expect(page.locator("#integrity-usable")).to_have_text("reference used")

    page.click("#integrity-reject")  # the operator's override, on the real appliance
    confirm(page, "drill")
    expect(page.locator("#integrity-usable")).to_have_text("reference REJECTED", timeout=10_000)
    expect(page.locator("#integrity-override")).to_have_text("operator override: reject")
    page.click("#integrity-auto")
    expect(page.locator("#integrity-usable")).to_have_text("reference used", timeout=10_000)
    expect(page.locator("#state")).to_have_text("LOCKED", timeout=60_000)
    page.goto(base + "/audit")
    for text in ("integrity reject", "integrity auto"):
        row = page.locator("#audit tbody tr", has_text=text)
        assert row.count() >= 1 and "web:operator" in row.first.inner_text(), text
    page.context.close()


# --- time references ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def references_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The appliance with a simulated PTP upstream and NTP servers beside GNSS."""
    state = tmp_path_factory.mktemp("references") / "state"
    state.mkdir()
    seed_learned_state(state)
    add_user(state, "operator", "operator")
    port = free_tcp_port()
    proc = appliance("run", "--set", f"state_dir={state}", *FAST, "--set", "sim.ptp_upstream=true",
                     "--set", "sim.ntp_upstream=true", "--set", "references.ntp_interval_s=2",
                     "--set", "references.qualify_s=3", "--set", "web.listen=127.0.0.1", "--set", f"web.port={port}")
    try:
        wait_for(state, lambda s: s["clock"]["state"] == "LOCKED" and serving(s) and all(
            r["state"] == "qualified" for r in s["references"]["rows"]), timeout_s=90)
        yield f"https://127.0.0.1:{port}", state
    finally:
        code, err = stop(proc)
        assert code == 0, err


def test_the_operator_sees_every_reference_and_pins_one(references_console: tuple[str, Path],
                                                        browser: object) -> None:
    base, state = references_console
    page: Any = login(browser, base, "operator", PASSWORDS["operator"])
    rows = page.locator("#references tbody tr")
    expect(rows).to_have_count(3, timeout=10_000)
    expect(page.locator("#reference-gnss")).to_contain_text("▶ gnss")
    expect(page.locator("#reference-ptp")).to_contain_text("qualified")
    expect(page.locator("#reference-ntp")).to_contain_text("5")  # its priority
    expect(page.locator("#reference")).to_have_text("gnss")
    shot(page, "dashboard-references")

    page.locator("#reference-ptp button[data-reference=pin]").click()
    confirm(page, "testing the PTP upstream")
    expect(page.locator("#command-result")).to_have_text("reference pinned to ptp; active: ptp", timeout=10_000)
    expect(page.locator("#reference-ptp")).to_contain_text("▶ ptp (pinned)", timeout=10_000)
    expect(page.locator("#references-summary")).to_contain_text("pinned to ptp")
    expect(page.locator("#alarms")).to_contain_text("running on backup reference ptp", timeout=10_000)
    shot(page, "dashboard-references-pinned")

    page.click("#reference-unpin")
    expect(page.locator("#reference-gnss")).to_contain_text("▶ gnss", timeout=10_000)
    page.locator("#reference-ntp button[data-reference=disable]").click()
    confirm(page, "NTP servers under maintenance")
    expect(page.locator("#reference-ntp")).to_contain_text("disabled", timeout=10_000)
    page.locator("#reference-ntp button[data-reference=enable]").click()
    expect(page.locator("#reference-ntp")).not_to_contain_text("disabled", timeout=10_000)

    page.goto(base + "/audit")
    for text in ("reference pinned to ptp (reason: testing the PTP upstream)", "reference selection automatic",
                 "reference ntp disabled (reason: NTP servers under maintenance)",
                 "reference gnss -> ptp"):
        assert page.locator("#audit tbody tr", has_text=text).count() >= 1, text
    page.context.close()
