"""Phase detector: a PPS edge, stamped on the served clock, against the second its label names.

Pure core.  offset = served time at the edge - labelled second + qErr.  u-blox defines qErr (TIM-TP) as the next
pulse's quantization error with the sign that makes ``measured + qErr`` the ideal pulse time (a time-interval counter
started by the reference and stopped by the receiver's pulse reads smooth after adding qErr), so adding it removes the
receiver's sawtooth.  Positive offset: the served clock is ahead of the reference.
"""

from __future__ import annotations

from appliance.events import PairedSecond


def phase_offset_ns(served_at_edge_ns: int, paired: PairedSecond) -> float:
    qerr_ns = 0.0 if paired.qerr_ps is None else paired.qerr_ps / 1000.0
    return (served_at_edge_ns - paired.label_tai_ns) + qerr_ns
