"""The link between the appliance and its console process: length-prefixed pickled messages over a socket pair.

Edge module (a Unix stream socket).  Both ends are the appliance's own code, started by it with a socket pair that no
other process holds, so the messages are pickled (the status dict, the leap table, a command's reply) rather than
converted to JSON and back.  The appliance's end never blocks: it reads into a ``Frames`` buffer and writes through
``Outbox``, from its event loop.  The console's end is ``Channel``: blocking reads in one thread and calls from any
of the console's worker threads, each waiting for its own reply.
"""

from __future__ import annotations

import itertools
import pickle
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

_LEN = struct.Struct("!I")
MAX_FRAME_BYTES = 16 << 20  # a status dict is a few kB, an audit query never crosses: beyond this is a broken peer


class ChannelError(Exception):
    """The other end broke the framing, sent something that is not a message, or went away."""


class CallFailed(Exception):
    """The appliance refused or could not run a call from the console (busy, timed out, or it raised)."""


def frame(message: dict[str, Any]) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > MAX_FRAME_BYTES:
        raise ChannelError(f"message of {len(data)} bytes; at most {MAX_FRAME_BYTES}")
    return _LEN.pack(len(data)) + data


class Frames:
    """Reassembles messages from whatever the socket gave."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buf += data
        out = []
        while len(self._buf) >= _LEN.size:
            (size,) = _LEN.unpack_from(self._buf)
            if size > MAX_FRAME_BYTES:
                raise ChannelError(f"frame of {size} bytes announced; at most {MAX_FRAME_BYTES}")
            if len(self._buf) < _LEN.size + size:
                break
            body = bytes(self._buf[_LEN.size:_LEN.size + size])
            del self._buf[:_LEN.size + size]
            try:
                message = pickle.loads(body)  # noqa: S301 - our own child, over a socket pair only it holds
            except Exception as exc:  # noqa: BLE001 - whatever unpickling raises, the link is broken
                raise ChannelError(f"undecodable message: {exc}") from None
            if not isinstance(message, dict):
                raise ChannelError(f"message is a {type(message).__name__}, not a dict")
            out.append(message)
        return out


class Outbox:
    """Bytes waiting to go out on a non-blocking socket, in order."""

    def __init__(self, sock: socket.socket):
        self.sock, self._buf = sock, bytearray()

    @property
    def pending(self) -> int:
        return len(self._buf)

    def put(self, data: bytes) -> bool:
        """Queue ``data`` and send what the socket takes now; True if nothing is left waiting."""
        self._buf += data
        return self.flush()

    def flush(self) -> bool:
        while self._buf:
            try:
                sent = self.sock.send(self._buf)
            except (BlockingIOError, InterruptedError):
                return False
            del self._buf[:sent]
        return True


class Channel:
    """The console's end: ``call`` from any thread, ``run`` in one thread dispatching everything that arrives."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._lock = threading.Lock()
        self.closed = False

    def send(self, message: dict[str, Any]) -> None:
        data = frame(message)
        with self._send_lock:
            try:
                self.sock.sendall(data)
            except OSError as exc:
                raise ChannelError(f"the appliance went away: {exc}") from None

    def recv(self, frames: Frames) -> list[dict[str, Any]]:
        """The next messages (blocking); ChannelError when the appliance closed its end."""
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError as exc:
                raise ChannelError(f"the appliance went away: {exc}") from None
            if not data:
                raise ChannelError("the appliance closed the link")
            messages = frames.feed(data)
            if messages:
                return messages

    def call(self, method: str, *args: Any, timeout_s: float = 5.0) -> Any:
        """Run ``method`` in the appliance and return its result; CallFailed with the reason if it did not."""
        ident, done, box = next(self._ids), threading.Event(), []
        with self._lock:
            if self.closed:
                raise CallFailed("the appliance is not reachable")
            self._waiting[ident] = (done, box)
        try:
            self.send({"type": "call", "id": ident, "method": method, "args": args})
            if not done.wait(timeout_s):
                raise CallFailed(f"{method}: no answer from the appliance within {timeout_s:g} s")
        except ChannelError as exc:
            raise CallFailed(str(exc)) from None
        finally:
            with self._lock:
                self._waiting.pop(ident, None)
        reply = box[0]
        if not reply.get("ok"):
            raise CallFailed(f"{method}: {reply.get('error', 'refused')}")
        return reply.get("result")

    def answered(self, message: dict[str, Any]) -> None:
        """A reply arrived: wake the caller waiting for it (a reply nobody waits for any more is dropped)."""
        with self._lock:
            waiter = self._waiting.get(message.get("id", -1))
        if waiter is not None:
            waiter[1].append(message)
            waiter[0].set()

    def run(self, on_message: Callable[[dict[str, Any]], bool], frames: Frames | None = None) -> str:
        """Dispatch replies here and every other message to ``on_message`` until it returns False or the link
        breaks; the reason it ended.  Callers still waiting are released (their calls fail)."""
        frames = frames or Frames()
        reason = "stopped"
        try:
            going = True
            while going:
                for message in self.recv(frames):
                    if message.get("type") == "reply":
                        self.answered(message)
                    elif not on_message(message):
                        going = False
                        break
        except ChannelError as exc:
            reason = str(exc)
        with self._lock:
            self.closed = True
            waiting, self._waiting = self._waiting, {}
        for done, box in waiting.values():
            box.append({"ok": False, "error": reason})
            done.set()
        return reason
