"""The audit store's head file: the newest record's (seq, hash), kept beside the store (``<store>.head``).

Edge module (files).  A chain verifies just as well without its newest records, so where the chain ends is also
written here, outside the database, replaced atomically after each committed append or prune: someone who cuts the
database short with sqlite3 does not update it.  ``appliance/audit/store.py`` says what a store that does not reach
its head file means and does about it; this module only reads and writes the file, and names the place where a
store found cut short is kept as evidence (``<store>.truncated-<n>``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from appliance.audit.chain import AuditRecord
from appliance.edge.persist import replace_file

HEAD_SUFFIX = ".head"  # audit.sqlite.head
EVIDENCE_INFIX = ".truncated-"  # audit.sqlite.truncated-1: a store found cut short, kept as it was
HEAD_FORMAT, HEAD_VERSION = "appliance-audit-head", 1
_FILE_MODE = 0o600
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEAD_MAX_BYTES = 4096


@dataclass(frozen=True)
class Head:
    """A record's place in the chain: what the head file keeps, and what a check remembers."""

    seq: int
    hash: str



def head_path_of(store_path: Path) -> Path:
    """Where a store's head file is: beside it, ``<store>.head``."""
    return store_path.with_name(store_path.name + HEAD_SUFFIX)


def read_head(path: Path) -> tuple[Head | None, str]:
    """(the head a head file records, "") or (None, "") when there is none, or (None, why it is unreadable)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_HEAD_MAX_BYTES + 1)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, exc.strerror or str(exc)
    try:
        document = json.loads(data.decode("utf-8")) if len(data) <= _HEAD_MAX_BYTES else None
    except (UnicodeDecodeError, ValueError):
        document = None
    if not isinstance(document, dict) or document.get("format") != HEAD_FORMAT:
        return None, "not an audit head file"
    seq, digest = document.get("seq"), document.get("hash")
    if document.get("version") != HEAD_VERSION or not isinstance(seq, int) or isinstance(seq, bool) or seq < 1 \
            or not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        return None, "its version, seq or hash is not one this release writes"
    return Head(seq, digest), ""


def write_head(path: Path, record: AuditRecord, store_name: str) -> None:
    """Replace the head file atomically with ``record``'s place: a crash leaves the old one or the new one."""
    document = {"format": HEAD_FORMAT, "version": HEAD_VERSION, "store": store_name, "seq": record.seq,
                "hash": record.hash, "at_tai_ns": record.at_tai_ns}
    data = (json.dumps(document, sort_keys=True) + "\n").encode("ascii")
    replace_file(path, data, _FILE_MODE, prefix=f".{path.name}.")


def copy_private(source: Path, target: Path) -> None:
    try:
        data = source.read_bytes()
    except FileNotFoundError:
        return
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def evidence_path(store_path: Path) -> Path:
    n = 1
    while any(Path(f"{store_path}{EVIDENCE_INFIX}{n}{suffix}").exists() for suffix in ("", "-wal", "-shm",
                                                                                       HEAD_SUFFIX)):
        n += 1
    return Path(f"{store_path}{EVIDENCE_INFIX}{n}")
