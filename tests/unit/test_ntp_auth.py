"""Unit tests for appliance.protocol.ntp.auth: the keys file, MD5/SHA1/AES-CMAC MACs, trailers, verify and sign."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.oracle import auth_model as auth
from appliance.edge.input_files import load_keys_file
from tests.oracle.auth_model import (Key, KeysFileError, KeyTable, KeyType, Outcome, crypto_nak, mac, parse_keys,
                                     sign, split_mac, verify)

HEADER = bytes(range(0x23, 0x23 + 48))  # any 48 bytes will do: the MAC does not look inside the header
AES_KEY = bytes.fromhex("2b7e151628aed2a6abf7158809cf4f3c")  # RFC 4493 §4
MD5_KEY = Key(1, KeyType.MD5, b"md5secret")
SHA1_KEY = Key(2, KeyType.SHA1, bytes.fromhex("00112233445566778899aabbccddeeff00112233"))
AES_KEY_1 = Key(3, KeyType.AES128, AES_KEY)
ALL_KEYS = (MD5_KEY, SHA1_KEY, AES_KEY_1)
TABLE = KeyTable(ALL_KEYS)


def problems_of(text: str) -> list[str]:
    with pytest.raises(KeysFileError) as info:
        parse_keys(text, "ntp.keys")
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


# --- the keys file -----------------------------------------------------------------------------------------

GOOD_FILE = """\
# ntpd and chrony style keys, mixed
1 MD5 ASCII:abcdefghij
2 md5 HEX:0123456789ABCDEF        # trailing comment
   3 M short#pass

4 SHA1 0102030405060708090a0b0c0d0e0f1011121314
5 SHA-1 0123456789
6 AES128 HEX:2b7e151628aed2a6abf7158809cf4f3c
7 aes128cmac 2B7E151628AED2A6ABF7158809CF4F3C
8 AES-128-CMAC ASCII:0123456789abcdef
9 AES128 sixteen-chars-ok
10 HEX:00ff
65534 MD5 ASCII:this-ascii-key-may-be-longer-than-twenty
"""


def test_good_file_parses_every_type_and_key_form():
    table = parse_keys(GOOD_FILE)
    assert sorted(table) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 65534]
    assert table[1] == Key(1, KeyType.MD5, b"abcdefghij")
    assert table[2] == Key(2, KeyType.MD5, bytes.fromhex("0123456789abcdef"))
    assert table[3].secret == b"short#pass"  # '#' inside a field is part of the key, as in ntpd
    assert table[4] == Key(4, KeyType.SHA1, bytes(range(1, 21)))  # 40 hex digits: hex
    assert table[5].secret == b"0123456789"  # hex digits but not longer than 20: ASCII (ntpd's rule)
    assert table[6].secret == table[7].secret == AES_KEY
    assert table[8].secret == b"0123456789abcdef" and table[8].type is KeyType.AES128
    assert table[9].secret == b"sixteen-chars-ok"
    assert table[10] == Key(10, KeyType.MD5, b"\x00\xff")  # chrony: TYPE may be omitted, MD5
    assert table[65534].type is KeyType.MD5


def test_key_table_is_an_immutable_mapping():
    table = parse_keys(GOOD_FILE)
    with pytest.raises(TypeError):
        table[11] = MD5_KEY  # type: ignore[index]
    assert table.get(11) is None and len(table) == 11 and 6 in table
    with pytest.raises(ValueError):
        KeyTable([MD5_KEY, Key(1, KeyType.SHA1, b"x")])


def test_empty_and_comment_only_files_give_an_empty_table():
    assert len(parse_keys("")) == 0
    assert len(parse_keys("# nothing\n\n   \n  # still nothing\n")) == 0


def test_every_problem_is_reported_with_its_line_number_at_once():
    text = "\n".join([
        "1 MD5 goodkey",  # 1: fine
        "0 MD5 zerokey",  # 2: ID out of range
        "65535 MD5 bigkey",  # 3: ID out of range
        "x1 MD5 namekey",  # 4: ID not a number
        "5 SHA256 shakey",  # 5: unsupported type
        "6 AES128 HEX:00112233",  # 6: AES key of the wrong length
        "7 MD5 HEX:abc",  # 7: odd number of hex digits
        "8 MD5 HEX:zz",  # 8: not hex
        "9 MD5 ASCII:tab\x7fkey",  # 9: not printable
        "10 MD5 this-is-longer-than-twenty-and-not-hex",  # 10: unprefixed, too long for ASCII
        "1 SHA1 dupkey",  # 11: duplicate of line 1
        "12 MD5 a b",  # 12: too many fields
        "13",  # 13: too few fields
        "14 MD5 HEX:",  # 14: empty key
        "0 BOGUS HEX:0",  # 15: two problems on one line
    ])
    problems = problems_of(text)
    lines = [int(p.split(":")[0].removeprefix("ntp.keys line ")) for p in problems]
    assert lines == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 15]
    by_line = dict(zip(lines, problems))
    assert "1..65534" in by_line[2] and "1..65534" in by_line[3] and "decimal" in by_line[4]
    assert "unsupported key type" in by_line[5]
    assert "must be 16 bytes" in by_line[6] and "not 4 bytes" in by_line[6]
    assert "hex digits" in by_line[7] and "hex digits" in by_line[8]
    assert "printable" in by_line[9] and "must be hex" in by_line[10]
    assert "key 1 already defined on line 1" in by_line[11]
    assert "found 4 fields" in by_line[12] and "found 1 fields" in by_line[13]
    assert "empty key" in by_line[14]


SECRETS = ["HEX:00112233445566", "ASCII:sekrit-value-zz", "0123456789abcdef0123456789abcdef0123456789abc",
           "abcdefghijklmnopq"]


@pytest.mark.parametrize("secret", SECRETS)
def test_no_message_ever_quotes_a_secret(secret: str):
    # Wrong-length AES keys, a secret in the type column, a secret in the ID column, too many fields.
    text = f"1 AES128 {secret}\n2 {secret} x\n{secret} MD5 x\n4 MD5 {secret} {secret}\n5 SHA1 HEX:{secret}!\n"
    message = "\n".join(problems_of(text))
    for token in {secret, secret.split(":")[-1]}:
        assert token not in message
    assert len(problems_of(text)) == 5


def test_key_repr_hides_the_secret():
    assert "md5secret" not in repr(MD5_KEY) and "md5secret" not in repr(TABLE)


def test_load_keys_file_reads_the_file_and_reports_problems_with_its_path(tmp_path):
    path = tmp_path / "ntp.keys"
    path.write_bytes(b"1 MD5 okay\n2 MD5 bad\xffkey\n")
    with pytest.raises(KeysFileError) as info:
        load_keys_file(path)
    assert info.value.problems == [f"{path} line 2: ASCII key must be printable ASCII without spaces"]
    path.write_text(GOOD_FILE)
    assert load_keys_file(str(path)) == parse_keys(GOOD_FILE)
    with pytest.raises(KeysFileError, match="cannot read keys file"):
        load_keys_file(tmp_path / "missing.keys")


def test_key_constructor_rejects_impossible_keys():
    for bad in (lambda: Key(0, KeyType.MD5, b"x"), lambda: Key(65535, KeyType.MD5, b"x"),
                lambda: Key(1, KeyType.MD5, b""), lambda: Key(1, KeyType.AES128, b"x" * 15)):
        with pytest.raises(ValueError):
            bad()


# --- MACs ---------------------------------------------------------------------------------------------------

def test_md5_and_sha1_are_the_legacy_digest_of_key_then_message():
    assert mac(MD5_KEY, HEADER) == hashlib.md5(b"md5secret" + HEADER).digest()
    assert mac(SHA1_KEY, HEADER) == hashlib.sha1(SHA1_KEY.secret + HEADER).digest()
    assert [len(mac(k, HEADER)) for k in ALL_KEYS] == [16, 20, 16] == [k.type.digest_size for k in ALL_KEYS]


@pytest.mark.parametrize("message, tag", [
    ("", "bb1d6929e95937287fa37d129b756746"),  # RFC 4493 §4, example 1
    ("6bc1bee22e409f96e93d7e117393172a", "070a16b46b4d4144f79bdd9dd04a287c"),  # example 2
    ("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e5130c81c46a35ce411",
     "dfa66747de9ae63030ca32611497c827"),  # example 3 (40 bytes: a partial last block)
])
def test_aes_cmac_matches_rfc4493_vectors(message: str, tag: str):
    assert mac(AES_KEY_1, bytes.fromhex(message)) == bytes.fromhex(tag)


# --- trailers, verify and sign ------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ALL_KEYS, ids=lambda k: k.type.name)
def test_sign_then_verify_round_trips(key: Key):
    packet = sign(key, HEADER)
    assert len(packet) == 48 + 4 + key.type.digest_size
    assert packet[48:52] == key.id.to_bytes(4, "big")
    assert split_mac(packet) == (HEADER, key.id, mac(key, HEADER))
    assert verify(TABLE, packet) == auth.VerifyResult(Outcome.OK, key.id, key)


@pytest.mark.parametrize("key", ALL_KEYS, ids=lambda k: k.type.name)
def test_changing_any_byte_of_a_signed_packet_is_caught(key: Key):
    packet = sign(key, HEADER)
    for i in range(len(packet)):
        for flip in (0x01, 0x80):
            tampered = bytearray(packet)
            tampered[i] ^= flip
            result = verify(TABLE, bytes(tampered))
            if 48 <= i < 52:  # the key ID: now an unknown key (or another key, of which it is not the MAC)
                assert result.outcome in (Outcome.UNKNOWN_KEY, Outcome.BAD_MAC, Outcome.BAD_LENGTH), i
            else:
                assert result == auth.VerifyResult(Outcome.BAD_MAC, key.id), i
            assert result.key is None


def test_digest_of_the_wrong_size_for_the_key_type_is_bad_length():
    sha1_sized = HEADER + MD5_KEY.id.to_bytes(4, "big") + bytes(20)
    md5_sized = HEADER + SHA1_KEY.id.to_bytes(4, "big") + bytes(16)
    assert verify(TABLE, sha1_sized) == auth.VerifyResult(Outcome.BAD_LENGTH, MD5_KEY.id)
    assert verify(TABLE, md5_sized) == auth.VerifyResult(Outcome.BAD_LENGTH, SHA1_KEY.id)


def test_unknown_key_none_and_crypto_nak():
    signed = sign(Key(99, KeyType.MD5, b"other"), HEADER)
    assert verify(TABLE, signed) == auth.VerifyResult(Outcome.UNKNOWN_KEY, 99)
    assert verify(None, sign(MD5_KEY, HEADER)).outcome is Outcome.UNKNOWN_KEY  # no keys configured
    assert verify(TABLE, HEADER) == auth.VerifyResult(Outcome.NONE)
    nak = crypto_nak(HEADER)
    assert nak == HEADER + bytes(4)
    assert split_mac(nak) == (HEADER, 0, b"")
    assert verify(TABLE, nak) == auth.VerifyResult(Outcome.CRYPTO_NAK)


def test_split_mac_recognises_only_the_mac_only_layouts():
    assert split_mac(HEADER) == (HEADER, None, None)
    assert split_mac(HEADER[:47]) is None
    assert split_mac(HEADER + b"\x00\x00\x00\x01") is None  # a bare key ID is only ever the crypto-NAK
    for length in (8, 16, 28, 32, 44, 68):  # extension fields (RFC 7822), with or without a MAC
        assert split_mac(HEADER + bytes(length)) is None
        assert verify(TABLE, HEADER + bytes(length)).outcome is Outcome.NONE
    assert split_mac(HEADER + bytes(20)) == (HEADER, 0, bytes(16))
    assert verify(TABLE, HEADER + bytes(24)).outcome is Outcome.UNKNOWN_KEY  # key 0 with a digest


def test_sign_and_crypto_nak_want_a_bare_header():
    for bad in (HEADER[:47], HEADER + bytes(4)):
        with pytest.raises(ValueError):
            sign(MD5_KEY, bad)
        with pytest.raises(ValueError):
            crypto_nak(bad)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=48), st.binary(max_size=80), st.sampled_from([None, 1, 2, 3, 0, 99]))
def test_arbitrary_packets_never_raise(header: bytes, trailer: bytes, key_id: int | None):
    if key_id is not None and len(trailer) >= 4:
        trailer = key_id.to_bytes(4, "big") + trailer[4:]  # aim at real keys as well as random IDs
    packet = header + trailer
    parts = split_mac(packet)
    result = verify(TABLE, packet)
    assert isinstance(result.outcome, Outcome)
    assert (result.key is not None) == (result.outcome is Outcome.OK)
    if parts is None or parts[1] is None:
        assert result.outcome is Outcome.NONE
    else:
        assert parts[0] + packet[48:52] + parts[2] == packet
    assert verify(None, packet).outcome in (Outcome.NONE, Outcome.UNKNOWN_KEY, Outcome.CRYPTO_NAK)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=48, max_size=48), st.sampled_from(ALL_KEYS))
def test_any_signed_header_verifies(header: bytes, key: Key):
    assert verify(TABLE, sign(key, header)).outcome is Outcome.OK
