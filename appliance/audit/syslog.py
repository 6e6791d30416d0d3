"""Audit records as syslog messages: RFC 5424 formatting, the octet-counted framing of RFC 6587 and RFC 5425, and
the collector's address (``audit.syslog``).

Pure: no I/O.  ``appliance.audit.forwarder`` sends what is built here.  Each message carries its record's place in
the chain as RFC 5424 structured data, ``[audit@32473 seq="41" kind=".." actor=".." hash=".." prev=".."
chain=".."]``: a copy on another machine of each record's seq and hash (and of the chain's id, the hash of its record
1) is what makes a rollback, a deletion or a chain started afresh on the box visible (``appliance.audit.remote``).
"""

from __future__ import annotations

import re
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
TRANSPORTS = ("udp", "tcp", "tls")
DEFAULT_PORTS = {"udp": 514, "tcp": 514, "tls": 6514}  # RFC 5426 3.3, RFC 5425 4.1 (6514); 514/tcp by custom
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
                   facility: int = DEFAULT_FACILITY, chain_id: str = "") -> bytes:
    """One RFC 5424 message: PRI from ``facility`` and the record's severity, TIMESTAMP from ``utc_label`` (an ISO
    UTC label such as ``str(leap.tai_to_utc(...))``), MSGID the kind, the seq, kind, actor, hash, previous hash and
    chain id (left out when "") as the structured data ``[audit@32473 ...]``, and the text as a UTF-8 MSG."""
    if not 0 <= facility <= 23:
        raise ValueError(f"syslog facility {facility}: must be 0-23")
    pri = facility * 8 + severity_of(record)
    params = (("seq", str(record.seq)), ("kind", record.kind), ("actor", record.actor), ("hash", record.hash),
              ("prev", record.prev_hash)) + ((("chain", chain_id),) if chain_id else ())
    sd = f"[{SD_ID} " + " ".join(f'{name}="{_sd_value(value)}"' for name, value in params) + "]"
    header = (f"<{pri}>1 {_timestamp_field(utc_label)} {_header_field(hostname, 255)} {_header_field(app_name, 48)}"
              f" - {_header_field(record.kind, 32)} {sd}")
    message = header.encode("utf-8")
    return message + b" " + _BOM + record.text.encode("utf-8") if record.text else message


def octet_counted(message: bytes) -> bytes:
    """One frame of a syslog stream: ``MSG-LEN SP SYSLOG-MSG`` (RFC 6587 3.4.1 over TCP, RFC 5425 4.3 over TLS)."""
    return b"%d %s" % (len(message), message)


@dataclass(frozen=True)
class SyslogTarget:
    """Where forwarded records go: ``transport`` one of TRANSPORTS."""

    transport: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.transport}://{host}:{self.port}"


def parse_target(text: str) -> SyslogTarget:
    """``audit.syslog``: ``tls://HOST[:PORT]`` (RFC 5425, port 6514), ``tcp://HOST[:PORT]`` (RFC 6587 octet
    counting, port 514), ``udp://HOST[:PORT]`` or ``HOST:PORT`` (RFC 5426); an IPv6 address in brackets.
    ValueError naming the value otherwise."""
    scheme, sep, rest = text.strip().partition("://")
    if not sep:  # HOST:PORT as before transports were chosen: UDP, the last ':' before the port
        host, _, port_text = text.strip().rpartition(":")
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"audit.syslog {text!r}: expected HOST:PORT, or tls://HOST[:PORT], tcp://HOST[:PORT]")
        return SyslogTarget("udp", host.strip("[]"), int(port_text))
    scheme = scheme.lower()
    match = _HOST_PORT.fullmatch(rest) or _HOST_ONLY.fullmatch(rest)
    if scheme not in TRANSPORTS or match is None:
        raise ValueError(f"audit.syslog {text!r}: expected tls://HOST[:PORT], tcp://HOST[:PORT], "
                         "udp://HOST[:PORT] or HOST:PORT")
    host = match["v6"] or match["host"]
    port = int(match["port"]) if match.groupdict().get("port") else DEFAULT_PORTS[scheme]
    if not 0 < port < 65536:
        raise ValueError(f"audit.syslog {text!r}: port {port} is not 1-65535")
    return SyslogTarget(scheme, host, port)


_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.%\w]+)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>\d{1,5})")
_HOST_ONLY = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.%\w]+)\]|(?P<host>[A-Za-z0-9._-]+))")
