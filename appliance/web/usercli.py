"""``appliance user``: console users and API tokens from the command line (works while the appliance runs).

Edge module (reads passwords from the terminal or standard input, prints; writes and deletes the initial admin
password file).  Passwords are never taken as arguments (they would show in the process list and the shell
history): ``--password-stdin`` reads one line.  A new password or role, or removing a user, ends that user's API
tokens and console sessions.

The first admin (made at the first start, when there are no users) gets a random password written to
``initial-admin-password`` in the state directory; it must choose a new one at its first login, and the file is
deleted once the password has changed, from the console or from here.
"""

from __future__ import annotations

import argparse
import getpass
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path

from appliance.edge.persist import read_private, refuse_link, write_private
from appliance.web.users import ROLES, UserError, UserStore

USERS_FILE = "users.sqlite"
INITIAL_PASSWORD_FILE = "initial-admin-password"
INITIAL_ADMIN = "admin"


def add_parser(sub: argparse._SubParsersAction,
               common: Callable[[argparse.ArgumentParser], None] = lambda p: None) -> None:
    """Add ``user`` and its subcommands; ``common`` adds the options every subcommand takes (--config, --set)."""
    p = sub.add_parser("user", help="console users and API tokens: add, list, passwd, role, unlock, remove, token")
    usub = p.add_subparsers(dest="user_command", required=True, metavar="SUBCOMMAND")
    a = usub.add_parser("add", help="add a user (the password is asked for, or read from stdin)")
    a.add_argument("name")
    a.add_argument("--role", choices=ROLES, default="viewer")
    a.add_argument("--password-stdin", action="store_true", help="read the password from the first line of stdin")
    usub.add_parser("list", help="users, roles and lock state")
    pw = usub.add_parser("passwd", help="set a user's password (ends its API tokens and console sessions)")
    pw.add_argument("name")
    pw.add_argument("--password-stdin", action="store_true")
    r = usub.add_parser("role", help="set a user's role (ends its API tokens and console sessions)")
    r.add_argument("name")
    r.add_argument("role", choices=ROLES)
    for name, text in (("unlock", "clear a user's failed logins and locks, from every address"),
                       ("remove", "remove a user (and its API tokens)")):
        usub.add_parser(name, help=text).add_argument("name")
    token_help = ("make an API token for a user (printed once; it ends when the user's password or role changes or "
                  "the user is removed)")
    t = usub.add_parser("token", help=token_help, description=token_help[0].upper() + token_help[1:] + ".")
    t.add_argument("name")
    t.add_argument("--label", default="api")
    for choice in usub.choices.values():
        common(choice)


def _password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise UserError("the passwords differ")
    return first


def run(args: argparse.Namespace, state_dir: Path) -> int:
    from appliance.edge.persist import ensure_state_dir

    ensure_state_dir(state_dir)
    try:
        store = UserStore(state_dir / USERS_FILE)
        cmd = args.user_command
        if cmd == "add":
            store.add(args.name, args.role, _password(args.password_stdin))
            print(f"user {args.name} added ({args.role})")
        elif cmd == "list":
            now = time.time()
            for u in store.users():
                state = "LOCKED (from some address)" if u.locked_until_s > now else "ok"
                print(f"{u.name:20} {u.role:9} {state}" + ("  must change its password" if u.must_change else ""))
        elif cmd == "passwd":
            ended = store.set_password(args.name, _password(args.password_stdin))
            print(f"password of {args.name} changed{ended.text()}")
            if args.name == INITIAL_ADMIN and (gone := retire_initial_password(state_dir)) is not None:
                print(f"{gone} deleted: it held the initial password")
        elif cmd == "role":
            ended = store.set_role(args.name, args.role)
            print(f"{args.name} is now {args.role}{ended.text()}")
        elif cmd == "unlock":
            store.unlock(args.name)
            print(f"{args.name} unlocked")
        elif cmd == "remove":
            ended = store.remove(args.name)
            print(f"user {args.name} removed{ended.text()}")
            if args.name == INITIAL_ADMIN:
                retire_initial_password(state_dir)
        elif cmd == "token":
            print(store.create_token(args.name, args.label, time.time()))
        store.close()
        return 0
    except UserError as exc:
        print(f"appliance: user: {exc}", file=sys.stderr)
        return 2


def first_admin(store: UserStore, state_dir: Path) -> Path | None:
    """With no users at all, make ``admin`` with a random password written (mode 0600, never through a symbolic
    link) to a file in state_dir, whose path is logged; the password itself never is.  The user must choose a new
    password at its first login.  Returns that path, or None if users exist."""
    if store.count():
        return None
    path = state_dir / INITIAL_PASSWORD_FILE
    refuse_link(path)  # before the user exists: a refused start leaves no admin whose password nobody has
    password = secrets.token_urlsafe(15)
    store.add(INITIAL_ADMIN, "admin", password, must_change=True)
    write_private(path, (password + "\n").encode())
    return path


def settle_initial_password(store: UserStore, state_dir: Path) -> Path | None:
    """An initial password file left from before the password change was asked for: if ``admin`` still has that
    password, a change is asked for at its next login; if it has another, the file is deleted and its path
    returned (for the caller to log and audit).  A file that is a symbolic link is refused (UnsafePathError)."""
    path = state_dir / INITIAL_PASSWORD_FILE
    try:
        password = read_private(path, 4096).decode("utf-8", "replace").strip()
    except FileNotFoundError:
        return None
    if store.role_of(INITIAL_ADMIN) is not None and store.check_password(INITIAL_ADMIN, password):
        store.must_change(INITIAL_ADMIN)
        return None
    return retire_initial_password(state_dir)


def retire_initial_password(state_dir: Path) -> Path | None:
    """Delete the initial admin password file (its password has been changed); its path, or None if there was
    none.  A symbolic link in its place is removed as a link (its target is left alone)."""
    path = state_dir / INITIAL_PASSWORD_FILE
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    return path
