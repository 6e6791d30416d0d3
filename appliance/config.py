"""The loader that checks a configuration against the settings table, and the checked configuration.

Core module: pure except ``load``, which reads the TOML file it is given; the table itself is ``settings.py``.  A
configuration is the embedded default, overlaid by an optional TOML file, overlaid by ``--set KEY=VALUE`` pairs;
every problem found on the way is collected (not raised one at a time) so an operator sees them all at once.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import math
import reprlib
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import tomli_w

from appliance import config_receivers as receivers_of
from appliance.config_receivers import OLD_NAMES
from appliance.settings import (BY_NAME, SETTINGS, STANDARD_BAUDS, AuditSettings, AuthSettings,
                                ClockSettings,
                                ControlSettings, GnssSettings, IntegritySettings, IrigOutSettings, LogSettings,
                                MonitorSettings, NtpSettings, PpsOutSettings, PtpSettings, QualitySettings,
                                ReceiverSettings, ReferencesSettings, SerialOutSettings, Setting, SimSettings,
                                SnmpSettings, TopSettings, WebSettings)

__all__ = ["BY_NAME", "OLD_NAMES", "SETTINGS", "STANDARD_BAUDS", "Config", "ConfigError", "ReceiverSettings",
           "Setting", "check_value", "defaults", "load", "merge", "setting_of", "settings_of"]
T = TypeVar("T")
MASK = "********"  # what a set secret shows as, to every role
_short = reprlib.Repr()  # a value in a message: bounded in length and nesting, whatever was sent
_short.maxstring, _short.maxother, _short.maxlevel = 80, 80, 3


class ConfigError(Exception):
    """A configuration with one or more problems; ``problems`` holds one line each."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


class _Section(Generic[T]):
    """``config.clock``: the ``clock.*`` settings as their typed section, built once per configuration."""

    def __init__(self, cls: type[T]):
        self.cls = cls

    def __set_name__(self, owner: type, name: str) -> None:
        self.prefix = "" if name == "top" else name + "."

    def __get__(self, config: Config, owner: type) -> T:
        cache: dict[str, Any] = config.__dict__.setdefault("_sections", {})
        if self.prefix not in cache:
            names = [f.name for f in dataclasses.fields(self.cls)]  # type: ignore[arg-type]
            cache[self.prefix] = self.cls(**{n: config.values[self.prefix + n] for n in names})
        return cache[self.prefix]  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Config:
    """A checked configuration: every setting has a value of its declared type.  Read it by section
    (``config.clock.max_frequency_ppb``), or by dotted name where the name is data (``config[name]``).  The GNSS
    receivers are ``config.receivers``; the first is also ``config.gnss``, and receivers 2 to N sit in ``values``
    under ``gnss2.*`` ... (``config_receivers.py``)."""

    values: Mapping[str, Any]
    origins: Mapping[str, str] = field(default_factory=dict)  # name -> "default" | file path | "--set"
    # Problems of the settings saved from the console, which were set aside (not applied) so the appliance starts
    # anyway; the appliance raises an alarm with them.
    notes: tuple[str, ...] = ()
    # What each name from before the [[gnss]] array was read as (logged at start, shown by check-config).
    old_names: tuple[str, ...] = ()

    gnss = _Section(GnssSettings)
    clock = _Section(ClockSettings)
    integrity = _Section(IntegritySettings)
    references = _Section(ReferencesSettings)
    sim = _Section(SimSettings)
    serial_out = _Section(SerialOutSettings)
    pps_out = _Section(PpsOutSettings)
    irig_out = _Section(IrigOutSettings)
    web = _Section(WebSettings)
    audit = _Section(AuditSettings)
    quality = _Section(QualitySettings)
    ntp = _Section(NtpSettings)
    ptp = _Section(PtpSettings)
    snmp = _Section(SnmpSettings)
    auth = _Section(AuthSettings)
    monitor = _Section(MonitorSettings)
    top = _Section(TopSettings)
    control = _Section(ControlSettings)
    log = _Section(LogSettings)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def receivers(self) -> tuple[ReceiverSettings, ...]:
        """Every GNSS receiver, in the order of the [[gnss]] array (the first is the one ``config.gnss`` reads)."""
        cache: dict[str, Any] = self.__dict__.setdefault("_sections", {})
        if "[[gnss]]" not in cache:
            cache["[[gnss]]"] = receivers_of.resolve(self.values)
        return cache["[[gnss]]"]  # type: ignore[no-any-return]

    def section(self, prefix: str) -> dict[str, Any]:
        """The ``prefix.*`` settings by their name within the section (``ptp.domain`` -> ``domain``)."""
        return {k[len(prefix) + 1:]: v for k, v in self.values.items() if k.startswith(prefix + ".")}

    def state_path(self) -> Path:
        return Path(self.top.state_dir).expanduser()

    def control_socket_path(self) -> Path:
        explicit = self.control.socket
        return Path(explicit).expanduser() if explicit else self.state_path() / "control.sock"

    def changed_from_default(self) -> dict[str, Any]:
        return {k: v for k, v in self.values.items() if v != _row(k).default}


def setting_of(name: str) -> Setting | None:
    """The row of a setting of the table, or of receiver 2 to N (``gnss2.device``); None for anything else."""
    return BY_NAME.get(name) or receivers_of.setting_row(name)


def _row(name: str) -> Setting:
    row = setting_of(name)
    assert row is not None, name
    return row


def settings_of(config: Config) -> list[Setting]:
    """Every row of this configuration: the table's, with those of its receivers after the first (start-only) after
    the first's (``gnss.*``)."""
    after = max(i for i, s in enumerate(SETTINGS) if s.name.startswith("gnss.")) + 1
    return [*SETTINGS[:after], *receivers_of.extra_rows(config.values), *SETTINGS[after:]]


def defaults() -> Config:
    return Config({s.name: s.default for s in SETTINGS}, {s.name: "default" for s in SETTINGS})


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested TOML tables to dotted names: ``{"gnss": {"baud": 9600}}`` -> ``{"gnss.baud": 9600}``."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name not in BY_NAME:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def shown(setting: Setting, value: Any) -> Any:
    """A value as it may be shown or logged: a secret that is set is the mask."""
    return MASK if setting.secret and value not in ("", ()) else value


def check_value(setting: Setting, value: Any, from_text: bool = False) -> tuple[Any, str | None]:
    """Coerce ``value`` to the setting's type; return (value, None) or (None, problem).  A problem never quotes a
    secret, and quotes any other value shortened (a value may be megabytes or thousands of levels deep)."""
    try:
        coerced = _coerce(setting, value, from_text)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        reason = "the value is not one" if setting.secret else _reason(exc)
        return None, f"{setting.name}: {reason}; allowed: {setting.allowed()}"
    if setting.choices and coerced not in setting.choices:
        return None, f"{setting.name}: {_short.repr(value)} is not allowed; allowed: {setting.allowed()}"
    if not setting.empty_ok and coerced in ("", ()):
        return None, f"{setting.name}: may not be empty ({setting.help})"
    too_low = setting.minimum is not None and coerced < setting.minimum
    too_high = setting.maximum is not None and coerced > setting.maximum
    if too_low or too_high:
        return None, f"{setting.name}: {coerced!r} is out of range; allowed: {setting.allowed()}"
    return coerced, None


def start_only_problem(setting: Setting) -> str:
    """Why the console and the REST API may not write a start-only setting."""
    return (f"{setting.name} is set only in the configuration file or with --set at start, not from the console "
            "or the REST API")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "the value is nested too deeply"
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "…"


def _coerce(setting: Setting, value: Any, from_text: bool) -> Any:
    kind = setting.type
    if kind == "bool":
        if from_text and isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        if isinstance(value, bool):
            return value
        raise TypeError(f"expected true or false, got {_short.repr(value)}")
    if kind == "int":
        return _to_int(value, from_text)
    if kind == "float":
        if from_text and isinstance(value, str):
            number = float(value)
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"expected a number, got {_short.repr(value)}")
        else:
            number = float(value)  # OverflowError for an int beyond the float range
        if not math.isfinite(number):
            raise ValueError(f"expected a finite number, got {_short.repr(value)}")
        return number
    if kind == "networks":
        return _networks(value, from_text)
    if kind == "servers":
        return _servers(value, from_text)
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {_short.repr(value)}")
    _refuse_control(value)
    if kind == "address":
        ipaddress.ip_address(value)  # ValueError names the bad text
    if kind == "position" and value.strip():
        parse_position(value)
    if setting.name.endswith("constellations"):
        parse_constellations(value)
    if setting.name.startswith("gnss") and setting.name.endswith(".name"):
        problem = receivers_of.name_problem(value)
        if problem:
            raise ValueError(problem)
    return value


CONSTELLATIONS = ("gps", "glonass", "galileo", "beidou", "qzss", "navic", "sbas")


def parse_constellations(text: str) -> tuple[str, ...]:
    """"gps, galileo,beidou" -> ("gps", "galileo", "beidou"); ValueError naming an unknown one."""
    names = tuple(n.strip().lower() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in CONSTELLATIONS]
    if unknown:
        raise ValueError(f"unknown constellation {unknown[0]!r}; known: {', '.join(CONSTELLATIONS)}")
    return names


def _refuse_control(text: str) -> None:
    """ValueError for a C0 or C1 control character or DEL: a newline in sysContact, an escape sequence reaching a log
    line or a terminal through `appliance status`, a NUL cutting a name short in C - never a setting's text."""
    bad = next((c for c in text if ord(c) < 32 or 127 <= ord(c) < 160), None)
    if bad is not None:
        raise ValueError(f"control character {bad!r} (U+{ord(bad):04X}) is not allowed in a setting")


def parse_position(text: str) -> tuple[float, float, float]:
    """\"lat_deg,lon_deg,alt_m\" -> floats, checked for range."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3:
        raise ValueError(f"expected lat_deg,lon_deg,alt_m, got {text!r}")
    lat, lon, alt = (float(p) for p in parts)
    if not (-90 <= lat <= 90 and -180 <= lon <= 180 and -1000 <= alt <= 100_000):
        raise ValueError(f"position out of range: {text!r}")
    return lat, lon, alt


def split_server(text: str) -> tuple[str, int]:
    """\"host\", \"host:port\", \"[v6]:port\" or a bare IPv6 address -> (host, port)."""
    text = text.strip()
    host, port = text, 123
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"bad server {text!r}")
            port = int(rest[1:])
    elif text.count(":") == 1:
        host, _, p = text.partition(":")
        port = int(p)
    if not host or not 0 < port < 65536 or any(c.isspace() for c in host):
        raise ValueError(f"bad server {text!r}")
    return host, port


def _servers(value: Any, from_text: bool) -> tuple[str, ...]:
    if from_text and isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"expected a list of servers, got {_short.repr(value)}")
    for text in value:
        _refuse_control(text)
        split_server(text)
    return tuple(value)


def _networks(value: Any, from_text: bool) -> tuple[str, ...]:
    if from_text and isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"expected a list of networks, got {_short.repr(value)}")
    for text in value:
        _refuse_control(text)
        ipaddress.ip_network(text, strict=False)  # ValueError names the bad entry
    return tuple(value)


def _to_int(value: Any, from_text: bool) -> int:
    if from_text and isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            raise ValueError(f"expected an integer, got {_short.repr(value)}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {_short.repr(value)}")
    return value


def close_names(name: str, limit: int = 3) -> list[str]:
    """The settings an unknown ``name`` most likely meant, best first, from the first of these that finds any: a close
    spelling of its last part within its section or of the whole dotted name, or a last part that one begins with
    the other (``gnss.devise``, ``gnsss.device``, ``state_dri``, ``gnss.baudrate``); else the same last part in
    another section (``gnss.port`` -> ``ntp.port``).  A guess from the section's prefix alone (``gnss.bogus`` ->
    ``gnss.baud``) would mislead more than it helps.  A name from before the [[gnss]] array gets the name it
    became; a misspelt setting of receiver N (``gnss2.devise``) gets receiver N's."""
    if name in OLD_NAMES:
        number, key = OLD_NAMES[name]
        return [receivers_of.prefix(number) + key]
    parts = receivers_of.split_name(name.strip().lower())
    if parts is not None:
        number, key = parts
        within = [n.partition(".")[2] for n in close_names("gnss." + key, limit) if n.startswith("gnss.")]
        return [receivers_of.prefix(number) + k for k in within if k in receivers_of.RECEIVER_KEYS]
    names = [s.name for s in SETTINGS]
    wanted = name.strip().lower()
    section, _, leaf = wanted.rpartition(".")
    in_section = [n.rpartition(".")[2] for n in names if n.rpartition(".")[0] == section]
    tiers = [[f"{section}.{m}" if section else m
              for m in difflib.get_close_matches(leaf, in_section, n=limit, cutoff=0.75)]
             + difflib.get_close_matches(wanted, names, n=limit, cutoff=0.85)
             + [f"{section}.{m}" if section else m for m in in_section
                if len(leaf) >= 3 and len(m) >= 3 and (leaf.startswith(m) or m.startswith(leaf))],
             [n for n in names if n.rpartition(".")[2] == leaf]]
    found = next((tier for tier in tiers if tier), [])
    return [n for n in dict.fromkeys(found) if n != name][:limit]


def _unknown(name: str) -> str:
    if any(s.name.startswith(name + ".") for s in SETTINGS):
        return f"{name}: a section, not a setting; name one of its settings ({name}.*: `appliance config list`)"
    close = close_names(name) if len(name) <= 80 else []
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    parts = receivers_of.split_name(name)
    if parts is not None:
        return (f"{name}: unknown setting of [[gnss]] receiver {parts[0]}{hint}; a receiver takes "
                f"{', '.join(receivers_of.RECEIVER_KEYS)}")
    return f"{name}: unknown setting{hint}; `appliance config list` shows them all"


# Settings that no longer exist: read and ignored, with a message saying why (an error would stop a box whose
# configuration was valid before an upgrade).
RETIRED = {
    "ntp.fast_path": "ntp.fast_path is no longer a setting and is ignored: every NTP request is answered by the "
                     "native data plane",
}


def merge(base: Config, overrides: Mapping[str, Any], origin: str, from_text: bool = False,
          problems: list[str] | None = None) -> Config:
    """Overlay ``overrides`` on ``base``; problems are appended to ``problems`` (raised if it is None).  A
    ``[[gnss]]`` array, ``gnssN.*`` names (``from_text``: the --set pairs) and the names from before the array are
    read by ``config_receivers.expand``."""
    collected: list[str] = [] if problems is None else problems
    values, origins = dict(base.values), dict(base.origins)
    layer = receivers_of.expand(overrides, from_text, receivers_of.count(values), check_value, collected)
    for number in sorted(layer.declared):
        have = receivers_of.count(values)
        if number == have + 1:
            added = receivers_of.defaults_of(number)
            values.update(added)
            origins.update(dict.fromkeys(added, "default"))
        elif number > have + 1:
            collected.append(f"gnss{number}.*: there is no receiver {have + 1} to come before receiver {number}; "
                             f"receivers are added in order (gnss{have + 1}.* next)")
    retired: list[str] = []
    for name, raw in layer.values.items():
        if name in RETIRED:
            retired.append(RETIRED[name])
            continue
        setting = setting_of(name)
        if setting is None:
            collected.append(_unknown(_short.repr(name)[1:-1] if len(name) > 80 else name))
            continue
        if name not in values:  # a receiver that could not be added (said above)
            continue
        value, problem = check_value(setting, raw, from_text)
        if problem:
            collected.append(problem)
            continue
        values[name], origins[name] = value, origin
    if problems is None and collected:
        raise ConfigError(collected)
    return Config(values, origins, base.notes, base.old_names + tuple(layer.messages) + tuple(retired))


def parse_set_pairs(pairs: Iterable[str], problems: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            problems.append(f"--set {pair!r}: expected KEY=VALUE")
            continue
        out[key.strip()] = value.strip()
    return out


def load_text(text: str, origin: str, problems: list[str]) -> dict[str, Any]:
    try:
        return flatten(tomllib.loads(text))
    except ValueError as exc:  # TOMLDecodeError, or an integer too long for int() (over 4300 digits)
        problems.append(f"{origin}: not valid TOML: {exc}")
    except RecursionError:  # thousands of nested arrays or inline tables: no setting is shaped like that
        problems.append(f"{origin}: not a configuration: arrays or tables nested too deeply")
    return {}


def load(path: str | None = None, set_pairs: Iterable[str] = ()) -> Config:
    """Embedded default <- TOML file <- settings saved from the console (``<state_dir>/console-settings.toml``) <-
    --set pairs.  Raises ConfigError listing every problem."""
    problems: list[str] = []
    config = defaults()
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: cannot read configuration: {exc}")
        else:
            config = merge(config, load_text(text, path, problems), path, problems=problems)
    overrides = parse_set_pairs(set_pairs, problems)
    config = merge(config, overrides, "--set", from_text=True, problems=problems)
    problems += receivers_of.problems_of(config.values)
    problems += monitor_problems(config)
    if problems:
        raise ConfigError(problems)
    return with_console_settings(config, set(overrides))


def monitor_problems(config: Config) -> list[str]:
    """What is wrong with the sync monitor's targets and limits, each naming its setting (none: an empty list)."""
    from appliance.monitor import limit_items, targets_of

    m = config.monitor
    try:
        targets_of(m.ntp_targets, m.ptp_targets, m.limit_ns, limit_items(m.limits))
    except ValueError as exc:
        return str(exc).split("; ")
    if m.ptp_targets and not m.ptp_interface:
        return ["monitor.ptp_targets needs monitor.ptp_interface: the interface nsm sends its requests on"]
    return []


def with_console_settings(config: Config, overridden: set[str]) -> Config:
    """``config`` overlaid by the settings saved from the web console or the REST API
    (``<state_dir>/console-settings.toml``), except those ``--set`` gave.  What was saved there must never stop the
    appliance from starting: a file that cannot be read, or a saved value the table now refuses, is set aside and
    named in ``notes`` (the appliance raises an alarm with them) while every good value still applies."""
    console = config.state_path() / CONSOLE_FILE
    try:
        text = console.read_text(encoding="utf-8")
    except FileNotFoundError:
        return config
    except (OSError, UnicodeDecodeError) as exc:
        return dataclasses.replace(config, notes=(f"console setting ignored: {console}: cannot read: {exc}",))
    notes: list[str] = []
    saved = {k: v for k, v in load_text(text, str(console), notes).items() if k not in overridden}
    if isinstance(saved.get("gnss"), list):  # by hand: receivers are made by the configuration file or --set
        notes.append(f"{console}: gnss: the [[gnss]] receivers are set only in the configuration file or with --set")
        del saved["gnss"]
    for name in [k for k in saved if (row := setting_of(k)) is not None and row.start_only]:
        notes.append(f"{console}: {start_only_problem(_row(name))}")  # written by an older release, or by hand
        del saved[name]
    merged = merge(config, saved, "console", problems=notes)
    monitor = monitor_problems(merged)
    if monitor:  # each value was good alone, not together (a target listed twice, PTP targets with no interface)
        names = [name for name in merged.values
                 if name.startswith("monitor.") and merged.origins.get(name) == "console"]
        notes += [f"{console}: {problem} (the saved monitor.* settings are set aside)" for problem in monitor]
        merged = dataclasses.replace(merged, values={**merged.values, **{n: config.values[n] for n in names}},
                                     origins={**merged.origins, **{n: config.origins.get(n, "default") for n in names}})
    return dataclasses.replace(merged, notes=tuple(f"console setting ignored: {n}" for n in notes))


def to_toml(config: Config, only_changed: bool = False) -> str:
    """Render a configuration as TOML grouped by part (for `config list --toml` and the deploy default); with more
    than one receiver, ``gnss.*`` is the first ``[[gnss]]`` table and each other receiver a table after it."""
    groups: dict[str, list[str]] = {}
    for s in settings_of(config):
        value = config.values[s.name]
        part, _, key = s.name.rpartition(".")
        lines = groups.setdefault(part, [])
        if not (only_changed and value == s.default):
            lines.append(f"# {s.help}\n{key} = {_toml_value(value)}")
    several = receivers_of.count(config.values) > 1
    chunks = ["\n".join(groups.pop("", []))] if "" in groups else []
    chunks += [_table(part, lines, several) for part, lines in groups.items() if lines or receivers_of.split_name(
        part + ".device") is not None or (several and part == "gnss")]
    return "\n\n".join(c for c in chunks if c) + "\n"


def _table(part: str, lines: list[str], several: bool) -> str:
    """A part's TOML table: ``[part]``, or a ``[[gnss]]`` table for a receiver when there are several."""
    if several and (part == "gnss" or receivers_of.split_name(part + ".device") is not None):
        return "[[gnss]]\n" + "\n".join(lines)
    return f"[{part}]\n" + "\n".join(lines)


CONSOLE_FILE = "console-settings.toml"


def _toml_value(value: Any) -> str:
    """Through tomli-w, the TOML writer: every string escaped as TOML wants it, whatever it holds."""
    return tomli_w.dumps({"v": list(value) if isinstance(value, tuple) else value})[4:].rstrip("\n")
