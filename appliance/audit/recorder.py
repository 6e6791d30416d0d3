"""Which events the audit log keeps, and how they read: clock states, reference changes, alarms, steps, commands.

Pure core.  ``entry_for(event)`` maps one routed event to an audit entry (kind, actor, text, detail) or None for the
events that are not audited (epochs, paired seconds, ...).  The appliance appends what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.events import (Alarm, ClockStateChanged, DeviceEvent, ReceiverNews, ReceiverStateChanged, StepClock)
from appliance.gnss.guard import IntegrityChanged


@dataclass(frozen=True)
class Entry:
    kind: str
    actor: str
    text: str
    detail: dict[str, Any]


def entry_for(event: object) -> Entry | None:
    from appliance.refs.selector import RefStateChanged, RefSwitched

    if isinstance(event, RefSwitched):
        text = f"reference {event.old or 'none'} -> {event.new or 'none'}: {event.reason}"
        if event.buildout_ns:
            text += f" (phase {event.buildout_ns:+.0f} ns built out)"
        return Entry("reference.switch", "system", text, {"old": event.old, "new": event.new, "reason": event.reason,
                                                          "buildout_ns": event.buildout_ns, "step_ns": event.step_ns})
    if isinstance(event, RefStateChanged):
        return Entry("reference.state", "system", f"reference {event.ref} {event.old} -> {event.new}: {event.reason}",
                     {"reference": event.ref, "old": event.old, "new": event.new, "reason": event.reason})
    if isinstance(event, ClockStateChanged):
        return Entry("clock.state", "system", f"clock {event.old} -> {event.new}: {event.reason}",
                     {"old": event.old, "new": event.new, "reason": event.reason})
    if isinstance(event, ReceiverStateChanged):
        change = event.new.value if event.old is event.new else f"{event.old.value} -> {event.new.value}"
        return Entry("reference", "system", f"receiver {change}: {event.reason}",
                     {"old": event.old.value, "new": event.new.value, "reason": event.reason})
    if isinstance(event, Alarm):
        return Entry("alarm.raised" if event.raised else "alarm.cleared", "system",
                     f"{'raised' if event.raised else 'cleared'} [{event.severity.value}] {event.text}",
                     {"code": event.code, "severity": event.severity.value})
    if isinstance(event, IntegrityChanged):
        use = "reference used" if event.usable else "reference rejected"
        return Entry("reference.integrity", "system", f"GNSS integrity {event.old} -> {event.new}, {use}: "
                     f"{event.reason}", {"old": event.old, "new": event.new, "usable": event.usable,
                                         "reason": event.reason})
    if isinstance(event, StepClock):
        return Entry("clock.step", "system", f"clock stepped by {event.delta_ns:+d} ns (first lock)",
                     {"delta_ns": event.delta_ns})
    if isinstance(event, ReceiverNews):
        return Entry("reference.receiver", "system", f"receiver {event.ref}: {event.text}", {"reference": event.ref})
    if isinstance(event, DeviceEvent):
        return Entry("reference.device", "system", f"receiver device {event.device} "
                     f"{'connected' if event.connected else 'lost'}: {event.reason}",
                     {"device": event.device, "connected": event.connected, "reason": event.reason})
    return None
