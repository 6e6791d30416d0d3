"""The executable model of the NTP data plane: ``handle(request, client, rx) -> Reply | Drop``, then ``finalize``.

Not part of the product.  The appliance answers NTP in its native data plane (appliance/edge/ntp/_fastpath.c with
_auth.c and _nts.c) alone; this is the same decision written plainly in Python, the oracle the differential and
fuzz tests hold the data plane to (tests/props/test_fuzz_ntp.py, tests/unit/test_nts_fastpath.py), and the
specification a reader can follow.  Pure: no clock reads, no I/O.  Answers client (mode 3) requests of NTP versions 1-4 in their own version (RFC 5905 §9.2), as a
stratum-1 server when the clock is synchronized and stratum 16 with LI=3 when it is not (or its holdover has
expired), with root dispersion from the clock's advertised error bound.  In order, a request is:

1. checked for shape (length, version, mode): control (6) and private (7) queries are never answered, since this
   server has no authenticated control channel; anything malformed is dropped and counted by reason;
2. checked against the access rules (most specific network wins): denied clients are dropped or told DENY/RSTR;
3. rate limited per client with bounded memory: over the rate, one KoD RATE a second, the rest dropped;
4. authenticated when it carries a MAC: the reply is signed with the same key, a bad MAC or unknown key gets a
   crypto-NAK (RFC 5905 §7.4);
5. with NTS (RFC 8915) when it carries a Unique Identifier and the server has cookie keys: its cookie opened
   and its authenticator verified, the reply carries fresh cookies under the same keys; a cookie or authenticator
   that does not check gets the NTS NAK (KoD NTSN), a malformed or replayed request is dropped;
6. answered in the interleaved mode (RFC 9769, as chrony's xleave) when its origin timestamp is one of our receive
   timestamps whose response's kernel transmit timestamp we kept: the reply then carries that more accurate
   transmit timestamp, the current receive timestamp, and as origin the request's receive field.

Replies are never larger than their request: 48 bytes, plus the same MAC length the request carried.  Receive
timestamps have their lowest bit set and transmit timestamps cleared, so interleaved requests can be recognised
without keeping every receive timestamp (chrony's trick).
"""

from __future__ import annotations

import os
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.oracle import auth_model as auth
from tests.oracle import nts_model as nts
from appliance.protocol import limits
from appliance.protocol.clockmap import ClockMap
from appliance.outputs.ntp.policy import MAX_REQUEST_LEN, ServerConfig
from appliance.protocol.ntp.packet import (HEADER_LEN, LI_ALARM, MODE_CLIENT, MODE_CONTROL, MODE_PRIVATE,
                                          MODE_RESERVED, MODE_SERVER, NtpHeader, decode, refid)

NTP_PORT = 123
LOW_BIT = 1


@dataclass(frozen=True, slots=True)
class Drop:
    reason: str


@dataclass
class Reply:
    header: NtpHeader
    key: auth.Key | None = None  # sign with this key
    crypto_nak: bool = False
    interleaved: bool = False
    kod: str = ""

    wants_tx_timestamp: bool = False  # a client in the interleaved mode will want this reply's kernel transmit time
    nts: nts.NtsRequest | None = None  # an NTS request's: the reply carries its fields (a NAK when kod is NTSN)

    @property
    def rx_key(self) -> int:
        """The receive timestamp this reply carries: the key under which its transmit timestamp is kept."""
        return self.header.receive_ts


@dataclass
class Counters:
    requests: int = 0
    replies: int = 0
    interleaved: int = 0
    authenticated: int = 0
    nts: int = 0  # NTS-authenticated replies
    kod: Counter[str] = field(default_factory=Counter)
    drops: Counter[str] = field(default_factory=Counter)
    nts_naks: Counter[str] = field(default_factory=Counter)  # why each NTS NAK was sent

    def as_dict(self) -> dict[str, object]:
        return {"requests": self.requests, "replies": self.replies, "interleaved": self.interleaved,
                "authenticated": self.authenticated, "nts": self.nts, "nts_naks": dict(self.nts_naks), "kod": dict(self.kod), "drops": dict(self.drops)}


class NtpServer:
    def __init__(self, config: ServerConfig = ServerConfig(), keys: auth.KeyTable | None = None,
                 cookies: nts.CookieJar | None = None, rand: Callable[[int], bytes] = os.urandom):
        self.config = config
        self.keys = keys
        self.cookies = cookies  # NTS: None answers NTS requests as plain NTP (the client then rejects them)
        self.rand = rand
        self._uids: OrderedDict[bytes, None] = OrderedDict()
        self.access = limits.AccessRules(config.allow, config.deny)
        self.limiter = limits.RateLimiter(config.rate_per_s, config.burst, config.max_clients)
        self.counters = Counters()
        self._tx: OrderedDict[int, int] = OrderedDict()  # our receive timestamp -> transmit host ns

    # --- the decision -----------------------------------------------------------------------------------
    def handle(self, data: bytes, client_ip: bytes, client_port: int, rx_host_ns: int, clock: ClockMap,
               admitted: limits.Limit | None = None) -> Reply | Drop:
        """``admitted``: the access and rate decisions were already taken (PASS or KOD) and the request counted."""
        if admitted is None:
            self.counters.requests += 1
        request, problem = self._shape(data, client_port)
        if problem:
            return self._drop(problem)
        assert request is not None
        if admitted is None and not self.access.is_allowed(client_ip):
            if self.config.deny_action == "drop":
                return self._drop("denied")
            return self._kod(request, "DENY" if self.config.deny_action == "deny" else "RSTR", rx_host_ns, clock)
        decision = admitted if admitted is not None else self.limiter.check(client_ip, rx_host_ns)
        if decision is limits.Limit.DROP:
            return self._drop("rate-limited")
        if self.cookies is not None and request.version == 4 and nts.is_nts(data):
            return self._nts(data, request, decision, rx_host_ns, clock)
        verdict = auth.verify(self.keys, data) if len(data) > HEADER_LEN else None
        if verdict is not None and verdict.outcome in (auth.Outcome.BAD_MAC, auth.Outcome.UNKNOWN_KEY,
                                                       auth.Outcome.BAD_LENGTH):
            return self._reply(request, rx_host_ns, clock, crypto_nak=True)
        key = verdict.key if verdict is not None and verdict.outcome is auth.Outcome.OK else None
        if decision is limits.Limit.KOD:
            return self._kod(request, "RATE", rx_host_ns, clock, key)
        return self._reply(request, rx_host_ns, clock, key=key)

    def _nts(self, data: bytes, request: NtpHeader, decision: limits.Limit, rx_host_ns: int,
             clock: ClockMap) -> Reply | Drop:
        """RFC 8915 §5.7: answered with fresh cookies under the cookie's keys; a cookie that does not open or an
        authenticator that does not verify gets the NTS NAK; a malformed or replayed request is dropped."""
        opened = nts.open_request(data, self.cookies)
        if isinstance(opened, str):
            return self._drop(opened)
        if opened.keys is not None:  # only authenticated identifiers are remembered: a forger cannot block one
            if opened.uid in self._uids:
                return self._drop("nts-replay")
            self._uids[opened.uid] = None
            if len(self._uids) > self.config.nts_replay_table:
                self._uids.popitem(last=False)
        if opened.keys is None:
            self.counters.nts_naks[opened.reason] += 1
            reply = self._kod(request, nts.NAK_KISS, rx_host_ns, clock)
        elif decision is limits.Limit.KOD:
            reply = self._kod(request, "RATE", rx_host_ns, clock)
        else:
            reply = self._reply(request, rx_host_ns, clock)
            self.counters.nts += 1
        reply.nts = opened
        return reply

    def _shape(self, data: bytes, client_port: int) -> tuple[NtpHeader | None, str]:
        if len(data) < HEADER_LEN:
            return None, "short"
        if len(data) > MAX_REQUEST_LEN:
            return None, "oversize"
        if len(data) % 4:
            return None, "malformed"
        request = decode(data)
        if not 1 <= request.version <= 4:
            return None, "bad-version"
        if request.mode in (MODE_CONTROL, MODE_PRIVATE):
            return None, "control-query"  # mode 6/7 are never answered without an authenticated channel
        # NTPv1 had no mode field: a version 1 packet with mode 0 from a client port is a client request.
        v1_client = request.version == 1 and request.mode == MODE_RESERVED and client_port != NTP_PORT
        if request.mode != MODE_CLIENT and not v1_client:
            return None, f"mode-{request.mode}"
        if len(data) > HEADER_LEN and not self._trailer_ok(data, request.version):
            return None, "malformed"
        return request, ""

    def _trailer_ok(self, data: bytes, version: int) -> bool:
        """A MAC (RFC 7822 layouts), or NTPv4 extension fields we may ignore (answered without them)."""
        if auth.split_mac(data) is not None:
            return True
        return version == 4 and _extension_fields_ok(data)

    # --- building replies -----------------------------------------------------------------------------
    def _reply(self, request: NtpHeader, rx_host_ns: int, clock: ClockMap, key: auth.Key | None = None,
               crypto_nak: bool = False) -> Reply:
        receive = clock.ntp_ts(rx_host_ns) | LOW_BIT
        header = NtpHeader(clock.leap_indicator, request.version, MODE_SERVER, clock.stratum,
                           max(request.poll, clock.poll_min), clock.precision, clock.root_delay,
                           clock.root_dispersion, clock.reference_id, clock.reference_ts, request.transmit_ts,
                           receive, 0)
        reply = Reply(header, key, crypto_nak)
        # The client sent one of our receive timestamps as origin: it is in the interleaved mode.
        reply.wants_tx_timestamp = not crypto_nak and request.version == 4 and request.origin_ts & LOW_BIT == 1
        if not crypto_nak and _looks_interleaved(request):
            tx_ns = self._tx.pop(request.origin_ts, None)
            if tx_ns:
                reply.interleaved = True
                # The origin echoes the request's *receive* field: that is how the client tells an interleaved reply
                # from a basic one (chrony ntp_core.c, test2i; RFC 9769 §2).
                reply.header = header.with_(origin_ts=request.receive_ts, transmit_ts=clock.ntp_ts(tx_ns) & ~LOW_BIT)
        return self._count_reply(reply)

    def _kod(self, request: NtpHeader, code: str, rx_host_ns: int, clock: ClockMap,
             key: auth.Key | None = None) -> Reply:
        receive = clock.ntp_ts(rx_host_ns) | LOW_BIT
        header = NtpHeader(LI_ALARM, request.version, MODE_SERVER, 0, request.poll, clock.precision, 0, 0,
                           refid(code), 0, request.transmit_ts, receive, 0)
        self.counters.kod[code] += 1
        return self._count_reply(Reply(header, key, kod=code))

    def _count_reply(self, reply: Reply) -> Reply:
        self.counters.replies += 1
        self.counters.interleaved += reply.interleaved
        self.counters.authenticated += reply.key is not None
        if reply.crypto_nak:
            self.counters.kod["CRYPTO-NAK"] += 1
        return reply

    def _drop(self, reason: str) -> Drop:
        self.counters.drops[reason] += 1
        return Drop(reason)

    # --- sending ---------------------------------------------------------------------------------------
    def finalize(self, reply: Reply, tx_host_ns: int, clock: ClockMap) -> bytes:
        """The wire bytes, with the transmit timestamp read as late as the caller could (basic mode)."""
        header = reply.header
        if not reply.interleaved:
            header = header.with_(transmit_ts=clock.ntp_ts(tx_host_ns) & ~LOW_BIT)
            reply.header = header
        packet = header.encode()
        if reply.nts is not None:
            if reply.nts.keys is None:
                return packet + nts.nak_fields(reply.nts)
            return nts.seal_reply(packet, reply.nts, self.cookies, self.rand)
        if reply.crypto_nak:
            return auth.crypto_nak(packet)
        return auth.sign(reply.key, packet) if reply.key is not None else packet

    def sent(self, reply: Reply, tx_host_ns: int) -> None:
        """Keep the (daemon) transmit time of a basic reply, so a later interleaved request can be answered."""
        if reply.kod or reply.crypto_nak:
            return
        self._tx[reply.rx_key] = tx_host_ns
        if len(self._tx) > self.config.interleaved_table:
            self._tx.popitem(last=False)

    def kernel_tx(self, rx_key: int, tx_host_ns: int) -> None:
        """The kernel's transmit timestamp of the reply whose receive timestamp is ``rx_key`` (more accurate)."""
        if rx_key in self._tx:
            self._tx[rx_key] = tx_host_ns


def _looks_interleaved(request: NtpHeader) -> bool:
    """An NTPv4 request whose origin is one of our receive timestamps (low bit set) and whose receive and transmit
    differ: a client in interleaved mode (chrony ntp_core.c, RFC 9769 §2)."""
    return (request.version == 4 and request.origin_ts & LOW_BIT == 1 and request.receive_ts != request.transmit_ts)


def _extension_fields_ok(data: bytes) -> bool:
    """RFC 7822 §7.5: each field is at least 16 bytes, a multiple of 4, and they tile the rest of the packet."""
    pos = HEADER_LEN
    while pos < len(data):
        if len(data) - pos < 16:
            return False
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if length < 16 or length % 4 or pos + length > len(data):
            return False
        pos += length
    return True
