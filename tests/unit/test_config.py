"""Unit tests for appliance.config: the settings table, TOML and --set layers, problems, round trip."""

from __future__ import annotations

import ipaddress
import math
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance import config as cfg
from appliance.config import BY_NAME, SETTINGS, ConfigError, Setting, check_value, defaults, load, to_toml


def write(tmp_path, text: str, name: str = "appliance.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def problems_of(path: str | None = None, pairs: tuple[str, ...] = ()) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(path, pairs)
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


# --- the table -------------------------------------------------------------------------------------------

def test_embedded_default_validates():
    config = load()
    assert dict(config.values) == {s.name: s.default for s in SETTINGS}
    assert set(config.origins.values()) == {"default"}
    assert config.changed_from_default() == {}
    for s in SETTINGS:
        assert check_value(s, s.default) == (s.default, None), s.name


@pytest.mark.parametrize("name, kind", [
    ("gnss.device", "path"), ("gnss.baud", "int"), ("clock.oscillator", "enum"), ("ntp.listen", "address"),
    ("ntp.port", "int"), ("ptp.interface", "str"), ("ptp.transport", "enum"), ("ptp.profile", "enum"),
    ("ptp.domain", "int"), ("web.listen", "address"), ("web.port", "int"), ("snmp.port", "int"),
    ("state_dir", "path"),
])
def test_promised_settings_exist(name, kind):
    s = BY_NAME[name]
    assert s.type == kind
    assert s.help.strip()
    assert isinstance(s.restart, bool)
    assert defaults()[name] == s.default
    assert s.allowed()


def test_oscillator_choices():
    assert BY_NAME["clock.oscillator"].choices == ("tcxo", "ocxo", "ocxo-hp", "rubidium")
    for osc in ("tcxo", "ocxo", "ocxo-hp", "rubidium"):
        assert load(None, [f"clock.oscillator={osc}"])["clock.oscillator"] == osc


def test_nested_toml_maps_to_dotted_names(tmp_path):
    path = write(tmp_path, 'state_dir = "/var/lib/gm"\n[gnss]\nbaud = 115200\ndevice = "/dev/ttyS0"\n'
                           '[ptp]\nprofile = "g8275.1"\ndomain = 24\n[ntp]\nlisten = "::"\n')
    config = load(path)
    assert config["gnss.baud"] == 115200 and config["gnss.device"] == "/dev/ttyS0"
    assert config["ptp.profile"] == "g8275.1" and config["ptp.domain"] == 24
    assert config["ntp.listen"] == "::" and config["state_dir"] == "/var/lib/gm"
    assert config.origins["gnss.baud"] == path and config.origins["web.port"] == "default"
    assert config.control_socket_path().as_posix() == "/var/lib/gm/control.sock"


# --- problems --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, key, allowed", [
    ("[gnss]\nbaudrate = 9600\n", "gnss.baudrate", "unknown setting"),
    ("[ntp]\nport = \"123\"\n", "ntp.port", "int in [1, 65535]"),
    ("[ntp]\nport = 70000\n", "ntp.port", "int in [1, 65535]"),
    ("[ptp]\ndomain = -2\n", "ptp.domain", "int in [-1, 255]"),
    ("[gnss]\nbaud = 9601\n", "gnss.baud", "one of 1200, 2400"),
    ("[clock]\noscillator = \"cesium\"\n", "clock.oscillator", "one of tcxo, ocxo, ocxo-hp, rubidium"),
    ("[ptp]\ntransport = 4\n", "ptp.transport", "one of auto, udp4, udp6, l2"),
    ("[web]\nlisten = \"localhost\"\n", "web.listen", "an IPv4 or IPv6 address"),
    ("[gnss]\nreconnect_max_s = nan\n", "gnss.reconnect_max_s", "float in [0.1, 3600]"),
    pytest.param("[gnss]\nreconnect_max_s = 1" + "0" * 400 + "\n", "gnss.reconnect_max_s", "float in [0.1, 3600]",
                 id="float-overflow"),
    ("[gnss.baud]\nvalue = 9600\n", "gnss.baud", "one of"),
])
def test_each_bad_value_is_one_line_naming_key_and_allowed(tmp_path, text, key, allowed):
    [problem] = problems_of(write(tmp_path, text))
    assert problem.startswith(key + ":") and allowed in problem and "\n" not in problem


def test_unknown_key_suggests_the_close_name(tmp_path):
    [problem] = problems_of(write(tmp_path, "[gnss]\nport = 2\n"))
    assert "gnss.port: unknown setting" in problem and "ntp.port" in problem


def test_all_problems_listed_at_once(tmp_path):
    path = write(tmp_path, '[gnss]\nbaud = 7\nfoo = 1\n[ntp]\nport = 0\n[web]\nlisten = "nowhere"\n')
    problems = problems_of(path, ("ptp.domain=999", "nokey"))
    assert len(problems) == 6
    for key in ("gnss.baud", "gnss.foo", "ntp.port", "web.listen", "ptp.domain", "'nokey'"):
        assert sum(key in p for p in problems) == 1, key


def test_invalid_toml_is_one_clear_problem(tmp_path):
    path = write(tmp_path, "[gnss]\nbaud = = 9600\n")
    [problem] = problems_of(path)
    assert problem.startswith(path) and "not valid TOML" in problem and "line 2" in problem


def test_overlong_integer_is_a_problem_not_a_crash(tmp_path):
    [problem] = problems_of(write(tmp_path, "[ntp]\nport = " + "1" * 5000 + "\n"))
    assert "not valid TOML" in problem


@pytest.mark.parametrize("make", [lambda p: p / "missing.toml", lambda p: p])
def test_unreadable_file_is_a_clear_problem_with_the_others(tmp_path, make):
    path = str(make(tmp_path))
    problems = problems_of(path, ("ntp.port=x",))
    assert problems[0].startswith(f"{path}: cannot read configuration")
    assert len(problems) == 2 and problems[1].startswith("ntp.port:")


# --- --set ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pair, name, value", [
    ("ntp.port=0x7b", "ntp.port", 123), ("gnss.baud= 115200 ", "gnss.baud", 115200),
    ("ptp.domain=0o17", "ptp.domain", 15), ("gnss.cable_delay_ns=-250", "gnss.cable_delay_ns", -250),
    ("gnss.reconnect_max_s=2.5", "gnss.reconnect_max_s", 2.5), ("gnss.reconnect_max_s=10", "gnss.reconnect_max_s", 10.0),
    ("clock.oscillator=ocxo-hp", "clock.oscillator", "ocxo-hp"), ("web.listen=::1", "web.listen", "::1"),
    ("ntp.listen=192.0.2.7", "ntp.listen", "192.0.2.7"), ("gnss.device=/dev/ttyACM0", "gnss.device", "/dev/ttyACM0"),
    ("clock.phc_device=a=b", "clock.phc_device", "a=b"),
])
def test_set_coerces_text_per_type(pair, name, value):
    config = load(None, [pair])
    assert config[name] == value and type(config[name]) is type(value)
    assert config.origins[name] == "--set"


@pytest.mark.parametrize("text, value", [
    ("true", True), ("TRUE", True), ("yes", True), ("1", True), ("false", False), ("No", False), ("0", False)])
def test_bool_text(text, value):
    flag = Setting("x.flag", "bool", False, "a flag")
    assert check_value(flag, text, from_text=True) == (value, None)


def test_bool_rejects_other_text_and_numbers():
    flag = Setting("x.flag", "bool", False, "a flag")
    for raw, from_text in (("maybe", True), (1, False), ("true", False)):
        value, problem = check_value(flag, raw, from_text)
        assert value is None and problem.startswith("x.flag:") and "true or false" in problem


@pytest.mark.parametrize("pair", ["foo", "=1", " =1"])
def test_malformed_pair_is_a_clear_problem(pair):
    [problem] = problems_of(None, (pair,))
    assert problem == f"--set {pair!r}: expected KEY=VALUE"


@pytest.mark.parametrize("pair, key", [("ntp.port=abc", "ntp.port"), ("ntp.port=", "ntp.port"),
                                       ("gnss.reconnect_max_s=nan", "gnss.reconnect_max_s"),
                                       ("web.port=1.5", "web.port"), ("nope=1", "nope")])
def test_bad_set_value_names_the_key(pair, key):
    [problem] = problems_of(None, (pair,))
    assert problem.startswith(key + ":")


def test_later_layers_override_and_origins_record_them(tmp_path):
    path = write(tmp_path, "[ntp]\nport = 1123\n[web]\nport = 9000\n")
    config = load(path, ["ntp.port=2123", "snmp.port=1161", "snmp.port=1162"])
    assert (config["ntp.port"], config.origins["ntp.port"]) == (2123, "--set")
    assert (config["web.port"], config.origins["web.port"]) == (9000, path)
    assert (config["snmp.port"], config.origins["snmp.port"]) == (1162, "--set")
    assert config.origins["ptp.domain"] == "default"
    assert config.changed_from_default() == {"ntp.port": 2123, "web.port": 9000, "snmp.port": 1162}


# --- TOML output ---------------------------------------------------------------------------------------

def reparse(text: str) -> dict:
    """TOML back to dotted names; arrays as tuples, the form the settings table keeps lists in."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in cfg.flatten(tomllib.loads(text)).items()}


def test_to_toml_of_defaults_round_trips():
    text = to_toml(defaults())
    assert reparse(text) == {s.name: s.default for s in SETTINGS}
    assert cfg.merge(defaults(), reparse(text), "rt").values == defaults().values


def test_to_toml_round_trips_changed_values_and_only_changed(tmp_path):
    config = load(None, ['clock.phc_device=say "hi" \\ bye', "gnss.reconnect_max_s=0.25", "ptp.domain=7"])
    assert cfg.merge(defaults(), reparse(to_toml(config)), "rt").values == config.values
    assert reparse(to_toml(config, only_changed=True)) == config.changed_from_default()
    assert load(write(tmp_path, to_toml(config))).values == config.values


# --- property: check_value never raises ------------------------------------------------------------------

_texts = st.one_of(st.text(max_size=12), st.sampled_from(
    ["0x10", "-0", "1e3", "nan", "inf", "-inf", "1e999", "::1", "10.0.0.1", "true", "no", "0o777", "1_000", "9600",
     "115200", "ocxo", "rubidium", "udp6", "g8275.2", "debug", " 5", ""]))
_values = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-10**400, 10**400),
                    st.floats(), _texts, st.lists(st.integers(), max_size=2), st.dictionaries(st.text(), st.integers()))


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(SETTINGS), st.one_of(_values, _texts), st.booleans())
def test_check_value_returns_typed_value_or_named_problem(setting, raw, from_text):
    value, problem = check_value(setting, raw, from_text)
    if problem is not None:
        assert value is None and problem.startswith(setting.name + ":") and "\n" not in problem
        return
    expected = {"int": int, "float": float, "bool": bool, "networks": tuple, "servers": tuple}.get(setting.type, str)
    assert type(value) is expected
    if setting.type == "float":
        assert math.isfinite(value)
    if setting.choices:
        assert value in setting.choices
    if setting.minimum is not None:
        assert value >= setting.minimum
    if setting.maximum is not None:
        assert value <= setting.maximum
    if setting.type == "address":
        ipaddress.ip_address(value)
    if setting.type == "networks":
        assert all(ipaddress.ip_network(v, strict=False) for v in value)
