"""External logins without servers: parsing the auth settings, reading role attributes, external sessions and their
lockout in the user store."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from appliance.web import external, ldapauth, radius
from appliance.web.users import UserStore


def test_rules_keep_their_order_and_name_a_bad_one() -> None:
    assert external.parse_rules("admin=a; operator=cn=x,dc=y ;", "r") == [("admin", "a"), ("operator", "cn=x,dc=y")]
    for bad in ("root=x", "admin", "admin=", "=x"):
        with pytest.raises(ValueError, match="expected ROLE=VALUE"):
            external.parse_rules(bad, "auth.radius_roles")


def test_radius_servers_default_to_1812() -> None:
    assert external.parse_radius_servers("10.0.0.1, r.example:1645, [2001:db8::1]:1812, [::1]") == [
        ("10.0.0.1", 1812), ("r.example", 1645), ("2001:db8::1", 1812), ("::1", 1812)]
    for bad in ("h:0", "h:70000", "h:x", "[::1]x", "a b"):
        with pytest.raises(ValueError, match="bad server"):
            external.parse_radius_servers(bad)


def test_role_attribute_standard_or_vendor() -> None:
    assert radius.parse_attribute("Filter-Id") == (0, 11)
    assert radius.parse_attribute("9:1") == (9, 1)
    with pytest.raises(ValueError, match="VENDOR_ID:TYPE"):
        radius.parse_attribute("Framed-IP")
    vsa = struct.pack("!I", 9) + bytes([1, 2 + 5]) + b"admin" + bytes([2, 2 + 3]) + b"abc"
    body = bytes([11, 2 + 4]) + b"oper" + bytes([26, 2 + len(vsa)]) + vsa + bytes([11, 1])  # a last, broken one
    raw = bytes(20) + body
    assert radius.attribute_values(raw, (0, 11)) == ("oper",)
    assert radius.attribute_values(raw, (9, 1)) == ("admin",)
    assert radius.attribute_values(raw, (10, 1)) == ()


def test_ldap_urls_and_dns() -> None:
    assert ldapauth.parse_server("ldaps://dir.example") == ldapauth.LdapServer("ldaps://dir.example", "dir.example",
                                                                               636, True)
    assert ldapauth.parse_server("ldap://127.0.0.1:3890/").port == 3890
    for bad in ("http://x", "ldap://", "ldap://h/dc=x", "ldap://h:99999"):
        with pytest.raises(ValueError, match="LDAP server"):
            ldapauth.parse_server(bad)
    assert ldapauth.normal_dn("CN=Ops, OU=Groups,dc=Example") == "cn=ops,ou=groups,dc=example"


def test_empty_password_is_refused_before_any_server() -> None:
    from appliance import config as cfg

    settings = cfg.merge(cfg.defaults(), {"auth.method": "ldap", "auth.ldap_servers": "ldaps://192.0.2.1"},
                         "test").auth
    assert external.ExternalAuth(settings).check("carol", "").outcome == "reject"


def test_external_sessions_are_apart_from_local_users(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "users.sqlite", lockout_failures=2, lockout_s=60.0)
    store.add("admin", "admin", "local-admin-password")
    sid = store.open_external_session("admin", "viewer", "radius 127.0.0.1:1812", 100.0, 3600)
    found = store.session_user(sid, 101.0, 3600)
    assert found is not None and (found.user, found.role, found.server) == ("admin", "viewer", "radius 127.0.0.1:1812")
    assert store.session_user(sid[2:], 101.0, 3600) is None  # not a local session of the local admin
    assert store.session_user(sid, 100.0 + 3601, 3600) is None  # expired
    local = store.open_session("admin", 100.0, 3600)
    assert store.session_user(local, 101.0, 3600).server == ""
    store.close_session(sid)
    assert store.session_user(sid, 101.0, 3600) is None
    assert store.session_user(local, 101.0, 3600) is not None
    store.close()


def test_external_failures_lock_per_source(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "users.sqlite", lockout_failures=2, lockout_s=60.0)
    assert store.external_gate("carol", 10.0, "192.0.2.1") is None
    assert not store.external_outcome("carol", False, 10.0, "192.0.2.1").locked_now
    assert store.external_outcome("carol", False, 11.0, "192.0.2.1").locked_now
    held = store.external_gate("carol", 12.0, "192.0.2.1")
    assert held is not None and held.reason == "locked"
    assert store.external_gate("carol", 12.0, "192.0.2.2") is None  # another source is not held
    assert store.external_gate("carol", 72.0, "192.0.2.1") is None  # the lock ended
    assert store.external_outcome("carol", True, 72.0, "192.0.2.1", "operator").role == "operator"
    assert store.users() == []  # no local user was made
    store.close()


def test_a_signed_answer_with_a_vendor_attribute_is_read_and_an_unsigned_one_discarded() -> None:
    from pyrad import packet

    request = packet.AuthPacket(code=packet.AccessRequest, secret=b"shared", dict=radius.dictionary())
    request.authenticator = packet.Packet.CreateAuthenticator()
    request.add_message_authenticator()
    request["User-Name"] = "erin"
    request.RequestPacket()
    signed = request.CreateReply()
    signed["Vendor-Specific"] = struct.pack("!I", 9) + bytes([1, 7]) + b"admin"
    assert radius._checked(request, signed.ReplyPacket(), "test", (9, 1)) == radius.Answer(True, ("admin",))
    unsigned = request.CreateReply(message_authenticator=False)
    unsigned["Filter-Id"] = "appliance-admin"
    assert radius._checked(request, unsigned.ReplyPacket(), "test", (0, 11)) is None
    other = packet.AuthPacket(code=packet.AccessRequest, secret=b"not-shared", dict=radius.dictionary(),
                              id=request.id, authenticator=request.authenticator)
    assert radius._checked(request, other.CreateReply().ReplyPacket(), "test", (0, 11)) is None
