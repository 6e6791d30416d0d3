"""Run the NTP workers: publish the clock map to them, watch them, and gather their counters for ``status``.

I/O edge.  Workers are separate processes (started with ``spawn``: the appliance has threads) so that several cores
can answer; they share the port with SO_REUSEPORT and die with the appliance.  Before starting them the port is
probed without SO_REUSEPORT, so that a second appliance (or chronyd) on the same port is an error rather than a
silent share of its clients.  A worker that dies is started again, with back-off, and the failure is reported.
Status also says who the clients are: the request rate over the last minute (the workers' request counters sampled
here at each publication), the busiest clients of the last minute (each worker's table, merged) and the KoDs sent.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from typing import Any

from appliance.protocol.clockmap import ClockMap
from appliance.outputs.ntp.policy import ServerConfig
from appliance.outputs.ntp.clients import RequestRate, SpaceSaving, client_text
from appliance.edge.input_files import load_keys_file
from appliance.edge.ntp.shm import CLIENT_SLOTS, COUNTER_NAMES, ClockSegment
from appliance.edge.ntp.worker import config_dict, probe_port, worker_main
from appliance.edge import persist
from appliance.edge.ntp import ntske

log = logging.getLogger("appliance.ntp")
TOP_CLIENTS = 10  # the busiest clients status shows
CLIENTS_WINDOW_S = 60  # outputs/ntp/clients.py: RecentClients' default window, the workers' own
KOD_COUNTERS = ("kod_rate", "kod_deny", "kod_rstr", "nts_nak")  # Kiss-o'-Death codes RATE, DENY, RSTR, NTSN


@dataclass
class NtpSettings:
    listen: str
    port: int
    workers: int
    server: ServerConfig
    keys_file: str = ""
    nts: ntske.KeConfig | None = None  # NTS-KE and NTS on the NTP path; None: off
    nts_names: tuple[str, ...] = ("localhost",)  # in a self-signed certificate


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
    ke: _Slot | None = None  # the NTS-KE process
    ke_counters: Any = None
    rate: RequestRate = field(default_factory=RequestRate)

    def start(self, first_map: ClockMap) -> bool:
        """Probe, check the keys file, create the segment and start the workers; False (and ``error``) if not."""
        s = self.settings
        try:
            if s.keys_file:
                load_keys_file(s.keys_file)  # a broken keys file is a start-up error, not a worker crash
            probe_port(s.listen, s.port)
            if s.nts is not None:
                self._prepare_nts(s.nts)
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
        if s.nts is not None:
            self.ke_counters = multiprocessing.get_context("spawn").Array("q", len(ntske.COUNTERS))
            self.ke = _Slot()
            self._spawn_ke()
        return True

    def _prepare_nts(self, ke: ntske.KeConfig) -> None:
        """Before any process starts: the certificate (made when it is the appliance's own and missing), the first
        cookie key (so workers start with it), and the KE port free."""
        from pathlib import Path

        cert, key = Path(ke.certificate), Path(ke.private_key)
        own = ntske.own_key(ke)
        if own:
            persist.refuse_link(key)  # UnsafePathError naming it: the appliance's own key is never behind a link
        if not cert.exists() or not key.exists():
            if cert.exists() != key.exists() or not self.settings.nts_names:
                raise ValueError(f"NTS: certificate {cert} or private key {key} missing")
            ntske.ensure_certificate(cert, key, self.settings.nts_names)
        ntske.tls_context(str(cert), str(key), own)  # a broken certificate or key is a start-up error
        ntske.rotate_if_due(Path(ke.keys_path), int(time.time()), ke.rotation_s)
        ntske.open_listener(ke.listen, ke.port).close()

    def _spawn_ke(self) -> None:
        assert self.ke is not None and self.settings.nts is not None
        ctx = multiprocessing.get_context("spawn")
        proc = ctx.Process(target=ntske.ke_main, name="nts-ke", daemon=True,
                           args=(self.settings.nts, self.ke_counters))
        proc.start()
        self.ke.process = proc

    def _spawn(self, index: int) -> None:
        assert self.segment is not None
        s = self.settings
        ctx = multiprocessing.get_context("spawn")
        proc = ctx.Process(target=worker_main, name=f"ntp-worker-{index}", daemon=True,
                           args=(index, self.segment.name, s.listen, s.port, config_dict(s.server), s.keys_file,
                                 len(self.slots),
                                 s.nts.keys_path if s.nts is not None else ""))
        proc.start()
        self.slots[index].process = proc

    def publish(self, clock: ClockMap) -> None:
        if self.segment is not None:
            self.segment.publish(clock)
            self._sample_rate()
        self._watch()

    def _sample_rate(self) -> None:
        assert self.segment is not None
        requests = sum(self.segment.counters(index)["requests"] for index in range(len(self.slots)))
        self.rate.sample(time.monotonic_ns(), requests)

    def clients_status(self, totals: dict[str, int]) -> dict[str, Any]:
        """Request rate, the busiest clients of the last minute (all workers together) and the KoDs sent."""
        assert self.segment is not None
        merged = SpaceSaving(CLIENT_SLOTS * max(1, len(self.slots)))  # room for every row: a plain sum
        for index in range(len(self.slots)):
            for key, requests, error in self.segment.clients(index):
                merged.add(key, requests, error)
        rate = self.rate.per_s()
        return {"request_rate_per_s": None if rate is None else round(rate, 3),
                "rate_window_s": round(self.rate.span_ns / 1e9, 1), "window_s": CLIENTS_WINDOW_S,
                "top": [{"client": client_text(key), "requests": requests, "error": error}
                        for key, requests, error in merged.top(TOP_CLIENTS)],
                "kod_sent": sum(totals.get(name, 0) for name in KOD_COUNTERS),
                "rate_limited": totals.get("drop_rate_limited", 0)}

    def _watch(self) -> None:
        now = time.monotonic()
        if self.ke is not None:
            self._restart(self.ke, "NTS-KE server", now, self._spawn_ke)
        for index, slot in enumerate(self.slots):
            self._restart(slot, f"NTP worker {index}", now, lambda i=index: self._spawn(i))

    @staticmethod
    def _restart(slot: _Slot, what: str, now: float, spawn: Any) -> None:
        """A process that stopped is started again, with back-off, and said so."""
        proc = slot.process
        if proc is None or proc.is_alive():
            return
        if not slot.last_exit:
            slot.last_exit = f"exit status {proc.exitcode}"
            slot.next_start = now + min(60.0, 2.0 ** slot.restarts)
            log.error("%s stopped (%s); restarting", what, slot.last_exit)
        if now >= slot.next_start:
            slot.restarts += 1
            slot.last_exit = ""
            spawn()

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
            counters = {k: v for k, v in row.items() if k not in ("heartbeat_ns", "pid", "fast_path", "slow_path")}
            out["workers"].append({"index": index, "pid": row["pid"], "alive": bool(slot.process and
                                                                                  slot.process.is_alive()),
                                   "restarts": slot.restarts,
                                   "requests": row["requests"], "replies": row["replies"], "counters": counters})
        out["totals"] = totals
        out["clients"] = self.clients_status(totals)
        if self.settings.nts is not None:
            out["nts"] = self.nts_status()
        return out

    def nts_status(self) -> dict[str, Any]:
        ke = self.settings.nts
        assert ke is not None
        c = dict(zip(ntske.COUNTERS, self.ke_counters[:])) if self.ke_counters is not None else {}
        created = c.get("key_created_s", 0)
        return {"ke_listen": ke.listen, "ke_port": ke.port, "certificate": ke.certificate,
                "alive": bool(self.ke and self.ke.process and self.ke.process.is_alive()),
                "restarts": self.ke.restarts if self.ke else 0,
                "sessions": c.get("sessions", 0), "tls_failures": c.get("tls_failures", 0),
                "ke_errors": c.get("ke_errors", 0), "rate_limited": c.get("rate_limited", 0),
                "busy": c.get("busy", 0), "active": c.get("active", 0), "evicted": c.get("evicted", 0),
                "timed_out": c.get("timed_out", 0), "no_alpn": c.get("no_alpn", 0), "pid": c.get("pid", 0),
                "cookie_key_id": f"{c.get('key_id', 0):08x}",
                "cookie_key_age_s": max(0, int(time.time()) - created) if created else None,
                "key_rotation_s": ke.rotation_s}

    def stop(self) -> None:
        for slot in self.slots + ([self.ke] if self.ke is not None else []):
            if slot.process is not None and slot.process.is_alive():
                slot.process.terminate()
        for slot in self.slots + ([self.ke] if self.ke is not None else []):
            if slot.process is not None:
                slot.process.join(timeout=5)
                if slot.process.is_alive():
                    slot.process.kill()
        if self.segment is not None:
            self.segment.close()
            self.segment = None


def _explain(exc: Exception, s: NtpSettings) -> str:
    if isinstance(exc, PermissionError) or getattr(exc, "errno", None) == 13:
        return (f"cannot bind UDP {s.listen} port {s.port}: permission denied (ports below 1024 need root or "
                f"CAP_NET_BIND_SERVICE; or set ntp.port above 1023)")
    if getattr(exc, "errno", None) == 98:
        return f"UDP {s.listen} port {s.port} is already in use by another program (another NTP server?)"
    return str(exc)
