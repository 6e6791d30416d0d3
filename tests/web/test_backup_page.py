"""The console's backup page: an admin downloads a signed archive (keys only under a passphrase), uploads one, reads
what it would change, and stages the restore for the next start; altered or foreign archives are refused; only
admins reach it; each step is audited."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Callable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from appliance.backup import files
from appliance.backup.archive import build, read
from tests.web.conftest import ConsoleEnv

PASS = "a passphrase for the keys"


def admin_env(console_env: Callable[..., ConsoleEnv]) -> ConsoleEnv:
    env = console_env()
    env.ctx.state_dir = env.state_dir
    return env


def download(browser: Any, keys: bool = False, passphrase: str = "") -> Any:
    data = {"passphrase": passphrase, **({"keys": "1"} if keys else {})}
    return browser.form("/backup/download", data)


def upload(browser: Any, data: bytes) -> Any:
    return browser.form("/backup/check", {"archive": (io.BytesIO(data), "backup.json")},
                        content_type="multipart/form-data")


def test_only_an_admin_reaches_the_backup_page(console_env: Callable[..., ConsoleEnv]) -> None:
    env = admin_env(console_env)
    assert env.login("operator").client.get("/backup").status_code == 403
    page = env.login("admin").client.get("/backup")
    assert page.status_code == 200 and "Download the backup" in page.get_data(as_text=True)


def test_a_downloaded_backup_is_a_signed_archive_and_is_audited(console_env: Callable[..., ConsoleEnv]) -> None:
    env = admin_env(console_env)
    browser = env.login("admin")
    short = download(browser, keys=True, passphrase="short")
    assert short.status_code == 302
    assert "at least 12 characters" in browser.client.get("/backup").get_data(as_text=True)
    got = download(browser, keys=True, passphrase=PASS)
    assert got.status_code == 200 and "attachment" in got.headers["Content-Disposition"]
    archive = read(got.data)
    assert {u[0] for u in archive.contents.users.users} == {"viewer", "operator", "admin"}
    assert archive.has_keys and "audit-signing.key" in archive.key_names
    assert b"PRIVATE KEY" not in got.data
    assert any("configuration backup downloaded" in r.text for r in env.records("backup.created"))


def test_an_uploaded_archive_shows_its_changes_and_is_staged_for_the_next_start(
        console_env: Callable[..., ConsoleEnv]) -> None:
    env = admin_env(console_env)
    browser = env.login("admin")
    (env.state_dir / "console-settings.toml").write_text('snmp.sys_location = "hall 1"\n')
    archive = download(browser).data
    (env.state_dir / "console-settings.toml").write_text('snmp.sys_location = "hall 2"\n')
    assert upload(browser, archive).status_code == 302
    page = browser.client.get("/backup").get_data(as_text=True)
    assert "console-settings.toml: snmp.sys_location = &#39;hall 1&#39; (was &#39;hall 2&#39;)" in page
    assert "(this appliance's)" in page
    done = browser.form("/backup/restore", {"action": "restore"})
    assert done.status_code == 302
    page = browser.client.get("/backup").get_data(as_text=True)
    assert "Restore staged: restart the appliance" in page and 'id="restore-pending"' in page
    # nothing has changed until the next start, which makes it
    assert (env.state_dir / "console-settings.toml").read_text() == 'snmp.sys_location = "hall 2"\n'
    assert files.pending(env.state_dir) and files.resume(env.state_dir)
    assert (env.state_dir / "console-settings.toml").read_text() == 'snmp.sys_location = "hall 1"\n'
    assert any("made at the next start" in r.text for r in env.records("restore.staged"))
    assert not list(env.state_dir.glob(".restore-upload-*"))


def test_an_altered_or_foreign_archive_is_refused(console_env: Callable[..., ConsoleEnv]) -> None:
    env = admin_env(console_env)
    browser = env.login("admin")
    doc = json.loads(download(browser).data)
    doc["users"]["users"][0]["role"] = "viewer"  # the admin made a viewer
    upload(browser, json.dumps(doc).encode())
    assert "altered after it was written" in browser.client.get("/backup").get_data(as_text=True)
    assert any("refused" in r.text for r in env.records("restore.refused"))
    # signed by another appliance: staged only once the admin accepts that key
    other = build(read(download(browser).data).contents, Ed25519PrivateKey.generate(), {"created_utc": "x"}, None)
    upload(browser, other)
    page = browser.client.get("/backup").get_data(as_text=True)
    assert "another appliance" in page
    browser.form("/backup/restore", {"action": "restore"})
    assert "tick the box that accepts its fingerprint" in browser.client.get("/backup").get_data(as_text=True)
    assert not files.pending(env.state_dir)
    fingerprint = read(other).fingerprint
    browser.form("/backup/restore", {"action": "restore", "accept_key": fingerprint})
    assert files.pending(env.state_dir)


def test_a_cancelled_restore_leaves_nothing_behind(console_env: Callable[..., ConsoleEnv]) -> None:
    env = admin_env(console_env)
    browser = env.login("admin")
    upload(browser, download(browser).data)
    assert list(Path(env.state_dir).glob(".restore-upload-*"))
    browser.form("/backup/restore", {"action": "cancel"})
    assert not list(Path(env.state_dir).glob(".restore-upload-*")) and not files.pending(env.state_dir)


def test_an_admin_token_fetches_a_backup_through_the_api(console_env: Callable[..., ConsoleEnv]) -> None:
    env = admin_env(console_env)
    browser = env.browser()
    got = browser.api("POST", "/api/v1/backup", {"keys": True, "passphrase": PASS}, csrf=None,
                      token=env.token("admin"))
    assert got.status_code == 200 and read(got.data).has_keys
    short = browser.api("POST", "/api/v1/backup", {"keys": True, "passphrase": "short"}, csrf=None,
                        token=env.token("admin"))
    assert short.status_code == 400 and "at least 12" in short.get_json()["error"]
    refused = browser.api("POST", "/api/v1/backup", {}, csrf=None, token=env.token("operator"))
    assert refused.status_code == 403
