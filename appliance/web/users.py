"""Console users and API tokens: roles, passwords under scrypt, backoff and lockout after failed logins.

Edge module (SQLite under ``state_dir``).  Passwords are stored as scrypt hashes (n=2^15, r=8, p=1, 16-byte salt;
RFC 7914) and compared in constant time; API tokens are random 32-byte strings shown once and stored as their
SHA-256.  Failed logins are counted per account and source (the client's address, an IPv6 /64): a failure makes
that source's next attempt on that account wait (1, 2, 4 ... s after the third failure) and ``lockout_failures``
failures in a row lock that account for that source for ``lockout_s``, while the account's owner still logs in
from anywhere else; a successful login clears its source's count.  (The console also limits logins per address
and in all, so many sources together cannot guess fast either.)  Times are host seconds passed in by the caller
(lockout is about people, not about the served clock).

A name that is no user is answered exactly as a user with a wrong password is: one scrypt computation on every
path (locked, waiting or checked), and the same backoff and lockout, kept for unknown names in memory, so neither
the answer nor its time tells which names exist.

Console sessions have a server record (a random id in the signed cookie, its SHA-256 here): logging out closes it,
and changing a user's password or role, or removing the user, closes all of theirs and ends their API tokens.  A
user made with ``must_change`` (the first admin, whose password was written to a file) is asked to choose a new
password before anything else.

Users checked by a RADIUS or LDAP server (``external.py``) are no local users: their sessions are kept apart
(``external_sessions``: name, role and the server that gave it), so nothing of a local user's (its password, its
tokens, its role) can be reached through an external login of the same name, and their failed logins are counted
in the same lockouts table under ``external:NAME``, with the same backoff and lockout per source.  API tokens stay
local users' own.  The database holds password hashes and token digests: it is created 0600 (and an
older, wider one narrowed to 0600 when opened), never through a symbolic link.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from appliance.edge.persist import refuse_link

ROLES = ("viewer", "operator", "admin")
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 15, 8, 1
MIN_PASSWORD = 10
MAX_PASSWORD = 1024
_SCHEMA = """
CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, role TEXT NOT NULL, salt BLOB NOT NULL, hash BLOB NOT NULL,
    failures INTEGER NOT NULL DEFAULT 0, last_failure_s REAL NOT NULL DEFAULT 0, locked_until_s REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS tokens (digest TEXT PRIMARY KEY, user TEXT NOT NULL, label TEXT NOT NULL,
    created_s REAL NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (digest TEXT PRIMARY KEY, user TEXT NOT NULL, created_s REAL NOT NULL);
CREATE TABLE IF NOT EXISTS external_sessions (digest TEXT PRIMARY KEY, user TEXT NOT NULL, role TEXT NOT NULL,
    server TEXT NOT NULL, created_s REAL NOT NULL);
CREATE TABLE IF NOT EXISTS lockouts (user TEXT NOT NULL, source TEXT NOT NULL, failures INTEGER NOT NULL,
    last_failure_s REAL NOT NULL, locked_until_s REAL NOT NULL, PRIMARY KEY (user, source));
"""
# Older databases: the users table gains the forced password change (its failures columns are no longer used: the
# lockouts table counts failures per account and source).
_MIGRATIONS = {"must_change": "ALTER TABLE users ADD COLUMN must_change INTEGER NOT NULL DEFAULT 0"}
FILE_MODE = 0o600
UNKNOWN_NAMES = 10_000  # unknown names whose failures are remembered (the oldest forgotten first)
_DUMMY_SALT = b"\x00" * 16
EXTERNAL = "external:"  # the lockouts of external logins are kept under this prefix of the name
EXTERNAL_SID = "x."  # an external session's id begins so (token_urlsafe never makes a '.')


class UserError(ValueError):
    """A request about users that cannot be carried out; the message says why."""


@dataclass(frozen=True)
class LoginResult:
    ok: bool
    user: str
    role: str = ""
    reason: str = ""  # "", "bad credentials", "locked", "wait"
    retry_after_s: float = 0.0
    locked_now: bool = False  # this failure locked the account for this source
    must_change: bool = False  # logged in, but must choose a new password before anything else


@dataclass(frozen=True)
class User:
    name: str
    role: str
    locked_until_s: float  # the latest lock of any source on this account
    failures: int  # the most failures in a row of any one source
    must_change: bool = False


class Account(NamedTuple):
    """Who a session or a token belongs to."""
    user: str
    role: str
    must_change: bool = False
    server: str = ""  # of an external login: the RADIUS or LDAP server that gave the role ("": a local user)


@dataclass(frozen=True)
class Ended:
    """What a password or role change (or a removal) ended of the user's: console sessions, API tokens."""
    sessions: int
    tokens: int

    def text(self) -> str:
        """'; 2 sessions and 1 API token ended' (nothing when nothing was)."""
        parts = [f"{n} {what}{'s' if n != 1 else ''}" for n, what in ((self.sessions, "session"),
                                                                      (self.tokens, "API token")) if n]
        return f"; {' and '.join(parts)} ended" if parts else ""


def hash_password(password: str, salt: bytes) -> bytes:
    return hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=64 * 1024 * 1024,
                          dklen=32)


def check_password_rules(password: str) -> None:
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise UserError(f"a password needs {MIN_PASSWORD} to {MAX_PASSWORD} characters")


def check_name(name: str) -> None:
    if not name or len(name) > 64 or not all(c.isalnum() or c in "._-" for c in name):
        raise UserError("a user name is 1-64 letters, digits, '.', '_' or '-'")


class UserStore:
    def __init__(self, path: Path, lockout_failures: int = 5, lockout_s: float = 900.0):
        self.path, self.lockout_failures, self.lockout_s = path, lockout_failures, lockout_s
        self._lock = threading.Lock()
        # (name, source) -> (failures, last_failure_s, locked_until_s) of names that are no user
        self._unknown: OrderedDict[tuple[str, str], tuple[int, float, float]] = OrderedDict()
        _private_file(path)
        try:
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(users)")}
            for column, sql in _MIGRATIONS.items():
                if column not in columns:
                    self._db.execute(sql)
        except sqlite3.DatabaseError as exc:
            raise UserError(f"{path}: not a user database: {exc}") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- backup and restore ----------------------------------------------------------------------------------
    def export_rows(self) -> tuple[list[tuple[str, str, bytes, bytes, int]], list[tuple[str, str, str, float]]]:
        """Every user (name, role, salt, hash, must_change) and API token (digest, user, label, created_s)."""
        with self._lock:
            users = self._db.execute("SELECT name, role, salt, hash, must_change FROM users ORDER BY name").fetchall()
            tokens = self._db.execute("SELECT digest, user, label, created_s FROM tokens ORDER BY digest").fetchall()
        return ([(str(n), str(r), bytes(s), bytes(h), int(m)) for n, r, s, h, m in users],
                [(str(d), str(u), str(lab), float(c)) for d, u, lab, c in tokens])

    def import_rows(self, users: list[tuple[str, str, bytes, bytes, int]],
                    tokens: list[tuple[str, str, str, float]]) -> None:
        """Replace every user and token with these (a restore); sessions (external ones too) and lockouts end.  UserError for a row
        that is not a user this store would make."""
        for name, role, salt, digest, _ in users:
            check_name(name)
            if role not in ROLES or len(salt) != 16 or len(digest) != 32:
                raise UserError(f"user {name!r}: not a user this appliance makes (role {role!r})")
        names = {u[0] for u in users}
        if any(t[1] not in names for t in tokens):
            raise UserError("an API token belongs to no user")
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for table in ("users", "tokens", "sessions", "external_sessions", "lockouts"):
                    self._db.execute(f"DELETE FROM {table}")
                self._db.executemany("INSERT INTO users (name, role, salt, hash, must_change) VALUES (?, ?, ?, ?, ?)",
                                     users)
                self._db.executemany("INSERT INTO tokens (digest, user, label, created_s) VALUES (?, ?, ?, ?)",
                                     tokens)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    # --- accounts ------------------------------------------------------------------------------------------
    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM users").fetchone()[0])

    def users(self) -> list[User]:
        with self._lock:
            rows = self._db.execute(
                "SELECT u.name, u.role, COALESCE(MAX(l.locked_until_s), 0), COALESCE(MAX(l.failures), 0), "
                "u.must_change FROM users u LEFT JOIN lockouts l ON l.user = u.name GROUP BY u.name "
                "ORDER BY u.name").fetchall()
        return [User(name, role, locked, failures, bool(must)) for name, role, locked, failures, must in rows]

    def role_of(self, name: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT role FROM users WHERE name=?", (name,)).fetchone()
        return row[0] if row else None

    def add(self, name: str, role: str, password: str, must_change: bool = False) -> None:
        """A new user; with ``must_change`` the first login leads to a password change before anything else."""
        check_name(name)
        if role not in ROLES:
            raise UserError(f"role {role!r}: expected one of {', '.join(ROLES)}")
        check_password_rules(password)
        salt = secrets.token_bytes(16)
        with self._lock:
            try:
                self._db.execute("INSERT INTO users (name, role, salt, hash, must_change) VALUES (?, ?, ?, ?, ?)",
                                 (name, role, salt, hash_password(password, salt), int(must_change)))
            except sqlite3.IntegrityError:
                raise UserError(f"user {name!r} exists already") from None

    def set_password(self, name: str, password: str) -> Ended:
        """A new password: the user's sessions and API tokens end (a token made by whoever knew the old password
        must not outlive it), its failed logins are forgotten and no change is asked for any more."""
        check_password_rules(password)
        salt = secrets.token_bytes(16)
        self._update(name, "UPDATE users SET salt=?, hash=?, must_change=0 WHERE name=?",
                     (salt, hash_password(password, salt), name))
        with self._lock:
            self._db.execute("DELETE FROM lockouts WHERE user=?", (name,))
        return self._end_access(name)

    def set_role(self, name: str, role: str) -> Ended:
        """A new role: the user's sessions and API tokens end (each is made again under the new role)."""
        if role not in ROLES:
            raise UserError(f"role {role!r}: expected one of {', '.join(ROLES)}")
        self._update(name, "UPDATE users SET role=? WHERE name=?", (role, name))
        return self._end_access(name)

    def must_change(self, name: str) -> None:
        """Ask ``name`` to choose a new password at the next request (its sessions stay open)."""
        self._update(name, "UPDATE users SET must_change=1 WHERE name=?", (name,))

    def check_password(self, name: str, password: str) -> bool:
        """Whether ``password`` is ``name``'s, with no effect on its failed logins (one scrypt computation)."""
        with self._lock:
            row = self._db.execute("SELECT salt, hash FROM users WHERE name=?", (name,)).fetchone()
        computed = hash_password(password[:MAX_PASSWORD], row[0] if row else _DUMMY_SALT)
        return row is not None and hmac.compare_digest(computed, row[1])

    def unlock(self, name: str) -> None:
        """Forget ``name``'s failed logins and locks, from every source."""
        if self.role_of(name) is None:
            raise UserError(f"no user {name!r}")
        with self._lock:
            self._db.execute("DELETE FROM lockouts WHERE user=?", (name,))

    def remove(self, name: str) -> Ended:
        with self._lock:
            admins = [r[0] for r in self._db.execute("SELECT name FROM users WHERE role='admin'")]
            if admins == [name]:
                raise UserError("the last admin cannot be removed")
            if self._db.execute("DELETE FROM users WHERE name=?", (name,)).rowcount == 0:
                raise UserError(f"no user {name!r}")
            self._db.execute("DELETE FROM lockouts WHERE user=?", (name,))
        return self._end_access(name)

    def _end_access(self, name: str) -> Ended:
        with self._lock:
            tokens = int(self._db.execute("DELETE FROM tokens WHERE user=?", (name,)).rowcount)
        return Ended(self.close_sessions(name), tokens)

    def _update(self, name: str, sql: str, params: tuple) -> None:
        with self._lock:
            if self._db.execute(sql, params).rowcount == 0:
                raise UserError(f"no user {name!r}")

    # --- logins ----------------------------------------------------------------------------------------------
    def login(self, name: str, password: str, now_s: float, source: str = "") -> LoginResult:
        """Check a login from ``source`` (the client: an address, an IPv6 /64).  Every path costs one scrypt
        computation, and a name that is no user goes through the same backoff and lockout as a user given a wrong
        password: the answer and its time are the same for both.  Backoff and lockout count the failures of this
        source on this account only."""
        with self._lock:
            row = self._db.execute("SELECT role, salt, hash, must_change FROM users WHERE name=?",
                                   (name,)).fetchone()
            if row is None:
                role, salt, stored, must_change = "", _DUMMY_SALT, b"", 0
                failures, last_failure, locked_until = self._unknown.get((name, source), (0, 0.0, 0.0))
            else:
                role, salt, stored, must_change = row
                found = self._db.execute("SELECT failures, last_failure_s, locked_until_s FROM lockouts WHERE user=? "
                                         "AND source=?", (name, source)).fetchone()
                failures, last_failure, locked_until = found or (0, 0.0, 0.0)
            computed = hash_password(password[:MAX_PASSWORD], salt)  # on every path: the time tells nothing
            if now_s < locked_until:
                return LoginResult(False, name, reason="locked", retry_after_s=locked_until - now_s)
            wait = _backoff_s(failures) - (now_s - last_failure)
            if wait > 0:
                return LoginResult(False, name, reason="wait", retry_after_s=wait)
            if row is not None and hmac.compare_digest(computed, stored):
                self._db.execute("DELETE FROM lockouts WHERE user=? AND source=?", (name, source))
                return LoginResult(True, name, role, must_change=bool(must_change))
            failures += 1
            lock = failures >= self.lockout_failures
            state = (0 if lock else failures, now_s, now_s + self.lockout_s if lock else 0.0)
            if row is None:
                self._remember_unknown((name, source), state)
            else:
                # sources that went quiet (no lock, no failure for lockout_s) start afresh: the table stays small
                self._db.execute("DELETE FROM lockouts WHERE locked_until_s < ? AND last_failure_s < ?",
                                 (now_s, now_s - max(self.lockout_s, _backoff_s(99))))
                self._db.execute("INSERT OR REPLACE INTO lockouts (user, source, failures, last_failure_s, "
                                 "locked_until_s) VALUES (?, ?, ?, ?, ?)", (name, source, *state))
            return LoginResult(False, name, reason="locked" if lock else "bad credentials",
                               retry_after_s=self.lockout_s if lock else _backoff_s(failures), locked_now=lock)

    # --- external logins (RADIUS, LDAP) ---------------------------------------------------------------------------
    def external_gate(self, name: str, now_s: float, source: str = "") -> LoginResult | None:
        """A refusal of an external login of ``name`` from ``source`` while locked or waiting; None: ask the
        servers."""
        with self._lock:
            found = self._db.execute("SELECT failures, last_failure_s, locked_until_s FROM lockouts WHERE user=? AND "
                                     "source=?", (EXTERNAL + name, source)).fetchone()
        failures, last_failure, locked_until = found or (0, 0.0, 0.0)
        if now_s < locked_until:
            return LoginResult(False, name, reason="locked", retry_after_s=locked_until - now_s)
        wait = _backoff_s(failures) - (now_s - last_failure)
        return LoginResult(False, name, reason="wait", retry_after_s=wait) if wait > 0 else None

    def external_outcome(self, name: str, ok: bool, now_s: float, source: str = "", role: str = "",
                         reason: str = "bad credentials") -> LoginResult:
        """Count an external login's outcome as a local one is counted: a success clears this source's failures,
        a failure adds one (backoff, then lockout)."""
        key = EXTERNAL + name
        with self._lock:
            if ok:
                self._db.execute("DELETE FROM lockouts WHERE user=? AND source=?", (key, source))
                return LoginResult(True, name, role)
            found = self._db.execute("SELECT failures FROM lockouts WHERE user=? AND source=?",
                                     (key, source)).fetchone()
            failures = (found[0] if found else 0) + 1
            lock = failures >= self.lockout_failures
            # as for local users: sources gone quiet start afresh, so names made up by guessers do not pile up
            self._db.execute("DELETE FROM lockouts WHERE locked_until_s < ? AND last_failure_s < ?",
                             (now_s, now_s - max(self.lockout_s, _backoff_s(99))))
            self._db.execute("INSERT OR REPLACE INTO lockouts (user, source, failures, last_failure_s, locked_until_s) "
                             "VALUES (?, ?, ?, ?, ?)", (key, source, 0 if lock else failures, now_s,
                                                        now_s + self.lockout_s if lock else 0.0))
        return LoginResult(False, name, reason="locked" if lock else reason,
                           retry_after_s=self.lockout_s if lock else _backoff_s(failures), locked_now=lock)

    def open_external_session(self, user: str, role: str, server: str, now_s: float, max_age_s: float) -> str:
        """A new session of an externally checked ``user`` with ``role`` given by ``server``: its id for the
        cookie."""
        if role not in ROLES:
            raise UserError(f"role {role!r}: expected one of {', '.join(ROLES)}")
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._db.execute("DELETE FROM external_sessions WHERE created_s < ?", (now_s - max_age_s,))
            self._db.execute("INSERT INTO external_sessions (digest, user, role, server, created_s) VALUES "
                             "(?, ?, ?, ?, ?)", (_digest(sid), user, role, server, now_s))
        return EXTERNAL_SID + sid

    def _remember_unknown(self, key: tuple[str, str], state: tuple[int, float, float]) -> None:
        self._unknown[key] = state
        self._unknown.move_to_end(key)
        while len(self._unknown) > UNKNOWN_NAMES:
            self._unknown.popitem(last=False)

    # --- console sessions ---------------------------------------------------------------------------------------
    def open_session(self, user: str, now_s: float, max_age_s: float) -> str:
        """A new session of ``user``: its id for the cookie (only its digest is kept).  Sessions past ``max_age_s``
        are forgotten on the way."""
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._db.execute("DELETE FROM sessions WHERE created_s < ?", (now_s - max_age_s,))
            self._db.execute("INSERT INTO sessions (digest, user, created_s) VALUES (?, ?, ?)",
                             (_digest(sid), user, now_s))
        return sid

    def session_user(self, sid: str, now_s: float, max_age_s: float) -> Account | None:
        """The account of an open session younger than ``max_age_s``; None for a closed, expired or unknown one."""
        if not isinstance(sid, str) or not sid:
            return None
        if sid.startswith(EXTERNAL_SID):
            return self._external_session(sid[len(EXTERNAL_SID):], now_s, max_age_s)
        with self._lock:
            row = self._db.execute("SELECT s.user, u.role, s.created_s, u.must_change FROM sessions s JOIN users u "
                                   "ON u.name = s.user WHERE s.digest=?", (_digest(sid),)).fetchone()
        if row is None or not 0 <= now_s - row[2] <= max_age_s:
            return None
        return Account(row[0], row[1], bool(row[3]))

    def _external_session(self, sid: str, now_s: float, max_age_s: float) -> Account | None:
        with self._lock:
            row = self._db.execute("SELECT user, role, created_s, server FROM external_sessions WHERE digest=?",
                                   (_digest(sid),)).fetchone()
        if row is None or not 0 <= now_s - row[2] <= max_age_s:
            return None
        return Account(row[0], row[1], False, row[3])

    def close_session(self, sid: str) -> None:
        if isinstance(sid, str) and sid:
            external = sid.startswith(EXTERNAL_SID)
            table = "external_sessions" if external else "sessions"
            with self._lock:
                self._db.execute(f"DELETE FROM {table} WHERE digest=?",
                                 (_digest(sid[len(EXTERNAL_SID):] if external else sid),))

    def close_sessions(self, user: str) -> int:
        """Close every session of ``user`` (password or role changed, user removed); how many were open."""
        with self._lock:
            return int(self._db.execute("DELETE FROM sessions WHERE user=?", (user,)).rowcount)

    # --- API tokens --------------------------------------------------------------------------------------------
    def create_token(self, user: str, label: str, now_s: float) -> str:
        if self.role_of(user) is None:
            raise UserError(f"no user {user!r}")
        token = "tk_" + secrets.token_urlsafe(32)
        with self._lock:
            self._db.execute("INSERT INTO tokens (digest, user, label, created_s) VALUES (?, ?, ?, ?)",
                             (_digest(token), user, label[:80], now_s))
        return token

    def token_user(self, token: str) -> Account | None:
        """The account of a valid token (one its user's password change, role change or removal has not ended)."""
        with self._lock:
            row = self._db.execute("SELECT t.user, u.role, u.must_change FROM tokens t JOIN users u ON u.name = t.user "
                                   "WHERE t.digest=?", (_digest(token),)).fetchone()
        return Account(row[0], row[1], bool(row[2])) if row else None

    def tokens(self, user: str | None = None) -> list[tuple[str, str, float, str]]:
        """(user, label, created_s, id) where id is the digest's first 12 characters."""
        with self._lock:
            rows = self._db.execute("SELECT user, label, created_s, substr(digest, 1, 12) FROM tokens"
                                    + (" WHERE user=?" if user else "") + " ORDER BY created_s",
                                    (user,) if user else ()).fetchall()
        return [tuple(r) for r in rows]

    def revoke_token(self, token_id: str) -> None:
        if len(token_id) < 12:
            raise UserError("a token id has 12 characters")
        with self._lock:
            if self._db.execute("DELETE FROM tokens WHERE substr(digest, 1, 12)=?", (token_id[:12],)).rowcount == 0:
                raise UserError(f"no token {token_id!r}")


def _private_file(path: Path) -> None:
    """Create the database file 0600 before SQLite opens it (SQLite gives its WAL and shared-memory files the
    database's mode), or narrow an existing one to 0600.  A symbolic link in its place is refused (UnsafePathError
    naming it): the password hashes would go wherever it points."""
    refuse_link(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
    except OSError as exc:
        refuse_link(path)  # made a link meanwhile: say so
        raise UserError(f"{path}: cannot open the user database: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, FILE_MODE)
    except PermissionError:  # not ours to change (a file an administrator placed): used as it is
        pass
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm"):
        try:
            os.chmod(f"{path}{suffix}", FILE_MODE)
        except (FileNotFoundError, PermissionError):
            pass


def _backoff_s(failures: int) -> float:
    return 0.0 if failures < 3 else float(2 ** min(failures - 3, 8))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
