"""Unit tests of the NTP client statistics (appliance.outputs.ntp.clients): space-saving top clients over a recent
window, the request rate, client keys."""

from __future__ import annotations

import random

import pytest

from appliance.outputs.ntp.clients import RecentClients, RequestRate, SpaceSaving, client_key, client_text
from appliance.units import NS_PER_S

A, B, C = bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2]), bytes([192, 0, 2, 3])


def test_space_saving_counts_exactly_while_there_is_room() -> None:
    summary = SpaceSaving(4)
    for client, count in ((A, 5), (B, 2), (C, 9), (A, 1)):
        summary.add(client, count)
    assert summary.top(2) == [(C, 9, 0), (A, 6, 0)]
    assert summary.top(10) == [(C, 9, 0), (A, 6, 0), (B, 2, 0)]


def test_a_new_client_takes_over_the_smallest_counter_and_its_count_as_error() -> None:
    summary = SpaceSaving(2)
    summary.add(A, 10)
    summary.add(B, 3)
    summary.add(C)  # B (3) is the smallest: C inherits it
    assert summary.top(5) == [(A, 10, 0), (C, 4, 3)]
    assert B not in summary.counts


def test_a_flood_of_addresses_keeps_the_memory_fixed_and_the_heavy_client_on_top() -> None:
    """A hostile flood from 100,000 different addresses (one request each) does not grow the summary past its
    capacity and does not push out a client that asked 5,000 times: space-saving holds every client above N/k
    (105,000 / 32, about 3,300)."""
    rng = random.Random(7)
    summary = SpaceSaving(32)
    heavy = bytes([198, 51, 100, 9])
    for i in range(100_000):
        summary.add(rng.randbytes(4))
        if i % 20 == 0:
            summary.add(heavy)
    assert len(summary.counts) == len(summary.errors) == 32
    client, count, error = summary.top(1)[0]
    assert client == heavy and count - error <= 5_000 <= count  # never under the truth, over by error at most


def test_recent_clients_forget_what_left_the_window() -> None:
    recent = RecentClients(capacity=8, bucket_ns=10 * NS_PER_S, buckets=6)
    assert recent.window_ns == 60 * NS_PER_S
    t0 = 1_000 * NS_PER_S
    recent.add(A, t0, count=50)
    recent.add(B, t0 + 30 * NS_PER_S, count=20)
    recent.add(B, t0 + 45 * NS_PER_S, count=20)
    assert recent.top(5, t0 + 50 * NS_PER_S) == [(A, 50, 0), (B, 40, 0)]
    assert recent.top(5, t0 + 61 * NS_PER_S) == [(B, 40, 0)]  # A's bucket left the window
    assert recent.top(5, t0 + 200 * NS_PER_S) == []
    assert len(recent._window) == 0


def test_recent_clients_hold_a_bounded_number_of_buckets() -> None:
    recent = RecentClients(capacity=4, bucket_ns=NS_PER_S, buckets=3)
    for second in range(100):
        for i in range(10):
            recent.add(bytes([10, 0, second % 256, i]), second * NS_PER_S)
    assert len(recent._window) == 3
    assert all(len(summary.counts) <= 4 for _index, summary in recent._window)


def test_recent_clients_refuse_a_window_of_nothing() -> None:
    with pytest.raises(ValueError):
        RecentClients(capacity=0)


def test_request_rate_over_the_last_minute() -> None:
    rate = RequestRate()
    assert rate.per_s() is None
    rate.sample(0, 0)
    rate.sample(NS_PER_S // 2, 100)  # too close to the last sample: not kept
    assert rate.per_s() is None
    for second in range(1, 121):  # 10 requests a second for two minutes, then 40 a second
        rate.sample(second * NS_PER_S, second * 10 if second <= 90 else 900 + (second - 90) * 40)
    # the window is the last 60 s (one sample at or before its start kept): from 60 s to 120 s
    assert rate.span_ns == 60 * NS_PER_S
    assert rate.per_s() == pytest.approx((2100 - 600) / 60)
    assert len(rate._samples) <= 62


def test_request_rate_starts_again_when_the_counter_goes_back() -> None:
    rate = RequestRate()
    rate.sample(0, 1000)
    rate.sample(NS_PER_S, 1010)
    rate.sample(2 * NS_PER_S, 5)  # a restarted worker's counter
    assert rate.per_s() is None
    rate.sample(4 * NS_PER_S, 25)
    assert rate.per_s() == pytest.approx(10.0)


def test_client_keys_and_how_they_read() -> None:
    assert client_key(A) == A
    mapped = b"\0" * 10 + b"\xff\xff" + A
    assert client_key(mapped) == A
    v6 = bytes.fromhex("20010db8000100020000000000000001")
    assert client_key(v6) == v6[:8]
    assert client_text(A) == "192.0.2.1"
    assert client_text(client_key(v6)) == "2001:db8:1:2::/64"
