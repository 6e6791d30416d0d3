"""An operator's minutes with the console, in Debian's Chromium against ``appliance run``: the verdict, the drills,
the alarms.

The verdict at the top of every page says "serving traceable time" while the clock is locked.  Block the sky: the
banner says "not traceable" with the cause (the receiver's lost fix) within 2 s of the appliance knowing it, on
whatever page is open, without a reload.  The alarm page lists the alarms with their catalogue ID, severity,
probable cause and what to do; the operator acknowledges one with a comment (audited, shown with who); the same
alarms with the same IDs and severities are in the status JSON, Prometheus and SNMP's table.  Clear the sky: the
banner comes back to traceable and the history pairs each raise with its clear, filtered by severity.  A viewer
sees the verdict and the alarms but no acknowledge button.  The dashboard says when the clock will be able to hold
over.  A receiver device that does not exist: the verdict names it, the dashboard shows the open error, the alarm
page lists gnss-disconnected.  Screenshots in artifacts/web/operator-*.png.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from appliance.edge import control
from harness.procs import appliance, free_tcp_port, stop, wait_for
from tests.web import test_browser as browser_tests
from tests.web.test_browser import ARTIFACTS, browser, login, shot  # noqa: F401  (browser: the fixture)

pytestmark = [pytest.mark.interop]
PASSWORDS = {"operator": "operator-pass-77", "viewer": "viewer-pass-77"}
# A fresh unit (nothing learned, so losing the sky leaves it free-running), locking within seconds
FAST = ["--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3", "--set", "ntp.enabled=false",
        "--set", "integrity.position=46.2044,6.1432,375", "--set", "integrity.qualification_s=10"]


def add_user(state: Path, name: str, role: str) -> None:
    browser_tests.add_user(state, name, role, PASSWORDS[name])


@pytest.fixture(scope="module")
def unit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    state = tmp_path_factory.mktemp("operator") / "state"
    state.mkdir()
    add_user(state, "operator", "operator")
    add_user(state, "viewer", "viewer")
    port = free_tcp_port()
    proc = appliance("run", "--set", f"state_dir={state}", *FAST, "--set", "web.listen=127.0.0.1",
                     "--set", f"web.port={port}")
    try:
        wait_for(state, lambda s: s["clock"]["state"] == "LOCKED", timeout_s=90)
        yield f"https://127.0.0.1:{port}", state
    finally:
        code, err = stop(proc)
        (ARTIFACTS / "operator-appliance.log").parent.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "operator-appliance.log").write_text(err)
        assert code == 0, err


def ask(state: Path, request: dict[str, Any]) -> dict[str, Any]:
    """The appliance's control socket, directly (a command-line start would add a second to every step)."""
    return control.request(state / "control.sock", {**request, "user": "test"})


def appliance_knows(state: Path, predicate: Any, timeout_s: float) -> tuple[dict[str, Any], float]:
    """Poll the appliance's own status until ``predicate``; the status and the monotonic time it was seen."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = ask(state, {"cmd": "status"})["status"]
        if predicate(s):
            return s, time.monotonic()
        time.sleep(0.1)
    raise AssertionError(f"not reached in {timeout_s} s: {s['verdict']}")


def test_the_verdict_follows_the_drills_and_the_operator_acts_on_the_alarms(unit: tuple[str, Path],
                                                                             browser: object) -> None:
    base, state = unit
    page: Any = login(browser, base, "operator", PASSWORDS["operator"])
    banner = page.locator("#verdict")
    expect(page.locator("#verdict-headline")).to_have_text("serving traceable time", timeout=20_000)
    expect(banner).to_have_class("verdict verdict-traceable")
    expect(page.locator("#verdict-reason")).to_contain_text("locked to gnss, error bound")
    expect(page.locator("#verdict-class")).to_contain_text("clockClass 6 — locked to a primary reference (PRTC)")
    expect(page.locator("#clock-class-meaning")).to_have_text("locked to a primary reference (PRTC)")
    readiness = ask(state, {"cmd": "status"})["status"]["clock"]["holdover_readiness"]  # a fresh unit: soon
    expect(page.locator("#holdover-ready")).to_contain_text(
        "capable, within" if readiness["capable"] else "capable in", timeout=10_000)
    shot(page, "operator-dashboard-traceable")
    for name in ("gnss", "plots", "alarms", "audit", "config", "system"):  # the same banner on every page
        page.goto(base + "/" + name)
        expect(page.locator("#verdict-headline")).to_have_text("serving traceable time", timeout=10_000)
        expect(banner).to_have_css("background-color", "rgb(26, 127, 55)")  # green, whatever the page's own styles
        expect(page.locator("#verdict-reason")).to_contain_text("locked to gnss")
        shot(page, f"operator-{name}")

    page.goto(base + "/audit")  # the verdict is on every page, kept live there too
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    assert ask(state, {"cmd": "world", "action": "block-sky"})["ok"]
    _, known_at = appliance_knows(state, lambda s: not s["verdict"]["traceable"], timeout_s=20)
    expect(page.locator("#verdict-headline")).to_have_text("not traceable", timeout=10_000)
    shown_after_s = time.monotonic() - known_at
    print(f"banner said not traceable {shown_after_s:.2f} s after the appliance knew")
    assert shown_after_s <= 2.0, f"the banner took {shown_after_s:.2f} s"
    expect(banner).to_have_class("verdict verdict-not-traceable")
    expect(page.locator("#verdict-reason")).to_contain_text("clock free-running: GNSS receiver has no fix")
    expect(page.locator("#verdict-reason")).to_contain_text("no satellite tracked: the antenna sees no sky")
    expect(page.locator("#verdict-class")).to_contain_text("clockClass 248 — default: free-running, not traceable")
    expect(page.locator("#verdict-alarms")).to_contain_text("2 alarms (critical, unacknowledged)")
    assert navigations == [], "the banner changed without a reload"
    shot(page, "operator-audit-not-traceable")

    page.goto(base + "/alarms")
    unlocked, no_fix = page.locator("#active-clock-unlocked"), page.locator("#active-gnss-no-fix")
    expect(unlocked).to_contain_text("CRITICAL", timeout=10_000)
    expect(unlocked).to_contain_text("Clock not traceable")
    expect(no_fix).to_contain_text("MAJOR")
    expect(no_fix).to_contain_text("lossOfSignal")
    expect(no_fix).to_contain_text("Check the antenna, its cable and its view of the sky")
    expect(no_fix).to_contain_text("Now: no satellite tracked: the antenna sees no sky")
    expect(no_fix.locator("td").first).to_have_text("12")  # the catalogue's stable ID
    no_fix.locator("button.ack").click()
    page.fill("#confirm-reason", "antenna cover on the roof")
    page.click("#confirm-ok")
    expect(no_fix).to_contain_text("acknowledged by web:operator", timeout=10_000)
    expect(no_fix).to_contain_text("antenna cover on the roof")
    expect(page.locator("#verdict-alarms")).to_contain_text("2 alarms (critical, unacknowledged)")
    shot(page, "operator-alarms-active")

    s = ask(state, {"cmd": "status"})["status"]
    by_code = {a["code"]: a for a in s["alarms"]}
    assert (by_code["gnss-no-fix"]["id"], by_code["gnss-no-fix"]["severity"]) == (12, "major")
    assert by_code["gnss-no-fix"]["acked_by"] == "web:operator"
    metrics = page.request.get(base + "/metrics").text()
    assert 'appliance_alarm{code="gnss-no-fix",id="12",severity="major"} 1.0' in metrics
    assert 'appliance_alarm_acknowledged{code="gnss-no-fix",id="12",severity="major"} 1.0' in metrics
    assert 'appliance_alarm{code="clock-holdover",id="2",severity="minor"} 0.0' in metrics
    assert "appliance_time_traceable 0.0" in metrics

    assert ask(state, {"cmd": "world", "action": "clear-sky"})["ok"]
    expect(page.locator("#verdict-headline")).to_have_text("serving traceable time", timeout=90_000)
    expect(page.locator("#alarm-table tbody")).to_contain_text("No active alarm.", timeout=10_000)
    history = page.locator("#alarm-history tbody tr")
    expect(history.filter(has_text="GNSS receiver has no fix")).to_have_count(1, timeout=10_000)
    row = history.filter(has_text="GNSS receiver has no fix")
    expect(row).not_to_contain_text("still active")
    expect(row).to_contain_text("web:operator")
    page.select_option("#filter-severity", "major")
    expect(history).to_have_count(1, timeout=10_000)
    page.select_option("#filter-severity", "critical")
    expect(history.first).to_contain_text("Clock not traceable", timeout=10_000)
    expect(history.filter(has_text="GNSS receiver has no fix")).to_have_count(0)
    shot(page, "operator-alarms-history")

    page.goto(base + "/audit")
    ack = page.locator("#audit tbody tr", has_text="acknowledged [major] GNSS receiver has no fix")
    expect(ack).to_have_count(1)
    expect(ack).to_contain_text("web:operator")
    page.context.close()


def test_a_viewer_sees_the_verdict_and_the_alarms_but_cannot_acknowledge(unit: tuple[str, Path],
                                                                        browser: object) -> None:
    base, state = unit
    page: Any = login(browser, base, "viewer", PASSWORDS["viewer"])
    expect(page.locator("#verdict-headline")).to_have_text("serving traceable time", timeout=90_000)
    assert ask(state, {"cmd": "world", "action": "receiver-off"})["ok"]
    try:
        page.goto(base + "/alarms")
        expect(page.locator("#verdict-headline")).to_have_text("not traceable", timeout=20_000)
        expect(page.locator("#alarm-table tbody tr").first).to_contain_text("CRITICAL", timeout=10_000)
        expect(page.locator("#alarm-table button")).to_have_count(0)
        refused = page.request.post(base + "/api/v1/alarms/clock-unlocked/ack", data="{}",
                                    headers={"Content-Type": "application/json"})
        assert refused.status in (400, 403)
        shot(page, "operator-alarms-viewer")
    finally:
        assert ask(state, {"cmd": "world", "action": "receiver-on"})["ok"]
    page.context.close()


def test_a_missing_receiver_is_named_on_the_console(tmp_path_factory: pytest.TempPathFactory,
                                                    browser: object) -> None:
    state = tmp_path_factory.mktemp("no-receiver") / "state"
    state.mkdir()
    add_user(state, "operator", "operator")
    port = free_tcp_port()
    proc = appliance("run", "--set", f"state_dir={state}", "--set", "gnss.device=/dev/ttyNOPE",
                     "--set", "ntp.enabled=false", "--set", "web.listen=127.0.0.1", "--set", f"web.port={port}")
    try:
        wait_for(state, lambda s: bool(s["outputs"]["web"].get("serving")), timeout_s=60)
        base = f"https://127.0.0.1:{port}"
        page: Any = login(browser, base, "operator", PASSWORDS["operator"])
        opened = "cannot open /dev/ttyNOPE: No such file or directory"
        expect(page.locator("#verdict-headline")).to_have_text("not traceable", timeout=20_000)
        expect(page.locator("#verdict-reason")).to_have_text(f"clock free-running: GNSS receiver disconnected ({opened})")
        expect(page.locator("#receiver-error")).to_have_text(f"gnss0 disconnected: {opened}")
        expect(page.locator("#holdover-ready")).to_contain_text("not capable")
        expect(page.locator("#integrity-level")).to_have_text("no data")
        shot(page, "operator-dashboard-no-receiver")
        page.goto(base + "/alarms")
        row = page.locator("#active-gnss-disconnected")
        expect(row).to_contain_text("MAJOR", timeout=10_000)
        expect(row).to_contain_text(opened)
        expect(row.locator("td").first).to_have_text("10")
        expect(row).to_contain_text("receiverFailure")
        shot(page, "operator-alarms-no-receiver")
        page.context.close()
    finally:
        code, err = stop(proc)
        assert code == 0, err
