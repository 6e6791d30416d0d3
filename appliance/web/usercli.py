"""``appliance user``: console users and API tokens from the command line (works while the appliance runs).

Edge module (reads passwords from the terminal or standard input, prints).  Passwords are never taken as
arguments (they would show in the process list and the shell history): ``--password-stdin`` reads one line.
"""

from __future__ import annotations

import argparse
import getpass
import os
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path

from appliance.web.users import ROLES, UserError, UserStore

USERS_FILE = "users.sqlite"
INITIAL_PASSWORD_FILE = "initial-admin-password"


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
    pw = usub.add_parser("passwd", help="set a user's password")
    pw.add_argument("name")
    pw.add_argument("--password-stdin", action="store_true")
    r = usub.add_parser("role", help="set a user's role")
    r.add_argument("name")
    r.add_argument("role", choices=ROLES)
    for name, text in (("unlock", "clear a user's failed logins and lock"), ("remove", "remove a user")):
        usub.add_parser(name, help=text).add_argument("name")
    t = usub.add_parser("token", help="make an API token for a user (printed once)")
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
                print(f"{u.name:20} {u.role:9} {'LOCKED' if u.locked_until_s > now else 'ok'}")
        elif cmd == "passwd":
            store.set_password(args.name, _password(args.password_stdin))
            print(f"password of {args.name} changed")
        elif cmd == "role":
            store.set_role(args.name, args.role)
            print(f"{args.name} is now {args.role}")
        elif cmd == "unlock":
            store.unlock(args.name)
            print(f"{args.name} unlocked")
        elif cmd == "remove":
            store.remove(args.name)
            print(f"user {args.name} removed")
        elif cmd == "token":
            print(store.create_token(args.name, args.label, time.time()))
        store.close()
        return 0
    except UserError as exc:
        print(f"appliance: user: {exc}", file=sys.stderr)
        return 2


def first_admin(store: UserStore, state_dir: Path) -> Path | None:
    """With no users at all, make ``admin`` with a random password written (mode 0600) to a file in state_dir,
    whose path is logged; the password itself never is.  Returns that path, or None if users exist."""
    if store.count():
        return None
    password = secrets.token_urlsafe(15)
    store.add("admin", "admin", password)
    path = state_dir / INITIAL_PASSWORD_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    return path
