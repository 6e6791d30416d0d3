"""The runtime: owns the parts, runs the router on the scheduler's timers, and performs the router's effects.

Edge-side, but it reads no clock itself: the counter (``raw_now``) and the host clock (``host_now``) are handed in,
so the same runtime runs live on the asyncio scheduler and in simulated time on the simulated one.  Every part (a
receiver's reader, an output, the console, the SNMP agent, the audit trail) is started and stopped through the same
small protocol (``start``, ``stop``) and was built with the callbacks it needs (``deliver``, ``subscribe``,
``status``, ``command`` ...), never with this object.  What the parts report of themselves comes back through the
status functions they were registered with, into the one read model (``Router.snapshot``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from appliance import __version__, leap
from appliance.clock.learned import LearnedState
from appliance.events import Alarm, ReceiverBaud, ReceiverWrite
from appliance.outputs.ntp import publish
from appliance.protocol.clockmap import ClockMap
from appliance.monitor import Answer
from appliance.readmodel import EdgeStatus
from appliance.router import (
    AuditCommand,
    ClockReading,
    Notify,
    Now,
    PublishClock,
    Router,
    SecondDone,
)
from appliance.runtime.outputs import PulseOutputs
from appliance.sched import Scheduler, every
from appliance.status import OutputsStatus, TimeStatus, to_dict
from appliance.units import NS_PER_MS, NS_PER_S

log = logging.getLogger("appliance")
Listener = Callable[[object], None]
Auditor = Callable[[str, str, str, dict[str, Any]], Any]  # kind, actor, text, detail


class ReceiverLine(Protocol):
    """A receiver's line as the core's commands see it."""

    def write(self, data: bytes) -> None: ...

    def set_baud(self, baud: int) -> None: ...


class Part(Protocol):
    """Anything the runtime starts and stops with the appliance."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class ClockConsumer(Protocol):
    """An output that serves the clock from a map (NTP workers, the PTP port): every second, and at every change."""

    def publish(self, clock_map: ClockMap, status: TimeStatus) -> None: ...


class SecondConsumer(Protocol):
    """An output planned a second ahead (1PPS, IRIG-B) or a kernel clock's status, once a second."""

    def on_second(self, reading: ClockReading) -> None: ...


class Runtime:
    def __init__(self, router: Router, scheduler: Scheduler, raw_now: Callable[[], int], mode: str, backend: str,
                 save_state: Callable[[LearnedState], None] | None = None, save_interval_s: int = 600,
                 served_at_host: Callable[[int], tuple[int, float]] | None = None,
                 sim_time_error: Callable[[], int] | None = None, world: Any = None):
        self.router, self.scheduler, self.raw_now = router, scheduler, raw_now
        self.mode, self.backend = mode, backend
        self.served_at_host = served_at_host or router.served_at_host
        self.world = world  # the simulated world, when the appliance runs on one (drills: world commands)
        self._save_state, self._sim_time_error = save_state, sim_time_error
        self.started_at_ns = scheduler.now_ns()
        self.parts: list[Part] = []
        self.listeners: list[Listener] = []
        self._outputs: list[Callable[[], dict[str, Any]]] = []
        self._inputs: dict[str, Callable[[], dict[str, Any]]] = {}
        self._lines: dict[str, ReceiverLine] = {}  # reference -> its receiver's line, for what the core sends
        self._clock_consumers: list[ClockConsumer] = []
        self._second_consumers: list[SecondConsumer] = []
        self._auditor: Auditor | None = None
        self._cross_check: Callable[[], dict[str, Any]] | None = None
        self._refid, self._generation = "GNSS", 0
        self.pulses: PulseOutputs | None = None  # the 1PPS and IRIG-B plans, when the settings ask for either
        self.kernel_clock: Any = None  # the kernel clock the appliance steers (KernelClock), when it steers one
        self._timers = [every(scheduler, 200 * NS_PER_MS, self._tick), every(scheduler, NS_PER_S, self._second),
                        every(scheduler, 60 * NS_PER_S, self._minute),
                        every(scheduler, save_interval_s * NS_PER_S, self.save_learned)]

    # --- wiring (the composition root calls these while it builds) ------------------------------------------------
    def add(self, part: Part) -> None:
        """A part started and stopped with the appliance.  One that writes audit records of its own (``audit_to``:
        the PTP port's management SETs) is handed ``record``, since the audit trail opens after the outputs."""
        self.parts.append(part)
        audit_to = getattr(part, "audit_to", None)
        if callable(audit_to):
            audit_to(self.record)

    def add_output(self, status: Callable[[], dict[str, Any]]) -> None:
        """An output's status: a dict of output name -> its state and counters (one output may show as several)."""
        self._outputs.append(status)

    def add_line(self, ref: str, line: ReceiverLine) -> None:
        """Where a receiver's set-up commands and speed changes go (its serial line, or the simulated receiver)."""
        self._lines[ref] = line

    def add_input(self, ref: str, status: Callable[[], dict[str, Any]]) -> None:
        """What a reference's input edge reports, shown in that reference's row."""
        self._inputs[ref] = status

    def add_clock_consumer(self, consumer: ClockConsumer) -> None:
        self._clock_consumers.append(consumer)

    def add_second_consumer(self, consumer: SecondConsumer) -> None:
        self._second_consumers.append(consumer)

    def audit_to(self, auditor: Auditor | None) -> None:
        """Where operator commands are recorded (the audit trail), once it is open."""
        self._auditor = auditor

    def record(self, kind: str, actor: str, text: str, detail: dict[str, Any]) -> None:
        """An audit record a part writes of itself (a PTP management SET, a foreign grandmaster that silenced the PTP
        port); none while no audit trail is open."""
        if self._auditor is not None:
            self._auditor(kind, actor, text, detail)

    def cross_check_status(self, status: Callable[[], dict[str, Any]]) -> None:
        self._cross_check = status

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """``listener`` hears every routed event and alarm change; the returned function unsubscribes it."""
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener) if listener in self.listeners else None

    # --- inputs from the edges ------------------------------------------------------------------------------------
    def now(self) -> Now:
        host_ns = leap.tai_to_posix_ns(self.scheduler.now_ns(), self.router.leap_table())[0]
        return Now(self.raw_now(), host_ns)

    def deliver(self, ref: str, item: object) -> None:
        """What a reference's edge delivered, on the loop: to that reference's driver."""
        self._perform(self.router.input(ref, item, self.now()))

    def cross_check(self, source: str, offset_ns: float, uncertainty_ns: float) -> None:
        """An NTP cross-check of GNSS time, on the loop."""
        self._perform(self.router.cross_check(source, offset_ns, uncertainty_ns, self.now()))

    def monitor_answer(self, answer: Answer) -> None:
        """A downstream client's poll result (the sync monitor), on the loop."""
        self._perform(self.router.monitor_answer(answer, self.now()))

    def alarm(self, alarm: Alarm) -> None:
        """An alarm an edge raises or clears (an output that cannot serve)."""
        self._perform(self.router.raise_alarms([alarm]))

    def served_at_past_host(self, host_ns: int) -> int:
        """The served time at a host instant a moment ago (the PTP slave port's timestamps)."""
        return self.router.served_at_past_host(host_ns, self.now())

    def restore(self, learned: LearnedState, clock_kept_time: bool) -> None:
        self._perform(self.router.restore(learned, self.now(), clock_kept_time))

    # --- lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> None:
        for part in self.parts:
            part.start()

    def stop(self) -> None:
        for part in self.parts:
            part.stop()
        for timer in self._timers:
            timer.cancel()
        self.save_learned()

    # --- timers -----------------------------------------------------------------------------------------------
    def _tick(self) -> None:
        self._perform(self.router.tick(self.now()))

    def _second(self) -> None:
        self._perform(self.router.second(self.now()))

    def _minute(self) -> None:
        self._perform(self.router.minute(self.now()))

    def save_learned(self) -> None:
        if self._save_state is None:
            return
        learned = self.router.learned_state(self.now())
        if learned is not None:
            try:
                self._save_state(learned)
            except OSError as exc:
                log.error("cannot save the learned clock state: %s", exc)

    # --- effects ----------------------------------------------------------------------------------------------
    def _perform(self, effects: list[object]) -> None:
        for effect in effects:
            if isinstance(effect, Notify):
                for listener in list(self.listeners):
                    listener(effect.event)
            elif isinstance(effect, PublishClock):
                self.publish_clock()
            elif isinstance(effect, SecondDone):
                self.publish_clock()
                if self._second_consumers:  # a reading costs a clock snapshot: only when someone takes it
                    reading = self.router.reading(effect.now)
                    for consumer in self._second_consumers:
                        consumer.on_second(reading)
            elif isinstance(effect, ReceiverWrite):
                line = self._lines.get(effect.ref)
                if line is not None:
                    line.write(effect.data)
                else:
                    log.debug("receiver %s: no line to send %s on", effect.ref, effect.what)
            elif isinstance(effect, ReceiverBaud):
                line = self._lines.get(effect.ref)
                if line is not None:
                    line.set_baud(effect.baud)
            elif isinstance(effect, AuditCommand) and self._auditor is not None:
                self._auditor(effect.kind, effect.actor, effect.text, effect.detail)

    def publish_clock(self) -> None:
        """Hand the clock to the network outputs: NTP workers and the PTP port read the same map."""
        if not self._clock_consumers:
            return
        now = self.now()
        status = self.status(now)
        cmap = self._clock_map(status, now.host_ns)
        for consumer in self._clock_consumers:
            consumer.publish(cmap, status)

    def clock_map(self, host_ns: int) -> ClockMap:
        """The map NTP workers serve from, anchored at host time ``host_ns``."""
        return self._clock_map(self.status(), host_ns)

    def _clock_map(self, status: TimeStatus, host_ns: int) -> ClockMap:
        if status.clock.state == "LOCKED":
            self._refid = publish.refid_for(status, self.router.upstream_peer)
        self._generation += 1
        served, rate_ppb = self.served_at_host(host_ns)
        return publish.clock_map(status, host_ns, served, rate_ppb, self._refid, self._generation)

    # --- the read model ---------------------------------------------------------------------------------------
    def now_tai_ns(self) -> int:
        """The served (disciplined) time now."""
        return self.router.now_tai_ns(self.now())

    def leap_table(self) -> leap.LeapTable:
        """The leap-second table in use now (it grows when the receiver announces a leap second)."""
        return self.router.leap_table()

    def status(self, now: Now | None = None) -> TimeStatus:
        """The one read model: the router's snapshot with what the outputs and input edges report of themselves."""
        reports: dict[str, Any] = {}
        for output in self._outputs:
            reports.update(output())
        edges = EdgeStatus(self.mode, __version__, self.started_at_ns, self.backend, OutputsStatus(**reports),
                           {name: status() for name, status in self._inputs.items()},
                           None if self._cross_check is None else self._cross_check(),
                           None if self._sim_time_error is None else self._sim_time_error())
        return self.router.snapshot(now or self.now(), edges)

    # --- operator commands ------------------------------------------------------------------------------------
    def handle_command(self, request: dict[str, Any]) -> dict[str, Any]:
        """Control-socket requests (already authenticated by the socket's peer check), console and SNMP commands."""
        cmd, who = request.get("cmd"), str(request.get("user", "operator"))
        action = str(request.get("action", ""))
        if cmd == "status":
            return {"ok": True, "status": to_dict(self.status())}
        if cmd == "world":
            return self._world(action, who, str(request.get("value", "")))
        if cmd == "note":
            return self._note(request, who)
        reason = " ".join(str(request.get("reason", "")).split())[:200]  # one line: it goes into the audit text
        if cmd == "holdover":
            reply, effects = self.router.holdover(action, who, self.now(), reason)
        elif cmd == "integrity":
            reply, effects = self.router.integrity(action, who, self.now(), reason)
        elif cmd == "reference":
            reply, effects = self.router.reference(action, str(request.get("name", "")), who, self.now(), reason)
        elif cmd == "alarm" and action == "ack":
            reply, effects = self.router.acknowledge(str(request.get("code", "")), who, self.now(), reason)
        else:
            return {"ok": False, "error": f"unknown command {cmd!r}"}
        self._perform(effects)
        return reply

    NOTES = ("backup.created", "restore.refused")  # what a command line tool may record through the appliance

    def _note(self, request: dict[str, Any], who: str) -> dict[str, Any]:
        """An audit record of something done beside the running appliance (a backup written)."""
        kind, text, detail = request.get("kind"), str(request.get("text", ""))[:1000], request.get("detail") or {}
        if kind not in self.NOTES or not isinstance(detail, dict):
            return {"ok": False, "error": f"no such note {kind!r}"}
        if self._auditor is None:
            return {"ok": False, "error": "the audit trail is off"}
        self._auditor(str(kind), who, text, detail)
        return {"ok": True}

    def _world(self, action: str, who: str, value: str) -> dict[str, Any]:
        """The simulated world, for drills and tests: the sky, the receiver, and attacks on it."""
        if self.world is None:
            return {"ok": False, "error": "there is no simulated world: the appliance runs on hardware"}
        from appliance.sim import drills

        try:
            text = drills.apply(self.world, action, value)
        except ValueError as exc:
            return {"ok": False, "error": f"world {action}: {exc}" if action in drills.WORLD_ACTIONS else str(exc)}
        log.warning("operator %s: simulated world: %s", who, text)
        if self._auditor is not None:
            self._auditor("command", who, f"simulated world: {text}", {"command": "world", "action": action,
                                                                       "value": value})
        return {"ok": True, "done": text}

    def apply_live(self, name: str, value: Any) -> bool:
        """Take a changed setting without a restart where the running parts can; False if it needs a restart."""
        if name == "log.level":
            logging.getLogger().setLevel(getattr(logging, str(value).upper(), logging.INFO))
            return True
        return self.router.apply_live(name, value)

    def sim_time_error_ns(self) -> int | None:
        """Served minus true time, known only in simulation."""
        return None if self._sim_time_error is None else self._sim_time_error()
