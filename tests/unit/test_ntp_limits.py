"""Unit tests for appliance.protocol.limits: NTP access rules and the per-client rate limiter."""

from __future__ import annotations

import ipaddress
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.protocol.limits import (
    AccessRules,
    Limit,
    RateLimiter,
    Rule,
    client_key,
    normalize_address,
)

S_NS = 1_000_000_000
MS_NS = 1_000_000


# ------------------------------------------------------------------------------------------------ access rules
def test_most_specific_rule_wins_across_both_lists() -> None:
    rules = AccessRules(allow=["10.0.0.0/8", "10.1.2.0/24"], deny=["10.1.0.0/16", "10.1.2.3"])
    assert rules.is_allowed("10.2.0.1")  # /8 allow
    assert not rules.is_allowed("10.1.3.3")  # /16 deny beats /8 allow
    assert rules.is_allowed("10.1.2.4")  # /24 allow beats /16 deny
    assert not rules.is_allowed("10.1.2.3")  # /32 deny beats /24 allow
    assert not rules.is_allowed("11.0.0.1")  # nothing matches


def test_deny_wins_a_tie_of_equal_prefix_length() -> None:
    assert not AccessRules(allow=["192.0.2.0/24"], deny=["192.0.2.0/24"]).is_allowed("192.0.2.7")
    assert not AccessRules(allow=["2001:db8::1"], deny=["2001:db8::1/128"]).is_allowed("2001:db8::1")


def test_ipv6_rules() -> None:
    rules = AccessRules(allow=["2001:db8::/32", "::1"], deny=["2001:db8:bad::/48"])
    assert rules.is_allowed("2001:db8:1::5")
    assert not rules.is_allowed("2001:db8:bad::5")
    assert rules.is_allowed("::1")
    assert not rules.is_allowed("2001:db9::1")
    assert rules.is_allowed(ipaddress.ip_address("2001:db8::7").packed)
    assert not rules.is_allowed("192.0.2.1")  # IPv6 rules never match IPv4


def test_ipv4_mapped_addresses_are_judged_as_ipv4() -> None:
    rules = AccessRules(allow=["192.0.2.0/24"], deny=[])
    mapped = ipaddress.ip_address("::ffff:192.0.2.9").packed
    assert rules.is_allowed(mapped) and rules.is_allowed("::ffff:192.0.2.9")
    assert not rules.is_allowed("::ffff:198.51.100.1")
    # ::/0 covers the mapped range on paper, but a mapped client is an IPv4 client.
    assert not AccessRules(allow=["::/0"]).is_allowed("::ffff:192.0.2.9")
    assert AccessRules(allow=["0.0.0.0/0"]).is_allowed("::ffff:192.0.2.9")


def test_mapped_rules_become_ipv4_rules() -> None:
    rules = AccessRules(allow=["::ffff:10.0.0.0/104"], deny=["::ffff:10.9.9.9"])
    assert rules.table == [Rule(4, bytes([10, 9, 9, 9]), 32, False), Rule(4, bytes([10, 0, 0, 0]), 8, True)]
    assert rules.is_allowed("10.1.1.1") and rules.is_allowed("::ffff:10.1.1.1")
    assert not rules.is_allowed("10.9.9.9")


def test_no_match_is_denied_and_the_default_allows_everyone() -> None:
    empty = AccessRules(allow=[], deny=[])
    assert not empty.is_allowed("192.0.2.1") and not empty.is_allowed("2001:db8::1")
    default = AccessRules()
    for address in ("192.0.2.1", "0.0.0.0", "255.255.255.255", "::", "2001:db8::1", "::ffff:1.2.3.4"):
        assert default.is_allowed(address)


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "not-an-ip", "10.1.2.3/24", "", "2001:db8::/129",
                                   "2001:db8::1/64", "10.0.0.0/8 ", 5])
def test_invalid_entries_raise_naming_the_entry(entry: object) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(entry))):
        AccessRules(allow=["0.0.0.0/0", entry], deny=[])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        AccessRules(allow=[], deny=[entry])  # type: ignore[list-item]


def test_a_single_string_is_not_a_list() -> None:
    with pytest.raises(TypeError):
        AccessRules(allow="10.0.0.0/8")


@pytest.mark.parametrize("address", [b"\x01\x02\x03", b"\x00" * 5, b"", "10.0.0.300", "nonsense"])
def test_bad_addresses_are_rejected(address: bytes | str) -> None:
    with pytest.raises(ValueError):
        AccessRules().is_allowed(address)


def test_table_is_flat_sorted_and_unique() -> None:
    rules = AccessRules(allow=["::/0", "0.0.0.0/0", "10.0.0.0/8", "10.0.0.0/8", "2001:db8::/32", "9.0.0.0/8"],
                        deny=["10.0.0.0/8", "10.1.0.0/16"])
    assert rules.table == [
        Rule(4, bytes([10, 1, 0, 0]), 16, False),
        Rule(4, bytes([10, 0, 0, 0]), 8, False),
        Rule(4, bytes([9, 0, 0, 0]), 8, True),
        Rule(4, bytes([10, 0, 0, 0]), 8, True),
        Rule(4, bytes(4), 0, True),
        Rule(6, bytes.fromhex("20010db8") + bytes(12), 32, True),
        Rule(6, bytes(16), 0, True),
    ]


def _first_match_on_table(table: list[Rule], raw: bytes) -> bool:
    """The C port's algorithm, written from the docstring: first row of the family whose prefix matches."""
    family = 4 if len(raw) == 4 else 6
    for row in table:
        if row.family != family:
            continue
        full, rest = divmod(row.prefix_len, 8)
        if raw[:full] != row.network[:full]:
            continue
        if rest and (raw[full] ^ row.network[full]) >> (8 - rest):
            continue
        return row.allow
    return False


def _longest_prefix_reference(allow: list[str], deny: list[str], address: str) -> bool:
    """Independent reference on ipaddress objects: longest matching prefix, deny on ties, deny on no match."""
    addr = ipaddress.ip_address(address)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped

    def nets(entries: list[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        out = []
        for e in entries:
            n = ipaddress.ip_network(e)
            if isinstance(n, ipaddress.IPv6Network) and n.prefixlen >= 96 and n.network_address.ipv4_mapped:
                n = ipaddress.ip_network(f"{n.network_address.ipv4_mapped}/{n.prefixlen - 96}")
            out.append(n)
        return out

    best_allow = max((n.prefixlen for n in nets(allow) if n.version == addr.version and addr in n), default=-1)
    best_deny = max((n.prefixlen for n in nets(deny) if n.version == addr.version and addr in n), default=-1)
    return best_allow > best_deny


_v4 = st.builds(lambda a, p: str(ipaddress.ip_network(f"{ipaddress.IPv4Address(a)}/{p}", strict=False)),
                st.integers(0, 2**32 - 1) | st.sampled_from([0x0A000000, 0x0A010000, 0x0A010203]), st.integers(0, 32))
_v6 = st.builds(lambda a, p: str(ipaddress.ip_network(f"{ipaddress.IPv6Address(a)}/{p}", strict=False)),
                st.integers(0, 2**128 - 1) | st.sampled_from([0x20010DB8 << 96, 0xFFFF0A000000]), st.integers(0, 128))
_addresses = (st.integers(0, 2**32 - 1).map(lambda a: str(ipaddress.IPv4Address(a)))
              | st.sampled_from(["10.1.2.3", "10.1.0.9", "::ffff:10.1.2.3", "2001:db8::1"])
              | st.integers(0, 2**128 - 1).map(lambda a: str(ipaddress.IPv6Address(a))))


@settings(max_examples=300, deadline=None)
@given(st.lists(_v4 | _v6, max_size=8), st.lists(_v4 | _v6, max_size=8), st.lists(_addresses, min_size=1, max_size=8))
def test_decision_matches_reference_and_table_scan(allow: list[str], deny: list[str], addresses: list[str]) -> None:
    rules = AccessRules(allow, deny)
    for address in addresses:
        expected = _longest_prefix_reference(allow, deny, address)
        assert rules.is_allowed(address) == expected
        assert _first_match_on_table(rules.table, normalize_address(address)) == expected


# ------------------------------------------------------------------------------------------------ rate limiter
def _run(limiter: RateLimiter, client: bytes | str, times_ns: list[int]) -> list[Limit]:
    return [limiter.check(client, t) for t in times_ns]


@pytest.mark.parametrize("rate_per_s", [0.1, 0.3, 1.0, 3.0, 7.0, 16.0, 64.0, 1000.0])
@pytest.mark.parametrize("burst", [1, 8])
def test_a_client_at_exactly_its_rate_is_never_limited(rate_per_s: float, burst: int) -> None:
    interval_ns = math.ceil(S_NS / rate_per_s)
    limiter = RateLimiter(rate_per_s, burst)
    start = 5 * S_NS
    assert set(_run(limiter, "192.0.2.1", [start + i * interval_ns for i in range(2000)])) == {Limit.PASS}


def test_burst_then_kod_then_drop_until_a_second_later() -> None:
    limiter = RateLimiter(0.1, 3)  # slow refill: 0.1 token in the 1 s under test
    t0 = 100 * S_NS
    got = _run(limiter, "192.0.2.1", [t0, t0 + 1, t0 + 2, t0 + 3, t0 + 4, t0 + 500 * MS_NS, t0 + 3 + S_NS - 1])
    assert got == [Limit.PASS] * 3 + [Limit.KOD] + [Limit.DROP] * 3
    assert limiter.check("192.0.2.1", t0 + 3 + S_NS) is Limit.KOD  # exactly 1 s after the last KoD
    assert limiter.check("192.0.2.1", t0 + 3 + S_NS + 1) is Limit.DROP
    assert limiter.counters() == (3, 2, 4, 0, 1)


def test_refill_after_waiting_is_capped_at_burst() -> None:
    limiter = RateLimiter(2.0, 4)
    client = "198.51.100.7"
    assert _run(limiter, client, [0] * 5) == [Limit.PASS] * 4 + [Limit.KOD]
    assert limiter.check(client, 499 * MS_NS) is Limit.DROP  # 0.998 token
    assert limiter.check(client, 510 * MS_NS) is Limit.PASS  # 1.02 tokens
    other = "198.51.100.8"
    assert _run(limiter, other, [0] * 5) == [Limit.PASS] * 4 + [Limit.KOD]
    assert limiter.check(other, 500 * MS_NS) is Limit.PASS  # exactly one token after exactly 1/rate
    later = 3600 * S_NS
    assert _run(limiter, client, [later] * 6) == [Limit.PASS] * 4 + [Limit.KOD, Limit.DROP]


def test_clients_are_independent() -> None:
    limiter = RateLimiter(1.0, 2)
    assert _run(limiter, "192.0.2.1", [0, 0, 0]) == [Limit.PASS, Limit.PASS, Limit.KOD]
    assert _run(limiter, "192.0.2.2", [0, 0, 0]) == [Limit.PASS, Limit.PASS, Limit.KOD]
    assert limiter.size == 2


def test_ipv6_hosts_share_their_64_and_mapped_is_ipv4() -> None:
    limiter = RateLimiter(1.0, 2)
    assert _run(limiter, "2001:db8:1:2::1", [0, 0]) == [Limit.PASS, Limit.PASS]
    assert limiter.check("2001:db8:1:2:ffff::99", 0) is Limit.KOD  # same /64
    assert limiter.check("2001:db8:1:3::1", 0) is Limit.PASS  # the next /64
    assert limiter.check(ipaddress.ip_address("192.0.2.1").packed, 0) is Limit.PASS
    assert limiter.check("::ffff:192.0.2.1", 0) is Limit.PASS  # the same client as 192.0.2.1
    assert limiter.check("192.0.2.1", 0) is Limit.KOD
    assert limiter.size == 3
    assert client_key("::ffff:192.0.2.1") == bytes([192, 0, 2, 1])
    assert client_key("2001:db8:1:2::1") == bytes.fromhex("20010db800010002")


def test_lru_eviction_order_and_counters() -> None:
    limiter = RateLimiter(0.001, 1, max_clients=3)
    a, b, c, d = (f"192.0.2.{i}" for i in range(1, 5))
    for client in (a, b, c):
        assert _run(limiter, client, [0, 0]) == [Limit.PASS, Limit.KOD]  # every bucket empty
    assert limiter.check(a, 1) is Limit.DROP  # a is now the most recently seen: order b, c, a
    assert limiter.check(d, 2) is Limit.PASS  # evicts b
    assert limiter.counters() == (4, 3, 1, 1, 3)
    assert limiter.check(b, 3) is Limit.PASS  # b forgot its empty bucket: the price of bounded memory; evicts c
    assert limiter.check(a, 4) is Limit.DROP  # a was kept, still empty
    assert limiter.check(d, 5) is Limit.KOD  # d kept; a, b, d remain
    assert limiter.check(c, 6) is Limit.PASS  # c was evicted (by b), returns full; LRU order was b, a, d: evicts b
    assert limiter.check(b, 7) is Limit.PASS  # so b is new again
    assert limiter.counters() == (7, 4, 2, 4, 3)


def test_lru_is_call_order_not_timestamp_order() -> None:
    limiter = RateLimiter(1.0, 1, max_clients=2)
    limiter.check("192.0.2.1", 10 * S_NS)
    limiter.check("192.0.2.2", 1 * S_NS)  # older timestamp, but seen later
    limiter.check("192.0.2.3", 20 * S_NS)  # evicts .1
    assert limiter.check("192.0.2.2", 20 * S_NS) is Limit.PASS and limiter.evictions == 1
    assert limiter.check("192.0.2.1", 20 * S_NS) is Limit.PASS and limiter.evictions == 2


def test_disabled_limiter_always_passes_and_keeps_no_state() -> None:
    limiter = RateLimiter(0, 1)
    assert set(_run(limiter, "192.0.2.1", [0] * 1000)) == {Limit.PASS}
    assert limiter.counters() == (1000, 0, 0, 0, 0)


def test_time_going_backwards_refills_nothing_and_withholds_kod() -> None:
    limiter = RateLimiter(1.0, 1)
    t0 = 1000 * S_NS
    assert _run(limiter, "192.0.2.1", [t0, t0]) == [Limit.PASS, Limit.KOD]
    assert limiter.check("192.0.2.1", t0 - 10 * S_NS) is Limit.DROP  # no refill, KoD withheld
    assert limiter.check("192.0.2.1", t0 - 9 * S_NS) is Limit.PASS  # refills from the new instant
    assert limiter.check("192.0.2.1", t0 + S_NS) is Limit.PASS  # at most one extra bucketful for the step


@pytest.mark.parametrize("args", [(-1.0, 1), (math.nan, 1), (math.inf, 1), (1.0, 0), (1.0, 1.5), (1.0, True),
                                  (1.0, 1, 0), (1.0, 1, -5)])
def test_bad_parameters_are_rejected(args: tuple) -> None:
    with pytest.raises(ValueError):
        RateLimiter(*args)


@settings(max_examples=300, deadline=None)
@given(rate_per_s=st.floats(0.01, 100.0), burst=st.integers(1, 20), start_ns=st.integers(0, 10**12),
       gaps_ns=st.lists(st.integers(0, 3 * S_NS) | st.integers(0, 10 * MS_NS), min_size=1, max_size=300))
def test_passes_and_kods_are_bounded_in_any_window(rate_per_s: float, burst: int, start_ns: int,
                                                   gaps_ns: list[int]) -> None:
    limiter = RateLimiter(rate_per_s, burst)
    times_ns = [start_ns]
    for gap in gaps_ns[1:]:
        times_ns.append(times_ns[-1] + gap)
    got = _run(limiter, "2001:db8::1", times_ns)
    window_s = (times_ns[-1] - times_ns[0]) / S_NS
    assert got.count(Limit.PASS) <= burst + rate_per_s * window_s + 1e-6  # 1e-6: float rounding, not slack
    assert got.count(Limit.KOD) <= window_s + 1
    # The same bounds hold for every sub-window that starts at a request, since the bucket is at most full there.
    for i in range(0, len(times_ns), max(1, len(times_ns) // 8)):
        sub_s = (times_ns[-1] - times_ns[i]) / S_NS
        assert got[i:].count(Limit.PASS) <= burst + rate_per_s * sub_s + 1e-6
        assert got[i:].count(Limit.KOD) <= sub_s + 1


@settings(max_examples=100, deadline=None)
@given(times_ns=st.lists(st.integers(0, 20 * S_NS), min_size=1, max_size=200))
def test_kods_are_a_second_apart_even_if_time_jumps_around(times_ns: list[int]) -> None:
    limiter = RateLimiter(0.5, 2)
    kod_times = [t for t, got in zip(times_ns, _run(limiter, "192.0.2.1", times_ns)) if got is Limit.KOD]
    assert all(b - a >= S_NS for a, b in zip(kod_times, kod_times[1:]))


def test_hundred_thousand_checks_over_a_thousand_clients_keep_one_entry_each() -> None:
    # How fast the checks run is measured by bench/ntp_throughput.py, not judged here: a busy host is slow, not wrong.
    clients = [ipaddress.ip_address(f"10.0.{i // 256}.{i % 256}").packed for i in range(1000)]
    limiter = RateLimiter(16.0, 32, max_clients=65_536)
    for i in range(100_000):
        limiter.check(clients[i % 1000], i * 10_000)
    assert limiter.size == 1000 and limiter.passed + limiter.kod + limiter.dropped == 100_000
