"""The system page and /api/v1/system on the fake console (``console_env``): what it answers, to whom, and that the
page shows it.  The processes are real ones (this test's own, and a finished child standing for a dead worker);
the NTP figures are a status's, as the appliance publishes them."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest

from tests.web.conftest import ConsoleEnv

CLIENTS = {"request_rate_per_s": 12.5, "rate_window_s": 58.0, "window_s": 60,
           "top": [{"client": "192.0.2.7", "requests": 700, "error": 0},
                   {"client": "2001:db8:1:2::/64", "requests": 40, "error": 3}],
           "kod_sent": 9, "rate_limited": 21}

NTP_KEYS = {"enabled", "listen", "port", "error", "requests", "replies", "request_rate_per_s", "rate_window_s",
            "window_s", "top", "kod_sent", "kod", "rate_limited"}


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture(scope="module")
def other() -> Iterator[int]:
    """A live process standing for the workers, the NTS-KE server, the console and the SNMP agent."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield child.pid
    child.kill()
    child.wait()


def system_env(console_env: Any, tmp_path: Path, other: int) -> ConsoleEnv:
    state = tmp_path / "system-state"
    (state / "nts").mkdir(parents=True)
    (state / "audit.sqlite").write_bytes(b"a" * 200_000)
    (state / "nts" / "cookie_keys.json").write_bytes(b"k" * 3_000)
    env = console_env(state_dir=state)
    status = copy.deepcopy(env.status)
    me = other
    status["outputs"] = {
        "ntp": {"enabled": True, "listen": "127.0.0.1", "port": 123, "error": "",
                "workers": [{"index": 0, "pid": me, "alive": True, "restarts": 0},
                            {"index": 1, "pid": dead_pid(), "alive": False, "restarts": 2}],
                "totals": {"requests": 1500, "replies": 1470, "kod_rate": 7, "kod_deny": 0, "kod_rstr": 0,
                           "nts_nak": 2, "drop_rate_limited": 21},
                "clients": CLIENTS, "nts": {"pid": me, "alive": True, "restarts": 0}},
        "web": {"enabled": True, "process": {"pid": me, "restarts": 0}},
        "snmp": {"enabled": True, "process": {"pid": me, "restarts": 1}}}
    env.status = status
    return env


def test_a_viewer_reads_version_uptime_processes_disk_and_ntp_clients(console_env: Any, tmp_path: Path,
                                                                      other: int) -> None:
    env = system_env(console_env, tmp_path, other)
    client = env.login("viewer").client
    response = client.get("/api/v1/system")
    assert response.status_code == 200
    body = response.get_json()
    assert body["version"] == env.status["version"] and body["mode"] == env.status["mode"]
    assert body["uptime_s"] == (env.now_tai_ns - env.status["started_at_tai_ns"]) // 10**9
    assert body["started_at_utc"].endswith("Z") and body["cpus"] >= 1

    rows = {p["label"]: p for p in body["processes"]}
    assert list(rows) == ["Appliance", "NTP worker 0", "NTP worker 1", "NTS-KE server", "Web console", "SNMP agent"]
    assert rows["Appliance"]["pid"] == os.getpid()  # the console runs inside it here
    assert rows["NTP worker 0"]["pid"] == rows["Web console"]["pid"] == other
    for label in ("Appliance", "NTP worker 0", "NTS-KE server", "Web console", "SNMP agent"):
        p = rows[label]
        assert p["alive"] and p["rss_bytes"] > 1_000_000 and p["cpu_s"] > 0 and p["threads"] >= 1, p
    dead = rows["NTP worker 1"]
    assert not dead["alive"] and dead["cpu_percent"] is None and dead["rss_bytes"] is None and dead["restarts"] == 2
    assert rows["SNMP agent"]["restarts"] == 1

    disk = body["disk"]
    assert disk["path"] == str(env.ctx.state_dir) and disk["complete"]
    items = {i["name"]: i["bytes"] for i in disk["items"]}
    assert items["audit.sqlite"] >= 200_000 and items["nts/"] == 3_000
    assert disk["bytes"] == sum(items.values()) and 0 < disk["free_bytes"] <= disk["filesystem_bytes"]
    assert disk["items"][0]["name"] == "audit.sqlite"  # the biggest first
    assert disk["items"][0]["what"].startswith("audit trail")

    ntp = body["ntp"]
    assert set(ntp) == NTP_KEYS and ntp["enabled"] and ntp["requests"] == 1500 and ntp["replies"] == 1470
    assert ntp["request_rate_per_s"] == 12.5 and ntp["window_s"] == 60 and ntp["top"] == CLIENTS["top"]
    assert ntp["kod_sent"] == 9 and ntp["kod"] == {"RATE": 7, "DENY": 0, "RSTR": 0, "NTSN": 2}
    assert ntp["rate_limited"] == 21


def test_cpu_is_a_percentage_over_the_interval_since_the_last_look(console_env: Any, tmp_path: Path,
                                                                  other: int) -> None:
    env = system_env(console_env, tmp_path, other)
    client = env.login("viewer").client
    first = client.get("/api/v1/system").get_json()
    assert first["processes"][0]["cpu_percent"] is None  # nothing to compare with yet
    start = time.monotonic()
    while time.monotonic() - start < 1.2:  # this process (the "appliance") busy for a while
        sum(range(10_000))
    again = client.get("/api/v1/system").get_json()["processes"][0]
    assert again["cpu_percent"] is not None and again["cpu_percent"] > 10.0, again
    assert again["cpu_s"] >= first["processes"][0]["cpu_s"]


def test_the_page_shows_it_and_the_api_needs_a_login(console_env: Any, tmp_path: Path, other: int) -> None:
    env = system_env(console_env, tmp_path, other)
    anonymous = env.browser().client
    assert anonymous.get("/api/v1/system").status_code == 401
    assert anonymous.get("/system").headers["Location"] == "/login?next=/system"
    token = env.token("viewer")
    assert anonymous.get("/api/v1/system", headers={"Authorization": f"Bearer {token}"}).status_code == 200

    page = env.login("viewer").client.get("/system")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    for text in ("<h1>System</h1>", env.status["version"], "NTP worker 1", "not running", "NTS-KE server",
                 "SNMP agent", "audit.sqlite", "nts/", "12.50 /s", "192.0.2.7", "2001:db8:1:2::/64", "700",
                 "(±3)", "RATE 7", "NTSN 2", 'href="/system" class="on"', "system.js"):
        assert text in html, text


def test_without_ntp_or_a_state_directory_the_page_still_answers(console_env: Any) -> None:
    env = console_env()
    env.status = {**env.status, "outputs": {}}
    client = env.login("viewer").client
    body = client.get("/api/v1/system").get_json()
    assert not body["ntp"]["enabled"] and body["ntp"]["top"] == [] and body["ntp"]["request_rate_per_s"] is None
    assert set(body["ntp"]) == NTP_KEYS and body["disk"] is None  # the same shape as when NTP is served
    assert [p["label"] for p in body["processes"]] == ["Appliance"]
    html = client.get("/system").get_data(as_text=True)
    assert "NTP not served" in html
