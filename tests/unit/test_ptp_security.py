"""PTP authentication (IEEE 1588-2019 16.14, linuxptp's sa_file): the file, the AUTHENTICATION TLV, and a port that
signs everything it sends and drops what is not signed with its association."""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct

import pytest
from cryptography.hazmat.primitives import cmac
from cryptography.hazmat.primitives.ciphers import algorithms
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.protocol.ptp.port import PtpPort
from appliance.protocol.limits import AccessRules
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp import security as sec
from appliance.protocol.ptp.profiles import load_profile, resolve
from tests.unit.test_ptp_port import LOCKED, OWN, S, SLAVE, SRC, delay_req, management

KEY = bytes(range(0x40, 0x60))
OTHER = bytes(range(0x60, 0x80))
SA_TEXT = f"""# two associations
[security_association]
spp 1
1 SHA256-128 HEX:{KEY.hex().upper()}
2 SHA256 32 B64:{base64.b64encode(OTHER).decode()}

[security_association]
spp 2
seqid_window 20
allow_mutable 1
1 AES128 HEX:{KEY[:16].hex()}
2 AES256 HEX:{KEY.hex()}
3 SHA256 26 abcdefghijklmnopqrstuvwxyz
4 SHA256-128 ASCII:plain
"""


def sa(spp: int = 1, key_id: int = 1, accept_unsigned: bool = False) -> sec.PortSecurity:
    return sec.PortSecurity.from_file(sec.parse_sa_file(SA_TEXT), spp, key_id, accept_unsigned)


def sync(seq: int = 5, correction: int = 0) -> bytes:
    return c.encode(c.Sync(c.Header(c.MsgType.SYNC, 0, SLAVE, seq, flags=c.FLAG_TWO_STEP, correction=correction), 0))


def test_the_sa_file_reads_linuxptps_format_every_algorithm_and_key_encoding() -> None:
    found = sec.parse_sa_file(SA_TEXT)
    assert set(found) == {1, 2}
    one, two = found[1], found[2]
    assert one.keys[1] == sec.Key(1, "SHA256-128", KEY) and one.keys[2].secret == OTHER and not one.allow_mutable
    assert one.seqid_window == 3 and two.seqid_window == 20 and two.allow_mutable
    assert [two.keys[i].algorithm for i in (1, 2, 3, 4)] == ["AES128", "AES256", "SHA256", "SHA256-128"]
    assert two.keys[3].secret == b"abcdefghijklmnopqrstuvwxyz" and two.keys[4].secret == b"plain"


def test_a_broken_sa_file_names_every_problem_by_line_and_never_a_key() -> None:
    text = ("[security_association]\n1 SHA256 HEX:00\nspp 300\nspp 1\n1 MD5 HEX:0011\n2 AES128 HEX:0011\n"
            "3 SHA256 HEX:0g\n4 SHA256 9 secretkey1234\n4 SHA256 HEX:00\n5 SHA256 HEX:1234\nwhat is this\n"
            "[security_association]\nspp 1\n")
    with pytest.raises(sec.SaFileError) as err:
        sec.parse_sa_file(text, "sa.cfg")
    problems = err.value.problems
    assert problems[0] == "sa.cfg line 2: a setting or key before the association's spp line"
    assert "sa.cfg line 3: spp 300 is outside 0..255" in problems
    assert any(p.startswith("sa.cfg line 5: key 1: unknown algorithm") for p in problems)
    assert "sa.cfg line 6: key 2: AES128 needs a 16-octet key" in problems
    assert "sa.cfg line 7: a HEX: key holds a character that is not a hex digit" in problems
    assert "sa.cfg line 8: key 4: the key is not of the length its line gives" in problems
    assert any(p.startswith("sa.cfg line 11: not a setting") for p in problems)
    assert "sa.cfg line 13: spp 1 is defined twice" in problems
    assert not any(secret in p for p in problems for secret in ("secretkey1234", "0011", "1234"))


def test_a_signed_message_ends_with_linuxptps_authentication_tlv() -> None:
    security = sa()
    message = sync()
    signed = security.sign(message)
    assert len(signed) == len(message) + 10 + 16 and struct.unpack_from("!H", signed, 2)[0] == len(signed)
    assert signed[len(message):len(message) + 10] == struct.pack("!HHBBI", 0x8009, 22, 1, 0, 1)
    assert signed[-16:] == hmac.new(KEY, signed[:-16], hashlib.sha256).digest()[:16]
    assert security.verify(signed) == (message, "")


@pytest.mark.parametrize("spp,key_id,icv_len", [(1, 1, 16), (1, 2, 32), (2, 1, 16), (2, 2, 16), (2, 3, 32),
                                                 (2, 4, 16)])
def test_every_algorithm_signs_and_verifies(spp: int, key_id: int, icv_len: int) -> None:
    security = sa(spp, key_id)
    signed = security.sign(sync())
    assert len(signed) == 44 + 10 + icv_len
    if security.key.algorithm.startswith("AES"):
        mac = cmac.CMAC(algorithms.AES(security.key.secret))
        mac.update(signed[:8] + bytes(8) + signed[16:-icv_len])  # spp 2: correctionField mutable
        assert signed[-icv_len:] == mac.finalize()
    assert security.verify(signed) == (sync(), "")


def test_a_message_signed_with_any_key_of_the_association_is_accepted() -> None:
    assert sa(1, 1).verify(sa(1, 2).sign(sync()))[1] == ""


@pytest.mark.parametrize("case,reason", [
    ("unsigned", "unsigned"), ("tampered", "icv"), ("other key", "icv"), ("other spp", "spp"),
    ("unknown key", "key"), ("sec param", "sec_param"), ("tlv after", "not_last"), ("truncated", "unsigned"),
])
def test_what_is_not_signed_with_the_association_is_refused_with_its_reason(case: str, reason: str) -> None:
    security = sa()
    signed = security.sign(sync())
    other_key = sec.PortSecurity(sec.SecurityAssociation(1, {1: sec.Key(1, "SHA256-128", OTHER)}), 1)
    bad = {
        "unsigned": sync(),
        "tampered": signed[:20] + bytes([signed[20] ^ 1]) + signed[21:],
        "other key": other_key.sign(sync()),
        "other spp": sa(2, 4).sign(sync()),
        "unknown key": signed[:50] + struct.pack("!I", 9) + signed[54:],
        "sec param": signed[:49] + b"\x01" + signed[50:],
        "tlv after": (lambda m: m[:2] + struct.pack("!H", len(m) + 4) + m[4:] + b"\x00\x08\x00\x00")(signed),
        "truncated": signed[:-3],
    }[case]
    assert security.verify(bad) == (None, reason)
    assert security.snapshot()["refused"] == {reason: 1}


def test_unsigned_messages_are_accepted_only_when_asked_and_wrong_signatures_never() -> None:
    security = sa(accept_unsigned=True)
    assert security.verify(sync()) == (sync(), "")
    wrong = sec.PortSecurity(sec.SecurityAssociation(1, {1: sec.Key(1, "SHA256-128", OTHER)}), 1).sign(sync())
    assert security.verify(wrong) == (None, "icv")
    snap = security.snapshot()
    assert snap["accepted_unsigned"] == 1 and snap["refused_total"] == 1


def test_a_mutable_correction_field_is_left_out_of_the_icv_only_when_allowed() -> None:
    strict, mutable = sa(1, 1), sa(2, 1)
    for security, survives in ((strict, False), (mutable, True)):
        signed = bytearray(security.sign(sync(correction=7)))
        signed[8:16] = (12345).to_bytes(8, "big")  # a transparent clock added its residence time
        verdict, why = security.verify(bytes(signed))
        assert (verdict is not None) == survives, why


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_are_refused_with_a_reason_never_raised(data: bytes) -> None:
    verdict, why = sa().verify(data)
    assert verdict is None and why in sec.REASONS


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=69), st.integers(min_value=1, max_value=255))
def test_any_octet_changed_in_a_signed_message_is_refused(at: int, flip: int) -> None:
    signed = bytearray(sa().sign(sync()))
    signed[at] ^= flip
    verdict, why = sa().verify(bytes(signed))
    assert verdict is None and why in sec.REASONS


# --- the port -------------------------------------------------------------------------------------------------

def secure_port(accept_unsigned: bool = False) -> PtpPort:
    config, errors, _ = resolve(load_profile("default-e2e"), {})
    assert not errors
    port = PtpPort(config, OWN, LOCKED, 0, management_rules=AccessRules(("10.0.0.0/8",)),
                   security=sa(accept_unsigned=accept_unsigned))
    assert port.start(0) == []
    return port


def run_signed(port: PtpPort, until_ns: int) -> list[bytes]:
    sent, t = [], 0
    while t <= until_ns:
        for action in port.handle_timer(t, 1_800_000_000 * S + t):
            sent.append(action.data)
            if action.token is not None:
                sent += [f.data for f in port.handle_tx_timestamp(action.token, 1_800_000_000 * S + t + 123)]
        t += 10_000_000
    return sent


def test_a_secure_port_signs_every_message_it_sends_once() -> None:
    port = secure_port()
    sent = run_signed(port, 9 * S)
    kinds = set()
    for data in sent:
        inner, why = sa().verify(data)
        assert inner is not None, why
        assert sa().verify(inner)[1] == "unsigned"  # signed once, not twice
        kinds.add(type(c.decode(inner)).__name__)
    assert {"Announce", "Sync", "FollowUp"} <= kinds
    assert port.snapshot(9 * S)["security"]["signed"] == len(sent)


def test_a_secure_port_answers_signed_requests_signed_and_drops_unsigned_ones() -> None:
    port = secure_port()
    run_signed(port, 7 * S)
    assert port.handle_rx(delay_req(1), SRC, 555, 8 * S) == []
    assert port.handle_rx(management(c.GET, c.DEFAULT_DATA_SET), SRC, None, 8 * S) == []
    wrong = sec.PortSecurity(sec.SecurityAssociation(1, {1: sec.Key(1, "SHA256-128", OTHER)}), 1)
    assert port.handle_rx(wrong.sign(delay_req(2)), SRC, 555, 8 * S) == []
    out = port.handle_rx(sa().sign(delay_req(3)), SRC, 555, 8 * S)
    resp = c.decode(sa().verify(out[0].data)[0])
    assert isinstance(resp, c.DelayResp) and resp.header.sequence_id == 3 and resp.receive_ts_ns == 555
    out = port.handle_rx(sa().sign(management(c.GET, c.DEFAULT_DATA_SET)), SRC, None, 8 * S)
    assert isinstance(c.decode(sa().verify(out[0].data)[0]), c.Management)
    snap = port.snapshot(8 * S)
    assert snap["counters"]["drop_auth_unsigned"] == 2 and snap["counters"]["drop_auth_icv"] == 1
    assert snap["security"]["verified"] == 2 and snap["security"]["refused"] == {"unsigned": 2, "icv": 1}


def test_a_port_accepting_unsigned_requests_answers_them_signed() -> None:
    port = secure_port(accept_unsigned=True)
    run_signed(port, 7 * S)
    out = port.handle_rx(delay_req(1), SRC, 555, 8 * S)
    assert len(out) == 1 and sa().verify(out[0].data)[0] is not None
    assert SLAVE == c.decode(sa().verify(out[0].data)[0]).requesting_port
