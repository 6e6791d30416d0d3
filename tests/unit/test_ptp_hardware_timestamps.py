"""Hardware timestamping, through an injected ioctl layer and a stand-in NIC (this machine has none that offers it):
the NIC is switched on with the right request, the raw hardware timestamp is read from its slot, and PHC time is
mapped onto the host clock with the PHC's rate."""

from __future__ import annotations

import ctypes
import socket
import struct

import pytest

from appliance.outputs.ntp.clockmap import ClockMap
from appliance.outputs.ptp import service as svc
from appliance.outputs.ptp import transport as tr
from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.outputs.ptp.phcmap import PhcMap, tightest
from appliance.outputs.ptp.profiles import load_profile, resolve

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
    monkeypatch.setattr(svc, "hardware_info", lambda iface: tr.HardwareInfo(
        tr.SOF_TX_HARDWARE | tr.SOF_RX_HARDWARE | tr.SOF_RAW_HARDWARE, 0))
    monkeypatch.setattr(svc, "enable_hw_timestamps", lambda iface: tr.HWTSTAMP_FILTER_PTP_V2_EVENT)
    config, _, _ = resolve(load_profile("default-e2e"), {})
    cmap = ClockMap(True, 0, 1, -20, 0, 0, b"GPS\0", 0, 37 * S, 0.0, 37)
    service = svc.PtpService(config, "eth1", cmap, GrandmasterView(), served_phc="/dev/ptp0")
    assert service._choose_hardware()
    assert service.timestamping == "hardware (/dev/ptp0, the served clock)" and service.phc_map is None
    service.hardware = True
    assert service._served(123 * S) == 123 * S  # PHC time is served time
    software = svc.PtpService(config, "eth1", cmap, GrandmasterView(), timestamping="software")
    assert not software._choose_hardware() and software.timestamping.startswith("software")
    assert software._served(5 * S) == 42 * S  # host (POSIX) time through the clock map


def test_hardware_asked_for_but_not_offered_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(svc, "hardware_info", lambda iface: tr.HardwareInfo(tr.SOF_RX_SOFTWARE, -1))
    config, _, _ = resolve(load_profile("default-e2e"), {})
    service = svc.PtpService(config, "veth0", ClockMap(True, 0, 1, -20, 0, 0, b"GPS\0", 0, 0, 0.0, 37),
                             GrandmasterView(), timestamping="hardware")
    with pytest.raises(tr.TransportError, match="offers no hardware timestamps"):
        service._choose_hardware()
