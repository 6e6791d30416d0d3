"""The GNSS receivers of a configuration: the ``[[gnss]]`` array, ``--set gnssN.KEY``, and the names they replace.

Pure core (``config.py`` calls it; nothing here reads a file).  The first receiver is the ``gnss.*`` section of the
settings table, written ``[gnss]`` or as the first ``[[gnss]]`` table; receivers 2 to N are kept beside the table under
``gnss2.*`` ... ``gnssN.*`` with every setting of one receiver (``RECEIVER_KEYS``; the line settings in
``RECEIVER_SHARED`` stay in the first and apply to all).  Those are start-only: a file's ``[[gnss]]`` tables or
``--set gnssN.KEY=VALUE`` make them, the console and the REST API only show them.  A layer (the file, the console's
saved settings, the ``--set`` pairs) adds receivers and overrides their settings; none removes one.

The names of the one- or two-receiver configuration before the array (``references.gnss_priority``,
``references.gnss2_*``, ``sim.gnss2``) are still read, each with a message saying what it became; one set together
with what the array says about the same receiver is a problem naming both.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from appliance.settings import BY_NAME, MAX_RECEIVERS, RECEIVER_SHARED, GnssSettings, ReceiverSettings, Setting

RECEIVER_KEYS = tuple(f.name for f in dataclasses.fields(GnssSettings) if f.name not in RECEIVER_SHARED)
OTHER_REFERENCES = ("ptp", "ntp", "irig", "pps")  # the other references' names, which a receiver may not take
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,15}")
_EXTRA = re.compile(r"gnss([1-9][0-9]{0,5})\.(.+)", re.DOTALL)
# The names before the [[gnss]] array: old name -> (receiver number, its setting).
OLD_NAMES: dict[str, tuple[int, str]] = {
    "references.gnss_priority": (1, "priority"),
    "references.gnss2_device": (2, "device"),
    "references.gnss2_baud": (2, "baud"),
    "references.gnss2_pps_device": (2, "pps_device"),
    "references.gnss2_priority": (2, "priority"),
}
SIM_SECOND = "sim.gnss2"  # the old switch for a second simulated receiver
_WORDS = {"device": "device", "baud": "line speed (baud)", "pps_device": "PPS device (pps_device)",
          "priority": "priority"}
_ORDINALS = ("first", "second", "third")


def default_name(number: int) -> str:
    """A receiver's reference name when its entry gives none: gnss, gnss2, gnss3 ..."""
    return "gnss" if number == 1 else f"gnss{number}"


def prefix(number: int) -> str:
    return "gnss." if number == 1 else f"gnss{number}."


def _ordinal(number: int) -> str:
    return _ORDINALS[number - 1] if number <= len(_ORDINALS) else f"{number}th"


def split_name(name: str) -> tuple[int, str] | None:
    """``gnss3.device`` -> (3, "device"); None for any other name (``gnss.*`` is the first receiver's, in the table)."""
    match = _EXTRA.fullmatch(name)
    if match is None or int(match.group(1)) < 2:
        return None
    return int(match.group(1)), match.group(2)


def setting_row(name: str) -> Setting | None:
    """The row of ``gnssN.KEY`` (N from 2 to MAX_RECEIVERS): the first receiver's row under that name, start-only."""
    parts = split_name(name)
    if parts is None or parts[0] > MAX_RECEIVERS or parts[1] not in RECEIVER_KEYS:
        return None
    return dataclasses.replace(BY_NAME["gnss." + parts[1]], name=name, start_only=True)


def count(values: Mapping[str, Any]) -> int:
    """How many receivers a configuration's values hold (at least the first)."""
    n = 1
    while f"gnss{n + 1}.device" in values:
        n += 1
    return n


def extra_rows(values: Mapping[str, Any]) -> list[Setting]:
    """The rows of receivers 2 to N, in order: what `config list` and the console show after the table."""
    rows = []
    for number in range(2, count(values) + 1):
        rows += [row for key in RECEIVER_KEYS if (row := setting_row(prefix(number) + key)) is not None]
    return rows


def defaults_of(number: int) -> dict[str, Any]:
    """A new receiver's settings: the table's defaults."""
    return {prefix(number) + key: BY_NAME["gnss." + key].default for key in RECEIVER_KEYS}


def resolve(values: Mapping[str, Any]) -> tuple[ReceiverSettings, ...]:
    """Every receiver as the runtime reads it (``config.receivers``)."""
    shared = {key: values["gnss." + key] for key in RECEIVER_SHARED}
    out = []
    for number in range(1, count(values) + 1):
        own = {key: values[prefix(number) + key] for key in RECEIVER_KEYS}
        own["name"] = own["name"] or default_name(number)
        if number == 1 and not own["position"].strip():
            own["position"] = values["integrity.position"]
        out.append(ReceiverSettings(**own, **shared, number=number))
    return tuple(out)


def name_problem(text: str) -> str | None:
    """Why a receiver's name cannot be a reference's name (None: it can; empty means the default)."""
    if not text or NAME_PATTERN.fullmatch(text):
        return None if text not in OTHER_REFERENCES else f"{text!r} is the name of another kind of reference"
    return f"{text!r} is not a name: a lower-case letter, then up to 15 letters, digits, - or _"


# --- one layer ------------------------------------------------------------------------------------------------------
@dataclass
class Layer:
    """What one layer says of the receivers: its values under the names ``merge`` checks (gnss.*, gnssN.*), the
    receivers it names, and what its old names were read as."""

    values: dict[str, Any] = field(default_factory=dict)
    declared: set[int] = field(default_factory=set)
    messages: list[str] = field(default_factory=list)


Check = Callable[[Setting, Any, bool], tuple[Any, str | None]]


def expand(overrides: Mapping[str, Any], from_text: bool, have: int, check: Check, problems: list[str]) -> Layer:
    """One layer's flat names with its ``[[gnss]]`` array spread out and its old names read as what they became.
    ``have`` is how many receivers the layers before it made; ``from_text`` marks the ``--set`` pairs, the only
    place a ``gnssN.*`` name may be written (a file writes the N-th ``[[gnss]]`` table); ``check`` is the loader's
    ``check_value`` (handed in: ``config.py`` imports this module)."""
    layer = Layer()
    old: dict[str, Any] = {}
    for name, value in overrides.items():
        if name == "gnss" and isinstance(value, list):
            _array(value, layer, problems)
        elif name in OLD_NAMES or name == SIM_SECOND:
            old[name] = value
        elif (parts := split_name(name)) is not None:
            _extra(name, parts, value, from_text, layer, problems)
        else:
            layer.values[name] = value
    new_style = set(layer.declared)
    if SIM_SECOND in old:
        _sim_second(old.pop(SIM_SECOND), from_text, new_style, layer, check, problems)
    second = have >= 2 or 2 in layer.declared or bool(old.get("references.gnss2_device"))
    for name in OLD_NAMES:
        if name in old:
            _old_name(name, old[name], from_text, new_style, second, layer, check, problems)
    return layer


def _array(entries: list[Any], layer: Layer, problems: list[str]) -> None:
    if not entries:
        problems.append("gnss: an empty [[gnss]] array names no receiver; write one [[gnss]] table per receiver")
    if len(entries) > MAX_RECEIVERS:
        problems.append(f"gnss: {len(entries)} [[gnss]] tables; at most {MAX_RECEIVERS} receivers")
    for number, entry in enumerate(entries[:MAX_RECEIVERS], 1):
        if not isinstance(entry, dict):
            problems.append(f"gnss: [[gnss]] entry {number} is not a table of settings")
            continue
        if number > 1:
            layer.declared.add(number)
        for key, value in _flat(entry).items():
            if number > 1 and key in RECEIVER_SHARED:
                problems.append(_shared_problem(prefix(number) + key, number))
            else:
                layer.values[prefix(number) + key] = value


def _flat(table: Mapping[str, Any], within: str = "") -> dict[str, Any]:
    """A table's nested tables to dotted keys (no setting of a receiver is a table: each such key is unknown)."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{within}{key}."))
        else:
            flat[f"{within}{key}"] = value
    return flat


def _extra(name: str, parts: tuple[int, str], value: Any, from_text: bool, layer: Layer,
           problems: list[str]) -> None:
    number, key = parts
    if not from_text:
        problems.append(f"{name[:80]}: in a file, receiver {number} is the {_ordinal(number)} [[gnss]] table "
                        f"(gnss{number}.* names it with --set)")
    elif number > MAX_RECEIVERS:
        problems.append(f"{name[:80]}: at most {MAX_RECEIVERS} receivers")
    elif key in RECEIVER_SHARED:
        problems.append(_shared_problem(name, number))
    else:
        layer.declared.add(number)
        layer.values[name] = value


def _shared_problem(name: str, number: int) -> str:
    key = name.partition(".")[2]
    return (f"{name}: applies to every receiver; set gnss.{key} (the first [[gnss]] table), not receiver "
            f"{number}'s")


def _sim_second(raw: Any, from_text: bool, new_style: set[int], layer: Layer, check: Check,
                problems: list[str]) -> None:
    row = Setting(SIM_SECOND, "bool", False, "a second simulated receiver")
    value, problem = check(row, raw, from_text)
    if problem:
        problems.append(problem)
    elif 2 in new_style:
        problems.append(f"{SIM_SECOND} and the [[gnss]] array both configure [[gnss]] receiver 2 (gnss2): "
                        f"remove {SIM_SECOND}")
    elif value:
        layer.declared.add(2)
        layer.messages.append(f"{SIM_SECOND} = true is read as a second simulated receiver, [[gnss]] receiver 2 "
                              "(gnss2, a [[gnss]] table with an empty device); write it there")
    else:
        layer.messages.append(f"{SIM_SECOND} = false is read as no second receiver; remove it (a second receiver "
                              "is a second [[gnss]] table)")


def _old_name(name: str, raw: Any, from_text: bool, new_style: set[int], second: bool, layer: Layer, check: Check,
              problems: list[str]) -> None:
    number, key = OLD_NAMES[name]
    new = prefix(number) + key
    row = BY_NAME[new] if number == 1 else setting_row(new)
    assert row is not None
    value, problem = check(dataclasses.replace(row, name=name), raw, from_text)
    where = f"[[gnss]] receiver {number} ({default_name(number)})"
    if problem:
        problems.append(problem)
    elif number == 1 and new in layer.values:
        problems.append(f"{name} and {new} both set the {_WORDS[key]} of {where}: remove {name}")
    elif number > 1 and number in new_style:
        problems.append(f"{name} and the [[gnss]] array both configure {where}: remove {name}")
    elif number > 1 and not second:
        said = f"{name} = \"\" is read as no second receiver" if key == "device" else \
            f"{name} is ignored: there is no second receiver (references.gnss2_device is empty)"
        layer.messages.append(f"{said}; remove it (a second receiver is a second [[gnss]] table)")
    else:
        if number > 1:
            layer.declared.add(number)
        layer.values[new] = value
        layer.messages.append(f"{name} is read as the {_WORDS[key]} of {where}; write it there")


# --- the whole configuration ----------------------------------------------------------------------------------------
def problems_of(values: Mapping[str, Any]) -> list[str]:
    """What is wrong with the receivers together: a mixture of simulated receivers and devices, two on one device or
    PPS device, two of one name, a name another reference has."""
    receivers = resolve(values)
    found: list[str] = []
    simulated = [rx for rx in receivers if not rx.device]
    if simulated and len(simulated) < len(receivers):
        real = next(rx for rx in receivers if rx.device)
        found.append(f"[[gnss]]: receiver {simulated[0].number} ({simulated[0].name}) is simulated (no device) and "
                     f"receiver {real.number} ({real.name}) is on {real.device}: either every receiver has a device "
                     "or none has (the simulated world)")
    for what, of in (("device", lambda rx: rx.device), ("PPS device", lambda rx: rx.pps_device),
                     ("name", lambda rx: rx.name)):
        seen: dict[str, ReceiverSettings] = {}
        for rx in receivers:
            text = of(rx)
            if text and text in seen:
                first = seen[text]
                found.append(f"[[gnss]]: receivers {first.number} ({first.name}) and {rx.number} ({rx.name}) both "
                             f"have the {what} {text}")
            seen.setdefault(text, rx)
    return found
