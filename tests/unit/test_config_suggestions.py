"""An unknown setting name is answered with the setting it most likely meant: from --set, from a TOML file, and from
the commands that take them (`appliance run`, `check-config`, `config list`)."""

from __future__ import annotations

import pytest

from appliance.cli import main
from appliance.config import SETTINGS, ConfigError, close_names, load


def problems_of(path: str | None = None, pairs: tuple[str, ...] = ()) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(path, pairs)
    return info.value.problems


@pytest.mark.parametrize("typed, meant", [
    ("gnss.devise", ["gnss.device"]),  # a misspelt key in a known section
    ("gnsss.device", ["gnss.device"]),  # a misspelt section
    ("web.prot", ["web.port"]),
    ("web.portt", ["web.port"]),
    ("state_dri", ["state_dir"]),  # a top-level setting
    ("GNSS.BAUD", ["gnss.baud"]),  # capitals
    ("snmp.user_file", ["snmp.users_file"]),
    ("ptp.domian", ["ptp.domain"]),
    ("clock.oscilator", ["clock.oscillator"]),
    ("gnss.baudrate", ["gnss.baud"]),
])
def test_a_misspelt_name_suggests_the_one_setting_it_meant(typed: str, meant: list[str]) -> None:
    assert close_names(typed) == meant
    [problem] = problems_of(pairs=(f"{typed}=1",))
    assert problem.startswith(f"{typed}: unknown setting (did you mean {meant[0]}?)")


def test_a_name_in_the_wrong_section_suggests_the_sections_that_have_it() -> None:
    assert set(close_names("gnss.port")) >= {"ntp.port", "web.port"}
    [problem] = problems_of(pairs=("gnss.port=2",))
    assert "did you mean " in problem and "ntp.port" in problem and " or " in problem


def test_nothing_alike_gets_no_guess_but_the_way_to_list_them_all() -> None:
    assert close_names("xyzzy") == []
    [problem] = problems_of(pairs=("xyzzy=1",))
    assert problem == "xyzzy: unknown setting; `appliance config list` shows them all"


def test_a_section_named_alone_is_said_to_be_a_section() -> None:
    [problem] = problems_of(pairs=("gnss=1",))
    assert problem.startswith("gnss: a section, not a setting") and "gnss.*" in problem


def test_every_suggestion_is_a_real_setting_and_a_real_name_suggests_nothing_else() -> None:
    names = {s.name for s in SETTINGS}
    for s in SETTINGS:
        assert s.name not in close_names(s.name)
        assert set(close_names(s.name[:-1])) <= names


def test_a_misspelt_key_in_a_toml_file_is_named_with_its_suggestion(tmp_path) -> None:
    path = tmp_path / "appliance.toml"
    path.write_text('[gnss]\ndevise = "/dev/ttyS0"\n[web]\nprot = 8443\n', encoding="utf-8")
    problems = problems_of(str(path))
    assert problems == ["gnss.devise: unknown setting (did you mean gnss.device?); `appliance config list` shows "
                        "them all",
                        "web.prot: unknown setting (did you mean web.port?); `appliance config list` shows them all"]


def test_a_long_name_is_shortened_and_not_searched() -> None:
    [problem] = problems_of(pairs=("gnss." + "d" * 5000 + "=1",))
    assert "unknown setting" in problem and len(problem) < 200 and "did you mean" not in problem


@pytest.mark.parametrize("argv", [
    ["check-config", "FILE", "--set", "gnss.devise=/dev/x"],
    ["config", "list", "--set", "gnss.devise=/dev/x"],
    ["run", "--set", "gnss.devise=/dev/x"],
    ["status", "--set", "gnss.devise=/dev/x"],
])
def test_each_command_says_did_you_mean_and_exits_2(tmp_path, capsys, argv: list[str]) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        main([str(empty) if a == "FILE" else a for a in argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "appliance: config: gnss.devise: unknown setting (did you mean gnss.device?)" in err
