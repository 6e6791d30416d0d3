"""Private files (keys, passwords, session secrets) are never read or written through a symbolic link, and the
state directory that holds them is refused when another user could plant one there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.edge.persist import (PRIVATE_FILES, UnsafePathError, check_state_dir, ensure_state_dir, read_private,
                                    write_private)
from harness.procs import ENV


def test_write_private_refuses_a_link_and_leaves_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    victim.chmod(0o644)
    link = tmp_path / "web-secret.key"
    link.symlink_to(victim)
    with pytest.raises(UnsafePathError) as caught:
        write_private(link, b"secret")
    assert str(link) in str(caught.value) and "symbolic link" in str(caught.value)
    assert victim.read_text() == "someone else's file\n"
    assert link.is_symlink()


def test_write_private_makes_a_0600_file_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        write_private(tmp_path / "key", b"k" * 32)
    finally:
        os.umask(old)
    assert (tmp_path / "key").read_bytes() == b"k" * 32
    assert (tmp_path / "key").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["key"]  # no temp file left behind


def test_read_private_refuses_a_link_chosen_by_someone_else(tmp_path: Path) -> None:
    chosen = tmp_path / "attacker-key"
    chosen.write_bytes(b"a signing key the attacker knows")
    (tmp_path / "web-secret.key").symlink_to(chosen)
    with pytest.raises(UnsafePathError, match="web-secret.key"):
        read_private(tmp_path / "web-secret.key")
    with pytest.raises(FileNotFoundError):
        read_private(tmp_path / "missing")


def test_a_state_directory_others_can_write_to_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    with pytest.raises(UnsafePathError, match="writable by other users"):
        ensure_state_dir(state)
    state.chmod(0o755)  # readable by others is the administrator's choice; writable is not
    ensure_state_dir(state)


def test_a_state_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        other = tmp_path / "other"
        other.mkdir(mode=0o700)
        os.chown(other, 65534, 65534)
    else:
        other = Path("/")  # root's, and never this user's
    with pytest.raises(UnsafePathError, match="owned by uid"):
        check_state_dir(other)


@pytest.mark.parametrize("name", ["initial-admin-password", "web-secret.key", "nts/cookie_keys.json", "nts"])
def test_a_link_where_a_secret_belongs_is_refused_at_start(tmp_path: Path, name: str) -> None:
    assert name in PRIVATE_FILES
    state = tmp_path / "state"
    (state / "nts").mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    victim = tmp_path / "shared-file"
    victim.write_text("")
    victim.chmod(0o644)
    if name == "nts":
        (state / "nts").rmdir()
        (state / "nts").symlink_to(tmp_path)
    else:
        (state / name).symlink_to(victim)
    out = subprocess.run([sys.executable, "-m", "appliance", "run", "--set", f"state_dir={state}"],
                         capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode != 0
    assert f"{state / name} is a symbolic link where a private file belongs" in out.stderr
    assert victim.read_text() == ""
    assert "Traceback" not in out.stderr
