"""Simulated upstream references: a PTP grandmaster and NTP servers the appliance can fall back on.

Pure apart from the scheduler it is given.  Every ``interval_ns`` of true time a source says what time it is at an
instant of the local oscillator: the true time plus its constant error (a PTP path asymmetry, an NTP server's offset)
plus white noise, as a ``PairedTime`` (the local counter instant, the reference's time).  Drills switch a source off
and on, or move its time (a wrong upstream the selector must disqualify).
"""

from __future__ import annotations

from collections.abc import Callable
from random import Random

from appliance.refs.model import PairedTime
from appliance.sched import Scheduler, TimerHandle, every


class SimUpstream:
    def __init__(self, name: str, scheduler: Scheduler, raw_of_true: Callable[[int], int], seed: int,
                 interval_ns: int, noise_ns: float, bias_ns: float, uncertainty_ns: float,
                 on_time: Callable[[PairedTime], None]):
        self.name, self.scheduler, self.raw_of_true = name, scheduler, raw_of_true
        self.rng = Random(f"{name}:{seed}")
        self.interval_ns, self.noise_ns, self.bias_ns = interval_ns, noise_ns, bias_ns
        self.uncertainty_ns = uncertainty_ns
        self.on_time = on_time
        self.powered = True
        self.samples = 0
        self._timer: TimerHandle | None = None

    def start(self) -> None:
        self._timer = every(self.scheduler, self.interval_ns, self._sample)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _sample(self) -> None:
        if not self.powered:
            return
        true = self.scheduler.now_ns()
        said = true + round(self.bias_ns + self.rng.gauss(0.0, self.noise_ns))
        self.samples += 1
        self.on_time(PairedTime(self.name, self.raw_of_true(true), said, self.uncertainty_ns))
