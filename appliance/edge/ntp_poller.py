"""Poll configured NTP servers and report their time against the served time: the I/O edge of the integrity monitor's
NTP cross-check (``NtpCrossCheck`` in ``integrity``).

I/O edge: a daemon thread sends one ntplib request per server per interval and reads the host clock.  The cross-check
is coarse (milliseconds) but independent of the sky, so it bounds how far a spoofer can carry the served clock.  A
failed query (timeout, DNS, kiss-o'-death, unsynchronised server) is reported as an ``NtpSample`` with ``error`` set,
never raised; a failing server is retried at the next interval only, so a dead server never draws a burst.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ntplib

from appliance.units import NS_PER_S

log = logging.getLogger("appliance.ntpcheck")

NTP_VERSION = 4
LEAP_UNSYNCHRONISED = 3  # RFC 5905 7.3: LI 3 "unknown (clock unsynchronized)"
MAX_STRATUM = 15  # RFC 5905 7.3: 16 means unsynchronized, above that reserved
# ntplib carries timestamps as float seconds since 1900: ~0.5 us resolution, and its packing round-trips the
# originate timestamp to within a few us.  The echo check only needs to catch a reply to some other request.
_ECHO_SLACK_NS = 1_000_000


@dataclass(frozen=True)
class NtpSample:
    """One query of one server.  ``offset_ns`` is the server's time minus the served time at ``host_ns`` (host
    CLOCK_REALTIME at the middle of the exchange); ``uncertainty_ns`` is the server's root distance as seen from here
    (root delay/2 + root dispersion + round-trip delay/2).  When ``error`` is set the numbers are 0 and mean nothing,
    and ``host_ns`` is when the query began."""

    server: str
    host_ns: int
    offset_ns: int
    uncertainty_ns: int
    stratum: int
    error: str = ""
    delay_ns: int | None = None  # the exchange's round-trip delay (the clock filter prefers the shortest)


def parse_server(server: str, default_port: int = 123) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a bare IPv6 address -> (host, port).  A bad port is a
    configuration error, raised here rather than at every poll."""
    text = server.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not host or (rest and not rest.startswith(":")):
            raise ValueError(f"NTP server {server!r}: expected [address] or [address]:port")
        return host, _port(server, rest[1:]) if rest else default_port
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        if not host:
            raise ValueError(f"NTP server {server!r}: no host")
        return host, _port(server, port)
    if not text:
        raise ValueError("NTP server: empty name")
    return text, default_port  # a name, an IPv4 address, or a bare IPv6 address (more than one colon)


def _port(server: str, text: str) -> int:
    # Five ASCII digits at most: str.isdigit() also takes '²', and int() refuses that and over 4300 digits.
    if not (text.isascii() and text.isdigit() and len(text) <= 5) or not 0 < int(text) < 65536:
        raise ValueError(f"NTP server {server!r}: bad port {text[:10]!r}")
    return int(text)


@dataclass
class _ServerState:
    host: str
    port: int
    polls: int = 0
    failures: int = 0
    failing: bool = False
    last: NtpSample | None = None  # the last sample, good or bad
    last_good: NtpSample | None = None


class NtpCrossCheckPoller:
    """Queries every server once per ``interval_s`` from a daemon thread and hands each ``NtpSample`` to
    ``on_sample`` (called on the poller thread: wrap it with ``loop.call_soon_threadsafe`` to reach the loop).
    ``served_posix_ns_at_host(host_ns)`` is the appliance's served time (POSIX ns) at a host CLOCK_REALTIME instant;
    ntplib measures the server against the host clock, and this turns that into the server against the served time."""

    def __init__(self, servers: Sequence[str], interval_s: float, timeout_s: float,
                 served_posix_ns_at_host: Callable[[int], int], on_sample: Callable[[NtpSample], None],
                 port: int = 123):
        if interval_s <= 0 or timeout_s <= 0:
            raise ValueError("interval_s and timeout_s must be positive")
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self._served_at = served_posix_ns_at_host
        self._on_sample = on_sample
        self._servers = {s: _ServerState(*parse_server(s, port)) for s in servers}
        self._client = ntplib.NTPClient()
        self._lock = threading.Lock()  # status() is read from other threads
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- thread -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start polling; the first poll is immediate."""
        if self._thread is not None:
            raise RuntimeError("NtpCrossCheckPoller already started")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ntpcheck", daemon=True)
        self._thread.start()

    def stop(self, join_timeout_s: float | None = None) -> None:
        """Stop promptly: the wait between polls ends at once; a query in flight ends within its timeout."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + 1.0 if join_timeout_s is None else join_timeout_s)
            if self._thread.is_alive():  # kept, so that start() cannot run a second poller beside it
                log.warning("NTP cross-check poller did not stop within the join timeout")
            else:
                self._thread = None

    def _run(self) -> None:
        # Polls are due on a fixed monotonic schedule; a poll that overran (many dead servers) is followed by the next
        # one only after a full interval, so the servers never see a burst of catch-up requests.
        while not self._stop.is_set():
            started_s = time.monotonic()
            try:
                self._poll(interruptible=True)
            except Exception:  # a bug here must not end the cross-check for good
                log.exception("NTP cross-check poll failed")
            self._stop.wait(max(0.0, started_s + self.interval_s - time.monotonic()))

    # --- one poll -----------------------------------------------------------------------------------------------
    def poll_once(self) -> list[NtpSample]:
        """Query every server once (sequentially, each bounded by ``timeout_s`` once its name is resolved: the
        resolver's own timeout is the system's), record and hand on the samples."""
        return self._poll(interruptible=False)

    def _poll(self, interruptible: bool) -> list[NtpSample]:
        samples = []
        for server, state in self._servers.items():
            if interruptible and self._stop.is_set():  # stop() waits for one query at most, not a whole round
                break
            sample = self._query(server, state.host, state.port)
            self._record(server, state, sample)
            samples.append(sample)
            try:
                self._on_sample(sample)
            except Exception:
                log.exception("NTP cross-check: handling the sample of %s failed", server)
        return samples

    def _query(self, server: str, host: str, port: int) -> NtpSample:
        before_ns = time.time_ns()
        try:
            stats = self._client.request(host, version=NTP_VERSION, port=port, timeout=self.timeout_s)
        except ntplib.NTPException as exc:  # no reply within the timeout, or not an NTP packet
            return _failed(server, before_ns, str(exc))
        except Exception as exc:  # noqa: BLE001 - DNS (gaierror), unreachable; ntplib's limits (struct.error past 2036)
            return _failed(server, before_ns, f"{type(exc).__name__}: {exc}")
        after_ns = time.time_ns()
        refused = _refusal(stats, before_ns, after_ns)
        if refused:
            return _failed(server, before_ns, refused)
        host_ns = _ntp_to_posix_ns((stats.orig_timestamp + stats.dest_timestamp) / 2)
        try:
            served_ns = self._served_at(host_ns)
        except Exception as exc:  # noqa: BLE001 - no served time yet (e.g. before the first fix)
            return _failed(server, host_ns, f"served time unavailable: {exc}")
        offset_ns = round(stats.offset * NS_PER_S) + host_ns - served_ns
        distance_s = stats.root_delay / 2 + stats.root_dispersion + max(0.0, stats.delay) / 2
        return NtpSample(server, host_ns, offset_ns, round(distance_s * NS_PER_S), stats.stratum,
                         delay_ns=round(max(0.0, stats.delay) * NS_PER_S))

    def _record(self, server: str, state: _ServerState, sample: NtpSample) -> None:
        with self._lock:
            state.polls += 1
            state.last = sample
            if sample.error:
                state.failures += 1
            else:
                state.last_good = sample
            was_failing, state.failing = state.failing, bool(sample.error)
        # Logged on the change only: a server down for a day is one warning, not one per interval.
        if sample.error and not was_failing:
            log.warning("NTP cross-check: %s failed: %s (retrying every %g s)", server, sample.error,
                        self.interval_s)
        elif was_failing and not sample.error:
            log.info("NTP cross-check: %s answers again (offset %+.3f ms)", server, sample.offset_ns / 1e6)

    # --- read model ---------------------------------------------------------------------------------------------
    def status(self) -> dict[str, dict[str, Any]]:
        """Per server: the last good offset and uncertainty (ms; None before the first answer), its stratum, the last
        poll's error ("" when it answered), poll and failure counts, and the host ns of the last poll and answer."""
        with self._lock:
            return {server: _status_row(state) for server, state in self._servers.items()}


def _status_row(state: _ServerState) -> dict[str, Any]:
    good, last = state.last_good, state.last
    return {
        "offset_ms": None if good is None else good.offset_ns / 1e6,
        "uncertainty_ms": None if good is None else good.uncertainty_ns / 1e6,
        "stratum": None if good is None else good.stratum,
        "error": "" if last is None else last.error,
        "polls": state.polls,
        "failures": state.failures,
        "last_poll_host_ns": None if last is None else last.host_ns,
        "last_good_host_ns": None if good is None else good.host_ns,
    }


def _refusal(stats: ntplib.NTPStats, before_ns: int, after_ns: int) -> str:
    """Why a decoded reply cannot be used as a time sample ("" if it can)."""
    if stats.mode != 4:  # RFC 5905 7.3: mode 4 is server
        return f"reply has mode {stats.mode}, not server (4)"
    if stats.stratum == 0:  # RFC 5905 7.4: a kiss-o'-death packet carries its code in the reference ID
        return f"kiss-o'-death {_kiss_code(stats.ref_id)!r}"
    if stats.leap == LEAP_UNSYNCHRONISED or stats.stratum > MAX_STRATUM:
        return f"server unsynchronised (leap {stats.leap}, stratum {stats.stratum})"
    if stats.tx_timestamp == 0:
        return "reply has no transmit timestamp"
    # ntplib does not check that the reply answers our request (RFC 5905 8: the origin timestamp must echo ours).
    orig_ns = _ntp_to_posix_ns(stats.orig_timestamp)
    if not before_ns - _ECHO_SLACK_NS <= orig_ns <= after_ns + _ECHO_SLACK_NS:
        return "reply does not echo our request's transmit timestamp"
    return ""


def _kiss_code(ref_id: int) -> str:
    return ref_id.to_bytes(4, "big").rstrip(b"\0").decode("ascii", "replace")


def _ntp_to_posix_ns(ntp_s: float) -> int:
    return round(ntplib.ntp_to_system_time(ntp_s) * NS_PER_S)


def _failed(server: str, host_ns: int, error: str) -> NtpSample:
    return NtpSample(server, host_ns, 0, 0, 0, error or "query failed")
