"""PTP unicast capacity: how many ITU-T G.8275.2 unicast-negotiated clients a grandmaster serves at 1 Sync/s
without a missed Sync, the appliance against ptp4l, same load generator, same run.

    .venv/bin/python bench/ptp_unicast.py [--counts 100,500,1000,2000,4000,8000] [--duration 30] [--json FILE]
        [--candidate-cmd CMD | --candidate-cmd ptp4l] [--skip-reference] [--repeat 1] [--refine 0] [--max-minutes 15]
        [--ftrace] [--canary]

Needs root (network namespaces), gcc, ptp4l (linuxptp), taskset, setpriv and ethtool.  Two network namespaces
joined by a veth pair: the grandmaster's side has 10.77.255.254/16, the clients' side one address per emulated
client from 10.77.0.1 up.  The load generator (bench/ptpunicast.c, compiled here) runs in the clients' namespace on CPU 1 and
emulates every client with its own address and clockIdentity: IEEE 1588-2019 clause 16.1 negotiation of Announce,
Sync and Delay_Resp (one Signaling message with three REQUEST_UNICAST_TRANSMISSION TLVs, --ramp new clients a
second, grants renewed at half their duration), a Delay_Req a second per client, and CANCEL_UNICAST_TRANSMISSION at
the end.  The grandmaster runs in its namespace on CPU 0, under `setpriv --bounding-set -sys_time`: nothing here can
adjust the clock, and no packet leaves the two namespaces.

For each grandmaster, a ladder of client counts, a fresh grandmaster per count, --repeat runs each: ramp, --warmup s,
then a --duration s measurement window in which each client expects exactly duration x Sync rate Syncs.  The ladder
stops at the first count with a missed Sync, a denied or unanswered negotiation; --refine N then bisects N times
between the last count passed and the first failed.  Printed per run: granted, denied, unanswered, missed Syncs (and
clients missing one), late Sync slots (a gap over 1.5 intervals: a stall, even if the Syncs owed came later),
Follow_Up, Delay_Resp and Announce ratios, datagrams the grandmaster's sockets dropped (its namespace's UDP
RcvbufErrors) and the load generator's own drops (0, or the run says nothing about the grandmaster); then for each
grandmaster the largest count served with zero missed Syncs, the ratio candidate / reference, and the figure to beat:
4,000 clients, the default unicast client limit of a commercial PTP grandmaster card.

Per run also, over the measurement window: the grandmaster's own Sync lateness -- each Sync's kernel transmit
timestamp minus the slot it was due in, both on the served clock, kept by the port as a bounded histogram
(outputs/ptp/lateness.py) and read from the appliance's status over its control socket when the window opens and
after it closes (the difference is the window's: Syncs measured, p50, p99, max, count over 1 ms; n/a for ptp4l) --
Delay_Reqs left unanswered, and the CPU time of the grandmaster (every thread of its process and of its child
processes, /proc/<pid>/task/*/schedstat) per client per second, in us (over a veth pair it includes the kernel's
delivery of the grandmaster's packets into the clients' namespace, which runs in the sender's context; it also
includes the appliance's fixed work, so it reads high at small counts).  Then the target of issue 23, PASS or FAIL:
10,000 clients (TARGET_CLIENTS) all granted, no Sync missed or late at the clients, no Delay_Req or negotiation
unanswered, and no Sync over 1 ms after its slot that the grandmaster is answerable for; on FAIL, each count that
broke it and how.  A Sync is the host's, not the grandmaster's, when the native sender thread (SCHED_FIFO) was held
off its CPU for longer than the Sync's lateness beyond 1 ms between its slot's timer and the send: the thread's wall
time not covered by its own CPU time while it ran (appliance/edge/ptp/_syncsend.c: with the kernel's paravirtual
steal accounting, the hypervisor's steal, or a higher-priority thread's).  The table prints them as `held`, the rest
as `own` (judged), and the hypervisor's steal from the grandmaster's CPU in the window (/proc/stat).  The steal
accounting does not see every stretch a vCPU is not run (nor an idle vCPU woken late), so with --ftrace the
grandmaster CPU's scheduling and interrupts are traced over the window instead (harness/kernel_trace.py
silent_timer_gaps: a timer interrupt that came late with no guest event on that CPU meanwhile -- a running guest
takes a due interrupt -- marks a stretch the vCPU was not running), and each Sync over 1 ms late that the status
lists (its slot, lateness and held time) is the host's when its held time or the silent stretches between its slot
and its sending leave it within 1 ms; so are the stretches a kernel thread kept the CPU after the sender's
own wake-up was due (kernel_holds: a kernel that does not preempt kernel code, as this guest's (preemption
none), lets a SCHED_FIFO thread wait out a worker's whole item; the work run is printed).  `woken`
counts, for the record, the late Syncs whose timed wake-up came over 1 ms late.  With --canary, bench/canary.c
runs on the grandmaster's CPU above the sender (SCHED_FIFO 2): every 500 us a fixed piece of work, timed; a late
Sync whose stretch saw that work run f times slower than its median is also the host's when lateness x (1 - 1/f)
leaves it within 1 ms (the vCPU itself ran slow: the same instructions took longer whoever ran them).  With
--ftrace the sender's waits for contended kernel locks are traced too and printed for the record (not set apart).
Late Syncs are gathered from the status every LATE_POLL_S (the sender keeps 4,096 a publish; more are counted as
lost and judged the grandmaster's).  The clients' kernel receive path runs on the clients' CPU (threaded NAPI on
their veth, pinned there, as on their own machines); without it every client's receive work would run in the
grandmaster's sending thread.  Their veth has VETH_QUEUES queues, a receive ring of 256 each, as a server NIC's
ring of 4,096, and a NIC's receive interrupt moderation (CLIENTS_NAPI_POLL_NS, CLIENTS_NAPI_DEFER: under load
their NAPI polls on their own CPU's timer, so the grandmaster's transmits wake nothing there; with --ftrace the
interrupts its Sync sender sent other CPUs are counted and printed).  The bench holds the kernel's CPU wake-up
latency request at --cpu-latency-us (0: idle CPUs poll) for every grandmaster alike, as a latency-tuned host
does: on a virtual machine a halted vCPU is woken by an interrupt through the hypervisor, and each datagram that
wakes the clients' NAPI thread on their idle CPU charged that to the sending thread (a trace showed 80 us a
datagram after a host stall, the round's Syncs waiting behind it).  Off by default: on the 2-vCPU guest this was
built on, runs with it had Syncs up to 7-9 ms late in every run and runs without 1.3-1.8 ms (not the same
hour: likely, not shown, the polling vCPU spending a budget the VM's two share).  The candidate is given
a unicast client limit of the count plus HEADROOM_CLIENTS (--set ptp.unicast_max_clients, {max_clients} in
--candidate-cmd): the G.8275.2 profile's default of 8,000 would deny the rest of 10,000.  The time bound (--max-minutes)
is shared equally between the grandmasters; a count that would not fit is skipped and said so.

Reference: ptp4l (free_running 1, kernel_leap 0, software time stamping, UDPv4, unicast_listen 1, domain 44,
dataset_comparison G.8275.x, clockClass 6).  Candidate: --candidate-cmd, formatted with {python} (this interpreter:
run the bench with the project's .venv), {iface}, {state_dir} (its status is read from the control socket there),
{gm_ip}, {domain}, {max_clients}; the literal `ptp4l` runs the
reference a second time (to validate the bench: the two figures then show the run-to-run spread).  A grandmaster is
ready once a single probe client (10.77.255.253) is granted and receives a Sync.

ptp4l 3.1.1 fails by a cliff, not by a slow loss: it sends every client's Sync, Follow_Up and Announce in one burst
per interval, reading its socket one datagram per poll loop meanwhile; with a Delay_Req a second per client the
event socket's receive buffer (net.core.rmem_default, 212992 bytes, which ptp4l does not raise) fills during the
burst, the software transmit timestamps queued on that socket's error queue are dropped with it, ptp4l times out
waiting for them, the port goes FAULTY, and after the fault reset its unicast Sync/Announce timer is not re-armed:
the clients get Delay_Resps again but no Sync.  Where the cliff falls depends on the CPU time the burst takes.

Neighbour entries: the IPv4 neighbour table's gc_thresh1/2/3 are global (this kernel shows them only in the initial
namespace; the default gc_thresh3 of 1024 would overflow at about a thousand clients), so instead of raising them
the bench installs a permanent neighbour entry per client address in the grandmaster's namespace (permanent entries
are exempt from the table's garbage collection and its gc_thresh3 limit) and one for the grandmaster in the
clients'.  No sysctl is changed (net.core.rmem_* cannot be written inside a namespace here); the load generator
gets its 32 MB socket buffers with SO_RCVBUFFORCE.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from appliance.edge import control  # noqa: E402  (the appliance's own status, over its control socket)
from appliance.edge.cpu_latency import CpuLatencyHold  # noqa: E402
from appliance.edge.kernel_preemption import preemption  # noqa: E402
from appliance.outputs.ptp.lateness import window as lateness_window  # noqa: E402
from harness.kernel_trace import (THREAD_EVENTS, WAKE_EVENTS, KernelTrace, contention_spans, ipis_sent,  # noqa: E402
                                  kernel_holds, parsed, silent_timer_gaps, traced_span)
from harness.unicast_verdict import (TARGET_CLIENTS, classify_late, own_late, passing_count,  # noqa: E402
                                     served, target_failures, target_verdict, trace_excerpts)
GM_CPU, LOAD_CPU = "0", "1"
# Queues of the veth pair: the clients' end takes each datagram into the ring of the queue its flow hashes to, 256
# each (fixed by the veth driver), so 16 give the clients a receive ring of 4,096, as a server NIC's: with one, a
# stall of the clients' CPU over 6 ms at 10,000 clients (40 datagrams a ms) dropped datagrams at their end.
VETH_QUEUES = 16
# Receive interrupt moderation at the clients' end, as a NIC's (rx-usecs): the clients' NAPI, once it has work,
# polls every CLIENTS_NAPI_POLL_NS on a timer of the clients' CPU and goes back to being woken per datagram only
# after CLIENTS_NAPI_DEFER polls in a row found nothing.  Without it each datagram the grandmaster sent to an idle
# NAPI woke its thread on the clients' CPU with an inter-processor interrupt the sending thread paid for: 40-90 us
# each through the hypervisor in traces of failed runs, against about 4 us for a datagram.
CLIENTS_NAPI_POLL_NS, CLIENTS_NAPI_DEFER = 100_000, 100
CANARY_COMM = "canary"  # bench/canary.c's thread name in a trace
SENDER_THREAD = "ptp-sync"  # the native Sync sender's thread name (appliance/edge/ptp/_syncsend.c)
# The trace is on this long before the window's first status is read: that status is up to a publish (1 s) old, so
# the window's first takes (counted from it) were sent before the reading.  Started at the reading, a late Sync
# there was outside the trace and judged the grandmaster's.
TRACE_LEAD_S = 1.5
LATE_POLL_S = 0.4  # with --ftrace or --canary, how often the status's late Syncs are gathered (published each 1 s)
# about 8 % of the grandmaster's CPU, its wake-ups included (ps, one 10,000-client run)
CANARY_PRIORITY, CANARY_PERIOD_US, CANARY_WORK_US = 2, 500, 10
# on the grandmaster's CPU: a 10,000-client window of 20 s takes about 300 MB, and over 400 MB in a run the host
# disturbed (its oldest events overwritten, the late Syncs there left unjudged)
TRACE_BUFFER_KB = 800_000
GM_IP = "10.77.255.254"
FIRST_CLIENT_IP = "10.77.0.1"
PROBE_IP = "10.77.255.253"
MAX_CLIENTS = 60000  # 10.77.0.1 .. 10.77.234.96, clear of the probe and grandmaster addresses
FIGURE_TO_BEAT = 4000
HEADROOM_CLIENTS = 100  # the client limit the candidate is given above the count (the ready probe needs one)
DEFAULT_CANDIDATE = ("{python} -m appliance run --set ptp.interface={iface} --set ptp.transport=udp4 "
                     "--set ptp.profile=g8275.2 --set state_dir={state_dir} --set ntp.enabled=false "
                     "--set ptp.unicast_max_clients={max_clients}")
# ptp4l log lines that show the grandmaster struggling (software tx timestamps late, port faults, failed sends)
GM_TROUBLE = re.compile(r"timed out while polling|FAULT|failed|error", re.IGNORECASE)


def log(msg: str) -> None:
    print(f"[ptp_unicast {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def build_load(workdir: Path, name: str = "ptpunicast") -> Path:
    exe = workdir / name
    subprocess.run(["gcc", "-O2", "-Wall", "-o", str(exe), str(ROOT / "bench" / f"{name}.c")], check=True)
    return exe


class Canary:
    """--canary: bench/canary.c on the grandmaster's CPU at SCHED_FIFO CANARY_PRIORITY (above the Sync sender's),
    a fixed piece of work every CANARY_PERIOD_US: how fast the vCPU itself ran, measured in the same run.  Its
    work taking ``f`` times its median over a late Sync's stretch means the same instructions ran ``f`` times slower
    than usual there, whoever ran them."""

    def __init__(self, exe: Path, out: Path) -> None:
        self.proc = subprocess.Popen([str(exe), GM_CPU, str(CANARY_PRIORITY), str(CANARY_PERIOD_US),
                                      str(CANARY_WORK_US), str(out)], stderr=subprocess.PIPE, text=True)
        self.out = out

    def stop(self) -> tuple[list[tuple[float, int]], float] | str:
        """Its wake-ups (monotonic s, work wall ns) and the median work wall ns, or why there are none."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return "canary did not stop"
        if self.proc.returncode != 0:
            return f"canary failed: {err.strip() or self.proc.returncode}"
        lines = self.out.read_text().splitlines()[1:]
        samples = [(int(f[1]) / 1e9, int(f[2])) for f in (line.split() for line in lines)]
        if not samples:
            return "canary recorded nothing"
        return samples, statistics.median(w for _, w in samples)


def ip4(base: str, offset: int) -> str:
    a, b, c, d = (int(x) for x in base.split("."))
    v = (a << 24 | b << 16 | c << 8 | d) + offset
    return f"{v >> 24 & 255}.{v >> 16 & 255}.{v >> 8 & 255}.{v & 255}"


def _comm(proc: Path) -> str:
    try:
        return (proc / "comm").read_text().strip()
    except OSError:
        return ""


class Namespaces:
    """Two namespaces and a veth pair; teardown() removes both (and with them the veth and every address)."""

    def __init__(self, workdir: Path) -> None:
        tag = str(os.getpid())
        self.gm, self.cl = f"ptpu{tag}g", f"ptpu{tag}c"
        self.gm_if, self.cl_if = f"pug{tag}", f"puc{tag}"
        self.workdir = workdir
        self.created: list[str] = []
        self.n_addrs = 0

    def setup(self) -> None:
        for ns in (self.gm, self.cl):
            run(["ip", "netns", "add", ns])
            self.created.append(ns)
        queues = ["numtxqueues", str(VETH_QUEUES), "numrxqueues", str(VETH_QUEUES)]
        run(["ip", "link", "add", self.gm_if, *queues, "type", "veth", "peer", "name", self.cl_if, *queues])
        try:
            run(["ip", "link", "set", self.gm_if, "netns", self.gm])
            run(["ip", "link", "set", self.cl_if, "netns", self.cl])
        except subprocess.CalledProcessError:
            subprocess.run(["ip", "link", "del", self.gm_if], check=False, capture_output=True)
            raise
        for ns, ifname in ((self.gm, self.gm_if), (self.cl, self.cl_if)):
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            run(["ip", "-n", ns, "link", "set", ifname, "up"])
        run(["ip", "-n", self.gm, "addr", "add", f"{GM_IP}/16", "dev", self.gm_if])
        run(["ip", "-n", self.cl, "addr", "add", f"{PROBE_IP}/16", "dev", self.cl_if])
        self.gm_mac, self.cl_mac = self.mac(self.gm, self.gm_if), self.mac(self.cl, self.cl_if)
        run(["ip", "-n", self.cl, "neigh", "replace", GM_IP, "lladdr", self.gm_mac, "dev", self.cl_if,
             "nud", "permanent"])
        run(["ip", "-n", self.gm, "neigh", "replace", PROBE_IP, "lladdr", self.cl_mac, "dev", self.gm_if,
             "nud", "permanent"])
        self.clients_napi = self.receive_on_clients_cpu()

    def receive_on_clients_cpu(self) -> str:
        """The kernel's delivery of the grandmaster's datagrams into the clients' namespace on the clients' CPU, as
        on their own machines: GRO on the clients' veth makes the veth driver hand each datagram to a NAPI
        instance (rx-udp-gro-forwarding: also UDP sent from a socket, which it does not merge when a socket takes
        it), threaded, and its kernel thread pinned to LOAD_CPU.  Without it the whole receive path of every
        client runs in the sending thread's context on the grandmaster's CPU, which no NIC asks of it."""
        run(["ip", "netns", "exec", self.cl, "ethtool", "-K", self.cl_if, "gro", "on", "rx-udp-gro-forwarding", "on"])
        run(["ip", "netns", "exec", self.cl, "sh", "-c", f"echo 1 > /sys/class/net/{self.cl_if}/threaded"])
        # a NIC's receive interrupt moderation: while datagrams keep coming, the clients' NAPI polls on a timer of
        # its own CPU instead of being woken by each transmit (an inter-processor interrupt charged to the sender)
        run(["ip", "netns", "exec", self.cl, "sh", "-c",
             f"echo {CLIENTS_NAPI_POLL_NS} > /sys/class/net/{self.cl_if}/gro_flush_timeout && "
             f"echo {CLIENTS_NAPI_DEFER} > /sys/class/net/{self.cl_if}/napi_defer_hard_irqs"])
        pids = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and _comm(p).startswith(
            f"napi/{self.cl_if}-")]
        for pid in pids:
            run(["taskset", "-pc", LOAD_CPU, pid])
        return f"on CPU {LOAD_CPU} (threaded NAPI, {len(pids)} thread{'s' if len(pids) != 1 else ''})"

    @staticmethod
    def mac(ns: str, ifname: str) -> str:
        return json.loads(run(["ip", "-n", ns, "-j", "link", "show", "dev", ifname]).stdout)[0]["address"]

    def add_clients(self, n: int) -> None:
        """Client addresses FIRST_CLIENT_IP .. + n-1 on the clients' veth, and a permanent neighbour entry for each
        in the grandmaster's namespace, with `ip -batch` (a few seconds for tens of thousands)."""
        if n <= self.n_addrs:
            return
        t = time.monotonic()
        addrs = [ip4(FIRST_CLIENT_IP, i) for i in range(self.n_addrs, n)]
        batch_cl, batch_gm = self.workdir / "addr.batch", self.workdir / "neigh.batch"
        batch_cl.write_text("".join(f"address add {a}/16 dev {self.cl_if}\n" for a in addrs))
        batch_gm.write_text("".join(f"neigh replace {a} lladdr {self.cl_mac} dev {self.gm_if} nud permanent\n"
                                    for a in addrs))
        run(["ip", "-n", self.cl, "-batch", str(batch_cl)])
        run(["ip", "-n", self.gm, "-batch", str(batch_gm)])
        self.n_addrs = n
        log(f"{n} client addresses and permanent neighbour entries in {time.monotonic() - t:.1f} s")

    def udp_counters(self) -> dict[str, int]:
        """The grandmaster namespace's UDP counters (per namespace): RcvbufErrors counts datagrams its sockets had
        no room for, and the drops of the sockets on ports 319 and 320 (while they are open)."""
        snmp = run(["ip", "netns", "exec", self.gm, "cat", "/proc/net/snmp"]).stdout.splitlines()
        names, values = [ln.split()[1:] for ln in snmp if ln.startswith("Udp:")][:2]
        out = {k: int(v) for k, v in zip(names, values)}
        for ln in run(["ip", "netns", "exec", self.gm, "cat", "/proc/net/udp"]).stdout.splitlines()[1:]:
            f = ln.split()
            port = int(f[1].split(":")[1], 16)
            if port in (319, 320):
                out[f"socket_{port}_drops"] = out.get(f"socket_{port}_drops", 0) + int(f[-1])
        # the link between them: each veth end's drops (a full receive ring at the peer's NAPI counts at the
        # sender), and each CPU's backlog drops (/proc/net/softnet_stat's second column)
        for ns, ifname, side in ((self.gm, self.gm_if, "gm"), (self.cl, self.cl_if, "clients")):
            stats = run(["ip", "netns", "exec", ns, "sh", "-c", f"cd /sys/class/net/{ifname}/statistics && "
                         "cat tx_dropped rx_dropped"]).stdout.split()
            out[f"link_{side}_tx_dropped"], out[f"link_{side}_rx_dropped"] = (int(x) for x in stats)
        for cpu, line in enumerate(Path("/proc/net/softnet_stat").read_text().splitlines()):
            out[f"link_cpu{cpu}_backlog_dropped"] = int(line.split()[1], 16)
        return out

    def teardown(self) -> None:
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
        self.created.clear()


PTP4L_CONFIG = """\
[global]
# ITU-T G.8275.2 grandmaster (cf. linuxptp configs/G.8275.2.cfg), unicast negotiation only
domainNumber            44
clockClass              6
clockAccuracy           0x21
offsetScaledLogVariance 0x4E5D
priority2               128
dataset_comparison      G.8275.x
G.8275.defaultDS.localPriority 128
G.8275.portDS.localPriority    128
maxStepsRemoved         255
network_transport       UDPv4
delay_mechanism         E2E
time_stamping           software
unicast_listen          1
hybrid_e2e              1
inhibit_multicast_service 1
logAnnounceInterval     0
logSyncInterval         0
logMinDelayReqInterval  0
# never touch this machine's clock (ptp4l also runs without CAP_SYS_TIME)
free_running            1
kernel_leap             0
uds_address             {uds}
logging_level           6
"""


class Grandmaster:
    def __init__(self, name: str, ns: Namespaces, workdir: Path, cmd: str | None) -> None:
        self.name, self.ns, self.workdir, self.cmd = name, ns, workdir, cmd  # cmd None: ptp4l
        self.proc: subprocess.Popen | None = None
        self.logfile: Path | None = None
        self.config_text = ""
        self.drop_dataset_comparison = False
        self.control_path: Path | None = None  # the appliance's control socket (its status), when it has one

    def start(self, tag: str, clients: int) -> None:
        self.starts = getattr(self, "starts", 0) + 1  # a count run again (--repeat, --refine) gets its own directory
        d = self.workdir / f"{self.name}-{tag}-{self.starts}"
        d.mkdir()
        self.logfile = d / "gm.log"
        self.control_path = None
        if self.cmd is None:
            cfg = PTP4L_CONFIG.format(uds=d / "ptp4l.sock")
            if self.drop_dataset_comparison:
                cfg = cfg.replace("dataset_comparison      G.8275.x\n", "")
            self.config_text = cfg
            (d / "ptp4l.cfg").write_text(cfg)
            argv = ["ptp4l", "-f", str(d / "ptp4l.cfg"), "-i", self.ns.gm_if, "-m", "-q"]
        else:
            state = d / "state"
            state.mkdir(mode=0o700)
            argv = shlex.split(self.cmd.format(python=sys.executable, iface=self.ns.gm_if, state_dir=state,
                                               gm_ip=GM_IP, domain=44, max_clients=clients + HEADROOM_CLIENTS))
            if "{state_dir}" in self.cmd:
                self.control_path = state / "control.sock"
        full = ["ip", "netns", "exec", self.ns.gm, "taskset", "-c", GM_CPU, "setpriv", "--bounding-set", "-sys_time",
                *argv]
        with open(self.logfile, "w") as out:
            self.proc = subprocess.Popen(full, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         cwd=ROOT)

    def log_text(self) -> str:
        return self.logfile.read_text(errors="replace") if self.logfile and self.logfile.exists() else ""

    def wait_master(self, timeout_s: float) -> bool:
        """ptp4l only: its port turns master after announceReceiptTimeout without a foreign master."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if "assuming the grand master role" in self.log_text():
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.2)
        return False

    def state_changes(self) -> list[str]:
        return [ln for ln in self.log_text().splitlines() if re.search(r"port 1: .* to .* on ", ln)]

    def trouble_lines(self) -> list[str]:
        return [ln for ln in self.log_text().splitlines() if GM_TROUBLE.search(ln)
                and "hybrid_e2e only works with E2E" not in ln]

    def pids(self) -> list[int]:
        """The grandmaster's process and all its descendants (the appliance's console and agent processes)."""
        if self.proc is None:
            return []
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                ppid = int(stat[stat.rindex(")") + 2:].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo += children.get(pid, [])
        return out

    def thread_ids(self, comm: str) -> list[int]:
        """The grandmaster's threads named ``comm``."""
        return [int(task.name) for pid in self.pids() for task in Path(f"/proc/{pid}/task").glob("*")
                if _comm(task) == comm]

    def cpu_ns(self) -> int:
        """CPU time so far of every thread of every process of the grandmaster (/proc/<pid>/task/*/schedstat)."""
        total = 0
        for pid in self.pids():
            for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
                try:
                    total += int(stat.read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    continue
        return total

    def sync_lateness(self) -> dict | str:
        """The appliance's own Sync lateness statistic from its status, or why there is none."""
        if self.control_path is None:
            return "n/a"
        try:
            reply = control.request(self.control_path, {"cmd": "status"}, timeout_s=10.0)
            ptp = reply["status"]["outputs"]["ptp"]
            return {**ptp["sync_lateness"], "sender": ptp.get("native_sync") or {}}
        except (control.ControlError, KeyError, TypeError) as exc:
            return f"no status: {exc}"

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


def run_load(exe: Path, ns: Namespaces, n: int, duration: float, warmup: float, ramp: float, log_sync: int,
             first_ip: str = FIRST_CLIENT_IP) -> dict:
    cmd = ["ip", "netns", "exec", ns.cl, "taskset", "-c", LOAD_CPU, str(exe), "-g", GM_IP, "-n", str(n),
           "-d", str(duration), "-w", str(warmup), "-r", str(ramp), "-a", first_ip, "-l", str(log_sync),
           "-D", "44", "-T", "0"]
    timeout = run_seconds(n, duration, warmup, ramp) + 90
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"ptpunicast failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return json.loads(lines[-1])


def run_seconds(n: int, duration: float, warmup: float, ramp: float) -> float:
    """The load generator's own length: ramp, warm-up, window, the last shifted client window, cancels, ack wait."""
    return n / ramp + warmup + duration + 1.5 + n / (4 * ramp) + 1.0


def make_ready(gm: Grandmaster, exe: Path, ns: Namespaces, timeout_s: float, log_sync: int) -> str | None:
    """None when the grandmaster grants a probe client and sends it Syncs, else the reason it is not ready."""
    deadline = time.monotonic() + timeout_s
    if gm.cmd is None and not gm.wait_master(min(timeout_s, 30)):
        return "ptp4l did not assume the grand master role: " + " | ".join(gm.log_text().splitlines()[-3:])
    while time.monotonic() < deadline:
        if gm.proc.poll() is not None:
            return f"exited with {gm.proc.returncode}: " + " | ".join(gm.log_text().splitlines()[-3:])
        try:
            probe = run_load(exe, ns, 1, 1, 0.5 + 2.0 ** max(log_sync, 0), 100, log_sync, PROBE_IP)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            return f"probe failed: {e}"
        if probe["granted"] == 1 and probe["syncs_total"] > 0:
            return None
        time.sleep(1)
    return f"no grant and Sync for a probe client within {timeout_s:.0f} s"


class NotReady(Exception):
    pass


def steal_ms(cpu: str) -> float:
    """The time the hypervisor has taken from this CPU so far (/proc/stat's steal column, in USER_HZ ticks)."""
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if f[0] == f"cpu{cpu}":
            return int(f[8]) * 1000.0 / os.sysconf("SC_CLK_TCK")
    return 0.0


class WindowProbe:
    """In a thread beside the load run: the grandmaster's Sync lateness statistic and its CPU time read when the
    measurement window opens (ramp + warm-up after the load starts) and when it has closed (the window, plus one Sync
    interval for the clients' windows shifted by up to one), so that both cover the window and nothing else."""

    def __init__(self, gm: Grandmaster, n: int, args, canary_exe: Path | None = None) -> None:
        self.gm = gm
        self.canary_exe, self.canary_out = canary_exe, gm.workdir / "canary.txt"
        self.canary: Canary | None = None
        self.open_s = n / args.ramp + args.warmup
        self.close_s = self.open_s + args.duration + 2.0 ** args.log_sync
        self.readings: list[tuple[float, int, dict | str]] = []  # (monotonic s, CPU ns, lateness)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        # --ftrace: the grandmaster CPU's scheduling and interrupts over the window, for its late wake-ups
        self.trace = (KernelTrace("mono", WAKE_EVENTS, f"{1 << int(GM_CPU):x}", TRACE_BUFFER_KB) if args.ftrace
                      else None)
        self.gaps: list[tuple[float, float]] | str = "not traced (--ftrace)"
        self.late_syncs: dict[tuple[int, float], float] = {}
        self.span: tuple[float, float] | None = None
        self.contention: list[tuple[float, float]] = []  # the sender's waits for contended kernel locks
        self.sender_ipis: int | None = None  # interrupts the sender thread sent other CPUs in the window
        self.trace_overrun = 0  # events the trace buffer overwrote
        self.kernel: list[tuple[float, float, str]] = []  # kernel threads on the CPU while the sender was due
        # --keep-logs: the trace around each late Sync not shown to be the host's goes there
        self.keep = (args.keep_logs / f"{gm.name}-{n}-{getattr(gm, 'starts', 1)}-late-syncs.trace"
                     if args.keep_logs and args.ftrace else None)
        self.text = ""

    def start(self) -> None:
        self.t0 = time.monotonic()
        if self.canary_exe is not None:
            self.canary = Canary(self.canary_exe, self.canary_out)
        self._thread.start()

    def arm(self) -> None:
        """Before the load starts: the trace buffer's allocation stalls the CPUs.  The sender thread's own system
        calls and transmits only (the whole CPU's would cost it enough to leave Delay_Reqs unanswered)."""
        if self.trace is not None:
            tids = self.gm.thread_ids(SENDER_THREAD) or [-1]
            self.trace.arm({event: " || ".join(f"common_pid == {tid}" for tid in tids) for event in THREAD_EVENTS})

    def _run(self) -> None:
        for at_s in (self.open_s, self.close_s):
            # with --ftrace, the status's latest late Syncs gathered every LATE_POLL_S meanwhile (it keeps 256)
            while (self.trace or self.canary) and self.readings and time.monotonic() < self.t0 + at_s - LATE_POLL_S:
                if self._stop.wait(LATE_POLL_S):
                    break
                self._gather(self.gm.sync_lateness())
            if self.trace is not None and not self.readings:  # on ahead of the window: see TRACE_LEAD_S
                if self._stop.wait(max(0.0, self.t0 + at_s - TRACE_LEAD_S - time.monotonic())):
                    self.trace.stop()
                    return
                self.trace.on()
            if self._stop.wait(max(0.0, self.t0 + at_s - time.monotonic())):
                if self.trace is not None:
                    self.trace.stop()  # given back however far it got
                return
            cpu_ns, lateness, t = self.gm.cpu_ns(), self.gm.sync_lateness(), time.monotonic()
            self.readings.append((t, cpu_ns, lateness, steal_ms(GM_CPU)))
            self._gather(lateness)
        if self.trace is not None:
            try:
                text = self.trace.stop()
                if self.keep is not None:
                    self.text = text
                # the canary too: its few microseconds between wake-up and sleep have no room for a silent 200 us
                quick = (SENDER_THREAD, CANARY_COMM) if self.canary_exe is not None else SENDER_THREAD
                events = parsed(text)
                self.gaps = silent_timer_gaps(events, int(GM_CPU), quick)
                self.contention = contention_spans(events, int(GM_CPU), SENDER_THREAD)
                self.sender_ipis = ipis_sent(events, int(GM_CPU), SENDER_THREAD)
                self.trace_overrun = self.trace.overrun
                self.kernel = kernel_holds(events, int(GM_CPU), SENDER_THREAD)
                del events
                self.span = traced_span(text, int(GM_CPU))
            except (OSError, ValueError) as e:
                self.gaps = f"trace failed: {e}"

    def _gather(self, lateness: dict | str) -> None:
        if isinstance(lateness, dict):
            sender = lateness["sender"]
            for slot, late_us, held_us, *take in sender.get("late_syncs_new", []) + sender.get("late_syncs_recent", []):
                self.late_syncs[(slot, late_us)] = (held_us, take[0] if take else None)

    def result(self, n: int) -> dict:
        """CPU us per client per second and the window's lateness (or why not measured)."""
        self._stop.set()
        self._thread.join()
        canary = self.canary.stop() if self.canary is not None else None
        if len(self.readings) < 2:
            return {"cpu_us_per_client_s": None, "lateness": "window not measured (the load run ended early)"}
        (t1, cpu1, late1, steal1), (t2, cpu2, late2, steal2) = self.readings
        out: dict = {"cpu_us_per_client_s": (cpu2 - cpu1) / 1e3 / (t2 - t1) / n, "window_measured_s": t2 - t1,
                     "gm_cpu_steal_ms": steal2 - steal1}
        if isinstance(late1, dict) and isinstance(late2, dict):
            out["lateness"] = lateness_window(late1, late2)
            s1, s2 = late1["sender"], late2["sender"]
            if "wakes_over_1ms" in s1 and "wakes_over_1ms" in s2:  # the native sender's own wake-ups
                out["lateness"]["sender_wakes_over_1ms"] = s2["wakes_over_1ms"] - s1["wakes_over_1ms"]
                out["lateness"]["sender_wake_max_us"] = s2["wake_max_us"]
            if "late_over_1ms_held" in s1 and "late_over_1ms_held" in s2:
                out["lateness"]["held"] = s2["late_over_1ms_held"] - s1["late_over_1ms_held"]
                out["lateness"]["woken"] = s2.get("late_over_1ms_woken", 0) - s1.get("late_over_1ms_woken", 0)
                gathered = [(slot, late_us, held_us, take) for (slot, late_us), (held_us, take) in
                            self.late_syncs.items()]
                # the late Syncs the window's counts hold: those of the takes between the two statuses
                takes = (s1["takes"], s2["takes"]) if "takes" in s1 and "takes" in s2 else None
                if isinstance(self.gaps, list):
                    out["lateness"]["traced"] = classify_late(gathered, self.gaps, t1, t2, self.span,
                                                              canary if isinstance(canary, tuple) else None,
                                                              self.contention, takes,
                                                              [(a, b) for a, b, _ in self.kernel])
                elif isinstance(canary, tuple):
                    out["lateness"]["traced"] = classify_late(gathered, [], t1, t2, None, canary, takes=takes)
                else:
                    out["lateness"]["traced"] = self.gaps
                traced = out["lateness"]["traced"]
                if self.keep is not None and self.text and isinstance(traced, dict) and traced["own"]:
                    self.keep.parent.mkdir(parents=True, exist_ok=True)
                    self.keep.write_text(trace_excerpts(self.text, traced["own"]))
                    self.text = ""
                if self.sender_ipis is not None:
                    out["lateness"]["sender_ipis"] = self.sender_ipis
                    out["lateness"]["trace_overrun"] = self.trace_overrun
                    holds = [(a, b, works) for a, b, works in self.kernel if t1 <= a <= t2]
                    out["lateness"]["kernel_holds_over_1ms"] = sum(1 for a, b, _ in holds if b - a > 1e-3)
                    out["lateness"]["kernel_hold_max_us"] = max((b - a for a, b, _ in holds), default=0.0) * 1e6
                    out["lateness"]["kernel_hold_work"] = sorted({w for a, b, works in holds if b - a > 1e-3
                                                                  for w in works.split(",") if w})
                if canary is not None:
                    out["lateness"]["canary"] = (canary if isinstance(canary, str) else
                                                 {"wakes": len(canary[0]), "work_median_us": canary[1] / 1e3})
                out["lateness"]["held_max_us"] = s2["held_max_us"]
                out["lateness"]["realtime"] = bool(s2.get("realtime"))
            if "late_syncs_lost" in s1 and "late_syncs_lost" in s2:  # more in one publish than the sender keeps
                out["lateness"]["late_syncs_lost"] = s2["late_syncs_lost"] - s1["late_syncs_lost"]
            if "long_rounds" in s1 and "long_rounds" in s2:
                out["lateness"]["long_rounds"] = s2["long_rounds"] - s1["long_rounds"]
                out["lateness"]["long_round_cpu_max_us"] = s2["long_round_cpu_max_us"]
                out["lateness"]["long_round_packets"] = s2["long_round_packets"]
                out["lateness"]["long_round_lock_us"] = s2.get("long_round_lock_us", 0.0)
                out["lateness"]["lock_wait_max_us"] = s2.get("lock_wait_max_us", 0.0)
            if "late_pre_max_us" in s2:
                out["lateness"]["late_pre_max_us"] = s2["late_pre_max_us"]
                out["lateness"]["late_send_max_us"] = s2["late_send_max_us"]
        else:
            out["lateness"] = late2 if isinstance(late2, str) else late1
        return out


def one_run(gm: Grandmaster, exe: Path, ns: Namespaces, n: int, args) -> dict:
    """A fresh grandmaster, made ready, then one load run of n clients; its log is kept when asked."""
    gm.start(f"{n}", n)
    try:
        why = make_ready(gm, exe, ns, args.ready_timeout, args.log_sync)
        if why is not None and gm.cmd is None and "dataset_comparison" in gm.log_text() \
                and not gm.drop_dataset_comparison:
            gm.drop_dataset_comparison = True  # this ptp4l does not know G.8275.x: retry without it
            gm.stop()
            gm.start(f"{n}-without-G8275x", n)
            why = make_ready(gm, exe, ns, args.ready_timeout, args.log_sync)
        if why is not None:
            raise NotReady(why)
        log(f"{gm.name}: {n} clients, ramp {n / args.ramp:.1f} s + warm-up {args.warmup:g} s + window "
            f"{args.duration:g} s")
        before = ns.udp_counters()
        probe = WindowProbe(gm, n, args, args.canary_exe)
        probe.arm()
        probe.start()
        try:
            r = run_load(exe, ns, n, args.duration, args.warmup, args.ramp, args.log_sync)
        finally:
            window = probe.result(n)
        r.update(window)
        r["gm_alive_at_end"] = gm.proc.poll() is None
        after = ns.udp_counters()
    finally:
        gm.stop()
        if args.keep_logs and gm.logfile:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            shutil.copy(gm.logfile, args.keep_logs / f"{gm.name}-{n}.log")
    trouble = gm.trouble_lines()
    r["gm_udp"] = {k: v - before.get(k, 0) if not k.startswith("socket_") else v for k, v in after.items()}
    r["gm_trouble_lines"] = len(trouble)
    r["gm_trouble_sample"] = trouble[:5]
    r["gm_port_states"] = gm.state_changes()[-6:]
    r["served"] = served(r)
    r["target_failures"] = target_failures(r)
    return r


def ladder(gm: Grandmaster, exe: Path, ns: Namespaces, counts: list[int], args, deadline: float, res: dict) -> None:
    """Counts in order until the first failure; a count passes when all its --repeat runs serve every client
    without a missed Sync.  Then --refine bisection steps between the last count passed and the first failed.
    Results go into res as they come (an interrupted bench still reports the runs done)."""
    if gm.cmd is None:
        res["ptp4l_config"] = PTP4L_CONFIG

    def attempt(n: int, refine: bool) -> bool | None:  # None: not run (time budget, grandmaster not ready)
        for k in range(args.repeat):
            need = run_seconds(n, args.duration, args.warmup, args.ramp) + 15
            if time.monotonic() + need > deadline:
                res["stopped"] = f"time budget: {n} clients need about {need:.0f} s more"
                log(f"{gm.name}: {res['stopped']}")
                return None
            ns.add_clients(n)
            try:
                r = one_run(gm, exe, ns, n, args)
            except NotReady as e:
                res["stopped"] = f"not ready: {e}"
                log(f"{gm.name}: {res['stopped']}")
                return None
            r["repeat"], r["refine"] = k + 1, refine
            res["runs"].append(r)
            log(f"{gm.name}: {n} clients: granted {r['granted']}, denied {r['denied']}, no reply {r['no_reply']}, "
                f"missed Syncs {r['syncs_missed']} ({r['clients_missed']} clients), delay_resp "
                f"{r['delay_resp_ratio']:.4f}, load-side rx drops {r['rx_queue_drops']}, grandmaster UDP "
                f"receive-buffer errors {r['gm_udp'].get('RcvbufErrors', 0)}, link drops "
                f"{ {k[5:]: v for k, v in r['gm_udp'].items() if k.startswith('link_') and v} or 0}, grandmaster log trouble "
                f"{r['gm_trouble_lines']}; Follow_Ups not paired with their Sync {r.get('fup_unpaired', 0)} "
                f"{r.get('fup_unpaired_examples') or ''}; Sync lateness {lateness_text(r.get('lateness'))}, CPU "
                f"{cpu_text(r.get('cpu_us_per_client_s'))} us per client-second")
            if not r["served"]:
                return False
        return True

    for n in counts:
        ok = attempt(n, False)
        if ok is None:
            break
        if ok:
            res["best"] = n
        else:
            res["broke_at"] = n
            break
    bad = res["broke_at"]
    for _ in range(args.refine if bad else 0):
        gap = bad - res["best"]
        step = 100 if gap > 200 else 10 if gap > 20 else 1
        n = (res["best"] + bad) // 2 // step * step
        if n <= res["best"] or n >= bad:
            break
        ok = attempt(n, True)
        if ok is None:
            break
        if ok:
            res["best"] = n
        else:
            bad = n
    res["first_failure"] = bad
    if gm.cmd is None:
        res["ptp4l_config"] = gm.config_text or res["ptp4l_config"]


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def print_table(results: list[dict], args) -> None:
    print(f"PTP unicast capacity (G.8275.2 negotiation over UDPv4 in network namespaces, Sync 2^{args.log_sync} s, "
          f"Delay_Req 1/s per client, window {args.duration:g} s after ramp at {args.ramp:g}/s + {args.warmup:g} s)")
    print("  late slots: Sync slots with no Sync in time (a gap over 1.5 intervals) even if it came later; GM rcvbuf: "
          "datagrams the grandmaster's sockets dropped; load drops: the load generator's own (must be 0)")
    print(f"  {'grandmaster':12} {'clients':>7} {'granted':>7} {'denied':>6} {'no reply':>8} {'missed Syncs':>12} "
          f"{'(clients)':>9} {'late slots':>10} {'FUP ratio':>9} {'Delay_Resp':>10} {'Announce':>8} {'GM rcvbuf':>9} "
          f"{'load drops':>10}")
    for res in results:
        for r in res["runs"]:
            fup = ratio(r["follow_ups"], r["syncs_received"])
            ann = ratio(r["announce_received"], r["announce_expected"])
            print(f"  {res['name']:12} {r['clients_requested']:7d} {r['granted']:7d} {r['denied']:6d} "
                  f"{r['no_reply']:8d} {r['syncs_missed']:12d} {r['clients_missed']:9d} {r['sync_late_slots']:10d} "
                  f"{fup:9.4f} {r['delay_resp_ratio']:10.4f} {ann:8.4f} {r['gm_udp'].get('RcvbufErrors', 0):9d} "
                  f"{r['rx_queue_drops']:10d}{'  (bisection)' if r.get('refine') else ''}")
        if res.get("stopped"):
            print(f"  {res['name']:12} ladder stopped: {res['stopped']}")
    print("  Sync lateness: the grandmaster's own transmit timestamp of each Sync minus the slot it was due in, over "
          "the window (from its status; n/a for ptp4l); held: of those over 1 ms, the ones the native sender was held "
          "off its CPU for beyond 1 ms (the host's); woken: of the rest, the ones whose timed wake-up came over 1 ms "
          "late; own: the grandmaster's, judged (without --ftrace: all but held; with it: all but those the trace "
          "shows the host's); CPU: every thread of every grandmaster process; steal: the hypervisor's "
          "time taken from the grandmaster's CPU in the window (/proc/stat)")
    print(f"  {'grandmaster':12} {'clients':>7} {'Syncs measured':>14} {'p50 us':>8} {'p99 us':>8} {'max us':>9} "
          f"{'over 1 ms':>9} {'held':>6} {'woken':>6} {'own':>6} {'DReq unanswered':>15} {'CPU us/client/s':>15} "
          f"{'steal ms':>8}")
    for res in results:
        for r in res["runs"]:
            late = r.get("lateness")
            cols = (f"{late['syncs']:14d} {late['p50_us']:8.0f} {late['p99_us']:8.0f} {late['max_us']:9.0f} "
                    f"{late['late_over_1ms']:9d} {late.get('held', 0):6d} {late.get('woken', 0):6d} "
                    f"{own_late(late):6d}"
                    if isinstance(late, dict) else f"{'n/a':>14} {'':8} {'':8} {'':9} {'':9} {'':6} {'':6} {'':6}")
            print(f"  {res['name']:12} {r['clients_requested']:7d} {cols} "
                  f"{r['delay_req_sent'] - r['delay_resp_received']:15d} {cpu_text(r.get('cpu_us_per_client_s')):>15} "
                  f"{r.get('gm_cpu_steal_ms', float('nan')):8.0f}")


def preemption_text() -> str:
    """This host's kernel preemption mode, as the appliance reads it (outputs.ptp.native_sync.kernel_preemption)."""
    found = preemption()
    return f"preemption {found['mode']} (from {found['from']})"


def lateness_text(late: dict | str | None) -> str:
    if not isinstance(late, dict):
        return str(late or "n/a")
    text = (f"{late['syncs']} Syncs, p99 {late['p99_us']:.0f} us, max {late['max_us']:.0f} us, "
            f"{late['late_over_1ms']} over 1 ms, {late.get('held', 0)} of them held off the CPU beyond 1 ms, "
            f"{late.get('woken', 0)} more woken over 1 ms late "
            f"(most held {late.get('held_max_us', 0):.0f} us)")
    if late.get("late_over_1ms") and "late_pre_max_us" in late:
        text += (f"; of the Syncs over 1 ms late (since start), up to {late['late_pre_max_us']:.0f} us from the slot "
                 f"to the start of their send and up to {late['late_send_max_us']:.0f} us from then to their "
                 f"transmit timestamp")
    if late.get("long_rounds"):
        text += (f"; {late['long_rounds']} rounds of the sender's loop took over 1 ms of its CPU time (the longest "
                 f"since start {late['long_round_cpu_max_us']:.0f} us, sending {late['long_round_packets']} "
                 f"datagrams, {late.get('long_round_lock_us', 0):.0f} us of it waiting for the port's hold of the "
                 f"lock; the longest such wait since start {late.get('lock_wait_max_us', 0):.0f} us)")
    traced = late.get("traced")
    if isinstance(traced, dict):
        text += (f"; judged one by one: {traced['listed']} of the late Syncs listed by the status, {traced['host']} "
                 f"of them the host's (held off the CPU, the vCPU not running: a timer interrupt late on a silent "
                 f"CPU, or the vCPU running slow: the canary's work slowed as much), {traced.get('slow', 0)} of "
                 f"these by the canary's slowdown alone; of the rest, {traced.get('contended', 0)} the sender's "
                 f"waits for contended kernel locks would account for (longest wait in the window "
                 f"{traced.get('contention_max_us', 0):.0f} us); {traced['silent_gaps_over_1ms']} silent gaps over "
                 f"1 ms on the grandmaster's CPU"
                 + (f"; {traced['untraced']} of them outside what the trace buffer kept (no gaps)"
                    if traced.get("untraced") else "")
                 + (f"; {traced['kernel_held']} of the host's needed the stretches a kernel thread kept the CPU "
                    f"after the sender's wake-up was due (the kernel did not preempt it: {preemption_text()}); "
                    f"such stretches in the window: {late.get('kernel_holds_over_1ms', 0)} over 1 ms, the longest "
                    f"{late.get('kernel_hold_max_us', 0):.0f} us, work run in those over 1 ms: "
                    f"{', '.join(late.get('kernel_hold_work', [])) or 'none traced'}"
                    if "kernel_held" in traced else "")
                 + (f"; the trace buffer ({TRACE_BUFFER_KB:,} kB) overwrote its oldest {late['trace_overrun']:,} "
                    f"events" if late.get("trace_overrun") else "")
                 + (f"; {late['late_syncs_lost']} not listed (over the sender's 4,096 a publish), judged the "
                    f"grandmaster's" if late.get("late_syncs_lost") else ""))
    canary = late.get("canary")
    if isinstance(canary, dict):
        text += f"; canary: {canary['wakes']} wake-ups, work median {canary['work_median_us']:.1f} us"
    elif canary:
        text += f"; {canary}"
    elif traced:
        text += f"; {traced}"
    if "sender_ipis" in late:
        text += (f"; the Sync sender thread sent {late['sender_ipis']} inter-processor interrupts in the traced "
                 f"window (each an exit to the hypervisor on a virtual machine)")
    if "sender_wakes_over_1ms" in late:
        text += (f"; the Sync sender thread (SCHED_FIFO) woken over 1 ms after its slot {late['sender_wakes_over_1ms']}"
                 f" times (latest since start {late['sender_wake_max_us']:.0f} us)")
    return text


def cpu_text(cpu_us: float | None) -> str:
    return "n/a" if cpu_us is None else f"{cpu_us:.1f}"


def print_target(cand: dict | None) -> None:
    """PASS when every run of the candidate at some count of TARGET_CLIENTS or more met every part of the target
    (the largest such count is quoted, with how many runs); else FAIL; then each run that broke it, and how (a
    ladder above the target shows where it breaks)."""
    if cand is None:
        return
    runs = sorted(cand["runs"], key=lambda r: r["clients_requested"])
    bad = [r for r in runs if r["target_failures"]]
    head = f"  target ({TARGET_CLIENTS:,} clients, 0 missed, 0 unanswered, every Sync within 1 ms of its slot):"
    print(head + " " + target_verdict(runs))
    passed = passing_count(runs)
    if passed is not None:
        r = [r for r in runs if r["clients_requested"] == passed][-1]
        print(f"    last run at {passed:,}: {lateness_text(r['lateness'])}, CPU "
              f"{cpu_text(r.get('cpu_us_per_client_s'))} us per client-second")
    for r in bad:
        print(f"  breaks at {r['clients_requested']:,} clients: " + "; ".join(r["target_failures"]))
    failed = {r["clients_requested"] for r in bad}
    ok = [r["clients_requested"] for r in runs if r["clients_requested"] not in failed]
    if bad:
        print(f"  largest count meeting the target's conditions: {max(ok):,}" if ok else
              "  no count met the target's conditions")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="100,500,1000,2000,4000,8000")
    ap.add_argument("--duration", type=float, default=30.0, help="measurement window per run, s")
    ap.add_argument("--warmup", type=float, default=5.0, help="after the ramp, before the window, s")
    ap.add_argument("--ramp", type=float, default=500.0, help="new negotiations per second")
    ap.add_argument("--log-sync", type=int, default=0, help="log2 of the Sync interval requested (0: 1/s)")
    ap.add_argument("--candidate-cmd", default=DEFAULT_CANDIDATE,
                    help="grandmaster under test, run in its namespace; 'ptp4l' runs the reference again")
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--skip-candidate", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="runs per count; a count passes only if all pass")
    ap.add_argument("--refine", type=int, default=0,
                    help="bisection steps between the last count passed and the first failed")
    ap.add_argument("--ready-timeout", type=float, default=120.0, help="s for a grandmaster to serve a probe")
    ap.add_argument("--max-minutes", type=float, default=15.0, help="total time bound; the reference gets half")
    ap.add_argument("--ftrace", action="store_true",
                    help="trace the grandmaster CPU's scheduling and interrupts over each window (root, tracefs) "
                         "to tell which late Syncs the host's stalls account for")
    ap.add_argument("--cpu-latency-us", type=int, default=-1,
                    help="hold the kernel's CPU wake-up latency request at this over the whole bench, for every "
                         "grandmaster alike (appliance/edge/cpu_latency.py, as a latency-tuned host does: at 0 "
                         "idle CPUs poll, so waking the clients' CPU costs the sender no interrupt to a halted "
                         "vCPU); -1 (default): the host's own idle policy.  On a VM whose CPU time is capped as a "
                         "whole, the polling idle vCPU spends that budget and the host stalls the busy one more")
    ap.add_argument("--canary", action="store_true",
                    help="run bench/canary.c on the grandmaster's CPU above the Sync sender: a late Sync is also the "
                         "host's when the vCPU's own slowdown there, measured by the canary, accounts for it")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--keep-logs", type=Path, help="copy each grandmaster's log into this directory")
    args = ap.parse_args()
    counts = sorted({int(c) for c in args.counts.split(",")})
    if not counts or counts[0] < 1 or counts[-1] > MAX_CLIENTS:
        ap.error(f"client counts must be 1..{MAX_CLIENTS}")
    if args.repeat < 1 or args.refine < 0:
        ap.error("--repeat must be >= 1 and --refine >= 0")
    if os.geteuid() != 0:
        print("ptp_unicast: needs root (network namespaces, ports 319/320)", file=sys.stderr)
        return 2
    for tool in ("gcc", "ip", "taskset", "setpriv", "ptp4l", "ethtool"):
        if shutil.which(tool) is None:
            print(f"ptp_unicast: {tool} is needed (scripts/test-all installs the Debian peers)", file=sys.stderr)
            return 2
    version = subprocess.run(["ptp4l", "-v"], check=False, capture_output=True, text=True).stdout.strip()
    start = time.monotonic()
    end = start + args.max_minutes * 60
    results: list[dict] = []
    stopping = []

    def on_signal(signum, frame):  # run the finally blocks: processes stopped, namespaces removed
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    with tempfile.TemporaryDirectory(prefix="ptp_unicast-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        os.chmod(workdir, 0o700)
        exe = build_load(workdir)
        args.canary_exe = build_load(workdir, "canary") if args.canary else None
        ns = Namespaces(workdir)
        try:
            ns.setup()
            log(f"the clients' kernel receive path: {ns.clients_napi}")
            hold = None
            if args.cpu_latency_us >= 0:  # both grandmasters alike, as on a latency-tuned host
                hold = CpuLatencyHold(args.cpu_latency_us)
                hold.start()
                stack.callback(hold.stop)
            if args.ftrace:
                log(f"kernel: {preemption_text()}")
            log("CPU wake-up latency: " + ("the host's own idle policy" if hold is None else
                                           f"held at {args.cpu_latency_us} us" if hold.held else str(hold.error)))
            plan = []
            if not args.skip_reference:
                plan.append(("ptp4l", None))
            if not args.skip_candidate:
                cmd = None if args.candidate_cmd.strip() == "ptp4l" else args.candidate_cmd
                plan.append(("candidate", cmd))
            for i, (name, cmd) in enumerate(plan):
                share = (end - time.monotonic()) / (len(plan) - i)  # an equal share of what is left
                gm = Grandmaster(name, ns, workdir, cmd)
                res = {"name": name, "runs": [], "best": 0, "broke_at": None, "first_failure": None, "stopped": None}
                results.append(res)
                try:
                    ladder(gm, exe, ns, counts, args, time.monotonic() + share, res)
                finally:
                    gm.stop()
        except KeyboardInterrupt:
            stopping.append("interrupted")
            log("interrupted: reporting the runs done")
        finally:
            ns.teardown()
    print_table(results, args)
    by_name = {r["name"]: r for r in results}
    ref, cand = by_name.get("ptp4l"), by_name.get("candidate")
    for res in results:
        broke = f"first failure at {res['first_failure']:,}" if res.get("first_failure") else "no failure"
        print(f"  {res['name']:12} largest client count with zero missed Syncs: {res['best']:,} ({broke})")
    r = ratio(cand["best"], ref["best"]) if ref and cand else float("nan")
    if ref and cand:
        print(f"  ratio candidate / ptp4l: {r:.2f}")
    if cand:
        beat = cand["best"] >= FIGURE_TO_BEAT
        print(f"  figure to beat: {FIGURE_TO_BEAT:,} clients (default unicast client limit of a commercial PTP card): "
              f"candidate {'reaches' if beat else 'does not reach'} it")
    print_target(cand)
    if args.json:
        args.json.write_text(json.dumps({
            "ptp4l_version": version, "counts": counts, "duration_s": args.duration, "warmup_s": args.warmup,
            "ramp_per_s": args.ramp, "log_sync_interval": args.log_sync, "candidate_cmd": args.candidate_cmd,
            "figure_to_beat": FIGURE_TO_BEAT, "ratio_candidate_to_reference": r, "elapsed_s":
            time.monotonic() - start, "results": results}, indent=2, default=str) + "\n")
    return 130 if stopping else 0


if __name__ == "__main__":
    raise SystemExit(main())
