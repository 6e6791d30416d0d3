"""Fuzzing the configuration loader (``appliance/config.py``): arbitrary TOML text, arbitrary values for real setting
names, arbitrary ``--set`` pairs.

Contract: ``load_text`` and ``merge`` (with a problem list) never raise, and every problem is one line naming where
it comes from; ``merge`` without a list raises ConfigError and nothing else; a configuration that loaded without
problems renders (``to_toml``) to TOML that loads back to the same values.  Budget: ``fuzzing.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import event, given
from hypothesis import strategies as st

from appliance import config as cfg
from appliance.settings import SETTINGS
from tests.props.fuzzing import FUZZ, fuzz, mutated_text, tokens_text

DEPLOYED = (Path(__file__).parents[2] / "deploy" / "appliance.toml").read_text(encoding="utf-8")
NAMES = [s.name for s in SETTINGS]
DEFAULTS = cfg.defaults()


def load(text: str) -> tuple[cfg.Config, list[str]]:
    problems: list[str] = []
    loaded = cfg.merge(DEFAULTS, cfg.load_text(text, "fuzzed.toml", problems), "fuzzed.toml", problems=problems)
    assert all(isinstance(p, str) and p and "\n" not in p.strip() for p in problems), problems
    assert all(len(p) < 2000 for p in problems), max(problems, key=len)[:300]
    return loaded, problems


def assert_round_trips(loaded: cfg.Config) -> None:
    again, problems = load(cfg.to_toml(loaded))
    assert not problems, problems
    assert dict(again.values) == dict(loaded.values)


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-(2**70), 2**70), st.floats(),
                    st.text(max_size=30), st.sampled_from(["", "auto", "10.0.0.0/8", "::/0", "ntp.example:123",
                                                           "46.2,6.1,375", "B004", "info", "/dev/ttyS0", "\x00"]))
values = st.one_of(scalars, st.lists(scalars, max_size=4), st.dictionaries(st.text(max_size=5), scalars, max_size=3))


def nest(tree: dict[str, Any], name: str, value: Any) -> None:
    *parts, key = name.split(".")
    for part in parts:
        branch = tree.setdefault(part, {})
        if not isinstance(branch, dict):
            return
        tree = branch
    tree[key] = value


@st.composite
def settings_documents(draw: st.DrawFn) -> str:
    """TOML written by tomli-w: real setting names (and some made-up ones) with values of any type."""
    tree: dict[str, Any] = {}
    for name in draw(st.lists(st.one_of(st.sampled_from(NAMES), st.sampled_from(["gnss.bogus", "nope", "ptp.x.y"])),
                              max_size=6)):
        value = draw(values)
        if value is not None:  # TOML has no null
            nest(tree, name, value)
    try:
        return tomli_w.dumps(tree)
    except (TypeError, ValueError):  # what TOML cannot hold (e.g. a control character in a key)
        return ""


RECEIVER_KEYS = [n.partition(".")[2] for n in NAMES if n.startswith("gnss.")] + ["bogus", "devise"]
RECEIVER_VALUES = st.one_of(st.sampled_from(["", "/dev/ttyS2", "/dev/pps2", "gnss2", "roof", "ptp", "auto", "flash",
                                             "gps,galileo", "46.2,6.1,375", "Bad Name"]),
                            st.integers(-5, 200_000), st.sampled_from([9600, 38400]), st.booleans(),
                            st.text(max_size=10))
OLD = ["references.gnss_priority", "references.gnss2_device", "references.gnss2_baud", "references.gnss2_priority",
       "sim.gnss2"]


@st.composite
def receivers_documents(draw: st.DrawFn) -> str:
    """A [[gnss]] array of tables (real keys of a receiver and some made-up ones), maybe with old names beside it."""
    entries = draw(st.lists(st.dictionaries(st.sampled_from(RECEIVER_KEYS), RECEIVER_VALUES, max_size=4),
                            max_size=4))
    tree: dict[str, Any] = {"gnss": entries}
    for name in draw(st.lists(st.sampled_from(OLD), max_size=2)):
        value = draw(st.one_of(st.booleans(), st.integers(0, 5), st.sampled_from(["", "/dev/ttyS3"])))
        nest(tree, name, value)
    try:
        return tomli_w.dumps({k: v for k, v in tree.items() if v is not None})
    except (TypeError, ValueError):
        return ""


TOML_TOKENS = ["[", "]", "[[", "]]", "{", "}", "=", ",", ".", "\"", "'", "\"\"\"", "#", "\n", " ", "gnss", "ntp",
               "ptp", "port", "baud", "true", "false", "1", "-1", "1e999", "nan", "inf", "0x1F", "1979-05-27",
               "12:00:00", "\\u0000", "\\", "9" * 5000]


@FUZZ
@given(st.one_of(mutated_text(DEPLOYED, max_edits=3), settings_documents(), receivers_documents(),
                 tokens_text(TOML_TOKENS, 40), st.text(max_size=100)))
def test_any_text_loads_with_its_problems_listed(text: str) -> None:
    loaded, problems = load(text)
    event(f"config: {'problems' if problems else 'loaded'}")
    if not problems:
        assert_round_trips(loaded)
    try:
        cfg.merge(DEFAULTS, cfg.load_text(text, "fuzzed.toml", []), "fuzzed.toml")
    except cfg.ConfigError as exc:
        assert exc.problems if hasattr(exc, "problems") else str(exc)


@fuzz(1.0)
@given(st.lists(st.one_of(st.text(max_size=40), st.builds(lambda n, v: f"{n}={v}", st.sampled_from(NAMES),
                                                          st.text(max_size=30))), max_size=5))
def test_set_pairs_merge_or_list_their_problems(pairs: list[str]) -> None:
    problems: list[str] = []
    overrides = cfg.parse_set_pairs(pairs, problems)
    loaded = cfg.merge(DEFAULTS, overrides, "--set", from_text=True, problems=problems)
    if not problems:
        assert_round_trips(loaded)


# Thousands of nested arrays or inline tables: tomllib recurses once per level.
DEEP_ARRAYS = "[gnss]\nport = " + "[" * 50_000 + "]" * 50_000 + "\n"
DEEP_TABLES = "x = " + "{a = " * 20_000 + "1" + "}" * 20_000 + "\n"


@pytest.mark.parametrize("text", [DEEP_ARRAYS, DEEP_TABLES], ids=["arrays", "inline-tables"])
def test_deeply_nested_toml_is_a_problem_not_a_crash(text: str) -> None:
    """Hardening item 11 (nested TOML) as the fuzz test states it: a problem listed, nothing raised."""
    loaded, problems = load(text)
    assert problems and loaded.values == DEFAULTS.values
