"""The PTP port state tables: Figure 30, Figure 31 (slaveOnly) and Figure 30 without its slave side."""

from __future__ import annotations

import pytest

from appliance.protocol.ptp import fsm
from appliance.protocol.ptp.fsm import (ANNOUNCE_RECEIPT_TIMEOUT, DISABLED, FAULT_CLEARED, FAULT_DETECTED, FAULTY,
                                        INIT_COMPLETE, INITIALIZING, LISTENING, MASTER, MASTER_CLOCK_SELECTED,
                                        PASSIVE, RS_MASTER, RS_PASSIVE, RS_SLAVE, SLAVE, SYNCHRONIZATION_FAULT,
                                        UNCALIBRATED)


def reachable(table: fsm.Table, start: str = INITIALIZING) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        state = todo.pop()
        for (old, _event), new in table.items():
            if old == state and new not in seen:
                seen.add(new)
                todo.append(new)
    return seen


def test_every_table_uses_only_the_states_and_events_of_the_standard() -> None:
    for table in (fsm.PTP_FSM, fsm.SLAVE_ONLY_FSM, fsm.MASTER_FSM):
        assert {s for (s, _e) in table} | set(table.values()) <= set(fsm.PORT_STATE_CODES)
        assert {e for (_s, e) in table} <= fsm.EVENTS


def test_the_full_table_reaches_every_state_but_pre_master_which_m1_and_m2_skip() -> None:
    assert reachable(fsm.PTP_FSM) == set(fsm.PORT_STATE_CODES) - {fsm.PRE_MASTER}


def test_a_slave_only_port_is_never_master_nor_passive_and_listens_when_its_master_is_gone() -> None:
    assert reachable(fsm.SLAVE_ONLY_FSM) == {INITIALIZING, LISTENING, UNCALIBRATED, SLAVE, FAULTY, DISABLED}
    assert fsm.next_state(fsm.SLAVE_ONLY_FSM, SLAVE, ANNOUNCE_RECEIPT_TIMEOUT) == LISTENING
    assert fsm.next_state(fsm.PTP_FSM, SLAVE, ANNOUNCE_RECEIPT_TIMEOUT) == MASTER
    assert fsm.next_state(fsm.SLAVE_ONLY_FSM, LISTENING, ANNOUNCE_RECEIPT_TIMEOUT) is None


def test_the_grandmaster_table_is_figure_30_without_its_slave_side() -> None:
    assert reachable(fsm.MASTER_FSM) == {INITIALIZING, LISTENING, MASTER, PASSIVE, FAULTY, DISABLED}
    assert all(row in fsm.PTP_FSM.items() for row in fsm.MASTER_FSM.items())
    assert fsm.table_for(slave_only=False) is fsm.MASTER_FSM and fsm.table_for(slave_only=True) is fsm.SLAVE_ONLY_FSM


@pytest.mark.parametrize("table", [fsm.PTP_FSM, fsm.SLAVE_ONLY_FSM, fsm.MASTER_FSM])
def test_a_fault_from_any_operational_state_and_its_clearing_start_over(table: fsm.Table) -> None:
    for state in reachable(table) - {FAULTY, DISABLED}:
        assert fsm.next_state(table, state, FAULT_DETECTED) == FAULTY
    assert fsm.next_state(table, FAULTY, FAULT_CLEARED) == INITIALIZING
    assert fsm.next_state(table, INITIALIZING, INIT_COMPLETE) == LISTENING


def test_the_slave_side_of_figure_30() -> None:
    for state in (LISTENING, MASTER, PASSIVE, SLAVE):
        assert fsm.next_state(fsm.PTP_FSM, state, RS_SLAVE) == UNCALIBRATED
    assert fsm.next_state(fsm.PTP_FSM, UNCALIBRATED, MASTER_CLOCK_SELECTED) == SLAVE
    assert fsm.next_state(fsm.PTP_FSM, SLAVE, SYNCHRONIZATION_FAULT) == UNCALIBRATED
    assert fsm.next_state(fsm.PTP_FSM, SLAVE, RS_PASSIVE) == PASSIVE
    assert fsm.next_state(fsm.PTP_FSM, UNCALIBRATED, RS_MASTER) == MASTER


def test_the_state_machine_keeps_its_history_and_ignores_events_without_a_row() -> None:
    machine = fsm.StateMachine(fsm.SLAVE_ONLY_FSM, INITIALIZING, 0, "starting")
    assert machine.take(INIT_COMPLETE, 1_000_000_000, "initialized")
    assert not machine.take(RS_MASTER, 2_000_000_000, "a slaveOnly port does not master")
    assert machine.take(RS_SLAVE, 3_000_000_000, "best master")
    assert machine.state == UNCALIBRATED and machine.reason == "best master"
    assert machine.state_for_s(4_500_000_000) == 1.5
    assert [row["to"] for row in machine.rows(4_000_000_000)] == [LISTENING, UNCALIBRATED]
    for n in range(fsm.HISTORY_LENGTH + 5):
        machine.take(RS_SLAVE, n, "again")
    assert len(machine.history) == fsm.HISTORY_LENGTH and len(machine.rows(0)) == fsm.SNAPSHOT_TRANSITIONS
