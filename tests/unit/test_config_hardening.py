"""Configuration that an operator, a script or an attacker can get wrong: control characters in a value, empty values
that would silently mean something else, TOML nested past the parser's recursion limit, a broken file of settings
saved from the console, and secrets in what the command line prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance import config as cfg
from tests.unit.test_cli_config import run


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "tab\there", "nul\x00", "del\x7f", "esc\x1b[31m"])
def test_a_string_setting_refuses_control_characters(value: str) -> None:
    setting = cfg.BY_NAME["snmp.sys_contact"]
    new, problem = cfg.check_value(setting, value, from_text=True)
    assert new is None and problem is not None
    assert problem.startswith("snmp.sys_contact:") and "control character" in problem
    assert "\n" not in problem  # the message quotes the value escaped, one line


def test_printable_unicode_is_still_a_good_value() -> None:
    value, problem = cfg.check_value(cfg.BY_NAME["snmp.sys_contact"], "Zoë <noc@example.net>", from_text=True)
    assert problem is None and value == "Zoë <noc@example.net>"


@pytest.mark.parametrize("pair, key", [("state_dir=", "state_dir"), ("ntp.allow=", "ntp.allow"),
                                       ("snmp.allow=", "snmp.allow")])
def test_an_empty_value_that_would_mean_something_else_is_refused(pair: str, key: str) -> None:
    with pytest.raises(cfg.ConfigError) as info:
        cfg.load(None, [pair])
    (problem,) = info.value.problems
    assert problem.startswith(f"{key}:") and "empty" in problem


@pytest.mark.parametrize("text", ["a = " + "[" * 5000, "a = " + "{b = " * 3000 + "1" + "}" * 3000,
                                  "x = [" * 2000 + "1" + "]" * 2000])
def test_toml_nested_past_the_recursion_limit_is_a_listed_problem(tmp_path: Path, text: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deep.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(cfg.ConfigError) as info:
        cfg.load(str(path))
    assert any(str(path) in p for p in info.value.problems)
    code, out, err = run(capsys, "check-config", str(path))
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith(f"appliance: config: {path}")


def _state_with_console_file(tmp_path: Path, text: str | bytes) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    target = state / cfg.CONSOLE_FILE
    target.write_bytes(text if isinstance(text, bytes) else text.encode())
    return state


def test_a_bad_saved_console_value_is_set_aside_and_the_good_ones_apply(tmp_path: Path) -> None:
    # Written by an older version, or by hand: a value the table refuses must not stop the appliance starting.
    state = _state_with_console_file(tmp_path, '[snmp]\nsys_contact = "a\\nb"\nsys_location = "rack 4"\n'
                                                '[ntp]\nport = 0\n')
    config = cfg.load(None, [f"state_dir={state}"])
    assert config["snmp.sys_location"] == "rack 4" and config.origins["snmp.sys_location"] == "console"
    assert config["snmp.sys_contact"] == cfg.BY_NAME["snmp.sys_contact"].default
    assert config["ntp.port"] == cfg.BY_NAME["ntp.port"].default
    assert len(config.notes) == 2 and all(n.startswith("console setting ignored: ") for n in config.notes)
    assert any("snmp.sys_contact" in n for n in config.notes) and any("ntp.port" in n for n in config.notes)


@pytest.mark.parametrize("content", [b"not toml at all [[[", b"\xff\xfe garbage", b"a = " + b"[" * 5000])
def test_an_unreadable_console_file_does_not_stop_a_start(tmp_path: Path, content: bytes,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    state = _state_with_console_file(tmp_path, content)
    config = cfg.load(None, [f"state_dir={state}"])
    assert config.notes and str(state / cfg.CONSOLE_FILE) in config.notes[0]
    empty = tmp_path / "appliance.toml"
    empty.write_text("", encoding="utf-8")
    code, out, err = run(capsys, "check-config", str(empty), "--set", f"state_dir={state}")
    assert code == 0 and f"warning: console setting ignored: {state / cfg.CONSOLE_FILE}" in err
    assert "Traceback" not in err


def test_set_wins_over_a_saved_console_value(tmp_path: Path) -> None:
    state = _state_with_console_file(tmp_path, '[snmp]\nsys_location = "rack 4"\n')
    config = cfg.load(None, [f"state_dir={state}", "snmp.sys_location=lab"])
    assert config["snmp.sys_location"] == "lab" and config.origins["snmp.sys_location"] == "--set"


def test_secrets_are_masked_in_what_the_command_line_prints(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    secret = "s3cret-community-x"
    empty = tmp_path / "appliance.toml"
    empty.write_text("", encoding="utf-8")
    code, out, _ = run(capsys, "config", "list", "--set", f"snmp.community={secret}")
    assert code == 0 and secret not in out and cfg.MASK in out
    code, out, err = run(capsys, "check-config", str(empty), "--set", f"snmp.community={secret}")
    assert code == 0 and secret not in out + err and "snmp.community" in out
    code, out, err = run(capsys, "check-config", str(empty), "--set", "snmp.community=bad\nline")
    assert code == 2 and "bad" not in err and "snmp.community" in err


def test_toml_output_escapes_what_it_writes() -> None:
    config = cfg.merge(cfg.defaults(), {"snmp.sys_location": 'quote " backslash \\ é'}, "test")
    text = cfg.to_toml(config, only_changed=True)
    assert cfg.flatten(__import__("tomllib").loads(text))["snmp.sys_location"] == 'quote " backslash \\ é'
