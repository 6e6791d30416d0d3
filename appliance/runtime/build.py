"""The composition root's core half: from the settings, the engines, the reference drivers, the router and runtime.

``assemble`` wires the same parts whether the appliance runs on the simulated world or on hardware; what differs is
the ``Platform`` it is given (the local counter, the clock backend, how host time maps to served time), which
``runtime/simulated.py`` and ``runtime/hardware.py`` build.  Nothing else in the package knows how the parts are
wired.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance import leap
from appliance.clock.discipline import DisciplineParams
from appliance.clock.learned import LearnedState
from appliance.clock.service import ClockBackend, ClockService
from appliance.config import Config, parse_position
from appliance.events import Position
from appliance.gnss.guard import ReferenceGuard
from appliance.gnss.pairing import PpsPairer
from appliance.gnss.receiver import GnssReceiver
from appliance.gnss.setup import ReceiverSetup, plan_from
from appliance.monitor import SyncMonitor, limit_items, targets_of
from appliance.refs.gnss import GnssReference
from appliance.refs.model import Reference, RefSpec
from appliance.refs.selector import ReferenceSelector, SelectorPolicy
from appliance.router import HostMap, Now, Router
from appliance.runtime.outputs import KernelStatus, PulseOutputs
from appliance.runtime.runtime import Runtime
from appliance.sched import Scheduler
from appliance.units import NS_PER_MS, NS_PER_S
from appliance.utcoffset import UtcOffset

log = logging.getLogger("appliance")


@dataclass
class Platform:
    """What the appliance runs on: the local counter, the clock it steers, and how host time maps to served time."""

    mode: str  # "simulated" or "hardware"
    raw_now: Callable[[], int]
    backend: ClockBackend
    backend_name: str
    device: str = "simulated"  # the first receiver's device
    served_at_host: HostMap | None = None  # default: the counter is the host clock
    sim_time_error: Callable[[], int] | None = None
    world: Any = None


def assemble(config: Config, scheduler: Scheduler, platform: Platform, table: leap.LeapTable,
             save_state: Callable[[LearnedState], None] | None = None) -> Runtime:
    """The router over the engines and the reference drivers, and the runtime around it."""
    backend, raw_now = platform.backend, platform.raw_now
    served_at_host = platform.served_at_host or (lambda h: (backend.served_ns(h), backend.freq_ppb))  # type: ignore
    utc = UtcOffset(table)
    specs = reference_specs(config)
    references = reference_drivers(config, specs, lambda: utc.table, platform.device)
    c = config.clock
    clock = ClockService(discipline_params(config), c.oscillator, backend, raw_now(), config.ptp.profile,
                         c.degraded_class)
    selector = ReferenceSelector(specs, selector_policy(config), raw_now())
    start = Now(raw_now(), leap.tai_to_posix_ns(scheduler.now_ns(), table)[0])
    router = Router(clock, selector, references, utc, served_at_host, config.integrity.ntp_interval_s * NS_PER_S,
                    start, sync_monitor(config))
    runtime = Runtime(router, scheduler, raw_now, platform.mode, platform.backend_name, save_state,
                      c.save_interval_s, served_at_host, platform.sim_time_error, platform.world)
    pulses = PulseOutputs.from_config(config)
    if pulses is not None:
        runtime.pulses = pulses
        runtime.add_second_consumer(pulses)
        runtime.add_output(pulses.status)
    if hasattr(backend, "publish"):  # a kernel clock: its synchronised status and error bound, once a second
        runtime.add_second_consumer(KernelStatus(backend))
        runtime.kernel_clock = getattr(backend, "clock", None)
    return runtime


# --- the references ------------------------------------------------------------------------------------------------
def sync_monitor(config: Config) -> SyncMonitor | None:
    """The sync monitor of downstream clients, when targets are configured (their settings were checked at load)."""
    m = config.monitor
    targets = targets_of(m.ntp_targets, m.ptp_targets, m.limit_ns, limit_items(m.limits))
    return SyncMonitor(targets, m.interval_s * NS_PER_S) if targets else None


def reference_specs(config: Config) -> list[RefSpec]:
    """The configured references: one per GNSS receiver, in the order of the [[gnss]] array, then the others.  The
    first receiver's qualification is its fix, the integrity checks' and the clock's own (``clock.qualify_s``), so
    the selector adds none.  The others' nominal noise (a tenth of their accuracy; a fiftieth for PTP, whose accuracy
    is mostly asymmetry; a fifth for NTP) tunes the loop before their scatter has been measured."""
    r, q = config.references, float(config.references.qualify_s)
    specs = [RefSpec(rx.name, "gnss", rx.priority, float(rx.accuracy_ns), timeout_s=3.0,
                     qualify_s=0.0 if rx.number == 1 else q) for rx in config.receivers]
    if r.ptp_interface or config.sim.ptp_upstream:
        specs.append(RefSpec("ptp", "ptp", r.ptp_priority, float(r.ptp_accuracy_ns), timeout_s=3.0, qualify_s=q,
                             noise_ns=r.ptp_accuracy_ns / 50))
    if r.ntp_servers or config.sim.ntp_upstream:
        interval = float(r.ntp_interval_s)
        specs.append(RefSpec("ntp", "ntp", r.ntp_priority, float(r.ntp_accuracy_ns), timeout_s=4 * interval + 2,
                             qualify_s=max(q, 2 * interval), noise_ns=r.ntp_accuracy_ns / 5))
    if r.irig_input:
        specs.append(RefSpec("irig", "irig", r.irig_priority, float(r.irig_accuracy_ns), timeout_s=3.0, qualify_s=q,
                             noise_ns=r.irig_accuracy_ns / 10))
    if r.pps_in_device:
        specs.append(RefSpec("pps", "pps", r.pps_in_priority, float(r.pps_in_accuracy_ns), timeout_s=3.0,
                             qualify_s=q, noise_ns=r.pps_in_accuracy_ns / 10))
    return specs


def reference_drivers(config: Config, specs: list[RefSpec], table: Callable[[], leap.LeapTable],
                      device: str) -> list[Reference]:
    """One driver per configured reference; the first receiver is the watched one (integrity, status, leap news)."""
    from appliance.refs.irig import IrigReference
    from appliance.refs.ntp import NtpReference
    from appliance.refs.pps import PpsReference
    from appliance.refs.pps_in import ExternalPps
    from appliance.refs.ptp import PtpReference

    g, r = config.gnss, config.references
    receivers = {rx.name: rx for rx in config.receivers}
    drivers: list[Reference] = []
    for spec in specs:
        rx = receivers.get(spec.name) if spec.kind == "gnss" else None
        if rx is not None and rx.number == 1:
            receiver = GnssReceiver(table, device=device, epoch_idle_ns=g.epoch_idle_ms * NS_PER_MS,
                                    no_data_timeout_ns=g.no_data_timeout_s * NS_PER_S,
                                    setup=receiver_setup(config, spec.name, rx))
            pairer = PpsPairer(g.label_max_age_ms * NS_PER_MS, g.cable_delay_ns)
            drivers.append(GnssReference(spec, receiver, pairer, integrity_guard(config)))
        elif rx is not None:
            receiver = GnssReceiver(table, name=spec.name, device=rx.device or "simulated",
                                    epoch_idle_ns=g.epoch_idle_ms * NS_PER_MS,
                                    no_data_timeout_ns=g.no_data_timeout_s * NS_PER_S,
                                    setup=receiver_setup(config, spec.name, rx))
            drivers.append(GnssReference(spec, receiver, PpsPairer(g.label_max_age_ms * NS_PER_MS, rx.cable_delay_ns)))
        elif spec.kind == "ptp":
            drivers.append(PtpReference(spec))
        elif spec.kind == "ntp":
            drivers.append(NtpReference(spec, min_survivors=3))
        elif spec.kind == "irig":
            drivers.append(IrigReference(spec))
        elif spec.kind == "pps":
            pps = ExternalPps(spec.name, cable_delay_ns=r.pps_in_cable_delay_ns, uncertainty_ns=spec.accuracy_ns)
            drivers.append(PpsReference(spec, pps))
    return drivers


def receiver_setup(config: Config, name: str, g: Any) -> ReceiverSetup:
    """A receiver's set-up from its settings (a [[gnss]] entry): the family (or auto), the plan (a fixed position
    from the entry's antenna position, else survey-in), and whether to configure at all."""
    text = (getattr(g, "position", "") or "").strip()
    plan = plan_from(g, config.integrity, parse_position(text) if text else None)
    return ReceiverSetup(name, plan, family=g.receiver, configure=g.configure, line_baud=g.baud)


def integrity_guard(config: Config) -> ReferenceGuard:
    """The integrity monitor and its thresholds from the settings (``integrity.*``)."""
    from appliance.clock.oscillator import OSCILLATORS, power_law
    from appliance.gnss.integrity import (
        Detectors,
        DriftDetector,
        IntegrityMonitor,
        NtpCrossCheck,
        PhaseJumpDetector,
        PositionDetector,
    )
    from appliance.gnss.survey import SurveyIn

    i = config.integrity
    text = i.position.strip() or config.gnss.position.strip()  # the home: integrity's, else the antenna's own
    survey = (SurveyIn.configured(Position(*parse_position(text))) if text else
              SurveyIn(float(i.survey_s), i.survey_max_std_m, min(60, i.survey_s)))
    detectors = Detectors(position=PositionDetector(i.position_limit_m), jump=PhaseJumpDetector(i.phase_k),
                          drift=DriftDetector(threshold_ns=i.drift_threshold_ns),
                          ntp=NtpCrossCheck(i.ntp_margin_ms * 1e6))
    monitor = IntegrityMonitor(survey, float(i.qualification_s), detectors=detectors)
    spec = OSCILLATORS[config.clock.oscillator]
    # An oscillator is never this far off once warm (10 sigma of its tolerance, and the clamp of the loop).
    max_freq = min(config.clock.max_frequency_ppb, 10 * spec.initial_offset_ppb + 50.0)
    return ReferenceGuard(monitor, power_law(spec), enabled=i.enabled, action=i.action, max_frequency_ppb=max_freq)


def selector_policy(config: Config) -> SelectorPolicy:
    r = config.references
    return SelectorPolicy(revertive=r.revertive, wait_to_restore_s=float(r.wait_to_restore_s),
                          step_limit_ns=float(r.step_limit_ns), slew_ns_per_s=r.slew_ns_per_s)


def discipline_params(config: Config) -> DisciplineParams:
    c = config.clock
    return DisciplineParams(
        time_constant_s=c.time_constant_s, max_frequency_ppb=c.max_frequency_ppb,
        step_threshold_ns=c.step_threshold_ns, slew_only=c.slew_only, lock_threshold_ns=c.lock_threshold_ns,
        unlock_threshold_ns=c.unlock_threshold_ns, qualify_s=c.qualify_s, warmup_s=c.warmup_s,
        holdover_spec_ns=c.holdover_spec_ns, reference_accuracy_ns=config.gnss.accuracy_ns,
        holdover_temp_k=c.holdover_temp_k)
