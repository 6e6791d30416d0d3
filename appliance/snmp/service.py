"""The SNMP agent of a running appliance: settings to agent, status to MIB view, events to notifications.

Edge module (the agent's process, loop timers, the host clock for sysUpTime, the engine ID file).  The agent itself
runs in a process of its own at idle CPU priority (``snmp/process.py``): pysnmp spends a millisecond or more of CPU
on a GETBULK, and a walking NMS must not take that from NTP and PTP.  This part, on the appliance's loop, reads the
settings and the users file, starts that process (telling it the engine ID and where the engine boots count is
kept) and publishes the status to it twice a second (with the alarm table's indices); runs its SET of applianceClockForcedHoldover through the same command path as the control socket
and the console (so it is audited, with the SNMPv3 user as its actor); and builds the notifications (routed events,
failed console logins from the audit trail, output faults, failed SNMP authentication) from the status of the
moment, posting each to the agent to send.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance import leap
from appliance.alarms import spec_of
from appliance.edge.child import ChildProcess
from appliance.snmp import notify
from appliance.snmp.agent import security_level
from appliance.snmp.mibgen import enterprise_oid, load_table
from appliance.snmp.users import load_users, parse_receivers
from appliance.snmp.values import OUTPUTS, Stamp
from appliance.snmp.view import MibView, System, build, encode
from appliance.status import TimeStatus

log = logging.getLogger("appliance.snmp")
AUTH_TRAP_MIN_INTERVAL_S = 1.0
STANDARD = {"coldStart": notify.COLD_START, "warmStart": notify.WARM_START,
            "authenticationFailure": notify.AUTHENTICATION_FAILURE}


def engine_id(config: Any, pen: int) -> bytes:
    """The configured SNMPv3 engine ID, or the one made on first start (RFC 3411 format 5: 0x80 | enterprise, then
    octets) and kept in state_dir, so v3 trap receivers need to be told it once."""
    text = config.snmp.engine_id.strip().removeprefix("0x")
    if text:
        try:
            value = bytes.fromhex(text)
        except ValueError:
            raise ValueError(f"snmp.engine_id {text!r}: not hex") from None
        if not 5 <= len(value) <= 32:
            raise ValueError(f"snmp.engine_id: {len(value)} octets; an engine ID has 5 to 32")
        return value
    path = config.state_path() / "snmp-engine-id"
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        import secrets

        value = (0x80000000 | pen).to_bytes(4, "big") + b"\x05" + secrets.token_bytes(8)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value.hex() + "\n")
        return value


Listener = Callable[[object], None]


class SnmpPart:
    """``status``, ``command``, ``now_tai_ns`` and ``utc_table`` read and command the running appliance;
    ``subscribe(listener)`` hands the listener every routed event (returning the function that stops it);
    ``audit_records(listener)``, when there is an audit trail, every record it writes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, config: Any, warm: bool, status: Callable[[], TimeStatus],
                 command: Callable[[dict[str, Any]], dict[str, Any]], now_tai_ns: Callable[[], int],
                 utc_table: Callable[[], leap.LeapTable], subscribe: Callable[[Listener], Callable[[], None]],
                 audit_records: Callable[[Callable[[Any], None]], None] | None = None):
        self.loop, self.warm = loop, warm
        self.status_of, self.command, self.now_tai_ns, self.utc_table = status, command, now_tai_ns, utc_table
        self.subscribe, self.audit_records = subscribe, audit_records
        self._unsubscribe: Callable[[], None] | None = None
        first = status()
        pen = config.snmp.enterprise
        self.table = load_table(pen)
        self.by_name = {o.name: o for o in self.table}
        users_path = Path(config.snmp.users_file).expanduser() if config.snmp.users_file else \
            config.state_path() / "snmp-users.toml"
        users = load_users(users_path)
        receivers = parse_receivers(config.snmp.trap_receivers)
        known = {u.name for u in users}
        for r in receivers:
            if r.version == "v3" and r.community_or_user not in known:
                raise ValueError(f"snmp.trap_receivers: v3 user {r.community_or_user!r} is not in {users_path}")
        if config.snmp.informs:
            receivers = [type(r)(r.host, r.port, r.version, r.community_or_user, True) for r in receivers]
        self.system = dict(descr=f"GNSS grandmaster time server appliance {first.version} ({first.mode})",
                           object_id=enterprise_oid(pen), contact=config.snmp.sys_contact,
                           name=config.snmp.sys_name or socket.gethostname(),
                           location=config.snmp.sys_location)
        self.listen, self.port = config.snmp.listen, config.snmp.port
        self._started = time.monotonic()
        agent = {"listen": self.listen, "port": self.port, "allow": list(config.snmp.allow),
                 "rate_per_s": float(config.snmp.rate_per_s),
                 "max_requests_per_s": float(config.snmp.max_requests_per_s),
                 "community": config.snmp.community, "users": users,
                 "allow_noauth_v3": config.snmp.v3_allow_without_privacy, "receivers": receivers,
                 "engine_id": engine_id(config, pen), "boots_file": str(config.state_path() / "snmp-engine-boots")}
        for user in users:  # refused at start, with its reason, rather than by the agent's process
            security_level(user, config.snmp.v3_allow_without_privacy)
        start = {"pen": pen, "system": self.system, "started_mono": self._started, "agent": agent,
                 "log_level": logging.getLogger().getEffectiveLevel()}
        self.process = ChildProcess(loop, "SNMP agent", "appliance.snmp.process", log, status, utc_table,
                                    {"holdover": self._holdover}, start, self._extra, self._from_agent)
        self._last_outputs: dict[str, Any] = {}
        self._last_auth_trap = -AUTH_TRAP_MIN_INTERVAL_S
        self._timer: asyncio.TimerHandle | None = None
        self.notifications = 0

    # --- the view -----------------------------------------------------------------------------------------------
    def _utc(self, tai_ns: int) -> leap.UtcTime:
        return leap.tai_to_utc(tai_ns, self.utc_table())

    def alarm_index(self, code: str) -> int:
        return spec_of(code).id  # the alarm catalogue's stable ID: the same in the table, the traps and the API

    def _build(self, status: dict[str, Any]) -> MibView:
        system = System(uptime_ticks=int((time.monotonic() - self._started) * 100), **self.system)
        return build(self.table, status, system, self._utc, self.alarm_index,
                     lambda tai_ns: leap.tai_to_posix_ns(tai_ns, self.utc_table())[0])

    def _extra(self, status: dict[str, Any]) -> dict[str, Any]:
        """Nothing beyond the status goes with a publication: an alarm's index is its catalogue ID."""
        return {}

    # --- SET ------------------------------------------------------------------------------------------------------
    def _holdover(self, action: str, user: str) -> dict[str, Any]:
        """The agent's SET of applianceClockForcedHoldover (checked there: an SNMPv3 authPriv user with write
        access, a TruthValue), as an operator command; the agent hears the new status before the answer."""
        if action not in ("start", "stop"):
            raise ValueError(f"holdover {action!r}: expected start or stop")
        reply = self.command({"cmd": "holdover", "action": action, "user": f"snmp:{user}"})
        self.process.publish_now()
        return reply

    # --- notifications --------------------------------------------------------------------------------------------
    def on_event(self, event: object) -> None:
        for notice in notify.for_event(event, self.now_tai_ns()):
            if notice.alarm_code is not None and hasattr(event, "code"):
                a = event
                notice.extra.update({"applianceAlarmCode": a.code, "applianceAlarmSeverity": a.severity.value,  # type: ignore[attr-defined]
                                     "applianceAlarmText": a.text,  # type: ignore[attr-defined]
                                     "applianceAlarmRaisedTime": Stamp(a.at_ns)})  # type: ignore[attr-defined]
            self.send(notice)

    def on_audit(self, record: Any) -> None:
        """Called from whichever thread wrote the record (the console's): notifications are built on the loop."""
        for notice in notify.for_audit(record.kind, record.text, record.at_tai_ns):
            self.loop.call_soon_threadsafe(self.send, notice)

    def _from_agent(self, message: dict[str, Any]) -> None:
        if message.get("type") == "auth_failure":
            self._auth_failure(str(message.get("source", "?"))[:64])

    def _auth_failure(self, source: str) -> None:
        now = time.monotonic()
        if now - self._last_auth_trap < AUTH_TRAP_MIN_INTERVAL_S:
            return
        self._last_auth_trap = now
        log.warning("SNMP request from %s failed authentication", source)
        self.send(notify.Notice("authenticationFailure", {
            "applianceNotifyText": f"SNMP authentication failure from {source}",
            "applianceNotifyTime": self.now_tai_ns()}))

    def send(self, notice: notify.Notice) -> None:
        """On the appliance's loop: the varbinds from the status now (not half a second ago), posted to the agent
        to send."""
        from appliance.status import to_dict

        view = self._build(to_dict(self.status_of())) if notice.name not in STANDARD else None
        binds: list[tuple[tuple[int, ...], str, Any]] = []
        if notice.name in STANDARD:
            oid = STANDARD[notice.name]
            objects = [n for n in ("applianceNotifyText", "applianceNotifyTime") if n in notice.extra]
        else:
            definition = self.by_name[notice.name]
            oid, objects = definition.oid, list(definition.objects)
        for name in objects:
            obj = self.by_name[name]
            suffix = (0,)
            if obj.kind == "column":
                suffix = (self.alarm_index(notice.alarm_code or ""),) if obj.table == "applianceAlarmTable" else \
                    (OUTPUTS.index(notice.output) + 1,) if notice.output in OUTPUTS else (0,)
            if name in notice.extra:
                value = notice.extra[name]
                if name.endswith("Time") and isinstance(value, int):
                    value = Stamp(value)
                if name == "applianceNotifyPrevClockState":
                    from appliance.snmp.values import CLOCK_STATE

                    value = CLOCK_STATE.get(str(value), "freerun")
                kind, encoded = encode(obj, value, self._utc)
            else:
                found = view.get(obj.oid + suffix) if view is not None else None
                if found is None:
                    continue
                kind, encoded = found
            binds.append((obj.oid + suffix, kind, encoded))
        self.notifications += 1
        self.process.post({"type": "notify", "oid": oid, "binds": binds,
                           "uptime_ticks": int((time.monotonic() - self._started) * 100)})

    def _watch_outputs(self) -> None:
        outputs = self.status_of().outputs.present()
        for notice in notify.output_faults(self._last_outputs, outputs):
            self.send(notice)
        self._last_outputs = {k: dict(v) if isinstance(v, dict) else v for k, v in outputs.items()}
        self._timer = self.loop.call_later(1.0, self._watch_outputs)

    # --- lifecycle --------------------------------------------------------------------------------------------------
    def start(self) -> None:
        self.process.start()
        self._unsubscribe = self.subscribe(self.on_event)
        if self.audit_records is not None:
            self.audit_records(self.on_audit)
        self._last_outputs = {}  # an output already faulty at start is notified at the first check
        self._timer = self.loop.call_later(1.0, self._watch_outputs)
        self.send(notify.Notice("warmStart" if self.warm else "coldStart"))

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.process.stop()

    def status(self) -> dict[str, Any]:
        r = self.process.report
        counters = {k: int(r.get(k, 0)) for k in ("send_errors", "denied", "rate_limited", "malformed", "paced",
                                                      "too_big", "bulk_cut", "failed", "replay_dropped",
                                                      "replay_refused", "replay_cached")}
        # too_big, bulk_cut, failed: responses over the bound of limits.py (refused tooBig), GETBULKs cut short,
        # requests answered genErr; replay_dropped: authenticated SETs received again inside the time window,
        # dropped unanswered; replay_refused: SETs refused (resourceUnavailable) as the replay check could not
        # remember them; replay_cached: the SETs remembered now.  standard: the SNMPv2-MIB, SNMP-MPD-MIB and USM
        # counters by their MIB names (usmStatsNotInTimeWindows, usmStatsWrongDigests, snmpInBadCommunityNames ...).
        # All count since the agent's process started.
        standard = {str(k): int(v) for k, v in (r.get("standard") or {}).items()}
        return {"enabled": True, "listen": self.listen, "port": self.port, "error": self.process.error,
                "serving": bool(r.get("serving", False)), "notifications": self.notifications, **counters,
                "standard": standard, "process": self.process.process_status()}
