"""The one read model, built: a ``TimeStatus`` from the router's engines and what the edges report of themselves.

Pure core.  Only the router calls ``build``, from ``Router.snapshot``, handing over its engines as ``Parts``; every
surface (``appliance status``, the console and REST API, SNMP, /metrics, the audit trail's time-quality record, NTP
and PTP publication, the simulator's trials and the benches) reads the frozen snapshot built here, never an engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from appliance import leap
from appliance.alarms import AlarmBook, AlarmRow, diagnose_no_fix
from appliance.clock.service import ClockService
from appliance.events import SatInfo
from appliance.gnss.guard import GuardStatus
from appliance.monitor import MonitorRow, SyncMonitor
from appliance.refs.gnss import GnssReference
from appliance.refs.model import Reference
from appliance.refs.selector import ReferenceSelector, RefView
from appliance.status import (ClockStatus, OutputsStatus, PpsStatus, ReceiverRow, ReferenceRow, ReferencesStatus,
                              TimeStatus, judge, summarize)
from appliance.units import NS_PER_S
from appliance.utcoffset import UtcOffset


@dataclass(frozen=True)
class EdgeStatus:
    """What the runtime knows that the engines do not: how it runs, and each output's and input edge's own report."""

    mode: str  # "simulated" or "hardware"
    version: str
    started_at_tai_ns: int
    backend: str  # the clock backend's name
    outputs: OutputsStatus = field(default_factory=OutputsStatus)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # per reference: what its input edge reports
    cross_check: dict[str, Any] | None = None  # the NTP cross-check poller's servers, when one runs
    sim_time_error_ns: int | None = None  # served minus true: known only in simulation


@dataclass(frozen=True)
class Parts:
    """The router's engines a snapshot is read from, handed over by the router for one ``build``."""

    clock: ClockService
    selector: ReferenceSelector
    references: Mapping[str, Reference]
    gnss: GnssReference  # the watched receiver: the integrity checks, the receiver card
    utc: UtcOffset
    alarms: AlarmBook
    monitor: SyncMonitor | None = None  # the sync monitor of downstream clients


def build(parts: Parts, raw_ns: int, edges: EdgeStatus) -> TimeStatus:
    """The snapshot at the counter instant ``raw_ns``; its instants are on the served clock (TAI ns)."""
    clock_service = parts.clock
    served = clock_service.backend.served_ns
    at = served(raw_ns)
    table = parts.utc.table
    leap_status = parts.utc.snapshot(at)
    nxt = table.next_change_after(at)
    snap = clock_service.snapshot(raw_ns, leap_status.pending_change_s,
                                  None if nxt is None else max(0, (nxt[0] - at) // NS_PER_S))
    gnss = parts.gnss
    last = gnss.pairer.last
    pps = PpsStatus(gnss.pps_source, gnss.pps_edges, gnss.pairer.paired, dict(gnss.pairer.rejected),
                    last.edge_raw_ns if last else None, last.qerr_ps if last else None)
    clock = ClockStatus(
        snap.state, served(snap.state_since_raw_ns), snap.reason, snap.error_bound_ns, snap.frequency_ppb,
        snap.phase_offset_ns, None if snap.locked_since_raw_ns is None else served(snap.locked_since_raw_ns),
        None if snap.holdover_since_raw_ns is None else served(snap.holdover_since_raw_ns),
        snap.advertised.clock_class, snap.advertised.clock_accuracy, clock_service.oscillator, edges.backend,
        snap.forced_holdover, snap.time_constant_s, snap.learned_s, snap.predicted_frequency_ppb,
        snap.predicted_aging_ppb_per_day, snap.steps, snap.advertised, edges.sim_time_error_ns, snap.holdover)
    sats = gnss.satellites
    receiver = gnss.receiver.snapshot()  # its instants are on the counter; status shows served time
    since = receiver.state_since_ns
    receiver = dataclasses.replace(receiver, state_since_ns=None if since is None else served(since))
    integrity = _integrity(parts, raw_ns, edges)
    alarms = _diagnosed(parts.alarms.rows(), sats, integrity)
    references = _references(parts, raw_ns, edges)
    verdict = judge(clock, references.active, alarms, leap.tai_to_utc(clock.state_since_ns, table).iso_ms())
    return TimeStatus(at, leap.tai_to_utc(at, table).iso_ms(), edges.mode, edges.version, edges.started_at_tai_ns,
                      receiver, sats, summarize(sats), pps, leap_status, clock, alarms,
                      outputs=edges.outputs, integrity=integrity, references=references,
                      verdict=verdict, receivers=_receivers(parts),
                      monitor=_monitor(parts, at))


def _monitor(parts: Parts, at_tai_ns: int) -> tuple[MonitorRow, ...]:
    """The sync monitor's rows, each last answer also in UTC."""
    if parts.monitor is None:
        return ()
    table = parts.utc.table
    return tuple(row if row.last_answer_tai_ns is None else dataclasses.replace(
        row, last_answer_utc=leap.tai_to_utc(row.last_answer_tai_ns, table).iso_ms())
        for row in parts.monitor.rows(at_tai_ns))


def _diagnosed(rows: tuple[AlarmRow, ...], sats: tuple[SatInfo, ...], integrity: GuardStatus
               ) -> tuple[AlarmRow, ...]:
    """A lost fix told apart by what the receiver and the integrity checks see now (the console's "blocked antenna,
    not jamming")."""
    if not any(r.code == "gnss-no-fix" for r in rows):
        return rows
    verdicts = {f.get("detector"): f for f in integrity.findings}
    jam = verdicts.get("jamming")
    rx = verdicts.get("receiver")
    text = diagnose_no_fix(sum(1 for s in sats if s.cn0_dbhz), len(sats), jam.get("verdict") if jam else None,
                           rx.get("reason") if rx and rx.get("verdict") == "ok" else None)
    return tuple(dataclasses.replace(r, diagnosis=text) if r.code == "gnss-no-fix" else r for r in rows)


def _references(parts: Parts, raw_ns: int, edges: EdgeStatus) -> ReferencesStatus:
    """The references as status shows them: the active one, the policy, and a row per reference (state, priority,
    offset against the clock, jitter, accuracy) with what its driver and its input edge report."""
    selector, served = parts.selector, parts.clock.backend.served_ns
    rows = []
    for v in selector.views(raw_ns):
        edge = edges.inputs.get(v.name)
        report = {} if edge is None else {**edge, **parts.references[v.name].status()}
        rows.append(ReferenceRow(**vars_of(v), since_tai_ns=served(v.since_raw_ns), input=report))
    p = selector.policy
    return ReferencesStatus(selector.active, selector.pinned, p.revertive, p.wait_to_restore_s, p.step_limit_ns,
                            p.slew_ns_per_s, selector.switches, tuple(selector.disagreements), tuple(rows))


def _receivers(parts: Parts) -> tuple[ReceiverRow, ...]:
    """Every GNSS receiver, in the order of the [[gnss]] array (the order of their drivers)."""
    served = parts.clock.backend.served_ns
    rows = []
    gnss = [ref for ref in parts.references.values() if isinstance(ref, GnssReference)]
    for number, ref in enumerate(gnss, 1):
        snap = ref.receiver.snapshot()
        epoch = snap.last_epoch
        used = None if epoch is None else (epoch.used_count if epoch.used_count is not None and not epoch.satellites
                                           else sum(1 for sat in epoch.satellites if sat.used))
        since = snap.state_since_ns
        rows.append(ReceiverRow(number, ref.spec.name, snap.device, snap.state.value,
                                None if since is None else served(since), ref.watched, ref.spec.priority,
                                ref.pairer.cable_delay_ns, ref.pps_source, ref.pps_edges, ref.pairer.paired, used,
                                0 if epoch is None else len(epoch.satellites), sum(snap.frames.values()),
                                sum(snap.rejected.values()), snap.reconnects, snap.device_error,
                                **_setup_fields(snap.setup, snap.antenna)))
    return tuple(rows)


def _setup_fields(setup: dict[str, Any] | None, antenna: str | None) -> dict[str, str]:
    s = setup or {}
    return {"model": str(s.get("model", "")), "firmware": str(s.get("firmware", "")), "setup": str(s.get("state", "")),
            "setup_detail": str(s.get("detail", "")), "timing_mode": str(s.get("mode", "")), "antenna": antenna or ""}


def vars_of(view: RefView) -> dict[str, Any]:
    return {f.name: getattr(view, f.name) for f in dataclasses.fields(view)}


def _integrity(parts: Parts, raw_ns: int, edges: EdgeStatus) -> GuardStatus:
    guard = parts.gnss.guard
    assert guard is not None
    status = guard.status(raw_ns)
    if edges.cross_check is None:
        return status
    return dataclasses.replace(status, ntp={**(status.ntp or {}), "servers": edges.cross_check})
