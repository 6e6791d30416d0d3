"""NtpUpstream: the clock filter per server, Marzullo selection, clustering and combining of NTP servers, fed with the
poller's samples by hand (offsets are the server minus the served time; the estimate is the served time minus the
consensus)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.edge.ntp_poller import NtpSample
from appliance.refs import ntp_select
from appliance.refs.model import RefSample
from appliance.refs.ntp_select import CANDIDATE, ERROR, FALSETICKER, SURVIVOR, UNREACHABLE, NtpUpstream, ServerStatus
from appliance.units import NS_PER_S

MS = 1_000_000
T0 = 1_760_000_000 * NS_PER_S  # a host instant (POSIX ns)
PRECISION_NS = 1_000


@dataclass(frozen=True)
class DelaySample:
    """An NtpSample with the round-trip delay the poller does not report yet."""

    server: str
    host_ns: int
    offset_ns: object
    uncertainty_ns: object
    stratum: object
    error: object = ""
    delay_ns: object = None


def ok(server: str, offset_ns: int, distance_ns: int = 5 * MS, at_ns: int = T0, stratum: int = 2) -> NtpSample:
    return NtpSample(server, at_ns, offset_ns, distance_ns, stratum)


def failed(server: str, error: str, at_ns: int = T0) -> NtpSample:
    return NtpSample(server, at_ns, 0, 0, 0, error)


def feed(upstream: NtpUpstream, *samples: object) -> NtpUpstream:
    for sample in samples:
        upstream.on_sample(sample)
    return upstream


def rows(upstream: NtpUpstream, now_ns: int | None = None) -> dict[str, ServerStatus]:
    return {row.server: row for row in upstream.servers(now_ns)}


# --- selection ------------------------------------------------------------------------------------------------------
def test_a_falseticker_50_ms_off_is_rejected_and_named() -> None:
    up = feed(NtpUpstream(min_survivors=3), ok("a", 1 * MS), ok("b", 2 * MS), ok("c", 1_500_000), ok("bad", 50 * MS))
    est = up.estimate(T0)
    assert est is not None
    assert [f.server for f in est.falsetickers] == ["bad"]
    assert "misses the majority" in est.falsetickers[0].reason
    assert set(est.survivors) == {"a", "b", "c"} and est.outliers == ()
    assert -2 * MS <= est.offset_ns <= -1 * MS  # served minus NTP: the servers are ahead of the served time
    assert est.stratum == 2 and est.system_peer in est.survivors and est.host_ns == T0
    assert 5 * MS < est.uncertainty_ns < 6 * MS
    state = rows(up)
    assert state["bad"].state == FALSETICKER and state["bad"].reason == est.falsetickers[0].reason
    assert {state[s].state for s in "abc"} == {SURVIVOR}
    assert state[est.system_peer].reason == "system peer"


def test_the_estimate_has_the_sign_of_a_ref_sample() -> None:
    est = feed(NtpUpstream(name="ntp-up"), ok("a", 7 * MS, 1 * MS)).estimate(T0)
    assert est is not None and est.offset_ns == -7 * MS
    assert est.ref_sample(123) == RefSample("ntp-up", 123, float(-7 * MS), float(est.uncertainty_ns))


def test_two_of_three_wrong_in_different_ways_is_no_majority() -> None:
    up = feed(NtpUpstream(), ok("a", 0), ok("b", 50 * MS), ok("c", -50 * MS))
    assert up.estimate(T0) is None
    assert "no majority" in up.last_verdict
    assert {r.state for r in up.servers()} == {CANDIDATE}
    assert all("no majority" in r.reason for r in up.servers())


def test_two_wrong_servers_that_agree_outvote_the_honest_one() -> None:
    """The limit of any majority rule, documented: two colluding (or identically misconfigured) servers of three win."""
    est = feed(NtpUpstream(), ok("honest", 0), ok("b", 50 * MS), ok("c", 51 * MS)).estimate(T0)
    assert est is not None and [f.server for f in est.falsetickers] == ["honest"]


def test_two_servers_that_disagree_are_no_majority() -> None:
    up = feed(NtpUpstream(), ok("a", 0), ok("b", 30 * MS))
    assert up.estimate(T0) is None and "no majority" in up.last_verdict


def test_two_disjoint_majorities_are_no_majority() -> None:
    # "wide" agrees with both "low" and "high", which do not agree with each other: no single interval has a majority
    # of the intervals in it, wherever the two ends of Marzullo's scan land.
    up = feed(NtpUpstream(), ok("wide", 5 * MS, 5 * MS), ok("low", 0, 500_000), ok("high", 10 * MS, 500_000))
    assert up.estimate(T0) is None


def test_one_server_alone_is_used_with_its_own_uncertainty() -> None:
    up = feed(NtpUpstream(), ok("only", -3 * MS, 4 * MS, stratum=1))
    est = up.estimate(T0)
    assert est is not None
    assert (est.offset_ns, est.system_peer, est.survivors, est.falsetickers, est.stratum) == (3 * MS, "only",
                                                                                               ("only",), (), 1)
    # its root distance, plus the filter's jitter floor twice (in the distance and as the system jitter), rounded up
    assert 0 <= est.uncertainty_ns - (4 * MS + 2 * PRECISION_NS) <= 1
    assert est.intersection_ns == (3 * MS - 4 * MS - PRECISION_NS, 3 * MS + 4 * MS + PRECISION_NS)


def test_no_server_is_no_estimate() -> None:
    up = NtpUpstream(servers=["a", "b"])
    assert up.estimate(T0) is None and up.last_verdict == "no candidate server"
    assert [(r.server, r.state, r.reason) for r in up.servers()] == [("a", UNREACHABLE, "not polled yet"),
                                                                      ("b", UNREACHABLE, "not polled yet")]


def test_the_estimate_is_clamped_into_the_truechimers_common_interval() -> None:
    # Both tight servers say +2 ms, the wide one 0: all agree on [1 ms, 1 ms + precision] only, and the weighted mean
    # (~1.3 ms) lies outside what the wide one allows.
    up = NtpUpstream(min_survivors=3)
    tight_ns = 1 * MS - 2 * PRECISION_NS
    feed(up, ok("wide", 0, 1 * MS), ok("t1", 2 * MS, tight_ns), ok("t2", 2 * MS, tight_ns))
    est = up.estimate(T0)
    assert est is not None and len(est.survivors) == 3
    low, high = est.intersection_ns
    assert low <= est.offset_ns <= high and high - low <= PRECISION_NS
    assert est.offset_ns == -1 * MS - PRECISION_NS


# --- clustering -----------------------------------------------------------------------------------------------------
def test_clustering_drops_the_outlying_truechimer_down_to_min_survivors() -> None:
    samples = (ok("a", 0, 10 * MS), ok("b", 100_000, 10 * MS), ok("c", -100_000, 10 * MS), ok("far", 8 * MS, 10 * MS))
    est = feed(NtpUpstream(min_survivors=3), *samples).estimate(T0)
    assert est is not None and est.falsetickers == () and est.outliers == ("far",)
    assert set(est.survivors) == {"a", "b", "c"} and abs(est.offset_ns) < 100_000
    row = rows(feed(NtpUpstream(min_survivors=3), *samples))["far"]
    assert row.state == CANDIDATE and row.reason.startswith("clustered out: selection jitter")
    kept = feed(NtpUpstream(min_survivors=4), *samples).estimate(T0)
    assert kept is not None and kept.outliers == () and len(kept.survivors) == 4


def test_clustering_stops_when_the_selection_jitter_is_within_the_peer_jitter() -> None:
    up = NtpUpstream()
    for i in range(4):  # each server's own samples scatter by +-1 ms: 0.1 ms between servers is noise
        wobble = (-1) ** i * MS
        feed(up, ok("a", wobble, at_ns=T0 + i), ok("b", 100_000 + wobble, at_ns=T0 + i),
             ok("c", -100_000 + wobble, at_ns=T0 + i))
    est = up.estimate(T0 + 4)
    assert est is not None and len(est.survivors) == 3 and est.outliers == ()
    assert est.jitter_ns >= 1 * MS


def test_the_system_peer_is_the_lowest_stratum_then_the_nearest() -> None:
    up = feed(NtpUpstream(min_survivors=3), ok("s2near", 0, 1 * MS, stratum=2), ok("s1far", 0, 4 * MS, stratum=1),
              ok("s1near", 0, 2 * MS, stratum=1))
    est = up.estimate(T0)
    assert est is not None and est.system_peer == "s1near" and est.stratum == 1


def test_survivors_are_weighted_by_one_over_distance() -> None:
    up = feed(NtpUpstream(min_survivors=2, precision_ns=1), ok("near", 0, 1 * MS), ok("far", 3 * MS, 3 * MS))
    est = up.estimate(T0)
    assert est is not None and set(est.survivors) == {"near", "far"}
    assert abs(est.offset_ns - (-(0 / 1 + 3 / 3) / (1 / 1 + 1 / 3) * MS)) < 2  # weights 1 and 1/3: 0.75 ms
    assert abs(est.uncertainty_ns - (2 / (1 / MS + 1 / (3 * MS)) + est.jitter_ns)) <= 2


# --- clock filter ---------------------------------------------------------------------------------------------------
def test_the_clock_filter_picks_the_least_delay_sample() -> None:
    up = NtpUpstream()
    for i, (offset_ns, delay_ns) in enumerate([(10 * MS, 5 * MS), (1 * MS, 1 * MS), (5 * MS, 3 * MS)]):
        up.on_sample(DelaySample("a", T0 + i * NS_PER_S, offset_ns, 4 * MS, 2, delay_ns=delay_ns))
    row = rows(up, T0 + 2 * NS_PER_S)["a"]
    assert (row.offset_ns, row.delay_ns, row.last_offset_ns) == (1 * MS, 1 * MS, 5 * MS)
    est = up.estimate(T0 + 2 * NS_PER_S)
    assert est is not None and est.offset_ns == -1 * MS and est.host_ns == T0 + NS_PER_S
    # the peer jitter is the RMS difference of the others from the pick: sqrt((9^2 + 4^2) / 2) ms
    assert abs(row.jitter_ns - math.sqrt((81 + 16) / 2) * MS) <= 1


def test_without_a_delay_the_filter_picks_the_least_root_distance() -> None:
    up = feed(NtpUpstream(), ok("a", 4 * MS, 9 * MS), ok("a", 2 * MS, 3 * MS, at_ns=T0 + 1),
              ok("a", 7 * MS, 6 * MS, at_ns=T0 + 2))
    assert rows(up, T0 + 2)["a"].offset_ns == 2 * MS


def test_the_filter_keeps_eight_samples() -> None:
    up = NtpUpstream()
    up.on_sample(DelaySample("a", T0, 1 * MS, 1 * MS, 2, delay_ns=0))  # the best, pushed out by eight newer ones
    for i in range(1, ntp_select.FILTER_STAGES + 1):
        up.on_sample(DelaySample("a", T0 + i, 5 * MS, 1 * MS, 2, delay_ns=1 * MS))
    assert rows(up, T0 + 9)["a"].offset_ns == 5 * MS


def test_stale_samples_age_out() -> None:
    up = NtpUpstream(max_age_ns=100 * NS_PER_S)
    feed(up, ok("a", 0, 1 * MS), ok("a", 5 * MS, 2 * MS, at_ns=T0 + 60 * NS_PER_S))
    assert rows(up, T0 + 60 * NS_PER_S)["a"].offset_ns == 0  # the older, nearer sample still wins
    assert rows(up, T0 + 101 * NS_PER_S)["a"].offset_ns == 5 * MS  # until it is older than max_age_ns
    assert up.estimate(T0 + 161 * NS_PER_S) is None
    row = rows(up)["a"]
    assert row.state == UNREACHABLE and "no usable reply in the last 100 s" in row.reason
    assert row.reach == 0b11  # the register counts polls, not seconds: the server was simply not polled since


def test_a_sample_grows_less_certain_with_age() -> None:
    up = feed(NtpUpstream(), ok("a", 0, 1 * MS))
    fresh, old = up.estimate(T0), up.estimate(T0 + 1000 * NS_PER_S)
    assert fresh is not None and old is not None
    assert old.uncertainty_ns - fresh.uncertainty_ns == pytest.approx(ntp_select.PHI * 1000 * NS_PER_S, abs=2)


# --- reachability, errors, garbage --------------------------------------------------------------------------------
def test_an_unreachable_server_leaves_the_others_in_charge() -> None:
    up = NtpUpstream(min_survivors=3)
    feed(up, ok("a", 0), ok("b", 0), ok("gone", 0))
    for i in range(1, 8):
        feed(up, failed("gone", "No response received from 127.0.0.1.", at_ns=T0 + i))
        assert rows(up)["gone"].reach == (1 << i) & 0xFF
        assert rows(up)["gone"].state == SURVIVOR  # one good reply in the last eight polls keeps it reachable
    feed(up, failed("gone", "No response received from 127.0.0.1.", at_ns=T0 + 8))
    row = rows(up)["gone"]
    assert (row.state, row.reach, row.errors, row.polls) == (UNREACHABLE, 0, 8, 9)
    assert "No response" in row.reason
    est = up.estimate(T0 + 8)
    assert est is not None and set(est.survivors) == {"a", "b"}
    feed(up, ok("gone", 0, at_ns=T0 + 9))
    assert rows(up)["gone"].reach == 1 and rows(up)["gone"].state == SURVIVOR


@pytest.mark.parametrize(("sample", "counter", "state"), [
    (NtpSample("x", T0, 0, 0, 0, "server unsynchronised (leap 3, stratum 1)"), "unsynchronised", ERROR),
    (NtpSample("x", T0, 1 * MS, 1 * MS, 16), "unsynchronised", ERROR),
    (NtpSample("x", T0, 0, 0, 0, "kiss-o'-death 'DENY'"), "kisses", ERROR),
    (NtpSample("x", T0, 0, 0, 0, "kiss-o'-death 'RSTR'"), "kisses", ERROR),
    (NtpSample("x", T0, 0, 0, 0, "kiss-o'-death 'RATE'"), "kisses", SURVIVOR),  # only asks for fewer requests
    (NtpSample("x", T0, 1 * MS, 1 * MS, 0), "kisses", SURVIVOR),
    (NtpSample("x", T0, 0, 0, 0, "gaierror: Name or service not known"), "errors", SURVIVOR),
    (NtpSample("x", T0, 0, 0, 0, "served time unavailable: clock unsynchronised"), "errors", SURVIVOR),
])
def test_errors_are_counted_and_dropped(sample: NtpSample, counter: str, state: str) -> None:
    up = feed(NtpUpstream(), ok("x", 0), ok("y", 0), ok("z", 0), sample)
    row = rows(up)["x"]
    assert getattr(row, counter) == 1 and row.reach == 0b10 and row.last_offset_ns == 0
    assert row.state == state
    if state == ERROR:  # a refusing or unsynchronised server is no candidate, however fresh its older replies
        assert row.reason
        est = up.estimate(T0)
        assert est is not None and "x" not in est.survivors
        feed(up, ok("x", 0, at_ns=T0 + 1))  # until it answers properly again
        assert rows(up)["x"].state != ERROR


@pytest.mark.parametrize("sample", [
    DelaySample("x", T0, float("nan"), 1 * MS, 2),
    DelaySample("x", T0, float("inf"), 1 * MS, 2),
    DelaySample("x", T0, 1 * MS, -1, 2),
    DelaySample("x", T0, 1 * MS, float("nan"), 2),
    DelaySample("x", T0, 1 * MS, "1 ms", 2),
    DelaySample("x", T0, 1 * MS, 1 * MS, -1),
    DelaySample("x", T0, 1 * MS, 1 * MS, 2.5),
    DelaySample("x", T0, 1 * MS, 1 * MS, None),
    DelaySample("x", T0, 2**70, 1 * MS, 2),
    DelaySample("x", T0, 1 * MS, 1 * MS, 2, delay_ns=float("nan")),
])
def test_garbage_is_counted_as_invalid_and_dropped(sample: DelaySample) -> None:
    up = feed(NtpUpstream(), sample)
    row = rows(up)["x"]
    assert (row.invalid, row.reach, row.last_offset_ns) == (1, 0, None)
    assert up.estimate(T0) is None


def test_odd_but_usable_numbers_are_accepted() -> None:
    up = feed(NtpUpstream(), DelaySample("x", T0, 1.4e6, 1e6, True and 2, delay_ns=-5))  # float ns; negative delay
    row = rows(up)["x"]
    assert (row.offset_ns, row.delay_ns, row.invalid) == (1_400_000, 0, 0)


def test_samples_that_name_no_server_are_dropped() -> None:
    class Broken:
        @property
        def server(self) -> str:
            raise RuntimeError("broken sample")

    up = feed(NtpUpstream(), object(), None, Broken(), DelaySample("", T0, 0, 0, 1), ok("  ", 0))
    assert up.dropped == 5 and up.servers() == []


def test_a_broken_error_text_does_not_raise() -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise ValueError("no")

    up = feed(NtpUpstream(), DelaySample("x", T0, 0, 0, 1, error=Unprintable()))
    assert rows(up)["x"].errors == 1 and "unprintable" in rows(up)["x"].reason


def test_the_number_of_servers_is_bounded() -> None:
    up = NtpUpstream(max_servers=4)
    for i in range(100):
        up.on_sample(ok(f"s{i}", 0))
    assert len(up.servers()) == 4 and up.dropped == 96


def test_a_server_too_far_is_not_a_candidate() -> None:
    up = feed(NtpUpstream(max_distance_ns=100 * MS), ok("far", 0, 200 * MS))
    assert up.estimate(T0) is None
    row = rows(up)["far"]
    assert row.state == ERROR and "exceeds" in row.reason and row.distance_ns is not None


def test_bad_settings_are_rejected() -> None:
    for kwargs in ({"min_survivors": 0}, {"max_distance_ns": 0}, {"max_age_ns": -1}, {"precision_ns": 0},
                   {"max_servers": 0}):
        with pytest.raises(ValueError):
            NtpUpstream(**kwargs)


# --- properties -----------------------------------------------------------------------------------------------------
PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
offsets = st.integers(-100 * MS, 100 * MS)
distances = st.integers(0, 20 * MS)


@PROPS
@given(st.lists(st.tuples(offsets, distances, st.integers(1, 15)), min_size=1, max_size=7),
       st.integers(1, 4))
def test_the_estimate_lies_within_the_truechimers_intersection(servers: list[tuple[int, int, int]],
                                                                 min_survivors: int) -> None:
    up = NtpUpstream(min_survivors=min_survivors)
    for i, (offset_ns, distance_ns, stratum) in enumerate(servers):
        up.on_sample(ok(f"s{i}", offset_ns, distance_ns, stratum=stratum))
    est = up.estimate(T0)
    if est is None:
        return
    false = {f.server for f in est.falsetickers}
    chimers = [(o, d + PRECISION_NS) for i, (o, d, _) in enumerate(servers) if f"s{i}" not in false]
    assert set(est.survivors) | set(est.outliers) == {f"s{i}" for i in range(len(servers))} - false
    assert len(chimers) * 2 > len(servers)  # a majority
    assert len(est.survivors) >= min(min_survivors, len(chimers))
    # served minus NTP lies where every truechimer's interval says NTP time is
    assert all(o - d <= -est.offset_ns <= o + d for o, d in chimers)
    low, high = est.intersection_ns
    assert low <= est.offset_ns <= high
    assert est.uncertainty_ns >= min(d for _, d in chimers)


@PROPS
@given(st.lists(st.tuples(offsets, distances), min_size=3, max_size=6), offsets, distances,
       st.integers(0, 1_000_000))
def test_one_falseticker_never_carries_the_estimate_outside_the_honest_servers(
        honest: list[tuple[int, int]], bad_offset_ns: int, bad_distance_ns: int, stratum_seed: int) -> None:
    # Honest servers' intervals hold the true time (offset 0 here): the distance covers the offset.
    honest_intervals = [(o, abs(o) + d) for o, d in honest]
    up = NtpUpstream()
    for i, (o, d) in enumerate(honest_intervals):
        up.on_sample(ok(f"h{i}", o, d, stratum=1 + stratum_seed % 3))
    up.on_sample(ok("bad", bad_offset_ns, bad_distance_ns, stratum=1))
    est = up.estimate(T0)
    lowest = min(o - d for o, d in honest_intervals) - PRECISION_NS
    highest = max(o + d for o, d in honest_intervals) + PRECISION_NS
    bad_low, bad_high = bad_offset_ns - bad_distance_ns - PRECISION_NS, bad_offset_ns + bad_distance_ns + PRECISION_NS
    disjoint = all(bad_high < o - d - PRECISION_NS or bad_low > o + d + PRECISION_NS for o, d in honest_intervals)
    if disjoint:  # a falseticker that no honest server agrees with is always caught
        assert est is not None and [f.server for f in est.falsetickers] == ["bad"]
    if est is not None:
        assert lowest <= -est.offset_ns <= highest
        # and in fact within at least two honest servers' intervals at once
        inside = [o - d - PRECISION_NS <= -est.offset_ns <= o + d + PRECISION_NS for o, d in honest_intervals]
        assert sum(inside) >= 2
