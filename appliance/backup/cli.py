"""``appliance backup FILE`` and ``appliance restore FILE``.

Edge module: the command line, the host clock (the archive's label, the audit record's time), the passphrase from
the terminal or stdin, the control socket (is the appliance running?).

``backup`` writes the archive (mode 0600): settings (the configuration file given with --config, and what was saved
from the console), console users and API tokens, SNMPv3 users and engine ID, the PTP security associations, and with
``--keys`` the private keys encrypted under a passphrase.  ``restore`` verifies the archive (signature, version),
prints what it would change, and with ``--yes`` (or a typed "yes") makes the change; the appliance must be stopped,
as every process holds the users, keys and settings it read at start.  Both are audited.
"""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from appliance import __version__
from appliance.backup.archive import (MIN_PASSPHRASE, SEALED_SETTINGS, Archive, BackupError, Contents, open_keys, plan,
                                      random_bytes, read, sealed_names)
from appliance.config import Config

EXIT_REFUSED = 1


def add_parser(sub: Any, settings_args: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("backup", help="save settings, users, SNMPv3 users, PTP security associations (and with "
                       "--keys the private keys, under a passphrase) into a signed archive; audited")
    settings_args(p)
    p.add_argument("file", help="the archive to write (mode 0600)")
    p.add_argument("--keys", action="store_true", help="also the private keys (console TLS, session, NTS, audit "
                   "signing), encrypted under a passphrase")
    p.add_argument("--passphrase-stdin", action="store_true", help="read the passphrase from the first line of stdin")
    p = sub.add_parser("restore", help="check a backup archive, show what it changes, and restore it (the "
                       "appliance stopped); audited")
    settings_args(p)
    p.add_argument("file", help="the archive to restore")
    p.add_argument("--dry-run", action="store_true", help="only check the archive and show what would change")
    p.add_argument("--yes", action="store_true", help="restore without asking")
    p.add_argument("--skip-keys", action="store_true", help="leave the keys in place even if the archive has them")
    p.add_argument("--passphrase-stdin", action="store_true", help="read the passphrase from the first line of stdin")
    p.add_argument("--accept-key", metavar="FINGERPRINT", default="",
                   help="restore an archive signed by another appliance's audit key (its SHA-256 fingerprint, as "
                        "the refusal prints it)")


def _passphrase(args: argparse.Namespace, confirm: bool) -> str:
    if args.passphrase_stdin:
        return sys.stdin.readline().rstrip("\n")
    if not sys.stdin.isatty():
        raise BackupError("a passphrase is needed: give --passphrase-stdin, or run this on a terminal")
    first = getpass.getpass("passphrase for the keys: ")
    if confirm and getpass.getpass("the same passphrase again: ") != first:
        raise BackupError("the two passphrases differ")
    return first


def _now_label() -> tuple[str, str]:
    now = time.gmtime()
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", now), time.strftime("%Y%m%dT%H%M%SZ", now)


def _running(config: Config) -> bool:
    from appliance.edge import control

    try:
        control.request(config.control_socket_path(), {"cmd": "status"})
    except control.NotRunning:
        return False
    except control.ControlError:
        return True  # something answers there: do not write under it
    return True


def audit_note(config: Config, kind: str, text: str, detail: dict[str, Any]) -> str:
    """The record, through the running appliance when there is one, else into the store directly."""
    from appliance.edge import control

    who = getpass.getuser()
    request = {"cmd": "note", "kind": kind, "text": text, "detail": detail, "user": who}
    try:
        reply = control.request(config.control_socket_path(), request)
        if reply.get("ok"):
            return "audited"
        return f"not audited: {reply.get('error', 'refused')}"
    except control.NotRunning:
        pass
    except control.ControlError as exc:
        return f"not audited: {exc}"
    from appliance import leap
    from appliance.audit.store import AuditStore
    from appliance.edge.input_files import load_leap_table

    try:
        store = AuditStore(config.state_path() / "audit.sqlite")
        try:
            store.append(leap.posix_to_tai_ns(time.time_ns(), load_leap_table(config)), kind, who, text, detail)
        finally:
            store.close()
    except Exception as exc:  # the audit store refused (truncated, unreadable): the operator must know
        return f"not audited: {exc}"
    return "audited"


def cmd_backup(args: argparse.Namespace, config: Config) -> int:
    from appliance.backup.files import make, write_archive

    try:
        passphrase = _passphrase(args, confirm=True) if args.keys else None
        if passphrase is not None and len(passphrase) < MIN_PASSPHRASE:
            raise BackupError(f"the passphrase must have at least {MIN_PASSPHRASE} characters")
        created, _ = _now_label()
        labels = {"appliance_version": __version__, "created_utc": created, "host": socket.gethostname()}
        data, contents, left_out = make(config, Path(args.config) if args.config else None, labels, passphrase,
                                        random_bytes(16), random_bytes(12))
        write_archive(Path(args.file), data)
    except BackupError as exc:
        print(f"appliance: backup: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    what = _summary(contents)
    print(f"backup written to {args.file}: {what}")
    if left_out:
        print(f"secret settings left out (a shared secret is archived only encrypted, with --keys): "
              f"{', '.join(left_out)}")
    print(audit_note(config, "backup.created", f"configuration backup written to {args.file}: {what}",
                 {"file": str(args.file), "keys": bool(contents.keys), "users": len(contents.users.users)}))
    return 0


def _summary(contents: Contents) -> str:
    files = ", ".join(f.name for f in contents.files) or "no settings files"
    n_keys = sum(1 for k in contents.keys if not k.name.startswith(SEALED_SETTINGS))
    keys = f"{n_keys} keys (encrypted)" if contents.keys else "no keys"
    return f"{files}; {len(contents.users.users)} console users, {len(contents.users.tokens)} API tokens; {keys}"


def _config_for(args: argparse.Namespace, archive: Archive, load: Callable[[str | None], Config]) -> Config:
    """The configuration the restore works with: the file --config names; where it does not exist yet (a new
    appliance), the archive's own configuration file (its state directory is where the restore goes)."""
    if not args.config or Path(args.config).exists():
        return load(args.config)
    own = archive.contents.file("config.toml")
    if own is None:
        return load(None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.toml"
        path.write_bytes(own.data)
        return load(str(path))


def cmd_restore(args: argparse.Namespace, load: Callable[[str | None], Config]) -> int:
    from appliance.backup import files

    path = Path(args.file)
    config_file = Path(args.config) if args.config else None
    try:
        archive = read(path.read_bytes())
    except (OSError, BackupError) as exc:
        message = f"{path}: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
        print(f"appliance: restore: {message}", file=sys.stderr)
        if isinstance(exc, BackupError) and ("altered" in message or "newer" in message):
            config = load(args.config if args.config and Path(args.config).exists() else None)
            print(audit_note(config, "restore.refused", f"configuration restore from {path} refused: {message}",
                         {"file": str(path)}), file=sys.stderr)
        return EXIT_REFUSED
    config = _config_for(args, archive, load)
    state = config.state_path()
    try:
        own = files.own_fingerprint(state)
        if own is not None and own != archive.fingerprint and args.accept_key != archive.fingerprint:
            raise BackupError(f"refused: the archive is signed by another appliance's audit key (fingerprint "
                              f"{archive.fingerprint}; this one's is {own}); if you meant to restore it here, "
                              f"give --accept-key {archive.fingerprint}")
        keys = ()
        if archive.has_keys and not args.skip_keys and not args.dry_run:
            keys = open_keys(archive, _passphrase(args, confirm=False))
        now = files.current(config, config_file)
        kept = list(archive.key_names) if archive.has_keys and args.skip_keys else []
        incoming = Contents(files.effective_files(archive, keys, state, config_file), archive.contents.users, keys)
        lines = plan(now, incoming, kept)
        if archive.contents.file("config.toml") is not None and config_file is None:
            lines.append("config.toml: in the archive, not written (give --config FILE to write it there)")
        if args.dry_run and archive.has_keys and not args.skip_keys:
            lines.append(f"encrypted in the archive (a restore asks for the passphrase): {sealed_names(archive)}")
    except BackupError as exc:
        print(f"appliance: restore: {exc}", file=sys.stderr)
        if "another appliance" in str(exc):
            print(audit_note(config, "restore.refused", f"configuration restore from {path} refused: {exc}",
                         {"file": str(path)}), file=sys.stderr)
        return EXIT_REFUSED
    doc = archive.document
    print(f"archive {path}: made {doc.get('created_utc', '?')} on {doc.get('host', '?')} by appliance "
          f"{doc.get('appliance_version', '?')}, signed by key {archive.fingerprint[:16]}..."
          f"{' (this appliance)' if own == archive.fingerprint else ''}")
    print("\n".join(f"  {line}" for line in lines) if lines else "  nothing would change")
    if args.dry_run:
        return 0
    if _running(config):
        print("appliance: restore: the appliance is running on this state directory: stop it first (systemctl "
              "stop appliance), then restore, then start it", file=sys.stderr)
        return EXIT_REFUSED
    if not args.yes:
        if not sys.stdin.isatty():
            print("appliance: restore: give --yes to restore without a terminal", file=sys.stderr)
            return EXIT_REFUSED
        if input("restore this? type yes: ").strip() != "yes":
            print("nothing restored")
            return EXIT_REFUSED
    _, label = _now_label()
    try:
        done = files.restore(config, archive, keys, config_file, label)
    except (BackupError, OSError) as exc:
        print(f"appliance: restore: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    kept_in = f"the files replaced are in {done.previous}" if done.previous.exists() else "nothing was replaced"
    print(f"restored {len(lines)} changes; {kept_in}")
    print(audit_note(config, "restore.applied", f"configuration restored from {path} ({len(lines)} changes; "
                 f"{kept_in})",
                 {"file": str(path), "changes": lines[:200], "signed_by": archive.fingerprint,
                  "keys": bool(keys)}))
    return 0
