"""What the grandmaster port tells its edge besides what it sends: management SETs and a foreign master's takeover.

Pure core.  The port engine (port.py) queues these as they happen and the edge takes them after each call
(``PtpPort.take_notices``): a management SET it obeyed or refused, a foreign grandmaster that out-ranks this one in the
BMCA (the port falls silent, PASSIVE), and the port's return to MASTER.  The edge turns them into log lines, alarms and
audit records; ``text`` here is the one line they share.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.port_common import clock_identity_text, port_identity_text


@dataclass(frozen=True, slots=True)
class ManagementSet:
    """A management SET (IEEE 1588-2019 clause 15) from a source the access rules allow: obeyed (``refused`` empty:
    ``old`` -> ``new``, ``configured`` being what the settings give and a restart returns to) or refused, with why."""

    name: str  # "priority1", "priority2", or the managementId ("0x2005") of one that cannot be set
    old: int | None
    new: int | None
    configured: int | None
    source: str  # the sender's address (IP, or MAC over Ethernet)
    refused: str = ""  # "not settable", "wrong length" ...; "" when obeyed

    @property
    def text(self) -> str:
        if self.refused:
            return f"PTP management SET of {self.name} from {self.source} refused ({self.refused})"
        return f"PTP management SET from {self.source}: {self.name} {self.old} -> {self.new}"


@dataclass(frozen=True, slots=True)
class Outranked:
    """The BMCA (9.3.3) made the port PASSIVE: a foreign grandmaster announced a better data set than this clock's,
    so the port stopped sending Announce and Sync.  Told once per foreign grandmaster (and sender) that does it."""

    gm_identity: bytes
    gm_priority1: int
    gm_class: int
    gm_accuracy: int
    gm_variance: int
    gm_priority2: int
    steps_removed: int
    sender: c.PortIdentity  # the Announce's sourcePortIdentity
    source: str  # the address the Announce came from
    reason: str  # the BMCA's

    @property
    def text(self) -> str:
        return (f"foreign grandmaster {clock_identity_text(self.gm_identity)} (priority1 {self.gm_priority1}, "
                f"clockClass {self.gm_class}, clockAccuracy 0x{self.gm_accuracy:02x}) from "
                f"{self.source or 'an unknown address'} out-ranks this grandmaster: PTP port PASSIVE, not serving")

    def detail(self) -> dict[str, object]:
        return {"grandmaster": clock_identity_text(self.gm_identity), "priority1": self.gm_priority1,
                "clock_class": self.gm_class, "clock_accuracy": self.gm_accuracy,
                "offset_scaled_log_variance": self.gm_variance, "priority2": self.gm_priority2,
                "steps_removed": self.steps_removed, "sender_port": port_identity_text(self.sender),
                "source": self.source, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class MasterAgain:
    """The port is MASTER again after a foreign grandmaster had out-ranked it (it went silent or lost to this one)."""

    reason: str
    was_outranked_by: bytes  # the last foreign grandmaster that did

    @property
    def text(self) -> str:
        return f"PTP port MASTER again ({self.reason})"


PortNotice = ManagementSet | Outranked | MasterAgain
