"""The NTP data plane, or its executable model, in this process on a loopback socket, driven one receive step at a
time: what the differential tests send the same datagrams to."""

from __future__ import annotations

import socket
from typing import Any

from appliance.edge.ntp.shm import ClockReader, ClockSegment
from appliance.edge.ntp.worker import Worker, open_socket
from appliance.outputs.ntp.policy import ServerConfig
from appliance.protocol.ntp.auth import KeyTable
from harness.ntp_harness import host_map
from tests.oracle.ntp_server import NtpServer
from tests.oracle.ntp_worker import OracleWorker


class InProcessWorker:
    """The data plane (``fast``) or the executable model (tests/oracle) in this process, driven one receive step at
    a time, without a poll loop: what it does between datagrams is then exactly what its receive path does.
    ``cookies``: an NTS cookie jar (``use_cookies`` replaces it, as a key rotation does); ``keys``: the keys file's
    table of symmetric keys."""

    def __init__(self, fast: bool, config: ServerConfig = ServerConfig(), cookies: Any = None,
                 keys: KeyTable | None = None):
        self.segment = ClockSegment(1)
        self.segment.publish(host_map())
        self.reader = ClockReader(self.segment.name, 0)
        self.sock = open_socket("127.0.0.1", 0, reuseport=False)
        self.port = self.sock.getsockname()[1]
        self.fast: Any = None
        self.oracle: OracleWorker | None = None
        if fast:
            from appliance.edge.ntp.fast import make_fast_path, sync_cookie_keys

            self.jar = _FixedJar(cookies)
            self.worker = Worker(self.sock, config, self.reader, keys, self.jar)
            self.fast = make_fast_path(self.worker)
            sync_cookie_keys(self.worker, self.fast)
        else:
            self.oracle = OracleWorker(self.sock, NtpServer(config, keys, cookies), self.reader)

    def use_cookies(self, cookies: Any) -> None:
        if self.oracle is not None:
            self.oracle.server.cookies = cookies
            return
        from appliance.edge.ntp.fast import sync_cookie_keys

        self.jar.jar = cookies
        sync_cookie_keys(self.worker, self.fast)

    def counters(self) -> dict[str, int]:
        if self.oracle is not None:
            return self.oracle.counters()
        from appliance.edge.ntp.fast import counters

        return counters(self.fast)

    def step(self) -> None:
        """Read and answer what has arrived (as the worker's loop does after each poll)."""
        if self.oracle is not None:
            self.oracle.receive_batch()
        else:
            self.fast.serve(0, 1)

    def exchange(self, client: socket.socket, datagrams: list[bytes]) -> list[bytes]:
        """Send ``datagrams`` from ``client`` (bound, non-blocking), answer them (one step), and collect what came
        back."""
        for data in datagrams:
            client.sendto(data, ("127.0.0.1", self.port))
        self.step()
        replies = []
        while True:
            try:
                replies.append(client.recv(2048))
            except BlockingIOError:
                return replies

    def __enter__(self) -> InProcessWorker:
        return self

    def __exit__(self, *_: object) -> None:
        self.fast = None  # the data plane's view of the segment goes first
        self.sock.close()
        self.reader.close()
        self.segment.close()


class _FixedJar:
    """A worker's cookie-key file stand-in: ``refresh`` returns the jar a test set."""

    def __init__(self, jar: Any):
        self.jar = jar

    def refresh(self, _now_s: float) -> Any:
        return self.jar


