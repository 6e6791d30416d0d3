"""Unicast negotiation (IEEE 1588-2019 16.1), both sides, and the table of slaves a master port has heard.

Pure core.  ``Negotiation`` holds the clients a master port grants Announce, Sync and Delay_Resp streams to, within the
profile's limits (intervals, durations, how many clients): ``request`` answers a REQUEST_UNICAST_TRANSMISSION TLV
with a GRANT (duration 0: denied, counted by why), ``cancel`` and ``expire`` end a grant.  What a grant starts or ends
comes back as a ``StreamChange`` for the port to act on (its timers, or the native sender's streams).
``GrantRequests`` is a slaveOnly port's side: the grants it asks its masters for, and when to renew them.
``SlavesSeen`` is the bounded table of the slaves whose Delay_Req or Pdelay_Req the port answered, newest last.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.port_common import port_identity_text
from appliance.protocol.ptp.profiles import PortConfig
from appliance.units import NS_PER_S

MAX_SLAVES_SEEN = 1024
SNAPSHOT_SLAVES = 64  # the most recent slaves the status lists
SLAVE_ACTIVE_NS = 60 * NS_PER_S  # a slave heard within this is active
ALL_PORTS = c.PortIdentity(b"\xff" * 8, 0xFFFF)
REQUEST_DURATION_S = 300  # what a slave asks for (G.8275.2's default grant duration)
REQUEST_RETRY_NS = NS_PER_S  # a wanted grant not held is asked for again this often
ClientKey = tuple[Any, c.PortIdentity]  # (the transport's address key, the client's portIdentity)


@dataclass
class Grant:
    log_interval: int
    expires_ns: int


@dataclass
class UnicastClient:
    address: Any
    port: c.PortIdentity
    grants: dict[int, Grant] = field(default_factory=dict)  # by message type
    sequence: dict[int, int] = field(default_factory=dict)  # next sequenceId per message type
    sent_sync: int = 0
    first_granted_ns: int = 0


@dataclass(frozen=True, slots=True)
class StreamChange:
    """A granted stream starts (new, or its interval changed) or stops (cancelled, expired)."""

    start: bool
    key: ClientKey
    message_type: int


def address_text(address: Any) -> str:
    """A transport address as the status shows it: the IP, or the MAC over Ethernet."""
    if isinstance(address, tuple):
        return str(address[0])
    if isinstance(address, bytes | bytearray) and len(address) == 6:
        return ":".join(f"{b:02x}" for b in address)
    return str(address)


def address_key(address: Any) -> Any:
    """What a peer is known by (unicast clients, the rate limiter), as the transports key it: the IP of a (host, port)
    pair; a MAC padded to 16 octets (the rate limiter keys 4- or 16-octet addresses)."""
    if isinstance(address, tuple):
        return address[0]
    if isinstance(address, bytes | bytearray) and len(address) == 6:
        return bytes(address) + bytes(10)
    return address


def for_us(target: c.PortIdentity, identity: c.PortIdentity) -> bool:
    """A Signaling message's targetPortIdentity names this port, or all ports (of any clock)."""
    return target in (identity, ALL_PORTS) or target.clock_identity == ALL_PORTS.clock_identity


class Negotiation:
    """The clients of one master port and their grants; ``count(name)`` hears grants, denials and ends."""

    def __init__(self, config: PortConfig, count: Callable[[str], None]) -> None:
        self.config = config
        self._count = count
        self.clients: dict[ClientKey, UnicastClient] = {}

    def grant(self, key: ClientKey, message_type: int) -> Grant | None:
        client = self.clients.get(key)
        return client.grants.get(message_type) if client is not None else None

    def request(self, key: ClientKey, source: Any, tlv: c.RequestUnicastTransmissionTlv, now_ns: int,
                master: bool) -> tuple[c.GrantUnicastTransmissionTlv, StreamChange | None]:
        """The GRANT answering ``tlv``, and the stream it starts (None: denied, or a renewal at the same interval)."""
        cfg = self.config
        mtype = int(tlv.message_type)
        limits = {c.MsgType.ANNOUNCE: cfg.unicast_log_announce_interval, c.MsgType.SYNC: cfg.unicast_log_sync_interval,
                  c.MsgType.DELAY_RESP: cfg.unicast_log_delay_resp_interval}
        rng = limits.get(c.MsgType(mtype)) if mtype in limits else None

        def deny(why: str) -> tuple[c.GrantUnicastTransmissionTlv, None]:
            self._count("unicast_denied_" + why)
            return c.GrantUnicastTransmissionTlv(tlv.message_type, tlv.log_inter_message_period, 0, False), None

        if not cfg.unicast_negotiation:
            return deny("not_offered")
        if rng is None:
            return deny("message_type")
        if not rng[0] <= tlv.log_inter_message_period <= rng[1]:
            return deny("rate")
        if not master:
            return deny("not_master")
        client = self.clients.get(key)
        if client is None:
            if len(self.clients) >= cfg.unicast_max_clients:
                return deny("capacity")
            client = self.clients[key] = UnicastClient(source, key[1], first_granted_ns=now_ns)
        duration = min(max(tlv.duration_s, cfg.unicast_duration_s[0]), cfg.unicast_duration_s[1])
        old = client.grants.get(mtype)
        client.grants[mtype] = Grant(tlv.log_inter_message_period, now_ns + duration * NS_PER_S)
        self._count("unicast_granted")
        change = None if old is not None and old.log_interval == tlv.log_inter_message_period else \
            StreamChange(True, key, mtype)
        return c.GrantUnicastTransmissionTlv(tlv.message_type, tlv.log_inter_message_period, duration, True), change

    def cancel(self, key: ClientKey, message_type: int) -> StreamChange | None:
        client = self.clients.get(key)
        change = None
        if client is not None:
            if client.grants.pop(message_type, None) is not None:
                change = StreamChange(False, key, message_type)
            if not client.grants:
                del self.clients[key]
        self._count("unicast_cancelled")
        return change

    def expire(self, key: ClientKey, message_type: int, now_ns: int) -> StreamChange | None:
        """The grant's expiry timer: the grant ends unless it was renewed meanwhile."""
        client = self.clients.get(key)
        if client is None:
            return None
        change = None
        grant = client.grants.get(message_type)
        if grant is not None and grant.expires_ns <= now_ns:
            del client.grants[message_type]
            change = StreamChange(False, key, message_type)
            self._count("unicast_expired")
        if not client.grants:
            del self.clients[key]
        return change


class GrantRequests:
    """The grants a slaveOnly port asks for (16.1.2): Announce of each master it is configured with
    (``unicast_masters``, transport addresses), Sync and Delay_Resp of its parent.  A grant is renewed halfway
    through its duration; one denied or unanswered is asked for again after REQUEST_RETRY_NS."""

    def __init__(self, config: PortConfig, address_key: Callable[[Any], Any]) -> None:
        self.config = config
        self._key = address_key
        self.held: dict[tuple[Any, int], tuple[int, int]] = {}  # (address key, message type) -> (renew at, expires)
        self._asked: dict[tuple[Any, int], int] = {}  # when each was last asked for

    def _wanted(self, parent_address: Any) -> list[tuple[Any, c.MsgType, int]]:
        cfg = self.config
        out = [(master, c.MsgType.ANNOUNCE, cfg.log_announce_interval) for master in cfg.unicast_masters]
        if parent_address is not None:
            out.append((parent_address, c.MsgType.SYNC, cfg.log_sync_interval))
            if cfg.delay_mechanism == "e2e":
                out.append((parent_address, c.MsgType.DELAY_RESP, cfg.log_min_delay_req_interval))
        return out

    def due(self, parent_address: Any, now_ns: int) -> dict[Any, list[c.RequestUnicastTransmissionTlv]]:
        """The requests to send now, by the address they go to."""
        out: dict[Any, list[c.RequestUnicastTransmissionTlv]] = {}
        for address, mtype, log_interval in self._wanted(parent_address):
            key = (self._key(address), int(mtype))
            held, asked = self.held.get(key), self._asked.get(key)
            if (held is not None and now_ns < held[0]) or (asked is not None and now_ns - asked < REQUEST_RETRY_NS):
                continue
            self._asked[key] = now_ns
            out.setdefault(address, []).append(c.RequestUnicastTransmissionTlv(mtype, log_interval,
                                                                               REQUEST_DURATION_S))
        return out

    def answered(self, source: Any, tlv: c.GrantUnicastTransmissionTlv | c.CancelUnicastTransmissionTlv,
                 now_ns: int) -> None:
        """A master's GRANT (duration 0: denied) or its CANCEL of a grant."""
        key = (self._key(source), int(tlv.message_type))
        if isinstance(tlv, c.CancelUnicastTransmissionTlv) or not tlv.duration_s:
            self.held.pop(key, None)
            return
        duration_ns = tlv.duration_s * NS_PER_S
        self.held[key] = (now_ns + duration_ns // 2, now_ns + duration_ns)


@dataclass
class SlaveSeen:
    port: c.PortIdentity
    address: str
    first_seen_ns: int
    last_seen_ns: int
    requests: int = 0
    mechanism: str = "e2e"


class SlavesSeen:
    """Every slave heard (by portIdentity and address), in order of its latest request; the oldest go past
    MAX_SLAVES_SEEN."""

    def __init__(self) -> None:
        self.table: OrderedDict[tuple[c.PortIdentity, str], SlaveSeen] = OrderedDict()

    def __len__(self) -> int:
        return len(self.table)

    def seen(self, port: c.PortIdentity, source: Any, now_ns: int, mechanism: str, requests: int = 1) -> None:
        key = (port, address_text(source))
        entry = self.table.get(key)
        if entry is None:
            if len(self.table) >= MAX_SLAVES_SEEN:
                self.table.popitem(last=False)
            entry = self.table[key] = SlaveSeen(port, key[1], now_ns, now_ns, mechanism=mechanism)
        else:
            self.table.move_to_end(key)
        entry.last_seen_ns = now_ns
        entry.requests += requests

    def active(self, now_ns: int) -> int:
        """Slaves heard within the last minute: counted from the newest back to the first older one."""
        since, active = now_ns - SLAVE_ACTIVE_NS, 0
        for slave in reversed(self.table.values()):
            if slave.last_seen_ns <= since:
                break
            active += 1
        return active

    def rows(self, now_ns: int) -> list[dict[str, Any]]:
        """The SNAPSHOT_SLAVES most recent, newest first, as the status shows them."""
        return [{"port_identity": port_identity_text(s.port), "address": s.address, "mechanism": s.mechanism,
                 "requests": s.requests, "last_seen_s_ago": round((now_ns - s.last_seen_ns) / 1e9, 1)}
                for s in itertools.islice(reversed(self.table.values()), SNAPSHOT_SLAVES)]
