"""Scenarios 1-7 (``appliance sim --scenario NAME``), each run with its default seed: every check it makes passes.

The scenario functions hold the checks themselves, so ``appliance sim`` and this test say the same thing; the few
figures asserted here are the ones the issue names."""

from __future__ import annotations

import pytest

from appliance.sim.scenarios import SCENARIOS, run_scenario

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_passes_its_own_checks(name: str) -> None:
    result = run_scenario(name, seed=1)
    failed = [check for check, ok in result.checks if not ok]
    assert not failed, f"scenario {result.number} {name}: failed {failed}; figures {result.figures}"
    assert result.number == list(SCENARIOS).index(name) + 1


def test_holdover_figures_are_within_the_published_class() -> None:
    ocxo = run_scenario("ocxo-holdover-24h", seed=2).figures
    rubidium = run_scenario("rubidium-holdover-24h", seed=2).figures
    assert abs(ocxo["te_24h_ns"]) <= 10_000 and abs(rubidium["te_24h_ns"]) <= 1_000
    assert rubidium["bound_24h_ns"] < ocxo["bound_24h_ns"]  # the better oscillator advertises a tighter bound


def test_cold_start_figures() -> None:
    f = run_scenario("cold-start", seed=3).figures
    assert f["to_acquiring_s"] <= 15 and f["to_locked_s"] <= 60
    assert len(f["steps_ns"]) == 1 and abs(f["steps_ns"][0] + 3_000_000) < 10_000
