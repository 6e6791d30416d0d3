"""``appliance audit verify``, ``appliance audit export`` and ``appliance audit show``.

Edge module: parses times (reading the host clock for "now" and relative times), opens the store, reads and writes
files, prints.  The composition of the main parser is the caller's: ``add_parser`` adds the ``audit`` command to its
subparsers and ``run`` executes a parsed command.  Exit status: 0 fine, 1 the chain or bundle is broken, 2 the
command could not be carried out (no store, a bad time, an unreadable file).

``audit verify`` always checks the store in full (structure, every record re-hashed, the head file): a new process
has no earlier check to go on from, so there is no quick mode.  It fails (1) for a store cut short or rewritten
behind the head file, for a head file deleted from a store that had one, and while the record that restarted the
chain after such a loss stands; a store from before head files passes with a warning line.  A store that is gone
while its head file is there is broken (1), not merely absent (2).

``audit verify --against FILE`` also checks the local chain against the copy a syslog collector keeps (FILE: its
log file, ``appliance.audit.remote`` reads it): a rollback, a deletion or a chain started afresh on the box is named
and fails (1), as is a broken local chain; a FILE that cannot be read or holds no audit record fails (2).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from appliance import leap
from appliance.audit import bundle, remote
from appliance.audit.chain import AuditError, AuditRecord, VerifyResult
from appliance.audit.store import STORE_FILE, AuditStore, head_path_of, read_head
from appliance.leap import LeapTable
from appliance.units import NS_PER_S

EXIT_OK, EXIT_BROKEN, EXIT_FAILED = 0, 1, 2
TIME_HELP = "ISO UTC like 2026-12-03T10:00:00Z, 'now', or relative like -1h, -30m, -7d"
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d)(?::(\d\d)(?:\.(\d{1,9}))?)?)?(Z|[+-]\d\d:?\d\d)?")
_RELATIVE = re.compile(r"-(\d+)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_UTC_OFFSETS = ("Z", "+00:00", "+0000", "-00:00", "-0000")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_AT_RECORD = re.compile(r"record \d+: ")


def add_parser(subparsers: argparse._SubParsersAction) -> list[argparse.ArgumentParser]:
    """Add ``audit`` with its subcommands; returns the three subcommand parsers (for the caller's common options)."""
    p = subparsers.add_parser("audit", help="verify, export or show the tamper-evident audit log")
    sub = p.add_subparsers(dest="audit_command", required=True, metavar="SUBCOMMAND")
    pv = sub.add_parser("verify", help="check the stored hash chain, or a signed export bundle")
    pv.add_argument("--bundle", metavar="FILE", help="check this export bundle instead of the store")
    pv.add_argument("--public-key", metavar="FILE", help="the appliance's audit-signing.pub to check the bundle's "
                    "signature against (without it the bundle's own key is only self-asserted)")
    pv.add_argument("--against", metavar="FILE", help="also check the chain against a syslog collector's log file "
                    "of the forwarded records (names a rollback, a deletion or a fresh chain)")
    pe = sub.add_parser("export", help="write the records of a time range as a signed bundle")
    pe.add_argument("--since", required=True, metavar="TIME", help=f"first instant included: {TIME_HELP}")
    pe.add_argument("--until", default="now", metavar="TIME", help=f"first instant excluded (default now): {TIME_HELP}")
    pe.add_argument("file", metavar="FILE", help="bundle file to write (JSON)")
    accept_relative_times(pe)
    ps = sub.add_parser("show", help="print the latest records")
    ps.add_argument("--last", type=int, default=20, metavar="N", help="how many records (default 20)")
    ps.add_argument("--kind", action="append", default=None, metavar="K",
                    help="only this kind, e.g. alarm.raised (repeatable)")
    ps.add_argument("--search", metavar="S", help="case-insensitive text to find in the text, actor or kind")
    return [pv, pe, ps]


def accept_relative_times(parser: argparse.ArgumentParser) -> None:
    # argparse takes "-1h" for an unknown option (only "-1" looks like a value to it), so "--since -1h" would fail;
    # widening its negative-number pattern lets relative times through.  "--since=-1h" works either way.
    if hasattr(parser, "_negative_number_matcher"):
        parser._negative_number_matcher = re.compile(r"^-\d+$|^-\d*\.\d+$|^-\d+[smhdw]$")


def run(args: argparse.Namespace, state_dir: Path, table: LeapTable, now_tai_ns: int | None = None) -> int:
    """Execute a parsed ``audit`` command; ``now_tai_ns`` defaults to the host clock."""
    now = now_tai_ns if now_tai_ns is not None else leap.posix_to_tai_ns(time.time_ns(), table)
    try:
        if args.audit_command == "verify":
            if args.bundle and getattr(args, "against", None):
                return _fail("--bundle and --against check different things: give one of them")
            if args.bundle:
                return _verify_bundle(args)
            if getattr(args, "against", None):
                return _verify_against(Path(state_dir), Path(args.against))
            return _verify_store(Path(state_dir))
        if args.audit_command == "export":
            return _export(args, Path(state_dir), table, now)
        return _show(args, Path(state_dir), table)
    except (AuditError, ValueError) as exc:
        return _fail(str(exc))


def parse_time(text: str, table: LeapTable, now_tai_ns: int) -> int:
    """TAI ns of an ISO UTC time (23:59:60 where a leap second was inserted), "now", or "-<n><s|m|h|d|w>"."""
    text = text.strip()
    if text == "now":
        return now_tai_ns
    relative = _RELATIVE.fullmatch(text)
    if relative:
        return now_tai_ns - int(relative[1]) * _UNIT_S[relative[2]] * NS_PER_S
    iso = _ISO.fullmatch(text)
    if iso is None:
        raise ValueError(f"bad time {text!r}: expected {TIME_HELP}")
    if iso[8] is not None and iso[8] not in _UTC_OFFSETS:
        raise ValueError(f"bad time {text!r}: give it in UTC (ending in Z)")
    year, month, day, hour, minute, second = (int(g or 0) for g in iso.groups()[:6])
    nanosecond = int((iso[7] or "").ljust(9, "0"))
    try:
        return leap.utc_fields_to_tai(year, month, day, hour, minute, second, nanosecond, table)
    except ValueError as exc:
        raise ValueError(f"bad time {text!r}: {exc}") from None


def open_store(state_dir: Path) -> AuditStore:
    """The state directory's audit store, to read (AuditError when there is none)."""
    return _open_store(state_dir)


def _open_store(state_dir: Path) -> AuditStore:
    path = state_dir / STORE_FILE
    if not path.is_file():
        raise AuditError(f"no audit store at {path}")
    return AuditStore(path, create=False)


def _verify_store(state_dir: Path) -> int:
    gone = _store_gone(state_dir / STORE_FILE)
    if gone:
        print(f"audit chain BROKEN: {gone}")
        return EXIT_BROKEN
    with _open_store(state_dir) as store:
        result = store.verify(full=True)
        head = store.head()
    if not result.ok:
        print(_broken("audit chain", result))
    elif head is None:
        print("audit chain OK: 0 records (the store is empty)")
    else:
        print(f"audit chain OK: {result.checked} records, head seq {head.seq} hash {head.hash}")
    for warning in result.warnings:
        print(f"audit chain warning: {warning}")
    return EXIT_OK if result.ok else EXIT_BROKEN


def _verify_against(state_dir: Path, log_file: Path) -> int:
    """The local chain on its own (as ``verify``), then against the collector's copy in ``log_file``."""
    try:
        with open(log_file, encoding="utf-8", errors="replace") as handle:
            held = remote.parse_log(handle)
    except OSError as exc:
        return _fail(f"cannot read the remote log {log_file}: {exc.strerror or exc}")
    if not held.records:
        return _fail(f"the remote log {log_file} holds no audit records (no [{remote.SD_ID} seq=... hash=...] "
                     "structured data): write it with a template that keeps the structured data, such as rsyslog's "
                     "RSYSLOG_SyslogProtocol23Format")
    path = state_dir / STORE_FILE
    if not path.is_file():
        gone = _store_gone(path)
        result = remote.check_against(None, "", held, f"no audit store at {path}" + (f"; {gone}" if gone else ""))
        local = EXIT_BROKEN
    else:
        local = _verify_store(state_dir)
        with _open_store(state_dir) as store:
            result = remote.check_against(store.links(), store.chain_id, held, f"the store {path} is empty")
    print(f"audit anchor {log_file} {result.verdict}: {result.reason}")
    for note in result.notes:
        print(f"audit anchor note: {note}")
    return EXIT_OK if result.ok and local == EXIT_OK else EXIT_BROKEN


def _store_gone(path: Path) -> str:
    """Why a missing store is a broken one: its head file says it held records ("" when there is no store and no
    head file either, or the store is there)."""
    head_path = head_path_of(path)
    if path.exists() or not head_path.exists():
        return ""
    head, unreadable = read_head(head_path)
    recorded = f"records seq {head.seq} (hash {head.hash[:12]}...)" if head else f"is unreadable ({unreadable})"
    return f"the store {path} is missing but its head file {head_path} {recorded}"


def _verify_bundle(args: argparse.Namespace) -> int:
    trusted = _read(args.public_key, "public key") if args.public_key else None
    try:
        result = bundle.verify_bundle(Path(args.bundle), trusted)
    except OSError as exc:
        return _fail(f"cannot read bundle {args.bundle}: {exc.strerror or exc}")
    if not result.ok:
        print(_broken(f"audit bundle {args.bundle}", result))
        return EXIT_BROKEN
    print(f"audit bundle OK: {result.reason}")
    return EXIT_OK


def _broken(what: str, result: VerifyResult) -> str:
    # Reasons naming a record start "record N: ...", which reads as "BROKEN at record N: ..."; others (e.g.
    # "records 41..60 are missing: ...") read as they are.
    if result.first_bad_seq is not None and _AT_RECORD.match(result.reason):
        return f"{what} BROKEN at {result.reason}"
    return f"{what} BROKEN: {result.reason}"


def _export(args: argparse.Namespace, state_dir: Path, table: LeapTable, now_tai_ns: int) -> int:
    since, until = parse_time(args.since, table, now_tai_ns), parse_time(args.until, table, now_tai_ns)
    if until <= since:
        return _fail(f"--until {args.until} is not after --since {args.since}")
    with _open_store(state_dir) as store:
        key = bundle.load_or_create_key(state_dir)
        try:
            done = bundle.export_bundle(store, since, until, key, Path(args.file),
                                        label_of=lambda tai_ns: str(leap.tai_to_utc(tai_ns, table)))
        except OSError as exc:
            return _fail(f"cannot write {args.file}: {exc.strerror or exc}")
    print(f"exported {done.records} record(s), seq {done.first_seq}-{done.last_seq}, to {done.path}, signed by key "
          f"{done.key_fingerprint}")
    return EXIT_OK


def _show(args: argparse.Namespace, state_dir: Path, table: LeapTable) -> int:
    if args.last < 1:
        return _fail(f"--last {args.last}: must be at least 1")
    with _open_store(state_dir) as store:
        records = store.records(kinds=args.kind, search=args.search, limit=args.last)
    for record in reversed(records):  # oldest first, like a log
        print(_line(record, table))
    if not records:
        print("no audit records match", file=sys.stderr)
    return EXIT_OK


def _line(record: AuditRecord, table: LeapTable) -> str:
    label = leap.tai_to_utc(record.at_tai_ns, table).iso_ms()
    text = _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", record.text)  # one record, one terminal line
    return f"{record.seq:>7} {label} {record.kind:<13} {record.actor:<12} {text}"


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def _fail(message: str) -> int:
    print(f"appliance: audit: {message}", file=sys.stderr)
    return EXIT_FAILED
