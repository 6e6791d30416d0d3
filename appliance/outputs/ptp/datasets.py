"""What the grandmaster says about its time, taken from ``TimeStatus`` and never from configuration.

Pure core.  ``gm_view`` reads the one quality mapping (``holdover.quality.advertise``, already in the status) and the
UTC-offset state, so that clockClass, clockAccuracy, offsetScaledLogVariance, timeSource, the traceability flags,
currentUtcOffset and the leap flags in every Announce and management answer agree with NTP, IRIG-B and the console.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.clock.quality import OSLV_UNKNOWN, TIME_SOURCE_INTERNAL_OSCILLATOR
from appliance.status import TimeStatus
from appliance.units import NS_PER_S

DAY_S = 86_400


@dataclass(frozen=True, slots=True)
class GrandmasterView:
    """The clock's side of the default and time-properties data sets (IEEE 1588-2019 8.2.1, 8.2.4)."""

    clock_class: int = 248
    clock_accuracy: int = 0xFE
    offset_scaled_log_variance: int = OSLV_UNKNOWN
    time_source: int = TIME_SOURCE_INTERNAL_OSCILLATOR
    current_utc_offset: int = 37
    utc_offset_valid: bool = False
    leap61: bool = False
    leap59: bool = False
    time_traceable: bool = False
    frequency_traceable: bool = False
    ptp_timescale: bool = True
    error_bound_ns: int | None = None  # C37.238 totalTimeInaccuracy; the console
    state: str = "FREERUN"
    leap_change_s: int = 0  # a scheduled leap second (+1/-1), else 0 (SMPTE ST 2059-2 jump fields)
    leap_at_tai_ns: int | None = None  # the first instant with the new offset


def leap_flags(pending_change_s: int, pending_at_tai_ns: int | None, now_tai_ns: int) -> tuple[bool, bool]:
    """(leap61, leap59): set through the UTC day whose last minute has 61 (59) seconds (IEEE 1588-2019 8.2.4.3/4),
    i.e. while the change is at most a day away; cleared once the new offset is in force."""
    if not pending_change_s or pending_at_tai_ns is None:
        return False, False
    left_ns = pending_at_tai_ns - now_tai_ns
    if not 0 < left_ns <= (DAY_S + max(pending_change_s, 0)) * NS_PER_S:
        return False, False
    return pending_change_s > 0, pending_change_s < 0


def gm_view(status: TimeStatus) -> GrandmasterView:
    adv = status.clock.advertised
    leap = status.leap
    leap61, leap59 = leap_flags(leap.pending_change_s, leap.pending_at_tai_ns, status.at_tai_ns)
    if adv is None:
        return GrandmasterView(current_utc_offset=leap.tai_utc_s, leap61=leap61, leap59=leap59,
                               state=status.clock.state, leap_change_s=leap.pending_change_s,
                               leap_at_tai_ns=leap.pending_at_tai_ns)
    # The offset is valid when it is known to be right: from an unexpired table or the receiver's broadcast.
    valid = leap.source == "receiver" or not leap.table_expired
    return GrandmasterView(
        clock_class=adv.clock_class, clock_accuracy=adv.clock_accuracy,
        offset_scaled_log_variance=adv.offset_scaled_log_variance, time_source=adv.time_source,
        current_utc_offset=leap.tai_utc_s, utc_offset_valid=valid, leap61=leap61, leap59=leap59,
        time_traceable=adv.time_traceable, frequency_traceable=adv.frequency_traceable, ptp_timescale=True,
        error_bound_ns=status.clock.error_bound_ns, state=status.clock.state, leap_change_s=leap.pending_change_s,
        leap_at_tai_ns=leap.pending_at_tai_ns)


IMPROVE_AFTER_NS = 30 * NS_PER_S
OSLV_STEP = 0x100  # one step of offsetScaledLogVariance is a factor of 2 in variance (2**8 per log2)


class AnnouncedQuality:
    """clockAccuracy and offsetScaledLogVariance as the BMCA should see them: honest, but not jittering.

    The clock's bound and measured stability move a little every second.  Announced raw, two equally good
    grandmasters would swap places on measurement noise (both fields are compared before priority2), and operators
    could not make one the preferred one.  So: the variance is rounded up to a whole step (a factor of 2), a worse
    value is announced at once, a better one only after it has held for ``IMPROVE_AFTER_NS`` (the worst value of
    that stretch), and a change of clockClass takes the values of the moment."""

    def __init__(self) -> None:
        self._announced: tuple[int, int] | None = None
        self._class: int | None = None
        self._better_since_ns: int | None = None
        self._better_worst: tuple[int, int] | None = None

    def apply(self, view: GrandmasterView, now_ns: int) -> GrandmasterView:
        oslv = view.offset_scaled_log_variance
        if oslv != OSLV_UNKNOWN:
            oslv = min(OSLV_UNKNOWN, -(-oslv // OSLV_STEP) * OSLV_STEP)
        raw = (view.clock_accuracy, oslv)
        if self._announced is None or view.clock_class != self._class:
            self._announced, self._class, self._better_since_ns = raw, view.clock_class, None
        elif raw[0] > self._announced[0] or raw[1] > self._announced[1]:
            self._announced = (max(raw[0], self._announced[0]), max(raw[1], self._announced[1]))
            self._better_since_ns = None
        elif raw != self._announced:
            if self._better_since_ns is None:
                self._better_since_ns, self._better_worst = now_ns, raw
            assert self._better_worst is not None
            self._better_worst = (max(self._better_worst[0], raw[0]), max(self._better_worst[1], raw[1]))
            if now_ns - self._better_since_ns >= IMPROVE_AFTER_NS:
                self._announced, self._better_since_ns = self._better_worst, None
        else:
            self._better_since_ns = None
        accuracy, variance = self._announced
        return GrandmasterView(**{**_fields(view), "clock_accuracy": accuracy, "offset_scaled_log_variance": variance})


def _fields(view: GrandmasterView) -> dict[str, object]:
    return {name: getattr(view, name) for name in GrandmasterView.__slots__}
