"""Read a receiver's serial line (UART, USB, or a pseudo-terminal) in a thread and hand the bytes to the core.

I/O edge.  Every chunk is stamped on the local clock the moment ``read`` returns.  When the device is missing, vanishes
or errors, the reader reports a DeviceEvent once, closes, and retries with exponential back-off until it can open the
device again; it never gives up and never lets an exception end the thread.  A failure is reported again only when
its reason changes (the device that vanished cannot be opened either; a missing device comes back unreadable), so
the core always has the current error without a report every retry.

What the core sends the receiver (set-up commands, polls) is written by a thread of its own, so a slow line never
holds up the loop or the reads; a write while the device is closed is dropped (the set-up asks again), and a change
of speed applies to the open port at once and to every reopen after it.
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import termios
import threading
import time
from collections.abc import Callable

import serial

from appliance.events import DeviceEvent

log = logging.getLogger("appliance.gnss.serial")
READ_SIZE = 4096
WRITE_QUEUE = 64  # writes waiting for the line; more are dropped (the set-up retries what goes unanswered)


class SerialReader:
    def __init__(self, device: str, baud: int, on_bytes: Callable[[bytes, int], None],
                 on_device: Callable[[DeviceEvent], None], clock_ns: Callable[[], int] = time.time_ns,
                 initial_backoff_s: float = 0.25, max_backoff_s: float = 30.0,
                 opener: Callable[..., serial.Serial] = serial.Serial):
        self.device, self.baud = device, baud
        self._on_bytes, self._on_device = on_bytes, on_device
        self._clock_ns = clock_ns
        self._initial_backoff_s, self._max_backoff_s = initial_backoff_s, max_backoff_s
        self._opener = opener
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"serial:{device}", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name=f"serial-tx:{device}", daemon=True)
        self._writes: queue.Queue[bytes] = queue.Queue(WRITE_QUEUE)
        self._port: serial.Serial | None = None
        self._lock = threading.Lock()
        self.bytes_read = 0
        self.bytes_written = 0
        self.writes_dropped = 0
        self.opens = 0

    def start(self) -> None:
        self._thread.start()
        self._writer.start()

    def stop(self, join_timeout_s: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(join_timeout_s)
        self._writer.join(join_timeout_s)

    # --- what the core sends ---------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        """Queue bytes for the receiver (any thread)."""
        try:
            self._writes.put_nowait(bytes(data))
        except queue.Full:
            self.writes_dropped += 1

    def set_baud(self, baud: int) -> None:
        """Change the line's speed now (if open) and for every reopen."""
        self.baud = baud
        with self._lock:
            port = self._port
            if port is not None:
                try:
                    port.baudrate = baud
                except (serial.SerialException, OSError, ValueError) as exc:
                    log.warning("serial %s: cannot change speed to %d: %s", self.device, baud, _why(exc))
                    return
        log.info("serial %s: now at %d baud", self.device, baud)

    def _write_loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._writes.get(timeout=0.2)
            except queue.Empty:
                continue
            with self._lock:
                port = self._port
            if port is None:
                self.writes_dropped += 1
                continue
            try:
                port.write(data)
                self.bytes_written += len(data)
            except (serial.SerialException, OSError) as exc:  # the reader notices a lost device and reports it
                self.writes_dropped += 1
                log.debug("serial %s: write failed: %s", self.device, _why(exc))

    def _run(self) -> None:
        backoff_s = self._initial_backoff_s
        failure = ""  # the failure last reported ("" while the device is open)
        while not self._stop.is_set():
            port, why = self._open()
            if port is None:
                if why != failure:
                    self._report(False, why)
                    failure = why
                self._stop.wait(backoff_s)
                backoff_s = min(backoff_s * 2, self._max_backoff_s)
                continue
            backoff_s = self._initial_backoff_s
            reason = self._pump(port)
            with self._lock:
                self._port = None
            _close(port)
            if not self._stop.is_set():
                self._report(False, reason)
                failure = reason
                self._stop.wait(backoff_s)

    def _open(self) -> tuple[serial.Serial | None, str]:
        """The open port, or None and why it cannot be opened."""
        try:
            port = self._opener(self.device, self.baud, timeout=0.2)
        except (serial.SerialException, OSError, ValueError) as exc:
            return None, f"cannot open {self.device}: {_why(exc)}"
        self.opens += 1
        with self._lock:
            self._port = port  # before the news: the core's first command follows it at once
        self._report(True, f"opened {self.device} at {self.baud} baud")
        return port, ""

    def _pump(self, port: serial.Serial) -> str:
        """Read until the device fails or we are stopped; returns why reading ended."""
        while not self._stop.is_set():
            try:
                data = port.read(READ_SIZE)
            except (serial.SerialException, OSError) as exc:
                return f"{self.device} failed: {_why(exc)}"
            if data:
                self.bytes_read += len(data)
                try:
                    self._on_bytes(data, self._clock_ns())
                except Exception:  # the core's bug must not silence the receiver
                    log.exception("serial %s: handling received bytes failed", self.device)
        return "stopped"

    def _report(self, connected: bool, reason: str) -> None:
        (log.info if connected else log.warning)("serial %s: %s", self.device, reason)
        try:
            self._on_device(DeviceEvent(self.device, connected, reason, self._clock_ns()))
        except Exception:
            log.exception("serial %s: handling a device event failed", self.device)


def _close(port: serial.Serial) -> None:
    try:
        port.close()
    except (serial.SerialException, OSError):
        pass


def _why(exc: BaseException) -> str:
    """The operating system's reason, without pyserial's wrapping ("[Errno 2] could not open port X: [Errno 2] ...")."""
    text = str(exc) or type(exc).__name__
    if "readiness to read but returned no data" in text:
        return "the device went away (no data on a ready line: unplugged or the other end closed)"
    code = getattr(exc, "errno", None)
    if isinstance(code, int) and code in errno.errorcode:
        return os.strerror(code)
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, termios.error) and cause.args and cause.args[0] == errno.ENOTTY:
        return "not a serial device (" + os.strerror(errno.ENOTTY) + ")"
    if isinstance(cause, (OSError, termios.error)) and cause.args and isinstance(cause.args[0], int):
        return os.strerror(cause.args[0])
    return text
