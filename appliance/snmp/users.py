"""SNMPv3 users: the TOML file of USM users and the ``appliance snmp`` command line (users, receivers, the MIB).

Edge module (files, terminal).  The users file holds passphrases (as net-snmp's snmpd.conf does with createUser), so
it is written with mode 0600 (atomically, never through a symbolic link) and a file readable by others, or a link,
is refused at start.  Passphrases are read from the terminal or standard input, never taken as arguments, and never
printed or logged.
"""

from __future__ import annotations

import argparse
import getpass
import re
import stat
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance.edge.persist import read_private, write_private
from appliance.snmp.agent import AUTH, PRIV, TrapReceiver, V3User

MIN_PASSPHRASE = 8  # RFC 3414 11.2: USM passphrases of at least 8 octets
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,32}$")


class SnmpConfigError(ValueError):
    """A users file or receiver list that cannot be used; the message names the file or entry."""


def load_users(path: Path) -> list[V3User]:
    if not path.exists():
        return []
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SnmpConfigError(f"{path}: holds SNMPv3 passphrases but is readable by others (chmod 600 it)")
    try:
        data = tomllib.loads(read_private(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SnmpConfigError(f"{path}: {exc}") from None
    users = []
    for i, entry in enumerate(data.get("user", []), 1):
        try:
            user = V3User(str(entry["name"]), str(entry.get("auth", "SHA-256")), str(entry.get("auth_key", "")),
                          str(entry.get("priv", "AES-128")), str(entry.get("priv_key", "")),
                          bool(entry.get("write", False)))
        except (KeyError, TypeError) as exc:
            raise SnmpConfigError(f"{path}: user {i}: missing {exc}") from None
        _check_user(user, f"{path}: user {user.name!r}")
        users.append(user)
    return users


def _check_user(user: V3User, where: str) -> None:
    if not _NAME.match(user.name):
        raise SnmpConfigError(f"{where}: a user name is 1-32 letters, digits, '.', '_' or '-'")
    if user.auth not in AUTH or user.priv not in PRIV:
        raise SnmpConfigError(f"{where}: auth is one of {', '.join(AUTH)}; priv one of {', '.join(PRIV)}")
    if user.auth != "none" and len(user.auth_key) < MIN_PASSPHRASE:
        raise SnmpConfigError(f"{where}: the authentication passphrase needs {MIN_PASSPHRASE}+ characters")
    if user.priv != "none" and (user.auth == "none" or len(user.priv_key) < MIN_PASSPHRASE):
        raise SnmpConfigError(f"{where}: privacy needs authentication and a {MIN_PASSPHRASE}+ character passphrase")


def save_users(path: Path, users: list[V3User]) -> None:
    lines = ["# SNMPv3 users of the appliance (`appliance snmp user-add`); keep this file mode 0600\n"]
    for u in users:
        lines += ["\n[[user]]\n", f"name = {_q(u.name)}\n", f"auth = {_q(u.auth)}\n", f"auth_key = {_q(u.auth_key)}\n",
                  f"priv = {_q(u.priv)}\n", f"priv_key = {_q(u.priv_key)}\n", f"write = {'true' if u.write else 'false'}\n"]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, "".join(lines).encode("utf-8"), mode=0o600)  # never through a symbolic link


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_receivers(text: str) -> list[TrapReceiver]:
    """``v2c:COMMUNITY@HOST:PORT`` or ``v3:USER@HOST:PORT`` entries, comma-separated (``[v6]:port``)."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        m = re.match(r"^(v2c|v3):([^@]+)@(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+):(\d+)$", item)
        if not m:
            raise SnmpConfigError(f"snmp.trap_receivers entry {item!r}: expected v2c:COMMUNITY@HOST:PORT or "
                                  f"v3:USER@HOST:PORT")
        port = int(m.group(4))
        if not 0 < port < 65536:
            raise SnmpConfigError(f"snmp.trap_receivers entry {item!r}: port {port} out of range")
        out.append(TrapReceiver(m.group(3).strip("[]"), port, m.group(1), m.group(2)))
    return out


# --- appliance snmp ... ---------------------------------------------------------------------------------------

def add_parser(sub: argparse._SubParsersAction,
               common: Callable[[argparse.ArgumentParser], None] = lambda p: None) -> None:
    p = sub.add_parser("snmp", help="SNMPv3 users and the appliance MIB")
    ssub = p.add_subparsers(dest="snmp_command", required=True, metavar="SUBCOMMAND")
    a = ssub.add_parser("user-add", help="add an SNMPv3 user (passphrases asked for, or two lines on stdin)")
    a.add_argument("name")
    a.add_argument("--auth", choices=[k for k in AUTH if k != "none"], default="SHA-256")
    a.add_argument("--priv", choices=[k for k in PRIV if k != "none"], default="AES-128")
    a.add_argument("--write", action="store_true", help="may SET the writable objects (forced holdover)")
    a.add_argument("--stdin", action="store_true", help="read the auth and priv passphrases from two stdin lines")
    ssub.add_parser("user-list", help="SNMPv3 users (names, protocols, access; never the passphrases)")
    r = ssub.add_parser("user-remove", help="remove an SNMPv3 user")
    r.add_argument("name")
    m = ssub.add_parser("mib", help="write the appliance MIB with the configured (or given) enterprise number")
    m.add_argument("--enterprise", type=int, default=None)
    m.add_argument("file", nargs="?", default="-")
    for choice in ssub.choices.values():
        common(choice)


def run(args: argparse.Namespace, config: Any) -> int:
    path = Path(config.snmp.users_file).expanduser() if config.snmp.users_file else \
        config.state_path() / "snmp-users.toml"
    try:
        if args.snmp_command == "mib":
            from appliance.snmp.mibgen import render_mib

            text = render_mib(args.enterprise or config.snmp.enterprise)
            if args.file == "-":
                sys.stdout.write(text)
            else:
                Path(args.file).write_text(text, encoding="utf-8")
            return 0
        users = load_users(path)
        if args.snmp_command == "user-list":
            for u in users:
                print(f"{u.name:20} {u.auth}/{u.priv} {'read-write' if u.write else 'read-only'}")
            return 0
        if args.snmp_command == "user-remove":
            kept = [u for u in users if u.name != args.name]
            if len(kept) == len(users):
                raise SnmpConfigError(f"no SNMPv3 user {args.name!r}")
            save_users(path, kept)
            print(f"SNMPv3 user {args.name} removed (restart the appliance to apply)")
            return 0
        if any(u.name == args.name for u in users):
            raise SnmpConfigError(f"SNMPv3 user {args.name!r} exists already")
        if args.stdin:
            auth_key, priv_key = sys.stdin.readline().rstrip("\r\n"), sys.stdin.readline().rstrip("\r\n")
        else:
            auth_key, priv_key = getpass.getpass("auth passphrase: "), getpass.getpass("priv passphrase: ")
        user = V3User(args.name, args.auth, auth_key, args.priv, priv_key, args.write)
        _check_user(user, f"user {args.name!r}")
        save_users(path, [*users, user])
        print(f"SNMPv3 user {args.name} added ({args.auth}/{args.priv}, {'read-write' if args.write else 'read-only'})"
              f" to {path} (restart the appliance to apply)")
        return 0
    except (SnmpConfigError, OSError) as exc:
        print(f"appliance: snmp: {exc}", file=sys.stderr)
        return 2
