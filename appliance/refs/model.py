"""The one interface every time reference enters through: a driver that turns its input into phase samples.

Pure core.  A reference is anything that says what time it is at an instant of the local oscillator: a GNSS
receiver's PPS edge and label, a PTP upstream grandmaster's Sync, an NTP server's reply, a decoded IRIG-B frame, an
external 1PPS edge.  Its driver (one small module each, as chrony's refclock drivers are) takes whatever its edge
delivers and answers with events the router passes on:

* ``RefSample``  the served clock minus the reference at a counter instant, with the sample's own uncertainty;
* ``RefUsable``  the reference's own source says its time can (or cannot) be trusted;
* anything else (a receiver's epochs, state changes, leap news, alarms) the router routes as it does every event.

A driver reads the served clock only through the ``ClockView`` it is handed with each input, so it never holds the
clock, the backend or the router.  Its ``spec`` (priority, accuracy, timeouts) is what the selector judges it by.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from appliance.events import PairedSecond

KINDS = ("gnss", "ptp", "ntp", "irig", "pps")


@dataclass(frozen=True)
class RefSpec:
    """A configured reference.  ``accuracy_ns`` is what its time is good to when all is well (it is the clock's
    reference accuracy while it is active); samples that say they are worse count as worse."""

    name: str
    kind: str
    priority: int
    accuracy_ns: float
    timeout_s: float = 3.0
    qualify_s: float = 10.0
    enabled: bool = True
    noise_ns: float = 0.0  # the scatter its samples are expected to have at least (tunes the loop before it is measured)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"reference {self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.priority < 1:
            raise ValueError(f"reference {self.name}: priority must be 1 or more (1 is the highest)")


@dataclass(frozen=True)
class RefSample:
    """One phase measurement of one reference.

    ``offset_ns`` is served time minus the reference's time at local counter instant ``raw_ns`` (positive: the
    clock is ahead).  ``uncertainty_ns`` is this sample's own error bound (measurement noise, path asymmetry the
    protocol cannot see, the reference's advertised accuracy), as well as the source can say it.
    """

    ref: str
    raw_ns: int
    offset_ns: float
    uncertainty_ns: float
    # How far the reference sits from where the local oscillator says it should be, beyond its noise (an integrity
    # check's residual): an undetected push moves the clock that far with it, so the bound must include it.
    doubt_ns: float = 0.0


@dataclass(frozen=True)
class PairedTime:
    """An on-time edge and the time it marks (TAI ns): what a decoded IRIG-B frame, an external 1PPS edge with its
    time of day, or a simulated upstream gives.  ``edge_raw_ns`` is on the axis its driver reads: the local counter
    for a simulated upstream, the host clock (CLOCK_REALTIME ns) for an input an edge timestamped on the host."""

    ref: str
    edge_raw_ns: int
    tai_ns: int
    uncertainty_ns: float


@dataclass(frozen=True)
class RefUsable:
    """A reference's source says whether its time may drive the clock (a receiver without a fix, GNSS integrity
    rejected, an upstream grandmaster that is not traceable ...)."""

    ref: str
    usable: bool
    reason: str
    at_raw_ns: int
    distrust: Any = None  # gnss.guard.Distrust when integrity checks rejected it: what it taught the clock is undone


class ClockView(Protocol):
    """What a driver may read of the served clock at the instant of one input."""

    raw_ns: int  # the local counter now
    host_ns: int  # the host clock now (POSIX ns)
    knows_time: bool  # the served clock knows the second (it is past FREERUN)
    phase_ns: float  # the clock's latest phase against its reference (served minus reference)

    def served_ns(self, raw_ns: int) -> int: ...

    def served_at_past_host(self, host_ns: int) -> int: ...

    def measure(self, paired: PairedSecond) -> tuple[float, float]: ...


class Reference(Protocol):
    """A time reference's driver: ``feed`` what its edge delivers, ``tick`` now and then, ``status`` for its row.
    ``upstream_stratum`` and ``upstream_peer``: what an upstream server says of itself (NTP), for what the appliance
    advertises while that reference drives its clock."""

    spec: RefSpec
    upstream_stratum: int | None
    upstream_peer: str

    def feed(self, item: object, clock: ClockView) -> Iterable[object]: ...

    def tick(self, clock: ClockView) -> Iterable[object]: ...

    def status(self) -> dict[str, Any]: ...


class Driver:
    """The defaults of a driver whose reference has no upstream server to speak of and nothing to do but listen."""

    upstream_stratum: int | None = None
    upstream_peer: str = ""

    def __init__(self, spec: RefSpec):
        self.spec = spec

    def tick(self, clock: ClockView) -> Iterable[object]:
        return ()

    def status(self) -> dict[str, Any]:
        return {}

    def refuse(self, item: object) -> TypeError:
        return TypeError(f"reference {self.spec.name}: cannot take {type(item).__name__}")


def counter_sample(paired: PairedTime, clock: ClockView) -> RefSample:
    """A ``PairedTime`` stamped on the local counter as a sample: the served clock there minus the time it marks."""
    offset = clock.served_ns(paired.edge_raw_ns) - paired.tai_ns
    return RefSample(paired.ref, paired.edge_raw_ns, float(offset), paired.uncertainty_ns)


def host_sample(paired: PairedTime, clock: ClockView) -> RefSample:
    """A ``PairedTime`` stamped on the host clock as a sample, taken now: the served clock carried back to the edge's
    host instant, minus the time it marks."""
    offset = clock.served_at_past_host(paired.edge_raw_ns) - paired.tai_ns
    return RefSample(paired.ref, clock.raw_ns, float(offset), paired.uncertainty_ns)
