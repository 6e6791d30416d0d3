"""What every time reference hands the selector: phase samples against the served clock, with their own uncertainty.

Pure core.  A reference is anything that says what time it is at an instant of the local oscillator: a GNSS
receiver's PPS edge and label, a PTP upstream grandmaster's Sync, an NTP server's reply, a decoded IRIG-B frame, an
external 1PPS edge.  Each becomes a ``RefSample``: the served clock minus the reference at ``raw_ns``.
"""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True)
class PairedTime:
    """An on-time edge on the local counter and the time it marks (TAI ns): what a decoded IRIG-B frame or an
    external 1PPS edge with its time of day gives.  The composition root turns it into a ``RefSample`` through the
    clock backend, exactly as a GNSS paired second."""

    ref: str
    edge_raw_ns: int
    tai_ns: int
    uncertainty_ns: float
