"""Shared builders for simulation scenarios: the appliance on its simulated world under the simulated scheduler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from appliance import config as cfg, leap
from appliance.runtime.platforms import simulated
from appliance.runtime.runtime import Runtime
from appliance.sched import SimScheduler
from appliance.units import NS_PER_S


@dataclass
class Sim:
    scheduler: SimScheduler
    app: Runtime
    world: Any
    events: list[object]

    def run_s(self, seconds: float) -> None:
        self.scheduler.run_for(int(seconds * NS_PER_S))

    def of_type(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


def build_sim(start_utc: tuple[int, ...] = (2026, 6, 1, 12, 0, 0), seed: int = 1, oscillator: str = "ocxo",
              world_table: leap.LeapTable | None = None, **settings: Any) -> Sim:
    table = leap.LeapTable.load_default()
    start = leap.utc_fields_to_tai(*start_utc, 0, table) + 250_000_000
    pairs = [f"sim.seed={seed}", f"clock.oscillator={oscillator}"] + [f"{k}={v}" for k, v in settings.items()]
    config = cfg.load(None, pairs)
    scheduler = SimScheduler(start)
    app, world = simulated(config, scheduler, table, world_table)
    events: list[object] = []
    app.subscribe(events.append)
    world.start()
    return Sim(scheduler, app, world, events)


@pytest.fixture
def sim() -> Sim:
    return build_sim()
