"""The PTP runner's timer: a timerfd at an absolute monotonic instant, never early, moved and closed."""

from __future__ import annotations

import asyncio
import time

from appliance.edge.ptp.runner import DeadlineTimer

MS = 1_000_000


def test_fires_once_never_before_its_instant_and_follows_a_move() -> None:
    async def run() -> list[tuple[int, int]]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[int, int]] = []
        done = asyncio.Event()
        due: dict[str, int] = {}

        def callback() -> None:
            fired.append((due["ns"], time.monotonic_ns()))
            done.set()

        timer = DeadlineTimer(loop, callback)
        try:
            due["ns"] = time.monotonic_ns() + 200 * MS
            timer.at(due["ns"])
            due["ns"] = time.monotonic_ns() + 20 * MS  # moved earlier: the earlier instant counts, once
            timer.at(due["ns"])
            await asyncio.wait_for(done.wait(), 5)
            await asyncio.sleep(0.3)
        finally:
            timer.close()
        assert timer.fd == -1
        return fired

    fired = asyncio.run(run())
    assert len(fired) == 1
    due_ns, at_ns = fired[0]
    assert at_ns >= due_ns


def test_an_instant_already_past_fires_at_once() -> None:
    async def run() -> int:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        timer = DeadlineTimer(loop, done.set)
        try:
            timer.at(time.monotonic_ns() - 5 * MS)
            await asyncio.wait_for(done.wait(), 5)
        finally:
            timer.close()
        return 1

    assert asyncio.run(run()) == 1
