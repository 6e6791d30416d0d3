"""What a PTP port shows of itself: the status of the grandmaster output and of the upstream reference's port.

Pure core.  ``master_snapshot`` and ``slave_snapshot`` read a port (port.py) into the dictionaries the status, the
console, SNMP and the metrics read: the grandmaster's (its clock's quality, foreign masters, the slaves it serves,
unicast clients, Sync lateness, the extensions' state) and a slaveOnly port's (its parent and grandmaster, how their
timescale is read, the latest offset and path delay).  Both carry the state, why and since when, the latest
transitions and the counters.
"""

from __future__ import annotations

from typing import Any, Protocol

from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.outputs.ptp.lateness import SyncLateness
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.bmca import ForeignMasters
from appliance.protocol.ptp.extensions import Extensions
from appliance.protocol.ptp.fsm import StateMachine
from appliance.protocol.ptp.measure import SlaveMeasure, timescale
from appliance.protocol.ptp.port_common import clock_identity_text, port_identity_text
from appliance.protocol.ptp.profiles import PortConfig
from appliance.protocol.ptp.unicast import Negotiation, SlavesSeen


class ShownPort(Protocol):
    config: PortConfig
    identity: c.PortIdentity
    fsm: StateMachine
    view: GrandmasterView
    priority1: int
    priority2: int
    log_sync: int
    log_announce: int
    foreign: ForeignMasters
    slaves: SlavesSeen
    negotiation: Negotiation
    counters: dict[str, int]
    sync_lateness: SyncLateness
    extensions: Extensions
    parent: c.PortIdentity | None
    parent_announce: c.Announce | None
    measure: SlaveMeasure

    @property
    def peer_delay_ns(self) -> int | None: ...

    @property
    def path_delay_ns(self) -> int | None: ...


def _state(port: ShownPort, now_ns: int) -> dict[str, Any]:
    return {"state": port.fsm.state, "reason": port.fsm.reason, "state_for_s": port.fsm.state_for_s(now_ns),
            "port_identity": port_identity_text(port.identity)}


def master_snapshot(port: ShownPort, now_ns: int) -> dict[str, Any]:
    cfg, view = port.config, port.view
    qualified = {id(a) for a in port.foreign.qualified(now_ns)}
    masters = []
    for sender, entry in port.foreign.masters.items():
        a = entry.announce
        masters.append({
            "port_identity": port_identity_text(sender), "grandmaster": a.gm_identity.hex(),
            "clock_class": a.gm_clock_quality.clock_class, "clock_accuracy": a.gm_clock_quality.clock_accuracy,
            "priority1": a.gm_priority1, "priority2": a.gm_priority2, "steps_removed": a.steps_removed,
            "qualified": id(a) in qualified, "last_seen_s_ago": round((now_ns - entry.received_ns[-1]) / 1e9, 1)})
    return {
        **_state(port, now_ns), "profile": cfg.profile, "transport": cfg.transport,
        "domain": cfg.domain, "delay_mechanism": cfg.delay_mechanism, "priority1": port.priority1,
        "priority2": port.priority2, "log_sync_interval": port.log_sync,
        "log_announce_interval": port.log_announce, "clock_class": view.clock_class,
        "clock_accuracy": view.clock_accuracy, "time_source": view.time_source,
        "peer_delay_ns": port.peer_delay_ns, "foreign_masters": masters,
        "slaves_seen": len(port.slaves), "slaves_active": port.slaves.active(now_ns),
        "slaves": port.slaves.rows(now_ns), "unicast_clients": len(port.negotiation.clients),
        "counters": dict(sorted(port.counters.items())),
        "sync_lateness": port.sync_lateness.snapshot(),
        "transitions": port.fsm.rows(now_ns),
        **port.extensions.snapshot(),
    }


def slave_snapshot(port: ShownPort, now_ns: int) -> dict[str, Any]:
    cfg, a, measure = port.config, port.parent_announce, port.measure
    grandmaster = reading = None
    if a is not None:
        q = a.gm_clock_quality
        grandmaster = {"identity": clock_identity_text(a.gm_identity), "clock_class": q.clock_class,
                       "clock_accuracy": q.clock_accuracy, "offset_scaled_log_variance": q.offset_scaled_log_variance,
                       "priority1": a.gm_priority1, "priority2": a.gm_priority2, "time_source": a.time_source,
                       "steps_removed": a.steps_removed, "current_utc_offset": a.current_utc_offset,
                       "utc_offset_valid": bool(a.header.flags & c.FLAG_UTC_OFFSET_VALID),
                       "ptp_timescale": bool(a.header.flags & c.FLAG_PTP_TIMESCALE),
                       "time_traceable": bool(a.header.flags & c.FLAG_TIME_TRACEABLE)}
        ptp, shift, why = timescale(a, measure.arb_timescale, measure.tai_utc_s)
        reading = {"ptp_timescale": ptp, "utc_offset_applied_s": shift, "reading": why}
    masters = [{"port_identity": port_identity_text(sender),
                "grandmaster": clock_identity_text(e.announce.gm_identity),
                "clock_class": e.announce.gm_clock_quality.clock_class, "priority1": e.announce.gm_priority1,
                "steps_removed": e.announce.steps_removed}
               for sender, e in port.foreign.masters.items()]
    return {
        **_state(port, now_ns), "domain": cfg.domain, "transport": cfg.transport,
        "delay_mechanism": cfg.delay_mechanism, "arb_timescale": measure.arb_timescale, "tai_utc_s": measure.tai_utc_s,
        "master": port_identity_text(port.parent) if port.parent else None, "grandmaster": grandmaster,
        "timescale": reading, "offset_ns": measure.last.offset_ns if measure.last else None,
        "path_delay_ns": port.path_delay_ns, "measurements": measure.measurements,
        "log_min_delay_req_interval": measure.log_delay_req, "foreign_masters": masters,
        "counters": dict(sorted(port.counters.items())), "transitions": port.fsm.rows(now_ns),
    }
