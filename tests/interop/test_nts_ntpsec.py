"""NTPsec's ntpd as an NTS client of the appliance: it does the NTS-KE (TLS 1.3, trusting the appliance's
self-signed certificate as its CA), learns the NTP port from the Port record, and its NTS-authenticated polls are
answered (its peer statistics mark each sample authentic and reachable, and it selects the appliance).

ntpd binds UDP port 123, so both run in a network namespace of their own (loopback only).  ntpd runs without
CAP_SYS_TIME and with ``disable ntp``: it never adjusts the clock.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness import ptp_harness as h
from harness.peers import eventually
from harness.procs import ENV, status, stop, wait_for
from tests.interop.ntpsec import ntpd

pytestmark = [pytest.mark.interop, pytest.mark.slow]

NTP_PORT, KE_PORT = 12399, 14460
AUTHENTIC, REACHABLE = 0x2000, 0x1000  # peer status word (ntpq's "flash"/status bits in peerstats)


def peer_samples(stats: Path) -> list[int]:
    """The status word of each peerstats line for 127.0.0.1."""
    out = []
    for path in stats.glob("peerstats*"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[2] == "127.0.0.1":
                out.append(int(parts[3], 16))
    return out


@pytest.mark.timeout(150)
def test_ntpsec_synchronises_to_the_appliance_over_nts(tmp_path: Path) -> None:
    binary = ntpd()
    h.require_root()
    state, stats = tmp_path / "state", tmp_path / "stats"
    stats.mkdir()
    with h.NetnsPair("nsc") as net:
        ns = net.ns_a
        app = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "appliance", "run",
                                "--set", f"state_dir={state}", "--set", "clock.warmup_s=0",
                                "--set", "clock.qualify_s=3", "--set", "ntp.listen=127.0.0.1",
                                "--set", f"ntp.port={NTP_PORT}", "--set", "ntp.workers=1",
                                "--set", "ntp.nts_enabled=true", "--set", f"ntp.nts_port={KE_PORT}",
                                "--set", "web.enabled=false"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        client = None
        try:
            wait_for(state, lambda s: s["outputs"]["ntp"].get("nts", {}).get("alive") is True, 30)
            cert = state / "nts" / "cert.pem"
            conf = tmp_path / "ntp.conf"
            conf.write_text(f"server 127.0.0.1:{KE_PORT} nts ca {cert} minpoll 4 maxpoll 4 iburst\n"
                            "disable ntp\n"
                            f"statsdir {stats}/\nstatistics peerstats\nfilegen peerstats file peerstats type none "
                            "enable\n")
            log = tmp_path / "ntpd.log"
            client = subprocess.Popen(["ip", "netns", "exec", ns, *h.SETPRIV, str(binary), "-n", "-c", str(conf),
                                       "-l", str(log)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            eventually(lambda: len([s for s in peer_samples(stats) if s & (AUTHENTIC | REACHABLE)
                                    == AUTHENTIC | REACHABLE]) >= 4, 60, "four authentic, reachable samples")
            text = log.read_text()
            assert "NTSc: Got 8 cookies, length 104, aead=15." in text, text[-3000:]
            assert f"NTSc: Using port {NTP_PORT}" in text
            eventually(lambda: any((s >> 8) & 0x7 == 6 for s in peer_samples(stats)), 40,
                       "the appliance selected as the system peer")
            totals = status(state)["outputs"]["ntp"]["totals"]
            assert totals["nts"] >= 4 and totals["nts_nak"] == 0
        finally:
            if client is not None:
                stop(client)
            code, err = stop(app)
        assert code == 0, err
