"""Several GNSS receivers in the console: the dashboard's Receivers table, and the receivers after the first on the
Configuration page and in the REST API, listed read-only while gnss.* stays writable."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from appliance import config as cfg
from appliance.web.settings_edit import SettingsEditor
from tests.web.conftest import ConsoleEnv

SETTINGS = ["gnss2.device=", "gnss2.cable_delay_ns=15", "gnss3.priority=2"]


@pytest.fixture(scope="module")
def three_status() -> dict[str, Any]:
    """A simulated appliance on three receivers, the second pulled, as the console receives its status."""
    from appliance.status import to_dict
    from tests.sim.conftest import build_sim

    sim = build_sim(**dict(pair.split("=", 1) for pair in SETTINGS))
    sim.run_s(30)
    sim.world.receivers[1].powered = False
    sim.run_s(10)
    return json.loads(json.dumps(to_dict(sim.app.status())))


@pytest.fixture
def three(console_env: Callable[..., ConsoleEnv], three_status: dict[str, Any], tmp_path: Path) -> ConsoleEnv:
    config = cfg.load(None, [f"state_dir={tmp_path / 'cfg'}", *SETTINGS])
    (tmp_path / "cfg").mkdir()
    env = console_env(settings=SettingsEditor(config, tmp_path / "cfg", lambda name, value: False))
    env.status = three_status
    return env


def _row_html(page: str, row_id: str) -> str:
    start = page.index(f'id="{row_id}"')
    return page[start:page.index("</tr>", start)]


def test_the_dashboard_lists_every_receiver_with_its_reference(three: ConsoleEnv) -> None:
    page = three.login("viewer").client.get("/").get_data(as_text=True)
    assert "3 GNSS receivers ([[gnss]] in the configuration)" in page
    first, second, third = (_row_html(page, f"receiver-{name}") for name in ("gnss", "gnss2", "gnss3"))
    assert "<td>1</td><td>gnss</td><td>simulated</td><td>ZED-F9T, TIM 2.20</td>" in first
    assert "<td>survey-in " in first and "<td>ok</td><td>3d-fix</td>" in first and "qualified (active)" in first
    assert ">done</td>" in first  # the set-up's state, its detail in the cell's title
    assert "<td>gnss2</td><td>simulated</td>" in second and "<td>no-data</td>" in second and "<td>15 ns</td>" in second
    assert "no-signal" in second
    assert "<td>3</td><td>gnss3</td>" in third and "<td>2</td><td>qualified</td>" in third


def test_the_configuration_page_shows_the_other_receivers_read_only(three: ConsoleEnv) -> None:
    page = three.login("admin").client.get("/config").get_data(as_text=True)
    assert 'id="section-gnss2"' in page and 'id="section-gnss3"' in page
    assert "GNSS receiver 2 of the [[gnss]] array, a standby on its own antenna" in page
    cable = _row_html(page, "setting-gnss2-cable_delay_ns")
    assert 'name="value"' not in cable and "<code>15</code>" in cable
    assert "Set in the configuration file or with --set" in cable
    assert 'name="value"' in _row_html(page, "setting-gnss-cable_delay_ns")  # the first stays writable


def test_the_rest_api_lists_them_and_writes_only_the_first(three: ConsoleEnv) -> None:
    admin = three.login("admin")
    auth = {"Authorization": f"Bearer {three.token('admin')}"}
    rows = {r["name"]: r for r in admin.client.get("/api/v1/config", headers=auth).get_json()["settings"]}
    assert rows["gnss3.priority"]["value"] == 2 and rows["gnss3.priority"]["start_only"]
    refused = admin.api("PUT", "/api/v1/config/gnss2.cable_delay_ns", {"value": 20})
    assert refused.status_code == 400
    assert "gnss2.cable_delay_ns is set only in the configuration file or with --set" in refused.get_json()["error"]
    assert admin.api("PUT", "/api/v1/config/gnss.cable_delay_ns", {"value": 20}).status_code == 200
    assert three.setting("gnss.cable_delay_ns") == 20 and three.setting("gnss2.cable_delay_ns") == 15
