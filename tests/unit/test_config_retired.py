"""A setting that no longer exists is read, ignored and reported, so a configuration valid before an upgrade still
starts the appliance."""

from __future__ import annotations

from pathlib import Path

from appliance import config as cfg


def test_ntp_fast_path_is_ignored_with_a_message(tmp_path: Path) -> None:
    path = tmp_path / "appliance.toml"
    path.write_text("[ntp]\nfast_path = \"off\"\nport = 11123\n")
    loaded = cfg.load(str(path), ["ntp.fast_path=on"])
    assert loaded.ntp.port == 11123
    assert any("ntp.fast_path" in note and "native data plane" in note for note in loaded.old_names)
