"""SNMP agent under a walk loop: what it costs NTP and PTP serving at the same time, in the same run.

    python bench/snmp_load.py [--duration 20] [--rounds 3] [--ntp-window 32] [--ptp-rate 16]
                              [--max-walks 2000] [--max-repetitions 10] [--snmp-rate 100000]
                              [--walk-sched idle|normal] [--ftrace] [--json FILE]

The set-up, the windows, the CPU meter, the PTP pooling and the NTP / PTP / CPU report are bench/console_load.py's
(imported, not copied); only the load differs.  Two network namespaces joined by a veth pair; in namespace A the
appliance (console_load's command: learned clock state, PTP on the veth at ``--ptp-rate`` Sync/s, NTP with one
worker and no rate limit, the console idle) pinned to CPU 0, with its SNMP agent on namespace A's address::

    --set snmp.enabled=true --set snmp.listen=<A> --set snmp.port=16161 --set snmp.community=public
    --set snmp.allow=<B>/32 --set snmp.rate_per_s=<--snmp-rate> --set snmp.users_file=<an SNMPv3 user 'bench',
    SHA-256/AES-128, made with `appliance snmp user-add bench --stdin` before the start>

``snmp.rate_per_s``: each source address gets that many requests per second (token bucket, 2 s burst; the default
is 200).  A whole-tree walk is about 33 GETBULK requests (some 320 objects, 10 per answer), and the loop runs about
11 v2c walks/s when CPU 1 is otherwise idle: some 380 requests/s from the one address of namespace B, above the
default; a dropped request stalls its walk for net-snmp's timeout (2 s here) before the retry, so the bench would
measure the rate limiter and the client's retry timer rather than the agent.  So by default the bench sets 100000,
the setting's maximum (as console_load sets web.rate_per_s to its maximum); the agent's ``rate_limited`` and
``denied`` counters are printed after the run, and a run where they are not 0 is not a pass.  The global budget
(``snmp.max_requests_per_s``, all sources together, 100/s by default: beyond it requests wait in the socket for their
turn) is left as shipped; it paces the walk loop rather than dropping it.  ``--snmp-rate 200``
measures the appliance as shipped.

In namespace B, on CPU 1 (the bench pins itself there; its children inherit it): the free-running ptp4l slave
measuring every Sync, ntpload (bench/ntpload.c, ``--ntp-window`` requests in flight), and the load: a walk loop, one
process that runs net-snmp's ``snmpbulkwalk`` of the whole tree (``.1``, GETBULK with ``--max-repetitions``,
``-m APPLIANCE-MIB:SNMPv2-MIB -M deploy/mibs:.cache/ietf-mibs`` as tests/interop/test_snmp.py) back to back, one
walk after the other, for the window's ``--duration`` s and at most ``--max-walks`` walks (each walk: net-snmp
timeout 2 s, 1 retry, killed after 30 s).  It runs as SCHED_IDLE on CPU 1 with its walks (``--walk-sched idle``,
like wrk in console_load), so that ntpload, the slave and the bench never wait for it.  Conditions: no load, the walk
loop over SNMPv2c (community public), over SNMPv3 authPriv (user bench, SHA-256/AES-128; the passphrases are random,
in an snmp.conf of the bench's private directory, not on command lines).  Every walk is timed (process start to
exit, so it includes snmpbulkwalk's start and, for v3, its engine discovery and key localisation) and its objects
counted; a walk fails if it exits non-zero, prints an error or returns no object.  Before and after the load one
walk of each version is checked (sysDescr, applianceClockState).

Windows of ``--duration`` s (measured from 1 s after the start to 1 s before the end), NTP windows then PTP windows,
each condition once per round, ``--rounds`` times, the order reversed every other round.  Printed: walks/s (median
over the windows), the walk's p50 / p99 / max time (walks of all windows pooled), objects and GETBULK requests per
walk; then console_load's figures: NTP replies/s and the ratio with / without the walk loop (target >= 0.95), the
slave's PTP rms (the median of the windows' own) and p99|offset| and their ratios (target <= 1.05), the CPU per
window (the appliance's main process runs the event loop: PTP and the SNMP agent, whose CPU time lands there; its
child is the NTP worker; 'snmpbulkwalk' is the walk loop with its walks), and, from /proc/<pid>/task/*/schedstat
over the same measured time, how long the appliance's event-loop thread, its other threads and its NTP worker ran on
CPU 0 and how long each waited there, runnable, for the CPU (a load that takes CPU 0 from the NTP worker shows as the
worker's waiting); the appliance log's tracebacks.  ``--json FILE``: every figure of every window.

Safety: traffic only inside the two namespaces created (and always deleted) here; ptp4l only free-running and
without CAP_SYS_TIME, the appliance without it as well; the load bounded by ``--duration`` and ``--max-walks`` per
window and ``--rounds``.  Needs root, ip, ptp4l, pmc, setpriv, taskset, chrt, gcc, snmpbulkwalk (net-snmp).  A
default run takes about 7 minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import console_load as cl
from bench.console_load import (
    APPLIANCE_CPU,
    LEAD_S,
    LOAD_CPU,
    PROFILE,
    Load,
    children_of,
    classify_log,
    med,
    report_service,
    start_appliance,
    summarise,
    wait_locked,
    window,
)
from bench.ntp_throughput import build_load
from bench.ptp_offset import PROFILE_DELAY, slave_options
from harness.procs import ENV, wait_for
from harness.ptp_harness import PROFILE_SLAVE_OPTIONS, NetnsPair, Ptp4l

SNMP_PORT = 16161  # inside namespace A, which is new: nothing else is bound there
COMMUNITY = "public"
V3_USER = "bench"
CONDITIONS = ("none", "v2c", "v3")
RATE_PER_S = 100_000  # snmp.rate_per_s for the bench: the setting's maximum, the per-address limit out of the way
MIBS = ["-m", "APPLIANCE-MIB:SNMPv2-MIB", "-M", f"{ROOT / 'deploy' / 'mibs'}:{ROOT / '.cache' / 'ietf-mibs'}"]
WALK_KILL_S = 30.0  # a walk still running after this is killed (and counted failed)


# --- the walk loop (runs inside namespace B, started by the bench itself) --------------------------------------------

def objects_of(stdout: str) -> int:
    """Objects a walk printed: its ``name = value`` lines, less the endOfMibView / noSuch* ones that end it."""
    return sum(1 for line in stdout.splitlines() if " = " in line and "No more variables left" not in line
               and "No Such" not in line)


def complaints(stderr: str) -> str:
    """What a walk wrote on stderr, less net-snmp's notice that it made its state directory (first use)."""
    return "\n".join(line for line in stderr.strip().splitlines() if not line.startswith("Created directory:"))


def walk_loop(spec_json: str) -> int:
    """Run ``spec["argv"]`` (an snmpbulkwalk) back to back until ``spec["deadline"]`` (monotonic; the clock is the
    host's, the same in every namespace) or ``spec["max_walks"]`` walks; print one JSON line: per walk its start
    (s from the first), time (ms), objects; failures with their first messages."""
    spec = json.loads(spec_json)
    argv, deadline, max_walks = spec["argv"], float(spec["deadline"]), int(spec["max_walks"])
    starts: list[float] = []
    times_ms: list[float] = []
    objects: list[int] = []
    failed, errors = 0, []
    first = time.monotonic()
    while len(times_ms) < max_walks and time.monotonic() < deadline:
        t0 = time.monotonic()
        try:
            run = subprocess.run(argv, capture_output=True, text=True, timeout=WALK_KILL_S, check=False)
            code, out, err = run.returncode, run.stdout, run.stderr
        except subprocess.TimeoutExpired as exc:
            code, out, err = -9, "", f"killed after {WALK_KILL_S:g} s: {exc}"
        t1 = time.monotonic()
        n = objects_of(out)
        starts.append(t0 - first)
        times_ms.append(1000 * (t1 - t0))
        objects.append(n)
        if code != 0 or n == 0 or complaints(err):
            failed += 1
            if len(errors) < 5:
                errors.append(f"exit {code}, {n} objects: {err.strip()[-300:]}")
    end = time.monotonic()
    print(json.dumps({"walks": len(times_ms), "failed": failed, "errors": errors, "seconds": end - first,
                      "start_s": starts, "times_ms": times_ms, "objects": objects}))
    return 0


# --- the load, for console_load's windows ----------------------------------------------------------------------------

def walk_argv(version: str, target: str, max_repetitions: int) -> list[str]:
    auth = ["-v2c", "-c", COMMUNITY] if version == "v2c" else \
        ["-v3", "-l", "authPriv", "-u", V3_USER, "-a", "SHA-256", "-x", "AES"]  # passphrases: snmp.conf
    return ["snmpbulkwalk", *auth, *MIBS, "-t", "2", "-r", "1", f"-Cr{max_repetitions}", target, ".1"]


def snmp_env(ctx: dict[str, Any]) -> dict[str, str]:
    """net-snmp reads the bench's snmp.conf only (the v3 passphrases) and keeps its state in the bench's directory."""
    return {**ENV, "SNMPCONFPATH": str(ctx["snmp_conf_dir"]), "SNMP_PERSISTENT_DIR": str(ctx["snmp_persist_dir"])}


def start_walks(net: NetnsPair, condition: str, ctx: dict[str, Any], args: argparse.Namespace) -> subprocess.Popen:
    spec = {"argv": walk_argv(condition, ctx["snmp_target"], args.max_repetitions),
            "deadline": time.monotonic() + args.duration, "max_walks": args.max_walks}
    sched = ["chrt", "--idle", "0"] if args.walk_sched == "idle" else []
    return net.run(net.ns_b, [*sched, sys.executable, str(Path(__file__).resolve()), "--walk-loop", json.dumps(spec)],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=snmp_env(ctx),
                   start_new_session=True)


def finish_walks(proc: subprocess.Popen, args: argparse.Namespace) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=args.duration + 2 * WALK_KILL_S + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return {"ok": False, "error": "the walk loop did not end in time", "text": (out + err)[-2000:]}
    try:
        result = json.loads(out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"ok": False, "error": f"the walk loop exited {proc.returncode}", "text": (out + err)[-2000:]}
    result["ok"] = proc.returncode == 0
    result["walks_per_s"] = result["walks"] / result["seconds"] if result["seconds"] else 0.0
    return result


def walk_cpu_s(pid: int) -> float:
    """utime + stime of the walk loop and of the walks it has reaped (cutime + cstime), seconds; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def summarise_walks(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The walk loops of several windows: walks/s median over them, walk times pooled."""
    good = [r for r in runs if r.get("ok")]
    times = [t for r in good for t in r["times_ms"]]
    objects = [n for r in good for n in r["objects"]]
    per_walk = med([float(n) for n in objects])
    return {"walks_per_s": med([r["walks_per_s"] for r in good]),
            "per_round_walks_per_s": [r["walks_per_s"] for r in good],
            "p50_ms": percentile(times, 50), "p90_ms": percentile(times, 90), "p99_ms": percentile(times, 99),
            "max_ms": max(times) if times else math.nan, "walks": len(times),
            "failed": sum(r["failed"] for r in good), "errors": [e for r in good for e in r["errors"]][:5],
            "objects_min": min(objects) if objects else 0, "objects_median": per_walk,
            "objects_max": max(objects) if objects else 0, "failed_runs": len(runs) - len(good)}


SCHED_PARTS = ("loop_thread", "other_threads", "ntp_worker")


def sched_probe(pid: int) -> dict[str, float]:
    """Seconds on a CPU and seconds runnable but waiting for one (/proc/.../schedstat) of the appliance's main
    thread (the event loop: PTP and the SNMP agent), of its other threads (the console's) and of its children (the
    NTP worker), each summed over its threads."""
    out = {f"{part}_{what}_s": 0.0 for part in SCHED_PARTS for what in ("run", "wait")}
    for owner in (pid, *children_of(pid)):
        try:
            tids = [int(t.name) for t in Path(f"/proc/{owner}/task").iterdir()]
        except OSError:
            continue
        for tid in tids:
            try:
                run_ns, wait_ns = (int(x) for x in Path(f"/proc/{owner}/task/{tid}/schedstat").read_text().split()[:2])
            except (OSError, ValueError):
                continue
            part = "ntp_worker" if owner != pid else "loop_thread" if tid == pid else "other_threads"
            out[f"{part}_run_s"] += run_ns / 1e9
            out[f"{part}_wait_s"] += wait_ns / 1e9
    return out


SNMP = Load("snmp", "snmpbulkwalk", CONDITIONS, start_walks, finish_walks, summarise_walks, walk_cpu_s,
            main_does="event loop: PTP and the SNMP agent; console threads", probe=sched_probe)


# --- set-up ----------------------------------------------------------------------------------------------------------

def add_v3_user(users_file: Path, state: Path) -> tuple[str, str]:
    auth, priv = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
    cl.appliance_cli("snmp", "user-add", V3_USER, "--auth", "SHA-256", "--priv", "AES-128", "--stdin", "--set",
                     f"snmp.users_file={users_file}", state=state, stdin=f"{auth}\n{priv}\n")
    return auth, priv


def check_walks(net: NetnsPair, ctx: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """One walk of each version from namespace B, at the bench's priority: it answers, and says the clock is locked."""
    out: dict[str, Any] = {}
    for version in CONDITIONS[1:]:
        argv = walk_argv(version, ctx["snmp_target"], args.max_repetitions)
        t0 = time.monotonic()
        run = subprocess.run(["ip", "netns", "exec", net.ns_b, *argv], capture_output=True, text=True,
                             env=snmp_env(ctx), timeout=WALK_KILL_S, check=False)
        values = {}
        for line in run.stdout.splitlines():
            name, sep, value = line.partition(" = ")
            if sep:
                values[name.split("::")[-1]] = value
        n = objects_of(run.stdout)
        ok = run.returncode == 0 and not complaints(run.stderr) and n > 150 and \
            values.get("sysDescr.0", "").startswith("STRING: GNSS grandmaster time server appliance")
        out[version] = {"ok": ok, "objects": n, "ms": 1000 * (time.monotonic() - t0),
                        "clock_state": values.get("applianceClockState.0", "?"),
                        "stderr": run.stderr.strip()[-500:], "exit": run.returncode}
    return out


def appliance_snmp_settings(net: NetnsPair, users_file: Path, args: argparse.Namespace) -> str:
    return (f"--set snmp.enabled=true --set snmp.listen={{ip4}} --set snmp.port={SNMP_PORT} "
            f"--set snmp.community={COMMUNITY} --set snmp.allow={net.ip4_b}/32 "
            f"--set snmp.rate_per_s={args.snmp_rate} --set snmp.users_file={users_file}")


# --- report ----------------------------------------------------------------------------------------------------------

def report(s: dict[str, Any], windows: list[dict[str, Any]], args: argparse.Namespace,
           check: dict[str, Any]) -> bool:
    ok = True
    print(f"SNMP agent under a walk loop (snmpbulkwalk of the whole tree, -Cr{args.max_repetitions}, back to back, "
          f"at most {args.max_walks} walks per window; {args.duration:g} s per window, measured over the middle "
          f"{args.duration - 2 * LEAD_S:g} s, {args.rounds} rounds); appliance on CPU {APPLIANCE_CPU} serving PTP "
          f"({PROFILE}, udp4, {args.ptp_rate:g} Sync/s), NTP (1 worker), SNMP (snmp.rate_per_s={args.snmp_rate} for "
          f"the bench) and the console (idle); ptp4l slave, ntpload (window {args.ntp_window}) and the walk loop "
          f"({'SCHED_IDLE' if args.walk_sched == 'idle' else 'normal'} priority) on CPU {LOAD_CPU}, over a veth pair")
    print("  SNMP check: " + ", ".join(f"{v} {c['objects']} objects in {c['ms']:.0f} ms, applianceClockState "
                                       f"{c['clock_state']}" for v, c in check.items()))
    print("SNMP walks (walks/s: median over the windows; walk times: all walks of the windows pooled; GETBULK requests "
          "per walk: ceil((objects + 1) / max-repetitions), v3 adds its engine discovery)")
    print(f"  {'version':8} {'while':22} {'walks/s':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'walks':>6} {'failed':>6} {'objects/walk':>12} {'GETBULK/walk':>12} {'GETBULK/s':>9}")
    for cond in CONDITIONS[1:]:
        for kind, label in (("ptp", "PTP measured, NTP idle"), ("ntp", "NTP load")):
            c = s["snmp"][f"{cond}/{kind}"]
            objects = f"{c['objects_min']}" if c["objects_min"] == c["objects_max"] else \
                f"{c['objects_min']}-{c['objects_max']}"
            getbulk = math.ceil((c["objects_median"] + 1) / args.max_repetitions) \
                if not math.isnan(c["objects_median"]) else 0
            print(f"  {cond:8} {label:22} {c['walks_per_s']:8.2f} {c['p50_ms']:8.1f} {c['p90_ms']:8.1f} "
                  f"{c['p99_ms']:8.1f} {c['max_ms']:8.1f} {c['walks']:6d} {c['failed']:6d} {objects:>12} "
                  f"{getbulk:12d} {getbulk * c['walks_per_s']:9.0f}")
            for e in c["errors"][:3]:
                print(f"      {e[:200]}")
            ok &= c["failed_runs"] == 0 and c["failed"] == 0 and c["walks"] > 0
    ok = report_service(s, windows, args, SNMP) and ok
    print(f"Scheduling on CPU {APPLIANCE_CPU} (medians over the windows, in % of the measured time; /proc schedstat): "
          f"time on the CPU and time runnable but waiting for it, of the appliance's event-loop thread (PTP and the "
          f"SNMP agent), its other threads (console) and its NTP worker process")
    for kind in ("ntp", "ptp"):
        for cond in CONDITIONS:
            ws = [w for w in windows if w["kind"] == kind and w["condition"] == cond and "probe" in w["cpu"]]
            cells = []
            for part, label in zip(SCHED_PARTS, ("event loop", "other threads", "NTP worker")):
                run = med([100 * w["cpu"]["probe"][f"{part}_run_s"] / w["cpu"]["seconds"] for w in ws])
                wait = med([100 * w["cpu"]["probe"][f"{part}_wait_s"] / w["cpu"]["seconds"] for w in ws])
                cells.append(f"{label} ran {run:5.1f} waited {wait:5.1f}")
            print(f"  {kind}/{cond:10} " + "   ".join(cells))
    return ok


# --- main ------------------------------------------------------------------------------------------------------------

def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--walk-loop":
        return walk_loop(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of each window and walk loop (default 20)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of the 6 windows (default 3: a median over three windows passes over one spike)")
    ap.add_argument("--ntp-window", type=int, default=32, help="NTP requests in flight (default 32)")
    ap.add_argument("--max-walks", type=int, default=2000,
                    help="at most this many walks per window (default 2000; the loop ends at the window's end "
                    "first: about 20 walks/s)")
    ap.add_argument("--max-repetitions", type=int, default=10,
                    help="snmpbulkwalk -Cr: objects asked per GETBULK (default 10, net-snmp's default)")
    ap.add_argument("--snmp-rate", type=int, default=RATE_PER_S,
                    help=f"snmp.rate_per_s of the appliance (default {RATE_PER_S}, the setting's maximum: the "
                    "per-address rate limit out of the way; the appliance's own default is 200)")
    ap.add_argument("--walk-sched", choices=("idle", "normal"), default="idle",
                    help="the walk loop's scheduling on the load CPU (default idle: SCHED_IDLE, so that ntpload, the "
                    "ptp4l slave and the bench never wait for it; normal: it competes with them)")
    cl.add_service_arguments(ap, "include every PTP sample and every walk (start, time, objects) of every window "
                                 "in --json")
    args = ap.parse_args()
    args.domain = int(PROFILE_SLAVE_OPTIONS[PROFILE]["domainNumber"])
    args.web_rate = cl.RATE_PER_S  # console_load's appliance command, unchanged (the console is not loaded here)
    if os.geteuid() != 0:
        print("snmp_load: needs root (network namespaces)", file=sys.stderr)
        return 2
    for tool in ("ip", "ptp4l", "pmc", "setpriv", "taskset", "chrt", "gcc", "snmpbulkwalk"):
        if shutil.which(tool) is None:
            hint = " (apt-get install -y snmp)" if tool == "snmpbulkwalk" else \
                " (scripts/test-all installs the Debian peers)"
            print(f"snmp_load: {tool} is needed{hint}", file=sys.stderr)
            return 2
    if not (ROOT / ".cache" / "ietf-mibs" / "SNMPv2-MIB.txt").exists():
        print("snmp_load: .cache/ietf-mibs/SNMPv2-MIB.txt is needed (the interop tests fetch it)", file=sys.stderr)
        return 2
    if args.duration < 5 or args.rounds < 1 or args.max_walks < 1 or not 1 <= args.max_repetitions <= 100:
        print("snmp_load: --duration must be >= 5 s, --rounds >= 1, --max-walks >= 1, --max-repetitions 1..100",
              file=sys.stderr)
        return 2
    if len(os.sched_getaffinity(0) | {APPLIANCE_CPU, LOAD_CPU}) < 2 or (os.cpu_count() or 1) < 2:
        print("snmp_load: needs two CPUs (0 for the appliance, 1 for the load)", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {LOAD_CPU})  # the bench and all it starts (slave, pmc, ntpload, walks) on the load CPU
    started = time.monotonic()
    windows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="snmp-load-") as tmp, NetnsPair(prefix="psl") as net:
        workdir = Path(tmp)
        os.chmod(workdir, 0o700)
        ntpload = build_load(workdir)
        users_file = workdir / "snmp-users.toml"
        auth, priv = add_v3_user(users_file, workdir)
        conf_dir, persist_dir = workdir / "snmp-conf", workdir / "snmp-persist"
        conf_dir.mkdir(mode=0o700)
        persist_dir.mkdir(mode=0o700)
        conf = conf_dir / "snmp.conf"
        conf.touch(mode=0o600)
        conf.write_text(f"defAuthPassphrase {auth}\ndefPrivPassphrase {priv}\n")
        candidate, state = start_appliance(net, workdir, args, appliance_snmp_settings(net, users_file, args))
        slave = None
        try:
            t0 = time.monotonic()
            wait_locked(candidate, state, args.ready_timeout)
            to_locked = time.monotonic() - t0
            ctx = {"appliance_pid": candidate.proc.pid, "candidate": candidate, "ntpload": ntpload,
                   "snmp_target": f"udp:{net.ip4_a}:{SNMP_PORT}", "snmp_conf_dir": conf_dir,
                   "snmp_persist_dir": persist_dir, "tracer": cl.KernelTrace() if args.ftrace else None,
                   "appliance_comm": Path(f"/proc/{candidate.proc.pid}/comm").read_text().strip()}
            check = check_walks(net, ctx, args)
            if not all(c["ok"] for c in check.values()):
                raise RuntimeError(f"SNMP check walks failed: {json.dumps(check)[:2000]}")
            slave = Ptp4l(net.b, transport="udp4", delay=PROFILE_DELAY[PROFILE],
                          extra=slave_options(PROFILE, args.domain), sync_rate_hint=args.ptp_rate, label="measuring")
            to_slave = slave.wait_slave(args.ready_timeout)
            time.sleep(args.settle)
            ctx["slave"] = slave
            for r in range(args.rounds):
                order = CONDITIONS if r % 2 == 0 else CONDITIONS[::-1]
                for kind in ("ntp", "ptp"):
                    for cond in order:
                        windows.append(window(net, kind, cond, r, ctx, args, SNMP))
            final = wait_for(state, lambda st: True, 20)
            after = check_walks(net, ctx, args)
        except BaseException:
            candidate.stop()
            print(f"snmp_load: failed; appliance log tail:\n"
                  f"{candidate.log_path.read_text(errors='replace')[-3000:]}", file=sys.stderr)
            raise
        finally:
            if slave is not None:
                slave.stop()
            candidate.stop()
        full_log = candidate.log_path.read_text(errors="replace")
        problems = classify_log(full_log)
        log_tail = full_log[-4000:]
    summary = summarise(windows, SNMP)
    ok = report(summary, windows, args, check)
    ptp_out = final.get("outputs", {}).get("ptp", {})
    ntp_out = final.get("outputs", {}).get("ntp", {})
    snmp_out = final.get("outputs", {}).get("snmp", {})
    print(f"After the load: clock {final['clock']['state']}, PTP port {ptp_out.get('port_state', ptp_out.get('state'))}"
          f", SNMP agent: denied {snmp_out.get('denied')}, rate_limited {snmp_out.get('rate_limited')}, error "
          f"{snmp_out.get('error')!r}; a walk after the load: "
          + ", ".join(f"{v} {'works' if c['ok'] else 'FAILS'} ({c['objects']} objects)" for v, c in after.items())
          + f"; locked after {to_locked:.1f} s, slave after {to_slave:.1f} s; run {time.monotonic() - started:.0f} s")
    during = sum(w["log_until_measured_end"]["tracebacks"] + len(w["log_until_measured_end"]["error_lines"])
                 for w in windows)
    at_end = sum(w["log_after_measured_end"]["tracebacks"] + len(w["log_after_measured_end"]["error_lines"])
                 for w in windows)
    print(f"Appliance log: {problems['tracebacks']} tracebacks, {len(problems['error_lines'])} other error lines in "
          f"all; {during} while the windows were measured, {at_end} in the last second of a window or the pause after "
          f"it")
    for text, count in sorted(problems["exceptions"].items(), key=lambda kv: -kv[1]):
        print(f"    {count:5d} x {text}")
    for line in problems["error_lines"][:10]:
        print(f"          {line[:200]}")
    ok &= during == 0 and all(c["ok"] for c in after.values())
    ok &= not snmp_out.get("rate_limited") and not snmp_out.get("denied")
    if args.json:
        if not args.keep_series:
            for w in windows:
                w.pop("ptp_samples", None)
                for key in ("start_s", "times_ms", "objects"):
                    w.get("snmpbulkwalk", {}).pop(key, None)
        Path(args.json).write_text(json.dumps(
            {"args": vars(args), "appliance_command": candidate.command, "appliance_cpu": APPLIANCE_CPU,
             "load_cpu": LOAD_CPU, "snmp_rate_per_s": args.snmp_rate, "snmp_check": check, "snmp_check_after": after,
             "to_locked_s": to_locked, "to_slave_s": to_slave, "summary": summary, "windows": windows,
             "final_status": {"clock": final.get("clock"), "ptp": ptp_out, "ntp": ntp_out, "snmp": snmp_out},
             "appliance_log_problems": problems, "appliance_log_tail": log_tail}, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
