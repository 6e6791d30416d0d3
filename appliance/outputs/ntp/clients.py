"""Who asks the NTP server for time, and how often: the busiest clients of a recent window, and the request rate.

Pure core (no clock reads: every call takes ``now_ns``).  Memory is bounded whatever the clients do: a flood from
millions of addresses (spoofed or not) costs the same few counters as one quiet client.  The busiest clients are
counted by *space-saving* (Metwally, Agrawal, El Abbadi, "Efficient computation of frequent and top-k elements in
data streams", ICDT 2005): ``capacity`` counters; a new client takes over the smallest counter and inherits its
count, so a count is never under the truth and over it by at most the inherited part (``error``), and every client
with more than total/capacity requests is held.  A client is an IPv4 address or an IPv6 /64 (the rate limiter's
key, ``protocol/limits.py``).  The recent window is made of ``buckets`` of ``bucket_ns`` each; the oldest is dropped
as time moves on, so the top list is of the last ``buckets * bucket_ns`` (a minute by default), not since start.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass, field

from appliance.units import NS_PER_S

DEFAULT_CAPACITY = 32
DEFAULT_BUCKET_NS = 10 * NS_PER_S
DEFAULT_BUCKETS = 6
RATE_WINDOW_NS = 60 * NS_PER_S
RATE_MIN_SPACING_NS = NS_PER_S  # samples closer than this are not kept: the history stays small


@dataclass
class SpaceSaving:
    """At most ``capacity`` (client, count, error) counters of the heaviest clients seen."""

    capacity: int = DEFAULT_CAPACITY
    counts: dict[bytes, int] = field(default_factory=dict)
    errors: dict[bytes, int] = field(default_factory=dict)

    def add(self, client: bytes, count: int = 1, error: int = 0) -> None:
        """Count ``count`` requests of ``client`` (``error``: how much of ``count`` may be over the truth)."""
        if count <= 0:
            return
        if client in self.counts:
            self.counts[client] += count
            self.errors[client] += error
            return
        inherited = 0
        if len(self.counts) >= self.capacity:
            smallest = min(self.counts, key=self.counts.__getitem__)
            inherited = self.counts.pop(smallest)
            del self.errors[smallest]
        self.counts[client] = inherited + count
        self.errors[client] = inherited + error

    def top(self, n: int) -> list[tuple[bytes, int, int]]:
        """The ``n`` largest as (client, count, error), largest first (ties by client, for a stable order)."""
        ranked = sorted(self.counts.items(), key=lambda item: (-item[1], item[0]))[:max(0, n)]
        return [(client, count, self.errors[client]) for client, count in ranked]

    def merge(self, other: SpaceSaving) -> None:
        for client, count in other.counts.items():
            self.add(client, count, other.errors[client])


class RecentClients:
    """The busiest clients of the last ``buckets * bucket_ns``: one space-saving summary per bucket."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, bucket_ns: int = DEFAULT_BUCKET_NS,
                 buckets: int = DEFAULT_BUCKETS):
        if capacity < 1 or bucket_ns < 1 or buckets < 1:
            raise ValueError("capacity, bucket_ns and buckets must be positive")
        self.capacity, self.bucket_ns, self.buckets = capacity, bucket_ns, buckets
        self._window: deque[tuple[int, SpaceSaving]] = deque()  # (bucket index, its summary), oldest first

    @property
    def window_ns(self) -> int:
        return self.bucket_ns * self.buckets

    def add(self, client: bytes, now_ns: int, count: int = 1, error: int = 0) -> None:
        index = now_ns // self.bucket_ns
        self._expire(index)
        if not self._window or self._window[-1][0] < index:
            self._window.append((index, SpaceSaving(self.capacity)))
        self._window[-1][1].add(client, count, error)

    def top(self, n: int, now_ns: int) -> list[tuple[bytes, int, int]]:
        """The ``n`` busiest clients of the window ending at ``now_ns`` as (client, requests, error)."""
        self._expire(now_ns // self.bucket_ns)
        total = SpaceSaving(self.capacity)
        for _index, summary in self._window:
            total.merge(summary)
        return total.top(n)

    def _expire(self, index: int) -> None:
        while self._window and self._window[0][0] <= index - self.buckets:
            self._window.popleft()


class RequestRate:
    """Requests per second over the last ``window_ns``, from samples of a request counter that only grows (a
    counter that goes back, a restarted worker's, starts the history again)."""

    def __init__(self, window_ns: int = RATE_WINDOW_NS, min_spacing_ns: int = RATE_MIN_SPACING_NS):
        self.window_ns, self.min_spacing_ns = window_ns, min_spacing_ns
        self._samples: deque[tuple[int, int]] = deque()  # (now_ns, requests), oldest first

    def sample(self, now_ns: int, requests: int) -> None:
        if self._samples and requests < self._samples[-1][1]:
            self._samples.clear()
        if self._samples and now_ns - self._samples[-1][0] < self.min_spacing_ns:
            return
        self._samples.append((now_ns, requests))
        while len(self._samples) > 2 and now_ns - self._samples[1][0] >= self.window_ns:
            self._samples.popleft()  # keep one sample at or before the window's start

    def per_s(self) -> float | None:
        """None until two samples a second or more apart exist."""
        if len(self._samples) < 2:
            return None
        (t0, n0), (t1, n1) = self._samples[0], self._samples[-1]
        return (n1 - n0) * NS_PER_S / (t1 - t0) if t1 > t0 else None

    @property
    def span_ns(self) -> int:
        return self._samples[-1][0] - self._samples[0][0] if len(self._samples) > 1 else 0


def client_key(address: bytes) -> bytes:
    """A client's key from its packed address: an IPv4 address (or IPv4-mapped IPv6 as IPv4), or an IPv6 /64."""
    if len(address) == 16 and address[:12] == b"\0" * 10 + b"\xff\xff":
        return address[12:]
    return address if len(address) == 4 else address[:8]


def client_text(key: bytes) -> str:
    """How a client key reads: ``192.0.2.7`` or ``2001:db8:1:2::/64``."""
    if len(key) == 4:
        return str(ipaddress.IPv4Address(key))
    network = ipaddress.IPv6Address(key[:8].ljust(16, bytes(1)))
    return f"{network}/64"
