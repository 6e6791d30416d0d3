"""The web console's Flask application: sessions and tokens, roles, CSRF, rate limits, security headers.

Edge module (HTTP through Flask).  ``create_app(ctx)`` builds the application around a ``WebContext``: the latest
status (published by the appliance once a second; the web never touches the engines), a way to hand an operator
command to the appliance's event loop, the user store, the audit store, the time-quality log and the settings
editor.  Pages are in ``views.py``, the REST API in ``api.py``, ``/metrics`` in ``metrics.py``; what they share of the
request (its user and role, the context, the audit record) is in ``access.py``, which none of them imports back.

Every route needs a session or an API token except the login page, static assets and, when
``web.metrics_public`` is set, ``/metrics``; a user who must change its password (the first admin) reaches only
the password page until it has (the API answers 403 "password change required").  A session is a signed cookie
(Secure, HttpOnly, SameSite=Strict) carrying a session id that the user store must still hold
(``UserStore.session_user``): logging out, a new password, a new role or a removed user close it at once,
whatever the cookie says (and end the user's API tokens); the role is read with it on every request.  Every
state-changing request made with a session carries a CSRF token (a form field or the X-CSRFToken header);
requests authenticated by a bearer token do not (no cookie is involved).  Each client (an address, an IPv6 /64)
gets a token bucket of requests, and a far smaller one of login attempts (each costs a scrypt computation); failed
logins beyond a few a minute are counted in one audit record a minute instead of one each, so a flood of them can
fill neither the CPU nor the audit store.  A JSON body nested deeper than ``MAX_JSON_DEPTH`` is refused with a 400
before it is parsed.  A request whose Host header is no host name is answered 400 (logged once a minute at most).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask, Response, g, jsonify, redirect, request, session, url_for
from flask_wtf.csrf import CSRFError, CSRFProtect
from werkzeug.exceptions import BadHost

from appliance.edge.pacer import Pacer
from appliance.protocol import limits
from appliance.units import NS_PER_S
from appliance.web import api, backup_views, metrics, system, views
from appliance.web.access import WebContext, can, refuse
from appliance.web.admission import MAX_BODY_BYTES, client_of

log = logging.getLogger("appliance.web")

BUDGET_MAX_WAIT_S = 5.0
LOGIN_RATE_PER_S, LOGIN_BURST = 0.2, 10  # per client address: 10 tries at once, then one every 5 s
LOGIN_GLOBAL_PER_S, LOGIN_GLOBAL_BURST = 5.0, 20  # every address together: the CPU the logins may take
FAILED_LOGIN_RECORDS_PER_MIN = 10  # failed logins audited one by one; beyond, counted in one record a minute
MAX_JSON_DEPTH = 32
BAD_HOST_LOG_EVERY_S = 60.0  # requests with an invalid Host header: one log line a minute at most
# A user who must choose a new password (the first admin, with the password from the initial-admin-password file)
# reaches only these until it is done; the API answers 403 with this message.
PASSWORD_CHANGE_ENDPOINTS = ("views.password_page", "views.password_change", "views.logout", "views.login", "static")
PASSWORD_CHANGE_REQUIRED = ("password change required: log in to the console and choose a new password (the initial "
                            "one may not be kept), or set one with `appliance user passwd NAME`")


def json_depth(body: bytes, limit: int) -> int:
    """How deeply ``body`` (JSON text) nests arrays and objects, counting no further than ``limit + 1``; brackets
    inside strings do not count.  Linear in the body, which ``MAX_CONTENT_LENGTH`` bounds."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


class FailedLoginLog:
    """Failed logins to the audit trail: one record each up to ``per_min`` in a minute, the rest counted and written
    as one record when the next failure comes after that minute (host seconds passed in)."""

    def __init__(self, per_min: int = FAILED_LOGIN_RECORDS_PER_MIN):
        self.per_min = per_min
        self._window_start_s, self._written, self._suppressed = 0.0, 0, 0
        self._lock = threading.Lock()

    def admit(self, now_s: float) -> tuple[bool, int]:
        """(write this failure as its own record, failures suppressed in the window that just closed)."""
        with self._lock:
            closed = 0
            if now_s - self._window_start_s >= 60.0:
                closed, self._suppressed = self._suppressed, 0
                self._window_start_s, self._written = now_s, 0
            if self._written < self.per_min:
                self._written += 1
                return True, closed
            self._suppressed += 1
            return False, closed


class LogNote:
    """One log line per ``every_s`` at most about a recurring, client-caused event; the line says how many more
    came since the last (host seconds passed in)."""

    def __init__(self, every_s: float = 60.0):
        self.every_s = every_s
        self._last_s: float | None = None
        self._since = 0
        self._lock = threading.Lock()

    def due(self, now_s: float) -> int | None:
        """None: stay quiet; else log now, with this many more that were not logged since the last line."""
        with self._lock:
            if self._last_s is not None and now_s - self._last_s < self.every_s:
                self._since += 1
                return None
            self._last_s, since, self._since = now_s, self._since, 0
            return since


class RateLimiter:
    """A token bucket per client (refilled at ``rate`` per second up to ``burst``): the one rate table the NTP data
    plane, the NTS-KE server and the SNMP agent use too (``protocol/limits.py``, ``native/bucket.h``)."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._limiter = limits.RateLimiter(rate, max(1, int(burst)))
        self._lock = threading.Lock()

    def allow(self, client: str) -> bool:
        now_ns = int(self.clock() * NS_PER_S)
        with self._lock:
            return self._limiter.check_key(limits.key_of(client), now_ns) is limits.Limit.PASS


def create_app(ctx: WebContext, secret_key: bytes) -> Flask:
    here = Path(__file__).parent
    app = Flask("appliance.web", template_folder=str(here / "templates"), static_folder=str(here / "static"))
    app.config.update(SECRET_KEY=secret_key, SESSION_COOKIE_SECURE=True, SESSION_COOKIE_HTTPONLY=True,
                      SESSION_COOKIE_SAMESITE="Strict", SESSION_COOKIE_NAME="appliance_session",
                      PERMANENT_SESSION_LIFETIME=ctx.session_timeout_s, WTF_CSRF_CHECK_DEFAULT=False,
                      WTF_CSRF_TIME_LIMIT=None, MAX_CONTENT_LENGTH=MAX_BODY_BYTES, JSON_SORT_KEYS=False,
                      # A session ends session_timeout_s after its login, whatever happens meanwhile (its record
                      # in the user store says when), so re-signing and re-sending its cookie buys nothing.
                      SESSION_REFRESH_EACH_REQUEST=False)
    app.extensions["ctx"] = ctx
    csrf = CSRFProtect(app)
    limiter = RateLimiter(ctx.rate_per_s, ctx.rate_burst)
    pacer = Pacer(ctx.budget_per_s, max(10, int(5 * ctx.budget_per_s)))  # 5 s worth: a page and its assets at once
    app.extensions["pacer"] = pacer
    app.extensions["login_limiter"] = RateLimiter(LOGIN_RATE_PER_S, LOGIN_BURST)
    app.extensions["login_budget"] = RateLimiter(LOGIN_GLOBAL_PER_S, LOGIN_GLOBAL_BURST)
    app.extensions["failed_logins"] = FailedLoginLog()

    bad_hosts = LogNote(BAD_HOST_LOG_EVERY_S)

    @app.before_request
    def authenticate() -> Any:
        if isinstance(request.routing_exception, BadHost):  # before anything that builds a URL from the host
            return _refuse_bad_host(bad_hosts, ctx.wall_s())
        if not limiter.allow(client_of(request.remote_addr or "?")):
            return refuse(429, "too many requests")
        if not pacer.wait(BUDGET_MAX_WAIT_S):  # the console's share of the machine is spent: wait, or come back
            return refuse(503, "console busy: the appliance serves time first; try again shortly")
        if request.is_json and json_depth(request.get_data(cache=True), MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
            return refuse(400, f"refused: the JSON body nests deeper than {MAX_JSON_DEPTH} levels")
        g.user, g.role, g.via, g.must_change, g.server = None, None, None, False, ""
        endpoint = request.endpoint or ""
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            found = ctx.users.token_user(header[7:].strip())
            if found is None:
                return refuse(401, "invalid token")
            g.user, g.role, g.via, g.must_change = found.user, found.role, "token", found.must_change
        elif "user" in session:
            found = ctx.users.session_user(session.get("sid", ""), ctx.wall_s(), ctx.session_timeout_s)
            if found is None or found.user != session["user"]:  # logged out, expired, revoked, or not ours
                session.clear()
            else:
                g.user, g.role, g.via, g.must_change = found.user, found.role, "session", found.must_change
                g.server = found.server  # an external login's server ("": a local user)
                if request.method not in ("GET", "HEAD", "OPTIONS"):
                    csrf.protect()
        if g.must_change and endpoint not in PASSWORD_CHANGE_ENDPOINTS:
            if request.path.startswith("/api/") or endpoint == "metrics" or g.via == "token":
                return refuse(403, PASSWORD_CHANGE_REQUIRED)
            return redirect(url_for("views.password_page"))
        if endpoint in ("static", "views.login") or (endpoint == "metrics" and ctx.metrics_public):
            return None
        if g.user is None:
            if request.path.startswith("/api/") or endpoint == "metrics":
                return refuse(401, "authentication required (a session or an API token)")
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
        return refuse(400, f"refused: {exc.description} (reload the page and try again)")

    @app.errorhandler(404)
    def not_found(_exc: Exception) -> Any:
        return refuse(404, f"no such page or API route: {request.path[:200]}")

    @app.errorhandler(405)
    def wrong_method(_exc: Exception) -> Any:
        return refuse(405, f"{request.method} is not allowed on {request.path[:200]}")

    @app.errorhandler(413)
    def too_large(_exc: Exception) -> Any:
        return refuse(413, f"refused: the request body is larger than {app.config['MAX_CONTENT_LENGTH']} bytes")

    @app.context_processor
    def inject() -> dict[str, Any]:
        return {"user": g.get("user"), "role": g.get("role"), "must_change": g.get("must_change", False),
                "can": lambda r: can(r), "verdict": lambda: _verdict(ctx)}

    app.register_blueprint(views.bp)
    app.register_blueprint(api.bp, url_prefix="/api/v1")
    app.register_blueprint(system.bp)
    app.register_blueprint(backup_views.bp)
    app.add_url_rule("/metrics", "metrics", metrics.view(ctx))
    return app


def _verdict(ctx: WebContext) -> dict[str, Any] | None:
    """The verdict of the latest status, for the banner at the top of every page (kept live by console.js)."""
    try:
        return ctx.status().get("verdict")
    except Exception:  # noqa: BLE001 - a page is still drawn when the appliance has not published yet
        return None


def _refuse_bad_host(note: LogNote, now_s: float) -> Response:
    """400 for a Host header that is no host name (an empty label, a label over 63 characters, ...): Flask cannot
    build a URL on it, so the answer is plain, with no page around it.  Logged one line a minute at most."""
    host = request.headers.get("Host", "")
    more = note.due(now_s)
    if more is not None:
        log.warning("web console: refused a request for %s from %s: its Host header %r is not a valid host name "
                    "(400)%s", request.path[:100], request.remote_addr, host[:100],
                    f"; {more} more since the last such line" if more else "")
    message = "refused: the Host header is not a valid host name"
    if request.path.startswith("/api/") or request.accept_mimetypes.best == "application/json":
        response = jsonify({"error": message})
    else:
        response = Response(message + "\n", mimetype="text/plain")
    response.status_code = 400
    return response
