"""PTP Sync transit: how long after its own transmit timestamp a grandmaster's Sync is received next door, the
candidate (the appliance) against ptp4l, same veth pair, same run.

    .venv/bin/python bench/ptp_sync_transit.py [--rate 16] [--duration 60] [--rounds 2] [--candidate-cmd CMD]
                                              [--ftrace] [--json FILE]

With software timestamps a grandmaster's error as its slaves see it starts here: the Sync's transmit timestamp is
taken by the sending driver, the slave's receive timestamp when the packet is handed to the peer's stack, and any
work the kernel does for the sender in between (waking readers of the sending socket, for one) lands in every
offset.  Two network namespaces joined by a veth pair (harness/ptp_harness.py NetnsPair); each grandmaster
runs alone in namespace A (default profile, E2E, UDPv4, --rate Sync/s; ptp4l with free_running 1 and the
appliance on the simulated world, both under setpriv --bounding-set -sys_time); in namespace B an observer joins
224.0.1.129 on ports 319 and 320 with kernel software receive timestamps and pairs each Sync's receive time with its
Follow_Up's preciseOriginTimestamp (+ correction).  Both grandmasters' clocks are this host's clock to within a
nanosecond (ptp4l stamps CLOCK_REALTIME; the appliance's simulated clock serves the host clock, the truth of its
simulation), so the difference is the transit (modulo the whole seconds of the TAI-UTC offset).  Printed per
grandmaster: Syncs paired, median, 10th and 90th percentile, mean and standard deviation of the transit, how many
exceeded 10 us (a scheduling stall) and the largest; and the ratios candidate / ptp4l of the median and the mean
(lower is better).  Rounds alternate who goes first; the medians over rounds are printed.  --candidate-cmd as in
ptp_offset.py (placeholders {python} {iface} {transport} {log_sync} {state_dir} {domain} {profile}); to measure
another checkout of the appliance, e.g. ``--candidate-cmd 'env PYTHONPATH=/path/to/checkout {python} -m appliance
run ...'``.  Needs root, ptp4l, ip.

--ftrace looks inside the kernel while each grandmaster is observed (tracefs events, no kprobes needed): for every
44-byte PTP frame the grandmaster sends (Sync and Follow_Up) the time from the veth driver's start of transmission,
where the software transmit timestamp is taken, to the peer's netif_rx, where the observer's receive timestamp is
taken.  Both ends of the transit are inside that one kernel path on the sending CPU, so a long one is a stall of
that CPU: printed per grandmaster are the frames, how many took over 10 us, the largest, and how many of those long
ones had no guest event at all on that CPU (no interrupt, IPI, softirq or context switch): time the guest never saw,
i.e. taken by the hypervisor.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ptp_offset import DEFAULT_CANDIDATE, Candidate  # noqa: E402
from harness.kernel_trace import KernelTrace, kernel_transits, merge_kernel  # noqa: E402
from harness.procs import wait_for  # noqa: E402
from harness.ptp_appliance import seed_learned_state  # noqa: E402
from harness.ptp_harness import NetnsPair, Ptp4l  # noqa: E402

OBSERVER = r"""
import select, socket, struct, sys, time
def sock(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.setsockopt(socket.SOL_SOCKET, 37, (1 << 3) | (1 << 4))  # SO_TIMESTAMPING: RX_SOFTWARE | SOFTWARE
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                 struct.pack("4s4s", socket.inet_aton("224.0.1.129"), socket.inet_aton(sys.argv[2])))
    return s
event, general = sock(319), sock(320)
rx, origin = {}, {}
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    ready, _, _ = select.select([event, general], [], [], 0.5)
    for s in ready:
        data, anc, _, _ = s.recvmsg(256, 256)
        if len(data) < 44:
            continue
        kind, seq = data[0] & 0xF, struct.unpack_from("!H", data, 30)[0]
        if kind == 0:
            for level, ctype, value in anc:
                if ctype == 37:
                    sec, ns = struct.unpack_from("qq", value, 0)
                    rx[seq] = sec * 10**9 + ns
        elif kind == 8:
            hi, lo, ns = struct.unpack_from("!HII", data, 34)
            origin[seq] = ((hi << 32) | lo) * 10**9 + ns + struct.unpack_from("!q", data, 8)[0] // 65536
for seq, t in origin.items():
    if seq in rx:
        print((rx[seq] - t + 500_000_000) % 1_000_000_000 - 500_000_000)
"""


def summarize(transits: list[int]) -> dict[str, Any]:
    if not transits:
        return {"ok": False, "count": 0}
    d = sorted(transits)
    n = len(d)
    return {"ok": True, "count": n, "median_ns": d[n // 2], "p10_ns": d[n // 10], "p90_ns": d[9 * n // 10],
            "mean_ns": statistics.mean(d), "stddev_ns": statistics.pstdev(d),
            "stalls_over_10us": sum(1 for x in d if x > 10_000), "max_ns": d[-1]}


def observe(net: NetnsPair, seconds: float) -> list[int]:
    proc = net.run(net.b, [sys.executable, "-c", OBSERVER, str(seconds), net.ip4_b], stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=seconds + 30)
    if proc.returncode != 0:
        raise AssertionError(f"observer failed: {err[-2000:]}")
    return [int(line) for line in out.split()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=16.0, help="Sync/s (a power of two)")
    ap.add_argument("--duration", type=float, default=60.0, help="observed seconds per grandmaster and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ready-timeout", type=float, default=180.0)
    ap.add_argument("--candidate-cmd", default=DEFAULT_CANDIDATE)
    ap.add_argument("--ftrace", action="store_true", help="also time each frame's transit inside the kernel")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    tracer = KernelTrace() if args.ftrace else None
    log_sync = round(-math.log2(args.rate))
    gm_extra = {"logSyncInterval": str(log_sync), "domainNumber": "0"}
    rounds: list[dict[str, dict[str, Any]]] = []
    with NetnsPair(prefix="pst") as net, tempfile.TemporaryDirectory(prefix="ptp-transit-") as tmp:
        workdir = Path(tmp)
        for r in range(args.rounds):
            this: dict[str, dict[str, Any]] = {}
            order = ["reference", "candidate"] if r % 2 == 0 else ["candidate", "reference"]
            for name in order:
                print(f"  ... round {r + 1}: {name}", file=sys.stderr, flush=True)
                gm: Any = None
                try:
                    if name == "reference":
                        gm = Ptp4l(net.a, role="master", transport="udp4", delay="E2E", extra=gm_extra,
                                   label="reference")
                        time.sleep(5)  # through LISTENING to MASTER
                    else:
                        run_dir = workdir / f"candidate-{r}"
                        run_dir.mkdir()
                        seed_learned_state(run_dir / "state")
                        fields = {"python": sys.executable, "iface": net.if_a, "transport": "udp4",
                                  "log_sync": log_sync, "state_dir": run_dir / "state", "domain": 0,
                                  "profile": "default-e2e"}
                        gm = Candidate(net, args.candidate_cmd, fields, run_dir / "candidate.log")
                        wait_for(run_dir / "state", lambda s: s["clock"]["state"] == "LOCKED", args.ready_timeout)
                        time.sleep(5)
                    if tracer is not None:
                        tracer.start()
                    this[name] = summarize(observe(net, args.duration))
                    if tracer is not None:
                        this[name]["kernel"] = kernel_transits(tracer.stop(), "ptp4l" if name == "reference"
                                                               else Path(sys.executable).name[:15])
                except AssertionError as exc:
                    this[name] = {"ok": False, "error": str(exc)[-2000:]}
                finally:
                    if gm is not None:
                        gm.stop()
            rounds.append(this)
    keys = ("count", "median_ns", "p10_ns", "p90_ns", "mean_ns", "stddev_ns", "stalls_over_10us", "max_ns")
    med = {name: {k: statistics.median([r[name][k] for r in rounds if r[name].get("ok")] or [math.nan]) for k in keys}
           for name in ("reference", "candidate")}
    print(f"PTP Sync transit: observer's kernel receive time minus the Follow_Up's origin time, default profile, "
          f"UDPv4, {args.rate:g} Sync/s, {args.duration:g} s per grandmaster, median of {args.rounds} round(s)")
    print(f"  {'grandmaster':11} {'Syncs':>6} {'median ns':>10} {'p10 ns':>7} {'p90 ns':>7} {'mean ns':>8} "
          f"{'sd ns':>7} {'>10 us':>6} {'max ns':>8}")
    for name, label in (("reference", "ptp4l"), ("candidate", "candidate")):
        m = med[name]
        print(f"  {label:11} {m['count']:>6.0f} {m['median_ns']:>10.0f} {m['p10_ns']:>7.0f} {m['p90_ns']:>7.0f} "
              f"{m['mean_ns']:>8.0f} {m['stddev_ns']:>7.0f} {m['stalls_over_10us']:>6.0f} {m['max_ns']:>8.0f}")
    if tracer is not None:
        print("  in the kernel (veth start of transmit -> peer netif_rx, 44-byte frames: Sync and Follow_Up), "
              "summed over rounds:")
        print(f"  {'grandmaster':11} {'frames':>7} {'median us':>9} {'>10 us':>6} {'of which silent':>15} "
              f"{'max us':>7}")
        for name, label in (("reference", "ptp4l"), ("candidate", "candidate")):
            ks = [r[name]["kernel"] for r in rounds if r[name].get("ok") and "kernel" in r[name]]
            if not ks:
                continue
            k = merge_kernel(ks)
            print(f"  {label:11} {k['frames']:>7} {k['median_us']:>9.1f} {k['over_10us']:>6} "
                  f"{k['silent_over_10us']:>15} {k['max_us']:>7.0f}")
        print("  (silent: no interrupt, IPI, softirq or context switch on the sending CPU inside the stall)")
    ref, cand = med["reference"], med["candidate"]
    print(f"  ratio candidate/ptp4l: median {cand['median_ns'] / ref['median_ns']:.2f}, "
          f"mean {cand['mean_ns'] / ref['mean_ns']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rounds": rounds,
                                         "median": med}, indent=1))
    return 0 if all(r[n].get("ok") for r in rounds for n in r) else 1


if __name__ == "__main__":
    sys.exit(main())
