"""Unit tests for appliance.sched: the simulated scheduler, the asyncio scheduler and drift-free `every()`."""

from __future__ import annotations

import asyncio
import time

from appliance.edge.loop import AsyncioScheduler
from appliance.sched import SimScheduler, every

S = 1_000_000_000
MS = 1_000_000


def recorder(sched, log: list, tag=None):
    return lambda: log.append((sched.now_ns(), tag))


# --- SimScheduler --------------------------------------------------------------------------------------

def test_timers_run_in_time_order_ties_in_insertion_order():
    sched, log = SimScheduler(start_ns=1000), []
    for at, tag in [(5000, "c"), (2000, "a"), (5000, "d"), (3000, "b"), (5000, "e")]:
        sched.call_at(at, recorder(sched, log, tag))
    assert sched.pending() == 5
    assert sched.run_until(10_000) == 5
    assert log == [(2000, "a"), (3000, "b"), (5000, "c"), (5000, "d"), (5000, "e")]
    assert sched.now_ns() == 10_000 and sched.pending() == 0


def test_run_until_stops_at_end_and_leaves_later_timers():
    sched, log = SimScheduler(), []
    sched.call_later(3 * S, recorder(sched, log))
    assert sched.run_until(2 * S) == 0 and sched.now_ns() == 2 * S and log == []
    assert sched.run_for(S) == 1 and log == [(3 * S, None)]


def test_run_until_advances_time_with_no_timers():
    sched = SimScheduler(start_ns=7)
    assert sched.run_until(5 * S) == 0
    assert sched.now_ns() == 5 * S
    assert sched.run_until(S) == 0 and sched.now_ns() == 5 * S  # time never goes backwards


def test_cancel():
    sched, log = SimScheduler(), []
    keep = sched.call_at(2, recorder(sched, log, "keep"))
    drop = sched.call_at(1, recorder(sched, log, "drop"))
    drop.cancel()
    assert drop.cancelled and not keep.cancelled and sched.pending() == 1
    assert sched.run_until(10) == 1 and log == [(2, "keep")]


def test_cancel_from_inside_an_earlier_callback():
    sched, log = SimScheduler(), []
    later = sched.call_at(20, recorder(sched, log, "later"))
    sched.call_at(10, later.cancel)
    sched.run_until(30)
    assert log == []


def test_timer_in_the_past_runs_at_now():
    sched, log = SimScheduler(start_ns=100 * S), []
    handle = sched.call_at(5 * S, recorder(sched, log))
    sched.call_later(-S, recorder(sched, log, "negative"))
    assert handle.at_ns == 100 * S
    sched.run_until(100 * S)
    assert log == [(100 * S, None), (100 * S, "negative")]


def test_callback_scheduling_now_runs_in_the_same_pass():
    sched, log = SimScheduler(), []
    sched.call_at(S, lambda: sched.call_later(0, recorder(sched, log, "chained")))
    assert sched.run_until(S) == 2 and log == [(S, "chained")]


# --- every() ---------------------------------------------------------------------------------------------

def test_every_fires_on_the_grid_without_drift_when_callbacks_schedule_timers():
    sched = SimScheduler(start_ns=300 * MS)
    fired, noise = [], []

    def tick():
        fired.append(sched.now_ns())
        sched.call_later(10 * MS, recorder(sched, noise))  # other work scheduled from the callback
        sched.call_later(1700 * MS, recorder(sched, noise))

    every(sched, S, tick, phase_ns=250 * MS)
    sched.run_until(100 * S)
    assert fired == [k * S + 250 * MS for k in range(1, 100)]
    assert len(noise) == 99 + 98


def test_every_first_at_then_grid():
    sched, fired = SimScheduler(), []
    every(sched, 10 * S, lambda: fired.append(sched.now_ns()), first_at_ns=3 * S)
    sched.run_until(35 * S)
    assert fired == [3 * S, 10 * S, 20 * S, 30 * S]


def test_every_cancel_stops_the_series():
    sched, fired = SimScheduler(), []
    series = every(sched, S, lambda: fired.append(sched.now_ns()))
    sched.run_until(3 * S)
    series.cancel()
    sched.run_until(10 * S)
    assert fired == [S, 2 * S, 3 * S] and sched.pending() == 0


def test_every_cancel_from_its_own_callback():
    sched, fired = SimScheduler(), []

    def tick():
        fired.append(sched.now_ns())
        if len(fired) == 2:
            series.cancel()

    series = every(sched, S, tick)
    sched.run_until(10 * S)
    assert fired == [S, 2 * S]


class EarlyClockScheduler(SimScheduler):
    """A scheduler whose clock reads a microsecond early when a timer fires (clock resolution, slewed clock)."""

    def now_ns(self) -> int:
        return self._now_ns - 1000


def test_every_fires_each_slot_once_when_the_clock_reads_slightly_early():
    sched, fired = EarlyClockScheduler(start_ns=S // 2), []

    def tick():
        fired.append(sched._now_ns)
        if len(fired) >= 20:  # guard: a repeating slot would otherwise spin forever
            series.cancel()

    series = every(sched, S, tick)
    sched.run_until(5 * S)
    assert fired == [S, 2 * S, 3 * S, 4 * S, 5 * S]


def test_simulated_day_of_one_second_timers():
    # Its pace is bench/sim_speed.py's to print; here: a whole day of timers fires, each at its second.
    sched, fired = SimScheduler(), []

    every(sched, S, lambda: fired.append(sched.now_ns()))
    sched.run_until(86_400 * S)
    assert len(fired) == 86_400 and fired[0] == S and fired[-1] == 86_400 * S
    assert all(b - a == S for a, b in zip(fired, fired[1:]))


# --- AsyncioScheduler ------------------------------------------------------------------------------------

def test_asyncio_scheduler_fires_roughly_on_time_and_cancel_prevents_it():
    async def scenario():
        sched = AsyncioScheduler(asyncio.get_running_loop())
        fired: dict[str, int] = {}
        start = time.monotonic_ns()
        sched.call_later(30 * MS, lambda: fired.setdefault("on-time", time.monotonic_ns() - start))
        handle = sched.call_later(10 * MS, lambda: fired.setdefault("cancelled", 0))
        handle.cancel()
        await asyncio.sleep(0.08)
        return fired, time.monotonic_ns() - start

    fired, ran_ns = asyncio.run(scenario())
    assert set(fired) == {"on-time"}
    # Not early; late only as the loop was (before the 80 ms sleep ended, however long a busy host made that).
    assert 25 * MS <= fired["on-time"] <= ran_ns


def test_asyncio_scheduler_uses_the_given_clock():
    async def scenario():
        offset = 37 * S
        sched = AsyncioScheduler(asyncio.get_running_loop(), lambda: time.time_ns() + offset)
        before_ns = time.time_ns()
        now_ns = sched.now_ns()
        assert before_ns + offset <= now_ns <= time.time_ns() + offset  # the given clock, read between ours
        done = asyncio.Event()
        handle = sched.call_at(sched.now_ns() + 20 * MS, done.set)
        await asyncio.wait_for(done.wait(), 2)
        return handle

    assert not asyncio.run(scenario()).cancelled


def test_every_on_asyncio_scheduler_hits_distinct_grid_slots():
    async def scenario():
        sched = AsyncioScheduler(asyncio.get_running_loop())
        slots = []
        series = every(sched, 20 * MS, lambda: slots.append(sched.now_ns()))
        await asyncio.sleep(0.11)
        series.cancel()
        count = len(slots)
        await asyncio.sleep(0.05)
        return slots, count

    slots, count = asyncio.run(scenario())
    assert len(slots) == count >= 3
    indices = [t // (20 * MS) for t in slots]
    assert indices == sorted(set(indices))
