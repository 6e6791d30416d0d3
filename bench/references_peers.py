"""Steady-state time error on each reference, measured against the host clock with the real peers.

    python bench/references_peers.py [--seconds 120] [--settle 10] [--gnss-seconds 10] [--sync-rate 4]
                                     [--ntp-interval 2] [--ntp-servers 1] [--json FILE] [--keep-series]
                                     [--keep-logs DIR]

``appliance run`` on its simulated world in live mode follows real upstream references: linuxptp's ptp4l as a PTP
grandmaster and chronyd as NTP server(s).  True time is the host clock, so the appliance's
``status.clock.sim_time_error_ns`` is its TE: served minus true (= host) time.  Every peer here serves or reads the
same kernel clock, so the true offset between any two of them is 0 and every figure is an error.

The set-up (harness/ptp_harness.py ``NetnsPair``): two network namespaces joined by a veth pair.

* Namespace A, the upstream: ptp4l as grandmaster (``Ptp4l(net.a, role="master")``: free_running 1, software
  timestamps, UDPv4, E2E, domain 0, clockClass 6, ``--sync-rate`` Sync/s, 1 Announce/s, Delay_Req up to
  ``--sync-rate``/s) and ``--ntp-servers`` chronyd servers (``chronyd -x``, ``local stratum 1``, on A's address).
* Namespace B: the appliance (restarted on a learned OCXO state: locked within seconds; references.* as shipped but
  for ``references.qualify_s=5``; ``references.ptp_interface`` = B's veth, ``references.ntp_servers`` = A's chronyd
  servers every ``--ntp-interval`` s), and the two reference clients that follow the same upstreams at the same
  time: a ptp4l measuring slave (free-running, every Sync's offset over its Unix socket) and a chronyd client
  (``-x``, polling every ``--ntp-interval`` s, ``log measurements statistics tracking``).

The drill, one appliance run: LOCKED on GNSS with both references qualified; ``--gnss-seconds`` observed; ``appliance
world receiver-off`` (GNSS gone: the clock goes to ptp, priority 2); once LOCKED on ptp, ``--settle`` s, then
``--seconds`` s measured; the ptp4l grandmaster stopped (PTP gone: the clock goes to ntp); once LOCKED on ntp,
``--settle`` s, then ``--seconds`` s measured.  The appliance's status is read over its control socket every 0.5 s
(what ``appliance status --json`` prints).

Reported, TE in ns, sign convention served minus host (a client's "TE" is its time minus the host's):

* PTP: the appliance's TE while on ptp; reference: the ptp4l slave's measurements, ``-offset`` (ptp4l's offset is
  slave minus master, its own clock is the host clock: ``-offset`` is master as measured minus host, the error a stock
  linuxptp slave would take into its servo, Sync by Sync).
* NTP: the appliance's TE while on ntp; references from the chronyd client: its clock (``chronyc tracking``'s
  "System time", NTP time minus system time, polled every 0.5 s -- with -x chronyd never touches the system clock and
  keeps that correction to itself: its clock is system time plus it, so this is what it would serve, minus host) and
  its measurements (measurements.log: offset, server minus chronyd's clock, plus the correction in force: server as
  measured minus host, poll by poll).
* rms, max|TE|, mean, standard deviation, p99|TE|; ratios appliance / reference (lower is better) of rms, max|TE| and
  |mean|; the appliance's TE slope over the window (a loop still pulling shows as a ramp, not as noise).  A raw
  per-Sync or per-poll measurement is noisier than a filtered clock, and the appliance's mean carries the phase built
  out at the switch (references.step_limit_ns: the switch keeps the phase it had): both are printed as they are.
  Also the upstream's time as each measured it (the appliance: TE minus its reference row's offset).  The
  appliance's oscillator is simulated (served time = the simulated OCXO under its loop, whose time constant on these
  references is thousands of seconds): within ``--seconds`` its TE shows how little of the reference's noise the
  loop passes on, not the reference's long-term wander.
* Each switch (GNSS -> PTP, PTP -> NTP): seconds from the cause to the switch, TE before (median of the 5 s before
  the cause), TE after (median of the 5 s after the switch), the change, max |TE - TE before| from the cause to 20 s
  after the switch (at most to the next step), the build-out, the difference of the two references before the
  cause, the clock states seen.

``--json FILE``: every figure (``--keep-series``: every sample too, and the whole status timeline); ``--keep-logs
DIR``: the appliance's log and the chronyd client's logs.  A default run takes about 5 minutes.

Safety: no traffic outside the two namespaces created (and always deleted) here; ptp4l free-running and chronyd
with -x, both under ``setpriv --bounding-set -sys_time`` (the appliance too): nothing here can adjust the clock.
Needs root, ip, ptp4l, pmc, setpriv, chronyd, chronyc.
"""

from __future__ import annotations

import argparse
import calendar
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance.edge import control
from bench.ptp_offset import slave_options
from harness.ptp_appliance import seed_learned_state
from harness.ptp_harness import ENV, SETPRIV, NetnsPair, Ptp4l, stop_process

POLL_S = 0.5
NTP_BASE_PORT = 12300  # chronyd servers in namespace A (a fresh namespace: nothing else there)
# Restarted on a learned state: no warm-up, a 3 s clock qualification, references qualified after 5 s of samples;
# no NTP service or web console (not under test), no initial clock error.
FAST = ("clock.warmup_s=0", "clock.qualify_s=3", "references.qualify_s=5", "ntp.enabled=false",
        "web.enabled=false", "sim.initial_clock_error_ns=0")
BEFORE_S = 5.0  # TE before a switch: the median of this many seconds before its cause
AFTER_S = 5.0  # TE after: the median of this many seconds after the switch
SWITCH_WINDOW_S = 20.0  # max |TE - TE before| from the cause to this long after the switch


def fail(message: str) -> None:
    raise RuntimeError(message)


# --- chronyd --------------------------------------------------------------------------------------------------------

class Chronyd:
    """``setpriv --bounding-set -sys_time chronyd -x -d`` inside a namespace, its own 0700 directory, no command port
    (chronyc over a Unix socket in that directory)."""

    def __init__(self, net: NetnsPair, ns: str, directory: Path, lines: list[str]) -> None:
        self.dir = directory
        self.dir.mkdir(mode=0o700)
        self.sock = self.dir / "chronyd.sock"
        conf = [*lines, "cmdport 0", f"bindcmdaddress {self.sock}", f"pidfile {self.dir}/chronyd.pid",
                f"driftfile {self.dir}/drift"]
        (self.dir / "chrony.conf").write_text("\n".join(conf) + "\n")
        self.log = open(self.dir / "chronyd.out", "w")  # noqa: SIM115 - open while chronyd runs
        self.proc = net.run(ns, [*SETPRIV, "chronyd", "-x", "-d", "-u", "root", "-f", str(self.dir / "chrony.conf")],
                            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
        deadline = time.monotonic() + 10
        while not self.sock.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                fail(f"chronyd did not start: {(self.dir / 'chronyd.out').read_text()[-2000:]}")
            time.sleep(0.05)

    def chronyc(self, *args: str) -> str:
        out = subprocess.run(["chronyc", "-h", str(self.sock), "-n", *args], capture_output=True, text=True,
                             timeout=5, check=False)
        return out.stdout if out.returncode == 0 else ""

    def correction_ns(self) -> float | None:
        """``chronyc -c tracking`` "System time" (NTP time minus system time), ns; None without a selected source."""
        fields = self.chronyc("-c", "tracking").strip().split(",")
        if len(fields) < 14 or fields[1] in ("", "0.0.0.0"):
            return None
        return float(fields[4]) * 1e9

    def stop(self) -> None:
        stop_process(self.proc, timeout_s=10)
        self.log.close()


def measurements(path: Path) -> list[tuple[float, str, float, str]]:
    """measurements.log -> (UTC epoch second, server, offset s (server minus chronyd's clock), ABCD tests)."""
    out = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        f = line.split()
        if len(f) < 18 or not f[0][:1].isdigit() or "-" not in f[0]:
            continue
        try:
            t = calendar.timegm(time.strptime(f"{f[0]} {f[1]}", "%Y-%m-%d %H:%M:%S"))
            out.append((float(t), f[2], float(f[11]), f[7]))
        except ValueError:
            continue
    return out


# --- the appliance --------------------------------------------------------------------------------------------------

class Appliance:
    """``python -m appliance run`` on a learned state inside namespace ``ns`` (under setpriv), its log in a file."""

    def __init__(self, net: NetnsPair, ns: str, workdir: Path, settings: list[str]) -> None:
        self.state = workdir / "state"
        self.state.mkdir()
        seed_learned_state(self.state)
        self.log_path = workdir / "appliance.log"
        argv = [*SETPRIV, sys.executable, "-m", "appliance", "run", "--set", f"state_dir={self.state}"]
        for setting in (*FAST, *settings):
            argv += ["--set", setting]
        self._log = open(self.log_path, "w")  # noqa: SIM115 - open while it runs
        self.proc = net.run(ns, argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=str(ROOT), start_new_session=True)

    def status(self) -> dict[str, Any] | None:
        if self.proc.poll() is not None:
            fail(f"the appliance exited {self.proc.returncode}; log:\n{self.tail()}")
        try:
            return control.request(self.state / "control.sock", {"cmd": "status"}, timeout_s=5.0)["status"]
        except (control.ControlError, OSError, KeyError, ValueError):
            return None

    def cli(self, *args: str) -> str:
        """An operator command (from the host side: the control socket is a file)."""
        out = subprocess.run([sys.executable, "-m", "appliance", *args, "--set", f"state_dir={self.state}"],
                             capture_output=True, text=True, env=ENV, timeout=30, cwd=str(ROOT), check=False)
        if out.returncode != 0:
            fail(f"appliance {' '.join(args)} exited {out.returncode}: {out.stderr}")
        return out.stdout

    def tail(self, chars: int = 3000) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> int | None:
        code = stop_process(self.proc, timeout_s=15)
        self._log.close()
        return code


def compact(s: dict[str, Any]) -> dict[str, Any]:
    clock = s["clock"]
    return {"te": clock.get("sim_time_error_ns"), "state": clock.get("state"), "class": clock.get("clock_class"),
            "bound": clock.get("error_bound_ns"), "tc": clock.get("time_constant_s"),
            "active": s["references"]["active"], "switches": s["references"].get("switches"),
            "rows": {r["name"]: {"state": r.get("state"), "reason": r.get("reason"), "offset": r.get("offset_ns"),
                                 "jitter": r.get("jitter_ns"), "buildout": r.get("buildout_ns")}
                     for r in s["references"]["rows"]}}


class Recorder(threading.Thread):
    """Every POLL_S: the appliance's status (compacted) and the chronyd client's correction, with monotonic times."""

    def __init__(self, app: Appliance, client: Chronyd) -> None:
        super().__init__(name="recorder", daemon=True)
        self.app, self.client = app, client
        self.lock = threading.Lock()
        self.samples: list[tuple[float, dict[str, Any]]] = []
        self.corrections: list[tuple[float, float]] = []  # (monotonic, chronyd NTP time - system time, ns)
        self.stopping = threading.Event()
        self.error = ""

    def run(self) -> None:
        while not self.stopping.is_set():
            begin = time.monotonic()
            try:
                s = self.app.status()
            except RuntimeError as exc:
                self.error = str(exc)
                return
            t = (begin + time.monotonic()) / 2
            corr = self.client.correction_ns()
            t_corr = time.monotonic()
            with self.lock:
                if s is not None:
                    self.samples.append((t, compact(s)))
                if corr is not None:
                    self.corrections.append((t_corr, corr))
            self.stopping.wait(max(0.0, POLL_S - (time.monotonic() - begin)))

    def latest(self) -> tuple[float, dict[str, Any]] | None:
        with self.lock:
            return self.samples[-1] if self.samples else None

    def between(self, a: float, b: float) -> list[tuple[float, dict[str, Any]]]:
        with self.lock:
            return [(t, s) for t, s in self.samples if a <= t <= b]

    def wait(self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float, what: str) -> float:
        """The monotonic time of the first sample (taken from now on) for which ``predicate`` holds."""
        since, deadline = time.monotonic(), time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            if self.error:
                fail(self.error)
            with self.lock:
                new = [(t, s) for t, s in self.samples[seen:] if t >= since]
                seen = len(self.samples)
            for t, s in new:
                if predicate(s):
                    return t
            time.sleep(0.1)
        last = self.latest()
        summary = None if last is None else {k: last[1][k] for k in ("state", "active", "te")} | {
            "rows": {n: (r["state"], r["reason"]) for n, r in last[1]["rows"].items()}}
        fail(f"{what}: not within {timeout_s:g} s; last status: {summary}; appliance log:\n{self.app.tail()}")
        return math.nan

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)


# --- figures --------------------------------------------------------------------------------------------------------

def figures(values: list[float]) -> dict[str, float]:
    n = len(values)
    if not n:
        return {"count": 0, "rms_ns": math.nan, "max_abs_ns": math.nan, "mean_ns": math.nan, "stddev_ns": math.nan,
                "p99_abs_ns": math.nan, "min_ns": math.nan, "max_ns": math.nan}
    mean = sum(values) / n
    absolute = sorted(abs(v) for v in values)
    return {"count": n, "rms_ns": math.sqrt(sum(v * v for v in values) / n), "max_abs_ns": absolute[-1],
            "mean_ns": mean, "stddev_ns": math.sqrt(sum((v - mean) ** 2 for v in values) / n),
            "p99_abs_ns": absolute[min(n - 1, round(0.99 * (n - 1)))], "min_ns": min(values),
            "max_ns": max(values)}


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope, ns/s: a ramp (a loop still pulling) rather than noise."""
    n = len(points)
    if n < 3:
        return math.nan
    mx, my = sum(t for t, _ in points) / n, sum(v for _, v in points) / n
    sxx = sum((t - mx) ** 2 for t, _ in points)
    return sum((t - mx) * (v - my) for t, v in points) / sxx if sxx > 0 else math.nan


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def ratios(cand: dict[str, float], ref: dict[str, float]) -> dict[str, float]:
    return {"rms": ratio(cand["rms_ns"], ref["rms_ns"]), "max_abs": ratio(cand["max_abs_ns"], ref["max_abs_ns"]),
            "abs_mean": ratio(abs(cand["mean_ns"]), abs(ref["mean_ns"]))}


def median_or_nan(values: list[float]) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def switch_and_measure(rec: Recorder, name: str, switch_timeout_s: float, cause: str, args: argparse.Namespace,
                       log: Callable[[str], None]) -> tuple[float, float, float, float]:
    """Wait for the switch to ``name`` and its lock, settle, then let ``args.seconds`` pass: the switch's and the
    lock's instants and the measuring window's start and end (monotonic seconds)."""
    t_switch = rec.wait(lambda s: s["active"] == name, switch_timeout_s, f"a switch to {name} after {cause}")
    t_lock = rec.wait(lambda s: s["active"] == name and s["state"] == "LOCKED", 30, f"LOCKED on {name}")
    time.sleep(args.settle)
    a = time.monotonic()
    log(f"measuring {args.seconds:g} s on {name}")
    time.sleep(args.seconds)
    return t_switch, t_lock, a, time.monotonic()


def appliance_window(rec: Recorder, name: str, a: float, b: float) -> dict[str, Any]:
    window = rec.between(a, b)
    te = [float(s["te"]) for _, s in window if s["te"] is not None]
    on = [s for _, s in window if s["active"] == name and s["state"] == "LOCKED"]
    rows = [s["rows"].get(name, {}) for _, s in window]
    # The upstream as the appliance measured it, minus host: served - host (TE) minus (served - upstream) (row).
    seen = [float(s["te"]) - float(s["rows"][name]["offset"]) for _, s in window
            if s["te"] is not None and s["rows"].get(name, {}).get("offset") is not None]
    ramp = slope([(t, float(s["te"])) for t, s in window if s["te"] is not None])
    return {**figures(te), "slope_ns_per_s": ramp, "samples_on_it_locked": len(on),
            "states": sorted({s["state"] for _, s in window}),
            "active": sorted({str(s["active"]) for _, s in window}),
            "row_jitter_ns": median_or_nan([r.get("jitter") for r in rows]),
            "time_constant_s": median_or_nan([s["tc"] for _, s in window]),
            "error_bound_ns": median_or_nan([s["bound"] for _, s in window]),
            "clock_class": sorted({s["class"] for _, s in window if s["class"] is not None}),
            "upstream_minus_host_ns": median_or_nan(seen),
            "series": [[round(t - a, 2), s["te"], s["state"], s["active"], s["rows"].get(name, {}).get("state"),
                        s["rows"].get(name, {}).get("offset"), s["rows"].get(name, {}).get("jitter"),
                        s["rows"].get(name, {}).get("reason")]
                       for t, s in window]}


def switch_figures(rec: Recorder, old: str, new: str, cause: str, t_cause: float, t_switch: float,
                   until: float) -> dict[str, Any]:
    """``until``: the next drill step (the window after the switch stops there)."""
    before = rec.between(t_cause - BEFORE_S, t_cause)
    after = rec.between(t_switch, min(until, t_switch + AFTER_S))
    around = rec.between(t_cause, min(until, t_switch + SWITCH_WINDOW_S))
    te_before = median_or_nan([s["te"] for _, s in before])
    te_after = median_or_nan([s["te"] for _, s in after])
    diff = median_or_nan([s["rows"][new]["offset"] - s["rows"][old]["offset"] for _, s in before
                          if s["rows"].get(new, {}).get("offset") is not None
                          and s["rows"].get(old, {}).get("offset") is not None])
    states: list[str] = []
    for _, s in before[-1:] + around:
        if not states or states[-1] != s["state"]:
            states.append(s["state"])
    first_new = next((s for t, s in around if s["active"] == new), None)
    return {"switch": f"{old} -> {new}", "cause": cause, "after_cause_s": t_switch - t_cause,
            "te_before_ns": te_before, "te_after_ns": te_after, "change_ns": te_after - te_before,
            "max_abs_change_ns": max((abs(s["te"] - te_before) for _, s in around if s["te"] is not None),
                                     default=math.nan),
            "buildout_ns": None if first_new is None else first_new["rows"][new]["buildout"],
            "reference_difference_ns": diff, "states": states}


# --- the drill ------------------------------------------------------------------------------------------------------

def drill(net: NetnsPair, args: argparse.Namespace, workdir: Path, stack: contextlib.ExitStack,
          log: Callable[[str], None]) -> dict[str, Any]:
    log_sync = -round(math.log2(args.sync_rate))
    gm_extra = {"logSyncInterval": str(log_sync), "logAnnounceInterval": "0", "logMinDelayReqInterval": str(log_sync)}
    log_poll = round(math.log2(args.ntp_interval))
    ports = [NTP_BASE_PORT + i for i in range(args.ntp_servers)]

    gm = Ptp4l(net.a, role="master", transport="udp4", delay="E2E", extra=gm_extra, label="upstream")
    stack.callback(gm.stop)
    subnet = net.ip4_a.rsplit(".", 1)[0] + ".0/24"
    for port in ports:
        server = Chronyd(net, net.ns_a, workdir / f"chrony-server-{port}",
                         [f"port {port}", f"bindaddress {net.ip4_a}", f"allow {subnet}", "local stratum 1"])
        stack.callback(server.stop)
    client = Chronyd(net, net.ns_b, workdir / "chrony-client",
                     [*(f"server {net.ip4_a} port {p} iburst minpoll {log_poll} maxpoll {log_poll}" for p in ports),
                      "port 0", f"logdir {workdir / 'chrony-client'}", "log measurements statistics tracking"])
    stack.callback(client.stop)
    slave = Ptp4l(net.b, role="slave", transport="udp4", delay="E2E", extra=slave_options("default-e2e", 0),
                  sync_rate_hint=args.sync_rate, label="measuring")
    stack.callback(slave.stop)
    gm.wait_master(30)
    settings = [f"references.ptp_interface={net.if_b}", "references.ptp_transport=udp4",
                "references.ptp_delay_mechanism=e2e", "references.ptp_domain=0",
                "references.ntp_servers=" + ",".join(f"{net.ip4_a}:{p}" for p in ports),
                f"references.ntp_interval_s={args.ntp_interval}"]
    app = Appliance(net, net.ns_b, workdir, settings)
    stack.callback(app.stop)
    rec = Recorder(app, client)
    rec.start()
    stack.callback(rec.stop)
    out: dict[str, Any] = {"recorder": rec, "slave": slave, "client": client, "app": app}
    t0 = time.monotonic()

    def ready(s: dict[str, Any]) -> bool:
        return (s["state"] == "LOCKED" and s["active"] == "gnss" and s["rows"].get("ptp", {}).get("state") ==
                "qualified" and s["rows"].get("ntp", {}).get("state") == "qualified")

    log("locking on gnss with ptp and ntp qualified")
    t_ready = rec.wait(ready, args.ready_timeout, "LOCKED on gnss with ptp and ntp qualified")
    slave.wait_slave(30)
    out["ready_after_s"] = t_ready - t0
    time.sleep(args.gnss_seconds)
    t_gnss_end = time.monotonic()
    out["gnss"] = appliance_window(rec, "gnss", t_gnss_end - args.gnss_seconds, t_gnss_end)

    # GNSS gone: the clock goes to ptp.
    log("world receiver-off: gnss -> ptp")
    app.cli("world", "receiver-off")
    t_off = time.monotonic()
    t_sw1, t_lock1, a, b = switch_and_measure(rec, "ptp", 20, "receiver-off", args, log)
    out["ptp"] = {"appliance": appliance_window(rec, "ptp", a, b), "window": (a, b),
                  "locked_after_switch_s": t_lock1 - t_sw1}
    offsets = [(t, o, d) for t, o, d in slave.offsets_ns() if a <= t <= b]
    out["ptp"]["ptp4l"] = {**figures([-float(o) for _, o, _ in offsets]),
                           "path_delay_ns": median_or_nan([d for _, _, d in offsets]),
                           "syncs_per_s": len(offsets) / (b - a), "gm_identity": slave.selected_gm(),
                           "series": [[round(t - a, 3), -o] for t, o, _ in offsets]}

    # PTP gone (the grandmaster stops): the clock goes to ntp.
    log("ptp4l grandmaster stopped: ptp -> ntp")
    slave.stop()
    gm.stop()
    t_gm = time.monotonic()
    t_sw2, t_lock2, a2, b2 = switch_and_measure(rec, "ntp", 30, "the grandmaster stopped", args, log)
    time.sleep(1.5)  # the last measurement lines
    out["ntp"] = {"appliance": appliance_window(rec, "ntp", a2, b2), "window": (a2, b2),
                  "locked_after_switch_s": t_lock2 - t_sw2}
    with rec.lock:
        corrections = list(rec.corrections)
    in_window = [(t, c) for t, c in corrections if a2 <= t <= b2]
    out["ntp"]["chronyd_clock"] = {**figures([c for _, c in in_window]),
                                   "series": [[round(t - a2, 2), round(c, 1)] for t, c in in_window]}
    # measurements.log: whole UTC seconds; the correction in force is the latest polled before that second.
    real_minus_mono = time.time() - time.monotonic()
    seen, rows = [], measurements(workdir / "chrony-client" / "measurements.log")
    for t_real, server, offset_s, tests in rows:
        t = t_real - real_minus_mono
        if not a2 <= t <= b2:
            continue
        corr = next((c for tc, c in reversed(corrections) if tc <= t), None)
        if corr is not None:
            seen.append((t, offset_s * 1e9 + corr, tests))
    out["ntp"]["chronyd_measurements"] = {**figures([v for _, v, _ in seen]),
                                          "failed_abcd_tests": sum(1 for *_, x in seen if x != "1111"),
                                          "series": [[round(t - a2, 1), round(v, 1)] for t, v, _ in seen]}
    with rec.lock:
        out["timeline"] = [[round(t - t0, 2), s["te"], s["state"], s["active"],
                            {n: [r["state"], r["offset"], r["buildout"]] for n, r in s["rows"].items()}]
                           for t, s in rec.samples]
    out["switches"] = [switch_figures(rec, "gnss", "ptp", "world receiver-off", t_off, t_sw1, t_gm),
                       switch_figures(rec, "ptp", "ntp", "ptp4l grandmaster stopped", t_gm, t_sw2, b2)]
    return out


# --- report ---------------------------------------------------------------------------------------------------------

def fmt(v: Any, spec: str = "9.0f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return f"{'-':>{spec.split('.')[0]}}"
    return format(v, spec)


def version(tool: str, flag: str) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([tool, flag], capture_output=True, text=True, timeout=5, check=False)
        words = (out.stdout or out.stderr).split()
        return next((w for w in words if w[:1].isdigit()), "?")
    return "?"


def report(res: dict[str, Any], args: argparse.Namespace, wall_s: float) -> dict[str, Any]:
    head = (f"  {'reference':9} {'measured by':34} {'samples':>7} {'rms ns':>9} {'max|TE| ns':>10} {'mean ns':>9} "
            f"{'stddev ns':>9} {'p99|TE| ns':>10}")

    def line(ref: str, who: str, f: dict[str, Any]) -> None:
        print(f"  {ref:9} {who:34} {f['count']:7d} {fmt(f['rms_ns'])} {fmt(f['max_abs_ns'], '10.0f')} "
              f"{fmt(f['mean_ns'], '+9.0f')} {fmt(f['stddev_ns'])} {fmt(f['p99_abs_ns'], '10.0f')}")

    def ratio_line(label: str, r: dict[str, float]) -> None:
        print(f"  {'':9} ratio appliance / {label}: rms {fmt(r['rms'], '.3g')}, max|TE| {fmt(r['max_abs'], '.3g')}, "
              f"|mean| {fmt(r['abs_mean'], '.3g')}")

    ptp, ntp = res["ptp"], res["ntp"]
    print(f"Steady-state time error on each reference, served minus host clock (TE, ns), real peers in two network "
          f"namespaces; {args.seconds:g} s per reference once LOCKED on it + {args.settle:g} s")
    print("  appliance: `appliance run` (simulated GNSS, learned OCXO state, references.* as shipped but qualify_s 5), "
          f"TE = status clock.sim_time_error_ns every {POLL_S:g} s")
    print(f"  ptp: ptp4l {version('ptp4l', '-v')} grandmaster (free_running, software timestamps, UDPv4 E2E, "
          f"{args.sync_rate:g} Sync/s); reference: a free-running ptp4l slave beside the appliance, -offset (master as "
          "measured - host) per Sync")
    print(f"  ntp: {args.ntp_servers} chronyd {version('chronyd', '--version')} -x server(s) (local stratum 1), polled "
          f"every {args.ntp_interval} s; reference: a chronyd -x client beside the appliance: its clock (NTP time - "
          f"system time, every {POLL_S:g} s) and its measurements (server as measured - host, per poll)")
    print(head)
    line("ptp", "appliance (TE)", ptp["appliance"])
    line("ptp", "ptp4l slave (master - host)", ptp["ptp4l"])
    ptp["ratios"] = ratios(ptp["appliance"], ptp["ptp4l"])
    ratio_line("ptp4l slave", ptp["ratios"])
    line("ntp", "appliance (TE)", ntp["appliance"])
    line("ntp", "chronyd client clock (NTP - host)", ntp["chronyd_clock"])
    line("ntp", "chronyd measurements (server - host)", ntp["chronyd_measurements"])
    ntp["ratios_clock"] = ratios(ntp["appliance"], ntp["chronyd_clock"])
    ntp["ratios_measurements"] = ratios(ntp["appliance"], ntp["chronyd_measurements"])
    ratio_line("chronyd clock", ntp["ratios_clock"])
    ratio_line("chronyd measurements", ntp["ratios_measurements"])
    for name, block in (("ptp", ptp), ("ntp", ntp)):
        ap = block["appliance"]
        print(f"  {name}: appliance locked on it in {ap['samples_on_it_locked']} of {ap['count']} samples "
              f"(states {'/'.join(ap['states'])}, active {'/'.join(ap['active'])}, clockClass "
              f"{'/'.join(map(str, ap['clock_class']))}), LOCKED {block['locked_after_switch_s']:.1f} s after the "
              f"switch; TE slope {fmt(ap['slope_ns_per_s'], '+.2f')} ns/s; its {name} row jitter "
              f"{fmt(ap['row_jitter_ns'], '.0f')} ns, loop time constant "
              f"{fmt(ap['time_constant_s'], '.0f')} s, advertised error bound {fmt(ap['error_bound_ns'], '.0f')} ns")
    print(f"  upstream as measured minus host (median/mean, ns): ptp: appliance "
          f"{fmt(ptp['appliance']['upstream_minus_host_ns'], '+.0f')}, ptp4l {fmt(ptp['ptp4l']['mean_ns'], '+.0f')} "
          f"(path delay {fmt(ptp['ptp4l']['path_delay_ns'], '.0f')} ns, {ptp['ptp4l']['syncs_per_s']:.2f} Sync/s "
          f"seen); ntp: appliance {fmt(ntp['appliance']['upstream_minus_host_ns'], '+.0f')}, chronyd "
          f"{fmt(ntp['chronyd_measurements']['mean_ns'], '+.0f')} "
          f"({ntp['chronyd_measurements']['failed_abcd_tests']} of its measurements failed a delay test)")
    g = res["gnss"]
    print(f"  gnss before the drill ({args.gnss_seconds:g} s): TE rms {fmt(g['rms_ns'], '.0f')}, max|TE| "
          f"{fmt(g['max_abs_ns'], '.0f')}, mean {fmt(g['mean_ns'], '+.0f')} ns")
    print("Switches, TE = served - host (ns): before = median of the 5 s before the cause, after = median of the 5 s "
          "after the switch, max|dTE| = max |TE - before| from the cause to 20 s after the switch (or the next step)")
    print(f"  {'switch':12} {'cause':26} {'after s':>7} {'TE before':>9} {'TE after':>9} {'change':>8} "
          f"{'max|dTE|':>8} {'build-out':>9} {'new-old':>8}  clock states")
    for sw in res["switches"]:
        print(f"  {sw['switch']:12} {sw['cause']:26} {sw['after_cause_s']:7.1f} {fmt(sw['te_before_ns'])} "
              f"{fmt(sw['te_after_ns'])} {fmt(sw['change_ns'], '+8.0f')} {fmt(sw['max_abs_change_ns'], '8.0f')} "
              f"{fmt(sw['buildout_ns'], '9.0f')} {fmt(sw['reference_difference_ns'], '+8.0f')}  "
              f"{' > '.join(sw['states'])}")
    print(f"  (new-old: the new reference's offset minus the old one's, median of the 5 s before the cause -- a PTP "
          f"row offset is one Sync's; build-out: the selector's, at the switch; ready on gnss after "
          f"{res['ready_after_s']:.1f} s; {wall_s:.0f} s wall)")
    out = {k: v for k, v in res.items() if k not in ("recorder", "slave", "client", "app")}
    if not args.keep_series:
        out.pop("timeline", None)
        for block in (out["gnss"], ptp["appliance"], ptp["ptp4l"], ntp["appliance"], ntp["chronyd_clock"],
                      ntp["chronyd_measurements"]):
            block.pop("series", None)
    return out


def keep_logs(workdir: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for path in [workdir / "appliance.log", *sorted(workdir.glob("chrony-*/*.log")),
                 *sorted(workdir.glob("chrony-*/chronyd.out"))]:
        target = dest / (path.name if path.parent == workdir else f"{path.parent.name}-{path.name}")
        with contextlib.suppress(OSError):
            shutil.copy(path, target)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--seconds", type=float, default=120.0, help="seconds measured on each reference (default 120)")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds after LOCKED on a reference before measuring")
    ap.add_argument("--gnss-seconds", type=float, default=10.0, help="seconds observed on GNSS before the drill")
    ap.add_argument("--sync-rate", type=float, default=4.0, help="the grandmaster's Sync/s, a power of two (4)")
    ap.add_argument("--ntp-interval", type=int, default=2, help="NTP poll interval, s, a power of two (default 2)")
    ap.add_argument("--ntp-servers", type=int, default=1, help="chronyd servers upstream (default 1)")
    ap.add_argument("--ready-timeout", type=float, default=120.0, help="seconds to lock with both references up")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--keep-series", action="store_true", help="include every sample in --json")
    ap.add_argument("--keep-logs", help="copy the appliance's log and the chronyd client's logs into this directory")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("references_peers: needs root (network namespaces)", file=sys.stderr)
        return 2
    for tool in ("ip", "ptp4l", "pmc", "setpriv", "chronyd", "chronyc"):
        if shutil.which(tool) is None:
            print(f"references_peers: {tool} is needed (scripts/test-all installs linuxptp and chrony)",
                  file=sys.stderr)
            return 2
    for name, value in (("--sync-rate", args.sync_rate), ("--ntp-interval", args.ntp_interval)):
        if value <= 0 or abs(math.log2(value) - round(math.log2(value))) > 1e-9:
            print(f"references_peers: {name} {value} is not a power of two", file=sys.stderr)
            return 2
    if not 1 <= args.ntp_servers <= 8:
        print("references_peers: --ntp-servers takes 1..8", file=sys.stderr)
        return 2
    started = time.monotonic()

    def log(text: str) -> None:
        print(f"  ... {time.monotonic() - started:5.0f} s: {text}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="references-peers-") as tmp, NetnsPair(prefix="rpb") as net:
        workdir = Path(tmp)
        os.chmod(workdir, 0o700)
        with contextlib.ExitStack() as stack:
            if args.keep_logs:  # registered first, so run last: once every process has stopped
                stack.callback(keep_logs, workdir, Path(args.keep_logs))
            try:
                res = drill(net, args, workdir, stack, log)
            except (RuntimeError, AssertionError) as exc:
                print(f"references_peers: FAILED: {exc}", file=sys.stderr)
                return 1
        out = report(res, args, time.monotonic() - started)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **out}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
