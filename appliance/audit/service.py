"""The audit trail and the time-quality record of a running appliance: what is written, and when.

Edge module (SQLite files, syslog over UDP, TCP or TLS, timers on the event loop).  ``AuditPart`` listens to the
appliance's routed events (through ``subscribe``) and its operator commands (``on_command``), appends what
``recorder.entry_for`` keeps, forwards each record to syslog when configured, and once a second adds a time-quality
sample (flushed every ``FLUSH_S``; pruned and compacted hourly).  A record that cannot be written (a full disk) is
logged and counted, never raised into the engines.

The remote copy is the chain's anchor off the box: root can replace the store and its head file together with an
older copy, or delete both, and only a copy elsewhere shows it (``appliance audit verify --against``).  While no
collector is configured, the status says so as a standing notice (``anchor.notice``); records dropped from a full
forwarding queue raise the WARNING alarm ``audit-syslog-overflow``, cleared once the queue has drained.

The store's head file (``appliance.audit.store``) is checked at start, before anything is appended, and the store
checks it again on every append.  A store found cut short or rewritten behind it (at start, or while running: someone
deleted records with sqlite3) is never written on: the trail keeps it as ``audit.sqlite.truncated-<n>``, starts a new
store whose first record (``audit.truncated``) continues the numbering from the recorded head, logs it as critical and
raises the MAJOR alarm ``audit-truncated`` (until the appliance restarts; ``appliance audit verify`` reports the loss
as long as that record stands).  The time service goes on throughout.  A head file that is missing or unreadable is
written anew with an ``audit.head`` record saying why; when the store had one before (deleted, or unreadable), the
WARNING alarm ``audit-head-missing`` is raised too, since a store cut short can then no longer be ruled out.
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
from appliance.audit.chain import HEAD_NOTE, AuditError, AuditRecord
from appliance.audit.recorder import entry_for
from appliance.audit.store import (HEAD_DELETED, HEAD_MISSING, HEAD_TRUNCATED, HEAD_UNREADABLE, AuditStore,
                                   AuditTruncated, HeadCheck)
from appliance.events import Alarm, Severity
from appliance.status import TimeStatus

log = logging.getLogger("appliance.audit")
FLUSH_S = 10
HOUSEKEEPING_S = 3600
AUDIT_TRUNCATED = "audit-truncated"  # alarm: the store was found cut short or rewritten; a new chain goes on
AUDIT_HEAD_MISSING = "audit-head-missing"  # alarm: the head file of a store that had one was gone or unreadable
AUDIT_SYSLOG_OVERFLOW = "audit-syslog-overflow"  # alarm: records dropped from the full syslog queue
NOT_ANCHORED = ("audit chain not anchored off the box: configure audit.syslog (e.g. tls://COLLECTOR:6514) so that "
                "a rollback or deletion of the audit store is detected (appliance audit verify --against FILE)")


class AuditPart:
    """``status``, ``now_tai_ns`` and ``utc_table`` read the running appliance; ``subscribe(listener)`` hands the
    listener every routed event and returns the function that stops it; ``alarm`` raises an alarm on the appliance
    (called on the loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, store: AuditStore, status: Callable[[], TimeStatus],
                 now_tai_ns: Callable[[], int], utc_table: Callable[[], leap.LeapTable],
                 subscribe: Callable[[Callable[[object], None]], Callable[[], None]], quality: Any = None,
                 forwarder: Any = None, alarm: Callable[[Alarm], None] | None = None):
        self.loop, self.store, self.quality, self.forwarder = loop, store, quality, forwarder
        self.status_of, self.now_tai_ns, self.utc_table, self.subscribe = status, now_tai_ns, utc_table, subscribe
        self.alarm = alarm
        self.restarted = ""  # the text of the record that restarted the chain in this run ("" none)
        self._unsubscribe: Callable[[], None] | None = None
        self.closed = False
        self.failures = 0
        self._last_error = ""
        self._handles: list[asyncio.TimerHandle] = []
        self._lock = threading.Lock()
        self._ticks = 0
        self._monitor_recorded: dict[str, int] = {}  # the sync monitor's last poll recorded, per target
        self._dropped_seen = 0  # records the forwarder had dropped at the last look (the overflow alarm)
        self._overflow_raised = False
        self.record_listeners: list[Any] = []  # called with each record written (SNMP notifications)

    # --- writing records ----------------------------------------------------------------------------------
    def append(self, at_tai_ns: int, kind: str, actor: str, text: str, detail: dict[str, Any] | None = None
               ) -> AuditRecord | None:
        """Append from any thread; None if the store refused (logged, counted) or the trail is closed."""
        if self.closed:
            return None
        try:
            record = self._append_past_truncation(at_tai_ns, kind, actor, text, detail or {})
        except (AuditError, ValueError, sqlite3.Error) as exc:
            with self._lock:
                self.failures += 1
                first = str(exc) != self._last_error
                self._last_error = str(exc)
            (log.error if first else log.debug)("audit record %s not written: %s", kind, exc)
            return None
        self._forward(record)
        return record

    def _append_past_truncation(self, at_tai_ns: int, kind: str, actor: str, text: str,
                                detail: dict[str, Any]) -> AuditRecord:
        """Append; a store found cut short while running is set aside and the chain restarted first (once: a second
        refusal is an error like any other)."""
        try:
            return self.store.append(at_tai_ns, kind, actor, text, detail)
        except AuditTruncated as exc:
            self._restart(exc.check)
        return self.store.append(at_tai_ns, kind, actor, text, detail)

    def _restart(self, check: HeadCheck) -> None:
        """Keep the store that ``check`` found cut short, start a new chain after its recorded head, say so loudly."""
        now = self.now_tai_ns()
        restarted = self.store.restart_chain(now, check)
        if restarted is None:
            return  # another thread restarted it a moment ago
        marker, evidence = restarted
        log.critical("audit: %s (%s)", check.problem, marker.text)
        with self._lock:
            self.restarted = marker.text
        self._raise(Alarm(AUDIT_TRUNCATED, Severity.MAJOR, True, marker.text, now))
        self._forward(marker)

    def _check_head(self) -> None:
        """At start, before any record: how the store stands against its head file, and what follows from it."""
        try:
            check = self.store.check_head()
        except AuditError as exc:
            self._note(f"head check: {exc}")
            return
        if check.state == HEAD_TRUNCATED:
            try:
                self._restart(check)
            except AuditError as exc:
                self._note(f"cannot restart the chain of a store cut short: {exc}")  # appends stay refused
            return
        if check.state in (HEAD_DELETED, HEAD_UNREADABLE):
            why = "deleted" if check.state == HEAD_DELETED else "unreadable"
            log.error("audit: %s", check.problem)
            self._raise(Alarm(AUDIT_HEAD_MISSING, Severity.WARNING, True, check.problem, self.now_tai_ns()))
            self.append(self.now_tai_ns(), HEAD_NOTE, "system", f"audit head file written anew: it was {why}",
                        {"reason": why})
        elif check.state == HEAD_MISSING:
            log.warning("audit: %s", check.problem)
            self.append(self.now_tai_ns(), HEAD_NOTE, "system", "audit head file written for the first time",
                        {"reason": "new"})

    def _raise(self, alarm: Alarm) -> None:
        """Raise ``alarm`` on the loop: an append that finds the store cut short may run in a web thread."""
        if self.alarm is None:
            return
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_loop = False
        if on_loop or self.loop is None:
            self.alarm(alarm)
        else:
            self.loop.call_soon_threadsafe(self.alarm, alarm)

    def _forward(self, record: AuditRecord) -> None:
        if self.forwarder is not None:
            self.forwarder.send(record, self.label(record.at_tai_ns), self.store.chain_id)
        for listener in self.record_listeners:
            try:
                listener(record)
            except Exception:  # noqa: BLE001 - a listener's failure must not lose the record or the caller
                log.exception("audit record listener failed")

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
        self._unsubscribe = self.subscribe(self.on_event)  # first, so the alarms the head check raises are recorded
        self._check_head()  # before the start record: nothing may be appended on a store cut short
        status = self.status_of()
        self.append(self.now_tai_ns(), "start", "system", f"appliance {status.version} started ({status.mode})",
                    {"version": status.version, "mode": status.mode})
        for name, output in sorted(status.outputs.present().items()):
            if output.get("enabled") and name != "audit":
                self.append(self.now_tai_ns(), "output", "system", f"output {name} enabled",
                            {"output": name, "enabled": True})
        if self.forwarder is None:
            log.info("audit: %s", NOT_ANCHORED)
        self._housekeeping()
        self._second()

    def _second(self) -> None:
        self._ticks += 1
        self._watch_forwarder()
        if self.quality is not None:
            from appliance.audit.tqlog import monitor_samples, sample_from_status

            try:
                status = self.status_of()
                self.quality.add(sample_from_status(status))
                if status.monitor:
                    self.quality.add_monitor(monitor_samples(status, self._monitor_recorded))
                if self._ticks % FLUSH_S == 0:
                    self.quality.flush()
            except (sqlite3.Error, ValueError, OSError) as exc:
                self._note(f"time-quality record: {exc}")
        self._handles = [h for h in self._handles if not h.cancelled()]
        self._handles.append(self.loop.call_later(1.0, self._second))

    def _watch_forwarder(self) -> None:
        """Raise the overflow alarm when the forwarder dropped records since the last look; clear it once its queue
        is empty over a working connection again (one alarm an episode, not one a record)."""
        if self.forwarder is None:
            return
        fs = self.forwarder.status()
        dropped, connected, queued = (getattr(fs, name, 0) for name in ("dropped", "connected", "queued"))
        now = self.now_tai_ns()
        if dropped > self._dropped_seen and not self._overflow_raised:
            self._overflow_raised = True
            text = (f"{dropped - self._dropped_seen} audit record(s) dropped from the full syslog queue to "
                    f"{fs.target} (the collector is away or slow; the records stay in the local store)")
            self._raise(Alarm(AUDIT_SYSLOG_OVERFLOW, Severity.WARNING, True, text, now))
        elif self._overflow_raised and connected and not queued:
            self._overflow_raised = False
            self._raise(Alarm(AUDIT_SYSLOG_OVERFLOW, Severity.WARNING, False,
                              f"syslog queue to {fs.target} drained; {dropped - self._dropped_seen} record(s) "
                              "were dropped", now))
            self._dropped_seen = dropped

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
                               "error": self._last_error, "head_file_error": self.store.head_error,
                               "chain_restarted": self.restarted}
        if self.forwarder is not None:
            fs = self.forwarder.status()
            out["syslog"] = {k: getattr(fs, k) for k in getattr(fs, "__dataclass_fields__", {})}
            out["anchor"] = {"anchored": True, "notice": ""}
        else:
            out["anchor"] = {"anchored": False, "notice": NOT_ANCHORED}
        return out


def open_stores(state_dir: Path, config: Any, table: leap.LeapTable) -> tuple[AuditStore, Any, Any]:
    """The audit store, the time-quality log (or None) and the syslog forwarder (or None) the settings ask for."""
    store = AuditStore(state_dir / "audit.sqlite", config.audit.max_age_days * 86_400,
                       config.audit.max_records)
    quality = open_quality(state_dir, config, table) if config.quality.enabled else None
    forwarder = open_forwarder(config.audit) if config.audit.syslog else None
    return store, quality, forwarder


def open_forwarder(audit: Any) -> Any:
    """The syslog forwarder ``audit.syslog`` asks for (with ``audit.syslog_ca``, ``_cert``, ``_key``,
    ``_server_name`` and ``_queue``); ValueError naming the setting or file that is wrong."""
    from appliance.audit.forwarder import SyslogForwarder, TlsOptions
    from appliance.audit.syslog import parse_target

    target = parse_target(audit.syslog)
    tls = TlsOptions(audit.syslog_ca, audit.syslog_cert, audit.syslog_key, audit.syslog_server_name)
    return SyslogForwarder(target.host, target.port, audit.syslog_facility, transport=target.transport, tls=tls,
                           queue_records=audit.syslog_queue)


def open_quality(state_dir: Path, config: Any, table: leap.LeapTable) -> Any:
    """The time-quality log with the retention the settings ask for (the console process opens it to read)."""
    from appliance.audit.tqlog import TimeQualityLog

    keep_s = config.quality.keep_days * 86_400
    return TimeQualityLog(state_dir / "quality.sqlite", min(86_400, keep_s), min(30 * 86_400, keep_s), keep_s,
                          leap_table=table)
