"""1PPS and IRIG-B DC level shift on a GPIO line, through the GPIO character device (the ``gpiod`` binding, v2).

Edge module (a thread, the host clock, the GPIO device).  The planner hands over each second's edges as counter
instants; ``to_host_ns`` turns them into host CLOCK_REALTIME instants, and a thread sleeps until each one and sets
the line.  A userspace line is as punctual as the scheduler lets it be (tens of microseconds on a quiet host), so
``late_ns`` keeps the worst lateness seen and ``status`` shows it: where that matters, 1PPS belongs on a PHC's
periodic output (``perout.py``).  A chip or line that cannot be requested (absent, busy, no binding installed) is
kept in ``error`` and retried every 16 s; edges planned meanwhile are dropped and counted.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from appliance.outputs.pulses import PlannedEdge

log = logging.getLogger("appliance.gpio")
RETRY_NS = 16_000_000_000
SPIN_NS = 200_000  # the last stretch before an edge is spun, not slept


def gpiod_line(chip: str, offset: int, consumer: str) -> tuple[Callable[[int], None], Callable[[], None]]:
    """(set level, release) for one output line, through the gpiod v2 binding."""
    try:
        import gpiod
        from gpiod.line import Direction, Value
    except ImportError:
        raise OSError("the gpiod Python binding (libgpiod 2) is not installed") from None
    request = gpiod.request_lines(chip, consumer=consumer, config={
        offset: gpiod.LineSettings(direction=Direction.OUTPUT, output_value=Value.INACTIVE)})
    return (lambda level: request.set_value(offset, Value.ACTIVE if level else Value.INACTIVE)), request.release


class GpioSink:
    def __init__(self, chip: str, offset: int, to_host_ns: Callable[[int], int], consumer: str = "appliance",
                 line: Callable[[str, int, str], tuple[Callable[[int], None], Callable[[], None]]] = gpiod_line,
                 now_ns: Callable[[], int] = time.time_ns):
        self.chip, self.offset, self.consumer = chip, offset, consumer
        self._to_host, self._line_factory, self._now = to_host_ns, line, now_ns
        self._set: Callable[[int], None] | None = None
        self._release: Callable[[], None] | None = None
        self._heap: list[tuple[int, int, int]] = []  # (host ns, sequence, level)
        self._seq = 0
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._next_try_ns = 0
        self.error = ""
        self.edges = 0
        self.dropped = 0
        self.late_ns = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"gpio-{self.offset}", daemon=True)
        self._thread.start()

    def emit(self, edges: list[PlannedEdge]) -> None:
        if self._set is None and not self._open():
            self.dropped += len(edges)
            return
        with self._cond:
            for e in edges:
                self._seq += 1
                heapq.heappush(self._heap, (self._to_host(e.raw_ns), self._seq, e.level))
            self._cond.notify()

    def _open(self) -> bool:
        now = self._now()
        if now < self._next_try_ns:
            return False
        try:
            self._set, self._release = self._line_factory(self.chip, self.offset, self.consumer)
        except (OSError, ValueError) as exc:
            self._next_try_ns = now + RETRY_NS
            message = f"cannot drive {self.chip} line {self.offset}: {exc}"
            if message != self.error:
                log.error("GPIO output: %s (retrying every 16 s)", message)
            self.error = message
            return False
        self.error = ""
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop and not self._heap:
                    self._cond.wait()
                if self._stop:
                    return
                at, _, level = self._heap[0]
                wait_ns = at - self._now()
                if wait_ns > SPIN_NS:
                    self._cond.wait(min((wait_ns - SPIN_NS) / 1e9, 0.5))
                    continue
                heapq.heappop(self._heap)
            while self._now() < at:
                pass
            setter = self._set
            if setter is None:
                continue
            try:
                setter(level)
                self.edges += 1
                self.late_ns = max(self.late_ns, self._now() - at)
            except OSError as exc:
                self.error = f"setting {self.chip} line {self.offset}: {exc}"
                log.error("GPIO output: %s", self.error)

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._release is not None:
            self._release()
            self._release = self._set = None

    def status(self) -> dict[str, Any]:
        return {"chip": self.chip, "line": self.offset, "error": self.error, "edges": self.edges,
                "dropped": self.dropped, "worst_late_us": round(self.late_ns / 1000, 1)}
