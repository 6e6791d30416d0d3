"""Notifications that reach the SNMP agent's process before its agent is up (its start can take tens of seconds at
idle priority on a busy host) are sent once it is, in order: the first of them is the coldStart or warmStart."""

from __future__ import annotations

import threading
from typing import Any

from appliance.snmp.process import EARLY_NOTIFICATIONS, AgentSide


class FakeAgent:
    def __init__(self) -> None:
        self.sent: list[tuple[tuple[int, ...], int]] = []

    def notify(self, oid: tuple[int, ...], binds: list[Any], uptime_ticks: int) -> None:
        self.sent.append((oid, uptime_ticks))


class FakeLoop:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, tuple[Any, ...]]] = []

    def call_soon(self, fn: Any, *args: Any) -> None:
        self.calls.append((fn, args))

    call_soon_threadsafe = call_soon

    def run(self) -> None:
        for fn, args in self.calls:
            fn(*args)
        self.calls.clear()


def side() -> AgentSide:
    s = AgentSide.__new__(AgentSide)  # the link and the MIB are beside the point here
    s.agent, s.loop, s.error = None, None, ""
    s._early, s._early_lock = [], threading.Lock()
    return s


def message(oid: int, ticks: int) -> dict[str, Any]:
    return {"oid": [1, 3, 6, 1, 6, 3, 1, 1, 5, oid], "binds": [], "uptime_ticks": ticks}


def test_notifications_before_the_agent_is_up_are_sent_first_and_in_order() -> None:
    s, agent, loop = side(), FakeAgent(), FakeLoop()
    s.notify(message(2, 3))  # warmStart
    s.notify(message(9, 68))
    s.agent = agent  # the agent made, its loop not running yet: still kept
    s.notify(message(10, 71))
    assert agent.sent == [] and len(s._early) == 3
    s._up(loop)
    s.notify(message(11, 488))
    loop.run()
    assert [t for _, t in agent.sent] == [3, 68, 71, 488]


def test_an_agent_that_cannot_start_keeps_nothing_and_the_queue_is_bounded() -> None:
    s = side()
    for i in range(EARLY_NOTIFICATIONS + 10):
        s.notify(message(1, i))
    assert len(s._early) == EARLY_NOTIFICATIONS
    s.error = "cannot serve on 127.0.0.1 port 161: in use"
    s._early.clear()
    s.notify(message(1, 1))
    assert s._early == []
