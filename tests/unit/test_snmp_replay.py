"""SNMPv3 SET replay protection: the replay cache's verdicts, its bound and expiry; the engine boots count kept
across starts; and an agent on loopback that runs a captured authenticated SET once, whatever number of times its
bytes come back within the time window.  The manager is pysnmp's own, behind a relay that keeps what it sent."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pysnmp.hlapi.v3arch import asyncio as hlapi

from appliance.snmp.agent import AccessGate, Agent, V3User
from appliance.snmp.process import next_engine_boots
from appliance.snmp.replay import WINDOW_S, ReplayCache, Verdict, WriteId
from appliance.snmp.view import MibView
from harness.snmp_wire import request
from tests.interop.snmp_relay import Relay, replay
from tests.unit import test_snmp_limits as limits_test

HOLDOVER = (1, 3, 6, 1, 4, 1, 99999, 1, 2, 14, 0)  # a writable object of the test's view
SYS_DESCR = (1, 3, 6, 1, 2, 1, 1, 1, 0)
AUTH, PRIV = "auth-pass-123", "priv-pass-456"


def wid(time_s: int = 100, msg_id: int = 1, digest: bytes = b"a", boots: int = 3) -> WriteId:
    return WriteId(boots, time_s, msg_id, b"nms", digest)


# --- the cache -------------------------------------------------------------------------------------------------

def test_a_write_seen_inside_the_window_is_a_replay_and_counted() -> None:
    cache = ReplayCache()
    assert cache.check(wid(), 3, 100) is Verdict.FRESH
    assert cache.check(wid(), 3, 100 + WINDOW_S) is Verdict.REPLAY
    assert (cache.replayed, cache.refused, len(cache)) == (1, 0, 1)


def test_two_requests_sharing_boots_time_msgid_and_user_are_two() -> None:
    cache = ReplayCache()
    assert cache.check(wid(digest=b"one"), 3, 100) is Verdict.FRESH
    assert cache.check(wid(digest=b"two"), 3, 100) is Verdict.FRESH
    assert cache.replayed == 0 and len(cache) == 2


def test_an_entry_lives_exactly_as_long_as_usm_accepts_its_message() -> None:
    cache = ReplayCache()
    ahead, now = wid(time_s=250, msg_id=1), wid(time_s=100, msg_id=2)  # a message may claim a time ahead of ours
    assert cache.check(ahead, 3, 100) is Verdict.FRESH and cache.check(now, 3, 100) is Verdict.FRESH
    assert cache.check(now, 3, 100 + WINDOW_S) is Verdict.REPLAY  # |100 - 250| = 150: USM still takes it
    # one second later USM refuses it (usmStatsNotInTimeWindows): the cache need not hold it any more
    assert cache.check(now, 3, 100 + WINDOW_S + 1) is Verdict.FRESH
    assert cache.check(ahead, 3, 100 + WINDOW_S + 1) is Verdict.REPLAY
    assert cache.check(ahead, 3, 250 + WINDOW_S + 1) is Verdict.FRESH
    assert len(cache) == 1  # the rest expired


def test_a_full_cache_refuses_new_writes_rather_than_forget_live_ones() -> None:
    cache = ReplayCache(max_entries=3)
    for msg_id in range(3):
        assert cache.check(wid(msg_id=msg_id), 3, 100) is Verdict.FRESH
    assert cache.check(wid(msg_id=7), 3, 110) is Verdict.FULL
    assert cache.check(wid(msg_id=0), 3, 110) is Verdict.REPLAY  # still remembered
    assert (cache.refused, cache.replayed, len(cache)) == (1, 1, 3)
    # room comes back as entries leave the window
    assert cache.check(wid(time_s=300, msg_id=7), 3, 100 + WINDOW_S + 1) is Verdict.FRESH and len(cache) == 1


def test_another_engine_boots_value_forgets_everything_and_a_disabled_cache_refuses() -> None:
    cache = ReplayCache()
    cache.check(wid(), 3, 100)
    assert cache.check(wid(boots=4), 4, 100) is Verdict.FRESH and len(cache) == 1
    cache.disable("the SNMP engine boots counter could not be kept")
    assert cache.check(wid(msg_id=5, boots=4), 4, 100) is Verdict.FULL and cache.refused == 1


# --- the engine boots count -----------------------------------------------------------------------------------

def test_engine_boots_count_up_from_one_in_a_private_file(tmp_path: Path) -> None:
    path = tmp_path / "snmp-engine-boots"
    assert [next_engine_boots(path) for _ in range(3)] == [1, 2, 3]
    assert path.read_text() == "3\n" and path.stat().st_mode & 0o777 == 0o600
    path.write_text("garbage\n")
    with pytest.raises(ValueError, match="not a number"):
        next_engine_boots(path)
    path.unlink()
    os.symlink(tmp_path / "elsewhere", path)
    with pytest.raises(OSError):
        next_engine_boots(path)


# --- an agent on loopback ---------------------------------------------------------------------------------------

class Running(limits_test.Running):
    """An agent in a thread on its own loop (as in the appliance's agent process) with one write-enabled SNMPv3
    user; ``writes`` records every SET that reached the appliance's side."""

    def __init__(self, boots: int | None = 7, replay_cache: ReplayCache | None = None):
        view = MibView([(SYS_DESCR, ("OctetString", "appliance")), (HOLDOVER, ("Integer32", 2))],
                       [SYS_DESCR[:-1], HOLDOVER[:-1]], [HOLDOVER])
        super().__init__(view)
        self.writes: list[tuple[tuple[int, ...], int, str]] = []
        self.user = V3User("nms", "SHA-256", AUTH, "AES-128", PRIV, write=True)
        self.boots, self.replay_cache = boots, replay_cache

    def _write(self, oid: tuple[int, ...], value: Any, user: str) -> None:
        self.writes.append((oid, int(value), user))

    def make_agent(self) -> Agent:
        return Agent("127.0.0.1", self.port, lambda: self.view, self._write, AccessGate(["127.0.0.0/8"], 10_000, 20_000),
                     "public", [self.user], False, [(1, 3, 6, 1)], [], engine_id=bytes.fromhex("8000000001020304"),
                     engine_boots=self.boots, replay=self.replay_cache)


def snmpset(port: int, value: int) -> str:
    """A SET of the holdover object by pysnmp's manager, as user nms at authPriv; its error (or "") in words."""
    async def run() -> str:
        engine = hlapi.SnmpEngine()
        target = await hlapi.UdpTransportTarget.create(("127.0.0.1", port), timeout=5, retries=0)
        user = hlapi.UsmUserData("nms", AUTH, PRIV, authProtocol=hlapi.USM_AUTH_HMAC192_SHA256,
                                 privProtocol=hlapi.USM_PRIV_CFB128_AES)
        error, status, _, _ = await hlapi.set_cmd(engine, user, target, hlapi.ContextData(),
                                                  hlapi.ObjectType(hlapi.ObjectIdentity(HOLDOVER),
                                                                   hlapi.Integer32(value)))
        engine.close_dispatcher()
        return str(error or (status.prettyPrint() if status else ""))
    return asyncio.run(run())


@pytest.fixture
def agent() -> Iterator[Running]:
    with Running() as running:
        yield running


def test_a_captured_set_sent_again_is_dropped_unanswered(agent: Running, caplog: pytest.LogCaptureFixture) -> None:
    with Relay(agent.port) as relay:
        assert snmpset(relay.port, 1) == ""
    assert agent.writes == [(HOLDOVER, 1, "nms")]
    captured = relay.authenticated()
    assert len(captured) == 1  # the discovery probe is not authenticated: the SET is the one that is
    with caplog.at_level(logging.WARNING, logger="appliance.snmp"):
        for _ in range(3):
            answers, later = replay(agent.port, captured[0], lambda: request(agent.port, [SYS_DESCR]))
            assert answers == [] and later is not None and later.error_status == "noError"
    assert agent.writes == [(HOLDOVER, 1, "nms")]  # run once
    assert agent.agent is not None and agent.agent.replay.replayed == 3
    assert sum("dropped unanswered" in r.getMessage() for r in caplog.records) == 1  # one line a minute
    # a new SET of the same value is a new message: it runs
    assert snmpset(agent.port, 1) == "" and len(agent.writes) == 2
    stats = agent.agent.security_stats()
    assert stats["usmStatsUnknownEngineIDs"] == 2 and stats["usmStatsWrongDigests"] == 0  # two discoveries


def test_a_set_the_replay_check_cannot_remember_is_refused_resource_unavailable() -> None:
    with Running(replay_cache=ReplayCache(max_entries=1)) as agent:
        assert snmpset(agent.port, 1) == ""
        assert snmpset(agent.port, 2) == "resourceUnavailable"
        assert agent.writes == [(HOLDOVER, 1, "nms")]
        assert agent.agent is not None and agent.agent.replay.refused == 1
    with Running(boots=None) as agent:  # no engine boots count: no write runs
        assert snmpset(agent.port, 1) == "resourceUnavailable" and agent.writes == []


def test_engine_time_is_monotonic_seconds_and_boots_as_given(agent: Running) -> None:
    assert agent.agent is not None
    boots, first = agent.agent.engine_clock()
    assert boots == 7 and 0 <= first <= 10  # seconds since the engine started, not since 1970


# --- the counters in the view -----------------------------------------------------------------------------------

def test_the_view_serves_the_standard_counters_and_the_replay_objects_from_the_status() -> None:
    from appliance import leap
    from appliance.snmp.mibgen import enterprise_oid, load_table
    from appliance.snmp.view import System, agent_items, build

    table = load_table()
    by_name = {o.name: o for o in table}
    snmp = {"replay_dropped": 2, "replay_refused": 1, "replay_cached": 5,
            "standard": {"usmStatsWrongDigests": 3, "snmpInBadCommunityNames": 4, "snmpInPkts": 2**32 + 9}}
    leaps = leap.LeapTable.load_default()
    status = _minimal_status()
    status["outputs"]["snmp"] = snmp
    view = build(table, status, System("d", enterprise_oid(), 5, "c", "n", "l"),
                 lambda t: leap.tai_to_utc(t, leaps), lambda code: 1)
    assert view.get((1, 3, 6, 1, 6, 3, 15, 1, 1, 5, 0)) == ("Counter32", 3)  # usmStatsWrongDigests
    assert view.get((1, 3, 6, 1, 2, 1, 11, 4, 0)) == ("Counter32", 4)  # snmpInBadCommunityNames
    assert view.get((1, 3, 6, 1, 2, 1, 11, 1, 0)) == ("Counter32", 9)  # wraps as a Counter32 does
    assert view.get(by_name["applianceSnmpReplayDropped"].oid + (0,)) == ("Counter64", 2)
    assert view.get(by_name["applianceSnmpReplayCached"].oid + (0,)) == ("Gauge32", 5)
    # the agent lays its counters of the moment over the view between rebuilds
    snmp["replay_dropped"], snmp["standard"]["usmStatsWrongDigests"] = 3, 4
    now = view.replaced(agent_items(table, status))
    assert now.get(by_name["applianceSnmpReplayDropped"].oid + (0,)) == ("Counter64", 3)
    assert now.get((1, 3, 6, 1, 6, 3, 15, 1, 1, 5, 0)) == ("Counter32", 4)
    assert [oid for oid, _ in now.items()] == [oid for oid, _ in view.items()]


def _minimal_status() -> dict[str, Any]:
    from appliance.status import to_dict
    from tests.sim.conftest import build_sim

    sim = build_sim(seed=2, **{"clock.warmup_s": 0, "clock.qualify_s": 3})
    sim.run_s(5)
    return to_dict(sim.app.status())
