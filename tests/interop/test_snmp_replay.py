"""SNMPv3 SET replay protection and the SNMP security counters, against Debian's net-snmp.

The appliance runs on its simulated world with the agent on loopback (a v2c community and an SNMPv3 authPriv user
with write access).  net-snmp's snmpset forces holdover through a UDP relay that keeps the datagrams it sent (what an
attacker on the path captures); the holdover is released, then the captured SET is sent again: it must not force
holdover a second time nor reach the audit trail again, it gets no answer, and applianceSnmpReplayDropped counts it.
After the agent's process is killed and restarted, the same bytes are out of the time window (the engine boots
count went up).  Failed authentications of each kind are counted in the standard usmStats and SNMPv2-MIB objects,
read with snmpget, and the same figures are in ``appliance status --json``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.peers import require
from harness.procs import ENV, appliance, free_udp_port, status, stop, wait_for
from harness.ptp_appliance import seed_learned_state
from tests.interop.snmp_relay import Relay, replay
from tests.interop.test_snmp import snmp

pytestmark = [pytest.mark.interop]
REPO = Path(__file__).parents[2]
AUTH, PRIV = "auth-pass-123", "priv-pass-456"
ENGINE = "0x8000000001020399"
V3 = ["-v3", "-l", "authPriv", "-u", "nms", "-a", "SHA-256", "-A", AUTH, "-x", "AES", "-X", PRIV]
FAST = ["--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3"]
USM_STATS = (1, 3, 6, 1, 6, 3, 15, 1, 1)  # SNMP-USER-BASED-SM-MIB usmStats (RFC 3414)
COUNTERS = {"usmStatsNotInTimeWindows": USM_STATS + (2, 0), "usmStatsUnknownUserNames": USM_STATS + (3, 0),
            "usmStatsWrongDigests": USM_STATS + (5, 0), "usmStatsDecryptionErrors": USM_STATS + (6, 0),
            "snmpInBadCommunityNames": (1, 3, 6, 1, 2, 1, 11, 4, 0), "snmpInASNParseErrs": (1, 3, 6, 1, 2, 1, 11, 6, 0)}


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    require("snmpset")
    work = tmp_path_factory.mktemp("snmp-replay")
    state = work / "state"
    state.mkdir()
    seed_learned_state(state)  # the clock may hold over at once
    add = subprocess.run([sys.executable, "-m", "appliance", "snmp", "user-add", "nms", "--write", "--stdin",
                          "--set", f"state_dir={state}"], input=f"{AUTH}\n{PRIV}\n", capture_output=True, text=True,
                         env=ENV, cwd=REPO, timeout=60)
    assert add.returncode == 0, add.stderr
    port = free_udp_port()
    proc = appliance("run", "--set", f"state_dir={state}", *FAST, "--set", "snmp.enabled=true",
                     "--set", f"snmp.engine_id={ENGINE[2:]}", "--set", "snmp.listen=127.0.0.1",
                     "--set", f"snmp.port={port}", "--set", "snmp.community=public")
    try:
        wait_for(state, lambda s: s["clock"]["state"] == "LOCKED" and s["outputs"]["snmp"]["serving"],
                 timeout_s=90)
        yield port, state
    finally:
        code, err = stop(proc)
        assert code == 0, err
        for secret in (AUTH, PRIV):
            assert secret not in err
        assert "Traceback" not in err, err[-5000:]



def holdover_records(state: Path) -> list[str]:
    audit = subprocess.run([sys.executable, "-m", "appliance", "audit", "show", "--last", "200", "--set",
                            f"state_dir={state}"], env=ENV, cwd=REPO, capture_output=True, text=True, timeout=30)
    assert audit.returncode == 0, audit.stderr
    return [line for line in audit.stdout.splitlines() if "forced holdover" in line]


def counters(port: int) -> dict[str, int]:
    """The standard counters as snmpget prints them (numeric OIDs: Debian ships no SNMP-USER-BASED-SM-MIB)."""
    got = snmp("snmpget", *V3, "-On", f"127.0.0.1:{port}", *(".".join(map(str, oid)) for oid in COUNTERS.values()))
    assert got.returncode == 0, got.stderr
    values = dict(re.findall(r"^\.([\d.]+) = Counter32: (\d+)$", got.stdout, re.M))
    return {name: int(values[".".join(map(str, oid))]) for name, oid in COUNTERS.items()}


def replay_dropped(port: int) -> str:
    got = snmp("snmpget", *V3, f"127.0.0.1:{port}", "applianceSnmpReplayDropped.0")
    assert got.returncode == 0, got.stderr
    return got.stdout.strip()


def test_a_captured_holdover_set_sent_again_does_nothing_and_is_counted(agent: tuple[int, Path]) -> None:
    port, state = agent
    assert replay_dropped(port) == "APPLIANCE-MIB::applianceSnmpReplayDropped.0 = Counter64: 0"
    with Relay(port) as relay:
        forced = snmp("snmpset", *V3, f"127.0.0.1:{relay.port}", "applianceClockForcedHoldover.0", "i", "1")
    assert forced.returncode == 0, forced.stderr
    assert status(state)["clock"]["forced_holdover"] is True
    captured = relay.authenticated()
    assert len(captured) == 1, f"{len(relay.sent)} datagrams sent, {len(captured)} authenticated"
    release = snmp("snmpset", *V3, f"127.0.0.1:{port}", "applianceClockForcedHoldover.0", "i", "2")
    assert release.returncode == 0, release.stderr
    assert status(state)["clock"]["forced_holdover"] is False
    records = holdover_records(state)
    assert [("start" in r, "snmp:nms" in r) for r in records] == [(True, True), (False, True)], records

    # the same bytes again, from another port: the agent takes its datagrams in order, so once a GET sent after
    # them is answered, any answer to them would be here already
    answers, seen = replay(port, captured[0], lambda: replay_dropped(port))
    assert answers == [], "the replayed SET was answered"
    assert seen == "APPLIANCE-MIB::applianceSnmpReplayDropped.0 = Counter64: 1"
    assert status(state)["clock"]["forced_holdover"] is False  # holdover not forced again
    assert holdover_records(state) == records  # and nothing more audited
    snmp_status = wait_for(state, lambda s: s["outputs"]["snmp"]["replay_dropped"] == 1, timeout_s=10)
    assert snmp_status["outputs"]["snmp"]["replay_refused"] == 0

    # the agent's process killed and restarted: its replay cache is gone, but the engine boots count went up, so
    # the captured message is outside the time window (RFC 3414 3.2.7a) and USM refuses it
    pid = snmp_status["outputs"]["snmp"]["process"]["pid"]
    boots = int((state / "snmp-engine-boots").read_text())
    os.kill(pid, signal.SIGKILL)
    wait_for(state, lambda s: s["outputs"]["snmp"]["process"]["pid"] not in (None, pid)
             and s["outputs"]["snmp"]["serving"], timeout_s=30)
    assert int((state / "snmp-engine-boots").read_text()) == boots + 1
    before = counters(port)["usmStatsNotInTimeWindows"]
    answers, after = replay(port, captured[0], lambda: counters(port))
    assert after["usmStatsNotInTimeWindows"] == before + 1  # answered with USM's report, nothing run
    assert status(state)["clock"]["forced_holdover"] is False
    assert holdover_records(state) == records


def test_failed_authentications_are_counted_in_the_standard_objects_and_the_status(agent: tuple[int, Path]) -> None:
    port, state = agent
    before = counters(port)
    quick = ["-t", "1", "-r", "0"]
    wrong_key = snmp("snmpget", "-v3", "-l", "authPriv", "-u", "nms", "-a", "SHA-256", "-A", "not-the-key-1",
                     "-x", "AES", "-X", PRIV, *quick, f"127.0.0.1:{port}", "sysDescr.0")
    unknown = snmp("snmpget", "-v3", "-l", "authPriv", "-u", "nobody", "-a", "SHA-256", "-A", AUTH, "-x", "AES",
                   "-X", PRIV, *quick, f"127.0.0.1:{port}", "sysDescr.0")
    community = snmp("snmpget", "-v2c", "-c", "not-the-community", *quick, f"127.0.0.1:{port}", "sysDescr.0")
    # boots and time given instead of discovered: a message out of the time window
    stale = snmp("snmpget", *V3, "-e", ENGINE, "-Z", "999,1", *quick, f"127.0.0.1:{port}", "sysDescr.0")
    for refused in (wrong_key, unknown, community):
        assert refused.returncode != 0 and "STRING" not in refused.stdout, refused.stdout + refused.stderr
    after = counters(port)
    assert after["usmStatsWrongDigests"] == before["usmStatsWrongDigests"] + 1
    assert after["usmStatsUnknownUserNames"] == before["usmStatsUnknownUserNames"] + 1
    assert after["snmpInBadCommunityNames"] == before["snmpInBadCommunityNames"] + 1
    assert after["usmStatsNotInTimeWindows"] >= before["usmStatsNotInTimeWindows"] + 1, stale.stderr
    assert after["usmStatsDecryptionErrors"] == before["usmStatsDecryptionErrors"]
    # the same figures in the status the appliance publishes (the agent reports once a second)
    wait_for(state, lambda s: all(s["outputs"]["snmp"]["standard"][name] >= value
                                  for name, value in after.items()), timeout_s=10)
    walk = snmp("snmpwalk", *V3, "-On", f"127.0.0.1:{port}", ".".join(map(str, USM_STATS)))
    assert walk.returncode == 0, walk.stderr
    assert len(re.findall(r"^\.1\.3\.6\.1\.6\.3\.15\.1\.1\.[1-6]\.0 = Counter32: \d+$", walk.stdout, re.M)) == 6
