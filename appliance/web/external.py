"""External logins: ask the RADIUS or LDAP servers in order, map the answer to a role by the configured rules.

Edge module (calls the RADIUS and LDAP clients).  ``ExternalAuth.check(name, password)`` gives a ``Verdict``: accepted
with a role (and which server and which rule gave it), refused (a server said no, or said yes but no rule maps the
user to a role: no default role is ever given), or unreachable (no server gave a valid answer: the only case where
``auth.fallback = "unreachable"`` lets local users in).  ``problems(settings)`` lists what is wrong with the
``auth.*`` settings, in words, for ``appliance check-config`` and for the console's start.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from appliance.web import ldapauth, radius
from appliance.web.users import ROLES

log = logging.getLogger("appliance.web.auth")


@dataclass(frozen=True)
class Verdict:
    outcome: str  # "accept", "reject" (wrong name or password), "unmapped" (no rule gives a role), "unreachable"
    role: str = ""
    server: str = ""  # "radius 127.0.0.1:1812", "ldap ldaps://dir.example"
    rule: str = ""  # the rule that gave the role: "operator=appliance-operator"
    note: str = ""


def parse_rules(text: str, what: str) -> list[tuple[str, str]]:
    """``ROLE=VALUE;ROLE=VALUE`` -> [(role, value)], in order; ValueError naming the bad part."""
    rules = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        role, eq, value = part.partition("=")
        if not eq or role.strip() not in ROLES or not value.strip():
            raise ValueError(f"{what}: {part!r}: expected ROLE=VALUE with ROLE one of {', '.join(ROLES)}")
        rules.append((role.strip(), value.strip()))
    return rules


def parse_radius_servers(text: str) -> list[tuple[str, int]]:
    """``host, host:port, [v6]:port`` -> [(host, port)] (port 1812 by default); ValueError naming the bad one."""
    servers = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        host, port = part, str(radius.DEFAULT_PORT)
        if part.startswith("["):
            host, _, rest = part[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else (port if not rest else "x")
        elif part.count(":") == 1:
            host, _, port = part.partition(":")
        if not host or any(c.isspace() for c in host) or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"auth.radius_servers: bad server {part!r}: expected HOST or HOST:PORT")
        servers.append((host, int(port)))
    return servers


def problems(settings: object) -> list[str]:
    """What is wrong with the ``auth.*`` settings (empty: nothing), one line each."""
    s = settings
    found: list[str] = []
    method = getattr(s, "method")
    checks = {"radius": _radius_problems, "ldap": _ldap_problems}
    if method in checks:
        found += checks[method](s)
    return found


def _radius_problems(s: object) -> list[str]:
    found = []
    for check in (lambda: parse_radius_servers(getattr(s, "radius_servers")) or _missing("auth.radius_servers"),
                  lambda: radius.parse_attribute(getattr(s, "radius_role_attribute")),
                  lambda: parse_rules(getattr(s, "radius_roles"), "auth.radius_roles")
                  or _missing("auth.radius_roles")):
        try:
            check()
        except ValueError as exc:
            found.append(str(exc))
    if not getattr(s, "radius_secret"):
        found.append("auth.radius_secret is empty: the RADIUS servers' shared secret is needed")
    return found


def _ldap_problems(s: object) -> list[str]:
    found = []
    try:
        servers = [ldapauth.parse_server(u) for u in getattr(s, "ldap_servers").split(",") if u.strip()]
        if not servers:
            _missing("auth.ldap_servers")
        if any(not x.ldaps for x in servers) and not getattr(s, "ldap_starttls"):
            found.append("auth.ldap_servers: ldap:// without auth.ldap_starttls would send passwords in clear")
    except ValueError as exc:
        found.append(str(exc))
    try:
        parse_rules(getattr(s, "ldap_roles"), "auth.ldap_roles") or _missing("auth.ldap_roles")
    except ValueError as exc:
        found.append(str(exc))
    ca_file = getattr(s, "ldap_ca_file")
    if not ca_file:
        found.append("auth.ldap_ca_file is empty: the LDAP servers' certificates are verified against it")
    elif not os.path.isfile(os.path.expanduser(ca_file)):
        found.append(f"auth.ldap_ca_file {ca_file!r}: no such file")
    if not getattr(s, "ldap_base"):
        found.append("auth.ldap_base is empty: the base DN of users and groups is needed")
    if "{user}" not in getattr(s, "ldap_user_filter"):
        found.append("auth.ldap_user_filter must contain {user}")
    return found


def _missing(name: str) -> None:
    raise ValueError(f"{name} is empty: at least one is needed")


class ExternalAuth:
    """The login check of ``auth.method`` radius or ldap, built from the ``auth.*`` settings (checked first)."""

    def __init__(self, settings: object):
        self.method: str = getattr(settings, "method")
        self.fallback: str = getattr(settings, "fallback")
        self._s = settings

    @property
    def enabled(self) -> bool:
        return self.method in ("radius", "ldap")

    def check(self, name: str, password: str) -> Verdict:
        if not password:  # an empty password is no login (and an LDAP bind without one is anonymous)
            return Verdict("reject", note="empty password")
        try:
            return self._radius(name, password) if self.method == "radius" else self._ldap(name, password)
        except ValueError as exc:  # settings check-config would have refused: no server can be asked
            log.error("external logins: %s", exc)
            return Verdict("unreachable", note=f"bad auth settings: {exc}")

    def _radius(self, name: str, password: str) -> Verdict:
        s = self._s
        attribute = radius.parse_attribute(getattr(s, "radius_role_attribute"))
        rules = parse_rules(getattr(s, "radius_roles"), "auth.radius_roles")
        secret = getattr(s, "radius_secret").encode()
        for host, port in parse_radius_servers(getattr(s, "radius_servers")):
            where = f"radius {host}:{port}"
            answer = radius.authenticate((host, port), secret, name, password, getattr(s, "radius_timeout_s"),
                                         attribute)
            if answer is None:
                continue
            if not answer.accepted:
                return Verdict("reject", server=where, note="Access-Reject")
            for role, value in rules:
                if value in answer.values:
                    return Verdict("accept", role, where, f"{getattr(s, 'radius_role_attribute')}: {role}={value}")
            return Verdict("unmapped", server=where, note=f"Access-Accept, but no rule maps its "
                           f"{getattr(s, 'radius_role_attribute')} {list(answer.values)[:4]} to a role")
        return Verdict("unreachable", note="no RADIUS server answered")

    def _ldap(self, name: str, password: str) -> Verdict:
        s = self._s
        options = ldapauth.LdapOptions(
            os.path.expanduser(getattr(s, "ldap_ca_file")), getattr(s, "ldap_starttls"), getattr(s, "ldap_timeout_s"),
            getattr(s, "ldap_bind_dn"), getattr(s, "ldap_bind_password"), getattr(s, "ldap_base"),
            getattr(s, "ldap_user_filter"))
        rules = parse_rules(getattr(s, "ldap_roles"), "auth.ldap_roles")
        for url in (u for u in getattr(s, "ldap_servers").split(",") if u.strip()):
            server = ldapauth.parse_server(url)
            where = f"ldap {server.url}"
            answer = ldapauth.authenticate(server, options, name, password)
            if answer is None:
                continue
            if not answer.accepted:
                return Verdict("reject", server=where, note=answer.note)
            groups = {ldapauth.normal_dn(g) for g in answer.groups}
            for role, group in rules:
                if ldapauth.normal_dn(group) in groups:
                    return Verdict("accept", role, where, f"group: {role}={group}")
            return Verdict("unmapped", server=where, note=f"{answer.user_dn} is in no group mapped to a role")
        return Verdict("unreachable", note="no LDAP server answered")
