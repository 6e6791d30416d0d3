"""The REST API (JSON, /api/v1): status, satellites, alarms, audit, configuration, time quality, stability.

Edge module (Flask views).  Viewers read everything (the GNSS integrity verdict is part of the status); operators
may also force or release holdover, override the GNSS integrity verdict or survey the antenna again, and download
audit bundles; admins may also change settings.  Authentication is a session (with its CSRF token on writes) or
``Authorization: Bearer <token>``.  The OpenAPI document of all of it is ``/api/v1/openapi.json``.
"""

from __future__ import annotations

import dataclasses
import io
import math
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from appliance.alarms import CATALOG, HISTORY_KINDS, Episode, from_audit, select
from appliance.units import NS_PER_S
from appliance.web.access import audit, audit_verified, ctx_of, needs
from appliance.web.openapi import document

bp = Blueprint("api", __name__)
MAX_RANGE_S = 400 * 86_400
HOLDOVER_ACTIONS = ("start", "stop")
INTEGRITY_ACTIONS = ("trust", "reject", "auto", "resurvey")  # the appliance's integrity command
REFERENCE_ACTIONS = ("pin", "unpin", "enable", "disable")
SEVERITIES = ("critical", "major", "minor", "warning", "info")


def _error(code: int, message: str) -> Any:
    response = jsonify({"error": message})
    response.status_code = code
    return response


MAX_INSTANT_NS = 2**62  # the year 2116 in TAI nanoseconds: room below SQLite's 64-bit integers for any arithmetic


def _range() -> tuple[int, int]:
    """``since`` and ``until`` as seconds relative to now (-3600) or absolute TAI ns; default: the last hour."""
    now = ctx_of().now_tai_ns()

    def instant(name: str, default: int) -> int:
        text = request.args.get(name)
        if text is None or text == "":
            return default
        value = int(text)  # ValueError: answered as a 400
        value = now + value * NS_PER_S if abs(value) < 10 ** 10 else value
        if not 0 <= value <= MAX_INSTANT_NS:  # the stores keep 64-bit instants, and look back a little before since
            raise ValueError(f"{name} must be seconds from now or TAI nanoseconds in 0..{MAX_INSTANT_NS}")
        return value
    since, until = instant("since", now - 3600 * NS_PER_S), instant("until", now)
    if not since < until or until - since > MAX_RANGE_S * NS_PER_S:
        raise ValueError(f"since must be before until, at most {MAX_RANGE_S // 86_400} days apart")
    return since, until


_status_body: tuple[object, str] = (None, "")


@bp.route("/status")
def status() -> Any:
    """The published status, serialised once per publication (twice a second) rather than for every request."""
    global _status_body
    s = ctx_of().status()
    published, body = _status_body
    if published is not s:
        body = current_app.json.dumps(s, separators=(",", ":")) + "\n"  # as jsonify writes it
        _status_body = (s, body)
    return current_app.response_class(body, mimetype=current_app.json.mimetype)  # type: ignore[attr-defined]


@bp.route("/satellites")
def satellites() -> Any:
    """The satellites in view, and where each was over the last half hour (``tracks``: azimuth, elevation pairs)."""
    s = ctx_of().status()
    tracks = ctx_of().sky_tracks
    return jsonify({"at_tai_ns": s["at_tai_ns"], "satellites": s["satellites"],
                    "constellations": s["constellations"], "receiver": s["receiver"],
                    "tracks": tracks() if tracks else []})


@bp.route("/alarms")
def alarms() -> Any:
    """The active alarms (catalogue entry, since when, acknowledgement) and the history: each raise paired with its
    clear, newest first, filtered by ``severity``, ``code``, ``state`` (open or cleared) and ``q`` (words)."""
    ctx = ctx_of()
    status = ctx.status()
    args = request.args
    severity, state = args.get("severity") or None, args.get("state") or None
    if severity is not None and severity not in SEVERITIES:
        return _error(400, f"severity is one of {', '.join(SEVERITIES)}")
    if state is not None and state not in ("open", "cleared"):
        return _error(400, "state is open or cleared")
    found = alarm_history(ctx, severity, (args.get("code") or "")[:64] or None, state, (args.get("q") or "")[:200])
    return jsonify({"active": [a for a in status["alarms"] if a["raised"]],
                    "history": [e.to_dict(status["at_tai_ns"]) for e in found],
                    "catalog": [dataclasses.asdict(spec) for spec in CATALOG.values()]})


def alarm_history(ctx: Any, severity: str | None = None, code: str | None = None, state: str | None = None,
                  search: str | None = None) -> list[Episode]:
    """The alarm history from the audit trail (its last 4,000 alarm records), paired and filtered."""
    if ctx.audit is None:
        return []
    return select(from_audit(ctx.audit.records(kinds=list(HISTORY_KINDS), limit=4000)), severity, code, state, search)


@bp.route("/alarms/<code>/ack", methods=["POST"])
@needs("operator")
def alarm_ack(code: str) -> Any:
    """Acknowledge an active alarm, with an optional ``{"comment": ...}``; the appliance audits it."""
    from flask import g

    body = request.get_json(silent=True)
    body = body if isinstance(body, dict) else {}
    comment = body.get("comment", "")
    if not isinstance(comment, str) or len(comment) > 200 or _has_control(comment):
        return _error(400, "comment: a line of text of at most 200 characters")
    actor = f"{'api' if g.via == 'token' else 'web'}:{g.user}"
    reply = ctx_of().command({"cmd": "alarm", "action": "ack", "code": code[:64], "reason": comment, "user": actor})
    if not reply.get("ok"):
        return _error(409, str(reply.get("error", "refused")))
    return jsonify(reply)


def _has_control(text: str) -> bool:
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text)


def _reason(body: Any) -> str | None:
    """The operator's reason for a command (optional here; the console asks for one), or None when malformed."""
    reason = body.get("reason", "") if isinstance(body, dict) else ""
    if not isinstance(reason, str) or len(reason) > 200 or _has_control(reason):
        return None
    return reason.strip()


@bp.route("/audit")
def audit_records() -> Any:
    ctx = ctx_of()
    try:
        limit = max(1, min(1000, int(request.args.get("limit", 100))))
        before = int(request.args["before_seq"]) if "before_seq" in request.args else None
        if before is not None and not 0 <= before <= 2**62:
            raise ValueError("out of range")
    except ValueError:
        return _error(400, "limit and before_seq are integers (before_seq 0..2^62)")
    kinds = [k for k in request.args.get("kind", "").split(",") if k] or None
    if ctx.audit is None:
        return _error(503, "the audit trail is not kept by this appliance")
    records = ctx.audit.records(search=request.args.get("q") or None, kinds=kinds, limit=limit, before_seq=before)
    return jsonify({"records": [_record(r) for r in records]})


@bp.route("/audit/verify")
def audit_verify() -> Any:
    """The store's incremental check (``AuditStore.verify_shared``), shared by every client: at most one runs per
    10 s (longer after a long one); a request in between gets the last result, ``fresh`` false and ``age_s`` old.
    429 with Retry-After while the first check is still running.  ``appliance audit verify`` is the full check."""
    ctx = ctx_of()
    if ctx.audit is None:
        return _error(503, "the audit trail is not kept by this appliance")
    report = ctx.audit.verify_shared(ctx.wall_s)
    if report is None:
        response = _error(429, "an audit chain check is running: ask again in a few seconds")
        response.headers["Retry-After"] = str(max(1, math.ceil(ctx.audit.shared_wait_s(ctx.wall_s()))))
        return response
    result = report.result
    if report.fresh:  # one record per check made (one per 10 s at most): asking cannot flood the store
        audit_verified(result)
    return jsonify({"ok": result.ok, "checked": result.checked, "first_bad_seq": result.first_bad_seq,
                    "reason": result.reason, "earlier": result.earlier, "warnings": list(result.warnings),
                    "fresh": report.fresh, "age_s": round(max(0.0, ctx.wall_s() - report.at_s), 3)})


@bp.route("/audit/export")
@needs("operator")
def audit_export() -> Any:
    ctx = ctx_of()
    try:
        since, until = _range() if "since" in request.args else (None, None)
        data = ctx.export_bundle(since, until)  # ValueError when no record is in the range
    except ValueError as exc:
        return _error(400, str(exc))
    audit("audit.export", "audit bundle exported", {"since": since, "until": until})
    return Response(data, mimetype="application/json")


@bp.route("/config")
def config() -> Any:
    return jsonify({"settings": ctx_of().settings.rows()})


@bp.route("/config/<name>", methods=["PUT"])
@needs("admin")
def config_change(name: str) -> Any:
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or "value" not in body:
        return _error(400, 'expected a JSON object {"value": ...}')
    value = body["value"]
    try:
        old, new, applied = ctx_of().settings.change(name, value, from_text=isinstance(value, str))
    except ValueError as exc:
        return _error(400, str(exc))
    audit("config.change", f"{name}: {old!r} -> {new!r}" + ("" if applied else " (takes effect after a restart)"),
          {"setting": name, "old": _plain(old), "new": _plain(new), "applied": applied})
    return jsonify({"name": name, "old": _plain(old), "value": _plain(new), "applied": applied,
                    "restart_needed": not applied})


@bp.route("/backup", methods=["POST"])
@needs("admin")
def backup() -> Any:
    from appliance.backup.archive import BackupError
    from appliance.web.backup_views import archive_response

    body = request.get_json(silent=True)
    body = body if isinstance(body, dict) else {}
    passphrase = body.get("passphrase") if body.get("keys") else None
    if passphrase is not None and not isinstance(passphrase, str):
        return _error(400, "passphrase: a string")
    try:
        return archive_response(passphrase)
    except BackupError as exc:
        return _error(400, str(exc))


@bp.route("/holdover", methods=["POST"])
@needs("operator")
def holdover() -> Any:
    return _operator_command("holdover", HOLDOVER_ACTIONS)


@bp.route("/references")
def references() -> Any:
    """The references: the active one, the policy, a row per reference (also in /status)."""
    return jsonify(ctx_of().status().get("references") or {})


@bp.route("/references", methods=["POST"])
@needs("operator")
def reference_control() -> Any:
    """``{"action": "pin"|"unpin"|"enable"|"disable", "name": ...}``; the appliance audits it."""
    from flask import g

    body = request.get_json(silent=True)
    if not isinstance(body, dict) or body.get("action") not in REFERENCE_ACTIONS:
        return _error(400, 'expected {"action": "pin"|"unpin"|"enable"|"disable", "name": "gnss"|"ptp"|...}')
    name = body.get("name", "")
    if not isinstance(name, str) or len(name) > 32 or (body["action"] != "unpin" and not name):
        return _error(400, "name the reference (a string, e.g. \"ptp\")")
    reason = _reason(body)
    if reason is None:
        return _error(400, "reason: a line of text of at most 200 characters")
    actor = f"{'api' if g.via == 'token' else 'web'}:{g.user}"
    reply = ctx_of().command({"cmd": "reference", "action": body["action"], "name": name, "user": actor,
                              "reason": reason})
    if not reply.get("ok"):
        return _error(409, str(reply.get("error", "refused")))
    return jsonify(reply)


@bp.route("/integrity", methods=["POST"])
@needs("operator")
def integrity() -> Any:
    return _operator_command("integrity", INTEGRITY_ACTIONS)


def _operator_command(cmd: str, actions: tuple[str, ...]) -> Any:
    """Hand ``{"action": ...}`` to the appliance as ``cmd``: 400 on a bad body, 409 when the appliance refuses."""
    from flask import g

    body = request.get_json(silent=True) or {}
    action = body.get("action") if isinstance(body, dict) else None
    if not isinstance(action, str) or action not in actions:
        return _error(400, "expected " + " or ".join(f'{{"action": "{a}"}}' for a in actions))
    reason = _reason(body)
    if reason is None:
        return _error(400, "reason: a line of text of at most 200 characters")
    actor = f"{'api' if g.via == 'token' else 'web'}:{g.user}"
    reply = ctx_of().command({"cmd": cmd, "action": action, "user": actor, "reason": reason})  # audited there
    if not reply.get("ok"):
        return _error(409, str(reply.get("error", "refused")))
    return jsonify(reply)


@bp.route("/quality")
def quality() -> Any:
    ctx = ctx_of()
    try:
        since, until = _range()
        points = max(10, min(5000, int(request.args.get("max_points", 1200))))
    except ValueError as exc:
        return _error(400, str(exc))
    rows = ctx.quality.query(since, until, max_points=points) if ctx.quality else []
    return jsonify({"since_tai_ns": since, "until_tai_ns": until, "rows": [_row(r) for r in rows]})


@bp.route("/quality.csv")
def quality_csv() -> Any:
    ctx = ctx_of()
    try:
        since, until = _range()
    except ValueError as exc:
        return _error(400, str(exc))
    if ctx.quality is None:
        return _error(503, "the time-quality record is not kept by this appliance")
    out = io.StringIO()
    ctx.quality.export_csv(since, until, out, ctx.utc_label)
    return Response(out.getvalue(), mimetype="text/csv",
                    headers={"Content-Disposition": "attachment; filename=time-quality.csv"})


@bp.route("/stability")
def stability() -> Any:
    """ADEV, MTIE and TDEV of the range's LOCKED one-second phase samples (default: the last hour), every continuous
    stretch of them and never across a gap (``appliance.stability``), with the G.8272 PRTC masks and a verdict per
    mask: ``verdicts[name]`` is ``{"passed": true|false|null, "text": ..., "failed_metric", "failed_tau_s", ...}``."""
    from appliance import metrics
    from appliance.stability import MIN_SAMPLES, locked_stability

    ctx = ctx_of()
    try:
        since, until = _range()
    except ValueError as exc:
        return _error(400, str(exc))
    result = locked_stability(ctx.quality.query(since, until) if ctx.quality else [])
    verdicts = {v.mask: {"passed": v.passed, "text": v.text, "failed_metric": v.failed_metric,
                         "failed_tau_s": v.failed_tau_s, "measured_ns": v.measured_ns, "limit_ns": v.limit_ns}
                for v in result.verdicts}
    out: dict[str, Any] = {"samples": result.samples, "stretches": result.stretches, "longest_s": result.longest_s,
                           "taus_s": list(result.taus_s), "verdicts": verdicts}
    if not result.taus_s:
        out["note"] = (f"{result.samples} locked one-second phase samples, the longest continuous stretch "
                       f"{result.longest_s} s: at least {MIN_SAMPLES} s are needed")
        return jsonify(out)
    out.update({"adev": _finite(list(result.adev)), "mtie_ns": _finite(list(result.mtie_ns)),
                "tdev_ns": _finite(list(result.tdev_ns)), "masks": {}})
    for name, mask in metrics.MASKS.items():
        out["masks"][name] = {"mtie_ns": _finite([mask.mtie_limit_ns(t) for t in result.taus_s]),
                              "tdev_ns": _finite([mask.tdev_limit_ns(t) for t in result.taus_s])}
    return jsonify(out)


@bp.route("/openapi.json")
def openapi() -> Any:
    return jsonify(document())


def _finite(values: list[float]) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values]


def _record(r: Any) -> dict[str, Any]:
    return {"seq": r.seq, "at_tai_ns": r.at_tai_ns, "utc": ctx_of().utc_label(r.at_tai_ns),
            "posix_ms": ctx_of().posix_ms(r.at_tai_ns), "kind": r.kind,
            "actor": r.actor, "text": r.text, "detail": r.detail, "hash": r.hash}


def _row(r: Any) -> dict[str, Any]:
    return {"at_tai_ns": r.at_tai_ns, "posix_ms": ctx_of().posix_ms(r.at_tai_ns), "span_s": r.span_s, "state": r.state, "phase_offset_ns": r.phase_offset_ns,
            "frequency_ppb": r.frequency_ppb, "error_bound_ns": r.error_bound_ns,
            "satellites_used": r.satellites_used, "clock_class": r.clock_class}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value

