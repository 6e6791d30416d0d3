"""The PTP port against itself over an in-memory link, h11 style: the grandmaster's port and a slaveOnly port of the
same engine exchange their real encoded frames; no sockets, no threads.

A small discrete-event loop owns true time.  The grandmaster's clock reads true time plus ``gm_ahead_ns``; the
slave's local clock reads true time plus its own offset.  A frame leaves its sender ``TX_LATENCY_NS`` after the port
asked for it (so a Sync's originTimestamp, an estimate, is off and only the Follow_Up's preciseOriginTimestamp is
right), reaches the other end after its direction's one-way delay and is stamped there on the receiver's clock; the
sender of an event message gets its transmit timestamp back, on its own clock, for the instant the frame left.  The
slave's measured offset is local minus master: a grandmaster 1234 ns ahead reads -1234.

Two kinds of slave: the upstream reference's own port (refs/ptp_slave.py, default profiles), and, for every packaged
profile, the profile's port configured slaveOnly (``profile_slave``).  Neither steers its clock (the appliance's DPLL
does that with the measurements): a slave is locked when it is in SLAVE and reads the master's time -- its own clock
minus the measured offset -- within a few nanoseconds of the truth.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp import gptp, smpte
from appliance.protocol.ptp.fsm import LISTENING, MASTER, SLAVE
from appliance.protocol.ptp.measure import PtpMeasurement
from appliance.protocol.ptp.port import PtpPort
from appliance.protocol.ptp.port_common import Send, clock_identity_text, port_identity_text
from appliance.protocol.ptp.profiles import PROFILE_NAMES, PortConfig, load_profile, resolve
from appliance.refs.ptp_slave import SLAVE_ONLY_VIEW, SlaveConfig, slave_port

S = 1_000_000_000
BASE_NS = 1_700_000_000 * S  # true time (TAI) when both ports start
GM_ID, SLAVE_ID = bytes.fromhex("0200aafffe000001"), bytes.fromhex("0200ccfffe000003")
GM_AT, SLAVE_AT = "10.0.0.1", "10.0.0.2"
TX_LATENCY_NS = 3_000  # from the port's request to the frame on the wire
LOCK_S = 30  # the grandmaster listens 6 s, the slave qualifies it in two Announces and fills its delay filter
LOCKED = GrandmasterView(clock_class=6, clock_accuracy=0x21, offset_scaled_log_variance=0x4E5D, time_source=0x20,
                         current_utc_offset=37, utc_offset_valid=True, time_traceable=True, frequency_traceable=True,
                         error_bound_ns=40, state="LOCKED")
HOLDOVER = dataclasses.replace(LOCKED, clock_class=7, time_source=0xA0, state="HOLDOVER")
PROFILE_SETTINGS: dict[str, dict[str, Any]] = {"c37.238": {"grandmaster_id": 3}}


@dataclass
class End:
    """One end of the link: a port and its clock (true time + ``offset_ns``)."""

    address: str
    offset_ns: int
    port: PtpPort
    silent: bool = False  # what it sends is lost

    def clock(self, true_ns: int) -> int:
        return true_ns + self.offset_ns


@dataclass
class Link:
    """Two ends, a one-way delay each way (the master-to-slave one ``asymmetry_ns`` longer), one event queue."""

    gm: End
    slave: End
    delay_ns: int
    asymmetry_ns: int = 0
    now_ns: int = BASE_NS
    measurements: list[tuple[int, PtpMeasurement]] = field(default_factory=list)  # (true time, measurement)
    frames: list[tuple[str, bytes, c.Message]] = field(default_factory=list)  # (sender's address, what it sent)
    _queue: list[tuple[int, int, Callable[[], list[Any]], End]] = field(default_factory=list)
    _order: itertools.count = field(default_factory=itertools.count)

    def emit(self, sender: End, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, PtpMeasurement):
                self.measurements.append((self.now_ns, action))
            elif not sender.silent:
                self._send(sender, action)

    def _send(self, sender: End, send: Send) -> None:
        receiver = self.slave if sender is self.gm else self.gm
        self.frames.append((sender.address, send.data, c.decode(send.data)))
        leave_ns = self.now_ns + TX_LATENCY_NS
        arrive_ns = leave_ns + self.delay_ns + (self.asymmetry_ns if sender is self.gm else 0)
        source = (sender.address, 319 if send.event else 320)
        self._at(arrive_ns, receiver,
                 lambda: receiver.port.handle_rx(send.data, source, receiver.clock(arrive_ns), arrive_ns))
        if send.token is not None:
            token = send.token
            self._at(leave_ns, sender, lambda: sender.port.handle_tx_timestamp(token, sender.clock(leave_ns)))

    def _at(self, at_ns: int, end: End, call: Callable[[], list[Any]]) -> None:
        heapq.heappush(self._queue, (at_ns, next(self._order), call, end))

    def run(self, for_s: float) -> None:
        """Deliver frames and timestamps and fire both ports' timers, in time order, for ``for_s`` seconds."""
        until_ns = self.now_ns + int(for_s * S)
        for _ in range(10_000_000):
            dues = [d for d in (self.gm.port.next_due_ns(), self.slave.port.next_due_ns()) if d is not None]
            t = min(dues + ([self._queue[0][0]] if self._queue else []), default=None)
            if t is None or t > until_ns:
                self.now_ns = until_ns
                return
            self.now_ns = max(self.now_ns, t)
            if self._queue and self._queue[0][0] <= self.now_ns:
                _, _, call, end = heapq.heappop(self._queue)
                self.emit(end, call())
                continue
            for end in (self.gm, self.slave):
                due = end.port.next_due_ns()
                if due is not None and due <= self.now_ns:
                    self.emit(end, end.port.handle_timer(self.now_ns, end.clock(self.now_ns)))
        raise AssertionError("the link never went quiet")

    def since(self, true_ns: int) -> list[PtpMeasurement]:
        return [m for at, m in self.measurements if at >= true_ns]

    def kinds(self, sender: str) -> Counter[str]:
        return Counter(type(m).__name__ for who, _data, m in self.frames if who == sender)


def profile_config(profile: str) -> PortConfig:
    config, errors, _warnings = resolve(load_profile(profile), PROFILE_SETTINGS.get(profile, {}))
    assert not errors
    return config


def profile_slave(config: PortConfig) -> PortConfig:
    """The profile's port as a slaveOnly one: follows, never masters; asks the grandmaster for unicast if the
    profile negotiates."""
    return dataclasses.replace(config, slave_only=True, master_only=False, management="off",
                               unicast_masters=((GM_AT, 320),) if config.unicast_negotiation else ())


def join(gm: PtpPort, slave: PtpPort, gm_ahead_ns: int, slave_ahead_ns: int, delay_ns: int,
         asymmetry_ns: int = 0) -> Link:
    gm_end, slave_end = End(GM_AT, gm_ahead_ns, gm), End(SLAVE_AT, slave_ahead_ns, slave)
    link = Link(gm_end, slave_end, delay_ns, asymmetry_ns)
    link.emit(gm_end, gm.start(BASE_NS))
    link.emit(slave_end, slave.start(BASE_NS))
    return link


def connect(mechanism: str = "e2e", gm_ahead_ns: int = 0, delay_ns: int = 50_000,
            asymmetry_ns: int = 0) -> tuple[Link, PtpPort, PtpPort]:
    """The grandmaster on the default profile against the upstream reference's own port."""
    gm = PtpPort(profile_config(f"default-{mechanism}"), GM_ID, LOCKED, BASE_NS)
    slave = slave_port(SlaveConfig(delay_mechanism=mechanism), SLAVE_ID, BASE_NS, random.Random(1))
    return join(gm, slave, gm_ahead_ns, 0, delay_ns, asymmetry_ns), gm, slave


def locked_measurements(link: Link, slave: PtpPort, count: int = 8) -> list[PtpMeasurement]:
    link.run(LOCK_S)
    assert slave.state == SLAVE, slave.snapshot(link.now_ns)
    recent = link.since(link.now_ns - count * S)
    assert len(recent) >= count - 1
    return recent


# --- the grandmaster and the upstream reference's port --------------------------------------------------------------
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


# --- the engine against itself, in every profile ------------------------------------------------------------------
# What each profile must put on the wire, by sender, beyond Announce, Sync and Follow_Up from the grandmaster.
FLOWS = {"e2e": ({"DelayResp"}, {"DelayReq"}), "p2p": ({"PdelayReq", "PdelayResp", "PdelayRespFollowUp"},
                                                     {"PdelayReq", "PdelayResp", "PdelayRespFollowUp"})}


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_in_every_profile_a_slave_of_the_same_engine_locks_to_the_grandmaster(profile: str) -> None:
    config = profile_config(profile)
    gm = PtpPort(config, GM_ID, LOCKED, BASE_NS)
    slave = PtpPort(profile_slave(config), SLAVE_ID, SLAVE_ONLY_VIEW, BASE_NS, rng=random.Random(1))
    # 500 ns each way: under 802.1AS's neighborPropDelayThresh (800 ns), so that a gPTP link is asCapable
    link = join(gm, slave, gm_ahead_ns=5_000_000, slave_ahead_ns=-3_000_123, delay_ns=500)
    link.run(LOCK_S)
    assert gm.state == MASTER and slave.state == SLAVE, (gm.snapshot(link.now_ns), slave.snapshot(link.now_ns))
    recent = link.since(link.now_ns - 5 * S)
    assert len(recent) >= 5 and all(abs(m.path_delay_ns - 500) <= 2 for m in recent)
    for m in recent:  # the master's time as the slave reads it, against the master's clock at that instant
        true_ns = m.rx_local_ns - link.slave.offset_ns
        assert abs((m.rx_local_ns - m.offset_ns) - link.gm.clock(true_ns)) <= 2

    from_gm, from_slave = link.kinds(GM_AT), link.kinds(SLAVE_AT)
    gm_flow, slave_flow = FLOWS[config.delay_mechanism]
    assert {"Announce", "Sync", "FollowUp"} | gm_flow <= set(from_gm), from_gm
    assert slave_flow <= set(from_slave) and not {"Announce", "Sync"} & set(from_slave), from_slave
    assert from_gm["Sync"] >= (LOCK_S - 8) * S // int(S * 2.0 ** config.log_sync_interval)
    gm_frames = [m for who, _data, m in link.frames if who == GM_AT]
    assert all(m.header.domain == config.domain for m in gm_frames)
    if config.unicast_negotiation:  # G.8275.2: everything unicast, after grants for Announce, Sync and Delay_Resp
        assert from_slave["Signaling"] >= 2 and from_gm["Signaling"] >= 2
        assert all(m.header.flags & c.FLAG_UNICAST for m in gm_frames if not isinstance(m, c.Signaling))
        assert gm.snapshot(link.now_ns)["unicast_clients"] == 1 and slave.counters["rx_signaling"] >= 2
    if config.smpte_tlv:  # ST 2059-2's synchronization metadata, every second
        metadata = [m for m in gm_frames if isinstance(m, c.Management)]
        assert len(metadata) >= LOCK_S - 5 and metadata[-1].tlvs[0].organization_id == smpte.SMPTE_OUI
        assert slave.counters["rx_management"] == len(metadata)
    if config.c37238_tlv:  # the power profile's TLV in every Announce
        assert all(c.parse_c37238_2017_tlv(m.tlvs[0]) == (3, 40) for m in gm_frames if isinstance(m, c.Announce))
    if config.major_sdo_id:  # 802.1AS: majorSdoId 1 on everything, the Follow_Up information TLV, an asCapable link
        assert all(data[0] >> 4 == 1 for _who, data, _m in link.frames)
        assert gm.snapshot(link.now_ns)["gptp"]["as_capable"] and "drop_other_sdo" not in slave.counters
        assert all(m.tlvs and m.tlvs[0].organization_id == gptp.IEEE_8021_OUI
                   for m in gm_frames if isinstance(m, c.FollowUp))
    assert "tx_timestamp_missing" not in gm.counters and "tx_timestamp_missing" not in slave.counters
