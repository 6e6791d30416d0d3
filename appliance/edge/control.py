"""The local control socket: `appliance status` and operator commands talk to the running appliance through it.

I/O edge.  A Unix stream socket created with mode 0600 in the state directory; each connection sends one JSON request
line and receives one JSON reply line.  Only the appliance's own user (or root) may connect: the socket's mode keeps
others out and SO_PEERCRED is checked as well, so no unauthenticated client can issue a command.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import stat
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("appliance.edge.control")
MAX_REQUEST_BYTES = 64 * 1024
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]] | dict[str, Any]]


class ControlError(Exception):
    """The appliance could not be reached or refused the request."""


class NotRunning(ControlError):
    """No appliance answers at the control socket: none there, or a stale one left by an appliance that died."""


class ControlServer:
    def __init__(self, path: Path, handler: Handler):
        self.path = path
        self._handler = handler
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.path.exists() or self.path.is_symlink():
            if _alive(self.path):
                raise ControlError(f"another appliance is already running (control socket {self.path} answers)")
            if not (self.path.is_symlink() or stat.S_ISSOCK(self.path.stat().st_mode)):
                raise ControlError(f"{self.path} exists and is not a socket; not replacing it")
            self.path.unlink()  # a stale socket left behind by an appliance that died
        old_umask = os.umask(0o177)  # the socket is born 0600: no window where others could connect
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.path),
                                                           limit=MAX_REQUEST_BYTES)
        finally:
            os.umask(old_umask)

    async def stop(self) -> None:
        """Close the socket and remove its file; a server that never started leaves the path alone."""
        if self._server is None:
            return  # the path may belong to another appliance that is running
        self._server.close()
        await self._server.wait_closed()
        self._server = None
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            # Read the request line before any reply: closing with it unread would reset the client's connection,
            # and a refused client would see "broken pipe" instead of the reason.
            line = await asyncio.wait_for(_read_request(reader), timeout=5)
            if not _peer_allowed(writer):
                log.warning("control socket: refused a connection from another user")
                await _reply(writer, {"ok": False, "error": "permission denied"})
                return
            if line is None:
                await _reply(writer, {"ok": False, "error": f"bad request: longer than {MAX_REQUEST_BYTES} bytes"})
                return
            request = _parse_request(line)
            if isinstance(request, str):
                await _reply(writer, {"ok": False, "error": f"bad request: {request}"})
                return
            try:
                result = self._handler(request)
                if asyncio.iscoroutine(result):
                    result = await result
                reply = _encode(result)  # type: ignore[arg-type]
            except Exception:  # a bug in a handler (whatever it raises) must not take the appliance down
                log.exception("control socket: handler failed")
                reply = _encode({"ok": False, "error": "internal error (see the appliance log)"})
            await _send(writer, reply)
        except (asyncio.TimeoutError, ConnectionError) as exc:
            log.info("control socket: dropped a client: %s", exc)
        except Exception:  # nor may anything else that goes wrong with one client
            log.exception("control socket: connection failed")
        finally:
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> bytes | None:
    """The request line (what came before the end of the stream, if it has no line end); None when it runs past
    MAX_REQUEST_BYTES, after reading the rest of it (up to 16 times the limit), so that the refusal reaches the client
    instead of a reset."""
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial
    except asyncio.LimitOverrunError:  # the line is left in the buffer: drop it, to its end
        for _ in range(16):
            chunk = await reader.read(MAX_REQUEST_BYTES)
            if not chunk or b"\n" in chunk:
                break
        return None


def _parse_request(line: bytes) -> dict[str, Any] | str:
    """The request object, or why it is not one (JSON, or JSON nested past the parser's recursion limit)."""
    try:
        request = json.loads(line)
    except RecursionError:
        return "JSON nested too deeply"
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        return str(exc)[:200]
    if not isinstance(request, dict):
        return "request must be a JSON object"
    return request


def _encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


async def _reply(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    await _send(writer, _encode(message))


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    try:
        await writer.drain()
    except ConnectionError:
        pass


def _peer_allowed(writer: asyncio.StreamWriter) -> bool:
    sock = writer.get_extra_info("socket")
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return True  # the socket's 0600 mode is the guard where credentials cannot be read
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid in (0, os.getuid())


def _alive(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1)
            s.connect(str(path))
            return True
    except OSError:
        return False


def request(path: Path, message: dict[str, Any], timeout_s: float = 5.0) -> dict[str, Any]:
    """Send one request to a running appliance (blocking; for the command line)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(str(path))
            s.sendall(json.dumps(message).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    except FileNotFoundError:
        raise NotRunning(f"the appliance is not running (no control socket at {path})") from None
    except ConnectionRefusedError:
        raise NotRunning(f"the appliance is not running (stale control socket at {path})") from None
    except PermissionError:
        raise ControlError(f"permission denied on {path}: run as the appliance's user or root") from None
    except OSError as exc:
        raise ControlError(f"cannot reach the appliance at {path}: {exc}") from None
    try:
        reply = json.loads(data)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's recursion limit
        raise ControlError(f"the appliance sent an unreadable reply ({len(data)} bytes)") from None
    if not isinstance(reply, dict):
        raise ControlError(f"the appliance sent an unexpected reply (a JSON {type(reply).__name__}, not an object)")
    if not reply.get("ok", False):
        raise ControlError(str(reply.get("error", "request refused")))
    return reply
