"""Forwarding audit records over TCP and TLS (appliance.audit.forwarder), against collectors in this process on
loopback: what the collector receives, in which order, after it was away, when its queue overflowed, when its
certificate is not trusted; and what the status says while the chain is anchored nowhere."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from appliance import config as cfg
from appliance import leap
from appliance.audit.chain import GENESIS, AuditRecord
from appliance.audit.forwarder import SyslogForwarder, TlsOptions
from appliance.audit.service import AUDIT_SYSLOG_OVERFLOW, NOT_ANCHORED, AuditPart, open_forwarder
from appliance.audit.store import AuditStore
from appliance.audit.syslog import format_rfc5424, octet_counted
from appliance.runtime.platforms import simulated
from appliance.sched import SimScheduler
from appliance.status import render, to_dict
from harness.pki import Pki, make_pki

S = 1_000_000_000
T0 = 1_800_000_037 * S
LABEL = "2027-01-15T08:00:00Z"
WAIT_S = 20.0  # the most any wait below may take: a bound on the loop, not a claim about speed
FAST = {"backoff_min_s": 0.02, "backoff_max_s": 0.1}


def record(seq: int, text: str = "") -> AuditRecord:
    return AuditRecord(seq, T0 + seq * S, "command", "admin", text or f"command {seq}", {}, GENESIS, f"{seq:064x}")


def frame(seq: int, text: str = "") -> bytes:
    return octet_counted(format_rfc5424(record(seq, text), "gm1", utc_label=LABEL, chain_id="ef" * 32))


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.01)


@dataclass
class Collector:
    """A syslog collector on loopback: accepts connections one after another and keeps every frame it reads, and
    how many connections brought them."""

    context: ssl.SSLContext | None = None
    port: int = 0
    frames: list[bytes] = field(default_factory=list)
    connections: int = 0
    closed: int = 0  # connections the collector closed
    close_after: int = 0  # close the first connection after this many frames (0: never)
    handshake_errors: list[str] = field(default_factory=list)

    def start(self, port: int = 0) -> Collector:
        self._listener = socket.create_server(("127.0.0.1", port))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        self._listener.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(0.1)
            try:
                if self.context is not None:
                    conn.settimeout(5)
                    conn = self.context.wrap_socket(conn, server_side=True)
                    conn.settimeout(0.1)
            except (ssl.SSLError, OSError) as exc:
                self.handshake_errors.append(str(exc))
                conn.close()
                continue
            self.connections += 1
            self._read(conn)
            self.closed += 1  # after the close: on loopback its FIN is in the forwarder's socket by now

    def _read(self, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while not self._stop.is_set():
                try:
                    data = conn.recv(65536)
                except (TimeoutError, ssl.SSLWantReadError):
                    continue
                except OSError:
                    return
                if not data:
                    return
                buffer += data
                while b" " in buffer:
                    length, _, rest = buffer.partition(b" ")
                    if len(rest) < int(length):
                        break
                    self.frames.append(length + b" " + rest[:int(length)])
                    buffer = rest[int(length):]
                    if self.close_after and len(self.frames) == self.close_after and self.connections == 1:
                        return


@pytest.fixture()
def collectors() -> Iterator[Callable[..., Collector]]:
    made: list[Collector] = []

    def make(context: ssl.SSLContext | None = None, port: int = 0, close_after: int = 0) -> Collector:
        made.append(Collector(context, close_after=close_after).start(port))
        return made[-1]

    yield make
    for collector in made:
        collector.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def send_all(forwarder: SyslogForwarder, seqs: range) -> None:
    for seq in seqs:
        assert forwarder.send(record(seq), LABEL, "ef" * 32)


def test_tcp_frames_arrive_octet_counted_and_in_order(collectors: Callable[..., Collector]) -> None:
    collector = collectors()
    forwarder = SyslogForwarder("127.0.0.1", collector.port, "audit", transport="tcp", hostname="gm1", **FAST)
    try:
        send_all(forwarder, range(1, 6))
        until(lambda: len(collector.frames) == 5, "5 frames")
        assert collector.frames == [frame(seq) for seq in range(1, 6)]
        status = forwarder.status()
        assert (status.transport, status.sent, status.queued, status.dropped, status.connected) == ("tcp", 5, 0, 0,
                                                                                                     True)
    finally:
        forwarder.close()


def test_records_queued_while_the_collector_is_away_arrive_in_order_once_it_is_back(
        collectors: Callable[..., Collector]) -> None:
    port = free_port()
    forwarder = SyslogForwarder("127.0.0.1", port, transport="tcp", hostname="gm1", **FAST)
    try:
        send_all(forwarder, range(1, 8))
        until(lambda: forwarder.status().errors > 0, "a failed connect")
        status = forwarder.status()
        assert (status.sent, status.queued, status.connected) == (0, 7, False)
        assert status.last_error is not None and status.last_error.startswith(f"cannot connect to tcp://127.0.0.1:{port}")
        collector = collectors(port=port)
        until(lambda: len(collector.frames) == 7, "7 frames after the collector came back")
        assert collector.frames == [frame(seq) for seq in range(1, 8)]
        assert forwarder.status().dropped == 0
    finally:
        forwarder.close()


def test_a_full_queue_drops_the_oldest_records_counted_and_sends_the_rest_in_order(
        collectors: Callable[..., Collector]) -> None:
    port = free_port()
    forwarder = SyslogForwarder("127.0.0.1", port, transport="tcp", hostname="gm1", queue_records=3, **FAST)
    try:
        send_all(forwarder, range(1, 6))
        status = forwarder.status()
        assert (status.queued, status.dropped) == (3, 2)
        collector = collectors(port=port)
        until(lambda: len(collector.frames) == 3, "the 3 records kept")
        assert collector.frames == [frame(seq) for seq in (3, 4, 5)]
        assert (forwarder.status().sent, forwarder.status().dropped) == (3, 2)
    finally:
        forwarder.close()


def test_a_collector_that_closes_the_connection_gets_the_next_records_on_a_new_one(
        collectors: Callable[..., Collector]) -> None:
    collector = collectors(close_after=2)
    forwarder = SyslogForwarder("127.0.0.1", collector.port, transport="tcp", hostname="gm1", **FAST)
    try:
        send_all(forwarder, range(1, 3))
        until(lambda: len(collector.frames) == 2, "2 frames on the first connection")
        until(lambda: collector.closed == 1, "the collector closed the first connection")
        send_all(forwarder, range(3, 6))
        until(lambda: len(collector.frames) == 5, "3 more frames on a second connection")
        assert collector.frames == [frame(seq) for seq in range(1, 6)] and collector.connections == 2
    finally:
        forwarder.close()


def test_a_collector_that_stops_reading_never_holds_up_the_caller() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        forwarder = SyslogForwarder("127.0.0.1", listener.getsockname()[1], transport="tcp", hostname="gm1",
                                    queue_records=50, **FAST)
        listener.settimeout(WAIT_S)
        big = "x" * 4000
        assert forwarder.send(record(1, big), LABEL)  # the first record makes the forwarder connect
        conn, _ = listener.accept()  # accepted, never read
        with conn:
            for seq in range(2, 2001):  # ~8 MB: far more than the kernel's buffers hold
                assert forwarder.send(record(seq, big), LABEL)
            status = forwarder.status()  # every send above returned at once, while the sender is stuck in a write
            # The queue filled (records were dropped) and never grew past its 50; how full it is at this instant
            # depends on how far the sender's last write got into the kernel's buffers on a busy host.
            assert status.connected and 0 < status.queued <= 50 and status.dropped > 0
            forwarder.close(flush_s=0.2)  # close returns too, and counts what it could not send
            closed = forwarder.status()
            assert closed.queued == 0 and closed.sent + closed.dropped == 2000


# --- TLS --------------------------------------------------------------------------------------------------------


def server_context(pki: Pki) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.load_verify_locations(pki.ca)
    context.verify_mode = ssl.CERT_REQUIRED  # the collector asks for the appliance's certificate
    return context


def test_tls_with_a_client_certificate_delivers_the_frames(tmp_path: Path,
                                                           collectors: Callable[..., Collector]) -> None:
    pki = make_pki(tmp_path / "pki")
    collector = collectors(server_context(pki))
    tls = TlsOptions(str(pki.ca), str(pki.client_cert), str(pki.client_key))
    forwarder = SyslogForwarder("127.0.0.1", collector.port, transport="tls", tls=tls, hostname="gm1", **FAST)
    try:
        send_all(forwarder, range(1, 4))
        until(lambda: len(collector.frames) == 3, "3 frames over TLS")
        assert collector.frames == [frame(seq) for seq in range(1, 4)]
        assert forwarder.status().transport == "tls" and forwarder.status().connected
    finally:
        forwarder.close()


def test_tls_refuses_a_collector_whose_certificate_the_configured_ca_did_not_sign(
        tmp_path: Path, collectors: Callable[..., Collector]) -> None:
    pki, other = make_pki(tmp_path / "pki"), make_pki(tmp_path / "other", "another")
    collector = collectors(server_context(pki))
    tls = TlsOptions(str(other.ca), str(pki.client_cert), str(pki.client_key))
    forwarder = SyslogForwarder("127.0.0.1", collector.port, transport="tls", tls=tls, hostname="gm1", **FAST)
    try:
        send_all(forwarder, range(1, 3))
        until(lambda: forwarder.status().errors > 0, "a refused handshake")
        status = forwarder.status()
        assert (status.sent, status.queued, status.connected) == (0, 2, False)
        assert status.last_error is not None and "the collector's certificate is not trusted" in status.last_error
        assert collector.frames == []
    finally:
        forwarder.close(flush_s=0.5)


def test_an_unreadable_ca_file_is_named_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"syslog CA file {tmp_path / 'missing.pem'}: cannot load it"):
        SyslogForwarder("127.0.0.1", 6514, transport="tls", tls=TlsOptions(str(tmp_path / "missing.pem")))


def test_open_forwarder_takes_the_transport_from_the_address() -> None:
    forwarder = open_forwarder(cfg.load(None, ["audit.syslog=tcp://127.0.0.1:9"]).audit)
    try:
        assert (forwarder.transport, forwarder.status().target) == ("tcp", "127.0.0.1:9")
    finally:
        forwarder.close(flush_s=0.2)
    with pytest.raises(ValueError, match="audit.syslog 'loghost'"):
        open_forwarder(cfg.load(None, ["audit.syslog=loghost"]).audit)


# --- what the appliance shows ---------------------------------------------------------------------------------


class Trail:
    """The audit trail as ``appliance run`` builds it, on a simulated runtime."""

    def __init__(self, state: Path, forwarder: object = None) -> None:
        self.table = leap.LeapTable.load_default()
        self.runtime, _ = simulated(cfg.load(None, ["sim.seed=1"]), SimScheduler(T0 + 3600 * S), self.table)
        self.loop = asyncio.new_event_loop()
        self.part = AuditPart(self.loop, AuditStore(state / "audit.sqlite"), self.runtime.status,
                              self.runtime.now_tai_ns, lambda: self.table, self.runtime.subscribe,
                              forwarder=forwarder, alarm=self.runtime.alarm)

    def status_text(self) -> str:
        d = json.loads(json.dumps(to_dict(self.runtime.status())))
        d["outputs"]["audit"] = json.loads(json.dumps(self.part.status()))
        return render(d)

    def alarms(self) -> dict[str, str]:
        return {a.code: a.text for a in self.runtime.status().alarms if a.raised}

    def close(self) -> None:
        self.part.stop()
        self.loop.close()


def test_status_says_the_chain_is_not_anchored_while_no_collector_is_configured(tmp_path: Path) -> None:
    trail = Trail(tmp_path)
    try:
        trail.part.start()
        assert trail.part.status()["anchor"] == {"anchored": False, "notice": NOT_ANCHORED}
        assert NOT_ANCHORED.startswith("audit chain not anchored off the box: configure audit.syslog")
        assert f"Audit anchor    : {NOT_ANCHORED}" in trail.status_text().splitlines()
        assert not any(code.startswith("audit") for code in trail.alarms())  # a notice, not an alarm
    finally:
        trail.close()


def test_status_shows_the_collector_and_an_overflow_raises_one_alarm_until_the_queue_drains(
        tmp_path: Path, collectors: Callable[..., Collector]) -> None:
    port = free_port()
    forwarder = SyslogForwarder("127.0.0.1", port, transport="tcp", hostname="gm1", queue_records=2, **FAST)
    trail = Trail(tmp_path, forwarder)
    try:
        trail.part.start()  # the start record and more than the queue holds, with no collector yet
        for i in range(5):
            trail.part.append(T0 + i * S, "command", "admin", f"command {i}")
        trail.part._second()
        trail.loop.run_until_complete(asyncio.sleep(0))
        status = forwarder.status()
        assert status.dropped > 0 and trail.part.status()["anchor"] == {"anchored": True, "notice": ""}
        assert AUDIT_SYSLOG_OVERFLOW in trail.alarms()
        assert trail.alarms()[AUDIT_SYSLOG_OVERFLOW].endswith(f"dropped from the full syslog queue to 127.0.0.1:{port}"
                                                             " (the collector is away or slow; the records stay in "
                                                             "the local store)")
        line = next(x for x in trail.status_text().splitlines() if x.startswith("Audit anchor"))
        assert line.startswith(f"Audit anchor    : tcp://127.0.0.1:{port} NOT CONNECTED (cannot connect to ")
        assert line.endswith(f"0 sent, 2 queued, {status.dropped} DROPPED")
        collector = collectors(port=port)
        until(lambda: len(collector.frames) == 2, "the 2 queued records")
        trail.part._second()
        trail.loop.run_until_complete(asyncio.sleep(0))
        assert AUDIT_SYSLOG_OVERFLOW not in trail.alarms()
    finally:
        trail.close()
