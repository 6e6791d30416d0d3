"""What the appliance runs on: the simulated world (the embedded default) or a real receiver and the host's clocks.

Edge wiring.  ``simulated`` builds the world (true time, the oscillator, its receivers and upstream references), a
software clock on the oscillator's counter, and the runtime whose references the world feeds; ``hardware`` builds
the clock backend a real receiver disciplines (a software clock over the host clock, the system clock or a PHC).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from appliance import leap
from appliance.clock.learned import LearnedState
from appliance.clock.service import ClockBackend
from appliance.clock.softclock import SoftClock
from appliance.config import Config, parse_position
from appliance.events import PpsEdge
from appliance.refs.gnss import ReceiverBytes
from appliance.refs.model import PairedTime
from appliance.runtime.build import Platform, assemble
from appliance.runtime.runtime import Runtime
from appliance.sched import Scheduler
from appliance.units import NS_PER_S


class _Late:
    """The runtime's ``deliver``, for callbacks that must exist before the runtime does (the world's receivers)."""

    runtime: Runtime | None = None

    def to(self, ref: str) -> tuple[Callable[[bytes, int], None], Callable[[PpsEdge], None]]:
        def on_bytes(data: bytes, rx_raw_ns: int) -> None:
            assert self.runtime is not None
            self.runtime.deliver(ref, ReceiverBytes(data, rx_raw_ns))

        def on_edge(edge: PpsEdge) -> None:
            assert self.runtime is not None
            self.runtime.deliver(ref, edge)
        return on_bytes, on_edge

    def deliver_paired(self, paired: PairedTime) -> None:
        """A simulated upstream's time, to the reference it names."""
        assert self.runtime is not None
        self.runtime.deliver(paired.ref, paired)


def simulated(config: Config, scheduler: Scheduler, table: leap.LeapTable,
              world_table: leap.LeapTable | None = None, save_state: Callable[[LearnedState], None] | None = None,
              warm: bool = False) -> tuple[Runtime, Any]:
    """The appliance on the simulated world (the embedded default).  ``world_table`` is the truth about UTC the
    simulated sky broadcasts, when a scenario wants it to differ from what the appliance was shipped with.  ``warm``:
    the clock kept time across a restart (a restored state), so it does not start off by the cold-start error."""
    from appliance.sim.receiver import SimPosition
    from appliance.sim.upstream import SimUpstream
    from appliance.sim.world import SimWorld

    late, s = _Late(), config.sim
    first, *others = config.receivers
    world = SimWorld(scheduler, s.seed, config.clock.oscillator, world_table or table, *late.to(first.name),
                     family=s.receiver)
    for rx in others:  # each on an antenna of its own
        world.add_receiver(s.seed + rx.number - 1, *late.to(rx.name))
    for slot, rx in zip(world.receivers, config.receivers):
        if rx.position.strip():
            slot.receiver.position = SimPosition(*parse_position(rx.position))
    error_ns = 0 if warm else s.initial_clock_error_ns
    start_true = world.true_ns()  # read once: the first oscillator reading can take milliseconds of host time
    backend = SoftClock(world.raw_ns(start_true), start_true + error_ns)

    def time_error_ns() -> int:
        true = world.true_ns()
        return backend.served_ns(world.raw_ns(true)) - true

    def served_at_host(host_ns: int) -> tuple[int, float]:
        true = leap.posix_to_tai_ns(host_ns, table)
        y = world.oscillator.smooth_frequency_ppb(true)  # the counter's rate against true (host) time
        return backend.served_ns(world.counter_ns(true)), y + backend.freq_ppb + y * backend.freq_ppb * 1e-9

    platform = Platform("simulated", world.raw_ns, backend, "simulated", served_at_host=served_at_host,
                        sim_time_error=time_error_ns, world=world)
    runtime = late.runtime = assemble(config, scheduler, platform, table, save_state)
    for index, rx in enumerate(config.receivers):  # the set-up's commands reach the simulated receivers
        runtime.add_line(rx.name, world.line(index))
    r = config.references
    if s.ptp_upstream:
        world.upstreams["ptp"] = SimUpstream("ptp", scheduler, world.raw_ns, s.seed, NS_PER_S, s.ptp_noise_ns,
                                             s.ptp_asymmetry_ns, float(r.ptp_accuracy_ns), late.deliver_paired)
    if s.ntp_upstream:
        world.upstreams["ntp"] = SimUpstream("ntp", scheduler, world.raw_ns, s.seed, r.ntp_interval_s * NS_PER_S,
                                             s.ntp_noise_ns, 0.0, float(r.ntp_accuracy_ns), late.deliver_paired)
    return runtime, world


def hardware(config: Config, scheduler: Scheduler, table: leap.LeapTable,
             save_state: Callable[[LearnedState], None]) -> Runtime:
    """A real receiver; the clock is a software clock over the host clock unless a kernel clock is chosen."""
    kind = config.clock.backend
    kind = "software" if kind in ("auto", "simulated") else kind
    backend: ClockBackend
    if kind == "software":
        raw0 = time.time_ns()
        backend = SoftClock(raw0, leap.posix_to_tai_ns(raw0, table))
    else:
        from appliance.edge.kernel_backend import KernelBackend
        from appliance.edge.kernel_clock import KernelClock

        if kind == "phc":
            kernel = KernelClock.phc(config.clock.phc_device)
            backend = KernelBackend(kernel, lambda raw: raw)  # a PHC counts TAI, as PTP does
        else:
            backend = KernelBackend(KernelClock.realtime(), lambda raw: leap.posix_to_tai_ns(raw, table))
    served_at_host = None
    if kind != "software":  # the kernel applies every correction itself: the host clock is the served clock
        served_at_host = lambda h: (leap.posix_to_tai_ns(h, table), 0.0)  # noqa: E731
    platform = Platform("hardware", time.time_ns, backend, kind, config.gnss.device, served_at_host)
    return assemble(config, scheduler, platform, table, save_state)
