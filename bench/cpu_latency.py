"""What holding the kernel's CPU wake-up latency request (cpu_latency_us, appliance/edge/cpu_latency.py) buys on
this host: a thread's timer wake-up lateness and the cost of waking a thread on the other, idle CPU, measured by
bench/wakeup.c in alternating rounds without and with the hold (the reference is the host's own idle policy,
measured in the same run).  Per round: p50, p99 and max; printed: each statistic's median over the rounds and the
held/off ratio of the medians, with how many rounds fell on the same side (decided when all did).

    sudo .venv/bin/python bench/cpu_latency.py [--rounds 5] [--samples 2000]

Needs root (the PM QoS device) and gcc.  Another process holding the request meanwhile makes "off" rounds held too:
the bench says what the kernel's target was in each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance.edge.cpu_latency import DEVICE, CpuLatencyHold  # noqa: E402

KINDS = (("timer", 500, "timer wake-up lateness"), ("cross", 300, "waking a thread on the idle CPU"))


def target_us() -> int:
    """The kernel's current CPU latency target (the least of every request held; 2,000,000,000: none)."""
    with open(DEVICE, "rb") as f:
        return struct.unpack("=i", f.read(4))[0]


def percentile(xs: list[int], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] / 1e3


def one_round(exe: Path, kind: str, period_us: int, samples: int) -> dict[str, float]:
    out = subprocess.run([str(exe), kind, str(samples), str(period_us)], capture_output=True, text=True, check=True)
    xs = [int(x) for x in out.stdout.split()]
    return {"p50": percentile(xs, 0.5), "p99": percentile(xs, 0.99), "max": max(xs) / 1e3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=2000)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("cpu_latency: needs root (the PM QoS device)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="cpu_latency-") as tmp:
        exe = Path(tmp) / "wakeup"
        subprocess.run(["gcc", "-O2", "-pthread", "-o", str(exe), str(ROOT / "bench" / "wakeup.c")], check=True)
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        for r in range(args.rounds):
            for held in (False, True):
                hold = CpuLatencyHold(0) if held else None
                if hold is not None:
                    hold.start()
                    if not hold.held:
                        print(f"cpu_latency: {hold.error}", file=sys.stderr)
                        return 2
                try:
                    target = target_us()
                    for kind, period_us, _ in KINDS:
                        results.setdefault((kind, "held" if held else "off"), []).append(
                            one_round(exe, kind, period_us, args.samples))
                finally:
                    if hold is not None:
                        hold.stop()
                print(f"round {r + 1} {'held' if held else 'off '}: kernel latency target {target} us")
    print(f"CPU wake-up latency held at 0 us against the host's idle policy, {args.rounds} rounds of {args.samples}")
    print(f"  {'':34} {'stat':>4} {'off us':>9} {'held us':>9} {'held/off':>9} {'rounds held < off':>18}")
    for kind, _, label in KINDS:
        off, held = results[(kind, "off")], results[(kind, "held")]
        for stat in ("p50", "p99", "max"):
            a = statistics.median(x[stat] for x in off)
            b = statistics.median(x[stat] for x in held)
            below = sum(1 for x, y in zip(off, held) if y[stat] < x[stat])
            print(f"  {label:34} {stat:>4} {a:9.1f} {b:9.1f} {b / a if a else float('nan'):9.2f} "
                  f"{below:>11}/{len(off)}{' decided' if below in (0, len(off)) else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
