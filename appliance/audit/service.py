"""The audit trail and the time-quality record of a running appliance: what is written, and when.

Edge module (SQLite files, UDP syslog, timers on the event loop).  ``AuditPart`` listens to the appliance's routed
events (through ``subscribe``) and its operator commands (``on_command``), appends what ``recorder.entry_for`` keeps, forwards each record to syslog when
configured, and once a second adds a time-quality sample (flushed every ``FLUSH_S``; pruned and compacted hourly).
A record that cannot be written (a full disk) is logged and counted, never raised into the engines.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance import leap
from appliance.audit.chain import AuditError, AuditRecord
from appliance.audit.recorder import entry_for
from appliance.audit.store import AuditStore
from appliance.status import TimeStatus

log = logging.getLogger("appliance.audit")
FLUSH_S = 10
HOUSEKEEPING_S = 3600


class AuditPart:
    """``status``, ``now_tai_ns`` and ``utc_table`` read the running appliance; ``subscribe(listener)`` hands the
    listener every routed event and returns the function that stops it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, store: AuditStore, status: Callable[[], TimeStatus],
                 now_tai_ns: Callable[[], int], utc_table: Callable[[], leap.LeapTable],
                 subscribe: Callable[[Callable[[object], None]], Callable[[], None]], quality: Any = None,
                 forwarder: Any = None):
        self.loop, self.store, self.quality, self.forwarder = loop, store, quality, forwarder
        self.status_of, self.now_tai_ns, self.utc_table, self.subscribe = status, now_tai_ns, utc_table, subscribe
        self._unsubscribe: Callable[[], None] | None = None
        self.closed = False
        self.failures = 0
        self._last_error = ""
        self._handles: list[asyncio.TimerHandle] = []
        self._lock = threading.Lock()
        self._ticks = 0
        self.record_listeners: list[Any] = []  # called with each record written (SNMP notifications)

    # --- writing records ----------------------------------------------------------------------------------
    def append(self, at_tai_ns: int, kind: str, actor: str, text: str, detail: dict[str, Any] | None = None
               ) -> AuditRecord | None:
        """Append from any thread; None if the store refused (logged, counted) or the trail is closed."""
        if self.closed:
            return None
        try:
            record = self.store.append(at_tai_ns, kind, actor, text, detail or {})
        except (AuditError, ValueError, sqlite3.Error) as exc:
            with self._lock:
                self.failures += 1
                first = str(exc) != self._last_error
                self._last_error = str(exc)
            (log.error if first else log.debug)("audit record %s not written: %s", kind, exc)
            return None
        if self.forwarder is not None:
            self.forwarder.send(record, self.label(record.at_tai_ns))
        for listener in self.record_listeners:
            try:
                listener(record)
            except Exception:  # noqa: BLE001 - a listener's failure must not lose the record or the caller
                log.exception("audit record listener failed")
        return record

    def label(self, tai_ns: int) -> str:
        u = leap.tai_to_utc(tai_ns, self.utc_table())
        return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}." \
               f"{u.nanosecond // 1_000_000:03d}Z"

    def on_event(self, event: object) -> None:
        entry = entry_for(event)
        if entry is not None:
            self.append(self.now_tai_ns(), entry.kind, entry.actor, entry.text, entry.detail)

    def on_command(self, kind: str, actor: str, text: str, detail: dict[str, Any]) -> None:
        self.append(self.now_tai_ns(), kind, actor, text, detail)

    # --- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._unsubscribe = self.subscribe(self.on_event)
        status = self.status_of()
        self.append(self.now_tai_ns(), "start", "system", f"appliance {status.version} started ({status.mode})",
                    {"version": status.version, "mode": status.mode})
        for name, output in sorted(status.outputs.present().items()):
            if output.get("enabled") and name != "audit":
                self.append(self.now_tai_ns(), "output", "system", f"output {name} enabled",
                            {"output": name, "enabled": True})
        self._housekeeping()
        self._second()

    def _second(self) -> None:
        self._ticks += 1
        if self.quality is not None:
            from appliance.audit.tqlog import sample_from_status

            try:
                self.quality.add(sample_from_status(self.status_of()))
                if self._ticks % FLUSH_S == 0:
                    self.quality.flush()
            except (sqlite3.Error, ValueError, OSError) as exc:
                self._note(f"time-quality record: {exc}")
        self._handles = [h for h in self._handles if not h.cancelled()]
        self._handles.append(self.loop.call_later(1.0, self._second))

    def _housekeeping(self) -> None:
        now = self.now_tai_ns()
        try:
            pruned = self.store.prune(now)
            if pruned:
                log.info("audit: pruned %d old records (a checkpoint keeps the chain verifiable)", pruned)
            if self.quality is not None:
                self.quality.compact(now)
        except (AuditError, sqlite3.Error, ValueError, OSError) as exc:
            self._note(f"housekeeping: {exc}")
        self._handles.append(self.loop.call_later(HOUSEKEEPING_S, self._housekeeping))

    def _note(self, message: str) -> None:
        with self._lock:
            self.failures += 1
            first = message != self._last_error
            self._last_error = message
        (log.error if first else log.debug)("audit: %s", message)

    def stop(self) -> None:
        for handle in self._handles:
            handle.cancel()
        self.append(self.now_tai_ns(), "stop", "system", "appliance stopping", {})
        self.closed = True
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self.quality is not None:
            try:
                self.quality.flush()
                self.quality.close()
            except (sqlite3.Error, OSError) as exc:
                log.error("time-quality record: %s", exc)
        if self.forwarder is not None:
            self.forwarder.close()
        self.store.close()

    def status(self) -> dict[str, Any]:
        head = self.store.head()
        out: dict[str, Any] = {"enabled": True, "records": head.seq if head else 0,
                               "head_hash": head.hash if head else "", "failures": self.failures,
                               "error": self._last_error}
        if self.forwarder is not None:
            fs = self.forwarder.status()
            out["syslog"] = {k: getattr(fs, k) for k in getattr(fs, "__dataclass_fields__", {})}
        return out


def open_stores(state_dir: Path, config: Any, table: leap.LeapTable) -> tuple[AuditStore, Any, Any]:
    """The audit store, the time-quality log (or None) and the syslog forwarder (or None) the settings ask for."""
    store = AuditStore(state_dir / "audit.sqlite", config.audit.max_age_days * 86_400,
                       config.audit.max_records)
    quality = None
    if config.quality.enabled:
        from appliance.audit.tqlog import TimeQualityLog

        keep_s = config.quality.keep_days * 86_400
        quality = TimeQualityLog(state_dir / "quality.sqlite", min(86_400, keep_s), min(30 * 86_400, keep_s),
                                 keep_s, leap_table=table)
    forwarder = None
    target = config.audit.syslog
    if target:
        from appliance.audit.syslog import SyslogForwarder

        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"audit.syslog {target!r}: expected HOST:PORT")
        forwarder = SyslogForwarder(host.strip("[]"), int(port), config.audit.syslog_facility)
    return store, quality, forwarder
