"""Who checks a console login: the local users, or the RADIUS/LDAP servers with the fallback policy; its record.

Edge module (calls ``external.py``, which asks the servers).  With ``auth.method = "local"`` a login is the user
store's (``UserStore.login``).  With radius or ldap the servers decide: an accepted login with a mapped role opens an
external session; a refusal (wrong password, or no rule mapping the user to a role) counts a failure for this name
and source, as a local wrong password does, so backoff and lockout hold external guessing too.  Only when no server
gave a valid answer, and ``auth.fallback = "unreachable"``, is the local user store asked instead; with
``"never"`` the login is refused.  Every outcome says in its audit record which server answered and which rule gave
the role (never a password or a secret).
"""

from __future__ import annotations

import logging
from typing import Any

from appliance.web.users import LoginResult

log = logging.getLogger("appliance.web.auth")

REASONS = {"reject": "bad credentials", "unmapped": "no role mapped", "unreachable": "no server answered"}


def check(ctx: Any, name: str, password: str, now_s: float, client: str) -> tuple[LoginResult, Any]:
    """(the login's result, the external verdict or None when only local users were asked)."""
    external = getattr(ctx, "external", None)
    if external is None or not external.enabled:
        return ctx.users.login(name, password, now_s, client), None
    held = ctx.users.external_gate(name, now_s, client)
    if held is not None:
        return held, None
    verdict = external.check(name, password)
    if verdict.outcome == "unreachable":
        if external.fallback == "unreachable":
            log.warning("console login of %r: no %s server answered; local users are asked (auth.fallback = "
                        "unreachable)", name[:64], external.method)
            return ctx.users.login(name, password, now_s, client), verdict
        log.warning("console login of %r refused: no %s server answered and auth.fallback = never", name[:64],
                    external.method)
        return LoginResult(False, name, reason=REASONS["unreachable"]), verdict
    ok = verdict.outcome == "accept"
    result = ctx.users.external_outcome(name, ok, now_s, client, verdict.role, REASONS.get(verdict.outcome, ""))
    if not ok:
        log.info("console login of %r refused by %s: %s", name[:64], verdict.server, verdict.note)
    return result, verdict


def login_record(result: LoginResult, verdict: Any) -> tuple[str, dict[str, Any]]:
    """The text and detail of a successful login's audit record."""
    text = f"{result.user} logged in ({result.role})"
    if verdict is None:
        return text, {"via": "local"}
    if verdict.outcome == "accept":
        return (f"{text} via {verdict.server}, rule {verdict.rule}",
                {"via": verdict.server, "rule": verdict.rule, "role": result.role})
    return (f"{text} as a local user: {verdict.note} (auth.fallback = unreachable)",
            {"via": "local (fallback)", "role": result.role})


def detail_of(verdict: Any) -> dict[str, Any]:
    """What a failed login's audit detail says of the servers."""
    if verdict is None:
        return {}
    return {"server": verdict.server or "(none answered)", "note": verdict.note}


def said_by(verdict: Any) -> str:
    """' (Access-Reject from radius 127.0.0.1:1812)' for a failed login's audit text."""
    if verdict is None:
        return ""
    return f" ({verdict.note} from {verdict.server})" if verdict.server else f" ({verdict.note})"
