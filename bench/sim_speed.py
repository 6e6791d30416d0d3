"""Simulation speed: wall time of a simulated day, against real time and the 10 s target.

    python bench/sim_speed.py [--oscillator ocxo]

Measures, in the same run: (1) the 24 h holdover scenario's workload at the phase detector (lock 24 h of simulated
time, the clock engine, Kalman predictor, oscillator and receiver models), the path every long scenario and benchmark
uses; (2) the whole appliance on the simulated receiver's NMEA/UBX bytes (framing, pynmea2 decoding, epochs, pairing,
clock) for one simulated hour, extrapolated to a day.  Reference: real time, 86,400 s per day.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appliance import config as cfg, leap  # noqa: E402
from appliance.runtime.platforms import simulated  # noqa: E402
from appliance.sched import SimScheduler  # noqa: E402
from appliance.sim.clocksim import ClockSim  # noqa: E402

DAY_S = 86_400
TARGET_S = 10.0


def clock_day(oscillator: str) -> float:
    t0 = time.perf_counter()
    sim = ClockSim(oscillator, seed=1)
    sim.run(DAY_S // 2)
    sim.run(DAY_S // 2, reference=False)
    return time.perf_counter() - t0


def appliance_hour(oscillator: str) -> float:
    table = leap.LeapTable.load_default()
    scheduler = SimScheduler(leap.utc_fields_to_tai(2026, 6, 1, 12, 0, 0, 0, table))
    app, world = simulated(cfg.load(None, [f"clock.oscillator={oscillator}"]), scheduler, table)
    world.start()
    t0 = time.perf_counter()
    scheduler.run_for(3600 * 1_000_000_000)
    elapsed = time.perf_counter() - t0
    assert app.status().clock.state == "LOCKED"
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oscillator", default="ocxo")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the appliance's own log is not the benchmark's output
    day_s = clock_day(args.oscillator)
    full_day_s = appliance_hour(args.oscillator) * 24
    print(f"24 h scenario at the phase detector ({args.oscillator}): {day_s:.2f} s wall, "
          f"{DAY_S / day_s:,.0f}x real time, {day_s / TARGET_S:.2f} of the {TARGET_S:.0f} s target -> "
          f"{'PASS' if day_s <= TARGET_S else 'FAIL'}")
    print(f"whole appliance on the receiver's bytes: {full_day_s:.1f} s wall per simulated day "
          f"(1 h measured), {DAY_S / full_day_s:,.0f}x real time")
    return 0 if day_s <= TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
