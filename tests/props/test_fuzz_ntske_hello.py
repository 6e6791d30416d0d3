"""Fuzzing the NTS-KE server's read of a TLS ClientHello (``appliance/protocol/ntp/nts.py`` ``client_hello`` and
``alpn_offered``): the first bytes any client on the network sends, read before OpenSSL sees them to refuse a client
that does not offer ntske/1 with the alert RFC 7301 asks for.

Contract: ``client_hello`` returns (the message, 0) or (None, bytes needed, more than it was given and at most two
records' worth past it), or raises ValueError; ``alpn_offered`` returns a tuple of bytes or raises ValueError.  A
real ClientHello (Python's own TLS client, with and without ALPN) cut anywhere asks for more, and whole reads back
what it offered.  Inputs: arbitrary bytes, real ClientHellos mutated, and real ones cut short.  Budget: ``fuzzing.py``.
"""

from __future__ import annotations

from hypothesis import event, given
from hypothesis import strategies as st

from appliance.protocol.ntp import nts
from tests.props.fuzzing import FUZZ, mutated
from tests.unit.test_ntske_hardening import client_hello_of


HELLOS = {(): client_hello_of(None), (b"ntske/1",): client_hello_of(["ntske/1"]),
          (b"h2", b"ntske/1"): client_hello_of(["h2", "ntske/1"])}


def read(data: bytes) -> tuple[bytes, ...] | None:
    try:
        hello, needed = nts.client_hello(data)
    except ValueError:
        event("refused: not a ClientHello")
        return None
    if hello is None:
        assert len(data) < needed <= len(data) + 5 + nts.MAX_CLIENT_HELLO
        event("needs more")
        return None
    assert needed == 0 and len(hello) <= nts.MAX_CLIENT_HELLO
    try:
        offered = nts.alpn_offered(hello)
    except ValueError:
        event("refused: ClientHello does not parse")
        return None
    assert isinstance(offered, tuple) and all(isinstance(name, bytes) for name in offered)
    event(f"ALPN offered: {len(offered)}")
    return offered


@given(st.binary(max_size=300))
@FUZZ
def test_arbitrary_first_bytes_are_read_or_refused(data: bytes) -> None:
    read(data)


@given(mutated(st.sampled_from(list(HELLOS.values())), max_edits=6))
@FUZZ
def test_mutated_client_hellos_are_read_or_refused(data: bytes) -> None:
    read(data)


@given(st.sampled_from(sorted(HELLOS)), st.integers(0, 2000))
@FUZZ
def test_a_real_client_hello_cut_short_asks_for_more_and_whole_reads_back(alpn: tuple[bytes, ...], cut: int) -> None:
    data = HELLOS[alpn]
    if cut < len(data):
        hello, needed = nts.client_hello(data[:cut])
        assert hello is None and cut < needed <= len(data)
    else:
        assert read(data) == alpn
