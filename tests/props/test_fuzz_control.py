"""Fuzzing the control socket (``appliance/edge/control.py``): the server's request line and the client's reply.

Contract, server side: whatever one connection sends (binary, broken UTF-8, any JSON, JSON nested thousands deep, a
line longer than the 64 KiB limit, nothing at all), it gets exactly one JSON object line back, ``{"ok": false,
"error": ...}`` unless the request was a JSON object, which alone reaches the handler; and the server raises nothing.
Client side: ``request()`` returns the appliance's reply (a JSON object with ``ok`` true) or raises ControlError,
whatever bytes come back.  Budget: ``fuzzing.py``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from appliance.edge import control
from appliance.edge.control import MAX_REQUEST_BYTES, ControlError, ControlServer
from tests.props.fuzzing import FUZZ, fuzz, mutated

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)
VALID = [b'{"cmd": "status"}\n', b'{"cmd":"holdover","action":"enter","user":"cli"}\n', b'{"cmd": "reference", '
         b'"action": "pin", "name": "ptp"}\n']


def nested(depth: int, opener: str) -> bytes:
    closer = {"[": "]", "{\"a\":": "}"}[opener]
    return (opener * depth + "1" + closer * depth + "\n").encode()


request_lines = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode() + b"\n"),
    mutated(st.sampled_from(VALID)),
    st.builds(nested, st.integers(1, 30_000), st.sampled_from(["[", "{\"a\":"])),
    st.sampled_from([b"", b"\n", b"{}", b"[]\n", b"\xff\xfe{\x00}\x00\n", b"{\"cmd\": NaN}\n", b"1e999999\n",
                     b"{\"a\":" * 12_000 + b"\n", b"9" * 5000 + b"\n", b"\"\\ud800\"\n"]),
    st.integers(MAX_REQUEST_BYTES - 2, MAX_REQUEST_BYTES + 100).map(lambda n: b" " * n + b"{}\n"),
)


class FakeWriter:
    """The part of asyncio.StreamWriter the server uses; no socket, so SO_PEERCRED is not consulted."""

    def __init__(self) -> None:
        self.data, self.closed = b"", False

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return None


def exchange(line: bytes) -> tuple[bytes, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    def handler(request: dict[str, Any]) -> dict[str, Any]:
        seen.append(request)
        return {"ok": True, "keys": sorted(map(str, request))[:5]}

    async def main() -> bytes:
        reader = asyncio.StreamReader(limit=MAX_REQUEST_BYTES)
        reader.feed_data(line)
        reader.feed_eof()
        writer = FakeWriter()
        await ControlServer(Path("/nonexistent/control.sock"), handler)._serve(reader, writer)  # type: ignore[arg-type]
        assert writer.closed
        return writer.data

    return asyncio.run(main()), seen


@FUZZ
@given(request_lines)
def test_every_request_line_gets_one_json_reply(line: bytes) -> None:
    reply, seen = exchange(line)
    assert reply.endswith(b"\n") and reply.count(b"\n") == 1, reply[:200]
    message = json.loads(reply)
    assert isinstance(message, dict) and isinstance(message.get("ok"), bool)
    if seen:
        event("control: handled")
        assert message["ok"] and isinstance(seen[0], dict)
    else:
        event(f"control: refused ({message.get('error', '')[:20]})")
        assert message["ok"] is False and isinstance(message["error"], str) and len(message["error"]) < 300


def test_a_request_nested_too_deeply_is_refused_with_a_reply() -> None:
    """Found by the fuzz test above: json.loads raised RecursionError, which the server logged instead of
    answering, so the client saw an empty reply."""
    reply, seen = exchange(nested(100_000 // 4, "["))
    assert json.loads(reply) == {"ok": False, "error": "bad request: JSON nested too deeply"} and not seen


def test_a_request_longer_than_the_limit_is_refused_with_a_reply() -> None:
    """Found by the fuzz test above: the line overran the reader's limit and the client got no reply."""
    reply, seen = exchange(b"[" + b"0," * MAX_REQUEST_BYTES + b"0]\n")
    assert json.loads(reply) == {"ok": False, "error": f"bad request: longer than {MAX_REQUEST_BYTES} bytes"}
    assert not seen


def test_over_a_real_socket_the_client_hears_why_its_long_request_was_refused(tmp_path: Path) -> None:
    """The rest of an overlong line is read before the refusal, so the client reads it instead of a reset."""
    async def main() -> str:
        server = ControlServer(tmp_path / "control.sock", lambda request: {"ok": True})
        await server.start()
        try:
            call = lambda: control.request(server.path, {"cmd": "x" * (3 * MAX_REQUEST_BYTES)}, 5.0)  # noqa: E731
            await asyncio.get_running_loop().run_in_executor(None, call)
        except ControlError as exc:
            return str(exc)
        finally:
            await server.stop()
        return "accepted"

    assert asyncio.run(main()) == f"bad request: longer than {MAX_REQUEST_BYTES} bytes"


# --- the client ------------------------------------------------------------------------------------------------
class OneReplyServer:
    """A Unix socket that answers each connection's request line with ``reply`` (then closes)."""

    def __init__(self, path: Path) -> None:
        self.path, self.reply = path, b""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(4)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    while not conn.recv(65536).endswith(b"\n"):
                        pass
                    conn.sendall(self.reply)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(2)


@pytest.fixture(scope="module")
def appliance_socket() -> Iterator[OneReplyServer]:
    with tempfile.TemporaryDirectory(prefix="control-fuzz-") as tmp:
        server = OneReplyServer(Path(tmp) / "control.sock")
        yield server
        server.close()


replies = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode() + b"\n"),
    mutated(st.sampled_from([b'{"ok": true, "status": {"state": "LOCKED"}}\n', b'{"ok": false, "error": "no"}\n'])),
    st.builds(nested, st.integers(1, 30_000), st.sampled_from(["[", "{\"a\":"])),
    st.sampled_from([b"", b"{\"ok\": true}", b"{\"ok\": 1, \"error\": [1]}\n", b"{\"ok\": false}\n"]))


@fuzz(0.5)
@given(replies)
def test_the_client_returns_an_ok_reply_or_raises_control_error(appliance_socket: OneReplyServer,
                                                                 reply: bytes) -> None:
    appliance_socket.reply = reply
    try:
        answer = control.request(appliance_socket.path, {"cmd": "status"}, timeout_s=2.0)
    except ControlError as exc:
        event("client: ControlError")
        assert len(str(exc)) < 300
        return
    event("client: reply")
    assert isinstance(answer, dict) and answer.get("ok")
