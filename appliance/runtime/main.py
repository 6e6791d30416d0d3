"""``appliance run``: the event loop, the platform, every part the settings ask for, the control socket, signals.

Edge (the asyncio loop, the host clock, signals).  Builds the runtime on the simulated world or on hardware, adds the
parts in the order they start (inputs, outputs, the console, SNMP, the audit trail last so it records the others
as enabled), restores what the clock learned in the last run, and runs until SIGINT or SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from typing import Any

from appliance import __version__, leap
from appliance.clock.learned import LearnedState
from appliance.config import Config
from appliance.edge.input_files import load_leap_table
from appliance.events import Alarm, Severity
from appliance.runtime import inputs, outputs, surfaces
from appliance.runtime.platforms import hardware, simulated
from appliance.runtime.runtime import Runtime
from appliance.units import NS_PER_S

log = logging.getLogger("appliance")


def run(config: Config) -> int:
    """Run until SIGINT/SIGTERM.  Returns the process exit status."""
    try:
        return asyncio.run(_main(config))
    except KeyboardInterrupt:
        return 0


async def _main(config: Config) -> int:
    from appliance.edge import persist
    from appliance.edge.control import ControlError, ControlServer
    from appliance.edge.loop import AsyncioScheduler

    loop = asyncio.get_running_loop()
    table = load_leap_table(config)
    scheduler = AsyncioScheduler(loop, lambda: leap.posix_to_tai_ns(time.time_ns(), table))  # true time: the host
    state_dir = config.state_path()
    try:
        persist.ensure_state_dir(state_dir)
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1
    learned, warning = persist.load_state(state_dir, config.clock.oscillator)
    if warning:
        log.warning("%s", warning)
    learned = _fresh(learned, scheduler.now_ns(), config.clock.restore_max_age_s)
    try:
        runtime = _platform(config, scheduler, table, learned is not None, loop)
        if learned is not None:
            runtime.restore(learned, _clock_kept_time(runtime))
        _parts(config, runtime, loop, warm=learned is not None)
    except (OSError, ValueError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    server = ControlServer(config.control_socket_path(), runtime.handle_command)
    try:
        await server.start()
    except (ControlError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info("appliance %s running (%s, clock %s), control socket %s", __version__, runtime.mode, runtime.backend,
             server.path)
    runtime.start()
    if config.notes:  # console settings set aside at load: the appliance runs without them, and says so
        runtime.alarm(Alarm("config-console-ignored", Severity.WARNING, True,
                            f"saved console settings ignored: {'; '.join(config.notes)}"[:500],
                            runtime.now_tai_ns()))
    await stop.wait()
    log.info("stopping")
    runtime.stop()
    await server.stop()
    log.info("stopped")
    return 0


def _platform(config: Config, scheduler: Any, table: leap.LeapTable, warm: bool,
              loop: asyncio.AbstractEventLoop) -> Runtime:
    """The runtime on a real receiver (its serial line and PPS device as parts), or on the simulated world."""
    from appliance.edge import persist

    state_dir = config.state_path()

    def save(state: LearnedState) -> None:
        persist.save_state(state_dir, state)

    if config.gnss.device:
        runtime = hardware(config, scheduler, table, save)
        for part in inputs.receivers(config, runtime.deliver, loop.call_soon_threadsafe, runtime.add_line):
            runtime.add(part)
        return runtime
    if config.clock.backend not in ("auto", "simulated"):
        log.warning("clock.backend=%s needs a receiver (gnss.device): running the simulated world instead",
                    config.clock.backend)
    runtime, world = simulated(config, scheduler, table, save_state=save, warm=warm)
    runtime.add(world)
    return runtime


def _parts(config: Config, runtime: Runtime, loop: asyncio.AbstractEventLoop, warm: bool) -> None:
    """Every input, output and surface the settings ask for, in the order they start."""
    post = loop.call_soon_threadsafe
    host_now = lambda: runtime.now().host_ns  # noqa: E731
    if config.top.cpu_latency_us >= 0:  # first: held before the outputs start serving
        from appliance.edge.cpu_latency import CpuLatencyHold

        _output(runtime, CpuLatencyHold(config.top.cpu_latency_us))
    if config.ntp.enabled:
        ntp = outputs.ntp_output(config, lambda: runtime.clock_map(host_now()), runtime.alarm, runtime.now_tai_ns)
        _output(runtime, ntp, clock=True)
    if config.ptp.interface:
        ptp = outputs.ptp_output(config, runtime.clock_map(host_now()), runtime.status(), runtime.publish_clock,
                                 runtime.alarm, runtime.now_tai_ns)
        _output(runtime, ptp, clock=True)
    if config.serial_out.device:
        _output(runtime, outputs.serial_output(config, runtime.leap_table, runtime.status,
                                               runtime.served_at_host))
    runtime.add(outputs.pulse_sinks(config, runtime.pulses, runtime.raw_now, time.time_ns,
                                    runtime.leap_table))
    audit = surfaces.audit_trail(config, runtime, loop)
    if config.web.enabled:
        _output(runtime, surfaces.web_console(config, runtime, loop, audit))
    served_posix = lambda host_ns: leap.tai_to_posix_ns(runtime.served_at_host(host_ns)[0],  # noqa: E731
                                                        runtime.leap_table())[0]
    r = config.references
    if config.integrity.enabled and config.integrity.ntp_servers:
        poller = inputs.cross_check_poller(config, runtime.cross_check, post, served_posix)
        runtime.cross_check_status(poller.edge.status)
        runtime.add(poller)
    if r.ntp_servers:
        _input(runtime, "ntp", inputs.ntp_upstream(config, runtime.deliver, post, served_posix))
    if r.ptp_interface:
        tai_utc_s = runtime.leap_table().tai_utc_at_tai_ns(runtime.now_tai_ns())
        _input(runtime, "ptp", inputs.ptp_upstream(config, runtime.deliver, runtime.served_at_past_host, tai_utc_s))
    if r.irig_input:
        year = leap.tai_to_utc(runtime.now_tai_ns(), runtime.leap_table()).year
        _input(runtime, "irig", inputs.irig_input(config, runtime.deliver, post, runtime.leap_table(), year))
    if r.pps_in_device:
        _input(runtime, "pps", inputs.pps_input(config, runtime.deliver, post))
    monitor = runtime.router.monitor
    if monitor is not None:
        runtime.add(inputs.sync_monitor_poller(
            config, monitor.targets, runtime.monitor_answer, post, lambda host_ns: runtime.served_at_host(host_ns)[0],
            lambda tai_ns: leap.tai_to_posix_ns(tai_ns, runtime.leap_table())[0]))
    if config.snmp.enabled:
        _output(runtime, surfaces.snmp_agent(config, runtime, loop, warm, audit))
    _output(runtime, outputs.Output("audit", audit))


def _output(runtime: Runtime, part: Any, clock: bool = False) -> None:
    runtime.add(part)
    runtime.add_output(part.status)
    if clock:
        runtime.add_clock_consumer(part)


def _input(runtime: Runtime, ref: str, part: Any) -> None:
    runtime.add(part)
    runtime.add_input(ref, part.status)


def _fresh(learned: LearnedState | None, now_tai_ns: int, max_age_s: int) -> LearnedState | None:
    if learned is None:
        return None
    age_s = (now_tai_ns - learned.saved_at_tai_ns) / NS_PER_S
    if not 0 <= age_s <= max_age_s or learned.state not in ("LOCKED", "HOLDOVER"):
        log.warning("learned clock state (%s, %.0f s old) not used: cold start", learned.state, age_s)
        return None
    return learned


def _clock_kept_time(runtime: Runtime) -> bool:
    """Whether the served clock ran on through the restart: the simulated oscillator starts where it was, and a kernel
    clock the appliance had published as synchronized is still marked so (no reboot, nobody set it since); the host
    clock under the software backend is someone else's, so nothing vouches for it."""
    if runtime.mode == "simulated":
        return True
    kernel = runtime.kernel_clock
    if kernel is None or kernel.is_phc:
        return False
    try:
        return kernel.query().synchronized
    except OSError:
        return False
