"""A spoofing drill on ``appliance run`` (embedded default), driven from the command line as an operator would.

The appliance cross-checks its GNSS time with a real chronyd on loopback.  Once the clock is locked (restarted on a
learned state, so it can hold over) and the phase checks have a minute of PPS, ``appliance world spoof-step`` moves
the simulated receiver's time by 2 us: ``appliance status`` must show the spoofing alarm and the reference rejected, the clock in HOLDOVER; ``world stop-attacks`` gives the true sky
back, and after the qualification time the reference is used again and the clock locks without a step.  The
operator's override (``appliance integrity reject`` / ``auto``) and the audit trail are checked on the way.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.peers import Chronyd
from harness.procs import ENV, appliance, free_udp_port, stop, wait_for
from harness.ptp_appliance import seed_learned_state

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chrony_port() -> Iterator[int]:
    port = free_udp_port()
    with Chronyd(f"port {port}\nbindaddress 127.0.0.1\nallow 127.0.0.1\nlocal stratum 1"):
        yield port


def cli(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance", *args, "--set", f"state_dir={state}"],
                          capture_output=True, text=True, env=ENV, timeout=30)


def alarms(s: dict) -> set[str]:
    return {a["code"] for a in s["alarms"]}


def test_spoofing_drill_from_the_command_line(tmp_path: Path, chrony_port: int) -> None:
    state = tmp_path / "state"
    state.mkdir()
    seed_learned_state(state)  # holdover-capable from the start (a restart), so the drill need not wait for learning
    app = appliance("run", "--set", f"state_dir={state}", "--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3",
                    "--set", "integrity.qualification_s=20",
                    "--set", f"integrity.ntp_servers=127.0.0.1:{chrony_port}", "--set", "integrity.ntp_interval_s=16")
    try:
        # Locked, holdover-capable, the phase checks have their oscillator line (a minute of PPS) and the NTP
        # cross-check has answered.
        s = wait_for(state, lambda s: s["clock"]["state"] == "LOCKED" and s["integrity"]["anchor"] is not None
                     and "offset_ms" in (s["integrity"]["ntp"] or {}), timeout_s=120)
        steps = s["clock"]["steps"]
        assert s["integrity"]["level"] == "ok" and s["integrity"]["usable"]
        # chronyd serves the host clock, the world's truth, which the served clock follows to far better than 0.1 ms:
        # the offset is within half its exchange's own round trip, the uncertainty it came with (chronyd advertises
        # no root delay or dispersion), however long a busy host made that round trip; 0.1 ms for ntplib's floats.
        ntp = s["integrity"]["ntp"]
        assert abs(ntp["offset_ms"]) <= ntp["uncertainty_ms"] + 0.1, ntp
        assert "NTP check" in cli(state, "status").stdout

        out = cli(state, "world", "spoof-step", "2000")
        assert out.returncode == 0 and "spoof-step +2000 ns" in out.stdout, out.stderr
        s = wait_for(state, lambda s: s["integrity"]["level"] == "spoofed" and s["clock"]["state"] == "HOLDOVER",
                     timeout_s=15)
        assert not s["integrity"]["usable"] and "gnss-spoofing" in alarms(s)
        assert any(r.startswith("phase-jump:") for r in s["integrity"]["reasons"])
        assert abs(s["clock"]["sim_time_error_ns"]) < 100  # the clock let go before the attacker moved it
        text = cli(state, "status").stdout
        assert "Integrity       : SPOOFED, reference REJECTED" in text and "gnss-spoofing" in text

        assert cli(state, "world", "stop-attacks").returncode == 0
        s = wait_for(state, lambda s: s["integrity"]["level"] == "ok" and s["integrity"]["usable"], timeout_s=60)
        assert "gnss-spoofing" not in alarms(s)
        s = wait_for(state, lambda s: s["clock"]["state"] == "LOCKED", timeout_s=30)
        assert s["clock"]["steps"] == steps  # the way back slews
        assert abs(s["clock"]["sim_time_error_ns"]) < 100

        out = cli(state, "integrity", "reject")
        assert out.returncode == 0 and "reference rejected" in out.stdout, out.stderr
        s = wait_for(state, lambda s: s["clock"]["state"] == "HOLDOVER", timeout_s=10)
        assert s["integrity"]["override"] == "reject" and "gnss-integrity-override" in alarms(s)
        assert cli(state, "integrity", "auto").returncode == 0
        wait_for(state, lambda s: s["integrity"]["override"] == "auto" and s["integrity"]["usable"]
                 and "gnss-integrity-override" not in alarms(s), timeout_s=10)

        shown = cli(state, "audit", "show", "--last", "300").stdout
        assert "-> spoofed, reference rejected: phase-jump" in shown
        assert "simulated world: spoof-step +2000 ns" in shown and "integrity reject" in shown
    finally:
        code, err = stop(app)
    assert code == 0, err
