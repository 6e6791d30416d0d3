"""PTP interop harness: network namespaces, linuxptp's ptp4l and pmc, ptpd2, tshark -- for tests and benchmarks.

Everything here runs third-party PTP peers *inside network namespaces this module creates* (and always deletes), and
none of them can adjust this machine's clock:

* every ptp4l gets ``free_running 1`` (linuxptp 3.1.1 opens no clock for adjustment then: no servo output, no
  adjtimex at start-up, no kernel leap or TAI-offset writes -- without it 3.1.1 adjusts CLOCK_REALTIME even as a
  grandmaster) and ``kernel_leap 0``; the config generator refuses ``extra`` settings that would undo either;
* ptpd2 gets ``clock:no_adjust=Y`` and ``clock:no_reset=Y``;
* every process (and ``--candidate-cmd`` in the benchmarks) runs under ``setpriv --bounding-set -sys_time``: even a
  bug could not set or slew the clock (EPERM).

Pieces (see each docstring):

``NetnsPair``      two namespaces joined by a veth pair, IPv4 + IPv6 (nodad), multicast routes.
``NetnsLan``       N member namespaces on a Linux bridge in a hub namespace (group_fwd_mask 0x4000: peer delay's
                   01:80:C2:00:00:0E crosses it), for two-grandmaster failover set-ups.
``Ptp4l``          ptp4l as a measuring slave or a reference grandmaster; log parsed in a reader thread (offsets,
                   servo state, port states, best-master selections); optionally every Sync's offset by polling
                   TIME_STATUS_NP over ptp4l's own Unix socket (its log is decimated above 1 Sync/s, see below).
``pmc``            one-shot management query *over the network* from a namespace; ``parse_pmc`` for its text.
``Ptpd2``          ptpd 2.3.1 as a never-adjusting slave; statistics file parsed (offset, delay, master identity) and
                   the status file (master's clockClass, port state).
``Capture``        dumpcap of PTP (UDP 319/320, EtherType 0x88F7) inside a namespace; ``dissect`` via tshark JSON.
``require``        a tool's path; missing -> skip locally, fail under CI=true (the policy of harness/peers.py).
``summarize``      rms / max|offset| / mean / count after discarding the convergence.

Time stamps: ptp4l 3.1.1 prefixes its log lines with CLOCK_MONOTONIC seconds (``ptp4l[2917.751]: ...``), the same
clock as ``time.monotonic()``; every sample here carries a monotonic time.

linuxptp 3.1.1 facts this relies on (verified against the installed binary and its ptp4l(8)):

* A ``free_running`` slave never leaves UNCALIBRATED: its port goes LISTENING -> UNCALIBRATED on RS_SLAVE and stays
  there (the SLAVE transition needs a locked servo, and there is none); its "master offset" lines always show s0.
  ``wait_slave`` therefore accepts UNCALIBRATED-on-RS_SLAVE as "slave" for a free-running ptp4l.
* Without a servo, ptp4l prints one "master offset" line per 2^(freq_est_interval - logSyncInterval) Syncs, and
  freq_est_interval cannot go below 0: at 16 Sync/s that is one line per 16 Syncs (or only a "rms ... max ..."
  summary line every 16 s).  Slaves therefore poll TIME_STATUS_NP (master_offset, ingress_time) over their Unix
  socket by default (``poll_hz``) and so see every Sync.
* No IEEE C37.238 power-profile options (``power_profile.*`` came with linuxptp 4.x): a 3.1.1 slave neither checks
  nor needs the IEEE_C37_238 TLV; check it with ``dissect``.
* ``dataset_comparison G.8275.x``, ``G.8275.defaultDS.localPriority``, ``G.8275.portDS.localPriority``,
  ``unicast_listen``, ``unicast_master_table``, ``unicast_req_duration``, ``[unicast_master_table]`` with
  ``table_id``/``logQueryInterval``/``UDPv4|UDPv6|L2 <address>``, ``ptp_dst_mac``, ``p2p_dst_mac``, ``masterOnly``,
  ``inhibit_multicast_service``, ``hybrid_e2e`` all exist.
* ptp4l sets IP_MULTICAST_LOOP off: a pmc in the same namespace as a ptp4l does not reach it over UDP; ask from the
  other side (or use ``Ptp4l.pmc_local``, which goes through the Unix socket).

ptpd 2.3.1: IPv4 (multicast/hybrid/unicast) and Ethernet only -- no IPv6.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

_serial = itertools.count()
_live: set[Any] = set()  # started processes and created networks, stopped/deleted at interpreter exit as a last resort
SETPRIV = ["setpriv", "--bounding-set", "-sys_time", "--"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}

# PTP destinations (IEEE 1588-2019 Annex C/D/E)
PTP_UDP4_GROUP = "224.0.1.129"  # all messages but peer delay
PTP_UDP4_PDELAY_GROUP = "224.0.0.107"
PTP_UDP6_GROUP = "ff0e::181"  # ptp4l's default udp6_scope 0x0E
PTP_UDP6_PDELAY_GROUP = "ff02::6b"
L2_FORWARDABLE = "01:1B:19:00:00:00"
L2_NON_FORWARDABLE = "01:80:C2:00:00:0E"  # also the peer-delay address; a Linux bridge needs group_fwd_mask 0x4000
ETHERTYPE_PTP = 0x88F7
CAPTURE_FILTER = "udp port 319 or udp port 320 or ether proto 0x88f7"

TRANSPORTS = {"udp4": "UDPv4", "udp6": "UDPv6", "l2": "L2"}  # appliance name -> ptp4l network_transport
PMC_FLAG = {"udp4": "-4", "udp6": "-6", "l2": "-2"}

# --- policy: missing tools and missing root --------------------------------------------------------------------------


def _skip_or_fail(message: str) -> None:
    from harness.missing import missing  # only tests get here (it imports pytest): the benchmarks check themselves

    missing(message)


def require(tool: str) -> str:
    """The tool's path; missing -> ``pytest.skip`` locally, ``pytest.fail`` when CI=true (as peers.require)."""
    path = shutil.which(tool)
    if path is None:
        _skip_or_fail(f"{tool} is not installed (scripts/test-all installs the Debian peers as root); "
                      "under CI this fails")
    return path  # type: ignore[return-value]


def require_root() -> None:
    """Network namespaces need root: skip locally, fail under CI=true."""
    if os.geteuid() != 0:
        _skip_or_fail("network namespaces need root; under CI this fails")


def require_ptp(*tools: str) -> None:
    """Root plus ip, setpriv and the given tools (default: ptp4l and pmc)."""
    require_root()
    for tool in ("ip", "setpriv", *(tools or ("ptp4l", "pmc"))):
        require(tool)


# --- small process helpers -----------------------------------------------------------------------------------------


def sh(*argv: str, timeout: float = 20.0, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out


def netns_argv(ns: str | None, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside namespace ``ns`` (None or "": the current one)."""
    return ["ip", "netns", "exec", ns, *argv] if ns else list(argv)


def stop_process(proc: subprocess.Popen | None, timeout_s: float = 5.0, sig: int = signal.SIGTERM) -> int | None:
    """Signal the process (its own session/group when it leads one), wait, SIGKILL if it does not go."""
    if proc is None:
        return None
    if proc.poll() is None:
        try:
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL) if os.getpgid(proc.pid) == proc.pid else proc.kill()
            proc.wait(timeout=timeout_s)
    return proc.returncode


@atexit.register
def _cleanup_at_exit() -> None:
    for thing in sorted(_live, key=lambda t: isinstance(t, _Net)):  # processes first, then their namespaces
        with contextlib.suppress(Exception):
            thing._last_resort()


def _ns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists() or name in sh("ip", "netns", "list", check=False).stdout.split()


def _ns_add(name: str) -> None:
    if _ns_exists(name):  # a leftover of an earlier run with the same name (same pid, killed run)
        sh("ip", "netns", "del", name, check=False)
    sh("ip", "netns", "add", name)


# --- network namespaces --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """One namespace's end of the test network."""

    name: str  # role name: "a", "b", or a NetnsLan member name
    ns: str
    iface: str
    ip4: str
    ip6: str
    mac: str = ""

    def argv(self, argv: Sequence[str]) -> list[str]:
        return netns_argv(self.ns, argv)


class _Net:
    """Common part of NetnsPair and NetnsLan: namespaces created here, deleted on exit (also after a failure)."""

    def __init__(self) -> None:
        self.members: dict[str, Member] = {}
        self.created: list[str] = []

    def __getitem__(self, name: str) -> Member:
        return self.members[name]

    def __enter__(self):
        _live.add(self)
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        for ns in reversed(self.created):  # deleting a namespace deletes its interfaces, and veth peers with them
            sh("ip", "netns", "del", ns, check=False)
        self.created.clear()
        _live.discard(self)

    def _last_resort(self) -> None:
        self.close()

    def _add_ns(self, name: str) -> str:
        _ns_add(name)
        self.created.append(name)
        sh("ip", "-n", name, "link", "set", "lo", "up")
        return name

    @staticmethod
    def _address(ns: str, iface: str, ip4: str, ip6: str) -> str:
        sh("ip", "-n", ns, "link", "set", iface, "up")
        sh("ip", "-n", ns, "addr", "add", f"{ip4}/24", "dev", iface)
        sh("ip", "-n", ns, "-6", "addr", "add", f"{ip6}/64", "dev", iface, "nodad")  # usable at once, no DAD wait
        # Multicast leaves through the test link (no default route in these namespaces).
        sh("ip", "-n", ns, "route", "add", "224.0.0.0/4", "dev", iface)
        sh("ip", "-n", ns, "-6", "route", "add", "ff00::/8", "dev", iface, "table", "main")
        link = sh("ip", "-n", ns, "-j", "link", "show", "dev", iface).stdout
        return json.loads(link)[0].get("address", "")

    def run(self, ns: str | Member, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
        """``argv`` started inside namespace ``ns`` (a name, a member name or a Member) via ``ip netns exec``."""
        popen_kwargs.setdefault("env", ENV)
        return subprocess.Popen(netns_argv(self.ns_of(ns), argv), **popen_kwargs)

    def check(self, ns: str | Member, argv: Sequence[str], timeout: float = 20.0) -> subprocess.CompletedProcess:
        return sh(*netns_argv(self.ns_of(ns), argv), timeout=timeout)

    def ns_of(self, ns: str | Member) -> str:
        if isinstance(ns, Member):
            return ns.ns
        return self.members[ns].ns if ns in self.members else ns


def _subnet(prefix: str, serial: int) -> tuple[int, int]:
    """(x, y) of 10.x.y.0/24 and fd00:5054:x:y::/64: from the prefix and the pid/serial (isolated namespaces, so
    clashes would not matter anyway -- distinct subnets only make captures easier to read)."""
    return 100 + zlib.crc32(prefix.encode()) % 100, (os.getpid() * 7 + serial) % 250 + 1


class NetnsPair(_Net):
    """Two namespaces ``<prefix><pid>x<n>a`` / ``...b`` joined by one veth pair (``if_a`` / ``if_b``); IPv4
    10.x.y.1/24 and .2/24, IPv6 fd00:5054:x:y::1/64 and ::2/64 (nodad), loopback up, 224.0.0.0/4 and ff00::/8 routed
    via the veth.  The veth ends are created directly inside the namespaces: the host never sees them.

        with NetnsPair(prefix="apt5") as net:
            gm = Ptp4l(net.a, role="master"); slave = Ptp4l(net.ns_b, net.if_b)
    """

    def __init__(self, prefix: str = "ptp", mtu: int = 1500) -> None:
        super().__init__()
        n = next(_serial)
        tag = f"{os.getpid() % 100000}x{n % 1000}"
        x, y = _subnet(prefix, n)
        self.prefix, self.mtu = prefix, mtu
        self.ns_a, self.ns_b = f"{prefix}{tag}a", f"{prefix}{tag}b"
        self.if_a, self.if_b = f"v{tag}a"[:15], f"v{tag}b"[:15]
        self.ip4_a, self.ip4_b = f"10.{x}.{y}.1", f"10.{x}.{y}.2"
        self.ip6_a, self.ip6_b = f"fd00:5054:{x:x}:{y:x}::1", f"fd00:5054:{x:x}:{y:x}::2"

    def _create(self) -> None:
        for ns in (self.ns_a, self.ns_b):
            self._add_ns(ns)
        sh("ip", "link", "add", self.if_a, "netns", self.ns_a, "mtu", str(self.mtu), "type", "veth", "peer", "name",
           self.if_b, "netns", self.ns_b, "mtu", str(self.mtu))
        for name, ns, iface, ip4, ip6 in (("a", self.ns_a, self.if_a, self.ip4_a, self.ip6_a),
                                          ("b", self.ns_b, self.if_b, self.ip4_b, self.ip6_b)):
            mac = self._address(ns, iface, ip4, ip6)
            self.members[name] = Member(name, ns, iface, ip4, ip6, mac)

    @property
    def a(self) -> Member:
        return self.members["a"]

    @property
    def b(self) -> Member:
        return self.members["b"]


class NetnsLan(_Net):
    """Member namespaces on one Ethernet segment: a Linux bridge ``br0`` in a hub namespace, one veth per member
    (``p<i>`` on the bridge, ``v<i><name>`` in the member), IPv4 10.x.y.(i+1)/24 and IPv6 fd00:5054:x:y::(i+1)/64.

    The bridge: STP off, forward delay 0, multicast snooping off (PTP multicast floods to every member at once), and
    ``group_fwd_mask 0x4000`` so that 01:80:C2:00:00:0E (peer delay; G.8275.1's non-forwardable address) crosses it
    -- a Linux bridge drops 01:80:C2:00:00:0X link-local frames unless told otherwise.  (Peer delay across a bridge
    with more than two P2P ports is not a valid 1588 topology: every Pdelay_Req gets several responders.)

        with NetnsLan(names=("gm1", "gm2", "slave")) as lan:
            lan["gm1"].ns, lan["slave"].iface, lan.ip4("gm2") ...
    """

    GROUP_FWD_MASK = 0x4000  # bit 14: 01:80:C2:00:00:0E

    def __init__(self, names: Sequence[str] = ("gm1", "gm2", "slave"), prefix: str = "ptl", mtu: int = 1500,
                 group_fwd_mask: int = GROUP_FWD_MASK) -> None:
        super().__init__()
        self.fwd_mask = group_fwd_mask
        if len(set(names)) != len(names) or not 1 <= len(names) <= 200:
            raise ValueError(f"member names must be distinct (1..200): {names!r}")
        n = next(_serial)
        tag = f"{os.getpid() % 100000}x{n % 1000}"
        self.prefix, self.mtu, self.names = prefix, mtu, tuple(names)
        self.x, self.y = _subnet(prefix, n)
        self.hub = f"{prefix}{tag}hub"
        self.bridge = "br0"
        self._ns = {name: f"{prefix}{tag}{name}" for name in names}

    def _create(self) -> None:
        self._add_ns(self.hub)
        sh("ip", "-n", self.hub, "link", "add", self.bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0",
           "mcast_snooping", "0", "group_fwd_mask", hex(self.fwd_mask))
        sh("ip", "-n", self.hub, "link", "set", self.bridge, "up")
        for i, name in enumerate(self.names):
            ns = self._add_ns(self._ns[name])
            port, iface = f"p{i}", f"v{i}{name}"[:15]
            sh("ip", "link", "add", port, "netns", self.hub, "mtu", str(self.mtu), "type", "veth", "peer", "name",
               iface, "netns", ns, "mtu", str(self.mtu))
            sh("ip", "-n", self.hub, "link", "set", port, "master", self.bridge)
            sh("ip", "-n", self.hub, "link", "set", port, "up")
            ip4, ip6 = f"10.{self.x}.{self.y}.{i + 1}", f"fd00:5054:{self.x:x}:{self.y:x}::{i + 1:x}"
            mac = self._address(ns, iface, ip4, ip6)
            self.members[name] = Member(name, ns, iface, ip4, ip6, mac)

    def group_fwd_mask(self) -> int:
        text = Path(f"/sys/class/net/{self.bridge}/bridge/group_fwd_mask")  # only valid inside the hub namespace
        out = sh("ip", "netns", "exec", self.hub, "cat", str(text)).stdout.strip()
        return int(out, 0)

    def ns(self, name: str) -> str:
        return self.members[name].ns

    def iface(self, name: str) -> str:
        return self.members[name].iface

    def ip4(self, name: str) -> str:
        return self.members[name].ip4

    def ip6(self, name: str) -> str:
        return self.members[name].ip6


def _where(where: str | Member, iface: str | None) -> tuple[str, str]:
    if isinstance(where, Member):
        return where.ns, iface or where.iface
    if not iface:
        raise ValueError("iface is required when the namespace is given by name")
    return where, iface


# --- ptp4l ---------------------------------------------------------------------------------------------------------

# Settings a ptp4l started here always has; ``extra`` cannot change them.
PTP4L_SAFETY = {"free_running": "1", "kernel_leap": "0"}
# linuxptp 3.1.1 (and ptpd 2.3.1) accept domainNumber 0..127 only (IEEE 1588-2008): C37.238-2017's domain 254 is out
# of their reach -- run the appliance with --set ptp.domain=N (the profile allows 0-255) to test against them.
PTP4L_MAX_DOMAIN = 127

# A reference grandmaster: software timestamps, GNSS-traceable quality (as /work-shared gm-sw.cfg, regenerated here).
REFERENCE_GM = {"priority1": "128", "priority2": "128", "clockClass": "6", "clockAccuracy": "0x21",
                "offsetScaledLogVariance": "0x4E5D", "timeSource": "0x20", "logSyncInterval": "0",
                "logAnnounceInterval": "1", "logMinDelayReqInterval": "0", "logMinPdelayReqInterval": "0"}

# The ptp4l slave settings that match each appliance profile (appliance/data/ptp-profiles/*.toml): a measuring slave
# must agree on domain, transport, delay mechanism, destination MACs and the BMCA's data set comparison.  Message
# intervals are the grandmaster's business (a slave follows the intervals in what it receives); announce-related
# values are given so that the slave's own announce receipt timeout matches the profile's.
PROFILE_SLAVE_OPTIONS: dict[str, dict[str, str]] = {
    "default-e2e": {"domainNumber": "0", "delay_mechanism": "E2E", "logAnnounceInterval": "1",
                    "announceReceiptTimeout": "3", "dataset_comparison": "ieee1588",
                    "ptp_dst_mac": L2_FORWARDABLE},
    "default-p2p": {"domainNumber": "0", "delay_mechanism": "P2P", "logAnnounceInterval": "1",
                    "announceReceiptTimeout": "3", "logMinPdelayReqInterval": "0", "dataset_comparison": "ieee1588",
                    "ptp_dst_mac": L2_FORWARDABLE, "p2p_dst_mac": L2_NON_FORWARDABLE},
    # G.8275.1 allows 01-1B-19-00-00-00 (forwardable) and 01-80-C2-00-00-0E (non-forwardable); the appliance's
    # profile defaults to the forwardable one (ptp.l2_destination=non-forwardable switches): set ptp_dst_mac to
    # L2_NON_FORWARDABLE for that.  A ptp4l slave receives both either way (raw socket on EtherType 0x88F7) and sends
    # its Delay_Req to ptp_dst_mac.  network_transport L2 is the profile's only transport.
    "g8275.1": {"domainNumber": "24", "delay_mechanism": "E2E", "network_transport": "L2",
                "ptp_dst_mac": L2_FORWARDABLE, "dataset_comparison": "G.8275.x",
                "G.8275.defaultDS.localPriority": "128", "G.8275.portDS.localPriority": "128",
                "maxStepsRemoved": "255", "logAnnounceInterval": "-3", "announceReceiptTimeout": "3",
                "logSyncInterval": "-4", "logMinDelayReqInterval": "-4"},
    # G.8275.2: unicast negotiation over UDP; pass unicast_master_table=[gm address] to Ptp4l (it adds the
    # [unicast_master_table] section, unicast_master_table 1 and unicast_req_duration).
    "g8275.2": {"domainNumber": "44", "delay_mechanism": "E2E", "dataset_comparison": "G.8275.x",
                "G.8275.defaultDS.localPriority": "128", "G.8275.portDS.localPriority": "128",
                "maxStepsRemoved": "255", "logAnnounceInterval": "0", "announceReceiptTimeout": "3",
                "logSyncInterval": "0", "logMinDelayReqInterval": "0", "inhibit_multicast_service": "1"},
    # C37.238-2017: Ethernet, P2P, domain 254, 1 Sync and 1 Announce per second.  linuxptp 3.1.1 has no
    # power_profile.* options (linuxptp 4.x has them): this slave ignores the IEEE_C37_238 TLV; check it with
    # dissect().  Nor does 3.1.1 accept domain 254 (PTP4L_MAX_DOMAIN): override domainNumber, and the appliance's
    # ptp.domain, with a domain <= 127.
    "c37.238": {"domainNumber": "254", "delay_mechanism": "P2P", "network_transport": "L2",
                "ptp_dst_mac": L2_FORWARDABLE, "p2p_dst_mac": L2_NON_FORWARDABLE, "logAnnounceInterval": "0",
                "announceReceiptTimeout": "3", "logSyncInterval": "0", "logMinPdelayReqInterval": "0",
                "dataset_comparison": "ieee1588"},
}

# A ptp4l grandmaster standing in for the appliance in each profile (to validate tests before the appliance serves).
PROFILE_MASTER_OPTIONS: dict[str, dict[str, str]] = {
    "default-e2e": {**PROFILE_SLAVE_OPTIONS["default-e2e"], "logSyncInterval": "0", "logMinDelayReqInterval": "0"},
    "default-p2p": {**PROFILE_SLAVE_OPTIONS["default-p2p"], "logSyncInterval": "0"},
    "g8275.1": {**PROFILE_SLAVE_OPTIONS["g8275.1"], "masterOnly": "1"},
    "g8275.2": {**{k: v for k, v in PROFILE_SLAVE_OPTIONS["g8275.2"].items()}, "masterOnly": "1",
                "unicast_listen": "1"},
    "c37.238": {**PROFILE_SLAVE_OPTIONS["c37.238"]},
}

PROFILE_TRANSPORTS = {"default-e2e": ("udp4", "udp6", "l2"), "default-p2p": ("udp4", "udp6", "l2"),
                      "g8275.1": ("l2",), "g8275.2": ("udp4", "udp6"), "c37.238": ("l2",)}

_PREFIX = r"^ptp4l\[(?P<t>\d+\.\d+)\]: "
OFFSET_RE = re.compile(_PREFIX + r"master offset\s+(?P<offset>-?\d+) s(?P<state>\d) freq\s+(?P<freq>[+-]?\d+) "
                       r"path delay\s+(?P<delay>-?\d+)")
STATE_RE = re.compile(_PREFIX + r"port (?P<port>\d+): (?P<old>[A-Z_]+) to (?P<new>[A-Z_]+) on (?P<event>\S+)")
BEST_RE = re.compile(_PREFIX + r"selected best master clock (?P<id>\S+)")
LOCAL_RE = re.compile(_PREFIX + r"selected local clock (?P<id>\S+) as best master")
FOREIGN_RE = re.compile(_PREFIX + r"port (?P<port>\d+): new foreign master (?P<id>\S+)")
# Printed instead of "master offset" lines once a summary spans several updates (free-running: above 1 Sync/s).
SUMMARY_RE = re.compile(_PREFIX + r"rms\s+(?P<rms>\d+) max\s+(?P<max>\d+) freq\s+(?P<freq>[+-]?\d+) \+/-\s+"
                        r"(?P<freq_sd>\d+)(?: delay\s+(?P<delay>-?\d+) \+/-\s+(?P<delay_sd>\d+))?")


class OffsetSample(NamedTuple):
    """One offset measurement of a slave.  ``t``: CLOCK_MONOTONIC seconds (time.monotonic()); servo_state: "s0",
    "s1", "s2" (a free-running ptp4l only ever shows s0); source: "log" or "pmc"."""

    t: float
    offset_ns: int
    path_delay_ns: float
    servo_state: str = "s0"
    freq_ppb: float = 0.0
    source: str = "log"


class PortTransition(NamedTuple):
    t: float
    port: int
    old: str
    new: str
    event: str

    def __str__(self) -> str:
        return f"port {self.port}: {self.old} to {self.new} on {self.event}"


class Summary(NamedTuple):
    """ptp4l's own statistics line ("rms 893 max 1957 freq -3 +/- 513 delay 2196 +/- 398")."""

    t: float
    rms_ns: int
    max_abs_ns: int
    freq_ppb: int
    freq_sd_ppb: int
    delay_ns: int | None
    delay_sd_ns: int | None


class GmSelection(NamedTuple):
    t: float
    identity: str  # clock identity as ptp4l prints it: 001122.fffe.334455
    local: bool  # "selected local clock ... as best master"


def parse_ptp4l_line(line: str) -> (OffsetSample | PortTransition | GmSelection | Summary | tuple[str, float, str]
                                     | None):
    """One ptp4l log line -> OffsetSample, PortTransition, GmSelection, Summary, ("foreign", t, port identity) or
    None."""
    line = line.rstrip("\n")
    if m := OFFSET_RE.search(line):
        return OffsetSample(float(m["t"]), int(m["offset"]), float(m["delay"]), f"s{m['state']}", float(m["freq"]))
    if m := STATE_RE.search(line):
        return PortTransition(float(m["t"]), int(m["port"]), m["old"], m["new"], m["event"])
    if m := BEST_RE.search(line):
        return GmSelection(float(m["t"]), m["id"], False)
    if m := LOCAL_RE.search(line):
        return GmSelection(float(m["t"]), m["id"], True)
    if m := FOREIGN_RE.search(line):
        return ("foreign", float(m["t"]), m["id"])
    if m := SUMMARY_RE.search(line):
        return Summary(float(m["t"]), int(m["rms"]), int(m["max"]), int(m["freq"]), int(m["freq_sd"]),
                       int(m["delay"]) if m["delay"] is not None else None,
                       int(m["delay_sd"]) if m["delay_sd"] is not None else None)
    return None


def ptp4l_config(role: str = "slave", transport: str = "udp4", delay: str = "E2E", domain: int = 0,
                 uds_address: str = "/var/run/ptp4l", extra: Mapping[str, Any] | None = None,
                 unicast_master_table: Sequence[str] | None = None, unicast_req_duration: int = 60,
                 log_query_interval: int = 2, unicast_listen: bool = False) -> str:
    """The text of a ptp4l 3.1.1 config file.  ``extra`` adds or overrides [global] keys (not the safety ones)."""
    if role not in ("slave", "master"):
        raise ValueError(f"role must be slave or master: {role!r}")
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {sorted(TRANSPORTS)}: {transport!r}")
    if delay.upper() not in ("E2E", "P2P", "AUTO"):
        raise ValueError(f"delay must be E2E or P2P: {delay!r}")
    glob: dict[str, str] = {**PTP4L_SAFETY, "time_stamping": "software", "uds_address": uds_address,
                            "network_transport": TRANSPORTS[transport], "delay_mechanism": delay.upper(),
                            "domainNumber": str(domain), "use_syslog": "0", "verbose": "1"}
    if role == "slave":
        glob.update({"slaveOnly": "1", "freq_est_interval": "0"})  # one "master offset" line per Sync at <= 1/s
    else:
        glob.update(REFERENCE_GM)
    if unicast_listen:
        glob["unicast_listen"] = "1"
    for key, value in (extra or {}).items():
        value = str(value)
        if key in PTP4L_SAFETY and value != PTP4L_SAFETY[key]:
            raise ValueError(f"{key} {value}: refused, ptp4l here must never adjust the clock")
        if key == "time_stamping" and value != "software":
            raise ValueError("only software timestamping works on veth in namespaces")
        glob[key] = value
    if not 0 <= int(glob["domainNumber"]) <= PTP4L_MAX_DOMAIN:
        raise ValueError(f"domainNumber {glob['domainNumber']}: linuxptp 3.1.1 accepts 0..{PTP4L_MAX_DOMAIN} only "
                         "(C37.238's 254 included); set the grandmaster's domain into that range")
    if unicast_master_table:
        glob["unicast_master_table"] = "1"
        glob["unicast_req_duration"] = str(unicast_req_duration)
    lines = ["# generated by harness/ptp_harness.py: never adjusts the clock", "[global]"]
    lines += [f"{k:<32} {v}" for k, v in glob.items()]
    if unicast_master_table:
        lines += ["", "[unicast_master_table]", "table_id                         1",
                  f"logQueryInterval                 {log_query_interval}"]
        lines += [f"{TRANSPORTS[transport]:<32} {address}" for address in unicast_master_table]
    return "\n".join(lines) + "\n"


class _LogProcess:
    """A child whose merged stdout/stderr is read line by line in a thread; ``_parse(line)`` hook per line."""

    name = "process"

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader: threading.Thread | None = None
        self.started_mono = math.nan

    def _start(self, argv: list[str]) -> None:
        self.argv = argv
        self.started_mono = time.monotonic()
        _live.add(self)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     text=True, bufsize=1, env=ENV, start_new_session=True, errors="replace")
        self._reader = threading.Thread(target=self._read, name=f"{self.name}-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line)
                try:
                    self._parse(line)
                except Exception as exc:  # a parser bug must not kill the reader
                    self.lines.append(f"[harness: parse error {exc!r}]\n")
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _parse(self, line: str) -> None:
        pass

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        with self._cond:
            return "".join(self.lines)

    def tail(self, n: int = 30) -> str:
        with self._cond:
            return "".join(self.lines[-n:])

    def wait_until(self, predicate, timeout_s: float, what: str):
        """The first truthy ``predicate()`` (evaluated under the log lock) within ``timeout_s``; AssertionError
        with the log tail on timeout or if the process exits first."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                value = predicate()
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{self.name}: {what}: not within {timeout_s} s; log tail:\n{self.tail(40)}")
                if self.proc is not None and self.proc.poll() is not None and not (
                        self._reader and self._reader.is_alive()):
                    raise AssertionError(f"{self.name} exited ({self.proc.returncode}) before {what}; log:\n"
                                         f"{self.tail(60)}")
                self._cond.wait(min(remaining, 0.25))

    def wait_for_line(self, regex: str | re.Pattern, timeout_s: float = 30.0, start: int = 0) -> re.Match:
        """The first log line from index ``start`` on matching ``regex`` (re.search)."""
        pattern = re.compile(regex) if isinstance(regex, str) else regex

        def find() -> re.Match | None:
            for line in self.lines[start:]:
                if m := pattern.search(line):
                    return m
            return None
        return self.wait_until(find, timeout_s, f"a line matching {pattern.pattern!r}")

    def stop(self, timeout_s: float = 5.0) -> int | None:
        code = stop_process(self.proc, timeout_s)
        if self._reader is not None:
            self._reader.join(timeout=2)
        _live.discard(self)
        return code

    def _last_resort(self) -> None:
        self.stop(timeout_s=2)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Ptp4l(_LogProcess):
    """linuxptp ptp4l in a namespace, as a measuring slave (``role="slave"``) or a reference grandmaster
    (``role="master"``: clockClass 6, clockAccuracy 0x21, offsetScaledLogVariance 0x4E5D, timeSource 0x20 GNSS,
    priority1 128), software timestamps, never adjusting the clock.  Started at construction (context manager:
    stopped on exit), as ``ip netns exec NS setpriv --bounding-set -sys_time -- ptp4l -f CFG -i IFACE -m -q``.

    ``where``: a Member (``net.a``), a namespace name with ``iface``, or a NetnsPair (masters go to side a, slaves
    to side b).  ``transport``: udp4|udp6|l2.  ``delay``:
    E2E|P2P.  ``extra``: [global] keys (e.g. ``PROFILE_SLAVE_OPTIONS[profile]``, ``{"logSyncInterval": -4}``).
    ``unicast_master_table``: addresses of unicast masters (G.8275.2 style negotiation; table_id 1,
    logQueryInterval ``log_query_interval``, ``unicast_req_duration``); ``unicast_listen``: grant unicast contracts
    (master side).  ``poll_hz``: poll TIME_STATUS_NP + CURRENT_DATA_SET over the Unix socket that often, to see
    every Sync's offset (None: slaves poll at 2.5x max(16/s, ``sync_rate_hint`` or the rate of ``extra``'s
    logSyncInterval) -- a free-running ptp4l logs only one offset per second, or just ``Summary`` lines, above
    1 Sync/s; 0: no polling, offsets from the "master offset" log lines, which carry the servo state).
    """

    name = "ptp4l"

    def __init__(self, where: str | Member | NetnsPair, iface: str | None = None, role: str = "slave",
                 transport: str = "udp4", delay: str = "E2E", domain: int = 0, extra: Mapping[str, Any] | None = None,
                 unicast_master_table: Sequence[str] | None = None, unicast_req_duration: int = 60,
                 log_query_interval: int = 2, unicast_listen: bool = False, poll_hz: float | None = None,
                 sync_rate_hint: float | None = None, label: str = "") -> None:
        super().__init__()
        for tool in ("ptp4l", "setpriv", "ip"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is not installed")
        if isinstance(where, NetnsPair):  # the pair itself: the grandmaster side (a) or the slave side (b)
            where = where.a if role == "master" else where.b
        self.ns, self.iface = _where(where, iface)
        self.role, self.transport, self.delay, self.domain = role, transport, delay.upper(), domain
        self.name = f"ptp4l[{label or role}@{self.ns}]"
        self.dir = Path(tempfile.mkdtemp(prefix="ptp4l-"))
        self.uds = str(self.dir / "ptp4l.sock")
        self.config_text = ptp4l_config(role, transport, delay, domain, self.uds, extra, unicast_master_table,
                                        unicast_req_duration, log_query_interval, unicast_listen)
        self.config_path = self.dir / "ptp4l.cfg"
        self.config_path.write_text(self.config_text)
        # What the config finally says (``extra`` may override the arguments, e.g. with PROFILE_SLAVE_OPTIONS):
        self.domain = int((extra or {}).get("domainNumber", domain))  # management must name the clock's domain
        self.delay = str((extra or {}).get("delay_mechanism", self.delay)).upper()
        self.log_samples: list[OffsetSample] = []
        self.poll_samples: list[OffsetSample] = []
        self.transitions: list[PortTransition] = []
        self.selections: list[GmSelection] = []
        self.foreign: list[tuple[float, str]] = []
        self.summaries: list[Summary] = []
        self._poller: _TimeStatusPoller | None = None
        if poll_hz is None:  # slaves: enough for 16 Sync/s, or 2.5x the rate the caller says the GM sends
            rate = max(16.0, sync_rate_hint or 2.0 ** -int((extra or {}).get("logSyncInterval", 0)))
            poll_hz = 2.5 * rate if role == "slave" else 0.0
        self.poll_hz = poll_hz
        argv = ["ptp4l", "-f", str(self.config_path), "-i", self.iface, "-m", "-q"]
        self._start(netns_argv(self.ns, [*SETPRIV, *argv]))
        if poll_hz > 0:
            self._poller = _TimeStatusPoller(self, poll_hz)
            self._poller.start()

    def _parse(self, line: str) -> None:
        item = parse_ptp4l_line(line)
        if isinstance(item, OffsetSample):
            self.log_samples.append(item)
        elif isinstance(item, PortTransition):
            self.transitions.append(item)
        elif isinstance(item, GmSelection):
            self.selections.append(item)
        elif isinstance(item, Summary):
            self.summaries.append(item)
        elif isinstance(item, tuple):
            self.foreign.append((item[1], item[2]))

    # --- results ---

    def samples(self) -> list[OffsetSample]:
        """Every offset seen: polled samples (one per Sync) when polling, else the log's "master offset" lines."""
        with self._cond:
            return list(self.poll_samples if self._poller is not None else self.log_samples)

    def offsets_ns(self) -> list[tuple[float, int, float]]:
        """(monotonic time, offset ns, path delay ns) per sample; ``samples()`` adds servo state and source."""
        return [(s.t, s.offset_ns, s.path_delay_ns) for s in self.samples()]

    def port_states(self) -> list[str]:
        """The port state transitions as ptp4l logs them: "port 1: LISTENING to UNCALIBRATED on RS_SLAVE"."""
        with self._cond:
            return [str(t) for t in self.transitions]

    def port_state(self, port: int = 1) -> str:
        with self._cond:
            states = [t.new for t in self.transitions if t.port == port]
        return states[-1] if states else "INITIALIZING"

    def selected_gm(self, include_local: bool = False) -> str | None:
        """Clock identity of the best master ptp4l selected last (``selected best master clock X``); None when it
        last selected itself (``selected local clock X as best master``) unless ``include_local``."""
        with self._cond:
            if not self.selections:
                return None
            last = self.selections[-1]
        return last.identity if include_local or not last.local else None

    def foreign_masters(self) -> list[str]:
        """Port identities from "new foreign master" lines, in order."""
        with self._cond:
            return [pid for _, pid in self.foreign]

    def wait_slave(self, timeout_s: float = 60.0, samples: int = 1) -> float:
        """Seconds from the start until the port reached SLAVE -- for a free-running ptp4l (all of them here)
        UNCALIBRATED on RS_SLAVE, which is as far as 3.1.1 gets without a servo -- and then ``samples`` offsets
        arrived after it."""

        def reached() -> float | None:
            hit = next((t for t in self.transitions if t.new == "SLAVE" or (
                t.new == "UNCALIBRATED" and t.event == "RS_SLAVE")), None)
            if hit is None:
                return None
            after = [s for s in (self.poll_samples if self._poller else self.log_samples) if s.t >= hit.t - 0.001]
            return hit.t - self.started_mono if len(after) >= samples else None

        return self.wait_until(reached, timeout_s, "slave state and offsets")

    def wait_master(self, timeout_s: float = 30.0) -> float:
        """Seconds from the start until a port reached MASTER (a grandmaster; ``assuming the grand master role``)."""
        return self.wait_until(lambda: next((t.t - self.started_mono for t in self.transitions if t.new == "MASTER"),
                                            None), timeout_s, "MASTER state")

    def wait_gm(self, identity: str, timeout_s: float = 30.0, after: float = 0.0) -> float:
        """Monotonic time of the first "selected best master clock ``identity``" at or after ``after``."""
        return self.wait_until(lambda: next((s.t for s in self.selections if s.identity == identity and not s.local
                                             and s.t >= after), None), timeout_s, f"selecting {identity}")

    def clock_identity(self, timeout_s: float = 10.0) -> str:
        """This ptp4l's own clock identity (DEFAULT_DATA_SET over its Unix socket)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for block in self.pmc_local("GET DEFAULT_DATA_SET"):
                if "clockIdentity" in block:
                    return block["clockIdentity"]
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: no DEFAULT_DATA_SET over {self.uds}; log:\n{self.tail()}")

    def pmc_local(self, *commands: str, timeout_s: float = 5.0) -> list[dict[str, Any]]:
        """Management over this ptp4l's Unix socket (``pmc -u``), parsed as ``parse_pmc``."""
        local = str(self.dir / f"pmc.{next(_serial)}")
        out = sh("pmc", "-u", "-b", "0", "-d", str(self.domain), "-s", self.uds, "-i", local, *commands,
                 timeout=timeout_s, check=False)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(local)
        return parse_pmc(out.stdout)

    def stop(self, timeout_s: float = 5.0) -> int | None:
        if self._poller is not None:
            self._poller.close()
        code = super().stop(timeout_s)
        if self._poller is not None:
            self._poller.join(timeout=3)
        shutil.rmtree(self.dir, ignore_errors=True)
        return code


class _TimeStatusPoller(threading.Thread):
    """One interactive ``pmc -u`` against a ptp4l's Unix socket, asked GET TIME_STATUS_NP + GET CURRENT_DATA_SET
    (P2P: PORT_DATA_SET) ``hz`` times a second; every new ingress_time (one per Sync) becomes an
    OffsetSample(source="pmc") whose time is the Sync's ingress converted to CLOCK_MONOTONIC."""

    def __init__(self, owner: Ptp4l, hz: float) -> None:
        super().__init__(name=f"{owner.name}-poller", daemon=True)
        self.owner, self.hz = owner, hz
        self.stopping = threading.Event()
        self.proc: subprocess.Popen | None = None
        self.mono_minus_real = time.monotonic() - time.time()  # neither clock is stepped by anything here
        # Path delay: meanPathDelay (E2E) or the port's peerMeanPathDelay (P2P; CURRENT_DATA_SET then says 0).
        self.commands = "GET TIME_STATUS_NP\n" + ("GET PORT_DATA_SET\n" if owner.delay == "P2P" else
                                                    "GET CURRENT_DATA_SET\n")

    def run(self) -> None:
        time.sleep(0.3)  # the socket appears right after start-up
        local = str(self.owner.dir / "pmc-poll")
        self.proc = subprocess.Popen(["pmc", "-u", "-b", "0", "-d", str(self.owner.domain), "-s", self.owner.uds,
                                      "-i", local],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1)
        reader = threading.Thread(target=self._read, daemon=True)
        reader.start()
        try:
            while not self.stopping.is_set() and self.owner.alive():
                try:
                    self.proc.stdin.write(self.commands)
                    self.proc.stdin.flush()
                except (BrokenPipeError, ValueError, OSError):
                    break
                self.stopping.wait(1.0 / self.hz)
        finally:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=2)
            reader.join(timeout=2)

    def close(self) -> None:
        self.stopping.set()

    def _read(self) -> None:
        parser = PmcStream()
        seen: set[int] = set()
        delay = math.nan
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            for block in parser.feed(line):
                if block.get("id") == "CURRENT_DATA_SET":
                    with contextlib.suppress(KeyError, ValueError):
                        delay = float(block["meanPathDelay"])
                elif block.get("id") == "PORT_DATA_SET":
                    with contextlib.suppress(KeyError, ValueError):
                        delay = float(block["peerMeanPathDelay"])
                elif block.get("id") == "TIME_STATUS_NP" and block.get("gmPresent") == "true":
                    ingress = int(block["ingress_time"])
                    if ingress and ingress not in seen:
                        seen.add(ingress)
                        owner = self.owner
                        with owner._cond:
                            state = owner.log_samples[-1].servo_state if owner.log_samples else "s0"
                            owner.poll_samples.append(OffsetSample(ingress / 1e9 + self.mono_minus_real,
                                                                   int(block["master_offset"]), delay, state, 0.0,
                                                                   "pmc"))
                            owner._cond.notify_all()


# --- pmc -------------------------------------------------------------------------------------------------------------

_PMC_HEAD = re.compile(r"^\t(?P<pid>[0-9a-fA-F]{6}\.[0-9a-fA-F]{4}\.[0-9a-fA-F]{6}-\d+) seq (?P<seq>\d+) "
                       r"(?P<action>[A-Z_]+) (?P<tlv>MANAGEMENT_ERROR_STATUS|MANAGEMENT|SIGNALING|unknown-tlv)"
                       r"(?: (?P<rest>.*?))?\s*$")
_PMC_FIELD = re.compile(r"^\t\t(?P<key>\S+)(?:\s+(?P<value>.*?))?\s*$")


class PmcStream:
    """Incremental parser of pmc's output; ``feed(line)`` returns the blocks completed by that line."""

    def __init__(self) -> None:
        self.current: dict[str, Any] | None = None

    def feed(self, line: str) -> list[dict[str, Any]]:
        line = line.rstrip("\n")
        if m := _PMC_HEAD.match(line):
            done = self.flush()
            rest = (m["rest"] or "").split()
            self.current = {"sourcePortIdentity": m["pid"], "seq": int(m["seq"]), "action": m["action"],
                            "tlv": m["tlv"], "id": rest[0] if rest else ""}
            if m["tlv"] == "MANAGEMENT_ERROR_STATUS":
                self.current["error"] = " ".join(rest)
            return done
        if self.current is not None and (m := _PMC_FIELD.match(line)):
            self.current[m["key"]] = m["value"] or ""
            return []
        return self.flush() if line.strip() else []  # "sending: ..." and other lines end a block

    def flush(self) -> list[dict[str, Any]]:
        done, self.current = ([self.current] if self.current else []), None
        return done


def parse_pmc(text: str) -> list[dict[str, Any]]:
    """pmc's printed replies -> one dict per block: ``sourcePortIdentity`` ("d6ce5a.fffe.b18892-1"), ``seq``,
    ``action`` ("RESPONSE"), ``tlv`` ("MANAGEMENT" or "MANAGEMENT_ERROR_STATUS"), ``id`` ("DEFAULT_DATA_SET"), then
    every ``key value`` line as printed ("clockClass": "6", "gm.ClockClass": "6", "portState": "MASTER"); values stay
    text ("0x21", "d6ce5a.fffe.b18892")."""
    parser = PmcStream()
    blocks: list[dict[str, Any]] = []
    for line in text.splitlines():
        blocks += parser.feed(line)
    return blocks + parser.flush()


def pmc(ns: str | Member, iface: str | None, transport: str = "udp4", domain: int = 0,
        command: str | Sequence[str] = "GET DEFAULT_DATA_SET", timeout_s: float = 5.0, settle_s: float = 0.5,
        boundary_hops: int = 0, extra_args: Sequence[str] = (), program: str = "pmc") -> list[dict[str, Any]]:
    """Management over the network from namespace ``ns``: ``pmc -4|-6|-2 -i IFACE -d DOMAIN -b 0 'COMMAND'``; the
    RESPONSE/ACKNOWLEDGE blocks (and MANAGEMENT_ERROR_STATUS ones) parsed by ``parse_pmc``, one per responding port
    identity and command.  pmc runs interactively (its batch mode gives up 100 ms after the last command): the
    answer is collected until ``settle_s`` after the last reply for every command, or ``timeout_s``.  ``program``:
    another pmc (linuxptp 4.x's, to sign with an sa_file given in ``extra_args`` as ``-f CONFIG``)."""
    ns_name, iface = _where(ns, iface)
    commands = [command] if isinstance(command, str) else list(command)
    argv = [program, PMC_FLAG[transport], "-i", iface, "-d", str(domain), "-b", str(boundary_hops), *extra_args]
    proc = subprocess.Popen(netns_argv(ns_name, argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True)
    lock = threading.Lock()
    parser = PmcStream()
    blocks: list[dict[str, Any]] = []
    last = [math.nan]
    sent = [0]

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with lock:
                new = parser.feed(line)
                if _PMC_HEAD.match(line):
                    last[0] = time.monotonic()
                elif line.startswith("sending: "):
                    sent[0] += 1
                blocks.extend(new)
        with lock:
            blocks.extend(parser.flush())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    try:
        assert proc.stdin is not None
        # One command at a time: pmc reads stdin with fgets() but polls the descriptor, so a second line already in
        # its stdio buffer would wait for more input (or be dropped at end of input).
        for i, c in enumerate(commands):
            proc.stdin.write(c + "\n")
            proc.stdin.flush()
            while time.monotonic() < deadline and proc.poll() is None:
                with lock:
                    if sent[0] > i:
                        break
                time.sleep(0.01)
        wanted = {c.split()[1] if len(c.split()) > 1 else c for c in commands}
        while time.monotonic() < deadline and proc.poll() is None:
            with lock:
                answered = {b["id"] for b in blocks} | ({parser.current["id"]} if parser.current else set())
                quiet = time.monotonic() - last[0] >= settle_s
            if quiet and wanted <= answered:
                break
            time.sleep(0.05)
    finally:
        with contextlib.suppress(Exception):
            proc.stdin.close()  # pmc exits 100 ms after stdin closes
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            stop_process(proc)
        reader.join(timeout=2)
    return [b for b in blocks if b.get("action") in ("RESPONSE", "ACKNOWLEDGE")]


# --- ptpd2 -------------------------------------------------------------------------------------------------------

class PtpdStat(NamedTuple):
    """One line of ptpd's statistics file (logged on every Sync "S" and Delay_Resp/Pdelay "D" received)."""

    t_real: float  # unix time of the message (statistics_timestamp_format unix)
    state: str  # slv, uncl, lstn_init, ...
    master: str  # clock identity of the best master, as printed ("001122fffe334455(unknown)/1" -> port kept)
    one_way_delay_ns: float
    offset_ns: float
    kind: str  # "S" or "D"


def parse_ptpd_stats_line(line: str) -> PtpdStat | None:
    """A ptpd 2.3.1 statistics CSV line (timestamp format unix) -> PtpdStat; header / comment lines -> None.
    Columns: Timestamp, State, Clock ID, One Way Delay, Offset From Master, Slave to Master, Master to Slave,
    Observed Drift, Last packet Received, ..."""
    line = line.strip()
    if not line or line.startswith("#") or line.startswith("Timestamp"):
        return None
    cols = [c.strip() for c in line.split(",")]
    try:
        t = float(cols[0])
    except ValueError:
        return None
    if len(cols) < 9:  # state-only lines: "<t>, init," / "<t>, lstn_init, 1"
        return PtpdStat(t, cols[1] if len(cols) > 1 else "", "", math.nan, math.nan, "")
    try:
        return PtpdStat(t, cols[1], cols[2], float(cols[3]) * 1e9, float(cols[4]) * 1e9, cols[8])
    except ValueError:
        return PtpdStat(t, cols[1], cols[2], math.nan, math.nan, cols[8])


def parse_ptpd_status(text: str) -> dict[str, str]:
    """ptpd's status file ("Key   :  value" lines) -> {key: value}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def _ptpd_clock_id(master: str) -> str:
    """"0011:22ff:fe33:4455(unknown)/1" or "001122fffe334455/1" -> "001122.fffe.334455" (ptp4l's spelling)."""
    hexdigits = re.sub(r"[^0-9a-fA-F]", "", re.split(r"[(/]", master)[0]).lower()
    return f"{hexdigits[:6]}.{hexdigits[6:10]}.{hexdigits[10:16]}" if len(hexdigits) == 16 else master


class Ptpd2(_LogProcess):
    """ptpd 2.3.1 as a slave that never adjusts the clock: ``clock:no_adjust=Y`` and ``clock:no_reset=Y`` in its
    config (preset slaveonly, i.e. -s), foreground (-C), under ``setpriv --bounding-set -sys_time``.  Its statistics
    file (one line per Sync and per Delay_Resp) is tailed for offsets and the best master; its status file gives the
    master's clockClass and the port state.  ``transport``: udp4 (multicast) or l2 (ptpd 2.3.1 has no IPv6)."""

    name = "ptpd2"

    def __init__(self, where: str | Member, iface: str | None = None, transport: str = "udp4", delay: str = "E2E",
                 domain: int = 0, extra: Mapping[str, Any] | None = None, label: str = "") -> None:
        super().__init__()
        for tool in ("ptpd", "setpriv", "ip"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is not installed")
        if transport not in ("udp4", "l2"):
            raise ValueError("ptpd 2.3.1 speaks UDP over IPv4 or Ethernet only")
        self.ns, self.iface = _where(where, iface)
        self.name = f"ptpd2[{label or 'slave'}@{self.ns}]"
        self.dir = Path(tempfile.mkdtemp(prefix="ptpd2-"))
        self.stats_path, self.status_path = self.dir / "stats.csv", self.dir / "status"
        settings = {
            "ptpengine:interface": self.iface, "ptpengine:preset": "slaveonly",
            "ptpengine:transport": "ipv4" if transport == "udp4" else "ethernet", "ptpengine:ip_mode": "multicast",
            "ptpengine:delay_mechanism": delay.upper(), "ptpengine:domain": str(domain),
            "clock:no_adjust": "Y", "clock:no_reset": "Y", "clock:drift_handling": "preserve",
            "global:foreground": "Y", "global:ignore_lock": "Y", "global:use_syslog": "N",
            "global:log_file": str(self.dir / "ptpd.log"), "global:statistics_file": str(self.stats_path),
            "global:log_statistics": "Y", "global:statistics_timestamp_format": "unix",
            "global:statistics_log_interval": "0", "global:status_file": str(self.status_path),
            "global:log_status": "Y", "global:status_update_interval": "1",
            "global:lock_directory": str(self.dir),
        }
        for key, value in (extra or {}).items():
            if key in ("clock:no_adjust", "clock:no_reset") and str(value).upper() not in ("Y", "YES", "1", "TRUE"):
                raise ValueError(f"{key}={value}: refused, ptpd here must never adjust the clock")
            settings[key] = str(value)
        self.config_text = "".join(f"{k} = {v}\n" for k, v in settings.items())
        self.config_path = self.dir / "ptpd2.conf"
        self.config_path.write_text(self.config_text)
        self.stats: list[PtpdStat] = []
        self._stats_offset = 0
        self._stats_partial = ""
        self._stop_tail = threading.Event()
        self._start(netns_argv(self.ns, [*SETPRIV, "ptpd", "-c", str(self.config_path), "-C"]))
        self._tail = threading.Thread(target=self._tail_stats, daemon=True)
        self._tail.start()

    def _tail_stats(self) -> None:
        while not self._stop_tail.is_set():
            self._poll_stats_file()
            self._stop_tail.wait(0.1)
        self._poll_stats_file()

    def _poll_stats_file(self) -> None:
        try:
            with open(self.stats_path, errors="replace") as f:
                f.seek(self._stats_offset)
                chunk = f.read()
                self._stats_offset = f.tell()
        except FileNotFoundError:
            return
        *complete, self._stats_partial = (self._stats_partial + chunk).split("\n")
        parsed = [s for s in map(parse_ptpd_stats_line, complete) if s is not None]
        if parsed:
            with self._cond:
                self.stats.extend(parsed)
                self._cond.notify_all()

    def offsets_ns(self) -> list[tuple[float, int, float]]:
        """(monotonic time, offset ns, one-way delay ns) from the Sync lines in slave state."""
        mono_minus_real = time.monotonic() - time.time()
        with self._cond:
            return [(s.t_real + mono_minus_real, int(round(s.offset_ns)), s.one_way_delay_ns) for s in self.stats
                    if s.kind == "S" and s.state == "slv" and not math.isnan(s.offset_ns)]

    def selected_gm(self) -> str | None:
        """The best master's clock identity (ptp4l's spelling) from the latest statistics line in slave state."""
        with self._cond:
            slave = [s for s in self.stats if s.state in ("slv", "uncl")]
        return _ptpd_clock_id(slave[-1].master) if slave else None

    def status(self) -> dict[str, str]:
        try:
            return parse_ptpd_status(self.status_path.read_text(errors="replace"))
        except FileNotFoundError:
            return {}

    def gm_quality(self) -> dict[str, int]:
        """The best master's priority1, priority2 and clockClass from the status file's "GM priority" line
        ("Priority1 128, Priority2 128, clockClass 6"); {} before ptpd has a master."""
        text = self.status().get("GM priority", "")
        return {key: int(value) for key, value in re.findall(r"(Priority1|Priority2|clockClass)\s+(\d+)", text)}

    def gm_clock_class(self) -> int | None:
        return self.gm_quality().get("clockClass")

    def wait_slave(self, timeout_s: float = 60.0, samples: int = 1) -> float:
        """Seconds from the start until ptpd was in slave state ("slv") with ``samples`` Sync lines."""

        def reached() -> float | None:
            slave = [s for s in self.stats if s.state == "slv" and s.kind == "S"]
            if len(slave) < samples:
                return None
            return slave[0].t_real - (time.time() - (time.monotonic() - self.started_mono))
        return self.wait_until(reached, timeout_s, "slave state (slv)")

    def log(self) -> str:
        text = super().log()
        with contextlib.suppress(FileNotFoundError):
            text += (self.dir / "ptpd.log").read_text(errors="replace")
        return text

    def stop(self, timeout_s: float = 5.0) -> int | None:
        code = super().stop(timeout_s)
        self._stop_tail.set()
        self._tail.join(timeout=2)
        shutil.rmtree(self.dir, ignore_errors=True)
        return code


# --- capture and dissection ---------------------------------------------------------------------------------------

class Capture:
    """dumpcap of PTP traffic (``CAPTURE_FILTER``: UDP 319/320 and EtherType 0x88F7) on ``iface`` inside ``ns``,
    written to ``path`` (pcapng).  ``with Capture(ns, iface, path): ...`` or ``start()`` ... ``stop()``; with
    ``duration_s`` dumpcap stops by itself (``wait()``)."""

    def __init__(self, ns: str | Member, iface: str | None, path: str | Path, duration_s: float | None = None,
                 capture_filter: str = CAPTURE_FILTER, max_packets: int = 200_000) -> None:
        self.ns, self.iface = _where(ns, iface)
        self.path = Path(path)
        self.duration_s = duration_s
        tool = "dumpcap" if shutil.which("dumpcap") else "tshark"  # dumpcap: the capture engine without dissection
        self.argv = [tool, "-q", "-i", self.iface, "-f", capture_filter, "-c", str(max_packets), "-w", str(self.path)]
        if duration_s is not None:
            self.argv += ["-a", f"duration:{max(1, int(math.ceil(duration_s)))}"]
        self.proc: subprocess.Popen | None = None
        self.stderr_path = self.path.with_suffix(self.path.suffix + ".log")

    def start(self, timeout_s: float = 15.0) -> Capture:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._err = open(self.stderr_path, "w+")
        _live.add(self)
        self.proc = subprocess.Popen(netns_argv(self.ns, self.argv), stdout=subprocess.DEVNULL, stderr=self._err,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.stderr_path.read_text(errors="replace")
            if "Capturing on" in text or "File:" in text:
                time.sleep(0.3)  # "Capturing on" comes just before the filter is live
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} exited {self.proc.returncode}: {text}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.argv[0]} did not start capturing within {timeout_s} s")

    def wait(self, timeout_s: float | None = None) -> Path:
        assert self.proc is not None
        self.proc.wait(timeout=timeout_s if timeout_s is not None else (self.duration_s or 0) + 15)
        self._err.close()
        _live.discard(self)
        return self.path

    def stop(self) -> Path:
        if self.proc is not None and self.proc.poll() is None:
            time.sleep(0.3)  # let the last frames in
            stop_process(self.proc, timeout_s=10, sig=signal.SIGINT)
        if self.proc is not None and not self._err.closed:
            self._err.close()
        _live.discard(self)
        return self.path

    def _last_resort(self) -> None:
        self.stop()

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def capture(ns: str | Member, iface: str | None, path: str | Path, duration_s: float | None = None,
            capture_filter: str = CAPTURE_FILTER) -> Capture | Path:
    """With ``duration_s``: capture that long and return the file's path; without: a started Capture (``stop()``)."""
    cap = Capture(ns, iface, path, duration_s, capture_filter).start()
    if duration_s is None:
        return cap
    try:
        return cap.wait()
    finally:
        cap.stop()


PTP_MESSAGE_TYPES = {0x0: "Sync", 0x1: "Delay_Req", 0x2: "Pdelay_Req", 0x3: "Pdelay_Resp", 0x8: "Follow_Up",
                     0x9: "Delay_Resp", 0xA: "Pdelay_Resp_Follow_Up", 0xB: "Announce", 0xC: "Signaling",
                     0xD: "Management"}


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json object hook keeping repeated keys (tshark repeats e.g. TLV fields) as lists."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            if not isinstance(out[key], list) or not getattr(out[key], "_dup", False):
                dup = _DupList([out[key]])
                out[key] = dup
            out[key].append(value)
        else:
            out[key] = value
    return out


class _DupList(list):
    _dup = True


def _flatten(node: Any, into: dict[str, Any], prefix: str) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, (dict, _DupList)) or (isinstance(value, list) and value and
                                                        isinstance(value[0], dict)):
                _flatten(value, into, prefix)
            if key.startswith(prefix) and not isinstance(value, dict):
                if isinstance(value, _DupList):
                    scalars = [v for v in value if not isinstance(v, dict)]
                    if scalars:
                        _add(into, key, scalars)
                else:
                    _add(into, key, value)
    elif isinstance(node, list):
        for item in node:
            _flatten(item, into, prefix)


def _add(into: dict[str, Any], key: str, value: Any) -> None:
    if key not in into:
        into[key] = value
    else:
        existing = into[key] if isinstance(into[key], list) else [into[key]]
        into[key] = existing + (value if isinstance(value, list) else [value])


def _walk_expert(node: Any, found: list[dict[str, str]]) -> None:
    if isinstance(node, dict):
        if "_ws.expert.message" in node:
            found.append({"message": str(node.get("_ws.expert.message")),
                          "severity": str(node.get("_ws.expert.severity", "")),
                          "group": str(node.get("_ws.expert.group", ""))})
        for value in node.values():
            _walk_expert(value, found)
    elif isinstance(node, list):
        for item in node:
            _walk_expert(item, found)


EXPERT_ERROR = 0x00800000  # tshark's PI_ERROR severity (as printed in _ws.expert.severity)


def dissect_json(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """tshark ``-T json`` frames (as loaded with repeated keys kept) -> per-frame dicts: ``frame`` number,
    ``time_epoch`` (float), ``src``/``dst`` (IP or MAC), ``message_type`` ("Sync"...), every ``ptp.*`` field flat
    (a repeated field becomes a list), ``malformed`` (tshark flagged the frame malformed, or an expert error),
    ``expert`` (the expert infos)."""
    out: list[dict[str, Any]] = []
    for frame in frames:
        layers = frame.get("_source", {}).get("layers", {})
        info: dict[str, Any] = {}
        fr = layers.get("frame", {})
        info["frame"] = int(fr.get("frame.number", 0) or 0)
        with contextlib.suppress(TypeError, ValueError):
            info["time_epoch"] = float(fr.get("frame.time_epoch"))
        eth, ip, ipv6 = layers.get("eth", {}), layers.get("ip", {}), layers.get("ipv6", {})
        info["eth_src"], info["eth_dst"] = eth.get("eth.src"), eth.get("eth.dst")
        info["src"] = ip.get("ip.src") or ipv6.get("ipv6.src") or eth.get("eth.src")
        info["dst"] = ip.get("ip.dst") or ipv6.get("ipv6.dst") or eth.get("eth.dst")
        info["transport"] = "udp4" if ip else "udp6" if ipv6 else "l2"
        ptp: dict[str, Any] = {}
        _flatten(layers.get("ptp", {}), ptp, "ptp.")
        info.update(ptp)
        mtype = ptp.get("ptp.v2.messagetype")
        if isinstance(mtype, list):
            mtype = mtype[0]
        try:
            info["message_type"] = PTP_MESSAGE_TYPES.get(int(str(mtype), 0), str(mtype)) if mtype is not None else None
        except ValueError:
            info["message_type"] = str(mtype)
        expert: list[dict[str, str]] = []
        _walk_expert(layers, expert)
        info["expert"] = expert
        errors = []
        for e in expert:
            with contextlib.suppress(ValueError):
                if int(e["severity"], 0) >= EXPERT_ERROR:
                    errors.append(e)
        info["malformed"] = "_ws.malformed" in layers or bool(errors) or any(
            "malformed" in e["message"].lower() for e in expert)
        out.append(info)
    return out


def dissect(path: str | Path, display_filter: str = "ptp", timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """``tshark -r PATH -T json -Y ptp`` -> ``dissect_json`` (one dict per PTP frame)."""
    argv = ["tshark", "-n", "-r", str(path), "-T", "json"]
    if display_filter:
        argv += ["-Y", display_filter]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise RuntimeError(f"tshark failed ({out.returncode}): {out.stderr}")
    if not out.stdout.strip():
        return []
    return dissect_json(json.loads(out.stdout, object_pairs_hook=_pairs))


# --- statistics -----------------------------------------------------------------------------------------------------

def summarize(offsets: Iterable[Sequence[Any]], discard_s: float = 5.0, until_s2: bool = True) -> dict[str, Any]:
    """Offset statistics after the convergence.

    ``offsets``: (t, offset_ns, ...) tuples or OffsetSamples (as ``Ptp4l.offsets_ns()`` / ``samples()``).
    Convergence discarded: every sample earlier than ``discard_s`` seconds after the first sample; and, when
    ``until_s2`` and some sample carries servo state "s2" (a servo-driven ptp4l), everything before the first s2
    sample as well.  (The free-running slaves here never reach s2 -- their offsets are measurements without a servo
    -- so for them the time rule alone applies; its 5 s cover the start of the path-delay filter.)

    Returns count, discarded, rms_ns, max_abs_ns, mean_ns, stddev_ns, p99_abs_ns, min_ns, max_ns,
    path_delay_mean_ns, span_s (empty statistics: count 0 and NaNs).
    """
    rows = list(offsets)
    if not rows:
        return _empty_summary(0)
    t0 = rows[0][0]
    start = t0 + discard_s
    if until_s2:
        s2 = [r for r in rows if getattr(r, "servo_state", None) == "s2"]
        if s2:
            start = max(start, s2[0][0])
    kept = [r for r in rows if r[0] >= start]
    if not kept:
        return _empty_summary(len(rows))
    xs = [float(r[1]) for r in kept]
    n = len(xs)
    mean = sum(xs) / n
    absolute = sorted(abs(x) for x in xs)
    delays = [float(r[2]) for r in kept if len(r) > 2 and r[2] is not None and not math.isnan(float(r[2]))]
    return {"count": n, "discarded": len(rows) - n, "rms_ns": math.sqrt(sum(x * x for x in xs) / n),
            "max_abs_ns": absolute[-1], "mean_ns": mean,
            "stddev_ns": math.sqrt(sum((x - mean) ** 2 for x in xs) / n),
            "p99_abs_ns": absolute[min(n - 1, int(round(0.99 * (n - 1))))], "min_ns": min(xs), "max_ns": max(xs),
            "path_delay_mean_ns": sum(delays) / len(delays) if delays else math.nan,
            "span_s": kept[-1][0] - kept[0][0]}


def _empty_summary(discarded: int) -> dict[str, Any]:
    nan = math.nan
    return {"count": 0, "discarded": discarded, "rms_ns": nan, "max_abs_ns": nan, "mean_ns": nan, "stddev_ns": nan,
            "p99_abs_ns": nan, "min_ns": nan, "max_ns": nan, "path_delay_mean_ns": nan, "span_s": 0.0}


def collect(slave: Ptp4l | Ptpd2, duration_s: float, settle_s: float = 0.0) -> list[tuple[float, int, float]]:
    """The slave's offsets from ``settle_s`` after now for ``duration_s`` seconds (sleeps that long, bounded)."""
    begin = time.monotonic() + settle_s
    end = begin + duration_s
    while time.monotonic() < end:
        if not slave.alive():
            raise AssertionError(f"{slave.name} exited while measuring; log:\n{slave.tail(40)}")
        time.sleep(min(0.5, max(0.0, end - time.monotonic())))
    time.sleep(0.2)
    return [o for o in slave.offsets_ns() if begin <= o[0] <= end]
