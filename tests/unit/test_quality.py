"""Unit tests for appliance.clock.quality: the one mapping from clock state to advertised quality."""

from __future__ import annotations

import dataclasses
import math
import random

import allantools
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from appliance.clock.quality import (
    PROFILES,
    STATES,
    Advertised,
    advertise,
    clock_accuracy,
    clock_accuracy_limit_ns,
    clock_class,
    irig_time_quality,
    is_synchronized,
    ntp_leap_indicator,
    ntp_root_dispersion_ns,
    ntp_stratum,
    offset_scaled_log_variance,
    ptp_variance_s2,
    tdev_at_tau0_s,
    time_source,
    traceability,
)

S_NS = 1_000_000_000
DAY_S = 86_400

# IEEE 1588-2019 Table 5, written out independently of the module: (limit in whole ns, code).
ACCURACY_TABLE_NS = [
    (1, 0x1D), (10, 0x1F), (25, 0x20), (100, 0x21), (250, 0x22),
    (1_000, 0x23), (2_500, 0x24), (10_000, 0x25), (25_000, 0x26), (100_000, 0x27), (250_000, 0x28),
    (1_000_000, 0x29), (2_500_000, 0x2A), (10_000_000, 0x2B), (25_000_000, 0x2C), (100_000_000, 0x2D),
    (250_000_000, 0x2E), (1 * S_NS, 0x2F), (10 * S_NS, 0x30),
]
SUB_NS_LIMITS_NS = {0x17: 0.001, 0x18: 0.0025, 0x19: 0.01, 0x1A: 0.025, 0x1B: 0.1, 0x1C: 0.25, 0x1E: 2.5}
# IEEE 1344 / C37.118 time quality: code k means "clock unlocked, time within 10**(k-10) s".
IRIG_TABLE_NS = [(10 ** (k - 1), k) for k in range(1, 12)]

bounds = st.integers(min_value=0, max_value=1_000 * S_NS)
optional_bounds = st.none() | bounds


# --- clockAccuracy ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("limit_ns", "code"), ACCURACY_TABLE_NS)
def test_clock_accuracy_exactly_at_and_just_above_each_limit(limit_ns: int, code: int) -> None:
    assert clock_accuracy(limit_ns) == code  # "accurate within" includes the limit
    assert clock_accuracy(limit_ns + 1) == code + 1  # 10 s + 1 ns is 0x31, "> 10 s"


def test_clock_accuracy_around_the_sub_integer_limits() -> None:
    assert clock_accuracy(0) == 0x17  # within 1 ps
    assert clock_accuracy(2) == 0x1E  # 2 ns <= 2.5 ns
    assert clock_accuracy(3) == 0x1F  # just above 2.5 ns in whole ns
    assert clock_accuracy(1_000 * S_NS) == 0x31


def test_clock_accuracy_unknown_and_invalid() -> None:
    assert clock_accuracy(None) == 0xFE
    with pytest.raises(ValueError, match=">= 0"):
        clock_accuracy(-1)


def test_clock_accuracy_limits_decode_every_code() -> None:
    for limit_ns, code in ACCURACY_TABLE_NS:
        assert clock_accuracy_limit_ns(code) == limit_ns
    for code, limit_ns in SUB_NS_LIMITS_NS.items():
        assert clock_accuracy_limit_ns(code) == pytest.approx(limit_ns, rel=1e-12)
    assert clock_accuracy_limit_ns(0x31) is None and clock_accuracy_limit_ns(0xFE) is None
    with pytest.raises(ValueError):
        clock_accuracy_limit_ns(0x16)


@given(bounds, bounds)
@example(10 * S_NS, 10 * S_NS + 1)
def test_clock_accuracy_is_monotone_in_the_bound(a_ns: int, b_ns: int) -> None:
    low, high = sorted((a_ns, b_ns))
    assert clock_accuracy(low) <= clock_accuracy(high) < clock_accuracy(None)


@given(bounds)
@example(0)
@example(2)
@example(10 * S_NS + 1)
def test_clock_accuracy_never_claims_better_than_the_bound(bound_ns: int) -> None:
    code = clock_accuracy(bound_ns)
    limit_ns = clock_accuracy_limit_ns(code)
    if limit_ns is None:
        assert code == 0x31 and bound_ns > 10 * S_NS
    else:
        assert limit_ns >= bound_ns
    if code > 0x17:  # and it is the smallest such code
        assert clock_accuracy_limit_ns(code - 1) < bound_ns


# --- offsetScaledLogVariance and TDEV ----------------------------------------------------------------


def test_g8275_1_locked_grandmaster_value_decodes_to_about_34_ns_tdev() -> None:
    # G.8275.1 T-GM locked to a PRTC advertises 0x4E5D: variance = 2**((0x4E5D - 0x8000)/256) s**2.
    variance_s2 = ptp_variance_s2(0x4E5D)
    assert variance_s2 == pytest.approx(1.1425e-15, rel=1e-4)
    tdev_s = math.sqrt(variance_s2)
    assert tdev_s == pytest.approx(33.80e-9, rel=1e-3)  # TDEV of about 33.8 ns
    assert offset_scaled_log_variance(tdev_s) == 0x4E5D
    assert offset_scaled_log_variance(30e-9) == 0x4E05  # a 30 ns TDEV is a little better than 0x4E5D


@pytest.mark.parametrize(("tdev_s", "encoded"), [
    (1.0, 0x8000), (2.0, 0x8200), (0.5, 0x7E00), (2 ** -0.5, 0x7F00), (2 ** -64, 0x0000),
])
def test_offset_scaled_log_variance_known_values(tdev_s: float, encoded: int) -> None:
    assert offset_scaled_log_variance(tdev_s) == encoded


def test_offset_scaled_log_variance_clamps_and_unknown() -> None:
    assert offset_scaled_log_variance(None) == 0xFFFF
    assert offset_scaled_log_variance(0.0) == 0
    assert offset_scaled_log_variance(1e-100) == 0
    assert offset_scaled_log_variance(2.0 ** 64) == 0xFFFF  # too large to be represented
    assert offset_scaled_log_variance(math.inf) == 0xFFFF
    for bad in (-1e-9, math.nan):
        with pytest.raises(ValueError):
            offset_scaled_log_variance(bad)


def test_offset_scaled_log_variance_decode_encode_round_trip() -> None:
    for encoded in range(0xFFFF):
        assert offset_scaled_log_variance(math.sqrt(ptp_variance_s2(encoded))) == encoded
    assert ptp_variance_s2(0xFFFF) is None
    with pytest.raises(ValueError):
        ptp_variance_s2(0x10000)


@given(st.floats(min_value=0, max_value=1e30), st.floats(min_value=0, max_value=1e30))
def test_offset_scaled_log_variance_is_monotone(a_s: float, b_s: float) -> None:
    low, high = sorted((a_s, b_s))
    assert offset_scaled_log_variance(low) <= offset_scaled_log_variance(high)


def test_tdev_needs_three_samples_and_removes_frequency_offset() -> None:
    assert tdev_at_tau0_s([]) is None and tdev_at_tau0_s([1.0, 2.0]) is None
    assert tdev_at_tau0_s([5.0 + 7.0 * i for i in range(100)]) == 0.0  # constant frequency offset
    a = 0.5  # drift: x = a i**2 has second difference 2a, so TDEV = 2a / sqrt(6) ns
    assert tdev_at_tau0_s([a * i * i for i in range(50)]) == pytest.approx(2 * a / math.sqrt(6) * 1e-9)


@pytest.mark.parametrize("tau0_s", [1.0, 0.125])
def test_tdev_matches_allantools(tau0_s: float) -> None:
    rng = random.Random(1588)
    phase_ns = [rng.gauss(0.0, 20.0) + 3.0 * i for i in range(500)]
    ours = tdev_at_tau0_s(phase_ns, tau0_s)
    _, ref, _, _ = allantools.tdev([x * 1e-9 for x in phase_ns], rate=1 / tau0_s, data_type="phase",
                                   taus=[tau0_s])
    assert ours == pytest.approx(ref[0], rel=1e-9)


def test_tdev_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        tdev_at_tau0_s([0.0, 1.0, 2.0], tau0_s=0.0)
    with pytest.raises(ValueError):
        tdev_at_tau0_s([0.0, math.inf, 2.0])


# --- clockClass, timeSource, traceability ------------------------------------------------------------

DEFAULT_CLASSES = {"LOCKED": (6, 6), "HOLDOVER": (7, 52), "HOLDOVER_EXPIRED": (52, 52),
                   "FREERUN": (248, 248), "ACQUIRING": (248, 248)}  # (in spec, out of spec), alternative A


@pytest.mark.parametrize("profile", ["default-e2e", "default-p2p", "c37.238"])
@pytest.mark.parametrize("state", STATES)
def test_clock_class_default_rules(profile: str, state: str) -> None:
    in_spec, out_of_spec = DEFAULT_CLASSES[state]
    assert clock_class(state, profile, holdover_in_spec=True) == in_spec
    assert clock_class(state, profile, holdover_in_spec=False) == out_of_spec
    b = {52: 187}.get(out_of_spec, out_of_spec)  # alternative B only changes the degraded class
    assert clock_class(state, profile, holdover_in_spec=False, degraded="B") == b
    assert clock_class(state, profile, False, out_of_spec_category=3) == out_of_spec  # category is telecom-only


TELECOM_CLASSES = {"LOCKED": (6, 6), "HOLDOVER": (7, 140), "HOLDOVER_EXPIRED": (140, 140),
                   "FREERUN": (248, 248), "ACQUIRING": (248, 248)}


@pytest.mark.parametrize("profile", ["g8275.1", "g8275.2"])
@pytest.mark.parametrize("state", STATES)
def test_clock_class_telecom_rules(profile: str, state: str) -> None:
    in_spec, out_of_spec = TELECOM_CLASSES[state]
    assert clock_class(state, profile, holdover_in_spec=True) == in_spec
    assert clock_class(state, profile, holdover_in_spec=False) == out_of_spec
    assert clock_class(state, profile, False, degraded="B") == out_of_spec  # A/B is default-profile only
    for category, expected in ((2, 150), (3, 160)):
        want = expected if out_of_spec == 140 else out_of_spec
        assert clock_class(state, profile, False, out_of_spec_category=category) == want


def test_clock_class_rejects_unknown_inputs() -> None:
    with pytest.raises(ValueError) as err:
        clock_class("LOCKED", "g8275.3", True)
    assert all(p in str(err.value) for p in PROFILES)
    with pytest.raises(ValueError, match="state"):
        clock_class("SYNCED", "default-e2e", True)
    with pytest.raises(ValueError):
        clock_class("HOLDOVER", "default-e2e", False, degraded="C")
    with pytest.raises(ValueError):
        clock_class("HOLDOVER", "g8275.1", False, out_of_spec_category=4)


@pytest.mark.parametrize(("state", "source"), [
    ("LOCKED", 0x20), ("ACQUIRING", 0x20), ("HOLDOVER", 0xA0), ("HOLDOVER_EXPIRED", 0xA0), ("FREERUN", 0xA0),
])
def test_time_source(state: str, source: int) -> None:
    assert time_source(state) == source


@pytest.mark.parametrize(("state", "in_spec", "expected"), [
    ("LOCKED", False, True), ("HOLDOVER", True, True), ("HOLDOVER", False, False),
    ("HOLDOVER_EXPIRED", True, False), ("FREERUN", True, False), ("ACQUIRING", True, False),
])
def test_traceability_and_synchronized(state: str, in_spec: bool, expected: bool) -> None:
    assert traceability(state, in_spec) == (expected, expected)
    assert is_synchronized(state, in_spec) is expected


# --- NTP ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("synchronized", "change_s", "to_change_s", "li"), [
    (False, 0, None, 3), (False, 1, 10, 3),
    (True, 0, None, 0), (True, 0, 10, 0), (True, 1, None, 0),
    (True, 1, DAY_S, 1), (True, -1, DAY_S, 2), (True, 1, 1, 1), (True, -1, 1, 2),
    (True, 1, DAY_S + 1, 0), (True, 1, 20 * DAY_S, 0),  # announced only in the last day
    (True, 1, 0, 0), (True, 1, -5, 0),  # already in effect
])
def test_ntp_leap_indicator(synchronized: bool, change_s: int, to_change_s: int | None, li: int) -> None:
    assert ntp_leap_indicator(synchronized, change_s, to_change_s) == li


def test_ntp_leap_indicator_rejects_a_two_second_leap() -> None:
    with pytest.raises(ValueError):
        ntp_leap_indicator(True, 2, 10)


def test_ntp_stratum_and_root_dispersion() -> None:
    assert (ntp_stratum(True), ntp_stratum(False)) == (1, 16)
    assert ntp_root_dispersion_ns(None) == 16 * S_NS
    assert ntp_root_dispersion_ns(0) == 0 and ntp_root_dispersion_ns(1_234) == 1_234
    assert ntp_root_dispersion_ns(16 * S_NS + 1) == 16 * S_NS
    with pytest.raises(ValueError):
        ntp_root_dispersion_ns(-1)


# --- IRIG-B time quality -----------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["HOLDOVER", "HOLDOVER_EXPIRED"])
@pytest.mark.parametrize(("limit_ns", "code"), IRIG_TABLE_NS)
def test_irig_time_quality_exactly_at_and_just_above_each_limit(state: str, limit_ns: int, code: int) -> None:
    assert irig_time_quality(state, limit_ns) == code  # "time within" includes the limit
    assert irig_time_quality(state, limit_ns + 1) == (code + 1 if code < 0xB else 0xF)


@pytest.mark.parametrize("bound_ns", [None, 0, 50, 20 * S_NS])
def test_irig_time_quality_locked_and_fault_states(bound_ns: int | None) -> None:
    assert irig_time_quality("LOCKED", bound_ns) == 0x0
    assert irig_time_quality("FREERUN", bound_ns) == 0xF
    assert irig_time_quality("ACQUIRING", bound_ns) == 0xF


def test_irig_time_quality_holdover_edges() -> None:
    assert irig_time_quality("HOLDOVER", 0) == 0x1  # unlocked never reports 0x0, even with a zero bound
    assert irig_time_quality("HOLDOVER", None) == 0xF
    with pytest.raises(ValueError):
        irig_time_quality("HOLDOVER", -1)


@given(bounds, bounds)
def test_irig_time_quality_is_monotone_in_the_bound(a_ns: int, b_ns: int) -> None:
    low, high = sorted((a_ns, b_ns))
    assert irig_time_quality("HOLDOVER", low) <= irig_time_quality("HOLDOVER", high)
    assert irig_time_quality("HOLDOVER", high) <= irig_time_quality("HOLDOVER", None)


@given(bounds)
@example(1)
@example(2)
@example(10 * S_NS + 1)
def test_irig_time_quality_never_claims_better_than_the_bound(bound_ns: int) -> None:
    code = irig_time_quality("HOLDOVER", bound_ns)
    if code == 0xF:
        assert bound_ns > 10 * S_NS
    else:
        assert bound_ns <= 10 ** (code - 1)
        assert code == 1 or bound_ns > 10 ** (code - 2)


# --- the gathered advertisement ----------------------------------------------------------------------


def test_advertise_locked_telecom_grandmaster_matches_the_field_values() -> None:
    adv = advertise("LOCKED", 100, math.sqrt(ptp_variance_s2(0x4E5D)), "g8275.1", True, 0, None)
    assert adv == Advertised(clock_class=6, clock_accuracy=0x21, offset_scaled_log_variance=0x4E5D,
                             time_source=0x20, time_traceable=True, frequency_traceable=True,
                             ntp_leap_indicator=0, ntp_stratum=1, ntp_root_dispersion_ns=100,
                             irig_time_quality=0x0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        adv.clock_class = 7  # type: ignore[misc]


def test_advertise_holdover_in_spec_announces_a_leap() -> None:
    adv = advertise("HOLDOVER", 3_000, 1e-9, "default-e2e", True, 1, 3_600)
    assert (adv.clock_class, adv.clock_accuracy, adv.time_source) == (7, 0x25, 0xA0)  # 3 us > 2.5 us, so within 10 us
    assert (adv.time_traceable, adv.ntp_leap_indicator, adv.ntp_stratum) == (True, 1, 1)
    assert (adv.ntp_root_dispersion_ns, adv.irig_time_quality) == (3_000, 0x5)


def test_advertise_expired_and_freerun() -> None:
    expired = advertise("HOLDOVER_EXPIRED", 2 * S_NS, None, "c37.238", True, 1, 60, degraded="B")
    assert (expired.clock_class, expired.clock_accuracy, expired.offset_scaled_log_variance) == (187, 0x30, 0xFFFF)
    assert (expired.time_traceable, expired.frequency_traceable) == (False, False)
    assert (expired.ntp_leap_indicator, expired.ntp_stratum, expired.irig_time_quality) == (3, 16, 0xB)
    free = advertise("FREERUN", None, None, "g8275.2", False, 0, None)
    assert free == Advertised(248, 0xFE, 0xFFFF, 0xA0, False, False, 3, 16, 16 * S_NS, 0xF)
    assert advertise("HOLDOVER", 10, None, "g8275.1", False, 0, None, out_of_spec_category=2).clock_class == 150


@given(st.sampled_from(STATES), optional_bounds, st.sampled_from(PROFILES), st.booleans())
def test_advertise_is_consistent_with_the_parts(state: str, bound_ns: int | None, profile: str,
                                                in_spec: bool) -> None:
    adv = advertise(state, bound_ns, None, profile, in_spec, 0, None)
    synced = is_synchronized(state, in_spec)
    assert adv.clock_accuracy == clock_accuracy(bound_ns)
    assert adv.irig_time_quality == irig_time_quality(state, bound_ns)
    assert (adv.ntp_stratum == 1) is synced and (adv.ntp_leap_indicator == 3) is not synced
    assert (adv.clock_class <= 7) is synced and adv.time_traceable is synced
