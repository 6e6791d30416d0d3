"""The alarm catalogue, the active alarms with their acknowledgements, and the alarm history paired from the audit trail.

Pure core.  ``CATALOG`` is the one table of alarms: each has a stable numeric ID (the index of the SNMP alarm table,
the ``id`` label of the Prometheus series), a code, one ITU-T X.733 severity, an X.733 probable cause, what usually
causes it and what an operator should do.  Whoever raises an alarm names only its code and text; the severity is
the catalogue's.  Severities, as X.733 defines them:

- critical: the service is lost: time is not traceable (free-running, holdover past its promise), NTP or PTP is
  not served at all, or the reference is being spoofed;
- major: the service is at risk now: the reference is lost (the clock holds over), jamming, the leap-second offset
  disagrees, the audit trail was cut short;
- minor: the service goes on as promised but needs attention: holdover within its promise, a backup reference,
  an integrity doubt, another grandmaster outranking this one;
- warning: something to know before it matters: an expiring leap table, an operator override, a setting changed
  by PTP management.

An alarm is raised once and cleared once; raising an already active alarm with the same text is a no-op, so
conditions re-evaluated every second do not flood the log, the audit trail or the NMS.  An acknowledgement (who,
when, a comment) stays with the active alarm until it clears; a new text does not take it away.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from appliance.events import Alarm, ReceiverState, Severity


@dataclass(frozen=True)
class AlarmSpec:
    id: int
    code: str
    severity: Severity
    title: str
    probable_cause: str  # the X.733 probableCause name
    cause: str  # what usually causes it, in words
    action: str  # what an operator should do


def _spec(id_: int, code: str, severity: Severity, title: str, probable: str, cause: str, action: str) -> AlarmSpec:
    return AlarmSpec(id_, code, severity, title, probable, cause, action)


C, MA, MI, W = Severity.CRITICAL, Severity.MAJOR, Severity.MINOR, Severity.WARNING
CATALOG: dict[str, AlarmSpec] = {s.code: s for s in (
    # --- the clock ---------------------------------------------------------------------------------------------
    _spec(1, "clock-unlocked", C, "Clock not traceable (free-running or acquiring)", "timingProblem",
          "No usable reference and nothing learned to hold over on: at start, after a long outage, or when the "
          "reference was rejected before the clock had learned its oscillator.",
          "Restore the reference (see the receiver and integrity alarms). Clients see clockClass 248 / stratum 16 "
          "and should not follow this server until the verdict says traceable."),
    _spec(2, "clock-holdover", MI, "Clock in holdover (within its promise)", "timingProblem",
          "The reference is lost or rejected; the clock runs on its learned oscillator model and its error bound "
          "grows with time.",
          "Restore the reference before the holdover promise ends (the dashboard says for how long it holds)."),
    _spec(3, "clock-holdover-expired", C, "Holdover past its promise: time not traceable", "timingProblem",
          "The reference has been away longer than the oscillator can hold the promised accuracy.",
          "Restore the reference; clients see clockClass 52/187 and should prefer another grandmaster."),
    # --- the GNSS receiver ---------------------------------------------------------------------------------------
    _spec(10, "gnss-disconnected", MA, "GNSS receiver disconnected", "receiverFailure",
          "The receiver's device cannot be opened or stopped working: unplugged, wrong gnss.device, a USB reset, "
          "permissions.",
          "Check the cable and the device path (gnss.device) and the open error shown; the clock holds over "
          "meanwhile."),
    _spec(11, "gnss-no-data", MA, "GNSS receiver sends nothing decodable", "communicationProtocolError",
          "The device is open but nothing decodable arrives: wrong baud rate (gnss.baud), wrong protocol, or a "
          "receiver that is powered down.",
          "Check gnss.baud and the receiver's output messages; `appliance replay` decodes a capture of the line."),
    _spec(12, "gnss-no-fix", MA, "GNSS receiver has no fix", "lossOfSignal",
          "The receiver talks but tracks too few satellites: antenna blocked, disconnected or faulty cable, or "
          "jamming (the GNSS integrity card tells a blocked antenna from jamming).",
          "Check the antenna, its cable and its view of the sky; see the GNSS page's satellites and C/N0."),
    _spec(13, "gnss-spoofing", C, "GNSS spoofing detected: reference rejected", "timingProblem",
          "The integrity checks found time or position that moves unlike real signals (a push, a step, a "
          "position jump, a fake sky).",
          "Investigate the RF environment; the clock holds over on what it learned before the attack. "
          "`appliance integrity trust` overrides only if you are sure."),
    _spec(14, "gnss-jamming", MA, "GNSS jamming detected", "lossOfSignal",
          "C/N0 collapsed on every tracked satellite together, or the receiver reports interference.",
          "Look for an interference source near the antenna; the clock holds over if the fix is lost."),
    _spec(15, "gnss-integrity-suspect", MI, "GNSS integrity suspect", "timingProblem",
          "One integrity check disagrees (phase, position, sky, NTP cross-check) without proof of an attack.",
          "Watch the GNSS integrity card; it clears itself when the checks agree again."),
    _spec(16, "gnss-integrity-override", W, "GNSS integrity overridden by an operator", "operatorIntervention",
          "An operator told the appliance to trust or reject GNSS whatever the checks say.",
          "Return to automatic (`appliance integrity auto` or the dashboard) when the reason has passed."),
    _spec(17, "gnss-setup", MI, "GNSS receiver set-up incomplete", "configurationOrCustomizationError",
          "The receiver refused a set-up command (NAK), did not answer one, or reads a setting back differently "
          "(the alarm names the key): firmware without that key, a locked configuration, a wrong gnss.receiver.",
          "Check gnss.receiver and the receiver's firmware (GNSS page); the appliance runs on with what the "
          "receiver sends. gnss.configure = false leaves the receiver as it is."),
    _spec(18, "gnss-unanswered", MA, "GNSS receiver does not answer commands", "communicationProtocolError",
          "The receiver answered none of the set-up commands, or stopped answering its version query: a "
          "receive line not wired (TX only), a wrong gnss.receiver, a receiver that hung.",
          "Check the cable's receive wire and gnss.receiver; power-cycle the receiver if it hung. Its data is "
          "still used while it arrives."),
    _spec(19, "gnss-antenna", MA, "GNSS antenna fault", "equipmentMalfunction",
          "The receiver's antenna supervisor reports an open circuit (cable cut, antenna disconnected) or a "
          "short circuit (damaged cable or connector).",
          "Check the antenna cable, its connectors, the lightning arrester and the antenna; the clock holds over "
          "meanwhile if the fix is lost."),
    _spec(9, "gnss-restarted", W, "GNSS receiver restarted or changed", "receiverFailure",
          "The receiver restarted (its boot banner, or the messages it was set up to send stopped) or reports a "
          "different model or firmware than before; it is being set up again.",
          "Nothing if it clears by itself once the receiver is set up again; repeated restarts point at its power "
          "supply or firmware."),
    # --- references --------------------------------------------------------------------------------------------
    _spec(20, "reference-backup", MI, "Running on a backup reference", "timingProblem",
          "The highest-priority reference is unusable or disabled; the clock follows a lower-priority one.",
          "Restore the primary reference (see its row in References)."),
    # --- outputs -----------------------------------------------------------------------------------------------
    _spec(30, "ntp-not-serving", C, "NTP not served", "softwareProgramError",
          "The NTP port cannot be opened (another process holds it, or privileges) or its workers failed.",
          "Free the port (`ss -lunp 'sport = :123'`) or choose ntp.port, then restart."),
    _spec(31, "ptp-not-serving", C, "PTP not served", "softwareProgramError",
          "The PTP port cannot open its interface or sockets, or the port is FAULTY.",
          "Check ptp.interface, its link and hardware timestamping, and the error shown."),
    _spec(32, "ptp-outranked", MI, "Another PTP grandmaster outranks this one", "timingProblem",
          "A foreign master with a better dataset (priority1, clockClass ...) is on the domain: this port is "
          "PASSIVE and its clients follow the other grandmaster.",
          "Expected in a redundant pair; otherwise check the other grandmaster's priority1 and clockClass."),
    _spec(33, "ptp-managed", W, "PTP setting changed by PTP management", "operatorIntervention",
          "A PTP management SET changed a dataset value away from its configured value.",
          "Confirm the change was intended; the configured value returns at restart."),
    _spec(34, "web-not-serving", MA, "Web console not served", "softwareProgramError",
          "The console's port cannot be opened (another process holds it, or privileges).",
          "Free the port (`ss -ltnp 'sport = :PORT'` shows who holds it) or choose web.port; the console "
          "tries again every 10 s, and time is served meanwhile."),
    # --- UTC and leap seconds ----------------------------------------------------------------------------------
    _spec(40, "leap-disagreement", MA, "UTC offset or leap announcement refused", "timingProblem",
          "The receiver's TAI-UTC offset or leap announcement contradicts the leap-second table.",
          "Check the leap-second table (leap.file) and the receiver; the table's value is served meanwhile."),
    _spec(41, "leap-table-expired", MI, "Leap-second table expired", "configurationOrCustomizationError",
          "The leap-second table is past its expiry date: a coming leap second might be missed.",
          "Install a current leap-seconds.list (leap.file)."),
    _spec(42, "leap-table-expiring", W, "Leap-second table expires soon", "configurationOrCustomizationError",
          "The leap-second table expires within 30 days.",
          "Install a current leap-seconds.list (leap.file)."),
    # --- the audit trail ---------------------------------------------------------------------------------------
    _spec(50, "audit-truncated", MA, "Audit trail found cut short", "informationModificationDetected",
          "The audit store was shorter than its head file says, or rewritten: records were lost or removed.",
          "Compare with the syslog collector's copy (`appliance audit verify --against FILE`)."),
    _spec(51, "audit-head-missing", MA, "Audit head file missing", "informationModificationDetected",
          "The head file of an audit store that had one is gone or unreadable.",
          "Check the state directory; verify the chain against the collector's copy."),
    _spec(52, "audit-syslog-overflow", MI, "Audit records dropped from the syslog queue", "congestion",
          "The syslog collector was away long enough for the forwarding queue to fill.",
          "Check the collector and the network to it (audit.syslog); the local chain is complete."),
    # --- the sync monitor of downstream clients -----------------------------------------------------------------
    _spec(70, "monitor-over-limit", MI, "Downstream client beyond its limit", "timingProblem",
          "A monitored NTP host or PTP slave (monitor.ntp_targets, monitor.ptp_targets) is further from the served "
          "time than its limit (monitor.limit_ns, monitor.limits) in two answers in a row: the client is not "
          "following this server, follows another one, or its path is asymmetric.",
          "Check the named client's synchronisation (chronyc sources, pmc), its network path and its limit; the "
          "alarm clears after two answers within 80 % of the limit."),
    # --- configuration -----------------------------------------------------------------------------------------
    _spec(60, "config-console-ignored", W, "Console settings set aside", "configurationOrCustomizationError",
          "Settings saved from the console were unreadable or invalid at start and were set aside.",
          "Look at the named file and fix or remove it; the configuration file's values are in use."),
)}
del C, MA, MI, W

SEVERITY_ORDER = {Severity.CRITICAL: 0, Severity.MAJOR: 1, Severity.MINOR: 2, Severity.WARNING: 3, Severity.INFO: 4}

RECEIVER_ALARMS = {
    ReceiverState.DISCONNECTED: ("gnss-disconnected", Severity.MAJOR, "GNSS receiver disconnected"),
    ReceiverState.NO_DATA: ("gnss-no-data", Severity.MAJOR, "GNSS receiver sends nothing decodable"),
    ReceiverState.NO_FIX: ("gnss-no-fix", Severity.MAJOR, "GNSS receiver has no fix"),
}
CLOCK_ALARMS = {
    "FREERUN": ("clock-unlocked", Severity.CRITICAL, "clock free-running: time not traceable"),
    "ACQUIRING": ("clock-unlocked", Severity.CRITICAL, "clock acquiring: time not yet traceable"),
    "HOLDOVER": ("clock-holdover", Severity.MINOR, "clock in holdover"),
    "HOLDOVER_EXPIRED": ("clock-holdover-expired", Severity.CRITICAL, "clock holdover past its spec"),
}


INSTANCE_SEP = "@"  # "monitor-over-limit@10.0.0.2": the catalogue's entry for one of many things (a monitored client)
INSTANCE_IDS = 100_000  # an instance's ID: its entry's ID * INSTANCE_IDS + a hash of the instance


def instance_spec(code: str) -> AlarmSpec | None:
    """The catalogue's entry for an instance code (``ENTRY@INSTANCE``): its severity, cause and action, its title
    naming the instance, and a stable ID of its own (the entry's ID times INSTANCE_IDS plus a hash of the instance,
    so SNMP's alarm table, indexed by ID, has a row per instance); None for any other code."""
    family, sep, instance = code.partition(INSTANCE_SEP)
    base = CATALOG.get(family) if sep and instance else None
    if base is None:
        return None
    return replace(base, id=base.id * INSTANCE_IDS + zlib.crc32(instance.encode()) % INSTANCE_IDS, code=code,
                   title=f"{base.title}: {instance}")


def spec_of(code: str, severity: Severity = Severity.MAJOR) -> AlarmSpec:
    """The catalogue's entry (or an instance of one); an alarm missing from it (a test keeps the catalogue complete)
    gets an ID of its own from its code, above the catalogue's range, and the severity it was raised with."""
    found = CATALOG.get(code) or instance_spec(code)
    if found is not None:
        return found
    return AlarmSpec(1000 + zlib.crc32(code.encode()) % 9000, code, severity, code, "unspecified", "", "")


@dataclass(frozen=True)
class Acknowledgement:
    by: str
    at_ns: int
    comment: str = ""


@dataclass(frozen=True)
class AlarmRow:
    """An active alarm as every surface shows it: the catalogue's entry, its text, since when, its acknowledgement."""

    id: int
    code: str
    severity: Severity
    text: str
    at_ns: int  # the last raise (a new text re-raises)
    since_ns: int  # the first raise of this episode
    title: str
    probable_cause: str
    cause: str
    action: str
    acked_by: str | None = None
    acked_at_ns: int | None = None
    ack_comment: str = ""
    raised: bool = True
    diagnosis: str = ""  # what the appliance sees now that narrows the probable cause (empty: nothing more)


def diagnose_no_fix(tracked: int, visible: int, jamming_verdict: str | None, interference: str | None) -> str:
    """What narrows a lost fix down: jamming, a sky the antenna no longer sees, or too few satellites."""
    if jamming_verdict not in (None, "ok"):
        return "jamming: C/N0 fell on every tracked satellite together"
    if tracked == 0:
        return ("no satellite tracked: the antenna sees no sky (blocked, disconnected or a cable fault), "
                "not jamming" + (f" ({interference})" if interference else ""))
    return f"{tracked} of {visible} satellites tracked: too few for a fix (a partly blocked sky or a weak antenna)"


class AlarmBook:
    def __init__(self, history: int = 512):
        self.active: dict[str, Alarm] = {}
        self.since: dict[str, int] = {}
        self.acks: dict[str, Acknowledgement] = {}
        self.history: deque[Alarm] = deque(maxlen=history)

    def apply(self, alarms: list[Alarm]) -> list[Alarm]:
        """Record raised/cleared alarms; returns those that changed something (to log and notify), with the
        catalogue's severity."""
        changed = []
        for alarm in alarms:
            spec = spec_of(alarm.code, alarm.severity)
            if alarm.severity is not spec.severity:
                alarm = dataclasses.replace(alarm, severity=spec.severity)
            old = self.active.get(alarm.code)
            if alarm.raised:
                if old is not None and old.text == alarm.text:
                    continue
                self.active[alarm.code] = alarm
                if old is None:
                    self.since[alarm.code] = alarm.at_ns
            elif old is None:
                continue
            else:
                del self.active[alarm.code]
                self.since.pop(alarm.code, None)
                self.acks.pop(alarm.code, None)
            self.history.append(alarm)
            changed.append(alarm)
        return changed

    def set_group(self, codes: set[str], wanted: tuple[str, Severity, str] | None, detail: str,
                  at_ns: int) -> list[Alarm]:
        """Exactly one alarm of a group (or none) is active: raise ``wanted``, clear the others.  A wanted alarm that
        is already active under another text (FREERUN's and ACQUIRING's shared code) is re-raised with the new text."""
        out = [Alarm(code, self.active[code].severity, False, self.active[code].text, at_ns)
               for code in sorted(codes) if code in self.active and (wanted is None or wanted[0] != code)]
        if wanted is not None:
            code, severity, text = wanted
            out.append(Alarm(code, severity, True, f"{text} ({detail})" if detail else text, at_ns))
        return self.apply(out)

    def acknowledge(self, code: str, by: str, at_ns: int, comment: str = "") -> Acknowledgement:
        """An operator's acknowledgement of an active alarm; ValueError names what is wrong."""
        if code not in self.active:
            raise ValueError(f"no active alarm {code!r}" + (f" (active: {', '.join(sorted(self.active))})"
                                                             if self.active else " (none is active)"))
        ack = Acknowledgement(by, at_ns, comment[:200])
        self.acks[code] = ack
        return ack

    def rows(self) -> tuple[AlarmRow, ...]:
        """The active alarms, most severe first, then oldest first."""
        out = []
        for code, alarm in self.active.items():
            spec, ack = spec_of(code, alarm.severity), self.acks.get(code)
            out.append(AlarmRow(spec.id, code, alarm.severity, alarm.text, alarm.at_ns,
                                self.since.get(code, alarm.at_ns), spec.title, spec.probable_cause, spec.cause,
                                spec.action, None if ack is None else ack.by, None if ack is None else ack.at_ns,
                                "" if ack is None else ack.comment))
        return tuple(sorted(out, key=lambda r: (SEVERITY_ORDER.get(r.severity, 9), r.since_ns, r.id)))


RECEIVER_CODES = {code for code, _, _ in RECEIVER_ALARMS.values()}
CLOCK_CODES = {code for code, _, _ in CLOCK_ALARMS.values()}


# --- history ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Episode:
    """One alarm from its raise to its clear (or still open), as the audit trail recorded it."""

    id: int
    code: str
    severity: str
    title: str
    text: str  # the last raised text
    raised_at_ns: int
    cleared_at_ns: int | None = None
    acked_by: str | None = None
    acked_at_ns: int | None = None
    ack_comment: str = ""

    @property
    def open(self) -> bool:
        return self.cleared_at_ns is None

    def to_dict(self, now_ns: int) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["open"] = self.open
        out["duration_s"] = ((self.cleared_at_ns if self.cleared_at_ns is not None else now_ns)
                             - self.raised_at_ns) / 1e9
        return out


HISTORY_KINDS = ("alarm.raised", "alarm.cleared", "alarm.ack")


def episodes(records: Iterable[Mapping[str, Any]]) -> list[Episode]:
    """Pair the audit trail's alarm records (oldest first: kind, at_tai_ns, actor, detail with the alarm's code)
    into episodes, newest first.  A raise while the alarm is open (a new text) updates the open episode; a clear
    with no raise before it (the raise fell before the records looked at) opens and closes one at the clear; an
    acknowledgement belongs to the open episode of its code."""
    open_: dict[str, Episode] = {}
    done: list[Episode] = []
    for r in records:
        detail = r.get("detail") or {}
        code = str(detail.get("code", ""))
        if not code:
            continue
        kind, at = r["kind"], int(r["at_tai_ns"])
        spec = CATALOG.get(code) or instance_spec(code)
        title = spec.title if spec else code
        ident = spec.id if spec else spec_of(code).id
        current = open_.get(code)
        if kind == "alarm.raised":
            text = _alarm_text(str(r.get("text", "")))
            severity = str(detail.get("severity", spec.severity.value if spec else ""))
            if current is None:
                open_[code] = Episode(ident, code, severity, title, text, at)
            else:
                open_[code] = dataclasses.replace(current, text=text, severity=severity)
        elif kind == "alarm.cleared":
            if current is None:
                severity = str(detail.get("severity", spec.severity.value if spec else ""))
                done.append(Episode(ident, code, severity, title, _alarm_text(str(r.get("text", ""))), at, at))
            else:
                done.append(dataclasses.replace(current, cleared_at_ns=at))
                del open_[code]
        elif kind == "alarm.ack" and current is not None:
            open_[code] = dataclasses.replace(current, acked_by=str(r.get("actor", "")), acked_at_ns=at,
                                              ack_comment=str(detail.get("comment", "")))
    out = done + list(open_.values())
    out.sort(key=lambda e: e.raised_at_ns, reverse=True)
    return out


def from_audit(records: Iterable[Any]) -> list[Episode]:
    """The episodes of the audit store's alarm records, given newest first as the store returns them."""
    return episodes([{"kind": r.kind, "at_tai_ns": r.at_tai_ns, "actor": r.actor, "text": r.text, "detail": r.detail}
                     for r in reversed(list(records))])


def _alarm_text(record_text: str) -> str:
    """The alarm's own words from its audit record ("raised [major] GNSS receiver has no fix ...")."""
    for head in ("raised ", "cleared "):
        if record_text.startswith(head):
            rest = record_text[len(head):]
            if rest.startswith("[") and "] " in rest:
                return rest.split("] ", 1)[1]
            return rest
    return record_text


def select(found: list[Episode], severity: str | None = None, code: str | None = None, state: str | None = None,
           search: str | None = None) -> list[Episode]:
    """The history filtered as the console and the REST API offer: by severity, code, open/cleared, words."""
    out = []
    needle = (search or "").lower()
    for e in found:
        if severity and e.severity != severity:
            continue
        if code and e.code != code:
            continue
        if state == "open" and not e.open or state == "cleared" and e.open:
            continue
        if needle and needle not in f"{e.code} {e.title} {e.text}".lower():
            continue
        out.append(e)
    return out
