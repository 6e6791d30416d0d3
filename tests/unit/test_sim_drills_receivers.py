"""The simulated world's receiver drills name which [[gnss]] receiver they act on (the first by default)."""

from __future__ import annotations

import pytest

from appliance.sim import drills
from tests.sim.conftest import build_sim


def test_receiver_drills_take_the_receiver_number() -> None:
    world = build_sim(**{"gnss2.device": "", "gnss3.device": ""}).world
    assert drills.apply(world, "receiver-off", "3") == "receiver-off (receiver 3)"
    assert [slot.powered for slot in world.receivers] == [True, True, False]
    assert drills.apply(world, "receiver-off") == "receiver-off"  # the first, as before
    assert drills.apply(world, "block-sky", "2") == "block-sky (receiver 2)"
    assert world.receivers[1].receiver.conditions.blocked and not world.receivers[2].receiver.conditions.blocked
    assert drills.apply(world, "receiver2-off") == "receiver2-off" and not world.receivers[1].powered
    with pytest.raises(ValueError, match="receivers 1 to 3"):
        drills.apply(world, "receiver-on", "4")


def test_without_a_second_receiver_the_drill_says_how_to_have_one() -> None:
    world = build_sim().world
    with pytest.raises(ValueError, match=r"no second receiver \(a second \[\[gnss\]\] table\)"):
        drills.apply(world, "receiver2-off")
