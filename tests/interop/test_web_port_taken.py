"""``appliance run`` with the console's port held by another program: the log and the status say which port and what
to do, the MAJOR alarm ``web-not-serving`` is raised, time is still served, and the console serves (the alarm
clears) once the port is free."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import ntplib
import pytest

from harness.procs import ENV, appliance, free_udp_port, stop, wait_for

pytestmark = [pytest.mark.interop]


def alarm(status: dict, code: str) -> dict | None:
    return next((a for a in status["alarms"] if a["code"] == code), None)


def test_a_taken_console_port_is_an_alarm_naming_it_and_time_is_still_served(tmp_path: Path) -> None:
    state = tmp_path / "state"
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    ntp_port = free_udp_port()
    proc = appliance("run", "--set", f"state_dir={state}", "--set", "web.listen=127.0.0.1", "--set", f"web.port={port}",
                     "--set", "ntp.listen=127.0.0.1", "--set", f"ntp.port={ntp_port}", "--set", "ntp.workers=1",
                     "--set", "snmp.enabled=false", "--set", "clock.warmup_s=0")
    try:
        s = wait_for(state, lambda s: alarm(s, "web-not-serving") is not None, timeout_s=60)
        raised = alarm(s, "web-not-serving")
        assert raised is not None and raised["severity"] == "major"
        text = raised["text"]
        assert f"cannot serve on 127.0.0.1 port {port}: TCP port {port} is already in use by another program" in text
        assert f"ss -ltnp 'sport = :{port}'" in text and "web.port" in text and "No socket" not in text
        web = s["outputs"]["web"]
        assert web["serving"] is False and f"port {port}" in web["error"]

        shown = subprocess.run([sys.executable, "-m", "appliance", "status", "--set", f"state_dir={state}"],
                               capture_output=True, text=True, env=ENV, timeout=60).stdout
        assert f"#34  MAJOR    web-not-serving: web console not served: cannot serve on 127.0.0.1 port {port}: " \
               f"TCP port {port} is already in use" in shown
        assert "web console" not in shown.splitlines()[0]  # the verdict's cause is the time's, not the console's
        assert f"Web console     : NOT SERVING: cannot serve on 127.0.0.1 port {port}: TCP port {port} is already in " \
               "use by another program" in shown

        reply = ntplib.NTPClient().request("127.0.0.1", version=4, port=ntp_port, timeout=5)
        assert reply.version == 4  # the appliance goes on serving time

        holder.close()  # the other program lets go: the console serves within its retry period, the alarm clears
        freed = time.monotonic()
        s = wait_for(state, lambda s: s["outputs"]["web"]["serving"] and alarm(s, "web-not-serving") is None,
                     timeout_s=60)
        took_s = time.monotonic() - freed
        assert s["outputs"]["web"]["error"] == ""
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
    finally:
        holder.close()
        code, err = stop(proc)
    assert code == 0, err
    log_line = next(line for line in err.splitlines() if "web console: cannot serve" in line)
    assert log_line.endswith(f"ERROR appliance.web: web console: cannot serve on 127.0.0.1 port {port}: TCP port "
                             f"{port} is already in use by another program (`ss -ltnp 'sport = :{port}'` shows which): "
                             "stop it, or choose another port with web.port; trying again every 10 s")
    assert "alarm web-not-serving raised" in err and "alarm web-not-serving cleared" in err
    assert f"web console on https://127.0.0.1:{port}/" in err
    print(f"console served {took_s:.1f} s after the port was freed")
