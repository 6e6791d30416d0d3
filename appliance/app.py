"""Composition root: builds the engines, picks simulated or real hardware, routes events, serves the control socket.

``Appliance`` holds the core engines and routes every event between them; it does no I/O itself (persistence and
the kernel clock reach it as objects the edge built) and takes its time from the scheduler, so the same object runs
under the simulated scheduler in tests and scenarios.  ``run`` is the edge that builds the asyncio loop, the hardware
(or the simulated world), the clock backend, the control socket and signal handling.  Nothing else in the package
knows how the parts are wired.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance import __version__, leap
from appliance.alarms import CLOCK_ALARMS, CLOCK_CODES, RECEIVER_ALARMS, RECEIVER_CODES, AlarmBook
from appliance.config import Config
from appliance.events import (Alarm, ClockStateChanged, DeviceEvent, GnssEpoch, LeapInfo, PairedSecond, PpsEdge,
                              ReceiverState, ReceiverStateChanged, Rejected, Severity, StepClock, TimeLabel,
                              TimePulseInfo)
from appliance.gnss.guard import IntegrityChanged, ReferenceGuard, ReferenceUsable
from appliance.gnss.pairing import PpsPairer
from appliance.gnss.receiver import GnssReceiver
from appliance.clock.discipline import DisciplineParams
from appliance.clock.learned import LearnedState
from appliance.clock.service import USABLE_STATES, ClockBackend, ClockService
from appliance.clock.state import ClockState
from appliance.clock.softclock import SoftClock
from appliance.refs.model import PairedTime, RefSample
from appliance.refs.selector import (LoopSample, ReferenceSelector, RefSpec, RefStateChanged, RefSwitched,
                                     SelectorPolicy)
from appliance.edge.loop import AsyncioScheduler
from appliance.sched import Scheduler, every
from appliance.status import ClockStatus, PpsStatus, TimeStatus, summarize, to_dict
from appliance.units import NS_PER_MS, NS_PER_S
from appliance.utcoffset import UtcOffset

log = logging.getLogger("appliance")
BACKUP_REFERENCE = "reference-backup"  # the clock runs on a reference other than the highest-priority one


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


def integrity_guard(config: Config) -> ReferenceGuard:
    """The integrity monitor and its thresholds from the settings (``integrity.*``)."""
    from appliance.config import parse_position
    from appliance.events import Position
    from appliance.gnss.integrity import (Detectors, DriftDetector, IntegrityMonitor, NtpCrossCheck,
                                          PhaseJumpDetector, PositionDetector)
    from appliance.gnss.survey import SurveyIn
    from appliance.clock.oscillator import OSCILLATORS, power_law

    text = str(config["integrity.position"]).strip()
    survey = (SurveyIn.configured(Position(*parse_position(text))) if text else
              SurveyIn(float(config["integrity.survey_s"]), float(config["integrity.survey_max_std_m"]),
                       min(60, int(config["integrity.survey_s"]))))
    detectors = Detectors(position=PositionDetector(float(config["integrity.position_limit_m"])),
                          jump=PhaseJumpDetector(float(config["integrity.phase_k"])),
                          drift=DriftDetector(threshold_ns=float(config["integrity.drift_threshold_ns"])),
                          ntp=NtpCrossCheck(float(config["integrity.ntp_margin_ms"]) * 1e6))
    monitor = IntegrityMonitor(survey, float(config["integrity.qualification_s"]), detectors=detectors)
    spec = OSCILLATORS[str(config["clock.oscillator"])]
    # An oscillator is never this far off once warm (10 sigma of its tolerance, and the clamp of the loop).
    max_freq = min(float(config["clock.max_frequency_ppb"]), 10 * spec.initial_offset_ppb + 50.0)
    return ReferenceGuard(monitor, power_law(spec), enabled=bool(config["integrity.enabled"]),
                          action=str(config["integrity.action"]), max_frequency_ppb=max_freq)


def reference_specs(config: Config) -> list[RefSpec]:
    """The configured references.  GNSS is always one; its qualification is the receiver's fix, the integrity
    checks' and the clock's own (``clock.qualify_s``), so the selector adds none.  The others' nominal noise (a tenth
    of their accuracy; a fiftieth for PTP, whose accuracy is mostly asymmetry; a fifth for NTP) tunes the loop
    before their scatter has been measured."""
    q = float(config["references.qualify_s"])
    specs = [RefSpec("gnss", "gnss", int(config["references.gnss_priority"]), float(config["gnss.accuracy_ns"]),
                     timeout_s=3.0, qualify_s=0.0)]
    if second_receiver(config):
        specs.append(RefSpec("gnss2", "gnss", int(config["references.gnss2_priority"]),
                             float(config["gnss.accuracy_ns"]), timeout_s=3.0, qualify_s=q))
    if str(config["references.ptp_interface"]) or bool(config["sim.ptp_upstream"]):
        specs.append(RefSpec("ptp", "ptp", int(config["references.ptp_priority"]),
                             float(config["references.ptp_accuracy_ns"]), timeout_s=3.0, qualify_s=q,
                             noise_ns=float(config["references.ptp_accuracy_ns"]) / 50))
    if config["references.ntp_servers"] or bool(config["sim.ntp_upstream"]):
        interval = float(config["references.ntp_interval_s"])
        specs.append(RefSpec("ntp", "ntp", int(config["references.ntp_priority"]),
                             float(config["references.ntp_accuracy_ns"]), timeout_s=4 * interval + 2,
                             qualify_s=max(q, 2 * interval), noise_ns=float(config["references.ntp_accuracy_ns"]) / 5))
    if str(config["references.irig_input"]):
        specs.append(RefSpec("irig", "irig", int(config["references.irig_priority"]),
                             float(config["references.irig_accuracy_ns"]), timeout_s=3.0, qualify_s=q,
                             noise_ns=float(config["references.irig_accuracy_ns"]) / 10))
    if str(config["references.pps_in_device"]):
        specs.append(RefSpec("pps", "pps", int(config["references.pps_in_priority"]),
                             float(config["references.pps_in_accuracy_ns"]), timeout_s=3.0, qualify_s=q,
                             noise_ns=float(config["references.pps_in_accuracy_ns"]) / 10))
    return specs


def second_receiver(config: Config) -> bool:
    """A second receiver: on a serial device with a real first one, or simulated beside a simulated first one."""
    if config["gnss.device"]:
        return bool(config["references.gnss2_device"])
    return bool(config["sim.gnss2"])


def selector_policy(config: Config) -> SelectorPolicy:
    return SelectorPolicy(revertive=bool(config["references.revertive"]),
                          wait_to_restore_s=float(config["references.wait_to_restore_s"]),
                          step_limit_ns=float(config["references.step_limit_ns"]),
                          slew_ns_per_s=float(config["references.slew_ns_per_s"]))


def discipline_params(config: Config) -> DisciplineParams:
    return DisciplineParams(
        time_constant_s=float(config["clock.time_constant_s"]),
        max_frequency_ppb=float(config["clock.max_frequency_ppb"]),
        step_threshold_ns=int(config["clock.step_threshold_ns"]), slew_only=bool(config["clock.slew_only"]),
        lock_threshold_ns=int(config["clock.lock_threshold_ns"]),
        unlock_threshold_ns=int(config["clock.unlock_threshold_ns"]),
        qualify_s=int(config["clock.qualify_s"]), warmup_s=int(config["clock.warmup_s"]),
        holdover_spec_ns=int(config["clock.holdover_spec_ns"]),
        reference_accuracy_ns=int(config["gnss.accuracy_ns"]),
        holdover_temp_k=float(config["clock.holdover_temp_k"]))


class Appliance:
    def __init__(self, config: Config, scheduler: Scheduler, raw_now: Callable[[], int], mode: str,
                 backend: ClockBackend, table: leap.LeapTable | None = None, device: str = "simulated",
                 backend_name: str = "simulated", sim_time_error: Callable[[], int] | None = None,
                 save_state: Callable[[LearnedState], None] | None = None,
                 served_at_host: Callable[[int], tuple[int, float]] | None = None):
        self.config, self.scheduler, self.raw_now, self.mode = config, scheduler, raw_now, mode
        self.started_at_ns = scheduler.now_ns()
        self.utc = UtcOffset(table or load_leap_table(config))
        self.receiver = GnssReceiver(lambda: self.utc.table, device=device,
                                     epoch_idle_ns=int(config["gnss.epoch_idle_ms"]) * NS_PER_MS,
                                     no_data_timeout_ns=int(config["gnss.no_data_timeout_s"]) * NS_PER_S)
        self.pairer = PpsPairer(int(config["gnss.label_max_age_ms"]) * NS_PER_MS, int(config["gnss.cable_delay_ns"]))
        # The second receiver, when there is one: its own framing and pairing; its time is a reference of its own
        # ("gnss2"), checked against the others by the selector (the integrity monitor watches the first receiver).
        self.receiver2: GnssReceiver | None = None
        self.pairer2: PpsPairer | None = None
        if second_receiver(config):
            self.receiver2 = GnssReceiver(lambda: self.utc.table, name="gnss2",
                                          device=str(config["references.gnss2_device"]) or "simulated",
                                          epoch_idle_ns=int(config["gnss.epoch_idle_ms"]) * NS_PER_MS,
                                          no_data_timeout_ns=int(config["gnss.no_data_timeout_s"]) * NS_PER_S)
            self.pairer2 = PpsPairer(int(config["gnss.label_max_age_ms"]) * NS_PER_MS, 0)
        self.clock = ClockService(discipline_params(config), str(config["clock.oscillator"]), backend, raw_now(),
                                  str(config["ptp.profile"]), str(config["clock.degraded_class"]))
        self.guard = integrity_guard(config)
        self.refs = ReferenceSelector(reference_specs(config), selector_policy(config), raw_now())
        self._gnss_receiver: tuple[bool, str] = (True, "")
        self._gnss_integrity: tuple[bool, str] = (True, "")
        self._crossfed_ns: dict[str, int] = {}
        self.ref_edges: dict[str, Any] = {}  # reference name -> its input edge (PTP slave, NTP poller ...) with .status()
        from appliance.refs.ntp_select import NtpUpstream

        self.ntp_upstream = NtpUpstream("ntp", min_survivors=3)
        self.pps_in: Any = None  # the external 1PPS input's pairing, when one is configured
        if str(config["references.pps_in_device"]):
            from appliance.refs.pps_in import ExternalPps

            self.pps_in = ExternalPps("pps", cable_delay_ns=int(config["references.pps_in_cable_delay_ns"]),
                                      uncertainty_ns=float(config["references.pps_in_accuracy_ns"]))
        self._ntp_used_ns = 0
        self._ntp_stratum: int | None = None  # the NTP upstream's system peer's stratum, and its address
        self._ntp_peer = ""
        self.backend_name = backend_name
        self._sim_time_error = sim_time_error
        self._save_state = save_state
        # Host CLOCK_REALTIME (POSIX ns) -> (served TAI ns, served rate against the host clock in ppb): what the
        # NTP workers need to stamp packets.  Default: the clock's counter is the host clock.
        self.served_at_host = served_at_host or (lambda h: (backend.served_ns(h), backend.freq_ppb))
        self.ntp: Any = None  # the NTP service edge, when serving
        self.ptp: Any = None  # the PTP service edge, when enabled
        self.time_outputs: dict[str, Any] = {}  # serial time string (and others): name -> edge with .status()
        self.pulse_outputs, self.pps_record, self.irig_record = pulse_outputs_from(config)
        self.pulse_sinks: dict[str, Any] = {}  # "pps" / "irig" -> a hardware sink (PHC, GPIO) with .status()
        self._ntp_refid = "GNSS"
        self._ntp_generation = 0
        self.pps_source, self.pps_edges = "none", 0
        self.paired: list[PairedSecond] = []  # the most recent, for tests and the console
        self.alarms = AlarmBook()
        self.listeners: list[Callable[[object], None]] = []
        self.audit_hook: Callable[[str, str, str, dict[str, Any]], None] | None = None  # operator commands
        self.audit_part: Any = None  # the audit trail, when the runner keeps one
        self.world: Any = None  # the simulated world, when the appliance runs on one (drills: world commands)
        self.ntp_check: Any = None  # the NTP cross-check poller, when servers are configured
        self._last_sats: tuple = ()
        self._last_rejects_logged: dict[str, int] = {}
        self._timers = [every(scheduler, 200 * NS_PER_MS, self._tick), every(scheduler, NS_PER_S, self._second),
                        every(scheduler, 60 * NS_PER_S, self._minute),
                        every(scheduler, int(config["clock.save_interval_s"]) * NS_PER_S, self.save_learned)]
        self._alarms(self.utc.check(self.scheduler.now_ns()))
        self._clock_alarms("FREERUN", "starting")

    # --- inputs from the edges --------------------------------------------------------------------------
    def on_bytes(self, data: bytes, rx_raw_ns: int) -> None:
        self._route(self.receiver.feed(data, rx_raw_ns))

    def on_edge(self, edge: PpsEdge) -> None:
        self.pps_edges += 1
        self.pps_source = edge.source
        self._route(self.pairer.on_edge(edge))

    def on_ntp_sample(self, sample: Any) -> None:
        """An NTP cross-check answer (``ntpcheck.NtpSample``); failed queries only show in status."""
        if not sample.error:
            # NTP minus the GNSS reference, not minus the served clock: before lock (or in holdover) the two differ
            # by the clock's own phase offset (served minus reference), which is no news about the sky.
            phase = self.clock.engine.last_offset_ns or 0.0
            self._guarded(self.guard.on_ntp(self.raw_now(), sample.server, sample.offset_ns + phase,
                                            sample.uncertainty_ns))

    def on_bytes2(self, data: bytes, rx_raw_ns: int) -> None:
        if self.receiver2 is not None:
            self._second_receiver(self.receiver2.feed(data, rx_raw_ns))

    def on_edge2(self, edge: PpsEdge) -> None:
        if self.pairer2 is not None:
            self._second_receiver(self.pairer2.on_edge(edge))

    def on_device2(self, event: DeviceEvent) -> None:
        if self.receiver2 is not None:
            self._second_receiver(self.receiver2.on_device(event, self.raw_now()))

    def _second_receiver(self, events: list[object]) -> None:
        """The second receiver's events: labels paired with its edges become samples of the "gnss2" reference;
        its fix decides whether that reference is usable."""
        assert self.receiver2 is not None and self.pairer2 is not None
        for ev in events:
            if isinstance(ev, TimeLabel):
                self._second_receiver(self.pairer2.on_label(ev))
            elif isinstance(ev, TimePulseInfo):
                self.pairer2.on_time_pulse(ev)
            elif isinstance(ev, PairedSecond):
                offset, _free = self.clock.measure(ev)
                self._ref_sample(RefSample("gnss2", ev.edge_raw_ns, offset, float(self.config["gnss.accuracy_ns"])))
            elif isinstance(ev, ReceiverStateChanged):
                log.info("receiver gnss2: %s -> %s (%s)", ev.old.value, ev.new.value, ev.reason)
                self._route(self.refs.set_usable("gnss2", ev.new in USABLE_STATES,
                                                 f"receiver {ev.new.value}: {ev.reason}", self.raw_now()))
            elif isinstance(ev, LeapInfo):
                pass  # the first receiver's leap announcements are the ones used

    def on_ref_time(self, paired: PairedTime) -> None:
        """An on-time edge and the time it marks, from a reference other than the GNSS receiver."""
        self._route([paired])

    def on_host_time(self, paired: PairedTime) -> None:
        """An on-time edge stamped on the host clock (IRIG-B input, external 1PPS) and the time it marks."""
        offset = self.served_at_past_host(paired.edge_raw_ns) - paired.tai_ns
        self._ref_sample(RefSample(paired.ref, self.raw_now(), float(offset), paired.uncertainty_ns))

    def served_at_past_host(self, host_ns: int) -> int:
        """The served time at a host (CLOCK_REALTIME) instant up to a few seconds ago: carried back from now at the
        served clock's rate (the simulated oscillator cannot be read backwards)."""
        now_host = leap.tai_to_posix_ns(self.scheduler.now_ns(), self.utc.table)[0]
        served_now, rate_ppb = self.served_at_host(now_host)
        return served_now - round((now_host - host_ns) * (1 + rate_ppb * 1e-9))

    def on_external_pps(self, edge: PpsEdge) -> None:
        """An external 1PPS edge (host clock): it marks the whole second the served clock is nearest to."""
        if self.pps_in is None:
            return
        known = self.clock.engine.state is not ClockState.FREERUN  # the served clock knows the second
        paired = self.pps_in.on_edge(edge.raw_ns, self.served_at_past_host(edge.raw_ns) if known else None)
        if paired is not None:
            self.on_host_time(paired)

    def on_ref_offset(self, sample: RefSample) -> None:
        """A phase sample measured by a reference's own edge (PTP slave, NTP upstream)."""
        self._ref_sample(sample)

    def on_ntp_upstream(self, sample: Any) -> None:
        """An NTP upstream server's answer (``ntpcheck.NtpSample``): through selection and clustering, the
        consensus of the servers becomes one sample of the "ntp" reference."""
        self.ntp_upstream.on_sample(sample)
        if sample.error:
            return
        estimate = self.ntp_upstream.estimate(sample.host_ns)
        # Every answer gives the reference a sample: the consensus may rest on an older (shorter-delay) exchange
        # the clock filter keeps choosing, which is what it is for.
        if estimate is None or sample.host_ns <= self._ntp_used_ns:
            return
        self._ntp_used_ns = sample.host_ns
        self._ntp_stratum, self._ntp_peer = estimate.stratum, estimate.system_peer
        if self.refs.active == "ntp":
            self.clock.upstream_stratum = estimate.stratum
        self._ref_sample(estimate.ref_sample(self.raw_now()))

    def on_ptp_upstream(self, m: Any) -> None:
        """A PTP slave measurement (``ptp_slave.PtpMeasurement``): served minus the upstream grandmaster.  Its
        time is usable while the grandmaster says it is traceable (clockClass 6 or 7, or 13/14 for ARB)."""
        raw = self.raw_now()
        usable = m.clock_class in (6, 7, 13, 14)
        self._route(self.refs.set_usable("ptp", usable, f"upstream grandmaster {m.gm_identity} clockClass "
                                                        f"{m.clock_class}: not traceable", raw))
        self._ref_sample(RefSample("ptp", raw, float(m.offset_ns), float(self.config["references.ptp_accuracy_ns"])))

    def on_device(self, event: DeviceEvent) -> None:
        self._route(self.receiver.on_device(event, self.raw_now()))

    def restore(self, learned: LearnedState, now_tai_ns: int, clock_kept_time: bool) -> None:
        """Use a learned state from the last run (the caller checked its age).  If the clock demonstrably kept time
        across the restart, hold over at once; otherwise only start the loop from the learned frequency, since a
        holdover bound would rest on a phase nobody vouches for."""
        downtime_s = max(0.0, (now_tai_ns - learned.saved_at_tai_ns) / NS_PER_S)
        log.info("restoring learned clock state: %s, %.3f ppb, saved %.0f s ago%s", learned.state,
                 learned.frequency_ppb, downtime_s, "" if clock_kept_time else " (frequency only: time not kept)")
        if clock_kept_time:
            self._route(self.clock.restore(learned, downtime_s, self.raw_now()))
        else:
            self.clock.seed_frequency(learned.frequency_ppb, self.raw_now())

    def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self.save_learned()

    # --- routing -------------------------------------------------------------------------------------------
    def _route(self, events: list[object]) -> None:
        for ev in events:
            self._handle(ev)
            for listener in self.listeners:
                listener(ev)

    def _guarded(self, events: list[object]) -> None:
        """What the integrity guard says: alarms to the alarm book, the rest routed."""
        self._alarms([e for e in events if isinstance(e, Alarm)])
        self._route([e for e in events if not isinstance(e, Alarm)])

    def _handle(self, ev: object) -> None:
        if isinstance(ev, GnssEpoch):
            if ev.satellites:
                self._last_sats = ev.satellites
            self._guarded(self.guard.on_epoch(ev))
        elif isinstance(ev, ReferenceUsable):
            self._gnss_integrity = (ev.usable, ev.reason)
            self._gnss_usable(ev.at_raw_ns)
        elif isinstance(ev, IntegrityChanged):
            (log.info if ev.usable and ev.new == "ok" else log.warning)(
                "GNSS integrity %s -> %s (%s): %s", ev.old, ev.new, "used" if ev.usable else "REJECTED", ev.reason)
        elif isinstance(ev, TimeLabel):
            self._route(self.pairer.on_label(ev))
        elif isinstance(ev, TimePulseInfo):
            self.pairer.on_time_pulse(ev)
        elif isinstance(ev, PairedSecond):
            self.paired = (self.paired + [ev])[-64:]
            offset, free_phase = self.clock.measure(ev)
            self._guarded(self.guard.on_free_phase(ev.edge_raw_ns, free_phase))
            if not self.guard.hold_sample:  # an outlier waits for the next sample to say step or noise
                self._ref_sample(RefSample("gnss", ev.edge_raw_ns, offset, float(self.config["gnss.accuracy_ns"])))
        elif isinstance(ev, PairedTime):
            offset = self.clock.backend.served_ns(ev.edge_raw_ns) - ev.tai_ns
            self._ref_sample(RefSample(ev.ref, ev.edge_raw_ns, float(offset), ev.uncertainty_ns))
        elif isinstance(ev, LoopSample):
            self._route(self.clock.on_offset(ev.offset_ns, ev.raw_ns))
        elif isinstance(ev, RefSwitched):
            self._switched(ev)
        elif isinstance(ev, RefStateChanged):
            log.info("reference %s: %s -> %s (%s)", ev.ref, ev.old, ev.new, ev.reason)
        elif isinstance(ev, LeapInfo):
            self._alarms(self.utc.on_receiver(ev, self.now_tai_ns()))
        elif isinstance(ev, ReceiverStateChanged):
            log.info("receiver %s: %s -> %s (%s)", self.receiver.name, ev.old.value, ev.new.value, ev.reason)
            self._receiver_alarms(ev)
            self._gnss_receiver = (ev.new in USABLE_STATES, f"receiver {ev.new.value}: {ev.reason}")
            self._gnss_usable(self.raw_now())
        elif isinstance(ev, ClockStateChanged):
            log.info("clock: %s -> %s (%s)", ev.old, ev.new, ev.reason)
            self._clock_alarms(ev.new, ev.reason)
            self._publish_ntp()  # clients must not hear about a change up to a second late
        elif isinstance(ev, StepClock):
            log.warning("clock stepped by %+d ns (first lock)", ev.delta_ns)
            self._publish_ntp()
        elif isinstance(ev, Rejected) and ev.what == "pps":
            log.debug("PPS pairing rejected: %s %s", ev.reason, ev.detail)

    # --- references -----------------------------------------------------------------------------------------
    def _gnss_usable(self, raw_ns: int) -> None:
        """The GNSS reference is usable when the receiver has a fix and the integrity checks accept it."""
        (rx_ok, rx_why), (ok, why) = self._gnss_receiver, self._gnss_integrity
        usable = rx_ok and ok
        self._route(self.refs.set_usable("gnss", usable, why if rx_ok and not ok else rx_why, raw_ns))

    def _ref_sample(self, sample: RefSample) -> None:
        self._phase_for_refs(sample.raw_ns)
        self._route(self.refs.on_sample(sample, self.clock.engine.correction_ns(sample.raw_ns)))

    def _phase_for_refs(self, raw_ns: int) -> None:
        """Tell the selector whether the clock's phase is worth carrying on from at a switch: locked, or in holdover
        within its spec (then also how good it still is)."""
        state = self.clock.engine.state
        self.refs.hold_phase = state in (ClockState.LOCKED, ClockState.HOLDOVER)
        self.refs.phase_bound_ns = self.clock.engine.bound_ns(raw_ns) if state is ClockState.HOLDOVER else None

    def _switched(self, ev: RefSwitched) -> None:
        new = ev.new or "none (holdover)"
        text = f"reference {ev.old or 'none'} -> {new}: {ev.reason}"
        if ev.buildout_ns:
            rate = self.refs.policy.slew_ns_per_s
            text += f" (phase {ev.buildout_ns:+.0f} ns built out, " + (
                f"slewed away at up to {rate:g} ns/s)" if rate > 0 else "kept until the next switch)")
        log.warning("%s", text)
        if ev.new is None:
            self._route(self.clock.on_reference(False, ev.reason, ev.at_raw_ns))
        else:
            spec = self.refs.refs[ev.new].spec
            self.clock.reference_kind = spec.kind
            # The selector says when the reference is lost (its own timeout, on the raw samples); the loop's samples
            # lag those by up to a second, so its safety net must not fire first.
            self.clock.engine.reference_timeout_s = spec.timeout_s + 2.0
            self.clock.upstream_stratum = self._ntp_stratum if ev.new == "ntp" else None
            self._reference_quality(ev.at_raw_ns)
            self._route(self.clock.on_reference(True, ev.reason, ev.at_raw_ns))
        best = min(self.refs.refs.values(), key=lambda r: r.spec.priority, default=None)  # enabled or not
        backup = ev.new is not None and best is not None and ev.new != best.spec.name
        self._alarms([Alarm(BACKUP_REFERENCE, Severity.WARNING, backup,
                            f"running on backup reference {ev.new}: {ev.reason}" if backup else f"reference {new}",
                            self.now_tai_ns())])

    def _reference_quality(self, raw_ns: int) -> None:
        """The clock's bound floor and loop follow the active reference, plus the phase still built out of it."""
        q = self.refs.active_quality(raw_ns)
        if q is not None:
            self.clock.set_reference(q[0] + abs(self.refs.buildout_ns(raw_ns)), q[1], self.refs.active)

    def _crossfeed(self, raw_ns: int) -> None:
        """Every qualified non-GNSS reference is an independent opinion of GNSS time for the integrity checks
        (at most one per reference per ``integrity.ntp_interval_s``)."""
        gnss = self.refs.refs["gnss"]
        if not gnss.live(raw_ns):
            return
        interval = int(self.config["integrity.ntp_interval_s"]) * NS_PER_S
        for name, r in self.refs.refs.items():
            if name == "gnss" or r.state.value != "qualified" or r.last is None:
                continue
            if raw_ns - self._crossfed_ns.get(name, -interval) < interval:
                continue
            g, o = self.refs.offset_now("gnss", raw_ns), self.refs.offset_now(name, raw_ns)
            if g is None or o is None:
                continue
            self._crossfed_ns[name] = raw_ns
            self._guarded(self.guard.on_ntp(raw_ns, name, g - o, max(r.spec.accuracy_ns, r.last.uncertainty_ns)))

    def reference_command(self, action: str, name: str, who: str) -> dict[str, Any]:
        """Operator control of the references: pin one (or unpin), enable or disable one."""
        raw = self.raw_now()
        try:
            if action == "pin":
                events = self.refs.pin(name or None, raw, who)
                text = f"reference pinned to {name}" if name else "reference selection automatic (unpinned)"
            elif action == "unpin":
                events, text = self.refs.pin(None, raw, who), "reference selection automatic (unpinned)"
            elif action in ("enable", "disable"):
                events = self.refs.enable(name, action == "enable", raw, who)
                text = f"reference {name} {action}d"
            else:
                return {"ok": False, "error": "reference takes pin NAME, unpin, enable NAME or disable NAME"}
        except ValueError as exc:
            log.warning("operator %s: reference %s %s refused: %s", who, action, name, exc)
            if self.audit_hook is not None:
                self.audit_hook("command", who, f"reference {action} {name} refused: {exc}",
                                {"command": "reference", "action": action, "reference": name, "refused": str(exc)})
            return {"ok": False, "error": str(exc)}
        log.warning("operator %s: %s", who, text)
        if self.audit_hook is not None:
            self.audit_hook("command", who, text, {"command": "reference", "action": action, "reference": name})
        self._route(events)
        return {"ok": True, "done": text, "active": self.refs.active}

    def _receiver_alarms(self, ev: ReceiverStateChanged) -> None:
        wanted = RECEIVER_ALARMS.get(ev.new)
        if ev.old is ReceiverState.DISCONNECTED and ev.new is ReceiverState.NO_DATA:
            wanted = None  # the line just came up: silence is an alarm only once the timeout says so
        self._notify(self.alarms.set_group(RECEIVER_CODES, wanted, ev.reason, self.now_tai_ns()))

    def _clock_alarms(self, state: str, reason: str) -> None:
        self._notify(self.alarms.set_group(CLOCK_CODES, CLOCK_ALARMS.get(state), reason, self.now_tai_ns()))

    def _alarms(self, alarms: list[Alarm]) -> None:
        self._notify(self.alarms.apply(alarms))

    def _notify(self, changed: list[Alarm]) -> None:
        for alarm in changed:
            (log.warning if alarm.raised else log.info)("alarm %s %s: %s", alarm.code,
                                                        "raised" if alarm.raised else "cleared", alarm.text)
            for listener in self.listeners:
                listener(alarm)

    # --- timers -----------------------------------------------------------------------------------------
    def _tick(self) -> None:
        self._route(self.receiver.tick(self.raw_now()))
        if self.receiver2 is not None:
            self._second_receiver(self.receiver2.tick(self.raw_now()))

    def _second(self) -> None:
        raw = self.raw_now()
        self._phase_for_refs(raw)
        self._route(self.refs.tick(raw, self.clock.engine.correction_ns(raw)))
        self._reference_quality(raw)
        e = self.clock.engine
        # A type-2 loop lags a phase ramp by about half of rate x time constant: keep that within the lock threshold.
        self.refs.set_slew_cap(e.p.lock_threshold_ns / e.servo.params.time_constant_s, raw)
        if len(self.refs.refs) > 1:
            self._crossfeed(raw)
        self._route(self.clock.tick(self.raw_now()))
        self._publish_ntp()
        if self.pulse_outputs is not None:
            self._plan_pulses()
        publish = getattr(self.clock.backend, "publish", None)
        if publish is not None:
            snap = self.clock.snapshot(self.raw_now())
            publish(snap.advertised.ntp_stratum == 1, snap.error_bound_ns, self.utc.table.tai_utc_at_tai_ns(
                self.now_tai_ns()))

    def _minute(self) -> None:
        self._alarms(self.utc.check(self.now_tai_ns()))
        rejected = dict(self.receiver.rejected)
        grown = {k: v - self._last_rejects_logged.get(k, 0) for k, v in rejected.items()
                 if v != self._last_rejects_logged.get(k, 0)}
        if grown:
            log.warning("receiver %s rejected input in the last minute: %s; latest: %s", self.receiver.name,
                        ", ".join(f"{k} {v}" for k, v in sorted(grown.items())),
                        self.receiver.snapshot().last_rejects[-1:])
        self._last_rejects_logged = rejected

    def save_learned(self) -> None:
        if self._save_state is None:
            return
        learned = self.clock.learned_state(self.raw_now(), self.now_tai_ns())
        if learned is not None:
            try:
                self._save_state(learned)
            except OSError as exc:
                log.error("cannot save the learned clock state: %s", exc)

    def _plan_pulses(self) -> None:
        """1PPS and IRIG-B edges for the next second, as counter instants."""
        assert self.pulse_outputs is not None
        backend = self.clock.backend
        raw = self.raw_now()
        served = backend.served_ns(raw)
        inverse = getattr(backend, "raw_ns_at", None)
        raw_at = inverse if inverse is not None else (lambda s: raw + s - served)  # a kernel clock runs at rate 1
        snap = self.clock.snapshot(raw)
        self.pulse_outputs.on_second(served, raw_at, snap.advertised.ntp_stratum == 1, snap.error_bound_ns,
                                     self.utc.table)

    def _publish_ntp(self) -> None:
        """Hand the clock to the network outputs: NTP workers and the PTP port read the same map."""
        if self.ntp is None and self.ptp is None:
            return
        cmap = self.ntp_clock_map(time.time_ns())
        if self.ntp is not None:
            self.ntp.publish(cmap)
        if self.ptp is not None:
            from appliance.outputs.ptp.datasets import gm_view

            self.ptp.publish(cmap, gm_view(self.status()))

    def ntp_clock_map(self, host_ns: int) -> Any:
        """The map NTP workers serve from, anchored at host time ``host_ns``."""
        from appliance.outputs.ntp import publish

        status = self.status()
        if status.clock.state == "LOCKED":
            self._ntp_refid = publish.refid_for(status, self._ntp_peer)
        self._ntp_generation += 1
        served, rate_ppb = self.served_at_host(host_ns)
        return publish.clock_map(status, host_ns, served, rate_ppb, self._ntp_refid, self._ntp_generation)

    # --- the read model -------------------------------------------------------------------------------------
    def now_tai_ns(self) -> int:
        """The served (disciplined) time now."""
        return self.clock.backend.served_ns(self.raw_now())

    def status(self) -> TimeStatus:
        raw = self.raw_now()
        now = self.clock.backend.served_ns(raw)
        table = self.utc.table
        leap_status = self.utc.snapshot(now)
        nxt = table.next_change_after(now)
        snap = self.clock.snapshot(raw, leap_status.pending_change_s,
                                   None if nxt is None else max(0, (nxt[0] - now) // NS_PER_S))
        rx = self.receiver.snapshot()
        last = self.pairer.last
        pps = PpsStatus(self.pps_source, self.pps_edges, self.pairer.paired, dict(self.pairer.rejected),
                        last.edge_raw_ns if last else None, last.qerr_ps if last else None)
        served = self.clock.backend.served_ns
        clock = ClockStatus(
            snap.state, served(snap.state_since_raw_ns), snap.reason, snap.error_bound_ns, snap.frequency_ppb,
            snap.phase_offset_ns, None if snap.locked_since_raw_ns is None else served(snap.locked_since_raw_ns),
            None if snap.holdover_since_raw_ns is None else served(snap.holdover_since_raw_ns),
            snap.advertised.clock_class, snap.advertised.clock_accuracy, self.clock.oscillator, self.backend_name,
            snap.forced_holdover, snap.time_constant_s, snap.learned_s, snap.predicted_frequency_ppb,
            snap.predicted_aging_ppb_per_day, snap.steps, snap.advertised,
            None if self._sim_time_error is None else self._sim_time_error())
        outputs = {"ntp": self.ntp.status() if self.ntp is not None else {"enabled": False},
                   "ptp": self.ptp.status() if self.ptp is not None else {"enabled": False},
                   **{name: out.status() for name, out in self.time_outputs.items()},
                   **(self.pulse_outputs.status() if self.pulse_outputs is not None else {})}
        for name, sink in self.pulse_sinks.items():
            if name in outputs:
                outputs[name] = {**outputs[name], "sink": sink.status()}
        return TimeStatus(now, leap.tai_to_utc(now, table).iso_ms(), self.mode, __version__, self.started_at_ns,
                          rx, self._last_sats, summarize(self._last_sats), pps, leap_status, clock,
                          tuple(self.alarms.active.values()), outputs=outputs, integrity=self._integrity_status(raw),
                          references=self.references_status(raw))

    def references_status(self, raw_ns: int) -> dict[str, Any]:
        """The references as status shows them: the active one, the policy, and a row per reference (state,
        priority, offset against the clock, jitter, accuracy) with what its input edge reports."""
        rows = []
        for v in self.refs.views(raw_ns):
            row = dataclasses.asdict(v)
            row["since_tai_ns"] = self.clock.backend.served_ns(v.since_raw_ns)
            edge = self.ref_edges.get(v.name)
            if edge is not None:
                row["input"] = edge.status()
            rows.append(row)
        p = self.refs.policy
        return {"active": self.refs.active, "pinned": self.refs.pinned, "revertive": p.revertive,
                "wait_to_restore_s": p.wait_to_restore_s, "step_limit_ns": p.step_limit_ns,
                "slew_ns_per_s": p.slew_ns_per_s, "switches": self.refs.switches,
                "disagreements": [dataclasses.asdict(d) for d in self.refs.disagreements], "rows": rows}

    def _integrity_status(self, raw_ns: int) -> Any:
        import dataclasses

        status = self.guard.status(raw_ns)
        if self.ntp_check is None:
            return status
        return dataclasses.replace(status, ntp={**(status.ntp or {}), "servers": self.ntp_check.status()})

    def apply_live(self, name: str, value: Any) -> bool:
        """Take a changed setting without a restart where the running parts can; False if it needs a restart."""
        if name == "log.level":
            logging.getLogger().setLevel(getattr(logging, str(value).upper(), logging.INFO))
            return True
        if name == "gnss.cable_delay_ns":
            self.pairer.cable_delay_ns = int(value)
            return True
        if name == "gnss.label_max_age_ms":
            self.pairer.label_max_age_ns = int(value) * NS_PER_MS
            return True
        return False

    def handle_command(self, request: dict[str, Any]) -> dict[str, Any]:
        """Control-socket requests (already authenticated by the socket's peer check)."""
        cmd = request.get("cmd")
        if cmd == "status":
            return {"ok": True, "status": to_dict(self.status())}
        if cmd == "holdover":
            return self._holdover_command(str(request.get("action", "")), str(request.get("user", "operator")))
        if cmd == "world":
            return self._world_command(str(request.get("action", "")), str(request.get("user", "operator")),
                                       str(request.get("value", "")))
        if cmd == "integrity":
            return self._integrity_command(str(request.get("action", "")), str(request.get("user", "operator")))
        if cmd == "reference":
            return self.reference_command(str(request.get("action", "")), str(request.get("name", "")),
                                          str(request.get("user", "operator")))
        return {"ok": False, "error": f"unknown command {cmd!r}"}

    WORLD_ACTIONS = {
        "block-sky": "block the antenna's view of the sky", "clear-sky": "give the antenna its sky back",
        "receiver-off": "power the receiver off", "receiver-on": "power the receiver on",
        "receiver-reset": "reset the receiver (no fix for 30 s)",
        "spoof-push": "push the receiver's time by VALUE ns/s (default 100)",
        "spoof-step": "step the receiver's time by VALUE ns (default 1000)",
        "spoof-position": "push the receiver's position VALUE m north (default 100)",
        "meacon": "replay the whole sky with a delay of VALUE ns (default 2000)",
        "jam": "jam: C/N0 down by VALUE dB (default 15), jamming indicator up",
        "spoof-system": "spoof one constellation: VALUE is name:ns, e.g. beidou:400",
        "fake-sky": "a spoofer's own constellation replaces the real sky",
        "stop-attacks": "end every attack: the true sky returns",
        "ptp-off": "the simulated upstream PTP grandmaster goes silent", "ptp-on": "it comes back",
        "ptp-offset": "the upstream PTP grandmaster's time is off by VALUE ns (default 5000)",
        "ntp-off": "the simulated NTP upstream servers go silent", "ntp-on": "they come back",
        "receiver2-off": "power the second receiver off", "receiver2-on": "power it on",
        "receiver2-step": "step the second receiver's time by VALUE ns (default 1000)",
    }

    def _world_command(self, action: str, who: str, value: str = "") -> dict[str, Any]:
        """The simulated world, for drills and tests: the sky, the receiver, and attacks on it."""
        world = getattr(self, "world", None)
        if world is None:
            return {"ok": False, "error": "there is no simulated world: the appliance runs on hardware"}
        if action not in self.WORLD_ACTIONS:
            return {"ok": False, "error": f"world takes {', '.join(self.WORLD_ACTIONS)}"}
        try:
            text = self._apply_world(world, action, value)
        except ValueError as exc:
            return {"ok": False, "error": f"world {action}: {exc}"}
        log.warning("operator %s: simulated world: %s", who, text)
        if self.audit_hook is not None:
            self.audit_hook("command", who, f"simulated world: {text}", {"command": "world", "action": action,
                                                                          "value": value})
        return {"ok": True, "done": text}

    def _apply_world(self, world: Any, action: str, value: str) -> str:
        from appliance.events import Constellation

        def number(default: float) -> float:
            try:
                return float(value) if value else default
            except ValueError:
                raise ValueError(f"{value!r} is not a number") from None

        rx = world.receiver
        c = rx.conditions
        true_ns = world.true_ns()
        if action.startswith("receiver2-"):
            if world.receiver2 is None:
                raise ValueError("the simulated world has no second receiver (sim.gnss2)")
            if action == "receiver2-step":
                step = int(number(1000.0))
                world.receiver2.conditions.time_offset_ns += step
                return f"second receiver stepped {step:+d} ns"
            world.receiver2_powered = action == "receiver2-on"
        elif action.startswith(("ptp-", "ntp-")):
            name = action[:3]
            upstream = world.upstreams.get(name)
            if upstream is None:
                raise ValueError(f"the simulated world has no {name.upper()} upstream (sim.{name}_upstream)")
            if action.endswith("-offset"):
                upstream.bias_ns = number(5000.0)
                return f"{name} upstream off by {upstream.bias_ns:+g} ns"
            upstream.powered = action.endswith("-on")
        elif action in ("block-sky", "clear-sky"):
            c.blocked = action == "block-sky"
        elif action in ("receiver-off", "receiver-on"):
            world.receiver_powered = action == "receiver-on"
        elif action == "receiver-reset":
            rx.reset(true_ns, 30)
        elif action == "spoof-push":
            rate = number(100.0)
            c.push_ns_per_s, c.push_since_ns = rate, true_ns
            return f"spoof-push {rate:g} ns/s"
        elif action == "spoof-step":
            step = int(number(1000.0))
            c.time_offset_ns += step
            return f"spoof-step {step:+d} ns"
        elif action == "spoof-position":
            metres = number(100.0)
            c.position_offset_m = (metres, 0.0, 0.0)
            return f"spoof-position {metres:g} m north"
        elif action == "meacon":
            delay = int(number(2000.0))
            c.meaconing_delay_ns = delay
            return f"meacon {delay} ns"
        elif action == "jam":
            db = number(15.0)
            c.cn0_offset_db, c.jam_indicator, c.jamming_state = -abs(db), 200, 3
            return f"jam {db:g} dB"
        elif action == "spoof-system":
            name, _, ns = value.partition(":")
            systems = {k.value.lower(): k for k in Constellation}
            if name.lower() not in systems or not ns:
                raise ValueError(f"expected name:ns with name one of {', '.join(sorted(systems))}")
            c.system_offsets_ns = {systems[name.lower()]: int(ns)}
            return f"spoof-system {name} {int(ns):+d} ns"
        elif action == "fake-sky":
            c.fake_sky_seed = 4242
        elif action == "stop-attacks":
            fresh = type(c)()
            fresh.blocked = c.blocked
            rx.conditions = fresh
        return action

    def _integrity_command(self, action: str, who: str) -> dict[str, Any]:
        """Operator override of the integrity verdict (trust, reject, auto) or a new survey-in; always audited."""
        if action == "resurvey":
            self.guard.resurvey()
            events: list[object] = []
        else:
            try:
                events = self.guard.set_override(action, self.raw_now(), who)
            except ValueError as exc:
                return {"ok": False, "error": str(exc)}
        log.warning("operator %s: integrity %s", who, action)
        if self.audit_hook is not None:
            self.audit_hook("command", who, f"integrity {action}", {"command": "integrity", "action": action})
        self._guarded(events)
        g = self.guard
        return {"ok": True, "override": g.override, "usable": g.usable, "level": g.monitor.verdict().level.value}

    def _holdover_command(self, action: str, who: str) -> dict[str, Any]:
        if action not in ("start", "stop"):
            return {"ok": False, "error": "holdover takes start or stop"}
        try:
            events = self.clock.force_holdover(action == "start", self.raw_now(), who)
        except ValueError as exc:
            if self.audit_hook is not None:
                self.audit_hook("command", who, f"forced holdover {action} refused: {exc}",
                                {"command": "holdover", "action": action, "ok": False})
            return {"ok": False, "error": str(exc)}
        log.warning("operator %s: holdover %s", who, action)
        if self.audit_hook is not None:
            self.audit_hook("command", who, f"forced holdover {action}", {"command": "holdover", "action": action,
                                                                          "ok": True})
        self._route(events)
        return {"ok": True, "state": self.clock.engine.state.value}


# --- the edge: run the appliance on this host ------------------------------------------------------------
def run(config: Config) -> int:
    """Run until SIGINT/SIGTERM.  Returns the process exit status."""
    try:
        return asyncio.run(_main(config))
    except KeyboardInterrupt:
        return 0


async def _main(config: Config) -> int:
    from appliance.edge.control import ControlError, ControlServer
    from appliance.edge import persist

    loop = asyncio.get_running_loop()
    table = load_leap_table(config)
    scheduler = AsyncioScheduler(loop, lambda: leap.posix_to_tai_ns(time.time_ns(), table))  # true time: the host
    state_dir = config.state_path()
    learned, warning = persist.load_state(state_dir, str(config["clock.oscillator"]))
    if warning:
        log.warning("%s", warning)
    learned = _fresh(learned, scheduler.now_ns(), int(config["clock.restore_max_age_s"]))
    saver = lambda state: persist.save_state(state_dir, state)  # noqa: E731
    parts: list[Any] = []
    try:
        if config["gnss.device"]:
            app = _hardware(config, scheduler, table, saver)
            parts += _hardware_edges(config, app, loop)
        else:
            if config["clock.backend"] not in ("auto", "simulated"):
                log.warning("clock.backend=%s needs a receiver (gnss.device): running the simulated world instead",
                            config["clock.backend"])
            app, world = simulated(config, scheduler, table, save_state=saver, warm=learned is not None)
            parts.append(world)
    except (OSError, ValueError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    if learned is not None:
        app.restore(learned, app.now_tai_ns(), _clock_kept_time(app))
    if config["ntp.enabled"]:
        parts.append(_ntp(config, app))
    if config["ptp.interface"]:
        try:
            parts.append(_ptp(config, app))
        except ValueError as exc:
            log.error("cannot start: %s", exc)
            return 1
    if config["serial_out.device"]:
        parts.append(_serial_out(config, app))
    try:
        parts.append(_pulse_sinks(config, app))
    except ValueError as exc:
        log.error("cannot start: %s", exc)
        return 1
    try:
        if config["web.enabled"]:
            parts.append(_web(config, app, loop, table))
        audit = _audit(config, app, loop, table)
        if config["integrity.enabled"] and config["integrity.ntp_servers"]:
            parts.append(_NtpCheckPart(config, app, loop, table))
        if config["references.ntp_servers"]:
            parts.append(_NtpUpstreamPart(config, app, loop))
        if config["references.ptp_interface"]:
            parts.append(_ptp_upstream(config, app))
        if config["references.irig_input"]:
            parts.append(_irig_input(config, app, loop))
        if config["references.pps_in_device"]:
            parts.append(_pps_input(config, app, loop))
        if config["snmp.enabled"]:
            from appliance.snmp.service import SnmpPart

            parts.append(SnmpPart(app, loop, config, warm=learned is not None))
        parts.append(audit)
    except (OSError, ValueError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    server = ControlServer(config.control_socket_path(), app.handle_command)
    try:
        await server.start()
    except (ControlError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info("appliance %s running (%s, clock %s), control socket %s", __version__, app.mode, app.backend_name,
             server.path)
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


def _clock_kept_time(app: Appliance) -> bool:
    """Whether the served clock ran on through the restart: the simulated oscillator starts where it was, and a kernel
    clock the appliance had published as synchronized is still marked so (no reboot, nobody set it since); the host
    clock under the software backend is someone else's, so nothing vouches for it."""
    backend = app.clock.backend
    if app.mode == "simulated":
        return True
    kernel = getattr(backend, "clock", None)
    if kernel is None or kernel.is_phc:
        return False
    try:
        return kernel.query().synchronized
    except OSError:
        return False


class _NtpCheckPart:
    """Polls the configured NTP servers from a thread; each answer reaches the integrity guard on the loop."""

    def __init__(self, config: Config, app: Appliance, loop: asyncio.AbstractEventLoop, table: leap.LeapTable):
        from appliance.edge.ntp_poller import NtpCrossCheckPoller

        def served_posix(host_ns: int) -> int:
            return leap.tai_to_posix_ns(app.served_at_host(host_ns)[0], app.utc.table)[0]

        self.app = app
        self.poller = NtpCrossCheckPoller(tuple(config["integrity.ntp_servers"]),
                                          float(config["integrity.ntp_interval_s"]), 2.0, served_posix,
                                          lambda sample: loop.call_soon_threadsafe(app.on_ntp_sample, sample))

    def start(self) -> None:
        self.app.ntp_check = self.poller
        self.poller.start()

    def stop(self) -> None:
        self.poller.stop()


class _NtpUpstreamPart:
    """Polls the NTP upstream servers from a thread; each answer reaches the selection on the loop."""

    def __init__(self, config: Config, app: Appliance, loop: asyncio.AbstractEventLoop):
        from appliance.edge.ntp_poller import NtpCrossCheckPoller

        def served_posix(host_ns: int) -> int:
            return leap.tai_to_posix_ns(app.served_at_host(host_ns)[0], app.utc.table)[0]

        self.app = app
        self.poller = NtpCrossCheckPoller(tuple(config["references.ntp_servers"]),
                                          float(config["references.ntp_interval_s"]), 2.0, served_posix,
                                          lambda sample: loop.call_soon_threadsafe(app.on_ntp_upstream, sample))

    def start(self) -> None:
        self.app.ref_edges["ntp"] = self
        self.poller.start()

    def stop(self) -> None:
        self.poller.stop()

    def status(self) -> dict[str, Any]:
        rows = self.app.ntp_upstream.servers()
        return {"servers": [dataclasses.asdict(r) for r in rows], "verdict": self.app.ntp_upstream.last_verdict}


class _PtpUpstreamPart:
    """The appliance as a PTP slave of an upstream grandmaster, on its own interface."""

    def __init__(self, service: Any, app: Appliance):
        self.service, self.app = service, app

    def start(self) -> None:
        self.app.ref_edges["ptp"] = self
        self.service.start()

    def stop(self) -> None:
        self.service.stop()

    def status(self) -> dict[str, Any]:
        return dict(self.service.status())


def _ptp_upstream(config: Config, app: Appliance) -> _PtpUpstreamPart:
    from appliance.refs.ptp_slave import SlaveConfig
    from appliance.edge.ptp.slave_service import PtpSlaveService

    slave = SlaveConfig(domain=int(config["references.ptp_domain"]), transport=str(config["references.ptp_transport"]),
                        delay_mechanism=str(config["references.ptp_delay_mechanism"]),
                        arb_timescale=str(config["references.ptp_arb_timescale"]),
                        tai_utc_s=app.utc.table.tai_utc_at_tai_ns(app.now_tai_ns()))
    same_port = str(config["references.ptp_interface"]) == str(config["ptp.interface"])
    service = PtpSlaveService(slave, str(config["references.ptp_interface"]), app.served_at_past_host,
                              app.on_ptp_upstream, port_number=2 if same_port else 1,
                              timestamping=str(config["references.ptp_timestamping"]))
    return _PtpUpstreamPart(service, app)


class _RefInputPart:
    """A reference input edge with start/stop/status (IRIG-B input, external 1PPS), shown in the reference rows."""

    def __init__(self, name: str, edge: Any, app: Appliance):
        self.name, self.edge, self.app = name, edge, app

    def start(self) -> None:
        self.app.ref_edges[self.name] = self
        self.edge.start()

    def stop(self) -> None:
        self.edge.stop()

    def status(self) -> dict[str, Any]:
        status = getattr(self.edge, "status", None)
        return dict(status()) if status is not None else {}


def _irig_input(config: Config, app: Appliance, loop: asyncio.AbstractEventLoop) -> _RefInputPart:
    """``references.irig_input``: "wav:PATH" (AM) or "gpio:CHIP:LINE" (DC level shift)."""
    from appliance.protocol.irig.timecode import CodedExpression
    from appliance.refs.irig_in import IrigDecoder
    from appliance.edge.irig.input import IrigGpioInput, IrigWavInput

    text, fmt = str(config["references.irig_input"]), str(config["references.irig_format"])
    kind, _, where = text.partition(":")
    am = fmt.startswith("B12")
    if kind not in ("wav", "gpio") or not where:
        raise ValueError(f"references.irig_input={text!r}: expected \"wav:PATH\" or \"gpio:CHIP:LINE\"")
    if (kind == "wav") != am:
        raise ValueError(f"references.irig_input={text!r} cannot carry {fmt}: a WAV stream carries AM (B120-B127), a "
                         "GPIO line DC level shift (B000-B007)")
    year = leap.tai_to_utc(app.now_tai_ns(), app.utc.table).year
    decoder = IrigDecoder("irig", CodedExpression(int(fmt[3])), app.utc.table, year,
                          delay_ns=int(config["references.irig_delay_ns"]))
    post = loop.call_soon_threadsafe
    if kind == "wav":
        edge: Any = IrigWavInput(decoder, where, app.on_host_time, post=post)
    else:
        chip, _, line = where.rpartition(":")
        try:
            offset = int(line)
        except ValueError:
            raise ValueError(f"references.irig_input={text!r}: the GPIO line must be a number") from None
        edge = IrigGpioInput(decoder, chip, offset, app.on_host_time, post=post)
    return _RefInputPart("irig", edge, app)


def _pps_input(config: Config, app: Appliance, loop: asyncio.AbstractEventLoop) -> _RefInputPart:
    from appliance.edge.pps_linux import PpsReader

    path = str(config["references.pps_in_device"])
    reader = PpsReader(path, lambda edge: loop.call_soon_threadsafe(app.on_external_pps, edge),
                       on_error=lambda msg: log.warning("external PPS %s: %s", path, msg))

    class _Edge:
        def start(self) -> None:
            reader.start()

        def stop(self) -> None:
            reader.stop()

        def status(self) -> dict[str, Any]:
            return {"device": path, **(app.pps_in.snapshot() if app.pps_in is not None else {})}
    return _RefInputPart("pps", _Edge(), app)


class _NtpPart:
    """Starts the NTP workers with the runner's other parts and stops them last."""

    def __init__(self, service: Any, app: Appliance):
        self.service, self.app = service, app

    def start(self) -> None:
        if self.service.start(self.app.ntp_clock_map(time.time_ns())):
            self.app.ntp = self.service
        else:
            self.app.ntp = self.service  # so status shows why it is not serving
            self.app._alarms([Alarm("ntp-not-serving", Severity.MAJOR, True, f"NTP not served: {self.service.error}",
                                    self.app.now_tai_ns())])

    def stop(self) -> None:
        self.app.ntp = None
        self.service.stop()


def _ntp(config: Config, app: Appliance) -> _NtpPart:
    from appliance.outputs.ntp.server import ServerConfig
    from appliance.edge.ntp.service import NtpService, NtpSettings

    server = ServerConfig(allow=tuple(config["ntp.allow"]), deny=tuple(config["ntp.deny"]),
                          deny_action=str(config["ntp.deny_action"]),
                          rate_per_s=float(config["ntp.rate_limit_per_s"]), burst=int(config["ntp.rate_limit_burst"]))
    settings = NtpSettings(str(config["ntp.listen"]), int(config["ntp.port"]), int(config["ntp.workers"]),
                           str(config["ntp.fast_path"]), server, str(config["ntp.keys_file"]))
    return _NtpPart(NtpService(settings), app)


class _PtpPart:
    """Starts the PTP port with the runner's other parts; its faults and state changes become alarms and log."""

    def __init__(self, service: Any, app: Appliance):
        self.service, self.app = service, app

    def start(self) -> None:
        self.app.ptp = self.service
        self.service.start()
        self.app._publish_ntp()

    def on_event(self, kind: str, text: str) -> None:
        now = self.app.now_tai_ns()
        if kind == "ptp-fault":
            self.app._alarms([Alarm("ptp-not-serving", Severity.MAJOR, True, f"PTP not served: {text}", now)])
        elif kind == "ptp-state" and "-> FAULTY" not in text:
            self.app._alarms([Alarm("ptp-not-serving", Severity.MAJOR, False, f"PTP port {text}", now)])

    def stop(self) -> None:
        self.app.ptp = None
        self.service.stop()


def ptp_settings(config: Config) -> dict[str, Any]:
    return {k[4:]: v for k, v in config.values.items() if k.startswith("ptp.")}


def _ptp(config: Config, app: Appliance) -> _PtpPart:
    """The PTP port from the profile and the settings; a profile conflict is a start-up error."""
    from appliance.outputs.ptp.datasets import gm_view
    from appliance.protocol.ptp.profiles import port_config_from
    from appliance.edge.ptp.gm_service import PtpService

    port_config, errors, warnings = port_config_from(ptp_settings(config))
    if errors:
        raise ValueError("; ".join(errors))
    for warning in warnings:
        log.warning("%s", warning)
    service = PtpService(port_config, str(config["ptp.interface"]), app.ntp_clock_map(time.time_ns()),
                         gm_view(app.status()), tuple(config["ptp.management_allow"]),
                         timestamping=str(config["ptp.timestamping"]),
                         served_phc=str(config["clock.phc_device"]) if config["clock.backend"] == "phc" else "")
    part = _PtpPart(service, app)
    service.on_event = part.on_event
    return part


def pulse_outputs_from(config: Config) -> tuple[Any, Any, Any]:
    """The 1PPS and IRIG-B outputs the settings ask for (None if neither), and their recording sinks."""
    from appliance.edge.irig.cli import offset_function
    from appliance.protocol.irig.timecode import CodedExpression
    from appliance.outputs.pulses import BlockRecording, IrigConfig, PpsConfig, RecordingSink, TimeOutputs

    pps = irig = pps_record = irig_record = None
    if config["pps_out.sink"] != "none":
        pps = PpsConfig(int(config["pps_out.width_ms"]) * NS_PER_MS, int(config["pps_out.cable_delay_ns"]),
                        str(config["pps_out.policy"]), int(config["pps_out.flag_width_ms"]) * NS_PER_MS)
        pps_record = RecordingSink()
    fmt = str(config["irig_out.format"])
    if fmt != "none":
        am, sink = fmt.startswith("B12"), str(config["irig_out.sink"])
        if sink == ("gpio" if am else "wav"):
            raise ValueError(f"irig_out.sink={sink} cannot carry {fmt}: a GPIO line carries DC level shift "
                             f"(B000-B007), a WAV file or stream amplitude modulation (B120-B127)")
        zone = str(config["irig_out.timezone"])
        try:
            offset_of = offset_function(zone)
        except ValueError as exc:
            raise ValueError(f"irig_out.timezone: {exc}") from None
        irig = IrigConfig(CodedExpression(int(fmt[3])), int(config["irig_out.cable_delay_ns"]),
                          int(config["irig_out.sample_rate"]) if am else None, offset_of, zone)
        irig_record = BlockRecording() if am else RecordingSink()
    if pps is None and irig is None:
        return None, None, None
    outputs = TimeOutputs(pps, pps_record.emit if pps_record else None, irig, irig_record.emit if irig_record else None)
    return outputs, pps_record, irig_record


class _TimeOutputPart:
    """A time output (serial string ...) started and stopped with the runner's other parts, shown in status."""

    def __init__(self, name: str, output: Any, app: Appliance):
        self.name, self.output, self.app = name, output, app

    def start(self) -> None:
        self.app.time_outputs[self.name] = self.output
        self.output.start()

    def stop(self) -> None:
        self.app.time_outputs.pop(self.name, None)
        self.output.stop()


class _PulseSinksPart:
    """The hardware sinks of the 1PPS and IRIG-B outputs (PHC periodic output, GPIO lines), started and closed with
    the runner's other parts; the planner hands them each second's edges."""

    def __init__(self, app: Appliance, sinks: dict[str, Any]):
        self.app, self.sinks = app, sinks

    def start(self) -> None:
        outputs = self.app.pulse_outputs
        for name, sink in self.sinks.items():
            getattr(sink, "start", lambda: None)()
            if name == "pps":
                outputs.pps_sink = sink.emit
            else:
                outputs.irig_sink = sink.emit
        self.app.pulse_sinks = dict(self.sinks)

    def stop(self) -> None:
        for sink in self.sinks.values():
            sink.close()


def _pulse_sinks(config: Config, app: Appliance) -> _PulseSinksPart:
    """PHC and GPIO sinks the settings ask for; a PHC sink needs the PHC to be the served clock."""
    sinks: dict[str, Any] = {}

    def to_host(raw_ns: int) -> int:  # edges are planned at most two seconds ahead: the rate error is negligible
        return time.time_ns() + raw_ns - app.raw_now()

    if config["pps_out.sink"] == "phc":
        if config["clock.backend"] != "phc" or not config["gnss.device"]:
            raise ValueError("pps_out.sink=phc needs the PHC to be the served clock (clock.backend=phc and a "
                             "receiver, gnss.device): its periodic output runs on the PHC's own seconds")
        from appliance.edge.perout import PeroutSink

        sinks["pps"] = PeroutSink(str(config["clock.phc_device"]), int(config["pps_out.phc_channel"]),
                                  int(config["pps_out.phc_pin"]), int(config["pps_out.cable_delay_ns"]))
    from appliance.edge.gpio import GpioSink

    if config["pps_out.sink"] == "gpio":
        sinks["pps"] = GpioSink(str(config["pps_out.gpio_chip"]), int(config["pps_out.gpio_line"]), to_host,
                                "appliance-1pps")
    if config["irig_out.format"] != "none" and config["irig_out.sink"] == "gpio":
        sinks["irig"] = GpioSink(str(config["irig_out.gpio_chip"]), int(config["irig_out.gpio_line"]), to_host,
                                 "appliance-irig")
    if config["irig_out.format"] != "none" and config["irig_out.sink"] == "wav":
        from appliance.edge.irig.wavout import WavSink

        path = str(config["irig_out.wav_path"]) or str(config.state_path() / "irig" / "irig-am.wav")
        sinks["irig"] = WavSink(path, int(config["irig_out.sample_rate"]), int(config["irig_out.wav_segment_s"]),
                                int(config["irig_out.wav_keep"]), lambda served: leap.tai_to_utc(served, app.utc.table))
    return _PulseSinksPart(app, sinks)


def _audit(config: Config, app: Appliance, loop: asyncio.AbstractEventLoop, table: leap.LeapTable) -> Any:
    """The audit trail and time-quality record under state_dir; a store that cannot be opened stops the start."""
    from appliance.audit.chain import AuditError
    from appliance.audit.service import AuditPart, open_stores

    state_dir = config.state_path()
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        store, quality, forwarder = open_stores(state_dir, config, table)
    except AuditError as exc:
        raise ValueError(str(exc)) from None
    part = AuditPart(app, loop, store, quality, forwarder)
    app.audit_part = part
    return part


def _web(config: Config, app: Appliance, loop: asyncio.AbstractEventLoop, table: leap.LeapTable) -> Any:
    """The web console (HTTPS), REST API and /metrics, reading what the appliance publishes."""
    from appliance.web.app import WebContext
    from appliance.web.server import Publisher, WebPart
    from appliance.web.settings_edit import SettingsEditor
    from appliance.web.usercli import USERS_FILE, first_admin
    from appliance.web.users import UserStore

    state_dir = config.state_path()
    state_dir.mkdir(parents=True, exist_ok=True)
    users = UserStore(state_dir / USERS_FILE, int(config["web.lockout_failures"]), float(config["web.lockout_s"]))
    made = first_admin(users, state_dir)
    if made is not None:
        log.warning("web console: no users yet: made user 'admin'; its password is in %s (change it, then delete "
                    "the file)", made)
    publisher = Publisher(app.status, loop)

    def audit_append(kind: str, actor: str, text: str, detail: dict[str, Any]) -> Any:
        part = getattr(app, "audit_part", None)
        return None if part is None else part.append(publisher.now_tai_ns(), kind, actor, text, detail)

    def export(since: int | None, until: int | None) -> bytes:
        return _export_bundle(app, state_dir, since, until, publisher.now_tai_ns())

    def label(tai_ns: int) -> str:
        u = leap.tai_to_utc(tai_ns, app.utc.table)
        return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"

    ctx = WebContext(
        status=lambda: publisher.latest, command=lambda req: publisher.run_on_loop(app.handle_command, req),
        users=users, settings=SettingsEditor(config, state_dir, app.apply_live), audit_append=audit_append,
        export_bundle=export, utc_label=label, now_tai_ns=publisher.now_tai_ns,
        posix_ms=lambda tai_ns: leap.tai_to_posix_ns(tai_ns, app.utc.table)[0] // 1_000_000,
        metrics_public=bool(config["web.metrics_public"]), session_timeout_s=int(config["web.session_timeout_s"]),
        rate_per_s=float(config["web.rate_per_s"]), rate_burst=5 * int(config["web.rate_per_s"]),
        budget_per_s=float(config["web.max_requests_per_s"]))
    ctx.extra["app"] = app
    cert = Path(str(config["web.cert"])).expanduser() if config["web.cert"] else state_dir / "web-cert.pem"
    key = Path(str(config["web.key"])).expanduser() if config["web.key"] else state_dir / "web-key.pem"
    part = WebPart(ctx, publisher, str(config["web.listen"]), int(config["web.port"]), cert, key, state_dir)
    return _WebOutput(part, app, ctx)


class _WebOutput:
    """Starts the console, gives it the audit and quality stores once they are open, shows it in status."""

    def __init__(self, part: Any, app: Appliance, ctx: Any):
        self.part, self.app, self.ctx = part, app, ctx

    def start(self) -> None:
        audit_part = getattr(self.app, "audit_part", None)
        if audit_part is not None:
            self.ctx.audit, self.ctx.quality = audit_part.store, audit_part.quality
        self.part.start()
        self.app.time_outputs["web"] = self.part

    def stop(self) -> None:
        self.app.time_outputs.pop("web", None)
        self.part.stop()


def _export_bundle(app: Appliance, state_dir: Path, since: int | None, until: int | None, now_tai_ns: int) -> bytes:
    import tempfile

    from appliance.audit.bundle import export_bundle, load_or_create_key

    part = app.audit_part
    key = load_or_create_key(state_dir)
    with tempfile.TemporaryDirectory(dir=state_dir) as tmp:
        path = Path(tmp) / "bundle.json"
        export_bundle(part.store, 0 if since is None else since, now_tai_ns + NS_PER_S if until is None else until,
                      key, path, part.label)
        return path.read_bytes()


def _serial_out(config: Config, app: Appliance) -> _TimeOutputPart:
    from appliance.edge.serialout import SerialTimeOutput

    output = SerialTimeOutput(str(config["serial_out.device"]), int(config["serial_out.baud"]),
                              str(config["serial_out.format"]), int(config["serial_out.offset_ms"]),
                              lambda: app.utc.table, app.status, app.served_at_host)
    return _TimeOutputPart("serial", output, app)


def _fresh(learned: LearnedState | None, now_tai_ns: int, max_age_s: int) -> LearnedState | None:
    if learned is None:
        return None
    age_s = (now_tai_ns - learned.saved_at_tai_ns) / NS_PER_S
    if not 0 <= age_s <= max_age_s or learned.state not in ("LOCKED", "HOLDOVER"):
        log.warning("learned clock state (%s, %.0f s old) not used: cold start", learned.state, age_s)
        return None
    return learned


def simulated(config: Config, scheduler: Scheduler, table: leap.LeapTable,
              world_table: leap.LeapTable | None = None, save_state: Callable[[LearnedState], None] | None = None,
              warm: bool = False) -> tuple[Appliance, Any]:
    """The appliance on the simulated world (the embedded default).  ``world_table`` is the truth about UTC the
    simulated sky broadcasts, when a scenario wants it to differ from what the appliance was shipped with.  ``warm``:
    the clock kept time across a restart (a restored state), so it does not start off by the cold-start error."""
    from appliance.sim.world import SimWorld

    world = SimWorld(scheduler, int(config["sim.seed"]), str(config["clock.oscillator"]), world_table or table,
                     lambda data, raw: app.on_bytes(data, raw), lambda edge: app.on_edge(edge))
    error_ns = 0 if warm else int(config["sim.initial_clock_error_ns"])
    start_true = world.true_ns()  # read once: the first oscillator reading can take milliseconds of host time
    backend = SoftClock(world.raw_ns(start_true), start_true + error_ns)

    def time_error_ns() -> int:
        true = world.true_ns()
        return backend.served_ns(world.raw_ns(true)) - true

    def served_at_host(host_ns: int) -> tuple[int, float]:
        true = leap.posix_to_tai_ns(host_ns, table)
        y = world.oscillator.smooth_frequency_ppb(true)  # the counter's rate against true (host) time
        return backend.served_ns(world.counter_ns(true)), y + backend.freq_ppb + y * backend.freq_ppb * 1e-9

    app = Appliance(config, scheduler, world.raw_ns, "simulated", backend, table, backend_name="simulated",
                    sim_time_error=time_error_ns, save_state=save_state, served_at_host=served_at_host)
    app.world = world
    from appliance.sim.upstream import SimUpstream

    seed = int(config["sim.seed"])
    if config["sim.gnss2"]:
        world.add_second_receiver(seed + 1, app.on_bytes2, app.on_edge2)
    if config["sim.ptp_upstream"]:
        world.upstreams["ptp"] = SimUpstream("ptp", scheduler, world.raw_ns, seed, NS_PER_S,
                                             float(config["sim.ptp_noise_ns"]), float(config["sim.ptp_asymmetry_ns"]),
                                             float(config["references.ptp_accuracy_ns"]), app.on_ref_time)
    if config["sim.ntp_upstream"]:
        world.upstreams["ntp"] = SimUpstream("ntp", scheduler, world.raw_ns, seed,
                                             int(config["references.ntp_interval_s"]) * NS_PER_S,
                                             float(config["sim.ntp_noise_ns"]), 0.0,
                                             float(config["references.ntp_accuracy_ns"]), app.on_ref_time)
    return app, world


def _hardware(config: Config, scheduler: Scheduler, table: leap.LeapTable,
              saver: Callable[[LearnedState], None]) -> Appliance:
    """A real receiver; the clock is a software clock over the host clock unless a kernel clock is chosen."""
    kind = str(config["clock.backend"])
    kind = "software" if kind in ("auto", "simulated") else kind
    backend: ClockBackend
    if kind == "software":
        raw0 = time.time_ns()
        backend = SoftClock(raw0, leap.posix_to_tai_ns(raw0, table))
    else:
        from appliance.edge.kernel_backend import KernelBackend
        from appliance.edge.kernel_clock import KernelClock

        if kind == "phc":
            kernel = KernelClock.phc(str(config["clock.phc_device"]))
            backend = KernelBackend(kernel, lambda raw: raw)  # a PHC counts TAI, as PTP does
        else:
            backend = KernelBackend(KernelClock.realtime(), lambda raw: leap.posix_to_tai_ns(raw, table))
    served_at_host = None
    if kind != "software":  # the kernel applies every correction itself: the host clock is the served clock
        served_at_host = lambda h: (leap.posix_to_tai_ns(h, table), 0.0)  # noqa: E731
    return Appliance(config, scheduler, time.time_ns, "hardware", backend, table, device=str(config["gnss.device"]),
                     backend_name=kind, save_state=saver, served_at_host=served_at_host)


def _hardware_edges(config: Config, app: Appliance, loop: asyncio.AbstractEventLoop) -> list[Any]:
    from appliance.edge.serial_reader import SerialReader

    def post(fn: Callable[..., None]) -> Callable[..., None]:
        return lambda *args: loop.call_soon_threadsafe(fn, *args)

    edges: list[Any] = [SerialReader(str(config["gnss.device"]), int(config["gnss.baud"]), post(app.on_bytes),
                                     post(app.on_device), max_backoff_s=float(config["gnss.reconnect_max_s"]))]
    pps_path = str(config["gnss.pps_device"])
    if pps_path:
        from appliance.edge.pps_linux import PpsReader

        edges.append(PpsReader(pps_path, post(app.on_edge),
                               on_error=lambda msg: log.warning("PPS %s: %s", pps_path, msg)))
    if app.receiver2 is not None:
        edges.append(SerialReader(str(config["references.gnss2_device"]), int(config["references.gnss2_baud"]),
                                  post(app.on_bytes2), post(app.on_device2),
                                  max_backoff_s=float(config["gnss.reconnect_max_s"])))
        pps2 = str(config["references.gnss2_pps_device"])
        if pps2:
            from appliance.edge.pps_linux import PpsReader

            edges.append(PpsReader(pps2, post(app.on_edge2),
                                   on_error=lambda msg: log.warning("PPS %s: %s", pps2, msg)))
    return edges
