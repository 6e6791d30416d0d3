"""Hardware timestamping, through an injected ioctl layer and a stand-in NIC (this machine has none that offers it):
the NIC is switched on with the right request, the raw hardware timestamp is read from its slot, and PHC time is
mapped onto the host clock with the PHC's rate; for the grandmaster port and for the upstream (slave) port alike, and
the runner both ports share, on a stand-in transport."""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
import struct
from typing import Any

import pytest

from appliance.protocol.clockmap import ClockMap
from appliance.edge.ptp import gm_service as svc
from appliance.edge.ptp import runner as run
from appliance.edge.ptp import transport as tr
from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.protocol.phcmap import PhcMap, tightest
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.profiles import load_profile, resolve
from appliance.edge.ptp import slave_service as pss
from appliance.refs.ptp_slave import SlaveConfig

S = 1_000_000_000


def test_the_nic_is_asked_for_ptp_event_timestamps_then_for_all() -> None:
    calls = []

    def ioctl(fd: int, request: int, ifreq: bytes) -> None:
        name, pointer = struct.unpack("16sP", ifreq)
        config = struct.unpack("iii", ctypes.string_at(pointer, 12))
        calls.append((request, name.rstrip(b"\0"), config))
        if config[2] == tr.HWTSTAMP_FILTER_PTP_V2_EVENT:
            raise OSError(34, "Numerical result out of range")  # this NIC can only timestamp everything

    assert tr.enable_hw_timestamps("eth1", ioctl) == tr.HWTSTAMP_FILTER_ALL
    assert [c[0] for c in calls] == [tr.SIOCSHWTSTAMP] * 2 and calls[0][1] == b"eth1"
    assert calls[0][2] == (0, tr.HWTSTAMP_TX_ON, tr.HWTSTAMP_FILTER_PTP_V2_EVENT)


def test_a_nic_that_refuses_is_a_clear_error() -> None:
    def ioctl(fd: int, request: int, ifreq: bytes) -> None:
        raise OSError(95, "Operation not supported")

    with pytest.raises(tr.TransportError, match="eth1 refuses hardware timestamping"):
        tr.enable_hw_timestamps("eth1", ioctl)


def test_the_raw_hardware_timestamp_is_the_third_timespec() -> None:
    data = struct.pack("qqqqqq", 10, 1, 0, 0, 20, 2)
    anc = [(socket.SOL_SOCKET, tr.SCM_TIMESTAMPING, data)]
    assert tr._rx_ts(anc) == 10 * S + 1
    assert tr._rx_ts(anc, hardware=True) == 20 * S + 2
    assert tr._flags(True, tx=True) & tr.SOF_TX_HARDWARE and tr._flags(False, tx=True) & tr.SOF_TX_SOFTWARE
    assert not tr._flags(False, tx=False) & tr.SOF_TX_SOFTWARE


def test_phc_map_follows_the_phc_rate() -> None:
    m = PhcMap()
    rate = 25e-6  # a free-running PHC 25 ppm fast, 3 ms ahead
    for host in (100 * S, 101 * S):
        m.update(host, host + 3_000_000 + round((host - 100 * S) * rate))
    assert m.ready and abs(m.rate - rate) < 1e-12
    host = 101 * S + 400_000_000
    phc = host + 3_000_000 + round((host - 100 * S) * rate)
    assert abs(m.host_of(phc) - host) <= 1
    m.update(102 * S, 102 * S + 50 * S)  # the PHC was stepped: not a rate
    assert m.rate == 0.0


def test_tightest_read_wins() -> None:
    assert tightest([(0, 500, 1000), (2000, 2100, 2200), (3000, 3900, 5000)]) == (2100, 2100)


def test_service_uses_hardware_when_offered_and_knows_a_served_phc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tr, "hardware_info", lambda iface: tr.HardwareInfo(
        tr.SOF_TX_HARDWARE | tr.SOF_RX_HARDWARE | tr.SOF_RAW_HARDWARE, 0))
    monkeypatch.setattr(tr, "enable_hw_timestamps", lambda iface: tr.HWTSTAMP_FILTER_PTP_V2_EVENT)
    config, _, _ = resolve(load_profile("default-e2e"), {})
    cmap = ClockMap(True, 0, 1, -20, 0, 0, b"GPS\0", 0, 37 * S, 0.0, 37)
    service = svc.PtpService(config, "eth1", cmap, GrandmasterView(), served_phc="/dev/ptp0")
    assert service.runner.choose_timestamping()
    assert service.status()["timestamping"] == "hardware (/dev/ptp0, the served clock)" and service.phc_map is None
    assert service.served_ns(123 * S) == 123 * S  # PHC time is served time
    software = svc.PtpService(config, "eth1", cmap, GrandmasterView(), timestamping="software")
    assert not software.runner.choose_timestamping() and software.status()["timestamping"].startswith("software")
    assert software.served_ns(5 * S) == 42 * S  # host (POSIX) time through the clock map


def test_hardware_asked_for_but_not_offered_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tr, "hardware_info", lambda iface: tr.HardwareInfo(tr.SOF_RX_SOFTWARE, -1))
    config, _, _ = resolve(load_profile("default-e2e"), {})
    service = svc.PtpService(config, "veth0", ClockMap(True, 0, 1, -20, 0, 0, b"GPS\0", 0, 0, 0.0, 37),
                             GrandmasterView(), timestamping="hardware")
    with pytest.raises(tr.TransportError, match="offers no hardware timestamps"):
        service.runner.choose_timestamping()


class _FakePhc:
    """A PHC 5 us ahead of the host clock, without a device."""

    def __init__(self, device: str) -> None:
        self.device, self.samples, self.closed = device, 0, False
        self.sampled_mono_ns = 0

    def sample(self) -> None:
        self.samples += 1

    def host_of(self, phc_ns: int) -> int:
        return phc_ns - 5_000

    def close(self) -> None:
        self.closed = True


class _FakeTransport:
    """Sockets that are never readable; what is sent is kept, and a timestamped send's report waits on the error
    queue (``tx_timestamps``) until polled."""

    def __init__(self, hardware: bool) -> None:
        self.hardware, self.mac, self.send_errors = hardware, bytes.fromhex("0200aa000001"), 0
        self._r, self._w = os.pipe()
        self.timestamped_fd = self._r
        self.sent: list[bytes] = []
        self._reports: list[tuple[int, int]] = []

    def fds(self) -> list[int]:
        return [self._r]

    def send(self, data: bytes, event: bool, to: object, peer: bool, token: int | None) -> None:
        self.sent.append(data)
        if token is not None:
            self._reports.append((token, 1_000 * len(self.sent)))

    def tx_timestamps(self) -> list[tuple[int, int]]:
        reports, self._reports = self._reports, []
        return reports

    def address_key(self, source: object) -> object:
        return source

    def receive(self, fd: int) -> list[tuple[bytes, object, int | None]]:
        return []

    def close(self) -> None:
        os.close(self._r)
        os.close(self._w)


def _upstream(monkeypatch: pytest.MonkeyPatch, offered: bool, want: str) -> tuple[Any, list[_FakeTransport]]:
    flags = tr.SOF_TX_HARDWARE | tr.SOF_RX_HARDWARE | tr.SOF_RAW_HARDWARE if offered else tr.SOF_RX_SOFTWARE
    monkeypatch.setattr(tr, "hardware_info", lambda iface: tr.HardwareInfo(flags, 3 if offered else -1))
    monkeypatch.setattr(tr, "enable_hw_timestamps", lambda iface: tr.HWTSTAMP_FILTER_PTP_V2_EVENT)
    monkeypatch.setattr(tr, "PhcReader", _FakePhc)
    opened: list[_FakeTransport] = []

    def open_transport(kind: str, iface: str, l2: str, peer: bool, hardware: bool = False) -> _FakeTransport:
        opened.append(_FakeTransport(hardware))
        return opened[-1]

    monkeypatch.setattr(run, "open_transport", open_transport)
    service = pss.PtpSlaveService(SlaveConfig(), "eth9", lambda host_ns: host_ns + 37 * S, lambda m: None,
                                  timestamping=want)
    return service, opened


def test_the_upstream_port_takes_the_nics_timestamps_through_its_phc(monkeypatch: pytest.MonkeyPatch) -> None:
    service, opened = _upstream(monkeypatch, offered=True, want="auto")

    async def run() -> None:
        service.start()
        try:
            assert opened and opened[0].hardware  # the sockets ask for the NIC's timestamps
            assert service.status()["timestamping"] == "hardware (/dev/ptp3)"
            assert service.local_ns(10 * S) == 10 * S - 5_000 + 37 * S  # PHC -> host -> local
            phc = service.runner.phc
            phc.sampled_mono_ns = 0  # a second has passed: the next timer reads the PHC again
            service.runner.on_timer()
            assert phc.samples == 1
        finally:
            service.stop()
        assert phc.closed and opened[0].hardware

    asyncio.run(run())


def test_the_upstream_port_stays_on_software_timestamps_unless_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    service, opened = _upstream(monkeypatch, offered=False, want="auto")

    async def run() -> None:
        service.start()
        try:
            assert not opened[0].hardware and service.status()["timestamping"] == "software"
            assert service.local_ns(10 * S) == 47 * S
        finally:
            service.stop()

    asyncio.run(run())


def test_the_upstream_port_asked_for_hardware_it_lacks_is_faulty_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    service, opened = _upstream(monkeypatch, offered=False, want="hardware")

    async def run() -> None:
        service.start()
        try:
            status = service.status()
            assert not opened and status["state"] == "FAULTY"
            assert status["error"] == "references.ptp_timestamping=hardware but eth9 offers no hardware timestamps"
        finally:
            service.stop()

    asyncio.run(run())


def test_the_grandmaster_through_its_runner_is_retried_then_masters_and_follows_up_each_sync(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The transport first fails (FAULTY, retried), then opens; the port masters, and every Sync's Follow_Up goes
    out though the sockets never wake the loop: the runner polls for transmit timestamps within TX_POLL_S."""
    monkeypatch.setattr(tr, "hardware_info", lambda iface: tr.HardwareInfo(tr.SOF_RX_SOFTWARE, -1))
    monkeypatch.setattr(run, "FAULT_RETRY_S", 0.01)
    attempts: list[str] = []
    opened: list[_FakeTransport] = []

    def open_transport(kind: str, iface: str, l2: str, peer: bool, hardware: bool = False) -> _FakeTransport:
        attempts.append(iface)
        if len(attempts) == 1:
            raise tr.TransportError(19, "interface eth1 does not exist")
        opened.append(_FakeTransport(hardware))
        return opened[-1]

    monkeypatch.setattr(run, "open_transport", open_transport)
    config, _, _ = resolve(load_profile("default-e2e"), {"log_announce_interval": -3, "log_sync_interval": -3})
    events: list[tuple[str, str]] = []
    service = svc.PtpService(config, "eth1", ClockMap(True, 0, 1, -20, 0, 0, b"GPS\0", 0, 0, 0.0, 37),
                             GrandmasterView(), on_event=lambda kind, text: events.append((kind, text)))

    async def serve() -> dict[str, Any]:
        service.start()
        try:
            assert service.status()["state"] == "FAULTY" and service.runner.retrying
            await asyncio.sleep(0.8)
            return service.status()
        finally:
            service.stop()

    status = asyncio.run(serve())
    assert status["state"] == "MASTER" and status["error"] == "" and status["port_identity"] == "0200aa.fffe.000001-1"
    assert events == [("ptp-fault", "interface eth1 does not exist"),
                      ("ptp-state", "LISTENING -> MASTER (no better master heard)")]
    sent = [c.decode(data) for data in opened[0].sent]
    syncs = [m.header.sequence_id for m in sent if isinstance(m, c.Sync)]
    follow_ups = [m.header.sequence_id for m in sent if isinstance(m, c.FollowUp)]
    assert len(syncs) >= 2 and follow_ups == syncs[:len(follow_ups)] and len(follow_ups) >= len(syncs) - 1
