"""The operator's surfaces as parts of the runtime: the audit trail, the web console and the SNMP agent.

Edge wiring.  Each is built with callbacks into the runtime (the status, commands, the served time, event
subscription) and into each other (the console reads the audit store; SNMP hears each audit record), never with the
runtime or the application object itself.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from appliance.config import Config
from appliance.edge import persist
from appliance.runtime.outputs import Output
from appliance.runtime.runtime import Runtime

log = logging.getLogger("appliance")


def audit_trail(config: Config, runtime: Runtime, loop: asyncio.AbstractEventLoop) -> Any:
    """The audit trail and time-quality record under state_dir; a store that cannot be opened stops the start
    (ValueError).  Operator commands are recorded in it from now on."""
    from appliance.audit.chain import AuditError
    from appliance.audit.service import AuditPart, open_stores

    state_dir = config.state_path()
    persist.ensure_state_dir(state_dir)
    try:
        store, quality, forwarder = open_stores(state_dir, config, runtime.leap_table())
    except AuditError as exc:
        raise ValueError(str(exc)) from None
    part = AuditPart(loop, store, runtime.status, runtime.now_tai_ns, runtime.leap_table,
                     runtime.subscribe, quality, forwarder, alarm=runtime.alarm)
    runtime.audit_to(part.on_command)
    return part


def web_console(config: Config, runtime: Runtime, loop: asyncio.AbstractEventLoop, audit: Any) -> Output:
    """The web console (HTTPS), REST API and /metrics, in a process of its own that reads what the runtime
    publishes and asks the runtime for commands, audit records and live settings."""
    from appliance.web.process import ConsoleProcess
    from appliance.web.usercli import USERS_FILE, first_admin, settle_initial_password
    from appliance.web.users import UserStore

    w, state_dir = config.web, config.state_path()
    persist.ensure_state_dir(state_dir)
    users = UserStore(state_dir / USERS_FILE, w.lockout_failures, float(w.lockout_s))
    try:
        made = first_admin(users, state_dir)
        retired = settle_initial_password(users, state_dir) if made is None else None
    finally:
        users.close()
    if made is not None:
        log.warning("web console: no users yet: made user 'admin'; its password is in %s (the console asks for a "
                    "new one at the first login, and the file is deleted then)", made)
    if retired is not None:
        log.info("web console: deleted %s: the admin password it held was changed", retired)
        audit.append(runtime.now_tai_ns(), "user.change", "appliance", f"initial admin password file {retired} "
                     "deleted: the password had been changed", {"action": "initial-password-deleted"})

    def audit_append(kind: str, actor: str, text: str, detail: dict[str, Any]) -> int | None:
        record = audit.append(runtime.now_tai_ns(), kind, actor, text, detail)  # None: refused (logged)
        return None if record is None else int(record.seq)

    cert = Path(w.cert).expanduser() if w.cert else state_dir / "web-cert.pem"
    key = Path(w.key).expanduser() if w.key else state_dir / "web-key.pem"
    start = {"config": config, "state_dir": str(state_dir), "listen": w.listen, "port": w.port, "cert": str(cert),
             "key": str(key), "log_level": logging.getLogger().getEffectiveLevel()}
    calls = {"command": runtime.handle_command, "audit_append": audit_append, "apply_live": runtime.apply_live}
    return Output("web", ConsoleProcess(loop, runtime.status, runtime.leap_table, calls, start,
                                        w.listen, w.port, alarm=runtime.alarm, now_tai_ns=runtime.now_tai_ns))


def snmp_agent(config: Config, runtime: Runtime, loop: asyncio.AbstractEventLoop, warm: bool, audit: Any) -> Output:
    from appliance.snmp.service import SnmpPart

    agent = SnmpPart(loop, config, warm, runtime.status, runtime.handle_command, runtime.now_tai_ns,
                     runtime.leap_table, runtime.subscribe, audit.record_listeners.append)
    return Output("snmp", agent)
