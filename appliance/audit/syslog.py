"""Forward audit records to a remote syslog collector: RFC 5424 messages over UDP (RFC 5426).

``format_rfc5424`` and ``severity_of`` are pure; ``SyslogForwarder`` is an edge (a UDP socket).  A copy of each
record on another machine is what makes rewriting the local chain's tail detectable.  Forwarding is best effort by
design: it never blocks and never raises into the caller; failures are counted and shown by ``status()``.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

from appliance.audit.chain import AuditRecord
from appliance.leap import UtcTime

# RFC 5424 6.2.1 Table 1 (numbers) with the usual names.
FACILITIES = {"kern": 0, "user": 1, "mail": 2, "daemon": 3, "auth": 4, "syslog": 5, "lpr": 6, "news": 7, "uucp": 8,
              "cron": 9, "authpriv": 10, "ftp": 11, "ntp": 12, "audit": 13, "alert": 14, "clock": 15,
              **{f"local{n}": 16 + n for n in range(8)}}
DEFAULT_FACILITY = FACILITIES["audit"]  # "log audit"
# RFC 5424 6.2.1 Table 2.
EMERGENCY, ALERT, CRITICAL, ERROR, WARNING, NOTICE, INFO, DEBUG = range(8)
SD_ID = "audit@32473"  # 32473: the private enterprise number RFC 5612 reserves for documentation and examples
_BOM = b"\xef\xbb\xbf"  # RFC 5424 6.4: a UTF-8 MSG starts with the byte order mark
_NOTICE_KINDS = {"login", "config.change", "command", "start", "stop", "ptp.foreign-master"}
_GRAVE_ALARM_SEVERITIES = {"critical", "major"}
_ISO = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d):(\d\d)(?:\.(\d+))?Z")
_PRINTUSASCII = re.compile(r"[^\x21-\x7e]")
_SD_ESCAPE = re.compile(r'(["\\\]])')


def facility_code(name: str | int) -> int:
    """Facility number from a name ("local0", "audit") or a number 0-23; ValueError otherwise."""
    if isinstance(name, int) or str(name).isdigit():
        code = int(name)
        if 0 <= code <= 23:
            return code
    elif str(name).lower() in FACILITIES:
        return FACILITIES[str(name).lower()]
    raise ValueError(f"syslog facility {name!r}: expected 0-23 or one of {', '.join(FACILITIES)}")


def severity_of(record: AuditRecord) -> int:
    """Alarms raised: err when major or critical, else warning; failed logins: warning; an alarm cleared, a login
    and operator actions: notice; everything else (clock states, references, outputs, checkpoints): info."""
    if record.kind == "alarm.raised":
        grave = str(record.detail.get("severity", "")).lower() in _GRAVE_ALARM_SEVERITIES
        return ERROR if grave else WARNING
    if record.kind == "login.failed":
        return WARNING
    if record.kind == "alarm.cleared" or record.kind in _NOTICE_KINDS:
        return NOTICE
    return INFO


def rfc5424_timestamp(utc: UtcTime) -> str:
    """An RFC 5424 TIMESTAMP (microseconds, "Z") for a UTC label."""
    return _timestamp_field(str(utc))


def _timestamp_field(utc_label: str) -> str:
    # RFC 5424 6.2.3: at most 6 fraction digits, and leap seconds MUST NOT be used: 23:59:60.x is sent as
    # 23:59:59.999999 (the record itself keeps its exact TAI instant and the SD carries its hash).
    if utc_label == "-":
        return utc_label
    match = _ISO.fullmatch(utc_label)
    if match is None:
        raise ValueError(f"UTC label {utc_label!r}: expected e.g. 2026-12-03T10:00:00.123456Z")
    minute, second, fraction = match.groups()
    if second == "60":
        return f"{minute}:59.999999Z"
    micro = (fraction or "")[:6]
    return f"{minute}:{second}{'.' + micro if micro else ''}Z"


def _header_field(value: str, max_len: int) -> str:
    # RFC 5424 6.2: header fields are PRINTUSASCII without spaces; "-" is the NILVALUE.
    clean = _PRINTUSASCII.sub("_", value)[:max_len]
    return clean or "-"


def _sd_value(value: str) -> str:
    return _SD_ESCAPE.sub(r"\\\1", value)  # RFC 5424 6.3.3: '"', '\' and ']' are escaped with '\'


def format_rfc5424(record: AuditRecord, hostname: str, *, utc_label: str, app_name: str = "appliance",
                   facility: int = DEFAULT_FACILITY) -> bytes:
    """One RFC 5424 message: PRI from ``facility`` and the record's severity, TIMESTAMP from ``utc_label`` (an ISO
    UTC label such as ``str(leap.tai_to_utc(...))``), MSGID the kind, the seq, kind, actor and hash as the
    structured data ``[audit@32473 ...]``, and the text as a UTF-8 MSG."""
    if not 0 <= facility <= 23:
        raise ValueError(f"syslog facility {facility}: must be 0-23")
    pri = facility * 8 + severity_of(record)
    params = (("seq", str(record.seq)), ("kind", record.kind), ("actor", record.actor), ("hash", record.hash))
    sd = f"[{SD_ID} " + " ".join(f'{name}="{_sd_value(value)}"' for name, value in params) + "]"
    header = (f"<{pri}>1 {_timestamp_field(utc_label)} {_header_field(hostname, 255)} {_header_field(app_name, 48)}"
              f" - {_header_field(record.kind, 32)} {sd}")
    message = header.encode("utf-8")
    return message + b" " + _BOM + record.text.encode("utf-8") if record.text else message


@dataclass(frozen=True)
class ForwarderStatus:
    target: str
    sent: int
    errors: int
    last_error: str | None


class SyslogForwarder:
    """Sends formatted records to ``host:port`` over UDP.  The host is resolved once, here; a host that cannot be
    resolved leaves the forwarder counting every record as an error (see status())."""

    def __init__(self, host: str, port: int = 514, facility: int | str = DEFAULT_FACILITY, *,
                 hostname: str | None = None, app_name: str = "appliance") -> None:
        self.facility = facility_code(facility)
        self.hostname = hostname if hostname is not None else socket.gethostname()
        self.app_name = app_name
        self._target = f"{host}:{port}"
        self._sent = self._errors = 0
        self._last_error: str | None = None
        self._sock: socket.socket | None = None
        self._address: tuple[object, ...] | None = None
        self._unusable = "closed"  # why send cannot work once the socket is gone
        try:
            family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
            self._sock = socket.socket(family, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
            self._address = address
        except OSError as exc:
            self._unusable = f"cannot reach {self._target}: {exc}"
            self._note_error(self._unusable)

    def send(self, record: AuditRecord, utc_label: str) -> bool:
        """Send one record; True if it left this host.  Never raises, never blocks."""
        if self._sock is None or self._address is None:
            self._note_error(f"record {record.seq} not sent: {self._unusable}")
            return False
        try:
            datagram = format_rfc5424(record, self.hostname, utc_label=utc_label, app_name=self.app_name,
                                      facility=self.facility)
            self._sock.sendto(datagram, self._address)
        except (OSError, ValueError) as exc:  # a full buffer (BlockingIOError), EMSGSIZE ...: dropped, counted
            self._note_error(f"record {record.seq} not sent to {self._target}: {exc}")
            return False
        self._sent += 1
        return True

    def status(self) -> ForwarderStatus:
        return ForwarderStatus(self._target, self._sent, self._errors, self._last_error)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _note_error(self, text: str) -> None:
        self._errors += 1
        self._last_error = text
