"""Serving the console: cheroot (a production WSGI server) with TLS in a thread, fed by the appliance's loop.

Edge module (sockets, threads).  ``WebPart`` is started and stopped with the runner's other parts.  Twice a second,
on the appliance's event loop, it publishes the status as a plain dict; the web threads read that dict and never
touch the engines.  Operator commands go the other way: posted to the loop, answered through a future.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import secrets
import ssl
import threading
import time
from pathlib import Path
from typing import Any

from cheroot import wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter

from appliance.web.app import WebContext, create_app
from appliance.web.tls import ensure_certificate

log = logging.getLogger("appliance.web")
PUBLISH_S = 0.5


def secret_key(state_dir: Path) -> bytes:
    """The session-signing key, made on first start (mode 0600); sessions survive a restart."""
    path = state_dir / "web-secret.key"
    try:
        data = path.read_bytes()
        if len(data) >= 32:
            return data
    except FileNotFoundError:
        pass
    data = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return data


class Publisher:
    """The latest status as a dict, refreshed on the loop; read from any thread."""

    def __init__(self, status: Any, loop: asyncio.AbstractEventLoop):
        from appliance.status import to_dict

        self._status, self._to_dict, self.loop = status, to_dict, loop
        self.latest: dict[str, Any] = to_dict(status())
        self.at_mono_ns = time.monotonic_ns()
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._tick()

    def _tick(self) -> None:
        self.latest, self.at_mono_ns = self._to_dict(self._status()), time.monotonic_ns()
        self._handle = self.loop.call_later(PUBLISH_S, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()

    def now_tai_ns(self) -> int:
        return int(self.latest["at_tai_ns"]) + time.monotonic_ns() - self.at_mono_ns

    def run_on_loop(self, fn: Any, *args: Any, timeout_s: float = 5.0) -> Any:
        async def call() -> Any:
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout_s)


WEB_NICE = 19  # the console's threads yield the CPU to NTP, PTP and the clock (see lower_priority)
KEEP_ALIVE_CONNECTIONS = 64


def lower_priority() -> None:
    """Make the calling thread run only when nothing else wants the CPU (Linux SCHED_IDLE, for this thread only).
    The time services run in the main loop and the NTP worker processes at normal priority; an operator's browser
    or a scraper must never take CPU from them, nor delay them: a waking NTP worker preempts a SCHED_IDLE thread at
    once, where a merely niced one keeps its time slice (milliseconds of NTP latency).  A console under load
    answers more slowly instead.  Where SCHED_IDLE is refused, the thread is niced to 19."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return
    except (OSError, AttributeError) as exc:
        log.debug("web console: no SCHED_IDLE (%s): nice %d instead", exc, WEB_NICE)
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WEB_NICE)
    except OSError as exc:  # not Linux, or a sandbox that forbids it: the console still works
        log.debug("web console: cannot lower thread priority: %s", exc)


def _low_priority(app: Any) -> Any:
    """A WSGI app whose worker threads lower their own priority before their first request."""
    lowered = threading.local()

    def wsgi_app(environ: dict[str, Any], start_response: Any) -> Any:
        if not getattr(lowered, "done", False):
            lower_priority()
            lowered.done = True
        return app(environ, start_response)
    return wsgi_app


class _Server(wsgi.Server):  # type: ignore[misc]
    def error_log(self, msg: str = "", level: int = 20, traceback: bool = False) -> None:
        """cheroot's errors to the appliance's log; a client that hangs up mid-answer is not one."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ssl.SSLError, ConnectionError, TimeoutError)):
            log.debug("web console: %s: %s", msg, exc)
            return
        log.log(level, "web console: %s", msg, exc_info=traceback)


class WebServer:
    def __init__(self, wsgi_app: Any, host: str, port: int, cert: Path, key: Path, threads: int = 8):
        self.host, self.port = host, port
        self.server = _Server((host, port), _low_priority(wsgi_app), numthreads=threads, max=threads,
                              server_name="appliance", shutdown_timeout=2)
        self.server.keep_alive_conn_limit = KEEP_ALIVE_CONNECTIONS  # fewer TLS handshakes under many clients
        adapter = BuiltinSSLAdapter(str(cert), str(key))
        adapter.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.server.ssl_adapter = adapter
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.server.prepare()  # binds now: an error reaches the caller

        def serve() -> None:  # accepts connections and does the TLS handshakes: at low priority too
            lower_priority()
            self.server.serve()
        self._thread = threading.Thread(target=serve, name="web", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)


class WebPart:
    """The console, started and stopped with the appliance; a port it cannot bind is logged, not fatal."""

    def __init__(self, ctx: WebContext, publisher: Publisher, host: str, port: int, cert: Path, key: Path,
                 state_dir: Path):
        self.ctx, self.publisher, self.host, self.port = ctx, publisher, host, port
        self.cert, self.key, self.state_dir = cert, key, state_dir
        self.server: WebServer | None = None
        self.error = ""

    def start(self) -> None:
        self.publisher.start()
        try:
            if ensure_certificate(self.cert, self.key, self.host, datetime.datetime.now(datetime.timezone.utc)):
                log.warning("web console: made a self-signed certificate %s (set web.cert and web.key to use "
                            "your own)", self.cert)
            app = create_app(self.ctx, secret_key(self.state_dir))
            self.pacer = app.extensions["pacer"]
            self.server = WebServer(app, self.host, self.port, self.cert, self.key)
            self.server.start()
            log.info("web console on https://%s:%d/", self.host if ":" not in self.host else f"[{self.host}]",
                     self.port)
        except (OSError, ValueError, ssl.SSLError) as exc:
            self.error = f"cannot serve on {self.host} port {self.port}: {exc}"
            log.error("web console: %s", self.error)
            self.server = None
        except Exception as exc:  # noqa: BLE001 - the console failing must not take time service down with it
            self.error = f"failed to start: {exc}"
            log.exception("web console: %s", self.error)
            self.server = None

    def stop(self) -> None:
        self.publisher.stop()
        if self.server is not None:
            self.server.stop()

    def status(self) -> dict[str, Any]:
        pacer = getattr(self, "pacer", None)
        return {"enabled": True, "listen": self.host, "port": self.port, "error": self.error,
                "serving": self.server is not None, "paced": pacer.paced if pacer else 0,
                "busy_refused": pacer.refused if pacer else 0}
