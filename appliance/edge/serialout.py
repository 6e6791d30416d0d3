"""The serial time-of-day output: a time string (``timestrings.py``) written with pyserial at a configured offset after
each second of the served clock.

Edge module (serial port, event-loop timers, host clock reads).  The instant to write is found on the served clock:
the appliance's ``served_at_host`` maps host time to served time and rate, and the timer is set for the host instant
where the served clock reaches second + offset.  A port that cannot be opened (unplugged adapter, wrong path) or
fails on write is reported in ``status`` and the log, and retried every 16 s; nothing else stops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from appliance import leap
from appliance.outputs.timestrings import StringStatus, time_string
from appliance.status import TimeStatus
from appliance.units import NS_PER_S

log = logging.getLogger("appliance.serial")
RETRY_S = 16.0


def string_status(status: TimeStatus, second_tai_ns: int) -> StringStatus:
    """What the strings say about the clock: synchronized while it serves as stratum 1 (locked, or in holdover
    within spec); the receiver's position if it has one; an inserted leap second within the hour."""
    adv = status.clock.advertised
    epoch = status.receiver.last_epoch
    where = epoch.position if epoch is not None else None
    at = status.leap.pending_at_tai_ns
    soon = (status.leap.pending_change_s > 0 and at is not None and 0 < at - second_tai_ns <= 3600 * NS_PER_S)
    return StringStatus(adv is not None and adv.ntp_stratum == 1, where.lat_deg if where else None,
                        where.lon_deg if where else None, soon)


class SerialTimeOutput:
    def __init__(self, device: str, baud: int, kind: str, offset_ms: int, table: Callable[[], leap.LeapTable],
                 status: Callable[[], TimeStatus], served_at_host: Callable[[int], tuple[int, float]],
                 open_port: Callable[..., Any] | None = None):
        self.device, self.baud, self.kind, self.offset_ns = device, baud, kind, offset_ms * 1_000_000
        self._table, self._status, self._served_at_host = table, status, served_at_host
        self._open_port = open_port
        self._port: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.error = ""
        self.written = 0
        self.write_errors = 0
        self.overruns = 0  # strings cut short because the line's buffer was full (baud rate too low for them)
        self.last_text = ""

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._open()
        self._schedule()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._close()

    def _open(self) -> bool:
        try:
            if self._open_port is None:
                import serial

                self._open_port = serial.Serial
            self._port = self._open_port(self.device, self.baud, write_timeout=0)  # never block the event loop
        except (OSError, ValueError) as exc:  # serial.SerialException is an OSError
            self._port = None
            message = f"cannot open {self.device}: {exc}"
            if message != self.error:
                log.error("serial time output: %s (retrying every %.0f s)", message, RETRY_S)
            self.error = message
            return False
        if self.error:
            log.info("serial time output: %s open again", self.device)
        self.error = ""
        return True

    def _close(self) -> None:
        if self._port is not None:
            try:
                self._port.close()
            except OSError:
                pass
            self._port = None

    def _schedule(self) -> None:
        """A timer for the host instant where the served clock reads the next second + offset."""
        assert self._loop is not None
        host_now = time.time_ns()
        served_now, rate_ppb = self._served_at_host(host_now)
        second = (served_now - self.offset_ns) // NS_PER_S * NS_PER_S + NS_PER_S
        delay_ns = (second + self.offset_ns - served_now) / (1 + rate_ppb * 1e-9)
        self._timer = self._loop.call_later(delay_ns / 1e9, self._fire, second)

    def _fire(self, second_tai_ns: int) -> None:
        self._timer = None
        try:
            if self._port is not None or (self._retry_due(second_tai_ns) and self._open()):
                table = self._table()
                text = time_string(self.kind, leap.tai_to_utc(second_tai_ns, table),
                                   string_status(self._status(), second_tai_ns))
                try:
                    sent = self._port.write(text)
                    if sent is not None and sent < len(text):  # the line is slower than the strings: not queued
                        self.overruns += 1
                    self.written += 1
                    self.last_text = text.decode("ascii").strip("\x02\x03\r\n")
                except (OSError, ValueError) as exc:
                    self.write_errors += 1
                    self.error = f"write to {self.device} failed: {exc}"
                    log.error("serial time output: %s (reopening)", self.error)
                    self._close()
        finally:
            self._schedule()

    def _retry_due(self, second_tai_ns: int) -> bool:
        return (second_tai_ns // NS_PER_S) % int(RETRY_S) == 0

    def status(self) -> dict[str, Any]:
        return {"enabled": True, "device": self.device, "baud": self.baud, "format": self.kind,
                "offset_ms": self.offset_ns // 1_000_000, "error": self.error, "written": self.written,
                "write_errors": self.write_errors, "overruns": self.overruns, "last": self.last_text}
