"""The configuration page's view of the settings: sections, the input each setting is edited with, unit and range.

Pure: plain data from the settings table (``settings.py``) and the editor's rows (``SettingsEditor.rows``);
the page (``templates/config.html``) draws it and ``static/config.js`` keeps it current after a save.  Everything here
is derived from the table (types, bounds, choices, units, the sections' own docstrings), never restated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from appliance.config import setting_of
from appliance.config_receivers import split_name
from appliance.settings import SECTIONS, Setting

TOP_SECTION = "general"  # the key and tab of the settings without a dot (state_dir, cpu_latency_us)
LIST_SEPARATOR = ", "  # lists are edited as text, comma-separated, as with --set


def section_of(name: str) -> str:
    """A setting's section: its name before the first dot (``ntp.allow`` -> ``ntp``), ``general`` without one."""
    return name.split(".", 1)[0] if "." in name else TOP_SECTION


def section_description(prefix: str) -> str:
    """What a section holds, in its class's own words (``clock``: 'The disciplined clock: oscillator, ...'); a
    receiver after the first (``gnss2``) says which it is and where it is set."""
    parts = split_name(prefix + ".device")
    if parts is not None:
        return (f"GNSS receiver {parts[0]} of the [[gnss]] array, a standby on its own antenna: set in the "
                "configuration file or with --set")
    cls = SECTIONS.get("" if prefix == TOP_SECTION else prefix)
    first = (cls.__doc__ or "").strip().splitlines()[0] if cls is not None and cls.__doc__ else ""
    if first.startswith("``") and "``: " in first:
        first = first.split("``: ", 1)[1]
    first = first.rstrip(".").replace("``", "")
    return first[:1].upper() + first[1:]


def input_kind(setting: Setting) -> str:
    """The widget a setting is edited with: select, checkbox, number, list, password or text."""
    if setting.secret:
        return "password"
    if setting.choices:
        return "select"
    if setting.type == "bool":
        return "checkbox"
    if setting.type in ("int", "float"):
        return "number"
    if setting.type in ("networks", "servers"):
        return "list"
    return "text"


def text_of(value: Any) -> str:
    """A value as the page shows it and its text input holds it: lists comma-separated, booleans true/false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return LIST_SEPARATOR.join(str(v) for v in value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def number_text(value: float | None) -> str:
    """A bound as an input's min or max takes it ('' when there is none)."""
    return "" if value is None else text_of(value)


def _grouped(value: float) -> str:
    """A bound for reading: thousands apart by a narrow space from 10 000 on (1 000 000, not 1000000)."""
    text = number_text(value)
    if abs(value) < 10_000 or not text.lstrip("-").isdigit():
        return text
    return f"{int(text):,}".replace(",", "\u202f")


def range_text(setting: Setting) -> str:
    """A number's range with its unit ('100 … 990 ms'), one end open ('≥ 0 s'); empty without bounds."""
    low, high = setting.minimum, setting.maximum
    unit = f" {setting.unit}" if setting.unit else ""
    if low is not None and high is not None:
        return f"{_grouped(low)} … {_grouped(high)}{unit}"
    if low is not None:
        return f"≥ {_grouped(low)}{unit}"
    if high is not None:
        return f"≤ {_grouped(high)}{unit}"
    return ""


def changed(setting: Setting, value: Any) -> bool:
    """Whether a row's value differs from the default; a secret's row holds the mask when it is set."""
    if setting.secret:
        return value not in ("", ())
    plain = list(value) if isinstance(value, tuple) else value
    default = list(setting.default) if isinstance(setting.default, tuple) else setting.default
    return bool(plain != default)


def view_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One editor row with what the page needs to draw it."""
    setting = setting_of(row["name"])
    assert setting is not None, row["name"]
    kind = input_kind(setting)
    return {**row, "section": section_of(setting.name), "input": kind, "unit": setting.unit,
            "minimum": number_text(setting.minimum), "maximum": number_text(setting.maximum),
            "step": "1" if setting.type == "int" else "any", "range": range_text(setting),
            "choices": [text_of(c) for c in setting.choices], "text": "" if kind == "password" else
            text_of(row["value"]), "default_text": text_of(setting.default), "changed": changed(setting, row["value"]),
            "running_text": text_of(row["running"]), "anchor": "setting-" + setting.name.replace(".", "-")}


def sections(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows grouped by section, in the table's order: key, description, rows, and how many are changed from
    their default or wait for a restart."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        view = view_row(row)
        grouped.setdefault(view["section"], []).append(view)
    return [{"key": key, "description": section_description(key), "rows": members, "count": len(members),
             "changed": sum(r["changed"] for r in members), "pending": sum(bool(r["pending_restart"]) for r in members)}
            for key, members in grouped.items()]


def pending_restart(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The settings saved since start that take effect only at the next restart, with running and saved values."""
    return [view_row(r) for r in rows if r["pending_restart"]]
