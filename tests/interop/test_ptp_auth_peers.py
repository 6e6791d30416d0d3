"""The appliance as a grandmaster signing with the PTP AUTHENTICATION TLV (IEEE 1588-2019 16.14) against linuxptp
4.4's ptp4l and pmc (scripts/get-linuxptp4) with the same security association file.

The appliance runs on its embedded default in one namespace of a veth pair (UDPv4, E2E, software timestamps) with
``ptp.spp``, ``ptp.sa_file`` and ``ptp.active_key_id``; ptp4l 4.4 runs in the other as a slave that never adjusts
the clock (``free_running 1``, no clock capability).

* same key: the slave takes the appliance as its grandmaster and measures a path delay (its Delay_Reqs, signed, are
  answered by signed Delay_Resps); every message of the appliance in the capture ends with linuxptp's
  AUTHENTICATION TLV whose ICV is recomputed here; pmc 4.4 signing with the same file reads the data sets; the
  appliance's status counts what it signed and verified and refuses nothing;
* another key: the slave logs "auth: bad message" and never takes the appliance as a foreign master;
* a slave that does not sign: it follows the signed Announce and Syncs, but the appliance drops its unsigned
  Delay_Reqs (``drop_auth_unsigned``) and unsigned pmc requests get no answer; with ``ptp.auth_accept_unsigned``
  the same slave measures its path delay;
* a broken sa_file is a start-up error naming the problem, and the appliance does not run.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import ptp_harness as h
from harness.procs import ENV
from harness.ptp_appliance import ApplianceGm
from tests.interop.linuxptp4 import requirements
from tests.interop.test_linuxptp4_auth import (ANNOUNCE, BAD_RE, BEST_RE, DELAY_RESP, FOLLOW_UP, FOREIGN_RE, KEY,
                                               OFFSET_RE, OTHER_KEY, SYNC, Ptp4l4, check_signed, ptp_payloads,
                                               sa_file)

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def signing(sa: Path, accept_unsigned: bool = False) -> list[str]:
    return ["ptp.spp=1", f"ptp.sa_file={sa}", "ptp.active_key_id=1",
            f"ptp.auth_accept_unsigned={str(accept_unsigned).lower()}"]


def measured(slave: Ptp4l4):
    """Three offsets with a path delay measured (so a Delay_Resp came back), else None."""
    found = [(int(m[1]), int(m[2])) for line in slave.lines if (m := OFFSET_RE.search(line))]
    return found if len([d for _o, d in found if d != 0]) >= 3 else None


def pmc_config(path: Path, sa: Path | None) -> Path:
    lines = ["[global]", "domainNumber 0"]
    if sa is not None:
        lines += [f"sa_file {sa}", "spp 1", "active_key_id 1"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.timeout(150)
def test_a_ptp4l_4_slave_follows_the_signing_appliance_and_pmc_signs_its_requests(tmp_path: Path) -> None:
    directory = requirements()
    sa = sa_file(tmp_path / "sa.cfg", KEY)
    with h.NetnsPair("pau") as net, ApplianceGm(net.ns_a, net.if_a, tmp_path / "gm", *signing(sa)) as gm:
        identity = gm.identity()
        with h.Capture(net.b, None, tmp_path / "auth.pcapng") as cap, \
                Ptp4l4(net.b, "slave", directory, tmp_path / "slave", sa) as slave:
            assert slave.wait_for_line(BEST_RE, 40)[1] == identity
            slave.wait_until(lambda: measured(slave), 40, "three offsets with a measured path delay")
            blocks = h.pmc(net.b, None, "udp4", 0, ["GET CURRENT_DATA_SET", "GET DEFAULT_DATA_SET"],
                           program=str(directory / "pmc"), extra_args=["-f", str(pmc_config(tmp_path / "pmc.cfg",
                                                                                            sa))])
        assert slave.count(BAD_RE) == 0, slave.log()
        assert {b["id"] for b in blocks} == {"CURRENT_DATA_SET", "DEFAULT_DATA_SET"}, blocks
        security = gm.wait(lambda s: s["outputs"]["ptp"]["security"]["verified"] >= 3, 10)["outputs"]["ptp"][
            "security"]
        assert security["spp"] == 1 and security["key_id"] == 1 and security["algorithm"] == "SHA256-128"
        assert security["signed"] > 10 and security["refused_total"] == 0, security

    sent: set[int] = set()
    for source, message in ptp_payloads(cap.path):
        if source == net.ip4_a:
            sent.add(check_signed(message, KEY))
    assert sent >= {ANNOUNCE, SYNC, FOLLOW_UP, DELAY_RESP}, sent
    frames = h.dissect(cap.path)  # tshark reads the signed messages (the TLV as one it does not know) whole
    assert frames and not any(f["malformed"] for f in frames), [f for f in frames if f["malformed"]][:1]


@pytest.mark.timeout(120)
def test_a_ptp4l_4_slave_with_another_key_refuses_the_appliance(tmp_path: Path) -> None:
    directory = requirements()
    with h.NetnsPair("paw") as net, \
            ApplianceGm(net.ns_a, net.if_a, tmp_path / "gm", *signing(sa_file(tmp_path / "gm-sa.cfg", OTHER_KEY))), \
            Ptp4l4(net.b, "slave", directory, tmp_path / "slave", sa_file(tmp_path / "sa.cfg", KEY)) as slave:
        since = time.monotonic()
        slave.wait_until(lambda: slave.count(BAD_RE) >= 6, 30, "six 'auth: bad message'")
        time.sleep(max(0.0, 5.0 - (time.monotonic() - since)))  # more than announceReceiptTimeout's 3 Announces
        assert slave.count(FOREIGN_RE) == 0 and slave.count(BEST_RE) == 0, slave.log()


@pytest.mark.timeout(150)
def test_unsigned_delay_requests_and_management_are_dropped_unless_accepted(tmp_path: Path) -> None:
    directory = requirements()
    sa = sa_file(tmp_path / "sa.cfg", KEY)
    with h.NetnsPair("pan") as net, ApplianceGm(net.ns_a, net.if_a, tmp_path / "gm", *signing(sa)) as gm, \
            Ptp4l4(net.b, "slave", directory, tmp_path / "slave", None) as slave:
        identity = gm.identity()
        assert slave.wait_for_line(BEST_RE, 40)[1] == identity  # ptp4l without spp reads past the TLV
        gm.wait(lambda s: s["outputs"]["ptp"]["counters"].get("drop_auth_unsigned", 0) >= 3, 20)
        assert measured(slave) is None, "a path delay was measured: an unsigned Delay_Req was answered"
        blocks = h.pmc(net.b, None, "udp4", 0, "GET CURRENT_DATA_SET", timeout_s=3,
                       program=str(directory / "pmc"), extra_args=["-f", str(pmc_config(tmp_path / "pmc.cfg", None))])
        assert blocks == []
        assert gm.ptp()["security"]["refused"].get("unsigned", 0) >= 4
    with h.NetnsPair("paa") as net, \
            ApplianceGm(net.ns_a, net.if_a, tmp_path / "gm2", *signing(sa, accept_unsigned=True)) as gm, \
            Ptp4l4(net.b, "slave", directory, tmp_path / "slave2", None) as slave:
        slave.wait_until(lambda: measured(slave), 40, "three offsets with a measured path delay")
        # the slave's log can be ahead of the appliance's published counters by a status refresh: wait for them
        gm.wait(lambda s: s["outputs"]["ptp"]["security"]["accepted_unsigned"] >= 3, 10)


def test_a_broken_sa_file_is_a_start_up_error_naming_the_problem(tmp_path: Path) -> None:
    sa = tmp_path / "sa.cfg"
    sa.write_text("[security_association]\nspp 1\n1 AES128 HEX:0011\n")
    state = tmp_path / "state"
    out = subprocess.run([sys.executable, "-m", "appliance", "run", "--set", f"state_dir={state}",
                          "--set", "ptp.interface=lo", "--set", "ntp.enabled=false", *sum((["--set", s]
                                                                                           for s in signing(sa)), [])],
                         capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode != 0
    assert "line 3: key 1: AES128 needs a 16-octet key" in out.stderr and "0011" not in out.stderr, out.stderr
