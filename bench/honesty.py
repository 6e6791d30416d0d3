"""The promise under slow spoofing: is |served - true| ever above the advertised bound?  A sweep over pushes.

    python bench/honesty.py [--quick] [--jobs N] [--json]

Each trial runs the whole appliance in simulated time (``appliance/sim/honesty.py``): lock and learn for a warm-up,
push the receiver's time (constant rate, or a ramp from 0 up to the rate) for 400 s, stop, watch 600 s more, and
compare every second's served error with the bound the clock advertised then.  The grid: push rates 0.1, 0.3, 1, 2
and 5 ns/s, constant and ramped, warm-ups of 100, 160 and 600 s (a young oscillator model is the hard case), seeds
1 and 2, an OCXO and a rubidium: 120 pushes (``--quick``: 16 of them).

Printed: per trial the seconds above the bound, the worst margin (|served - true| - bound; negative: within), the
state then, and when the reference was rejected; then the worst trials and the totals.  Reference (the same run):
the same seeds, oscillators and warm-ups with no push at all, whose worst margin is what the clock's own noise
leaves; the attack's worst margin is printed beside it.  Exit status 1 when any second was above the bound.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance.sim.honesty import Honesty, Push, grid, push_trial  # noqa: E402


def _quiet_trial(push: Push) -> Honesty:
    import logging

    logging.disable(logging.CRITICAL)  # the simulated appliance logs every alarm; the table says what matters
    return push_trial(push)


def _row(h: Honesty) -> str:
    detected = "-" if h.detected_s is None else f"+{h.detected_s} s"
    return (f"{h.push.label():52s} {h.over_s:5d} {h.seconds:6d} {h.worst_margin_ns:+8.0f} {h.worst_te_ns:+7d} "
            f"{h.worst_bound_ns:6d}  {h.worst_state:16s} {detected:>8s}  {'>'.join(h.states)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 pushes: rates 0.3 and 2 ns/s, both shapes, "
                                                             "warm-ups 100 and 600 s, the OCXO, seeds 1 and 2")
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--json", action="store_true", help="print the trials as JSON instead of the table")
    args = parser.parse_args()
    pushes = (grid((0.3, 2.0), (1, 2), (100, 600), ("ocxo",)) if args.quick else grid())
    benign = sorted({replace(p, rate_ns_per_s=0.0, ramp=False) for p in pushes}, key=lambda p: p.label())
    started = time.monotonic()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        attacked = list(pool.map(_quiet_trial, pushes))
        quiet = list(pool.map(_quiet_trial, benign))
    wall_s = time.monotonic() - started
    if args.json:
        print(json.dumps({"attacked": [asdict(h) for h in attacked], "benign": [asdict(h) for h in quiet],
                          "wall_s": wall_s}, indent=1, default=str))
        return 1 if any(not h.kept for h in attacked + quiet) else 0
    print(f"{'push':52s} {'over':>5s} {'of s':>6s} {'margin':>8s} {'te':>7s} {'bound':>6s}  {'state then':16s} "
          f"{'rejected':>8s}  states")
    for h in attacked:
        print(_row(h))
    print("\nno push (reference: the same seeds, oscillators and warm-ups)")
    for h in quiet:
        print(_row(h))
    worst = max(attacked, key=lambda h: h.worst_margin_ns)
    worst_quiet = max(quiet, key=lambda h: h.worst_margin_ns)
    over = sum(h.over_s for h in attacked)
    print(f"\n{len(attacked)} pushes, {sum(h.seconds for h in attacked)} seconds with a bound advertised, "
          f"{over} above it, in {sum(1 for h in attacked if not h.kept)} pushes")
    print(f"worst margin under attack {worst.worst_margin_ns:+.0f} ns ({worst.push.label()}, "
          f"{worst.worst_state} at +{worst.worst_at_s} s); without attack {worst_quiet.worst_margin_ns:+.0f} ns")
    print(f"rejected: {sum(1 for h in attacked if h.detected_s is not None)} of {len(attacked)} pushes; "
          f"wall {wall_s:.0f} s on {args.jobs} processes")
    return 1 if over or any(not h.kept for h in quiet) else 0


if __name__ == "__main__":
    sys.exit(main())
