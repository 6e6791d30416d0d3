"""The console's HTTPS server against clients that declare a request body and send it a byte at a time.

A real ``WebServer`` (the gate, cheroot's workers, TLS) serves the real console app on loopback.  Attackers from two
and from fifty loopback addresses open TLS connections, send ``GET /login`` or ``GET /api/v1/status`` with a
``Content-Length`` and then one byte every 4 s, reconnecting whenever the server closes on them; meanwhile a user's
``GET /login`` must answer within ten times what the test measured with nobody in the way (1 s at least), or ten times
what a second server on the same host, not attacked, takes at that moment (the host's own load slows both).  A body
declared over the limit is refused with 413 before any worker sees it; one within the limit that never arrives is
answered 408 at the request deadline, by the gate.  A client that stops reading a large answer holds a worker only
until the request's overall deadline.  Each attack lasts a few seconds, bounded in time and in connections.
"""

from __future__ import annotations

import datetime
import json
import socket
import ssl
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.units import NS_PER_S
from appliance.web.admission import MAX_BODY_BYTES, Limits
from appliance.web.tls import ensure_certificate
from tests.web.conftest import ConsoleEnv
from tests.web.test_console_connections import CLIENT, get, serving, unhindered_s, wait_until

BYTE_EVERY_S = 4.0
ATTACK_S = 9.0  # past the request deadline (5 s), so that slow bodies within the limit meet it
RECONNECT_PAUSE_S = 2.0  # an attacker closed on comes back at its own pace (floods of handshakes: other tests)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "web.crt", tmp_path / "web.key"
    ensure_certificate(cert, key, "127.0.0.1", datetime.datetime.now(datetime.timezone.utc))
    return cert, key


class SlowBodies:
    """The attack (``tests.web.slow_body_attack``) in a process of its own, as an attacker is: ``connections``
    attackers spread over ``sources`` for ``ATTACK_S``; ``answers`` counts what the server answered them."""

    def __init__(self, port: int, sources: list[str], connections: int, path: str, declared: int):
        self.argv = [sys.executable, "-m", "tests.web.slow_body_attack", str(port), path, str(declared),
                     str(connections), str(ATTACK_S), str(BYTE_EVERY_S), str(RECONNECT_PAUSE_S), *sources]
        self.answers: Counter[str] = Counter()
        self.stop_at = 0.0

    def __enter__(self) -> SlowBodies:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd=Path(__file__).parents[2])
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "attacking", self.proc.stderr.read()  # type: ignore[union-attr]
        self.stop_at = time.monotonic() + ATTACK_S
        return self

    def __exit__(self, *exc: Any) -> None:
        out, err = self.proc.communicate(timeout=ATTACK_S + 60)
        assert self.proc.returncode == 0, err
        self.answers = Counter(json.loads(out))

    def running(self) -> bool:
        return time.monotonic() < self.stop_at


def logins_during(attack: SlowBodies, port: int, bound_s: float, witness: int | None = None) -> list[float]:
    """A user's GET /login, one after another, for as long as the attack lasts: how long each took.  With a
    ``witness`` (a second server on the same host that nobody attacks) each login's bound is also ten times the
    witness's slowest of its last few answers: the host's own load (the attacker's process, other work) slows both,
    and only what the attack does to the attacked server counts against it."""
    took, recent = [], deque(maxlen=5)
    while attack.running():
        if witness is not None:
            recent.append(get(witness, "/login", source="127.0.0.1")[2])
        status, body, elapsed_s = get(port, "/login", source="127.0.0.1")
        bound = max(bound_s, 10 * max(recent, default=0.0))
        assert status == 200 and b"csrf_token" in body
        assert elapsed_s < bound, f"/login took {elapsed_s:.3f} s under attack (bound {bound:.3f} s)"
        took.append(elapsed_s)
        time.sleep(0.2)
    return took


SOURCES = {2: [f"127.0.0.{2 + i}" for i in range(2)], 50: [f"127.0.4.{1 + i}" for i in range(50)]}


@pytest.mark.parametrize("path", ["/login", "/api/v1/status"])
@pytest.mark.parametrize("addresses, connections", [(2, 8), (50, 50)])
def test_a_body_declared_over_the_limit_is_refused_and_login_still_answers(
        env: ConsoleEnv, certificate: tuple[Path, Path], path: str, addresses: int, connections: int) -> None:
    with serving(env.app, certificate) as server, serving(env.app, certificate) as witness:
        bound_s = unhindered_s(server.port)
        with SlowBodies(server.port, SOURCES[addresses], connections, path, declared=100_000_000) as attack:
            took = logins_during(attack, server.port, bound_s, witness.port)
        assert len(took) >= 3
        refused = attack.answers["HTTP/1.1 413 Content Too Large"]
        assert refused >= connections and refused == sum(attack.answers.values()), attack.answers
        assert server.stats()["held"].get("busy", 0) == 0


@pytest.mark.parametrize("addresses, connections", [(2, 8), (50, 50)])
def test_a_slow_body_within_the_limit_meets_the_request_deadline_and_login_still_answers(
        env: ConsoleEnv, certificate: tuple[Path, Path], addresses: int, connections: int) -> None:
    with serving(env.app, certificate) as server:
        bound_s = unhindered_s(server.port)
        with SlowBodies(server.port, SOURCES[addresses], connections, "/login", declared=MAX_BODY_BYTES) as attack:
            took = logins_during(attack, server.port, bound_s)
        assert len(took) >= 3
        # Each was held by the gate, not by a worker, and answered at its request deadline (5 s after its TLS).
        assert attack.answers["HTTP/1.1 408 Request Timeout"] >= connections, attack.answers
        assert server.stats()["dropped"]["request timeout"] >= connections


def test_a_body_declared_over_the_limit_is_told_so(env: ConsoleEnv, certificate: tuple[Path, Path]) -> None:
    with serving(env.app, certificate) as server:
        with CLIENT.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=60)) as tls:
            tls.sendall(b"POST /api/v1/holdover HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 65537\r\n\r\n")
            answer = b""
            while chunk := tls.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 413 Content Too Large\r\n")
        assert answer.endswith(b"refused: the request body is larger than 65536 bytes\n")


def test_whole_bodies_still_reach_the_application(env: ConsoleEnv, certificate: tuple[Path, Path]) -> None:
    """A body of the largest size taken, sent by Content-Length, chunked, or after "100 Continue", is answered by
    the application (401: no credentials), not refused by the gate."""
    body = b"{" + b" " * (MAX_BODY_BYTES - 2) + b"}"
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 4096]), body[i:i + 4096]) for i in range(0, len(body), 4096))
    with serving(env.app, certificate) as server:
        def ask(head: str, payload: bytes, wait_continue: bool = False) -> bytes:
            with CLIENT.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=60)) as tls:
                tls.sendall(f"PUT /api/v1/config/log.level HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}"
                            "Content-Type: application/json\r\nConnection: close\r\n\r\n".encode("ascii"))
                if wait_continue:
                    assert tls.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
                tls.sendall(payload)
                answer = b""
                while chunk := tls.recv(4096):
                    answer += chunk
                return answer

        for answer in (ask(f"Content-Length: {len(body)}\r\n", body),
                       ask("Transfer-Encoding: chunked\r\n", chunked + b"0\r\n\r\n"),
                       ask(f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n", body, wait_continue=True)):
            assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
            assert answer.count(b"100 Continue") == 0
            assert b"authentication required" in answer


def test_a_client_that_stops_reading_holds_a_worker_only_until_the_request_deadline(
        certificate: tuple[Path, Path]) -> None:
    # A large answer nobody reads: each of eight clients (all the workers, four from each of two addresses) asks
    # for one and reads nothing.  Past the request deadline the workers are free and another client is answered.
    limits = Limits(worker_ns=2 * NS_PER_S)
    chunk = b"x" * (1 << 20)

    def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        chunks = [chunk] * 256 if environ["PATH_INFO"] == "/big" else [b"ok"]
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(sum(map(len, chunks))))])
        return iter(chunks)

    with serving(app, certificate, limits) as server:
        bound_s = unhindered_s(server.port, "/quick", source="127.0.0.4")
        stalled = []
        for i in range(8):
            raw = socket.create_connection(("127.0.0.1", server.port), timeout=60,
                                           source_address=(f"127.0.0.{2 + i % 2}", 0))
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            tls = CLIENT.wrap_socket(raw)
            tls.sendall(b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            stalled.append(tls)
        try:
            wait_until(lambda: server.stats()["held"].get("busy", 0) == 8, "holding every worker")
            status, _, elapsed_s = get(server.port, "/quick", source="127.0.0.4")
            deadline_s = limits.worker_ns / NS_PER_S
            assert status == 200 and elapsed_s < deadline_s + bound_s, f"waited {elapsed_s:.3f} s"
            wait_until(lambda: server.stats()["held"].get("busy", 0) == 0, "every worker free again")
            received = 0
            for tls in stalled:  # each answer was cut off at the deadline: the connection closed short of it
                tls.settimeout(10)
                try:
                    while data := tls.recv(1 << 16):
                        received += len(data)
                except (OSError, ssl.SSLError):
                    pass
            assert received < 8 * 256 * len(chunk)
        finally:
            for tls in stalled:
                tls.close()
