"""The console's HTTPS server on loopback against clients that connect and say nothing, or too little.

A real ``WebServer`` (cheroot behind the connection gate, TLS with the appliance's own kind of certificate) serves
the real console app.  Connections that never send a ClientHello, or finish TLS and send no request, must not slow
anyone else's login page; a client gets a share of the worker threads, not all of them; silent connections are
closed at their deadlines; keep-alive, pipelining, the TLS 1.2 floor, the low priority of the accepting thread and
a port already in use (reported in the status) behave as before.  Every time bound is a multiple of what the test
measured on the same server with nobody in the way.
"""

from __future__ import annotations

import datetime
import http.client
import os
import socket
import ssl
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from appliance.units import NS_PER_S
from appliance.web.admission import Limits
from appliance.web.server import WebPart, WebServer
from appliance.web.tls import ensure_certificate
from tests.web.conftest import ConsoleEnv

THREADS = 8  # the console's worker threads
IDLE_TCP = 50
PATIENT = Limits(handshake_ns=120 * NS_PER_S, request_ns=120 * NS_PER_S)  # no deadline falls inside such a test
QUICK = Limits(handshake_ns=NS_PER_S, request_ns=NS_PER_S)


def client_context(maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the appliance's self-signed certificate
    if maximum is not None:
        with warnings.catch_warnings():  # TLS 1.1 is deprecated: that is the point
            warnings.simplefilter("ignore", DeprecationWarning)
            context.minimum_version = min(maximum, ssl.TLSVersion.TLSv1_2)
            context.maximum_version = maximum
        context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this side offer an old version, for the server to refuse
    return context


CLIENT = client_context()


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "web.crt", tmp_path / "web.key"
    ensure_certificate(cert, key, "127.0.0.1", datetime.datetime.now(datetime.timezone.utc))
    return cert, key


@contextmanager
def serving(app: Any, certificate: tuple[Path, Path], limits: Limits | None = None) -> Iterator[WebServer]:
    server = WebServer(app, "127.0.0.1", 0, *certificate, threads=THREADS, limits=limits)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def get(port: int, path: str = "/login", source: str = "127.0.0.1") -> tuple[int, bytes, float]:
    """A new client's GET (TCP, TLS, request, answer): its status, body and how long it took."""
    start = time.monotonic()
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=CLIENT, timeout=60, source_address=(source, 0))
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    return response.status, body, time.monotonic() - start


def unhindered_s(port: int, path: str = "/login", source: str = "127.0.0.1") -> float:
    """A generous bound for one GET: ten times the slowest of three with nobody else connected, and 1 s at least."""
    assert get(port, path, source)[0] == 200  # the first one warms up (templates, sessions)
    return max(1.0, 10 * max(get(port, path, source)[2] for _ in range(3)))


def tls_connect(port: int) -> ssl.SSLSocket:
    return CLIENT.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=60))


def until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    out = b""
    while chunk := sock.recv(4096):
        out += chunk
    return out


def wait_until(condition: Callable[[], bool], what: str) -> None:
    give_up = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < give_up, f"still not {what}"
        time.sleep(0.01)


def test_the_login_page_answers_promptly_while_many_connections_sit_silent(
        env: ConsoleEnv, certificate: tuple[Path, Path]) -> None:
    with serving(env.app, certificate, PATIENT) as server:
        bound_s = unhindered_s(server.port)
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(IDLE_TCP)]  # no ClientHello
        silent = [tls_connect(server.port) for _ in range(THREADS + 2)]  # TLS done, no request: more than workers
        try:
            status, body, elapsed_s = get(server.port)
            assert status == 200 and b"csrf_token" in body
            assert elapsed_s < bound_s, f"/login took {elapsed_s:.3f} s with silent connections (bound {bound_s:.3f})"
            for sock in silent:  # still held open by the server, none of them on a worker
                sock.setblocking(False)
                with pytest.raises(ssl.SSLWantReadError):
                    sock.recv(1)
            waiting_cap = PATIENT.waiting_per_client  # the oldest silent ones of this client were let go
            assert server.stats()["dropped"]["evicted"] == IDLE_TCP + len(silent) + 1 - waiting_cap
        finally:
            for sock in idle + silent:
                sock.close()



def test_fifty_silent_connections_from_as_many_addresses_are_all_held_and_login_still_answers(
        env: ConsoleEnv, certificate: tuple[Path, Path]) -> None:
    # Each from its own loopback address: under every per-client cap, so the server holds all fifty open (none is
    # let go to make room) while a fifty-first client logs in.
    with serving(env.app, certificate, PATIENT) as server:
        bound_s = unhindered_s(server.port)
        idle = [socket.create_connection(("127.0.0.1", server.port), source_address=(f"127.0.3.{i + 1}", 0))
                for i in range(IDLE_TCP)]
        try:
            wait_until(lambda: server.stats()["held"].get("handshake", 0) == IDLE_TCP, "holding all of them")
            status, body, elapsed_s = get(server.port)
            assert status == 200 and b"csrf_token" in body
            assert elapsed_s < bound_s, f"/login took {elapsed_s:.3f} s with {IDLE_TCP} silent connections"
            assert server.stats()["held"]["handshake"] == IDLE_TCP and server.stats()["dropped"]["evicted"] == 0
        finally:
            for sock in idle:
                sock.close()

def test_silent_connections_are_closed_at_their_deadlines(env: ConsoleEnv, certificate: tuple[Path, Path]) -> None:
    with serving(env.app, certificate, QUICK) as server:
        no_hello = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        no_request = tls_connect(server.port)
        half_request = tls_connect(server.port)
        half_request.sendall(b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # a slow client, or slowloris
        start = time.monotonic()
        assert until_closed(no_hello) == b""
        assert time.monotonic() - start > QUICK.handshake_ns / NS_PER_S / 2  # at the deadline, not at once
        assert until_closed(no_request) == b""
        assert until_closed(half_request).startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        assert server.stats()["dropped"] == {"evicted": 0, "handshake timeout": 1, "request timeout": 2,
                                             "queued timeout": 0}
        assert get(server.port)[0] == 200


def test_keep_alive_and_pipelined_requests(env: ConsoleEnv, certificate: tuple[Path, Path]) -> None:
    with serving(env.app, certificate) as server:
        conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=CLIENT, timeout=60)
        statuses, sockets = [], []
        for _ in range(3):
            conn.request("GET", "/login")
            response = conn.getresponse()
            statuses.append(response.status)
            response.read()
            sockets.append(conn.sock)
            assert conn.sock is sockets[0], "the connection was not kept alive"
        conn.close()
        assert statuses == [200, 200, 200]

        tls = tls_connect(server.port)
        tls.sendall(b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                    b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answers = until_closed(tls)
        assert answers.count(b"HTTP/1.1 200 OK\r\n") == 2 and answers.count(b"csrf_token") >= 2


def test_plain_http_to_the_https_port_is_told_why(env: ConsoleEnv, certificate: tuple[Path, Path]) -> None:
    with serving(env.app, certificate) as server:
        plain = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        plain.sendall(b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = until_closed(plain)
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"only speaks HTTPS" in answer


def test_tls_below_1_2_is_refused(env: ConsoleEnv, certificate: tuple[Path, Path]) -> None:
    with serving(env.app, certificate) as server:
        old = client_context(maximum=ssl.TLSVersion.TLSv1_1)
        with pytest.raises(ssl.SSLError, match="PROTOCOL_VERSION|protocol version|UNSUPPORTED_PROTOCOL"):
            old.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=60))
        with client_context(maximum=ssl.TLSVersion.TLSv1_2).wrap_socket(
                socket.create_connection(("127.0.0.1", server.port), timeout=60)) as tls12:
            assert tls12.version() == "TLSv1.2"


def test_one_client_gets_a_share_of_the_workers_not_all_of_them(certificate: tuple[Path, Path]) -> None:
    release, entered, lock = threading.Event(), [0], threading.Lock()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if environ["PATH_INFO"] == "/hold":
            with lock:
                entered[0] += 1
            release.wait(60)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    with serving(app, certificate) as server:
        bound_s = unhindered_s(server.port, "/quick", source="127.0.0.2")
        results: list[int] = []

        def hold() -> None:
            results.append(get(server.port, "/hold")[0])

        holders = [threading.Thread(target=hold) for _ in range(Limits().busy_per_client + 1)]
        try:
            for t in holders[:-1]:
                t.start()
            wait_until(lambda: entered[0] == Limits().busy_per_client, "holding its share of the workers")
            holders[-1].start()
            wait_until(lambda: server.stats()["held"]["queued"] == 1, "queued behind its own requests")
            status, _, elapsed_s = get(server.port, "/quick", source="127.0.0.2")
            assert status == 200 and elapsed_s < bound_s, f"another client waited {elapsed_s:.3f} s"
            assert entered[0] == Limits().busy_per_client
        finally:
            release.set()
            for t in holders:
                t.join(60)
        assert results == [200] * len(holders) and entered[0] == len(holders)


def test_the_accepting_thread_runs_at_low_priority(env: ConsoleEnv, certificate: tuple[Path, Path]) -> None:
    with serving(env.app, certificate) as server:
        assert get(server.port)[0] == 200
        accepting = next(t for t in threading.enumerate() if t.name == "web")
        assert accepting.native_id is not None
        assert (os.sched_getscheduler(accepting.native_id) == os.SCHED_IDLE
                or os.getpriority(os.PRIO_PROCESS, accepting.native_id) == 19)


def test_a_port_in_use_is_reported_in_the_status(env: ConsoleEnv, tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    part = WebPart(env.ctx, "127.0.0.1", port, tmp_path / "web.crt", tmp_path / "web.key", env.state_dir)
    try:
        part.start()
        status = part.status()
        assert not status["serving"]
        assert status["error"].startswith(f"cannot serve on 127.0.0.1 port {port}:")
    finally:
        part.stop()
        taken.close()
