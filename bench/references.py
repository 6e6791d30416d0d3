"""Reference switching in simulation: the time error at each switch of reference, and on each reference.

    python bench/references.py [--seed 1] [--steady-min 10] [--settle-s 400] [--ptp-asymmetry-ns 500]
                               [--ptp-noise-ns 50] [--ntp-noise-ns 200000] [--json FILE]

The whole appliance on its simulated world (OCXO) with three references: the GNSS receiver (priority 1), an upstream
PTP grandmaster (priority 2; its time off by a constant path asymmetry, plus white noise) and NTP upstream servers
(priority 5; white noise, a poll every 16 s).  The drill: 600 s to lock on GNSS, then --steady-min on it; the receiver
off (-> PTP), --settle-s then --steady-min on PTP; the PTP upstream off (-> NTP), the same on NTP; the NTP servers
off (-> holdover); then each back in turn: NTP on (-> NTP), PTP on (-> PTP, revertive), receiver on (-> GNSS,
revertive).

Printed for each switch: when it came after the drill command, TE just before it (the last second before), the step
across the switch second (TE after minus TE before), max |TE| over the 60 s after it, and the clock states seen in
those 60 s.  For each reference: rms and max |TE| over the last --steady-min minutes on it.  TE is served minus true
time (ns) every simulated second; the seconds whose |TE| passed the clock's advertised error bound are counted.

Reference, measured in the same run (same seed, same drill): the selector's build-out disabled
(references.step_limit_ns=1e9, so at a fallback the whole phase difference to the new reference goes to the loop,
as a plain selector without hitless switching would do).  ratio = appliance / reference (below 1: the build-out
helps).  A default run takes under a minute.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from appliance.units import NS_PER_S

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appliance import config as cfg
from appliance import leap
from appliance.runtime.platforms import simulated
from appliance.refs.selector import RefSwitched
from appliance.sched import SimScheduler

AFTER_S = 60  # the window after a switch
NO_BUILDOUT = 1_000_000_000  # references.step_limit_ns for the reference run


@dataclass
class Record:
    te: list[int] = field(default_factory=list)  # served - true, ns, once a second
    bound: list[int | None] = field(default_factory=list)
    state: list[str] = field(default_factory=list)
    active: list[str | None] = field(default_factory=list)
    switches: list[tuple[int, RefSwitched]] = field(default_factory=list)  # (first second after it, the switch)
    commands: dict[str, int] = field(default_factory=dict)  # drill command -> first second after it
    steady: dict[str, tuple[int, int]] = field(default_factory=dict)  # reference -> [first, last) second
    settings: dict[str, object] = field(default_factory=dict)


def drill(seed: int, settings: dict[str, object], steady_s: int, settle_s: int) -> Record:
    table = leap.LeapTable.load_default()
    start = leap.utc_fields_to_tai(2026, 6, 1, 12, 0, 0, 0, table) + 250_000_000
    pairs = [f"sim.seed={seed}", "clock.oscillator=ocxo"] + [f"{k}={v}" for k, v in settings.items()]
    scheduler = SimScheduler(start)
    app, world = simulated(cfg.load(None, pairs), scheduler, table)
    rec = Record(settings=dict(settings))
    app.subscribe(lambda e: rec.switches.append((len(rec.te), e)) if isinstance(e, RefSwitched) else None)
    world.start()

    def run(seconds: int) -> None:
        for _ in range(seconds):
            scheduler.run_for(NS_PER_S)
            status = app.status()
            rec.te.append(app.sim_time_error_ns())
            rec.bound.append(status.clock.error_bound_ns)
            rec.state.append(status.clock.state)
            rec.active.append(status.references.active)

    def world_cmd(action: str) -> None:
        reply = app.handle_command({"cmd": "world", "action": action, "user": "bench"})
        if not reply.get("ok"):
            raise SystemExit(f"world {action}: {reply}")
        rec.commands[action] = len(rec.te)

    run(600)
    rec.steady["gnss"] = (len(rec.te), len(rec.te) + steady_s)
    run(steady_s)
    for action, ref in (("receiver-off", "ptp"), ("ptp-off", "ntp")):
        world_cmd(action)
        run(settle_s)
        rec.steady[ref] = (len(rec.te), len(rec.te) + steady_s)
        run(steady_s)
    for action, seconds in (("ntp-off", 66 + 120), ("ntp-on", 48 + 2 * AFTER_S), ("ptp-on", 75 + 2 * AFTER_S),
                            ("receiver-on", 75 + 240)):
        world_cmd(action)
        run(seconds)
    return rec


def rms(values: list[int]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else float("nan")


def switch_rows(rec: Record) -> list[dict]:
    rows = []
    warm = rec.commands["receiver-off"]
    command_at = sorted(rec.commands.items(), key=lambda kv: kv[1])
    for t, sw in rec.switches:
        if t < warm:
            continue  # the cold start
        after = rec.te[t:t + AFTER_S]
        states = []
        for s in rec.state[t - 1:t + AFTER_S]:
            if not states or states[-1] != s:
                states.append(s)
        cause = max((kv for kv in command_at if kv[1] <= t), key=lambda kv: kv[1])
        rows.append({"switch": f"{sw.old or 'none'} -> {sw.new or 'holdover'}", "command": cause[0],
                     "after_command_s": t - cause[1], "te_before_ns": rec.te[t - 1],
                     "step_ns": rec.te[t] - rec.te[t - 1], "max_te_after_ns": max(abs(v) for v in after),
                     "buildout_ns": round(sw.buildout_ns), "states": states, "reason": sw.reason})
    return rows


def steady_rows(rec: Record) -> dict[str, dict]:
    out = {}
    for ref, (a, b) in rec.steady.items():
        te = rec.te[a:b]
        on = sum(1 for x in rec.active[a:b] if x == ref)
        out[ref] = {"rms_ns": rms(te), "max_te_ns": max(abs(v) for v in te), "mean_ns": sum(te) / len(te),
                    "seconds": len(te), "seconds_on_it": on}
    return out


def uncovered(rec: Record) -> list[tuple[int, int, int | None]]:
    warm = rec.commands["receiver-off"] - 60
    return [(t, rec.te[t], rec.bound[t]) for t in range(warm, len(rec.te))
            if rec.bound[t] is None or abs(rec.te[t]) > rec.bound[t]]


def ratio(a: float, b: float) -> str:
    if b == 0:
        return "   -" if a == 0 else " inf"
    return f"{a / b:7.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steady-min", type=float, default=10.0, help="minutes of steady state measured per reference")
    ap.add_argument("--settle-s", type=int, default=400, help="seconds after a fallback before the steady state")
    ap.add_argument("--ptp-asymmetry-ns", type=float, default=500.0)
    ap.add_argument("--ptp-noise-ns", type=float, default=50.0)
    ap.add_argument("--ntp-noise-ns", type=float, default=200_000.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the appliance's own log is not the benchmark's output
    started = time.monotonic()
    steady_s = int(args.steady_min * 60)
    base = {"sim.ptp_upstream": "true", "sim.ntp_upstream": "true", "sim.ptp_asymmetry_ns": args.ptp_asymmetry_ns,
            "sim.ptp_noise_ns": args.ptp_noise_ns, "sim.ntp_noise_ns": args.ntp_noise_ns}
    ours = drill(args.seed, base, steady_s, args.settle_s)
    ref = drill(args.seed, {**base, "references.step_limit_ns": NO_BUILDOUT}, steady_s, args.settle_s)

    print(f"Reference switching, simulated (seed {args.seed}, OCXO): GNSS; PTP upstream off by "
          f"{args.ptp_asymmetry_ns:+g} ns (asymmetry), {args.ptp_noise_ns:g} ns rms; NTP upstream "
          f"{args.ntp_noise_ns:g} ns rms, 16 s polls")
    defaults = cfg.load(None, [])
    print(f"appliance: references.step_limit_ns={defaults['references.step_limit_ns']}, slew_ns_per_s="
          f"{defaults['references.slew_ns_per_s']:g} (build-out).  reference (same run): references.step_limit_ns="
          f"{NO_BUILDOUT} (no build-out).  ratio = appliance / reference")
    print("TE = served - true (ns); step = TE across the switch second; max|TE| over the 60 s after the switch")
    ours_rows, ref_rows = switch_rows(ours), switch_rows(ref)
    print(f"\n  {'switch':18} {'at_s':>4} {'TE_before':>10} {'step':>8} {'max|TE|60s':>11} {'build-out':>10} | "
          f"{'ref TE_bef':>10} {'ref step':>9} {'ref max|TE|':>11} | {'ratio max|TE|':>13}  states after (appliance)")
    used = set()
    for row in ours_rows:
        other = next((i for i, r in enumerate(ref_rows) if r["switch"] == row["switch"] and i not in used), None)
        r = ref_rows[other] if other is not None else None
        if other is not None:
            used.add(other)
        if r is not None:
            ref_part = (f"{r['te_before_ns']:>10} {r['step_ns']:>9} {r['max_te_after_ns']:>11} | "
                        f"{ratio(row['max_te_after_ns'], r['max_te_after_ns']):>13}")
        else:
            ref_part = f"{'(no such switch)':>32} | {'':>13}"
        print(f"  {row['switch']:18} {row['after_command_s']:>4} {row['te_before_ns']:>10} {row['step_ns']:>8} "
              f"{row['max_te_after_ns']:>11} {row['buildout_ns']:>10} | {ref_part}  {' > '.join(row['states'])}")
    for i, r in enumerate(ref_rows):
        if i not in used:
            print(f"  {r['switch']:18} (reference run only) {r['after_command_s']:>4} s, step {r['step_ns']}, "
                  f"max|TE| {r['max_te_after_ns']}  {' > '.join(r['states'])}")

    ours_steady, ref_steady = steady_rows(ours), steady_rows(ref)
    print(f"\n  steady state, {args.steady_min:g} min on each (after {args.settle_s} s)")
    print(f"  {'reference':10} {'rms':>9} {'max|TE|':>9} {'mean':>9} {'on it':>6} | {'ref rms':>9} {'ref max':>9} "
          f"{'ref mean':>9} | {'ratio rms':>9} {'ratio max':>9}")
    for name, o in ours_steady.items():
        r = ref_steady[name]
        print(f"  {name:10} {o['rms_ns']:9.1f} {o['max_te_ns']:9d} {o['mean_ns']:9.1f} {o['seconds_on_it']:>5}s | "
              f"{r['rms_ns']:9.1f} {r['max_te_ns']:9d} {r['mean_ns']:9.1f} | {ratio(o['rms_ns'], r['rms_ns']):>9} "
              f"{ratio(o['max_te_ns'], r['max_te_ns']):>9}")
    worst = {"appliance": uncovered(ours), "reference": uncovered(ref)}
    for name, bad in worst.items():
        first = f"; first {bad[0][0]} s: TE {bad[0][1]}, bound {bad[0][2]}" if bad else ""
        print(f"  {name}: {len(bad)} s with |TE| above the advertised error bound{first}")
    print(f"  ({time.monotonic() - started:.0f} s wall)")
    if args.json:
        args.json.write_text(json.dumps({"switches": {"appliance": ours_rows, "reference": ref_rows},
                                         "steady": {"appliance": ours_steady, "reference": ref_steady},
                                         "uncovered": worst}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
