"""A CPU wake-up latency hold: the kernel's PM QoS request (``/dev/cpu_dma_latency``) kept open while the appliance
runs, as a latency-tuned host keeps it (tuned's latency-performance profile).

Edge (a device file).  While the request is held the cpuidle governor puts no CPU into an idle state whose exit
takes longer than the value: at 0 an idle CPU polls.  A timer then wakes a thread in microseconds instead of a deep
sleep's tens to hundreds, and waking a thread on another CPU needs no interrupt to bring that CPU out of its sleep
(on a virtual machine an interrupt to a halted vCPU is an exit to the hypervisor, tens of microseconds to
milliseconds).  The price is power: an idle CPU stays busy.  The kernel drops the request when the file is closed,
so a killed appliance leaves nothing behind.
"""

from __future__ import annotations

import logging
import os
import struct
from typing import Any

log = logging.getLogger("appliance")

DEVICE = "/dev/cpu_dma_latency"


class CpuLatencyHold:
    """Holds the request from ``start`` to ``stop``; ``status`` says what is held, or why nothing is."""

    def __init__(self, latency_us: int, device: str = DEVICE) -> None:
        if latency_us < 0:
            raise ValueError(f"CPU latency must be 0 or more microseconds, not {latency_us}")
        self.latency_us, self.device = latency_us, device
        self._fd: int | None = None
        self.error: str | None = None

    def start(self) -> None:
        try:
            fd = os.open(self.device, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            self._refused(exc)
            return
        try:
            os.write(fd, struct.pack("=i", self.latency_us))
        except OSError as exc:
            os.close(fd)
            self._refused(exc)
            return
        self._fd, self.error = fd, None
        log.info("CPU wake-up latency held at %d us or less (%s) while running", self.latency_us, self.device)

    def _refused(self, exc: OSError) -> None:
        why = exc.strerror or str(exc)
        hint = " (needs root)" if isinstance(exc, PermissionError) else ""
        self.error = f"cannot hold the CPU wake-up latency at {self.latency_us} us: {self.device}: {why}{hint}"
        log.warning("%s; the kernel's idle policy stays as it is", self.error)

    def stop(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def status(self) -> dict[str, Any]:
        report: dict[str, Any] = {"enabled": True, "latency_us": self.latency_us, "held": self.held}
        if self.error is not None:
            report["error"] = self.error
        return {"cpu_latency": report}
