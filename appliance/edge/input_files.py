"""The files the core parses, read: the leap-seconds list, the NTP keys file, the PTP security associations file and
a receiver capture.

Edge module (file reads).  Each reader reads the file it is given and hands the text or bytes to the core's parser
(``leap.LeapTable.parse``, ``auth.parse_keys``, ``security.parse_sa_file``, ``replay.strip_header``), which never
opens a file itself; a file that cannot be read is reported as that parser reports a bad one.
"""

from __future__ import annotations

import logging
from os import PathLike
from pathlib import Path

from appliance import leap
from appliance.config import Config
from appliance.gnss.replay import strip_header
from appliance.protocol.ntp.auth import KeysFileError, KeyTable, parse_keys
from appliance.protocol.ptp.security import SaFileError, SecurityAssociation, parse_sa_file

log = logging.getLogger("appliance")


def read_leap_file(path: str | PathLike[str]) -> leap.LeapTable:
    """An operator-supplied leap-seconds file (the IERS ``leap-seconds.list`` format)."""
    return leap.LeapTable.parse(Path(path).read_text(encoding="utf-8"), str(path))


def load_leap_table(config: Config) -> leap.LeapTable:
    """The packaged table, or the configured file (``clock.leap_file``) if it expires later; a bad file is logged
    and ignored."""
    table = leap.LeapTable.load_default()
    path = config.clock.leap_file
    if path:
        try:
            other = read_leap_file(path)
        except (OSError, ValueError) as exc:
            log.error("clock.leap_file %s not used: %s", path, exc)
            return table
        if (other.expires_posix_s or 0) > (table.expires_posix_s or 0):
            return other
    return table


def load_keys_file(path: str | Path) -> KeyTable:
    """Read and parse an NTP keys file; raises KeysFileError listing every problem."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise KeysFileError([f"{path}: cannot read keys file: {exc.strerror or type(exc).__name__}"]) from None
    # Undecodable bytes become U+FFFD, which the printable-ASCII check then reports on their line.
    return parse_keys(raw.decode("utf-8", errors="replace"), str(path))


def load_sa_file(path: str | Path) -> dict[int, SecurityAssociation]:
    """Read and parse a PTP security association file (linuxptp's sa_file); raises SaFileError."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SaFileError([f"{path}: cannot read the security association file: "
                           f"{exc.strerror or type(exc).__name__}"]) from None
    return parse_sa_file(raw.decode("utf-8", errors="replace"), str(path))


def read_capture(path: str | Path) -> bytes:
    """A receiver capture file, its leading ``#`` comment lines stripped."""
    return strip_header(Path(path).read_bytes())
