"""1PPS from a PTP hardware clock's periodic output (a NIC's SDP pin): the PTP_PEROUT_REQUEST2 ioctl.

Edge module (ioctl on /dev/ptpN).  Used when the PHC is the served clock (``clock.backend = phc``): the pulse train
then runs on the served seconds by itself, and the sink only has to start it, change its width, or stop it.  It is
handed the planned 1PPS edges of each second (``pulses.TimeOutputs``): an empty plan (squelched) stops the output,
a plan with another width (policy ``flag``) reprograms it.  The pin is switched to its periodic-output function
first (PTP_PIN_SETFUNC) when a pin index is configured.  Kernels without PTP_PEROUT_REQUEST2 (before 5.8) get
PTP_PEROUT_REQUEST, whose pulse width is the driver's.  Failures are kept in ``error`` and retried each second.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
from collections.abc import Callable
from typing import Any

from appliance.outputs.pulses import PlannedEdge
from appliance.units import NS_PER_S

log = logging.getLogger("appliance.pps")

# linux/ptp_clock.h: struct ptp_perout_request { ptp_clock_time start; ptp_clock_time period; u32 index; u32 flags;
# union { ptp_clock_time on; u32 rsv[4]; } }, ptp_clock_time = { s64 sec; u32 nsec; u32 reserved }
PEROUT_FORMAT = "=qII qII II qII"
PEROUT_SIZE = struct.calcsize(PEROUT_FORMAT)  # 56
PIN_FORMAT = "=64sIII5I"  # struct ptp_pin_desc { char name[64]; u32 index, func, chan; u32 rsv[5]; }
PIN_SIZE = struct.calcsize(PIN_FORMAT)  # 96
PTP_PEROUT_DUTY_CYCLE = 1 << 1
PTP_PF_PEROUT = 2


def _iow(nr: int, size: int) -> int:
    return (1 << 30) | (size << 16) | (ord("=") << 8) | nr


PTP_PEROUT_REQUEST = _iow(3, PEROUT_SIZE)
PTP_PEROUT_REQUEST2 = _iow(12, PEROUT_SIZE)
PTP_PIN_SETFUNC = _iow(7, PIN_SIZE)

Ioctl = Callable[[int, int, bytes], Any]


def perout_request(start_ns: int | None, width_ns: int, channel: int, duty_cycle: bool = True) -> bytes:
    """A periodic output of 1 s starting at ``start_ns`` (PHC time), high for ``width_ns``; ``None``: stop it."""
    if start_ns is None:
        return struct.pack(PEROUT_FORMAT, 0, 0, 0, 0, 0, 0, channel, 0, 0, 0, 0)
    sec, nsec = divmod(start_ns, NS_PER_S)
    on_sec, on_nsec = divmod(width_ns, NS_PER_S)
    flags = PTP_PEROUT_DUTY_CYCLE if duty_cycle else 0
    return struct.pack(PEROUT_FORMAT, sec, nsec, 0, 1, 0, 0, channel, flags, on_sec if duty_cycle else 0,
                       on_nsec if duty_cycle else 0, 0)


class PeroutSink:
    def __init__(self, device: str, channel: int = 0, pin: int = -1, cable_delay_ns: int = 0,
                 ioctl: Ioctl | None = None, opener: Callable[[str], int] | None = None):
        self.device, self.channel, self.pin, self.cable_delay_ns = device, channel, pin, cable_delay_ns
        self._ioctl = ioctl or (lambda fd, req, arg: fcntl.ioctl(fd, req, arg))
        self._opener = opener or (lambda path: os.open(path, os.O_RDWR))
        self._fd: int | None = None
        self._running_width: int | None = None  # the width programmed, None when stopped
        self._v2 = True
        self.error = ""
        self.programmed = 0

    def emit(self, edges: list[PlannedEdge]) -> None:
        try:
            if not edges:
                if self._running_width is not None:
                    self._request(None, 0)
                    self._running_width = None
                return
            rise, fall = edges[0], edges[1]
            width = fall.served_ns - rise.served_ns
            if self._running_width != width:
                self._request(rise.served_ns - self.cable_delay_ns, width)
                self._running_width = width
            if self.error:
                log.info("1PPS periodic output on %s running again", self.device)
            self.error = ""
        except OSError as exc:
            message = f"periodic output on {self.device} channel {self.channel}: {os.strerror(exc.errno or 0) or exc}"
            if message != self.error:
                log.error("1PPS %s (retrying every second)", message)
            self.error = message
            self._running_width = None

    def _request(self, start_ns: int | None, width_ns: int) -> None:
        if self._fd is None:
            self._fd = self._opener(self.device)
            if self.pin >= 0:
                pin = struct.pack(PIN_FORMAT, b"", self.pin, PTP_PF_PEROUT, self.channel, 0, 0, 0, 0, 0)
                self._ioctl(self._fd, PTP_PIN_SETFUNC, pin)
        if self._v2:
            try:
                self._ioctl(self._fd, PTP_PEROUT_REQUEST2, perout_request(start_ns, width_ns, self.channel))
                self.programmed += 1
                return
            except OSError as exc:
                if exc.errno != errno.ENOTTY:
                    raise
                log.warning("1PPS: %s has no PTP_PEROUT_REQUEST2 (kernel before 5.8): the pulse width is the "
                            "driver's", self.device)
                self._v2 = False
        self._ioctl(self._fd, PTP_PEROUT_REQUEST, perout_request(start_ns, width_ns, self.channel, duty_cycle=False))
        self.programmed += 1

    def close(self) -> None:
        if self._fd is not None:
            try:
                if self._running_width is not None:
                    self._request(None, 0)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None

    def status(self) -> dict[str, Any]:
        return {"device": self.device, "channel": self.channel, "pin": self.pin, "error": self.error,
                "running": self._running_width is not None, "programmed": self.programmed}
