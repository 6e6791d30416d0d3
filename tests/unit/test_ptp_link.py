"""The grandmaster port and the PTP slave reference joined by an in-memory link, h11 style: their real encoded
frames cross it; no sockets, no threads.

A small discrete-event loop owns true time.  The grandmaster's clock reads true time plus ``gm_ahead_ns``; the
slave's local clock reads true time.  A frame leaves its sender ``TX_LATENCY_NS`` after the engine asked for it (so
a Sync's originTimestamp, an estimate, is off and only the Follow_Up's preciseOriginTimestamp is right), reaches the
other end after its direction's one-way delay and is stamped there on the receiver's clock; the sender of an event
message gets its transmit timestamp back, on its own clock, for the instant the frame left.  The slave's measured
offset is local minus master: a grandmaster 1234 ns ahead reads -1234.

The slave engine never asks for unicast transmission (it sends no Signaling), so unicast negotiation is not
exercised here; test_ptp_port.py covers the grandmaster's side of it.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.protocol.ptp.fsm import MASTER
from appliance.protocol.ptp.port import PtpPort
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.port_common import Send, clock_identity_text, port_identity_text
from appliance.protocol.ptp.profiles import load_profile, resolve
from appliance.protocol.ptp.fsm import LISTENING, SLAVE
from appliance.protocol.ptp.measure import PtpMeasurement
from appliance.refs.ptp_slave import SlaveConfig, slave_port

S = 1_000_000_000
BASE_NS = 1_700_000_000 * S  # true time (TAI) when both engines start
GM_ID, SLAVE_ID = bytes.fromhex("0200aafffe000001"), bytes.fromhex("0200ccfffe000003")
TX_LATENCY_NS = 3_000  # from the engine's request to the frame on the wire
LOCK_S = 30  # the grandmaster listens 6 s, the slave qualifies it in two Announces and fills its delay filter
LOCKED = GrandmasterView(clock_class=6, clock_accuracy=0x21, offset_scaled_log_variance=0x4E5D, time_source=0x20,
                         current_utc_offset=37, utc_offset_valid=True, time_traceable=True, frequency_traceable=True,
                         error_bound_ns=40, state="LOCKED")
HOLDOVER = dataclasses.replace(LOCKED, clock_class=7, time_source=0xA0, state="HOLDOVER")


@dataclass
class End:
    """One end of the link: an engine behind four calls, and its clock (true time + ``offset_ns``)."""

    address: str
    offset_ns: int
    rx: Callable[[bytes, Any, int, int], list[Any]]  # (data, source, rx_ts_ns, now_ns)
    tx: Callable[[int, int], list[Any]]  # (token, tx_ts_ns)
    timer: Callable[[int, int], list[Any]]  # (now_ns, this end's clock now)
    due: Callable[[], int | None]
    silent: bool = False  # what it sends is lost

    def clock(self, true_ns: int) -> int:
        return true_ns + self.offset_ns


class Link:
    """Two ends, a one-way delay each way (the master-to-slave one ``asymmetry_ns`` longer), one event queue."""

    def __init__(self, gm: End, slave: End, delay_ns: int, asymmetry_ns: int = 0):
        self.gm, self.slave = gm, slave
        self.delay_ns = {gm.address: delay_ns + asymmetry_ns, slave.address: delay_ns}  # by sender
        self.now_ns = BASE_NS
        self.measurements: list[tuple[int, PtpMeasurement]] = []  # (true time, measurement)
        self._queue: list[tuple[int, int, End, Callable[[], list[Any]]]] = []
        self._order = itertools.count()

    def emit(self, sender: End, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, PtpMeasurement):
                self.measurements.append((self.now_ns, action))
            elif not sender.silent:
                self._send(sender, action)

    def _send(self, sender: End, send: Send) -> None:
        receiver = self.slave if sender is self.gm else self.gm
        leave_ns = self.now_ns + TX_LATENCY_NS
        arrive_ns = leave_ns + self.delay_ns[sender.address]
        source = (sender.address, 319 if send.event else 320)
        self._at(arrive_ns, receiver, lambda: receiver.rx(send.data, source, receiver.clock(arrive_ns), arrive_ns))
        if send.token is not None:
            token = send.token
            self._at(leave_ns, sender, lambda: sender.tx(token, sender.clock(leave_ns)))

    def _at(self, at_ns: int, end: End, call: Callable[[], list[Any]]) -> None:
        heapq.heappush(self._queue, (at_ns, next(self._order), end, call))

    def run(self, for_s: float) -> None:
        """Deliver frames and timestamps and fire both engines' timers, in time order, for ``for_s`` seconds."""
        until_ns = self.now_ns + int(for_s * S)
        for _ in range(1_000_000):
            dues = [d for d in (self.gm.due(), self.slave.due()) if d is not None]
            t = min(dues + [self._queue[0][0]] if self._queue else dues, default=None)
            if t is None or t > until_ns:
                self.now_ns = until_ns
                return
            self.now_ns = max(self.now_ns, t)
            if self._queue and self._queue[0][0] <= self.now_ns:
                _, _, end, call = heapq.heappop(self._queue)
                self.emit(end, call())
                continue
            for end in (self.gm, self.slave):
                due = end.due()
                if due is not None and due <= self.now_ns:
                    self.emit(end, end.timer(self.now_ns, end.clock(self.now_ns)))
        raise AssertionError("the link never went quiet")

    def since(self, true_ns: int) -> list[PtpMeasurement]:
        return [m for at, m in self.measurements if at >= true_ns]


def connect(mechanism: str = "e2e", gm_ahead_ns: int = 0, delay_ns: int = 50_000,
            asymmetry_ns: int = 0) -> tuple[Link, PtpPort, PtpPort]:
    config, errors, _warnings = resolve(load_profile(f"default-{mechanism}"), {})
    assert not errors
    gm = PtpPort(config, GM_ID, LOCKED, BASE_NS)
    slave = slave_port(SlaveConfig(delay_mechanism=mechanism), SLAVE_ID, BASE_NS, random.Random(1))
    gm_end = End("10.0.0.1", gm_ahead_ns, gm.handle_rx, gm.handle_tx_timestamp, gm.handle_timer, gm.next_due_ns)
    slave_end = End("10.0.0.2", 0, slave.handle_rx, slave.handle_tx_timestamp, slave.handle_timer, slave.next_due_ns)
    link = Link(gm_end, slave_end, delay_ns, asymmetry_ns)
    link.emit(gm_end, gm.start(BASE_NS))
    link.emit(slave_end, slave.start(BASE_NS))
    return link, gm, slave


def locked_measurements(link: Link, slave: PtpPort, count: int = 8) -> list[PtpMeasurement]:
    link.run(LOCK_S)
    assert slave.state == SLAVE, slave.snapshot(link.now_ns)
    recent = link.since(link.now_ns - count * S)
    assert len(recent) >= count - 1
    return recent


@pytest.mark.parametrize("mechanism", ["e2e", "p2p"])
def test_the_slave_locks_to_the_grandmaster_and_measures_its_offset_and_the_link_delay(mechanism: str) -> None:
    link, gm, slave = connect(mechanism, gm_ahead_ns=1234, delay_ns=50_000)
    recent = locked_measurements(link, slave)
    assert gm.state == MASTER
    gm_port = port_identity_text(c.PortIdentity(GM_ID, 1))
    snap = slave.snapshot(link.now_ns)
    assert snap["master"] == gm_port and snap["grandmaster"]["identity"] == clock_identity_text(GM_ID)
    for m in recent:
        assert m.offset_ns == -1234 and m.path_delay_ns == 50_000  # local minus master
        assert (m.master, m.gm_identity, m.steps_removed, m.ptp_timescale) == (gm_port, clock_identity_text(GM_ID),
                                                                             0, True)
    seen = gm.snapshot(link.now_ns)
    assert seen["slaves_active"] == 1 and seen["slaves"][0]["port_identity"] == port_identity_text(slave.identity)
    assert seen["slaves"][0]["mechanism"] == mechanism
    if mechanism == "p2p":  # each end answers the other's Pdelay_Req: both know the link delay
        assert gm.peer_delay_ns == 50_000 and slave.counters["tx_pdelay_resp_follow_up"] >= 3
    assert "tx_timestamp_missing" not in gm.counters and "tx_timestamp_missing" not in slave.counters


@pytest.mark.parametrize("mechanism", ["e2e", "p2p"])
def test_an_asymmetric_link_shifts_the_offset_by_half_the_asymmetry(mechanism: str) -> None:
    """IEEE 1588-2019 assumes a symmetric path (7.4.2): 10 us more from master to slave than back reads as an
    offset 5 us larger (the master seems 5 us further behind) and a mean path delay 5 us over the shorter way."""
    link, _gm, slave = connect(mechanism, gm_ahead_ns=1234, delay_ns=40_000, asymmetry_ns=10_000)
    for m in locked_measurements(link, slave):
        assert m.offset_ns == -1234 + 5_000 and m.path_delay_ns == 45_000


def test_a_silent_grandmaster_is_given_up_after_the_announce_receipt_timeout_and_followed_again() -> None:
    link, _gm, slave = connect()
    locked_measurements(link, slave)
    link.gm.silent = True
    silent_since = link.now_ns
    while slave.state == SLAVE and link.now_ns - silent_since < 10 * S:
        link.run(0.1)
    # announceReceiptTimeout: 3 of its 2 s Announce intervals after the last Announce, which came 0-2 s before
    assert 4 * S < link.now_ns - silent_since <= 6 * S + S // 10
    assert slave.state == LISTENING and "announce receipt timeout" in slave.reason
    assert slave.snapshot(link.now_ns)["master"] is None and not link.since(silent_since)
    link.gm.silent = False
    recent = locked_measurements(link, slave)
    assert all(m.offset_ns == 0 for m in recent)


def test_the_grandmasters_clock_class_reaches_the_slaves_measurements() -> None:
    link, gm, slave = connect()
    assert {m.clock_class for m in locked_measurements(link, slave)} == {6}
    link.emit(link.gm, gm.update_view(HOLDOVER, link.now_ns))  # holdover: an Announce goes out at once
    changed = link.now_ns
    link.run(3)
    after = link.since(changed)
    assert after and after[-1].clock_class == 7 and after[-1].time_source == 0xA0
    assert slave.snapshot(link.now_ns)["grandmaster"]["clock_class"] == 7 and slave.state == SLAVE


@settings(max_examples=30, deadline=None)
@given(delay_ns=st.integers(0, 5_000_000), gm_ahead_ns=st.integers(-S, S), mechanism=st.sampled_from(["e2e", "p2p"]))
def test_any_symmetric_delay_and_offset_are_measured_within_2_ns(delay_ns: int, gm_ahead_ns: int,
                                                                 mechanism: str) -> None:
    link, _gm, slave = connect(mechanism, gm_ahead_ns=gm_ahead_ns, delay_ns=delay_ns)
    for m in locked_measurements(link, slave, count=3):
        assert abs(m.offset_ns + gm_ahead_ns) <= 2 and abs(m.path_delay_ns - delay_ns) <= 2
