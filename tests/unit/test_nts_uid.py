"""Long NTS Unique Identifiers (RFC 8915 §5.3 sets a minimum of 32 bytes and no maximum), on both NTP paths.

The server's decision: a request over 1024 bytes (``MAX_REQUEST_LEN``) is dropped before it is read and counted as
``drop_oversize``, NTS or not.  With a 104-byte cookie and the shortest Authenticator that leaves up to 824 bytes of
identifier; any identifier that fits is answered as a 32-byte one is: fresh cookies, or the NTS NAK when the cookie
or the authenticator does not check.  A NAK carries the identifier alone, so it is always shorter than its request
(no amplification).  The C fast path and the Python path agree on every length.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.oracle.ntp_server import MAX_REQUEST_LEN, ServerConfig
from tests.oracle import nts_model as nts
from tests.oracle.inprocess import InProcessWorker
from tests.unit.test_nts_fastpath import (C2S, S2C, Probe, _both_paths, jar, nts_request, reply_cookies,
                                          require_nts_in_c, shape, uid_of)

KEYS = jar(1, 2)
HEADER, COOKIE_FIELD, AUTH_FIELD = 48, 4 + nts.cookie_len(), 4 + 4 + 16 + 16  # the shortest Authenticator
LONGEST_WITH_COOKIE = MAX_REQUEST_LEN - HEADER - 4 - COOKIE_FIELD - AUTH_FIELD  # 824


@pytest.fixture(scope="module", params=[True, False], ids=["C path", "Python path"])
def path(request: pytest.FixtureRequest) -> Iterator[Probe]:
    if request.param:
        require_nts_in_c()
    with InProcessWorker(request.param, ServerConfig(rate_per_s=0), KEYS) as worker:
        yield Probe(worker)


def test_the_longest_identifier_that_fits_with_a_cookie_gets_cookies(path: Probe) -> None:
    assert LONGEST_WITH_COOKIE == 824
    data = nts_request(KEYS.seal(C2S, S2C), uid=os.urandom(LONGEST_WITH_COOKIE))
    assert len(data) == MAX_REQUEST_LEN
    (reply,), changes = path.ask(data)
    assert changes == {"requests": 1, "replies": 1, "nts": 1}
    assert len(reply) == len(data) and uid_of(reply) == uid_of(data) and len(reply_cookies(reply)) == 1


@pytest.mark.parametrize("uid_len", [LONGEST_WITH_COOKIE + 1, 900, 901, 1000])
def test_a_request_over_1024_bytes_is_dropped_as_oversize(path: Probe, uid_len: int) -> None:
    data = nts_request(KEYS.seal(C2S, S2C), uid=os.urandom(uid_len))
    assert len(data) > MAX_REQUEST_LEN
    assert path.ask(data) == ([], {"requests": 1, "drop_oversize": 1})
    assert path.ask(nts_request(KEYS.seal(C2S, S2C)))[1]["nts"] == 1  # and the next client is served


@pytest.mark.parametrize("uid_len", [900, 916])
def test_a_long_identifier_with_a_cookie_that_does_not_open_gets_a_nak_shorter_than_the_request(
        path: Probe, uid_len: int) -> None:
    data = nts_request(b"not a cookie", uid=os.urandom(uid_len))  # 12 bytes: the shortest RFC 7822 field
    assert len(data) <= MAX_REQUEST_LEN
    (nak,), changes = path.ask(data)
    assert changes == {"requests": 1, "replies": 1, "nts_nak": 1}
    assert nak[12:16] == b"NTSN" and nak[48:] == nts._field(nts.EF_UNIQUE_ID, uid_of(data))
    assert len(nak) == HEADER + 4 + uid_len and len(nak) < len(data)


@pytest.fixture(scope="module")
def both() -> Iterator[tuple[InProcessWorker, InProcessWorker]]:
    yield from _both_paths(64)


@pytest.mark.parametrize("uid_len", [32, 33, 64, 255, 256, 512, 700, 823, 824, 825, 828, 900, 901, 916, 917, 1000])
@pytest.mark.parametrize("cookie", ["current", "unknown", "short"])
def test_both_paths_agree_on_every_identifier_length(both, uid_len: int, cookie: str) -> None:
    cookies = {"current": KEYS.seal(C2S, S2C), "unknown": jar(5).seal(C2S, S2C), "short": b"c" * 12}
    data = nts_request(cookies[cookie], uid=os.urandom(uid_len))
    outcomes = []
    for worker in both:
        replies, changes = Probe(worker).ask(data)
        outcomes.append((changes, [shape(r) for r in replies]))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0].keys() & {"nts", "nts_nak", "drop_oversize"}  # answered, or dropped for its size only
