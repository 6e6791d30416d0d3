"""TimeStatus: the one immutable snapshot every output and surface reads (status, web, SNMP, NTP, PTP, audit).

Pure core.  Built by the composition root from the engines' own snapshots at a given instant; nothing reads engines
directly.  ``to_dict`` is the machine form (``appliance status --json``, the REST API), ``render`` the operator's
one-screen summary.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from appliance.alarms import AlarmRow
from appliance.clock.quality import Advertised
from appliance.clock.readiness import HoldoverReadiness
from appliance.events import Constellation, SatInfo
from appliance.gnss.guard import GuardStatus
from appliance.gnss.receiver import ReceiverSnapshot
from appliance.monitor import MonitorRow
from appliance.refs.selector import Disagreement, RefView
from appliance.units import NS_PER_S
from appliance.utcoffset import LeapStatus


@dataclass(frozen=True)
class ConstellationSummary:
    name: str
    used: int
    visible: int
    tracked: int  # visible with a C/N0 reading
    mean_cn0_dbhz: float | None


@dataclass(frozen=True)
class PpsStatus:
    source: str
    edges: int
    paired: int
    rejected: dict[str, int] = field(default_factory=dict)
    last_edge_raw_ns: int | None = None
    last_qerr_ps: int | None = None


@dataclass(frozen=True)
class ClockStatus:
    """The disciplined clock and what every output advertises for it (all instants TAI ns)."""

    state: str = "FREERUN"
    state_since_ns: int = 0
    reason: str = "starting"
    error_bound_ns: int | None = None
    frequency_ppb: float = 0.0
    phase_offset_ns: float | None = None
    locked_since_ns: int | None = None
    holdover_since_ns: int | None = None
    clock_class: int = 248
    clock_accuracy: int = 0xFE
    oscillator: str = ""
    backend: str = ""
    forced_holdover: bool = False
    time_constant_s: float = 0.0
    learned_s: float = 0.0
    predicted_frequency_ppb: float | None = None
    predicted_aging_ppb_per_day: float | None = None
    steps: int = 0
    advertised: Advertised | None = None
    sim_time_error_ns: int | None = None  # served minus true: known only in simulation
    holdover_readiness: HoldoverReadiness | None = None  # could the clock hold over now, and for how long within spec


@dataclass(frozen=True)
class ReferenceRow(RefView):
    """One reference as status shows it: the selector's view of it, since when (served time), and what its driver
    and its input edge report (the PTP slave port's state, the NTP servers, the 1PPS device ...)."""

    since_tai_ns: int = 0
    input: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReceiverRow:
    """One GNSS receiver of the [[gnss]] array as status shows it: what it is, its state and its PPS edges.  Its
    reference's qualification is the references row of the same name."""

    number: int  # its place in the [[gnss]] array, from 1
    name: str  # its reference's name (gnss, gnss2 ...)
    device: str
    state: str  # ReceiverState's value: disconnected, no-data, no-fix, 2d-fix, 3d-fix, time-only
    state_since_ns: int | None  # TAI; None: in this state since start
    watched: bool  # the first: the integrity checks, the receiver card and the applianceRcv* scalars are its
    priority: int
    cable_delay_ns: int
    pps_source: str
    pps_edges: int
    paired: int
    satellites_used: int | None  # in its last epoch; None before one
    satellites_visible: int
    frames: int
    rejected: int
    reconnects: int = 0
    device_error: str = ""
    model: str = ""  # what the receiver says it is (empty: it does not say)
    firmware: str = ""
    setup: str = ""  # the set-up's state: done, incomplete, configuring, identifying, nmea, off
    setup_detail: str = ""
    timing_mode: str = ""  # survey-in and its progress, a fixed position, or as the receiver is
    antenna: str = ""  # ok, open, short, unknown; empty when the receiver does not say


@dataclass(frozen=True)
class ReferencesStatus:
    """The references: which one drives the clock, the selection policy, and a row per reference."""

    active: str | None = None
    pinned: str | None = None
    revertive: bool = True
    wait_to_restore_s: float = 0.0
    step_limit_ns: float = 0.0
    slew_ns_per_s: float = 0.0
    switches: int = 0
    disagreements: tuple[Disagreement, ...] = ()
    rows: tuple[ReferenceRow, ...] = ()


def _off() -> dict[str, Any]:
    return {"enabled": False}


@dataclass(frozen=True)
class OutputsStatus:
    """Each output's own report of its state and counters.  NTP and PTP always say whether they serve; the others
    are None unless configured (and, for parts that run, started)."""

    ntp: dict[str, Any] = field(default_factory=_off)
    ptp: dict[str, Any] = field(default_factory=_off)
    pps: dict[str, Any] | None = None
    irig: dict[str, Any] | None = None
    serial: dict[str, Any] | None = None
    web: dict[str, Any] | None = None
    snmp: dict[str, Any] | None = None
    audit: dict[str, Any] | None = None
    cpu_latency: dict[str, Any] | None = None  # the CPU wake-up latency hold (cpu_latency_us), when asked for

    def present(self) -> dict[str, dict[str, Any]]:
        """The outputs that report, by name."""
        return {f.name: v for f in dataclasses.fields(self) if (v := getattr(self, f.name)) is not None}


@dataclass(frozen=True)
class Verdict:
    """Whether the appliance serves traceable time, in the words every surface shows: the console's banner on
    every page, the first line of ``appliance status``, SNMP and the metrics.  ``level`` is "traceable" (locked to
    a reference), "holdover" (traceable within the holdover promise, no reference) or "not-traceable"."""

    traceable: bool
    level: str
    headline: str  # "serving traceable time" / "serving traceable time in holdover" / "not traceable"
    reason: str
    since_tai_ns: int
    since_utc: str
    clock_class_meaning: str
    clock_accuracy_meaning: str


@dataclass(frozen=True)
class TimeStatus:
    at_tai_ns: int
    utc_text: str
    mode: str  # "simulated" or "hardware"
    version: str
    started_at_tai_ns: int
    receiver: ReceiverSnapshot
    satellites: tuple[SatInfo, ...]
    constellations: tuple[ConstellationSummary, ...]
    pps: PpsStatus
    leap: LeapStatus
    clock: ClockStatus
    alarms: tuple[AlarmRow, ...] = ()
    outputs: OutputsStatus = field(default_factory=OutputsStatus)
    integrity: GuardStatus | None = None  # the GNSS integrity verdict, survey and detectors
    references: ReferencesStatus = field(default_factory=ReferencesStatus)
    verdict: Verdict | None = None
    receivers: tuple[ReceiverRow, ...] = ()  # every GNSS receiver, the first (``receiver`` above) included
    monitor: tuple[MonitorRow, ...] = ()  # the sync monitor's downstream clients, one row per target


# What each clockClass means (IEEE 1588-2019 Table 4, ITU-T G.8275.1 Table 2), as the console and status say it.
CLOCK_CLASS_MEANING = {
    6: "locked to a primary reference (PRTC)",
    7: "holdover, within its specification",
    52: "holdover past its specification (degradation A: never a slave)",
    140: "holdover past its specification (category 1 oscillator)",
    150: "holdover past its specification (category 2 oscillator)",
    160: "holdover past its specification (category 3 oscillator)",
    187: "holdover past its specification (degradation B: may be a slave)",
    248: "default: free-running, not traceable",
    255: "slave-only",
}
# IEEE 1588-2019 Table 5 clockAccuracy codes: the upper end of each range.
_ACCURACY_CODES = {0x17: "1 ps", 0x18: "2.5 ps", 0x19: "10 ps", 0x1A: "25 ps", 0x1B: "100 ps", 0x1C: "250 ps",
                   0x1D: "1 ns", 0x1E: "2.5 ns", 0x1F: "10 ns", 0x20: "25 ns", 0x21: "100 ns", 0x22: "250 ns",
                   0x23: "1 us", 0x24: "2.5 us", 0x25: "10 us", 0x26: "25 us", 0x27: "100 us", 0x28: "250 us",
                   0x29: "1 ms", 0x2A: "2.5 ms", 0x2B: "10 ms", 0x2C: "25 ms", 0x2D: "100 ms", 0x2E: "250 ms",
                   0x2F: "1 s", 0x30: "10 s", 0x31: "more than 10 s"}


def clock_class_meaning(clock_class: int) -> str:
    return CLOCK_CLASS_MEANING.get(clock_class, "reserved" if clock_class < 248 else "not a grandmaster class")


def clock_accuracy_meaning(code: int) -> str:
    if code == 0xFE:
        return "unknown"
    found = _ACCURACY_CODES.get(code)
    if found is None:
        return "reserved"
    return found if found.startswith("more") else f"within {found}"


_STATE_WORDS = {"FREERUN": "clock free-running", "ACQUIRING": "clock acquiring a reference",
                "HOLDOVER": "clock in holdover", "HOLDOVER_EXPIRED": "holdover past its promise",
                "LOCKED": "clock locked"}
_CAUSES = ("gnss-", "reference-", "leap-")  # alarms that can be why the time is not traceable


def judge(clock: ClockStatus, active_reference: str | None, alarms: tuple[AlarmRow, ...], since_utc: str
          ) -> Verdict:
    """The verdict from what the clock advertises (PTP's timeTraceable), the active reference and the most severe
    alarm of a reference, its integrity or the UTC offset (the cause, when there is one; an output's fault is not why
    the time is not traceable)."""
    adv = clock.advertised
    traceable = bool(adv.time_traceable) if adv is not None else clock.state == "LOCKED"
    bound = "unknown" if clock.error_bound_ns is None else _ns_text(clock.error_bound_ns, signed=False)
    cause = next((a for a in alarms if a.code.startswith(_CAUSES)), None)
    if traceable and clock.state == "LOCKED":
        level, headline = "traceable", "serving traceable time"
        reason = f"locked to {active_reference or 'its reference'}, error bound {bound}"
    elif traceable:
        level, headline = "holdover", "serving traceable time in holdover"
        why = f"no reference ({cause.text})" if cause else f"holding over ({clock.reason})"  # forced: still a reference
        reason = f"{why}; error bound {bound}, within its promise"
    else:
        level, headline = "not-traceable", "not traceable"
        words = _STATE_WORDS["HOLDOVER_EXPIRED" if clock.state == "HOLDOVER" else clock.state] \
            if clock.state in _STATE_WORDS else clock.state
        reason = f"{words}: {cause.text}" if cause is not None else f"{words} ({clock.reason})"
        if cause is not None and cause.diagnosis:
            reason += f"; {cause.diagnosis}"
    return Verdict(traceable, level, headline, reason, clock.state_since_ns, since_utc,
                   clock_class_meaning(clock.clock_class), clock_accuracy_meaning(clock.clock_accuracy))


def verdict_line(v: dict[str, Any], now_tai_ns: int) -> str:
    """The verdict in one line, as ``appliance status`` prints it and the console's banner reads."""
    return (f"{v['headline'].upper() if v['level'] == 'not-traceable' else v['headline']} since {v['since_utc']} "
            f"({_age(now_tai_ns, v['since_tai_ns'])}): {v['reason']}")


def summarize(satellites: tuple[SatInfo, ...]) -> tuple[ConstellationSummary, ...]:
    by: dict[Constellation, list[SatInfo]] = {}
    for sat in satellites:
        by.setdefault(sat.constellation, []).append(sat)
    out = []
    for const in Constellation:
        sats = by.get(const, [])
        if not sats:
            continue
        cn0 = [s.cn0_dbhz for s in sats if s.cn0_dbhz]
        out.append(ConstellationSummary(const.value, sum(1 for s in sats if s.used), len(sats), len(cn0),
                                        round(sum(cn0) / len(cn0), 1) if cn0 else None))
    return tuple(out)


def to_dict(status: TimeStatus) -> dict[str, Any]:
    """Plain JSON-ready data (enums as their values; outputs that do not report left out)."""
    plain: dict[str, Any] = _plain(dataclasses.asdict(status))
    plain["outputs"] = {name: report for name, report in plain["outputs"].items() if report is not None}
    return plain


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    return value


def _integrity_line(g: dict[str, Any] | None, clock_state: str = "", gnss_state: str = "") -> str:
    if not g:
        return "-"
    if not g["enabled"]:
        return "checks disabled (integrity.enabled=false)"
    level = g["level"]
    idle = gnss_state in ("no-signal", "unusable")
    if level == "ok" and idle and g["usable"]:
        text = f"no data to check (reference not in use: {gnss_state})"
        sv = g["survey"]
        return text + ("" if sv["state"] == "fixed" else f"; surveying {sv['elapsed_s']:.0f}/{sv['duration_s']:.0f} s")
    text = level.upper() if level != "ok" else "ok"
    rejected = "REJECTED" + {"HOLDOVER": " (holding over)", "HOLDOVER_EXPIRED": " (holding over)",
                             "FREERUN": " (clock free-running)"}.get(clock_state, "")
    text += ", reference " + ("used" if g["usable"] else rejected)
    if g["override"] != "auto":
        text += f", operator override: {g['override']}"
    elif g["action"] == "monitor":
        text += " (monitor only)"
    if g.get("requalify_in_s") is not None:
        text += f", qualifies again after {g['requalify_in_s']:.0f} s of consistent data"
    if level != "ok" and g["reasons"]:
        text += ": " + "; ".join(g["reasons"][:3])
    ntp = g.get("ntp") or {}
    if "offset_ms" in ntp:
        text += f"; NTP check {ntp['offset_ms']:+.2f} ms (+-{ntp['uncertainty_ms']:.2f}) via {ntp['server']}"
    failing = [name for name, st in (ntp.get("servers") or {}).items() if st.get("error")]
    if failing:
        text += f"; NTP check failing: {', '.join(failing)}"
    sv = g["survey"]
    home = sv.get("home")
    where = "" if not home else f" {home['lat_deg']:.6f} {home['lon_deg']:.6f} {home['alt_m'] or 0:.1f} m"
    if sv["state"] == "fixed":
        text += f"; home{where} ({sv['source']})"
    else:
        text += f"; surveying {sv['elapsed_s']:.0f}/{sv['duration_s']:.0f} s"
    return text


def watched_name(d: dict[str, Any]) -> str:
    """The reference name of the receiver the integrity checks watch (the first of the [[gnss]] array)."""
    return next((r["name"] for r in d.get("receivers") or [] if r.get("watched")), "gnss")


def _gnss_state(d: dict[str, Any]) -> str:
    name = watched_name(d)
    return next((r["state"] for r in (d.get("references") or {}).get("rows") or [] if r["name"] == name), "")


def _receiver_lines(d: dict[str, Any]) -> list[str]:
    """One line per receiver when there are several: state, sky, PPS, cable delay and its reference's state."""
    receivers = d.get("receivers") or []
    if len(receivers) < 2:
        return []
    now = d["at_tai_ns"]
    refs = {r["name"]: r for r in (d.get("references") or {}).get("rows") or []}
    out = [f"Receivers       : {len(receivers)} ([[gnss]]; the first is watched by the integrity checks)"]
    for r in receivers:
        ref = refs.get(r["name"]) or {}
        sats = "-" if r["satellites_used"] is None else f"{r['satellites_used']}/{r['satellites_visible']}"
        text = (f"  {r['number']:>2} {r['name']:<6} on {r['device']}: {r['state']} {_for(now, r['state_since_ns'])}"
                f", satellites {sats}, PPS {r['pps_edges']} edges ({r['paired']} paired), cable "
                f"{r['cable_delay_ns']:+d} ns, priority {r['priority']}, reference {ref.get('state', '-')}"
                + (" (active)" if ref.get("active") else ""))
        if r.get("device_error"):
            text += f"  ({r['device_error']})"
        out.append(text)
    return out


def _reference_lines(refs: dict[str, Any], clock_state: str = "") -> list[str]:
    """One line per reference: priority, state, offset against the clock, quality.  Nothing for GNSS alone."""
    rows = refs.get("rows") or []
    if len(rows) < 2:
        return []
    active = refs.get("active") or f"none ({(clock_state or 'unknown').lower()})"
    head = f"References      : active {active}" + (f", pinned to {refs['pinned']}" if refs.get("pinned") else "") \
        + f", {'revertive' if refs.get('revertive') else 'non-revertive'}, {refs.get('switches', 0)} switches"
    out = [head]
    for r in rows:
        mark = "*" if r["active"] else " "
        off = "-" if r["offset_ns"] is None else _ns_text(r["offset_ns"])
        jit = "-" if r["jitter_ns"] is None else _ns_text(r["jitter_ns"], signed=False)
        text = f"  {mark}{r['priority']:>2} {r['name']:<5} {r['state']:<12} offset {off:>9}  jitter {jit:>8}" \
               f"  accuracy {_ns_text(r['accuracy_ns'], signed=False)}"
        if r.get("buildout_ns"):
            text += f"  built out {_ns_text(r['buildout_ns'])}"
        if r["state"] not in ("qualified",):
            text += f"  ({r['reason']})"
        out.append(text)
    return out


def _ns_text(ns: float, signed: bool = True) -> str:
    a, sign = abs(ns), "+" if signed else ""
    if a >= 1e6:
        return f"{ns / 1e6:{sign}.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:{sign}.2f} us"
    return f"{ns:{sign}.0f} ns"


def age_text(now_ns: int, then_ns: int | None) -> str:
    """How long ago, as status prints it (``1h02m05s``)."""
    return _age(now_ns, then_ns)


def _age(now_ns: int, then_ns: int | None) -> str:
    if then_ns is None:
        return "-"
    s = max(0, now_ns - then_ns) // NS_PER_S
    return f"{s // 3600}h{s // 60 % 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _learned_text(learned_s: float) -> str:
    return f"{learned_s / 3600:.1f} h" if learned_s >= 360 else f"{learned_s:.0f} s"


def _holdover_line(readiness: dict[str, Any] | None) -> list[str]:
    """'Holdover: capable in 3 min', '... capable, within 1000 ns for 4.2 h' (nothing from an older appliance)."""
    return [] if not readiness else [f"Holdover        : {readiness['text']}"]


def _for(now_ns: int, since_ns: int | None) -> str:
    """How long a state has lasted; "since start" when it has not changed since (its start is not an instant)."""
    return "since start" if since_ns is None else f"for {_age(now_ns, since_ns)}"


def _setup_lines(setup: dict[str, Any] | None, antenna: str | None) -> list[str]:
    """What the receiver is and how it is set up: model, firmware, the set-up's state and the timing mode."""
    if not setup:
        return []
    what = ", ".join(x for x in (setup.get("model") or setup.get("family", ""),
                                 f"firmware {setup['firmware']}" if setup.get("firmware") else "",
                                 f"protocol {setup['protocol']}" if setup.get("protocol") else "") if x)
    state = setup.get("state", "")
    if not setup.get("model"):
        what = {"nmea": "an NMEA receiver (it does not say what it is)", "off": "an NMEA receiver (gnss.receiver = nmea)"
                }.get(state, what or "unknown")
    lines = [f"Receiver model  : {what}   set-up {state}"
             + (f" ({setup['commands_answered']}/{setup['commands']} answered)" if setup.get("commands") else "")
             + (f"   antenna {antenna}" if antenna else "")]
    if setup.get("detail"):
        lines.append(f"Set-up          : {setup['detail']}")
    if setup.get("mode"):
        lines.append(f"Timing mode     : {setup['mode']}")
    return lines


def render(d: dict[str, Any]) -> str:
    """The operator's one-screen view, from the JSON form (so the CLI renders what the socket sent)."""
    now = d["at_tai_ns"]
    rx, clock, leap, pps = d["receiver"], d["clock"], d["leap"], d["pps"]
    epoch = rx.get("last_epoch") or {}
    pos = epoch.get("position")
    where = "-" if not pos else f"{pos['lat_deg']:.6f} {pos['lon_deg']:.6f}" + (
        f" {pos['alt_m']:.1f} m" if pos.get("alt_m") is not None else "")
    bound = clock.get("error_bound_ns")
    adv = clock.get("advertised") or {}
    verdict = d.get("verdict")
    lines = [
        *([f"Verdict         : {verdict_line(verdict, now)}"] if verdict else []),
        f"Time (UTC)      : {d['utc_text']}   [{d['mode']}, up {_age(now, d['started_at_tai_ns'])}]",
        f"Clock state     : {clock['state']} for {_age(now, clock['state_since_ns'])} ({clock['reason']})"
        + ("  [holdover forced by operator]" if clock.get("forced_holdover") else ""),
        f"Error bound     : {'unknown' if bound is None else f'{bound} ns'}   clockClass {clock['clock_class']}"
        f" ({clock_class_meaning(clock['clock_class'])})   clockAccuracy 0x{clock['clock_accuracy']:02X}"
        f" ({clock_accuracy_meaning(clock['clock_accuracy'])})"
        + (f"   NTP stratum {adv['ntp_stratum']} LI {adv['ntp_leap_indicator']}" if adv else ""),
        f"Frequency       : {clock['frequency_ppb']:+.3f} ppb ({clock['oscillator']}, {clock.get('backend', '')},"
        f" time constant {clock.get('time_constant_s', 0):.0f} s)   since lock {_age(now, clock.get('locked_since_ns'))}"
        + (f"   phase {clock['phase_offset_ns']:+.1f} ns" if clock.get("phase_offset_ns") is not None else ""),
        f"Learned         : {_learned_text(clock.get('learned_s', 0))}"
        + (f", oscillator {clock['predicted_frequency_ppb']:+.4f} ppb, aging {clock['predicted_aging_ppb_per_day']:+.4f}"
           f" ppb/day" if clock.get("predicted_frequency_ppb") is not None else "")
        + (f"   (simulation: served - true {clock['sim_time_error_ns']:+d} ns)"
           if clock.get("sim_time_error_ns") is not None else ""),
        *_holdover_line(clock.get("holdover_readiness")),
        f"Receiver        : {rx['name']} on {rx['device']}: {rx['state']} {_for(now, rx['state_since_ns'])}"
        + (f"  ({rx['device_error']})" if rx.get("device_error") else ""),
        *_setup_lines(rx.get("setup"), rx.get("antenna")),
        f"Last fix        : {epoch.get('utc_text') or '-'}  mode {_fix_name(epoch)}  position {where}",
        "Satellites      : " + (", ".join(f"{c['name']} {c['used']}/{c['visible']}"
                                          + (f" ({c['mean_cn0_dbhz']:.0f} dBHz)" if c['mean_cn0_dbhz'] else "")
                                          for c in d["constellations"]) or "none") + "   (used/visible)",
        *_receiver_lines(d),
        "Integrity       : " + _integrity_line(d.get("integrity"), (d.get("clock") or {}).get("state", ""),
                                                  _gnss_state(d)),
        *_reference_lines(d.get("references") or {}, clock["state"]),
        f"PPS             : {pps['source']}: {pps['edges']} edges, {pps['paired']} paired"
        + (f", qErr {pps['last_qerr_ps'] / 1000:+.1f} ns" if pps.get("last_qerr_ps") is not None else ""),
        f"UTC offset      : TAI-UTC {leap['tai_utc_s']} s from {leap['source']}"
        + (f"; leap {leap['pending_change_s']:+d} s at {leap['pending_at_utc']}" if leap["pending_change_s"] else "")
        + ("; LEAP TABLE EXPIRED" if leap["table_expired"] else f"; table valid to {leap['table_expires_utc']}"),
        f"Frames          : {_counts(rx['frames'])}; ignored {sum(rx['ignored'].values())}",
        f"Rejected        : {_counts(rx['rejected']) or 'none'}" + (
            f"; PPS {_counts(pps['rejected'])}" if pps["rejected"] else ""),
    ]
    ntp = (d.get("outputs") or {}).get("ntp")
    if ntp:
        lines.append("NTP             : " + _ntp_line(ntp))
    ptp = (d.get("outputs") or {}).get("ptp")
    if ptp and ptp.get("enabled"):
        lines.append("PTP             : " + _ptp_line(ptp))
    serial = (d.get("outputs") or {}).get("serial")
    if serial and serial.get("enabled"):
        lines.append("Serial time     : " + (f"NOT WRITING to {serial['device']}: {serial['error']}" if serial["error"]
                                             else f"{serial['format']} on {serial['device']} at {serial['baud']} "
                                                  f"baud, +{serial['offset_ms']} ms: {serial['written']} written"
                                                  f" ({serial['write_errors']} failed); last {serial['last']!r}"))
    pps_out = (d.get("outputs") or {}).get("pps")
    if pps_out and pps_out.get("enabled"):
        lines.append(f"1PPS out        : {pps_out['seconds']} s planned, {pps_out['squelched']} squelched "
                     f"(policy {pps_out['policy']}), width {pps_out['width_ms']:g} ms, cable "
                     f"{pps_out['cable_delay_ns']} ns" + (f", {pps_out['lost']} lost" if pps_out["lost"] else "")
                     + _sink_text(pps_out.get("sink")))
    irig_out = (d.get("outputs") or {}).get("irig")
    if irig_out and irig_out.get("enabled"):
        lines.append(f"IRIG-B out      : {irig_out['format']} ({irig_out.get('timezone', 'UTC')}"
                     + (f", {irig_out['sample_rate_hz']} samples/s" if irig_out.get("sample_rate_hz") else "")
                     + f"), {irig_out['frames']} frames, time quality "
                     f"{irig_out['time_quality']}, cable {irig_out['cable_delay_ns']} ns"
                     + (f", {irig_out['lost']} lost" if irig_out["lost"] else "") + _sink_text(irig_out.get("sink")))
    web = (d.get("outputs") or {}).get("web")
    if web and web.get("enabled"):
        host = f"[{web['listen']}]" if ":" in web["listen"] else web["listen"]
        lines.append("Web console     : " + (f"NOT SERVING: {web['error']}" if web["error"]
                                             else f"https://{host}:{web['port']}/"))
    snmp = (d.get("outputs") or {}).get("snmp")
    if snmp and snmp.get("enabled"):
        lines.append("SNMP agent      : " + (f"NOT SERVING: {snmp['error']}" if snmp["error"] else
                                             f"{snmp['listen']} port {snmp['port']}, {snmp['notifications']} "
                                             f"notifications sent ({snmp['send_errors']} failed), "
                                             f"{snmp['denied']} denied, {snmp['rate_limited']} rate-limited, "
                                             f"{snmp.get('replay_dropped', 0)} replayed SETs dropped, "
                                             f"{_auth_failures(snmp)} authentication failures"))
    audit = (d.get("outputs") or {}).get("audit")
    if audit and audit.get("enabled"):
        lines.append(f"Audit trail     : {audit['records']} records, head {audit['head_hash'][:16]}"
                     + (f"; {audit['failures']} NOT WRITTEN ({audit['error']})" if audit["failures"] else ""))
        lines.append("Audit anchor    : " + _anchor_text(audit))
    for m in d.get("monitor") or []:  # the sync monitor's downstream clients
        got = "-" if m["offset_ns"] is None else f"{m['offset_ns'] / 1000:+.3f} us, delay {m['delay_ns'] or 0:.0f} ns"
        lines.append(f"Client {m['kind'].upper():<4}     : {m['target']} {m['state']} ({got})"
                     + (f": {m['error']}" if m["error"] else ""))
    alarms = [a for a in d.get("alarms", []) if a["raised"]]
    lines.append("Alarms          : " + ("none" if not alarms else f"{len(alarms)} active"))
    for a in alarms:
        since = a.get("since_ns", a["at_ns"])
        ack = f", acknowledged by {a['acked_by']}" if a.get("acked_by") else ""
        lines.append(f"  #{a.get('id', '?'):<3} {a['severity'].upper():<8} {a['code']}: {a['text']} "
                     f"(up {_age(now, since)}{ack})" + (f"; {a['diagnosis']}" if a.get("diagnosis") else ""))
    return "\n".join(lines)


def _anchor_text(audit: dict[str, Any]) -> str:
    """Where the audit chain is anchored off the box (its syslog copies), or the standing notice that it is not."""
    anchor, fs = audit.get("anchor") or {}, audit.get("syslog")
    if not anchor.get("anchored") or not fs:
        return anchor.get("notice") or "unknown"
    if fs.get("transport", "udp") == "udp":
        return f"udp://{fs['target']}: {fs['sent']} sent ({fs['errors']} failed)"
    state = "connected" if fs.get("connected") else f"NOT CONNECTED ({fs['last_error']})"
    return (f"{fs['transport']}://{fs['target']} {state}: {fs['sent']} sent, {fs['queued']} queued"
            + (f", {fs['dropped']} DROPPED" if fs.get("dropped") else ""))


def _sink_text(sink: dict[str, Any] | None) -> str:
    """Where a 1PPS or IRIG-B output goes (nothing for the in-memory recording)."""
    if not sink:
        return ""
    if sink.get("error"):
        return f"; NOT OUTPUT: {sink['error']}"
    if sink.get("kind") == "wav":
        where = f"WAV {sink['mode']} {sink['path']}"
        extra = (f", {sink['current']}" if sink["mode"] == "stream" else
                 f", {sink['segments']} segment(s) of {sink['segment_s']} s") + \
            (f", {sink['overruns']} overruns" if sink["overruns"] else "")
        return f"; {where}: {sink['frames']} frames{extra}"
    if "chip" in sink:
        return (f"; GPIO {sink['chip']} line {sink['line']}: {sink['edges']} edges, worst {sink['worst_late_us']} µs "
                f"late" + (f", {sink['dropped']} dropped" if sink["dropped"] else ""))
    if "device" in sink:
        return f"; PHC {sink['device']} channel {sink['channel']}" + ("" if sink["running"] else " (stopped)")
    return ""


def _ntp_line(ntp: dict[str, Any]) -> str:
    if not ntp.get("enabled"):
        return "disabled"
    where = f"{ntp['listen']} port {ntp['port']}"
    if ntp.get("error"):
        return f"NOT SERVING on {where}: {ntp['error']}"
    t = ntp.get("totals") or {}
    alive = sum(1 for w in ntp.get("workers", []) if w["alive"])
    drops = sum(v for k, v in t.items() if k.startswith("drop_"))
    kods = t.get("kod_rate", 0) + t.get("kod_deny", 0) + t.get("kod_rstr", 0)
    return (f"{where}, {alive}/{len(ntp.get('workers', []))} workers: {t.get('requests', 0)} "
            f"requests, {t.get('replies', 0)} replies ({t.get('interleaved', 0)} interleaved, "
            f"{t.get('authenticated', 0)} authenticated), {kods} KoD, {t.get('crypto_nak', 0)} crypto-NAK, "
            f"{drops} dropped" + _clients_text(ntp.get("clients"))
            + (_nts_text(ntp["nts"], t) if ntp.get("nts") else ""))


def _clients_text(clients: dict[str, Any] | None) -> str:
    """The request rate and the busiest clients of the last minute, when the workers report them."""
    if not clients or clients.get("request_rate_per_s") is None:
        return ""
    top = ", ".join(f"{c['client']} {c['requests']}" for c in (clients.get("top") or [])[:3])
    return (f"; {clients['request_rate_per_s']:.1f} requests/s over {clients['rate_window_s']:.0f} s"
            + (f", busiest in {clients['window_s']} s: {top}" if top else ""))


def _nts_text(nts: dict[str, Any], t: dict[str, Any]) -> str:
    age = nts.get("cookie_key_age_s")
    return (f"; NTS-KE port {nts['ke_port']}{'' if nts.get('alive') else ' NOT RUNNING'}: {nts['sessions']} "
            f"sessions, {nts['tls_failures'] + nts['ke_errors']} failed, {t.get('nts', 0)} NTS replies, "
            f"{t.get('nts_nak', 0)} NAK, cookie key {nts['cookie_key_id']} "
            f"{'age unknown' if age is None else f'{age // 3600} h old'}")


def _ptp_line(ptp: dict[str, Any]) -> str:
    where = f"{ptp.get('profile')} {ptp.get('transport')} on {ptp['interface']} domain {ptp.get('domain')}"
    if ptp.get("error"):
        return f"{ptp.get('state', 'FAULTY')} {where}: {ptp['error']}"
    counters = ptp.get("counters") or {}
    drops = sum(v for k, v in counters.items() if k.startswith("drop_"))
    masters = [m for m in ptp.get("foreign_masters", []) if m.get("qualified")]
    return (f"{ptp['state']} ({ptp.get('reason', '')}), {where}, port {ptp.get('port_identity')}, "
            f"{ptp.get('timestamping')} timestamps; {ptp.get('slaves_active', 0)} slaves active"
            f" ({ptp.get('slaves_seen', 0)} seen), {ptp.get('unicast_clients', 0)} unicast clients, "
            f"{counters.get('tx_sync', 0)} Sync, {counters.get('tx_delay_resp', 0)} Delay_Resp, "
            f"{counters.get('tx_pdelay_resp', 0)} Pdelay_Resp, {drops} dropped"
            + _lateness_text(ptp.get("sync_lateness")) + _ptp_auth_text(ptp.get("security"))
            + _gptp_text(ptp.get("gptp"))
            + (f"; better master {masters[0]['grandmaster']} class {masters[0]['clock_class']}" if masters and
               ptp["state"] == "PASSIVE" else ""))


def _gptp_text(link: dict[str, Any] | None) -> str:
    if not link:
        return ""
    if not link.get("as_capable"):
        return f"; 802.1AS link NOT asCapable: {link.get('why_not')}"
    return (f"; 802.1AS link asCapable, delay {link['link_delay_ns']} ns, neighbor rate ratio "
            f"{link['neighbor_rate_ratio']:.9f}")


def _ptp_auth_text(auth: dict[str, Any] | None) -> str:
    if not auth:
        return ""
    refused = ", ".join(f"{n} {why}" for why, n in sorted(auth.get("refused", {}).items())) or "none"
    return (f"; authenticated: spp {auth['spp']} key {auth['key_id']} ({auth['algorithm']}), {auth['signed']} "
            f"signed, {auth['verified']} verified, refused {refused}"
            + (f", {auth['accepted_unsigned']} unsigned accepted" if auth.get("accept_unsigned") else ""))


def _lateness_text(late: dict[str, Any] | None) -> str:
    """How late the Syncs left against their slots (transmit timestamp minus slot), when any has."""
    if not late or not late.get("syncs"):
        return ""
    return (f"; Sync lateness p99 {late['p99_us']:g} us, max {late['max_us']:g} us, {late['late_over_1ms']} of "
            f"{late['syncs']} over 1 ms")


def _fix_name(epoch: dict[str, Any]) -> str:
    mode = epoch.get("fix_mode")
    names = {0: "unknown", 1: "no fix", 2: "2D", 3: "3D"}
    return "-" if mode is None else names.get(mode, str(mode)) + (" time-only" if epoch.get("time_only") else "")


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in Counter(counts).most_common())


def _auth_failures(snmp: dict[str, Any]) -> int:
    """SNMP requests refused by authentication: wrong digest, unknown user, outside the time window, bad community."""
    standard = snmp.get("standard") or {}
    return sum(int(standard.get(name, 0)) for name in ("usmStatsWrongDigests", "usmStatsUnknownUserNames",
                                                         "usmStatsNotInTimeWindows", "snmpInBadCommunityNames"))
