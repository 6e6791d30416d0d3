"""What every route of the web console shares: the context it serves from, the user's role, the audit record.

Edge module (Flask's request and application context).  ``WebContext`` is what the console is built around (the latest
status, the command hand-over, the user, audit and time-quality stores, the settings editor); ``needs(role)`` guards a
route, ``ctx_of()`` finds the context of the running application, ``audit(...)`` records a request's action as its
user, and ``refuse(code, message)`` answers JSON to the API and a page to a browser.  ``app.py`` (the application),
``views.py`` (pages), ``api.py`` (REST) and ``system.py`` import it; it imports none of them.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import current_app, g, jsonify, redirect, render_template, request, url_for

from appliance.web.users import ROLES, UserStore

RANK = {role: i for i, role in enumerate(ROLES)}


@dataclass
class WebContext:
    """What the console serves from: the appliance's published status and command hand-over, and its stores."""

    status: Callable[[], dict[str, Any]]  # the latest TimeStatus as a dict
    command: Callable[[dict[str, Any]], dict[str, Any]]  # runs on the appliance's loop; returns its reply
    users: UserStore
    settings: Any  # SettingsEditor
    audit: Any = None  # AuditStore
    audit_append: Callable[[str, str, str, dict[str, Any]], Any] | None = None  # kind, actor, text, detail
    quality: Any = None  # TimeQualityLog
    export_bundle: Callable[[int | None, int | None], bytes] | None = None  # signed audit bundle of a range
    utc_label: Callable[[int], str] = str
    posix_ms: Callable[[int], int] = lambda tai_ns: tai_ns // 1_000_000  # noqa: E731 - for chart axes
    now_tai_ns: Callable[[], int] = time.time_ns
    sky_tracks: Callable[[], list[dict[str, Any]]] | None = None  # SkyTracks.tracks: the satellites' recent positions
    wall_s: Callable[[], float] = time.time  # host time for sessions, lockouts and tokens (a test moves it)
    metrics_public: bool = False
    session_timeout_s: int = 3600
    rate_per_s: float = 20.0
    rate_burst: int = 100
    budget_per_s: float = 0.0  # all clients together (0: none): beyond it requests wait their turn
    state_dir: Path | None = None  # for the system page's disk use (None: not shown)
    external: Any = None  # ExternalAuth: RADIUS or LDAP logins (None: local users only)


def can(role: str) -> bool:
    """Whether the current user holds ``role`` or a higher one."""
    current = g.get("role")
    return current is not None and RANK[current] >= RANK[role]


def needs(role: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Refuse (403) a request whose user lacks ``role``."""
    def wrap(view: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(view)
        def checked(*args: Any, **kwargs: Any) -> Any:
            if not can(role):
                return refuse(403, f"refused: the {role} role is needed")
            return view(*args, **kwargs)
        return checked
    return wrap


def ctx_of() -> WebContext:
    """The context of the application serving the current request."""
    return current_app.extensions["ctx"]  # type: ignore[no-any-return]


def audit(kind: str, text: str, detail: dict[str, Any] | None = None, actor: str | None = None) -> None:
    """An audit record of the current request's action, as its user (``web:`` by session, ``api:`` by token)."""
    ctx = ctx_of()
    if ctx.audit_append is not None:
        who = actor or g.get("user") or "anonymous"
        ctx.audit_append(kind, f"web:{who}" if g.get("via") != "token" else f"api:{who}", text,
                         {"client": request.remote_addr, **(detail or {})})


def audit_verified(result: Any) -> None:
    """The record of an audit chain check made for a console or API user.  A store that cannot take it (found cut
    short, say: the check's own answer says so) costs the record, not the answer."""
    from appliance.audit.chain import AuditError

    try:
        audit("audit.verify", f"audit chain verified: {'OK' if result.ok else 'BROKEN'} "
              f"({result.checked + result.earlier} records)", {"ok": result.ok, "first_bad_seq": result.first_bad_seq})
    except AuditError as exc:
        logging.getLogger("appliance.web").warning("audit check not recorded: %s", exc)


def refuse(code: int, message: str) -> Any:
    """The refusal of the current request: JSON to the API and /metrics, a login redirect or a page to a browser."""
    if request.path.startswith("/api/") or request.endpoint == "metrics" or request.accept_mimetypes.best == \
            "application/json":
        response = jsonify({"error": message})
        response.status_code = code
        return response
    if code == 401:
        return redirect(url_for("views.login"))
    return render_template("refused.html", code=code, message=message), code

