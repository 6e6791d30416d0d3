"""The configuration page in a real browser: Debian's Chromium driven by Playwright against ``appliance run``.

An admin sees the settings by section with a count each, finds settings with the search, changes a number that
applies live, an enum and a boolean, and sees each answer beside its setting with the page neither reloaded nor moved;
the changed settings are marked and the one that needs a restart is listed at the top.  A number out of its range is
refused in the field and a value the appliance refuses is refused with its message, nothing changed either way.  A
viewer sees the same page with nothing to change.  A full-page screenshot of each step is kept in artifacts/web/.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from appliance import config as cfg
from harness.procs import appliance, free_tcp_port, stop, wait_for
from tests.web import test_browser as browser_tests
from tests.web.test_browser import browser  # noqa: F401, F811  (the fixture: Debian's Chromium under Playwright)

pytestmark = [pytest.mark.interop]
ARTIFACTS = Path(__file__).parents[2] / "artifacts" / "web"
PASSWORDS = {"admin2": "admin-config-pass-3", "viewer": "viewer-config-pass-4"}


def add_user(state: Path, name: str, role: str) -> None:
    browser_tests.add_user(state, name, role, PASSWORDS[name])


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    state = tmp_path_factory.mktemp("config-console") / "state"
    state.mkdir()
    add_user(state, "admin2", "admin")
    add_user(state, "viewer", "viewer")
    port = free_tcp_port()
    proc = appliance("run", "--set", f"state_dir={state}", "--set", "clock.warmup_s=0", "--set", "ntp.enabled=false",
                     "--set", "web.listen=127.0.0.1", "--set", f"web.port={port}")
    try:
        wait_for(state, lambda s: bool(s["outputs"]["web"].get("serving")), timeout_s=60)
        yield f"https://127.0.0.1:{port}", state
    finally:
        code, err = stop(proc)
        assert code == 0, err
        for secret in PASSWORDS.values():
            assert secret not in err, "a password reached the log"


def login(browser: Any, base: str, user: str, height: int = 1000) -> Any:
    context = browser.new_context(ignore_https_errors=True, viewport={"width": 1400, "height": height})
    page = context.new_page()
    page.goto(base + "/login")
    page.fill("#user", user)
    page.fill("#password", PASSWORDS[user])
    page.click("#login")
    page.wait_for_url(base + "/")
    return page


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def setting(page: Any, base: str, name: str) -> dict[str, Any]:
    rows = page.request.get(base + "/api/v1/config").json()["settings"]
    return next(r for r in rows if r["name"] == name)  # type: ignore[no-any-return]


def row(page: Any, name: str) -> Any:
    return page.locator("#setting-" + name.replace(".", "-"))


def save_in_place(page: Any, name: str, expected: str) -> None:
    """Save one setting by its own button and wait for its answer; the page must not have moved or reloaded."""
    target = row(page, name)
    before = page.evaluate("() => [window.scrollY, window.keptAcrossSaves]")
    top = target.bounding_box()["y"]
    target.locator("button.save").click()
    expect(target.locator(".result")).to_contain_text(expected, timeout=15_000)
    after = page.evaluate("() => [window.scrollY, window.keptAcrossSaves]")
    assert after[1] == before[1] == "still the same page", "the page was reloaded"
    assert abs(target.bounding_box()["y"] - top) < 2, "the saved setting moved on the screen"
    return before[0], after[0]  # type: ignore[return-value]


def test_an_admin_finds_changes_and_saves_settings_without_losing_the_place(console: tuple[str, Path],
                                                                            browser: Any) -> None:
    base, state = console
    page = login(browser, base, "admin2", height=700)  # short: the section scrolls
    navigations: list[str] = []
    try:
        page.goto(base + "/config")
        # Sections: every group of the table in the side list, with its count; one shown at a time.
        nav = page.locator("#sections-nav a")
        keys = [k.strip() for k in nav.locator(".sec-name").all_inner_texts()]
        assert {"gnss", "clock", "integrity", "ntp", "ptp", "web", "snmp", "audit", "general"} <= set(keys)
        gnss_names = [s.name for s in cfg.SETTINGS if s.name.startswith("gnss.")]
        expect(page.locator("#sections-nav a[data-section=gnss] .sec-count")).to_have_text(str(len(gnss_names)))
        expect(page.locator("#section-gnss")).to_be_visible()
        expect(page.locator("#section-ptp")).to_be_hidden()
        expect(page.locator("#restart-list")).to_be_hidden()
        shot(page, "config")

        # The search looks through every section, by name and by description.
        page.fill("#config-search", "cable delay")
        expect(page.locator("#search-count")).to_contain_text("settings match")
        for name in ("gnss.cable_delay_ns", "pps_out.cable_delay_ns", "irig_out.cable_delay_ns"):
            expect(row(page, name)).to_be_visible()
        expect(row(page, "gnss.baud")).to_be_hidden()
        expect(page.locator("#section-clock")).to_be_hidden()
        shot(page, "config-search")
        page.fill("#config-search", "")
        page.locator("#sections-nav a[data-section=gnss]").click()
        expect(page).to_have_url(base + "/config#section-gnss")

        # A number: its unit and range beside it, enforced by the field.
        age = row(page, "gnss.label_max_age_ms")
        field = age.locator("input[type=number]")
        assert (field.get_attribute("min"), field.get_attribute("max")) == ("100", "990")
        expect(age.locator(".unit")).to_have_text("ms")
        expect(age.locator(".range")).to_have_text("100 … 990 ms")
        expect(age.locator(".changed-badge")).to_be_hidden()
        page.evaluate("window.keptAcrossSaves = 'still the same page'")
        page.on("domcontentloaded", lambda p: navigations.append(p.url))  # a document load, not a hash change
        page.evaluate("document.getElementById('setting-gnss-accuracy_ns').scrollIntoView({block: 'end'})")
        field.fill("800")
        scrolled, kept = save_in_place(page, "gnss.label_max_age_ms", "Saved and applied")
        assert scrolled > 0 and kept == scrolled, (scrolled, kept)
        expect(age.locator(".changed-badge")).to_be_visible()
        expect(age.locator("td.default")).to_contain_text("900")
        expect(page.locator("#sections-nav a[data-section=gnss] .sec-changed")).to_be_visible()
        assert setting(page, base, "gnss.label_max_age_ms")["value"] == 800

        # Out of range: refused in the field, with the reason beside it; nothing sent, nothing changed.
        field.fill("5000")
        save_in_place(page, "gnss.label_max_age_ms", "Not saved: too large: at most 990 ms.")
        assert setting(page, base, "gnss.label_max_age_ms")["value"] == 800
        # A value the appliance refuses: its own message beside the setting, nothing changed.
        page.locator("#sections-nav a[data-section=integrity]").click()
        position = row(page, "integrity.position")
        position.locator("input[type=text]").fill("somewhere north")
        save_in_place(page, "integrity.position", "Not saved: integrity.position:")
        assert setting(page, base, "integrity.position")["value"] == ""
        shot(page, "config-error")

        # An enum is a select, applied at once.
        page.locator("#sections-nav a[data-section=log]").click()
        level = row(page, "log.level")
        level.locator("select").select_option("warning")
        save_in_place(page, "log.level", "Saved and applied")
        expect(level.locator(".changed-badge")).to_be_visible()
        assert setting(page, base, "log.level")["value"] == "warning"

        # A boolean is a checkbox; this one needs a restart, and the list at the top says so while the page stays.
        page.locator("#sections-nav a[data-section=ptp]").click()
        trace = row(page, "ptp.path_trace")
        page.evaluate("document.getElementById('setting-ptp-path_trace').scrollIntoView({block: 'center'})")
        trace.locator("input[type=checkbox]").check()
        save_in_place(page, "ptp.path_trace", "Saved; takes effect after a restart")
        restart = page.locator("#restart-list")
        expect(restart).to_be_visible()
        expect(restart.locator("li")).to_have_count(1)
        expect(restart.locator("li")).to_contain_text("ptp.path_trace: running false → saved true")
        expect(trace.locator(".running")).to_contain_text("running: false until a restart")
        expect(trace.locator(".changed-badge")).to_be_visible()
        expect(page.locator("#sections-nav a[data-section=ptp] .sec-changed")).to_be_visible()
        assert page.url == base + "/config#section-ptp"
        shot(page, "config-saved")

        # A section's changes saved together, each answered beside its setting.
        page.locator("#sections-nav a[data-section=snmp]").click()
        row(page, "snmp.sys_contact").locator("input[type=text]").fill("noc@example.net")
        row(page, "snmp.sys_location").locator("input[type=text]").fill("rack 4")
        save_all = page.locator("#section-snmp .save-section")
        expect(save_all).to_have_text("Save 2 changes")
        save_all.click()
        for name in ("snmp.sys_contact", "snmp.sys_location"):
            expect(row(page, name).locator(".result")).to_contain_text("Saved; takes effect after a restart",
                                                                       timeout=15_000)
        expect(save_all).to_be_hidden()
        expect(restart.locator("li")).to_have_count(3)
        assert page.evaluate("window.keptAcrossSaves") == "still the same page"
        assert navigations == [], "the page was reloaded"
        shot(page, "config-section-saved")

        # The saved state is what a fresh page shows: the restart list, the markers, the section from the address.
        page.goto(base + "/config#setting-log-level")
        expect(page.locator("#section-log")).to_be_visible()
        expect(page.locator("#restart-list li")).to_have_text([re.compile(r"^ptp.path_trace: running false → saved true$"),
                                                               re.compile(r"^snmp.sys_contact: running empty → saved noc@"),
                                                               re.compile(r"^snmp.sys_location: running empty")])
        expect(row(page, "log.level").locator("select")).to_have_value("warning")
        changes = page.request.get(base + "/api/v1/audit?kind=config.change").json()["records"]
        assert sorted(r["detail"]["setting"] for r in changes) == ["gnss.label_max_age_ms", "log.level",
                                                                    "ptp.path_trace", "snmp.sys_contact",
                                                                    "snmp.sys_location"]
        assert {r["actor"] for r in changes} == {"web:admin2"}
    finally:
        shot(page, "config-admin-end")
        page.context.close()


def test_a_viewer_sees_the_settings_with_nothing_to_change(console: tuple[str, Path], browser: Any) -> None:
    base, _ = console
    page = login(browser, base, "viewer")
    try:
        page.goto(base + "/config")
        expect(page.locator(".config-head")).to_contain_text("Only admins may change settings.")
        expect(row(page, "gnss.baud").locator("select")).to_be_disabled()
        sections = page.locator(".config-sections")
        assert sections.locator("input:enabled, select:enabled").count() == 0
        assert sections.locator("button").count() == 0
        page.fill("#config-search", "community")
        expect(row(page, "snmp.community")).to_be_visible()
        expect(row(page, "snmp.community").locator("input[type=password]")).to_be_disabled()
        page.fill("#config-search", "")
        shot(page, "config-viewer")
    finally:
        page.context.close()
