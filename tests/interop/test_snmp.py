"""The SNMP agent against Debian's net-snmp: snmpwalk, snmpbulkwalk, snmpget, snmpset and snmptrapd.

The appliance runs on its simulated world with the agent on loopback (v2c community and an SNMPv3 authPriv user
with SHA-256/AES-128), and sends its notifications to an snmptrapd on loopback, v2c and v3.  Walks are compared with
``appliance status --json`` taken at the same moment; notifications are produced the way an operator would:
forced holdover (expiring at once past a 10 ns spec), the sky blocked in the simulated world, spoofing and jamming
drills, a failed console login.  Requests past the agent's response bound (GETBULK with many varbinds or a huge
max-repetitions, a GET whose response would be too large) are answered within it or tooBig, and the appliance
writes no traceback all along.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.peers import require
from harness.procs import ENV, appliance, free_tcp_port, free_udp_port, status, stop, wait_for, wait_udp_bound
from harness.ptp_appliance import seed_learned_state
from harness.snmp_wire import request

pytestmark = [pytest.mark.interop]
REPO = Path(__file__).parents[2]
MIBS = ["-m", "APPLIANCE-MIB:SNMPv2-MIB", "-M", f"{REPO / 'deploy' / 'mibs'}:{REPO / '.cache' / 'ietf-mibs'}"]
AUTH, PRIV = "auth-pass-123", "priv-pass-456"
ENGINE = "0x8000000001020304"
V3 = ["-v3", "-l", "authPriv", "-u", "nms", "-a", "SHA-256", "-A", AUTH, "-x", "AES", "-X", PRIV]
FAST = ["--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3"]
LOCATION = "Data hall 2, row 14, rack B12, U38-U39; " * 7  # sysLocation as long as it goes: 255 octets
REPLY_FACTOR, MIN_REPLY_BYTES, MAX_VARBINDS = 8, 484, 256  # the agent's response bound (appliance/snmp/limits.py)


class Trapd:
    def __init__(self, workdir: Path):
        binary = require("snmptrapd")
        self.port = free_udp_port()
        conf = workdir / "snmptrapd.conf"
        conf.write_text(f"disableAuthorization yes\ncreateUser -e {ENGINE} nms SHA-256 {AUTH} AES {PRIV}\n")
        self.log = workdir / "traps.log"
        env = {**ENV, "SNMP_PERSISTENT_DIR": str(workdir / "persist"), "SNMPCONFPATH": str(workdir)}
        self.proc = subprocess.Popen([binary, "-f", "-Lf", str(self.log), "-C", "-c", str(conf), *MIBS,
                                      "-n", f"127.0.0.1:{self.port}"], env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_udp_bound(self.port, timeout_s=30)  # the appliance's coldStart goes out at once: not into the void

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def wait(self, pattern: str, timeout_s: float = 20.0) -> str:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if re.search(pattern, self.text()):
                return self.text()
            time.sleep(0.2)
        raise AssertionError(f"no notification matching {pattern!r} within {timeout_s} s; got:\n{self.text()[-3000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path, Trapd, Trapd, int]]:
    require("snmpwalk")
    work = tmp_path_factory.mktemp("snmp")
    state = work / "state"
    state.mkdir()
    seed_learned_state(state)  # the clock may hold over at once
    (state / "status.json").write_text("{}")  # a file where the IRIG-B output wants a directory
    add = subprocess.run([sys.executable, "-m", "appliance", "snmp", "user-add", "nms", "--write", "--stdin",
                          "--set", f"state_dir={state}"], input=f"{AUTH}\n{PRIV}\n", capture_output=True, text=True,
                         env=ENV, cwd=REPO, timeout=60)
    assert add.returncode == 0, add.stderr
    (work / "v2").mkdir()
    (work / "v3").mkdir()
    v2, v3 = Trapd(work / "v2"), Trapd(work / "v3")
    port, web = free_udp_port(), free_tcp_port()
    proc = appliance("run", "--set", f"state_dir={state}", *FAST, "--set", "snmp.enabled=true",
                     "--set", f"snmp.engine_id={ENGINE[2:]}",
                     "--set", "snmp.listen=127.0.0.1", "--set", f"snmp.port={port}", "--set", "snmp.community=public",
                     "--set", f"snmp.sys_location={LOCATION}",
                     "--set", f"snmp.trap_receivers=v2c:public@127.0.0.1:{v2.port},v3:nms@127.0.0.1:{v3.port}",
                     "--set", "web.listen=127.0.0.1", "--set", f"web.port={web}",
                     # a holdover spec below the locked bound: a forced holdover expires at once (its trap too)
                     "--set", "clock.holdover_spec_ns=10",
                     # the simulated antenna's position, so a position push is caught without a survey first
                     "--set", "integrity.position=46.2044,6.1432,375", "--set", "integrity.qualification_s=10",
                     # an IRIG-B AM output whose directory cannot be made: an output fault from the start
                     "--set", "irig_out.format=B122", "--set", "irig_out.sink=wav",
                     "--set", f"irig_out.wav_path={state / 'status.json' / 'irig.wav'}")
    try:
        wait_for(state, lambda s: s["clock"]["state"] in ("LOCKED", "HOLDOVER"), timeout_s=60)
        wait_for(state, lambda s: s["clock"]["state"] == "LOCKED", timeout_s=60)
        yield port, state, v2, v3, web
    finally:
        code, err = stop(proc)
        v2.stop()
        v3.stop()
        assert code == 0, err
        for secret in (AUTH, PRIV):
            assert secret not in err
        assert "Traceback" not in err, err[-5000:]


def snmp(tool: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([require(tool), *MIBS, *args], capture_output=True, text=True, timeout=timeout)


def parse(walk: str) -> dict[str, str]:
    out = {}
    for line in walk.splitlines():
        name, sep, value = line.partition(" = ")
        if sep:
            out[name.split("::")[-1]] = value
    return out


@pytest.mark.parametrize("tool,auth", [("snmpwalk", ["-v2c", "-c", "public"]), ("snmpbulkwalk", V3)])
def test_walk_of_the_whole_tree_equals_the_status(agent: tuple, tool: str, auth: list[str]) -> None:
    port, state, *_ = agent
    before = status(state)
    walk = snmp(tool, *auth, f"127.0.0.1:{port}", ".1")
    after = status(state)
    assert walk.returncode == 0, walk.stderr
    assert "Error" not in walk.stderr and walk.stdout.count("\n") > 150
    values = parse(walk.stdout)
    assert before is not None and after is not None
    assert values["sysDescr.0"].startswith("STRING: GNSS grandmaster time server appliance")
    assert values["applianceVersion.0"] == f"STRING: {before['version']}"
    assert values["applianceClockState.0"] in ("INTEGER: locked(3)",), values["applianceClockState.0"]
    assert values["applianceClockClass.0"] in {f"Gauge32: {s['clock']['clock_class']}" for s in (before, after)}
    bound = int(values["applianceClockErrorBound.0"].split()[1])
    low = min(b["clock"]["error_bound_ns"] for b in (before, after))
    high = max(b["clock"]["error_bound_ns"] for b in (before, after))
    assert low - 50 <= bound <= high + 50  # it moves a little from second to second
    assert values["applianceRcvName.0"] == f"STRING: {before['receiver']['name']}"
    sats = [k for k in values if k.startswith("applianceSatUsed.")]
    assert len(sats) == len(before["satellites"])
    used = sum(1 for k in sats if values[k].endswith("true(1)"))
    assert used == sum(1 for s in before["satellites"] if s["used"])
    outputs = {values[k].split(": ", 1)[1] for k in values if k.startswith("applianceOutputName.")}
    assert outputs == {n for n in ("ntp", "ptp", "irig", "web", "audit") if n in before["outputs"]}
    active = sum(1 for a in before["alarms"] if a["raised"])
    assert values["applianceAlarmsActive.0"] == f"Gauge32: {active} alarms"
    assert int(values["applianceNtpReplies.0"].split()[1]) <= after["outputs"]["ntp"]["totals"]["replies"]
    # NTPv4-MIB (RFC 5907), not loaded here: by number
    assert values["mib-2.197.1.2.2.0"] == "Gauge32: 1"  # ntpEntStatusStratum
    assert values["mib-2.197.1.2.1.0"] == "INTEGER: 5"  # ntpEntStatusCurrentMode: syncToRefclock
    assert values["mib-2.197.1.1.2.0"] == f'STRING: "{before["version"]}"'  # ntpEntSoftwareVersion


def test_get_over_v2c_and_v3_and_refusals(agent: tuple) -> None:
    port, *_ = agent
    for auth in (["-v2c", "-c", "public"], V3):
        got = snmp("snmpget", *auth, f"127.0.0.1:{port}", "sysUpTime.0", "applianceClockState.0",
                   "applianceRcvSatellitesUsed.0")
        assert got.returncode == 0 and "locked(3)" in got.stdout and "Timeticks" in got.stdout, got.stdout + got.stderr
    wrong = snmp("snmpget", "-v2c", "-c", "private", "-t", "1", "-r", "0", f"127.0.0.1:{port}", "sysDescr.0")
    assert wrong.returncode != 0 and "Timeout" in wrong.stderr and wrong.stdout == ""
    bad_key = snmp("snmpget", "-v3", "-l", "authPriv", "-u", "nms", "-a", "SHA-256", "-A", "not-the-key-1", "-x",
                   "AES", "-X", PRIV, "-t", "1", "-r", "0", f"127.0.0.1:{port}", "sysDescr.0")
    assert bad_key.returncode != 0 and "STRING" not in bad_key.stdout
    v2_set = snmp("snmpset", "-v2c", "-c", "public", f"127.0.0.1:{port}", "applianceClockForcedHoldover.0", "i", "1")
    assert v2_set.returncode != 0 and "noAccess" in v2_set.stderr
    no_priv = snmp("snmpget", "-v3", "-l", "noAuthNoPriv", "-u", "nms", "-t", "1", "-r", "0", f"127.0.0.1:{port}",
                   "sysDescr.0")
    assert no_priv.returncode != 0 and "STRING" not in no_priv.stdout


def test_notifications_v2c_and_v3_for_holdover_reference_loss_and_failed_login(agent: tuple) -> None:
    port, state, v2, v3, web = agent
    for trapd in (v2, v3):
        trapd.wait(r"coldStart|warmStart")
        trapd.wait(r"applianceOutputFaultRaised.*applianceOutputName\.irig = STRING: irig.*"
                   r"applianceOutputFaultText\.irig = STRING: .*Not a directory")
    # forced holdover over SNMPv3 SET: holdover entered, and the state change
    done = snmp("snmpset", *V3, f"127.0.0.1:{port}", "applianceClockForcedHoldover.0", "i", "1")
    assert done.returncode == 0, done.stderr
    for trapd in (v2, v3):
        text = trapd.wait(r"applianceHoldoverEntered")
        # the state is read when the notification goes out: past a 10 ns spec the holdover may have expired already
        assert re.search(r"applianceClockStateChange.*applianceClockState.0 = INTEGER: holdover(Expired)?\([45]\)",
                         text)
        trapd.wait(r"applianceHoldoverExpired.*applianceClockErrorBound.0 = Gauge32: \d+ nanoseconds")
    assert status(state)["clock"]["forced_holdover"] is True
    release = snmp("snmpset", *V3, f"127.0.0.1:{port}", "applianceClockForcedHoldover.0", "i", "2")
    assert release.returncode == 0, release.stderr
    # the sky blocked in the simulated world: reference lost, then regained
    world = subprocess.run([sys.executable, "-m", "appliance", "world", "block-sky", "--set", f"state_dir={state}"],
                           env=ENV, cwd=REPO, capture_output=True, text=True, timeout=30)
    assert world.returncode == 0, world.stderr
    for trapd in (v2, v3):
        trapd.wait(r"applianceReferenceLost", timeout_s=30)
        # the reference selector's own notification: GNSS was the only reference, so none is left
        trapd.wait(r"applianceReferenceSwitch.*applianceNotifyText.0 = STRING: \"?gnss -> none: gnss unusable",
                   timeout_s=30)
    subprocess.run([sys.executable, "-m", "appliance", "world", "clear-sky", "--set", f"state_dir={state}"], env=ENV,
                   cwd=REPO, check=True, capture_output=True, timeout=30)
    for trapd in (v2, v3):
        trapd.wait(r"applianceReferenceRegained.*applianceRcvState.0 = INTEGER: fix3d", timeout_s=30)
    # a failed console login
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    page = urllib.request.urlopen(f"https://127.0.0.1:{web}/login", context=context, timeout=10)
    cookie = page.headers["Set-Cookie"].split(";")[0]
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.read().decode()).group(1)
    form = f"csrf_token={token}&user=admin&password=wrong-password-1&next=/".encode()
    request = urllib.request.Request(f"https://127.0.0.1:{web}/login", data=form, method="POST", headers={
        "Cookie": cookie, "Referer": f"https://127.0.0.1:{web}/login",
        "Content-Type": "application/x-www-form-urlencoded"})
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(request, context=context, timeout=10)
    for trapd in (v2, v3):
        trapd.wait(r"authenticationFailure.*failed login for admin")
    # a request with a wrong community: the agent (its own process) tells the appliance, which notifies
    wrong = snmp("snmpget", "-v2c", "-c", "not-the-community", "-t", "1", "-r", "0", f"127.0.0.1:{port}", "sysDescr.0")
    assert wrong.returncode != 0
    for trapd in (v2, v3):
        trapd.wait(r"authenticationFailure.*SNMP authentication failure from 127\.0\.0\.1")
    audit = subprocess.run([sys.executable, "-m", "appliance", "audit", "show", "--last", "50", "--set",
                            f"state_dir={state}"], env=ENV, cwd=REPO, capture_output=True, text=True, timeout=30)
    assert "snmp:nms" in audit.stdout and "forced holdover start" in audit.stdout, audit.stdout
    s = status(state)["outputs"]["snmp"]
    assert s["notifications"] >= 7 and s["send_errors"] == 0, json.dumps(s)
    assert s["serving"] and s["process"]["pid"] not in (None, os.getpid()) and s["process"]["restarts"] == 0, s


def world(state: Path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "appliance", "world", *args, "--set", f"state_dir={state}"],
                          env=ENV, cwd=REPO, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_notifications_for_spoofing_and_jamming_raised_and_cleared(agent: tuple) -> None:
    port, state, v2, v3, web = agent
    world(state, "spoof-position", "200")
    for trapd in (v2, v3):
        trapd.wait(r"applianceSpoofingAlarm.*applianceNotifyText.0 = STRING: .*GNSS spoofing detected: position: "
                   r"fix 200\.0 m from the surveyed home", timeout_s=30)
    assert status(state)["integrity"]["level"] == "spoofed"
    for trapd in (v2, v3):  # the alarm's own notification, its varbinds under the catalogue's stable ID (13)
        trapd.wait(r"applianceAlarmRaised.*applianceAlarmCode\.13 = STRING: \"?gnss-spoofing.*"
                   r"applianceAlarmSeverity\.13 = INTEGER: critical\(1\)", timeout_s=30)
    row = snmp("snmpget", "-v2c", "-c", "public", f"127.0.0.1:{port}", "applianceAlarmCode.13",
               "applianceAlarmSeverity.13", "applianceAlarmProbableCause.13", "applianceAlarmAcknowledged.13")
    assert row.returncode == 0, row.stderr
    got = parse(row.stdout)
    assert "gnss-spoofing" in got["applianceAlarmCode.13"] and got["applianceAlarmSeverity.13"] == "INTEGER: critical(1)"
    assert "timingProblem" in got["applianceAlarmProbableCause.13"]
    assert got["applianceAlarmAcknowledged.13"] == "INTEGER: false(2)"
    world(state, "stop-attacks")
    for trapd in (v2, v3):
        trapd.wait(r"applianceSpoofingCleared", timeout_s=40)
    world(state, "jam", "15")
    for trapd in (v2, v3):
        trapd.wait(r"applianceJammingAlarm.*applianceNotifyText.0 = STRING: .*GNSS jamming detected", timeout_s=30)
    world(state, "stop-attacks")
    for trapd in (v2, v3):
        trapd.wait(r"applianceJammingCleared", timeout_s=40)
    wait_for(state, lambda s: s["integrity"]["level"] == "ok" and s["integrity"]["usable"], timeout_s=30)


def sizes(dump: str) -> tuple[int, int]:
    """The last request's and response's sizes in bytes, from net-snmp's packet dump (-d)."""
    sent = re.findall(r"^Sending (\d+) bytes", dump, re.M)
    received = re.findall(r"^Received (\d+) byte packet", dump, re.M)
    assert sent and received, dump[-2000:]
    return int(sent[-1]), int(received[-1])


def within_bound(sent: int, received: int) -> bool:
    return received <= max(REPLY_FACTOR * sent, MIN_REPLY_BYTES)


@pytest.mark.parametrize("count", [65, 200])
@pytest.mark.parametrize("auth", [["-v2c", "-c", "public"], V3], ids=["v2c", "v3"])
def test_getbulk_with_65_or_200_varbinds_is_answered_within_the_bound(agent: tuple, count: int,
                                                                       auth: list[str]) -> None:
    port, *_ = agent
    got = snmp("snmpbulkget", "-d", *auth, "-t", "5", "-r", "0", "-Cr5", f"127.0.0.1:{port}", *["system"] * count)
    assert got.returncode == 0 and "Timeout" not in got.stderr, got.stderr[-2000:]
    lines = [line for line in got.stdout.splitlines() if " = " in line]
    # RFC 3416 4.2.3: cut to fit, the first row first (each repeater's successor: sysDescr.0)
    assert 0 < len(lines) <= MAX_VARBINDS
    assert all(line.startswith("SNMPv2-MIB::sysDescr.0 = STRING: GNSS grandmaster") for line in lines[:count])
    assert within_bound(*sizes(got.stderr)), sizes(got.stderr)


def test_getbulk_max_repetitions_10000_is_capped(agent: tuple) -> None:
    port, *_ = agent
    got = snmp("snmpbulkget", "-d", "-v2c", "-c", "public", "-Cr10000", f"127.0.0.1:{port}", "system")
    assert got.returncode == 0, got.stderr[-2000:]
    sent, received = sizes(got.stderr)
    assert within_bound(sent, received) and received <= MIN_REPLY_BYTES, (sent, received)
    names = [line.split(" = ")[0] for line in got.stdout.splitlines() if " = " in line]
    walk = snmp("snmpwalk", "-v2c", "-c", "public", f"127.0.0.1:{port}", ".1")
    assert walk.returncode == 0, walk.stderr
    # what was left out is the end: the answer is the start of the walk, with no gap
    assert 5 <= len(names) and names == [line.split(" = ")[0] for line in walk.stdout.splitlines()][:len(names)]


def test_get_too_large_to_answer_gets_toobig(agent: tuple) -> None:
    port, state, *_ = agent
    before = status(state)["outputs"]["snmp"]["too_big"]
    # net-snmp's snmpget sends at most 128 OIDs: 128 x the longest object fit in one message, and are answered
    got = snmp("snmpget", "-v2c", "-c", "public", f"127.0.0.1:{port}", *["sysLocation.0"] * 128)
    assert got.returncode == 0 and got.stdout.count(f"STRING: {LOCATION[:255]}\n") == 128, got.stderr[-2000:]
    # a bare manager asks more: 256 of them are past the largest message (65507 bytes), 1000 past 256 varbinds
    for count, oid in ((256, "1.3.6.1.2.1.1.6.0"), (1000, "1.3.6.1.2.1.1.1.0")):
        answer = request(port, [oid] * count)
        assert answer is not None, f"no answer to a GET of {count} varbinds"
        assert (answer.error_status, answer.error_index, answer.varbinds) == ("tooBig", 0, [])
    # the agent's process reports its counters once a second: the status shows them within a few reports
    wait_for(state, lambda s: s["outputs"]["snmp"]["too_big"] == before + 2, timeout_s=10)
