"""PTP offset as a ptp4l slave sees it: the candidate grandmaster against ptp4l as the reference, same link, same run.

    python bench/ptp_offset.py [--rates 1,16] [--transports udp4,l2,udp6] [--duration 60] [--settle 10]
                               [--rounds 1] [--together [--ftrace]] [--candidate-cmd CMD]
                               [--profile default-e2e] [--json FILE]

Two network namespaces joined by a veth pair (harness/ptp_harness.py NetnsPair).  For each transport and Sync
rate: ptp4l as the reference grandmaster in namespace A (software timestamps, clockClass 6), then the candidate
(``--candidate-cmd``, by default the appliance) in namespace A; each measured by a fresh ptp4l slave in namespace B
for ``--duration`` s once it has reached SLAVE (free-running ptp4l: UNCALIBRATED on RS_SLAVE) plus ``--settle`` s.
Both ends share one kernel clock, so the true offset is 0: the figures are the timestamping noise of each
grandmaster as the slave measures it.  The slave records every Sync (TIME_STATUS_NP polled over its Unix socket).
Printed: rms and max|offset| per grandmaster and the ratios candidate / reference (lower is better), and the ratio
of the 99th percentiles of |offset|, which single scheduling spikes (tens of microseconds, about one in a thousand
Syncs on a shared VM, for ptp4l as much as for anything else) do not move; then the statistics a stall cannot
decide: the median of the rms of each window of 10 Syncs and the p99|offset| of the pooled samples, each as a ratio
with a 95 % bootstrap interval (whole windows resampled; with --together window i of both at once, resampled as
pairs), and each grandmaster's mean per round with its standard error and
the means of alternate Syncs (ptp4l sends every other Sync beside its Announce, every 2 s, and that Sync reads about
1 us apart from the others: its mean is not a reference to within ±50 ns, so the candidate's mean also gets a
95 % bootstrap interval, and meets the target when it is within ±50 ns of ptp4l's mean or when that whole interval
is within ±50 ns of the true offset 0); with ``--rounds N`` the two alternate
N times and the medians are printed (a shared host varies from run to run).  With ``--together`` the two are
measured at once instead, each grandmaster on its own veth pair (two more namespaces) with its own measuring slave,
over one common window: a stalled vCPU or a busy neighbour then falls on both, where taking turns leaves it to chance
which one a rare stall hits (the links swap between rounds).

``--together --ftrace`` (UDPv4) also follows every Sync through the kernel (harness/kernel_trace.py): from the
grandmaster's veth driver, where its transmit timestamp is taken, to the slave's netif_rx, where the slave's receive
timestamp is taken.  Both are on the sending CPU in one kernel path, so a Sync that took over 10 us there was
stalled, and the slave reads the stall as offset.  Each polled sample is paired with its Sync (by its receive time),
and printed per grandmaster: the Syncs traced, how many stalled and how many of those had no guest event on the
CPU (the hypervisor's), the spikes (|offset| over 5 us) and how many came from a stalled Sync, and the rms, max and
p99 of the samples whose Sync did not stall, with their ratios.  It tells what the grandmaster did from where a
stall of the host landed.

--candidate-cmd placeholders: {python} {iface} {transport} {log_sync} {state_dir} {domain} {profile} {ns} {ip4}
{ip6} {workdir}, and {ptp4l_cfg}: a ptp4l reference-grandmaster config written for the run (to validate the bench
with ptp4l as the candidate: --candidate-cmd 'ptp4l -f {ptp4l_cfg} -i {iface} -m -q').  The command runs inside
namespace A under ``setpriv --bounding-set -sys_time``; every ptp4l here has free_running 1 and kernel_leap 0.
Nothing here adjusts the clock.  Needs root (namespaces), ptp4l, pmc, setpriv, ip.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import functools
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.kernel_trace import STALL_S, KernelTrace, Trace, syncs  # noqa: E402
from harness.offset_stats import print_windows, window_stats  # noqa: E402
from harness.procs import wait_for  # noqa: E402
from harness.ptp_appliance import seed_learned_state  # noqa: E402
from harness.ptp_harness import (PROFILE_MASTER_OPTIONS, PROFILE_SLAVE_OPTIONS,  # noqa: E402
                                 PROFILE_TRANSPORTS, PTP4L_MAX_DOMAIN, SETPRIV, NetnsPair, Ptp4l,
                                 collect, ptp4l_config, stop_process, summarize)

DEFAULT_CANDIDATE = ("{python} -m appliance run --set ptp.interface={iface} --set ptp.transport={transport} "
                     "--set ptp.profile={profile} --set ptp.domain={domain} --set ptp.log_sync_interval={log_sync} "
                     "--set state_dir={state_dir} "
                     "--set ntp.enabled=false --set clock.warmup_s=0 --set clock.qualify_s=3")
PROFILE_DELAY = {"default-e2e": "E2E", "default-p2p": "P2P", "g8275.1": "E2E", "g8275.2": "E2E", "c37.238": "P2P"}
INTERVAL_KEYS = ("logSyncInterval", "logMinDelayReqInterval", "logMinPdelayReqInterval")
SPIKE_NS = 5000  # an offset this far out is a spike: p99 is about 1.3 us here
PAIR_WITHIN_S = 0.002  # a sample's receive time and the start of its Sync's transmission: a stall is shorter
PAIR_SLACK_S = 5e-6  # the sample's time is the slave's receive timestamp carried over to CLOCK_MONOTONIC


def log_sync_of(rate: float) -> int:
    log = -math.log2(rate)
    if abs(log - round(log)) > 1e-9:
        raise SystemExit(f"ptp_offset: Sync rate {rate} is not a power of two")
    return int(round(log))


def slave_options(profile: str, domain: int) -> dict[str, str]:
    options = {k: v for k, v in PROFILE_SLAVE_OPTIONS[profile].items() if k not in INTERVAL_KEYS}
    return {**options, "domainNumber": str(domain)}


def measure(net: NetnsPair, start_gm, transport: str, rate: float, args: argparse.Namespace,
            unicast: bool) -> dict[str, Any]:
    """Start a grandmaster with ``start_gm()``, a measuring slave in namespace B, collect, stop both."""
    result: dict[str, Any] = {"ok": False}
    gm = slave = None
    t_start = time.monotonic()
    try:
        gm = start_gm()
        slave = Ptp4l(net.b, transport=transport, delay=PROFILE_DELAY[args.profile],
                      extra=slave_options(args.profile, args.domain), sync_rate_hint=rate,
                      unicast_master_table=[net.ip6_a if transport == "udp6" else net.ip4_a] if unicast else None,
                      label="measuring")
        slave.wait_slave(args.ready_timeout)
        result["to_slave_s"] = time.monotonic() - t_start
        offsets = collect(slave, args.duration, settle_s=args.settle)
        result.update(summarize(offsets, discard_s=0.0))
        result["syncs_per_s"] = result["count"] / args.duration
        result["gm_identity"] = slave.selected_gm()
        result["ok"] = result["count"] > 0
        result["offsets"] = [[round(t - offsets[0][0], 4), o] for t, o, _ in offsets] if args.keep_series else None
        result["windows"] = window_stats([float(o) for _, o, _ in offsets], rate)
    except AssertionError as exc:  # no slave state, a process died: reported, the other runs go on
        result["error"] = str(exc)[-3000:]
    finally:
        if slave is not None:
            slave.stop()
        if gm is not None:
            gm.stop()
    return result


def attribute_stalls(trace: str, dev: str, offsets: list[tuple[float, int, float]]) -> dict[str, Any]:
    """Which of a slave's offsets came from a Sync that stalled on its way through the sending CPU.  A polled
    sample's time is its Sync's receive timestamp (see ptp_harness._TimeStatusPoller), so each is paired with the
    last Sync the grandmaster's driver started to send before it; from that start to the receive timestamp the Sync
    runs on the sending CPU in one kernel path (see kernel_trace.py), and over 10 us there is a stall, which the slave
    reads as offset.  Returned: the Syncs traced, how many samples were paired, how many of their Syncs stalled and
    how many of those stalls had no guest event on that CPU (the hypervisor's), how many samples were spikes (|offset|
    over 5 us) and how many of the spikes came from a stalled Sync, rms / max / p99 of the samples whose Sync did not
    stall ("clean_"), and every spike in detail."""
    tr = Trace(trace)
    sent = syncs(tr.frames(devs=(dev,)))
    started = [f.t_xmit_s for f in sent]
    paired: list[tuple[tuple[float, int, float], bool, bool]] = []  # (sample, stalled, silent)
    detail = []
    misses: list[float] = []  # an unpaired sample: its time from the nearest start of a Sync
    for sample in offsets:
        i = bisect.bisect_right(started, sample[0] + PAIR_SLACK_S) - 1
        sync = sent[i] if i >= 0 and sample[0] - sent[i].t_xmit_s < PAIR_WITHIN_S else None
        if sync is None:
            if sent:
                misses.append(min((sample[0] - f.t_xmit_s for f in sent[max(0, i - 1):i + 2]), key=abs))
            continue
        transit_s = sample[0] - sync.t_xmit_s
        stalled = transit_s > STALL_S
        silent = stalled and not tr.busy(sync.cpu, sync.t_xmit_s, sample[0])
        paired.append((sample, stalled, silent))
        if abs(sample[1]) > SPIKE_NS:
            detail.append({"offset_ns": sample[1], "transit_us": round(transit_s * 1e6, 1), "silent": silent,
                           "delay_ns": sample[2]})
    spikes = [stalled for sample, stalled, _ in paired if abs(sample[1]) > SPIKE_NS]
    clean = summarize([sample for sample, stalled, _ in paired if not stalled], discard_s=0.0)
    return {"syncs": len(sent), "paired": len(paired), "stalled": sum(1 for _, st, _ in paired if st),
            "silent": sum(1 for _, _, si in paired if si), "spikes": len(spikes), "spikes_on_stall": sum(spikes),
            **{f"clean_{k}": clean[k] for k in ("count", "rms_ns", "max_abs_ns", "p99_abs_ns")},
            "spike_detail": detail, "unpaired_median_ms": statistics.median(misses) * 1e3 if misses else None}


class Candidate:
    """The candidate command inside namespace A (setpriv, own session), its output to a log file."""

    def __init__(self, net: NetnsPair, cmd: str, fields: dict[str, Any], log: Path) -> None:
        argv = shlex.split(cmd.format(**fields))
        self.log_path = log
        self.log = open(log, "w")
        self.proc = net.run(net.ns_a, [*SETPRIV, *argv], stdout=self.log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
        self.name = f"candidate ({argv[0]})"

    def stop(self) -> None:
        stop_process(self.proc, timeout_s=15)
        self.log.close()


def measure_together(nets: dict[str, NetnsPair], starters: dict[str, Any], transport: str, rate: float,
                     args: argparse.Namespace, unicast: bool,
                     tracer: KernelTrace | None = None) -> dict[str, dict[str, Any]]:
    """Each grandmaster on its own link with its own measuring slave, all at once: one measuring window for both, so
    whatever the shared host does in it (a stalled vCPU, another tenant) falls on both."""
    results: dict[str, dict[str, Any]] = {name: {"ok": False} for name in starters}
    gms: dict[str, Any] = {}
    slaves: dict[str, Ptp4l] = {}
    t_start = time.monotonic()
    traced, trace = False, None
    try:
        for name, start_gm in starters.items():
            gms[name] = start_gm(nets[name])
        for name, net in nets.items():
            slaves[name] = Ptp4l(net.b, transport=transport, delay=PROFILE_DELAY[args.profile],
                                 extra=slave_options(args.profile, args.domain), sync_rate_hint=rate,
                                 unicast_master_table=[net.ip6_a if transport == "udp6" else net.ip4_a]
                                 if unicast else None, label=f"measuring-{name}")
        for name, slave in slaves.items():
            slave.wait_slave(args.ready_timeout)
            results[name]["to_slave_s"] = time.monotonic() - t_start
        begin = time.monotonic() + args.settle
        end = begin + args.duration
        while time.monotonic() < end:
            for slave in slaves.values():
                if not slave.alive():
                    raise AssertionError(f"{slave.name} exited while measuring; log:\n{slave.tail(40)}")
            if tracer is not None and not traced and time.monotonic() >= begin - 0.5:
                tracer.start()
                traced = True
            time.sleep(min(0.5, max(0.0, (end if traced or tracer is None else begin - 0.5) - time.monotonic())))
        time.sleep(0.2)
        trace = tracer.stop() if traced and tracer is not None else None
        for name, slave in slaves.items():
            offsets = [o for o in slave.offsets_ns() if begin <= o[0] <= end]
            result = results[name]
            result.update(summarize(offsets, discard_s=0.0))
            result["syncs_per_s"] = result["count"] / args.duration
            result["gm_identity"] = slave.selected_gm()
            result["ok"] = result["count"] > 0
            result["offsets"] = ([[round(t - offsets[0][0], 4), o] for t, o, _ in offsets]
                                 if args.keep_series and offsets else None)
            result["windows"] = window_stats([float(o) for _, o, _ in offsets], rate)
            if trace is not None:
                result["kernel"] = attribute_stalls(trace, nets[name].if_a, offsets)
    except AssertionError as exc:
        for result in results.values():
            result.setdefault("error", str(exc)[-3000:])
    finally:
        if traced and trace is None and tracer is not None:
            tracer.stop()  # a window cut short: the tracing is switched off all the same
        for slave in slaves.values():
            slave.stop()
        for gm in gms.values():
            gm.stop()
    return results


def run_pair(nets: dict[str, NetnsPair], transport: str, rate: float, args: argparse.Namespace, workdir: Path,
             round_no: int, tracer: KernelTrace | None = None) -> dict[str, dict[str, Any]]:
    log_sync = log_sync_of(rate)
    unicast = args.profile == "g8275.2"
    gm_extra = {**PROFILE_MASTER_OPTIONS[args.profile], "logSyncInterval": str(log_sync),
                "domainNumber": str(args.domain)}
    delay = PROFILE_DELAY[args.profile]
    out: dict[str, dict[str, Any]] = {}
    tag = f"{transport}-{log_sync}-r{round_no}"

    def reference(net: NetnsPair) -> Ptp4l:
        return Ptp4l(net.a, role="master", transport=transport, delay=delay, extra=gm_extra, label="reference")

    def candidate(net: NetnsPair) -> Candidate:
        run_dir = workdir / f"candidate-{tag}"
        run_dir.mkdir()
        cfg = run_dir / "ptp4l-gm.cfg"
        cfg.write_text(ptp4l_config("master", transport, delay, int(gm_extra.get("domainNumber", 0)),
                                    str(run_dir / "ptp4l.sock"), gm_extra, unicast_listen=unicast))
        fields = {"python": sys.executable, "iface": net.if_a, "transport": transport, "log_sync": log_sync,
                  "state_dir": run_dir / "state", "domain": args.domain, "profile": args.profile,
                  "ns": net.ns_a, "ip4": net.ip4_a, "ip6": net.ip6_a, "workdir": run_dir, "ptp4l_cfg": cfg}
        appliance = " appliance run" in args.candidate_cmd
        if appliance:  # a learned state, as after a restart: locked within seconds, no cold-start step
            seed_learned_state(run_dir / "state")
        started = Candidate(net, args.candidate_cmd, fields, run_dir / "candidate.log")
        if appliance:  # measured locked to its reference (clockClass 6), as the reference ptp4l claims to be
            wait_for(run_dir / "state", lambda s: s["clock"]["state"] == "LOCKED", args.ready_timeout)
        return started

    order = (("reference", reference), ("candidate", candidate))
    if round_no % 2:  # alternate who goes first (and, measured together, who has which link)
        order = order[::-1]
    if args.together:
        print(f"  ... {transport} {rate:g} Sync/s round {round_no + 1}: both at once", file=sys.stderr, flush=True)
        links = list(nets.values())
        out = measure_together({name: links[k] for k, (name, _) in enumerate(order)}, dict(order), transport, rate,
                               args, unicast, tracer)
    for name, start in ([] if args.together else order):
        print(f"  ... {transport} {rate:g} Sync/s round {round_no + 1}: {name}", file=sys.stderr, flush=True)
        out[name] = measure(nets["one"], functools.partial(start, nets["one"]), transport, rate, args, unicast)
    if not out["candidate"]["ok"]:
        log = workdir / f"candidate-{tag}" / "candidate.log"
        out["candidate"]["candidate_log_tail"] = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    return out


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in runs if r.get("ok") and not math.isnan(r.get(key, math.nan))]
    return statistics.median(values) if values else math.nan


def print_stalls(res: dict[str, Any]) -> None:
    """The --ftrace figures of one transport and rate: counts summed over rounds, clean figures their medians."""
    print(f"  {'':9} {'':6}  {'':11} {'Syncs':>7} {'stalled':>7} {'silent':>6} {'spikes':>6} {'on stall':>8} "
          f"{'clean rms':>9} {'clean max':>9} {'clean p99':>9}")
    clean: dict[str, dict[str, float]] = {}
    for name, label in (("reference", "ptp4l"), ("candidate", "candidate")):
        ks = [r[name]["kernel"] for r in res["rounds"] if r[name].get("ok") and r[name].get("kernel", {}).get(
            "paired")]
        if not ks:
            continue
        total = {k: sum(x[k] for x in ks) for k in ("paired", "stalled", "silent", "spikes", "spikes_on_stall")}
        clean[name] = {k: statistics.median([x[k] for x in ks]) for k in ("clean_rms_ns", "clean_max_abs_ns",
                                                                          "clean_p99_abs_ns")}
        c = clean[name]
        print(f"  {res['transport']:9} {res['rate']:6g}  {label:11} {total['paired']:7} {total['stalled']:7} "
              f"{total['silent']:6} {total['spikes']:6} {total['spikes_on_stall']:8} "
              f"{c['clean_rms_ns']:9.0f} {c['clean_max_abs_ns']:9.0f} {c['clean_p99_abs_ns']:9.0f}")
    if len(clean) == 2:
        ref, cand = clean["reference"], clean["candidate"]
        res["ratio_clean"] = {k: cand[k] / ref[k] if ref[k] else math.nan for k in ref}
        print(f"  {res['transport']:9} {res['rate']:6g}  ratio candidate/ptp4l without stalled Syncs: rms "
              f"{res['ratio_clean']['clean_rms_ns']:.2f}, max|offset| {res['ratio_clean']['clean_max_abs_ns']:.2f}, "
              f"p99|offset| {res['ratio_clean']['clean_p99_abs_ns']:.2f}")
    print("  (Syncs: samples paired with their Sync in the kernel trace; stalled: over 10 us from the grandmaster's "
          "driver to the slave's receive timestamp, silent: with no guest event on the sending CPU meanwhile, i.e. "
          "the hypervisor's; spikes: |offset| over 5 us, on stall: of those, the ones from a stalled Sync; clean: "
          "the samples of Syncs that did not stall)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--rates", default="1,16", help="Sync messages per second, powers of two (default 1,16)")
    ap.add_argument("--transports", default="udp4", help="udp4, udp6, l2 (comma-separated; default udp4)")
    ap.add_argument("--profile", default="default-e2e", choices=sorted(PROFILE_SLAVE_OPTIONS))
    ap.add_argument("--domain", type=int, help="PTP domain (default: the profile's; linuxptp 3.1.1 takes 0..127, so "
                    "C37.238's 254 needs another)")
    ap.add_argument("--duration", type=float, default=60.0, help="measured seconds per run (default 60)")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds after SLAVE before measuring (default 10)")
    ap.add_argument("--rounds", type=int, default=1, help="reference/candidate alternations; medians printed")
    ap.add_argument("--together", action="store_true",
                    help="measure both grandmasters at once, each on its own veth pair with its own slave, over one "
                    "window (a shared host's stalls fall on both); by default they take turns on one link")
    ap.add_argument("--ready-timeout", type=float, default=180.0,
                    help="seconds for the slave to reach SLAVE behind a grandmaster (the appliance locks first)")
    ap.add_argument("--candidate-cmd", default=DEFAULT_CANDIDATE)
    ap.add_argument("--ftrace", action="store_true",
                    help="with --together: trace each Sync through the kernel and tell the offsets of Syncs that "
                    "stalled on the sending CPU from the others")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--keep-series", action="store_true", help="include every (t, offset) sample in --json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("ptp_offset: needs root (network namespaces)", file=sys.stderr)
        return 2
    if args.ftrace and not args.together:
        print("ptp_offset: --ftrace needs --together (one traced window for both grandmasters)", file=sys.stderr)
        return 2
    if args.ftrace and args.transports != "udp4":
        print("ptp_offset: --ftrace reads UDPv4 frames only (--transports udp4)", file=sys.stderr)
        return 2
    for tool in ("ip", "ptp4l", "pmc", "setpriv"):
        if shutil.which(tool) is None:
            print(f"ptp_offset: {tool} is needed (scripts/test-all installs linuxptp)", file=sys.stderr)
            return 2
    if args.domain is None:
        args.domain = int(PROFILE_SLAVE_OPTIONS[args.profile]["domainNumber"])
    if not 0 <= args.domain <= PTP4L_MAX_DOMAIN:
        print(f"ptp_offset: domain {args.domain}: the ptp4l slave (3.1.1) takes 0..{PTP4L_MAX_DOMAIN}; use --domain",
              file=sys.stderr)
        return 2
    rates = [float(r) for r in args.rates.split(",")]
    transports = [t.strip() for t in args.transports.split(",")]
    for t in transports:
        if t not in PROFILE_TRANSPORTS[args.profile]:
            print(f"ptp_offset: profile {args.profile} has no transport {t}", file=sys.stderr)
            return 2
    results: list[dict[str, Any]] = []
    tracer = KernelTrace(clock="mono") if args.ftrace else None
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ptp-offset-")))
        nets = {"one": stack.enter_context(NetnsPair(prefix="pbo"))}
        if args.together:
            nets["two"] = stack.enter_context(NetnsPair(prefix="pbt"))
        for transport in transports:
            for rate in rates:
                runs = [run_pair(nets, transport, rate, args, workdir, r, tracer) for r in range(args.rounds)]
                results.append({"transport": transport, "rate": rate, "log_sync_interval": log_sync_of(rate),
                                "rounds": runs})
    ok = True
    print(f"PTP offset seen by a ptp4l slave (free-running, software timestamps, every Sync), profile {args.profile}, "
          f"{args.duration:g} s per run after SLAVE + {args.settle:g} s"
          + (f", median of {args.rounds} rounds" if args.rounds > 1 else "")
          + (", both grandmasters measured at once on two links" if args.together else ""))
    print(f"  {'transport':9} {'Sync/s':>6}  {'grandmaster':11} {'samples':>7} {'Sync/s seen':>11} {'rms ns':>8} "
          f"{'max|.| ns':>9} {'mean ns':>8} {'p99|.| ns':>9} {'delay ns':>8} {'to SLAVE s':>10}")
    for res in results:
        row: dict[str, dict[str, float]] = {}
        for name in ("reference", "candidate"):
            runs = [r[name] for r in res["rounds"]]
            row[name] = {k: median_of(runs, k) for k in ("count", "syncs_per_s", "rms_ns", "max_abs_ns", "mean_ns",
                                                          "p99_abs_ns", "path_delay_mean_ns", "to_slave_s")}
            label = "ptp4l" if name == "reference" else "candidate"
            if not any(r.get("ok") for r in runs):
                ok = False
                err = next((r.get("error", "") for r in runs if r.get("error")), "no samples")
                print(f"  {res['transport']:9} {res['rate']:6g}  {label:11} FAILED: {err.splitlines()[0][:100]}")
                continue
            v = row[name]
            print(f"  {res['transport']:9} {res['rate']:6g}  {label:11} {v['count']:7.0f} {v['syncs_per_s']:11.2f} "
                  f"{v['rms_ns']:8.0f} {v['max_abs_ns']:9.0f} {v['mean_ns']:8.0f} {v['p99_abs_ns']:9.0f} "
                  f"{v['path_delay_mean_ns']:8.0f} {v['to_slave_s']:10.1f}")
        ref, cand = row["reference"], row["candidate"]
        res["median"] = row
        res["ratio_rms"] = cand["rms_ns"] / ref["rms_ns"] if ref["rms_ns"] else math.nan
        res["ratio_max_abs"] = cand["max_abs_ns"] / ref["max_abs_ns"] if ref["max_abs_ns"] else math.nan
        res["ratio_p99_abs"] = cand["p99_abs_ns"] / ref["p99_abs_ns"] if ref["p99_abs_ns"] else math.nan
        print(f"  {res['transport']:9} {res['rate']:6g}  ratio candidate/ptp4l: rms {res['ratio_rms']:.2f}, "
              f"max|offset| {res['ratio_max_abs']:.2f}, p99|offset| {res['ratio_p99_abs']:.2f}")
        print_windows(res, paired=args.together)
        if tracer is not None:
            print_stalls(res)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
