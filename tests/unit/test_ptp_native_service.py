"""The grandmaster service and its native Sync sender, with the sender stood in for: the sender is opened before the
port starts or comes back from FAULTY, so the port's entry into MASTER starts the multicast Syncs there (not in the
port's own timers); a transport opened again gets a new sender and the streams start on it; a port that goes FAULTY
silences the sender; where the sender cannot be had, the port sends the Syncs itself."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.edge.ptp import gm_service, native_sync
from appliance.edge.ptp.transport import UdpTransport
from appliance.protocol.ptp.fsm import MASTER
from appliance.protocol.clockmap import not_ready
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.profiles import load_profile, resolve
from tests.unit.test_ptp_port import LOCKED

S = 1_000_000_000


class FakeSender:
    made: list[FakeSender] = []

    def __init__(self, transport: Any, log: Any, answer_delay: bool = False) -> None:
        self.transport, self.changes, self.active, self.closed = transport, [], False, False
        self.answer_delay = answer_delay
        FakeSender.made.append(self)

    def publish(self, clock_map: Any, port: Any) -> None:
        pass

    def sign_with(self, security: Any) -> None:
        self.security = security

    def adopt(self, port: Any, now_ns: int) -> None:
        port.sync_offload = True

    def apply(self, port: Any, now_ns: int) -> None:
        self.changes += port.take_stream_changes()
        self.active = port.state == MASTER

    def take(self, port: Any) -> dict:
        return {}

    def close(self) -> None:
        self.closed = True


def _transport() -> UdpTransport:
    t = object.__new__(UdpTransport)  # no sockets: the port engine only needs its MAC and address key
    t.mac, t.address_key = bytes.fromhex("0200aa000001"), (lambda a: a[0])
    return t


def _service(monkeypatch: pytest.MonkeyPatch, available: bool) -> gm_service.PtpService:
    FakeSender.made = []
    monkeypatch.setattr(native_sync, "available", lambda: available)
    monkeypatch.setattr(native_sync, "NativeSync", FakeSender)
    config, errors, _ = resolve(load_profile("default-e2e"), {})
    assert not errors
    return gm_service.PtpService(config, "lo", not_ready(0), LOCKED)


def _run(service: gm_service.PtpService, start_ns: int, until_ns: int) -> list[c.Message]:
    sent = []
    for t in range(start_ns, until_ns, 50_000_000):
        actions = service.port.handle_timer(t, t)
        service.handle(actions)
        sent += [c.decode(a.data) for a in actions]
    return sent


def test_the_sender_gets_the_multicast_syncs_and_again_after_a_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    service = _service(monkeypatch, available=True)
    port = service.attach(_transport(), 0)
    service.handle(port.start(0))
    sent = _run(service, 0, 12 * S)
    first = FakeSender.made[0]
    assert port.state == MASTER and first.changes == [("start", None, "sync")] and first.active
    assert not any(isinstance(m, c.Sync) for m in sent) and any(isinstance(m, c.Announce) for m in sent)

    service.handle(port.fault(12 * S, "link down"))
    assert not first.active  # silent while FAULTY
    service.handle(service.attach(_transport(), 13 * S).start(13 * S))
    second = FakeSender.made[1]
    assert first.closed and not second.closed
    sent = _run(service, 13 * S, 30 * S)
    assert port.state == MASTER and second.changes == [("start", None, "sync")]
    assert not any(isinstance(m, c.Sync) for m in sent)
    assert service.status()["native_sync"]["running"]


def test_without_the_sender_the_port_sends_the_syncs(monkeypatch: pytest.MonkeyPatch) -> None:
    service = _service(monkeypatch, available=False)
    service.handle(service.attach(_transport(), 0).start(0))
    sent = _run(service, 0, 12 * S)
    assert FakeSender.made == [] and any(isinstance(m, c.Sync) for m in sent)
    assert service.status()["native_sync"] == {"running": False, "error": "not built"}
