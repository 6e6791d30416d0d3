"""Keep what the clock discipline learned (frequency, aging, error bound) across restarts, in one JSON file.

Single job: save a :class:`LearnedState` atomically and load it back, turning any bad file into a warning and a
cold start.  This is an I/O edge (files, fsync, rename); it reads no clock - the caller stamps
``saved_at_tai_ns`` and decides whether a loaded state is too old to trust.

Format: ``<state_dir>/clock-state.json``, a JSON object holding the dataclass fields.  ``version`` changes only
for an incompatible change.  Unknown extra fields are ignored *without* a warning, so a file written by a newer
release that merely added fields still loads; a missing field, a wrong type, NaN/Infinity, or a version this
release does not know is a cold start with a warning naming the file and the problem.

Writes assume one writer per directory (the appliance process): a save removes temporary files that an earlier,
killed save left behind.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import stat
import tempfile
from pathlib import Path

from appliance.clock.learned import FORMAT_VERSION, LearnedState

STATE_FILE = "clock-state.json"
_TEMP_PREFIX, _TEMP_SUFFIX = ".clock-state.", ".tmp"
_MAX_FILE_BYTES = 1 << 20  # a real state file is well under 1 KiB; a huge one is not ours and is not parsed
_FILE_MODE, _DIR_MODE = 0o600, 0o700
def save_state(state_dir: Path, learned: LearnedState) -> Path:
    """Write ``clock-state.json`` atomically (temp file, fsync, rename, fsync the directory) and return its path.

    Raises OSError with a message naming the path when the directory cannot be created or the file written.
    """
    state_dir = Path(state_dir)
    ensure_state_dir(state_dir)
    final = state_dir / STATE_FILE
    payload = (json.dumps(dataclasses.asdict(learned), allow_nan=False, indent=2) + "\n").encode()
    _remove_stale_temps(state_dir)
    try:
        replace_file(final, payload, prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot save learned clock state to {final}: {exc.strerror or exc}") from exc
    return final


# The private files the appliance keeps in its state directory (relative names), each written by its own module
# through write_private.  A symbolic link at any of them is refused at start, before anything is read or written.
PRIVATE_FILES = ("initial-admin-password", "web-secret.key", "web-key.pem", "users.sqlite", "console-settings.toml",
                 "audit-signing.key", "snmp-users.toml", "snmp-engine-id", STATE_FILE,
                 "nts", "nts/key.pem", "nts/cookie_keys.json")


def ensure_state_dir(state_dir: Path) -> None:
    """The state directory, made 0700 (it holds user hashes, keys and the audit store) when it does not exist; an
    existing one keeps its mode as long as no other user can write to it.  OSError naming the directory when it
    cannot be made or is not a directory; UnsafePathError naming the path when the directory is another user's or
    open to other users' writes, or when a private file in it is a symbolic link."""
    try:
        state_dir.mkdir(mode=_DIR_MODE, parents=True)
    except FileExistsError:
        if not state_dir.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"state directory {state_dir} exists "
                                                    "but is not a directory") from None
        check_state_dir(state_dir)  # an existing directory keeps the mode its administrator chose, if it is safe
        for name in PRIVATE_FILES:
            refuse_link(state_dir / name)
        return
    except OSError as exc:
        raise OSError(exc.errno, f"cannot create state directory {state_dir}: {exc.strerror or exc}") from exc
    os.chmod(state_dir, _DIR_MODE)  # mkdir's mode passes through the umask; the state is nobody else's business


class UnsafePathError(OSError):
    """A path where a private file belongs is a symbolic link, or the state directory is open to other users."""

    def __str__(self) -> str:
        return str(self.strerror)  # the message names the path and the remedy; "[Errno 40]" adds nothing for a user


def refuse_link(path: Path) -> None:
    """UnsafePathError naming ``path`` when it is a symbolic link: a secret is never read or written through one
    (a link planted before the first start would carry the admin password or a key into a file someone else reads,
    or hand the appliance a signing key someone else chose)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePathError(errno.ELOOP, f"{path} is a symbolic link where a private file belongs: remove it "
                                           "(the appliance never reads or writes a secret through a link)")


def check_state_dir(state_dir: Path) -> None:
    """UnsafePathError when the state directory is not a plain directory owned by this user, or when another user
    could plant files in it (group or world writable): it holds the user hashes, keys and the audit store."""
    info = os.lstat(state_dir)
    if stat.S_ISLNK(info.st_mode):
        info = os.stat(state_dir)  # a configured path may be a link to the real directory; its target is judged
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafePathError(errno.ENOTDIR, f"state directory {state_dir} is not a directory")
    if info.st_uid != os.geteuid():
        raise UnsafePathError(errno.EPERM, f"state directory {state_dir} is owned by uid {info.st_uid}, not by the "
                                           f"appliance's user (uid {os.geteuid()}): chown it")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePathError(errno.EPERM, f"state directory {state_dir} is writable by other users "
                                           f"(mode {stat.S_IMODE(info.st_mode):04o}): chmod 0700 it")


def write_private(path: Path, data: bytes, mode: int = _FILE_MODE) -> None:
    """A private file (key, password, session secret) written atomically: refused when ``path`` is a symbolic link,
    else a new O_EXCL temp file in the same directory, renamed over ``path`` (a rename never follows a link)."""
    path = Path(path)
    refuse_link(path)
    replace_file(path, data, mode, prefix=f".{path.name}.")


def read_private(path: Path, limit_bytes: int = _MAX_FILE_BYTES) -> bytes:
    """A private file's bytes, opened with O_NOFOLLOW (UnsafePathError naming it when it is a link; FileNotFoundError
    when it is missing); at most ``limit_bytes`` are read."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            refuse_link(path)
        raise
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit_bytes)


def write_temp(directory: Path, data: bytes, mode: int = _FILE_MODE, prefix: str = ".tmp-",
               suffix: str = ".tmp") -> Path:
    """``data`` in a new temp file of ``directory`` (unique name, O_EXCL), ``mode`` whatever the umask, fsynced."""
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
    temp = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)  # mkstemp's 0600 is also filtered by the umask
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())  # the data must be on disk before the rename can expose it
    except BaseException:
        _discard(temp)
        raise
    return temp


def replace_file(path: Path, data: bytes, mode: int = _FILE_MODE, prefix: str = ".tmp-", suffix: str = ".tmp") -> None:
    """Write ``path`` atomically: a temp file in the same directory (rename is atomic only there), fsync, rename,
    fsync the directory.  A crash leaves the old file or the new one, and at most a temp file."""
    directory = path.parent if str(path.parent) else Path(".")
    temp = write_temp(directory, data, mode, prefix, suffix)
    try:
        os.replace(temp, path)
    except BaseException:
        _discard(temp)  # the old file is untouched; only our temp needs to go
        raise
    fsync_directory(directory)  # the rename itself is durable only once the directory entry is on disk


def fsync_directory(state_dir: Path) -> None:
    """Make a rename in ``state_dir`` durable (fsync the directory; a filesystem that cannot is left as it is)."""
    fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # some filesystems cannot fsync a directory; the rename still happened
            raise
    finally:
        os.close(fd)


def _remove_stale_temps(state_dir: Path) -> None:
    for leftover in state_dir.glob(f"{_TEMP_PREFIX}*{_TEMP_SUFFIX}"):
        _discard(leftover)  # left by a save that was killed between mkstemp and rename


def _discard(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # best effort: the next save tries again


def load_state(state_dir: Path, expected_oscillator: str) -> tuple[LearnedState | None, str | None]:
    """(state, None) when the file is good; (None, warning ending "cold start") otherwise.  Never raises for a
    bad or unreadable file."""
    path = Path(state_dir) / STATE_FILE
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None, f"no learned clock state in {state_dir}: cold start"
    except OSError as exc:
        return None, f"{path}: cannot read it ({exc.strerror or exc}): cold start"
    learned, problem = _parse(raw, expected_oscillator)
    return (learned, None) if problem is None else (None, f"{path}: {problem}: cold start")


def _parse(raw: bytes, expected_oscillator: str) -> tuple[LearnedState | None, str | None]:
    if len(raw) > _MAX_FILE_BYTES:
        return None, f"larger than {_MAX_FILE_BYTES} bytes, not a clock state file"
    try:
        document = json.loads(raw.decode("utf-8"), parse_constant=_refuse_non_finite)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None, f"not valid JSON ({_shorten(str(exc))})"
    if not isinstance(document, dict):
        return None, f"expected a JSON object, found {type(document).__name__}"
    version = document.get("version")
    if isinstance(version, bool) or version != FORMAT_VERSION:  # bool first: True == 1 in Python
        return None, f"unknown format version {_shorten(repr(version))} (this release reads {FORMAT_VERSION})"
    names = [field.name for field in dataclasses.fields(LearnedState)]
    missing = [name for name in names if name not in document]
    if missing:
        return None, f"missing field(s) {', '.join(missing)}"
    try:
        learned = LearnedState(**{name: document[name] for name in names})  # extra keys: ignored on purpose
    except ValueError as exc:
        return None, f"invalid contents: {_shorten(str(exc))}"
    if learned.oscillator != expected_oscillator:
        return None, (f"learned on oscillator {learned.oscillator!r} but the configured oscillator is "
                      f"{expected_oscillator!r}")
    return learned, None


def _refuse_non_finite(constant: str) -> float:
    raise ValueError(f"{constant} is not allowed")  # Python's json would otherwise accept NaN and Infinity


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."  # a hostile file must not flood the log
