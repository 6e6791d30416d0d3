"""``appliance quality export`` and ``appliance quality show``: the time-quality log for an auditor or an operator.

Edge module: reads the host clock (for "now" and relative times), opens the log under the state directory, writes a
CSV file or stdout, prints.  Problems an operator can fix (no log yet, a bad time, an unwritable file, a file that is
not a log) print one line on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance import leap
from appliance.audit.cli import accept_relative_times, parse_time
from appliance.audit.tqlog import Row, TimeQualityLog, ordered_state_seconds, utc_labeler
from appliance.leap import LeapTable

LOG_NAME = "quality.sqlite"
EXIT_USAGE = 2


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``quality export`` and ``quality show`` to the appliance's subcommands."""
    p = subparsers.add_parser("quality", help="the per-second time-quality record: export as CSV, or show the latest")
    qsub = p.add_subparsers(dest="quality_command", required=True, metavar="SUBCOMMAND")
    times = "UTC like 2026-12-03T10:00:00Z (23:59:60 where a leap second was inserted), now, or -30m/-1h/-7d"
    pe = qsub.add_parser("export", help="CSV of the time quality over a UTC range, one line per stored row")
    _settings_args(pe)
    pe.add_argument("--since", required=True, metavar="T", help=f"start: {times}")
    pe.add_argument("--until", default="now", metavar="T", help=f"end, exclusive (default now): {times}")
    pe.add_argument("--monitor", action="store_true", help="the sync monitor's downstream clients instead: one line "
                    "per poll of a target (offset and delay against the served time, state, limit)")
    pe.add_argument("file", nargs="?", default="-", metavar="FILE|-", help="output file (default -: stdout)")
    accept_relative_times(pe)
    ps = qsub.add_parser("show", help="the latest rows as a table")
    _settings_args(ps)
    ps.add_argument("--last", type=int, default=20, metavar="N", help="number of rows (default 20)")
    return p


def _settings_args(p: argparse.ArgumentParser) -> None:
    """The same --config/--set as every other subcommand: the state directory is a setting."""
    p.add_argument("--config", metavar="FILE", help="TOML configuration file (default: the embedded default)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="set_pairs",
                   help="override one setting (repeatable), e.g. --set state_dir=/var/lib/appliance")


def run(args: argparse.Namespace, state_dir: Path, table: LeapTable, now_tai_ns: int | None = None) -> int:
    """Run ``quality export`` or ``quality show``; ``now_tai_ns`` defaults to the host clock."""
    path = Path(state_dir) / LOG_NAME
    try:
        if not path.is_file():
            raise ValueError(f"no time-quality log at {path} (the appliance writes it while it runs)")
        now = leap.posix_to_tai_ns(time.time_ns(), table) if now_tai_ns is None else now_tai_ns
        if args.quality_command == "export":
            return _export(args, path, table, now)
        return _show(args, path, table)
    except (ValueError, OSError) as exc:  # QualityLogError is a ValueError
        print(f"appliance: quality: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _export(args: argparse.Namespace, path: Path, table: LeapTable, now: int) -> int:
    since, until = parse_time(args.since, table, now), parse_time(args.until, table, now)
    if since >= until:
        raise ValueError(f"--since {args.since} is not before --until {args.until}")
    label = utc_labeler(table)
    with TimeQualityLog(path) as log:
        export = log.export_monitor_csv if getattr(args, "monitor", False) else log.export_csv
        if args.file == "-":
            count = export(since, until, sys.stdout, label)
            sys.stdout.flush()
            where, notice = "stdout", sys.stderr
        else:
            with open(args.file, "w", encoding="utf-8", newline="") as out:
                count = export(since, until, out, label)
            where, notice = args.file, sys.stdout
    print(f"{count} row(s) from {label(since)} to {label(until)} written to {where}", file=notice)
    return 0


def _show(args: argparse.Namespace, path: Path, table: LeapTable) -> int:
    if args.last < 1:
        raise ValueError(f"--last {args.last}: must be at least 1")
    with TimeQualityLog(path) as log:
        rows = log.tail(args.last)
    print(render_table(rows, utc_labeler(table)), file=sys.stdout)
    return 0


def render_table(rows: list[Row], label: Callable[[int], str]) -> str:
    """The operator's table: one line per row, merged rows listing their seconds per state."""
    header = (f"{'UTC':20}  {'SPAN s':>6}  {'STATE':16}  {'PHASE ns':>10}  {'FREQ ppb':>10}  {'BOUND ns':>10}  "
              f"{'SATS':>4}  {'CLASS':>5}  SECONDS BY STATE")
    lines = [header]
    for r in rows:
        merged = len(r.state_seconds) > 1
        detail = ", ".join(f"{s} {n}" for s, n in ordered_state_seconds(r.state_seconds)) if merged else ""
        lines.append(f"{label(r.at_tai_ns):20}  {r.span_s:>6}  {r.state:16}  {_num(r.phase_offset_ns, '+.1f'):>10}  "
                     f"{_num(r.frequency_ppb, '+.3f'):>10}  {_num(r.error_bound_ns, 'd'):>10}  "
                     f"{_num(r.satellites_used, 'd'):>4}  {_num(r.clock_class, 'd'):>5}  {detail}".rstrip())
    if not rows:
        lines.append("(no rows yet)")
    return "\n".join(lines)


def _num(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
