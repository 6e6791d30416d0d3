"""The SNMP agent of a running appliance: settings to agent, status to MIB view, events to notifications.

Edge module (the agent's sockets, its thread, loop timers, the host clock for sysUpTime).  The agent runs in a
thread of its own, on its own event loop, at idle CPU priority: pysnmp spends about 2 ms of CPU on a GETBULK, and a
walking NMS must not take that from NTP and PTP.  The appliance's loop publishes the status twice a second; the
view is rebuilt from it at most twice a second; a SET of applianceClockForcedHoldover goes through the same command path
as the control socket and the console (so it is audited, with the SNMPv3 user as its actor); notifications follow
routed events, failed console logins (from the audit trail) and output faults.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance import leap
from appliance.edge.pacer import Pacer
from appliance.snmp import notify
from appliance.snmp.agent import AccessGate, Agent, SetRefused
from appliance.snmp.mibgen import enterprise_oid, load_table
from appliance.snmp.users import load_users, parse_receivers
from appliance.snmp.values import OUTPUTS, Stamp
from appliance.snmp.view import MibView, System, build, encode
from appliance.status import TimeStatus

log = logging.getLogger("appliance.snmp")
VIEW_MAX_AGE_S = 0.5
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
        budget = config.snmp.max_requests_per_s
        self.gate = AccessGate(config.snmp.allow, config.snmp.rate_per_s,
                               2 * config.snmp.rate_per_s,
                               pacer=Pacer(budget, max(1, int(budget))) if budget > 0 else None)
        self.system = dict(descr=f"GNSS grandmaster time server appliance {first.version} ({first.mode})",
                           object_id=enterprise_oid(pen), contact=config.snmp.sys_contact,
                           name=config.snmp.sys_name or socket.gethostname(),
                           location=config.snmp.sys_location)
        self._agent_args = (config.snmp.listen, config.snmp.port, self.view, self._set, self.gate,
                            config.snmp.community, users, config.snmp.v3_allow_without_privacy,
                            [(1, 3, 6, 1)], receivers, self._auth_failure, engine_id(config, pen))
        self.agent: Agent | None = None  # made in the agent's own thread, on its own event loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._published: dict[str, Any] = {}
        self._publish_timer: asyncio.TimerHandle | None = None
        self.listen, self.port = config.snmp.listen, config.snmp.port
        self.error = ""
        self._view: MibView | None = None
        self._view_at = 0.0
        self._started = time.monotonic()
        self._alarm_index: dict[str, int] = {}
        self._last_outputs: dict[str, Any] = {}
        self._last_auth_trap = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.notifications = 0

    # --- the view -----------------------------------------------------------------------------------------------
    def _utc(self, tai_ns: int) -> leap.UtcTime:
        return leap.tai_to_utc(tai_ns, self.utc_table())

    def alarm_index(self, code: str) -> int:
        if code not in self._alarm_index:
            self._alarm_index[code] = len(self._alarm_index) + 1
        return self._alarm_index[code]

    def view(self) -> MibView:
        """The view the agent answers from, in the agent's thread: rebuilt from the status the appliance's loop
        published, at most twice a second."""
        now = time.monotonic()
        if self._view is None or now - self._view_at > VIEW_MAX_AGE_S:
            self._view = self._build(self._published)
            self._view_at = now
        return self._view

    def _build(self, status: dict[str, Any]) -> MibView:
        system = System(uptime_ticks=int((time.monotonic() - self._started) * 100), **self.system)
        return build(self.table, status, system, self._utc, self.alarm_index,
                     lambda tai_ns: leap.tai_to_posix_ns(tai_ns, self.utc_table())[0])

    def _publish(self) -> None:
        from appliance.status import to_dict

        self._published = to_dict(self.status_of())
        self._publish_timer = self.loop.call_later(VIEW_MAX_AGE_S, self._publish)

    # --- SET ------------------------------------------------------------------------------------------------------
    def _set(self, oid: tuple[int, ...], value: Any, user: str) -> None:
        if oid != self.by_name["applianceClockForcedHoldover"].oid + (0,):
            raise ValueError("not writable")
        number = int(value)
        if number not in (1, 2):
            raise ValueError(f"TruthValue {number}: expected true(1) or false(2)")
        request = {"cmd": "holdover", "action": "start" if number == 1 else "stop", "user": f"snmp:{user}"}

        async def command() -> dict[str, Any]:
            reply = self.command(request)
            self._publish_now()
            return reply
        reply = asyncio.run_coroutine_threadsafe(command(), self.loop).result(5)
        self._view = None
        if not reply.get("ok"):
            raise SetRefused(str(reply.get("error", "refused")))

    # --- notifications --------------------------------------------------------------------------------------------
    def on_event(self, event: object) -> None:
        for notice in notify.for_event(event, self.now_tai_ns()):
            if notice.alarm_code is not None and hasattr(event, "code"):
                a = event
                self.alarm_index(a.code)  # type: ignore[attr-defined]
                notice.extra.update({"applianceAlarmCode": a.code, "applianceAlarmSeverity": a.severity.value,  # type: ignore[attr-defined]
                                     "applianceAlarmText": a.text,  # type: ignore[attr-defined]
                                     "applianceAlarmRaisedTime": Stamp(a.at_ns)})  # type: ignore[attr-defined]
            self.send(notice)

    def on_audit(self, record: Any) -> None:
        """Called from whichever thread wrote the record (the console's): notifications are built on the loop."""
        for notice in notify.for_audit(record.kind, record.text, record.at_tai_ns):
            self.loop.call_soon_threadsafe(self.send, notice)

    def _auth_failure(self, source: str) -> None:
        now = time.monotonic()
        if now - self._last_auth_trap < AUTH_TRAP_MIN_INTERVAL_S:
            return
        self._last_auth_trap = now
        log.warning("SNMP request from %s failed authentication", source)
        self.loop.call_soon_threadsafe(self.send, notify.Notice("authenticationFailure", {"applianceNotifyText": f"SNMP authentication failure "
                                                                                 f"from {source}",
                                                          "applianceNotifyTime": self.now_tai_ns()}))

    def _publish_now(self) -> None:
        from appliance.status import to_dict

        self._published = to_dict(self.status_of())
        self._view = None

    def send(self, notice: notify.Notice) -> None:
        """On the appliance's loop: the varbinds from the status now (not half a second ago), sent from the agent's
        thread."""
        self._publish_now()
        view = self._build(self._published) if notice.name not in STANDARD else None
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
        if self.agent is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self.agent.notify, oid, binds,
                                            int((time.monotonic() - self._started) * 100))

    def _watch_outputs(self) -> None:
        outputs = self.status_of().outputs.present()
        for notice in notify.output_faults(self._last_outputs, outputs):
            self.send(notice)
        self._last_outputs = {k: dict(v) if isinstance(v, dict) else v for k, v in outputs.items()}
        self._timer = self.loop.call_later(1.0, self._watch_outputs)

    # --- lifecycle --------------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._publish()
        self._thread = threading.Thread(target=self._run, name="snmp", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self.error:
            log.error("SNMP agent: %s", self.error)
            return
        log.info("SNMP agent on %s port %d", self.listen, self.port)
        self._unsubscribe = self.subscribe(self.on_event)
        if self.audit_records is not None:
            self.audit_records(self.on_audit)
        self._last_outputs = {}  # an output already faulty at start is notified at the first check
        self._timer = self.loop.call_later(1.0, self._watch_outputs)
        self.send(notify.Notice("warmStart" if self.warm else "coldStart"))

    def _run(self) -> None:
        """The agent's thread: its own event loop, at idle CPU priority, so SNMP polling never takes CPU from NTP,
        PTP or the clock (a waking time service preempts it at once)."""
        from appliance.web.server import lower_priority

        lower_priority()
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            self.agent = Agent(*self._agent_args)
            self.agent.start()
            self._loop = loop
        except Exception as exc:  # noqa: BLE001 - a port that cannot be bound must not stop time service
            self.error = f"cannot serve on {self.listen} port {self.port}: {exc}"
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            try:
                self.agent.stop()
            except Exception as exc:  # noqa: BLE001
                log.debug("SNMP agent stop: %s", exc)
            pending = asyncio.all_tasks(loop)  # pysnmp's own tasks: cancelled and awaited, not destroyed pending
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    def stop(self) -> None:
        for timer in (self._timer, self._publish_timer):
            if timer is not None:
                timer.cancel()
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    def status(self) -> dict[str, Any]:
        return {"enabled": True, "listen": self.listen, "port": self.port, "error": self.error,
                "notifications": self.notifications, "send_errors": self.agent.send_errors if self.agent else 0,
                "denied": self.gate.denied, "rate_limited": self.gate.limited, "malformed": self.gate.malformed,
                "paced": self.gate.pacer.paced if self.gate.pacer is not None else 0,
                # responses over the bound of limits.py: refused tooBig, GETBULKs cut short, requests answered genErr
                "too_big": self.agent.guard.too_big if self.agent else 0,
                "bulk_cut": self.agent.guard.cut if self.agent else 0,
                "failed": self.agent.guard.failed if self.agent else 0}
