"""What the appliance advertises about its own time: one mapping from (state, error bound, stability).

Single job: turn the clock state, the honest error bound (``bound_ns``, None when unknown) and the measured
stability (TDEV, s) into every quality field a protocol carries -- PTP clockClass/clockAccuracy/
offsetScaledLogVariance/timeSource/traceability, NTP leap indicator/stratum/root dispersion and the IRIG-B
(IEEE 1344 / C37.118) time-quality nibble -- so PTP, NTP, IRIG-B, the web page and SNMP never derive them
themselves.  Pure core: no clock reads, no I/O.  Accuracy codes never claim better than the bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from appliance.units import NS_PER_S

STATES = ("FREERUN", "ACQUIRING", "LOCKED", "HOLDOVER", "HOLDOVER_EXPIRED")
DEFAULT_PROFILES = ("default-e2e", "default-p2p", "c37.238", "st2059-2", "gptp")  # their classes are 1588's
TELECOM_PROFILES = ("g8275.1", "g8275.2")
PROFILES = DEFAULT_PROFILES + TELECOM_PROFILES

# IEEE 1588-2019 §7.6.2.6 Table 5: codes 0x17..0x30 are "accurate within" 1, 2.5, 10, 25, 100, 250 ps, ... up to
# 250 ms, then 1 s and 10 s; 0x31 is "> 10 s".  Limits are integer femtoseconds (2.5 ps is not a whole ps).
_FS_PER_NS = 1_000_000
_ACCURACY_LIMITS_FS = tuple(m * 10**e for e in range(2, 14) for m in (10, 25)) + (10**15, 10**16)
_ACCURACY_CODES = tuple(zip(_ACCURACY_LIMITS_FS, range(0x17, 0x31)))
CLOCK_ACCURACY_ABOVE_10_S = 0x31
CLOCK_ACCURACY_UNKNOWN = 0xFE

OSLV_UNKNOWN = 0xFFFF  # §7.6.3.3: too large to be represented, or not computed
_OSLV_OFFSET = 0x8000
_OSLV_SCALE = 256  # 2**8 per unit of log2(variance / s**2)

TIME_SOURCE_GNSS = 0x20  # IEEE 1588-2019 §7.6.2.8 Table 6 (GPS in 1588-2008)
TIME_SOURCE_INTERNAL_OSCILLATOR = 0xA0

# RFC 5905 §7.3 (Figure 9 leap indicator, stratum 1 primary / 16 unsynchronized) and §7.2 (MAXDISP = 16 s).
LI_NONE, LI_INSERT, LI_DELETE, LI_UNSYNCHRONIZED = 0, 1, 2, 3
STRATUM_PRIMARY, STRATUM_UNSYNCHRONIZED = 1, 16
MAXDISP_NS = 16 * NS_PER_S
# ntpd 4.2.8 (ntp_timer.c: set_sys_leap only from LSPROX_ANNOUNCE, "less than 1 day to target") sets LI only in
# the last day, where RFC 5905's "last minute of the current month" and the kernel's "end of today" agree.
LEAP_ANNOUNCE_WINDOW_S = 86_400

# IEEE 1344-1995 Annex F / IEEE C37.118 time-quality code: 0x0 "normal operation, clock locked", 0x1..0xB
# "clock unlocked, time within 10**(k-10) s" (k=1: 1 ns ... k=11: 10 s), 0xF "fault, time not reliable".
IRIG_TQ_LOCKED = 0x0
IRIG_TQ_FAULT = 0xF
_IRIG_TQ_LIMITS_NS = tuple((10 ** (k - 1), k) for k in range(1, 12))


def _check_state(state: str) -> None:
    if state not in STATES:
        raise ValueError(f"unknown clock state {state!r}; expected one of {', '.join(STATES)}")


def _check_bound(bound_ns: int | None) -> None:
    if bound_ns is not None and bound_ns < 0:
        raise ValueError(f"error bound must be >= 0 ns, got {bound_ns}")


def clock_accuracy(bound_ns: int | None) -> int:
    """Smallest IEEE 1588-2019 Table 5 clockAccuracy whose limit is >= the bound; 0xFE when unknown."""
    _check_bound(bound_ns)
    if bound_ns is None:
        return CLOCK_ACCURACY_UNKNOWN
    bound_fs = bound_ns * _FS_PER_NS
    for limit_fs, code in _ACCURACY_CODES:
        if bound_fs <= limit_fs:
            return code
    return CLOCK_ACCURACY_ABOVE_10_S


def clock_accuracy_limit_ns(code: int) -> float | None:
    """The "accurate within" limit of a Table 5 code, in ns; None for 0x31 (> 10 s) and 0xFE (unknown)."""
    for limit_fs, known in _ACCURACY_CODES:
        if known == code:
            return limit_fs / _FS_PER_NS
    if code in (CLOCK_ACCURACY_ABOVE_10_S, CLOCK_ACCURACY_UNKNOWN):
        return None
    raise ValueError(f"0x{code:02X} is not an IEEE 1588-2019 Table 5 clockAccuracy value")


def offset_scaled_log_variance(tdev_s: float | None) -> int:
    """IEEE 1588-2019 §7.6.3.3: PTP variance = TDEV**2 (s**2), encoded 2**8*log2(variance) + 0x8000.

    Rounded half up and clamped to 0..0xFFFF; None (not computed) gives 0xFFFF, as does a variance too
    large to represent.
    """
    if tdev_s is None:
        return OSLV_UNKNOWN
    if math.isnan(tdev_s) or tdev_s < 0:
        raise ValueError(f"TDEV must be >= 0 s, got {tdev_s}")
    if tdev_s == 0:
        return 0
    if math.isinf(tdev_s):
        return OSLV_UNKNOWN
    scaled = _OSLV_SCALE * 2 * math.log2(tdev_s) + _OSLV_OFFSET  # log2(TDEV**2) = 2 log2(TDEV)
    return min(OSLV_UNKNOWN, max(0, math.floor(scaled + 0.5)))


def ptp_variance_s2(encoded: int) -> float | None:
    """Decode offsetScaledLogVariance to the PTP variance in s**2; None for 0xFFFF (unknown/too large)."""
    if not 0 <= encoded <= OSLV_UNKNOWN:
        raise ValueError(f"offsetScaledLogVariance is 16 bits, got {encoded}")
    if encoded == OSLV_UNKNOWN:
        return None
    return 2.0 ** ((encoded - _OSLV_OFFSET) / _OSLV_SCALE)


def tdev_at_tau0_s(phase_ns: Sequence[float], tau0_s: float = 1.0) -> float | None:
    """TDEV at the sampling interval tau0 from phase samples x (ns) taken every tau0_s; None with < 3 samples.

    TVAR(tau0) = sum((x[i+2] - 2 x[i+1] + x[i])**2) / (6 (N - 2))  (ITU-T G.810 Appendix II, n = 1).  At
    n = 1 the value does not depend on tau0 itself; tau0_s only labels the observation interval.
    """
    if not tau0_s > 0:
        raise ValueError(f"tau0 must be > 0 s, got {tau0_s}")
    if len(phase_ns) < 3:
        return None
    second_diffs = (phase_ns[i + 2] - 2 * phase_ns[i + 1] + phase_ns[i] for i in range(len(phase_ns) - 2))
    tvar_ns2 = math.fsum(d * d for d in second_diffs) / (6 * (len(phase_ns) - 2))
    if not math.isfinite(tvar_ns2):
        raise ValueError("phase samples must be finite")
    return math.sqrt(tvar_ns2) / NS_PER_S


def clock_class(state: str, profile: str, holdover_in_spec: bool, degraded: str = "A",
                out_of_spec_category: int = 1) -> int:
    """PTP clockClass for the state under the profile's rules.

    Default profiles (IEEE 1588-2019 §7.6.2.5 Table 4; C37.238-2017 uses these unchanged): 6 locked to a
    primary reference, 7 holdover within spec, then degradation alternative A = 52 (shall never be a slave)
    or B = 187 (may be a slave), 248 default.  Telecom (ITU-T G.8275.1 Table 2, G.8275.2 likewise):
    6, 7, then 140/150/160 for holdover out of spec with a Category 1/2/3 frequency source, 248 free-run.
    HOLDOVER_EXPIRED is out of spec whatever holdover_in_spec says.
    """
    _check_state(state)
    if profile not in PROFILES:
        raise ValueError(f"unknown PTP profile {profile!r}; expected one of {', '.join(PROFILES)}")
    if degraded not in ("A", "B"):
        raise ValueError(f"degradation alternative must be 'A' or 'B', got {degraded!r}")
    if out_of_spec_category not in (1, 2, 3):
        raise ValueError(f"frequency-source category must be 1, 2 or 3, got {out_of_spec_category}")
    if state == "LOCKED":
        return 6
    if state == "HOLDOVER" and holdover_in_spec:
        return 7
    if state in ("HOLDOVER", "HOLDOVER_EXPIRED"):
        if profile in TELECOM_PROFILES:
            return {1: 140, 2: 150, 3: 160}[out_of_spec_category]
        return 52 if degraded == "A" else 187
    return 248  # FREERUN, ACQUIRING


# IEEE 1588-2019 Table 6 timeSource of each kind of reference.
REFERENCE_TIME_SOURCE = {"gnss": TIME_SOURCE_GNSS, "ptp": 0x40, "ntp": 0x50, "irig": 0x39, "pps": 0x90}


def time_source(state: str, reference_kind: str = "gnss") -> int:
    """IEEE 1588-2019 Table 6 timeSource: the active reference's kind (GNSS, PTP, NTP, SERIAL_TIME_CODE for IRIG-B,
    OTHER for an external 1PPS) while LOCKED or ACQUIRING, else the internal oscillator."""
    _check_state(state)
    if state not in ("LOCKED", "ACQUIRING"):
        return TIME_SOURCE_INTERNAL_OSCILLATOR
    return REFERENCE_TIME_SOURCE.get(reference_kind, TIME_SOURCE_GNSS)


def is_synchronized(state: str, holdover_in_spec: bool) -> bool:
    """LOCKED, or HOLDOVER still within its specification."""
    _check_state(state)
    return state == "LOCKED" or (state == "HOLDOVER" and holdover_in_spec)


def traceability(state: str, holdover_in_spec: bool) -> tuple[bool, bool]:
    """(timeTraceable, frequencyTraceable) of timePropertiesDS (IEEE 1588-2019 §8.2.4.6, §8.2.4.7)."""
    synced = is_synchronized(state, holdover_in_spec)
    return synced, synced


def ntp_leap_indicator(synchronized: bool, pending_change_s: int, seconds_to_change: int | None) -> int:
    """RFC 5905 §7.3 LI: 3 unsynchronized; 1/2 in the last day before an insert/delete; else 0.

    pending_change_s is +1 (insert), -1 (delete) or 0; seconds_to_change counts SI seconds to the instant
    the new TAI-UTC offset takes effect (so it is still 1 during an inserted 23:59:60).
    """
    if pending_change_s not in (-1, 0, 1):
        raise ValueError(f"a leap second changes UTC by -1, 0 or +1 s, got {pending_change_s}")
    if not synchronized:
        return LI_UNSYNCHRONIZED
    if pending_change_s == 0 or seconds_to_change is None:
        return LI_NONE
    if 0 < seconds_to_change <= LEAP_ANNOUNCE_WINDOW_S:
        return LI_INSERT if pending_change_s > 0 else LI_DELETE
    return LI_NONE


def ntp_stratum(synchronized: bool, upstream_stratum: int | None = None) -> int:
    """RFC 5905 §7.3: 1 (primary server, on a primary reference), one more than the upstream server's when the
    clock follows NTP upstream, or 16 (unsynchronized)."""
    if not synchronized:
        return STRATUM_UNSYNCHRONIZED
    if upstream_stratum is not None:
        return min(STRATUM_UNSYNCHRONIZED - 1, max(STRATUM_PRIMARY, upstream_stratum + 1))
    return STRATUM_PRIMARY


def ntp_root_dispersion_ns(bound_ns: int | None) -> int:
    """Root dispersion of a stratum-1 server (root delay 0): the bound, capped at / defaulting to MAXDISP."""
    _check_bound(bound_ns)
    return MAXDISP_NS if bound_ns is None else min(bound_ns, MAXDISP_NS)


def irig_time_quality(state: str, bound_ns: int | None) -> int:
    """IEEE 1344 / C37.118 4-bit time quality: 0 locked, 1..0xB the decade containing the bound, 0xF fault.

    HOLDOVER and HOLDOVER_EXPIRED both report the bound's code ("within" read as <=); FREERUN, ACQUIRING,
    an unknown bound and a bound beyond 10 s report fault.
    """
    _check_state(state)
    _check_bound(bound_ns)
    if state == "LOCKED":
        return IRIG_TQ_LOCKED
    if state in ("FREERUN", "ACQUIRING") or bound_ns is None:
        return IRIG_TQ_FAULT
    for limit_ns, code in _IRIG_TQ_LIMITS_NS:
        if bound_ns <= limit_ns:
            return code
    return IRIG_TQ_FAULT


@dataclass(frozen=True)
class Advertised:
    clock_class: int
    clock_accuracy: int
    offset_scaled_log_variance: int
    time_source: int
    time_traceable: bool
    frequency_traceable: bool
    ntp_leap_indicator: int
    ntp_stratum: int
    ntp_root_dispersion_ns: int
    irig_time_quality: int


def advertise(state: str, bound_ns: int | None, tdev_s: float | None, profile: str, holdover_in_spec: bool,
              pending_change_s: int, seconds_to_change: int | None, degraded: str = "A",
              out_of_spec_category: int = 1, reference_kind: str = "gnss",
              upstream_stratum: int | None = None) -> Advertised:
    """Everything the appliance advertises, from one (state, bound, stability) triple."""
    synced = is_synchronized(state, holdover_in_spec)
    time_traceable, frequency_traceable = traceability(state, holdover_in_spec)
    return Advertised(
        clock_class=clock_class(state, profile, holdover_in_spec, degraded, out_of_spec_category),
        clock_accuracy=clock_accuracy(bound_ns),
        offset_scaled_log_variance=offset_scaled_log_variance(tdev_s),
        time_source=time_source(state, reference_kind),
        time_traceable=time_traceable,
        frequency_traceable=frequency_traceable,
        ntp_leap_indicator=ntp_leap_indicator(synced, pending_change_s, seconds_to_change),
        ntp_stratum=ntp_stratum(synced, upstream_stratum),
        ntp_root_dispersion_ns=ntp_root_dispersion_ns(bound_ns),
        irig_time_quality=irig_time_quality(state, bound_ns),
    )
