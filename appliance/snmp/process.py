"""The SNMP agent in a process of its own, at idle CPU priority, fed by the appliance through a socket pair.

Edge module (a child process, the agent's UDP sockets and event loop, a thread, the monotonic clock).  pysnmp spends
a millisecond or more of CPU on a GETBULK (BER decoding and encoding, USM); in the appliance's process that would
hold the interpreter lock the PTP and NTP loop needs, so the agent runs as ``python -m appliance.snmp.process``
(see ``edge/child.py``).  The appliance publishes the status to it twice a second, with the alarm table's indices
(so a row and the notification about it carry the same index); the agent answers GET, GETNEXT and GETBULK from the
view it builds of that, at most twice a second.  The rest goes through the appliance:

- a SET of applianceClockForcedHoldover is a call (``holdover``), run by the same command path as the control
  socket and the console, so it is audited with the SNMPv3 user as its actor;
- the appliance builds every notification (events, failed console logins, output faults) and posts it here to send;
- a request that failed authentication is told to the appliance (``auth_failure``, at most one a second), which
  logs it and sends the authenticationFailure notification.

Every second the agent reports its counters (refusals, rate limits, responses bounded, notifications that failed,
SETs dropped as replays, the standard SNMP and USM counters) for the status; its view shows its own counters as they
are now, not as the last publication had them.  At every start it raises the engine boots count kept in
``<state_dir>/snmp-engine-boots`` (RFC 3414 2.2.2), so a message captured before a restart is out of the time window
after it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

from appliance import leap
from appliance.alarms import spec_of
from appliance.edge.channel import CallFailed
from appliance.edge.child import Started, start_child
from appliance.edge.pacer import Pacer
from appliance.edge.persist import read_private, write_private
from appliance.snmp.agent import MAX_ENGINE_BOOTS, AccessGate, Agent, SetRefused
from appliance.snmp.mibgen import load_table
from appliance.snmp.view import MibView, System, agent_items, build

log = logging.getLogger("appliance.snmp")
VIEW_MAX_AGE_S = 0.5
AUTH_REPORT_MIN_INTERVAL_S = 1.0
HOLDOVER_OBJECT = "applianceClockForcedHoldover"


def next_engine_boots(path: Path) -> int:
    """The snmpEngineBoots of this start: one more than the file says (1 when there is no file), written back
    before the agent serves.  OSError or ValueError when it cannot be read or kept: the caller then refuses writes,
    since an old message would be inside the time window again after the next restart."""
    try:
        text = read_private(path, 64).decode("ascii").strip()
    except FileNotFoundError:
        text = "0"
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a number") from None
    if not text.isdigit():
        raise ValueError(f"{path}: {text[:20]!r} is not a number")
    boots = min(MAX_ENGINE_BOOTS, int(text) + 1)
    write_private(path, f"{boots}\n".encode(), mode=0o600)
    return boots


def replay_stats(agent: Agent) -> dict[str, Any]:
    """The agent's security counters as the status carries them: replays dropped, writes refused by the replay
    check, writes remembered now, and the standard SNMP and USM counters by their MIB names."""
    return {"replay_dropped": agent.replay.replayed, "replay_refused": agent.replay.refused,
            "replay_cached": len(agent.replay), "standard": agent.security_stats()}


EARLY_NOTIFICATIONS = 256  # kept while the agent starts; more are dropped (a start that never ends)


class AgentSide:
    """What the agent answers from: the last publication, as a MIB view rebuilt at most every VIEW_MAX_AGE_S."""

    def __init__(self, started: Started):
        first = started.first
        self.channel = started.channel
        self.table = load_table(int(first["pen"]))
        self.by_name = {o.name: o for o in self.table}
        self.system, self.started_mono = dict(first["system"]), float(first["started_mono"])
        self.agent_args = first["agent"]
        self._lock = threading.Lock()
        self._published: dict[str, Any] = {}
        self._leap: leap.LeapTable = first["publication"]["leap"]
        self.take(first["publication"])
        self._view: MibView | None = None
        self._view_at = 0.0
        self._base_status: dict[str, Any] = {}
        self._last_auth_report = -AUTH_REPORT_MIN_INTERVAL_S
        self.agent: Agent | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error = ""
        # notifications that came before the agent was up (its start can take tens of seconds on a busy host, at
        # idle priority): sent once it is, in order, not lost (the first is the coldStart or warmStart)
        self._early: list[dict[str, Any]] = []
        self._early_lock = threading.Lock()

    # --- the view ---------------------------------------------------------------------------------------------
    def take(self, publication: dict[str, Any]) -> None:
        """A publication from the appliance (any thread)."""
        with self._lock:
            if "leap" in publication:
                self._leap = publication["leap"]
            self._published = publication["status"]

    def alarm_index(self, code: str) -> int:
        return spec_of(code).id  # the alarm catalogue's stable ID

    def view(self) -> MibView:
        """The view of the last publication, rebuilt at most every VIEW_MAX_AGE_S, with the agent's own counters
        (replays, USM and SNMP statistics) put in as they are at this request."""
        now = time.monotonic()
        if self._view is None or now - self._view_at > VIEW_MAX_AGE_S:
            with self._lock:
                status, table = self._published, self._leap
            system = System(uptime_ticks=int((now - self.started_mono) * 100), **self.system)
            self._view = build(self.table, self._with_counters(status), system,
                               lambda tai_ns: leap.tai_to_utc(tai_ns, table), self.alarm_index,
                               lambda tai_ns: leap.tai_to_posix_ns(tai_ns, table)[0])
            self._view_at = now
            self._base_status = status
        if self.agent is None:
            return self._view
        return self._view.replaced(agent_items(self.table, self._with_counters(self._base_status)))

    def _with_counters(self, status: dict[str, Any]) -> dict[str, Any]:
        """``status`` with the agent's counters as they are now in place of the published ones."""
        if self.agent is None:
            return status
        outputs = dict(status.get("outputs") or {})
        outputs["snmp"] = {**(outputs.get("snmp") or {}), **replay_stats(self.agent)}
        return {**status, "outputs": outputs}

    # --- what goes to the appliance ------------------------------------------------------------------------------
    def set(self, oid: tuple[int, ...], value: Any, user: str) -> None:
        """A SET that the agent's access checks let through (an SNMPv3 authPriv user with write access)."""
        if oid != self.by_name[HOLDOVER_OBJECT].oid + (0,):
            raise ValueError("not writable")
        number = int(value)
        if number not in (1, 2):
            raise ValueError(f"TruthValue {number}: expected true(1) or false(2)")
        try:
            reply = self.channel.call("holdover", "start" if number == 1 else "stop", user)
        except CallFailed as exc:
            raise RuntimeError(str(exc)) from None
        self._view = None  # the appliance published the change before it answered
        if not reply.get("ok"):
            raise SetRefused(str(reply.get("error", "refused")))

    def auth_failure(self, source: str) -> None:
        now = time.monotonic()
        if now - self._last_auth_report < AUTH_REPORT_MIN_INTERVAL_S:
            return
        self._last_auth_report = now
        try:
            self.channel.send({"type": "auth_failure", "source": source})
        except Exception as exc:  # noqa: BLE001 - the appliance gone: this process ends with the link
            log.debug("SNMP: authentication failure not reported: %s", exc)

    # --- the agent ------------------------------------------------------------------------------------------------
    def run(self, ready: threading.Event) -> None:
        """The agent's thread: its own event loop, until stopped."""
        a = self.agent_args
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        budget = float(a["max_requests_per_s"])
        gate = AccessGate(a["allow"], float(a["rate_per_s"]), 2 * float(a["rate_per_s"]),
                          pacer=Pacer(budget, max(1, int(budget))) if budget > 0 else None)
        boots = None
        try:
            boots = next_engine_boots(Path(a["boots_file"]))
        except (OSError, ValueError) as exc:
            log.error("SNMP agent: the engine boots count cannot be kept (%s): SNMP SETs are refused "
                      "(resourceUnavailable) until it can; reads are served", exc)
        try:
            self.agent = Agent(a["listen"], int(a["port"]), self.view, self.set, gate, a["community"], a["users"],
                               bool(a["allow_noauth_v3"]), [(1, 3, 6, 1)], a["receivers"], self.auth_failure,
                               a["engine_id"], boots)
            self.agent.start()
            self.gate = gate
        except Exception as exc:  # noqa: BLE001 - a port that cannot be bound: said in the status, time goes on
            with self._early_lock:
                self.error = f"cannot serve on {a['listen']} port {a['port']}: {exc}"
                self._early.clear()
            self.agent = None
            log.error("SNMP agent: %s", self.error)
            loop.close()
            ready.set()
            return
        self._up(loop)
        log.info("SNMP agent on %s port %d", a["listen"], int(a["port"]))
        ready.set()
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

    def notify(self, message: dict[str, Any]) -> None:
        """A notification to send (the link's thread); kept until the agent is up when it is not yet."""
        with self._early_lock:
            agent, loop = self.agent, self.loop
            if agent is None or loop is None:
                if not self.error and len(self._early) < EARLY_NOTIFICATIONS:
                    self._early.append(message)
                return
        loop.call_soon_threadsafe(agent.notify, tuple(message["oid"]), message["binds"],
                                  int(message["uptime_ticks"]))

    def _up(self, loop: asyncio.AbstractEventLoop) -> None:
        """The agent is up on ``loop`` (its thread): what came before goes first."""
        with self._early_lock:
            self.loop = loop
            early, self._early = self._early, []
        for message in early:
            loop.call_soon(self.agent.notify, tuple(message["oid"]), message["binds"],  # type: ignore[union-attr]
                           int(message["uptime_ticks"]))

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)

    def stats(self) -> dict[str, Any]:
        agent = self.agent
        gate = getattr(self, "gate", None)
        if agent is None or gate is None:
            return {"serving": False, "error": self.error}
        return {"serving": True, "error": self.error, "sent": agent.sent, "send_errors": agent.send_errors,
                "denied": gate.denied, "rate_limited": gate.limited, "malformed": gate.malformed,
                "paced": gate.pacer.paced if gate.pacer is not None else 0,
                "too_big": agent.guard.too_big, "bulk_cut": agent.guard.cut, "failed": agent.guard.failed,
                **replay_stats(agent)}


def child_main(fd: int) -> int:
    """The SNMP agent's process: started by ``SnmpPart`` with its end of the socket pair as ``fd``."""
    started = start_child(fd, "SNMP agent")
    if started is None:
        return 1
    side = AgentSide(started)
    ready = threading.Event()
    thread = threading.Thread(target=side.run, args=(ready,), name="snmp", daemon=True)
    thread.start()
    ready.wait(30)
    started.report_every(side.stats, "snmp-report")

    def on_message(message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "status":
            side.take(message)
        elif kind == "notify":
            side.notify(message)

    reason = started.serve(on_message)
    log.debug("SNMP agent process: %s", reason)
    side.stop()
    thread.join(5)
    return 0


if __name__ == "__main__":
    sys.exit(child_main(int(sys.argv[1])))
