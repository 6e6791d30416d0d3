"""PTP authentication in the native sender (edge/ptp/_syncsend.c with _ptpauth.c): with the port's security
association and active key handed over, every Delay_Resp it sends carries the AUTHENTICATION TLV that
protocol/ptp/security.py (itself checked against linuxptp 4.x) verifies, for every algorithm and with a mutable
correctionField; it answers a Delay_Req only when that request is signed with the same key, and hands back an
unsigned, forged or other-key request to the port, whole."""

from __future__ import annotations

import pytest

from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp import security as sec
from tests.unit.test_native_delay_resp import CLIENT, DOMAIN, Rig, _port_bytes

CODES = {"SHA256-128": 1, "SHA256": 2, "AES128": 3, "AES256": 4}
SECRETS = {"SHA256-128": b"k" * 20, "SHA256": b"q" * 33, "AES128": bytes(range(16)), "AES256": bytes(range(32))}


def association(algorithm: str, allow_mutable: bool) -> sec.PortSecurity:
    keys = {7: sec.Key(7, algorithm, SECRETS[algorithm]), 8: sec.Key(8, "SHA256-128", b"other key")}
    return sec.PortSecurity(sec.SecurityAssociation(2, keys, 3, allow_mutable), 7)


@pytest.fixture
def rig():
    r = Rig()
    yield r
    r.close()


@pytest.mark.parametrize("allow_mutable", [False, True], ids=["immutable", "mutable"])
@pytest.mark.parametrize("algorithm", list(CODES))
def test_a_signed_request_gets_a_signed_answer_the_python_module_verifies(rig: Rig, algorithm: str,
                                                                          allow_mutable: bool) -> None:
    security = association(algorithm, allow_mutable)
    key = security.key
    rig.sender.set_security(2, 7, CODES[algorithm], key.secret, allow_mutable)
    rig.sender.add_client(("127.0.0.1", 0), _port_bytes(CLIENT), -2)
    request = c.encode_timestamped(c.MsgType.DELAY_REQ, DOMAIN, CLIENT, 77, c.FLAG_UNICAST, 0x7F, 0, 5 << 16)
    rig.client.sendto(security.sign(request), rig.event.getsockname())
    wire = rig.rx_general.recv(1500)
    assert len(wire) == 54 + 10 + key.icv_len
    plain, why = security.verify(wire)
    assert why == "" and plain is not None
    resp = c.decode(plain)
    assert isinstance(resp, c.DelayResp) and resp.header.sequence_id == 77 and resp.requesting_port == CLIENT
    assert rig.taken("auth_signed", 1)["auth_signed"] == 1


def test_unsigned_forged_and_other_key_requests_go_back_to_the_port(rig: Rig) -> None:
    security = association("SHA256-128", False)
    rig.sender.set_security(2, 7, 1, security.key.secret, False)
    rig.sender.add_client(("127.0.0.1", 0), _port_bytes(CLIENT), 0)
    request = c.encode_timestamped(c.MsgType.DELAY_REQ, DOMAIN, CLIENT, 1, c.FLAG_UNICAST, 0x7F, 0, 0)
    signed = security.sign(request)
    forged = signed[:-1] + bytes([signed[-1] ^ 1])
    other = sec.PortSecurity(security.association, 8).sign(request)
    for data in (request, forged, other):
        rig.client.sendto(data, rig.event.getsockname())
    back = rig.handed_back(3)
    assert [data for data, _src, _ts in back] == [request, forged, other]
    assert rig.quiet()


def test_signing_stops_when_the_association_is_taken_away(rig: Rig) -> None:
    rig.sender.set_security(2, 7, 1, b"k" * 20, False)
    rig.sender.set_security(None)
    rig.sender.add_client(("127.0.0.1", 0), _port_bytes(CLIENT), 0)
    rig.delay_req(seq=3)
    assert len(rig.rx_general.recv(1500)) == 54


@pytest.mark.parametrize("args", [(256, 7, 1, b"k", False), (2, 7, 5, b"k", False), (2, 7, 3, bytes(15), False),
                                  (2, 7, 4, bytes(16), False), (2, 7, 1, b"", False), (2, 2**32, 1, b"k", False)])
def test_bad_security_is_refused(rig: Rig, args: tuple) -> None:
    with pytest.raises(ValueError, match="security"):
        rig.sender.set_security(*args)
