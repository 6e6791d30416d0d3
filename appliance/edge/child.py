"""The appliance's idle-priority child processes (the web console, the SNMP agent): starting one, feeding it the
status, running its calls on the event loop, restarting it when it dies; and the child's own start.

Edge module (a child process, a socket pair, the monotonic clock).  A surface that spends a millisecond or more of
CPU per request (TLS, Flask, pysnmp's BER) would, in the appliance's own process, share the interpreter lock with
the event loop that serves PTP and feeds NTP, and a thread's scheduling class cannot keep a lock holder off the
loop.  So each runs as ``python -m <module> <fd>`` and ``ChildProcess`` (a part of the appliance, on its loop):

- publishes the status to it twice a second (the dict the surfaces read, the leap table when it changes, and what
  ``extra`` adds), dropping a publication while the previous one is still unread;
- runs its calls on the loop (``calls``: method name to function), paced by a budget of their own
  (``CALL_RATE_PER_S``); those beyond it wait their turn, up to ``CALL_QUEUE_MAX`` waiting, and the rest are refused
  as busy;
- sends it what the appliance has to say (``post``: a notification to send, a stop), without blocking;
- keeps the child's last report (``stats`` messages) for the status;
- restarts it, with a growing delay, if it dies, and stops it with the appliance.

The child (``start_child``) sets itself to SCHED_IDLE before it starts a thread (every thread it starts inherits
that), so the kernel runs it, and its socket system calls, only when no time-serving task wants the CPU; it dies
with the appliance (PR_SET_PDEATHSIG) or when the socket pair closes.  What it can take from time service is the
appliance-side work above, which grows with the call budget, not with its request rate (``bench/request_cost.py``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from appliance import leap
from appliance.edge.channel import Channel, ChannelError, Frames, Outbox, frame
from appliance.edge.pacer import Pacer
from appliance.edge.proc import die_with_parent, lower_priority

PUBLISH_S = 0.5
STATS_S = 1.0
CALL_RATE_PER_S, CALL_BURST, CALL_QUEUE_MAX = 20.0, 40, 256
RESTART_FIRST_S, RESTART_MAX_S, RESTART_RESET_S = 1.0, 30.0, 60.0
STOP_WAIT_S = 5.0


class ChildProcess:
    """The appliance's side of one child.  ``status()`` is the runtime's TimeStatus; ``calls`` maps a method name to
    the function that runs it on the loop; ``start`` is what the child needs to start (the configuration, file
    paths); ``extra(status_dict)`` adds to each publication; ``on_message`` hears the child's other messages (not
    calls, not its stats); ``what`` names the child in the log."""

    def __init__(self, loop: asyncio.AbstractEventLoop, what: str, module: str, log: logging.Logger,
                 status: Callable[[], Any], utc_table: Callable[[], leap.LeapTable],
                 calls: dict[str, Callable[..., Any]], start: dict[str, Any],
                 extra: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 on_message: Callable[[dict[str, Any]], None] | None = None):
        from appliance.status import to_dict

        self.loop, self.what, self.module, self.log = loop, what, module, log
        self._status, self._to_dict, self._utc_table, self._extra = status, to_dict, utc_table, extra
        self._on_message = on_message
        self.calls, self.start_message = calls, start
        self.pacer = Pacer(CALL_RATE_PER_S, CALL_BURST)
        self._queue: collections.deque[dict[str, Any]] = collections.deque()
        self._drain_handle: asyncio.TimerHandle | None = None
        self._publish_handle: asyncio.TimerHandle | None = None
        self._restart_handle: asyncio.TimerHandle | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._outbox: Outbox | None = None
        self._frames = Frames()
        self._sent_table: leap.LeapTable | None = None
        self._started_mono = 0.0
        self._restart_s = RESTART_FIRST_S
        self._stopping = False
        self.report: dict[str, Any] = {}
        self.error = ""
        self.restarts = self.calls_served = self.calls_deferred = self.calls_refused = self.publications_skipped = 0

    # --- life ----------------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._spawn()
        self._publish_handle = self.loop.call_later(PUBLISH_S, self._publish_tick)

    def _spawn(self) -> None:
        self._restart_handle = None
        if self.proc is not None:
            self.proc.wait()  # the one _lost found dead or killed a pause ago: reaped at once
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", self.module, str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        except OSError as exc:
            ours.close()
            self._lost(f"cannot start the {self.what} process: {exc}")
            return
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock, self._outbox, self._frames, self._sent_table = ours, Outbox(ours), Frames(), None
        self._started_mono = time.monotonic()
        self.loop.add_reader(ours.fileno(), self._readable)
        self.post({"type": "start", **self.start_message, "publication": self._publication()})

    def stop(self) -> None:
        self._stopping = True
        for handle in (self._publish_handle, self._drain_handle, self._restart_handle):
            if handle is not None:
                handle.cancel()
        if self._sock is not None:
            self.post({"type": "stop"})
            self._close_link()
        proc = self.proc
        if proc is not None:
            try:
                proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.log.warning("the %s process did not stop within %g s: killed", self.what, STOP_WAIT_S)
                proc.kill()
                proc.wait()

    def _close_link(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            self.loop.remove_reader(sock.fileno())
            self.loop.remove_writer(sock.fileno())
            sock.close()
        self._queue.clear()

    def _lost(self, reason: str) -> None:
        """The child is gone (or never came): say why, and start a new one after a pause."""
        self._close_link()
        if self._stopping:
            return
        code: int | str | None = None
        if self.proc is not None:  # never wait on the loop: one still running is killed, and reaped at the restart
            code = self.proc.poll()
            if code is None:
                self.proc.kill()
                code = "killed"
        if time.monotonic() - self._started_mono > RESTART_RESET_S:
            self._restart_s = RESTART_FIRST_S
        self.error = f"{self.what} process stopped ({reason}; exit status {code}): restarting in {self._restart_s:g} s"
        self.log.error("%s", self.error)
        self.report = {}
        self.reported()
        self.restarts += 1
        self._restart_handle = self.loop.call_later(self._restart_s, self._spawn)
        self._restart_s = min(RESTART_MAX_S, 2 * self._restart_s)

    def reported(self) -> None:
        """Hook: ``report`` and ``error`` have just been renewed (a report came, or the child was lost)."""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self._sock is not None else None

    # --- the link ------------------------------------------------------------------------------------------------

    def post(self, message: dict[str, Any]) -> None:
        """Send ``message`` to the child without blocking (what the socket does not take now goes when it can);
        nothing while there is no child."""
        if self._outbox is None or self._sock is None:
            return
        try:
            done = self._outbox.put(frame(message))
        except OSError as exc:
            self._lost(f"cannot write to it: {exc}")
            return
        if not done:
            self.loop.add_writer(self._sock.fileno(), self._writable)

    def _writable(self) -> None:
        if self._outbox is None or self._sock is None:
            return
        try:
            if self._outbox.flush():
                self.loop.remove_writer(self._sock.fileno())
        except OSError as exc:
            self._lost(f"cannot write to it: {exc}")

    def _readable(self) -> None:
        if self._sock is None:
            return
        try:
            data = self._sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(str(exc))
            return
        if not data:
            self._lost("it closed the link")
            return
        try:
            messages = self._frames.feed(data)
        except ChannelError as exc:
            self._lost(str(exc))
            return
        for message in messages:
            kind = message.get("type")
            if kind == "stats":
                self.report = dict(message.get("stats") or {})
                self.error = str(self.report.get("error", ""))
                self.reported()
            elif kind == "call":
                self._on_call(message)
            elif self._on_message is not None:
                self._on_message(message)

    # --- status out, calls in ------------------------------------------------------------------------------------

    def _publication(self) -> dict[str, Any]:
        table = self._utc_table()
        status = self._to_dict(self._status())
        message = {"status": status, "at_mono_ns": time.monotonic_ns()}
        if table is not self._sent_table:
            message["leap"], self._sent_table = table, table
        if self._extra is not None:
            message.update(self._extra(status))
        return message

    def publish_now(self) -> None:
        """A publication now, not at the next tick (after a change the child should show at once)."""
        if self._sock is not None:
            self.post({"type": "status", **self._publication()})

    def _publish_tick(self) -> None:
        self._publish_handle = self.loop.call_later(PUBLISH_S, self._publish_tick)
        if self._sock is None:
            return
        if self._outbox is not None and self._outbox.pending:
            self.publications_skipped += 1  # the child has not read the last one: it gets the next
            return
        self.post({"type": "status", **self._publication()})

    def _on_call(self, message: dict[str, Any]) -> None:
        if len(self._queue) >= CALL_QUEUE_MAX:
            self.calls_refused += 1
            self.post({"type": "reply", "id": message.get("id"), "ok": False, "error": "the appliance is busy"})
            return
        self._queue.append(message)
        self._drain()

    def _drain(self) -> None:
        self._drain_handle = None
        while self._queue:
            wait_s = self.pacer.delay_s()
            if wait_s > 0:
                self.pacer.cancel()
                self.calls_deferred += 1
                self._drain_handle = self.loop.call_later(wait_s, self._drain)
                return
            self._serve(self._queue.popleft())

    def _serve(self, message: dict[str, Any]) -> None:
        ident, method = message.get("id"), message.get("method")
        fn = self.calls.get(method) if isinstance(method, str) else None
        args = message.get("args", ())
        if fn is None or not isinstance(args, tuple):
            reply = {"type": "reply", "id": ident, "ok": False, "error": f"no call {str(method)[:40]!r}"}
        else:
            try:
                reply = {"type": "reply", "id": ident, "ok": True, "result": fn(*args)}
            except Exception as exc:  # noqa: BLE001 - the child hears why; the appliance goes on
                self.log.warning("%s: %s failed: %s", self.what, method, exc)
                reply = {"type": "reply", "id": ident, "ok": False, "error": str(exc)}
        self.calls_served += 1
        try:
            self.post(reply)
        except ChannelError as exc:  # a result too large to send: the caller hears that instead
            self.post({"type": "reply", "id": ident, "ok": False, "error": str(exc)})

    def process_status(self) -> dict[str, Any]:
        return {"pid": self.pid, "restarts": self.restarts, "calls": self.calls_served,
                "calls_deferred": self.calls_deferred, "calls_refused": self.calls_refused,
                "publications_skipped": self.publications_skipped}


# --- the child's side ------------------------------------------------------------------------------------------

class Started:
    """A child's link once the appliance has sent its start message: ``first`` is that message, ``rest`` what came
    with it."""

    def __init__(self, channel: Channel, frames: Frames, first: dict[str, Any], rest: list[dict[str, Any]]):
        self.channel, self.frames, self.first, self.rest = channel, frames, first, rest
        self.stopped = threading.Event()

    def report_every(self, stats: Callable[[], dict[str, Any]], name: str) -> None:
        """Send ``stats()`` to the appliance every STATS_S from a thread of its own, until the link ends."""
        def run() -> None:
            while True:
                try:
                    self.channel.send({"type": "stats", "stats": stats()})
                except ChannelError:
                    return
                if self.stopped.wait(STATS_S):
                    return

        threading.Thread(target=run, name=name, daemon=True).start()

    def serve(self, on_message: Callable[[dict[str, Any]], None]) -> str:
        """Hand every message to ``on_message`` until the appliance says stop or goes away; the reason."""
        def handle(message: dict[str, Any]) -> bool:
            if message.get("type") == "stop":
                return False
            on_message(message)
            return True

        reason = self.channel.run(handle, self.frames) if all(handle(m) for m in self.rest) else "stopped"
        self.stopped.set()
        return reason


def start_child(fd: int, what: str) -> Started | None:
    """In a child, first thing: die with the appliance, drop to idle priority (before any thread starts: they all
    inherit it), leave Ctrl-C to the appliance, and read the start message from ``fd``; None (said on stderr) if
    the appliance sent none."""
    die_with_parent()
    lower_priority()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the appliance, which stops us
    channel, frames = Channel(socket.socket(fileno=fd)), Frames()
    try:
        first, *rest = channel.recv(frames)
    except ChannelError as exc:
        print(f"{what} process: {exc}", file=sys.stderr)
        return None
    if first.get("type") != "start":
        print(f"{what} process: the appliance did not start with a start message", file=sys.stderr)
        return None
    logging.basicConfig(level=first.get("log_level", logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return Started(channel, frames, first, rest)
