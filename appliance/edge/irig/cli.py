"""``appliance irig render`` and ``appliance irig decode``.

Edge module: parses times and zones, reads the clock (for a default year), reads and writes files, prints.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
import zoneinfo
from datetime import datetime, timezone

from appliance import leap
from appliance.leap import LeapTable
from appliance.edge.irig import files
from appliance.protocol.irig.render import decode_elements, frames_for
from appliance.protocol.irig.timecode import CodedExpression, IrigFormat, OffsetOf, quality_from_bound, tai_of
from appliance.protocol.irig.waveform import (am_samples, dcls_edges, elements_from_pulses, pulses_from_edges,
                                             pulses_from_samples)

ISO = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.0+)?(?:Z|\+00:?00)?$")
MAX_SECONDS = 86_400


def parse_start(text: str, table: LeapTable) -> int:
    """TAI ns of an ISO UTC time on a whole second (23:59:60 allowed where a leap second was inserted)."""
    m = ISO.match(text.strip())
    if not m:
        raise ValueError(f"start {text!r}: expected a UTC time on a whole second, e.g. 2016-12-31T23:59:55Z")
    return leap.utc_fields_to_tai(*(int(g) for g in m.groups()), 0, table)


def offset_function(zone: str) -> OffsetOf:
    if zone.upper() in ("UTC", "Z", "ETC/UTC"):
        return lambda posix_s: (0, False)
    try:
        tz = zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {zone!r} (an IANA name such as Europe/Berlin, or UTC)") from None

    def offset_of(posix_s: int) -> tuple[int, bool]:
        local = datetime.fromtimestamp(posix_s, timezone.utc).astimezone(tz)
        offset, dst = local.utcoffset(), local.dst()
        return (int(offset.total_seconds()) if offset else 0), bool(dst)
    return offset_of


def render(args: argparse.Namespace, table: LeapTable) -> int:
    fmt = IrigFormat.parse(args.format)
    if not 1 <= args.seconds <= MAX_SECONDS:
        raise ValueError(f"--seconds {args.seconds}: must be 1-{MAX_SECONDS}")
    if fmt.modulated != bool(args.wav):
        hint = "amplitude-modulated: use --wav" if fmt.modulated else "DC level shift: use --edges"
        raise ValueError(f"{fmt.name} is {hint}")
    start = parse_start(args.start, table)
    quality = quality_from_bound(None if args.bound_ns < 0 else args.bound_ns)
    frames = frames_for(fmt.expression, start, args.seconds, table, quality, offset_function(args.timezone))
    if fmt.modulated:
        files.write_wav(args.wav, am_samples(frames, args.rate), args.rate)
        target = args.wav
    else:
        header = {"format": fmt.name, "start": str(leap.tai_to_utc(start, table)), "start_tai_ns": str(start),
                  "seconds": str(args.seconds), "timezone": args.timezone, "time_quality": str(quality)}
        files.write_edges(args.edges, dcls_edges(frames), header)
        target = args.edges
    print(f"{fmt.name}: {args.seconds} frame(s) from {leap.tai_to_utc(start, table)} to {target}")
    return 0


def decode(args: argparse.Namespace, table: LeapTable) -> int:
    header: dict[str, str] = {}
    wav = files.is_wav(args.file)
    if wav:
        samples, rate = files.read_wav(args.file)
        elements = elements_from_pulses(pulses_from_samples(samples, rate))
    else:
        edges, header = files.read_edges(args.file)
        elements = elements_from_pulses(pulses_from_edges(edges))
    name = args.format or header.get("format")
    fmt = IrigFormat.parse(name) if name else None
    year = args.year or (int(header["start"][:4]) if header.get("start", "")[:4].isdigit() else
                         time.gmtime().tm_year)
    result = decode_elements(elements, fmt, year)
    kind = fmt.name[:3] if fmt else "B12" if wav else "B00"
    coded_year = CodedExpression(result.format_digit).has_year
    last_day = None
    for frame in result.frames:
        f = frame.fields
        if not coded_year:  # the year is the hint's, and the next one after day 365/366 rolls over to day 1
            if last_day is not None and f.day_of_year < last_day:
                year += 1
            last_day = f.day_of_year
            f = dataclasses.replace(f, year=year)
        try:
            label = str(leap.tai_to_utc(tai_of(f, table), table))[:19] + "Z"
        except ValueError as exc:
            label = f"invalid ({exc})"
        record = {"on_time_ns": frame.on_time_ns, "utc": label, "year": f.year, "day_of_year": f.day_of_year,
                  "time": f"{f.hour:02d}:{f.minute:02d}:{f.second:02d}", "leap_pending": f.leap_pending,
                  "leap_deletion": f.leap_deletion, "dst_pending": f.dst_pending, "dst": f.dst,
                  "offset_h": f.offset_half_hours / 2, "time_quality": f.quality}
        if args.json:
            print(json.dumps(record))
        else:
            print(f"{frame.on_time_ns:>15} {label} day {f.day_of_year:03d} {record['time']} q={f.quality}"
                  f"{' LSP' if f.leap_pending else ''}{' DST' if f.dst else ''}{' DSP' if f.dst_pending else ''}"
                  f"{'' if not f.offset_half_hours else f' offset {f.offset_half_hours / 2:+g} h'}")
    for problem in result.problems:
        print(f"appliance: irig: {problem}", file=sys.stderr)
    summary = f"{len(result.frames)} frame(s) decoded as {kind}{result.format_digit}, {len(result.problems)} unreadable"
    print(summary, file=sys.stderr)
    return 0 if result.frames and not result.problems else 1
