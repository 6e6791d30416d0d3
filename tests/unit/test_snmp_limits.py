"""The SNMP agent's response bound: GETBULK with many varbinds is answered (cut to fit, RFC 3416 4.2.3), a GET too
large to answer gets tooBig (RFC 3416 4.2.1), max-repetitions cannot amplify past 8 x the request, and none of it
writes a traceback.  The agent runs in a thread on its own event loop, as in the appliance, on a loopback port; the
manager is a bare SNMPv2c client (harness/snmp_wire.py)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pyasn1.codec.ber import encoder
from pyasn1.type import univ

from appliance.snmp import limits
from appliance.snmp.agent import AccessGate, Agent, ResponseGuard
from appliance.snmp.view import MibView
from harness.procs import free_udp_port, wait_udp_bound
from harness.snmp_wire import Answer, request

SYS_DESCR = (1, 3, 6, 1, 2, 1, 1, 1, 0)
SYSTEM = (1, 3, 6, 1, 2, 1, 1)
ROWS = (1, 3, 6, 1, 4, 1, 99999, 9)
ROW_COUNT = 400


def small_view() -> MibView:
    """The system group's description and uptime, and 400 objects of mixed kinds under an enterprise subtree."""
    items: list[Any] = [(SYS_DESCR, ("OctetString", "GNSS grandmaster time server appliance 0.1.0 (simulated)")),
                        ((1, 3, 6, 1, 2, 1, 1, 3, 0), ("TimeTicks", 4242))]
    for i in range(1, ROW_COUNT + 1):
        items.append((ROWS + (i, 0), ("OctetString", f"row {i}") if i % 2 else ("Gauge32", i * 1000)))
    return MibView(items, [oid for oid, _ in items], [])


class Running:
    def __init__(self, view: Any = None):
        self.port = free_udp_port()
        self.view = view or small_view()
        self.agent: Agent | None = None
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def make_agent(self) -> Agent:
        """The agent under test (a subclass may configure users, writes and replay protection)."""
        return Agent("127.0.0.1", self.port, lambda: self.view, lambda oid, value, user: None,
                     AccessGate(["127.0.0.0/8"], 10_000, 20_000), "public", [], False, [(1, 3, 6, 1)], [])

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.agent = self.make_agent()
        self.agent.start()
        self.ready.set()
        try:
            self.loop.run_forever()
        finally:
            self.agent.stop()
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def __enter__(self) -> Running:
        self.thread.start()
        assert self.ready.wait(10)
        wait_udp_bound(self.port)  # the agent's socket is bound once its loop has run a little
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def agent() -> Iterator[Running]:
    with Running() as running:
        yield running


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert "Traceback" not in caplog.text
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text


def within_bound(answer: Answer) -> bool:
    return answer.received_bytes <= max(limits.REPLY_FACTOR * answer.sent_bytes, limits.MIN_REPLY_BYTES)


def next_row(oid: tuple[int, ...]) -> tuple[int, ...]:
    return ROWS + (oid[len(ROWS)] + 1, 0)


# --- the byte arithmetic --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [0, 1, 127, 128, 255, 256, 65_535, 65_536])
def test_tlv_sizes_are_those_of_ber(size: int) -> None:
    assert limits.tlv_bytes(size) == len(encoder.encode(univ.OctetString(b"x" * size)))


def test_the_budget_is_the_smallest_of_the_bounds() -> None:
    small = limits.response_budget(40, 30, 65507)  # a one-OID request of 40 bytes, 10 of them community & version
    assert small.reply_bytes == limits.MIN_REPLY_BYTES and "floor" in small.reason
    assert small.pdu_bytes == limits.MIN_REPLY_BYTES - 10 - limits.MARGIN_BYTES
    large = limits.response_budget(800, 790, 65507)
    assert large.reply_bytes == 8 * 800 and "8 x the request's 800 bytes" in large.describe()
    huge = limits.response_budget(20_000, 19_990, 65507)
    assert huge.reply_bytes == 65507 and "agent" in huge.reason
    manager = limits.response_budget(800, 650, 65507, manager_max_pdu_bytes=1000)
    assert manager.pdu_bytes == 1000 - limits.MARGIN_BYTES and "manager" in manager.reason
    assert large.varbinds == manager.varbinds == limits.MAX_VARBINDS
    get = limits.response_budget(40, 30, 65507, by_request=False)  # a GET: not held to 8 x its request
    assert get.reply_bytes == 65507 and get.pdu_bytes == 65507 - 10 - limits.MARGIN_BYTES


def test_a_fit_takes_bindings_in_order_until_one_does_not_fit() -> None:
    fit = limits.Fit(limits.Budget(limits.pdu_bytes(100), 0, 3, "test"))
    assert fit.add(60) and fit.add(40)
    assert not fit.add(1)  # the PDU would pass its bytes
    assert fit.count == 2 and limits.pdu_bytes(fit.content_bytes) == limits.pdu_bytes(100)
    by_count = limits.Fit(limits.Budget(10_000, 0, 3, "test"))
    assert by_count.fits_all([5, 5, 5]) and by_count.room == 0 and not by_count.add(5)


# --- the agent --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("repeaters", [64, 65, 200])
def test_getbulk_with_many_varbinds_is_answered_within_the_bound(agent: Running, caplog: pytest.LogCaptureFixture,
                                                                 repeaters: int) -> None:
    caplog.set_level(logging.INFO)
    asked = [ROWS + (i, 0) for i in range(1, repeaters + 1)]
    answer = request(agent.port, asked, bulk=True, max_repetitions=5)
    assert answer is not None, "no answer"
    assert answer.error_status == "noError" and answer.varbinds
    assert within_bound(answer) and len(answer.varbinds) <= limits.MAX_VARBINDS
    # RFC 3416 4.2.3: the first row is the successor of each repeater, in order; what is cut is at the end
    first_row = [oid for oid, _ in answer.varbinds[:repeaters]]
    assert first_row == [next_row(oid) for oid in asked][:len(first_row)]
    if len(answer.varbinds) > repeaters:  # a second row follows on from the first
        assert answer.varbinds[repeaters][0] == next_row(first_row[0])
    no_traceback(caplog)


def test_a_getbulk_cut_short_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with Running() as running:
        answers = [request(running.port, [ROWS + (i, 0) for i in range(1, 201)], bulk=True, max_repetitions=5)
                   for _ in range(5)]
        assert all(a is not None and a.error_status == "noError" for a in answers)
        lines = [r.getMessage() for r in caplog.records if "GETBULK" in r.getMessage()]
        assert len(lines) == 1 and "answered 256 of the 1000 variable bindings" in lines[0], lines
        assert "the next ones are counted" in lines[0]
        assert running.agent is not None and running.agent.guard.cut == 5
    no_traceback(caplog)


def test_getbulk_max_repetitions_10000_is_capped(agent: Running, caplog: pytest.LogCaptureFixture) -> None:
    answer = request(agent.port, [ROWS], bulk=True, max_repetitions=10_000)
    assert answer is not None and answer.error_status == "noError"
    assert within_bound(answer) and answer.received_bytes <= limits.MIN_REPLY_BYTES
    oids = [oid for oid, _ in answer.varbinds]
    assert oids == [ROWS + (i, 0) for i in range(1, len(oids) + 1)]  # a walk of the subtree, with no gap
    assert 5 <= len(oids) < 50
    no_traceback(caplog)


def test_getbulk_stops_at_the_end_of_the_mib(agent: Running) -> None:
    answer = request(agent.port, [ROWS + (ROW_COUNT - 1, 0)], bulk=True, max_repetitions=10_000)
    assert answer is not None and answer.error_status == "noError"
    assert [oid for oid, _ in answer.varbinds][:1] == [ROWS + (ROW_COUNT, 0)]
    assert len(answer.varbinds) == 2 and answer.end_of_mib(1)


def test_getbulk_non_repeaters_come_first_and_zero_repetitions_give_only_them(agent: Running) -> None:
    answer = request(agent.port, [SYSTEM, ROWS], bulk=True, non_repeaters=1, max_repetitions=3)
    assert answer is not None and [oid for oid, _ in answer.varbinds] == [
        SYS_DESCR, ROWS + (1, 0), ROWS + (2, 0), ROWS + (3, 0)]
    only = request(agent.port, [SYSTEM, ROWS], bulk=True, non_repeaters=1, max_repetitions=0)
    assert only is not None and [oid for oid, _ in only.varbinds] == [SYS_DESCR]
    empty = request(agent.port, [ROWS], bulk=True, max_repetitions=0)
    assert empty is not None and empty.error_status == "noError" and empty.varbinds == []


def test_get_with_1000_varbinds_gets_toobig(agent: Running, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    answer = request(agent.port, [SYS_DESCR] * 1000)
    assert answer is not None, "no answer"
    assert (answer.error_status, answer.error_index, answer.varbinds) == ("tooBig", 0, [])
    assert answer.received_bytes < 64
    assert any("SNMP GET from 127.0.0.1: 1000 variable bindings, more than the 256" in r.getMessage()
               and r.levelno == logging.WARNING for r in caplog.records), caplog.text
    no_traceback(caplog)


def test_get_whose_response_passes_the_largest_message_gets_toobig(agent: Running) -> None:
    # a GET answers one binding per binding asked, each as long as the MIB allows (255 octets): not held to 8 x the
    # request, but to the largest message (65507 bytes): 200 such bindings fit, 256 do not
    agent.view = MibView([(SYS_DESCR, ("OctetString", "x" * 255))], [SYS_DESCR], [])
    try:
        fits = request(agent.port, [SYS_DESCR] * 200)
        assert fits is not None and fits.error_status == "noError" and len(fits.varbinds) == 200
        assert fits.received_bytes <= 65507
        too_big = request(agent.port, [SYS_DESCR] * 256)
        assert too_big is not None and (too_big.error_status, too_big.error_index, too_big.varbinds) == (
            "tooBig", 0, [])
        bulk = request(agent.port, [SYSTEM] * 200, bulk=True, max_repetitions=10)  # held to 8 x its request
        assert bulk is not None and bulk.error_status == "noError" and 0 < len(bulk.varbinds) < 200
        assert within_bound(bulk)
    finally:
        agent.view = small_view()


def test_a_request_failing_inside_the_agent_gets_generr_and_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def get(self, oid: tuple[int, ...]) -> Any:
            raise RuntimeError("view broken")

        declares = next = writable = get

    caplog.set_level(logging.INFO)
    with Running(Broken()) as running:
        answers = [request(running.port, [SYS_DESCR]) for _ in range(3)]
        answers += [request(running.port, [SYSTEM], bulk=True, max_repetitions=3)]
        assert all(a is not None and a.error_status == "genErr" for a in answers), answers
        assert running.agent is not None and running.agent.guard.failed == 4
    lines = [r for r in caplog.records if "failed inside the agent" in r.getMessage()]
    assert len(lines) == 1 and "RuntimeError: view broken" in lines[0].getMessage()
    assert "Traceback" not in caplog.text and not [r for r in caplog.records if r.exc_info]


def test_the_guard_logs_each_kind_once_per_interval_then_counts(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    guard = ResponseGuard(clock=lambda: now[0], interval_s=60)
    budget = limits.response_budget(40, 30, 65507)
    caplog.set_level(logging.INFO)
    for _ in range(3):
        guard.refused("GET", "192.0.2.1", "too many")
        guard.shortened("GETBULK", "192.0.2.1", 10, 100, budget)
    now[0] = 61.0
    guard.refused("GET", "192.0.2.1", "too many")
    guard.shortened("GETBULK", "192.0.2.1", 10, 100, budget)  # after the first, at debug level
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and lines[-1].endswith("(2 more since the last such line)"), lines
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO, logging.WARNING]
    assert (guard.too_big, guard.cut) == (4, 4)
