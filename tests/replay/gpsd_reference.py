"""Read gpsd's regression output (``NAME.log.chk``) into what the replay tests compare against.

A ``.chk`` file interleaves the NMEA sentences gpsd saw (or, for UBX input, generated from the binary) with the JSON
reports it emitted after each one.  gpsd's view is a reference, not ground truth: where we disagree the tests say why.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from appliance.gnss.nmea import parse_tod_ms

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "gnss"
CAPTURES = ("beidou-bd", "bundg_zeus_9", "u-blox-m8t-time", "ublox-neo-m9n-nmea", "ublox-zed-f9t-ubx_nmea_l5",
            "ublox-8-time", "ublox-neo-m8t-s")
# Sentences that name their epoch; GLL carries its time in field 5, the others in field 1.
_TIMED = re.compile(rb"^[$!][A-Z]{2}(RMC|GGA|GNS|ZDA|GLL),([^*]*)")


@dataclass
class GpsdReference:
    tpv: dict[str, dict] = field(default_factory=dict)  # ISO time -> gpsd's last TPV with that time
    sky: dict[int, dict] = field(default_factory=dict)  # time of day (ms) -> last satellite-level SKY of that epoch
    final_sky: dict[int, dict] = field(default_factory=dict)  # time of day (ms) -> last SKY listing satellites


def tod_ms_of(iso: str) -> int:
    """``2020-07-11T22:37:45.000Z`` -> milliseconds of the day (the captures do not span midnight)."""
    return parse_tod_ms(iso[11:13] + iso[14:16] + iso[17:23])


def sentence_tod_ms(line: bytes) -> int | None:
    """Time of day named by an echoed RMC/GGA/GNS/ZDA/GLL, None for other lines or an empty time field."""
    match = _TIMED.match(line)
    if not match:
        return None
    fields = match.group(2).split(b",")
    index = 4 if match.group(1) == b"GLL" else 0
    text = fields[index].decode() if index < len(fields) else ""
    return parse_tod_ms(text) if text else None


def satellite_level(sky: dict) -> bool:
    """A SKY listing each satellite once (gpsd's NAV-SIG SKY lists one entry per signal)."""
    sats = sky.get("satellites")
    return bool(sats) and len({(s.get("gnssid"), s.get("svid")) for s in sats}) == len(sats)


def satellite_keys(sky: dict) -> set[tuple[int, int, bool]]:
    """(gnssid, svid, used) of each satellite a SKY lists: gpsd numbers systems as UBX gnssId does (0 GPS, 1 SBAS,
    2 Galileo, 3 BeiDou, 5 QZSS, 6 GLONASS) and satellites by the system's own number."""
    return {(s["gnssid"], s["svid"], bool(s.get("used"))) for s in sky.get("satellites", ())}


@cache
def load(name: str) -> GpsdReference:
    """A SKY with a ``time`` belongs to that epoch; one without belongs to the last time-bearing sentence before it."""
    ref = GpsdReference()
    current_tod_ms: int | None = None
    for line in (DATA_DIR / f"{name}.log.chk").read_bytes().splitlines():
        if not line.startswith(b"{"):
            tod_ms = sentence_tod_ms(line)
            current_tod_ms = current_tod_ms if tod_ms is None else tod_ms
            continue
        report = json.loads(line)
        if report.get("class") == "TPV" and "time" in report:
            ref.tpv[report["time"]] = report
        elif report.get("class") == "SKY" and "uSat" in report and report.get("satellites"):
            key = tod_ms_of(report["time"]) if "time" in report else current_tod_ms
            if key is None:
                continue
            ref.final_sky[key] = report
            if satellite_level(report):
                ref.sky[key] = report
    return ref
