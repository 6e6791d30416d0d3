"""The simulated world: true time, the local oscillator that reads it, and the receiver that watches the sky.

Pure apart from the scheduler it is given.  Each true second the world emits the receiver's PPS edge (stamped on the
simulated oscillator, as a capture unit would) and, a little later, the receiver's burst of NMEA and UBX bytes (stamped
on the same oscillator as they "arrive").  Under the simulated scheduler true time is TAI; running live it is the host
clock, so a client on this host measures the appliance's served error directly.  Stamps are computed from the
scheduled true instant, never from when a timer actually fired, so loop jitter never leaks into the simulation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appliance import leap
from appliance.events import PpsEdge
from appliance.clock.oscillator import OSCILLATORS
from appliance.sim.oscillator import SimOscillator
from appliance.sched import Scheduler, TimerHandle, every
from appliance.sim.receiver import SimReceiver
from appliance.units import NS_PER_MS, NS_PER_S


class SimWorld:
    def __init__(self, scheduler: Scheduler, seed: int, oscillator: str, table: leap.LeapTable,
                 on_bytes: Callable[[bytes, int], None], on_edge: Callable[[PpsEdge], None],
                 burst_delay_ns: int = 80 * NS_PER_MS, chunks: int = 3):
        self.scheduler = scheduler
        self.start_true_ns = scheduler.now_ns()
        self.table = table
        self.oscillator = SimOscillator(OSCILLATORS[oscillator], seed, start_true_ns=self.start_true_ns)
        self.receiver = SimReceiver(seed, table)
        self._on_bytes, self._on_edge = on_bytes, on_edge
        self._burst_delay_ns = burst_delay_ns
        self._chunks = max(1, chunks)
        self._sequence = 0
        self._timer: TimerHandle | None = None
        self.receiver_powered = True
        self.upstreams: dict[str, Any] = {}  # name -> SimUpstream (PTP, NTP): other references the world offers
        # A second receiver on its own antenna (``add_second_receiver``): bytes and edges to its own callbacks.
        self.receiver2: SimReceiver | None = None
        self.receiver2_powered = True
        self._on_bytes2: Callable[[bytes, int], None] | None = None
        self._on_edge2: Callable[[PpsEdge], None] | None = None
        self._sequence2 = 0

    # --- the world's clocks ------------------------------------------------------------------------------
    def true_ns(self) -> int:
        return self.scheduler.now_ns()

    def raw_ns(self, true_ns: int | None = None) -> int:
        """The local oscillator's reading at a true instant (now, if not given)."""
        return self.oscillator.raw_ns(self.true_ns() if true_ns is None else true_ns)

    def counter_ns(self, true_ns: int) -> int:
        """The oscillator's reading without its white phase noise: for mapping host time onto served time."""
        return true_ns + round(self.oscillator.phase_error_ns(true_ns))

    def add_second_receiver(self, seed: int, on_bytes: Callable[[bytes, int], None],
                            on_edge: Callable[[PpsEdge], None]) -> SimReceiver:
        self.receiver2 = SimReceiver(seed, self.table)
        self._on_bytes2, self._on_edge2 = on_bytes, on_edge
        return self.receiver2

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
        if self.receiver2 is not None and self.receiver2_powered:
            self._receiver2_second(second_ns)
        if not self.receiver_powered:
            return
        if self.receiver.has_fix(second_ns):
            self._sequence += 1
            edge_true = self.receiver.edge_true_ns(second_ns)
            raw = self.oscillator.raw_ns(max(edge_true, self.start_true_ns))
            self._on_edge(PpsEdge(raw, self._sequence, "sim-pps"))
        data = self.receiver.burst(second_ns)
        step = -(-len(data) // self._chunks)
        for i in range(self._chunks):
            at = second_ns + self._burst_delay_ns + i * 5 * NS_PER_MS
            piece = data[i * step:(i + 1) * step]
            self.scheduler.call_at(at, lambda p=piece, t=at: self._deliver(p, t))

    def _receiver2_second(self, second_ns: int) -> None:
        rx = self.receiver2
        assert rx is not None and self._on_edge2 is not None and self._on_bytes2 is not None
        if rx.has_fix(second_ns):
            self._sequence2 += 1
            raw = self.oscillator.raw_ns(max(rx.edge_true_ns(second_ns), self.start_true_ns))
            self._on_edge2(PpsEdge(raw, self._sequence2, "sim-pps2"))
        data = rx.burst(second_ns)
        at = second_ns + self._burst_delay_ns + 20 * NS_PER_MS
        on_bytes = self._on_bytes2

        def deliver() -> None:
            if self.receiver2_powered and data:
                on_bytes(data, self.oscillator.raw_ns(at))
        self.scheduler.call_at(at, deliver)

    def _deliver(self, data: bytes, true_ns: int) -> None:
        if data and self.receiver_powered:
            self._on_bytes(data, self.oscillator.raw_ns(true_ns))
