"""The rate limiter the product runs (``native/bucket.h`` through ``limits.RateLimiter``) against its executable model
(``tests/oracle/limits_model.py``, the algorithm of limits.py's docstring line by line): any sequence of requests
from any clients, at any instants (backward steps included), gets the same decision from both, with the same
counters, in a table small enough that eviction is exercised."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from appliance.protocol.limits import Limit, RateLimiter, key_of
from tests.oracle.limits_model import ModelRateLimiter
from tests.props.fuzzing import fuzz

ADDRESSES = ["192.0.2.1", "192.0.2.2", "198.51.100.7", "2001:db8::1", "2001:db8::2", "2001:db8:1::1",
             "::ffff:192.0.2.1", "10.0.0.1"]
steps = st.lists(st.tuples(st.sampled_from(ADDRESSES), st.integers(-2_000_000_000, 3_000_000_000)), max_size=80)


@fuzz(1.0)
@given(st.sampled_from([0.0, 0.5, 1.0, 16.0, 1e6]), st.integers(1, 5), st.integers(1, 6), steps)
def test_the_native_limiter_decides_as_its_model(rate: float, burst: int, max_clients: int,
                                                 requests: list[tuple[str, int]]) -> None:
    native, model = RateLimiter(rate, burst, max_clients), ModelRateLimiter(rate, burst, max_clients)
    now = 10**12
    for address, step in requests:
        now += step
        assert native.check(address, now) is model.check(address, now), (address, now)
    assert native.counters() == model.counters()


def test_a_name_that_is_not_an_address_is_limited_by_its_digest() -> None:
    limiter = RateLimiter(1.0, 1)
    assert key_of("/run/appliance/console.sock") == key_of("/run/appliance/console.sock")
    assert len(key_of("/run/appliance/console.sock")) == 16 and len(key_of("2001:db8::/64")) == 8
    assert limiter.check_key(key_of("/run/a"), 0) is Limit.PASS and limiter.check_key(key_of("/run/a"), 1) is not Limit.PASS
    assert limiter.check_key(key_of("/run/b"), 1) is Limit.PASS


@fuzz(0.5)
@given(st.integers(1, 4), steps, steps)
def test_a_copied_limiter_decides_as_the_original(max_clients: int, first: list[tuple[str, int]],
                                                   then: list[tuple[str, int]]) -> None:
    import copy

    original = RateLimiter(1.0, 2, max_clients)
    now = 10**12
    for address, step in first:
        now += step
        original.check(address, now)
    twin = copy.deepcopy(original)
    assert twin.counters() == original.counters()
    for address, step in then:
        now += step
        assert twin.check(address, now) is original.check(address, now)
