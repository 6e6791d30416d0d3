"""What the console and the REST API may write into the settings: no control character anywhere (in list elements
too), and no path (state directory, keys, devices, output files) at all: those are set at start only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from appliance import config as cfg
from appliance.web.settings_edit import OVERRIDES_FILE
from harness.procs import ENV
from tests.web.conftest import ConsoleEnv

BAD_ELEMENTS = ["ntp.example\x1b[2J", "ntp\x00.example", "ntp.example\x9b31m", "ntp.\x7fexample"]


@pytest.mark.parametrize("element", BAD_ELEMENTS)
@pytest.mark.parametrize("name", ["integrity.ntp_servers", "references.ntp_servers"])
def test_a_control_character_inside_a_list_element_is_refused_over_rest(env: ConsoleEnv, name: str,
                                                                         element: str) -> None:
    admin = env.login("admin")
    assert admin.api("PUT", "/api/v1/config/snmp.sys_location", {"value": "rack 4"}).status_code == 200
    before = env.overrides.read_bytes()
    refused = admin.api("PUT", f"/api/v1/config/{name}", {"value": ["good.example", element]})
    assert refused.status_code == 400
    assert "control character" in refused.get_json()["error"]
    assert env.overrides.read_bytes() == before
    as_text = admin.api("PUT", f"/api/v1/config/{name}", {"value": f"good.example, {element}"})
    assert as_text.status_code == 400 and "control character" in as_text.get_json()["error"]


def test_a_control_character_in_a_network_list_is_refused(env: ConsoleEnv) -> None:
    admin = env.login("admin")
    refused = admin.api("PUT", "/api/v1/config/ntp.allow", {"value": ["192.0.2.0/24\x1b"]})
    assert refused.status_code == 400 and "control character" in refused.get_json()["error"]


@pytest.mark.parametrize("element", BAD_ELEMENTS[:2])
def test_the_command_line_and_the_configuration_file_refuse_it_too(tmp_path: Path, element: str) -> None:
    with pytest.raises(cfg.ConfigError, match="control character"):
        cfg.load(None, [f"integrity.ntp_servers=good.example,{element}"])
    conf = tmp_path / "appliance.toml"
    conf.write_text('[integrity]\nntp_servers = ["good.example", "%s"]\n'
                    % element.encode("unicode_escape").decode().replace("\\x", "\\u00"))
    out = subprocess.run([sys.executable, "-m", "appliance", "check-config", str(conf)], capture_output=True,
                         text=True, env=ENV, timeout=60)
    assert out.returncode == 2 and "integrity.ntp_servers" in out.stdout + out.stderr
    assert "control character" in out.stdout + out.stderr
    assert "\x1b" not in out.stdout + out.stderr and "\x00" not in out.stdout + out.stderr


def test_a_saved_list_with_an_escape_is_set_aside_at_the_next_start(env: ConsoleEnv) -> None:
    (env.state_dir / OVERRIDES_FILE).write_text('[integrity]\nntp_servers = ["ok.example", "bad\\u001b[2J"]\n'
                                                '[snmp]\nsys_location = "rack 4"\n')
    loaded = cfg.load(None, [f"state_dir={env.state_dir}"])
    assert loaded.integrity.ntp_servers == ()
    assert loaded.snmp.sys_location == "rack 4"
    assert any("integrity.ntp_servers" in note and "control character" in note for note in loaded.notes)
    assert not any("\x1b" in note for note in loaded.notes)


@pytest.mark.parametrize("name, value", [("state_dir", "/tmp/elsewhere"), ("web.cert", "/etc/ssl/private/x.pem"),
                                         ("ntp.keys_file", "/etc/shadow"), ("irig_out.wav_path", "/etc/passwd"),
                                         ("gnss.device", "/dev/sda"), ("control.socket", "/tmp/c.sock")])
def test_a_path_setting_cannot_be_written_from_the_console(env: ConsoleEnv, name: str, value: str) -> None:
    assert cfg.BY_NAME[name].start_only
    admin = env.login("admin")
    before = env.overrides.read_bytes() if env.overrides.exists() else None
    refused = admin.api("PUT", f"/api/v1/config/{name}", {"value": value})
    assert refused.status_code == 400
    assert "set only in the configuration file or with --set" in refused.get_json()["error"]
    assert (env.overrides.read_bytes() if env.overrides.exists() else None) == before
    row = next(r for r in admin.api("GET", "/api/v1/config").get_json()["settings"] if r["name"] == name)
    assert row["start_only"] is True
    page = admin.client.get("/config").get_data(as_text=True)
    start = page.index(f'id="setting-{name.replace(".", "-")}"')
    assert 'name="value"' not in page[start:page.index("</tr>", start)]  # shown, with no field to change it


def test_a_saved_path_from_an_older_release_is_ignored_at_start(env: ConsoleEnv, tmp_path: Path) -> None:
    (env.state_dir / OVERRIDES_FILE).write_text(f'state_dir = "{tmp_path / "elsewhere"}"\n'
                                                '[snmp]\nsys_location = "rack 4"\n')
    loaded = cfg.load(None, [f"state_dir={env.state_dir}"])
    assert loaded.state_path() == env.state_dir and loaded.snmp.sys_location == "rack 4"
    other = cfg.with_console_settings(cfg.merge(cfg.defaults(), {"state_dir": str(env.state_dir)}, "file"), set())
    assert other.state_path() == env.state_dir
    assert any("state_dir is set only in the configuration file" in note for note in other.notes)
