"""Composition root: builds the engines, picks simulated or real hardware, routes events, serves the control socket.

``Appliance`` holds the core engines and routes every event between them; it does no I/O itself and takes its time
from the scheduler, so the same object runs under the simulated scheduler in tests and scenarios.  ``run`` is the
edge that builds the asyncio loop, the hardware (or the simulated world), the control socket and signal handling.
Nothing else in the package knows how the parts are wired.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

from appliance import __version__, leap
from appliance.config import Config
from appliance.events import (Alarm, DeviceEvent, GnssEpoch, LeapInfo, PairedSecond, PpsEdge, ReceiverState,
                              ReceiverStateChanged, Rejected, Severity, TimeLabel, TimePulseInfo)
from appliance.gnss.pairing import PpsPairer
from appliance.gnss.receiver import GnssReceiver
from appliance.sched import AsyncioScheduler, Scheduler, every
from appliance.status import ClockStatus, PpsStatus, TimeStatus, summarize
from appliance.utcoffset import UtcOffset

log = logging.getLogger("appliance")
NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
RECEIVER_ALARMS = {
    ReceiverState.DISCONNECTED: ("gnss-disconnected", Severity.MAJOR, "GNSS receiver disconnected"),
    ReceiverState.NO_DATA: ("gnss-no-data", Severity.MAJOR, "GNSS receiver sends nothing decodable"),
    ReceiverState.NO_FIX: ("gnss-no-fix", Severity.MAJOR, "GNSS receiver has no fix"),
}


def load_leap_table(config: Config) -> leap.LeapTable:
    """The packaged table, or the configured file if it expires later; a bad file is logged and ignored."""
    table = leap.LeapTable.load_default()
    path = str(config["clock.leap_file"])
    if path:
        try:
            other = leap.LeapTable.load_file(path)
        except (OSError, ValueError) as exc:
            log.error("clock.leap_file %s not used: %s", path, exc)
            return table
        if (other.expires_posix_s or 0) > (table.expires_posix_s or 0):
            return other
    return table


class Appliance:
    def __init__(self, config: Config, scheduler: Scheduler, raw_now: Callable[[], int], mode: str,
                 table: leap.LeapTable | None = None, device: str = "simulated"):
        self.config = config
        self.scheduler = scheduler
        self.raw_now = raw_now
        self.mode = mode
        self.started_at_ns = scheduler.now_ns()
        self.utc = UtcOffset(table or load_leap_table(config))
        self.receiver = GnssReceiver(lambda: self.utc.table, device=device,
                                     epoch_idle_ns=int(config["gnss.epoch_idle_ms"]) * NS_PER_MS,
                                     no_data_timeout_ns=int(config["gnss.no_data_timeout_s"]) * NS_PER_S)
        self.pairer = PpsPairer(int(config["gnss.label_max_age_ms"]) * NS_PER_MS, int(config["gnss.cable_delay_ns"]))
        self.pps_source = "none"
        self.pps_edges = 0
        self.paired: list[PairedSecond] = []  # the most recent, for the phase detector and tests
        self.alarms: dict[str, Alarm] = {}
        self.alarm_history: list[Alarm] = []
        self.listeners: list[Callable[[object], None]] = []
        self._last_sats = ()
        self._last_rejects_logged: dict[str, int] = {}
        self._timers = [every(scheduler, 200 * NS_PER_MS, self._tick), every(scheduler, 60 * NS_PER_S, self._minute)]
        self._alarms(self.utc.check(self.scheduler.now_ns()))

    # --- inputs from the edges --------------------------------------------------------------------------
    def on_bytes(self, data: bytes, rx_raw_ns: int) -> None:
        self._route(self.receiver.feed(data, rx_raw_ns))

    def on_edge(self, edge: PpsEdge) -> None:
        self.pps_edges += 1
        self.pps_source = edge.source
        self._route(self.pairer.on_edge(edge))

    def on_device(self, event: DeviceEvent) -> None:
        self._route(self.receiver.on_device(event, self.raw_now()))

    def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()

    # --- routing -------------------------------------------------------------------------------------------
    def _route(self, events: list[object]) -> None:
        for ev in events:
            self._handle(ev)
            for listener in self.listeners:
                listener(ev)

    def _handle(self, ev: object) -> None:
        if isinstance(ev, GnssEpoch):
            if ev.satellites:
                self._last_sats = ev.satellites
        elif isinstance(ev, TimeLabel):
            self._route(self.pairer.on_label(ev))
        elif isinstance(ev, TimePulseInfo):
            self.pairer.on_time_pulse(ev)
        elif isinstance(ev, PairedSecond):
            self.paired = (self.paired + [ev])[-64:]
        elif isinstance(ev, LeapInfo):
            self._alarms(self.utc.on_receiver(ev, self.scheduler.now_ns()))
        elif isinstance(ev, ReceiverStateChanged):
            log.info("receiver %s: %s -> %s (%s)", self.receiver.name, ev.old.value, ev.new.value, ev.reason)
            self._receiver_alarms(ev)
        elif isinstance(ev, Rejected) and ev.what == "pps":
            log.debug("PPS pairing rejected: %s %s", ev.reason, ev.detail)

    def _receiver_alarms(self, ev: ReceiverStateChanged) -> None:
        now = self.scheduler.now_ns()
        wanted = RECEIVER_ALARMS.get(ev.new)
        if ev.old is ReceiverState.DISCONNECTED and ev.new is ReceiverState.NO_DATA:
            wanted = None  # the line just came up: silence is an alarm only once the timeout says so
        out = [Alarm(code, sev, False, text, now) for state, (code, sev, text) in
               RECEIVER_ALARMS.items() if code in self.alarms and (wanted is None or wanted[0] != code)]
        if wanted is not None and wanted[0] not in self.alarms:
            out.append(Alarm(wanted[0], wanted[1], True, f"{wanted[2]} ({ev.reason})", now))
        self._alarms(out)

    def _alarms(self, alarms: list[Alarm]) -> None:
        for alarm in alarms:
            if alarm.raised:
                self.alarms[alarm.code] = alarm
            else:
                self.alarms.pop(alarm.code, None)
            self.alarm_history = (self.alarm_history + [alarm])[-256:]
            (log.warning if alarm.raised else log.info)("alarm %s %s: %s", alarm.code,
                                                        "raised" if alarm.raised else "cleared", alarm.text)
            for listener in self.listeners:
                listener(alarm)

    # --- timers -----------------------------------------------------------------------------------------
    def _tick(self) -> None:
        self._route(self.receiver.tick(self.raw_now()))

    def _minute(self) -> None:
        self._alarms(self.utc.check(self.scheduler.now_ns()))
        rejected = dict(self.receiver.rejected)
        grown = {k: v - self._last_rejects_logged.get(k, 0) for k, v in rejected.items()
                 if v != self._last_rejects_logged.get(k, 0)}
        if grown:
            log.warning("receiver %s rejected input in the last minute: %s; latest: %s", self.receiver.name,
                        ", ".join(f"{k} {v}" for k, v in sorted(grown.items())),
                        self.receiver.snapshot().last_rejects[-1:])
        self._last_rejects_logged = rejected

    # --- the read model -------------------------------------------------------------------------------------
    def status(self) -> TimeStatus:
        now = self.scheduler.now_ns()
        table = self.utc.table
        rx = self.receiver.snapshot()
        last = self.pairer.last
        pps = PpsStatus(self.pps_source, self.pps_edges, self.pairer.paired, dict(self.pairer.rejected),
                        last.edge_raw_ns if last else None, last.qerr_ps if last else None)
        return TimeStatus(now, leap.tai_to_utc(now, table).iso_ms(), self.mode, __version__, self.started_at_ns,
                          rx, self._last_sats, summarize(self._last_sats), pps, self.utc.snapshot(now),
                          ClockStatus(state_since_ns=self.started_at_ns, oscillator=str(self.config["clock.oscillator"])),
                          tuple(self.alarms.values()))

    def handle_command(self, request: dict[str, Any]) -> dict[str, Any]:
        """Control-socket requests (already authenticated by the socket's peer check)."""
        from appliance.status import to_dict

        cmd = request.get("cmd")
        if cmd == "status":
            return {"ok": True, "status": to_dict(self.status())}
        return {"ok": False, "error": f"unknown command {cmd!r}"}


# --- the edge: run the appliance on this host ------------------------------------------------------------
def run(config: Config) -> int:
    """Run until SIGINT/SIGTERM.  Returns the process exit status."""
    try:
        return asyncio.run(_main(config))
    except KeyboardInterrupt:
        return 0


async def _main(config: Config) -> int:
    from appliance.control import ControlError, ControlServer

    loop = asyncio.get_running_loop()
    table = load_leap_table(config)
    tai_now = lambda: leap.posix_to_tai_ns(time.time_ns(), table)  # noqa: E731  (live true time: the host clock)
    scheduler = AsyncioScheduler(loop, tai_now)
    device = str(config["gnss.device"])
    parts: list[Any] = []
    if device:
        app = Appliance(config, scheduler, time.time_ns, "hardware", table, device=device)
        parts += _hardware_edges(config, app, loop)
    else:
        app, world = simulated(config, scheduler, table)
        parts.append(world)
    server = ControlServer(config.control_socket_path(), app.handle_command)
    try:
        await server.start()
    except (ControlError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info("appliance %s running (%s), control socket %s", __version__, app.mode, server.path)
    for part in parts:
        part.start()
    await stop.wait()
    log.info("stopping")
    for part in parts:
        part.stop()
    app.stop()
    await server.stop()
    log.info("stopped")
    return 0


def simulated(config: Config, scheduler: Scheduler, table: leap.LeapTable,
              world_table: leap.LeapTable | None = None) -> tuple[Appliance, Any]:
    """The appliance on the simulated world (the embedded default).  ``world_table`` is the truth about UTC the
    simulated sky broadcasts, when a scenario wants it to differ from what the appliance was shipped with."""
    from appliance.sim.world import SimWorld

    holder: dict[str, Any] = {}
    app = Appliance(config, scheduler, lambda: holder["world"].raw_ns(), "simulated", table)
    world = SimWorld(scheduler, int(config["sim.seed"]), str(config["clock.oscillator"]), world_table or table,
                     app.on_bytes, app.on_edge)
    holder["world"] = world
    return app, world


def _hardware_edges(config: Config, app: Appliance, loop: asyncio.AbstractEventLoop) -> list[Any]:
    from appliance.gnss.serial_reader import SerialReader

    def post(fn: Callable[..., None]) -> Callable[..., None]:
        return lambda *args: loop.call_soon_threadsafe(fn, *args)

    edges: list[Any] = [SerialReader(str(config["gnss.device"]), int(config["gnss.baud"]), post(app.on_bytes),
                                     post(app.on_device), max_backoff_s=float(config["gnss.reconnect_max_s"]))]
    pps_path = str(config["gnss.pps_device"])
    if pps_path:
        from appliance.gnss.pps_linux import PpsReader

        edges.append(PpsReader(pps_path, post(app.on_edge),
                               on_error=lambda msg: log.warning("PPS %s: %s", pps_path, msg)))
    return edges
