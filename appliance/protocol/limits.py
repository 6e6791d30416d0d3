"""Who may ask the NTP server, and how often: network access rules and a per-client rate limiter.

Pure core: no clock reads (every call takes ``now_ns``), no I/O.  The access rules are parsed here into the table
the NTP data plane scans (``appliance/edge/ntp/_fastpath.c``); the rate limiter is the data plane's own table
(``native/bucket.h``), which ``RateLimiter`` wraps.  Both algorithms are specified here exactly; the executable
model of the rate limiter (``tests/oracle/limits_model.py``) follows this text line by line.

Addresses.  An address is 4 bytes (IPv4) or 16 bytes (IPv6), or a string.  A 16-byte address whose bytes 0-9 are
0x00 and bytes 10-11 are 0xff (``::ffff:a.b.c.d``, IPv4-mapped) is replaced by its last 4 bytes before anything
else, so a dual-stack socket judges and limits an IPv4 client exactly as an IPv4 socket would.

Access rules (``AccessRules``).  Built from ``allow`` and ``deny`` lists of networks ("192.0.2.0/24",
"2001:db8::/32", "10.1.2.3" = /32, "::1" = /128).  An entry that does not parse, or has host bits set beyond its
prefix ("10.1.2.3/24": did the operator mean the host or the network?), raises ValueError naming it.  An IPv6
rule inside ::ffff:0:0/96 with prefix 96+n becomes the IPv4 rule a.b.c.d/n, because mapped addresses are judged as
IPv4; an IPv6 rule with a shorter prefix, ::/0 included, therefore never matches a mapped address.
``AccessRules.table`` is the flat rule table, rows ``(family, network, prefix_len, allow)``; family is 4 or 6,
network is 4 or 16 bytes.  Rows are unique and sorted by: family ascending, prefix_len DESCENDING, deny (False)
before allow (True), network bytes ascending.  Decision for an address:
  1. normalise it (mapped -> IPv4); family = 4 for 4 bytes, 6 for 16 bytes;
  2. scan the table in order, skipping rows of the other family; the first row whose network equals the address
     in its first prefix_len bits decides: allow -> allowed, deny -> denied;
  3. no row matched -> denied.
The order makes "first match" the same as "longest prefix across both lists wins, deny wins ties".  Denying on no
match means the configuration must say what it serves: the default allow list is 0.0.0.0/0 and ::/0.

Rate limiter (``RateLimiter(rate_per_s, burst, max_clients)``).  Client key: the 4 IPv4 bytes, or the first 8
bytes (the /64) of an IPv6 address, since one host may use any address of its /64.  Per key: tokens (IEEE-754
double), last_ns and last_kod_ns (int64; last_kod_ns may be NONE).  ``check(address, now_ns)``:
  if rate_per_s == 0: passed += 1; return PASS                         (limiting disabled, no state kept)
  if key in table: mark key most recently seen
  else: if size == max_clients: remove the least recently seen key; evictions += 1
        insert key as most recently seen with tokens = burst, last_ns = now_ns, last_kod_ns = NONE
  elapsed_ns = max(0, now_ns - last_ns)
  tokens = min((double)burst, tokens + (double)elapsed_ns * rate_per_s / 1e9)   (evaluated left to right)
  last_ns = now_ns
  if tokens >= 1.0: tokens -= 1.0; passed += 1; return PASS
  if last_kod_ns is NONE or now_ns - last_kod_ns >= 1_000_000_000: last_kod_ns = now_ns; kod += 1; return KOD
  dropped += 1; return DROP
"Recently seen" is the order of ``check`` calls (true LRU), never the now_ns values.  A KoD is no larger than
its request, so each client gets at most burst + rate_per_s * W replies and W + 1 KoDs in any W seconds.

Why evicting is acceptable: memory is bounded at max_clients entries, and an evicted client that returns starts
with a full bucket again.  An attacker can only reset a bucket by making max_clients other keys be seen after it,
which costs max_clients packets per reset, each answered at most once with no amplification; a client flooding
without pause is always recently seen, so LRU keeps exactly the flooders in the table and evicts idle clients.

Time going backwards (the caller should pass a monotonic clock; a stepped host clock may still do it): the bucket
refills nothing for the backward step and restarts from the new now_ns, so a step costs at most one extra
bucketful; KoDs are withheld (DROP) until now_ns is 1 s past the last KoD, which errs towards sending less.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import ipaddress
import math
from collections.abc import Iterable
from typing import NamedTuple

from appliance.protocol import dataplane  # type: ignore[attr-defined]
from appliance.units import NS_PER_S

DEFAULT_ALLOW = ("0.0.0.0/0", "::/0")
DEFAULT_MAX_CLIENTS = 65_536
KOD_INTERVAL_NS = NS_PER_S  # at most one KoD per client per second
IPV6_KEY_BYTES = 8  # aggregate IPv6 clients to their /64
_MAPPED_PREFIX = bytes(10) + b"\xff\xff"
_MAPPED_NET = ipaddress.IPv6Network("::ffff:0:0/96")

Address = bytes | str


@functools.lru_cache(maxsize=DEFAULT_MAX_CLIENTS)
def client_of(address: str) -> str:
    """The client a connection counts against: an IPv4 address (also when IPv4-mapped) or an IPv6 /64."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address  # not an IP address (a Unix socket's path): one client
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _parse_text(address: str) -> bytes:
    """A text address's bytes; remembered, for ipaddress takes microseconds and a client asks many times."""
    try:
        return ipaddress.ip_address(address).packed
    except ValueError:
        raise ValueError(f"not an IP address: {address!r}") from None


def normalize_address(address: Address) -> bytes:
    """4 or 16 address bytes, IPv4-mapped IPv6 unwrapped to its 4 IPv4 bytes."""
    if isinstance(address, str):
        raw = _parse_text(address)
    elif isinstance(address, bytes):
        raw = address
    else:
        raise TypeError(f"address must be bytes or str, got {type(address).__name__}")
    if len(raw) == 16 and raw[:12] == _MAPPED_PREFIX:
        return raw[12:]
    if len(raw) not in (4, 16):
        raise ValueError(f"an address is 4 or 16 bytes, got {len(raw)}")
    return raw


# ---------------------------------------------------------------------------------------------------- access rules
class Rule(NamedTuple):
    family: int  # 4 or 6
    network: bytes  # 4 or 16 bytes, host bits zero
    prefix_len: int
    allow: bool


def _parse_rule(entry: object, allow: bool) -> Rule:
    if not isinstance(entry, str):
        raise ValueError(f"network {entry!r} is not a string")
    try:
        net = ipaddress.ip_network(entry, strict=True)  # strict: host bits set is a mistake, not a shorthand
    except ValueError as exc:
        raise ValueError(f"invalid network {entry!r}: {exc}") from None
    if isinstance(net, ipaddress.IPv6Network) and net.prefixlen >= 96 and net.subnet_of(_MAPPED_NET):
        return Rule(4, net.network_address.packed[12:], net.prefixlen - 96, allow)
    return Rule(net.version, net.network_address.packed, net.prefixlen, allow)


def _rule_order(rule: Rule) -> tuple[int, int, bool, bytes]:
    return (rule.family, -rule.prefix_len, rule.allow, rule.network)


def _mask(prefix_len: int, n_bits: int) -> int:
    return ((1 << prefix_len) - 1) << (n_bits - prefix_len)


class AccessRules:
    """Most specific network wins, deny wins ties, no match is denied (see the module docstring)."""

    def __init__(self, allow: Iterable[str] = DEFAULT_ALLOW, deny: Iterable[str] = ()) -> None:
        if isinstance(allow, str) or isinstance(deny, str):
            raise TypeError("allow and deny are lists of networks, not a single string")
        rules = {_parse_rule(e, True) for e in allow} | {_parse_rule(e, False) for e in deny}
        self.table: list[Rule] = sorted(rules, key=_rule_order)
        # The same table as integers, split by family, in table order: (network, mask, allow).
        self._by_family: dict[int, list[tuple[int, int, bool]]] = {4: [], 6: []}
        for rule in self.table:
            bits = 8 * len(rule.network)
            self._by_family[rule.family].append(
                (int.from_bytes(rule.network, "big"), _mask(rule.prefix_len, bits), rule.allow))

    def is_allowed(self, address: Address) -> bool:
        raw = normalize_address(address)
        value = int.from_bytes(raw, "big")
        for network, mask, allow in self._by_family[4 if len(raw) == 4 else 6]:
            if value & mask == network:
                return allow
        return False


# ---------------------------------------------------------------------------------------------------- rate limiter
class Limit(enum.Enum):
    PASS = "pass"
    KOD = "kod"  # answer with a KoD RATE
    DROP = "drop"


def client_key(address: Address) -> bytes:
    """IPv4: its 4 bytes; IPv6: its /64 (8 bytes).  The lengths keep the two families apart."""
    raw = normalize_address(address)
    return raw if len(raw) == 4 else raw[:IPV6_KEY_BYTES]


class LimiterCounters(NamedTuple):
    passed: int
    kod: int
    dropped: int
    evictions: int
    size: int


class RateLimiter:
    """Token bucket per client (IPv4 address or IPv6 /64) in a true-LRU table of at most ``max_clients``: the data
    plane's own table (``native/bucket.h``), so the NTP and NTS-KE servers, the console and the SNMP agent limit
    their clients with one implementation.  ``check(address, now_ns)`` takes an address (bytes or text);
    ``check_key(key, now_ns)`` any key of up to 16 bytes (``key_of`` makes one of a name that is not an address)."""

    def __init__(self, rate_per_s: float, burst: int, max_clients: int = DEFAULT_MAX_CLIENTS) -> None:
        if not (math.isfinite(rate_per_s) and rate_per_s >= 0):
            raise ValueError(f"rate_per_s must be a finite number >= 0 (0 disables), got {rate_per_s!r}")
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise ValueError(f"burst must be an integer >= 1, got {burst!r}")
        if isinstance(max_clients, bool) or not isinstance(max_clients, int) or max_clients < 1:
            raise ValueError(f"max_clients must be an integer >= 1, got {max_clients!r}")
        self.rate_per_s = float(rate_per_s)
        self.burst = burst
        self.max_clients = max_clients
        self._table = dataplane.RateTable(self.rate_per_s, burst, max_clients)

    @property
    def size(self) -> int:
        return self.counters().size

    @property
    def passed(self) -> int:
        return self.counters().passed

    @property
    def kod(self) -> int:
        return self.counters().kod

    @property
    def dropped(self) -> int:
        return self.counters().dropped

    @property
    def evictions(self) -> int:
        return self.counters().evictions

    def counters(self) -> LimiterCounters:
        return LimiterCounters(*self._table.counters())

    def check(self, client_ip: Address, now_ns: int) -> Limit:
        return _DECISIONS[self._table.check(client_key(client_ip), now_ns)]

    def __deepcopy__(self, memo: dict[int, object]) -> RateLimiter:
        """A copy with every client's bucket (the simulated world and the tests copy whole engines)."""
        twin = RateLimiter(self.rate_per_s, self.burst, self.max_clients)
        twin.load(self._table.state())
        return twin

    def load(self, state: object) -> None:
        """Take another limiter's table (``dataplane.RateTable.state()``): this one must not have been used."""
        self._table.load(state)

    def check_key(self, key: bytes, now_ns: int) -> Limit:
        return _DECISIONS[self._table.check(key, now_ns)]


_DECISIONS = (Limit.PASS, Limit.KOD, Limit.DROP)


def key_of(client: str) -> bytes:
    """A rate-limit key for a client named by text (``client_of``'s): its address key when it is an address, else a
    16-byte digest of the name (a Unix socket's path)."""
    try:
        return client_key(client.split("/", 1)[0] if "/" in client and ":" in client else client)
    except ValueError:
        return hashlib.blake2b(client.encode("utf-8", "surrogateescape"), digest_size=16).digest()
