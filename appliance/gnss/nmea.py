"""NMEA 0183 sentences -> typed receiver records (pynmea2 splits and names fields; this module gives them meaning).

Pure core.  Handles RMC, ZDA, GGA, GNS, GLL (time and fix), GSA (satellites used, NMEA 4.10 system ID), GSV (satellites
in view, NMEA 4.10 signal ID) and TXT, from any talker.  Constellation comes from the NMEA 4.10 system ID where given,
else from the talker, else from the satellite number range, so BeiDou is BeiDou whichever talker carries it.
Times are parsed here rather than by pynmea2 because ``datetime.time`` cannot hold 23:59:60, and talker PQ is split
here because pynmea2 takes "$PQGSV" for a proprietary sentence.  Malformed fields are rejected as "bad-field", and
whatever pynmea2 raises on a sentence it cannot build is "unparseable": nothing escapes.  Unicore command answers and
ASCII logs (the framer's ``UnicoreFrame``) are well formed and of no use here: they are ignored, by their name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pynmea2

from appliance.events import Constellation, FixMode, Position, Rejected
from appliance.gnss.framer import UNICORE_HEADS

C = Constellation
TALKERS: dict[str, Constellation | None] = {
    "GP": C.GPS, "GL": C.GLONASS, "GA": C.GALILEO, "BD": C.BEIDOU, "GB": C.BEIDOU, "GQ": C.QZSS, "PQ": C.QZSS,
    "QZ": C.QZSS, "GI": C.NAVIC, "IR": C.NAVIC, "GN": None,
}
# NMEA 4.10/4.11 GNSS System ID (GSA field 18, GNS/GSV by talker).
SYSTEM_IDS: dict[int, Constellation] = {1: C.GPS, 2: C.GLONASS, 3: C.GALILEO, 4: C.BEIDOU, 5: C.QZSS, 6: C.NAVIC}
TIME_TYPES = frozenset({"RMC", "ZDA", "GGA", "GNS", "GLL"})
HANDLED_TYPES = TIME_TYPES | {"GSA", "GSV", "TXT"}
# What NMEA numeric fields look like; float() and int() also take "nan", "inf", "1e9", "1_0" and " 5".
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)")
_INTEGER = re.compile(r"[+-]?\d+")
_COORD = re.compile(r"\d+(\.\d+)?")


@dataclass(frozen=True, slots=True)
class TimeRecord:
    """A sentence that names its epoch: time of day (ms, 23:59:60 allowed) and, for RMC/ZDA, the date."""

    kind: str
    talker: str
    tod_ms: int
    date: tuple[int, int, int] | None  # (year, month, day)
    valid: bool | None  # RMC/GLL status A/V; None where the sentence has no status
    mode: FixMode | None  # what this sentence alone says about the fix
    position: Position | None
    num_sats: int | None = None
    hdop: float | None = None


@dataclass(frozen=True, slots=True)
class UsedRecord:
    """GSA: satellites used in the solution and the fix dimension."""

    talker: str
    fix: FixMode
    sats: tuple[tuple[Constellation, int], ...]
    hdop: float | None


@dataclass(frozen=True, slots=True)
class ViewRecord:
    """One GSV sentence: part ``part`` of ``parts`` of a talker's (and signal's) satellites in view."""

    talker: str
    signal: str
    part: int
    parts: int
    total: int
    sats: tuple[tuple[Constellation, int, int | None, int | None, int | None], ...]  # const, prn, el, az, cn0


@dataclass(frozen=True, slots=True)
class TextRecord:
    talker: str
    text: str


@dataclass(frozen=True, slots=True)
class Ignored:
    """A well-formed sentence of a type the appliance has no use for (counted, not rejected)."""

    kind: str


NmeaRecord = TimeRecord | UsedRecord | ViewRecord | TextRecord | Ignored


def classify_satellite(talker: str, prn: int, system_id: int | None = None) -> tuple[Constellation, int]:
    """Constellation and the constellation's own satellite number for an NMEA satellite ID."""
    const = SYSTEM_IDS.get(system_id) if system_id is not None else None
    if const is None:
        const = TALKERS.get(talker)
    if const is None or (const is C.GPS and prn > 32):
        return _by_range(prn, system_id)
    offsets = {C.GLONASS: 64, C.GALILEO: 300, C.QZSS: 192, C.NAVIC: 0}
    if const is C.BEIDOU:
        return const, prn - 400 if prn > 400 else prn - 200 if prn > 200 else prn
    offset = offsets.get(const, 0)
    return const, prn - offset if prn > offset else prn


def _by_range(prn: int, system_id: int | None = None) -> tuple[Constellation, int]:
    # NMEA 0183 v3/v4.0 and receiver-extended numbering, as used under the GP and GN talkers.  QZSS 193-202 (u-blox
    # extended) and BeiDou 201-263 (SiRF, Quectel) overlap: 201 and 202 are QZSS only where the system ID says GPS,
    # the ID u-blox files QZSS under, since BeiDou has its own ID there.
    qzss_high = 202 if system_id == 1 else 200
    for low, high, const, offset in (
        (1, 32, C.GPS, 0), (33, 64, C.SBAS, -87), (65, 96, C.GLONASS, 64), (120, 158, C.SBAS, 0),
        (193, qzss_high, C.QZSS, 192), (201, 263, C.BEIDOU, 200), (301, 336, C.GALILEO, 300),
        (401, 463, C.BEIDOU, 400),
    ):
        if low <= prn <= high:
            return const, prn - offset
    return C.UNKNOWN, prn


def parse_tod_ms(text: str) -> int:
    """``hhmmss[.sss]`` -> milliseconds of the day; second 60 allowed at 23:59 (a leap second), all else checked."""
    if len(text) < 6 or not text[:6].isdigit():
        raise ValueError(f"bad time field {text!r}")
    hour, minute, second = int(text[0:2]), int(text[2:4]), int(text[4:6])
    frac = text[6:]
    millis = 0
    if frac:
        if frac[0] != "." or not frac[1:].isdigit():
            raise ValueError(f"bad time field {text!r}")
        millis = int((frac[1:] + "000")[:3])
    # UTC inserts leap seconds only as 23:59:60; a 60 anywhere else would read as the next minute's first second.
    if hour > 23 or minute > 59 or second > 60 or (second == 60 and (hour, minute) != (23, 59)):
        raise ValueError(f"time out of range {text!r}")
    return ((hour * 60 + minute) * 60 + second) * 1000 + millis


def decode(text: str) -> NmeaRecord | Rejected:
    """One checksummed sentence (from the framer) -> a record, an Ignored, or a Rejected with its reason."""
    if text.startswith("!"):
        return Ignored(_type_of(text))  # encapsulated (AIS) data: well formed, of no use here
    head, _, rest = text[1:].partition("*")[0].partition(",")
    if text.startswith("#") or head in UNICORE_HEADS:
        # A Unicore answer or log: its checksum (over the '$' too) or CRC-32 was checked by the framer, and
        # pynmea2 would take the first for a bad NMEA checksum.  gnss/unicore.py reads them.
        return Ignored(head)
    if head[:2] in TALKERS and head[:1] == "P" and head[2:] in HANDLED_TYPES:
        # pynmea2 reads talker PQ ("$PQGSV") as a proprietary sentence from maker "QGS": split it here instead.
        return _decode_fields(head[2:], head[:2], rest.split(","))
    try:
        msg = pynmea2.parse(text, check=True)
    except pynmea2.ChecksumError:
        return Rejected("nmea", "bad-checksum", text[:48])
    except pynmea2.SentenceTypeError:
        return Ignored(_type_of(text))
    except pynmea2.ParseError as exc:
        return Rejected("nmea", "unparseable", f"{text[:40]}: {exc}")
    except Exception as exc:  # noqa: BLE001 - pynmea2's proprietary classes index fields in constructors ($PUBX*hh)
        return Rejected("nmea", "unparseable", f"{text[:40]}: {type(exc).__name__}")
    kind = getattr(msg, "sentence_type", "") or ""
    if isinstance(msg, pynmea2.QuerySentence):
        return Ignored("query")  # a listener asking for a sentence carries no data of its own
    if isinstance(msg, pynmea2.ProprietarySentence) or kind not in HANDLED_TYPES:
        return Ignored(kind or _type_of(text))
    return _decode_fields(kind, msg.talker, list(msg.data))


def _decode_fields(kind: str, talker: str, data: list[str]) -> NmeaRecord | Rejected:
    try:
        return _DECODERS[kind](talker, data)
    except (ValueError, IndexError) as exc:
        return Rejected("nmea", "bad-field", f"{kind}: {exc}")


def _type_of(text: str) -> str:
    head = text[1:].split(",", 1)[0]
    return head[2:] if len(head) == 5 else head


def _field(data: list[str], i: int) -> str:
    return data[i].strip() if i < len(data) else ""


def _opt_float(text: str) -> float | None:
    if text and not _NUMBER.fullmatch(text):
        raise ValueError(f"bad number {text!r}")
    return float(text) if text else None


def _opt_int(text: str) -> int | None:
    if text and not _INTEGER.fullmatch(text):
        raise ValueError(f"bad integer {text!r}")
    return int(text) if text else None


def _latlon(data: list[str], i: int) -> tuple[float, float] | None:
    """Fields lat, N/S, lon, E/W starting at ``i`` -> degrees, or None when empty."""
    lat, ns, lon, ew = (_field(data, i + k) for k in range(4))
    if not lat or not lon:
        return None
    if ns not in ("N", "S") or ew not in ("E", "W"):  # ("" in "NS" is true: a missing hemisphere is not north)
        raise ValueError(f"bad hemisphere {lat}{ns} {lon}{ew}")
    lat_deg = _dm_to_deg(lat, 2) * (-1 if ns == "S" else 1)
    lon_deg = _dm_to_deg(lon, 3) * (-1 if ew == "W" else 1)
    if not (-90 <= lat_deg <= 90 and -180 <= lon_deg <= 180):
        raise ValueError(f"position out of range {lat}{ns} {lon}{ew}")
    return lat_deg, lon_deg


def _dm_to_deg(text: str, deg_digits: int) -> float:
    """``ddmm.mmmm`` / ``dddmm.mmmm`` -> degrees; digits only, minutes below 60."""
    if not _COORD.fullmatch(text) or len(text.split(".")[0]) != deg_digits + 2:
        raise ValueError(f"bad coordinate {text!r}")
    minutes = float(text[deg_digits:])
    if minutes >= 60:
        raise ValueError(f"bad coordinate {text!r}")
    return int(text[:deg_digits]) + minutes / 60.0


def _date_ddmmyy(text: str) -> tuple[int, int, int] | None:
    if not text:
        return None
    if len(text) != 6 or not text.isdigit():
        raise ValueError(f"bad date {text!r}")
    day, month, yy = int(text[0:2]), int(text[2:4]), int(text[4:6])
    _check_date(day, month)
    # NMEA carries two year digits; receivers in service today report 2000-2099 (gpsd assumes the same).
    return 2000 + yy, month, day


def _check_date(day: int, month: int) -> None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        raise ValueError(f"date out of range {day:02d}/{month:02d}")


def _rmc(talker: str, d: list[str]) -> TimeRecord:
    valid = _field(d, 1) == "A"
    ll = _latlon(d, 2)
    mode = FixMode.FIX_2D if valid and ll else FixMode.NO_FIX
    if _field(d, 11) == "N":  # NMEA 2.3 mode indicator "data not valid"
        mode, valid = FixMode.NO_FIX, False
    pos = Position(*ll) if ll and valid else None
    return TimeRecord("RMC", talker, parse_tod_ms(_field(d, 0)), _date_ddmmyy(_field(d, 8)), valid, mode, pos)


def _zda(talker: str, d: list[str]) -> TimeRecord:
    day, month, year = _field(d, 1), _field(d, 2), _field(d, 3)
    date = None
    if day and month and year:
        if len(year) != 4:
            raise ValueError(f"bad year {year!r}")
        _check_date(int(day), int(month))
        date = (int(year), int(month), int(day))
    return TimeRecord("ZDA", talker, parse_tod_ms(_field(d, 0)), date, None, None, None)


def _gga(talker: str, d: list[str]) -> TimeRecord:
    quality = _opt_int(_field(d, 5)) or 0
    ll = _latlon(d, 1)
    alt = _opt_float(_field(d, 8))
    mode = FixMode.NO_FIX if quality == 0 or not ll else FixMode.FIX_3D if alt is not None else FixMode.FIX_2D
    pos = Position(ll[0], ll[1], alt) if ll and quality else None
    return TimeRecord("GGA", talker, parse_tod_ms(_field(d, 0)), None, quality > 0, mode, pos,
                      _opt_int(_field(d, 6)), _opt_float(_field(d, 7)))


def _gns(talker: str, d: list[str]) -> TimeRecord:
    modes = _field(d, 5)
    fixed = bool(modes) and any(c not in "N" for c in modes)
    ll = _latlon(d, 1)
    alt = _opt_float(_field(d, 8))
    mode = FixMode.NO_FIX if not fixed or not ll else FixMode.FIX_3D if alt is not None else FixMode.FIX_2D
    pos = Position(ll[0], ll[1], alt) if ll and fixed else None
    return TimeRecord("GNS", talker, parse_tod_ms(_field(d, 0)), None, fixed, mode, pos,
                      _opt_int(_field(d, 6)), _opt_float(_field(d, 7)))


def _gll(talker: str, d: list[str]) -> TimeRecord:
    valid = _field(d, 5) == "A" and _field(d, 6) != "N"
    ll = _latlon(d, 0)
    mode = FixMode.FIX_2D if valid and ll else FixMode.NO_FIX
    pos = Position(*ll) if ll and valid else None
    return TimeRecord("GLL", talker, parse_tod_ms(_field(d, 4)), None, valid, mode, pos)


def _gsa(talker: str, d: list[str]) -> UsedRecord:
    fix_type = _opt_int(_field(d, 1)) or 1
    if fix_type not in (1, 2, 3):
        raise ValueError(f"GSA fix type {fix_type}")
    system_text = _field(d, 17)
    system_id = int(system_text) if system_text.isdigit() else None  # some receivers put other things here
    sats = tuple(classify_satellite(talker, int(p), system_id) for p in (_field(d, i) for i in range(2, 14)) if p)
    return UsedRecord(talker, FixMode(fix_type), sats, _opt_float(_field(d, 15)))


def _gsv(talker: str, d: list[str]) -> ViewRecord:
    parts, part, total = int(_field(d, 0)), int(_field(d, 1)), int(_field(d, 2) or 0)
    if not 1 <= part <= parts:
        raise ValueError(f"GSV part {part} of {parts}")
    body = d[3:]
    signal = body.pop() if len(body) % 4 == 1 else ""  # NMEA 4.10 adds a signal ID after the satellite blocks
    sats = []
    for i in range(0, len(body) - 3, 4):
        prn_text = body[i].strip()
        if not prn_text:
            continue
        const, prn = classify_satellite(talker, int(prn_text))
        el, az, cn0 = (_opt_int(body[i + k].strip()) for k in (1, 2, 3))
        if not (_within(el, -90, 90) and _within(az, 0, 359) and _within(cn0, 0, 99)):
            # NMEA 0183: elevation 00-90 degrees, azimuth 000-359, C/N0 00-99 dB-Hz.  A sentence that passed its
            # checksum with one of these out of range is a broken receiver: drop the whole sentence, not a field.
            raise ValueError(f"GSV satellite {prn_text}: elevation {el}, azimuth {az} or C/N0 {cn0} out of range")
        sats.append((const, prn, el, az, cn0))
    return ViewRecord(talker, signal.strip(), part, parts, total, tuple(sats))


def _within(value: int | None, low: int, high: int) -> bool:
    return value is None or low <= value <= high


def _txt(talker: str, d: list[str]) -> TextRecord:
    return TextRecord(talker, _field(d, 3))


_DECODERS = {"RMC": _rmc, "ZDA": _zda, "GGA": _gga, "GNS": _gns, "GLL": _gll, "GSA": _gsa, "GSV": _gsv,
             "TXT": _txt}
