"""Captures recorded from the appliance's own simulated receiver, one per message set: ``sim-<set>.log``.

Each is what the simulated receiver writes on its serial line for ``SECONDS`` seconds from ``START_UTC``, seeded, with
a cold start (no fix, and no time, for the first ``TTFF_S`` seconds), behind ``#`` comment lines that say so.  The
bytes depend only on the seed, the message set and the leap table, so regenerating gives the same files:

    python -m tests.replay.sim_captures            # rewrite every tests/data/gnss/sim-*.log
"""

from __future__ import annotations

import sys
from pathlib import Path

from appliance import leap
from appliance.sim.receiver import MESSAGE_SETS, SimReceiver
from appliance.units import NS_PER_S

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "gnss"
SEED = 1
SECONDS = 60
TTFF_S = 5
START_UTC = (2025, 7, 31, 19, 33, 0)


def start_tai_ns(table: leap.LeapTable) -> int:
    return leap.utc_fields_to_tai(*START_UTC, 0, table)


def path_of(message_set: str) -> Path:
    return DATA_DIR / f"sim-{message_set}.log"


def header(message_set: str) -> bytes:
    y, mo, d, h, mi, s = START_UTC
    names = ", ".join(sorted(MESSAGE_SETS[message_set]))
    lines = [f"# Simulated receiver (appliance/sim/receiver.py), message set {message_set!r}: {names}",
             f"# Seed {SEED}, {SECONDS} s from {y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}Z, cold start: first fix "
             f"after {TTFF_S} s",
             "# Recorded by tests/replay/sim_captures.py (python -m tests.replay.sim_captures regenerates it)"]
    return "".join(line + "\n" for line in lines).encode()


def record(message_set: str, table: leap.LeapTable | None = None) -> bytes:
    """The capture's bytes, header included."""
    lt = table or leap.LeapTable.load_default()
    rx = SimReceiver(SEED, lt, messages=MESSAGE_SETS[message_set])
    start = start_tai_ns(lt)
    rx.reset(start, ttff_s=TTFF_S)
    return header(message_set) + b"".join(rx.burst(start + i * NS_PER_S) for i in range(SECONDS))


def main() -> int:
    for message_set in MESSAGE_SETS:
        path_of(message_set).write_bytes(record(message_set))
        print(path_of(message_set))
    return 0


if __name__ == "__main__":
    sys.exit(main())
