"""The console's backup page: download a backup archive, and restore one (checked, its changes shown, staged for
the next start).  Admins only; every step is audited.

Edge module (Flask).  The archive is what ``appliance backup`` writes (backup/archive.py).  An uploaded archive is
kept in the state directory (0600) between its check and the admin's confirmation, under a random name the
session holds; the restore is staged and journalled (backup/files.py) and made when the appliance next starts, since
its processes hold the users, keys and settings they read at start.  An archive over the console's request limit
(64 KiB: hundreds of users) is restored with ``appliance restore`` instead.
"""

from __future__ import annotations

import secrets
import socket
import time
from pathlib import Path
from typing import Any

from flask import Blueprint, Response, flash, redirect, render_template, request, session, url_for

from appliance import __version__
from appliance.backup import files
from appliance.backup.archive import (MIN_PASSPHRASE, BackupError, Contents, open_keys, plan, random_bytes, read,
                                      sealed_names)
from appliance.web.access import audit, ctx_of, needs

bp = Blueprint("backup", __name__)
UPLOAD_PREFIX = ".restore-upload-"


def _config() -> Any:
    return ctx_of().settings.config


def _state() -> Path:
    ctx = ctx_of()
    return Path(ctx.state_dir) if ctx.state_dir is not None else Path(_config().state_path())


@bp.route("/backup", methods=["GET"])
@needs("admin")
def page() -> Any:
    upload = session.get("restore_upload")
    checked = None
    if upload:
        try:
            checked = _check(_upload_path(upload))
        except BackupError as exc:
            flash(str(exc), "error")
            session.pop("restore_upload", None)
    return render_template("backup.html", page="backup", checked=checked, pending=files.pending(_state()),
                           min_passphrase=MIN_PASSPHRASE)


def archive_response(passphrase: str | None) -> Response:
    """The backup archive as a download (audited); BackupError for a passphrase too short or a state refused.
    Shared by the page and ``POST /api/v1/backup``."""
    if passphrase is not None and len(passphrase) < MIN_PASSPHRASE:
        raise BackupError(f"The passphrase for the keys needs at least {MIN_PASSPHRASE} characters.")
    config = _config()
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ctx_of().wall_s()))
    labels = {"appliance_version": __version__, "created_utc": created, "host": socket.gethostname()}
    data, contents, left_out = files.make(config, files.config_file_of(config), labels, passphrase,
                                          random_bytes(16), random_bytes(12), _state())
    name = f"appliance-backup-{socket.gethostname()}-{created.replace(':', '')}.json"
    audit("backup.created", f"configuration backup downloaded ({len(contents.users.users)} console users, "
          f"{'keys encrypted under a passphrase' if contents.keys else 'no keys'})",
          {"keys": bool(contents.keys), "users": len(contents.users.users), "secrets_left_out": left_out})
    return Response(data, mimetype="application/json",
                    headers={"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"})


@bp.route("/backup/download", methods=["POST"])
@needs("admin")
def download() -> Any:
    form = request.form
    try:
        return archive_response(form.get("passphrase", "") if form.get("keys") else None)
    except BackupError as exc:
        flash(str(exc), "error")
        return redirect(url_for("backup.page"))


def _upload_path(token: str) -> Path:
    if not token.isalnum():
        raise BackupError("the uploaded archive is gone: upload it again")
    return _state() / f"{UPLOAD_PREFIX}{token}.json"


def _check(path: Path) -> dict[str, Any]:
    try:
        archive = read(path.read_bytes())
    except FileNotFoundError:
        raise BackupError("the uploaded archive is gone: upload it again") from None
    config = _config()
    current = files.current(config, files.config_file_of(config), _state())
    config_file = files.config_file_of(config)
    lines = plan(current, Contents(files.effective_files(archive, (), _state(), config_file), archive.contents.users,
                                   ()))
    own = files.own_fingerprint(_state())
    return {"archive": archive, "lines": lines, "own": own, "sealed": sealed_names(archive),
            "foreign": own is not None and own != archive.fingerprint}


@bp.route("/backup/check", methods=["POST"])
@needs("admin")
def check() -> Any:
    upload = request.files.get("archive")
    if upload is None or not upload.filename:
        flash("Choose a backup archive to upload.", "error")
        return redirect(url_for("backup.page"))
    data = upload.read()
    try:
        read(data)
    except BackupError as exc:
        audit("restore.refused", f"configuration restore refused: {exc}", {"file": upload.filename[:200]})
        flash(str(exc), "error")
        return redirect(url_for("backup.page"))
    _discard_upload()
    token = secrets.token_hex(16)
    from appliance.edge.persist import write_private

    write_private(_upload_path(token), data)
    session["restore_upload"] = token
    return redirect(url_for("backup.page"))


def _discard_upload() -> None:
    old = session.pop("restore_upload", None)
    if old:
        try:
            _upload_path(old).unlink(missing_ok=True)
        except BackupError:
            pass


@bp.route("/backup/restore", methods=["POST"])
@needs("admin")
def restore() -> Any:
    form = request.form
    if form.get("action") == "cancel":
        _discard_upload()
        flash("Restore cancelled: nothing was changed.", "ok")
        return redirect(url_for("backup.page"))
    try:
        path = _upload_path(session.get("restore_upload", ""))
        checked = _check(path)
        archive = checked["archive"]
        if checked["foreign"] and form.get("accept_key") != archive.fingerprint:
            raise BackupError("refused: the archive is signed by another appliance's audit key; tick the box that "
                              "accepts its fingerprint to restore it here")
        keys = open_keys(archive, form.get("passphrase", "")) if archive.has_keys and form.get("keys") else ()
        config_file = files.config_file_of(_config())
        lines = plan(files.current(_config(), config_file, _state()), Contents(
            files.effective_files(archive, keys, _state(), config_file), archive.contents.users, keys))
        label = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(ctx_of().wall_s()))
        files.restore(_config(), archive, keys, files.config_file_of(_config()), label, apply=False, state=_state())
    except BackupError as exc:
        flash(str(exc), "error")
        return redirect(url_for("backup.page"))
    _discard_upload()
    audit("restore.staged", f"configuration restore staged from an archive made {archive.document.get('created_utc')}"
          f" on {archive.document.get('host')} ({len(lines)} changes{', keys included' if keys else ''}); made at "
          "the next start", {"changes": lines[:200], "signed_by": archive.fingerprint, "keys": bool(keys)})
    flash("Restore staged: restart the appliance (systemctl restart appliance) to make it; until then nothing has "
          "changed.", "ok")
    return redirect(url_for("backup.page"))
