"""Backup and restore on the state directory: what it holds now, a backup archive's bytes, and a restore that keeps
the old state until the new one is complete.

Edge module: reads and writes the state directory and the files the settings name (configuration file, PTP
security associations, SNMPv3 users); reads no clock (the caller labels the archive).

A restore writes every new file into ``<state_dir>/.restore-staging/`` first (fsynced), then a journal
(``.restore-journal.json``) listing each move, then moves each file the restore replaces or removes into
``<state_dir>/restore-previous-<label>/`` and the staged one into place, and deletes the journal last.  A restore cut
short before the journal is written changed nothing; one cut short after it is completed by the next restore or the
next start of the appliance (``resume``), from the staged files.  The previous files stay in their directory for the
operator to go back to by hand.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from appliance.backup.archive import (SEALED_SETTINGS, SETTINGS_FILES, Archive, BackupError, Contents, FileItem, Users,
                                      build, keep_secrets, redact, seal_keys, secret_names)
from appliance.config import Config
from appliance.edge.persist import fsync_directory, read_private, refuse_link, replace_file, write_temp

KEY_FILES = ("web-cert.pem", "web-key.pem", "web-secret.key", "audit-signing.key", "audit-signing.pub")
KEY_DIRS = ("nts",)
USERS_FILE = "users.sqlite"
STAGING, JOURNAL = ".restore-staging", ".restore-journal.json"
MAX_FILE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Restored:
    changed: tuple[str, ...]  # the paths written or removed
    previous: Path  # where the files it replaced went


def _read(path: Path) -> bytes | None:
    try:
        return read_private(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BackupError(f"{path}: {exc.strerror or exc}") from None


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _snmp_users_path(config: Config, state: Path) -> tuple[str, Path]:
    if config.snmp.users_file:
        return "snmp.users_file", Path(config.snmp.users_file).expanduser()
    return "state", state / "snmp-users.toml"


def current(config: Config, config_file: Path | None, state: Path | None = None) -> Contents:
    """What the state holds now (``state``: the configuration's state directory unless given): the settings files,
    users, SNMP and PTP files, and the keys."""
    from appliance.web.users import UserStore

    state = state or config.state_path()
    files: list[FileItem] = []

    def add(name: str, place: str, path: Path) -> None:
        data = _read(path)
        if data is not None:
            files.append(FileItem(name, place, str(path.relative_to(state)) if place == "state" else str(path),
                                  data, _mode(path)))

    if config_file is not None:
        add("config.toml", "config", config_file)
    add("console-settings.toml", "state", state / "console-settings.toml")
    place, path = _snmp_users_path(config, state)
    add("snmp-users.toml", place, path)
    add("snmp-engine-id", "state", state / "snmp-engine-id")
    if config.ptp.sa_file:
        add("ptp-sa.cfg", "ptp.sa_file", Path(config.ptp.sa_file).expanduser())
    users = Users()
    if (state / USERS_FILE).exists():
        store = UserStore(state / USERS_FILE)
        try:
            rows, tokens = store.export_rows()
        finally:
            store.close()
        users = Users(tuple(rows), tuple(tokens))
    keys = []
    for rel in _key_paths(state):
        data = _read(state / rel)
        if data is not None:
            keys.append(FileItem(rel, "state", rel, data, _mode(state / rel)))
    return Contents(tuple(files), users, tuple(keys))


def _key_paths(state: Path) -> list[str]:
    out = list(KEY_FILES)
    for d in KEY_DIRS:
        if (state / d).is_dir():
            out.extend(f"{d}/{p.name}" for p in sorted((state / d).iterdir()) if p.is_file() and not p.is_symlink())
    return out


def make(config: Config, config_file: Path | None, labels: dict[str, str], passphrase: str | None,
         salt: bytes, nonce: bytes, state: Path | None = None) -> tuple[bytes, Contents, list[str]]:
    """The archive of the current state (keys only with ``passphrase``), signed with the audit signing key, and the
    secret settings it left out (without a passphrase: a shared secret is never written in the clear).  A settings
    file that sets a secret is archived without it; with a passphrase the file as it is goes into the encrypted
    part."""
    from appliance.audit.bundle import load_or_create_key

    state = state or config.state_path()
    try:
        signer = load_or_create_key(state)  # first: it is one of the keys
    except Exception as exc:  # AuditError: the key file refused
        raise BackupError(str(exc)) from None
    contents = current(config, config_file, state)
    clear, sealed_settings, left_out = [], [], []
    for f in contents.files:
        names = secret_names(f.data) if f.name in SETTINGS_FILES else []
        if not names:
            clear.append(f)
            continue
        clear.append(FileItem(f.name, f.place, f.path, redact(f.data), f.mode))
        sealed_settings.append(FileItem(SEALED_SETTINGS + f.name, f.place, f.path, f.data, f.mode))
        left_out.extend(names)
    keys = (*contents.keys, *sealed_settings) if passphrase is not None else ()
    contents = Contents(tuple(clear), contents.users, keys)
    sealed = seal_keys(keys, passphrase, salt, nonce) if passphrase is not None else None
    return build(contents, signer, labels, sealed), contents, [] if passphrase is not None else left_out


def effective_files(archive: Archive, keys: Iterable[FileItem], state: Path,
                    config_file: Path | None) -> tuple[FileItem, ...]:
    """The archive's files as a restore writes them: a settings file whole from the encrypted part when its keys
    are opened, else without its secrets, which stay as the file in place has them."""
    sealed = {k.name[len(SEALED_SETTINGS):]: k for k in keys if k.name.startswith(SEALED_SETTINGS)}
    out = []
    for f in archive.contents.files:
        if f.name in sealed:
            out.append(FileItem(f.name, f.place, f.path, sealed[f.name].data, f.mode))
        elif f.name in SETTINGS_FILES:
            target = target_of(f, state, config_file)
            now = _read(target) if target is not None else None
            out.append(FileItem(f.name, f.place, f.path, keep_secrets(f.data, now), f.mode))
        else:
            out.append(f)
    return tuple(out)


def write_archive(path: Path, data: bytes) -> None:
    """The archive written atomically, mode 0600 (it holds password hashes), never through a link."""
    refuse_link(path)
    try:
        replace_file(path, data, 0o600, prefix=f".{path.name}.")
    except OSError as exc:
        raise BackupError(f"{path}: {exc.strerror or exc}") from None


# --- restore --------------------------------------------------------------------------------------------------------

def target_of(item: FileItem, state: Path, config_file: Path | None) -> Path | None:
    """Where an archived file goes: the state directory, the path its setting had, or ``config_file`` (None: the
    archive's configuration file is not written)."""
    if item.place == "state":
        return state / item.path
    if item.place == "config":
        return config_file
    if item.place in ("ptp.sa_file", "snmp.users_file"):
        return Path(item.path)
    raise BackupError(f"refused: the archive puts {item.name} in an unknown place {item.place!r}")


def plan_targets(archive: Archive, keys: Iterable[FileItem], state: Path,
                 config_file: Path | None) -> tuple[dict[Path, FileItem], list[Path]]:
    """The files a restore writes (target -> item) and those it removes (in the state, not in the archive)."""
    writes: dict[Path, FileItem] = {}
    keys = tuple(keys)
    files_now = effective_files(archive, keys, state, config_file)
    for item in (*files_now, *(k for k in keys if not k.name.startswith(SEALED_SETTINGS))):
        target = target_of(item, state, config_file)
        if target is not None:
            writes[target] = item
    removes = [state / n for n in ("console-settings.toml", "snmp-engine-id")
               if archive.contents.file(n) is None and (state / n).exists()]
    if archive.contents.file("snmp-users.toml") is None and (state / "snmp-users.toml").exists():
        removes.append(state / "snmp-users.toml")
    return writes, removes


def config_file_of(config: Config) -> Path | None:
    """The configuration file the settings were read from (None: the embedded default only)."""
    for origin in config.origins.values():
        if origin not in ("default", "--set", "console"):
            return Path(origin)
    return None


def own_fingerprint(state: Path) -> str | None:
    """The fingerprint of this appliance's audit signing key (None: it has none yet)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from appliance.audit.bundle import PUBLIC_KEY_FILE
    from appliance.backup.archive import fingerprint

    try:
        key = serialization.load_pem_public_key((state / PUBLIC_KEY_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    return fingerprint(key) if isinstance(key, Ed25519PublicKey) else None


def pending(state: Path) -> bool:
    """Whether a restore staged from the console waits for the next start."""
    try:
        return bool(json.loads((state / JOURNAL).read_text()).get("pending"))
    except (OSError, ValueError):
        return False


def restore(config: Config, archive: Archive, keys: tuple[FileItem, ...], config_file: Path | None,
            label: str, apply: bool = True, state: Path | None = None) -> Restored:
    """Stage every new file, journal the moves, make them (see the module's text).  ``apply`` False (the console,
    under a running appliance): staged and journalled only, made by the next start."""
    from appliance.web.users import UserStore, UserError

    state = state or config.state_path()
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    if pending(state):
        (state / JOURNAL).unlink()  # staged but never begun: this restore takes its place
    resume(state)  # an earlier restore cut short is finished first
    staging = state / STAGING
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o700)
    writes, removes = plan_targets(archive, keys, state, config_file)
    moves: list[tuple[str, str, int]] = []
    for i, (target, item) in enumerate(sorted(writes.items())):
        staged = write_temp(staging, item.data, item.mode or 0o600, prefix=f"{i:03d}-")
        moves.append((str(staged), str(target), item.mode or 0o600))
    users = staging / USERS_FILE
    try:
        store = UserStore(users)
        try:
            u = archive.contents.users
            store.import_rows(list(u.users), list(u.tokens))
        finally:
            store.close()
    except UserError as exc:
        raise BackupError(f"refused: the archive's console users: {exc}") from None
    for suffix in ("-wal", "-shm"):
        Path(str(users) + suffix).unlink(missing_ok=True)
    moves.append((str(users), str(state / USERS_FILE), 0o600))
    fsync_directory(staging)
    previous = state / f"restore-previous-{label}"
    journal = {"moves": moves, "removes": [str(p) for p in removes], "previous": str(previous), "pending": not apply}
    replace_file(state / JOURNAL, json.dumps(journal).encode(), 0o600, prefix=".restore-journal.")
    if apply:
        _apply(state, journal)
    return Restored(tuple(t for _, t, _ in moves) + tuple(journal["removes"]), previous)


def resume(state: Path) -> bool:
    """Complete a restore cut short after its journal was written; True if there was one."""
    try:
        journal = json.loads((state / JOURNAL).read_text())
    except FileNotFoundError:
        shutil.rmtree(state / STAGING, ignore_errors=True)  # staged but never journalled: it changed nothing
        return False
    except (OSError, ValueError) as exc:
        raise BackupError(f"{state / JOURNAL}: an interrupted restore's journal is unreadable ({exc}); move it "
                          "away and restore again") from None
    _apply(state, journal)
    return True


def _set_aside(path: Path, previous: Path, state: Path) -> None:
    """Move ``path`` (and a SQLite file's -wal/-shm) into ``previous``, keeping where it was."""
    for each in (path, Path(str(path) + "-wal"), Path(str(path) + "-shm")):
        if not os.path.lexists(each):
            continue
        rel = each.relative_to(state) if each.is_relative_to(state) else Path("outside", *each.parts[1:])
        dest = previous / rel
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if os.path.lexists(dest):
            os.unlink(each)  # set aside by an earlier, interrupted pass
        elif each.is_relative_to(state):
            os.replace(each, dest)
        else:
            shutil.copy2(each, dest, follow_symlinks=False)
            os.unlink(each)


def _apply(state: Path, journal: dict) -> None:
    previous = Path(journal["previous"])
    previous.mkdir(mode=0o700, parents=True, exist_ok=True)
    for staged, target, mode in journal["moves"]:
        staged_path, target_path = Path(staged), Path(target)
        if not staged_path.exists():
            continue  # moved by an earlier pass
        refuse_link(target_path)
        _set_aside(target_path, previous, state)
        target_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if target_path.is_relative_to(state):
            os.replace(staged_path, target_path)
        else:  # another filesystem, maybe: a temp file beside the target, renamed over it
            replace_file(target_path, staged_path.read_bytes(), int(mode), prefix=f".{target_path.name}.")
            staged_path.unlink()
        fsync_directory(target_path.parent)
    for removed in journal["removes"]:
        _set_aside(Path(removed), previous, state)
    fsync_directory(state)
    (state / JOURNAL).unlink(missing_ok=True)
    if not any(previous.iterdir()):
        previous.rmdir()  # nothing was replaced
    shutil.rmtree(state / STAGING, ignore_errors=True)
    fsync_directory(state)
