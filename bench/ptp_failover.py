"""PTP grandmaster failover as a ptp4l slave sees it: two candidate grandmasters on one LAN, the active one forced
into holdover, the time until the slave selects the other.

    python bench/ptp_failover.py [--runs 3] [--transport udp4] [--candidate-cmd CMD] [--holdover-cmd CMD] [--json F]

Three namespaces on a Linux bridge (harness/ptp_harness.py NetnsLan: gm1, gm2, slave).  gm1 and gm2 run
``--candidate-cmd`` (by default the appliance), gm1 with priority2 100 and gm2 with priority2 128: priority1 and the
clock quality being equal, gm1 is the best master -- and since priority2 is compared *after* clockClass, a degraded
clockClass on gm1 (holdover) hands the role to gm2.  A ptp4l slave (free-running, never adjusting the clock) selects
gm1; then ``--holdover-cmd`` runs against gm1 (by default ``appliance holdover start``) and the time from the command
to the slave's "selected best master clock <gm2>" is measured (the slave's log time stamps are CLOCK_MONOTONIC).

Placeholders in both commands: {python} {iface} {transport} {priority2} {state_dir} {ns} {ip4} {workdir}
{ptp4l_cfg} (a ptp4l reference-grandmaster config with that priority2) {uds} (that ptp4l's Unix socket) and, in
--holdover-cmd, {pid} (gm1's process).  To validate with ptp4l grandmasters:

    --candidate-cmd 'ptp4l -f {ptp4l_cfg} -i {iface} -m -q'
    --holdover-cmd  "pmc -u -b 0 -s {uds} 'SET GRANDMASTER_SETTINGS_NP clockClass 7 clockAccuracy 0xfe
                     offsetScaledLogVariance 0xffff currentUtcOffset 37 leap61 0 leap59 0 currentUtcOffsetValid 0
                     ptpTimescale 0 timeTraceable 0 frequencyTraceable 0 timeSource 0xa0'"    (clockClass 7)
    --holdover-cmd  'kill {pid}'                                                         (gm1 disappears)

Every command runs in its namespace under ``setpriv --bounding-set -sys_time``; nothing here adjusts the clock.
"""

from __future__ import annotations

import argparse
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

from harness.procs import wait_for  # noqa: E402
from harness.ptp_appliance import seed_learned_state  # noqa: E402
from harness.ptp_harness import (SETPRIV, NetnsLan, Ptp4l, pmc, ptp4l_config,  # noqa: E402
                                 stop_process)

DEFAULT_CANDIDATE = ("{python} -m appliance run --set ptp.interface={iface} --set ptp.transport={transport} "
                     "--set ptp.priority2={priority2} --set state_dir={state_dir} --set ntp.enabled=false "
                     "--set clock.warmup_s=0 --set clock.qualify_s=3")
DEFAULT_HOLDOVER = "{python} -m appliance holdover start --set state_dir={state_dir}"
# The reference measured in the same run: two ptp4l grandmasters, gm1 degraded to clockClass 7 through management.
REFERENCE_CANDIDATE = "ptp4l -f {ptp4l_cfg} -i {iface} -m -q"
REFERENCE_HOLDOVER = ("pmc -u -b 0 -s {uds} 'SET GRANDMASTER_SETTINGS_NP clockClass 7 clockAccuracy 0x21 "
                      "offsetScaledLogVariance 0x4e5d currentUtcOffset 37 leap61 0 leap59 0 currentUtcOffsetValid 1 "
                      "ptpTimescale 1 timeTraceable 1 frequencyTraceable 1 timeSource 0xa0'")
PRIORITY2 = {"gm1": 100, "gm2": 128}
GM_EXTRA = {"logAnnounceInterval": "1", "logSyncInterval": "0"}  # the default profile's intervals


def start_candidate(lan: NetnsLan, name: str, args: argparse.Namespace, run_dir: Path) -> tuple[subprocess.Popen,
                                                                                                   dict[str, Any]]:
    d = run_dir / name
    d.mkdir(parents=True)
    cfg = d / "ptp4l-gm.cfg"
    extra = {**GM_EXTRA, "priority2": str(PRIORITY2[name])}
    cfg.write_text(ptp4l_config("master", args.transport, "E2E", 0, str(d / "ptp4l.sock"), extra))
    m = lan[name]
    fields = {"python": sys.executable, "iface": m.iface, "transport": args.transport, "priority2": PRIORITY2[name],
              "state_dir": d / "state", "ns": m.ns, "ip4": m.ip4, "workdir": d, "ptp4l_cfg": cfg,
              "uds": d / "ptp4l.sock"}
    if " appliance run" in args.candidate_cmd:  # holdover-capable at once: a learned state, as after a restart
        seed_learned_state(d / "state")
    log = open(d / "candidate.log", "w")
    proc = lan.run(m, [*SETPRIV, *shlex.split(args.candidate_cmd.format(**fields))], stdout=log,
                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()  # the child holds its own descriptor
    fields["pid"] = proc.pid
    return proc, fields


def one_run(args: argparse.Namespace, workdir: Path, run_no: int) -> dict[str, Any]:
    out: dict[str, Any] = {"run": run_no, "ok": False}
    procs: list[subprocess.Popen] = []
    slave = None
    run_dir = workdir / f"run{run_no}"
    with NetnsLan(names=("gm1", "gm2", "slave"), prefix="pbf") as lan:
        try:
            fields = {}
            for name in ("gm1", "gm2"):
                proc, fields[name] = start_candidate(lan, name, args, run_dir)
                procs.append(proc)
            if " appliance run" in args.candidate_cmd:  # both locked to GNSS (clockClass 6) before measuring
                for name in ("gm1", "gm2"):
                    wait_for(fields[name]["state_dir"], lambda s: s["clock"]["state"] == "LOCKED",
                             args.ready_timeout)
            slave = Ptp4l(lan["slave"], transport=args.transport, label="measuring")
            slave.wait_slave(args.ready_timeout)
            # Identify gm1 by its priority2 as the clocks answer management over the network.
            deadline = time.monotonic() + args.ready_timeout
            gm_ids: dict[str, str] = {}
            while time.monotonic() < deadline and len(gm_ids) < 2:
                for block in pmc(lan["slave"], None, args.transport, 0, "GET DEFAULT_DATA_SET", timeout_s=3):
                    for name, p2 in PRIORITY2.items():
                        if block.get("priority2") == str(p2):
                            gm_ids[name] = block["clockIdentity"]
                time.sleep(0.5)
            out["gm_identities"] = gm_ids
            if len(gm_ids) < 2:
                raise AssertionError(f"management did not show both grandmasters: {gm_ids}")
            slave.wait_until(lambda: slave.selected_gm() == gm_ids["gm1"], args.ready_timeout, "selecting gm1")
            time.sleep(args.settle)
            if slave.selected_gm() != gm_ids["gm1"]:
                raise AssertionError(f"the slave left gm1 before the holdover command: {slave.selected_gm()}")
            argv = shlex.split(args.holdover_cmd.format(**fields["gm1"]))
            t0 = time.monotonic()
            done = subprocess.run(lan["gm1"].argv([*SETPRIV, *argv]), capture_output=True, text=True, timeout=60)
            out["holdover_cmd_s"] = time.monotonic() - t0
            out["holdover_cmd_rc"] = done.returncode
            if done.returncode != 0:
                raise AssertionError(f"holdover command exited {done.returncode}: {done.stdout}{done.stderr}")
            t1 = slave.wait_until(lambda: next((s.t for s in slave.selections if s.t >= t0 and not s.local
                                                and s.identity != gm_ids["gm1"]), None), args.timeout,
                                  "selecting another grandmaster")
            out["failover_s"] = t1 - t0
            out["new_gm"] = slave.selected_gm()
            out["new_gm_is_gm2"] = out["new_gm"] == gm_ids["gm2"]
            out["transitions_after"] = [str(t) for t in slave.transitions if t.t >= t0]
            parent = [b for b in slave.pmc_local("GET PARENT_DATA_SET") if b.get("id") == "PARENT_DATA_SET"]
            out["new_gm_clock_class"] = parent[0].get("gm.ClockClass") if parent else None
            out["ok"] = out["new_gm_is_gm2"]
        except AssertionError as exc:
            out["error"] = str(exc)[-3000:]
        finally:
            if slave is not None:
                out["slave_log_tail"] = slave.tail(20)
                slave.stop()
            for proc in procs:
                stop_process(proc, timeout_s=15)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--transport", default="udp4", choices=("udp4", "udp6", "l2"))
    ap.add_argument("--candidate-cmd", default=DEFAULT_CANDIDATE)
    ap.add_argument("--holdover-cmd", default=DEFAULT_HOLDOVER)
    ap.add_argument("--ready-timeout", type=float, default=180.0, help="seconds for the slave to select gm1")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds on gm1 before the holdover command")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the switch")
    ap.add_argument("--no-reference", action="store_true", help="skip the ptp4l reference runs")
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("ptp_failover: needs root (network namespaces)", file=sys.stderr)
        return 2
    for tool in ("ip", "ptp4l", "pmc", "setpriv"):
        if shutil.which(tool) is None:
            print(f"ptp_failover: {tool} is needed (scripts/test-all installs linuxptp)", file=sys.stderr)
            return 2
    results = {}
    sides = [("reference (ptp4l)", REFERENCE_CANDIDATE, REFERENCE_HOLDOVER)] if not args.no_reference else []
    sides.append(("candidate", args.candidate_cmd, args.holdover_cmd))
    for label, candidate, holdover in sides:
        side = argparse.Namespace(**{**vars(args), "candidate_cmd": candidate, "holdover_cmd": holdover})
        runs = []
        with tempfile.TemporaryDirectory(prefix="ptp-failover-") as tmp:
            for r in range(args.runs):
                print(f"  ... {label} run {r + 1}/{args.runs}", file=sys.stderr, flush=True)
                runs.append(one_run(side, Path(tmp), r))
        results[label] = runs
        times = [r["failover_s"] for r in runs if r.get("ok")]
        print(f"PTP failover, {label} ({args.transport}): holdover on gm1 -> slave selects gm2, {args.runs} runs")
        for r in runs:
            if r.get("ok"):
                print(f"  run {r['run'] + 1}: {r['failover_s']:6.2f} s  (command took {r['holdover_cmd_s']:.2f} s; "
                      f"new GM clockClass {r['new_gm_clock_class']})")
            else:
                reason = r.get("error", f"switched to {r.get('new_gm')} (not gm2)")
                print(f"  run {r['run'] + 1}: FAILED: {reason.splitlines()[0][:150]}")
        if times:
            print(f"  failover median {statistics.median(times):.2f} s, max {max(times):.2f} s")
    medians = {k: statistics.median([r["failover_s"] for r in v if r.get("ok")] or [math.nan])
               for k, v in results.items()}
    if len(medians) == 2:
        ref, cand = medians["reference (ptp4l)"], medians["candidate"]
        print(f"ratio candidate/reference (median failover time): {cand / ref:.2f}  ({cand:.2f} s vs {ref:.2f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results, "median_s": medians},
                                              indent=1, default=str))
    return 0 if all(r.get("ok") for v in results.values() for r in v) else 1

if __name__ == "__main__":
    raise SystemExit(main())
