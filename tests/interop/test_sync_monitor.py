"""The sync monitor against real downstream clients: chronyd serving NTP on loopback, and a ptp4l slave answering
linuxptp's NetSync Monitor (nsm of Debian's linuxptp 3.1.1 and of linuxptp 4.x) in a network namespace, each measured
by a running appliance (``appliance run`` on its simulated world, live: true time is the host clock).

Both peers keep the host clock: chronyd runs as ``setpriv --bounding-set -sys_time chronyd -x`` (``peers.Chronyd``)
with ``local stratum 10`` and no sources, so it serves the host clock; ptp4l runs with ``free_running 1`` under the
same setpriv (``ptp_harness.Ptp4l``), ``net_sync_monitor 1`` and ``hybrid_e2e 1`` (ptp4l 3.1.1 refuses NSM without
it).  Each client's true offset from the served time is therefore minus the served clock's own error, which the
simulated appliance knows (``clock.sim_time_error_ns``): the one number both checks compare against.

What is checked: each target's offset and delay in the status, /metrics and the time-quality export; the alarm when
a limit is set too low (1 ns) naming that target and no other; a target nobody answers (a closed port, an address
no host has) unreachable; nsm missing (a bad ``monitor.nsm_path``) said in the target's error.  Under CI=true a
missing peer (chronyd, ptp4l, nsm) fails the test instead of skipping it (``peers.require``).  Every wait is bounded
by what it waits for: a few poll intervals for answers, the clock's own acquisition for a locked clock.
"""

from __future__ import annotations

import csv
import io
import math
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.edge.sync_monitor import SyncMonitorPoller
from appliance.monitor import targets_of
from harness import ptp_harness as h
from harness.peers import Chronyd, eventually, require
from harness.procs import ENV, appliance, free_tcp_port, free_udp_port, stop, wait_for

pytestmark = [pytest.mark.interop, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
INTERVAL_S = 1
POLLS = 3  # answers after the clock is locked before a target's numbers are checked
LOCK_TIMEOUT_S = 60  # the simulated clock acquires in seconds with clock.warmup_s=0; generous for a loaded host
ANSWERS_TIMEOUT_S = 10 * INTERVAL_S + 20  # POLLS answers, plus the appliance's start
FLUSH_S = 10  # the time-quality record is committed this often (audit/service.py)
# Beyond half the exchange's round trip (which bounds any path asymmetry): chronyd's own timestamps (kernel receive
# time, its transmit time read before sending) and the served-time map are good to well under this.
NTP_SLACK_NS = 5_000
# nsm and ptp4l take software timestamps on a veth pair: a few microseconds typically (as the PTP slave test finds);
# nsm reports no round trip to bound it by, so this is the bound of those tests.
NSM_LIMIT_NS = 200_000
SETTINGS = ["--set", "clock.warmup_s=0", "--set", f"monitor.interval_s={INTERVAL_S}", "--set", "monitor.timeout_s=0.5"]


def _chronyd() -> tuple[Chronyd, int]:
    port = free_udp_port()
    return Chronyd("\n".join([f"port {port}", "bindaddress 127.0.0.1", "allow 127.0.0.1", "local stratum 10"])), port


def _row(s: dict[str, Any], target: str) -> dict[str, Any]:
    return next(r for r in s["monitor"] if r["target"] == target)


def _locked_and_answered(targets: list[str]) -> Any:
    """Status predicate: the clock is locked (its served error known) and each target answered POLLS times since."""
    seen: dict[str, int] = {}

    def ready(s: dict[str, Any]) -> bool:
        if s["clock"]["state"] != "LOCKED" or s["clock"].get("sim_time_error_ns") is None:
            return False
        for target in targets:
            answers = _row(s, target)["answers"]
            seen.setdefault(target, answers)
            if answers - seen[target] < POLLS:
                return False
        return True
    return ready


def _scrape(port: int) -> str:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=10) as reply:
        return reply.read().decode()


def _series(text: str, name: str, target: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and f'target="{target}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} for {target} not in /metrics:\n{text[-3000:]}")


# --- NTP --------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ntp_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """An appliance monitoring chronyd twice (once with a 1 ns limit), a closed port, and a PTP slave through an nsm
    that is not there."""
    require("chronyd")
    chrony, port = _chronyd()
    dead_port = free_udp_port()  # nothing listens there: the kernel answers port unreachable
    with chrony:
        probe = SyncMonitorPoller(targets_of([f"127.0.0.1:{port}"], [], 1), 10.0, 1.0, lambda host: host,
                                  lambda tai: tai, lambda _: None)
        eventually(lambda: probe.poll_once()[0].offset_ns is not None, 10, f"chronyd answering:\n{chrony.output()}")
        state, web = tmp_path_factory.mktemp("syncmon-ntp"), free_tcp_port()
        good, strict, dead = f"127.0.0.1:{port}", f"localhost:{port}", f"127.0.0.1:{dead_port}"
        proc = appliance("run", "--set", f"state_dir={state}", *SETTINGS,
                         "--set", f"monitor.ntp_targets={good},{strict},{dead}", "--set", f"monitor.limits={strict}=1",
                         "--set", "monitor.ptp_targets=192.0.2.1", "--set", "monitor.ptp_interface=lo",
                         "--set", "monitor.nsm_path=/nonexistent/nsm",
                         "--set", "web.metrics_public=true", "--set", "web.listen=127.0.0.1",
                         "--set", f"web.port={web}")
        try:
            status = wait_for(state, _locked_and_answered([good, strict]), LOCK_TIMEOUT_S + ANSWERS_TIMEOUT_S)
            yield {"state": state, "web": web, "status": status, "good": good, "strict": strict, "dead": dead,
                   "chrony": chrony}
        finally:
            stop(proc)


def test_each_ntp_client_offset_and_delay_against_the_served_time(ntp_run: dict[str, Any]) -> None:
    s = ntp_run["status"]
    expected_ns = -s["clock"]["sim_time_error_ns"]  # chronyd keeps the host clock: true time here
    for target in (ntp_run["good"], ntp_run["strict"]):
        row = _row(s, target)
        assert row["kind"] == "ntp" and row["error"] == "" and row["last_answer_utc"], row
        assert 0 < row["delay_ns"] < 1_000_000_000, row
        assert abs(row["offset_ns"] - expected_ns) <= row["delay_ns"] / 2 + NTP_SLACK_NS, (row, expected_ns)
    assert _row(s, ntp_run["good"])["state"] == "ok"


def test_a_limit_set_too_low_raises_the_alarm_naming_that_client(ntp_run: dict[str, Any]) -> None:
    s = ntp_run["status"]
    assert _row(s, ntp_run["strict"])["state"] == "over-limit"
    alarms = [a for a in s["alarms"] if a["code"].startswith("monitor-over-limit@")]
    # one alarm per client beyond its limit: the strict one's, none for the good one
    assert [a["code"] for a in alarms] == [f"monitor-over-limit@{ntp_run['strict']}"], alarms
    assert alarms[0]["id"] // 100_000 == 70 and alarms[0]["severity"] == "minor", alarms
    assert f"NTP {ntp_run['strict']} beyond its limit (limit 1 ns" in alarms[0]["text"], alarms


def test_a_client_nobody_answers_for_is_unreachable(ntp_run: dict[str, Any]) -> None:
    dead = _row(ntp_run["status"], ntp_run["dead"])
    assert dead["state"] == "unreachable" and dead["offset_ns"] is None and dead["answers"] == 0, dead
    assert "refused" in dead["error"].lower(), dead


def test_a_missing_nsm_is_said_as_the_ptp_client_error(ntp_run: dict[str, Any]) -> None:
    row = _row(ntp_run["status"], "192.0.2.1")
    assert row["kind"] == "ptp" and row["state"] == "unreachable", row
    assert "'/nonexistent/nsm' not found" in row["error"] and "monitor.nsm_path" in row["error"], row


def test_metrics_show_each_client(ntp_run: dict[str, Any]) -> None:
    text = _scrape(ntp_run["web"])
    s = wait_for(ntp_run["state"], lambda s: True)
    for target in (ntp_run["good"], ntp_run["strict"]):
        assert _series(text, "appliance_monitor_up", target) == 1.0
        offset_s = _series(text, "appliance_monitor_offset_seconds", target)
        delay_s = _series(text, "appliance_monitor_delay_seconds", target)
        assert abs(offset_s * 1e9 + s["clock"]["sim_time_error_ns"]) <= delay_s * 1e9 / 2 + NTP_SLACK_NS, text
    assert _series(text, "appliance_monitor_up", ntp_run["dead"]) == 0.0
    assert math.isnan(_series(text, "appliance_monitor_offset_seconds", ntp_run["dead"]))
    assert f'appliance_alarm{{code="monitor-over-limit@{ntp_run["strict"]}",id="' in text


def test_the_quality_export_has_every_poll(ntp_run: dict[str, Any]) -> None:
    def exported() -> list[dict[str, str]]:
        done = subprocess.run([sys.executable, "-m", "appliance", "quality", "export", "--monitor", "--since", "-10m",
                               "--set", f"state_dir={ntp_run['state']}"], capture_output=True, text=True, env=ENV,
                              cwd=REPO, timeout=60)
        assert done.returncode == 0, done.stderr
        return list(csv.DictReader(io.StringIO(done.stdout)))

    rows = eventually(lambda: (lambda r: r if {x["target"] for x in r} >= {ntp_run["good"], ntp_run["dead"]}
                               else None)(exported()), FLUSH_S * 2 + 10, "monitor rows in the quality export")
    good = [r for r in rows if r["target"] == ntp_run["good"] and r["offset_ns"]]
    assert good and all(r["kind"] == "ntp" and r["delay_ns"] and r["limit_ns"] == "1000000" for r in good), rows[:5]
    dead = [r for r in rows if r["target"] == ntp_run["dead"]]
    assert dead and all(r["state"] == "unreachable" and r["offset_ns"] == "" and r["error"] for r in dead), dead[:3]
    stamps = [int(r["tai_ns"]) for r in rows]
    assert stamps == sorted(stamps)


# --- PTP (nsm) --------------------------------------------------------------------------------------------------
def _nsm(which: str) -> str:
    """Debian's nsm (linuxptp 3.1.1), or linuxptp 4.x's (``LINUXPTP4_DIR``, provisioned by scripts/get-linuxptp4)."""
    if which == "debian":
        return require("nsm")
    from tests.interop.linuxptp4 import ptp4l4

    return str(ptp4l4() / "nsm")


@pytest.fixture(scope="module", params=["debian", "linuxptp4"])
def ptp_run(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """The appliance in namespace a serving PTP and running nsm on its veth end; a ptp4l slave with NSM in namespace
    b following it (free-running: it never adjusts the clock), monitored with a 1 ns limit; and an address no host
    has."""
    h.require_root()
    h.require_ptp("ptp4l")
    nsm = _nsm(request.param)
    with h.NetnsPair(prefix="smp") as net:
        slave = h.Ptp4l(net.b, role="slave", extra={"net_sync_monitor": 1, "hybrid_e2e": 1}, poll_hz=0)
        try:
            slave.wait_for_line(r"INITIALIZING to LISTENING", 10)
            state, absent = tmp_path_factory.mktemp("syncmon-ptp"), net.ip4_b.rsplit(".", 1)[0] + ".77"
            argv = [*h.SETPRIV, sys.executable, "-m", "appliance", "run", "--set", f"state_dir={state}", *SETTINGS,
                    "--set", f"monitor.ptp_targets={net.ip4_b},{absent}", "--set", f"monitor.ptp_interface={net.if_a}",
                    "--set", f"monitor.nsm_path={nsm}", "--set", f"monitor.limits={net.ip4_b}=1",
                    "--set", "ntp.listen=127.0.0.1", "--set", f"ntp.port={free_udp_port()}", "--set", "ntp.workers=1",
                    "--set", "web.enabled=false",
                    # The appliance serves PTP on the same interface: the slave follows it, as a client in the field
                    # does, and nsm shares the port's interface (both bind 319/320 there).
                    "--set", f"ptp.interface={net.if_a}"]
            proc = net.run(net.a, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO),
                           env=ENV)
            try:
                status = wait_for(state, _locked_and_answered([net.ip4_b]), LOCK_TIMEOUT_S + ANSWERS_TIMEOUT_S)
                slave.wait_for_line(r"selected best master clock", 10)  # Announce every 2 s, qualified after 2
                yield {"state": state, "status": status, "slave": net.ip4_b, "absent": absent, "proc": proc,
                       "ptp4l": slave}
            finally:
                code, err = stop(proc)
                assert code == 0, err[-3000:]
        finally:
            slave.stop()


def test_the_ptp_slave_offset_through_nsm(ptp_run: dict[str, Any]) -> None:
    s = ptp_run["status"]
    # The port goes MASTER once no better master was heard for its announce receipt timeout (about 6 s).
    wait_for(ptp_run["state"], lambda now: (now["outputs"].get("ptp") or {}).get("state") == "MASTER", 20)
    row = _row(s, ptp_run["slave"])
    assert row["kind"] == "ptp" and row["error"] == "" and row["answers"] >= POLLS, row
    expected_ns = -s["clock"]["sim_time_error_ns"]  # the free-running slave keeps the host clock
    assert abs(row["offset_ns"] - expected_ns) <= NSM_LIMIT_NS, (row, expected_ns, ptp_run["ptp4l"].tail())
    assert row["delay_ns"] is not None, row  # the slave's own meanPathDelay (0 with no master to measure)


def test_the_ptp_slave_beyond_its_limit_is_alarmed_and_an_absent_one_unreachable(ptp_run: dict[str, Any]) -> None:
    s = ptp_run["status"]
    assert _row(s, ptp_run["slave"])["state"] == "over-limit"
    alarms = [a for a in s["alarms"] if a["code"] == f"monitor-over-limit@{ptp_run['slave']}"]
    assert alarms and f"PTP {ptp_run['slave']} beyond its limit (limit 1 ns" in alarms[0]["text"], alarms
    absent = _row(s, ptp_run["absent"])
    assert absent["state"] == "unreachable" and absent["answers"] == 0, absent
    assert "no NSM answer within" in absent["error"], absent


def test_nsm_is_started_again_when_it_dies(ptp_run: dict[str, Any]) -> None:
    appliance_pid = ptp_run["proc"].pid
    nsm_pids = _children_named(appliance_pid, "nsm")
    assert len(nsm_pids) == 1, nsm_pids
    before = _row(wait_for(ptp_run["state"], lambda s: True), ptp_run["slave"])["answers"]
    subprocess.run(["kill", str(nsm_pids[0])], check=True, timeout=10)  # the nsm this test's appliance started
    s = wait_for(ptp_run["state"], lambda s: _row(s, ptp_run["slave"])["answers"] >= before + 2,
                 ANSWERS_TIMEOUT_S)
    assert _row(s, ptp_run["slave"])["error"] == ""
    again = _children_named(appliance_pid, "nsm")
    assert len(again) == 1 and again != nsm_pids, (nsm_pids, again)


def _children_named(pid: int, name: str) -> list[int]:
    """Descendants of ``pid`` (the appliance under ip netns exec and setpriv) whose command is ``name``."""
    found, todo = [], [pid]
    for _ in range(1000):  # bounded walk
        if not todo:
            break
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                kids = [int(k) for k in task.read_text().split()]
            except OSError:
                continue
            todo += kids
            for kid in kids:
                try:
                    if Path(f"/proc/{kid}/comm").read_text().strip() == name:
                        found.append(kid)
                except OSError:
                    pass
    return sorted(set(found))
