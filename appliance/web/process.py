"""The web console in a process of its own, at idle CPU priority, fed by the appliance through a socket pair.

Edge module (a child process, sockets, threads, the monotonic clock).  The console (TLS, Flask, templates, JSON,
SQLite reads of the users, the audit trail and the time-quality record) costs a millisecond or more of CPU per
request, so it runs as ``python -m appliance.web.process`` (see ``edge/child.py``): the appliance publishes the
status to it twice a second and runs its calls on the loop (an operator command, an audit record to append, a
setting to apply live).  It reads the SQLite files itself (WAL lets it read while the appliance writes) and writes
only its own files (users, console settings, the certificate).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance import leap
from appliance.edge.channel import CallFailed, Channel
from appliance.edge.child import ChildProcess, start_child
from appliance.events import Alarm, Severity

log = logging.getLogger("appliance.web")
WEB_NOT_SERVING = "web-not-serving"


class ConsoleProcess(ChildProcess):
    """The appliance's side of the console process (see ``ChildProcess``).  While the console cannot serve (its port
    taken by another program, its process restarting) the MAJOR alarm ``web-not-serving`` says why; it clears once
    the console reports that it serves."""

    def __init__(self, loop: asyncio.AbstractEventLoop, status: Callable[[], Any],
                 utc_table: Callable[[], leap.LeapTable], calls: dict[str, Callable[..., Any]],
                 start: dict[str, Any], listen: str, port: int,
                 alarm: Callable[[Alarm], None] | None = None, now_tai_ns: Callable[[], int] | None = None):
        super().__init__(loop, "web console", "appliance.web.process", log, status, utc_table, calls, start)
        self.listen, self.port = listen, port
        self._alarm, self._now_tai_ns = alarm, now_tai_ns
        self._alarm_text = ""  # the text of the web-not-serving alarm raised, "" while none is

    def reported(self) -> None:
        if self._alarm is None or self._now_tai_ns is None:
            return
        serving = bool(self.report.get("serving", False))
        text = f"web console not served: {self.error}" if self.error and not serving else ""
        if text == self._alarm_text or (not text and not serving):
            return  # no change; or no report yet to say it serves
        host = f"[{self.listen}]" if ":" in self.listen else self.listen
        port = int(self.report.get("port", self.port))
        self._alarm(Alarm(WEB_NOT_SERVING, Severity.MAJOR, bool(text),
                          text or f"web console serving on https://{host}:{port}/", self._now_tai_ns()))
        self._alarm_text = text

    def status(self) -> dict[str, Any]:
        r = self.report
        return {"enabled": True, "listen": self.listen, "port": int(r.get("port", self.port)), "error": self.error,
                "serving": bool(r.get("serving", False)), "paced": int(r.get("paced", 0)),
                "busy_refused": int(r.get("busy_refused", 0)), "connections": r.get("connections", {}),
                "connections_dropped": r.get("connections_dropped", {}), "process": self.process_status()}


# --- the console process ---------------------------------------------------------------------------------------


class Feed:
    """What the appliance last published, as the console's WebContext reads it (from any thread)."""

    def __init__(self, publication: dict[str, Any]):
        from appliance.web.skytracks import SkyTracks

        self.table: leap.LeapTable = publication["leap"]
        self.sky = SkyTracks()  # the satellites' recent positions, for the sky plot's tracks
        self.take(publication)

    def take(self, publication: dict[str, Any]) -> None:
        if "leap" in publication:
            self.table = publication["leap"]
        self.latest: dict[str, Any] = publication["status"]
        self.at_mono_ns = int(publication["at_mono_ns"])  # CLOCK_MONOTONIC: one clock for both processes
        self.sky.add(self.latest)

    def now_tai_ns(self) -> int:
        return int(self.latest["at_tai_ns"]) + time.monotonic_ns() - self.at_mono_ns

    def label(self, tai_ns: int) -> str:
        u = leap.tai_to_utc(tai_ns, self.table)
        return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"

    def posix_ms(self, tai_ns: int) -> int:
        return leap.tai_to_posix_ns(tai_ns, self.table)[0] // 1_000_000


def console_context(start: dict[str, Any], feed: Feed, channel: Channel) -> Any:
    """The WebContext of the console process: its own readers of the state files, calls for everything else."""
    from appliance.audit.store import AuditError, AuditStore
    from appliance.web.access import WebContext
    from appliance.web.settings_edit import SettingsEditor
    from appliance.web.usercli import USERS_FILE
    from appliance.web.users import UserStore

    config, state_dir = start["config"], Path(start["state_dir"])
    w = config.web
    users = UserStore(state_dir / USERS_FILE, w.lockout_failures, float(w.lockout_s))
    store = quality = None
    try:
        store = AuditStore(state_dir / "audit.sqlite", create=False)
    except AuditError as exc:
        log.error("web console: no audit trail to show: %s", exc)
    if config.quality.enabled:
        from appliance.audit.service import open_quality

        quality = open_quality(state_dir, config, feed.table)

    def command(request: dict[str, Any]) -> dict[str, Any]:
        try:
            return channel.call("command", request)  # type: ignore[no-any-return]
        except CallFailed as exc:
            return {"ok": False, "error": str(exc)}

    def audit_append(kind: str, actor: str, text: str, detail: dict[str, Any]) -> Any:
        try:
            return channel.call("audit_append", kind, actor, text, detail)
        except CallFailed as exc:
            log.error("web console: audit record %s by %s not written: %s", kind, actor, exc)
            return None

    def apply_live(name: str, value: Any) -> bool:
        try:
            return bool(channel.call("apply_live", name, value))
        except CallFailed as exc:
            log.warning("web console: %s saved, not applied now: %s", name, exc)
            return False

    def export(since: int | None, until: int | None) -> bytes:
        if store is None:
            raise ValueError("there is no audit trail to export")
        return export_bundle(store, state_dir, since, until, feed.now_tai_ns(), feed.label)

    return WebContext(
        status=lambda: feed.latest, command=command, users=users,
        settings=SettingsEditor(config, state_dir, apply_live), audit=store, audit_append=audit_append,
        quality=quality, export_bundle=export if store is not None else None, utc_label=feed.label,
        now_tai_ns=feed.now_tai_ns, posix_ms=feed.posix_ms, sky_tracks=feed.sky.tracks,
        metrics_public=w.metrics_public,
        session_timeout_s=w.session_timeout_s, rate_per_s=float(w.rate_per_s), rate_burst=5 * w.rate_per_s,
        budget_per_s=float(w.max_requests_per_s), state_dir=state_dir, external=external_auth(config.auth))


def external_auth(settings: Any) -> Any:
    """The RADIUS or LDAP login check of ``auth.*`` (None for local users only); its problems are logged."""
    from appliance.web.external import ExternalAuth, problems

    if settings.method == "local":
        return None
    for problem in problems(settings):
        log.error("web console: external logins: %s", problem)
    return ExternalAuth(settings)


def export_bundle(store: Any, state_dir: Path, since: int | None, until: int | None, now_tai_ns: int,
                  label: Callable[[int], str]) -> bytes:
    """A signed bundle of the audit records from ``since`` to ``until`` (default: all of them), as bytes."""
    from appliance.audit.bundle import export_bundle as write_bundle
    from appliance.audit.bundle import load_or_create_key
    from appliance.units import NS_PER_S

    key = load_or_create_key(state_dir)
    with tempfile.TemporaryDirectory(dir=state_dir) as tmp:
        path = Path(tmp) / "bundle.json"
        write_bundle(store, 0 if since is None else since, now_tai_ns + NS_PER_S if until is None else until,
                     key, path, label)
        return path.read_bytes()


def child_main(fd: int) -> int:
    """The console process: started by ``ConsoleProcess`` with its end of the socket pair as ``fd``."""
    from appliance.web.server import WebPart

    started = start_child(fd, "console")
    if started is None:
        return 1
    first = started.first
    feed = Feed(first["publication"])
    part = WebPart(console_context(first, feed, started.channel), first["listen"], int(first["port"]),
                   Path(first["cert"]), Path(first["key"]), Path(first["state_dir"]))
    part.start()
    started.report_every(part.status, "web-report")

    def on_message(message: dict[str, Any]) -> None:
        if message.get("type") == "status":
            feed.take(message)

    reason = started.serve(on_message)
    log.debug("web console process: %s", reason)
    part.stop()
    return 0


if __name__ == "__main__":
    sys.exit(child_main(int(sys.argv[1])))
