"""Unicore receivers' ASCII command set: the set-up commands for a plan, their answers, and the version log.

Pure core.  Unicore high-precision boards (UM980/UM982 with N4 firmware, and the earlier boards of the manual named
below) take abbreviated ASCII commands ended by CR LF and answer each one on the same port with a line in NMEA framing
that echoes the command as it was typed::

    MODE BASE TIME 3600 10 10                  ->  $command,MODE BASE TIME 3600 10 10,response: OK*hh
    NOSUCH                                     ->  $command,NOSUCH,response: PARSING FAILD NO MATCHING FUNC  NOSUCH*hh

The answer's checksum is the XOR of everything from the '$' (included) to the '*': unlike NMEA, the '$' counts.
Queries such as VERSIONA are answered the same way and then by an ASCII log, ``#VERSIONA,<header>;<fields>*crc32``.

Where the syntax comes from:
- "Unicore Reference Commands Manual for High Precision GNSS Board and Module" (Command and Log Reference): chapter 7
  "TIMING Command" (``MODE TIMING``, ``MODE TIMING FIX lat lon hgt``, ``MODE TIMING SURVEYIN time hstd vstd``), 8.1
  ``UNLOG [port] [message]``, table 6-16 (the ASCII log header) and the logs' "32-bit CRC" field.
- UM980/UM982 (N4 firmware): ``MODE BASE lat lon hgt``, ``MODE BASE TIME seconds [hstd vstd]``, ``CONFIG PPS
  ENABLE GPS POSITIVE width_us period_ms rfdelay_ns userdelay_ns``, ``MASK`` / ``UNMASK GPS|BDS|GLO|GAL|QZSS|IRNSS``,
  ``CONFIG COMn baud``, ``GPGGA COMn 1`` and ``SAVECONFIG`` as the open-source UM980 drivers send them (SparkFun's
  Unicore GNSS library among them), not from the N4 manual; the answers, their checksum and the VERSIONA field order
  as published captures of real UM980/UM982 show them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from appliance.gnss.framer import nmea_checksum, unicore_crc32
from appliance.gnss.plan import NMEA_MESSAGES, ReceiverPlan

# The appliance's constellation names -> Unicore's system names for MASK/UNMASK.  SBAS is not masked this way: a
# plan's "sbas" is left to the receiver.
SYSTEMS = {"gps": "GPS", "beidou": "BDS", "glonass": "GLO", "galileo": "GAL", "qzss": "QZSS", "navic": "IRNSS"}
# NMEA sentence kind -> the log that turns it on.  The receiver picks the talker itself (GN when several systems
# are used), whichever prefix the log is named with.
LOGS = {kind: f"GP{kind}" for kind in NMEA_MESSAGES}
BAUDS = (9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600)
FACTORY_BAUD = 115200  # FRESET puts the ports back to 115200 baud
MODE_SYNTAXES = ("base", "timing")  # MODE BASE ... (N4: UM98x) or MODE TIMING ... (the older timing boards)
# Header of a log from a receiver that has no time yet, as a UM982 sent it before its first fix: CPU idle, time
# reference, time status, week, milliseconds, reserved, version, leap seconds, output delay (table 6-16).
NO_TIME_HEADER = "0,GPS,UNKNOWN,0,0,0,0,0,0"

_PORT = re.compile(r"COM[1-9]")
_ANSWER = re.compile(r"\$command,(.*),response:(.*)\*([0-9A-Fa-f]{2})")
_VERSION = re.compile(r"#(VERSIONA?),([^;]*);(.*)\*([0-9A-Fa-f]{8})")


@dataclass(frozen=True)
class CommandAnswer:
    """A receiver's answer to one command: the command as it echoed it, and whether it took it."""

    command: str
    ok: bool
    text: str  # "OK", or the receiver's reason ("PARSING FAILD NO MATCHING FUNC  X", "not support", ...)


@dataclass(frozen=True)
class UnicoreVersion:
    """The VERSIONA log's fields, in their order: product, firmware, authorisation code, product serial number,
    board (eFuse) ID and firmware build date."""

    model: str
    firmware: str
    auth: str = ""
    serial: str = ""
    board_id: str = ""
    build_date: str = ""


def commands(plan: ReceiverPlan, port: str = "COM1", *, mode_syntax: str = "base") -> list[str]:
    """The commands, in the order they are sent, that set a Unicore receiver up as ``plan`` says, on the port the
    appliance listens to: stop its output, timing mode, 1 Hz pulse, systems, NMEA output, baud, and SAVECONFIG
    when the plan keeps the set-up beyond RAM.  Raises ValueError for what a Unicore receiver cannot be set to."""
    if not _PORT.fullmatch(port):
        raise ValueError(f"port {port!r}: expected COM1 ... COM9")
    if mode_syntax not in MODE_SYNTAXES:
        raise ValueError(f"mode syntax {mode_syntax!r}: expected one of {', '.join(MODE_SYNTAXES)}")
    if plan.baud not in BAUDS:
        raise ValueError(f"baud {plan.baud}: a Unicore port takes {', '.join(map(str, BAUDS))}")
    out = [f"UNLOG {port}", _mode_command(plan, mode_syntax), _pps_command(plan)]
    out += _system_commands(plan.constellations)
    out += [f"{LOGS[kind]} {port} 1" for kind in NMEA_MESSAGES]
    out.append(f"CONFIG {port} {plan.baud}")
    if plan.store != "ram":
        out.append("SAVECONFIG")  # Unicore has one non-volatile store: "bbr" and "flash" both mean it
    return out


def mode_syntax_for(model: str) -> str:
    """Which MODE syntax a product takes: "base" for the UM98x (N4), "timing" for Unicore's UT timing boards, which
    are taken to follow the earlier manual's TIMING chapter (an assumption: no UT manual confirms it)."""
    return "timing" if model.upper().startswith("UT") else "base"


def _mode_command(plan: ReceiverPlan, syntax: str) -> str:
    if plan.mode == "fixed":
        where = f"{plan.fixed_lat_deg:.9f} {plan.fixed_lon_deg:.9f} {plan.fixed_height_m:.4f}"
        return f"MODE TIMING FIX {where}" if syntax == "timing" else f"MODE BASE {where}"
    if plan.survey_min_s <= 0 or plan.survey_acc_limit_m <= 0:
        raise ValueError("survey-in needs a positive duration and accuracy limit")
    # Unicore takes separate horizontal and vertical limits; the plan's one 3D limit bounds both.
    limit = _decimal(plan.survey_acc_limit_m)
    survey = f"{plan.survey_min_s} {limit} {limit}"
    return f"MODE TIMING SURVEYIN {survey}" if syntax == "timing" else f"MODE BASE TIME {survey}"


def _pps_command(plan: ReceiverPlan) -> str:
    # Width in microseconds, period in milliseconds, then the RF (cable) delay and the user delay in nanoseconds:
    # both 0, the appliance compensates the cable itself.  The pulse is aligned to GPS seconds, which are UTC's.
    polarity = "POSITIVE" if plan.pulse_rising else "NEGATIVE"
    width_us = plan.pulse_length_ms * 1000
    return f"CONFIG PPS ENABLE GPS {polarity} {width_us} {plan.pulse_period_ms} {plan.cable_delay_ns} 0"


def _system_commands(constellations: tuple[str, ...]) -> list[str]:
    if not constellations:
        return []  # the receiver's own choice
    wanted = {SYSTEMS[name] for name in constellations if name in SYSTEMS}
    if not wanted:
        raise ValueError(f"constellations {', '.join(constellations)}: none that a Unicore receiver can track alone")
    return [f"{'UNMASK' if system in wanted else 'MASK'} {system}" for system in SYSTEMS.values()]


def _decimal(value: float) -> str:
    """1.5 -> "1.5", 10.0 -> "10": millimetres at most, never an exponent."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def encode(command: str) -> bytes:
    """One command as it goes on the line: ASCII, ended by CR LF."""
    if not command.isascii() or "\r" in command or "\n" in command or not command.strip():
        raise ValueError(f"not a single ASCII command: {command!r}")
    return command.encode("ascii") + b"\r\n"


def answer_of(line: str) -> CommandAnswer | None:
    """``$command,<command>,response: <text>*hh`` -> the answer; None for any other line or a bad checksum.  The
    checksum is taken both ways: over the '$' too, as Unicore sends it, or as NMEA counts (what the framer lets
    through)."""
    text = line.strip()
    match = _ANSWER.fullmatch(text) if text.isascii() else None
    if match is None:
        return None
    body = text[: match.start(3) - 1].encode("ascii")
    if int(match.group(3), 16) not in (nmea_checksum(body), nmea_checksum(body[1:])):
        return None
    response = match.group(2).strip()
    return CommandAnswer(match.group(1), response == "OK", response)


def answer_line(command: str, response: str = "OK") -> str:
    """The answer a Unicore receiver gives to ``command`` (without the line ending)."""
    body = f"$command,{command},response: {response}"
    return f"{body}*{nmea_checksum(body.encode('ascii')):02X}"


def version_query() -> str:
    """The query whose answer names the product and its firmware (VERSIONA: the version log in ASCII)."""
    return "VERSIONA"


def parse_version(line: str) -> UnicoreVersion | None:
    """``#VERSIONA,<header>;"UM980","R4.10Build11826",...*crc32`` (or the unquoted ``#VERSION`` of older firmware)
    -> the version; None for any other line or a bad CRC.  Fields are split at commas: no published value has one."""
    text = line.strip()
    match = _VERSION.fullmatch(text) if text.isascii() else None
    if match is None or unicore_crc32(text[1 : match.start(4) - 1].encode("ascii")) != int(match.group(4), 16):
        return None
    fields = [field.strip().strip('"') for field in match.group(3).split(",")]
    if len(fields) < 2 or not fields[0] or not fields[1]:
        return None
    return UnicoreVersion(*(fields + [""] * 6)[:6])


def log_line(name: str, fields: list[str], header: str = NO_TIME_HEADER) -> str:
    """An ASCII log as a Unicore receiver sends it (without the line ending): ``#NAME,header;fields*crc32``."""
    body = f"{name},{header};{','.join(fields)}"
    return f"#{body}*{unicore_crc32(body.encode('ascii')):08x}"


def version_line(version: UnicoreVersion, header: str = NO_TIME_HEADER) -> str:
    """The VERSIONA log for ``version``, its fields quoted as N4 firmware quotes them."""
    fields = (version.model, version.firmware, version.auth, version.serial, version.board_id, version.build_date)
    return log_line("VERSIONA", [f'"{field}"' for field in fields], header)
