"""Changing settings from the console and the REST API: the same validation as the command line, kept across restarts.

Edge module (writes ``<state_dir>/console-settings.toml``, mode 0600: it may hold a secret).  A change is checked by
the settings table's own ``check_value`` (types, bounds, choices, no control characters), written to the overrides
file by a TOML writer (tomli-w), read back and compared before it replaces the old file, and then either applied at
once, for the settings the running appliance can take live, or reported as waiting for a restart.  The file is
loaded after the configuration file and before ``--set`` at the next start; what in it the table refuses then is set
aside with an alarm, never a refusal to start (``config.with_console_settings``).  A saved file that cannot be read
is moved aside (``console-settings.toml.rejected``) at the first change, not silently overwritten.

Secrets (``Setting.secret``) are write-only for every role: their rows show the mask, and a change is reported and
audited without its value.
"""

from __future__ import annotations

import logging
import os
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomli_w

from appliance import config as cfg
from appliance.edge import persist
from appliance.web import settings_view

OVERRIDES_FILE = cfg.CONSOLE_FILE
REJECTED_SUFFIX = ".rejected"
_FILE_MODE = 0o600
log = logging.getLogger("appliance.web")


def load_overrides(state_dir: Path) -> dict[str, Any]:
    """The console's saved changes (flattened names); an unreadable file is a ValueError naming it."""
    path = state_dir / OVERRIDES_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    try:
        return cfg.flatten(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: {exc}") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be saved settings") from None


def render(values: dict[str, Any]) -> str:
    """The overrides file's text: a header comment and one table per section, written by tomli-w."""
    nested: dict[str, Any] = {}
    for name, value in sorted(values.items()):
        *parts, key = name.split(".")
        table = nested
        for part in parts:
            table = table.setdefault(part, {})
        table[key] = list(value) if isinstance(value, tuple) else value
    return ("# Settings changed from the web console or the REST API; loaded after the configuration file.\n"
            + tomli_w.dumps(nested))


class SettingsEditor:
    def __init__(self, config: cfg.Config, state_dir: Path, apply_live: Callable[[str, Any], bool]):
        self.config, self.path, self.apply_live = config, state_dir / OVERRIDES_FILE, apply_live
        self._lock = threading.Lock()
        self.pending: dict[str, Any] = {}  # saved, waiting for a restart

    def rows(self) -> list[dict[str, Any]]:
        """Every setting's row; receivers after the first (``gnss2.*`` ...) are start-only, shown as they run."""
        with self._lock:
            rows = []
            for s in cfg.settings_of(self.config):
                value = cfg.shown(s, self.pending.get(s.name, self.config[s.name]))
                rows.append({"name": s.name, "type": s.type, "value": value,
                             "running": cfg.shown(s, self.config[s.name]), "default": s.default, "help": s.help,
                             "restart": s.restart, "allowed": s.allowed(), "pending_restart": s.name in self.pending,
                             "origin": self.config.origins.get(s.name, "default"), "secret": s.secret,
                             "start_only": s.start_only, "unit": s.unit, "minimum": s.minimum, "maximum": s.maximum,
                             "choices": list(s.choices), "changed": settings_view.changed(s, value)})
            return rows

    def change(self, name: str, value: Any, from_text: bool) -> tuple[Any, Any, bool]:
        """Validate and save one setting: (old, new, applied now), secrets masked.  ValueError with the reason if
        refused; nothing is written then."""
        setting = cfg.setting_of(name)
        if setting is None:
            close = cfg.close_names(name) if len(name) <= 80 else []
            raise ValueError(f"unknown setting {name[:80]!r}" + (f" (did you mean {' or '.join(close)}?)" if close
                                                                  else ""))
        if setting.start_only:
            raise ValueError(cfg.start_only_problem(setting))
        if setting.secret and value == cfg.MASK:
            raise ValueError(f"{name}: enter the new value (the secret is never shown, so it cannot be resubmitted)")
        new, problem = cfg.check_value(setting, value, from_text=from_text)
        if problem:
            raise ValueError(problem)  # check_value's message names the setting already
        with self._lock:
            old = self.pending.get(name, self.config[name])
            saved = self._read()
            saved[name] = new
            self._write(saved)
            applied = not setting.restart and self.apply_live(name, new)
            if applied:
                self.config.values[name] = new  # type: ignore[index]
                self.config.origins[name] = "console"  # type: ignore[index]
                self.pending.pop(name, None)
            elif new == self.config[name]:
                self.pending.pop(name, None)
            else:
                self.pending[name] = new
        return cfg.shown(setting, old), cfg.shown(setting, new), applied

    def _read(self) -> dict[str, Any]:
        """What is saved, as far as the table still accepts it.  A file that cannot be read is moved aside (kept
        for the operator, named in the log) so that it does not refuse every change from now on."""
        try:
            saved = load_overrides(self.path.parent)
        except ValueError as exc:
            aside = self.path.with_name(self.path.name + REJECTED_SUFFIX)
            os.replace(self.path, aside)
            log.error("saved console settings unreadable (%s): moved to %s; starting them afresh", exc, aside)
            return {}
        good: dict[str, Any] = {}
        for key, raw in saved.items():
            if key in cfg.OLD_NAMES:  # saved by an older release: the loader reads it as what it became
                good[key] = raw
                continue
            setting = cfg.BY_NAME.get(key)
            value, problem = (None, "unknown") if setting is None else cfg.check_value(setting, raw)
            if setting is not None and setting.start_only:
                problem = cfg.start_only_problem(setting)
            if problem is None:
                good[key] = value
            else:
                log.warning("saved console setting %s dropped: %s", key[:80], problem)
        return good

    def _write(self, values: dict[str, Any]) -> None:
        """Render, check that the text reads back as exactly these values, then replace the file atomically."""
        text = render(values)
        if cfg.flatten(tomllib.loads(text)) != {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}:
            raise ValueError("the setting cannot be saved: it does not read back as written")
        persist.replace_file(self.path, text.encode("utf-8"), _FILE_MODE, prefix=f".{self.path.name}.")
