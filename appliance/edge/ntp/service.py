"""Run the NTP workers: publish the clock map to them, watch them, and gather their counters for ``status``.

I/O edge.  Workers are separate processes (started with ``spawn``: the appliance has threads) so that several cores
can answer; they share the port with SO_REUSEPORT and die with the appliance.  Before starting them the port is
probed without SO_REUSEPORT, so that a second appliance (or chronyd) on the same port is an error rather than a
silent share of its clients.  A worker that dies is started again, with back-off, and the failure is reported.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from typing import Any

from appliance.protocol.ntp import auth
from appliance.protocol.clockmap import ClockMap
from appliance.outputs.ntp.server import ServerConfig
from appliance.edge.ntp.shm import COUNTER_NAMES, ClockSegment
from appliance.edge.ntp.worker import config_dict, probe_port, worker_main

log = logging.getLogger("appliance.ntp")


@dataclass
class NtpSettings:
    listen: str
    port: int
    workers: int
    fast_path: str
    server: ServerConfig
    keys_file: str = ""


@dataclass
class _Slot:
    process: Any = None
    restarts: int = 0
    next_start: float = 0.0
    last_exit: str = ""


@dataclass
class NtpService:
    settings: NtpSettings
    error: str = ""
    slots: list[_Slot] = field(default_factory=list)
    segment: ClockSegment | None = None

    def start(self, first_map: ClockMap) -> bool:
        """Probe, check the keys file, create the segment and start the workers; False (and ``error``) if not."""
        s = self.settings
        try:
            if s.keys_file:
                auth.load_keys_file(s.keys_file)  # a broken keys file is a start-up error, not a worker crash
            probe_port(s.listen, s.port)
        except (OSError, ValueError) as exc:
            self.error = _explain(exc, s)
            log.error("NTP not served: %s", self.error)
            return False
        count = s.workers or os.cpu_count() or 1
        self.segment = ClockSegment(count)
        self.segment.publish(first_map)
        self.slots = [_Slot() for _ in range(count)]
        for index in range(count):
            self._spawn(index)
        return True

    def _spawn(self, index: int) -> None:
        assert self.segment is not None
        s = self.settings
        ctx = multiprocessing.get_context("spawn")
        proc = ctx.Process(target=worker_main, name=f"ntp-worker-{index}", daemon=True,
                           args=(index, self.segment.name, s.listen, s.port, config_dict(s.server), s.keys_file,
                                 _use_fast_path(s.fast_path), len(self.slots)))
        proc.start()
        self.slots[index].process = proc

    def publish(self, clock: ClockMap) -> None:
        if self.segment is not None:
            self.segment.publish(clock)
        self._watch()

    def _watch(self) -> None:
        now = time.monotonic()
        for index, slot in enumerate(self.slots):
            proc = slot.process
            if proc is None or proc.is_alive():
                continue
            if not slot.last_exit:
                slot.last_exit = f"exit status {proc.exitcode}"
                slot.next_start = now + min(60.0, 2.0 ** slot.restarts)
                log.error("NTP worker %d stopped (%s); restarting", index, slot.last_exit)
            if now >= slot.next_start:
                slot.restarts += 1
                slot.last_exit = ""
                self._spawn(index)

    def status(self) -> dict[str, Any]:
        s = self.settings
        out: dict[str, Any] = {"enabled": True, "listen": s.listen, "port": s.port, "error": self.error,
                               "workers": []}
        if self.segment is None:
            return out
        totals = {name: 0 for name in COUNTER_NAMES if name not in ("heartbeat_ns", "pid")}
        for index, slot in enumerate(self.slots):
            row = self.segment.counters(index)
            for name in totals:
                totals[name] += row[name]
            counters = {k: v for k, v in row.items() if k not in ("heartbeat_ns", "pid", "fast_path")}
            out["workers"].append({"index": index, "pid": row["pid"], "alive": bool(slot.process and
                                                                                  slot.process.is_alive()),
                                   "restarts": slot.restarts, "fast_path": bool(row["fast_path"]),
                                   "requests": row["requests"], "replies": row["replies"], "counters": counters})
        out["totals"] = totals
        return out

    def stop(self) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.is_alive():
                slot.process.terminate()
        for slot in self.slots:
            if slot.process is not None:
                slot.process.join(timeout=5)
                if slot.process.is_alive():
                    slot.process.kill()
        if self.segment is not None:
            self.segment.close()
            self.segment = None


def _use_fast_path(choice: str) -> bool:
    if choice == "off":
        return False
    try:
        from appliance.edge.ntp import _fastpath# noqa: F401
    except ImportError:
        if choice == "on":
            log.error("ntp.fast_path=on but the native fast path is not built: using the Python path")
        return False
    return True


def _explain(exc: Exception, s: NtpSettings) -> str:
    if isinstance(exc, PermissionError) or getattr(exc, "errno", None) == 13:
        return (f"cannot bind UDP {s.listen} port {s.port}: permission denied (ports below 1024 need root or "
                f"CAP_NET_BIND_SERVICE; or set ntp.port above 1023)")
    if getattr(exc, "errno", None) == 98:
        return f"UDP {s.listen} port {s.port} is already in use by another program (another NTP server?)"
    return str(exc)
