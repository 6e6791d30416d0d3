"""Read a receiver's serial line (UART, USB, or a pseudo-terminal) in a thread and hand the bytes to the core.

I/O edge.  Every chunk is stamped on the local clock the moment ``read`` returns.  When the device is missing, vanishes
or errors, the reader reports a DeviceEvent once, closes, and retries with exponential back-off until it can open the
device again; it never gives up and never lets an exception end the thread.  A failure is reported again only when
its reason changes (the device that vanished cannot be opened either; a missing device comes back unreadable), so
the core always has the current error without a report every retry.
"""

from __future__ import annotations

import errno
import logging
import os
import termios
import threading
import time
from collections.abc import Callable

import serial

from appliance.events import DeviceEvent

log = logging.getLogger("appliance.gnss.serial")
READ_SIZE = 4096


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
        self.bytes_read = 0
        self.opens = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, join_timeout_s: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(join_timeout_s)

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
