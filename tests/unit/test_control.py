"""Unit tests for appliance.edge.control: the Unix control socket server and the blocking client `request()`."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat

import pytest

from appliance.edge import control
from appliance.edge.control import ControlError, ControlServer, request


def echo(req: dict) -> dict:
    if req.get("cmd") == "status":
        return {"ok": True, "status": {"state": "LOCKED"}, "echo": req}
    return {"ok": False, "error": f"unknown command {req.get('cmd')!r}"}


async def ask(path, message: dict) -> dict:
    return await asyncio.get_running_loop().run_in_executor(None, request, path, message, 2.0)


def raw_exchange(path, data: bytes) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        s.connect(str(path))
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    return json.loads(reply)


async def raw(path, data: bytes) -> dict:
    return await asyncio.get_running_loop().run_in_executor(None, raw_exchange, path, data)


def serve(path, handler, body):
    """Start a server at ``path``, run ``body(server)`` in the same loop, stop the server; return body's result."""
    async def main():
        server = ControlServer(path, handler)
        await server.start()
        try:
            return await body(server)
        finally:
            await server.stop()
    return asyncio.run(main())


def leave_stale_socket(path) -> None:
    """What an appliance that died leaves behind: a socket file nobody listens on."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()


@pytest.fixture
def sock(tmp_path):
    return tmp_path / "state" / "c.sock"


def test_round_trip_socket_mode_and_cleanup(sock):
    async def body(server):
        mode = stat.S_IMODE(os.stat(sock).st_mode)
        return mode, await ask(sock, {"cmd": "status", "verbose": True})

    mode, reply = serve(sock, echo, body)
    assert mode == 0o600
    assert stat.S_IMODE(os.stat(sock.parent).st_mode) == 0o700
    assert reply == {"ok": True, "status": {"state": "LOCKED"}, "echo": {"cmd": "status", "verbose": True}}
    assert not sock.exists()


def test_async_handler(sock):
    async def handler(req):
        await asyncio.sleep(0)
        return {"ok": True, "n": req["n"] + 1}

    async def body(server):
        return [await ask(sock, {"n": i}) for i in range(3)]

    assert [r["n"] for r in serve(sock, handler, body)] == [1, 2, 3]


@pytest.mark.parametrize("data, detail", [(b"not json\n", "bad request"), (b"[1, 2]\n", "JSON object"),
                                          (b"\n", "bad request"), (b"\xff\xfe\n", "bad request")])
def test_bad_request_gets_ok_false(sock, data, detail):
    async def body(server):
        return await raw(sock, data), await ask(sock, {"cmd": "status"})

    reply, after = serve(sock, echo, body)
    assert reply["ok"] is False and reply["error"].startswith("bad request") and detail in reply["error"]
    assert after["ok"] is True


def test_refusal_from_the_appliance_is_a_control_error(sock):
    async def body(server):
        with pytest.raises(ControlError, match="unknown command 'reboot'"):
            await ask(sock, {"cmd": "reboot"})

    serve(sock, echo, body)


def test_no_server_is_not_running(tmp_path):
    with pytest.raises(ControlError, match="not running") as info:
        request(tmp_path / "none.sock", {"cmd": "status"})
    assert str(tmp_path / "none.sock") in str(info.value)


def test_stale_socket_client_says_not_running(tmp_path):
    path = tmp_path / "c.sock"
    leave_stale_socket(path)
    with pytest.raises(ControlError, match="not running.*stale"):
        request(path, {"cmd": "status"})


def test_stale_socket_file_is_replaced_on_start(sock):
    sock.parent.mkdir()
    leave_stale_socket(sock)

    async def body(server):
        return await ask(sock, {"cmd": "status"})

    assert serve(sock, echo, body)["ok"] is True


def test_regular_file_at_the_socket_path_is_not_deleted(tmp_path):
    path = tmp_path / "precious.toml"
    path.write_text("keep me")
    with pytest.raises(ControlError, match="not a socket"):
        asyncio.run(ControlServer(path, echo).start())
    assert path.read_text() == "keep me"


def test_second_server_refuses_and_first_keeps_serving(sock):
    async def body(server):
        second = ControlServer(sock, echo)
        with pytest.raises(ControlError, match="already running"):
            await second.start()
        await second.stop()  # must not remove the running appliance's socket
        return sock.exists(), await ask(sock, {"cmd": "status"})

    exists, reply = serve(sock, echo, body)
    assert exists and reply["ok"] is True


@pytest.mark.parametrize("exc", [RuntimeError("boom"), ValueError("bad value"), KeyError("k"), TypeError("t")])
def test_handler_error_is_internal_error_and_server_keeps_serving(sock, exc, caplog):
    def handler(req):
        if req.get("cmd") == "crash":
            raise exc
        return echo(req)

    async def body(server):
        with pytest.raises(ControlError, match="internal error"):
            await ask(sock, {"cmd": "crash"})
        return await ask(sock, {"cmd": "status"})

    assert serve(sock, handler, body)["ok"] is True
    assert "handler failed" in caplog.text


def test_unserializable_handler_result_is_internal_error(sock):
    async def body(server):
        with pytest.raises(ControlError, match="internal error"):
            await ask(sock, {"cmd": "x"})

    serve(sock, lambda req: {"ok": True, "value": object()}, body)


@pytest.mark.parametrize("result", [[1, 2], None, "text"])
def test_reply_that_is_not_an_object_is_a_control_error(sock, result):
    async def body(server):
        with pytest.raises(ControlError, match="unexpected reply"):
            await ask(sock, {"cmd": "x"})

    serve(sock, lambda req: result, body)


def test_peer_refused_gets_permission_denied(sock, monkeypatch):
    monkeypatch.setattr(control, "_peer_allowed", lambda writer: False)

    async def body(server):
        with pytest.raises(ControlError, match="permission denied"):
            await ask(sock, {"cmd": "status"})

    serve(sock, echo, body)


def test_own_user_passes_the_peer_check(sock):
    seen = []

    def handler(req):
        seen.append(req)
        return {"ok": True}

    async def body(server):
        return await ask(sock, {"cmd": "ping"})

    assert serve(sock, handler, body) == {"ok": True} and seen == [{"cmd": "ping"}]
