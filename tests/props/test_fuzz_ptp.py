"""Fuzzing what PTP input reaches beyond the codec: the port engines, the management bodies and the profile files.

``test_ptp_codec_props.py`` already holds the codec itself (round trips, random, header-shaped, TLV-shaped and
mutated bytes: nothing but PtpDecodeError).  Here decoded frames go on to where they act: the grandmaster port
(``PtpPort.handle_rx``) in each packaged profile, already MASTER, with management GET/SET and unicast negotiation
on; and the same port slaveOnly, as the upstream reference runs it, already following a master.  Each is fed a
session of messages from a couple of peers (valid messages with arbitrary field values, some mutated), timers and
transmit timestamps in between.  Contract: they raise nothing, and everything they send is a message the codec
decodes, from our own port identity.  Also: a management TLV's data set body either unpacks or raises
PtpDecodeError("tlv"), and ``parse_profile`` of a mutated profile file returns a Profile or raises ValueError.
Budget: ``fuzzing.py``.
"""

from __future__ import annotations

import copy
import random
from importlib import resources
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.protocol.ptp.fsm import MASTER
from appliance.protocol.ptp.port import PtpPort
from appliance.protocol.limits import AccessRules
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.port_common import Send
from appliance.protocol.ptp.profiles import PROFILE_NAMES, load_profile, parse_profile, resolve
from appliance.protocol.ptp.fsm import UNCALIBRATED
from appliance.protocol.ptp.measure import PtpMeasurement
from appliance.refs.ptp_slave import SlaveConfig, slave_port
from tests.props.fuzzing import fuzz, mutated, mutated_text

S = 1_000_000_000
OWN = bytes.fromhex("0200aafffe000001")
GM_A, GM_B = bytes.fromhex("0200bbfffe000002"), bytes.fromhex("0200ccfffe000003")
PEERS = [GM_A, GM_B, OWN, b"\xff" * 8]
LOCKED = GrandmasterView(clock_class=6, clock_accuracy=0x21, offset_scaled_log_variance=0x4E5D, time_source=0x20,
                         current_utc_offset=37, utc_offset_valid=True, time_traceable=True, frequency_traceable=True,
                         error_bound_ns=40, state="LOCKED")
# Where a message came from, as each transport reports it: (address, port) over UDP, the MAC over Ethernet.
UDP_SOURCES = [("10.0.0.2", 319), ("10.0.0.3", 320), ("192.0.2.9", 320), ("fe80::2", 319)]
L2_SOURCES = [b"\x02\x00\xbb\x00\x00\x02", b"\x02\x00\xcc\x00\x00\x03"]
BASE_NS = 1_800_000_000 * S

u8, u16, u32 = st.integers(0, 0xFF), st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFFFF)
i8, i16, i64 = st.integers(-128, 127), st.integers(-(2**15), 2**15 - 1), st.integers(-(2**63), 2**63 - 1)
# Timestamps near now, and anywhere on the wire's range; sequenceIds and log intervals where they collide and match.
stamps = st.one_of(st.integers(BASE_NS - 10 * S, BASE_NS + 10 * S), st.integers(0, 2**48 * S - 1))
seqs = st.one_of(st.integers(0, 4), u16)
logs = st.one_of(st.integers(-7, 7), st.just(0x7F), i8)
corrections = st.one_of(st.integers(-(10**6) << 16, (10**6) << 16), i64)
flags = st.one_of(st.sampled_from([0, c.FLAG_TWO_STEP, c.FLAG_UNICAST, c.FLAG_PTP_TIMESCALE | c.FLAG_UTC_OFFSET_VALID,
                                   c.FLAG_TWO_STEP | c.FLAG_PTP_TIMESCALE | c.FLAG_UNICAST]), u16)
identities = st.one_of(st.sampled_from(PEERS), st.binary(min_size=8, max_size=8))
ports = st.builds(c.PortIdentity, identities, st.one_of(st.just(1), u16))
our_ports = st.one_of(st.just(c.PortIdentity(OWN, 1)), st.just(c.PortIdentity(b"\xff" * 8, 0xFFFF)), ports)
msg_types = st.sampled_from(list(c.MsgType))
MANAGEMENT_IDS = [c.NULL_MANAGEMENT, c.CLOCK_DESCRIPTION, c.DEFAULT_DATA_SET, c.CURRENT_DATA_SET, c.PARENT_DATA_SET,
                  c.TIME_PROPERTIES_DATA_SET, c.PORT_DATA_SET, c.PRIORITY1, c.PRIORITY2, c.DOMAIN, c.SLAVE_ONLY,
                  c.PATH_TRACE_LIST, c.PATH_TRACE_ENABLE, c.LOG_ANNOUNCE_INTERVAL, c.DELAY_MECHANISM]
BODY_TYPES = {c.DEFAULT_DATA_SET: c.DefaultDataSetBody, c.CURRENT_DATA_SET: c.CurrentDataSetBody,
              c.PARENT_DATA_SET: c.ParentDataSetBody, c.TIME_PROPERTIES_DATA_SET: c.TimePropertiesDataSetBody,
              c.PORT_DATA_SET: c.PortDataSetBody, c.PRIORITY1: c.OneOctetBody, c.PRIORITY2: c.OneOctetBody,
              c.DOMAIN: c.OneOctetBody, c.CLOCK_DESCRIPTION: c.ClockDescriptionBody}
even = st.binary(max_size=24).map(lambda b: b[:len(b) & ~1])
tlvs = st.one_of(
    st.builds(c.ManagementTlv, st.one_of(st.sampled_from(MANAGEMENT_IDS), u16),
              st.one_of(st.just(b""), st.sampled_from([b"\x05\x00", b"\xff\x00"]), even)),
    st.builds(c.RequestUnicastTransmissionTlv, st.sampled_from([c.MsgType.ANNOUNCE, c.MsgType.SYNC,
                                                                c.MsgType.DELAY_RESP, c.MsgType.PDELAY_RESP]),
              st.one_of(st.integers(-7, 1), i8), st.one_of(st.integers(0, 1000), u32)),
    st.builds(c.CancelUnicastTransmissionTlv, msg_types),
    st.builds(c.PathTraceTlv, st.lists(identities, max_size=3).map(tuple)),
    st.builds(c.c37238_2017_tlv, u16, u32),
    st.builds(c.Tlv, st.integers(0x2000, 0x3FFF), even))


def header(kind: c.MsgType) -> st.SearchStrategy[c.Header]:
    return st.builds(c.Header, st.just(kind), st.sampled_from([0, 0, 0, 0, 24, 1]), ports, seqs, flags,
                     corrections, logs, st.just(2), st.sampled_from([0, 1]), st.sampled_from([0, 0, 0, 1]))


quality = st.builds(c.ClockQuality, st.sampled_from([6, 7, 13, 52, 187, 248, 255]), u8, u16)
K = c.MsgType
messages = st.one_of(
    st.builds(c.Announce, header(K.ANNOUNCE), stamps, i16, u8, quality, u8, identities, st.integers(0, 300), u8,
              st.lists(tlvs, max_size=2).map(tuple)),
    st.builds(c.Sync, header(K.SYNC), stamps),
    st.builds(c.FollowUp, header(K.FOLLOW_UP), stamps),
    st.builds(c.DelayReq, header(K.DELAY_REQ), stamps),
    st.builds(c.DelayResp, header(K.DELAY_RESP), stamps, our_ports),
    st.builds(c.PdelayReq, header(K.PDELAY_REQ), stamps),
    st.builds(c.PdelayResp, header(K.PDELAY_RESP), stamps, our_ports),
    st.builds(c.PdelayRespFollowUp, header(K.PDELAY_RESP_FOLLOW_UP), stamps, our_ports),
    st.builds(c.Signaling, header(K.SIGNALING), our_ports, st.lists(tlvs, min_size=1, max_size=3).map(tuple)),
    st.builds(c.Management, header(K.MANAGEMENT), our_ports, u8, u8, st.sampled_from([c.GET, c.SET, c.COMMAND, 7]),
              st.lists(tlvs, min_size=1, max_size=2).map(tuple)),
)
# What a management client sends: one GET or SET of a known managementId (with its body, right or wrong) to us.
management_requests = st.builds(
    c.Management,
    st.builds(c.Header, st.just(K.MANAGEMENT), st.just(0), ports, seqs, st.sampled_from([0, c.FLAG_UNICAST])),
    st.sampled_from([c.PortIdentity(OWN, 1), c.PortIdentity(b"\xff" * 8, 0xFFFF)]), u8, u8,
    st.sampled_from([c.GET, c.SET]),
    st.builds(c.ManagementTlv, st.sampled_from(MANAGEMENT_IDS),
              st.one_of(st.just(b""), st.sampled_from([b"\x05\x00", b"\xff\x00"]), even)).map(lambda t: (t,)))
messages = st.one_of(messages, management_requests)
wires = st.one_of(messages.map(c.encode), mutated(messages.map(c.encode), max_edits=2), st.binary(max_size=80))
# A session: (what happens, wire bytes, a selector (source, variant), a timestamp or None, a correctionField, ns the
# monotonic clock moves on).  "sync" and "answer" are the followed master's: a Sync (and Follow_Up), and the answer to
# the slave's last delay request, with arbitrary timestamps and corrections, so the delay and offset arithmetic runs.
steps = st.one_of(
    st.tuples(st.just("rx"), wires, st.integers(0, 3), st.one_of(st.none(), stamps), st.just(0), st.integers(0, S)),
    st.tuples(st.just("timer"), st.just(b""), st.just(0), st.none(), st.just(0), st.integers(0, 2 * S)),
    st.tuples(st.just("tx"), st.just(b""), st.just(0), stamps, st.just(0), st.integers(0, S // 10)),
    st.tuples(st.sampled_from(["sync", "answer", "announce"]), st.just(b""), st.integers(0, 3), stamps, corrections,
              st.integers(0, S // 4)))
sessions = st.lists(steps, min_size=1, max_size=12)


def assert_sends(actions: list[Any]) -> None:
    for action in actions:
        if isinstance(action, PtpMeasurement):
            event("slave: measurement")
            continue
        assert isinstance(action, Send), action
        sent = c.decode(action.data)
        assert sent.header.source_port.clock_identity == OWN
        event(f"sent {type(sent).__name__}")


# --- the grandmaster port ----------------------------------------------------------------------------------------
def master_port(profile: str) -> PtpPort:
    settings: dict[str, Any] = {"management": "get-set"}
    if profile == "c37.238":
        settings["grandmaster_id"] = 3
    config, errors, _warnings = resolve(load_profile(profile), settings)
    assert not errors, errors
    # The transport's address key, as the edge passes it (transport.py): the MAC, padded, over Ethernet.
    key = (lambda source: bytes(source) + bytes(10)) if config.transport == "l2" else None
    port = PtpPort(config, OWN, LOCKED, 0, address_key=key, management_rules=AccessRules(("10.0.0.0/8",)))
    port.start(0)
    t = 0
    while port.state != MASTER and t < 60 * S:
        t += S
        port.handle_timer(t, BASE_NS + t)
    assert port.state == MASTER, profile
    port.fuzz_now_ns = t  # type: ignore[attr-defined]
    return port


MASTERS = {name: master_port(name) for name in PROFILE_NAMES}


@fuzz(0.5)
@given(st.sampled_from(sorted(MASTERS)), sessions)
def test_the_grandmaster_port_takes_any_session(profile: str, session: list) -> None:
    port = copy.deepcopy(MASTERS[profile])
    now = port.fuzz_now_ns  # type: ignore[attr-defined]
    sources = L2_SOURCES if port.config.transport == "l2" else UDP_SOURCES
    tokens: list[int] = []
    for kind, data, source, stamp, _correction, dt in session:
        now += dt
        if kind in ("sync", "answer"):
            continue
        if kind == "rx":
            out = port.handle_rx(data, sources[source % len(sources)], stamp, now)
        elif kind == "timer":
            out = port.handle_timer(now, BASE_NS + now)
        elif tokens:
            out = port.handle_tx_timestamp(tokens.pop(0), stamp)
        else:
            continue
        assert_sends(out)
        tokens += [a.token for a in out if a.token is not None]
    event(f"port state {port.state}")
    port.snapshot(now)


# --- the slave -----------------------------------------------------------------------------------------------------
def from_master(kind: c.MsgType, seq: int, correction: int = 0, flags: int = c.FLAG_PTP_TIMESCALE) -> c.Header:
    return c.Header(kind, 0, c.PortIdentity(GM_A, 1), seq, flags=flags, correction=correction, log_interval=0)


def master_sync(seq: int, variant: int, stamp: int, correction: int, rx_ns: int) -> list[tuple[bytes, int | None]]:
    """The followed master's Sync: one-step (variant 0), else two-step, its Follow_Up first in variant 3."""
    if variant == 0:
        return [(c.encode(c.Sync(from_master(K.SYNC, seq, correction), stamp)), rx_ns)]
    sync = c.encode(c.Sync(from_master(K.SYNC, seq, 0, c.FLAG_PTP_TIMESCALE | c.FLAG_TWO_STEP), 0))
    follow_up = c.encode(c.FollowUp(from_master(K.FOLLOW_UP, seq, correction), stamp))
    return [(follow_up, None), (sync, rx_ns)] if variant == 3 else [(sync, rx_ns), (follow_up, None)]


# The followed master's Announce flags: PTP timescale, ARB with a valid UTC offset, ARB without, leap second ahead.
ANNOUNCE_FLAGS = [c.FLAG_PTP_TIMESCALE, c.FLAG_UTC_OFFSET_VALID, 0, c.FLAG_PTP_TIMESCALE | c.FLAG_LEAP61]


def master_announce(seq: int, variant: int, stamp: int, correction: int) -> list[tuple[bytes, int | None]]:
    """The followed master's Announce, its currentUtcOffset arbitrary (from the correction's low bits)."""
    header = from_master(K.ANNOUNCE, seq, correction, ANNOUNCE_FLAGS[variant])
    announce = c.Announce(header, stamp, (correction & 0xFFFF) - 0x8000, 128, c.ClockQuality(6, 0x21, 0x4E5D), 128,
                          GM_A, 0, 0x20)
    return [(c.encode(announce), None)]


def master_answer(request: c.Message, variant: int, stamp: int, correction: int,
                  rx_ns: int) -> list[tuple[bytes, int | None]]:
    """The followed master's answer to the slave's Delay_Req or Pdelay_Req (one-step responder in variant 0)."""
    seq, requester = request.header.sequence_id, request.header.source_port
    if isinstance(request, c.DelayReq):
        return [(c.encode(c.DelayResp(from_master(K.DELAY_RESP, seq, correction), stamp, requester)), None)]
    if variant == 0:
        return [(c.encode(c.PdelayResp(from_master(K.PDELAY_RESP, seq, correction), 0, requester)), rx_ns)]
    resp = c.PdelayResp(from_master(K.PDELAY_RESP, seq, 0, c.FLAG_TWO_STEP), stamp, requester)
    follow_up = c.PdelayRespFollowUp(from_master(K.PDELAY_RESP_FOLLOW_UP, seq, correction), stamp + 10_000, requester)
    return [(c.encode(resp), rx_ns), (c.encode(follow_up), None)]


def following_slave(mechanism: str) -> PtpPort:
    """A slave following GM_A with a path delay already measured: its next Sync gives a measurement."""
    slave = slave_port(SlaveConfig(delay_mechanism=mechanism), OWN, 0, random.Random(1))
    slave.start(0)
    for seq in range(3):
        announce = c.Announce(from_master(K.ANNOUNCE, seq), BASE_NS, 37, 128, c.ClockQuality(6, 0x21, 0x4E5D), 128,
                              GM_A, 0, 0x20)
        slave.handle_rx(c.encode(announce), UDP_SOURCES[0], None, seq * S)
    for wire, ts in master_sync(0, 1, BASE_NS, 0, BASE_NS + 50_000):
        slave.handle_rx(wire, UDP_SOURCES[0], ts, 2 * S)
    request = next(a for a in slave.handle_timer(3 * S, 3 * S) if isinstance(a, Send))
    slave.handle_tx_timestamp(request.token, BASE_NS + 100_000)
    for wire, ts in master_answer(c.decode(request.data), 1, BASE_NS + 150_000, 0, BASE_NS + 200_000):
        slave.handle_rx(wire, UDP_SOURCES[0], ts, 3 * S)
    assert slave.state == UNCALIBRATED and slave.path_delay_ns is not None, mechanism
    return slave


SLAVES = {mechanism: following_slave(mechanism) for mechanism in ("e2e", "p2p")}


@fuzz(0.5)
@given(st.sampled_from(sorted(SLAVES)), sessions)
def test_the_slave_takes_any_session(mechanism: str, session: list) -> None:
    slave = copy.deepcopy(SLAVES[mechanism])
    now, sync_seq = slave.next_due_ns() - 1, 0  # the first timer step sends a delay request
    tokens: list[int] = []
    requests: list[c.Message] = []
    for kind, data, selector, stamp, correction, dt in session:
        now += dt
        if kind == "rx":
            out = slave.handle_rx(data, UDP_SOURCES[selector], stamp, now)
        elif kind == "timer":
            out = slave.handle_timer(now, now)
        elif kind == "tx":
            if not tokens:
                continue
            out = slave.handle_tx_timestamp(tokens.pop(0), stamp)
        else:
            rx_ns = stamp + abs(correction >> 16) % S
            if kind in ("sync", "announce"):
                sync_seq += 1
                incoming = (master_sync(sync_seq, selector, stamp, correction, rx_ns) if kind == "sync"
                            else master_announce(sync_seq, selector, stamp, correction))
            elif requests:
                incoming = master_answer(requests.pop(0), selector, stamp, correction, rx_ns)
            else:
                continue
            out = [a for wire, ts in incoming for a in slave.handle_rx(wire, UDP_SOURCES[0], ts, now)]
        assert_sends(out)
        for action in out:
            if isinstance(action, Send) and action.token is not None:
                tokens.append(action.token)
                requests.append(c.decode(action.data))
    event(f"slave state {slave.state}")
    slave.snapshot(now)


# --- management bodies and profile files ------------------------------------------------------------------------
@fuzz(1.0)
@given(st.sampled_from(sorted(BODY_TYPES)), st.data())
def test_management_bodies_unpack_or_raise_tlv(management_id: int, data: st.DataObject) -> None:
    body_type = BODY_TYPES[management_id]
    valid = {c.DefaultDataSetBody: c.DefaultDataSetBody(True, False, 1, 128, c.ClockQuality(6, 0x21, 0x4E5D), 128,
                                                        OWN, 0),
             c.CurrentDataSetBody: c.CurrentDataSetBody(0, 5 << 16, -(3 << 16)),
             c.ParentDataSetBody: c.ParentDataSetBody(c.PortIdentity(OWN, 1), False, 0xFFFF, 0x7FFFFFFF, 128,
                                                      c.ClockQuality(6, 0x21, 0x4E5D), 128, OWN),
             c.TimePropertiesDataSetBody: c.TimePropertiesDataSetBody(37, False, False, True, True, True, True, 0x20),
             c.PortDataSetBody: c.PortDataSetBody(c.PortIdentity(OWN, 1), 6, 0, 0, 1, 3, 0, 1, 0, 0x12),
             c.OneOctetBody: c.OneOctetBody(128),
             c.ClockDescriptionBody: c.ClockDescriptionBody(0x8000, "IEEE 802.3", b"\x02\x00\xaa\x00\x00\x01", 1,
                                                            b"\x0a\x00\x00\x01", b"\x00\x1b\x19", "maker;gm;1",
                                                            "1;2;3", "rack 4", b"\x00\x1b\x19\x00\x01\x00")}[body_type]
    raw = data.draw(st.one_of(mutated(valid.pack()), st.binary(max_size=80)))
    try:
        body = body_type.unpack(raw)
    except c.PtpDecodeError as exc:
        assert exc.reason == "tlv"
        return
    assert body_type.unpack(body.pack()) == body
    # A management message carrying it decodes to the same TLV.
    tlv = c.ManagementTlv(management_id, body.pack())
    msg = c.Management(c.Header(c.MsgType.MANAGEMENT, 0, c.PortIdentity(GM_A, 1), 1), c.PortIdentity(OWN, 1), 1, 1,
                       c.RESPONSE, (tlv,))
    assert c.decode(c.encode(msg)).tlvs == (tlv,)


PROFILE_TEXTS = {name: resources.files("appliance").joinpath("data", "ptp-profiles", f"{name}.toml").read_text()
                 for name in PROFILE_NAMES}


@fuzz(1.0)
@given(st.sampled_from(sorted(PROFILE_TEXTS)).flatmap(lambda name: mutated_text(PROFILE_TEXTS[name])))
def test_a_profile_file_parses_or_raises_value_error(text: str) -> None:
    try:
        profile = parse_profile(text, "fuzzed.toml")
    except ValueError:
        event("profile: refused")
        return
    event("profile: parsed")
    config, errors, warnings = resolve(profile, {})
    assert isinstance(errors, list) and isinstance(warnings, list) and config.profile == profile.name
