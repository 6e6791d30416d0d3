"""CPU cost per request of the console, the REST API, the Prometheus scrape and the SNMP agent, and the share of a
core the shipped budgets let them take from time serving.

    python bench/request_cost.py [--windows 7] [--requests 200] [--snmp-requests 300] [--idle-s 2]

Runs ``appliance run`` on its embedded default (simulated receiver and OCXO) with the console and the SNMP agent on
loopback, and measures the CPU time of the appliance's own process (every thread: the event loop that serves PTP,
publishes the status and runs the console's and the agent's calls) and, apart, of its console process
(``appliance.web.process``: TLS, Flask, SQLite reads) and its SNMP agent process (``appliance.snmp.process``:
pysnmp), both at SCHED_IDLE, from the kernel's per-thread accounting, in nanoseconds
(``/proc/<pid>/task/*/schedstat``; the NTP workers are other processes and are not counted).  A window sends one
kind of request back to back, ``--requests`` of them over one kept-alive HTTPS connection (or ``--snmp-requests``
SNMP GETBULKs of 10 repetitions from one UDP socket), and its cost per request is the window's CPU time less what
the process spent, per second, in the idle windows beside it (reference: the same process, the same run, asked
nothing), divided by the requests.  Kinds: the dashboard page ``/``, ``/api/v1/status``, ``/metrics`` (token),
``/api/v1/status`` on a new connection each time (TCP, TLS handshake and request: what a client that never keeps a
connection costs), and a GETBULK.
The windows of every kind and the idle ones are interleaved, ``--windows`` rounds, so a slow minute of the shared host
falls on all of them.  Printed per kind: the median cost per request over the windows with a 95 % bootstrap
interval, and the ratio to the idle process's CPU per second.

Then the arithmetic: what the console and the agent take from time serving is their cost in the appliance's
process (the status it publishes, the calls they make); their own processes run only when no time-serving task
wants the CPU.  The shipped budgets cap what all clients together can ask (``web.max_requests_per_s`` = 20 console
requests/s, ``snmp.max_requests_per_s`` = 100 SNMP requests/s; beyond them requests wait their turn), so the worst
case is the dearest console request at its budget plus the dearest SNMP request at its, as a share of one core,
printed against the 5 % target.  The console's budget paces requests, not TLS handshakes, so the new-connection
kind is the worst case only as far as the connection gate's caps hold connections back (printed, not hidden).
The bench lifts the per-client rate limits and budgets while it measures (the cost
of a request does not depend on them), and lowers nothing else.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance import settings  # noqa: E402
from harness.cost import bootstrap_median, process_cpu_ns  # noqa: E402
from harness.snmp_wire import encode_request  # noqa: E402

WEB_BUDGET_PER_S = settings.WebSettings.__dataclass_fields__["max_requests_per_s"].default
SNMP_BUDGET_PER_S = settings.SnmpSettings.__dataclass_fields__["max_requests_per_s"].default
TARGET_SHARE = 0.05
NEW_TLS = " (new TLS)"  # a kind whose every request opens its own connection: the handshake is part of its cost
KINDS = ("/", "/api/v1/status", "/metrics", "/api/v1/status" + NEW_TLS, "snmp getbulk")


def free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Appliance:
    def __init__(self, base: Path):
        self.state = base / "state"
        self.web_port, self.snmp_port = free_port(socket.SOCK_STREAM), free_port(socket.SOCK_DGRAM)
        command = [sys.executable, "-m", "appliance", "run", "--set", f"state_dir={self.state}",
                   "--set", f"web.port={self.web_port}", "--set", "web.rate_per_s=10000",
                   "--set", "web.max_requests_per_s=0", "--set", "snmp.enabled=true",
                   "--set", f"snmp.port={self.snmp_port}", "--set", "snmp.community=bench",
                   "--set", "snmp.rate_per_s=100000", "--set", "snmp.max_requests_per_s=0",
                   "--set", "log.level=warning"]
        self.log = open(base / "appliance.log", "w")
        self.proc = subprocess.Popen(command, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        self.token = ""
        self.console_ns = 0  # the console's (HTTP) or the SNMP agent's process's CPU in the last window

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"appliance exited: see {self.log.name}")
            if (self.state / "users.sqlite").exists():
                # the first admin must choose its own password before its tokens are honoured
                subprocess.run([sys.executable, "-m", "appliance", "user", "passwd", "admin", "--password-stdin",
                                "--set", f"state_dir={self.state}"], input=secrets.token_urlsafe(16) + "\n",
                               capture_output=True, text=True, cwd=ROOT)
                out = subprocess.run([sys.executable, "-m", "appliance", "user", "token", "admin", "--label",
                                      "bench", "--set", f"state_dir={self.state}"], capture_output=True, text=True,
                                     cwd=ROOT)
                token = out.stdout.strip().split()[-1] if out.returncode == 0 and out.stdout.strip() else ""
                if token.startswith("tk_") and self._answers(token):
                    self.token = token
                    return
            time.sleep(0.5)
        raise SystemExit("the appliance's console did not answer within 60 s")

    def _answers(self, token: str) -> bool:
        try:
            return Client(self.web_port, token).get("/api/v1/status") == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Client:
    """One kept-alive HTTPS connection, as a browser or a Prometheus server keeps one."""

    def __init__(self, port: int, token: str):
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the appliance's self-signed certificate
        self.conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
        self.headers = {"Authorization": f"Bearer {token}"}

    def get(self, path: str) -> int:
        self.conn.request("GET", path, headers=self.headers)
        response = self.conn.getresponse()
        response.read()
        return response.status

    def close(self) -> None:
        self.conn.close()


def child_pid(app: Appliance, module: str) -> int | None:
    """The appliance's child process running ``module``, if it runs one."""
    for child in Path(f"/proc/{app.proc.pid}/task").glob("*/children"):
        for pid in child.read_text().split():
            try:
                if module.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return int(pid)
            except OSError:
                continue
    return None


def console_cpu_ns(app: Appliance) -> int:
    pid = child_pid(app, "appliance.web.process")
    return process_cpu_ns(pid) if pid is not None else 0


def agent_cpu_ns(app: Appliance) -> int:
    pid = child_pid(app, "appliance.snmp.process")
    return process_cpu_ns(pid) if pid is not None else 0


def http_window(app: Appliance, path: str, requests: int) -> tuple[int, float, int]:
    """(CPU ns of the appliance, wall s, requests answered 200) for ``requests`` GETs of ``path``; the console
    process's CPU ns over the same window is added to ``app.console_ns``."""
    if path.endswith(NEW_TLS):
        return new_connection_window(app, path.removesuffix(NEW_TLS), requests)
    client = Client(app.web_port, app.token)
    try:
        client.get(path)  # the connection's handshake is not the request's cost
        cpu0, con0, t0 = process_cpu_ns(app.proc.pid), console_cpu_ns(app), time.perf_counter()
        ok = sum(client.get(path) == 200 for _ in range(requests))
        app.console_ns = console_cpu_ns(app) - con0
        return process_cpu_ns(app.proc.pid) - cpu0, time.perf_counter() - t0, ok
    finally:
        client.close()


def new_connection_window(app: Appliance, path: str, requests: int) -> tuple[int, float, int]:
    """As http_window, each request on a connection of its own (TCP, TLS handshake, request, close)."""
    cpu0, con0, t0 = process_cpu_ns(app.proc.pid), console_cpu_ns(app), time.perf_counter()
    ok = 0
    for _ in range(requests):
        client = Client(app.web_port, app.token)
        try:
            ok += client.get(path) == 200
        finally:
            client.close()
    app.console_ns = console_cpu_ns(app) - con0
    return process_cpu_ns(app.proc.pid) - cpu0, time.perf_counter() - t0, ok


def snmp_window(app: Appliance, requests: int, datagram: bytes) -> tuple[int, float, int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        cpu0, side0, t0 = process_cpu_ns(app.proc.pid), agent_cpu_ns(app), time.perf_counter()
        ok = 0
        for _ in range(requests):
            sock.sendto(datagram, ("127.0.0.1", app.snmp_port))
            try:
                sock.recvfrom(65535)
                ok += 1
            except TimeoutError:
                pass
        app.console_ns = agent_cpu_ns(app) - side0
        return process_cpu_ns(app.proc.pid) - cpu0, time.perf_counter() - t0, ok


def idle_window(app: Appliance, seconds: float) -> float:
    """The appliance's CPU per second with nothing asked of it (ns/s)."""
    cpu0, t0 = process_cpu_ns(app.proc.pid), time.perf_counter()
    time.sleep(seconds)
    return (process_cpu_ns(app.proc.pid) - cpu0) / (time.perf_counter() - t0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--windows", type=int, default=7)
    parser.add_argument("--requests", type=int, default=200, help="HTTPS requests per window")
    parser.add_argument("--snmp-requests", type=int, default=300, help="SNMP GETBULKs per window")
    parser.add_argument("--idle-s", type=float, default=2.0, help="length of each idle window")
    parser.add_argument("--json", type=Path, default=None, help="also write every window's figures here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="request-cost-") as tmp:
        app = Appliance(Path(tmp))
        try:
            app.wait_ready()
            datagram = encode_request([(1, 3, 6, 1, 2, 1, 1)], "bench", bulk=True, max_repetitions=10,
                                      request_id=4242)  # the system group, 10 at a time
            costs: dict[str, list[float]] = {kind: [] for kind in KINDS}
            console: dict[str, list[float]] = {kind: [] for kind in KINDS}
            idle: list[float] = []
            failures = 0
            for _ in range(2):  # warm up: templates, caches, the MIB view
                http_window(app, "/", 10), http_window(app, "/api/v1/status", 10), http_window(app, "/metrics", 10)
                snmp_window(app, 20, datagram)
            for round_ in range(args.windows):
                before = idle_window(app, args.idle_s)
                kinds = list(KINDS) if round_ % 2 == 0 else list(reversed(KINDS))
                measured: dict[str, tuple[int, float, int, int]] = {}
                for kind in kinds:
                    n = args.snmp_requests if kind.startswith("snmp") else args.requests
                    cpu_ns, wall_s, ok = (snmp_window(app, n, datagram) if kind.startswith("snmp")
                                          else http_window(app, kind, n))
                    measured[kind] = (cpu_ns, wall_s, ok, n)
                    if kind in console:
                        console[kind].append(app.console_ns / max(ok, 1))
                    failures += n - ok
                after = idle_window(app, args.idle_s)
                idle_ns_per_s = (before + after) / 2
                idle.append(idle_ns_per_s)
                for kind, (cpu_ns, wall_s, ok, n) in measured.items():
                    costs[kind].append(max(0.0, cpu_ns - idle_ns_per_s * wall_s) / max(ok, 1))
        finally:
            app.stop()

    idle_med = statistics.median(idle)
    print(f"appliance process idle: {idle_med / 1e6:.1f} ms CPU per s (median of {len(idle)} pairs of "
          f"{args.idle_s:g} s windows); failed requests: {failures}")
    header = f"{'request':<26} {'CPU per request':>16} {'95 % interval':>22} {'x idle CPU per s':>17}"
    print(header)
    print("-" * len(header))
    medians: dict[str, float] = {}
    for kind in KINDS:
        med = statistics.median(costs[kind])
        low, high = bootstrap_median(costs[kind])
        medians[kind] = med
        print(f"{kind:<26} {med / 1e3:>13.0f} us {low / 1e3:>9.0f} .. {high / 1e3:>6.0f} us "
              f"{med / idle_med if idle_med else float('nan'):>17.3f}")
    print("\nthe console's and the SNMP agent's own processes, CPU per request (SCHED_IDLE: they run when time "
          "serving leaves the CPU):")
    for kind, values in console.items():
        low, high = bootstrap_median(values)
        print(f"{kind:<26} {statistics.median(values) / 1e3:>13.0f} us {low / 1e3:>9.0f} .. {high / 1e3:>6.0f} us")
    web_worst = max(medians[k] for k in KINDS if not k.startswith("snmp"))
    web_high = max(bootstrap_median(costs[k])[1] for k in KINDS if not k.startswith("snmp"))
    snmp_cost, snmp_high = medians["snmp getbulk"], bootstrap_median(costs["snmp getbulk"])[1]
    web_share = web_worst * WEB_BUDGET_PER_S / 1e9
    snmp_share = snmp_cost * SNMP_BUDGET_PER_S / 1e9
    high_share = (web_high * WEB_BUDGET_PER_S + snmp_high * SNMP_BUDGET_PER_S) / 1e9
    print(f"\nworst case at the shipped budgets: console {WEB_BUDGET_PER_S}/s x {web_worst / 1e3:.0f} us = "
          f"{100 * web_share:.1f} % of a core; SNMP {SNMP_BUDGET_PER_S}/s x {snmp_cost / 1e3:.0f} us = "
          f"{100 * snmp_share:.1f} %; together {100 * (web_share + snmp_share):.1f} % "
          f"(upper end of the intervals: {100 * high_share:.1f} %); target <= {100 * TARGET_SHARE:.0f} %: "
          f"{'PASS' if high_share <= TARGET_SHARE else 'FAIL'}")
    if args.json:
        args.json.write_text(json.dumps({"idle_ns_per_s": idle, "cost_ns": costs}, indent=1))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
