"""A restore on the state directory: staged first, journalled, the previous files set aside; cut short anywhere, the
old state stands (before the journal) or the next start completes it (after)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance import config as cfg
from appliance.backup import files
from appliance.backup.archive import BackupError, read
from appliance.web.users import UserStore

SA = "[security_association]\nspp 1\n1 AES128 HEX:00112233445566778899aabbccddeeff\n"


def setup(state: Path, sa: Path, location: str) -> cfg.Config:
    state.mkdir(mode=0o700, exist_ok=True)
    (state / "console-settings.toml").write_text(f'snmp.sys_location = "{location}"\n')
    store = UserStore(state / "users.sqlite")
    store.add("alice", "operator", "a-long-password-1")
    store.close()
    sa.write_text(SA)
    return cfg.load(None, [f"state_dir={state}", f"ptp.sa_file={sa}"])


def archive_of(config: cfg.Config) -> bytes:
    data, _, _ = files.make(config, None, {"created_utc": "x"}, None, b"s" * 16, b"n" * 12)
    return data


def test_a_restore_writes_the_archive_and_sets_the_old_files_aside(tmp_path: Path) -> None:
    src = setup(tmp_path / "a", tmp_path / "a-sa.cfg", "hall 1")
    archive = read(archive_of(src))
    dst = setup(tmp_path / "b", tmp_path / "a-sa.cfg", "hall 2")
    (tmp_path / "a-sa.cfg").write_text("changed since\n")
    done = files.restore(dst, archive, (), None, "t1")
    state = dst.state_path()
    assert (state / "console-settings.toml").read_text() == 'snmp.sys_location = "hall 1"\n'
    assert (tmp_path / "a-sa.cfg").read_text() == SA  # the setting's file, where it was
    assert (done.previous / "console-settings.toml").read_text() == 'snmp.sys_location = "hall 2"\n'
    assert not (state / files.JOURNAL).exists() and not (state / files.STAGING).exists()
    store = UserStore(state / "users.sqlite")
    assert store.check_password("alice", "a-long-password-1")
    store.close()


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4, 5])
def test_a_restore_cut_short_anywhere_leaves_the_old_state_or_is_completed_by_resume(tmp_path: Path, fail_at: int,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    src = setup(tmp_path / "a", tmp_path / "sa.cfg", "hall 1")
    archive = read(archive_of(src))
    dst = setup(tmp_path / "b", tmp_path / "sa-b.cfg", "hall 2")
    real, calls = files.os.replace, []

    def crash(a: object, b: object) -> None:
        calls.append(b)
        if len(calls) == fail_at:
            raise OSError(5, "power cut")
        real(a, b)

    monkeypatch.setattr(files.os, "replace", crash)
    with pytest.raises(OSError, match="power cut"):
        files.restore(dst, archive, (), None, "t2")
    monkeypatch.setattr(files.os, "replace", real)
    state = dst.state_path()
    journalled = (state / files.JOURNAL).exists()  # the first rename is the journal's own
    assert journalled == (fail_at > 1)
    assert files.resume(state) == journalled
    expected = "hall 1" if journalled else "hall 2"
    assert (state / "console-settings.toml").read_text() == f'snmp.sys_location = "{expected}"\n'
    assert not (state / files.JOURNAL).exists() and not (state / files.STAGING).exists()
    store = UserStore(state / "users.sqlite")
    assert [u.name for u in store.users()] == ["alice"]
    store.close()


def test_a_restore_that_fails_before_its_journal_changes_nothing(tmp_path: Path) -> None:
    src = setup(tmp_path / "a", tmp_path / "sa.cfg", "hall 1")
    data = archive_of(src).replace(b'"role": "operator"', b'"role": "root"')
    with pytest.raises(BackupError, match="altered"):
        read(data)
    dst = setup(tmp_path / "b", tmp_path / "sa-b.cfg", "hall 2")
    good = read(archive_of(src))
    bad_users = type(good.contents.users)((("alice", "root", b"a" * 16, b"h" * 32, 0),), ())
    forged = type(good)(good.document, type(good.contents)(good.contents.files, bad_users), (), good.fingerprint)
    with pytest.raises(BackupError, match="not a user this appliance makes"):
        files.restore(dst, forged, (), None, "t3")
    state = dst.state_path()
    assert (state / "console-settings.toml").read_text() == 'snmp.sys_location = "hall 2"\n'
    assert not (state / files.JOURNAL).exists()
    assert files.resume(state) is False and not (state / files.STAGING).exists()


def test_a_link_where_a_restored_file_goes_is_refused(tmp_path: Path) -> None:
    src = setup(tmp_path / "a", tmp_path / "sa.cfg", "hall 1")
    archive = read(archive_of(src))
    dst = setup(tmp_path / "b", tmp_path / "sa-b.cfg", "hall 2")
    state = dst.state_path()
    (state / "console-settings.toml").unlink()
    (state / "console-settings.toml").symlink_to(tmp_path / "elsewhere")
    with pytest.raises((OSError, BackupError), match="symbolic link"):
        files.restore(dst, archive, (), None, "t4")
    assert not (tmp_path / "elsewhere").exists()


def test_a_restore_staged_from_the_console_is_made_and_audited_at_the_next_start(tmp_path: Path) -> None:
    from appliance.audit.store import AuditStore
    from appliance.cli import _resume_restore

    src = setup(tmp_path / "a", tmp_path / "sa.cfg", "hall 1")
    archive = read(archive_of(src))
    dst = setup(tmp_path / "b", tmp_path / "sa-b.cfg", "hall 2")
    files.restore(dst, archive, (), None, "t5", apply=False)
    state = dst.state_path()
    assert files.pending(state)
    assert (state / "console-settings.toml").read_text() == 'snmp.sys_location = "hall 2"\n'  # nothing yet
    assert _resume_restore(dst)
    assert (state / "console-settings.toml").read_text() == 'snmp.sys_location = "hall 1"\n'
    assert not files.pending(state) and not _resume_restore(dst)
    store = AuditStore(state / "audit.sqlite")
    kinds = [r.kind for r in store.records()]
    store.close()
    assert "restore.applied" in kinds


def test_a_shared_secret_is_archived_only_encrypted_and_kept_when_the_keys_are_not_restored(tmp_path: Path) -> None:
    from appliance.backup.archive import open_keys

    src = setup(tmp_path / "a", tmp_path / "sa.cfg", "hall 1")
    (src.state_path() / "console-settings.toml").write_text('snmp.community = "s3cret-community"\nntp.port = 1123\n')
    plain, _, left_out = files.make(src, None, {}, None, b"s" * 16, b"n" * 12)
    assert b"s3cret-community" not in plain and left_out == ["snmp.community"]
    sealed, _, left_out = files.make(src, None, {}, "a long passphrase", b"s" * 16, b"n" * 12)
    assert b"s3cret-community" not in sealed and left_out == []
    dst = setup(tmp_path / "b", tmp_path / "sa-b.cfg", "hall 2")
    state = dst.state_path()
    (state / "console-settings.toml").write_text('snmp.community = "the-current-one"\n')
    # without the keys: the archive's settings, and the secret the appliance has now
    files.restore(dst, read(plain), (), None, "t6")
    text = (state / "console-settings.toml").read_text()
    assert "ntp.port = 1123" in text.replace("[ntp]\nport = 1123", "ntp.port = 1123") and "the-current-one" in text
    # with them: the settings file as it was, secret included
    archive = read(sealed)
    files.restore(dst, archive, open_keys(archive, "a long passphrase"), None, "t7")
    assert (state / "console-settings.toml").read_text() == 'snmp.community = "s3cret-community"\nntp.port = 1123\n'
