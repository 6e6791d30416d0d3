"""The console's pages: login, own password, dashboard, GNSS, plots, alarms, audit log, configuration, users.

Edge module (Flask views).  Pages are rendered with what is known when they are asked for and then kept live by
``static/console.js``, which polls the REST API; every write is a form post with a CSRF token, checked for the
role it needs, and audited.
"""

from __future__ import annotations

import threading
from typing import Any

from flask import Blueprint, Response, flash, g, redirect, render_template, request, session, url_for
from flask_wtf.csrf import generate_csrf

from appliance import config as cfg
from appliance.web import logins, settings_view
from appliance.web.admission import client_of
from appliance.web.access import audit, audit_verified, ctx_of, needs
from appliance.web.users import ROLES, Ended, UserError

bp = Blueprint("views", __name__)

_PAGE_CACHE_SIZE = 32
_page_cache: dict[tuple[str, str, str, str], tuple[object, str]] = {}
_page_cache_lock = threading.Lock()


def status_page(template: str, page: str) -> str:
    """A page drawn from the published status alone, rendered once per status publication (twice a second) for
    each user and session, not for every request: a browser left open, a reload loop or a scraper then costs the
    appliance a lookup, not a template.  The key holds the user, the role and the session's CSRF secret (the
    page carries a token signed from it), so nobody is handed another's page; a page with a pending flash message
    is always rendered (the flash is consumed)."""
    status = ctx_of().status()
    secret = session.get("csrf_token")
    if not isinstance(secret, str) or session.get("_flashes"):
        return render_template(template, status=status, page=page)
    key = (template, str(g.user), str(g.role), secret)
    with _page_cache_lock:
        hit = _page_cache.get(key)
    if hit is not None and hit[0] is status:
        return hit[1]
    html = render_template(template, status=status, page=page)
    with _page_cache_lock:
        if len(_page_cache) >= _PAGE_CACHE_SIZE and key not in _page_cache:
            _page_cache.pop(next(iter(_page_cache)))
        _page_cache[key] = (status, html)
    return html


@bp.route("/login", methods=["GET", "POST"])
def login() -> Any:
    ctx = ctx_of()
    if request.method == "GET":
        return render_template("login.html", next=request.args.get("next", "/"))
    from flask_wtf.csrf import validate_csrf
    from wtforms import ValidationError

    try:
        validate_csrf(request.form.get("csrf_token", ""))
    except ValidationError:
        flash("The login form expired: try again.", "error")
        return render_template("login.html", next="/"), 400
    client = client_of(request.remote_addr or "?")
    if not _login_allowed(client):
        flash("Too many login attempts: wait a minute and try again.", "error")
        return render_template("login.html", next="/"), 429
    name, password = request.form.get("user", "")[:64], request.form.get("password", "")
    now_s = ctx.wall_s()
    result, verdict = logins.check(ctx, name, password, now_s, client)  # a lockout holds this client's tries
    if not result.ok:
        _audit_failed_login(name, result, now_s, verdict)
        message = {"locked": f"This account is locked: try again in {result.retry_after_s:.0f} s.",
                   "wait": f"Too many failed logins: wait {result.retry_after_s:.0f} s."}.get(
            result.reason, "Wrong user name or password.")
        flash(message, "error")
        return render_template("login.html", next=request.form.get("next", "/")), 401
    # A new CSRF secret with the new session, in the cookie the login sets: pages are then signed from it without
    # changing the session again (a client that replays its login cookie is not sent a new one with every page).
    external = verdict is not None and verdict.outcome == "accept"
    _open_session(result.user, now_s, (result.role, verdict.server) if external else None)
    g.user, g.role, g.via = result.user, result.role, "session"
    text, detail = logins.login_record(result, verdict)
    audit("login", text, detail)
    target = request.form.get("next", "/")
    if result.must_change:
        flash("Choose a new password: the initial one may not be kept.", "info")
        return redirect(url_for("views.password_page"))
    return redirect(target if _local_path(target) else "/")


def _login_allowed(client: str) -> bool:
    """The login rate limits: per client (an address, an IPv6 /64) and for all clients together."""
    from flask import current_app

    return bool(current_app.extensions["login_limiter"].allow(client)
                and current_app.extensions["login_budget"].allow("*"))


def _open_session(user: str, now_s: float, external: tuple[str, str] | None = None) -> None:
    """A new session for ``user`` in the cookie, with a new CSRF secret; ``external``: (role, server) of a user
    checked by a RADIUS or LDAP server."""
    ctx = ctx_of()
    session.clear()
    session.permanent = True
    session["user"] = user
    session["sid"] = (ctx.users.open_session(user, now_s, ctx.session_timeout_s) if external is None else
                      ctx.users.open_external_session(user, *external, now_s, ctx.session_timeout_s))
    g.pop("csrf_token", None)
    generate_csrf()


@bp.route("/password", methods=["GET"])
def password_page() -> Any:
    if g.get("server"):
        return _external_password()
    return render_template("password.html", must_change=g.get("must_change", False), page="password")


@bp.route("/password", methods=["POST"])
def password_change() -> Any:
    """The user's own new password, given the current one.  The user's other sessions and API tokens end; this
    browser gets a new session.  The first admin's change also deletes the initial password file."""
    from appliance.web.usercli import INITIAL_ADMIN, retire_initial_password
    from appliance.web.users import check_password_rules

    ctx, form = ctx_of(), request.form
    if g.get("server"):
        return _external_password()
    current, new, again = form.get("current", ""), form.get("password", ""), form.get("again", "")
    client = client_of(request.remote_addr or "?")
    problem = None
    if not _login_allowed(client):
        problem = "Too many attempts: wait a minute and try again."
    elif new != again:
        problem = "The new passwords differ."
    elif new == current:
        problem = "Choose a password other than the current one."
    else:
        try:
            check_password_rules(new)
        except UserError as exc:
            problem = f"Refused: {exc}."
    now_s = ctx.wall_s()
    if problem is None:
        checked = ctx.users.login(g.user, current, now_s, client)  # counted as a login: guessing is limited alike
        if not checked.ok:
            problem = ("The current password is wrong." if checked.reason == "bad credentials"
                       else f"Too many wrong passwords: try again in {checked.retry_after_s:.0f} s.")
    if problem is not None:
        flash(problem, "error")
        return render_template("password.html", must_change=g.get("must_change", False), page="password"), 400
    user = g.user
    ended = ctx.users.set_password(user, new)
    ended = Ended(max(0, ended.sessions - 1), ended.tokens)  # this browser's session is opened again below
    audit("user.password", f"{user} changed their password{ended.text()}",
          {"action": "password", "user": user, "sessions_ended": ended.sessions, "tokens_ended": ended.tokens})
    if user == INITIAL_ADMIN and (gone := retire_initial_password(ctx.users.path.parent)) is not None:
        audit("user.change", f"initial admin password file {gone} deleted: the password was changed",
              {"action": "initial-password-deleted", "user": user})
    _open_session(user, now_s)
    g.must_change = False
    flash("Password changed." + (f" {ended.tokens} API token(s) of yours ended with the old password."
                                 if ended.tokens else ""), "ok")
    return redirect("/")


def _external_password() -> Any:
    """An externally checked user's password is the directory's: the console cannot change it."""
    from appliance.web.access import refuse

    return refuse(403, f"refused: your password is kept by {g.server}; change it there")


def _audit_failed_login(name: str, result: Any, now_s: float, verdict: Any = None) -> None:
    """A failed login in the audit trail: one record each up to a few a minute, then one record counting the rest
    (a flood of wrong passwords must not flood the store)."""
    from flask import current_app

    ctx = ctx_of()
    if ctx.audit_append is None:
        return
    own_record, suppressed = current_app.extensions["failed_logins"].admit(now_s)
    if suppressed:
        ctx.audit_append("login.failed", "web:(many)", f"{suppressed} further failed logins in a minute were not "
                         "recorded one by one", {"suppressed": suppressed})
    if own_record:
        # a name that is no user may be a password typed in the wrong field: it is not kept
        known = ctx.users.role_of(name) is not None or (verdict is not None and verdict.outcome == "unmapped")
        who = name if known else "(unknown user)"
        detail = {"user": who, "reason": result.reason, "client": request.remote_addr, **logins.detail_of(verdict)}
        ctx.audit_append("login.failed", f"web:{who}", f"failed login for {who}: {result.reason}"
                         + logins.said_by(verdict) + (" (account locked)" if result.locked_now else ""), detail)


def _local_path(target: str) -> bool:
    """A path on this site.  Whitespace and backslashes are refused too: the Location header drops a tab (as
    browsers do), so "/<tab>/evil.example" would redirect to //evil.example, and browsers read "\\" as "/"."""
    return (target.startswith("/") and not target.startswith("//")
            and not any(c == "\\" or c.isspace() or ord(c) < 32 for c in target))


@bp.route("/logout", methods=["POST"])
def logout() -> Any:
    audit("logout", f"{g.user} logged out")
    ctx_of().users.close_session(session.get("sid", ""))  # the cookie, if kept or copied, opens nothing now
    session.clear()
    return redirect(url_for("views.login"))


@bp.route("/")
def dashboard() -> Any:
    return status_page("dashboard.html", "dashboard")


@bp.route("/gnss")
def gnss() -> Any:
    return status_page("gnss.html", "gnss")


@bp.route("/plots")
def plots() -> Any:
    return render_template("plots.html", page="plots")


@bp.route("/alarms")
def alarms() -> Any:
    """Active alarms (with acknowledgement for operators), the history of raises and clears, the catalogue; the
    tables are kept live by console.js from the REST API."""
    from appliance.alarms import CATALOG

    ctx = ctx_of()
    return render_template("alarms.html", status=ctx.status(), catalog=list(CATALOG.values()), label=ctx.utc_label,
                           page="alarms")


@bp.route("/audit")
def audit_log() -> Any:
    ctx = ctx_of()
    search = request.args.get("q", "")[:200]
    kind = request.args.get("kind", "")[:40]
    records = ctx.audit.records(search=search or None, kinds=[kind] if kind else None, limit=300) \
        if ctx.audit else []
    return render_template("audit.html", records=records, q=search, kind=kind, label=ctx.utc_label,
                           verified=session.pop("verified", None), page="audit")


@bp.route("/audit/verify", methods=["POST"])
def audit_verify() -> Any:
    ctx = ctx_of()
    if ctx.audit is None:
        flash("The audit trail is not kept by this appliance.", "error")
        return redirect(url_for("views.audit_log"))
    # The shared incremental check (as /api/v1/audit/verify): a click within 10 s of the last check, anyone's,
    # shows that check's result rather than running another.
    report = ctx.audit.verify_shared(ctx.wall_s)
    if report is None:
        flash("A check of the audit chain is running: try again in a few seconds.", "error")
        return redirect(url_for("views.audit_log"))
    result = report.result
    session["verified"] = {"ok": result.ok, "checked": result.checked + result.earlier,
                           "first_bad_seq": result.first_bad_seq, "reason": result.reason}
    if not report.fresh:
        flash(f"The result of the check made {max(0.0, ctx.wall_s() - report.at_s):.0f} s ago: the chain is checked "
              "at most every few seconds.", "info")
    for warning in result.warnings:
        flash(f"Warning: {warning}", "error")
    if report.fresh:  # one record per check made (one per 10 s at most): asking cannot flood the store
        audit_verified(result)
    return redirect(url_for("views.audit_log"))


@bp.route("/audit/backup")
@needs("operator")
def audit_backup() -> Any:
    ctx = ctx_of()
    try:
        data = ctx.export_bundle(None, None) if ctx.export_bundle is not None else None
    except ValueError as exc:
        data, message = None, str(exc)
    else:
        message = "the audit trail is not kept by this appliance"
    if data is None:
        flash(f"No backup: {message}.", "error")
        return redirect(url_for("views.audit_log"))
    audit("audit.export", "audit backup downloaded (signed bundle of every record)")
    stamp = ctx.utc_label(ctx.now_tai_ns()).replace(":", "").replace("-", "")[:15]
    return Response(data, mimetype="application/json",
                    headers={"Content-Disposition": f"attachment; filename=audit-{stamp}Z.json"})


@bp.route("/config", methods=["GET"])
def config_page() -> Any:
    rows = ctx_of().settings.rows()
    return render_template("config.html", sections=settings_view.sections(rows),
                           pending=settings_view.pending_restart(rows), page="config")


@bp.route("/config", methods=["POST"])
@needs("admin")
def config_change() -> Any:
    # A checkbox posts a hidden "false" and, when ticked, "true" after it: the last value is the one meant.
    name, value = request.form.get("name", ""), (request.form.getlist("value") or [""])[-1]
    back = url_for("views.config_page") + ("#setting-" + name.replace(".", "-") if name in cfg.BY_NAME else "")
    try:
        old, new, applied = ctx_of().settings.change(name, value, from_text=True)
    except ValueError as exc:
        flash(str(exc), "error")
        return redirect(back)
    audit("config.change", f"{name}: {old!r} -> {new!r}" + ("" if applied else " (takes effect after a restart)"),
          {"setting": name, "old": _plain(old), "new": _plain(new), "applied": applied})
    flash(f"{name} = {new!r}: " + ("applied." if applied else "saved; takes effect after a restart."), "ok")
    return redirect(back)


@bp.route("/users", methods=["GET"])
@needs("admin")
def users_page() -> Any:
    ctx = ctx_of()
    return render_template("users.html", users=ctx.users.users(), tokens=ctx.users.tokens(), roles=ROLES,
                           new_token=session.pop("new_token", None), now=ctx.wall_s(), page="users")


@bp.route("/users", methods=["POST"])
@needs("admin")
def users_change() -> Any:
    from appliance.web.usercli import INITIAL_ADMIN, retire_initial_password

    ctx, form = ctx_of(), request.form
    action, name = form.get("action", ""), form.get("name", "")[:64]
    retired = None
    try:
        if action == "add":
            ctx.users.add(name, form.get("role", ""), form.get("password", ""))
            text = f"user {name} added ({form.get('role')})"
        elif action == "role":
            ended = ctx.users.set_role(name, form.get("role", ""))
            text = f"user {name} is now {form.get('role')}{ended.text()}"
        elif action == "password":
            ended = ctx.users.set_password(name, form.get("password", ""))
            text = f"password of {name} changed{ended.text()}"
            if name == INITIAL_ADMIN:
                retired = retire_initial_password(ctx.users.path.parent)
        elif action == "unlock":
            ctx.users.unlock(name)
            text = f"user {name} unlocked (from every address)"
        elif action == "remove":
            if name == g.user:
                raise UserError("you cannot remove yourself")
            ended = ctx.users.remove(name)
            text = f"user {name} removed{ended.text()}"
            if name == INITIAL_ADMIN:
                retired = retire_initial_password(ctx.users.path.parent)
        elif action == "token":
            token = ctx.users.create_token(name, form.get("label", "api"), ctx.wall_s())
            session["new_token"] = token
            text = f"API token {form.get('label', 'api')!r} created for {name}"
        elif action == "revoke":
            ctx.users.revoke_token(form.get("token_id", ""))
            text = f"API token {form.get('token_id', '')[:12]} revoked"
        else:
            raise UserError(f"unknown action {action!r}")
    except UserError as exc:
        flash(str(exc), "error")
        return redirect(url_for("views.users_page"))
    audit("user.change", text, {"action": action, "user": name})
    if retired is not None:
        audit("user.change", f"initial admin password file {retired} deleted: the password was changed",
              {"action": "initial-password-deleted", "user": name})
    flash(text + ".", "ok")
    return redirect(url_for("views.users_page"))


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
