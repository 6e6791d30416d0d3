"""What a PTP port's slave role measures of its master: offset and path delay from t1..t4.

Pure core.  ``SlaveMeasure`` pairs one- and two-step Syncs with their Follow_Ups (11.3/11.4; matched by sequenceId,
in either arrival order), keeps our Delay_Req exchanges (11.3: E2E meanPathDelay from the latest Sync and t3, t4) and
turns each Sync of the parent, once a path delay is known, into a ``PtpMeasurement``: at local instant t2 the local
clock was ``offset_ns`` ahead of the master.  Every correctionField on the way is honoured.  Path delays, E2E or the
peer delay mechanism's link delays (pdelay.py), pass ``DelayFilter``, a median of the last three; there is no servo:
the appliance's DPLL steers on the offsets.

Timescales (7.2): a master announcing the PTP timescale sends TAI.  One with PTP_TIMESCALE clear (ARB) is read as UTC
by default, ``arb_timescale="utc"``: currentUtcOffset is added, from its Announce when currentUtcOffsetValid is set,
else the caller's ``tai_utc_s`` (the appliance's leap table), else the Announce's unvalidated value.  linuxptp's ptp4l
on CLOCK_REALTIME with software timestamps (or free_running) is such a master: ARB, currentUtcOffsetValid clear,
currentUtcOffset 37, UTC timestamps.  ``arb_timescale="tai"`` takes an ARB master's timestamps as TAI.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.port_common import clock_identity_text, keep_recent, port_identity_text
from appliance.units import NS_PER_S

DELAY_FILTER_LENGTH = 3  # median of the last three path delays
UNSPECIFIED_LOG = 0x7F


@dataclass(frozen=True, slots=True)
class PtpMeasurement:
    """One Sync of the selected master: at local instant ``rx_local_ns`` the local clock was ``offset_ns`` ahead of
    the master (local minus master, master read on TAI), over a path of ``path_delay_ns`` (E2E meanPathDelay or
    P2P meanLinkDelay, filtered).  ``master``: the parent port ("aabbcc.fffe.ddeeff-1"); ``gm_identity`` and the
    quality fields: the grandmaster as the parent announces it; ``utc_offset_applied_s``: what was added to the
    master's timestamps (an ARB master read as UTC), 0 for a PTP-timescale master."""

    rx_local_ns: int
    offset_ns: int
    path_delay_ns: int
    master: str
    clock_class: int
    clock_accuracy: int
    time_source: int
    steps_removed: int
    gm_identity: str
    ptp_timescale: bool = True
    utc_offset_applied_s: int = 0


def ns(scaled: int) -> int:
    """A TimeInterval (ns * 2**16) to int ns, rounded half up."""
    return (scaled + 0x8000) >> 16


class DelayFilter:
    """The path delay: the median of the last ``length`` measured; ``full`` once that many are in."""

    def __init__(self, length: int = DELAY_FILTER_LENGTH) -> None:
        self.length = length
        self.samples: list[int] = []
        self.value_ns: int | None = None

    def add(self, delay_ns: int) -> None:
        self.samples = (self.samples + [delay_ns])[-self.length:]
        self.value_ns = sorted(self.samples)[(len(self.samples) - 1) // 2]

    @property
    def full(self) -> bool:
        return len(self.samples) >= self.length

    def clear(self) -> None:
        self.samples, self.value_ns = [], None


def timescale(announce: c.Announce, arb_timescale: str, tai_utc_s: int | None) -> tuple[bool, int, str]:
    """(PTP timescale?, seconds added to the master's timestamps, why) for the master of this Announce."""
    if announce.header.flags & c.FLAG_PTP_TIMESCALE:
        return True, 0, "PTP timescale: timestamps are TAI"
    if arb_timescale == "tai":
        return False, 0, "ARB timescale read as TAI (arb_timescale=tai)"
    if announce.header.flags & c.FLAG_UTC_OFFSET_VALID:
        return False, announce.current_utc_offset, "ARB timescale read as UTC + the Announce's currentUtcOffset"
    if tai_utc_s is not None:
        return False, tai_utc_s, ("ARB timescale read as UTC + the appliance's TAI-UTC (the Announce's "
                                  "currentUtcOffsetValid is clear)")
    return False, announce.current_utc_offset, ("ARB timescale read as UTC + the Announce's currentUtcOffset, "
                                                "which it does not mark valid")


class SlaveMeasure:
    """The slave role's exchanges with its parent.  ``count(name)`` hears what is ignored; ``log_delay_req`` is the
    Delay_Req interval, the port's logMinDelayReqInterval until the master's Delay_Resp says otherwise (9.5.11.2)."""

    def __init__(self, identity: c.PortIdentity, log_min_delay_req: int, arb_timescale: str, tai_utc_s: int | None,
                 count: Callable[[str], None]) -> None:
        self.identity = identity
        self.log_min_delay_req = self.log_delay_req = log_min_delay_req
        self.arb_timescale, self.tai_utc_s = arb_timescale, tai_utc_s
        self._count = count
        self.last: PtpMeasurement | None = None
        self.measurements = 0
        self._last_sync: tuple[int, int, int] | None = None  # (t1 master, t2 local, correction scaled)
        self._sync_wait: tuple[int, int, int] | None = None  # two-step Sync: (sequenceId, t2, correction)
        self._early_fup: tuple[int, int, int] | None = None  # Follow_Up before its Sync: (sequenceId, t1, correction)
        self._delay_out: dict[int, dict[str, int]] = {}  # our Delay_Req sequenceId -> t3, t4, correction

    def forget_master(self) -> None:
        self._last_sync = self._sync_wait = self._early_fup = None
        self._delay_out.clear()
        self.log_delay_req = self.log_min_delay_req

    # --- Sync and Follow_Up -----------------------------------------------------------------------------------------
    def sync(self, msg: c.Sync, rx_ts_ns: int) -> tuple[int, int, int] | None:
        """(t1, t2, correction) once the Sync is complete: at once for one-step, else with its Follow_Up."""
        h = msg.header
        if not h.flags & c.FLAG_TWO_STEP:  # one-step: originTimestamp is t1 (11.3.2)
            return self._synced(msg.origin_ts_ns, rx_ts_ns, h.correction)
        fup = self._early_fup
        if fup is not None and fup[0] == h.sequence_id:
            self._early_fup = None
            return self._synced(fup[1], rx_ts_ns, h.correction + fup[2])
        self._sync_wait = (h.sequence_id, rx_ts_ns, h.correction)
        return None

    def follow_up(self, msg: c.FollowUp) -> tuple[int, int, int] | None:
        h = msg.header
        wait = self._sync_wait
        if wait is not None and wait[0] == h.sequence_id:
            self._sync_wait = None
            # two-step (11.3.2): t1 is preciseOriginTimestamp; the Sync's and the Follow_Up's corrections both count
            return self._synced(msg.precise_origin_ts_ns, wait[1], wait[2] + h.correction)
        self._early_fup = (h.sequence_id, msg.precise_origin_ts_ns, h.correction)  # its Sync may still come
        return None

    def _synced(self, t1_ns: int, t2_ns: int, correction: int) -> tuple[int, int, int]:
        self._last_sync = (t1_ns, t2_ns, correction)
        self._count("syncs")
        return self._last_sync

    def measurement(self, synced: tuple[int, int, int], path_delay_ns: int | None, parent: c.PortIdentity | None,
                    announce: c.Announce | None) -> PtpMeasurement | None:
        """The offset of a complete Sync, once the path delay and the parent's Announce are known."""
        if path_delay_ns is None or announce is None or parent is None:
            return None
        t1_ns, t2_ns, correction = synced
        ptp_timescale, shift_s, _why = timescale(announce, self.arb_timescale, self.tai_utc_s)
        offset_scaled = ((t2_ns - t1_ns - shift_s * NS_PER_S - path_delay_ns) << 16) - correction
        q = announce.gm_clock_quality
        m = PtpMeasurement(t2_ns, ns(offset_scaled), path_delay_ns, port_identity_text(parent), q.clock_class,
                           q.clock_accuracy, announce.time_source, announce.steps_removed,
                           clock_identity_text(announce.gm_identity), ptp_timescale, shift_s)
        self.last = m
        self.measurements += 1
        return m

    # --- E2E: Delay_Req and Delay_Resp (11.3) -----------------------------------------------------------------------
    def delay_req_sent(self, seq: int) -> None:
        self._delay_out = keep_recent(self._delay_out, seq)
        self._delay_out[seq] = {}

    def delay_req_transmitted(self, seq: int, t3_ns: int) -> int | None:
        """Our Delay_Req left at t3; the mean path delay if its Delay_Resp is already in."""
        if seq not in self._delay_out:
            return None
        self._delay_out[seq]["t3"] = t3_ns
        return self._e2e_delay(seq)

    def delay_resp(self, msg: c.DelayResp) -> int | None:
        """The master's answer: t4, and the request interval it asks for; the mean path delay once t3 is known."""
        seq = msg.header.sequence_id
        if msg.requesting_port != self.identity or seq not in self._delay_out:
            self._count("ignored_delay_resp_not_ours")
            return None
        log = msg.header.log_interval
        if log != UNSPECIFIED_LOG and -7 <= log <= 7:  # 9.5.11.2: the master sets the slaves' request interval
            self.log_delay_req = max(log, self.log_min_delay_req)
        self._delay_out[seq].update(t4=msg.receive_ts_ns, corr=msg.header.correction)
        return self._e2e_delay(seq)

    def _e2e_delay(self, seq: int) -> int | None:
        t = self._delay_out[seq]
        if not {"t3", "t4"} <= t.keys():
            return None
        del self._delay_out[seq]
        if self._last_sync is None:
            self._count("delay_without_sync")
            return None
        t1, t2, sync_corr = self._last_sync
        # 11.3.2: meanPathDelay = [(t2 - t3) + (t4 - t1) - <corrected Sync correctionField> - Delay_Resp's] / 2
        scaled = (((t2 - t["t3"]) + (t["t4"] - t1)) << 16) - sync_corr - t["corr"]
        return ns(scaled // 2)
