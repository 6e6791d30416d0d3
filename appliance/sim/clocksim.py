"""The clock discipline on the simulated world, at the phase detector: days of simulated time in seconds.

Pure.  Each true second the simulated receiver emits its pulse (with its sawtooth and qErr), the simulated oscillator
stamps it, the served clock (a SoftClock steered by the engine's actions) reads it, and the phase detector hands the
offset to the discipline engine; half a second later the engine ticks and the served time error (served - true) is
recorded.  The NMEA path is skipped on purpose: the receiver's bytes are tested elsewhere, and decoding a day of them
would cost minutes, not seconds.  Everything the full appliance does with the clock is here: the same engine, phase
detector, clock model and clock service.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from appliance import leap
from appliance.events import ClockStateChanged, PairedSecond, StepClock
from appliance.clock.discipline import DisciplineParams
from appliance.clock.oscillator import OSCILLATORS
from appliance.sim.oscillator import SimOscillator
from appliance.clock.learned import LearnedState
from appliance.clock.service import ClockService
from appliance.clock.softclock import SoftClock
from appliance.sim.receiver import SimReceiver
from appliance.units import NS_PER_S

HALF_S = NS_PER_S // 2
DEFAULT_START_TAI_NS = 1_782_000_037 * NS_PER_S  # 2026-06-21, a quiet day for leap seconds


@dataclass
class Record:
    """One row per simulated second: true time, served error, advertised bound, state."""

    true_s: array = field(default_factory=lambda: array("q"))
    te_ns: array = field(default_factory=lambda: array("d"))
    bound_ns: array = field(default_factory=lambda: array("d"))
    state: list[str] = field(default_factory=list)
    transitions: list[tuple[int, str, str, str]] = field(default_factory=list)  # (true_s, old, new, reason)


class ClockSim:
    def __init__(self, oscillator: str = "ocxo", seed: int = 1, params: DisciplineParams | None = None,
                 start_tai_ns: int = DEFAULT_START_TAI_NS, initial_error_ns: int = 0,
                 temperature: Callable[[int], float] | None = None, thermometer: bool = False,
                 receiver_noise_ns: float = 2.0, profile: str = "default-e2e",
                 initial_offset_ppb: float | None = None, receiver_clock_ppb: float = 420.0):
        self.spec = OSCILLATORS[oscillator]
        self.osc = SimOscillator(self.spec, seed, temperature, start_true_ns=start_tai_ns,
                                 initial_offset_ppb=initial_offset_ppb)
        self.rx = SimReceiver(seed, leap.LeapTable.load_default(), white_noise_ns=receiver_noise_ns,
                              receiver_clock_ppb=receiver_clock_ppb)
        self.params = params or DisciplineParams()
        raw0 = self.osc.raw_ns(start_tai_ns)
        self.clock = SoftClock(raw0, start_tai_ns + initial_error_ns)
        self.service = ClockService(self.params, oscillator, self.clock, raw0, profile)
        self.engine = self.service.engine
        self.true_ns = start_tai_ns
        self.thermometer = thermometer
        self.report_qerr = True  # False: the receiver's qErr is not passed on (a receiver without TIM-TP)
        self.record = Record()
        self.phase_steps_ns: list[int] = []

    def temp_c(self, true_ns: int) -> float | None:
        return self.osc.temperature_c(true_ns) if self.thermometer else None

    def run(self, seconds: int, reference: Callable[[int], bool] | bool = True) -> Record:
        """Advance ``seconds`` true seconds; ``reference(true_s)`` says whether GNSS is usable that second."""
        available = (lambda _s: reference) if isinstance(reference, bool) else reference
        for _ in range(seconds):
            second = (self.true_ns // NS_PER_S + 1) * NS_PER_S
            if available(second // NS_PER_S):
                self._pulse(second)
            self._tick(second + HALF_S)
            self.true_ns = second
        return self.record

    def _pulse(self, second_ns: int) -> None:
        edge_true = self.rx.edge_true_ns(second_ns)
        raw = self.osc.raw_ns(edge_true)
        qerr = self.rx.qerr_ps(second_ns) if self.report_qerr else None
        paired = PairedSecond(raw, second_ns, qerr, second_ns // NS_PER_S)
        self._note(self.service.on_paired(paired, self.temp_c(edge_true)), second_ns)

    def _tick(self, true_ns: int) -> None:
        raw = self.osc.raw_ns(true_ns)
        temp = self.temp_c(true_ns)
        self._note(self.service.tick(raw, temp), true_ns)
        rec = self.record
        rec.true_s.append(true_ns // NS_PER_S)
        rec.te_ns.append(float(self.clock.served_ns(raw) - true_ns))
        bound = self.engine.bound_ns(raw, temp)
        rec.bound_ns.append(float("nan") if bound is None else bound)
        rec.state.append(self.engine.state.value)

    def _note(self, events: list[object], true_ns: int) -> None:
        for ev in events:
            if isinstance(ev, StepClock):
                self.phase_steps_ns.append(ev.delta_ns)
            elif isinstance(ev, ClockStateChanged):
                self.record.transitions.append((true_ns // NS_PER_S, ev.old, ev.new, ev.reason))

    def force_holdover(self, on: bool) -> None:
        self._note(self.service.force_holdover(on, self.osc.raw_ns(self.true_ns), "scenario"), self.true_ns)

    def learned_state(self) -> LearnedState | None:
        return self.service.learned_state(self.osc.raw_ns(self.true_ns), self.true_ns)

    def restore(self, learned: LearnedState) -> None:
        downtime_s = (self.true_ns - learned.saved_at_tai_ns) / NS_PER_S
        self._note(self.service.restore(learned, downtime_s, self.osc.raw_ns(self.true_ns)), self.true_ns)

    def served_error_ns(self, true_ns: int) -> int:
        return self.clock.served_ns(self.osc.raw_ns(true_ns)) - true_ns
