"""The native unicast Sync sender (edge/ptp/_syncsend.c) over loopback: Syncs at their slots, each one's Follow_Up
with its kernel transmit time on the served clock, sequenceIds that wrap, the lateness histogram the port shows, and
nothing sent once a stream is removed or the port is not MASTER.  Bad arguments are refused with a clear error."""

from __future__ import annotations

import socket
import time

import pytest

from appliance.edge.ptp import native_sync
from appliance.edge.ptp.transport import SO_TIMESTAMPING, SOF_OPT_ID, SOF_OPT_TSONLY, _flags
from appliance.outputs.ptp.lateness import SyncLateness
from appliance.protocol.ptp import codec as c

if not native_sync.available():
    pytest.fail("the native Sync sender was not built (pip install -e . builds it)")

from appliance.edge.ptp._syncsend import SyncSender  # noqa: E402

TAI_AHEAD_NS = 37_000_000_000
IDENTITY = c.PortIdentity(bytes.fromhex("0011223344556677"), 1)


def _udp(timestamps: bool = False) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if timestamps:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, _flags(False, True) | SOF_OPT_ID | SOF_OPT_TSONLY)
    sock.bind(("127.0.0.1", 0))
    return sock


class Rig:
    def __init__(self) -> None:
        self.event, self.general = _udp(timestamps=True), _udp()
        self.rx_event, self.rx_general = _udp(), _udp()
        for sock in (self.rx_event, self.rx_general):
            sock.settimeout(2.0)
        self.sender = SyncSender(self.event.fileno(), self.general.fileno(), 0,
                                 event_port=self.rx_event.getsockname()[1],
                                 general_port=self.rx_general.getsockname()[1])
        self.sender.set_map(True, 0, TAI_AHEAD_NS, 0.0)  # served = host CLOCK_REALTIME + 37 s

    def templates(self, log_interval: int) -> tuple[bytes, bytes]:
        sync = c.encode_timestamped(c.MsgType.SYNC, 44, IDENTITY, 0, c.FLAG_TWO_STEP | c.FLAG_UNICAST, log_interval, 0)
        fup = c.encode_timestamped(c.MsgType.FOLLOW_UP, 44, IDENTITY, 0, c.FLAG_UNICAST, log_interval, 0)
        return sync, fup

    def add(self, step_ns: int, seq: int = 0, log_interval: int = -4) -> int:
        sync, fup = self.templates(log_interval)
        return self.sender.add(("127.0.0.1", 40000), sync, fup, step_ns, time.monotonic_ns(), seq)

    def read(self, sock: socket.socket, n: int) -> list[c.Message]:
        return [c.decode(sock.recv(1500)) for _ in range(n)]

    def quiet_for(self, seconds: float) -> bool:
        for sock in (self.rx_event, self.rx_general):
            sock.settimeout(seconds)
            try:
                sock.recv(1500)
                return False
            except TimeoutError:
                pass
        return True

    def close(self) -> None:
        self.sender.close()
        for sock in (self.event, self.general, self.rx_event, self.rx_general):
            sock.close()


@pytest.fixture
def rig():
    r = Rig()
    yield r
    r.close()


def _take_until(rig: Rig, done, timeout_s: float = 2.0) -> dict:
    """The sender counts a Follow_Up after its send returns, which can be after the datagram was read here."""
    total: dict = {}
    deadline = time.monotonic() + timeout_s
    while True:
        taken = rig.sender.take()
        for name, value in taken.items():
            if name == "late_bins":
                total.setdefault(name, []).extend(value)
            elif isinstance(value, int) and not isinstance(value, bool) and name not in ("streams", "awaited"):
                total[name] = max(total.get(name, 0), value) if name == "late_max_ns" else total.get(name, 0) + value
            else:
                total[name] = value
        if done(total) or time.monotonic() > deadline:
            return total
        time.sleep(0.01)


def test_syncs_at_their_slots_with_follow_ups_carrying_the_served_transmit_time(rig: Rig) -> None:
    step_ns = 20_000_000
    rig.add(step_ns, seq=65534)
    before = time.time_ns()
    rig.sender.set_active(True)
    syncs, fups = rig.read(rig.rx_event, 5), rig.read(rig.rx_general, 5)
    after = time.time_ns()
    assert [m.header.sequence_id for m in syncs] == [65534, 65535, 0, 1, 2]
    assert [m.header.sequence_id for m in fups] == [65534, 65535, 0, 1, 2]
    for m in syncs:
        assert m.header.message_type == c.MsgType.SYNC and m.header.flags & c.FLAG_TWO_STEP
        assert m.header.source_port == IDENTITY and m.header.domain == 44 and m.header.log_interval == -4
    precise = [m.precise_origin_ts_ns for m in fups]
    assert all(before + TAI_AHEAD_NS <= t <= after + TAI_AHEAD_NS for t in precise)
    gaps = [b - a for a, b in zip(precise, precise[1:])]
    # The slots are 20 ms apart; each Sync leaves at its slot or after it, never before.
    assert sum(gaps) >= 3 * step_ns, gaps
    taken = _take_until(rig, lambda t: t["follow_ups"] >= 5)
    assert taken["syncs"] >= 5 and taken["follow_ups"] >= 5 and taken["streams"] == 1
    assert taken["late_count"] == taken["follow_ups"] and taken["send_errors"] == 0
    lateness = SyncLateness()
    lateness.merge(taken["late_bins"], taken["late_count"], taken["late_over_1ms"], taken["late_max_ns"])
    assert lateness.count == taken["late_count"] and lateness.snapshot()["max_us"] == taken["late_max_ns"] / 1000
    # Of the Syncs over 1 ms late, those the thread was held off its CPU for: never more than those late, and the
    # time held is never negative (wall time not covered by the thread's own CPU time).
    assert 0 <= taken["late_over_1ms_held"] <= taken["late_over_1ms"] and taken["held_max_ns"] >= 0


def test_nothing_is_sent_while_inactive_or_after_the_stream_is_removed(rig: Rig) -> None:
    index = rig.add(10_000_000, seq=7)
    assert rig.quiet_for(0.1)  # not MASTER yet
    rig.sender.set_active(True)
    assert rig.read(rig.rx_event, 1)[0].header.sequence_id == 7
    sent, next_seq, _slot = rig.sender.remove(index)
    assert sent >= 1 and next_seq == (7 + sent) & 0xFFFF
    for sock in (rig.rx_event, rig.rx_general):  # what was in flight before the removal
        sock.setblocking(False)
        try:
            while sock.recv(1500):
                pass
        except BlockingIOError:
            pass
    assert rig.quiet_for(0.1)
    assert rig.sender.take()["streams"] == 0


def test_without_a_clock_map_nothing_is_sent(rig: Rig) -> None:
    rig.sender.set_map(False, 0, 0, 0.0)
    rig.add(10_000_000)
    rig.sender.set_active(True)
    assert rig.quiet_for(0.1)


def test_bad_arguments_are_refused_clearly(rig: Rig) -> None:
    sync, fup = rig.templates(0)
    with pytest.raises(ValueError, match="44-octet"):
        rig.sender.add(("127.0.0.1", 1), sync[:10], fup, 1_000_000_000, 0, 0)
    with pytest.raises(ValueError, match="not an IP address"):
        rig.sender.add(("no-such-host", 1), sync, fup, 1_000_000_000, 0, 0)
    with pytest.raises(ValueError, match="step"):
        rig.sender.add(("127.0.0.1", 1), sync, fup, 0, 0, 0)
    with pytest.raises(KeyError):
        rig.sender.remove(12345)
    with pytest.raises(ValueError, match="ports"):
        SyncSender(rig.event.fileno(), rig.general.fileno(), 0, event_port=0)


def test_many_streams_each_get_their_syncs(rig: Rig) -> None:
    step_ns = 50_000_000
    for i in range(200):
        rig.add(step_ns, seq=i * 100)
    rig.sender.set_active(True)
    seen: dict[int, set[int]] = {}
    for m in rig.read(rig.rx_event, 600):
        seen.setdefault(m.header.sequence_id // 100, set()).add(m.header.sequence_id)
    assert len(seen) == 200  # every stream sent


def _announce(clock_class: int, log_interval: int = -3) -> bytes:
    header = c.Header(c.MsgType.ANNOUNCE, 44, IDENTITY, 0, flags=c.FLAG_UNICAST, log_interval=log_interval)
    return c.encode(c.Announce(header, 0, 37, 128, c.ClockQuality(clock_class, 0x21, 0x4E5D), 128,
                               IDENTITY.clock_identity, 0, 0x20))


def test_announce_streams_send_the_current_template_to_the_general_port(rig: Rig) -> None:
    rig.sender.add(("127.0.0.1", 40000), None, -3, 20_000_000, time.monotonic_ns(), 65535)
    rig.sender.set_active(True)
    assert rig.quiet_for(0.1)  # no template for the interval yet: nothing to say
    rig.sender.set_announce(-3, _announce(6))
    first = rig.read(rig.rx_general, 2)
    assert all(isinstance(m, c.Announce) and m.gm_clock_quality.clock_class == 6 for m in first)
    assert first[1].header.sequence_id == (first[0].header.sequence_id + 1) & 0xFFFF
    assert first[0].origin_ts_ns > 0
    rig.sender.set_announce(-3, _announce(7))
    later = rig.read(rig.rx_general, 3)
    assert later[-1].gm_clock_quality.clock_class == 7
    assert _take_until(rig, lambda t: t["announces"] >= 5)["announces"] >= 5


def test_bad_announce_arguments_are_refused(rig: Rig) -> None:
    with pytest.raises(ValueError, match="-8..7"):
        rig.sender.add(("127.0.0.1", 1), None, 9, 1_000_000_000, 0, 0)
    with pytest.raises(ValueError, match="octets"):
        rig.sender.set_announce(0, b"short")
    with pytest.raises(ValueError, match="octets"):
        rig.sender.set_announce(12, _announce(6))
