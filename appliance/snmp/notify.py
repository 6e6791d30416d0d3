"""Which events become SNMP notifications, and with which varbinds.

Pure core.  ``for_event`` maps one routed event (or audit record) to zero or more ``Notice``s: the notification's
name in the appliance MIB (or a standard one from SNMPv2-MIB, RFC 3418) and values for the objects the MIB lists
in its OBJECTS clause that a status does not hold (the text, the time, the previous state).  The agent fills the
other objects from the MIB view at the moment it sends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from appliance.events import Alarm, ClockStateChanged, ReceiverState, ReceiverStateChanged

# SNMPv2-MIB (RFC 3418) snmpTraps
COLD_START = (1, 3, 6, 1, 6, 3, 1, 1, 5, 1)
WARM_START = (1, 3, 6, 1, 6, 3, 1, 1, 5, 2)
AUTHENTICATION_FAILURE = (1, 3, 6, 1, 6, 3, 1, 1, 5, 5)
USABLE = {ReceiverState.FIX_2D, ReceiverState.FIX_3D, ReceiverState.TIME_ONLY}
OUTPUT_ALARM_PREFIXES = ("ntp-", "ptp-", "irig-", "pps-", "serial-", "web-", "audit-", "output-")


@dataclass(frozen=True)
class Notice:
    name: str  # an appliance MIB notification, or "coldStart" / "warmStart" / "authenticationFailure"
    extra: dict[str, Any] = field(default_factory=dict)  # values for accessible-for-notify objects
    alarm_code: str | None = None  # the alarm row its alarm objects come from
    output: str | None = None  # the output row its output objects come from


def for_event(event: object, at_tai_ns: int) -> list[Notice]:
    from appliance.refs.selector import RefSwitched

    stamp = {"applianceNotifyTime": at_tai_ns}
    if isinstance(event, RefSwitched):
        return [Notice("applianceReferenceSwitch", {**stamp, "applianceNotifyText":
                                                    f"{event.old or 'none'} -> {event.new or 'none'}: {event.reason}"})]
    if isinstance(event, ClockStateChanged):
        out = [Notice("applianceClockStateChange", {**stamp, "applianceNotifyPrevClockState": event.old})]
        if event.new == "HOLDOVER":
            out.append(Notice("applianceHoldoverEntered", stamp))
        elif event.new == "HOLDOVER_EXPIRED":
            out.append(Notice("applianceHoldoverExpired", stamp))
        return out
    if isinstance(event, ReceiverStateChanged):
        was, now = event.old in USABLE, event.new in USABLE
        if was and not now:
            return [Notice("applianceReferenceLost", {**stamp, "applianceNotifyText": event.reason})]
        if now and not was:
            return [Notice("applianceReferenceRegained", {**stamp, "applianceNotifyText": event.reason})]
        return []
    if isinstance(event, Alarm):
        out = [Notice("applianceAlarmRaised" if event.raised else "applianceAlarmCleared", stamp,
                      alarm_code=event.code)]
        code = event.code.lower()
        text = {**stamp, "applianceNotifyText": event.text}
        if "spoof" in code:
            out.append(Notice("applianceSpoofingAlarm" if event.raised else "applianceSpoofingCleared", text))
        elif "jam" in code:
            out.append(Notice("applianceJammingAlarm" if event.raised else "applianceJammingCleared", text))
        elif code.startswith(OUTPUT_ALARM_PREFIXES):
            out.append(Notice("applianceOutputFaultRaised" if event.raised else "applianceOutputFaultCleared", stamp,
                              output=code.split("-", 1)[0]))
        return out
    return []


def for_audit(kind: str, text: str, at_tai_ns: int) -> list[Notice]:
    """Audit records that are notifications too: a failed console login is an authentication failure."""
    if kind == "login.failed":
        return [Notice("authenticationFailure", {"applianceNotifyText": text, "applianceNotifyTime": at_tai_ns})]
    return []


def output_faults(before: dict[str, Any], after: dict[str, Any]) -> list[Notice]:
    """Output fault notices from two successive views of the outputs (an error appearing or going away)."""
    out = []
    for name, o in after.items():
        if not isinstance(o, dict) or name == "audit":
            continue
        old = before.get(name) or {}
        was, now = _fault(old), _fault(o)
        if now and not was:
            out.append(Notice("applianceOutputFaultRaised", {}, output=name))
        elif was and not now:
            out.append(Notice("applianceOutputFaultCleared", {}, output=name))
    return out


def _fault(o: dict[str, Any]) -> str:
    sink = o.get("sink") or {}
    return str(o.get("error") or sink.get("error") or "")
