"""SMPTE ST 2059-2 synchronization metadata: the SMPTE organization extension TLV (OUI 68-97-E8, subtype 1) that a
ST 2059-2 grandmaster sends in a management message so that slaves can derive time code and local time.

Pure core.  ``SyncMetadata.tlv(served_tai_ns, view)`` builds it from the served PTP time, what the clock says
(currentUtcOffset, a pending leap second, the clock's state) and the local zone, which the edge hands in as a
function (POSIX seconds -> (UTC offset in seconds, daylight saving in force)) so that no zone database is read here.

Fields (ST 2059-2, 9.2): defaultSystemFrameRate (numerator, denominator), masterLockingStatus (0 not in use, 1 free
run, 2 cold locking, 3 warm locking, 4 locked), timeAddressFlags (bit 0 drop frame, bit 1 colour frame
identification), currentLocalOffset (local time minus PTP time, seconds: the zone's offset minus currentUtcOffset),
jumpSeconds and timeOfNextJump (the next discontinuity of local time, a daylight-saving change or a leap second,
and the PTP second it happens at; 0 and 0 when none is known within a year), timeOfNextJam, timeOfPreviousJam and
previousJamLocalOffset (0: no jam scheduled, none made), daylightSaving (bit 0 in force now, bit 1 after the next
jump, bit 2 at the previous jam) and leapSecondJump (bit 0: the next jump is a leap second).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.protocol.ptp import codec as c
from appliance.units import NS_PER_S

SMPTE_OUI = bytes.fromhex("6897E8")
SM_SUBTYPE = bytes.fromhex("000001")
_SM = struct.Struct("!IIBBii6s6s6siBB")  # ST 2059-2 Table 4, after organizationId and organizationSubType
SM_DATA_LEN = _SM.size  # 42
DAY_S = 86_400
LOOKAHEAD_DAYS = 366

LOCKING = {"FREERUN": 1, "HOLDOVER": 1, "HOLDOVER_EXPIRED": 1, "ACQUIRING": 2, "LOCKED": 4}
DROP_FRAME_RATES = (Fraction(30000, 1001), Fraction(60000, 1001))

OffsetOf = Callable[[int], tuple[int, bool]]  # POSIX seconds -> (zone's UTC offset s, daylight saving in force)


def parse_frame_rate(text: str) -> tuple[int, int]:
    """'30000/1001', '25' or '29.97' -> (numerator, denominator); a decimal within 0.01 of an NTSC rate
    (N x 1000/1001: 23.976, 29.97, 59.94) is that rate.  ValueError when it is not a positive rate."""
    try:
        rate = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"frame rate {text!r}: expected N/D (30000/1001), an integer or a decimal") from None
    if "/" not in text and rate.denominator != 1:
        ntsc = Fraction(round(rate * Fraction(1001, 1000)) * 1000, 1001)
        if abs(ntsc - rate) < Fraction(1, 100):
            rate = ntsc
    if rate <= 0 or rate.numerator >= 2**32 or rate.denominator >= 2**32:
        raise ValueError(f"frame rate {text!r} is not a positive rate")
    return rate.numerator, rate.denominator


def _u48(seconds: int) -> bytes:
    return max(0, seconds).to_bytes(6, "big")


@dataclass
class SyncMetadata:
    """The TLV a ST 2059-2 grandmaster sends; ``offset_of`` gives the local zone (UTC when None)."""

    frame_rate: tuple[int, int] = (30000, 1001)
    offset_of: OffsetOf | None = None
    color_frame: bool = False
    # (valid from, valid until, the answer) in POSIX s: the next change holds until it happens, "none" for a day
    _next_change: tuple[int, int, tuple[int, int] | None] | None = field(default=None, repr=False)

    @property
    def drop_frame(self) -> bool:
        return Fraction(*self.frame_rate) in DROP_FRAME_RATES

    def _zone(self, posix_s: int) -> tuple[int, bool]:
        return (0, False) if self.offset_of is None else self.offset_of(posix_s)

    def next_zone_change(self, posix_s: int) -> tuple[int, int] | None:
        """(POSIX second at which the zone's offset changes next, the offset after) within LOOKAHEAD_DAYS; cached
        until that instant passes (or for a day when there is none)."""
        cached = self._next_change
        if cached is not None and cached[0] <= posix_s < cached[1]:
            return cached[2]
        now, _dst = self._zone(posix_s)
        lo = posix_s
        for day in range(1, LOOKAHEAD_DAYS + 1):
            hi = posix_s + day * DAY_S
            if self._zone(hi)[0] != now:
                while hi - lo > 1:  # the first second with the new offset
                    mid = (lo + hi) // 2
                    lo, hi = (mid, hi) if self._zone(mid)[0] == now else (lo, mid)
                self._next_change = (posix_s, hi, (hi, self._zone(hi)[0]))
                return self._next_change[2]
            lo = hi
        self._next_change = (posix_s, posix_s + DAY_S, None)
        return None

    def fields(self, served_tai_ns: int, view: GrandmasterView) -> dict[str, int]:
        """The TLV's fields, by name (for the status and the tests)."""
        tai_s = served_tai_ns // NS_PER_S
        utc_offset = view.current_utc_offset
        posix_s = tai_s - utc_offset
        zone_s, dst = self._zone(posix_s)
        jump_s = next_jump_tai = 0
        leap_jump = dst_next = False
        zone_change = self.next_zone_change(posix_s)
        candidates: list[tuple[int, int, bool, bool]] = []  # (PTP second, jump, is leap, dst after)
        if zone_change is not None:
            at_posix, after = zone_change
            candidates.append((at_posix + utc_offset, after - zone_s, False, self._zone(at_posix)[1]))
        if view.leap_change_s and view.leap_at_tai_ns is not None and view.leap_at_tai_ns > served_tai_ns:
            candidates.append((view.leap_at_tai_ns // NS_PER_S, -view.leap_change_s, True, dst))
        if candidates:
            next_jump_tai, jump_s, leap_jump, dst_next = min(candidates)
        else:
            dst_next = dst
        return {"numerator": self.frame_rate[0], "denominator": self.frame_rate[1],
                "master_locking_status": LOCKING.get(view.state, 1),
                "time_address_flags": int(self.drop_frame) | int(self.color_frame) << 1,
                "current_local_offset": zone_s - utc_offset, "jump_seconds": jump_s,
                "time_of_next_jump": next_jump_tai, "time_of_next_jam": 0, "time_of_previous_jam": 0,
                "previous_jam_local_offset": 0, "daylight_saving": int(dst) | int(dst_next) << 1,
                "leap_second_jump": int(leap_jump)}

    def tlv(self, served_tai_ns: int, view: GrandmasterView) -> c.OrganizationExtensionTlv:
        f = self.fields(served_tai_ns, view)
        data = _SM.pack(f["numerator"], f["denominator"], f["master_locking_status"], f["time_address_flags"],
                        f["current_local_offset"], f["jump_seconds"], _u48(f["time_of_next_jump"]),
                        _u48(f["time_of_next_jam"]), _u48(f["time_of_previous_jam"]),
                        f["previous_jam_local_offset"], f["daylight_saving"], f["leap_second_jump"])
        return c.OrganizationExtensionTlv(SMPTE_OUI, SM_SUBTYPE, data)


def unpack(data: bytes) -> dict[str, int]:
    """An SM TLV's dataField (after OUI and subtype) by field name; ValueError when it is not 42 octets."""
    if len(data) != SM_DATA_LEN:
        raise ValueError(f"SMPTE synchronization metadata of {len(data)} octets, not {SM_DATA_LEN}")
    (num, den, locking, flags, local, jump, next_jump, next_jam, prev_jam, prev_local, dst,
     leap) = _SM.unpack(data)
    return {"numerator": num, "denominator": den, "master_locking_status": locking, "time_address_flags": flags,
            "current_local_offset": local, "jump_seconds": jump, "time_of_next_jump": int.from_bytes(next_jump, "big"),
            "time_of_next_jam": int.from_bytes(next_jam, "big"),
            "time_of_previous_jam": int.from_bytes(prev_jam, "big"), "previous_jam_local_offset": prev_local,
            "daylight_saving": dst, "leap_second_jump": leap}
