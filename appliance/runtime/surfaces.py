"""The operator's surfaces as parts of the runtime: the audit trail, the web console and the SNMP agent.

Edge wiring.  Each is built with callbacks into the runtime (the status, commands, the served time, event
subscription) and into each other (the console reads the audit store; SNMP hears each audit record), never with the
runtime or the application object itself.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path
from typing import Any

from appliance import leap
from appliance.config import Config
from appliance.edge import persist
from appliance.runtime.outputs import Output
from appliance.runtime.runtime import Runtime
from appliance.units import NS_PER_S

log = logging.getLogger("appliance")


def audit_trail(config: Config, runtime: Runtime, loop: asyncio.AbstractEventLoop) -> Any:
    """The audit trail and time-quality record under state_dir; a store that cannot be opened stops the start
    (ValueError).  Operator commands are recorded in it from now on."""
    from appliance.audit.chain import AuditError
    from appliance.audit.service import AuditPart, open_stores

    state_dir = config.state_path()
    persist.ensure_state_dir(state_dir)
    try:
        store, quality, forwarder = open_stores(state_dir, config, runtime.router.utc.table)
    except AuditError as exc:
        raise ValueError(str(exc)) from None
    part = AuditPart(loop, store, runtime.status, runtime.now_tai_ns, lambda: runtime.router.utc.table,
                     runtime.subscribe, quality, forwarder, alarm=runtime.alarm)
    runtime.audit_to(part.on_command)
    return part


def web_console(config: Config, runtime: Runtime, loop: asyncio.AbstractEventLoop, audit: Any) -> Output:
    """The web console (HTTPS), REST API and /metrics, reading what the runtime publishes."""
    from appliance.web.app import WebContext
    from appliance.web.server import Publisher, WebPart
    from appliance.web.settings_edit import SettingsEditor
    from appliance.web.usercli import USERS_FILE, first_admin
    from appliance.web.users import UserStore

    w, state_dir = config.web, config.state_path()
    persist.ensure_state_dir(state_dir)
    users = UserStore(state_dir / USERS_FILE, w.lockout_failures, float(w.lockout_s))
    made = first_admin(users, state_dir)
    if made is not None:
        log.warning("web console: no users yet: made user 'admin'; its password is in %s (change it, then delete "
                    "the file)", made)
    publisher = Publisher(runtime.status, loop)
    utc = runtime.router.utc

    def audit_append(kind: str, actor: str, text: str, detail: dict[str, Any]) -> Any:
        return audit.append(publisher.now_tai_ns(), kind, actor, text, detail)

    def export(since: int | None, until: int | None) -> bytes:
        return _export_bundle(audit, state_dir, since, until, publisher.now_tai_ns())

    def label(tai_ns: int) -> str:
        u = leap.tai_to_utc(tai_ns, utc.table)
        return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"

    ctx = WebContext(
        status=lambda: publisher.latest, command=lambda req: publisher.run_on_loop(runtime.handle_command, req),
        users=users, settings=SettingsEditor(config, state_dir, runtime.apply_live), audit=audit.store,
        audit_append=audit_append, quality=audit.quality, export_bundle=export, utc_label=label,
        now_tai_ns=publisher.now_tai_ns,
        posix_ms=lambda tai_ns: leap.tai_to_posix_ns(tai_ns, utc.table)[0] // 1_000_000,
        metrics_public=w.metrics_public, session_timeout_s=w.session_timeout_s,
        rate_per_s=float(w.rate_per_s), rate_burst=5 * w.rate_per_s, budget_per_s=float(w.max_requests_per_s))
    cert = Path(w.cert).expanduser() if w.cert else state_dir / "web-cert.pem"
    key = Path(w.key).expanduser() if w.key else state_dir / "web-key.pem"
    return Output("web", WebPart(ctx, publisher, w.listen, w.port, cert, key, state_dir))


def _export_bundle(audit: Any, state_dir: Path, since: int | None, until: int | None, now_tai_ns: int) -> bytes:
    from appliance.audit.bundle import export_bundle, load_or_create_key

    key = load_or_create_key(state_dir)
    with tempfile.TemporaryDirectory(dir=state_dir) as tmp:
        path = Path(tmp) / "bundle.json"
        export_bundle(audit.store, 0 if since is None else since, now_tai_ns + NS_PER_S if until is None else until,
                      key, path, audit.label)
        return path.read_bytes()


def snmp_agent(config: Config, runtime: Runtime, loop: asyncio.AbstractEventLoop, warm: bool, audit: Any) -> Output:
    from appliance.snmp.service import SnmpPart

    agent = SnmpPart(loop, config, warm, runtime.status, runtime.handle_command, runtime.now_tai_ns,
                     lambda: runtime.router.utc.table, runtime.subscribe, audit.record_listeners.append)
    return Output("snmp", agent)
