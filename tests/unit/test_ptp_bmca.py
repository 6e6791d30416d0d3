"""BMCA: IEEE 1588-2019 9.3.4 data set comparison, the G.8275 alternate comparison, qualification, state decision."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.bmca import (A_BETTER, B_BETTER, Candidate, ForeignMasters, best, compare, decide)

S = 1_000_000_000
ME = c.PortIdentity(bytes.fromhex("0000000000000001"), 1)


def cand(ident: int, p1: int = 128, cls: int = 6, acc: int = 0x21, var: int = 0x4E5D, p2: int = 128, steps: int = 0,
         local: int = 128) -> Candidate:
    gm = ident.to_bytes(8, "big")
    return Candidate(p1, gm, cls, acc, var, p2, steps, c.PortIdentity(gm, 1), ME, local)


def test_attribute_order_priority1_class_accuracy_variance_priority2_identity() -> None:
    base = cand(5)
    assert compare(cand(9, p1=127), base) == A_BETTER  # priority1 beats everything after it
    assert compare(cand(9, cls=7, p1=127), base) == A_BETTER
    assert compare(cand(9, cls=6, acc=0x20), base) == A_BETTER
    assert compare(cand(9, acc=0x21, var=0x4E00), base) == A_BETTER
    assert compare(cand(9, p2=1), base) == A_BETTER
    assert compare(cand(9), base) == B_BETTER  # all equal: the lower identity wins
    assert compare(cand(3), base) == A_BETTER


def test_g8275_ignores_priority1_and_uses_local_priority() -> None:
    a, b = cand(9, p1=1), cand(5)
    assert compare(a, b, alternate=True) == B_BETTER  # priority1 is not compared; identity breaks the tie
    assert compare(cand(9, local=10), cand(5, local=20), alternate=True) == A_BETTER
    assert compare(cand(9, cls=6), cand(5, cls=7), alternate=True) == A_BETTER


def test_same_grandmaster_by_topology_fewer_steps_wins() -> None:
    assert compare(cand(5, steps=1), cand(5, steps=3)) == A_BETTER
    assert compare(cand(5, steps=3), cand(5, steps=1)) == B_BETTER


@given(st.lists(st.tuples(st.integers(0, 255), st.sampled_from([6, 7, 52, 187, 248]), st.integers(0x20, 0x31),
                          st.integers(0, 255), st.integers(1, 2**32)), min_size=1, max_size=8, unique_by=lambda t: t[4]))
def test_best_is_order_independent_and_antisymmetric(rows: list[tuple[int, int, int, int, int]]) -> None:
    cands = [cand(ident, p1=p1, cls=cls, acc=acc, p2=p2) for p1, cls, acc, p2, ident in rows]
    assert best(cands) == best(list(reversed(cands)))
    for a in cands:
        for b in cands:
            assert compare(a, b) == -compare(b, a)


def announce(ident: bytes, seq: int, log_interval: int = 1, steps: int = 0) -> c.Announce:
    header = c.Header(c.MsgType.ANNOUNCE, 0, c.PortIdentity(ident, 1), seq, log_interval=log_interval)
    return c.Announce(header, 0, 37, 128, c.ClockQuality(6, 0x21, 0x4E5D), 128, ident, steps, 0x20)


def test_foreign_master_needs_two_announces_in_four_intervals_and_expires() -> None:
    other = bytes.fromhex("0000000000000002")
    fm = ForeignMasters(ME.clock_identity, receipt_timeout=3)
    assert not fm.on_announce(announce(other, 1), 0)
    assert fm.qualified(0) == []
    assert not fm.on_announce(announce(other, 2), 9 * S)  # 9 s apart: outside 4 x 2 s
    assert fm.on_announce(announce(other, 3), 11 * S)
    assert len(fm.qualified(11 * S)) == 1
    assert not fm.expire(16 * S)
    assert fm.expire(17 * S + 1) and fm.masters == {}


def test_own_and_too_distant_announces_are_not_foreign_masters() -> None:
    fm = ForeignMasters(ME.clock_identity, 3)
    for i in range(3):
        fm.on_announce(announce(ME.clock_identity, i), i * S)
        fm.on_announce(announce(b"\x09" * 8, i, steps=255), i * S)
    assert fm.masters == {}


def test_state_decision() -> None:
    me = dataclasses.replace(cand(1, cls=7), sender=ME, gm_identity=ME.clock_identity)
    assert decide(me, None, listening=True).state == "LISTENING"
    assert decide(me, None, listening=False).code == "M1"
    assert decide(me, cand(9, cls=6), listening=False).code == "P1"
    assert decide(me, cand(9, cls=248), listening=False).state == "MASTER"
    freerun = dataclasses.replace(me, gm_class=248)
    d = decide(freerun, cand(9, cls=6), listening=False)
    assert d.state == "PASSIVE" and d.code == "S1" and "does not follow" in d.reason
    assert decide(freerun, None, listening=False).code == "M2"
    assert decide(me, cand(9, cls=6), listening=False, master_only=True).state == "MASTER"
