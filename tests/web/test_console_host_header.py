"""A request whose Host header is no host name is answered 400, and logged one line a minute at most.

The real console app behind the real HTTPS server on loopback.  ``Host: a..b`` (an empty label) or a label of 64
characters used to make Flask fail to build the login redirect: a 500 and a traceback in the log for every such
request, unauthenticated.  Now the client is told what is wrong and the log gets one line a minute, saying how many
more came meanwhile.
"""

from __future__ import annotations

import datetime
import logging
import socket
import time
from pathlib import Path

import pytest

from appliance.web.tls import ensure_certificate
from tests.web.conftest import ConsoleEnv
from tests.web.test_console_connections import CLIENT, get, serving

BAD_HOSTS = ["a..b", "a" * 64 + ".example", "a" * 64]


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "web.crt", tmp_path / "web.key"
    ensure_certificate(cert, key, "127.0.0.1", datetime.datetime.now(datetime.timezone.utc))
    return cert, key


def ask(port: int, path: str, host: str) -> tuple[str, bytes]:
    """A raw GET with this Host header: the status line and the body."""
    with CLIENT.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=60)) as tls:
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode("ascii"))
        answer = b""
        while chunk := tls.recv(4096):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode("ascii"), body


def host_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "Host header" in r.getMessage()]


def test_an_invalid_host_is_a_400_and_one_log_line_a_minute(env: ConsoleEnv, certificate: tuple[Path, Path],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    clock = [time.time()]
    env.ctx.wall_s = lambda: clock[0]
    with serving(env.app, certificate) as server:
        for host in BAD_HOSTS:
            for path in ("/", "/gnss", "/login"):
                status, body = ask(server.port, path, host)
                assert status.startswith("HTTP/1.1 400 "), (host, path, status)
                assert body == b"refused: the Host header is not a valid host name\n"
            status, body = ask(server.port, "/api/v1/status", host)
            assert status.startswith("HTTP/1.1 400 ")
            assert body == b'{"error":"refused: the Host header is not a valid host name"}\n'
        assert get(server.port)[0] == 200  # the console goes on serving everybody else

        (line,) = host_lines(caplog)
        assert "'a..b' is not a valid host name" in line.getMessage()
        assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]  # no traceback
        assert "Traceback" not in caplog.text

        clock[0] += 61  # a minute later: one more line, counting those not logged
        assert ask(server.port, "/", "a..b")[0].startswith("HTTP/1.1 400 ")
        lines = host_lines(caplog)
        assert len(lines) == 2 and lines[1].getMessage().endswith(
            f"(400); {len(BAD_HOSTS) * 4 - 1} more since the last such line")
