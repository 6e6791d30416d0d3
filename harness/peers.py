"""Real NTP peers for the interop tests: chronyd (never allowed to touch the clock), network namespaces joined by a
veth pair, tshark captures, and a bare UDP client that can choose its source address and sign its requests.

Safety: chronyd always runs as ``setpriv --bounding-set -sys_time chronyd -x`` (-x: no clock control, and the
capability to set the clock is gone as well), in its own 0700 directory with no command port; test traffic stays on
loopback or inside namespaces created (and always deleted) here.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import itertools
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ntplib
from cryptography.hazmat.primitives import cmac
from cryptography.hazmat.primitives.ciphers import algorithms

from harness.missing import missing
from harness.procs import ENV

_serial = itertools.count()


def require(binary: str) -> str:
    """The binary's path; a missing peer skips the test locally and fails it under CI (where test-all installs it)."""
    path = shutil.which(binary)
    if path is None:
        message = f"{binary} is not installed (scripts/test-all installs the Debian peers as root)"
        missing(message)
    return path


def run(*argv: str, timeout: float = 20.0, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=ENV)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out


def eventually(probe: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.25) -> Any:
    """The first truthy value of ``probe()`` within ``timeout_s``; fails naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"{what}: not within {timeout_s} s; last: {last!r}")


# --- chronyd ---------------------------------------------------------------------------------------------------

@dataclass
class Source:
    mode: str  # ^ server, = peer, # refclock
    state: str  # * selected, + combined, - not combined, ? unusable, x falseticker, ~ too variable
    address: str
    stratum: int
    reach: int  # octal register as printed
    offset_s: float  # last sample, measured (not adjusted for later corrections)
    error_s: float  # chrony's +/- margin


class Chronyd:
    """``chronyd -x`` as an NTP client of the appliance, driven through chronyc on a Unix socket in its directory."""

    def __init__(self, server_line: str, keys: str = "", acquire_from: str = "", extra: list[str] | None = None) -> None:
        for binary in ("chronyd", "chronyc", "setpriv"):
            require(binary)
        self.dir = Path(tempfile.mkdtemp(prefix="chrony-"))  # mode 0700: chronyd refuses anything looser
        os.chmod(self.dir, 0o700)
        self.sock = self.dir / "chronyd.sock"
        lines = [server_line, "cmdport 0", f"bindcmdaddress {self.sock}", f"pidfile {self.dir}/chronyd.pid",
                 f"driftfile {self.dir}/drift", f"logdir {self.dir}"]
        lines += extra or []
        if acquire_from:
            lines.append(f"bindacqaddress {acquire_from}")  # its own client address: its own rate-limit bucket
        if keys:
            (self.dir / "keys").write_text(keys)
            os.chmod(self.dir / "keys", 0o600)
            lines.append(f"keyfile {self.dir}/keys")
        (self.dir / "chrony.conf").write_text("\n".join(lines) + "\n")
        self.log = open(self.dir / "chronyd.log", "w+")
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Chronyd:
        self.proc = subprocess.Popen(["setpriv", "--bounding-set", "-sys_time", "chronyd", "-x", "-d", "-u", "root",
                                      "-f", str(self.dir / "chrony.conf")], stdout=self.log, stderr=subprocess.STDOUT)
        try:
            eventually(lambda: self.sock.exists() or self.proc.poll() is not None, 10, "chronyd command socket")
            assert self.proc.poll() is None, f"chronyd exited at start:\n{self.output()}"
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def output(self) -> str:
        self.log.flush()
        return (self.dir / "chronyd.log").read_text()

    def chronyc(self, *args: str) -> str:
        assert self.proc is not None and self.proc.poll() is None, f"chronyd died:\n{self.output()}"
        return run("chronyc", "-h", str(self.sock), "-n", *args, timeout=10).stdout

    def sources(self) -> list[Source]:
        rows = csv.reader(io.StringIO(self.chronyc("-c", "sources")))
        return [Source(r[0], r[1], r[2], int(r[3]), int(r[5], 8), float(r[8]), float(r[9])) for r in rows if r]

    def source(self) -> Source | None:
        found = self.sources()
        return found[0] if found else None

    def ntpdata(self) -> dict[str, str]:
        """``chronyc ntpdata`` of the (single) source as a name -> text dictionary."""
        out: dict[str, str] = {}
        for line in self.chronyc("ntpdata").splitlines():
            name, sep, value = line.partition(":")
            if sep:
                out[name.strip()] = value.strip()
        return out

    def wait_selected(self, timeout_s: float = 30) -> Source:
        return eventually(lambda: next((s for s in self.sources() if s.state == "*"), None), timeout_s,
                          f"chronyd selecting the appliance (log:\n{self.output()})")


def seconds(field: str) -> float:
    """'+0.000000140 seconds' (an ntpdata value) -> 1.4e-07."""
    return float(field.split()[0])


# --- network namespaces -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NetnsPair:
    ns1: str
    ns2: str
    addr1: str
    addr2: str

    def exec(self, ns: str, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", ns, *argv]


@contextlib.contextmanager
def netns_pair() -> Iterator[NetnsPair]:
    """Two fresh namespaces joined by a veth pair (10.213.X.1/24 and .2/24), loopback up in both; always deleted."""
    require("ip")
    tag = f"{os.getpid() % 100000}x{next(_serial)}"
    ns1, ns2, if1, if2 = f"apl-{tag}-a", f"apl-{tag}-b", f"va{tag}", f"vb{tag}"
    octet = 1 + os.getpid() % 250
    pair = NetnsPair(ns1, ns2, f"10.213.{octet}.1", f"10.213.{octet}.2")
    created: list[str] = []
    try:
        for ns in (ns1, ns2):
            run("ip", "netns", "add", ns)
            created.append(ns)
        # Created directly inside the namespaces: the host's own network never sees either end.
        run("ip", "link", "add", if1, "netns", ns1, "type", "veth", "peer", "name", if2, "netns", ns2)
        for ns, ifname, addr in ((ns1, if1, pair.addr1), (ns2, if2, pair.addr2)):
            run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", ifname)
            run("ip", "-n", ns, "link", "set", ifname, "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")
        yield pair
    finally:
        for ns in created:  # deleting a namespace deletes its end of the veth pair, and with it the pair
            run("ip", "netns", "del", ns, check=False)


# --- tshark -----------------------------------------------------------------------------------------------------

class Capture:
    """``tshark -i lo`` on one UDP port into a file, bounded in packets and seconds."""

    def __init__(self, port: int, directory: Path, max_packets: int = 2000, max_s: int = 30) -> None:
        require("tshark")
        self.file = directory / f"ntp-{port}.pcapng"
        self.argv = ["tshark", "-n", "-i", "lo", "-f", f"udp port {port}", "-c", str(max_packets), "-a",
                     f"duration:{max_s}", "-w", str(self.file)]
        self.max_s = max_s
        self.read = ["tshark", "-n", "-r", str(self.file), "-d", f"udp.port=={port},ntp"]  # NTP off port 123 too
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Capture:
        self.log = open(self.file.with_suffix(".log"), "w+")
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=self.log)

        def started() -> bool:
            text = self.file.with_suffix(".log").read_text()
            assert self.proc.poll() is None, f"tshark exited: {text}"
            return "Capturing on" in text

        try:
            eventually(started, 15, "tshark capturing")
        except BaseException:
            self.__exit__()
            raise
        time.sleep(0.5)  # "Capturing on" is printed just before the capture filter is live
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        time.sleep(0.5)  # let the last replies reach the capture
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=self.max_s + 10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()

    def fields(self, display_filter: str, *fields: str) -> list[list[str]]:
        argv = [*self.read, "-Y", display_filter, "-T", "fields", "-E", "separator=/t"]
        for f in fields:
            argv += ["-e", f]
        return [line.split("\t") for line in run(*argv, timeout=60).stdout.splitlines()]

    def text(self, display_filter: str) -> str:
        return run(*self.read, "-Y", display_filter, timeout=60).stdout


# --- a bare NTP client ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Key:
    id: int
    type: str  # MD5, SHA1, AES128
    secret: bytes

    def line(self) -> str:
        return f"{self.id} {self.type} HEX:{self.secret.hex().upper()}"

    def mac(self, data: bytes) -> bytes:
        if self.type == "AES128":
            signer = cmac.CMAC(algorithms.AES(self.secret))
            signer.update(data)
            return signer.finalize()
        return hashlib.new(self.type.lower(), self.secret + data).digest()


def request(version: int = 4, mode: int = 3, key: Key | None = None, bad_mac: bool = False) -> bytes:
    packet = struct.pack("!BBbb11I", version << 3 | mode, 0, 0, 0, *([0] * 9), 0, 0)
    now = ntplib.system_to_ntp_time(time.time())
    packet = packet[:40] + struct.pack("!II", int(now), int((now % 1) * 2**32))
    if key is not None:
        digest = key.mac(packet)
        packet += struct.pack("!I", key.id) + (bytes(len(digest)) if bad_mac else digest)
    return packet


@dataclass
class Answer:
    stats: ntplib.NTPStats
    data: bytes
    refid: bytes
    sent: bytes

    @property
    def echoes_request(self) -> bool:
        """The origin timestamp is the request's transmit timestamp, bit for bit."""
        return self.data[24:32] == self.sent[40:48]

    @property
    def kod(self) -> str:
        return self.refid.rstrip(b"\0").decode("ascii", "replace") if self.stats.stratum == 0 else ""


def exchange(host: str, port: int, packet: bytes, source: str = "", timeout_s: float = 1.0) -> Answer | None:
    """Send one request (from ``source`` if given) and decode the reply with ntplib; None if nothing came back."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        if source:
            s.bind((source, 0))
        s.settimeout(timeout_s)
        s.sendto(packet, (host, port))
        try:
            data, _ = s.recvfrom(2048)
        except TimeoutError:
            return None
        arrived = ntplib.system_to_ntp_time(time.time())
    stats = ntplib.NTPStats()
    stats.from_data(data)
    stats.dest_timestamp = arrived
    return Answer(stats, data, data[12:16], packet)
