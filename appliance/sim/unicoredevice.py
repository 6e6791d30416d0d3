"""A simulated Unicore board's command port: command bytes in, its answers out, and what its set-up means kept as
plain attributes a test can read.

Pure (the simulated world): no clock, no I/O.  It answers as a UM980 does (see ``gnss/unicore.py`` for where the
syntax and the answers come from): every command line gets ``$command,<the line>,response: OK`` or an error answer;
VERSIONA is followed by the version log and a bare MODE or CONFIG by the set-up it asks about.  Factory state: the
rover mode, all six systems, the 1 Hz pulse 500 ms long rising on GPS seconds, NMEA GGA, GSA, GSV and RMC every
second on the appliance's port, 115200 baud.  115200 is what FRESET restores; the pulse is as UM980s were seen
reporting theirs; the message set is this simulator's choice, unconfirmed for real boards.

Test knobs: ``refuse`` and ``silent`` hold command prefixes (``"CONFIG"``, ``"CONFIG PPS"``, ``"GPZDA"``): a command
starting with one is answered with an error, or never answered, and changes nothing.  ``reset()`` is a power cycle: the
set-up falls back to the last SAVECONFIG, or to the factory's.
"""

from __future__ import annotations

import copy
import re

from appliance.gnss.framer import nmea_checksum
from appliance.gnss.unicore import (BAUDS, FACTORY_BAUD, NO_TIME_HEADER, SYSTEMS, UnicoreVersion, answer_line,
                                    mode_syntax_for, version_line)

NMEA_KINDS = ("GGA", "GLL", "GNS", "GSA", "GST", "GSV", "RMC", "VTG", "ZDA")
FACTORY_MESSAGES = ("GGA", "GSA", "GSV", "RMC")
NAMES = {system: name for name, system in SYSTEMS.items()}  # BDS -> beidou ...
# Error answers.  The first is what a UM980 answered to a word it does not know; the second what one answered to a
# command it would not carry out.
UNKNOWN = "PARSING FAILD NO MATCHING FUNC  {}"
NOT_SUPPORTED = "not support"
_WRAPPED = re.compile(r"\$(.*)\*([0-9A-Fa-f]{2})")  # a command may also be sent in NMEA framing: $VERSIONA*1B
_PORT = re.compile(r"COM[1-9]")
_NMEA_LOG = "GPxxx / GNxxx"  # the handlers' key for every NMEA log (no command word has a space)
_STATE = ("message_period_s", "timing_mode", "survey_min_s", "survey_limits_m", "fixed_llh", "pps_enabled",
          "pps_time_ref", "pulse_width_us", "pulse_period_ms", "pulse_rising", "rf_delay_ns", "user_delay_ns",
          "constellations", "baud")


class SimUnicore:
    """One board, seen from the appliance's port (``port``, COM1 by default)."""

    def __init__(self, model: str = "UM980", firmware: str = "R4.10Build11826", serial: str = "SIM0000000001",
                 port: str = "COM1") -> None:
        self.version = UnicoreVersion(model, firmware, "HRPT00-S10C-P", serial, "0000000000000000", "2023/11/24")
        self.port = port
        self.refuse: set[str] = set()
        self.silent: set[str] = set()
        self.received: list[str] = []  # every command line, in order, answered or not
        self._timing_syntax = mode_syntax_for(model) == "timing"
        self._pending = b""
        self._factory()
        self._saved = self._snapshot()

    # --- what the set-up means ------------------------------------------------------------------------------
    message_period_s: dict[str, float]  # NMEA sentence kind -> output period on the appliance's port
    timing_mode: str  # "disabled" (rover), "survey" (self-surveying base / timing) or "fixed"
    survey_min_s: int | None
    survey_limits_m: tuple[float, float] | None  # horizontal and vertical standard deviation limits
    fixed_llh: tuple[float, float, float] | None  # degrees, degrees, metres
    pps_enabled: bool
    pps_time_ref: str
    pulse_width_us: int
    pulse_period_ms: int
    pulse_rising: bool
    rf_delay_ns: int  # the receiver's own cable delay compensation
    user_delay_ns: int
    constellations: set[str]  # gps, glonass, galileo, beidou, qzss, navic
    baud: int  # of the appliance's port

    @property
    def messages(self) -> set[str]:
        return set(self.message_period_s)

    @property
    def survey_acc_limit_m(self) -> float | None:
        """The looser of the two survey limits, or None where the survey was started without them."""
        return max(self.survey_limits_m) if self.survey_limits_m else None

    @property
    def pulse_length_ms(self) -> float:
        return self.pulse_width_us / 1000

    # --- the port -------------------------------------------------------------------------------------------
    def accept(self, data: bytes) -> bytes:
        """Bytes the appliance wrote -> the bytes the board answers.  A line ends at CR, LF or both; an unfinished
        line waits for the rest; bytes other than printable ASCII are dropped."""
        lines = re.split(rb"[\r\n]", self._pending + data)
        self._pending = lines.pop()
        out = b""
        for raw in lines:
            line = bytes(b for b in raw if 0x20 <= b <= 0x7E).decode("ascii").strip()  # what it can echo back
            if line:
                self.received.append(line)
                out += self._answer(line)
        return out

    def reset(self) -> None:
        """Power cycle: back to the last saved set-up; a half-received line is lost."""
        self._restore(self._saved)
        self._pending = b""

    def _answer(self, line: str) -> bytes:
        command = _unwrap(line)
        echo = command or line  # the answer echoes the command, without the framing it may have come in
        if _matches(echo, self.silent):
            return b""
        if _matches(echo, self.refuse):
            return _line(answer_line(echo, NOT_SUPPORTED))
        words = command.upper().split() if command else ["?"]
        handler = self._HANDLERS.get(_NMEA_LOG if _nmea_kind(words[0]) else words[0])
        if handler is None:
            return _line(answer_line(echo, UNKNOWN.format(words[0])))
        before = self._snapshot()
        try:
            extra = handler(self, words)
        except (ValueError, IndexError):
            self._restore(before)  # a bad argument changes nothing
            return _line(answer_line(echo, NOT_SUPPORTED))
        return _line(answer_line(echo)) + extra

    # --- commands: each takes the upper-cased words, changes the set-up, returns what follows the answer ----------
    def _unlog(self, words: list[str]) -> bytes:
        args = words[1:]
        port = args.pop(0) if args and _PORT.fullmatch(args[0]) else self.port
        if len(args) > 1 or (args and not _nmea_kind(args[0])):
            raise ValueError("UNLOG [port] [message]")
        if port == self.port:
            if args:
                self.message_period_s.pop(_nmea_kind(args[0]), None)
            else:
                self.message_period_s.clear()
        return b""

    def _mode(self, words: list[str]) -> bytes:
        args = words[1:]
        if not args:
            return _line(_mode_log(self._mode_text()))
        if args[0] == "ROVER":
            self._set_mode("disabled")
        elif args[0] == "BASE" and args[1:2] == ["TIME"]:
            self._survey(args[2:])
        elif args[0] == "BASE" and len(args) == 4:
            self._fix(args[1:])
        elif args[0] == "TIMING" and self._timing_syntax:
            self._timing(args[1:])
        else:
            raise ValueError("unknown MODE")
        return b""

    def _timing(self, args: list[str]) -> None:
        if not args:
            self._set_mode("disabled")  # timing from the running position fix: no fixed position
        elif args[0] == "SURVEYIN" and len(args) == 4:
            self._survey(args[1:])
        elif args[0] == "FIX" and len(args) == 4:
            self._fix(args[1:])
        else:
            raise ValueError("unknown MODE TIMING")

    def _survey(self, args: list[str]) -> None:
        if len(args) not in (1, 3) or int(args[0]) <= 0:
            raise ValueError("MODE BASE TIME seconds [horizontal vertical]")
        limits = (float(args[1]), float(args[2])) if len(args) == 3 else None
        if limits and min(limits) <= 0:
            raise ValueError("survey limits must be positive")
        self._set_mode("survey")
        self.survey_min_s, self.survey_limits_m = int(args[0]), limits

    def _fix(self, args: list[str]) -> None:
        lat, lon, height = (float(a) for a in args)
        if not (-90 <= lat <= 90 and -180 <= lon <= 180):
            raise ValueError("position out of range")
        self._set_mode("fixed")
        self.fixed_llh = (lat, lon, height)

    def _set_mode(self, mode: str) -> None:
        self.timing_mode, self.survey_min_s, self.survey_limits_m, self.fixed_llh = mode, None, None, None

    def _mode_text(self) -> str:
        lead = "MODE TIMING" if self._timing_syntax else "MODE BASE"
        if self.timing_mode == "fixed" and self.fixed_llh:
            fix = " FIX" if self._timing_syntax else ""
            return f"{lead}{fix} " + " ".join(f"{v:.9f}" for v in self.fixed_llh)
        if self.timing_mode == "survey":
            survey = " SURVEYIN" if self._timing_syntax else " TIME"
            limits = "".join(f" {v:g}" for v in self.survey_limits_m or ())
            return f"{lead}{survey} {self.survey_min_s}{limits}"
        return "MODE ROVER SURVEY"

    def _config(self, words: list[str]) -> bytes:
        args = words[1:]
        if not args:
            return self._config_lines()
        if args[0] == "PPS":
            self._pps(args[1:])
        elif _PORT.fullmatch(args[0]) and len(args) >= 2 and int(args[1]) in BAUDS:
            if args[0] == self.port:
                self.baud = int(args[1])
        else:
            raise ValueError("unknown CONFIG")
        return b""

    def _pps(self, args: list[str]) -> None:
        if args == ["DISABLE"]:
            self.pps_enabled = False
            return
        if len(args) != 7 or args[0] != "ENABLE" or args[2] not in ("POSITIVE", "NEGATIVE"):
            raise ValueError("CONFIG PPS ENABLE timeref polarity width period rfdelay userdelay")
        width_us, period_ms, rf_ns, user_ns = (int(a) for a in args[3:])
        in_range = 0 < width_us < period_ms * 1000 and 50 <= period_ms <= 20_000
        if args[1] not in ("GPS", "BDS", "GAL", "GLO") or not in_range:
            raise ValueError("pulse out of range")
        self.pps_enabled, self.pps_time_ref, self.pulse_rising = True, args[1], args[2] == "POSITIVE"
        self.pulse_width_us, self.pulse_period_ms = width_us, period_ms
        self.rf_delay_ns, self.user_delay_ns = rf_ns, user_ns

    def _config_lines(self) -> bytes:
        pps = (f"CONFIG PPS ENABLE {self.pps_time_ref} {'POSITIVE' if self.pulse_rising else 'NEGATIVE'} "
               f"{self.pulse_width_us} {self.pulse_period_ms} {self.rf_delay_ns} {self.user_delay_ns}"
               if self.pps_enabled else "CONFIG PPS DISABLE")
        return _config_line(self.port, f"CONFIG {self.port} {self.baud}") + _config_line("PPS", pps)

    def _mask(self, words: list[str]) -> bytes:
        if len(words) != 2:
            raise ValueError("MASK system")
        if words[1] in NAMES:
            (self.constellations.discard if words[0] == "MASK" else self.constellations.add)(NAMES[words[1]])
        elif words[0] != "MASK" or not 0 <= float(words[1]) <= 90:  # MASK <degrees>: an elevation mask, kept aside
            raise ValueError("unknown system")
        return b""

    def _log(self, words: list[str]) -> bytes:
        args = words[1:]
        port = args.pop(0) if args and _PORT.fullmatch(args[0]) else self.port
        if len(args) > 1:
            raise ValueError("LOG [port] [period]")
        period_s = float(args[0]) if args else None  # no period: once, which this board does not model
        if period_s is not None and not 0 < period_s <= 3600:
            raise ValueError("period out of range")
        if port == self.port and period_s is not None:
            self.message_period_s[_nmea_kind(words[0])] = period_s
        return b""

    def _saveconfig(self, words: list[str]) -> bytes:
        self._saved = self._snapshot()
        return b""

    def _freset(self, words: list[str]) -> bytes:
        self._factory()
        self._saved = self._snapshot()
        return b""

    def _versiona(self, words: list[str]) -> bytes:
        return _line(version_line(self.version))

    _HANDLERS = {"UNLOG": _unlog, "MODE": _mode, "CONFIG": _config, "MASK": _mask, "UNMASK": _mask,
                 "SAVECONFIG": _saveconfig, "FRESET": _freset, "VERSIONA": _versiona, _NMEA_LOG: _log}

    # --- state ----------------------------------------------------------------------------------------------
    def _factory(self) -> None:
        self.message_period_s = {kind: 1.0 for kind in FACTORY_MESSAGES}
        self._set_mode("disabled")
        self.pps_enabled, self.pps_time_ref, self.pulse_rising = True, "GPS", True
        self.pulse_width_us, self.pulse_period_ms, self.rf_delay_ns, self.user_delay_ns = 500_000, 1000, 0, 0
        self.constellations = set(SYSTEMS)
        self.baud = FACTORY_BAUD

    def _snapshot(self) -> dict[str, object]:
        return {name: copy.deepcopy(getattr(self, name)) for name in _STATE}

    def _restore(self, state: dict[str, object]) -> None:
        for name, value in state.items():
            setattr(self, name, copy.deepcopy(value))


def _matches(line: str, prefixes: set[str]) -> bool:
    words = line.upper().split()
    return any(words[: len(p.split())] == p.upper().split() for p in prefixes if p.split())


def _unwrap(line: str) -> str | None:
    """A command sent in NMEA framing, ``$CMD*hh``, is the command; None if its checksum is wrong."""
    match = _WRAPPED.fullmatch(line)
    if match is None:
        return line
    return match.group(1) if int(match.group(2), 16) == nmea_checksum(match.group(1).encode()) else None


def _nmea_kind(word: str) -> str:
    """"GPGGA" or "GNGGA" -> "GGA"; anything else -> ""."""
    return word[2:] if word[:2] in ("GP", "GN") and word[2:] in NMEA_KINDS else ""


def _mode_log(text: str) -> str:
    """The MODE query's answer: an ASCII log whose checksum is an XOR over '#' and all up to '*'."""
    body = f"#MODE,{NO_TIME_HEADER};{text},"
    return f"{body}*{nmea_checksum(body.encode()):02X}"


def _config_line(key: str, text: str) -> bytes:
    body = f"$CONFIG,{key},{text}"
    return _line(f"{body}*{nmea_checksum(body.encode()):02X}")


def _line(text: str) -> bytes:
    return text.encode("ascii") + b"\r\n"

