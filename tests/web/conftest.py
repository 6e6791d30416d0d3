"""A real web console (``create_app``) around a recorded status, real stores in tmp_path and a recording command hook.

``console_env`` builds a ``WebContext`` as the appliance does, but from parts a test can inspect: the status is a
simulated appliance's (taken once per session; a test may replace ``env.status``, e.g. with ``env.with_integrity``),
``commands`` records what the console asked the appliance to do (the fake answers holdover and integrity commands
as the appliance does, or refuses with ``env.refusal``), ``live`` records the settings applied without a restart,
the audit store, the time-quality log and the settings editor are the real ones on files in ``tmp_path``.
``Browser`` is a test client that speaks HTTPS (the session cookie is Secure and CSRF checks the referrer over HTTPS)
and knows how to log in and post forms with the CSRF token.
"""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from appliance.units import NS_PER_S

BASE = "https://localhost"
PASSWORDS = {"viewer": "viewer-pass-0123", "operator": "operator-pass-4567", "admin": "admin-pass-89ab"}
QUALITY_SECONDS = 300
# The integrity part of a status whose verdict says spoofed: the reference rejected, qualifying again in 42.4 s
SPOOFED: dict[str, Any] = {
    "level": "spoofed", "usable": False, "score": 9.5, "requalify_in_s": 42.4, "rejections": 1,
    "reasons": ["position: fix 200.0 m from the surveyed home (limit 50 m)", "sky: 27 of 41 satellites new"],
    "findings": [{"detector": "position", "verdict": "spoofed", "score": 4.0,
                  "reason": "fix 200.0 m from the surveyed home (limit 50 m)"},
                 {"detector": "sky", "verdict": "ok", "score": 0.0, "reason": "0 of 38 tracked satellites new"}],
    "survey": {"state": "fixed", "source": "configured",
               "home": {"lat_deg": 46.2044, "lon_deg": 6.1432, "alt_m": 375.0},
               "samples": 0, "std_m": None, "elapsed_s": 0.0, "duration_s": 0.0,
               "reason": "home position configured (integrity.position)"},
    "ntp": {"server": "ntp.example", "offset_ms": 0.42, "uncertainty_ms": 3.5, "at_raw_ns": 1}}
_CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)"')
_CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


class HttpsClient(FlaskClient):
    """Flask's test client, every request made to https://localhost unless it says otherwise."""

    def open(self, *args: Any, **kwargs: Any) -> Any:
        if not args or isinstance(args[0], str):
            kwargs.setdefault("base_url", BASE)
        return super().open(*args, **kwargs)


class Browser:
    """One user's client: a cookie jar, logging in through the form, posting forms with the page's CSRF token."""

    def __init__(self, app: Flask, remote_addr: str = "127.0.0.1"):
        self.client: HttpsClient = app.test_client()  # type: ignore[assignment]
        self.client.environ_base["REMOTE_ADDR"] = remote_addr

    # --- logging in ---------------------------------------------------------------------------------------------
    def login_form_token(self) -> str:
        page = self.client.get("/login")
        assert page.status_code == 200
        found = _CSRF_FIELD.search(page.get_data(as_text=True))
        assert found, "the login form carries no csrf_token"
        return found.group(1)

    def login(self, user: str, password: str | None = None, next_path: str = "/") -> Any:
        token = self.login_form_token()
        return self.client.post("/login", data={"csrf_token": token, "user": user,
                                                "password": PASSWORDS[user] if password is None else password,
                                                "next": next_path})

    def must_login(self, user: str) -> Browser:
        response = self.login(user)
        assert response.status_code == 302, response.get_data(as_text=True)
        assert response.headers["Location"] == "/"
        return self

    def csrf(self) -> str:
        """The session's CSRF token, as a page carries it in its <meta> tag."""
        page = self.client.get("/plots")
        assert page.status_code == 200
        found = _CSRF_META.search(page.get_data(as_text=True))
        assert found
        return found.group(1)

    # --- writes ---------------------------------------------------------------------------------------------------
    def form(self, path: str, data: dict[str, str], csrf: str | None | bool = True, referer: bool = True,
             **kwargs: Any) -> Any:
        """POST a form; ``csrf``: True for the session's token, a string for that token, None for none."""
        data = dict(data)
        if csrf is True:
            data["csrf_token"] = self.csrf()
        elif isinstance(csrf, str):
            data["csrf_token"] = csrf
        headers = {"Referer": f"{BASE}{path}"} if referer else {}
        return self.client.post(path, data=data, headers=headers, **kwargs)

    def api(self, method: str, path: str, body: Any = None, csrf: str | None | bool = True,
            token: str | None = None) -> Any:
        headers = {"Referer": f"{BASE}/"}
        if csrf is True:
            headers["X-CSRFToken"] = self.csrf()
        elif isinstance(csrf, str):
            headers["X-CSRFToken"] = csrf
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return self.client.open(path, method=method, json=body, headers=headers)


@dataclass
class ConsoleEnv:
    app: Flask
    ctx: Any
    state_dir: Path
    status: dict[str, Any]
    commands: list[dict[str, Any]] = field(default_factory=list)
    live: list[tuple[str, Any]] = field(default_factory=list)
    refusal: str | None = None  # when set, the fake appliance refuses every command with this error

    def with_integrity(self, **changes: Any) -> dict[str, Any]:
        """Replace the status by a copy whose ``integrity`` has ``changes`` (the session's status is not touched)."""
        status = copy.deepcopy(self.status)
        status["integrity"] = {**status["integrity"], **changes}
        self.status = status
        return status

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """The fake appliance's reply to a control command, as ``Appliance.command`` gives it."""
        self.commands.append(request)
        if self.refusal is not None:
            return {"ok": False, "error": self.refusal}
        if request.get("cmd") != "integrity":
            return {"ok": True, "state": "HOLDOVER"}
        g = self.status["integrity"]
        action = request.get("action")
        if action not in ("trust", "reject", "auto", "resurvey"):
            return {"ok": False, "error": "integrity override takes auto, trust, reject"}
        if action == "resurvey":
            g = self.with_integrity(survey={**g["survey"], "state": "surveying", "source": "survey", "samples": 0,
                                            "elapsed_s": 0.0, "reason": "surveying: 0 s"})["integrity"]
        else:  # as the guard decides: trust uses the reference, reject holds over, auto follows the verdict
            usable = {"trust": True, "reject": False}.get(action, g["level"] in ("ok", "suspect"))
            g = self.with_integrity(override=action, usable=usable)["integrity"]
        return {"ok": True, "override": g["override"], "usable": g["usable"], "level": g["level"]}

    @property
    def now_tai_ns(self) -> int:
        return int(self.status["at_tai_ns"])

    def browser(self, remote_addr: str = "127.0.0.1") -> Browser:
        return Browser(self.app, remote_addr)

    def login(self, user: str) -> Browser:
        return self.browser().must_login(user)

    def token(self, user: str, label: str = "test") -> str:
        return self.ctx.users.create_token(user, label, 0.0)

    def setting(self, name: str) -> Any:
        return next(row for row in self.ctx.settings.rows() if row["name"] == name)["value"]

    @property
    def overrides(self) -> Path:
        return self.ctx.settings.path

    def records(self, kind: str | None = None) -> list[Any]:
        return self.ctx.audit.records(kinds=[kind] if kind else None, limit=None)


@pytest.fixture(scope="session")
def sim_status() -> dict[str, Any]:
    """A real status: a simulated appliance 30 s after start, as the console receives it (plain JSON values)."""
    from appliance.status import to_dict
    from tests.sim.conftest import build_sim

    sim = build_sim()
    sim.run_s(30)
    status = json.loads(json.dumps(to_dict(sim.app.status())))
    assert status["clock"]["error_bound_ns"] is not None
    return status


@pytest.fixture(scope="session")
def users_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user database with viewer, operator and admin (scrypt is slow: hashed once, copied for each test)."""
    from appliance.web.users import UserStore

    path = tmp_path_factory.mktemp("users") / "users.sqlite"
    store = UserStore(path)
    for name, password in PASSWORDS.items():
        store.add(name, name, password)
    store.close()
    return path


@pytest.fixture
def console_env(tmp_path: Path, sim_status: dict[str, Any], users_template: Path) -> Iterator[Callable[..., ConsoleEnv]]:
    """A factory: ``console_env(**WebContext fields, lockout_failures=..., lockout_s=...)`` -> ConsoleEnv."""
    from appliance import config as cfg
    from appliance import leap
    from appliance.audit import bundle
    from appliance.audit.store import AuditStore
    from appliance.audit.tqlog import QualitySample, TimeQualityLog, utc_labeler
    from appliance.web.access import WebContext
    from appliance.web.app import create_app
    from appliance.web.settings_edit import SettingsEditor
    from appliance.web.users import UserStore

    table = leap.LeapTable.load_default()
    opened: list[Any] = []
    count = 0

    def make(lockout_failures: int = 5, lockout_s: float = 900.0, **overrides: Any) -> ConsoleEnv:
        nonlocal count
        count += 1
        state_dir = tmp_path / f"state{count}"
        state_dir.mkdir()
        shutil.copy(users_template, state_dir / "users.sqlite")
        users = UserStore(state_dir / "users.sqlite", lockout_failures, lockout_s)
        store = AuditStore(state_dir / "audit.sqlite")
        quality = TimeQualityLog(state_dir / "quality.sqlite")
        opened.extend([users, store, quality])
        now = int(sim_status["at_tai_ns"])
        first = now // NS_PER_S * NS_PER_S - (QUALITY_SECONDS - 1) * NS_PER_S
        quality.add_many(QualitySample(first + i * NS_PER_S, "LOCKED" if i < 250 else "HOLDOVER",
                                       phase_offset_ns=5.0 * math.sin(i / 17.0), frequency_ppb=0.25,
                                       error_bound_ns=40 + i % 7, satellites_used=9, clock_class=6 if i < 250 else 7)
                         for i in range(QUALITY_SECONDS))
        quality.flush()
        env = ConsoleEnv(app=None, ctx=None, state_dir=state_dir, status=sim_status)  # type: ignore[arg-type]

        def apply_live(name: str, value: Any) -> bool:
            env.live.append((name, value))
            return name == "log.level"

        def audit_append(kind: str, actor: str, text: str, detail: dict[str, Any]) -> Any:
            return store.append(now - NS_PER_S, kind, actor, text, detail)  # a second before the status

        label = utc_labeler(table)

        def export(since: int | None, until: int | None) -> bytes:
            key = bundle.load_or_create_key(state_dir)
            with tempfile.TemporaryDirectory(dir=state_dir) as tmp:
                path = Path(tmp) / "bundle.json"
                bundle.export_bundle(store, 0 if since is None else since, now + NS_PER_S if until is None else until,
                                     key, path, label)
                return path.read_bytes()

        fields: dict[str, Any] = {
            "status": lambda: env.status, "command": env.answer, "users": users,
            "settings": SettingsEditor(cfg.defaults(), state_dir, apply_live), "audit": store,
            "audit_append": audit_append, "quality": quality, "export_bundle": export, "utc_label": label,
            "now_tai_ns": lambda: now, "posix_ms": lambda tai_ns: leap.tai_to_posix_ns(tai_ns, table)[0] // 1_000_000,
            "rate_per_s": 1000.0, "rate_burst": 100_000}
        fields.update(overrides)
        ctx = WebContext(**fields)
        app = create_app(ctx, secret_key=b"k" * 32)
        app.test_client_class = HttpsClient
        env.app, env.ctx = app, ctx
        return env

    yield make
    for thing in reversed(opened):
        thing.close()


@pytest.fixture
def env(console_env: Callable[..., ConsoleEnv]) -> ConsoleEnv:
    return console_env()
