"""Syslog forwarding of audit records (appliance.audit.syslog): exact RFC 5424 bytes, and UDP delivery on loopback
that never raises into the caller."""

from __future__ import annotations

import socket

import pytest

from appliance.audit.chain import AuditRecord
from appliance.audit.forwarder import SyslogForwarder
from appliance.audit.syslog import FACILITIES, facility_code, format_rfc5424, rfc5424_timestamp, severity_of
from appliance.leap import UtcTime

HASH = "ab" * 32


def record(kind: str = "alarm.raised", actor: str = "system", text: str = "GNSS receiver has no fix",
           detail: dict | None = None, seq: int = 12) -> AuditRecord:
    return AuditRecord(seq, 1_800_000_037_000_000_000, kind, actor, text, detail or {}, "0" * 64, HASH)


def test_rfc5424_bytes_exactly() -> None:
    message = format_rfc5424(record(detail={"severity": "major"}), "gm1", utc_label="2026-12-03T10:00:00.123456789Z")
    assert message == (b'<107>1 2026-12-03T10:00:00.123456Z gm1 appliance - alarm.raised '
                       b'[audit@32473 seq="12" kind="alarm.raised" actor="system" hash="' + HASH.encode() + b'" prev="' + b"0" * 64 + b'"] '
                       b"\xef\xbb\xbfGNSS receiver has no fix")


def test_structured_data_escapes_quote_backslash_and_bracket() -> None:
    message = format_rfc5424(record("login.failed", 'ev"il\\user]', "bad password for über"), "gm1",
                             utc_label="2026-12-03T10:00:00Z", facility=FACILITIES["authpriv"])
    assert message == (b'<84>1 2026-12-03T10:00:00Z gm1 appliance - login.failed '
                       b'[audit@32473 seq="12" kind="login.failed" actor="ev\\"il\\\\user\\]" hash="'
                       + HASH.encode() + b'" prev="' + b"0" * 64 + b'"] \xef\xbb\xbfbad password for \xc3\xbcber')


def test_header_fields_are_printable_ascii_and_an_empty_msg_is_left_out() -> None:
    message = format_rfc5424(record("config.change", text=""), "my host", utc_label="-", app_name="",
                             facility=FACILITIES["local0"])
    assert message == (b'<133>1 - my_host - - config.change [audit@32473 seq="12" kind="config.change" '
                       b'actor="system" hash="' + HASH.encode() + b'" prev="' + b"0" * 64 + b'"]')


def test_leap_second_and_precision_in_the_timestamp() -> None:
    assert rfc5424_timestamp(UtcTime(2016, 12, 31, 23, 59, 60, 500_000_000)) == "2016-12-31T23:59:59.999999Z"
    assert rfc5424_timestamp(UtcTime(2026, 12, 3, 10, 0, 0, 1_999)) == "2026-12-03T10:00:00.000001Z"
    with pytest.raises(ValueError, match="UTC label"):
        format_rfc5424(record(), "gm1", utc_label="yesterday")


@pytest.mark.parametrize(("kind", "detail", "severity"), [
    ("alarm.raised", {"severity": "critical"}, 3), ("alarm.raised", {"severity": "major"}, 3),
    ("alarm.raised", {"severity": "warning"}, 4), ("alarm.raised", {}, 4), ("alarm.cleared", {}, 5),
    ("login.failed", {}, 4), ("login", {}, 5), ("config.change", {}, 5), ("command", {}, 5), ("start", {}, 5),
    ("clock.state", {}, 6), ("reference", {}, 6), ("output", {}, 6), ("checkpoint", {}, 6), ("unknown", {}, 6)])
def test_severity_follows_the_kind(kind: str, detail: dict, severity: int) -> None:
    assert severity_of(record(kind, detail=detail)) == severity


def test_facility_names_and_numbers() -> None:
    assert facility_code("local7") == 23 and facility_code("AUDIT") == 13 and facility_code("4") == 4
    for bad in ("24", "nope", -1):
        with pytest.raises(ValueError, match="syslog facility"):
            facility_code(bad)


def test_udp_delivery_on_loopback() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as collector:
        collector.bind(("127.0.0.1", 0))
        collector.settimeout(5)
        port = collector.getsockname()[1]
        forwarder = SyslogForwarder("127.0.0.1", port, "local3", hostname="gm1")
        assert forwarder.send(record(), "2026-12-03T10:00:00Z")
        data, _ = collector.recvfrom(65_535)
        assert data == format_rfc5424(record(), "gm1", utc_label="2026-12-03T10:00:00Z", facility=19)
        status = forwarder.status()
        assert (status.target, status.sent, status.errors, status.last_error) == (f"127.0.0.1:{port}", 1, 0, None)
        forwarder.close()


def test_failures_are_counted_never_raised() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as collector:
        collector.bind(("127.0.0.1", 0))
        forwarder = SyslogForwarder("127.0.0.1", collector.getsockname()[1], 13, hostname="gm1")
        assert not forwarder.send(record(text="x" * 70_000), "2026-12-03T10:00:00Z")  # EMSGSIZE
        assert not forwarder.send(record(), "not a time")
        forwarder.close()
        assert not forwarder.send(record(), "2026-12-03T10:00:00Z")
        status = forwarder.status()
        assert (status.sent, status.errors) == (0, 3)
        assert status.last_error == "record 12 not sent: closed"
