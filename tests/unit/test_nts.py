"""NTS (RFC 8915), the pure protocol: NTS-KE records and responses, cookies, and the NTP extension fields."""

from __future__ import annotations

import os
import struct

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESSIV
from hypothesis import given, settings, strategies as st

from tests.oracle import nts_model as nts


def jar(*ids: int) -> nts.CookieJar:
    return nts.CookieJar([nts.MasterKey(i, bytes([i]) * nts.MASTER_KEY_LEN, 1000 * i) for i in ids or (1,)],
                         os.urandom)


def ke_request(protocols=(0,), aeads=(15,), extra: bytes = b"") -> bytes:
    return (nts.Record(True, nts.NEXT_PROTOCOL, b"".join(struct.pack("!H", p) for p in protocols)).encode()
            + nts.Record(False, nts.AEAD_ALGORITHM, b"".join(struct.pack("!H", a) for a in aeads)).encode()
            + extra + nts.Record(True, nts.END_OF_MESSAGE, b"").encode())


def test_ke_response_has_protocol_aead_eight_cookies_and_end():
    records, complete = nts.parse_records(ke_request())
    assert complete
    c2s, s2c = b"c" * 32, b"s" * 32
    j = jar()
    out, done = nts.parse_records(nts.ke_respond(records, c2s, s2c, j))
    assert done
    kinds = [r.type for r in out]
    assert kinds[:2] == [nts.NEXT_PROTOCOL, nts.AEAD_ALGORITHM] and kinds[-1] == nts.END_OF_MESSAGE
    cookies = [r.body for r in out if r.type == nts.NEW_COOKIE]
    assert len(cookies) == nts.COOKIES_PER_KE and len(set(cookies)) == nts.COOKIES_PER_KE
    assert all(nts.open_cookie(j, c) == (c2s, s2c) for c in cookies)


def test_ke_errors_the_rfc_names():
    with pytest.raises(nts.KeError) as e:
        nts.ke_respond(nts.parse_records(ke_request(extra=nts.Record(True, 99, b"x").encode()))[0],
                       b"c" * 32, b"s" * 32, jar())
    assert e.value.code == nts.ERR_UNRECOGNIZED_CRITICAL
    # no AEAD in common: an empty AEAD Algorithm Negotiation record and no cookies (RFC 8915 4.1.5)
    none = nts.parse_records(nts.ke_respond(nts.parse_records(ke_request(aeads=(1,)))[0], b"c" * 32, b"s" * 32,
                                            jar()))[0]
    assert [(r.type, r.body) for r in none] == [(nts.NEXT_PROTOCOL, b"\0\0"), (nts.AEAD_ALGORITHM, b""),
                                               (nts.END_OF_MESSAGE, b"")]
    with pytest.raises(nts.KeError):  # no End of Message
        nts.parse_ke_request([nts.Record(True, nts.NEXT_PROTOCOL, b"\0\0")])
    with pytest.raises(nts.KeError):  # after End of Message
        nts.parse_records(ke_request() + b"\0\0")
    # a non-critical unknown record is ignored; no protocol in common is an empty Next Protocol, no cookies
    ok = nts.ke_respond(nts.parse_records(ke_request(extra=nts.Record(False, 99, b"x").encode()))[0],
                        b"c" * 32, b"s" * 32, jar())
    assert nts.parse_records(ok)[1]
    none = nts.parse_records(nts.ke_respond(nts.parse_records(ke_request(protocols=(7,)))[0], b"c" * 32,
                                            b"s" * 32, jar()))[0]
    assert none[0].body == b"" and not any(r.type == nts.NEW_COOKIE for r in none)


def test_truncated_ke_request_is_incomplete_not_an_error():
    data = ke_request()
    for cut in range(len(data)):
        records, complete = nts.parse_records(data[:cut])
        assert not complete


def test_cookies_open_under_every_key_kept_and_not_after():
    old = jar(1)
    cookie = old.seal(b"c" * 32, b"s" * 32)
    rotated = jar(1, 2)
    assert nts.open_cookie(rotated, cookie) == (b"c" * 32, b"s" * 32)
    assert nts.open_cookie(rotated, rotated.seal(b"a" * 32, b"b" * 32)) == (b"a" * 32, b"b" * 32)
    assert nts.open_cookie(jar(2, 3), cookie) is None
    tampered = bytearray(cookie)
    tampered[-1] ^= 1
    assert nts.open_cookie(rotated, bytes(tampered)) is None
    assert nts.open_cookie(rotated, cookie[:-1]) is None


def client_request(cookie: bytes, c2s: bytes, placeholders: int = 0, uid: bytes = b"u" * 32,
                   nonce: bytes = b"n" * 16) -> bytes:
    header = bytes([0x23]) + b"\0" * 47
    body = header + nts._field(nts.EF_UNIQUE_ID, uid) + nts._field(nts.EF_COOKIE, cookie)
    body += b"".join(nts._field(nts.EF_COOKIE_PLACEHOLDER, b"\0" * len(cookie)) for _ in range(placeholders))
    ct = AESSIV(c2s).encrypt(b"", [body, nonce])
    return body + nts._field(nts.EF_AUTHENTICATOR, struct.pack("!HH", len(nonce), len(ct)) + nonce + ct)


@pytest.mark.parametrize("placeholders", [0, 1, 7])
def test_request_opens_and_reply_carries_fresh_cookies_within_the_request_length(placeholders):
    j = jar()
    c2s, s2c = os.urandom(32), os.urandom(32)
    data = client_request(j.seal(c2s, s2c), c2s, placeholders)
    assert nts.is_nts(data)
    req = nts.open_request(data, j)
    assert isinstance(req, nts.NtsRequest) and req.keys == (c2s, s2c) and req.cookies_wanted == 1 + placeholders
    header = bytes([0x24]) + b"\1" * 47
    reply = nts.seal_reply(header, req, j, os.urandom)
    assert len(reply) <= len(data)
    fields = nts.extension_fields(reply)
    assert [k for k, _, _ in fields] == [nts.EF_UNIQUE_ID, nts.EF_AUTHENTICATOR]
    _, apos, alen = fields[1]
    nonce, ct = nts._authenticator(reply[apos + 4:apos + alen])
    plain = AESSIV(s2c).decrypt(ct, [reply[:apos], nonce])
    cookies = [plain[p + 4:p + ln] for k, p, ln in nts.extension_fields(plain, 0)]
    assert len(cookies) == 1 + placeholders
    assert all(nts.open_cookie(j, c) == (c2s, s2c) for c in cookies)


def test_bad_cookie_and_bad_authenticator_get_a_nak_and_malformed_is_dropped():
    j = jar()
    c2s, s2c = os.urandom(32), os.urandom(32)
    good = client_request(j.seal(c2s, s2c), c2s)
    stranger = client_request(jar(9).seal(c2s, s2c), c2s)
    r = nts.open_request(stranger, j)
    assert isinstance(r, nts.NtsRequest) and r.keys is None and r.reason == "nts-bad-cookie"
    assert nts.nak_fields(r) == nts._field(nts.EF_UNIQUE_ID, b"u" * 32)
    wrong_key = client_request(j.seal(c2s, s2c), os.urandom(32))
    assert nts.open_request(wrong_key, j).reason == "nts-bad-authenticator"
    for cut in range(49, len(good), 4):
        assert isinstance(nts.open_request(good[:cut], j), str) or nts.open_request(good[:cut], j).keys is None
    no_uid = client_request(j.seal(c2s, s2c), c2s, uid=b"short")
    assert nts.open_request(no_uid, j) == "nts-malformed"


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=48, max_size=400))
def test_garbage_never_raises(data):
    j = jar()
    r = nts.open_request(data, j)
    assert isinstance(r, (str, nts.NtsRequest))
    try:
        records, _ = nts.parse_records(data)
        nts.parse_ke_request(records)
    except nts.KeError:
        pass


# --- the NTP server with NTS -------------------------------------------------------------------------------------

def _server_and_request(placeholders: int = 0):
    from tests.unit.test_ntp_server import NO_LIMIT
    from tests.oracle.ntp_server import NtpServer

    j = jar()
    c2s, s2c = os.urandom(32), os.urandom(32)
    return NtpServer(NO_LIMIT, None, j), client_request(j.seal(c2s, s2c), c2s, placeholders, uid=os.urandom(32)), s2c


def test_server_answers_nts_with_cookies_drops_replays_and_naks_strangers():
    from tests.unit.test_ntp_server import CLIENT, H0, PORT, SYNC
    from tests.oracle.ntp_server import Drop, Reply

    server, data, s2c = _server_and_request(placeholders=2)
    reply = server.handle(data, CLIENT, PORT, H0, SYNC)
    assert isinstance(reply, Reply) and reply.nts is not None and not reply.kod
    wire = server.finalize(reply, H0 + 1000, SYNC)
    assert len(wire) <= len(data) and wire[1] == 1
    _, apos, alen = nts.extension_fields(wire)[-1]
    nonce, ct = nts._authenticator(wire[apos + 4:apos + alen])
    assert len(nts.extension_fields(AESSIV(s2c).decrypt(ct, [wire[:apos], nonce]), 0)) == 3
    assert server.handle(data, CLIENT, PORT, H0 + 1, SYNC) == Drop("nts-replay")
    stranger = client_request(jar(7).seal(b"c" * 32, b"s" * 32), b"c" * 32)
    nak = server.handle(stranger, CLIENT, PORT, H0 + 2, SYNC)
    assert isinstance(nak, Reply) and nak.kod == "NTSN"
    wire = server.finalize(nak, H0 + 3, SYNC)
    assert wire[12:16] == b"NTSN" and wire[0] >> 6 == 3 and len(wire) <= len(stranger)
    assert server.counters.nts == 1 and server.counters.nts_naks["nts-bad-cookie"] == 1
    # a forged request with a replayed identifier is not remembered: the genuine one is still answered
    server2, data2, _ = _server_and_request()
    forged = bytearray(data2)
    forged[-1] ^= 1
    assert server2.handle(bytes(forged), CLIENT, PORT, H0, SYNC).kod == "NTSN"
    assert server2.handle(data2, CLIENT, PORT, H0 + 1, SYNC).nts.keys is not None


def test_without_cookie_keys_nts_requests_are_answered_as_plain_ntp():
    from tests.unit.test_ntp_server import CLIENT, H0, NO_LIMIT, PORT, SYNC
    from tests.oracle.ntp_server import NtpServer

    _, data, _ = _server_and_request()
    server = NtpServer(NO_LIMIT)
    reply = server.handle(data, CLIENT, PORT, H0, SYNC)
    assert len(server.finalize(reply, H0 + 1, SYNC)) == 48
