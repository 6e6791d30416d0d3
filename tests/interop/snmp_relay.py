"""A UDP relay on loopback between an SNMP manager and the agent that keeps every datagram the manager sent: what an
attacker on the path captures.  ``replay`` sends captured bytes again from a socket of its own and says whether any
answer came back before a request sent after them was answered (the agent takes its datagrams in order)."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable

from pyasn1.codec.ber import decoder
from pysnmp.proto.mpmod.rfc3412 import SNMPv3Message

POLL_S = 0.05  # how often the relay's thread looks at its stop flag


class Relay:
    """Listens on 127.0.0.1:``port`` for one manager at a time and forwards to the agent at 127.0.0.1:``agent_port``;
    ``sent`` holds the manager's datagrams in order, ``round_trips_s`` the time from each forwarded request to the
    next answer from the agent."""

    def __init__(self, agent_port: int):
        self.agent = ("127.0.0.1", agent_port)
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.back.bind(("127.0.0.1", 0))
        self.port = self.front.getsockname()[1]
        self.sent: list[bytes] = []
        self.round_trips_s: list[float] = []
        self._manager: tuple[str, int] | None = None
        self._forwarded_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="snmp-relay", daemon=True)

    def __enter__(self) -> Relay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.front.close()
        self.back.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.front, self.back], [], [], POLL_S)
            for sock in ready:
                data, address = sock.recvfrom(65535)
                if sock is self.front:
                    self._manager = address
                    self.sent.append(data)
                    self._forwarded_at = time.monotonic()
                    self.back.sendto(data, self.agent)
                elif self._manager is not None:
                    if self._forwarded_at is not None:
                        self.round_trips_s.append(time.monotonic() - self._forwarded_at)
                        self._forwarded_at = None
                    self.front.sendto(data, self._manager)

    def authenticated(self) -> list[bytes]:
        """The SNMPv3 datagrams the manager sent with the authentication flag (the discovery probe has none)."""
        return [d for d in self.sent if is_authenticated_v3(d)]


def is_authenticated_v3(datagram: bytes) -> bool:
    try:
        message, _ = decoder.decode(datagram, asn1Spec=SNMPv3Message())
    except Exception:  # noqa: BLE001 - not an SNMPv3 message
        return False
    flags = message.getComponentByPosition(1).getComponentByPosition(2).asOctets()
    return bool(flags and flags[0] & 0x01)


def replay(agent_port: int, datagram: bytes, then: Callable[[], object]) -> tuple[list[bytes], object]:
    """Send ``datagram`` to the agent from a socket of its own, then call ``then`` (a request whose answer comes
    after the agent took the datagram); the answers that reached the replaying socket by then, and ``then``'s
    result."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.sendto(datagram, ("127.0.0.1", agent_port))
        result = then()
        sock.setblocking(False)
        answers = []
        while True:
            try:
                answers.append(sock.recv(65535))
            except BlockingIOError:
                return answers, result
