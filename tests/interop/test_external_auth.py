"""External console logins against real servers: FreeRADIUS and slapd from Debian, started here on loopback.

What a user sees: logging in to the console (the in-process Flask client of tests/web) as a RADIUS or LDAP user
gives the role the server's answer maps to; a wrong password, an answer no rule maps, a forged or unsigned RADIUS
answer and a certificate that does not verify are refused, audited, and logged in words; servers are tried in
order; local users log in only when no server answers and the fallback allows it.  Secrets never show.
"""

from __future__ import annotations

import hashlib
import logging
import re
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyrad import packet

from harness import auth_peers
from harness.auth_peers import BASE_DN
from tests.web.conftest import PASSWORDS, ConsoleEnv, console_env, sim_status, users_template  # noqa: F401

RADIUS_SECRET = "radius-shared-S3CRET"
BIND_PASSWORD = "svc-bind-S3CRET"
USER_PASSWORDS = {"alice": "alice-pass-1234", "bob": "bob-pass-5678", "erin": "erin-pass-9012",
                  "carol": "carol-pass-3456", "dave": "dave-pass-7890"}
RADIUS_USERS = "".join(
    f'{name} Cleartext-Password := "{USER_PASSWORDS[name]}"\n' + (f'    Filter-Id = "{filter_id}"\n' if filter_id
                                                                   else "    Reply-Message = \"hello\"\n")
    for name, filter_id in (("alice", "appliance-operator"), ("erin", "appliance-admin"), ("bob", "")))
RADIUS_ROLES = "admin=appliance-admin;operator=appliance-operator;viewer=appliance-viewer"
LDAP_ROLES = f"admin=cn=admins,ou=groups,{BASE_DN};operator=cn=Operators, ou=groups, {BASE_DN}"
SECRETS = (RADIUS_SECRET, BIND_PASSWORD, *USER_PASSWORDS.values())


def _ldif() -> str:
    people = "".join(f"\ndn: uid={n},ou=people,{BASE_DN}\nobjectClass: inetOrgPerson\nuid: {n}\ncn: {n}\nsn: {n}\n"
                     f"userPassword: {USER_PASSWORDS[n]}\n" for n in ("carol", "dave"))
    return (f"dn: {BASE_DN}\nobjectClass: dcObject\nobjectClass: organization\no: Example\ndc: example\n\n"
            f"dn: ou=people,{BASE_DN}\nobjectClass: organizationalUnit\nou: people\n\n"
            f"dn: ou=groups,{BASE_DN}\nobjectClass: organizationalUnit\nou: groups\n\n"
            f"dn: cn=svc,{BASE_DN}\nobjectClass: inetOrgPerson\ncn: svc\nsn: svc\nuserPassword: {BIND_PASSWORD}\n\n"
            f"dn: cn=operators,ou=groups,{BASE_DN}\nobjectClass: groupOfNames\ncn: operators\n"
            f"member: uid=carol,ou=people,{BASE_DN}\n\n"
            f"dn: cn=staff,ou=groups,{BASE_DN}\nobjectClass: groupOfNames\ncn: staff\n"
            f"member: uid=dave,ou=people,{BASE_DN}\n{people}")


@pytest.fixture(scope="module")
def radius_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[auth_peers.Radius]:
    with auth_peers.freeradius(tmp_path_factory.mktemp("radius"), RADIUS_SECRET, RADIUS_USERS) as server:
        yield server


@pytest.fixture(scope="module")
def ldap_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[auth_peers.Ldap]:
    with auth_peers.slapd(tmp_path_factory.mktemp("slapd"), _ldif()) as server:
        yield server


def auth_settings(**values: Any) -> Any:
    from appliance import config as cfg

    return cfg.merge(cfg.defaults(), {f"auth.{k}": v for k, v in values.items()}, "test").auth


def radius_env(console_env: Callable[..., ConsoleEnv], servers: str, fallback: str = "never",  # noqa: F811
               timeout_s: float = 2.0, **kwargs: Any) -> ConsoleEnv:
    from appliance.web.external import ExternalAuth

    settings = auth_settings(method="radius", radius_servers=servers, radius_secret=RADIUS_SECRET,
                             radius_roles=RADIUS_ROLES, radius_timeout_s=timeout_s, fallback=fallback)
    return console_env(external=ExternalAuth(settings), **kwargs)


def ldap_env(console_env: Callable[..., ConsoleEnv], servers: str, ca_file: Path,  # noqa: F811
             fallback: str = "never") -> ConsoleEnv:
    from appliance.web.external import ExternalAuth

    settings = auth_settings(method="ldap", ldap_servers=servers, ldap_ca_file=str(ca_file), ldap_timeout_s=3.0,
                             ldap_bind_dn=f"cn=svc,{BASE_DN}", ldap_bind_password=BIND_PASSWORD, ldap_base=BASE_DN,
                             ldap_roles=LDAP_ROLES, fallback=fallback)
    return console_env(external=ExternalAuth(settings))


def logged_in_as(env: ConsoleEnv, user: str, password: str) -> str:
    """The ``user (role)`` a console page shows after logging in (fails unless the login succeeded)."""
    browser = env.browser()
    response = browser.login(user, password)
    assert response.status_code == 302, response.get_data(as_text=True)[-500:]
    page = browser.client.get("/").get_data(as_text=True)
    found = re.search(r'class="who[^"]*"[^>]*>([^<]+)<', page)
    assert found, page[-500:]
    return found.group(1).strip()


def refused(env: ConsoleEnv, user: str, password: str) -> str:
    response = env.browser().login(user, password)
    assert response.status_code == 401, response.status_code
    return response.get_data(as_text=True)


def records_text(env: ConsoleEnv, kind: str) -> list[str]:
    """The audit records of ``kind``, oldest first."""
    return [f"{r.text} {r.detail}" for r in reversed(env.records(kind))]


def no_secrets(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"a secret shows: {text[:300]}"


# --- RADIUS --------------------------------------------------------------------------------------------------------

def test_radius_user_gets_the_role_its_filter_id_maps_to(console_env: Any, radius_server: Any,  # noqa: F811
                                                        caplog: Any) -> None:
    caplog.set_level(logging.DEBUG)
    env = radius_env(console_env, f"127.0.0.1:{radius_server.port}")
    assert logged_in_as(env, "alice", USER_PASSWORDS["alice"]) == "alice (operator)"
    assert logged_in_as(env, "erin", USER_PASSWORDS["erin"]) == "erin (admin)"
    [alice, erin] = records_text(env, "login")
    assert f"via radius 127.0.0.1:{radius_server.port}, rule Filter-Id: operator=appliance-operator" in alice
    assert "rule Filter-Id: admin=appliance-admin" in erin
    browser = env.browser()
    browser.login("alice", USER_PASSWORDS["alice"])
    assert browser.api("PUT", "/api/v1/config/log.level", {"value": "debug"}).status_code == 403  # admin's
    assert browser.client.get("/password").status_code == 403  # the server keeps her password
    no_secrets(caplog.text, *records_text(env, "login"))


def test_radius_refusals_are_audited_and_count_towards_lockout(console_env: Any, radius_server: Any,  # noqa: F811
                                                              caplog: Any) -> None:
    caplog.set_level(logging.DEBUG)
    env = radius_env(console_env, f"127.0.0.1:{radius_server.port}", lockout_failures=3)
    refused(env, "alice", "not-her-password")
    page = refused(env, "bob", USER_PASSWORDS["bob"])  # Access-Accept, but no Filter-Id a rule maps
    assert "Wrong user name or password." in page
    failed = records_text(env, "login.failed")
    assert "Access-Reject from radius 127.0.0.1" in failed[0]
    assert "bob" in failed[1] and "no role mapped" in failed[1] and "no rule maps" in failed[1]
    refused(env, "alice", "still-not-it")
    refused(env, "alice", "third-wrong-one")
    # locked for this source now: even the right password is refused without asking the server
    page = refused(env, "alice", USER_PASSWORDS["alice"])
    assert "This account is locked" in page
    assert "(account locked)" in records_text(env, "login.failed")[-2]
    assert "locked" in records_text(env, "login.failed")[-1]
    assert logged_in_as(env, "erin", USER_PASSWORDS["erin"]) == "erin (admin)"  # others are not held
    no_secrets(caplog.text, *records_text(env, "login.failed"))


def test_first_server_silent_second_answers(console_env: Any, radius_server: Any) -> None:  # noqa: F811
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))
        first = f"127.0.0.1:{silent.getsockname()[1]}"
        env = radius_env(console_env, f"{first}, 127.0.0.1:{radius_server.port}", timeout_s=0.5)
        assert logged_in_as(env, "alice", USER_PASSWORDS["alice"]) == "alice (operator)"
    assert f"via radius 127.0.0.1:{radius_server.port}," in records_text(env, "login")[0]


def test_no_server_answers_local_users_only_if_the_fallback_allows(console_env: Any, caplog: Any) -> None:  # noqa: F811
    caplog.set_level(logging.INFO)
    down = f"127.0.0.1:{auth_peers.free_port(socket.SOCK_DGRAM)}"
    never = radius_env(console_env, down, fallback="never", timeout_s=0.3)
    refused(never, "admin", PASSWORDS["admin"])
    assert "no server answered" in records_text(never, "login.failed")[0]
    assert "auth.fallback = never" in caplog.text
    allowed = radius_env(console_env, down, fallback="unreachable", timeout_s=0.3)
    assert logged_in_as(allowed, "admin", PASSWORDS["admin"]) == "admin (admin)"
    assert "as a local user: no RADIUS server answered" in records_text(allowed, "login")[0]
    refused(allowed, "admin", "wrong-local-password")


class FakeRadius:
    """A RADIUS 'server' on loopback that answers every Access-Request with an Access-Accept for the admin role,
    signed with the right secret but with its Message-Authenticator ``missing`` or ``wrong``."""

    def __init__(self, flaw: str):
        self.flaw = flaw
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.answered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        from appliance.web.radius import dictionary

        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            request = packet.AuthPacket(packet=data, secret=RADIUS_SECRET.encode(), dict=dictionary())
            self.sock.sendto(self._answer(request), peer)
            self.answered += 1

    def _answer(self, request: packet.AuthPacket) -> bytes:
        reply = request.CreateReply(message_authenticator=self.flaw != "missing")
        reply["Filter-Id"] = "appliance-admin"
        raw = bytearray(reply.ReplyPacket())
        if self.flaw == "wrong":  # spoil the Message-Authenticator, then sign the packet again around it
            at = raw.index(bytes([80, 18]), 20) + 2
            raw[at:at + 16] = bytes(16)
            raw[4:20] = hashlib.md5(bytes(raw[:4]) + request.authenticator + bytes(raw[20:])
                                    + RADIUS_SECRET.encode()).digest()
        assert struct.unpack("!H", raw[2:4])[0] == len(raw)
        return bytes(raw)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.mark.parametrize("flaw", ["missing", "wrong"])
def test_answer_without_a_valid_message_authenticator_is_refused(console_env: Any, caplog: Any,  # noqa: F811
                                                                 flaw: str) -> None:
    caplog.set_level(logging.INFO)
    fake = FakeRadius(flaw)
    try:
        env = radius_env(console_env, f"127.0.0.1:{fake.port}", timeout_s=0.5)
        refused(env, "mallory", "any-password-at-all")
        assert fake.answered == 1
    finally:
        fake.close()
    expected = "it has no Message-Authenticator" if flaw == "missing" else "wrong Response Authenticator or " \
        "Message-Authenticator"
    assert expected in caplog.text
    assert "no server answered" in records_text(env, "login.failed")[0]


# --- LDAP ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scheme", ["ldaps", "ldap"])  # ldap:// goes through StartTLS
def test_ldap_operators_group_gives_operator(console_env: Any, ldap_server: Any, caplog: Any,  # noqa: F811
                                            scheme: str) -> None:
    caplog.set_level(logging.DEBUG)
    port = ldap_server.tls_port if scheme == "ldaps" else ldap_server.port
    env = ldap_env(console_env, f"{scheme}://127.0.0.1:{port}", ldap_server.pki.ca)
    assert logged_in_as(env, "carol", USER_PASSWORDS["carol"]) == "carol (operator)"
    assert (f"via ldap {scheme}://127.0.0.1:{port}, rule group: operator=cn=Operators, ou=groups"
            in records_text(env, "login")[0])
    refused(env, "carol", "not-carols")
    refused(env, "carol", "")  # no password: an unauthenticated bind is no login
    refused(env, "dave", USER_PASSWORDS["dave"])  # in no mapped group
    refused(env, "nobody)(uid=*", "whatever-pass")  # the filter is escaped: no entry found
    failed = records_text(env, "login.failed")
    assert "wrong password" in failed[0] and "is in no group mapped to a role" in failed[2]
    no_secrets(caplog.text, *failed, *records_text(env, "login"))


def test_ldap_first_server_down_second_answers(console_env: Any, ldap_server: Any) -> None:  # noqa: F811
    down = f"ldaps://127.0.0.1:{auth_peers.free_port()}"
    env = ldap_env(console_env, f"{down}, ldaps://127.0.0.1:{ldap_server.tls_port}", ldap_server.pki.ca)
    assert logged_in_as(env, "carol", USER_PASSWORDS["carol"]) == "carol (operator)"


def test_starttls_with_the_wrong_ca_is_refused_and_said(console_env: Any, ldap_server: Any,  # noqa: F811
                                                         tmp_path: Path, caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    other = auth_peers.make_pki(tmp_path / "other", "other")
    env = ldap_env(console_env, f"ldap://127.0.0.1:{ldap_server.port}", other.ca)
    refused(env, "carol", USER_PASSWORDS["carol"])
    assert "the server's certificate does not verify against auth.ldap_ca_file" in caplog.text


# --- settings --------------------------------------------------------------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance", *args], capture_output=True, text=True, timeout=60)


def test_secrets_are_masked_and_bad_settings_named(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    ca = auth_peers.make_pki(tmp_path / "pki").ca
    good.write_text(f'[auth]\nmethod = "ldap"\nldap_servers = "ldaps://127.0.0.1:6360"\nldap_ca_file = "{ca}"\n'
                    f'ldap_base = "{BASE_DN}"\nldap_bind_dn = "cn=svc,{BASE_DN}"\n'
                    f'ldap_bind_password = "{BIND_PASSWORD}"\nradius_secret = "{RADIUS_SECRET}"\n'
                    f'ldap_roles = "viewer=cn=staff,ou=groups,{BASE_DN}"\n')
    checked = _cli("check-config", str(good))
    assert checked.returncode == 0, checked.stderr
    listed = _cli("config", "list", "--config", str(good))
    assert listed.returncode == 0, listed.stderr
    assert "auth.ldap_bind_password" in listed.stdout
    no_secrets(checked.stdout + checked.stderr, listed.stdout + listed.stderr)
    bad = tmp_path / "bad.toml"
    bad.write_text('[auth]\nmethod = "radius"\nradius_servers = "127.0.0.1:99999, ok.example"\n'
                   'radius_roles = "root=x"\n')
    out = _cli("check-config", str(bad))
    assert out.returncode != 0
    assert "auth.radius_servers: bad server '127.0.0.1:99999'" in out.stderr
    assert "auth.radius_roles: 'root=x': expected ROLE=VALUE" in out.stderr
    assert "auth.radius_secret is empty" in out.stderr
    bad.write_text(f'[auth]\nmethod = "ldap"\nldap_servers = "ldaps://127.0.0.1"\nldap_ca_file = "{tmp_path}/none.pem"'
                   f'\nldap_base = "{BASE_DN}"\nldap_roles = "admin=cn=a"\n')
    out = _cli("check-config", str(bad))
    assert out.returncode != 0 and f"auth.ldap_ca_file '{tmp_path}/none.pem': no such file" in out.stderr


def test_secrets_do_not_show_in_the_console_api(console_env: Any, radius_server: Any,  # noqa: F811
                                               tmp_path: Path) -> None:
    from appliance import config as cfg
    from appliance.web.settings_edit import SettingsEditor

    config = cfg.merge(cfg.defaults(), {"auth.radius_secret": RADIUS_SECRET, "auth.ldap_bind_password":
                                        BIND_PASSWORD}, "test")
    editor = SettingsEditor(config, tmp_path, lambda name, value: False)
    env = radius_env(console_env, f"127.0.0.1:{radius_server.port}", settings=editor)
    browser = env.browser()
    browser.login("erin", USER_PASSWORDS["erin"])
    shown = [browser.client.get(path).get_data(as_text=True) for path in
             ("/api/v1/config", "/api/v1/status", "/config", "/audit", "/api/v1/audit")]
    assert "auth.radius_secret" in shown[0] and cfg.MASK in shown[0]
    no_secrets(*shown)


# --- a real appliance -------------------------------------------------------------------------------------------------

class HttpsSession:
    """A browser's cookie jar over HTTPS to the appliance's console (its self-signed certificate accepted)."""

    def __init__(self, port: int):
        import http.cookiejar
        import ssl
        import urllib.request

        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        self.base = f"https://127.0.0.1:{port}"
        self.opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context),
                                                  urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(self, path: str) -> str:
        with self.opener.open(self.base + path, timeout=10) as reply:
            return str(reply.read().decode())

    def login(self, user: str, password: str) -> str:
        import urllib.parse
        import urllib.request

        token = re.search(r'name="csrf_token" value="([^"]+)"', self.get("/login"))
        assert token
        body = urllib.parse.urlencode({"csrf_token": token.group(1), "user": user, "password": password,
                                       "next": "/"}).encode()
        request = urllib.request.Request(self.base + "/login", data=body, headers={"Referer": self.base + "/login"})
        with self.opener.open(request, timeout=30) as reply:  # the redirect to / is followed
            return str(reply.read().decode())


def test_a_running_appliance_logs_a_radius_user_in_over_https(radius_server: Any, tmp_path: Path) -> None:
    from harness import procs
    from harness.peers import eventually

    web = procs.free_tcp_port()
    config = tmp_path / "appliance.toml"
    config.write_text(f'[auth]\nmethod = "radius"\nfallback = "never"\n'
                      f'radius_servers = "127.0.0.1:{radius_server.port}"\nradius_secret = "{RADIUS_SECRET}"\n'
                      f'radius_roles = "{RADIUS_ROLES}"\n')
    state = tmp_path / "state"
    proc = procs.appliance("run", "--config", str(config), "--set", f"state_dir={state}", "--set",
                           "clock.warmup_s=0", "--set", "web.listen=127.0.0.1", "--set", f"web.port={web}")
    try:
        session = HttpsSession(web)

        def login_page() -> bool:
            try:
                return "csrf_token" in session.get("/login")
            except OSError:
                return False

        eventually(login_page, 60, "the console's login page")
        page = session.login("alice", USER_PASSWORDS["alice"])
        assert "alice (operator)" in page
        audit = session.get("/audit")
        assert "via radius 127.0.0.1" in audit and "operator=appliance-operator" in audit
    finally:
        _, stderr = procs.stop(proc)
    no_secrets(stderr)
