"""What an outside probe of the console found, held: a value that would break the settings file, secrets shown to a
viewer, files of secrets readable by other local users, user names told apart by the login's answer, JSON nested
past the parser's limit, and failed logins used to flood the audit store."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from appliance import config as cfg
from appliance.web import users as users_mod
from appliance.web.settings_edit import load_overrides
from appliance.web.users import UserStore
from tests.web.conftest import PASSWORDS, ConsoleEnv


def _flashed(response: Any) -> list[str]:
    from html.parser import HTMLParser

    class Flash(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.depth, self.found = 0, []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            classes = dict(attrs).get("class") or ""
            if self.depth or "flash" in classes.split():
                self.depth += 1
                if self.depth == 1:
                    self.found.append("")

        def handle_endtag(self, tag: str) -> None:
            if self.depth:
                self.depth -= 1

        def handle_data(self, data: str) -> None:
            if self.depth:
                self.found[-1] += data

    parser = Flash()
    parser.feed(response.get_data(as_text=True))
    return [f.strip() for f in parser.found]


# --- a value that would break the settings file ------------------------------------------------------------------

@pytest.mark.parametrize("value", ["a\nb", "a\r\nb", "x\x00y", "\x1b[2J"])
def test_a_value_with_a_control_character_is_refused_and_nothing_is_written(env: ConsoleEnv, value: str) -> None:
    admin = env.login("admin")
    assert admin.api("PUT", "/api/v1/config/snmp.sys_location", {"value": "rack 4"}).status_code == 200
    before = env.overrides.read_bytes()
    refused = admin.api("PUT", "/api/v1/config/snmp.sys_contact", {"value": value})
    assert refused.status_code == 400
    assert "control character" in refused.get_json()["error"]
    assert env.overrides.read_bytes() == before
    # and every later change still goes through, and the appliance would still start on the file
    assert admin.api("PUT", "/api/v1/config/snmp.sys_contact", {"value": "noc@example.net"}).status_code == 200
    assert load_overrides(env.state_dir) == {"snmp.sys_location": "rack 4", "snmp.sys_contact": "noc@example.net"}
    assert cfg.load(None, [f"state_dir={env.state_dir}"]).notes == ()


def test_quotes_and_backslashes_are_saved_as_typed(env: ConsoleEnv) -> None:
    admin = env.login("admin")
    value = 'Rack "A" \\ row 3 — Zoë'
    assert admin.api("PUT", "/api/v1/config/snmp.sys_location", {"value": value}).status_code == 200
    assert load_overrides(env.state_dir)["snmp.sys_location"] == value
    assert cfg.load(None, [f"state_dir={env.state_dir}"])["snmp.sys_location"] == value


def test_a_saved_file_that_cannot_be_read_is_moved_aside_not_a_wall(env: ConsoleEnv) -> None:
    env.overrides.write_text("this is = not [ toml", encoding="utf-8")
    admin = env.login("admin")
    assert admin.api("PUT", "/api/v1/config/snmp.sys_location", {"value": "rack 4"}).status_code == 200
    assert load_overrides(env.state_dir) == {"snmp.sys_location": "rack 4"}
    assert (env.state_dir / "console-settings.toml.rejected").read_text() == "this is = not [ toml"


def test_the_settings_file_is_private(env: ConsoleEnv) -> None:
    admin = env.login("admin")
    assert admin.api("PUT", "/api/v1/config/snmp.sys_location", {"value": "rack 4"}).status_code == 200
    assert stat.S_IMODE(env.overrides.stat().st_mode) == 0o600


# --- secrets are write-only ----------------------------------------------------------------------------------------

SECRET = "c0mmunity-Zq81"


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_no_role_reads_a_secret_back(env: ConsoleEnv, role: str) -> None:
    admin = env.login("admin")
    changed = admin.api("PUT", "/api/v1/config/snmp.community", {"value": SECRET})
    assert changed.status_code == 200 and SECRET not in changed.get_data(as_text=True)
    who = env.login(role)
    rows = {r["name"]: r for r in who.api("GET", "/api/v1/config").get_json()["settings"]}
    assert rows["snmp.community"]["value"] == cfg.MASK and rows["snmp.community"]["secret"] is True
    page = who.client.get("/config")
    assert page.status_code == 200 and SECRET not in page.get_data(as_text=True)
    assert SECRET not in json.dumps(who.api("GET", "/api/v1/status").get_json())


def test_a_secret_change_is_audited_without_its_value(env: ConsoleEnv) -> None:
    admin = env.login("admin")
    assert admin.api("PUT", "/api/v1/config/snmp.community", {"value": SECRET}).status_code == 200
    (record,) = env.records("config.change")
    assert SECRET not in record.text and SECRET not in json.dumps(record.detail)
    assert record.detail["setting"] == "snmp.community" and record.detail["new"] == cfg.MASK


def test_the_mask_is_not_taken_as_a_new_secret(env: ConsoleEnv) -> None:
    admin = env.login("admin")
    refused = admin.api("PUT", "/api/v1/config/snmp.community", {"value": cfg.MASK})
    assert refused.status_code == 400 and "never shown" in refused.get_json()["error"]
    assert not env.overrides.exists()


# --- files of secrets ----------------------------------------------------------------------------------------------

def test_the_user_database_is_private_from_its_creation(tmp_path: Path) -> None:
    old = os.umask(0o022)  # a permissive umask, as a service manager may leave it
    try:
        store = UserStore(tmp_path / "users.sqlite")
        store.add("admin", "admin", PASSWORDS["admin"])
        store.close()
    finally:
        os.umask(old)
    for path in tmp_path.iterdir():  # the database and whatever journal SQLite left beside it
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_an_existing_readable_user_database_is_narrowed(tmp_path: Path) -> None:
    path = tmp_path / "users.sqlite"
    UserStore(path).close()
    os.chmod(path, 0o644)
    UserStore(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_state_directory_is_made_0700(tmp_path: Path) -> None:
    from appliance.edge.persist import ensure_state_dir

    old = os.umask(0o022)
    try:
        ensure_state_dir(tmp_path / "new" / "state")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new" / "state").stat().st_mode) == 0o700


# --- user names are not told apart --------------------------------------------------------------------------------

def test_unknown_and_locked_users_get_the_same_answer_at_the_same_cost(console_env: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    env = console_env(lockout_failures=3, lockout_s=600)
    clock = [time.time()]
    env.ctx.wall_s = lambda: clock[0]
    hashes: list[str] = []
    real = users_mod.hashlib.scrypt

    def counted(*args: Any, **kwargs: Any) -> bytes:
        hashes.append("scrypt")
        return real(*args, **kwargs)

    monkeypatch.setattr(users_mod.hashlib, "scrypt", counted)

    def answers(name: str, address: str) -> list[tuple[int, list[str], int]]:
        out = []
        for i in range(5):
            clock[0] += 5  # past any backoff: the answers differ by account state only
            before = len(hashes)
            response = env.browser(remote_addr=address).login(name, f"wrong-password-{i:04}")
            out.append((response.status_code, _flashed(response), len(hashes) - before))
        return out

    # Each from one address: a lockout holds the tries of that address on that name
    real_user, no_user = answers("operator", "127.0.0.10"), answers("no-such-user", "127.0.0.11")
    assert real_user == no_user
    assert real_user[2][1] == ["This account is locked: try again in 600 s."]  # the third failure locks
    assert real_user[4][1] == ["This account is locked: try again in 590 s."]
    assert all(a[2] == 1 for a in real_user)  # one scrypt on every path: the time does not tell them apart


# --- JSON nested past the parser's limit -------------------------------------------------------------------------

@pytest.mark.parametrize("path, method", [("/api/v1/holdover", "POST"), ("/api/v1/config/log.level", "PUT"),
                                          ("/api/v1/references", "POST"), ("/api/v1/integrity", "POST")])
@pytest.mark.parametrize("depth", [33, 30_000, 100_000])
def test_deeply_nested_json_is_a_clear_400(env: ConsoleEnv, path: str, method: str, depth: int) -> None:
    admin = env.login("admin")
    body = "[" * depth + "]" * depth
    response = admin.client.open(path, method=method, data=body, content_type="application/json",
                                 headers={"X-CSRFToken": admin.csrf(), "Referer": "https://localhost/"})
    error = response.get_json()["error"]
    if depth * 2 > 64 * 1024:  # past the body size limit, refused before it is parsed
        assert response.status_code == 413 and "larger than 65536 bytes" in error
    else:
        assert response.status_code == 400 and "nests deeper than 32 levels" in error
    assert env.commands == [] and not env.overrides.exists()


def test_json_within_the_limit_and_brackets_inside_strings_pass(env: ConsoleEnv) -> None:
    admin = env.login("admin")
    ok = admin.api("PUT", "/api/v1/config/snmp.sys_location", {"value": "[" * 200})
    assert ok.status_code == 200 and load_overrides(env.state_dir)["snmp.sys_location"] == "[" * 200


# --- failed logins are rate-limited and do not flood the audit store ---------------------------------------------

def test_logins_from_one_address_are_rate_limited(env: ConsoleEnv) -> None:
    # The limiter's clock stands still: on a busy host twelve logins (each hashing a password) can take longer than
    # the 5 s in which one try comes back, and the count would then depend on the machine.
    env.app.extensions["login_limiter"].clock = lambda: 1000.0
    browser = env.browser(remote_addr="127.0.0.9")
    codes = [browser.login("operator", f"wrong-password-{i:04}").status_code for i in range(12)]
    assert codes[:10] == [401] * 10 and codes[10:] == [429, 429]
    assert env.browser(remote_addr="127.0.0.10").login("viewer").status_code == 302  # other addresses still log in


def test_a_flood_of_failed_logins_is_recorded_as_a_count(console_env: Any) -> None:
    env = console_env(lockout_failures=1000)
    clock = [time.time()]
    env.ctx.wall_s = lambda: clock[0]
    # 18 addresses: under the per-address limit each, and within the burst of the global login budget (20)
    codes = [env.browser(remote_addr=f"127.0.1.{i}").login("operator", f"wrong-password-{i:04}").status_code
             for i in range(18)]
    assert codes == [401] * 18 and len(env.records("login.failed")) == 10
    clock[0] += 61
    env.browser(remote_addr="127.0.2.1").login("operator", "wrong-password-last")
    records = env.records("login.failed")
    summary = [r for r in records if "suppressed" in r.detail]
    assert len(records) == 12 and summary[0].detail["suppressed"] == 8
    assert summary[0].text == "8 further failed logins in a minute were not recorded one by one"
