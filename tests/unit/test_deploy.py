"""The files in deploy/ that operators install are valid for this version."""

from __future__ import annotations

from pathlib import Path

from appliance import config as cfg

DEPLOY = Path(__file__).parents[2] / "deploy"


def test_default_configuration_file_validates_and_lists_every_setting() -> None:
    text = (DEPLOY / "appliance.toml").read_text()
    loaded = cfg.load(str(DEPLOY / "appliance.toml"))
    assert loaded["state_dir"] == "/var/lib/appliance" and loaded["clock.backend"] == "system"
    for setting in cfg.SETTINGS:
        assert f"{setting.name.rpartition('.')[2]} = " in text, f"{setting.name} missing from deploy/appliance.toml"
