"""A GNSS receiver as a time reference: bytes and PPS edges in, phase samples and the receiver's events out.

Pure core.  One driver per receiver, however many there are.  Bytes go through the receiver's framing and decoding
(``gnss/receiver.py``); its time labels are paired with the PPS edges (``gnss/pairing.py``); each paired second,
stamped on the served clock, is a ``RefSample``.  The reference is usable while the receiver has a fix and, on a
*watched* receiver, while the integrity guard (``gnss/guard.py``) accepts its sky: the guard sees every epoch and
every sample's free phase, and holds back an outlier until the next sample says step or noise.

The watched receiver is the appliance's own: its epochs, labels, state changes, leap news and the guard's verdicts go
on to the router (status, alarms, the audit trail and SNMP hear of them).  Another receiver is a standby that only
offers its samples and its usability; its state changes are logged.  Events are yielded one at a time, each after
what it caused, so the router acts on a sample before the driver measures the next one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from appliance.events import (
    Alarm,
    DeviceEvent,
    GnssEpoch,
    PairedSecond,
    PpsEdge,
    ReceiverBaud,
    ReceiverFault,
    ReceiverNews,
    ReceiverState,
    ReceiverStateChanged,
    ReceiverWrite,
    SatInfo,
    TimeLabel,
    TimePulseInfo,
)
from appliance.gnss.guard import ReferenceGuard, ReferenceUsable
from appliance.gnss.pairing import PpsPairer
from appliance.gnss.receiver import GnssReceiver
from appliance.refs.model import ClockView, Driver, RefSample, RefSpec, RefUsable

log = logging.getLogger("appliance")
USABLE_STATES = (ReceiverState.FIX_3D, ReceiverState.TIME_ONLY)
PAIRED_KEPT = 64  # the most recent paired seconds, for the console and tests


@dataclass(frozen=True)
class ReceiverBytes:
    """A chunk of the receiver's byte stream, stamped with its arrival on the local counter."""

    data: bytes
    rx_raw_ns: int


class GnssReference(Driver):
    def __init__(self, spec: RefSpec, receiver: GnssReceiver, pairer: PpsPairer,
                 guard: ReferenceGuard | None = None):
        super().__init__(spec)
        self.receiver, self.pairer, self.guard = receiver, pairer, guard
        self.watched = guard is not None
        self.pps_source, self.pps_edges = "none", 0
        self.paired: list[PairedSecond] = []
        self.satellites: tuple[SatInfo, ...] = ()  # the latest epoch's sky (epochs without one keep the last)
        self._receiver_ok: tuple[bool, str] = (True, "")
        self._integrity_ok: tuple[bool, str] = (True, "")

    # --- the Reference interface --------------------------------------------------------------------------
    def feed(self, item: object, clock: ClockView) -> Iterator[object]:
        if isinstance(item, ReceiverBytes):
            yield from self._events(self.receiver.feed(item.data, item.rx_raw_ns), clock)
        elif isinstance(item, PpsEdge):
            self.pps_edges += 1
            self.pps_source = item.source
            yield from self._events(self.pairer.on_edge(item), clock)
        elif isinstance(item, DeviceEvent):
            yield from self._events(self.receiver.on_device(item, clock.raw_ns), clock)
        else:
            raise self.refuse(item)

    def tick(self, clock: ClockView) -> Iterator[object]:
        yield from self._events(self.receiver.tick(clock.raw_ns), clock)

    def status(self) -> dict[str, Any]:
        """The receiver in this reference's row: its state, what it is, how it is set up, its antenna."""
        snap = self.receiver.snapshot()
        setup = snap.setup or {}
        return {"receiver_state": snap.state.value, "model": setup.get("model", ""),
                "firmware": setup.get("firmware", ""), "setup": setup.get("state", "off"),
                "setup_detail": setup.get("detail", ""), "timing_mode": setup.get("mode", ""),
                "antenna": snap.antenna or ""}

    def set_cable_delay(self, delay_ns: int) -> float:
        """An operator's audited change of the cable delay, from the next paired second on.  Returns how far it moves
        the reference's free phase (the offset is served time at the corrected edge minus the label: a longer delay
        is an earlier edge, a smaller offset); the integrity line moves with it."""
        moved_ns = float(self.pairer.cable_delay_ns - delay_ns)
        self.pairer.cable_delay_ns = delay_ns
        if self.guard is not None and moved_ns:
            self.guard.reference_moved(moved_ns)
        return moved_ns

    # --- what the watched receiver's integrity checks hear from elsewhere ----------------------------------
    def cross_check(self, raw_ns: int, source: str, offset_ns: float, uncertainty_ns: float) -> Iterator[object]:
        """Another opinion of GNSS time (an NTP server, another qualified reference): GNSS minus it."""
        if self.guard is not None:
            yield from self._guarded(self.guard.on_ntp(raw_ns, source, offset_ns, uncertainty_ns))

    def override(self, action: str, raw_ns: int, who: str) -> Iterator[object]:
        """The operator's integrity override (trust, reject, auto); ValueError for anything else."""
        assert self.guard is not None
        yield from self._guarded(self.guard.set_override(action, raw_ns, who))

    # --- the receiver's events -------------------------------------------------------------------------------
    def _events(self, events: Iterable[object], clock: ClockView) -> Iterator[object]:
        for ev in events:
            yield from self._event(ev, clock)

    def _event(self, ev: object, clock: ClockView) -> Iterator[object]:
        if isinstance(ev, TimeLabel):
            yield from self._events(self.pairer.on_label(ev), clock)
        elif isinstance(ev, TimePulseInfo):
            self.pairer.on_time_pulse(ev)
        elif isinstance(ev, PairedSecond):
            yield from self._paired(ev, clock)
        elif isinstance(ev, ReceiverStateChanged):
            self._receiver_ok = (ev.new in USABLE_STATES, f"receiver {ev.new.value}: {ev.reason}")
            if not self.watched:
                log.info("receiver %s: %s -> %s (%s)", self.spec.name, ev.old.value, ev.new.value, ev.reason)
            yield self._usable(clock.raw_ns)
        elif isinstance(ev, GnssEpoch) and self.guard is not None:
            if ev.satellites:
                self.satellites = ev.satellites
            yield from self._guarded(self.guard.on_epoch(ev))
        elif isinstance(ev, (ReceiverWrite, ReceiverBaud, ReceiverFault, ReceiverNews)):
            # every receiver's line and faults, standby or not: ``ref`` is the reference's name
            yield replace(ev, ref=self.spec.name)
            return
        if self.watched:
            yield ev  # a standby receiver's own events stay here (its leap news: the watched one's are used)

    def _paired(self, paired: PairedSecond, clock: ClockView) -> Iterator[object]:
        offset, free_phase = clock.measure(paired)
        if self.guard is not None:
            self.paired = (self.paired + [paired])[-PAIRED_KEPT:]
            yield from self._guarded(self.guard.on_free_phase(paired.edge_raw_ns, free_phase))
            if self.guard.hold_sample:  # an outlier waits for the next sample to say step or noise
                return
        doubt = self.guard.doubt_ns() if self.guard is not None and self.guard.enabled else 0.0
        yield RefSample(self.spec.name, paired.edge_raw_ns, offset, self.spec.accuracy_ns, doubt)

    def _guarded(self, events: list[object]) -> Iterator[object]:
        """What the integrity guard says: its alarms first, then its verdicts (each after what it caused)."""
        yield from (e for e in events if isinstance(e, Alarm))
        for ev in events:
            if isinstance(ev, ReferenceUsable):
                self._integrity_ok = (ev.usable, ev.reason)
                yield replace(self._usable(ev.at_raw_ns), distrust=ev.distrust)
            if not isinstance(ev, Alarm):
                yield ev

    def _usable(self, raw_ns: int) -> RefUsable:
        """Usable when the receiver has a fix and the integrity checks accept it."""
        (rx_ok, rx_why), (ok, why) = self._receiver_ok, self._integrity_ok
        return RefUsable(self.spec.name, rx_ok and ok, why if rx_ok and not ok else rx_why, raw_ns)
