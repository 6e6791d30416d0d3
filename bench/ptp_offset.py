"""PTP offset as a ptp4l slave sees it: the candidate grandmaster against ptp4l as the reference, same link, same run.

    python bench/ptp_offset.py [--rates 1,16] [--transports udp4,l2,udp6] [--duration 60] [--settle 10]
                               [--rounds 1] [--together] [--candidate-cmd CMD] [--profile default-e2e]
                               [--json FILE]

Two network namespaces joined by a veth pair (tests/interop/ptp_harness.py NetnsPair).  For each transport and Sync
rate: ptp4l as the reference grandmaster in namespace A (software timestamps, clockClass 6), then the candidate
(``--candidate-cmd``, by default the appliance) in namespace A; each measured by a fresh ptp4l slave in namespace B
for ``--duration`` s once it has reached SLAVE (free-running ptp4l: UNCALIBRATED on RS_SLAVE) plus ``--settle`` s.
Both ends share one kernel clock, so the true offset is 0: the figures are the timestamping noise of each
grandmaster as the slave measures it.  The slave records every Sync (TIME_STATUS_NP polled over its Unix socket).
Printed: rms and max|offset| per grandmaster and the ratios candidate / reference (lower is better), and the ratio
of the 99th percentiles of |offset|, which single scheduling spikes (tens of microseconds, about one in a thousand
Syncs on a shared VM, for ptp4l as much as for anything else) do not move; with ``--rounds N`` the two alternate
N times and the medians are printed (a shared host varies from run to run).  With ``--together`` the two are
measured at once instead, each grandmaster on its own veth pair (two more namespaces) with its own measuring slave,
over one common window: a stalled vCPU or a busy neighbour then falls on both, where taking turns leaves it to chance
which one a rare stall hits (the links swap between rounds).

--candidate-cmd placeholders: {python} {iface} {transport} {log_sync} {state_dir} {domain} {profile} {ns} {ip4}
{ip6} {workdir}, and {ptp4l_cfg}: a ptp4l reference-grandmaster config written for the run (to validate the bench
with ptp4l as the candidate: --candidate-cmd 'ptp4l -f {ptp4l_cfg} -i {iface} -m -q').  The command runs inside
namespace A under ``setpriv --bounding-set -sys_time``; every ptp4l here has free_running 1 and kernel_leap 0.
Nothing here adjusts the clock.  Needs root (namespaces), ptp4l, pmc, setpriv, ip.
"""

from __future__ import annotations

import argparse
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

from tests.interop.procs import wait_for  # noqa: E402
from tests.interop.ptp_appliance import seed_learned_state  # noqa: E402
from tests.interop.ptp_harness import (PROFILE_MASTER_OPTIONS, PROFILE_SLAVE_OPTIONS,  # noqa: E402
                                       PROFILE_TRANSPORTS, PTP4L_MAX_DOMAIN, SETPRIV, NetnsPair, Ptp4l,
                                       collect, ptp4l_config, stop_process, summarize)

DEFAULT_CANDIDATE = ("{python} -m appliance run --set ptp.interface={iface} --set ptp.transport={transport} "
                     "--set ptp.profile={profile} --set ptp.domain={domain} --set ptp.log_sync_interval={log_sync} "
                     "--set state_dir={state_dir} "
                     "--set ntp.enabled=false --set clock.warmup_s=0 --set clock.qualify_s=3")
PROFILE_DELAY = {"default-e2e": "E2E", "default-p2p": "P2P", "g8275.1": "E2E", "g8275.2": "E2E", "c37.238": "P2P"}
INTERVAL_KEYS = ("logSyncInterval", "logMinDelayReqInterval", "logMinPdelayReqInterval")


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
    except AssertionError as exc:  # no slave state, a process died: reported, the other runs go on
        result["error"] = str(exc)[-3000:]
    finally:
        if slave is not None:
            slave.stop()
        if gm is not None:
            gm.stop()
    return result


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
                     args: argparse.Namespace, unicast: bool) -> dict[str, dict[str, Any]]:
    """Each grandmaster on its own link with its own measuring slave, all at once: one measuring window for both, so
    whatever the shared host does in it (a stalled vCPU, another tenant) falls on both."""
    results: dict[str, dict[str, Any]] = {name: {"ok": False} for name in starters}
    gms: dict[str, Any] = {}
    slaves: dict[str, Ptp4l] = {}
    t_start = time.monotonic()
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
            time.sleep(min(0.5, max(0.0, end - time.monotonic())))
        time.sleep(0.2)
        for name, slave in slaves.items():
            offsets = [o for o in slave.offsets_ns() if begin <= o[0] <= end]
            result = results[name]
            result.update(summarize(offsets, discard_s=0.0))
            result["syncs_per_s"] = result["count"] / args.duration
            result["gm_identity"] = slave.selected_gm()
            result["ok"] = result["count"] > 0
            result["offsets"] = ([[round(t - offsets[0][0], 4), o] for t, o, _ in offsets]
                                 if args.keep_series and offsets else None)
    except AssertionError as exc:
        for result in results.values():
            result.setdefault("error", str(exc)[-3000:])
    finally:
        for slave in slaves.values():
            slave.stop()
        for gm in gms.values():
            gm.stop()
    return results


def run_pair(nets: dict[str, NetnsPair], transport: str, rate: float, args: argparse.Namespace, workdir: Path,
             round_no: int) -> dict[str, dict[str, Any]]:
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
                               args, unicast)
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
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--keep-series", action="store_true", help="include every (t, offset) sample in --json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("ptp_offset: needs root (network namespaces)", file=sys.stderr)
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
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ptp-offset-")))
        nets = {"one": stack.enter_context(NetnsPair(prefix="pbo"))}
        if args.together:
            nets["two"] = stack.enter_context(NetnsPair(prefix="pbt"))
        for transport in transports:
            for rate in rates:
                runs = [run_pair(nets, transport, rate, args, workdir, r) for r in range(args.rounds)]
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
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
