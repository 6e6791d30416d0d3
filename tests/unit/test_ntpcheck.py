"""The NTP cross-check poller against a fake NTP server on loopback: a thread answering mode-3 requests with a mode-4
reply whose receive and transmit timestamps are the host clock plus a chosen offset (or with a kiss-o'-death, an
unsynchronised leap indicator, a wrong origin, or nothing at all)."""

from __future__ import annotations

import logging
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Self

import pytest

from appliance.edge.ntp_poller import NtpCrossCheckPoller, NtpSample, parse_server
from appliance.timebase import ns_to_ntp_short, posix_ns_to_ntp64
from harness.missing import missing

MS = 1_000_000
TIMEOUT_S = 0.3
# ntplib carries timestamps as float seconds since 1900 (about a microsecond apart): the slack on a bound made of what
# the exchange itself measured, as tests/interop/test_ntp_packets.py allows; not an allowance for a busy host.
SLACK_NS = 100_000


@dataclass
class Behaviour:
    """What the fake server puts in its replies; tests change it between polls."""

    offset_ns: int = 50 * MS
    stratum: int = 1
    leap: int = 0
    refid: bytes = b"GPS\0"
    root_delay_ns: int = 0
    root_dispersion_ns: int = 1 * MS
    answer: bool = True
    echo_origin: bool = True


class FakeNtpServer:
    """A UDP socket on loopback and a thread that answers each client request once, as ``behaviour`` says."""

    def __init__(self, host: str = "127.0.0.1", behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        self.request_times_s: list[float] = []  # monotonic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"fake-ntp-{self.port}", daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not select.select([self.sock], [], [], 0.05)[0]:
                continue
            data, addr = self.sock.recvfrom(2048)
            if len(data) < 48 or data[0] & 0x7 != 3:
                continue
            self.requests += 1
            self.request_times_s.append(time.monotonic())
            if self.behaviour.answer:
                self.sock.sendto(self.reply(data), addr)

    def reply(self, request: bytes) -> bytes:
        b = self.behaviour
        now = posix_ns_to_ntp64(time.time_ns() + b.offset_ns)
        an_hour_ago = struct.pack("!Q", posix_ns_to_ntp64(time.time_ns() - 3600 * 10**9))
        origin = request[40:48] if b.echo_origin else an_hour_ago  # RFC 5905: a reply echoes the request's transmit
        head = struct.pack("!BBbbII4s", b.leap << 6 | 4 << 3 | 4, b.stratum, 6, -20, ns_to_ntp_short(b.root_delay_ns),
                           ns_to_ntp_short(b.root_dispersion_ns), b.refid)
        reference = struct.pack("!Q", now & ~0xFFFFFFFF)
        return head + reference + origin + struct.pack("!QQ", now, now)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def server() -> Iterator[FakeNtpServer]:
    with FakeNtpServer() as s:
        yield s


def host_time(host_ns: int) -> int:
    return host_ns


def assert_offset(sample: NtpSample, expected_ns: int) -> None:
    """The fake stamps its reply from the host clock plus its offset somewhere inside our exchange, so the measured
    offset is within half this exchange's own round trip of the truth, plus the bound the server advertises: within
    the sample's stated uncertainty, however long a busy host made the round trip.  An error of 50 ms (the fake's
    offset, or its sign) or of a second still fails unless the round trip itself took twice as long."""
    assert sample.delay_ns is not None and sample.delay_ns >= 0, sample
    assert sample.uncertainty_ns >= sample.delay_ns // 2, sample  # the round trip is in it, whatever else is
    assert abs(sample.offset_ns - expected_ns) <= sample.uncertainty_ns + SLACK_NS, sample


def poller(*servers: str, served=host_time, interval_s: float = 10.0) -> tuple[NtpCrossCheckPoller, list[NtpSample]]:
    seen: list[NtpSample] = []
    return NtpCrossCheckPoller(servers, interval_s, TIMEOUT_S, served, seen.append), seen


def test_offset_against_a_served_time_equal_to_the_host_clock(server: FakeNtpServer) -> None:
    p, seen = poller(f"127.0.0.1:{server.port}")
    before_ns = time.time_ns()
    [sample] = p.poll_once()
    after_ns = time.time_ns()
    assert seen == [sample]
    assert sample.error == ""
    assert sample.server == f"127.0.0.1:{server.port}"
    assert_offset(sample, 50 * MS)
    assert before_ns <= sample.host_ns <= after_ns
    assert sample.stratum == 1
    # root dispersion 1 ms plus half the round trip this exchange measured (short-format rounding: 1/65536 s)
    assert sample.delay_ns is not None
    assert abs(sample.uncertainty_ns - (1 * MS + sample.delay_ns // 2)) < 100_000


def test_offset_is_against_the_served_time_not_the_host_clock(server: FakeNtpServer) -> None:
    p, _ = poller(f"127.0.0.1:{server.port}", served=lambda host_ns: host_ns + 50 * MS)
    [sample] = p.poll_once()
    assert sample.error == ""
    assert_offset(sample, 0)


def test_uncertainty_is_the_root_distance(server: FakeNtpServer) -> None:
    server.behaviour.root_delay_ns, server.behaviour.root_dispersion_ns = 20 * MS, 3 * MS
    p, _ = poller(f"127.0.0.1:{server.port}")
    [sample] = p.poll_once()
    # 20/2 + 3 + half the round trip this exchange measured (short-format rounding: 1/65536 s each)
    assert sample.delay_ns is not None
    assert abs(sample.uncertainty_ns - (13 * MS + sample.delay_ns // 2)) < 100_000


def test_a_silent_server_is_an_error_after_the_timeout() -> None:
    with FakeNtpServer(behaviour=Behaviour(answer=False)) as silent:
        p, seen = poller(f"127.0.0.1:{silent.port}")
        started_s = time.monotonic()
        [sample] = p.poll_once()
        elapsed_s = time.monotonic() - started_s
    assert sample.error and (sample.offset_ns, sample.uncertainty_ns) == (0, 0)
    assert seen == [sample]
    assert TIMEOUT_S * 0.9 <= elapsed_s < 2 * TIMEOUT_S  # it waited the timeout, and once: a retry would be twice
    assert silent.requests == 1


@pytest.mark.parametrize(("change", "words"), [
    ({"stratum": 0, "refid": b"RATE"}, "kiss-o'-death 'RATE'"),
    ({"leap": 3}, "unsynchronised"),
    ({"stratum": 16}, "unsynchronised"),
    ({"echo_origin": False}, "does not echo"),
])
def test_unusable_replies_are_errors(server: FakeNtpServer, change: dict, words: str) -> None:
    for name, value in change.items():
        setattr(server.behaviour, name, value)
    p, _ = poller(f"127.0.0.1:{server.port}")
    [sample] = p.poll_once()
    assert words in sample.error
    assert sample.offset_ns == 0


def test_a_name_that_does_not_resolve_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_dns(*_: object, **__: object) -> None:  # no real DNS query: test traffic stays on loopback
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    p, _ = poller("ntp.example.invalid")
    [sample] = p.poll_once()
    assert "gaierror" in sample.error


def test_a_served_time_that_is_not_available_is_an_error(server: FakeNtpServer) -> None:
    def unavailable(_: int) -> int:
        raise LookupError("no fix yet")

    p, _ = poller(f"127.0.0.1:{server.port}", served=unavailable)
    [sample] = p.poll_once()
    assert "no fix yet" in sample.error


def test_a_failing_callback_does_not_stop_the_poll(server: FakeNtpServer, caplog: pytest.LogCaptureFixture) -> None:
    def broken(_: NtpSample) -> None:
        raise RuntimeError("bug in the caller")

    p = NtpCrossCheckPoller([f"127.0.0.1:{server.port}"] * 2, 10.0, TIMEOUT_S, host_time, broken)
    assert len(p.poll_once()) == 1  # the same server twice is one server
    assert "handling the sample" in caplog.text


def test_status_counts_failures_and_logs_only_the_changes(server: FakeNtpServer,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    name = f"127.0.0.1:{server.port}"
    p, _ = poller(name)
    assert p.status()[name]["polls"] == 0 and p.status()[name]["offset_ms"] is None
    caplog.set_level(logging.INFO, logger="appliance.ntpcheck")
    p.poll_once()
    server.behaviour.stratum, server.behaviour.refid = 0, b"DENY"
    p.poll_once()
    p.poll_once()
    row = p.status()[name]
    assert (row["polls"], row["failures"]) == (3, 2)
    assert "DENY" in row["error"]
    # The last good answer stays visible, within the uncertainty it came with (half its round trip plus the root
    # dispersion the server advertised).
    assert abs(row["offset_ms"] - 50) <= row["uncertainty_ms"] + SLACK_NS / MS and row["stratum"] == 1
    assert row["last_poll_host_ns"] > row["last_good_host_ns"]
    server.behaviour.stratum = 1
    p.poll_once()
    assert p.status()[name]["error"] == ""
    records = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "appliance.ntpcheck"]
    assert [level for level, _ in records] == [logging.WARNING, logging.INFO]  # two failures, one warning
    assert "DENY" in records[0][1] and "answers again" in records[1][1]


def test_ipv6_server_in_brackets() -> None:
    try:
        fake = FakeNtpServer("::1")
    except OSError as exc:
        missing(f"no IPv6 loopback on this host: {exc}")  # CI has it (the NTP IPv6 interop tests need it too)
    with fake:
        p, _ = poller(f"[::1]:{fake.port}")
        [sample] = p.poll_once()
    assert sample.error == ""
    assert_offset(sample, 50 * MS)


@pytest.mark.parametrize(("text", "expected"), [
    ("ntp.example.org", ("ntp.example.org", 123)),
    ("192.0.2.1:1234", ("192.0.2.1", 1234)),
    ("[::1]:1234", ("::1", 1234)),
    ("[2001:db8::1]", ("2001:db8::1", 123)),
    ("2001:db8::1", ("2001:db8::1", 123)),
])
def test_parse_server(text: str, expected: tuple[str, int]) -> None:
    assert parse_server(text) == expected


@pytest.mark.parametrize("text", ["", "host:", "host:ntp", "host:70000", "[::1", "[::1]x", ":123"])
def test_parse_server_rejects_bad_names(text: str) -> None:
    with pytest.raises(ValueError):
        parse_server(text)


def test_the_port_argument_is_the_default_port(server: FakeNtpServer) -> None:
    p = NtpCrossCheckPoller(["127.0.0.1"], 10.0, TIMEOUT_S, host_time, lambda _: None, port=server.port)
    [sample] = p.poll_once()
    assert sample.error == "" and sample.server == "127.0.0.1"


def _poller_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ntpcheck"]


def test_start_polls_at_once_and_stop_is_prompt(server: FakeNtpServer) -> None:
    got = threading.Event()
    interval_s = 30.0
    p = NtpCrossCheckPoller([f"127.0.0.1:{server.port}"], interval_s, TIMEOUT_S, host_time, lambda _: got.set())
    started_s = time.monotonic()
    p.start()
    assert got.wait(interval_s / 2), "no sample right after start"  # at once, not at the first interval's end
    stopping_s = time.monotonic()
    p.stop()
    assert time.monotonic() - stopping_s < interval_s / 2  # the stop does not wait out the interval
    assert stopping_s - started_s < interval_s / 2
    assert _poller_threads() == []
    assert server.requests == 1


def test_one_request_per_server_per_interval_even_when_it_fails() -> None:
    with FakeNtpServer(behaviour=Behaviour(answer=False)) as silent, FakeNtpServer() as good:
        seen: list[NtpSample] = []
        p = NtpCrossCheckPoller([f"127.0.0.1:{silent.port}", f"127.0.0.1:{good.port}"], 0.5, TIMEOUT_S, host_time,
                                seen.append)
        p.start()
        deadline_s = time.monotonic() + 3
        while good.requests < 3 and time.monotonic() < deadline_s:
            time.sleep(0.02)
        p.stop()
        assert _poller_threads() == []
    assert silent.requests == good.requests == 3
    gaps_s = [b - a for a, b in zip(silent.request_times_s, silent.request_times_s[1:])]
    # Retried at the next interval, not at once (a busy host may be late for one, never early).
    assert all(gap > 0.45 for gap in gaps_s), gaps_s
    assert [bool(s.error) for s in seen] == [True, False] * 3
    assert p.status()[f"127.0.0.1:{silent.port}"]["failures"] == 3
