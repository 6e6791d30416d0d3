"""The executable model of the rate limiter specified in ``appliance/protocol/limits.py`` (its docstring, line by
line), which the product runs in C (``appliance/protocol/native/bucket.h``).  Not part of the product: the oracle of
the differential property test (tests/props/test_limits_native.py)."""

from __future__ import annotations

from collections import OrderedDict

from appliance.protocol.limits import (DEFAULT_MAX_CLIENTS, KOD_INTERVAL_NS, Address, Limit, LimiterCounters,
                                       RateLimiter, client_key)


class _Bucket:
    __slots__ = ("tokens", "last_ns", "last_kod_ns")

    def __init__(self, tokens: float, now_ns: int) -> None:
        self.tokens = tokens
        self.last_ns = now_ns
        self.last_kod_ns: int | None = None


class ModelRateLimiter:
    """Token bucket per client (IPv4 address or IPv6 /64) in a true-LRU table of at most ``max_clients``."""

    def __init__(self, rate_per_s: float, burst: int, max_clients: int = DEFAULT_MAX_CLIENTS) -> None:
        RateLimiter(rate_per_s, burst, max_clients)  # the product's checks of the arguments, ValueError as there
        self.rate_per_s = float(rate_per_s)
        self.burst = burst
        self.max_clients = max_clients
        self._table: OrderedDict[bytes, _Bucket] = OrderedDict()  # first = least recently seen
        self.passed = self.kod = self.dropped = self.evictions = 0

    @property
    def size(self) -> int:
        return len(self._table)

    def counters(self) -> LimiterCounters:
        return LimiterCounters(self.passed, self.kod, self.dropped, self.evictions, len(self._table))

    def check(self, client_ip: Address, now_ns: int) -> Limit:
        if self.rate_per_s == 0.0:
            self.passed += 1
            return Limit.PASS
        bucket = self._touch(client_key(client_ip), now_ns)
        elapsed_ns = max(0, now_ns - bucket.last_ns)  # a backward step refills nothing
        bucket.tokens = min(float(self.burst), bucket.tokens + elapsed_ns * self.rate_per_s / 1e9)
        bucket.last_ns = now_ns
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            self.passed += 1
            return Limit.PASS
        if bucket.last_kod_ns is None or now_ns - bucket.last_kod_ns >= KOD_INTERVAL_NS:
            bucket.last_kod_ns = now_ns
            self.kod += 1
            return Limit.KOD
        self.dropped += 1
        return Limit.DROP

    def _touch(self, key: bytes, now_ns: int) -> _Bucket:
        """The key's bucket, now the most recently seen; a new key evicts the least recently seen when full."""
        bucket = self._table.get(key)
        if bucket is not None:
            self._table.move_to_end(key)
            return bucket
        if len(self._table) >= self.max_clients:
            self._table.popitem(last=False)
            self.evictions += 1
        bucket = self._table[key] = _Bucket(float(self.burst), now_ns)
        return bucket
