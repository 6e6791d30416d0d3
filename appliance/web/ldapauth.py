"""An LDAP client for console logins: search the user with a service bind, bind as the user, read its groups.

Edge module (TCP through ldap3).  Every connection is encrypted and its server certificate verified against the
configured CA file: ``ldaps://`` from the first byte, ``ldap://`` upgraded with StartTLS (RFC 4513 3) before any
bind; a certificate that does not verify ends that server's attempt with a log line that says so.  An empty password
is refused before any server is asked: a simple bind with a name and no password is an unauthenticated bind (RFC 4513
5.1.2), which many servers accept, and it proves nothing.  Groups are the user entry's ``memberOf`` values and the
groups under the base whose ``member`` or ``uniqueMember`` is the user's DN.  Passwords are never logged.
"""

from __future__ import annotations

import logging
import math
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

import ldap3
from ldap3.core import exceptions as lexc
from ldap3.utils.conv import escape_filter_chars

log = logging.getLogger("appliance.web.auth")


@dataclass(frozen=True)
class LdapServer:
    url: str
    host: str
    port: int
    ldaps: bool


@dataclass(frozen=True)
class LdapOptions:
    ca_file: str
    starttls: bool
    timeout_s: float
    bind_dn: str
    bind_password: str
    base: str
    user_filter: str


@dataclass(frozen=True)
class LdapAnswer:
    """A server's answer: the password was right (and the user's groups) or not."""
    accepted: bool
    user_dn: str = ""
    groups: tuple[str, ...] = ()
    note: str = ""


def parse_server(url: str) -> LdapServer:
    """``ldaps://host[:port]`` or ``ldap://host[:port]``; ValueError naming the text otherwise."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("ldap", "ldaps") or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"LDAP server {url!r}: expected ldaps://HOST[:PORT] or ldap://HOST[:PORT]")
    try:
        port = parts.port or (636 if parts.scheme == "ldaps" else 389)
    except ValueError:
        raise ValueError(f"LDAP server {url!r}: bad port") from None
    return LdapServer(url.strip(), parts.hostname, port, parts.scheme == "ldaps")


def normal_dn(dn: str) -> str:
    """A DN compared as text: case and spaces around separators ignored (enough for group DNs an admin writes)."""
    return ",".join("=".join(p.strip() for p in rdn.split("=", 1)) for rdn in dn.split(",")).lower()


def authenticate(server: LdapServer, options: LdapOptions, user: str, password: str) -> LdapAnswer | None:
    """Ask ``server`` about ``user``/``password``: its answer, or None when it could not be asked (down, TLS
    failed, the service bind refused, an error): the next server is tried then."""
    where = server.url
    try:
        service = _connection(server, options, options.bind_dn, options.bind_password)
        if service is None:
            return None
        try:
            entry = _find_user(service, options, user)
        finally:
            service.unbind()
        if entry is None:
            return LdapAnswer(False, note="no such user")
        dn, member_of = entry
        if not _user_bind(server, options, dn, password):
            return LdapAnswer(False, user_dn=dn, note="wrong password")
        return LdapAnswer(True, dn, tuple(member_of) + _groups_of(server, options, dn))
    except (lexc.LDAPException, OSError, ssl.SSLError) as exc:
        log.warning("LDAP server %s: %s", where, _why(exc))
        return None


def _tls(options: LdapOptions) -> ldap3.Tls:
    return ldap3.Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=options.ca_file or None,
                     version=ssl.PROTOCOL_TLS_CLIENT)


def _target(server: LdapServer, options: LdapOptions) -> ldap3.Server:
    return ldap3.Server(server.host, port=server.port, use_ssl=server.ldaps, tls=_tls(options),
                        connect_timeout=options.timeout_s, get_info=ldap3.NONE)


def _connection(server: LdapServer, options: LdapOptions, dn: str, password: str) -> ldap3.Connection | None:
    """A bound, encrypted connection (anonymous when ``dn`` is empty); None (logged) when the bind is refused."""
    conn = ldap3.Connection(_target(server, options), user=dn or None, password=password or None,
                            receive_timeout=_whole_s(options.timeout_s), raise_exceptions=False, read_only=True,
                            authentication=ldap3.SIMPLE if dn else ldap3.ANONYMOUS)
    conn.open()
    if not server.ldaps and not conn.start_tls():
        conn.unbind()
        raise lexc.LDAPStartTLSError(f"StartTLS refused: {conn.result.get('description')}")
    if not conn.bind():
        log.warning("LDAP server %s: the service bind as %r was refused (%s): check auth.ldap_bind_dn and its "
                    "password", server.url, dn, conn.result.get("description"))
        conn.unbind()
        return None
    return conn


def _find_user(conn: ldap3.Connection, options: LdapOptions, user: str) -> tuple[str, list[str]] | None:
    """The one entry the user filter finds (its DN and memberOf values); None for none or several."""
    query = options.user_filter.replace("{user}", escape_filter_chars(user))
    conn.search(options.base, query, search_scope=ldap3.SUBTREE, attributes=["memberOf"], size_limit=2,
                time_limit=max(1, int(options.timeout_s)))
    entries = [e for e in conn.response or [] if e.get("type") == "searchResEntry"]
    if len(entries) != 1:
        return None
    member_of = entries[0].get("attributes", {}).get("memberOf", []) or []
    return entries[0]["dn"], [str(g) for g in member_of]


def _user_bind(server: LdapServer, options: LdapOptions, dn: str, password: str) -> bool:
    """Whether a simple bind as ``dn`` with ``password`` succeeds (on a new encrypted connection)."""
    conn = ldap3.Connection(_target(server, options), user=dn, password=password,
                            receive_timeout=_whole_s(options.timeout_s), authentication=ldap3.SIMPLE,
                            raise_exceptions=False, read_only=True)
    conn.open()
    try:
        if not server.ldaps and not conn.start_tls():
            raise lexc.LDAPStartTLSError(f"StartTLS refused: {conn.result.get('description')}")
        return bool(conn.bind())
    finally:
        conn.unbind()


def _groups_of(server: LdapServer, options: LdapOptions, dn: str) -> tuple[str, ...]:
    """The groups under the base that list ``dn`` as a member (searched with the service account)."""
    conn = _connection(server, options, options.bind_dn, options.bind_password)
    if conn is None:
        return ()
    try:
        value = escape_filter_chars(dn)
        conn.search(options.base, f"(|(member={value})(uniqueMember={value}))", search_scope=ldap3.SUBTREE,
                    attributes=[], size_limit=500, time_limit=max(1, int(options.timeout_s)))
        return tuple(e["dn"] for e in conn.response or [] if e.get("type") == "searchResEntry")
    finally:
        conn.unbind()


def _why(exc: BaseException) -> str:
    """An LDAP failure in words, with the certificate's case spelled out."""
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        return ("TLS failed: the server's certificate does not verify against auth.ldap_ca_file "
                f"({text[:200]})")
    if isinstance(exc, lexc.LDAPStartTLSError):
        return f"StartTLS failed: {text[:200]}"
    if isinstance(exc, (lexc.LDAPSocketOpenError, lexc.LDAPSocketReceiveError, OSError)):
        return f"cannot reach it: {text[:200]}"
    return f"error: {type(exc).__name__}: {text[:200]}"


def _whole_s(timeout_s: float) -> int:
    """ldap3 sets its receive timeout as whole seconds (a socket option packed as integers)."""
    return max(1, math.ceil(timeout_s))
