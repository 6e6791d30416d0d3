"""The simulated world on a live loop that runs its callbacks late (a starved event loop): the receiver's bytes are
stamped when they are read, never with an instant the oscillator can no longer be asked about."""

from __future__ import annotations

from appliance import leap
from appliance.sched import SimScheduler
from appliance.sim.world import SimWorld
from appliance.units import NS_PER_S


def test_bytes_delivered_seconds_late_are_stamped_when_read() -> None:
    scheduler = SimScheduler(1_800_000_000 * NS_PER_S)
    got: list[tuple[bytes, int]] = []
    world = SimWorld(scheduler, 1, "ocxo", leap._default_table(), lambda data, raw: got.append((data, raw)),
                     lambda edge: None)
    slot = world.receivers[0]
    due = scheduler.now_ns() + NS_PER_S
    scheduler.run_until(due + 5 * NS_PER_S)
    world.raw_ns()  # the oscillator read now, five seconds past the delivery that is still owed
    world._deliver(slot, b"$GPZDA", due)  # what a loop running five seconds late then calls
    assert got and got[-1][0] == b"$GPZDA" and abs(got[-1][1] - scheduler.now_ns()) < NS_PER_S // 1000
