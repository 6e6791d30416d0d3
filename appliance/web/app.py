"""The web console's Flask application: sessions and tokens, roles, CSRF, rate limits, security headers.

Edge module (HTTP through Flask).  ``create_app(ctx)`` builds the application around a ``WebContext``: the latest
status (published by the appliance once a second; the web never touches the engines), a way to hand an operator
command to the appliance's event loop, the user store, the audit store, the time-quality log and the settings
editor.  Pages are in ``views.py``, the REST API in ``api.py``, ``/metrics`` in ``metrics.py``.

Every route needs a session or an API token except the login page, static assets and, when
``web.metrics_public`` is set, ``/metrics``.  A session is a signed cookie (Secure, HttpOnly, SameSite=Strict) naming
the user; the role is read from the user store on every request, so a change of role or a removed user takes
effect at once.  Every state-changing request made with a session carries a CSRF token (a form field or the
X-CSRFToken header); requests authenticated by a bearer token do not (no cookie is involved).  Each client address
gets a token bucket of requests.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import Flask, Response, g, jsonify, redirect, render_template, request, session, url_for
from flask_wtf.csrf import CSRFError, CSRFProtect

from appliance.edge.pacer import Pacer
from appliance.web.users import ROLES, UserStore

log = logging.getLogger("appliance.web")
RANK = {role: i for i, role in enumerate(ROLES)}


@dataclass
class WebContext:
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
    metrics_public: bool = False
    session_timeout_s: int = 3600
    rate_per_s: float = 20.0
    rate_burst: int = 100
    budget_per_s: float = 0.0  # all clients together (0: none): beyond it requests wait their turn


BUDGET_MAX_WAIT_S = 5.0


class RateLimiter:
    """A token bucket per client address (refilled at ``rate`` per second up to ``burst``)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.clock = rate, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, client: str) -> bool:
        now = self.clock()
        with self._lock:
            tokens, then = self._buckets.get(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate)
            if len(self._buckets) > 10_000:  # many addresses: forget the idle ones
                self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < 60}
            if tokens < 1:
                self._buckets[client] = (tokens, now)
                return False
            self._buckets[client] = (tokens - 1, now)
            return True


def create_app(ctx: WebContext, secret_key: bytes) -> Flask:
    here = Path(__file__).parent
    app = Flask("appliance.web", template_folder=str(here / "templates"), static_folder=str(here / "static"))
    app.config.update(SECRET_KEY=secret_key, SESSION_COOKIE_SECURE=True, SESSION_COOKIE_HTTPONLY=True,
                      SESSION_COOKIE_SAMESITE="Strict", SESSION_COOKIE_NAME="appliance_session",
                      PERMANENT_SESSION_LIFETIME=ctx.session_timeout_s, WTF_CSRF_CHECK_DEFAULT=False,
                      WTF_CSRF_TIME_LIMIT=None, MAX_CONTENT_LENGTH=64 * 1024, JSON_SORT_KEYS=False,
                      # A session ends session_timeout_s after its login, whatever happens meanwhile (the "since"
                      # checked below), so re-signing and re-sending its cookie on every answer buys nothing.
                      SESSION_REFRESH_EACH_REQUEST=False)
    app.extensions["ctx"] = ctx
    csrf = CSRFProtect(app)
    limiter = RateLimiter(ctx.rate_per_s, ctx.rate_burst)
    pacer = Pacer(ctx.budget_per_s, max(10, int(5 * ctx.budget_per_s)))  # 5 s worth: a page and its assets at once
    app.extensions["pacer"] = pacer

    @app.before_request
    def authenticate() -> Any:
        if not limiter.allow(request.remote_addr or "?"):
            return _refuse(429, "too many requests")
        if not pacer.wait(BUDGET_MAX_WAIT_S):  # the console's share of the machine is spent: wait, or come back
            return _refuse(503, "console busy: the appliance serves time first; try again shortly")
        g.user, g.role, g.via = None, None, None
        endpoint = request.endpoint or ""
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            found = ctx.users.token_user(header[7:].strip())
            if found is None:
                return _refuse(401, "invalid token")
            g.user, g.role, g.via = found[0], found[1], "token"
        elif "user" in session:
            role = ctx.users.role_of(session["user"])
            if role is None or time.time() - session.get("since", 0) > ctx.session_timeout_s:
                session.clear()
            else:
                g.user, g.role, g.via = session["user"], role, "session"
                if request.method not in ("GET", "HEAD", "OPTIONS"):
                    csrf.protect()
        if endpoint in ("static", "views.login") or (endpoint == "metrics" and ctx.metrics_public):
            return None
        if g.user is None:
            if request.path.startswith("/api/") or endpoint == "metrics":
                return _refuse(401, "authentication required (a session or an API token)")
            return redirect(url_for("views.login", next=request.path))
        return None

    @app.after_request
    def headers(response: Response) -> Response:
        response.headers["Content-Security-Policy"] = ("default-src 'self'; img-src 'self' data:; style-src 'self'; "
                                                       "script-src 'self'; frame-ancestors 'none'; form-action 'self'; "
                                                       "base-uri 'none'; object-src 'none'")
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"  # CSRF checks the referrer over HTTPS
        response.headers["Strict-Transport-Security"] = "max-age=31536000"
        if request.endpoint != "static":
            response.headers["Cache-Control"] = "no-store"
        return response

    @app.errorhandler(CSRFError)
    def csrf_refused(exc: CSRFError) -> Any:
        return _refuse(400, f"refused: {exc.description} (reload the page and try again)")

    @app.context_processor
    def inject() -> dict[str, Any]:
        return {"user": g.get("user"), "role": g.get("role"), "can": lambda r: can(r)}

    from appliance.web import api, metrics, views

    app.register_blueprint(views.bp)
    app.register_blueprint(api.bp, url_prefix="/api/v1")
    app.add_url_rule("/metrics", "metrics", metrics.view(ctx))
    return app


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
                return _refuse(403, f"refused: the {role} role is needed")
            return view(*args, **kwargs)
        return checked
    return wrap


def ctx_of() -> WebContext:
    from flask import current_app

    return current_app.extensions["ctx"]  # type: ignore[no-any-return]


def audit(kind: str, text: str, detail: dict[str, Any] | None = None, actor: str | None = None) -> None:
    ctx = ctx_of()
    if ctx.audit_append is not None:
        who = actor or g.get("user") or "anonymous"
        ctx.audit_append(kind, f"web:{who}" if g.get("via") != "token" else f"api:{who}", text,
                         {"client": request.remote_addr, **(detail or {})})


def _refuse(code: int, message: str) -> Any:
    if request.path.startswith("/api/") or request.endpoint == "metrics" or request.accept_mimetypes.best == \
            "application/json":
        response = jsonify({"error": message})
        response.status_code = code
        return response
    if code == 401:
        return redirect(url_for("views.login"))
    return render_template("refused.html", code=code, message=message), code

