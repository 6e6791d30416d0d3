"""The PTP port state machine as data: port states, the events that move them, and the transition tables.

Pure core.  ``PTP_FSM`` is IEEE 1588-2019 9.2.5 Figure 30 (a port that may be master, passive or slave: linuxptp's
``ptp_fsm``); ``SLAVE_ONLY_FSM`` is Figure 31 (a slaveOnly port: ``ptp_slave_fsm``); ``MASTER_FSM`` is Figure 30
without its slave side, for a port of a clock that follows no other through it (the appliance's grandmaster port:
where the BMCA would make it a slave, S1, it stays PASSIVE).  ``next_state(table, state, event)`` is a pure function;
``StateMachine`` keeps a port's state, since when, why, and the latest transitions for its status.  Entry actions
(timers, what is sent) stay with the port engine (port.py).

Two simplifications of Figure 30, both as the appliance has always behaved: RS_MASTER leads to MASTER without
PRE_MASTER, for the decisions this port takes (M1, M2) have a qualification timeout of zero (9.2.6.11); and a port
that is not slaveOnly never takes RS_SLAVE from its BMCA (bmca.decide).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from appliance.units import NS_PER_S

# portState (8.2.15.3.1, Table 20) and its codes
INITIALIZING, FAULTY, DISABLED, LISTENING, PRE_MASTER, MASTER, PASSIVE, UNCALIBRATED, SLAVE = (
    "INITIALIZING", "FAULTY", "DISABLED", "LISTENING", "PRE_MASTER", "MASTER", "PASSIVE", "UNCALIBRATED", "SLAVE")
PORT_STATE_CODES = {INITIALIZING: 1, FAULTY: 2, DISABLED: 3, LISTENING: 4, PRE_MASTER: 5, MASTER: 6, PASSIVE: 7,
                    UNCALIBRATED: 8, SLAVE: 9}
# The states in which a port takes part in PTP (9.2.5: all but INITIALIZING, FAULTY and DISABLED).
OPERATIONAL = frozenset({LISTENING, PRE_MASTER, MASTER, PASSIVE, UNCALIBRATED, SLAVE})

# Events (9.2.6); RS_* are the BMCA's recommended states (9.3.3).
INIT_COMPLETE = "INIT_COMPLETE"
FAULT_DETECTED = "FAULT_DETECTED"
FAULT_CLEARED = "FAULT_CLEARED"
DESIGNATED_ENABLED = "DESIGNATED_ENABLED"
DESIGNATED_DISABLED = "DESIGNATED_DISABLED"
ANNOUNCE_RECEIPT_TIMEOUT = "ANNOUNCE_RECEIPT_TIMEOUT"
QUALIFICATION_TIMEOUT = "QUALIFICATION_TIMEOUT"
SYNCHRONIZATION_FAULT = "SYNCHRONIZATION_FAULT"
MASTER_CLOCK_SELECTED = "MASTER_CLOCK_SELECTED"
RS_MASTER, RS_PASSIVE, RS_SLAVE = "RS_MASTER", "RS_PASSIVE", "RS_SLAVE"
EVENTS = frozenset({INIT_COMPLETE, FAULT_DETECTED, FAULT_CLEARED, DESIGNATED_ENABLED, DESIGNATED_DISABLED,
                    ANNOUNCE_RECEIPT_TIMEOUT, QUALIFICATION_TIMEOUT, SYNCHRONIZATION_FAULT, MASTER_CLOCK_SELECTED,
                    RS_MASTER, RS_PASSIVE, RS_SLAVE})

HISTORY_LENGTH = 32  # state transitions kept; the status shows the latest SNAPSHOT_TRANSITIONS
SNAPSHOT_TRANSITIONS = 8

Table = Mapping[tuple[str, str], str]


def from_each(states: Iterable[str], event: str, new: str) -> dict[tuple[str, str], str]:
    """Rows of a transition table: ``event`` takes each of ``states`` to ``new`` (Figure 30's "from any state")."""
    return {(state, event): new for state in states}


_COMMON: dict[tuple[str, str], str] = {
    (INITIALIZING, INIT_COMPLETE): LISTENING,
    (FAULTY, FAULT_CLEARED): INITIALIZING,
    (DISABLED, DESIGNATED_ENABLED): INITIALIZING,
}

# Figure 30: the full port state machine.
PTP_FSM: dict[tuple[str, str], str] = {
    **_COMMON,
    (LISTENING, ANNOUNCE_RECEIPT_TIMEOUT): MASTER,
    (LISTENING, RS_MASTER): MASTER,
    (LISTENING, RS_PASSIVE): PASSIVE,
    (PRE_MASTER, QUALIFICATION_TIMEOUT): MASTER,
    (PRE_MASTER, RS_PASSIVE): PASSIVE,
    (MASTER, RS_PASSIVE): PASSIVE,
    (PASSIVE, RS_MASTER): MASTER,
    (PASSIVE, ANNOUNCE_RECEIPT_TIMEOUT): MASTER,
    **from_each((LISTENING, PRE_MASTER, MASTER, PASSIVE, UNCALIBRATED, SLAVE), RS_SLAVE, UNCALIBRATED),
    (UNCALIBRATED, MASTER_CLOCK_SELECTED): SLAVE,
    (SLAVE, SYNCHRONIZATION_FAULT): UNCALIBRATED,
    **from_each((UNCALIBRATED, SLAVE), ANNOUNCE_RECEIPT_TIMEOUT, MASTER),
    **from_each((UNCALIBRATED, SLAVE), RS_MASTER, MASTER),
    **from_each((UNCALIBRATED, SLAVE), RS_PASSIVE, PASSIVE),
    **from_each((INITIALIZING, LISTENING, PRE_MASTER, MASTER, PASSIVE, UNCALIBRATED, SLAVE), FAULT_DETECTED, FAULTY),
    **from_each((INITIALIZING, LISTENING, PRE_MASTER, MASTER, PASSIVE, UNCALIBRATED, SLAVE, FAULTY),
                DESIGNATED_DISABLED, DISABLED),
}

# Figure 31: a slaveOnly port never masters; with its master gone it listens again.
SLAVE_ONLY_FSM: dict[tuple[str, str], str] = {
    **_COMMON,
    (LISTENING, RS_SLAVE): UNCALIBRATED,
    (UNCALIBRATED, RS_SLAVE): UNCALIBRATED,
    (SLAVE, RS_SLAVE): UNCALIBRATED,  # RS_SLAVE in SLAVE means a new master: the port recalibrates
    (UNCALIBRATED, MASTER_CLOCK_SELECTED): SLAVE,
    (SLAVE, SYNCHRONIZATION_FAULT): UNCALIBRATED,
    **from_each((UNCALIBRATED, SLAVE), ANNOUNCE_RECEIPT_TIMEOUT, LISTENING),
    **from_each((INITIALIZING, LISTENING, UNCALIBRATED, SLAVE), FAULT_DETECTED, FAULTY),
    **from_each((INITIALIZING, LISTENING, UNCALIBRATED, SLAVE, FAULTY), DESIGNATED_DISABLED, DISABLED),
}


def without(table: Table, states: Iterable[str]) -> dict[tuple[str, str], str]:
    """``table`` without the rows that leave or enter any of ``states``."""
    gone = set(states)
    return {(state, event): new for (state, event), new in table.items() if state not in gone and new not in gone}


MASTER_FSM = without(PTP_FSM, (UNCALIBRATED, SLAVE))


def table_for(slave_only: bool) -> Table:
    """The table a port runs: Figure 31 for a slaveOnly port, else Figure 30 without its slave side."""
    return SLAVE_ONLY_FSM if slave_only else MASTER_FSM


def next_state(table: Table, state: str, event: str) -> str | None:
    """The state ``event`` takes a port in ``state`` to; None when the table has no row for it (nothing changes)."""
    return table.get((state, event))


class StateMachine:
    """A port's ``state`` (Table 20), since when and why, moved only through its table; the latest transitions."""

    def __init__(self, table: Table, state: str, now_ns: int, reason: str) -> None:
        self.table = table
        self.state, self.since_ns, self.reason = state, now_ns, reason
        self.history: list[tuple[int, str, str, str]] = []  # (now, old, new, reason), the latest HISTORY_LENGTH

    def take(self, event: str, now_ns: int, reason: str) -> bool:
        """Take ``event``; False when the table has no row for it in this state."""
        new = next_state(self.table, self.state, event)
        if new is None:
            return False
        old, self.state, self.since_ns, self.reason = self.state, new, now_ns, reason
        self.history = (self.history + [(now_ns, old, new, reason)])[-HISTORY_LENGTH:]
        return True

    def state_for_s(self, now_ns: int) -> float:
        return round((now_ns - self.since_ns) / NS_PER_S, 1)

    def rows(self, now_ns: int) -> list[dict[str, object]]:
        """The latest transitions, as the status shows them."""
        return [{"s_ago": round((now_ns - t) / NS_PER_S, 1), "from": old, "to": new, "reason": why}
                for t, old, new, why in self.history[-SNAPSHOT_TRANSITIONS:]]
