"""The MIB's UNITS name the unit of the value as a MIB browser shows it: an object whose DISPLAY-HINT is "d-N"
(N > 0) is shown with the decimal point moved N places (375 m stored as 37500 centimetres and "d-2" shows 375.00),
so its UNITS must be "meters", not "centimeters" (which snmpwalk shows as "375.00 centimeters"), nor carry a scale
factor ("0.001 ppb", "1e-7 degrees", "0.1 dB-Hz")."""

from __future__ import annotations

import re

import pytest

from appliance.snmp import mibgen

# What a scaled unit looks like: a number, an exponent, or an SI prefix below one
SCALED = re.compile(r"\d|\b1?e-|\b(centi|milli|micro|nano|pico|deci|tenths?|hundredths?|thousandths?)", re.I)


def display_hints(text: str) -> dict[str, str]:
    """Textual convention -> its DISPLAY-HINT, from the MIB's text."""
    return dict(re.findall(r"^(\w+) ::= TEXTUAL-CONVENTION\s+DISPLAY-HINT \"([^\"]+)\"", text, re.M))


def objects(text: str) -> dict[str, tuple[str, str]]:
    """OBJECT-TYPE name -> (SYNTAX type, UNITS or ""), from the MIB's text."""
    found = {}
    for name, body in re.findall(r"^(\w+) OBJECT-TYPE\n(.*?)::=", text, re.M | re.S):
        syntax = re.search(r"SYNTAX\s+(\w+)", body)
        units = re.search(r"UNITS\s+\"([^\"]*)\"", body)
        found[name] = (syntax.group(1) if syntax else "", units.group(1) if units else "")
    return found


@pytest.fixture(scope="module")
def text() -> str:
    return mibgen.render_mib(mibgen.PLACEHOLDER_ENTERPRISE)  # as `appliance snmp mib` writes it


def test_the_text_is_read_the_way_the_compiler_reads_it(text: str) -> None:
    hints, objs = display_hints(text), objects(text)
    table = {o.name: o for o in mibgen.load_table() if o.kind != "notification"}
    assert set(table) <= set(objs) and len(table) > 100  # every scalar and column (tables and rows are not values)
    for name in table:
        syntax, units = objs[name]
        assert units == table[name].units, name
        assert hints.get(syntax) == (table[name].syntax.display_hint if syntax in hints else None), name


def test_an_object_shown_with_a_decimal_point_has_the_unit_of_what_is_shown(text: str) -> None:
    hints = display_hints(text)
    scaled = {name: (syntax, units) for name, (syntax, units) in objects(text).items()
              if re.fullmatch(r"d-[1-9]\d*", hints.get(syntax, ""))}
    assert {"applianceClockFrequency", "applianceRcvLatitude", "applianceRcvLongitude", "applianceRcvAltitude",
            "applianceConstMeanCn0"} <= set(scaled)
    wrong = {name: units for name, (_, units) in scaled.items() if SCALED.search(units)}
    assert wrong == {}, "UNITS with a scale factor on an object whose DISPLAY-HINT scales it already"


@pytest.mark.parametrize("name, units", [
    ("applianceClockFrequency", "ppb"),  # d-3 on 0.001 ppb: snmpwalk shows "33.488 ppb"
    ("applianceRcvLatitude", "degrees"),  # d-7 on 1e-7 degree: "46.2044000 degrees"
    ("applianceRcvLongitude", "degrees"),
    ("applianceRcvAltitude", "meters"),  # d-2 on centimetres: "375.00 meters"
    ("applianceConstMeanCn0", "dB-Hz"),  # d-1 on 0.1 dB-Hz: "45.3 dB-Hz"
])
def test_the_units_snmpwalk_prints(text: str, name: str, units: str) -> None:
    assert objects(text)[name][1] == units
    assert {o.name: o.units for o in mibgen.load_table()}[name] == units  # the committed JSON agrees
