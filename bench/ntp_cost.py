"""NTP CPU cost per reply: the appliance's NTP worker against chronyd as a server, same fixed load, same run.

    python bench/ntp_cost.py [--rounds 7] [--window-s 2] [--rate 50000] [--burst 1] [--kinds ntp,nts] [--repeats 2]

Throughput on this shared 2-vCPU guest moves by 20 % to 10x from one run to the next; what a reply costs the server
moves much less, so this bench offers both servers the same fixed load, well below what either can answer, and
measures the CPU time each spends per reply by its own accounting: the run time of every thread of the process that
answers (/proc/<pid>/task/*/schedstat, in ns) over a window, less what that process spends per second when nothing
is asked of it (idle windows beside the loaded ones, the median of them), divided by the replies the load generator
received in the window.  For the appliance the process that answers is its NTP worker (one, ntp.workers=1, native
fast path), not the main appliance process; for chronyd its one process (its NTS-KE helper is another and is not
counted).  Both servers run at once on CPU 0 (taskset), at their usual priority, the load generator on CPU 1, on
loopback, at SCHED_FIFO 1 (chrt): it is not measured, and at normal priority the other tenants of a busy shared
host kept it from its schedule for a third of the requests; so it keeps it.

The load is bench/ntpload.c (basic NTP client requests) or bench/ntsload.c (NTS requests: a fresh Unique
Identifier, nonce and AES-SIV authenticator each, every 8th reply decrypted), both with -r: a request every
1/--rate s (--burst of them together every burst/rate s), open loop, whatever the server does; after the window the
generator waits for the requests still in flight, so every request is either answered or lost, and its loss is
printed per window (both servers should answer everything: a lossy window's cost is not comparable).  The servers
are those of bench/ntp_throughput.py and bench/nts_throughput.py: chronyd -x (never touching the clock, without the
clock capability) as an NTS server with its own self-signed certificate, the appliance with ntp.nts_enabled and its
rate limits off; for NTS each generator gets the keys and cookies of one NTS-KE session with its server.

For NTP a third process answers the same load: bench/ntpfloor.c, the least a server on the socket API does (kernel
receive timestamps, recvmmsg, a reply made of the request, sendmmsg; no policy at all).  On loopback most of a
reply's cost is the kernel's UDP path (the sender's side also runs the receiver's, in its own softirq), which every
server pays; the floor measures it, and the summary prints, beside the target's ratio, the ratio of what each server
costs above the floor and the floor's share of chronyd's cost (the lowest ratio any server on this path can reach).

A round is an idle window (no server asked anything) and one loaded window per server, each server first in turn
round by round, --rounds rounds per kind after a warm-up window each.  Other tenants of the shared host stall the server or
the generator now and then for milliseconds, long enough to overflow the server's receive buffer: a loaded window
that lost more than 0.1 % of its requests, or whose generator fell behind its schedule for more than 5 % of them
(it does not send a request more than 1 ms late, which would go out in a burst), is done again, up to --repeats
times; how many were, and why, is printed.  Printed per kind: each round's replies, loss and cost;
per server the median CPU microseconds per reply with its 95 % bootstrap interval (windows resampled); the ratio
appliance / chronyd of the medians with its bootstrap interval (each server's windows resampled on their own) and
the target (NTP <= 0.5, NTS <= 0.7): PASS when the ratio is at most the target, said to be decided when the whole
interval is on the same side; and the kernel's split of each server's time between user space and the kernel
(/proc/<pid>/stat, tick-sampled, over all its windows), applied to the median.  Exit status: 0 every kind PASS, 1 a FAIL or a window still disturbed, 2 a tool
missing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import ntp_throughput, nts_throughput  # noqa: E402
from harness.cost import (LOSS_LIMIT_PCT, bootstrap_median, bootstrap_ratio_of_medians,  # noqa: E402
                          cost_us, disturbed, process_cpu_ns, process_user_system_s, verdict)
from bench.ntp_throughput import appliance_status, stop  # noqa: E402
from bench.nts_throughput import (LOAD_CPU, SERVER_CPU, Server, chronyd_serverstats, ke_exchange,  # noqa: E402
                                  key_file_text, make_certificate, private_dir)

KINDS = ("ntp", "nts")
TARGETS = {"ntp": 0.5, "nts": 0.7}  # CPU per reply, appliance / chronyd, at most
SERVERS = ("appliance", "chronyd")
FLOOR = "floor"  # bench/ntpfloor.c: what any server on the socket API pays per reply (NTP only: it has no NTS)
ALL = SERVERS + (FLOOR,)
TIMEOUT_MS = 200  # a request unanswered this long is lost
WARMUP_S = 1.0


# --- pure helpers (tests/unit/test_bench_ntp_cost.py) ----------------------------------------------------------------

@dataclass
class Window:
    cpu_ns: int
    wall_s: float
    load: dict  # the generator's JSON line
    user_s: float = 0.0  # the kernel's tick-sampled split of the window's CPU time
    system_s: float = 0.0


@dataclass
class Kind:
    name: str
    idle: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in ALL})  # ns per s
    windows: dict[str, list[Window]] = field(default_factory=lambda: {s: [] for s in ALL})
    repeated: dict[str, list[str]] = field(default_factory=lambda: {s: [] for s in ALL})  # why, per repeat
    counters: dict[str, dict] = field(default_factory=dict)
    repeats: int = 0

    @property
    def servers(self) -> tuple[str, ...]:
        return ALL if self.windows[FLOOR] else SERVERS

    def idle_ns_per_s(self, server: str) -> float:
        return statistics.median(self.idle[server]) if self.idle[server] else 0.0

    def costs(self, server: str) -> list[float]:
        idle = self.idle_ns_per_s(server)
        return [cost_us(w.cpu_ns, w.wall_s, w.load["valid"], idle) for w in self.windows[server]]


def servers_of(kind: str) -> tuple[str, ...]:
    return ALL if kind == "ntp" else SERVERS


def load_command(exe: Path, kind: str, port: int, keyfile: Path | None, seconds: float, rate: float,
                 burst: int) -> list[str]:
    cmd = ["chrt", "-f", "1", "taskset", "-c", LOAD_CPU, str(exe), "-h", "127.0.0.1", "-p", str(port),
           "-d", str(seconds), "-r", str(rate), "-B", str(burst), "-t", str(TIMEOUT_MS)]
    return cmd + (["-k", str(keyfile), "-a", "8"] if kind == "nts" else [])


def loaded_window(pid: int, cmd: list[str], seconds: float) -> Window:
    (u0, s0), cpu0, t0 = process_user_system_s(pid), process_cpu_ns(pid), time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=seconds + 30)
    cpu1, t1, (u1, s1) = process_cpu_ns(pid), time.perf_counter(), process_user_system_s(pid)
    return Window(cpu1 - cpu0, t1 - t0, json.loads(out.stdout.strip().splitlines()[-1]), u1 - u0, s1 - s0)


def idle_window(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Each server's CPU per second (ns/s) with nothing asked of it."""
    cpu0, t0 = {s: process_cpu_ns(p) for s, p in pids.items()}, time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - t0
    return {s: (process_cpu_ns(p) - cpu0[s]) / wall for s, p in pids.items()}


def worker_pid(server: Server) -> int:
    """The appliance's one NTP worker process (the one that answers)."""
    assert server.state is not None
    status = appliance_status(server.state) or {}
    workers = status.get("outputs", {}).get("ntp", {}).get("workers", [])
    if len(workers) != 1 or not workers[0].get("alive") or not workers[0].get("pid"):
        raise RuntimeError(f"expected one live NTP worker, the appliance says {workers}")
    return int(workers[0]["pid"])


def start_floor(workdir: Path) -> Server:
    """bench/ntpfloor.c on the servers' CPU, answering on a free port."""
    exe = workdir / "ntpfloor"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(ROOT / "bench" / "ntpfloor.c")], check=True)
    port = nts_throughput.free_port()
    proc = subprocess.Popen(["taskset", "-c", SERVER_CPU, str(exe), str(port)], start_new_session=True)
    ntp_throughput.wait_answers(port)
    return Server(FLOOR, proc, port, 0, workdir)


def counters(server: Server) -> dict:
    if server.name == FLOOR:
        return {}
    if server.state is not None:
        status = appliance_status(server.state) or {}
        return status.get("outputs", {}).get("ntp", {}).get("totals", {})
    assert server.sock is not None
    return chronyd_serverstats(server.sock)


def counter_delta(before: dict, after: dict, name: str) -> int | str:
    try:
        return int(after[name]) - int(before[name])
    except (KeyError, ValueError):
        return "?"


def measure_kind(kind: str, servers: dict[str, Server], pids: dict[str, int], loads: dict[str, Path],
                 workdir: Path, args: argparse.Namespace) -> Kind:
    names = servers_of(kind)
    keyfiles: dict[str, Path | None] = {s: None for s in names}
    if kind == "nts":
        for name in names:
            server = servers[name]
            ke, c2s, s2c = ke_exchange(server.ke_port, server.cert)
            keyfiles[name] = workdir / f"keys-{name}"
            fd = os.open(keyfiles[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(key_file_text(c2s, s2c, ke.cookies))
    cmds = {s: load_command(loads[kind], kind, servers[s].ntp_port, keyfiles[s], args.window_s, args.rate,
                            args.burst) for s in names}
    for s in names:  # warm-up, not counted
        subprocess.run(load_command(loads[kind], kind, servers[s].ntp_port, keyfiles[s], WARMUP_S, args.rate,
                                    args.burst), capture_output=True, check=True, timeout=WARMUP_S + 30)
    result = Kind(kind)
    before = {s: counters(servers[s]) for s in names}
    for r in range(args.rounds):
        for s, ns_per_s in idle_window({s: pids[s] for s in names}, args.window_s).items():
            result.idle[s].append(ns_per_s)
        order = names[r % len(names):] + names[:r % len(names)]  # each server first in turn
        for s in order:
            for attempt in range(args.repeats + 1):  # a window the host disturbed is done again
                window = loaded_window(pids[s], cmds[s], args.window_s)
                why = disturbed(window.load)
                if not why or attempt == args.repeats:
                    break
                result.repeated[s].append(why)
            result.windows[s].append(window)
        print_round(kind, r, result)
    result.repeats = args.repeats
    after = {s: counters(servers[s]) for s in names}
    result.counters = {s: {"before": before[s], "after": after[s]} for s in names}
    return result


# --- printing ---------------------------------------------------------------------------------------------------------

def _faults(load: dict) -> str:
    parts = [f"{load[k]:,} {k}" for k in ("skipped", "late", "invalid", "nak", "kod", "stale") if load.get(k)]
    return (" (" + ", ".join(parts) + ")") if parts else ""


def print_round(kind: str, r: int, res: Kind) -> None:
    parts = []
    for s in res.servers:
        w = res.windows[s][-1]
        cost = cost_us(w.cpu_ns, w.wall_s, w.load["valid"], res.idle[s][-1])
        parts.append(f"{s} {w.load['valid']:>9,} replies, loss {w.load['loss_pct']:.3f} %{_faults(w.load)}, "
                     f"{cost:6.2f} us/reply, generator CPU {w.load['load_cpu_pct']:.0f} %")
    idle = ", ".join(f"{s} {res.idle[s][-1] / 1e6:.2f}" for s in res.servers)
    print(f"  {kind} round {r + 1}: " + " | ".join(parts) + f" | idle ms/s: {idle}", flush=True)


def summarize(res: Kind, rate: float) -> tuple[bool, list[str]]:
    """The kind's summary lines; True when PASS and no window lost more than LOSS_LIMIT_PCT."""
    lines = []
    costs = {s: res.costs(s) for s in res.servers}
    for s in res.servers:
        med = statistics.median(costs[s])
        low, high = bootstrap_median(costs[s])
        losses = [w.load["loss_pct"] for w in res.windows[s]]
        user = sum(w.user_s for w in res.windows[s])
        share = user / (user + sum(w.system_s for w in res.windows[s]) or 1)
        lines.append(f"  {res.name.upper()} {s:10} {med:6.2f} us CPU per reply (95 % interval {low:.2f} .. "
                     f"{high:.2f}; {len(costs[s])} windows, idle {res.idle_ns_per_s(s) / 1e6:.2f} ms/s subtracted "
                     f"= {res.idle_ns_per_s(s) / rate / 1e3:.3f} us per request at this rate); in user space "
                     f"{100 * share:.0f} % = {share * med:.2f} us, in the kernel {(1 - share) * med:.2f} us; "
                     f"loss per window max {max(losses):.3f} %")
    ratio, low, high = bootstrap_ratio_of_medians(costs["appliance"], costs["chronyd"])
    target = TARGETS[res.name]
    word, decided = verdict(ratio, low, high, target)
    lines.append(f"  {res.name.upper()} ratio appliance / chronyd {ratio:.2f} (95 % interval {low:.2f} .. {high:.2f})"
                 f"   target <= {target}: {word} ({decided})")
    if FLOOR in costs:
        ratio, low, high = bootstrap_ratio_of_medians(costs["appliance"], costs["chronyd"], floor=costs[FLOOR])
        lines.append(f"  {res.name.upper()} above the floor (what each costs over the least a server on the socket "
                     f"API pays, bench/ntpfloor.c): appliance / chronyd {ratio:.2f} (95 % interval {low:.2f} .. "
                     f"{high:.2f}); the floor is {statistics.median(costs[FLOOR]) / statistics.median(costs['chronyd']):.2f}"
                     f" of chronyd's cost, so no server on this path costs less than that ratio")
    still = {s: sum(1 for w in res.windows[s] if disturbed(w.load)) for s in res.servers}
    for s in res.servers:
        if res.repeated[s] or still[s]:
            lines.append(f"  {res.name.upper()} {s}: {len(res.repeated[s])} windows done again, the host having "
                         f"disturbed them (e.g. {res.repeated[s][0] if res.repeated[s] else '-'}); {still[s]} of "
                         f"{len(res.windows[s])} kept still disturbed after {res.repeats} repeats (a busy host, or a "
                         f"rate too high: lower --rate)")
    lossy = any(still.values())
    c = res.counters
    a0, a1 = c["appliance"]["before"], c["appliance"]["after"]
    ch0, ch1 = c["chronyd"]["before"], c["chronyd"]["after"]
    lines.append(f"  {res.name.upper()} counters over the rounds: appliance {counter_delta(a0, a1, 'replies'):,} "
                 f"replies ({counter_delta(a0, a1, 'nts'):,} NTS, "
                 f"{counter_delta(a0, a1, 'rx_without_kernel_timestamp')} without a kernel receive timestamp); "
                 f"chronyd {counter_delta(ch0, ch1, 'NTP packets received'):,} NTP packets received, "
                 f"{counter_delta(ch0, ch1, 'NTP packets dropped')} dropped, "
                 f"{counter_delta(ch0, ch1, 'Authenticated NTP packets'):,} authenticated")
    return word == "PASS" and not lossy, lines


# --- main -------------------------------------------------------------------------------------------------------------

def main() -> int:
    class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
        pass

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=Formatter)
    ap.add_argument("--rounds", type=int, default=7, help="rounds per kind (idle window, then each server's)")
    ap.add_argument("--window-s", type=float, default=2.0, help="seconds per window")
    ap.add_argument("--rate", type=float, default=50000.0, help="requests offered per second")
    ap.add_argument("--burst", type=int, default=1, help="requests sent together (one sendmmsg) every burst/rate s")
    ap.add_argument("--kinds", default=",".join(KINDS), help="ntp, nts or both")
    ap.add_argument("--repeats", type=int, default=1,
                    help=f"times a window is done again when it lost more than {LOSS_LIMIT_PCT} %% or the generator "
                         f"fell behind (a stall of the shared host)")
    args = ap.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if (not kinds or any(k not in KINDS for k in kinds) or not 1 <= args.rounds <= 100
            or not 0.2 <= args.window_s <= 60 or not 0 < args.rate <= 1e6 or not 1 <= args.burst <= 1024):
        ap.error("kinds ntp,nts; rounds 1..100; window 0.2..60 s; rate 0..1e6; burst 1..1024")
    logging.basicConfig(level=logging.ERROR)
    for tool in ("gcc", "chronyd", "taskset", "setpriv", "chrt"):
        if shutil.which(tool) is None:
            print(f"ntp_cost: {tool} is needed (scripts/test-all installs the Debian peers)", file=sys.stderr)
            return 2
    os.sched_setaffinity(0, {int(LOAD_CPU)})  # the bench and its status calls off the servers' CPU
    version = subprocess.run(["chronyd", "-v"], capture_output=True, text=True).stdout.split()[3:4]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o700)
        try:
            loads = {"ntp": ntp_throughput.build_load(workdir), "nts": nts_throughput.build_load(workdir)}
        except SystemExit as exc:
            print(exc, file=sys.stderr)
            return 2
        cert, key = make_certificate(private_dir(workdir, "chronyd-cert"))
        started = time.monotonic()
        servers: dict[str, Server] = {}
        try:
            servers["chronyd"] = nts_throughput.start_chronyd(workdir, "cost", cert, key)
            servers["appliance"] = nts_throughput.start_appliance(workdir, "cost")
            if "ntp" in kinds:
                servers[FLOOR] = start_floor(workdir)
            pids = {s: (worker_pid(v) if s == "appliance" else v.proc.pid) for s, v in servers.items()}
            print(f"NTP CPU cost per reply on loopback: servers on CPU {SERVER_CPU} (appliance NTP worker pid "
                  f"{pids['appliance']}, native fast path; chronyd {' '.join(version)} pid {pids['chronyd']}, -x"
                  f"{'; the floor, bench/ntpfloor.c, for NTP' if FLOOR in pids else ''}), "
                  f"load generator on CPU {LOAD_CPU}: {args.rate:,.0f} requests/s offered"
                  f"{'' if args.burst == 1 else f' in bursts of {args.burst}'}, {args.rounds} rounds of an idle "
                  f"window and one {args.window_s:g} s window per server, servers alternating; started in "
                  f"{time.monotonic() - started:.0f} s", flush=True)
            results = [measure_kind(k, servers, pids, loads, workdir, args) for k in kinds]
        finally:
            for server in servers.values():
                stop(server.proc)
    ok = True
    print(f"Summary (median CPU per reply over the windows, 95 % bootstrap intervals; {time.monotonic() - started:.0f} s):")
    for res in results:
        passed, lines = summarize(res, args.rate)
        ok &= passed
        print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
