"""Active alarms and their history, and the alarms that follow from the receiver's and the clock's states.

Pure core.  An alarm is raised once and cleared once; raising an already active alarm with the same text is a no-op,
so conditions re-evaluated every second do not flood the log, the audit trail or the NMS.
"""

from __future__ import annotations

from collections import deque

from appliance.events import Alarm, ReceiverState, Severity

RECEIVER_ALARMS = {
    ReceiverState.DISCONNECTED: ("gnss-disconnected", Severity.MAJOR, "GNSS receiver disconnected"),
    ReceiverState.NO_DATA: ("gnss-no-data", Severity.MAJOR, "GNSS receiver sends nothing decodable"),
    ReceiverState.NO_FIX: ("gnss-no-fix", Severity.MAJOR, "GNSS receiver has no fix"),
}
CLOCK_ALARMS = {
    "FREERUN": ("clock-unlocked", Severity.WARNING, "clock free-running: time not traceable"),
    "ACQUIRING": ("clock-unlocked", Severity.WARNING, "clock acquiring: time not yet traceable"),
    "HOLDOVER": ("clock-holdover", Severity.WARNING, "clock in holdover"),
    "HOLDOVER_EXPIRED": ("clock-holdover-expired", Severity.MAJOR, "clock holdover past its spec"),
}


class AlarmBook:
    def __init__(self, history: int = 512):
        self.active: dict[str, Alarm] = {}
        self.history: deque[Alarm] = deque(maxlen=history)

    def apply(self, alarms: list[Alarm]) -> list[Alarm]:
        """Record raised/cleared alarms; returns those that changed something (to log and notify)."""
        changed = []
        for alarm in alarms:
            old = self.active.get(alarm.code)
            if alarm.raised:
                if old is not None and old.text == alarm.text:
                    continue
                self.active[alarm.code] = alarm
            elif old is None:
                continue
            else:
                del self.active[alarm.code]
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


RECEIVER_CODES = {code for code, _, _ in RECEIVER_ALARMS.values()}
CLOCK_CODES = {code for code, _, _ in CLOCK_ALARMS.values()}
