"""The event router: maps every input to engine calls, and engine actions to effects the runtime performs.

Pure core: no I/O, no clock reads.  Every entry point takes ``Now`` (the local counter and the host clock, read once
by the runtime) and returns a list of effects:

* ``Notify(event)``  an event for the listeners (the audit trail, SNMP notifications, tests);
* ``PublishClock()`` the clock changed state or stepped: NTP and PTP must hear of it now, not a second late;
* ``SecondDone(now)`` the per-second publication (NTP and PTP clock maps, 1PPS/IRIG-B plans, kernel status);
* ``AuditCommand(...)`` an operator command, done or refused, for the audit trail.

One PPS edge, for instance: the runtime hands it to ``input("gnss", edge, now)``; the GNSS driver pairs it with its
label and measures it on the served clock (``refs/gnss.py``); the sample goes to the selector (``refs/selector.py``),
whose loop sample goes to the clock service (``clock/service.py``); the clock's state change becomes ``Notify`` and
``PublishClock``.  The router owns the engines; nothing else calls them.  Operator commands (holdover, integrity,
reference) are events too, answered with a reply and effects.  Nothing outside the router reads its engines: what
the surfaces, the simulator's trials and the benches see is ``snapshot(now, edges)``, one frozen ``TimeStatus``
(assembled by ``readmodel.py`` from the engines the router hands it), and the few named reads below.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from appliance import leap, readmodel
from appliance.alarms import (
    CLOCK_ALARMS,
    CLOCK_CODES,
    RECEIVER_ALARMS,
    RECEIVER_CODES,
    AlarmBook,
    spec_of,
)
from appliance.clock.learned import LearnedState
from appliance.clock.service import ClockService
from appliance.clock.state import ClockState
from appliance.config import parse_position
from appliance.events import (
    Alarm,
    ClockStateChanged,
    LeapInfo,
    PairedSecond,
    Position,
    ReceiverBaud,
    ReceiverFault,
    ReceiverNews,
    ReceiverState,
    ReceiverStateChanged,
    ReceiverWrite,
    Rejected,
    Severity,
    StepClock,
)
from appliance.gnss.guard import IntegrityChanged
from appliance.monitor import Answer, SyncMonitor
from appliance.readmodel import EdgeStatus
from appliance.refs.gnss import GnssReference
from appliance.refs.model import Reference, RefSample, RefUsable
from appliance.refs.selector import (
    LoopSample,
    ReferenceSelector,
    RefStateChanged,
    RefSwitched,
)
from appliance.status import TimeStatus
from appliance.units import NS_PER_MS, NS_PER_S
from appliance.utcoffset import UtcOffset

log = logging.getLogger("appliance")
BACKUP_REFERENCE = "reference-backup"  # the clock runs on a reference other than the highest-priority one
HostMap = Callable[[int], tuple[int, float]]  # host CLOCK_REALTIME ns -> (served TAI ns, served rate vs host, ppb)


@dataclass(frozen=True)
class Now:
    """One reading of the appliance's two clocks: the local counter (``raw_ns``) and the host (POSIX ns)."""

    raw_ns: int
    host_ns: int


# --- effects ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Notify:
    event: object


@dataclass(frozen=True)
class PublishClock:
    pass


@dataclass(frozen=True)
class ClockReading:
    """The served clock at one counter instant, as the second-locked outputs and the kernel status need it."""

    raw_ns: int
    served_ns: int
    synchronized: bool  # advertised as stratum 1
    error_bound_ns: int | None
    tai_utc_s: int
    table: leap.LeapTable
    raw_at: Callable[[int], int]  # served TAI ns -> the counter instant it falls on


@dataclass(frozen=True)
class SecondDone:
    """The second's work is done: time for the per-second publication (``reading(now)`` is what it publishes)."""

    now: Now


@dataclass(frozen=True)
class AuditCommand:
    kind: str
    actor: str
    text: str
    detail: dict[str, Any]


class _Readings:
    """The ``ClockView`` a driver reads the served clock through, at one ``Now``."""

    def __init__(self, router: Router, now: Now):
        self._router, self.raw_ns, self.host_ns = router, now.raw_ns, now.host_ns
        clock = router.clock
        self.knows_time = clock.state is not ClockState.FREERUN
        self.phase_ns = clock.phase_ns or 0.0

    def served_ns(self, raw_ns: int) -> int:
        return self._router.clock.backend.served_ns(raw_ns)

    def served_at_past_host(self, host_ns: int) -> int:
        return self._router.served_at_past_host(host_ns, Now(self.raw_ns, self.host_ns))

    def measure(self, paired: PairedSecond) -> tuple[float, float]:
        return self._router.clock.measure(paired)


class Router:
    def __init__(self, clock: ClockService, selector: ReferenceSelector, references: list[Reference],
                 utc: UtcOffset, served_at_host: HostMap, crossfeed_interval_ns: int, start: Now,
                 monitor: SyncMonitor | None = None):
        self.clock, self.selector, self.utc = clock, selector, utc
        self.references: dict[str, Reference] = {r.spec.name: r for r in references}
        self.gnss = next(r for r in references if isinstance(r, GnssReference) and r.watched)
        self.served_at_host = served_at_host
        self.crossfeed_interval_ns = crossfeed_interval_ns
        self.alarms = AlarmBook()
        self.monitor = monitor  # the sync monitor of downstream clients, when targets are configured
        self._crossfed_ns: dict[str, int] = {}
        self._last_rejects_logged: dict[str, int] = {}
        self._effects: list[object] = []
        self._receiver_faults: dict[str, dict[str, str]] = {}  # alarm code -> reference -> its text
        now_tai = self.now_tai_ns(start)
        self.alarms.apply(self.utc.check(now_tai))
        self.alarms.set_group(CLOCK_CODES, CLOCK_ALARMS.get("FREERUN"), "starting", now_tai)

    # --- inputs ----------------------------------------------------------------------------------------------------
    def input(self, ref: str, item: object, now: Now) -> list[object]:
        """What a reference's edge delivered (bytes, an edge, a measurement ...), to that reference's driver."""
        self._route(self.references[ref].feed(item, _Readings(self, now)), now)
        return self._take()

    def cross_check(self, source: str, offset_ns: float, uncertainty_ns: float, now: Now) -> list[object]:
        """An NTP cross-check answer: NTP minus the GNSS reference, not minus the served clock: before lock (or in
        holdover) the two differ by the clock's own phase (served minus reference), which is no news about the sky."""
        phase = self.clock.phase_ns or 0.0
        self._route(self.gnss.cross_check(now.raw_ns, source, offset_ns + phase, uncertainty_ns), now)
        return self._take()

    def monitor_answer(self, answer: Answer, now: Now) -> list[object]:
        """A downstream client's poll result (the sync monitor): its state, and the over-limit alarm."""
        if self.monitor is not None:
            self._alarms(self.monitor.record(answer))
        return self._take()

    def restore(self, learned: LearnedState, now: Now, clock_kept_time: bool) -> list[object]:
        """Use a learned state from the last run (the caller checked its age).  If the clock demonstrably kept time
        across the restart, hold over at once; otherwise only start the loop from the learned frequency, since a
        holdover bound would rest on a phase nobody vouches for."""
        downtime_s = max(0.0, (self.now_tai_ns(now) - learned.saved_at_tai_ns) / NS_PER_S)
        log.info("restoring learned clock state: %s, %.3f ppb, saved %.0f s ago%s", learned.state,
                 learned.frequency_ppb, downtime_s, "" if clock_kept_time else " (frequency only: time not kept)")
        if not self.clock.can_restore(learned):
            log.warning("learned clock state rests on %d s of learning, too little to hold over on (a loss after so "
                        "little learning free-runs): frequency only", learned.locked_seconds)
            self.clock.seed_frequency(learned.frequency_ppb, now.raw_ns)
        elif clock_kept_time:
            self._route(self.clock.restore(learned, downtime_s, now.raw_ns), now)
        else:
            self.clock.seed_frequency(learned.frequency_ppb, now.raw_ns)
        return self._take()

    # --- timers ----------------------------------------------------------------------------------------------------
    def tick(self, now: Now) -> list[object]:
        """Five times a second: the receivers notice silence."""
        readings = _Readings(self, now)
        for ref in self.references.values():
            self._route(ref.tick(readings), now)
        return self._take()

    def second(self, now: Now) -> list[object]:
        raw = now.raw_ns
        self._phase_for_refs(raw)
        self._route(self.selector.tick(raw, self.clock.correction_ns(raw)), now)
        self._reference_quality(raw)
        self.selector.set_slew_cap(self.clock.slew_cap_ns_per_s(), raw)
        if len(self.selector.refs) > 1:
            self._crossfeed(now)
        self._route(self.clock.tick(raw), now)
        if self.monitor is not None:
            self._alarms(self.monitor.check(self.now_tai_ns(now)))
        self._effects.append(SecondDone(now))
        return self._take()

    def minute(self, now: Now) -> list[object]:
        self._alarms(self.utc.check(self.now_tai_ns(now)))
        rx = self.gnss.receiver
        rejected = dict(rx.rejected)
        grown = {k: v - self._last_rejects_logged.get(k, 0) for k, v in rejected.items()
                 if v != self._last_rejects_logged.get(k, 0)}
        if grown:
            log.warning("receiver %s rejected input in the last minute: %s; latest: %s", rx.name,
                        ", ".join(f"{k} {v}" for k, v in sorted(grown.items())), rx.snapshot().last_rejects[-1:])
        self._last_rejects_logged = rejected
        return self._take()

    # --- reads -----------------------------------------------------------------------------------------------------
    def snapshot(self, now: Now, edges: EdgeStatus) -> TimeStatus:
        """The one read model at ``now``: the engines' state joined with what the edges report of themselves."""
        parts = readmodel.Parts(self.clock, self.selector, self.references, self.gnss, self.utc, self.alarms,
                                self.monitor)
        return readmodel.build(parts, now.raw_ns, edges)

    def leap_table(self) -> leap.LeapTable:
        """The leap-second table UTC is converted through (the packaged or configured one, extended by what the
        receiver announced)."""
        return self.utc.table

    def now_tai_ns(self, now: Now) -> int:
        """The served (disciplined) time at ``now``."""
        return self.clock.backend.served_ns(now.raw_ns)

    def reading(self, now: Now) -> ClockReading:
        backend, raw = self.clock.backend, now.raw_ns
        served = backend.served_ns(raw)
        inverse = getattr(backend, "raw_ns_at", None)
        raw_at = inverse if inverse is not None else (lambda s: raw + s - served)  # a kernel clock runs at rate 1
        snap = self.clock.snapshot(raw)
        return ClockReading(raw, served, snap.advertised.ntp_stratum == 1, snap.error_bound_ns,
                            self.utc.table.tai_utc_at_tai_ns(served), self.utc.table, raw_at)

    def served_at_past_host(self, host_ns: int, now: Now) -> int:
        """The served time at a host instant up to a few seconds before ``now``: carried back from now at the served
        clock's rate (the simulated oscillator cannot be read backwards)."""
        served_now, rate_ppb = self.served_at_host(now.host_ns)
        return served_now - round((now.host_ns - host_ns) * (1 + rate_ppb * 1e-9))

    def learned_state(self, now: Now) -> LearnedState | None:
        return self.clock.learned_state(now.raw_ns, self.now_tai_ns(now))

    @property
    def upstream_peer(self) -> str:
        """The active reference's upstream server (an NTP system peer), for the NTP reference ID."""
        active = self.references.get(self.selector.active or "")
        return "" if active is None else active.upstream_peer

    def apply_live(self, name: str, value: Any) -> bool:
        """Take a changed receiver setting without a restart; False if this one needs a restart."""
        if name == "gnss.cable_delay_ns":  # an operator's audited change, not an attack: the anchors move with it
            moved_ns = self.gnss.set_cable_delay(int(value))
            if moved_ns and self.clock.reference_source == self.gnss.spec.name:  # what the model learned from
                self.clock.reference_moved(moved_ns)
            log.warning("GNSS cable delay now %d ns: the reference's phase moves %+.0f ns, the integrity checks' line "
                        "and the holdover model with it", int(value), moved_ns)
            return True
        if name == "integrity.position" and self.gnss.guard is not None:
            text = str(value).strip()
            self.gnss.guard.set_home(Position(*parse_position(text)) if text else None)
            log.warning("antenna position %s: the position check measures from it", text or "cleared: surveying in")
            return True
        if name == "gnss.label_max_age_ms":  # a line setting: every receiver's
            for ref in self.references.values():
                if isinstance(ref, GnssReference):
                    ref.pairer.label_max_age_ns = int(value) * NS_PER_MS
            return True
        return False

    # --- operator commands ---------------------------------------------------------------------------------------
    def holdover(self, action: str, who: str, now: Now, reason: str = "") -> tuple[dict[str, Any], list[object]]:
        """Force the clock into holdover (maintenance, tests) or let it return; audited either way, with the
        operator's reason when one was given."""
        if action not in ("start", "stop"):
            return {"ok": False, "error": "holdover takes start or stop"}, []
        try:
            events = self.clock.force_holdover(action == "start", now.raw_ns, who)
        except ValueError as exc:
            self._audit(who, f"forced holdover {action} refused: {exc}",
                        {"command": "holdover", "action": action, "ok": False}, reason)
            return {"ok": False, "error": str(exc)}, self._take()
        log.warning("operator %s: holdover %s", who, action)
        self._audit(who, f"forced holdover {action}", {"command": "holdover", "action": action, "ok": True}, reason)
        self._route(events, now)
        return {"ok": True, "state": self.clock.state.value}, self._take()

    def integrity(self, action: str, who: str, now: Now, reason: str = "") -> tuple[dict[str, Any], list[object]]:
        """Operator override of the integrity verdict (trust, reject, auto) or a new survey-in; always audited."""
        guard = self.gnss.guard
        assert guard is not None
        events: list[object] = []
        try:
            if action == "resurvey":
                guard.resurvey()
            else:
                events = list(self.gnss.override(action, now.raw_ns, who))
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}, []
        log.warning("operator %s: integrity %s", who, action)
        self._audit(who, f"integrity {action}", {"command": "integrity", "action": action}, reason)
        self._route(events, now)
        return {"ok": True, "override": guard.override, "usable": guard.usable,
                "level": guard.monitor.verdict().level.value}, self._take()

    def reference(self, action: str, name: str, who: str, now: Now, reason: str = ""
                  ) -> tuple[dict[str, Any], list[object]]:
        """Operator control of the references: pin one (or unpin), enable or disable one."""
        raw = now.raw_ns
        try:
            if action == "pin":
                events = self.selector.pin(name or None, raw, who)
                text = f"reference pinned to {name}" if name else "reference selection automatic (unpinned)"
            elif action == "unpin":
                events, text = self.selector.pin(None, raw, who), "reference selection automatic (unpinned)"
            elif action in ("enable", "disable"):
                events = self.selector.enable(name, action == "enable", raw, who)
                text = f"reference {name} {action}d"
            else:
                return {"ok": False, "error": "reference takes pin NAME, unpin, enable NAME or disable NAME"}, []
        except ValueError as exc:
            log.warning("operator %s: reference %s %s refused: %s", who, action, name, exc)
            self._audit(who, f"reference {action} {name} refused: {exc}",
                        {"command": "reference", "action": action, "reference": name, "refused": str(exc)}, reason)
            return {"ok": False, "error": str(exc)}, self._take()
        log.warning("operator %s: %s", who, text)
        self._audit(who, text, {"command": "reference", "action": action, "reference": name}, reason)
        self._route(events, now)
        return {"ok": True, "done": text, "active": self.selector.active}, self._take()

    def acknowledge(self, code: str, who: str, now: Now, comment: str = "") -> tuple[dict[str, Any], list[object]]:
        """An operator acknowledges an active alarm: it stays active until its condition clears; audited."""
        try:
            ack = self.alarms.acknowledge(code, who, self.now_tai_ns(now), comment)
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}, []
        alarm = self.alarms.active[code]
        log.warning("operator %s acknowledged alarm %s", who, code)
        self._effects.append(AuditCommand("alarm.ack", who, f"acknowledged [{alarm.severity.value}] {alarm.text}"
                                          + (f" (comment: {ack.comment})" if ack.comment else ""),
                                          {"code": code, "severity": alarm.severity.value, "comment": ack.comment}))
        return {"ok": True, "code": code, "acked_by": ack.by, "acked_at_tai_ns": ack.at_ns}, self._take()

    def _audit(self, who: str, text: str, detail: dict[str, Any], reason: str = "") -> None:
        if reason:
            text, detail = f"{text} (reason: {reason})", {**detail, "reason": reason}
        self._effects.append(AuditCommand("command", who, text, detail))

    # --- routing ---------------------------------------------------------------------------------------------------
    def _take(self) -> list[object]:
        effects, self._effects = self._effects, []
        return effects

    def _route(self, events: Iterable[object], now: Now) -> None:
        """Each event is acted on as it comes (a driver yields its next one only after this), then heard of."""
        for ev in events:
            if isinstance(ev, Alarm):
                self._alarms([ev])
            elif isinstance(ev, RefSample):
                self._ref_sample(ev, now)
            elif isinstance(ev, RefUsable):
                if ev.distrust is not None and self.selector.active == ev.ref:
                    # before the selector lets go of it: the holdover it starts must rest on what is sound
                    d = ev.distrust
                    self.clock.distrust(d.since_raw_ns, None if d.frequency_ppb is None else
                                        (d.frequency_ppb, d.frequency_sigma_ppb))
                self._route(self.selector.set_usable(ev.ref, ev.usable, ev.reason, ev.at_raw_ns), now)
            elif isinstance(ev, (ReceiverWrite, ReceiverBaud)):
                self._effects.append(ev)  # the runtime hands it to that receiver's line
            elif isinstance(ev, ReceiverFault):
                self._receiver_fault(ev, now)
            else:
                self._handle(ev, now)
                self._effects.append(Notify(ev))

    def _receiver_fault(self, ev: ReceiverFault, now: Now) -> None:
        """Every receiver's faults of one kind make one alarm, naming each receiver that has it."""
        (log.warning if ev.active else log.info)("receiver %s: %s%s", ev.ref, "" if ev.active else "cleared: ",
                                                 ev.text)
        faults = self._receiver_faults.setdefault(ev.code, {})
        if ev.active:
            faults[ev.ref] = ev.text
        else:
            faults.pop(ev.ref, None)
        at = self.now_tai_ns(now)
        if faults:
            self._alarms([Alarm(ev.code, spec_of(ev.code).severity, True, "; ".join(faults[r] for r in sorted(faults)),
                                at)])
        else:
            self._alarms([Alarm(ev.code, spec_of(ev.code).severity, False, ev.text, at)])

    def _handle(self, ev: object, now: Now) -> None:
        if isinstance(ev, LoopSample):
            self._route(self.clock.on_offset(ev.offset_ns, ev.raw_ns, doubt_ns=ev.doubt_ns), now)
        elif isinstance(ev, RefSwitched):
            self._switched(ev, now)
        elif isinstance(ev, RefStateChanged):
            log.info("reference %s: %s -> %s (%s)", ev.ref, ev.old, ev.new, ev.reason)
        elif isinstance(ev, IntegrityChanged):
            (log.info if ev.usable and ev.new == "ok" else log.warning)(
                "GNSS integrity %s -> %s (%s): %s", ev.old, ev.new, "used" if ev.usable else "REJECTED", ev.reason)
        elif isinstance(ev, LeapInfo):
            self._alarms(self.utc.on_receiver(ev, self.now_tai_ns(now)))
        elif isinstance(ev, ReceiverStateChanged):
            if ev.old is ev.new:
                log.warning("receiver %s: still %s (%s)", self.gnss.receiver.name, ev.new.value, ev.reason)
            else:
                log.info("receiver %s: %s -> %s (%s)", self.gnss.receiver.name, ev.old.value, ev.new.value, ev.reason)
            self._receiver_alarms(ev, now)
        elif isinstance(ev, ReceiverNews):
            log.info("receiver %s: %s", ev.ref, ev.text)
        elif isinstance(ev, ClockStateChanged):
            log.info("clock: %s -> %s (%s)", ev.old, ev.new, ev.reason)
            self._set_clock_alarms(ev.new, ev.reason, now)
            self._effects.append(PublishClock())  # clients must not hear about a change up to a second late
        elif isinstance(ev, StepClock):
            log.warning("clock stepped by %+d ns (first lock)", ev.delta_ns)
            self._effects.append(PublishClock())
        elif isinstance(ev, Rejected) and ev.what == "pps":
            log.debug("PPS pairing rejected: %s %s", ev.reason, ev.detail)

    # --- references ------------------------------------------------------------------------------------------------
    def _ref_sample(self, sample: RefSample, now: Now) -> None:
        ref = self.references[sample.ref]
        if self.selector.active == sample.ref and ref.upstream_stratum is not None:
            self.clock.upstream_stratum = ref.upstream_stratum  # an NTP upstream's system peer may have changed
        self._phase_for_refs(sample.raw_ns)
        self._route(self.selector.on_sample(sample, self.clock.correction_ns(sample.raw_ns)), now)

    def _phase_for_refs(self, raw_ns: int) -> None:
        """Tell the selector whether the clock's phase is worth carrying on from at a switch: locked, or in holdover
        within its spec (then also how good it still is)."""
        state = self.clock.state
        self.selector.hold_phase = state in (ClockState.LOCKED, ClockState.HOLDOVER)
        self.selector.phase_bound_ns = self.clock.bound_ns(raw_ns) if state is ClockState.HOLDOVER else None

    def _switched(self, ev: RefSwitched, now: Now) -> None:
        new = ev.new or "none"  # the clock then holds over if it learned enough, else it free-runs: its own state says
        text = f"reference {ev.old or 'none'} -> {new}: {ev.reason}"
        if ev.buildout_ns:
            rate = self.selector.policy.slew_ns_per_s
            text += f" (phase {ev.buildout_ns:+.0f} ns built out, " + (
                f"slewed away at up to {rate:g} ns/s)" if rate > 0 else "kept until the next switch)")
        log.warning("%s", text)
        if ev.new is None:
            self._route(self.clock.on_reference(False, ev.reason, ev.at_raw_ns), now)
        else:
            ref = self.references[ev.new]
            self.clock.reference_kind = ref.spec.kind
            # The selector says when the reference is lost (its own timeout, on the raw samples); the loop's samples
            # lag those by up to a second, so its safety net must not fire first.
            self.clock.set_reference_timeout(ref.spec.timeout_s + 2.0)
            self.clock.upstream_stratum = ref.upstream_stratum
            self._reference_quality(ev.at_raw_ns)
            self._route(self.clock.on_reference(True, ev.reason, ev.at_raw_ns), now)
        best = min(self.selector.refs.values(), key=lambda r: r.spec.priority, default=None)  # enabled or not
        backup = ev.new is not None and best is not None and ev.new != best.spec.name
        self._alarms([Alarm(BACKUP_REFERENCE, Severity.WARNING, backup,
                            f"running on backup reference {ev.new}: {ev.reason}" if backup else f"reference {new}",
                            self.now_tai_ns(now))])

    def _reference_quality(self, raw_ns: int) -> None:
        """The clock's bound floor and loop follow the active reference, plus the phase still built out of it."""
        q = self.selector.active_quality(raw_ns)
        if q is not None:
            self.clock.set_reference(q[0] + abs(self.selector.buildout_ns(raw_ns)), q[1], self.selector.active)

    def _crossfeed(self, now: Now) -> None:
        """Every qualified non-GNSS reference is an independent opinion of GNSS time for the integrity checks
        (at most one per reference per ``integrity.ntp_interval_s``)."""
        raw_ns, name_gnss = now.raw_ns, self.gnss.spec.name
        if not self.selector.refs[name_gnss].live(raw_ns):
            return
        interval = self.crossfeed_interval_ns
        for name, r in self.selector.refs.items():
            if name == name_gnss or r.state.value != "qualified" or r.last is None:
                continue
            if raw_ns - self._crossfed_ns.get(name, -interval) < interval:
                continue
            g, o = self.selector.offset_now(name_gnss, raw_ns), self.selector.offset_now(name, raw_ns)
            if g is None or o is None:
                continue
            self._crossfed_ns[name] = raw_ns
            uncertainty = max(r.spec.accuracy_ns, r.last.uncertainty_ns)
            self._route(self.gnss.cross_check(raw_ns, name, g - o, uncertainty), now)

    # --- alarms ----------------------------------------------------------------------------------------------------
    def _receiver_alarms(self, ev: ReceiverStateChanged, now: Now) -> None:
        wanted = RECEIVER_ALARMS.get(ev.new)
        if ev.old is ReceiverState.DISCONNECTED and ev.new is ReceiverState.NO_DATA:
            wanted = None  # the line just came up: silence is an alarm only once the timeout says so
        self._notify(self.alarms.set_group(RECEIVER_CODES, wanted, ev.reason, self.now_tai_ns(now)))

    def _set_clock_alarms(self, state: str, reason: str, now: Now) -> None:
        self._notify(self.alarms.set_group(CLOCK_CODES, CLOCK_ALARMS.get(state), reason, self.now_tai_ns(now)))

    def _alarms(self, alarms: list[Alarm]) -> None:
        self._notify(self.alarms.apply(alarms))

    def raise_alarms(self, alarms: list[Alarm]) -> list[object]:
        """Alarms an edge raised or cleared (an output that cannot serve)."""
        self._alarms(alarms)
        return self._take()

    def _notify(self, changed: list[Alarm]) -> None:
        for alarm in changed:
            (log.warning if alarm.raised else log.info)("alarm %s %s: %s", alarm.code,
                                                        "raised" if alarm.raised else "cleared", alarm.text)
            self._effects.append(Notify(alarm))
