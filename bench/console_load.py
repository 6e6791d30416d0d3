"""Web console under load: its latency, and what it costs NTP and PTP serving at the same time, in the same run.

    python bench/console_load.py [--connections 50] [--duration 12] [--rounds 6] [--ntp-window 128]
                                 [--ptp-rate 16] [--web-rate 10000] [--generator ab|wrk] [--load-sched idle|normal]
                                 [--ftrace] [--json FILE]

Set-up: two network namespaces joined by a veth pair (harness/ptp_harness.py NetnsPair).  In namespace A the
appliance (the ``appliance run`` command of bench/ptp_offset.py, with a learned clock state so that it locks within
seconds) pinned to CPU 0, serving at once PTP on the veth (udp4, default-e2e, ``--ptp-rate`` Sync/s), NTP on its
address (one worker, no NTP rate limit) and the HTTPS console on its address.  The console rate-limits each client
address (``web.rate_per_s``, 20/s by default): for the bench it is started with ``--set web.rate_per_s=10000`` (the
setting's maximum; 100000 is refused), far above what the console answers, so that the load measures the console
rather than its rate limiter.  The global budget (``web.max_requests_per_s``: all clients together, 20/s by
default, beyond it requests wait their turn) is left as shipped: it is what keeps a flood off the CPU time serves
from, so the load measures it.  In namespace B, everything the bench starts runs on CPU 1 (the bench pins itself
there and its children inherit it): a free-running ptp4l slave measuring every Sync for the whole run (never
adjusting the clock: free_running 1, no CAP_SYS_TIME), the NTP load generator of bench/ntp_throughput.py
(bench/ntpload.c, a fixed window of ``--ntp-window`` requests in flight: 128 by default, so that the NTP worker
always finds requests waiting and replies/s is its capacity, not 32 divided by the round trip -- at 32 the
figure follows every microsecond of latency and moved by 10 % between rounds with nothing changed), and the HTTP
load generator: ApacheBench
(``ab`` from Debian's apache2-utils, ``--generator ab``, the default) with ``--connections`` keep-alive connections for
``--duration`` s, against ``/api/v1/status`` with ``Authorization: Bearer <token>`` (a viewer's API token made with
``appliance user token``) or against the dashboard page ``/`` with ``Cookie: appliance_session=...`` (one login
through the login form first, with requests, inside namespace B; the dashboard and the API are checked to answer 200
with the cookie or the token alone, before and after the load).  The generator is closed-loop (each connection sends
its next request when the previous answer is in: the console is kept as busy as it can be) and runs as SCHED_IDLE on
CPU 1, so that ntpload, the slave and the bench never wait for it: a fall in NTP replies is then the appliance's,
not the load generator's.  ``--generator wrk`` uses Debian's wrk instead (one thread; a small script counts the HTTP
status codes and the answers carrying ``Connection: close``): wrk spins on a TLS connection whose handshake the
server has not answered yet, and the console, paced to its budget, leaves some waiting, so wrk took 5 to 37 % of the
load CPU for 20 requests a second, starving ntpload and passing that off as the appliance's loss (ab: under 0.5 %).
ab's latency percentiles are over every request of a window (its -g file, millisecond resolution); it tells 2xx
answers from the rest only.

Windows of ``--duration`` s each, measured from 1 s after the start to 1 s before the end (the load's connections
and TLS handshakes are set up in the first second):

* NTP: ntpload at the fixed window with no console load, with the load on the status API, then on the dashboard;
* PTP: the slave's offsets with no console load, with the load on the status API, then on the dashboard;

``--rounds`` times, the order of the conditions reversed every other round (a shared host drifts).  Printed: the
console's latency (p50/p90/p99/max, requests/s, errors and HTTP status codes, medians over the windows), NTP
replies/s (median over rounds) and the ratio with/without console load (target >= 0.95, i.e. < 5 % fewer replies),
PTP rms and p99 of |offset| over the pooled samples of each condition, and the ratios with/without (target <= 1.05)
of the p99 and of the windows' rms (the median over a condition's windows of each window's own rms: a single
scheduling spike of tens of microseconds, which a shared VM hands out about once in a thousand Syncs whatever runs,
dominates the rms of all the samples pooled, and so decides which condition "loses" by where it falls; the pooled
rms ratio is printed beside it, and the samples beyond 10 us are counted), with a 95 % bootstrap interval of the NTP
and PTP rms ratios over the windows (how far the ratio could move with the windows the shared host handed out: a
ratio judged against 5 % whose interval spans tens of percent is undecided by that run), and the CPU use per window:
each CPU's busy share, CPU time of the appliance's main process (event loop, PTP and the console's threads) and of
its child (the NTP worker), of the HTTP load generator, ntpload and the measuring side, and of everything else on the
host (a warning is printed when other work took more than 5 % of a CPU).  Tracebacks in the appliance's log are
counted, split into those logged while a window was measured and those of its last second (the load ending and
dropping its connections).
``--ftrace`` also times, in each PTP window, every 44-byte PTP frame of the appliance (Sync, Follow_Up) inside the
kernel, from the veth's start of transmit (its timestamp) to the slave side's netif_rx (the slave's timestamp), and
counts those over 10 us and those of them with no guest event on the sending CPU: the hypervisor's stalls
(bench/ptp_sync_transit.py).
``--json FILE`` writes every figure of every window (the PTP figures of the NTP windows too; ``--keep-series``: every
PTP sample).

Safety: test traffic only inside the two namespaces created (and always deleted) here; ptp4l only free-running and
without CAP_SYS_TIME, the appliance without it as well; load bounded by ``--duration`` per window and ``--rounds``.
Needs root (namespaces), ip, ptp4l, pmc, setpriv, taskset, chrt, gcc, ab (or wrk).  A default run (6 rounds of
six 12 s windows: short windows, many of them, so that the medians pass over the few a spike falls in) takes about 9
minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ntp_throughput import build_load
from bench.ptp_offset import DEFAULT_CANDIDATE, PROFILE_DELAY, Candidate, log_sync_of, slave_options
from harness.kernel_trace import KernelTrace, kernel_transits, merge_kernel
from harness.procs import ENV, status, wait_for
from harness.ptp_appliance import seed_learned_state
from harness.ptp_harness import PROFILE_SLAVE_OPTIONS, NetnsPair, Ptp4l, summarize

APPLIANCE_CPU, LOAD_CPU = 0, 1
NTP_PORT, WEB_PORT = 11123, 8443  # inside namespace A, which is new: nothing else is bound there
LEAD_S = 1.0  # each window is measured from LEAD_S after its start to LEAD_S before its end
GAP_S = 1.0  # pause between windows
RATE_PER_S = 10_000  # web.rate_per_s for the bench (the most the setting takes): the per-address limit out of the way
PROFILE = "default-e2e"
CONDITIONS = ("none", "api", "dashboard")
NTP_TARGET, PTP_TARGET = 0.95, 1.05  # < 5 % fewer NTP replies; PTP rms and p99 < 5 % worse
USER = "bench"
SPIKE_NS = 10_000  # |offset| beyond this: a single scheduling spike (counted; it dominates an rms of a few hundred)
OTHER_LIMIT_PCT = 5.0  # CPU taken by other processes or the hypervisor in a window beyond which the report warns

WRK_SCRIPT = r"""
-- Counts the HTTP status codes per thread and prints everything as one JSON line at the end.
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) statuses = {}; closes = 0 end
function response(status, headers, body)
  local k = tostring(status)
  statuses[k] = (statuses[k] or 0) + 1
  for name, value in pairs(headers) do
    if string.lower(name) == "connection" and string.lower(value) == "close" then closes = closes + 1 end
  end
end
function done(summary, latency, requests)
  local codes, closed = {}, 0
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    if s then for k, v in pairs(s) do codes[k] = (codes[k] or 0) + v end end
    closed = closed + (t:get("closes") or 0)
  end
  local parts = {}
  for k, v in pairs(codes) do table.insert(parts, string.format('"%s": %d', k, v)) end
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests": %d, "duration_us": %d, "bytes": %d, '
    .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, '
    .. '"latency_us": {"min": %d, "mean": %.1f, "stdev": %.1f, "max": %d, "p50": %d, "p75": %d, "p90": %d, '
    .. '"p99": %d, "p999": %d}, "status": {%s}, "connection_close": %d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.stdev, latency.max, latency:percentile(50), latency:percentile(75),
    latency:percentile(90), latency:percentile(99), latency:percentile(99.9), table.concat(parts, ", "), closed))
end
"""


# --- the login helper (runs inside namespace B, started by the bench itself) -----------------------------------------

def login_helper(url: str, user: str, cert: str) -> int:
    """Log in through the form (GET /login, csrf_token, POST), check the dashboard with the session cookie alone and
    the status API with the token alone; print {"cookie", sizes} as JSON.  Password and token come on stdin; the
    console's self-signed certificate ``cert`` is the one trusted."""
    import requests

    password, token = sys.stdin.readline().strip(), sys.stdin.readline().strip()
    out: dict[str, Any] = {}
    with requests.Session() as s:
        page = s.get(f"{url}/login", verify=cert, timeout=10)
        m = re.search(r'name="csrf_token"\s+value="([^"]+)"', page.text) or re.search(
            r'value="([^"]+)"\s+name="csrf_token"', page.text)
        if page.status_code != 200 or not m:
            print(json.dumps({"error": f"GET /login: {page.status_code}, csrf_token found: {bool(m)}"}))
            return 1
        posted = s.post(f"{url}/login", data={"user": user, "password": password, "csrf_token": m.group(1),
                                              "next": "/"}, headers={"Referer": f"{url}/login"},
                        verify=cert, allow_redirects=False, timeout=30)
        cookie = s.cookies.get("appliance_session")
        out["login_status"] = posted.status_code
        out["login_location"] = posted.headers.get("Location", "")
        if posted.status_code != 302 or not cookie:
            out["error"] = f"POST /login answered {posted.status_code} (cookie: {bool(cookie)}): {posted.text[:300]}"
            print(json.dumps(out))
            return 1
    out["cookie"] = f"appliance_session={cookie}"
    dash = requests.get(f"{url}/", headers={"Cookie": out["cookie"]}, verify=cert, allow_redirects=False, timeout=10)
    out["dashboard_status"], out["dashboard_bytes"] = dash.status_code, len(dash.content)
    out["dashboard_ok"] = dash.status_code == 200 and "<h1>Dashboard</h1>" in dash.text
    api = requests.get(f"{url}/api/v1/status", headers={"Authorization": f"Bearer {token}"}, verify=cert,
                       allow_redirects=False, timeout=10)
    out["api_status"], out["api_bytes"] = api.status_code, len(api.content)
    out["api_ok"] = api.status_code == 200 and "clock" in api.json()
    print(json.dumps(out))
    return 0 if out["dashboard_ok"] and out["api_ok"] else 1


# --- measurements ----------------------------------------------------------------------------------------------------

def cpu_times() -> dict[str, dict[str, int]]:
    """Per-CPU jiffies from /proc/stat: cpuN -> busy (all but idle and iowait), task (user, nice, system: time
    charged to processes), irq (hard and soft interrupts), steal (the hypervisor ran something else), total."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if re.match(r"cpu\d+ ", line):
            f = [int(x) for x in line.split()[1:9]]
            out[line.split()[0]] = {"busy": sum(f) - f[3] - f[4], "task": f[0] + f[1] + f[2], "irq": f[5] + f[6],
                                    "steal": f[7], "total": sum(f)}
    return out


def proc_cpu_s(pid: int) -> float:
    """utime + stime of one process (all its threads), seconds; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_of(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return kids


def all_processes() -> dict[int, tuple[str, float]]:
    """pid -> (command name, CPU seconds) of every process now."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                head, tail = (entry / "stat").read_text().rsplit(")", 1)
                f = tail.split()
                out[int(entry.name)] = (head.split("(", 1)[1], (int(f[11]) + int(f[12])) / tick)
            except (OSError, IndexError, ValueError):
                continue
    return out


def children_rusage_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class CpuMeter:
    """Between start() and stop(): busy and softirq share of each CPU; CPU seconds of the appliance's main process
    and of its children (the NTP worker), of wrk (still running at stop()) and of the children the bench reaped
    meanwhile (ntpload).  Another load generator than wrk: ``load_name`` names its figure (``<name>_cpu_s``) and
    ``load_cpu_s(pid)`` reads its CPU seconds; ``probe()``: more counters (seconds), their differences in "probe"."""

    def __init__(self, appliance_pid: int, wrk_pid: int | None, measuring_pids: list[int],
                 load_cpu_s: Callable[[int], float] | None = None, load_name: str = "wrk",
                 probe: Callable[[], dict[str, float]] | None = None):
        self.pid, self.wrk_pid, self.measuring = appliance_pid, wrk_pid, measuring_pids
        self.load_cpu_s, self.load_name, self.probe = load_cpu_s or proc_cpu_s, load_name, probe
        self.kids = children_of(appliance_pid)

    def start(self) -> None:
        self.t0, self.cpu0 = time.monotonic(), cpu_times()
        self.main0, self.kids0 = proc_cpu_s(self.pid), {k: proc_cpu_s(k) for k in self.kids}
        self.wrk0 = self.load_cpu_s(self.wrk_pid) if self.wrk_pid else 0.0
        self.reaped0 = children_rusage_s()
        self.measuring0 = sum(proc_cpu_s(p) for p in self.measuring)
        self.everyone0 = all_processes()
        self.probe0 = self.probe() if self.probe else {}

    def stop(self) -> dict[str, Any]:
        elapsed, cpu1 = time.monotonic() - self.t0, cpu_times()
        busy, softirq, steal = {}, {}, {}
        for name, now in cpu1.items():
            then = self.cpu0.get(name)
            span = now["total"] - then["total"] if then else 0
            for into, key in ((busy, "busy"), (softirq, "irq"), (steal, "steal")):
                into[name] = 100.0 * (now[key] - then[key]) / span if span > 0 else math.nan
        out = {"seconds": elapsed, "busy_pct": busy, "softirq_pct": softirq, "steal_pct": steal,
               "appliance_main_cpu_s": proc_cpu_s(self.pid) - self.main0,
               "appliance_children_cpu_s": sum(proc_cpu_s(k) - v for k, v in self.kids0.items()),
               f"{self.load_name}_cpu_s": self.load_cpu_s(self.wrk_pid) - self.wrk0 if self.wrk_pid else 0.0,
               "ntpload_cpu_s": children_rusage_s() - self.reaped0,
               "measuring_cpu_s": sum(proc_cpu_s(p) for p in self.measuring) - self.measuring0}
        # Whatever else ran on the two CPUs meanwhile (other users of a shared host): the time charged to
        # processes there, less ours.
        total = sum(cpu1[c]["task"] - self.cpu0[c]["task"] for c in cpu1
                    if c in (f"cpu{APPLIANCE_CPU}", f"cpu{LOAD_CPU}")) / os.sysconf("SC_CLK_TCK")
        ours = sum(v for k, v in out.items() if k.endswith("_cpu_s"))
        out["other_cpu_s"] = max(0.0, total - ours)
        mine = {self.pid, *self.kids, *self.measuring, self.wrk_pid}
        others: dict[str, float] = {}
        for pid, (name, cpu_s) in all_processes().items():  # who they were (processes alive at both ends)
            if pid not in mine and pid in self.everyone0 and cpu_s - self.everyone0[pid][1] > 0.05 * elapsed:
                others[name] = others.get(name, 0.0) + cpu_s - self.everyone0[pid][1]
        out["other_processes_cpu_s"] = dict(sorted(others.items(), key=lambda kv: -kv[1])[:5])
        if self.probe:
            out["probe"] = {k: v - self.probe0.get(k, 0.0) for k, v in self.probe().items()}
        return out


def log_size(log: Path) -> int:
    try:
        return log.stat().st_size
    except FileNotFoundError:
        return 0


def log_segment(log: Path, start: int, end: int) -> dict[str, Any]:
    """Tracebacks (by their final line) and other error lines the appliance logged between two offsets."""
    with open(log, "rb") as f:
        f.seek(start)
        text = f.read(max(0, end - start)).decode(errors="replace")
    return classify_log(text)


def classify_log(text: str) -> dict[str, Any]:
    exceptions: dict[str, int] = {}
    other: list[str] = []
    lines = text.splitlines()
    in_tb = False
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            in_tb = True
            continue
        if in_tb and not line.startswith(" "):  # the exception line that ends a traceback
            key = re.sub(r"\(_ssl\.c:\d+\)", "", line).strip()[:160]
            exceptions[key] = exceptions.get(key, 0) + 1
            in_tb = False
        elif not in_tb and re.search(r"\b(ERROR|CRITICAL)\b|Exception", line):
            other.append(line[:300])
    return {"tracebacks": sum(exceptions.values()), "exceptions": exceptions, "error_lines": other}


def start_generator(net: NetnsPair, argv: list[str], args: argparse.Namespace) -> subprocess.Popen:
    """An HTTP load generator in namespace B, at SCHED_IDLE unless ``--load-sched normal``."""
    sched = ["chrt", "--idle", "0"] if args.load_sched == "idle" else []
    return net.run(net.ns_b, [*sched, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                   start_new_session=True)


def generator_output(proc: subprocess.Popen, args: argparse.Namespace) -> str | None:
    """What the generator printed; None (and it is killed) if it outlives its run."""
    try:
        text, _ = proc.communicate(timeout=args.duration + args.load_timeout + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    return text


def start_wrk(net: NetnsPair, url: str, header: str, args: argparse.Namespace, script: Path) -> subprocess.Popen:
    return start_generator(net, ["wrk", "-t", str(args.wrk_threads), "-c", str(args.connections), "-d",
                                 f"{args.duration:g}s", "--timeout", f"{args.load_timeout:g}s", "--latency", "-s",
                                 str(script), "-H", header, url], args)


def finish_wrk(proc: subprocess.Popen, args: argparse.Namespace) -> dict[str, Any]:
    text = generator_output(proc, args)
    if text is None:
        return {"ok": False, "error": "wrk did not end in time", "text": ""}
    line = next((ln for ln in text.splitlines() if ln.startswith("WRKJSON ")), None)
    if proc.returncode != 0 or line is None:
        return {"ok": False, "error": f"wrk exited {proc.returncode}", "text": text}
    result = json.loads(line[len("WRKJSON "):])
    result["ok"] = True
    result["requests_per_s"] = result["requests"] / (result["duration_us"] / 1e6) if result["duration_us"] else 0.0
    result["bytes_per_request"] = result["bytes"] / result["requests"] if result["requests"] else 0.0
    result["text"] = "\n".join(ln for ln in text.splitlines() if not ln.startswith("WRKJSON "))
    return result


def start_ab(net: NetnsPair, url: str, header: str, args: argparse.Namespace, samples: Path) -> subprocess.Popen:
    """ApacheBench (Debian's apache2-utils): ``--connections`` keep-alive connections for ``--duration`` s, each
    request's times into ``samples`` (-g); a response's varying length is not an error (-l), nor is a reset
    connection the end of the run (-r)."""
    return start_generator(net, ["ab", "-q", "-k", "-l", "-r", "-c", str(args.connections), "-t",
                                 f"{args.duration:g}", "-n", "100000000", "-s", f"{args.load_timeout:g}", "-g",
                                 str(samples), "-H", header, url], args)


def _ab_field(text: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)}:\s+([0-9.]+)", text, re.M)
    return float(m.group(1)) if m else None


def percentile(sorted_values: list[float], pct: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(pct / 100 * len(sorted_values)) - 1))]


def finish_ab(proc: subprocess.Popen, args: argparse.Namespace, samples: Path) -> dict[str, Any]:
    """ab's result in wrk's terms (requests, latency percentiles in us over every request of the window, errors,
    status counts: ab tells 2xx from the rest only)."""
    text = generator_output(proc, args)
    if text is None:
        return {"ok": False, "error": "ab did not end in time", "text": ""}
    done, taken = _ab_field(text, "Complete requests"), _ab_field(text, "Time taken for tests")
    if proc.returncode != 0 or done is None or taken is None:
        return {"ok": False, "error": f"ab exited {proc.returncode}", "text": text}
    m = re.search(r"\(Connect: (\d+), Receive: (\d+), Length: (\d+), Exceptions: (\d+)\)", text)
    connect, receive, _length, exceptions = (int(g) for g in m.groups()) if m else (0, 0, 0, 0)
    non_2xx = int(_ab_field(text, "Non-2xx responses") or 0)
    keep_alive = int(_ab_field(text, "Keep-Alive requests") or 0)
    total_ms: list[float] = []
    try:
        for line in samples.read_text().splitlines()[1:]:  # starttime, seconds, ctime, dtime, ttime, wait (ms)
            cols = line.split("\t")
            if len(cols) >= 5:
                total_ms.append(float(cols[4]))
    except FileNotFoundError:
        pass
    total_ms.sort()
    requests = int(done)
    status = {"2xx": requests - non_2xx, **({"non-2xx": non_2xx} if non_2xx else {})}
    return {"ok": True, "requests": requests, "duration_us": taken * 1e6, "requests_per_s": requests / taken,
            "bytes_per_request": (_ab_field(text, "Total transferred") or 0.0) / requests if requests else 0.0,
            "latency_us": {p: percentile(total_ms, q) * 1000 for p, q in
                           (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))},
            "errors": {"connect": connect, "read": receive, "write": exceptions, "timeout": 0},
            "status": status, "connection_close": requests - keep_alive, "text": text}


def start_console_load(net: NetnsPair, condition: str, ctx: dict[str, Any],
                       args: argparse.Namespace) -> subprocess.Popen:
    url = f"{ctx['url']}/api/v1/status" if condition == "api" else f"{ctx['url']}/"
    header = f"Authorization: Bearer {ctx['token']}" if condition == "api" else f"Cookie: {ctx['cookie']}"
    if args.generator == "ab":
        proc = start_ab(net, url, header, args, ctx["workdir"] / "ab-samples.tsv")
    else:
        proc = start_wrk(net, url, header, args, ctx["wrk_script"])
    proc.samples = ctx["workdir"] / "ab-samples.tsv"  # type: ignore[attr-defined]
    return proc


def finish_console_load(proc: subprocess.Popen, args: argparse.Namespace) -> dict[str, Any]:
    if args.generator == "ab":
        result = finish_ab(proc, args, proc.samples)  # type: ignore[attr-defined]
        proc.samples.unlink(missing_ok=True)  # type: ignore[attr-defined]
        return result
    return finish_wrk(proc, args)


@dataclass(frozen=True)
class Load:
    """The load a window runs for a condition other than "none", and how the bench names and summarises it (this
    bench: wrk on the console; bench/snmp_load.py: snmpbulkwalk loops on the SNMP agent)."""

    name: str  # "console": the progress lines, the report ("console load") and the summary's key
    tool: str  # "wrk": a window's key for its result, and the CPU figure's name (<tool>_cpu_s)
    conditions: tuple[str, ...]  # "none" first
    start: Callable[[NetnsPair, str, dict[str, Any], argparse.Namespace], subprocess.Popen]
    finish: Callable[[subprocess.Popen, argparse.Namespace], dict[str, Any]]
    summarise: Callable[[list[dict[str, Any]]], dict[str, Any]]  # the results of one condition's windows of a kind
    cpu_s: Callable[[int], float] = proc_cpu_s  # CPU seconds of the running generator (its pid)
    main_does: str = "event loop, PTP, console threads"  # what the appliance's main process runs, for the report
    probe: Callable[[int], dict[str, float]] | None = None  # more counters of the appliance (its pid) per window


def window(net: NetnsPair, kind: str, condition: str, round_no: int, ctx: dict[str, Any],
           args: argparse.Namespace, load: Load | None = None) -> dict[str, Any]:
    """One window: wrk on ``condition`` (or nothing), and NTP load or PTP observation in the middle of it."""
    load = load or CONSOLE
    print(f"  ... round {round_no + 1}: {kind.upper()} with {load.name} load: {condition}", file=sys.stderr,
          flush=True)
    slave: Ptp4l = ctx["slave"]
    log: Path = ctx["candidate"].log_path
    measure_s = args.duration - 2 * LEAD_S
    wrk = None
    t_start, log_start = time.monotonic(), log_size(log)
    if condition != "none":
        wrk = load.start(net, condition, ctx, args)
    measuring = [os.getpid(), slave.proc.pid] + ([slave._poller.proc.pid] if slave._poller and slave._poller.proc
                                                 else [])
    probe = load.probe
    meter = CpuMeter(ctx["appliance_pid"], wrk.pid if wrk is not None else None,  # ip netns exec, chrt exec wrk
                     measuring, load.cpu_s, load.tool,
                     (lambda: probe(ctx["appliance_pid"])) if probe is not None else None)
    time.sleep(LEAD_S)
    out: dict[str, Any] = {"kind": kind, "condition": condition, "round": round_no}
    tracer = ctx.get("tracer") if kind == "ptp" else None
    if tracer is not None:
        tracer.start()
    meter.start()
    begin = time.monotonic()
    if kind == "ntp":
        run = subprocess.run(["ip", "netns", "exec", net.ns_b, str(ctx["ntpload"]), "-h", net.ip4_a, "-p",
                              str(NTP_PORT), "-d", f"{measure_s:g}", "-w", str(args.ntp_window)],
                             capture_output=True, text=True, timeout=measure_s + 30, check=False)
        if run.returncode == 0 and run.stdout.strip():
            out["ntp"] = json.loads(run.stdout.strip().splitlines()[-1])
        else:
            out["ntp"] = {"error": f"ntpload exited {run.returncode}: {run.stderr[-500:]}"}
    else:
        time.sleep(max(0.0, begin + measure_s - time.monotonic()))
    end = time.monotonic()
    out["cpu"] = meter.stop()
    if tracer is not None:
        out["kernel"] = kernel_transits(tracer.stop(), ctx.get("appliance_comm", "python"))
    log_measured = log_size(log)
    remaining = t_start + args.duration - time.monotonic()
    if wrk is not None:
        out[load.tool] = load.finish(wrk, args)
    elif remaining > 0:
        time.sleep(remaining)  # the same timing without console load
    time.sleep(GAP_S)  # a pause between windows; the poller's last samples; the log of wrk's last connections
    log_end = log_size(log)
    out["log_until_measured_end"] = log_segment(log, log_start, log_measured)
    out["log_after_measured_end"] = log_segment(log, log_measured, log_end)
    offsets = [o for o in slave.offsets_ns() if begin <= o[0] <= end]
    out["ptp"] = summarize(offsets, discard_s=0.0)
    out["ptp"]["syncs_per_s"] = out["ptp"]["count"] / (end - begin)
    out["ptp_samples"] = offsets  # (monotonic time, offset ns, path delay ns)
    out["measured_s"] = end - begin
    if not slave.alive():
        raise RuntimeError(f"the ptp4l slave exited; log:\n{slave.tail(40)}")
    if ctx["candidate"].proc.poll() is not None:
        raise RuntimeError(f"the appliance exited ({ctx['candidate'].proc.returncode}); log tail:\n"
                           + ctx["candidate"].log_path.read_text(errors="replace")[-3000:])
    cpu = out["cpu"]
    out["shared_host"] = (100 * cpu["other_cpu_s"] / cpu["seconds"] > OTHER_LIMIT_PCT
                          or sum(cpu["steal_pct"].get(f"cpu{c}", 0.0) for c in (APPLIANCE_CPU, LOAD_CPU))
                          > OTHER_LIMIT_PCT)
    return out


# --- set-up ----------------------------------------------------------------------------------------------------------

def appliance_cli(*argv: str, state: Path, stdin: str = "") -> str:
    out = subprocess.run([sys.executable, "-m", "appliance", *argv, "--set", f"state_dir={state}"], input=stdin,
                         capture_output=True, text=True, env=ENV, timeout=60, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"appliance {' '.join(argv)} exited {out.returncode}: {out.stderr.strip()}")
    return out.stdout.strip()


def start_appliance(net: NetnsPair, workdir: Path, args: argparse.Namespace, extra: str = "") -> tuple[Candidate, Path]:
    """ptp_offset's appliance command (learned state, PTP on the veth), plus NTP and the console on namespace A's
    address, pinned to APPLIANCE_CPU, under setpriv without CAP_SYS_TIME (Candidate); ``extra``: more settings
    (``--set`` ...; ``{ip4}`` is namespace A's address)."""
    run_dir = workdir / "appliance"
    run_dir.mkdir()
    state = run_dir / "state"
    seed_learned_state(state)
    cmd = (f"taskset -c {APPLIANCE_CPU} {DEFAULT_CANDIDATE} --set ntp.enabled=true --set ntp.listen={{ip4}} "
           f"--set ntp.port={NTP_PORT} --set ntp.workers=1 --set ntp.rate_limit_per_s=0 "
           f"--set web.enabled=true --set web.listen={{ip4}} --set web.port={WEB_PORT} "
           f"--set web.rate_per_s={args.web_rate} --set log.level=warning" + (f" {extra}" if extra else ""))
    fields = {"python": sys.executable, "iface": net.if_a, "transport": "udp4", "log_sync": log_sync_of(args.ptp_rate),
              "state_dir": state, "domain": args.domain, "profile": PROFILE, "ns": net.ns_a, "ip4": net.ip4_a,
              "ip6": net.ip6_a, "workdir": run_dir, "ptp4l_cfg": ""}
    candidate = Candidate(net, cmd, fields, run_dir / "appliance.log")
    candidate.command = cmd.format(**fields)
    return candidate, state


def wait_locked(candidate: Candidate, state: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if candidate.proc.poll() is not None:
            raise RuntimeError(f"the appliance exited ({candidate.proc.returncode}) before locking")
        st = status(state)
        if st is not None and st["clock"]["state"] == "LOCKED":
            return
        time.sleep(0.5)
    raise RuntimeError(f"the appliance did not lock within {timeout_s:g} s")


def setup_users(state: Path) -> tuple[str, str]:
    password = secrets.token_urlsafe(18)
    appliance_cli("user", "add", USER, "--role", "viewer", "--password-stdin", state=state, stdin=password + "\n")
    token = appliance_cli("user", "token", USER, "--label", "console-load-bench", state=state).splitlines()[-1]
    return password, token.strip()


def login(net: NetnsPair, url: str, password: str, token: str, cert: Path) -> dict[str, Any]:
    run = subprocess.run(["ip", "netns", "exec", net.ns_b, sys.executable, str(Path(__file__).resolve()),
                          "--login-helper", url, str(cert)], input=f"{password}\n{token}\n", capture_output=True,
                         text=True, env=ENV, timeout=120, check=False)
    try:
        result = json.loads(run.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        raise RuntimeError(f"login helper exited {run.returncode}: {run.stdout[-1000:]} {run.stderr[-2000:]}") from exc
    if run.returncode != 0:
        raise RuntimeError(f"console login/check failed: {json.dumps(result)[:1500]} {run.stderr[-1500:]}")
    return result


# --- summary ---------------------------------------------------------------------------------------------------------

def pooled_ptp(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The harness's offset statistics over the samples of several windows together."""
    rows = sorted(tuple(o) for w in windows for o in w["ptp_samples"])
    out = summarize(rows, discard_s=0.0)
    out["over_10us"] = sum(1 for r in rows if abs(r[1]) > SPIKE_NS)
    measured = sum(w["measured_s"] for w in windows)
    out["syncs_per_s"] = out["count"] / measured if measured else math.nan
    return out


def window_rms(ptp: dict[str, Any]) -> float:
    """The median over a condition's windows of each window's rms: what the condition does to every window, not
    which window a rare scheduling spike of the shared host happened to fall in (one spike of tens of microseconds
    doubles the rms of all the samples pooled)."""
    return med(ptp.get("per_round_rms_ns", []))


def med(values: list[float]) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def summarise_wrk(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """wrk's results of several windows: latency medians over them, counts summed."""
    good = [r for r in runs if r.get("ok")]
    statuses: dict[str, int] = {}
    for r in good:
        for k, v in r["status"].items():
            statuses[k] = statuses.get(k, 0) + v
    return {
        "requests_per_s": med([r["requests_per_s"] for r in good]),
        **{f"{p}_ms": med([r["latency_us"][p] / 1000 for r in good])
           for p in ("p50", "p90", "p99", "max")},
        "per_round_p50_ms": [r["latency_us"]["p50"] / 1000 for r in good],
        "per_round_p99_ms": [r["latency_us"]["p99"] / 1000 for r in good],
        "requests": sum(r["requests"] for r in good),
        "socket_errors": sum(r["errors"][k] for r in good for k in ("connect", "read", "write")),
        "timeouts": sum(r["errors"]["timeout"] for r in good),
        "http_status": statuses, "bytes_per_request": med([r["bytes_per_request"] for r in good]),
        "connection_close": sum(r["connection_close"] for r in good),
        "failed_runs": len(runs) - len(good)}


CONSOLE = Load("console", "ab", CONDITIONS, start_console_load, finish_console_load, summarise_wrk)


def summarise(windows: list[dict[str, Any]], load: Load | None = None) -> dict[str, Any]:
    load = load or CONSOLE
    out: dict[str, Any] = {"ntp": {}, "ptp": {}, "ptp_during_ntp_load": {}, load.name: {}, "cpu": {}}
    for kind in ("ntp", "ptp"):
        for cond in load.conditions:
            ws = [w for w in windows if w["kind"] == kind and w["condition"] == cond]
            out["cpu"][f"{kind}/{cond}"] = {
                "cpu0_busy_pct": med([w["cpu"]["busy_pct"].get(f"cpu{APPLIANCE_CPU}", math.nan) for w in ws]),
                "cpu0_softirq_pct": med([w["cpu"]["softirq_pct"].get(f"cpu{APPLIANCE_CPU}", math.nan) for w in ws]),
                "cpu1_busy_pct": med([w["cpu"]["busy_pct"].get(f"cpu{LOAD_CPU}", math.nan) for w in ws]),
                "cpu1_softirq_pct": med([w["cpu"]["softirq_pct"].get(f"cpu{LOAD_CPU}", math.nan) for w in ws]),
                "steal_pct": med([sum(w["cpu"]["steal_pct"].get(f"cpu{c}", 0.0) for c in (APPLIANCE_CPU, LOAD_CPU))
                                  for w in ws]),
                **{f"{name}_cpu_pct": med([100 * w["cpu"][f"{name}_cpu_s"] / w["cpu"]["seconds"] for w in ws])
                   for name in ("appliance_main", "appliance_children", load.tool, "ntpload", "measuring", "other")}}
            if kind == "ntp":
                ok = [w["ntp"] for w in ws if "replies_per_s" in w["ntp"]]
                out["ntp"][cond] = {"replies_per_s": med([r["replies_per_s"] for r in ok]),
                                    "per_round": [r["replies_per_s"] for r in ok],
                                    "per_round_shared_host": [w["shared_host"] for w in ws
                                                              if "replies_per_s" in w["ntp"]],
                                    "loss_pct": med([r["loss_pct"] for r in ok]),
                                    "rtt_us_p50": med([r["rtt_us_p50"] for r in ok]),
                                    "rtt_us_p99": med([r["rtt_us_p99"] for r in ok]),
                                    "invalid": sum(r["invalid"] for r in ok), "kod": sum(r["kod"] for r in ok),
                                    "unsync": sum(r["unsync"] for r in ok), "errors": len(ws) - len(ok)}
                out["ptp_during_ntp_load"][cond] = pooled_ptp(ws)
            else:
                out["ptp"][cond] = pooled_ptp(ws)
                out["ptp"][cond]["per_round_rms_ns"] = [w["ptp"]["rms_ns"] for w in ws]
                ks = [w["kernel"] for w in ws if "kernel" in w]
                if ks:
                    out["ptp"][cond]["kernel"] = merge_kernel(ks)
                out["ptp"][cond]["per_round_p99_abs_ns"] = [w["ptp"]["p99_abs_ns"] for w in ws]
            if cond != "none":
                out[load.name][f"{cond}/{kind}"] = load.summarise([w[load.tool] for w in ws])
    base_ntp = out["ntp"]["none"]["replies_per_s"]
    base_ptp = out["ptp"]["none"]
    out["ratios"] = {}
    for cond in load.conditions[1:]:
        out["ratios"][cond] = {
            "ntp_replies": out["ntp"][cond]["replies_per_s"] / base_ntp if base_ntp else math.nan,
            "ptp_rms": window_rms(out["ptp"][cond]) / window_rms(base_ptp) if window_rms(base_ptp) else math.nan,
            "ptp_pooled_rms": out["ptp"][cond]["rms_ns"] / base_ptp["rms_ns"] if base_ptp["rms_ns"] else math.nan,
            "ptp_p99_abs": out["ptp"][cond]["p99_abs_ns"] / base_ptp["p99_abs_ns"] if base_ptp["p99_abs_ns"]
            else math.nan,
            "ntp_replies_ci": bootstrap_ratio(out["ntp"][cond]["per_round"], out["ntp"]["none"]["per_round"]),
            "ptp_rms_ci": bootstrap_ratio(out["ptp"][cond].get("per_round_rms_ns", []),
                                          base_ptp.get("per_round_rms_ns", []))}
    return out


def bootstrap_ratio(num: list[float], den: list[float], draws: int = 2000, seed: int = 1) -> tuple[float, float]:
    """A 95 % interval of median(num) / median(den), each list resampled (with replacement) over its windows: how
    far the judged ratio could move with the windows this host happened to hand out.  (nan, nan) with too few."""
    import random

    num = [v for v in num if v is not None and not math.isnan(v)]
    den = [v for v in den if v is not None and not math.isnan(v)]
    if len(num) < 2 or len(den) < 2:
        return (math.nan, math.nan)
    rng = random.Random(seed)
    ratios = sorted(statistics.median(rng.choices(num, k=len(num))) / statistics.median(rng.choices(den, k=len(den)))
                    for _ in range(draws))
    return (ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1])


def report(s: dict[str, Any], windows: list[dict[str, Any]], args: argparse.Namespace,
           check: dict[str, Any], load: Load | None = None) -> bool:
    ok = True
    generator = ("ab, keep-alive" if args.generator == "ab" else f"wrk, {args.wrk_threads} thread")
    print(f"Web console under load ({generator}, {args.connections} connections, closed loop, "
          f"{args.duration:g} s per window, measured over the middle {args.duration - 2 * LEAD_S:g} s, "
          f"{args.rounds} rounds); appliance on CPU {APPLIANCE_CPU} serving PTP ({PROFILE}, udp4, "
          f"{args.ptp_rate:g} Sync/s), NTP (1 worker) and the console (web.rate_per_s={args.web_rate} for the bench); "
          f"ptp4l slave, ntpload (window {args.ntp_window}) and {args.generator} "
          f"({'SCHED_IDLE' if args.load_sched == 'idle' else 'normal'}"
          f" priority) on CPU {LOAD_CPU}, over a veth pair")
    print(f"  console check: dashboard {check['dashboard_status']} ({check['dashboard_bytes']} bytes), "
          f"status API {check['api_status']} ({check['api_bytes']} bytes)")
    print("Console latency (medians over the windows)")
    print(f"  {'endpoint':10} {'while':22} {'req/s':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'requests':>9} {'conn:close':>10} {'sock err':>8} {'timeouts':>8}  HTTP status")
    for cond in ("api", "dashboard"):
        for kind, label in (("ptp", "PTP measured, NTP idle"), ("ntp", "NTP load")):
            c = s["console"][f"{cond}/{kind}"]
            print(f"  {cond:10} {label:22} {c['requests_per_s']:8.1f} {c['p50_ms']:8.2f} {c['p90_ms']:8.2f} "
                  f"{c['p99_ms']:8.2f} {c['max_ms']:8.2f} {c['requests']:9d} {c['connection_close']:10d} "
                  f"{c['socket_errors']:8d} "
                  f"{c['timeouts']:8d}  {c['http_status']}")
            bad = sum(v for k, v in c["http_status"].items() if not k.startswith("2"))
            ok &= c["failed_runs"] == 0 and c["socket_errors"] == 0 and c["timeouts"] == 0 and bad == 0
    return report_service(s, windows, args, load) and ok


def report_service(s: dict[str, Any], windows: list[dict[str, Any]], args: argparse.Namespace,
                   load: Load | None = None) -> bool:
    """NTP replies/s, the PTP offset, the CPU use and the ratios with / without the load; False if a target is
    missed or a window failed."""
    load = load or CONSOLE
    ok = True
    label = f"{load.name} load"
    print(f"NTP replies/s at window {args.ntp_window} (median over rounds; per round, * = other work on the host or "
          f"the hypervisor took more than {OTHER_LIMIT_PCT:g} % of a CPU in that window)")
    print(f"  {label:12} {'replies/s':>10} {'loss %':>7} {'rtt p50 us':>10} {'rtt p99 us':>10} "
          f"{'ratio':>6}   per round (ratio to the round's own 'none')")
    base = s["ntp"]["none"]["per_round"]
    for cond in load.conditions:
        n = s["ntp"][cond]
        ratio = 1.0 if cond == "none" else s["ratios"][cond]["ntp_replies"]
        rounds = [f"{v:,.0f}{'*' if shared else ''}" + (f" ({v / b:.3f})" if cond != "none" and b else "")
                  for v, shared, b in zip(n["per_round"], n["per_round_shared_host"], base)]
        print(f"  {cond:12} {n['replies_per_s']:10,.0f} {n['loss_pct']:7.3f} {n['rtt_us_p50']:10.0f} "
              f"{n['rtt_us_p99']:10.0f} {ratio:6.3f}   " + ", ".join(rounds))
        ok &= n["errors"] == 0 and n["invalid"] == 0
    print("PTP offset seen by the ptp4l slave: rms, p99, max and mean over the samples of all rounds pooled; window "
          "rms: the median of the windows' own rms (the rms ratio judged is that one's)")
    print(f"  {label:12} {'samples':>7} {'Sync/s':>6} {'rms ns':>8} {'p99|.| ns':>9} {'max|.| ns':>9} "
          f"{'mean ns':>8} {'>10us':>5} {'window rms':>10} {'rms ratio':>9} {'p99 ratio':>9} {'pooled rms ratio':>16}")
    for cond in load.conditions:
        p = s["ptp"][cond]
        r = ({"ptp_rms": 1.0, "ptp_p99_abs": 1.0, "ptp_pooled_rms": 1.0} if cond == "none"
             else s["ratios"][cond])
        print(f"  {cond:12} {p['count']:7d} {p.get('syncs_per_s', math.nan):6.2f} {p['rms_ns']:8.0f} "
              f"{p['p99_abs_ns']:9.0f} {p['max_abs_ns']:9.0f} {p['mean_ns']:8.0f} {p['over_10us']:5d} "
              f"{window_rms(p):10.0f} {r['ptp_rms']:9.3f} {r['ptp_p99_abs']:9.3f} {r['ptp_pooled_rms']:16.3f}")
        ok &= p["count"] > 0
    if any("kernel" in s["ptp"][cond] for cond in load.conditions):
        print("PTP frames in the kernel (--ftrace): the appliance's 44-byte frames (Sync, Follow_Up) from the veth's "
              "start of transmit, where their timestamp is taken, to the slave side's netif_rx, where the slave's is; "
              "silent: a stall with no interrupt, IPI, softirq or context switch on that CPU (the hypervisor's)")
        for cond in load.conditions:
            k = s["ptp"][cond].get("kernel")
            if k:
                print(f"  {cond:12} frames {k['frames']:6d}  over 10 us {k['over_10us']:4d} "
                      f"({1000 * k['over_10us'] / max(1, k['frames']):.1f} per 1000)  of which silent "
                      f"{k['silent_over_10us']:4d}  max {k['max_us']:.0f} us")
    print(f"CPU (medians over the windows): busy % (of it interrupts %) of CPU {APPLIANCE_CPU} and CPU {LOAD_CPU}; "
          f"in % of one CPU: the appliance's main process ({load.main_does}), its child (NTP "
          f"worker), {load.tool}, ntpload, the measuring side (bench, ptp4l slave, pmc), other processes on the host, "
          f"time stolen by the hypervisor")
    for key, c in s["cpu"].items():
        print(f"  {key:14} CPU{APPLIANCE_CPU} {c['cpu0_busy_pct']:5.1f} ({c['cpu0_softirq_pct']:4.1f})  "
              f"CPU{LOAD_CPU} {c['cpu1_busy_pct']:5.1f} ({c['cpu1_softirq_pct']:4.1f})   main "
              f"{c['appliance_main_cpu_pct']:5.1f}  NTP worker {c['appliance_children_cpu_pct']:5.1f}  "
              f"{load.tool} {c[f'{load.tool}_cpu_pct']:5.1f}  ntpload {c['ntpload_cpu_pct']:5.1f}  measuring "
              f"{c['measuring_cpu_pct']:4.1f}  other {c['other_cpu_pct']:5.1f}  steal {c['steal_pct']:4.1f}")
    busy = [k for k, c in s["cpu"].items() if c["other_cpu_pct"] > OTHER_LIMIT_PCT or c["steal_pct"] > OTHER_LIMIT_PCT]
    if busy:
        print(f"  WARNING: other processes or the hypervisor took more than {OTHER_LIMIT_PCT} % of a CPU in {busy}: "
              f"a shared host; those figures are suspect")
        names: dict[str, float] = {}
        for w in windows:
            for name, cpu_s in w["cpu"]["other_processes_cpu_s"].items():
                names[name] = names.get(name, 0.0) + cpu_s
        if names:
            print("    other processes seen (CPU s over all windows): "
                  + ", ".join(f"{n} {v:.1f}" for n, v in sorted(names.items(), key=lambda kv: -kv[1])[:6]))
    print(f"Ratios with / without {label}")
    for cond in load.conditions[1:]:
        r = s["ratios"][cond]
        ntp_pass, rms_pass, p99_pass = (r["ntp_replies"] >= NTP_TARGET, r["ptp_rms"] <= PTP_TARGET,
                                        r["ptp_p99_abs"] <= PTP_TARGET)
        print(f"  {cond:10} NTP replies/s {r['ntp_replies']:.3f} (target >= {NTP_TARGET}: "
              f"{'PASS' if ntp_pass else 'FAIL'})   PTP rms {r['ptp_rms']:.3f}, p99|offset| {r['ptp_p99_abs']:.3f} "
              f"(target <= {PTP_TARGET}: {'PASS' if rms_pass and p99_pass else 'FAIL'})")
        (nl, nh), (pl, ph) = r.get("ntp_replies_ci", (math.nan,) * 2), r.get("ptp_rms_ci", (math.nan,) * 2)
        print(f"  {'':10} 95 % interval over the windows (bootstrap): NTP replies/s {nl:.3f}-{nh:.3f}, PTP rms "
              f"{pl:.3f}-{ph:.3f}")
        ok &= ntp_pass and rms_pass and p99_pass
    return ok


def add_service_arguments(ap: argparse.ArgumentParser, keep_series_help: str) -> None:
    """The options of the NTP and PTP side, shared with bench/snmp_load.py."""
    ap.add_argument("--ptp-rate", type=float, default=16.0, help="Sync messages per second (default 16)")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds after the slave reached SLAVE (default 5)")
    ap.add_argument("--ready-timeout", type=float, default=120.0)
    ap.add_argument("--ftrace", action="store_true",
                    help="time the appliance's PTP frames inside the kernel in the PTP windows (tracefs)")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--keep-series", action="store_true", help=keep_series_help)


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--login-helper":
        return login_helper(sys.argv[2], USER, sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--generator", choices=("ab", "wrk"), default="ab",
                    help="the HTTP load generator (default ab, Debian's apache2-utils; wrk: Debian's wrk, which "
                    "spins on a TLS connection the server has not yet answered, taking the load CPU from ntpload)")
    ap.add_argument("--connections", type=int, default=50, help="HTTP connections (default 50)")
    ap.add_argument("--duration", type=float, default=12.0, help="seconds of each window and load run (default 12)")
    ap.add_argument("--rounds", type=int, default=6,
                    help="rounds of the 6 windows (default 6: the medians pass over the windows a spike of the "
                    "shared host falls in)")
    ap.add_argument("--ntp-window", type=int, default=128,
                    help="NTP requests in flight (default 128: enough that the NTP worker always has requests "
                    "waiting, so that replies/s is its capacity; at 32 the loop waits on the round trip and "
                    "replies/s follows the latency)")
    ap.add_argument("--wrk-threads", type=int, default=1, help="wrk threads (default 1: one load CPU)")
    ap.add_argument("--web-rate", type=int, default=RATE_PER_S,
                    help=f"web.rate_per_s of the appliance (default {RATE_PER_S}, the setting's maximum: the "
                    "per-address rate limit out of the way; the appliance's own default is 20)")
    ap.add_argument("--load-sched", "--wrk-sched", choices=("idle", "normal"), default="idle",
                    help="the load generator's scheduling on the load CPU (default idle: SCHED_IDLE, so that ntpload, "
                    "the ptp4l slave and the bench never wait for it; normal: it competes with them)")
    ap.add_argument("--load-timeout", "--wrk-timeout", type=float, default=30.0,
                    help="the load generator's request timeout, s (default 30)")
    add_service_arguments(ap, "include every PTP sample (time, offset, path delay) of every window in --json")
    args = ap.parse_args()
    args.domain = int(PROFILE_SLAVE_OPTIONS[PROFILE]["domainNumber"])
    if os.geteuid() != 0:
        print("console_load: needs root (network namespaces)", file=sys.stderr)
        return 2
    for tool in ("ip", "ptp4l", "pmc", "setpriv", "taskset", "chrt", "gcc", args.generator):
        if shutil.which(tool) is None:
            hint = {"wrk": " (apt-get install -y wrk)", "ab": " (apt-get install -y apache2-utils)"}.get(
                tool, " (scripts/test-all installs the Debian peers)")
            print(f"console_load: {tool} is needed{hint}", file=sys.stderr)
            return 2
    if args.duration < 5 or args.connections < args.wrk_threads or args.rounds < 1:
        print("console_load: --duration must be >= 5 s, --connections >= --wrk-threads, --rounds >= 1",
              file=sys.stderr)
        return 2
    if len(os.sched_getaffinity(0) | {APPLIANCE_CPU, LOAD_CPU}) < 2 or (os.cpu_count() or 1) < 2:
        print("console_load: needs two CPUs (0 for the appliance, 1 for the load)", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {LOAD_CPU})  # the bench and all it starts (slave, pmc, ntpload, ab) on the load CPU
    load = dataclasses.replace(CONSOLE, tool=args.generator)
    started = time.monotonic()
    windows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="console-load-") as tmp, NetnsPair(prefix="pcl") as net:
        workdir = Path(tmp)
        os.chmod(workdir, 0o700)
        ntpload = build_load(workdir)
        script = workdir / "wrk-report.lua"
        script.write_text(WRK_SCRIPT)
        candidate, state = start_appliance(net, workdir, args)
        slave = None
        try:
            password, token = setup_users(state)  # the user store is SQLite: fine while the appliance runs
            t0 = time.monotonic()
            wait_locked(candidate, state, args.ready_timeout)
            to_locked = time.monotonic() - t0
            url = f"https://{net.ip4_a}:{WEB_PORT}"
            check = login(net, url, password, token, state / "web-cert.pem")
            slave = Ptp4l(net.b, transport="udp4", delay=PROFILE_DELAY[PROFILE],
                          extra=slave_options(PROFILE, args.domain), sync_rate_hint=args.ptp_rate, label="measuring")
            to_slave = slave.wait_slave(args.ready_timeout)
            time.sleep(args.settle)
            ctx = {"slave": slave, "appliance_pid": candidate.proc.pid, "candidate": candidate, "url": url,
                   "token": token, "cookie": check["cookie"], "ntpload": ntpload, "wrk_script": script,
                   "workdir": workdir, "tracer": KernelTrace() if args.ftrace else None,
                   "appliance_comm": Path(f"/proc/{candidate.proc.pid}/comm").read_text().strip()}
            for r in range(args.rounds):
                order = CONDITIONS if r % 2 == 0 else CONDITIONS[::-1]
                for kind in ("ntp", "ptp"):
                    for cond in order:
                        windows.append(window(net, kind, cond, r, ctx, args, load))
            final = wait_for(state, lambda st: True, 20)
            after = login(net, url, password, token, state / "web-cert.pem")  # still answers; a new login works
        except BaseException:
            candidate.stop()
            print(f"console_load: failed; appliance log tail:\n"
                  f"{candidate.log_path.read_text(errors='replace')[-3000:]}", file=sys.stderr)
            raise
        finally:
            if slave is not None:
                slave.stop()
            candidate.stop()
        full_log = candidate.log_path.read_text(errors="replace")
        problems = classify_log(full_log)
        log_tail = full_log[-4000:]
    summary = summarise(windows, load)
    ok = report(summary, windows, args, check, load)
    ptp_out = final.get("outputs", {}).get("ptp", {})
    ntp_out = final.get("outputs", {}).get("ntp", {})
    web_out = final.get("outputs", {}).get("web", {})
    print(f"After the load: clock {final['clock']['state']}, PTP port {ptp_out.get('port_state', ptp_out.get('state'))}"
          f", console {'serving' if web_out.get('serving', True) else 'NOT serving'}, a new login "
          f"{'works' if after.get('dashboard_ok') else 'FAILS'}; locked after {to_locked:.1f} s, slave after "
          f"{to_slave:.1f} s; run {time.monotonic() - started:.0f} s")
    during = sum(w["log_until_measured_end"]["tracebacks"] + len(w["log_until_measured_end"]["error_lines"])
                 for w in windows)
    at_end = sum(w["log_after_measured_end"]["tracebacks"] + len(w["log_after_measured_end"]["error_lines"])
                 for w in windows)
    print(f"Appliance log: {problems['tracebacks']} tracebacks, {len(problems['error_lines'])} other error lines in "
          f"all; {during} while the windows were measured, {at_end} in the last second of a window or the pause after "
          f"it (the load ending and dropping its connections)")
    for text, count in sorted(problems["exceptions"].items(), key=lambda kv: -kv[1]):
        print(f"    {count:5d} x {text}")
    for line in problems["error_lines"][:10]:
        print(f"          {line[:200]}")
    ok &= during == 0 and bool(after.get("dashboard_ok"))
    if args.json:
        if not args.keep_series:
            for w in windows:
                w.pop("ptp_samples", None)
        Path(args.json).write_text(json.dumps(
            {"args": vars(args), "appliance_command": candidate.command, "appliance_cpu": APPLIANCE_CPU,
             "load_cpu": LOAD_CPU, "web_rate_per_s": args.web_rate, "console_check": {k: v for k, v in check.items()
                                                                                  if k != "cookie"},
             "console_check_after": {k: v for k, v in after.items() if k != "cookie"},
             "to_locked_s": to_locked, "to_slave_s": to_slave, "summary": summary, "windows": windows,
             "final_status": {"clock": final.get("clock"), "ptp": ptp_out, "ntp": ntp_out, "web": web_out},
             "appliance_log_problems": problems, "appliance_log_tail": log_tail}, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
