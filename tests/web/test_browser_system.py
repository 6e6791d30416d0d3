"""The system page in a real browser: Debian's Chromium driven by Playwright against ``appliance run`` over HTTPS.

The appliance serves NTP on a loopback port with two workers and NTS (so an NTS-KE process runs), and its SNMP agent;
the test asks it for time from 127.0.0.1 faster than the rate limit lets a client, counting the replies and the
KoD RATE it gets back.  A viewer then sees on the System page the version, the uptime, each process (appliance, two
NTP workers, NTS-KE, console, SNMP agent) running with its CPU and memory, the state directory's disk use with the
audit trail in it, the request rate, 127.0.0.1 among the busiest clients with every request the test sent, and the
KoDs the test received.  A screenshot is kept in artifacts/web/system.png.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from harness.procs import appliance, free_tcp_port, free_udp_port, stop, wait_for
from tests.web.test_browser import add_user, browser, login  # noqa: F401, F811  (browser: the Chromium fixture)

pytestmark = [pytest.mark.interop]
ARTIFACTS = Path(__file__).parents[2] / "artifacts" / "web"
VIEWER_PASSWORD = "viewer-pass-12"  # test_browser.PASSWORDS["viewer"], which add_user uses
REQUESTS = 48  # beyond the rate limit's burst (ntp.rate_limit_burst, 32 by default): KoD RATE, then drops
PROCESSES = ("Appliance", "NTP worker 0", "NTP worker 1", "NTS-KE server", "Web console", "SNMP agent")


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, int]]:
    state = tmp_path_factory.mktemp("system") / "state"
    state.mkdir()
    add_user(state, "viewer", "viewer")
    web_port, ntp_port = free_tcp_port(), free_udp_port()
    proc: subprocess.Popen = appliance(
        "run", "--set", f"state_dir={state}", "--set", "clock.warmup_s=0", "--set", "web.listen=127.0.0.1",
        "--set", f"web.port={web_port}", "--set", "ntp.listen=127.0.0.1", "--set", f"ntp.port={ntp_port}",
        "--set", "ntp.workers=2", "--set", "ntp.nts_enabled=true", "--set", f"ntp.nts_port={free_tcp_port()}",
        "--set", "snmp.enabled=true", "--set", f"snmp.port={free_udp_port()}")
    try:
        wait_for(state, lambda s: bool(s["outputs"]["web"].get("serving")) and "snmp" in s["outputs"]
                 and all(w["pid"] for w in s["outputs"]["ntp"]["workers"]) and s["outputs"]["ntp"]["nts"]["pid"],
                 timeout_s=60)
        yield f"https://127.0.0.1:{web_port}", state, ntp_port
    finally:
        code, err = stop(proc)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "appliance-system.log").write_text(err)
        assert code == 0, err


def ask_for_time(port: int, count: int) -> tuple[int, int]:
    """``count`` bare NTPv4 client requests from one socket on 127.0.0.1, 5 ms apart; (replies, KoD RATE)."""
    request = bytes([0x23]) + bytes(39) + (0x1234567890ABCDEF).to_bytes(8, "big")
    replies = kods = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(0.3)
        for _ in range(count):
            sock.sendto(request, ("127.0.0.1", port))
            time.sleep(0.005)
        deadline = time.monotonic() + 3.0  # a dropped request has no answer: read until the socket stays quiet
        while time.monotonic() < deadline:
            try:
                data = sock.recv(1100)
            except socket.timeout:
                break
            if data[1] == 0 and data[12:16] == b"RATE":
                kods += 1
            else:
                replies += 1
    return replies, kods


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def cell(page: Any, table: str, row_text: str, column: int) -> Any:
    return page.locator(f"#{table} tbody tr", has_text=row_text).first.locator("td").nth(column)


def test_a_viewer_sees_processes_disk_and_the_ntp_clients(running: tuple[str, Path, int], browser: Any) -> None:
    base, state, ntp_port = running
    replies, kods = ask_for_time(ntp_port, REQUESTS)
    assert kods >= 1 and replies >= 32, (replies, kods)  # the burst answered, then a KoD RATE
    ntp = wait_for(state, lambda s: s["outputs"]["ntp"]["totals"]["requests"] >= REQUESTS
                   and s["outputs"]["ntp"]["clients"]["top"], timeout_s=20)["outputs"]["ntp"]
    version = wait_for(state, lambda s: True)["version"]
    assert ntp["clients"]["kod_sent"] == kods

    page = login(browser, base, "viewer", VIEWER_PASSWORD)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.goto(base + "/system")
    try:
        expect(page.locator("nav a.on")).to_have_text("System")
        expect(page.locator("#sys-version")).to_have_text(version)
        expect(page.locator("#sys-uptime")).to_have_text(re.compile(r"^\d\dh \d\dm \d\ds$"))
        expect(page.locator("#sys-started")).to_have_text(re.compile(r"^since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$"))

        rows = page.locator("#sys-processes tbody tr")
        expect(rows).to_have_count(len(PROCESSES), timeout=10_000)
        for i, label in enumerate(PROCESSES):
            expect(rows.nth(i).locator("td").first).to_have_text(label)
            expect(cell(page, "sys-processes", label, 2)).to_have_text("running")
            expect(cell(page, "sys-processes", label, 1)).to_have_text(re.compile(r"^\d+$"))
            # CPU now: a percentage once the page has looked twice (it polls every 3 s)
            expect(cell(page, "sys-processes", label, 3)).to_have_text(re.compile(r"^\d+\.\d %$"), timeout=15_000)
            expect(cell(page, "sys-processes", label, 4)).to_have_text(re.compile(r"^\d+\.\d\d s$"))
            expect(cell(page, "sys-processes", label, 5)).to_have_text(re.compile(r"^\d+\.\d MiB$"))

        expect(page.locator("#sys-disk-used")).to_have_text(re.compile(r"^\d+(\.\d)? (B|KiB|MiB|GiB)$"))
        expect(page.locator("#sys-disk-free")).to_have_text(re.compile(r"free of"))
        expect(page.locator("#sys-disk-summary")).to_contain_text(str(state))
        expect(cell(page, "sys-disk", "audit.sqlite", 0)).to_have_text("audit.sqlite")  # its WAL counted with it
        expect(cell(page, "sys-disk", "audit.sqlite", 1)).to_have_text(re.compile(r"^audit trail"))
        expect(page.locator("#sys-disk tbody tr", has_text="-wal")).to_have_count(0)
        expect(cell(page, "sys-disk", "nts/", 1)).to_have_text("NTS-KE certificate and cookie keys")
        expect(cell(page, "sys-disk", "nts/", 2)).to_have_text(re.compile(r"^\d+(\.\d)? (B|KiB)$"))

        expect(page.locator("#ntp-rate")).to_have_text(re.compile(r"^\d+\.\d\d /s$"))
        rate = float(page.locator("#ntp-rate").inner_text().split()[0])
        assert rate > 0
        expect(page.locator("#ntp-rate-window")).to_have_text(re.compile(r"^over the last \d+ s$"))
        ours = page.locator("#ntp-top tbody tr", has_text="127.0.0.1")
        expect(ours).to_have_count(1)
        expect(ours.locator("td").nth(1)).to_have_text("127.0.0.1")
        expect(ours.locator("td").nth(2)).to_have_text(str(REQUESTS))  # each one the test sent (all on loopback)
        expect(page.locator("#ntp-kod")).to_have_text(str(kods))
        expect(page.locator("#ntp-kod-detail")).to_contain_text(f"RATE {kods}")
        expect(page.locator("#ntp-requests")).to_have_text(re.compile(r"^\d+$"))
        assert errors == [], errors  # the page's scripts ran without an error (none refused by the CSP either)
    finally:
        shot(page, "system")
