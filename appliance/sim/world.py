"""The simulated world: true time, the local oscillator that reads it, and the receivers that watch the sky.

Pure apart from the scheduler it is given.  Each true second the world emits each receiver's PPS edge (stamped on the
simulated oscillator, as a capture unit would) and, a little later, the receiver's burst of NMEA and UBX bytes (stamped
on the same oscillator as they "arrive").  Under the simulated scheduler true time is TAI; running live it is the host
clock, so a client on this host measures the appliance's served error directly.  Stamps are computed from the
scheduled true instant, never from when a timer actually fired, so loop jitter never leaks into the simulation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance import leap
from appliance.clock.oscillator import OSCILLATORS
from appliance.events import PpsEdge
from appliance.sched import Scheduler, TimerHandle, every
from appliance.sim.oscillator import SimOscillator
from appliance.sim.receiver import SimReceiver
from appliance.units import NS_PER_MS, NS_PER_S


@dataclass
class ReceiverSlot:
    """One receiver on its own antenna: its PPS edge each second it has a fix, and its burst of bytes after it,
    ``burst_delay_ns`` past the second in ``chunks`` pieces 5 ms apart (as a UART delivers a burst)."""

    receiver: SimReceiver
    on_bytes: Callable[[bytes, int], None]
    on_edge: Callable[[PpsEdge], None]
    source: str  # the PPS source's name on its edges
    burst_delay_ns: int = 80 * NS_PER_MS
    chunks: int = 3
    powered: bool = True
    sequence: int = 0


ANSWER_DELAY_NS = 15 * NS_PER_MS  # a receiver's answer to a command, as on a 115200 baud line


@dataclass
class SimLine:
    world: SimWorld
    slot: ReceiverSlot

    def write(self, data: bytes) -> None:
        if self.slot.powered:  # a receiver without power hears nothing
            self.world.answer(self.slot, data)

    def set_baud(self, baud: int) -> None:
        self.slot.receiver.line_baud = baud


class SimWorld:
    def __init__(self, scheduler: Scheduler, seed: int, oscillator: str, table: leap.LeapTable,
                 on_bytes: Callable[[bytes, int], None], on_edge: Callable[[PpsEdge], None],
                 burst_delay_ns: int = 80 * NS_PER_MS, chunks: int = 3, family: str = "ublox9"):
        self.scheduler = scheduler
        self.start_true_ns = scheduler.now_ns()
        self.table = table
        self.oscillator = SimOscillator(OSCILLATORS[oscillator], seed, start_true_ns=self.start_true_ns)
        self.family = family  # every receiver's command side: u-blox 9 or 8, Unicore, or NMEA only
        self.receivers = [ReceiverSlot(SimReceiver(seed, table, family=family), on_bytes, on_edge, "sim-pps", burst_delay_ns,
                                       max(1, chunks))]
        self._timer: TimerHandle | None = None
        self.upstreams: dict[str, Any] = {}  # name -> SimUpstream (PTP, NTP): other references the world offers

    @property
    def receiver(self) -> SimReceiver:
        """The first receiver (the appliance's own)."""
        return self.receivers[0].receiver

    @property
    def receiver_powered(self) -> bool:
        return self.receivers[0].powered

    @receiver_powered.setter
    def receiver_powered(self, on: bool) -> None:
        self.receivers[0].powered = on

    # --- the world's clocks ------------------------------------------------------------------------------
    def true_ns(self) -> int:
        return self.scheduler.now_ns()

    def raw_ns(self, true_ns: int | None = None) -> int:
        """The local oscillator's reading at a true instant (now, if not given)."""
        return self.oscillator.raw_ns(self.true_ns() if true_ns is None else true_ns)

    def counter_ns(self, true_ns: int) -> int:
        """The oscillator's reading without its white phase noise: for mapping host time onto served time."""
        return true_ns + round(self.oscillator.phase_error_ns(true_ns))

    def line(self, index: int) -> SimLine:
        """Receiver ``index``'s serial line as the appliance's set-up sees it: what it writes reaches the simulated
        receiver, whose answers come back on the line a few milliseconds later."""
        return SimLine(self, self.receivers[index])

    def answer(self, slot: ReceiverSlot, data: bytes) -> None:
        """What the appliance wrote reaches the receiver; its answer comes back on the line."""
        reply = slot.receiver.accept(data, self.true_ns())
        if reply:
            at = self.true_ns() + ANSWER_DELAY_NS
            self.scheduler.call_at(at, functools.partial(self._deliver, slot, reply, at))

    def add_receiver(self, seed: int, on_bytes: Callable[[bytes, int], None], on_edge: Callable[[PpsEdge], None],
                     ) -> ReceiverSlot:
        """Another receiver on an antenna of its own, its burst 20 ms after the first's, in one piece."""
        n = len(self.receivers) + 1
        slot = ReceiverSlot(SimReceiver(seed, self.table, family=self.family), on_bytes, on_edge, f"sim-pps{n}",
                            self.receivers[0].burst_delay_ns + 20 * NS_PER_MS * (n - 1), 1)
        self.receivers.append(slot)
        return slot

    # --- running -----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Emit a pulse on every true second from the next one on."""
        self._timer = every(self.scheduler, NS_PER_S, self._second)
        for upstream in self.upstreams.values():
            upstream.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for upstream in self.upstreams.values():
            upstream.stop()

    def _second(self) -> None:
        second_ns = self.true_ns() // NS_PER_S * NS_PER_S
        for slot in self.receivers:
            if slot.powered:
                self._receiver_second(slot, second_ns)

    def _receiver_second(self, slot: ReceiverSlot, second_ns: int) -> None:
        rx = slot.receiver
        if rx.has_fix(second_ns):
            slot.sequence += 1
            raw = self.oscillator.raw_ns(max(rx.edge_true_ns(second_ns), self.start_true_ns))
            slot.on_edge(PpsEdge(raw, slot.sequence, slot.source))
        data = rx.burst(second_ns)
        step = -(-len(data) // slot.chunks)
        for i in range(slot.chunks):
            at = second_ns + slot.burst_delay_ns + i * 5 * NS_PER_MS
            piece = data[i * step:(i + 1) * step]
            self.scheduler.call_at(at, functools.partial(self._deliver, slot, piece, at))

    def _deliver(self, slot: ReceiverSlot, data: bytes, true_ns: int) -> None:
        """Bytes read when the read runs, as from a serial port: a live loop that ran this late (a starved event
        loop, seconds behind) stamps them now, where the oscillator is no longer queried that far back."""
        if data and slot.powered:
            slot.on_bytes(data, self.oscillator.raw_ns(max(true_ns, self.true_ns())))
