"""The web console in a process of its own, at idle CPU priority, fed by the appliance through a socket pair.

Edge module (a child process, sockets, threads, the monotonic clock).  The console (TLS, Flask, templates, JSON,
SQLite reads of the users, the audit trail and the time-quality record) costs a millisecond or more of CPU per
request; in the appliance's own process it would share the interpreter lock with the event loop that serves PTP
and feeds NTP, and a thread's scheduling class cannot keep a lock holder off the loop.  So ``ConsoleProcess`` (a
part of the appliance, on its event loop) starts ``python -m appliance.web.process`` and from then on:

- publishes the status to it twice a second (the dict it makes for the console anyway, and the leap table when it
  changes), dropping a publication while the previous one is still unread;
- runs the console's calls on the loop: an operator command, an audit record to append, a setting to apply live.
  Calls are paced by a budget of their own (``CALL_RATE_PER_S``); those beyond it wait their turn, up to
  ``CALL_QUEUE_MAX`` waiting, and the rest are refused as busy;
- keeps the console's last report (port, connections, pacing) for the status;
- restarts it, with a growing delay, if it dies, and stops it with the appliance.

The console process sets itself to SCHED_IDLE before it starts a thread (every thread it starts inherits that), so
the kernel runs it, its TLS and its socket system calls only when no time-serving task wants the CPU.  It reads
the SQLite files itself (WAL lets it read while the appliance writes), writes only its own files (users, console
settings, the certificate), and dies with the appliance (PR_SET_PDEATHSIG) or when the socket pair closes.  So
what the console can take from time service is the appliance-side work above, which grows with the call budget,
not with the request rate (``bench/request_cost.py`` measures both sides).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance import leap
from appliance.edge.pacer import Pacer
from appliance.edge.proc import die_with_parent
from appliance.web.channel import CallFailed, Channel, ChannelError, Frames, Outbox, frame

log = logging.getLogger("appliance.web")
PUBLISH_S = 0.5
STATS_S = 1.0
CALL_RATE_PER_S, CALL_BURST, CALL_QUEUE_MAX = 20.0, 40, 256
RESTART_FIRST_S, RESTART_MAX_S, RESTART_RESET_S = 1.0, 30.0, 60.0
STOP_WAIT_S = 5.0


class ConsoleProcess:
    """The appliance's side.  ``status()`` is the runtime's TimeStatus; ``calls`` maps a method name to the function
    that runs it on the loop; ``start`` is what the console needs to start (the configuration, file paths)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, status: Callable[[], Any],
                 utc_table: Callable[[], leap.LeapTable], calls: dict[str, Callable[..., Any]],
                 start: dict[str, Any], listen: str, port: int):
        from appliance.status import to_dict

        self.loop, self._status, self._to_dict, self._utc_table = loop, status, to_dict, utc_table
        self.calls, self.start_message, self.listen, self.port = calls, start, listen, port
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
            self.proc = subprocess.Popen([sys.executable, "-m", "appliance.web.process", str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        except OSError as exc:
            ours.close()
            self._lost(f"cannot start the console process: {exc}")
            return
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock, self._outbox, self._frames, self._sent_table = ours, Outbox(ours), Frames(), None
        self._started_mono = time.monotonic()
        self.loop.add_reader(ours.fileno(), self._readable)
        self._send({"type": "start", **self.start_message, "publication": self._publication()})

    def stop(self) -> None:
        self._stopping = True
        for handle in (self._publish_handle, self._drain_handle, self._restart_handle):
            if handle is not None:
                handle.cancel()
        if self._sock is not None:
            self._send({"type": "stop"})
            self._close_link()
        proc = self.proc
        if proc is not None:
            try:
                proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                log.warning("web console: the console process did not stop within %g s: killed", STOP_WAIT_S)
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
        """The console process is gone (or never came): say why, and start a new one after a pause."""
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
        self.error = f"console process stopped ({reason}; exit status {code}): restarting in {self._restart_s:g} s"
        log.error("web console: %s", self.error)
        self.report = {}
        self.restarts += 1
        self._restart_handle = self.loop.call_later(self._restart_s, self._spawn)
        self._restart_s = min(RESTART_MAX_S, 2 * self._restart_s)

    # --- the link ------------------------------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
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
            elif kind == "call":
                self._on_call(message)

    # --- status out, calls in ------------------------------------------------------------------------------------

    def _publication(self) -> dict[str, Any]:
        table = self._utc_table()
        message = {"status": self._to_dict(self._status()), "at_mono_ns": time.monotonic_ns()}
        if table is not self._sent_table:
            message["leap"], self._sent_table = table, table
        return message

    def _publish_tick(self) -> None:
        self._publish_handle = self.loop.call_later(PUBLISH_S, self._publish_tick)
        if self._sock is None:
            return
        if self._outbox is not None and self._outbox.pending:
            self.publications_skipped += 1  # the console has not read the last one: it gets the next
            return
        self._send({"type": "status", **self._publication()})

    def _on_call(self, message: dict[str, Any]) -> None:
        if len(self._queue) >= CALL_QUEUE_MAX:
            self.calls_refused += 1
            self._send({"type": "reply", "id": message.get("id"), "ok": False, "error": "the appliance is busy"})
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
            except Exception as exc:  # noqa: BLE001 - the console hears why; the appliance goes on
                log.warning("web console: %s failed: %s", method, exc)
                reply = {"type": "reply", "id": ident, "ok": False, "error": str(exc)}
        self.calls_served += 1
        try:
            self._send(reply)
        except ChannelError as exc:  # a result too large to send: the caller hears that instead
            self._send({"type": "reply", "id": ident, "ok": False, "error": str(exc)})

    def status(self) -> dict[str, Any]:
        r = self.report
        return {"enabled": True, "listen": self.listen, "port": int(r.get("port", self.port)), "error": self.error,
                "serving": bool(r.get("serving", False)), "paced": int(r.get("paced", 0)),
                "busy_refused": int(r.get("busy_refused", 0)), "connections": r.get("connections", {}),
                "connections_dropped": r.get("connections_dropped", {}),
                "process": {"pid": self.proc.pid if self.proc is not None and self._sock is not None else None,
                            "restarts": self.restarts, "calls": self.calls_served,
                            "calls_deferred": self.calls_deferred, "calls_refused": self.calls_refused,
                            "publications_skipped": self.publications_skipped}}


# --- the console process ---------------------------------------------------------------------------------------


class Feed:
    """What the appliance last published, as the console's WebContext reads it (from any thread)."""

    def __init__(self, publication: dict[str, Any]):
        self.table: leap.LeapTable = publication["leap"]
        self.take(publication)

    def take(self, publication: dict[str, Any]) -> None:
        if "leap" in publication:
            self.table = publication["leap"]
        self.latest: dict[str, Any] = publication["status"]
        self.at_mono_ns = int(publication["at_mono_ns"])  # CLOCK_MONOTONIC: one clock for both processes

    def now_tai_ns(self) -> int:
        return int(self.latest["at_tai_ns"]) + time.monotonic_ns() - self.at_mono_ns

    def label(self, tai_ns: int) -> str:
        u = leap.tai_to_utc(tai_ns, self.table)
        return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"

    def posix_ms(self, tai_ns: int) -> int:
        return leap.tai_to_posix_ns(tai_ns, self.table)[0] // 1_000_000


def console_context(start: dict[str, Any], feed: Feed, channel: Channel) -> Any:
    """The WebContext of the console process: its own readers of the state files, calls for everything else."""
    from appliance.audit.store import AuditError, AuditStore
    from appliance.web.app import WebContext
    from appliance.web.settings_edit import SettingsEditor
    from appliance.web.usercli import USERS_FILE
    from appliance.web.users import UserStore

    config, state_dir = start["config"], Path(start["state_dir"])
    w = config.web
    users = UserStore(state_dir / USERS_FILE, w.lockout_failures, float(w.lockout_s))
    store = quality = None
    try:
        store = AuditStore(state_dir / "audit.sqlite", create=False)
    except AuditError as exc:
        log.error("web console: no audit trail to show: %s", exc)
    if config.quality.enabled:
        from appliance.audit.service import open_quality

        quality = open_quality(state_dir, config, feed.table)

    def command(request: dict[str, Any]) -> dict[str, Any]:
        try:
            return channel.call("command", request)  # type: ignore[no-any-return]
        except CallFailed as exc:
            return {"ok": False, "error": str(exc)}

    def audit_append(kind: str, actor: str, text: str, detail: dict[str, Any]) -> Any:
        try:
            return channel.call("audit_append", kind, actor, text, detail)
        except CallFailed as exc:
            log.error("web console: audit record %s by %s not written: %s", kind, actor, exc)
            return None

    def apply_live(name: str, value: Any) -> bool:
        try:
            return bool(channel.call("apply_live", name, value))
        except CallFailed as exc:
            log.warning("web console: %s saved, not applied now: %s", name, exc)
            return False

    def export(since: int | None, until: int | None) -> bytes:
        if store is None:
            raise ValueError("there is no audit trail to export")
        return export_bundle(store, state_dir, since, until, feed.now_tai_ns(), feed.label)

    return WebContext(
        status=lambda: feed.latest, command=command, users=users,
        settings=SettingsEditor(config, state_dir, apply_live), audit=store, audit_append=audit_append,
        quality=quality, export_bundle=export if store is not None else None, utc_label=feed.label,
        now_tai_ns=feed.now_tai_ns, posix_ms=feed.posix_ms, metrics_public=w.metrics_public,
        session_timeout_s=w.session_timeout_s, rate_per_s=float(w.rate_per_s), rate_burst=5 * w.rate_per_s,
        budget_per_s=float(w.max_requests_per_s))


def export_bundle(store: Any, state_dir: Path, since: int | None, until: int | None, now_tai_ns: int,
                  label: Callable[[int], str]) -> bytes:
    """A signed bundle of the audit records from ``since`` to ``until`` (default: all of them), as bytes."""
    from appliance.audit.bundle import export_bundle as write_bundle
    from appliance.audit.bundle import load_or_create_key
    from appliance.units import NS_PER_S

    key = load_or_create_key(state_dir)
    with tempfile.TemporaryDirectory(dir=state_dir) as tmp:
        path = Path(tmp) / "bundle.json"
        write_bundle(store, 0 if since is None else since, now_tai_ns + NS_PER_S if until is None else until,
                     key, path, label)
        return path.read_bytes()


def child_main(fd: int) -> int:
    """The console process: started by ``ConsoleProcess`` with its end of the socket pair as ``fd``."""
    from appliance.web.server import WebPart, lower_priority

    die_with_parent()
    lower_priority()  # before any thread starts: they all inherit SCHED_IDLE
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the appliance, which stops us
    channel, frames = Channel(socket.socket(fileno=fd)), Frames()
    try:
        first, *rest = channel.recv(frames)
    except ChannelError as exc:
        print(f"console process: {exc}", file=sys.stderr)
        return 1
    if first.get("type") != "start":
        print("console process: the appliance did not start with a start message", file=sys.stderr)
        return 1
    logging.basicConfig(level=first.get("log_level", logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    feed = Feed(first["publication"])
    part = WebPart(console_context(first, feed, channel), first["listen"], int(first["port"]),
                   Path(first["cert"]), Path(first["key"]), Path(first["state_dir"]))
    part.start()
    stopped = threading.Event()

    def report() -> None:
        while True:
            try:
                channel.send({"type": "stats", "stats": part.status()})
            except ChannelError:
                return
            if stopped.wait(STATS_S):
                return

    def on_message(message: dict[str, Any]) -> bool:
        if message.get("type") == "status":
            feed.take(message)
        return message.get("type") != "stop"

    threading.Thread(target=report, name="web-report", daemon=True).start()
    reason = channel.run(on_message, frames) if all(on_message(m) for m in rest) else "stopped"
    stopped.set()
    log.debug("web console process: %s", reason)
    part.stop()
    return 0


if __name__ == "__main__":
    sys.exit(child_main(int(sys.argv[1])))
