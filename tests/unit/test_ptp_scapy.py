"""The PTP port against scapy's PTPv2 layer, an encoder and decoder written apart from the appliance's codec.

Frames scapy builds (Sync, Follow_Up, Delay_Req, Delay_Resp, Announce) go into the port, the grandmaster's and the
upstream reference's; what the port sends is read back with scapy and its fields checked.  Then scapy's ``fuzz()``
and field mutations of well-formed frames, a bounded number from fixed seeds: the port never raises, and every frame
the codec refuses is counted once as a malformed drop (``drop_<reason>``, PtpDecodeError.REASONS).

scapy's layer follows IEEE 1588-2008's field order but has no requestingPortIdentity (Delay_Resp: appended here as
raw octets), and names the flag bits of its 16-bit flagField with the two octets swapped (its "twoStepFlag" is
0x0002): the tests set and read the flag field as its value on the wire (two-step is 0x0200).
"""

from __future__ import annotations

import random
from typing import Any

from scapy.contrib.ptp_v2 import PTP
from scapy.packet import Raw, fuzz

from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.fsm import MASTER, PASSIVE, SLAVE, UNCALIBRATED
from appliance.protocol.ptp.measure import PtpMeasurement
from appliance.protocol.ptp.port import PtpPort
from appliance.protocol.ptp.port_common import Send
from appliance.refs.ptp_slave import SlaveConfig, slave_port
from tests.unit.test_ptp_port import OWN, make, run

S = 1_000_000_000
GM = 0x0200BBFFFE000002  # a foreign grandmaster / the slave's master, as scapy's XLongField holds it
SLAVE_ID = 0x0200CCFFFE000003
BASE_NS = 1_800_000_000 * S
SRC = ("10.0.0.9", 320)
TWO_STEP, UNICAST, PTP_TIMESCALE, UTC_OFFSET_VALID = 0x0200, 0x0400, 0x0008, 0x0004  # flagField on the wire
FUZZED = 400  # frames per fuzz test


def seconds_ns(ts_ns: int) -> dict[str, int]:
    return {"seconds": ts_ns // S, "nanoseconds": ts_ns % S}


def ts(pkt: PTP, name: str) -> int:
    return getattr(pkt, f"{name}_seconds") * S + getattr(pkt, f"{name}_nanoseconds")


def header(message_type: int, seq: int, clock: int = GM, flags: int = 0, log: int = 0, domain: int = 0,
           control: int = 5) -> dict[str, Any]:
    return {"messageType": message_type, "version": 2, "domainNumber": domain, "flags": flags, "clockIdentity": clock,
            "portNumber": 1, "sequenceId": seq, "controlField": control, "logMessageInterval": log & 0xFF}


def announce(seq: int, clock_class: int = 6, priority1: int = 128) -> bytes:
    return bytes(PTP(**header(0xB, seq, flags=PTP_TIMESCALE | UTC_OFFSET_VALID, log=1),
                     originTimestamp_seconds=0, originTimestamp_nanoseconds=0, currentUtcOffset=37,
                     grandmasterPriority1=priority1, grandmasterClockClass=clock_class,
                     grandmasterClockAccuracy=0x21, grandmasterClockVariance=0x4E5D, grandmasterPriority2=128,
                     grandmasterIdentity=GM, stepsRemoved=0, timeSource=0x20))


def sync(seq: int, origin_ns: int = 0, two_step: bool = True) -> bytes:
    t = seconds_ns(origin_ns)
    return bytes(PTP(**header(0x0, seq, flags=(TWO_STEP if two_step else 0) | PTP_TIMESCALE, control=0),
                     originTimestamp_seconds=t["seconds"], originTimestamp_nanoseconds=t["nanoseconds"]))


def follow_up(seq: int, precise_ns: int) -> bytes:
    t = seconds_ns(precise_ns)
    return bytes(PTP(**header(0x8, seq, flags=PTP_TIMESCALE, control=2),
                     preciseOriginTimestamp_seconds=t["seconds"], preciseOriginTimestamp_nanoseconds=t["nanoseconds"]))


def delay_req(seq: int, clock: int = SLAVE_ID) -> bytes:
    return bytes(PTP(**header(0x1, seq, clock=clock, log=0x7F, control=1), originTimestamp_seconds=0,
                     originTimestamp_nanoseconds=0))


def delay_resp(seq: int, receive_ns: int, requester: c.PortIdentity) -> bytes:
    t = seconds_ns(receive_ns)
    pkt = PTP(**header(0x9, seq, control=3), receiveTimestamp_seconds=t["seconds"],
              receiveTimestamp_nanoseconds=t["nanoseconds"]) / Raw(requester.clock_identity
                                                                   + requester.port_number.to_bytes(2, "big"))
    raw = bytearray(bytes(pkt))
    raw[2:4] = len(raw).to_bytes(2, "big")  # messageLength counts the requestingPortIdentity scapy does not know
    return bytes(raw)


def master() -> PtpPort:
    port = make()
    run(port, 7 * S)
    assert port.state == MASTER
    return port


def malformed(port: PtpPort) -> int:
    return sum(port.counters.get("drop_" + reason, 0) for reason in c.PtpDecodeError.REASONS)


# --- well-formed frames in, the port's frames out ----------------------------------------------------------------
def test_the_grandmasters_announce_sync_and_follow_up_read_in_scapy() -> None:
    port = make()
    sent: list[tuple[PTP, int | None]] = []
    for t in range(0, 8 * S, 10_000_000):
        for action in port.handle_timer(t, BASE_NS + t):
            sent.append((PTP(action.data), None))
            if action.token is not None:
                sent += [(PTP(f.data), BASE_NS + t + 123)
                         for f in port.handle_tx_timestamp(action.token, BASE_NS + t + 123)]
    announce_pkt = next(p for p, _ in sent if p.messageType == 0xB)
    assert (announce_pkt.grandmasterClockClass, announce_pkt.grandmasterClockAccuracy) == (6, 0x21)
    assert announce_pkt.grandmasterIdentity == int.from_bytes(OWN, "big") == announce_pkt.clockIdentity
    assert announce_pkt.currentUtcOffset == 37 and announce_pkt.timeSource == 0x20
    assert int(announce_pkt.flags) & (PTP_TIMESCALE | UTC_OFFSET_VALID) == PTP_TIMESCALE | UTC_OFFSET_VALID
    assert announce_pkt.messageLength == len(bytes(announce_pkt)) == 64 and announce_pkt.logMessageInterval == 1
    syncs = {p.sequenceId: p for p, _ in sent if p.messageType == 0x0}
    follow_ups = [(p, tx) for p, tx in sent if p.messageType == 0x8]
    assert syncs and follow_ups
    for fup, tx_ns in follow_ups:
        assert int(syncs[fup.sequenceId].flags) & TWO_STEP and syncs[fup.sequenceId].controlField == 0
        assert ts(fup, "preciseOriginTimestamp") == tx_ns and fup.controlField == 2


def test_a_scapy_delay_req_is_answered_with_a_delay_resp_scapy_reads() -> None:
    port = master()
    [answer] = port.handle_rx(delay_req(77), ("10.0.0.2", 319), BASE_NS + 555, 8 * S)
    pkt = PTP(answer.data)
    assert pkt.messageType == 0x9 and pkt.sequenceId == 77 and pkt.controlField == 3
    assert ts(pkt, "receiveTimestamp") == BASE_NS + 555 and pkt.clockIdentity == int.from_bytes(OWN, "big")
    assert bytes(pkt.payload) == SLAVE_ID.to_bytes(8, "big") + b"\x00\x01"  # requestingPortIdentity
    assert port.snapshot(8 * S)["slaves_seen"] == 1


def test_better_scapy_announces_make_the_grandmaster_passive() -> None:
    port = master()
    for seq, t in ((1, 8), (2, 9)):
        port.handle_rx(announce(seq, priority1=1), SRC, None, t * S)
    assert port.state == PASSIVE and port.snapshot(9 * S)["foreign_masters"][0]["grandmaster"] == f"{GM:016x}"


def test_the_reference_port_follows_and_measures_a_scapy_master() -> None:
    slave = slave_port(SlaveConfig(), bytes.fromhex("0200ddfffe000004"), 0, random.Random(1))
    slave.start(0)
    slave.handle_rx(announce(1), SRC, None, 0)
    slave.handle_rx(announce(2), SRC, None, S)
    assert slave.state == UNCALIBRATED
    offset_ns, delay_ns, t1 = 2_500, 40_000, BASE_NS
    slave.handle_rx(sync(10), ("10.0.0.9", 319), t1 + delay_ns + offset_ns, S)
    slave.handle_rx(follow_up(10, t1), SRC, None, S)
    measurements: list[PtpMeasurement] = []
    t = S
    for n in range(4):
        slave.handle_rx(announce(3 + n), SRC, None, t)  # the master announces on
        sent: list[Any] = []
        while not sent:  # the slave's next Delay_Req
            t = slave.next_due_ns() or t
            sent = [a for a in slave.handle_timer(t, t) if isinstance(a, Send)]
        [req] = sent
        pkt = PTP(req.data)
        assert pkt.messageType == 0x1 and pkt.controlField == 1 and pkt.logMessageInterval == 0x7F
        t3 = BASE_NS + n * S + 500_000
        slave.handle_tx_timestamp(req.token, t3 + offset_ns)
        requester = c.PortIdentity(pkt.clockIdentity.to_bytes(8, "big"), pkt.portNumber)
        slave.handle_rx(delay_resp(pkt.sequenceId, t3 + delay_ns, requester), SRC, None, t)
        one_step = t3 + S // 2
        measurements += slave.handle_rx(sync(20 + n, one_step, two_step=False), ("10.0.0.9", 319),
                                        one_step + delay_ns + offset_ns, t)
    assert slave.state == SLAVE and [m.offset_ns for m in measurements] == [offset_ns] * 4
    assert slave.path_delay_ns == delay_ns and malformed(slave) == 0


# --- fuzzed and mutated frames ------------------------------------------------------------------------------------
def _feed(port: PtpPort, frames: list[bytes], now_ns: int) -> tuple[int, int]:
    """Each frame into the port (never raising); (refused by the codec, counted malformed by the port)."""
    refused = 0
    before = malformed(port)
    for data in frames:
        try:
            c.decode(data)
        except c.PtpDecodeError:
            refused += 1
        port.handle_rx(data, SRC, BASE_NS, now_ns)
        port.handle_timer(now_ns, BASE_NS)
    return refused, malformed(port) - before


def _fuzzed(seed: int) -> list[bytes]:
    """scapy's fuzz(): every field it is not given random; a third of the frames are given only their messageType, a
    third also versionPTP 2.1, a third also majorSdoId and domain 0 (those reach the port's handlers)."""
    random.seed(seed)  # scapy's random field values come from the random module
    kinds = [0x0, 0x1, 0x8, 0x9, 0xB, 0xC, 0xD, 0x2, 0x3, 0xA, 0x4, 0xF]
    v2 = {"version": 2, "reserved1": 1}  # scapy's reserved1 is minorVersionPTP (IEEE 1588-2019 13.3.2.4)
    given = [{}, v2, {**v2, "transportSpecific": 0, "domainNumber": 0}]
    return [bytes(fuzz(PTP(messageType=kinds[n % len(kinds)], **given[n // len(kinds) % 3]))) for n in range(FUZZED)]


def _mutated(seed: int) -> list[bytes]:
    """Well-formed frames with one field set to a random value, an octet flipped, or cut short."""
    rng = random.Random(seed)
    good = [announce(1), sync(2, BASE_NS), follow_up(3, BASE_NS), delay_req(4), delay_resp(5, BASE_NS,
                                                                                           c.PortIdentity(OWN, 1))]
    bits = {"version": 4, "messageLength": 16, "messageType": 4, "domainNumber": 8, "flags": 16, "controlField": 8,
            "logMessageInterval": 8, "transportSpecific": 4, "reserved1": 4}
    out = []
    for n in range(FUZZED):
        base = rng.choice(good)
        how = n % 3
        if how == 0:
            pkt = PTP(base)
            name = rng.choice(sorted(bits))
            setattr(pkt, name, rng.randrange(1 << bits[name]))
            out.append(bytes(pkt))
        elif how == 1:
            data = bytearray(base)
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            out.append(bytes(data))
        else:
            out.append(base[:rng.randrange(len(base))])
    return out


def both_uses() -> list[PtpPort]:
    """The grandmaster, MASTER, and the reference's port, listening."""
    slave = slave_port(SlaveConfig(), bytes.fromhex("0200ddfffe000004"), 0, random.Random(1))
    slave.start(0)
    return [master(), slave]


def test_fuzzed_frames_never_raise_and_each_refused_one_is_counted_malformed() -> None:
    for port in both_uses():
        refused, counted = _feed(port, _fuzzed(1588), 9 * S)
        assert refused == counted and FUZZED // 3 <= refused < FUZZED
        assert sum(n for name, n in port.counters.items() if name.startswith("rx_")) >= FUZZED // 10


def test_mutated_frames_never_raise_and_each_refused_one_is_counted_malformed() -> None:
    for port in both_uses():
        refused, counted = _feed(port, _mutated(2019), 9 * S)
        assert refused == counted and FUZZED // 3 <= refused < FUZZED  # the truncated third, some of the others
