"""Serial time-of-day strings: NMEA 0183 ZDA and RMC, and the Meinberg standard time string.

Pure core.  Each string describes the second that has just begun (the one whose start the appliance's clock marks),
and carries the clock's status: RMC's status A/V and mode indicator, the Meinberg string's status characters.  The
serial output (``serialout.py``) writes them at a configured offset after each second.

- ZDA: ``$GPZDA,hhmmss.00,dd,mm,yyyy,00,00*hh`` (UTC, local zone 00:00).  NMEA has no status field in ZDA: a
  receiver learns validity from RMC.
- RMC: ``$GPRMC,hhmmss.00,A|V,llll.llll,N|S,yyyyy.yyyy,E|W,0.0,,ddmmyy,,,A|N*hh`` (NMEA 2.3 and later): status A and
  mode A while the time is synchronized (locked, or in holdover within its spec), V and N otherwise; the antenna
  position when the receiver has one, else empty fields.
- Meinberg standard time string: ``<STX>D:dd.mm.yy;T:w;U:hh.mm.ss;uvxy<ETX>``, 32 characters: w the weekday (1 =
  Monday); u ``#`` when running free (not synchronized), else space; v ``*`` when the receiver has no position, else
  space; x ``U`` (UTC); y ``A`` through the last hour before an inserted leap second, else space.

23:59:60 is written as second 60 in all three (NMEA leaves leap seconds to the talker; Meinberg's string documents
60).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from appliance import leap
from appliance.leap import UtcTime

STX, ETX = "\x02", "\x03"


@dataclass(frozen=True)
class StringStatus:
    synchronized: bool  # locked, or in holdover within its spec
    latitude_deg: float | None = None
    longitude_deg: float | None = None
    leap_within_hour: bool = False  # an inserted leap second within the next hour


def nmea_sentence(body: str) -> bytes:
    """``$body*hh\\r\\n`` with the XOR checksum of the body."""
    checksum = reduce(lambda acc, ch: acc ^ ord(ch), body, 0)
    return f"${body}*{checksum:02X}\r\n".encode("ascii")


def _hhmmss(t: UtcTime) -> str:
    return f"{t.hour:02d}{t.minute:02d}{t.second:02d}.00"


def zda(t: UtcTime, talker: str = "GP") -> bytes:
    return nmea_sentence(f"{talker}ZDA,{_hhmmss(t)},{t.day:02d},{t.month:02d},{t.year:04d},00,00")


def _coordinate(value: float | None, degree_digits: int, positive: str, negative: str) -> tuple[str, str]:
    if value is None:
        return "", ""
    magnitude = abs(value)
    degrees = int(magnitude)
    minutes = (magnitude - degrees) * 60
    if round(minutes, 4) >= 60:  # 59.99999 minutes rounds up into the next degree
        degrees, minutes = degrees + 1, 0.0
    return f"{degrees:0{degree_digits}d}{minutes:07.4f}", positive if value >= 0 else negative


def rmc(t: UtcTime, status: StringStatus, talker: str = "GP") -> bytes:
    lat, ns = _coordinate(status.latitude_deg, 2, "N", "S")
    lon, ew = _coordinate(status.longitude_deg, 3, "E", "W")
    valid = "A" if status.synchronized else "V"
    mode = "A" if status.synchronized else "N"
    date = f"{t.day:02d}{t.month:02d}{t.year % 100:02d}"
    return nmea_sentence(f"{talker}RMC,{_hhmmss(t)},{valid},{lat},{ns},{lon},{ew},0.0,,{date},,,{mode}")


def meinberg(t: UtcTime, status: StringStatus) -> bytes:
    weekday = (leap.days_from_civil(t.year, t.month, t.day) + 3) % 7 + 1  # 1970-01-01 was a Thursday (4)
    u = " " if status.synchronized else "#"
    v = " " if status.latitude_deg is not None else "*"
    y = "A" if status.leap_within_hour else " "
    text = (f"{STX}D:{t.day:02d}.{t.month:02d}.{t.year % 100:02d};T:{weekday};"
            f"U:{t.hour:02d}.{t.minute:02d}.{t.second:02d};{u}{v}U{y}{ETX}")
    return text.encode("ascii")


FORMATS = {"zda": lambda t, s: zda(t), "rmc": rmc, "meinberg": meinberg}


def time_string(kind: str, t: UtcTime, status: StringStatus) -> bytes:
    """One of ``zda``, ``rmc``, ``zda+rmc`` (both, ZDA first) or ``meinberg``."""
    if kind == "zda+rmc":
        return zda(t) + rmc(t, status)
    try:
        return FORMATS[kind](t, status)
    except KeyError:
        raise ValueError(f"serial time string {kind!r}: expected zda, rmc, zda+rmc or meinberg") from None
