"""Console accounts: API tokens end with their owner's password, lockouts hold a source and not the account, and
the first admin must change the initial password, whose file is then deleted.

The real console app (``create_app``) through Flask's test client speaking HTTPS, with real user and audit stores
in tmp_path (tests/web/conftest.py); ``appliance user`` runs as the command a user types.  Private files (the
initial password, the session key, the user database, the console's own TLS key) are refused when a symbolic link
stands where they belong, with the path named.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from appliance.edge.persist import UnsafePathError
from appliance.web.usercli import INITIAL_PASSWORD_FILE, first_admin, settle_initial_password
from appliance.web.users import UserStore
from harness.procs import ENV
from tests.web.conftest import PASSWORDS, Browser, ConsoleEnv

NEW_PASSWORD = "a-password-of-my-own-1"
_FLASH = re.compile(r'<p class="flash (\w+)" role="status">([^<]*)</p>')


def flashed(response: Any) -> list[str]:
    return [m.group(2).replace("&#39;", "'") for m in _FLASH.finditer(response.get_data(as_text=True))]


def status_with(token: str, env: ConsoleEnv) -> Any:
    return env.browser().client.get("/api/v1/status", headers={"Authorization": f"Bearer {token}"})


def user_cli(state_dir: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "appliance", "user", *args, "--set", f"state_dir={state_dir}"],
                          input=stdin, capture_output=True, text=True, env=ENV, timeout=60)


def password_page_csrf(browser: Browser) -> str:
    """The CSRF token of the password page (the one page a user who must change its password may see)."""
    page = browser.client.get("/password")
    assert page.status_code == 200
    found = re.search(r'<meta name="csrf-token" content="([^"]+)"', page.get_data(as_text=True))
    assert found
    return found.group(1)


def change_own_password(browser: Browser, current: str, new: str, again: str | None = None) -> Any:
    return browser.form("/password", {"current": current, "password": new, "again": new if again is None else again},
                        csrf=password_page_csrf(browser))


# --- API tokens end with the password they were made under ------------------------------------------------------

def test_api_tokens_end_when_their_owner_password_changes_from_the_console(env: ConsoleEnv) -> None:
    token, other = env.token("operator"), env.token("viewer")
    assert status_with(token, env).status_code == 200
    operator = env.login("operator")
    done = change_own_password(operator, PASSWORDS["operator"], NEW_PASSWORD)
    assert done.status_code == 302 and done.headers["Location"] == "/"
    answer = status_with(token, env)
    assert answer.status_code == 401 and answer.get_json() == {"error": "invalid token"}
    assert status_with(other, env).status_code == 200  # another user's token is not touched
    assert operator.client.get("/").status_code == 200  # this browser goes on, in a new session
    (record,) = env.records("user.password")
    assert record.actor == "web:operator"
    assert record.text == "operator changed their password; 1 API token ended"  # no other session was open
    assert record.detail["tokens_ended"] == 1

    admin = env.login("admin")
    token = env.token("operator")
    assert admin.form("/users", {"action": "password", "name": "operator",
                                 "password": "set-by-the-admin-2"}).status_code == 302
    assert status_with(token, env).status_code == 401
    assert env.records("user.change")[0].text == "password of operator changed; 1 session and 1 API token ended"
    page = admin.client.get("/users").get_data(as_text=True)
    assert "It ends when its user's password or role changes" in page.replace("&#39;", "'")


def test_api_tokens_end_with_a_role_change_or_removal(env: ConsoleEnv) -> None:
    admin = env.login("admin")
    token = env.token("operator")
    assert admin.form("/users", {"action": "role", "name": "operator", "role": "viewer"}).status_code == 302
    assert status_with(token, env).status_code == 401
    token = env.token("operator")
    assert admin.form("/users", {"action": "remove", "name": "operator"}).status_code == 302
    assert status_with(token, env).status_code == 401
    texts = [r.text for r in env.records("user.change")]
    assert texts[:2] == ["user operator removed; 1 API token ended", "user operator is now viewer; 1 API token ended"]


def test_api_tokens_end_when_the_password_changes_from_the_command_line(env: ConsoleEnv) -> None:
    token = env.token("viewer")
    out = user_cli(env.state_dir, "passwd", "viewer", "--password-stdin", stdin="from-the-shell-pass-3\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "password of viewer changed; 1 API token ended"
    assert status_with(token, env).status_code == 401
    help_text = user_cli(env.state_dir, "token", "--help").stdout
    assert "it ends when the user's password or role changes" in " ".join(help_text.split())


# --- a lockout holds the source's tries, not the account -----------------------------------------------------------

def test_a_lockout_from_one_address_does_not_lock_the_owner_out_elsewhere(
        console_env: Callable[..., ConsoleEnv]) -> None:
    env = console_env(lockout_failures=5, lockout_s=900)
    clock = [time.time()]
    env.ctx.wall_s = lambda: clock[0]
    attacker = env.browser(remote_addr="127.0.0.2")
    answers = []
    for i in range(5):
        clock[0] += 300  # past any backoff
        answers.append(flashed(attacker.login("operator", f"wrong-password-{i:04}"))[0])
    assert answers[-1] == "This account is locked: try again in 900 s."
    refused = attacker.login("operator")  # the right password, from the locked address
    assert refused.status_code == 401 and flashed(refused) == ["This account is locked: try again in 900 s."]

    owner = env.browser(remote_addr="127.0.0.3")
    assert owner.must_login("operator").client.get("/").status_code == 200  # from elsewhere: logged in
    assert env.browser(remote_addr="127.0.0.2").login("operator").status_code == 401  # still locked there

    admin = env.login("admin")
    assert ">locked (from some address)<" in admin.client.get("/users").get_data(as_text=True)
    failed = env.records("login.failed")
    assert {r.detail["client"] for r in failed} == {"127.0.0.2"}
    assert [r.text.endswith("(account locked)") for r in reversed(failed)] == [False] * 4 + [True, False, False]
    assert admin.form("/users", {"action": "unlock", "name": "operator"}).status_code == 302
    assert env.browser(remote_addr="127.0.0.2").login("operator").status_code == 302


def test_an_ipv6_source_is_its_64(console_env: Callable[..., ConsoleEnv]) -> None:
    env = console_env(lockout_failures=3, lockout_s=600)
    clock = [time.time()]
    env.ctx.wall_s = lambda: clock[0]
    for i in range(3):
        clock[0] += 300
        env.browser(remote_addr=f"2001:db8:1:2::{i + 1}").login("viewer", f"wrong-password-{i:04}")
    same_64 = env.browser(remote_addr="2001:db8:1:2:ffff::9").login("viewer")
    assert same_64.status_code == 401 and flashed(same_64) == ["This account is locked: try again in 600 s."]
    assert env.browser(remote_addr="2001:db8:1:3::1").login("viewer").status_code == 302


def test_the_login_rate_limit_counts_an_ipv6_64_as_one_client(env: ConsoleEnv) -> None:
    env.app.extensions["login_limiter"].clock = lambda: 1000.0  # no token comes back during the test
    codes = [env.browser(remote_addr=f"2001:db8:5:6::{i + 1:x}").login("operator", f"wrong-password-{i:04}").status_code
             for i in range(11)]
    assert codes == [401] * 10 + [429]
    assert env.browser(remote_addr="2001:db8:5:7::1").login("viewer").status_code == 302  # another /64


# --- the first admin and its initial password ----------------------------------------------------------------------

@pytest.fixture
def first_run(console_env: Callable[..., ConsoleEnv], tmp_path: Path) -> tuple[ConsoleEnv, Path, str]:
    """A console as at the first start: no users but ``admin``, made by ``first_admin`` with its password in a file."""
    state = tmp_path / "first"
    state.mkdir(mode=0o700)
    store = UserStore(state / "users.sqlite")
    path = first_admin(store, state)
    assert path == state / INITIAL_PASSWORD_FILE
    return console_env(users=store), path, path.read_text().strip()


def test_the_initial_password_file_is_private(first_run: tuple[ConsoleEnv, Path, str]) -> None:
    _, path, password = first_run
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(password) >= 20
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_the_first_login_must_change_the_initial_password(first_run: tuple[ConsoleEnv, Path, str]) -> None:
    env, path, initial = first_run
    token = env.ctx.users.create_token("admin", "early", 0.0)
    admin = env.browser()
    first = admin.login("admin", initial)
    assert first.status_code == 302 and first.headers["Location"] == "/password"
    assert admin.client.get("/").headers["Location"] == "/password"  # every page leads there first
    assert admin.client.get("/users").headers["Location"] == "/password"
    page = admin.client.get("/password")
    assert page.status_code == 200 and "The initial password may not be kept" in page.get_data(as_text=True)
    for answer in (admin.client.get("/api/v1/status"), status_with(token, env),
                   admin.api("POST", "/api/v1/holdover", {"action": "start"}, csrf=password_page_csrf(admin))):
        assert answer.status_code == 403
        assert answer.get_json()["error"].startswith("password change required")
    assert env.commands == []

    refusals = [(change_own_password(admin, "not-the-password", NEW_PASSWORD), "The current password is wrong."),
                (change_own_password(admin, initial, initial), "Choose a password other than the current one."),
                (change_own_password(admin, initial, NEW_PASSWORD, "something-else-1"), "The new passwords differ."),
                (change_own_password(admin, initial, "short"), "Refused: a password needs 10 to 1024 characters.")]
    for response, message in refusals:
        assert response.status_code == 400 and flashed(response) == [message]
    assert path.exists()

    done = change_own_password(admin, initial, NEW_PASSWORD)
    assert done.status_code == 302 and done.headers["Location"] == "/"
    dashboard = admin.client.get("/")
    assert dashboard.status_code == 200 and 'data-page="dashboard"' in dashboard.get_data(as_text=True)
    assert admin.client.get("/api/v1/status").status_code == 200
    assert status_with(token, env).status_code == 401  # made under the initial password: ended with it
    assert not path.exists()
    texts = [r.text for r in env.records("user.password") + env.records("user.change")]
    assert "admin changed their password; 1 API token ended" in texts
    assert f"initial admin password file {path} deleted: the password was changed" in texts

    assert env.browser().login("admin", initial).status_code == 401
    again = env.browser().login("admin", NEW_PASSWORD)
    assert again.status_code == 302 and again.headers["Location"] == "/"


def test_an_admin_setting_the_first_admins_password_also_deletes_the_file(
        first_run: tuple[ConsoleEnv, Path, str]) -> None:
    env, path, _ = first_run
    env.ctx.users.add("second", "admin", "second-admin-pass-4")
    second = env.browser()
    assert second.login("second", "second-admin-pass-4").headers["Location"] == "/"
    assert second.form("/users", {"action": "password", "name": "admin", "password": NEW_PASSWORD}).status_code == 302
    assert not path.exists()
    assert f"initial admin password file {path} deleted: the password was changed" in [
        r.text for r in env.records("user.change")]
    assert env.browser().login("admin", NEW_PASSWORD).headers["Location"] == "/"  # no change asked any more


def test_the_command_line_passwd_deletes_the_file(first_run: tuple[ConsoleEnv, Path, str]) -> None:
    env, path, _ = first_run
    out = user_cli(path.parent, "passwd", "admin", "--password-stdin", stdin=NEW_PASSWORD + "\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["password of admin changed", f"{path} deleted: it held the initial password"]
    assert not path.exists()
    listed = user_cli(path.parent, "list").stdout
    assert "must change" not in listed


def test_a_file_left_by_an_older_version_is_settled_at_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    store = UserStore(state / "users.sqlite")
    store.add("admin", "admin", "initial-pass-from-before")  # as an older version made it: no change asked
    (state / INITIAL_PASSWORD_FILE).write_text("initial-pass-from-before\n")
    assert settle_initial_password(store, state) is None  # still that password: a change is asked for
    assert [u.must_change for u in store.users()] == [True]
    store.set_password("admin", "changed-since-then-5")
    (state / INITIAL_PASSWORD_FILE).write_text("initial-pass-from-before\n")
    assert settle_initial_password(store, state) == state / INITIAL_PASSWORD_FILE  # changed: the file goes
    assert not (state / INITIAL_PASSWORD_FILE).exists()
    store.close()


# --- a symbolic link where a private file belongs ----------------------------------------------------------------

@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "someone-elses-file"
    path.write_text("untouched\n")
    path.chmod(0o644)
    return path


def test_a_link_at_the_initial_password_file_is_refused(tmp_path: Path, victim: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / INITIAL_PASSWORD_FILE).symlink_to(victim)
    store = UserStore(state / "users.sqlite")
    with pytest.raises(UnsafePathError, match=re.escape(f"{state / INITIAL_PASSWORD_FILE} is a symbolic link")):
        first_admin(store, state)
    assert store.count() == 0 and victim.read_text() == "untouched\n"
    store.close()


def test_a_link_at_the_user_database_is_refused(tmp_path: Path, victim: Path) -> None:
    (tmp_path / "users.sqlite").symlink_to(victim)
    with pytest.raises(UnsafePathError, match=re.escape(f"{tmp_path / 'users.sqlite'} is a symbolic link")):
        UserStore(tmp_path / "users.sqlite")
    assert victim.read_text() == "untouched\n"


@pytest.mark.parametrize("name", ["web-secret.key", "web-key.pem"])
def test_a_link_at_the_session_key_or_the_tls_key_stops_the_console_with_the_path_named(
        env: ConsoleEnv, tmp_path: Path, victim: Path, name: str) -> None:
    from appliance.web.server import WebPart

    state = tmp_path / "state-links"
    state.mkdir(mode=0o700)
    (state / name).symlink_to(victim)
    part = WebPart(env.ctx, "127.0.0.1", 0, state / "web-cert.pem", state / "web-key.pem", state)
    try:
        part.start()
        status = part.status()
    finally:
        part.stop()
    assert not status["serving"]
    assert f"{state / name} is a symbolic link where a private file belongs" in status["error"]
    assert victim.read_text() == "untouched\n"
    assert os.path.islink(state / name)
