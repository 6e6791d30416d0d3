"""The NTP cross-check poller against a real chronyd serving the host clock on loopback.

chronyd runs through ``peers.Chronyd`` (``setpriv --bounding-set -sys_time chronyd -x``: it can neither adjust nor
gain the right to adjust this machine's clock), here as a server: ``local stratum 1`` at a free port on 127.0.0.1 (and
::1 where the host has it).  Its time is then the host clock, so the poller's offset against a served time equal to
the host clock must be zero within half the exchange's own round trip (chronyd advertises no further bound), and a
served time carried 50 ms away must show as -50 ms within the same and alarm the detector.
A missing chronyd fails the test under CI=true and skips it elsewhere (``peers.require``).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from appliance.edge.ntp_poller import NtpCrossCheckPoller, NtpSample
from appliance.gnss.integrity import Level, NtpCrossCheck
from appliance.units import NS_PER_S
from harness.missing import missing
from harness.peers import Chronyd, eventually
from harness.procs import free_udp_port

pytestmark = [pytest.mark.interop]
MS = 1_000_000
TIMEOUT_S = 1.0
SPOOFED_BY_NS = 50 * MS
# ntplib carries timestamps as float seconds since 1900 (about a microsecond apart): the slack on a bound made of what
# the exchange itself measured, as tests/interop/test_ntp_packets.py allows; not an allowance for a busy host.
SLACK_NS = 100_000
NTP_SHORT_NS = NS_PER_S / 2**16  # the resolution of the root delay and dispersion on the wire


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


IPV6 = _has_ipv6_loopback()


@pytest.fixture(scope="module")
def chrony_port() -> Iterator[int]:
    """A chronyd serving its (the host's) clock at stratum 1 on a free loopback port, answering loopback only."""
    port = free_udp_port()
    lines = [f"port {port}", "bindaddress 127.0.0.1", "allow 127.0.0.1", "local stratum 1"]
    if IPV6:
        lines += ["bindaddress ::1", "allow ::1"]
    with Chronyd("\n".join(lines)) as chrony:
        probe = NtpCrossCheckPoller([f"127.0.0.1:{port}"], 10.0, TIMEOUT_S, lambda host_ns: host_ns, lambda _: None)
        eventually(lambda: not probe.poll_once()[0].error, 10, f"chronyd answering (log:\n{chrony.output()})")
        yield port


def _poll(port: int, served_ahead_ns: int = 0, host: str = "127.0.0.1") -> list[NtpSample]:
    server = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    p = NtpCrossCheckPoller([server], 10.0, TIMEOUT_S, lambda host_ns: host_ns + served_ahead_ns, lambda _: None)
    return [p.poll_once()[0] for _ in range(3)]


def _assert_sane(sample: NtpSample) -> None:
    assert sample.error == "", sample
    assert sample.stratum == 1
    # chronyd's local reference advertises no root delay and no root dispersion (at most a unit of the NTP short
    # format): the uncertainty is half this exchange's own round trip, however long a busy host made it.
    assert sample.delay_ns is not None and sample.delay_ns > 0, sample
    assert 0 < sample.uncertainty_ns and abs(sample.uncertainty_ns - sample.delay_ns / 2) <= NTP_SHORT_NS + 1, sample


def _assert_offset(sample: NtpSample, expected_ns: int) -> None:
    # chronyd serves the host clock and stamps the request and its reply inside our exchange: the offset is within
    # half the exchange's round trip of the truth, plus what chronyd advertises: the sample's uncertainty.
    assert abs(sample.offset_ns - expected_ns) <= sample.uncertainty_ns + SLACK_NS, sample


def test_offset_against_the_host_clock_is_near_zero(chrony_port: int) -> None:
    for sample in _poll(chrony_port):
        _assert_sane(sample)
        _assert_offset(sample, 0)
        assert NtpCrossCheck().update(sample.offset_ns, sample.uncertainty_ns).verdict is Level.OK


def test_a_served_time_carried_away_shows_and_alarms(chrony_port: int) -> None:
    for sample in _poll(chrony_port, served_ahead_ns=SPOOFED_BY_NS):
        _assert_sane(sample)
        _assert_offset(sample, -SPOOFED_BY_NS)  # NTP minus served: behind by 50 ms
        assert NtpCrossCheck().update(sample.offset_ns, sample.uncertainty_ns).verdict is Level.SPOOFED


def test_ipv6_server_in_brackets(chrony_port: int) -> None:
    if not IPV6:
        missing("no IPv6 loopback on this host")  # CI has it (the NTP IPv6 interop tests need it too)
    for sample in _poll(chrony_port, host="::1"):
        _assert_sane(sample)
        _assert_offset(sample, 0)


def test_the_thread_polls_chronyd_and_stops(chrony_port: int) -> None:
    server = f"127.0.0.1:{chrony_port}"
    seen: list[NtpSample] = []
    two = threading.Event()

    def on_sample(sample: NtpSample) -> None:
        seen.append(sample)
        if len(seen) >= 2:
            two.set()

    p = NtpCrossCheckPoller([server], 0.3, TIMEOUT_S, lambda host_ns: host_ns, on_sample)
    p.start()
    try:
        assert two.wait(5), seen
    finally:
        p.stop()
    assert not any(t.name == "ntpcheck" for t in threading.enumerate())
    row = p.status()[server]
    assert row["polls"] == len(seen) >= 2 and row["failures"] == 0 and row["error"] == ""
    for sample in seen:
        _assert_sane(sample)
        _assert_offset(sample, 0)
    # the status shows the last sample, with the uncertainty it came with
    last = seen[-1]
    assert (row["offset_ms"], row["uncertainty_ms"]) == (last.offset_ns / 1e6, last.uncertainty_ns / 1e6)
    assert row["stratum"] == 1
