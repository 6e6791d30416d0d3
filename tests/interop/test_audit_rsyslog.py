"""The audit chain anchored in Debian's rsyslog: records forwarded by a running appliance over TCP (RFC 6587 octet
counting) and over TLS (RFC 5425, rsyslog's ossl driver, the collector's CA and a client certificate from the
settings) land in the collector's file; ``appliance audit verify --against`` that file passes for the untouched
chain and names a rollback (the store and its head file replaced with an older copy) and a deletion.

rsyslogd runs as this test's own child (``-n -f <conf> -i <pidfile>`` in the test's temporary directory, listening
on loopback only) and is stopped at the end; it never becomes a system service.
"""

from __future__ import annotations

import glob
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from appliance.audit.remote import parse_log
from appliance.audit.store import AuditStore
from harness.missing import missing
from harness.procs import ENV, appliance, free_tcp_port, stop, wait_for
from harness.pki import Pki, make_pki

pytestmark = [pytest.mark.interop]
RSYSLOGD = "/usr/sbin/rsyslogd"
WAIT_S = 60.0  # the most a wait below may take: a bound on the loop, not a claim about speed
FAST = ["--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3", "--set", "ntp.enabled=false",
        "--set", "web.enabled=false"]
STORE_FILES = ("audit.sqlite", "audit.sqlite.head")


@dataclass(frozen=True)
class Rsyslog:
    tcp_port: int
    tls_port: int
    tcp_log: Path  # what arrived over TCP
    tls_log: Path  # what arrived over TLS
    pki: Pki


def requirements() -> None:
    if not Path(RSYSLOGD).is_file():
        missing(f"{RSYSLOGD} is not installed (apt-get install rsyslog rsyslog-openssl)")
    if not glob.glob("/usr/lib/*/rsyslog/lmnsd_ossl.so") and not glob.glob("/usr/lib/rsyslog/lmnsd_ossl.so"):
        missing("rsyslog's OpenSSL netstream driver is not installed (apt-get install rsyslog-openssl)")


def config(work: Path, pki: Pki, tcp_port: int, tls_port: int) -> str:
    """imptcp (plain, octet-counted frames) and imtcp with the ossl driver, each into its own file, in the format
    that keeps RFC 5424 structured data."""
    return f"""
global(workDirectory="{work}" defaultNetstreamDriverCAFile="{pki.ca}"
       defaultNetstreamDriverCertFile="{pki.server_cert}" defaultNetstreamDriverKeyFile="{pki.server_key}")
module(load="imptcp")
module(load="imtcp" streamDriver.name="ossl" streamDriver.mode="1" streamDriver.authMode="x509/certvalid")
input(type="imptcp" address="127.0.0.1" port="{tcp_port}" ruleset="tcp")
input(type="imtcp" address="127.0.0.1" port="{tls_port}" ruleset="tls")
ruleset(name="tcp") {{ action(type="omfile" file="{work}/tcp.log" template="RSYSLOG_SyslogProtocol23Format") }}
ruleset(name="tls") {{ action(type="omfile" file="{work}/tls.log" template="RSYSLOG_SyslogProtocol23Format") }}
"""


@pytest.fixture(scope="module")
def rsyslog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rsyslog]:
    requirements()
    work = tmp_path_factory.mktemp("rsyslog")
    pki = make_pki(work / "pki")
    tcp_port, tls_port = free_tcp_port(), free_tcp_port()
    (work / "rsyslog.conf").write_text(config(work, pki, tcp_port, tls_port))
    proc = subprocess.Popen([RSYSLOGD, "-n", "-f", str(work / "rsyslog.conf"), "-i", str(work / "rsyslogd.pid")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for port in (tcp_port, tls_port):
            _listening(proc, port)
        yield Rsyslog(tcp_port, tls_port, work / "tcp.log", work / "tls.log", pki)
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _listening(proc: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"rsyslogd exited ({proc.returncode}): {proc.communicate()[0]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"rsyslogd not listening on {port} within {WAIT_S} s"
            time.sleep(0.1)


def verify_against(state: Path, log: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance", "audit", "verify", "--against", str(log), "--set",
                           f"state_dir={state}"], capture_output=True, text=True, env=ENV, timeout=60)


def head_seq(state: Path) -> int:
    with AuditStore(state / "audit.sqlite", create=False) as store:
        head = store.head()
        assert head is not None
        return head.seq


def collected_up_to(log: Path, seq: int) -> None:
    """Wait until the collector's file holds the record ``seq`` (rsyslog writes each batch as it ends)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        held = parse_log(log.read_text(encoding="utf-8", errors="replace").splitlines()) if log.exists() else None
        if held is not None and any(seq in copy.hashes for copy in held.chains.values()):
            return
        assert time.monotonic() < deadline, f"record {seq} not in {log} within {WAIT_S} s"
        time.sleep(0.1)


def keep_copy(state: Path, copy: Path) -> None:
    copy.mkdir()
    for name in STORE_FILES:
        shutil.copy2(state / name, copy / name)


def put_back(copy: Path, state: Path) -> None:
    for name in STORE_FILES:
        shutil.copy2(copy / name, state / name)


def run_appliance(state: Path, rsyslog: Rsyslog, tls: bool = False) -> None:
    """One run of the appliance, forwarding to rsyslog over TCP (or TLS, with the test CA and a client certificate,
    as the settings table says), until its records have left, then stopped."""
    pki = rsyslog.pki
    target = [f"audit.syslog=tls://127.0.0.1:{rsyslog.tls_port}", f"audit.syslog_ca={pki.ca}",
              f"audit.syslog_cert={pki.client_cert}", f"audit.syslog_key={pki.client_key}"] if tls else \
        [f"audit.syslog=tcp://127.0.0.1:{rsyslog.tcp_port}"]
    proc = appliance("run", "--set", f"state_dir={state}", *(x for t in target for x in ("--set", t)), *FAST)
    try:
        wait_for(state, lambda s: (s["outputs"].get("audit") or {}).get("syslog", {}).get("sent", 0) >= 2
                 and s["outputs"]["audit"]["syslog"]["queued"] == 0, timeout_s=WAIT_S)
    finally:
        code, err = stop(proc)
    assert code == 0, err


def test_a_running_appliance_anchors_its_chain_in_rsyslog_over_tcp(tmp_path: Path, rsyslog: Rsyslog) -> None:
    state, older = tmp_path / "state", tmp_path / "older"
    state.mkdir()
    run_appliance(state, rsyslog)
    keep_copy(state, older)
    run_appliance(state, rsyslog)  # more records, the first run's stop among them
    last = head_seq(state)
    collected_up_to(rsyslog.tcp_log, last)

    untouched = verify_against(state, rsyslog.tcp_log)
    assert untouched.returncode == 0, untouched.stdout + untouched.stderr
    assert f"audit anchor {rsyslog.tcp_log} OK: {last} record(s) of seq 1..{last} match the remote log hash for " \
           f"hash; local head seq {last}" in untouched.stdout

    put_back(older, state)  # root replaces the store and its head file with the older, consistent copy
    rolled_back = verify_against(state, rsyslog.tcp_log)
    assert rolled_back.returncode == 1
    assert rolled_back.stdout.startswith("audit chain OK: ")  # the local chain alone does not tell
    assert f"audit anchor {rsyslog.tcp_log} ROLLBACK: the remote log holds records up to seq {last} " \
           in rolled_back.stdout
    assert f"but the local chain ends at seq {head_seq(state)}: records {head_seq(state) + 1}..{last} are gone " \
           "from the box" in rolled_back.stdout

    for name in STORE_FILES:  # root deletes both
        (state / name).unlink()
    deleted = verify_against(state, rsyslog.tcp_log)
    assert deleted.returncode == 1
    assert deleted.stdout.startswith(f"audit anchor {rsyslog.tcp_log} DELETION: the local audit chain is gone (no "
                                     f"audit store at {state / 'audit.sqlite'}) but the remote log holds chain ")


def test_a_running_appliance_anchors_its_chain_over_tls_with_a_client_certificate(tmp_path: Path,
                                                                                  rsyslog: Rsyslog) -> None:
    state, older = tmp_path / "state", tmp_path / "older"
    state.mkdir()
    run_appliance(state, rsyslog, tls=True)
    keep_copy(state, older)
    run_appliance(state, rsyslog, tls=True)
    last = head_seq(state)
    collected_up_to(rsyslog.tls_log, last)

    untouched = verify_against(state, rsyslog.tls_log)
    assert untouched.returncode == 0, untouched.stdout + untouched.stderr
    assert f"OK: {last} record(s) of seq 1..{last} match the remote log hash for hash" in untouched.stdout

    put_back(older, state)
    rolled_back = verify_against(state, rsyslog.tls_log)
    assert rolled_back.returncode == 1
    assert f"ROLLBACK: the remote log holds records up to seq {last} " in rolled_back.stdout
    assert f"the local chain ends at seq {head_seq(state)}: records {head_seq(state) + 1}..{last} are gone from " \
           "the box" in rolled_back.stdout

    for name in STORE_FILES:
        (state / name).unlink()
    deleted = verify_against(state, rsyslog.tls_log)
    assert deleted.returncode == 1 and "DELETION: the local audit chain is gone" in deleted.stdout
