"""Sync lateness: the bounded histogram (quantiles never below the truth, at most a bin above; windows between two
snapshots) and the grandmaster port's status showing each Sync's transmit time against its slot."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.outputs.ptp.lateness import N_BINS, SyncLateness, bin_edges_us, bin_of, window
from appliance.protocol.ptp import codec as c
from tests.unit.test_ptp_port import SRC, S, make
from tests.unit.test_ptp_unicast import signaling

US = 1_000
BASE_NS = 1_800_000_000 * S  # the served clock (TAI) at monotonic 0
latenesses = st.lists(st.integers(min_value=-50 * US, max_value=200_000 * US), min_size=1, max_size=300)


def _true_quantile_us(values_ns: list[int], q: float) -> int:
    ordered = sorted(max(0, v) // US for v in values_ns)
    rank = max(1, -(-round(q * len(ordered) * 1_000_000) // 1_000_000))
    return ordered[rank - 1]


@given(st.integers(min_value=0, max_value=1 << 30))
def test_every_value_falls_in_the_bin_whose_edges_hold_it(value_us: int) -> None:
    index = bin_of(value_us)
    low, high = bin_edges_us(index)
    assert 0 <= index < N_BINS
    assert low <= value_us < high or index == N_BINS - 1
    assert high - low <= max(1, low // 16)


def test_bins_are_contiguous_and_ordered() -> None:
    for index in range(N_BINS - 1):
        assert bin_edges_us(index)[1] == bin_edges_us(index + 1)[0]


@settings(max_examples=200)
@given(latenesses, st.sampled_from([0.5, 0.9, 0.99, 1.0]))
def test_a_quantile_is_never_below_the_truth_and_at_most_a_sixteenth_above(values_ns: list[int], q: float) -> None:
    stat = SyncLateness()
    for v in values_ns:
        stat.add(v)
    truth = _true_quantile_us(values_ns, q)
    got = stat.quantile_us(q)
    assert truth <= got <= max(truth + 1, truth * 17 / 16 + 1)
    assert got <= max(0, max(values_ns)) / US
    assert stat.count == len(values_ns)
    assert stat.over_1ms == sum(1 for v in values_ns if v > 1_000 * US)


@settings(max_examples=200)
@given(latenesses, latenesses)
def test_a_window_between_two_snapshots_is_the_statistic_of_the_syncs_in_it(first: list[int],
                                                                              second: list[int]) -> None:
    stat, alone = SyncLateness(), SyncLateness()
    for v in first:
        stat.add(v)
    before = stat.snapshot()
    for v in second:
        stat.add(v)
        alone.add(v)
    got, want = window(before, stat.snapshot()), alone.snapshot()
    assert got["syncs"] == want["syncs"] and got["late_over_1ms"] == want["late_over_1ms"]
    assert got["p99_us"] >= _true_quantile_us(second, 0.99)
    true_max_us = max(0, max(second)) / US
    assert true_max_us <= got["max_us"] <= max(true_max_us + 1, true_max_us * 17 / 16 + 1)


def test_memory_is_fixed_whatever_the_count() -> None:
    stat, values = SyncLateness(), range(0, 100_000_000_000, 7_777_777)
    for v in values:
        stat.add(v)
    assert len(stat.bins) == N_BINS and stat.count == len(values) and stat.max_ns == values[-1]
    assert stat.quantile_us(1.0) == values[-1] / US and stat.over_1ms == len(values) - 1


def test_the_ports_status_shows_how_late_each_sync_left_its_slot() -> None:
    port = make("g8275.2")
    port.handle_timer(1 * S, BASE_NS + 1 * S)
    port.handle_rx(signaling(c.RequestUnicastTransmissionTlv(c.MsgType.SYNC, 0, 300)), SRC, None, 2 * S)
    assert port.snapshot(2 * S)["sync_lateness"] == {"syncs": 0, "late_over_1ms": 0, "p50_us": 0.0, "p99_us": 0.0,
                                                     "max_us": 0.0, "bins": []}
    # the first slot is the grant (2 s); the timer fires 300 us late, the Sync leaves 150 us after that
    [sync] = port.handle_timer(2 * S + 300 * US, BASE_NS + 2 * S + 300 * US)
    port.handle_tx_timestamp(sync.token, BASE_NS + 2 * S + 450 * US)
    # the next slot is 3 s; this time the Sync leaves 1.5 ms after it
    [sync] = port.handle_timer(3 * S + 1_200 * US, BASE_NS + 3 * S + 1_200 * US)
    port.handle_tx_timestamp(sync.token, BASE_NS + 3 * S + 1_500 * US)
    late = port.snapshot(3 * S + 2_000 * US)["sync_lateness"]
    assert (late["syncs"], late["late_over_1ms"], late["max_us"]) == (2, 1, 1500.0)
    assert late["p50_us"] == 464.0 and late["p99_us"] == 1500.0  # bin [448, 464) us; the maximum caps the p99
