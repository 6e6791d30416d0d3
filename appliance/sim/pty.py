"""Drive the simulated receiver into a pseudo-terminal at real-time pace, so the real serial path can read it.

I/O edge.  Opens a pty pair, links the slave's path to ``link`` (as udev would name a receiver), and each host second
writes the burst a receiver sends shortly after its pulse.  ``appliance run --set gnss.device=LINK`` reads it exactly as
it reads a UART.  If nobody reads, the kernel buffer fills and old bytes are flushed, as on an unread serial port.
What the appliance writes (set-up commands, polls) is read between bursts and answered at once, as the receiver
family chosen would (u-blox generation 9 or 8, Unicore, or a plain NMEA receiver that answers nothing).  The line
speed the appliance set on its end (the pty's termios speed) must match the receiver's own, as on a UART: at another
speed the receiver hears nothing and is heard as nothing (a real line would carry noise), so the appliance's hunt
for the receiver's speed, and its move to ``gnss.baud``, run as they would on hardware.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import termios
import time
import tty
from pathlib import Path

from appliance import leap
from appliance.sim.receiver import SimReceiver
from appliance.units import NS_PER_S

log = logging.getLogger("appliance.sim.pty")
_SPEEDS = {getattr(termios, f"B{b}"): b for b in (1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400,
                                                   460800, 921600) if hasattr(termios, f"B{b}")}


class PtyReceiver:
    def __init__(self, link: str, seed: int, table: leap.LeapTable, burst_delay_ms: int = 80,
                 family: str = "ublox9"):
        self.link = Path(link)
        self.receiver = SimReceiver(seed, table, family=family)
        self.table = table
        self._delay_ns = burst_delay_ms * 1_000_000
        self._master, slave = os.openpty()
        tty.setraw(slave)
        os.set_blocking(self._master, False)
        self.slave_path = os.ttyname(slave)
        self._slave = slave  # kept open so writes never fail with EIO before a reader arrives
        if self.link.is_symlink() or self.link.exists():
            self.link.unlink()
        self.link.symlink_to(self.slave_path)
        self.dropped_bytes = 0

    def close(self) -> None:
        for fd in (self._master, self._slave):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.link.is_symlink() and os.readlink(self.link) == self.slave_path:
            self.link.unlink()

    def run(self, seconds: int | None = None) -> None:
        """Write one burst per host second until stopped (SIGINT/SIGTERM) or ``seconds`` have passed."""
        stopping = {"now": False}
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stopping.update(now=True))
        written = 0
        while not stopping["now"] and (seconds is None or written < seconds):
            tai_now = leap.posix_to_tai_ns(time.time_ns(), self.table)
            second = (tai_now - self._delay_ns) // NS_PER_S * NS_PER_S + NS_PER_S
            self._listen_until(leap.tai_to_posix_ns(second + self._delay_ns, self.table)[0], stopping)
            if stopping["now"]:
                break
            burst = self.receiver.burst(second)
            if self.hears():
                self._write(burst)
            written += 1

    def _listen_until(self, posix_ns: int, stopping: dict[str, bool]) -> None:
        """Answer what the appliance writes until the host clock reaches ``posix_ns``."""
        while not stopping["now"]:
            left_s = (posix_ns - time.time_ns()) / NS_PER_S
            if left_s <= 0:
                return
            try:
                ready, _, _ = select.select([self._master], [], [], left_s)
            except InterruptedError:
                continue
            if not ready:
                return
            try:
                data = os.read(self._master, 4096)
            except BlockingIOError:
                continue
            except OSError:
                time.sleep(min(left_s, 0.05))  # nobody has the line open: nothing to hear
                continue
            if data and self.hears():
                reply = self.receiver.accept(data, leap.posix_to_tai_ns(time.time_ns(), self.table))
                if reply:
                    self._write(reply)

    def _line_baud(self) -> int | None:
        """The speed the appliance set on its end of the line (None when it cannot be read)."""
        try:
            speed = termios.tcgetattr(self._slave)[5]  # ospeed
        except termios.error:
            return None
        return _SPEEDS.get(speed)

    def hears(self) -> bool:
        """Whether the line's speed is the receiver's own (an NMEA receiver without a command side: any speed)."""
        device = self.receiver.device
        line = self._line_baud()
        return device is None or line is None or line == device.baud

    def _write(self, data: bytes) -> None:
        try:
            os.write(self._master, data)
        except BlockingIOError:
            termios.tcflush(self._slave, termios.TCIFLUSH)  # nobody reads: drop the stale bytes, keep the fresh
            self.dropped_bytes += len(data)
        except OSError as exc:
            log.warning("pty write failed: %s", exc)
