"""The appliance's side of its child processes (``edge/child.py``), with a small child of its own
(``tests/unit/echo_child.py``): started with what it needs and the status, published to, its calls run and refused,
posted to, restarted after it is killed, and stopped."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from appliance import leap
from appliance.edge import child
from tests.unit.test_status import build

TABLE = leap.LeapTable.load_default()


def run_until(loop: asyncio.AbstractEventLoop, done: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        loop.run_until_complete(asyncio.sleep(0.05))
        value = done()
        if value:
            return value
    raise AssertionError(f"not within {timeout_s} s")


def test_a_child_is_fed_answered_restarted_and_stopped() -> None:
    loop = asyncio.new_event_loop()
    status = [build(version="1.0.0")]
    heard: list[dict[str, Any]] = []
    p = child.ChildProcess(loop, "echo", "tests.unit.echo_child", logging.getLogger("test"), lambda: status[0],
                           lambda: TABLE, {"add": lambda a, b: a + b}, {"greeting": "hello"},
                           extra=lambda s: {"extra": s["version"]}, on_message=heard.append)
    try:
        p.start()
        report = run_until(loop, lambda: p.report)
        assert report["greeting"] == "hello" and report["sum"] == 5 and report["extra"] == "1.0.0"
        assert "no call 'nonesuch'" in report["refused"]
        assert report["state"]["version"] == "1.0.0"
        status[0] = build(version="2.0.0")  # published at the next tick
        run_until(loop, lambda: p.report.get("state", {}).get("version") == "2.0.0")
        p.post({"type": "notice", "text": "one"})
        run_until(loop, lambda: heard)
        assert heard == [{"type": "heard", "text": "one"}] and p.calls_served == 2
        first = p.pid
        assert first is not None and first != os.getpid()
        os.kill(first, signal.SIGKILL)
        run_until(loop, lambda: p.restarts == 1)
        assert "echo process stopped" in p.error and "restarting in 1 s" in p.error and p.pid is None
        run_until(loop, lambda: p.pid is not None and p.report.get("sum") == 5)  # a new one, started afresh
        assert p.pid != first and p.error == "" and p.process_status()["restarts"] == 1
    finally:
        proc = p.proc
        p.stop()
        loop.close()
    assert proc is not None and proc.returncode == 0  # it heard stop and ended by itself


def test_a_child_that_cannot_start_is_retried_with_a_growing_delay() -> None:
    loop = asyncio.new_event_loop()
    p = child.ChildProcess(loop, "missing", "tests.unit.no_such_child", logging.getLogger("test"),
                           lambda: build(), lambda: TABLE, {}, {})
    try:
        p.start()
        run_until(loop, lambda: p.restarts == 2, timeout_s=30)
        assert "missing process stopped" in p.error and "restarting in 2 s" in p.error  # 1 s, then 2 s
    finally:
        p.stop()
        loop.close()
