"""Changing settings from the console and the REST API: the same validation as the command line, kept across restarts.

Edge module (writes ``<state_dir>/console-settings.toml``).  A change is checked by the settings table's own
``check_value`` (types, bounds, choices), written to the overrides file (dotted keys, one per line; loaded after the
configuration file and before ``--set`` at the next start) and then either applied at once, for the settings the
running appliance can take live, or reported as waiting for a restart.
"""

from __future__ import annotations

import os
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance import config as cfg

OVERRIDES_FILE = cfg.CONSOLE_FILE


def load_overrides(state_dir: Path) -> dict[str, Any]:
    """The console's saved changes (flattened names); an unreadable file is an error naming it."""
    path = state_dir / OVERRIDES_FILE
    if not path.exists():
        return {}
    try:
        return cfg.flatten(tomllib.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None


class SettingsEditor:
    def __init__(self, config: cfg.Config, state_dir: Path, apply_live: Callable[[str, Any], bool]):
        self.config, self.path, self.apply_live = config, state_dir / OVERRIDES_FILE, apply_live
        self._lock = threading.Lock()
        self.pending: dict[str, Any] = {}  # saved, waiting for a restart

    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{"name": s.name, "type": s.type, "value": self.pending.get(s.name, self.config[s.name]),
                     "running": self.config[s.name], "default": s.default, "help": s.help,
                     "restart": s.restart, "allowed": s.allowed(), "pending_restart": s.name in self.pending,
                     "origin": self.config.origins.get(s.name, "default")} for s in cfg.SETTINGS]

    def change(self, name: str, value: Any, from_text: bool) -> tuple[Any, Any, bool]:
        """Validate and save one setting: (old, new, applied now).  ValueError with the reason if refused."""
        setting = cfg.BY_NAME.get(name)
        if setting is None:
            raise ValueError(f"unknown setting {name!r}")
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
                self.config.values[name] = new
                self.config.origins[name] = "console"
                self.pending.pop(name, None)
            elif new == self.config[name]:
                self.pending.pop(name, None)
            else:
                self.pending[name] = new
        return old, new, applied

    def _read(self) -> dict[str, Any]:
        return load_overrides(self.path.parent)

    def _write(self, values: dict[str, Any]) -> None:
        lines = ["# Settings changed from the web console or the REST API; loaded after the configuration file.\n"]
        lines += [f"{name} = {cfg.toml_value(value)}\n" for name, value in sorted(values.items())]
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
