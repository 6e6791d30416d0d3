"""The configuration page's view of the settings table: units from names, ranges, widgets, sections, markers."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance import config as cfg
from appliance.settings import BY_NAME, SECTIONS, SETTINGS, unit_of
from appliance.web import settings_view as view
from appliance.web.settings_edit import SettingsEditor


@pytest.mark.parametrize("name, unit", [
    ("clock.max_frequency_ppb", "ppb"), ("gnss.cable_delay_ns", "ns"), ("gnss.label_max_age_ms", "ms"),
    ("clock.qualify_s", "s"), ("cpu_latency_us", "µs"), ("integrity.position_limit_m", "m"),
    ("references.slew_ns_per_s", "ns/s"), ("ntp.rate_limit_per_s", "/s"), ("audit.max_age_days", "days"),
    ("x.cn0_dbhz", "dB-Hz"), ("x.gain_db", "dB"), ("ntp.port", ""), ("integrity.phase_k", ""), ("ntp.servers", ""),
])
def test_a_unit_comes_from_the_name(name: str, unit: str) -> None:
    assert unit_of(name) == unit


def test_numbers_carry_their_unit_declared_where_the_name_does_not_say_it() -> None:
    assert BY_NAME["clock.holdover_temp_k"].unit == "K"
    assert BY_NAME["irig_out.sample_rate"].unit == "Hz"
    assert BY_NAME["gnss.label_max_age_ms"].unit == "ms"
    assert BY_NAME["integrity.phase_k"].unit == ""  # a factor, not kelvin
    assert all(s.unit == "" for s in SETTINGS if s.type not in ("int", "float"))  # text never gets a unit


def test_the_widget_follows_the_type() -> None:
    kinds = {name: view.input_kind(BY_NAME[name]) for name in
             ("log.level", "gnss.baud", "ntp.enabled", "clock.max_frequency_ppb", "web.port", "ntp.allow",
              "integrity.ntp_servers", "snmp.community", "snmp.sys_location", "integrity.position")}
    assert kinds == {"log.level": "select", "gnss.baud": "select", "ntp.enabled": "checkbox",
                     "clock.max_frequency_ppb": "number", "web.port": "number", "ntp.allow": "list",
                     "integrity.ntp_servers": "list", "snmp.community": "password", "snmp.sys_location": "text",
                     "integrity.position": "text"}


def test_a_range_reads_with_its_unit_and_the_bounds_are_the_tables() -> None:
    age = view.view_row(_row("gnss.label_max_age_ms"))
    assert (age["minimum"], age["maximum"], age["step"], age["range"]) == ("100", "990", "1", "100 … 990 ms")
    assert view.range_text(BY_NAME["gnss.cable_delay_ns"]) == "-1\u202f000\u202f000 … 1\u202f000\u202f000 ns"
    assert view.range_text(BY_NAME["gnss.reconnect_max_s"]) == "0.1 … 3600 s"
    frequency = view.view_row(_row("clock.max_frequency_ppb"))
    assert (frequency["minimum"], frequency["step"], frequency["text"]) == ("1", "any", "2000")
    assert view.range_text(BY_NAME["log.level"]) == ""


def test_values_read_as_the_command_line_takes_them() -> None:
    assert view.text_of(("192.0.2.0/24", "::/0")) == "192.0.2.0/24, ::/0"
    assert view.text_of(True) == "true" and view.text_of(0.5) == "0.5" and view.text_of(16.0) == "16"
    value, problem = cfg.check_value(BY_NAME["ntp.allow"], view.text_of(BY_NAME["ntp.allow"].default), from_text=True)
    assert problem is None and value == BY_NAME["ntp.allow"].default  # the shown text saves back unchanged


def test_changed_from_default_and_secrets() -> None:
    assert not view.changed(BY_NAME["ntp.allow"], ["0.0.0.0/0", "::/0"])  # a list from JSON equals the tuple
    assert view.changed(BY_NAME["ntp.allow"], ("192.0.2.0/24",))
    assert view.changed(BY_NAME["snmp.community"], cfg.MASK) and not view.changed(BY_NAME["snmp.community"], "")
    row = view.view_row(_row("snmp.community", value=cfg.MASK))
    assert row["text"] == "" and row["changed"]  # a secret's field starts empty, whatever is set


def test_sections_follow_the_table_with_counts_and_marks() -> None:
    rows = [_row(s.name) for s in SETTINGS]
    rows[[r["name"] for r in rows].index("clock.qualify_s")] |= {"value": 30, "pending_restart": True}
    sections = view.sections(rows)
    keys = [s["key"] for s in sections]
    assert keys == [k or view.TOP_SECTION for k in SECTIONS]  # the table's own groups, in its order
    assert sum(s["count"] for s in sections) == len(SETTINGS)
    clock = sections[keys.index("clock")]
    assert clock["count"] == len([s for s in SETTINGS if s.name.startswith("clock.")])
    assert (clock["changed"], clock["pending"]) == (1, 1)
    assert all(s["changed"] == 0 for s in sections if s["key"] != "clock")
    assert clock["description"] == "The disciplined clock: oscillator, backend, loop and holdover"
    assert sections[keys.index("general")]["description"].startswith("Top-level settings")
    assert [r["name"] for r in view.pending_restart(rows)] == ["clock.qualify_s"]
    assert view.section_of("state_dir") == "general" and view.section_of("ptp.domain") == "ptp"


def test_the_editor_rows_say_unit_bounds_choices_and_changed(tmp_path: Path) -> None:
    editor = SettingsEditor(cfg.merge(cfg.defaults(), {"ntp.port": 1123}, "--set"), tmp_path, lambda n, v: False)
    rows = {r["name"]: r for r in editor.rows()}
    assert (rows["ntp.port"]["changed"], rows["ntp.port"]["minimum"], rows["ntp.port"]["maximum"]) == (True, 1, 65535)
    assert rows["clock.max_frequency_ppb"]["unit"] == "ppb" and not rows["clock.max_frequency_ppb"]["changed"]
    assert rows["log.level"]["choices"] == ["debug", "info", "warning", "error"]
    editor.change("web.port", "9443", from_text=True)
    waiting = view.pending_restart(editor.rows())
    assert [(r["name"], r["running_text"], r["text"]) for r in waiting] == [("web.port", "8443", "9443")]


def _row(name: str, value: object = None) -> dict[str, object]:
    setting = BY_NAME[name]
    shown = setting.default if value is None else value
    return {"name": name, "type": setting.type, "value": shown, "running": shown, "default": setting.default,
            "help": setting.help, "restart": setting.restart, "allowed": setting.allowed(), "pending_restart": False,
            "origin": "default", "secret": setting.secret, "start_only": setting.start_only}
