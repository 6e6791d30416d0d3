"""IEEE 802.1AS (gPTP) pieces of a grandmaster port: the neighbor rate ratio and link delay from the peer delay
exchanges, asCapable, and the Follow_Up information TLV.

Pure core.  802.1AS-2020 11.2.19 (neighborRateRatio from successive Pdelay_Resp: the peer's responseOriginTimestamp
t3 against our receipt t4), 11.2.15.2.4 (meanLinkDelay = (r (t4 - t1) - (t3 - t2)) / 2), 11.2.2 / 11.2.13.2
(asCapable: the link delay is measured, at most neighborPropDelayThresh, and fewer than allowedLostResponses
responses in a row went missing), 11.4.4.3 (the Follow_Up information TLV, organization 00-80-C2, subtype 1:
cumulativeScaledRateOffset, gmTimeBaseIndicator, lastGmPhaseChange, scaledLastGmFreqChange; a grandmaster's rate
offset is 0).
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field

from appliance.protocol.ptp import codec as c

IEEE_8021_OUI = bytes.fromhex("0080C2")
FOLLOW_UP_INFO_SUBTYPE = bytes.fromhex("000001")
_FUI = struct.Struct("!iH12si")  # cumulativeScaledRateOffset, gmTimeBaseIndicator, lastGmPhaseChange, freq change
FUI_DATA_LEN = _FUI.size  # 22
RATE_WINDOW = 8  # Pdelay exchanges between the pair the ratio is measured over
ALLOWED_LOST_RESPONSES = 3  # 802.1AS default (11.5.3.3)
MAX_RATE_OFFSET = 0.001  # a ratio beyond 1 +- 1e-3 is not a neighbour's oscillator: not used


def follow_up_info(gm_time_base_indicator: int = 0, last_gm_phase_change_scaled_ns: int = 0,
                   scaled_last_gm_freq_change: int = 0, cumulative_scaled_rate_offset: int = 0) -> bytes:
    """The Follow_Up information TLV, packed (tlvType ORGANIZATION_EXTENSION, lengthField 28)."""
    phase = last_gm_phase_change_scaled_ns.to_bytes(12, "big", signed=True)
    data = _FUI.pack(cumulative_scaled_rate_offset, gm_time_base_indicator, phase, scaled_last_gm_freq_change)
    return c.OrganizationExtensionTlv(IEEE_8021_OUI, FOLLOW_UP_INFO_SUBTYPE, data).pack()


def with_follow_up_info(follow_up: bytes, tlv: bytes) -> bytes:
    """An encoded Follow_Up with ``tlv`` appended and messageLength counting it."""
    total = len(follow_up) + len(tlv)
    return follow_up[:2] + struct.pack("!H", total) + follow_up[4:] + tlv


def set_major_sdo_id(message: bytes, major_sdo_id: int) -> bytes:
    """An encoded message with majorSdoId (transportSpecific) set: the high nibble of its first octet."""
    return bytes([(major_sdo_id & 0x0F) << 4 | message[0] & 0x0F]) + message[1:]


@dataclass
class LinkState:
    """The peer delay mechanism's view of the link for 802.1AS: the neighbor rate ratio, the mean link delay
    and asCapable."""

    thresh_ns: int = 800
    allowed_lost: int = ALLOWED_LOST_RESPONSES
    rate_ratio: float | None = None
    link_delay_ns: int | None = None
    lost_in_a_row: int = 0
    _pairs: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=RATE_WINDOW))

    def exchange(self, t1: int, t2: int, t3: int, t4: int, correction_ns: int = 0) -> None:
        """One complete Pdelay exchange: t1 our Pdelay_Req sent, t2 its receipt at the peer, t3 the peer's
        Pdelay_Resp sent, t4 its receipt here (ns)."""
        self.lost_in_a_row = 0
        self._pairs.append((t3, t4))
        if len(self._pairs) >= 2:
            (t3a, t4a), (t3b, t4b) = self._pairs[0], self._pairs[-1]
            if t4b != t4a:
                ratio = (t3b - t3a) / (t4b - t4a)
                if abs(ratio - 1.0) <= MAX_RATE_OFFSET:
                    self.rate_ratio = ratio
        r = self.rate_ratio if self.rate_ratio is not None else 1.0
        delay = round((r * (t4 - t1) - (t3 - t2) - correction_ns) / 2)
        self.link_delay_ns = delay if self.link_delay_ns is None else (self.link_delay_ns * 7 + delay) // 8

    def lost(self) -> None:
        """A Pdelay_Req whose response did not come back before the next one."""
        self.lost_in_a_row += 1
        if self.lost_in_a_row > self.allowed_lost:
            self._pairs.clear()
            self.rate_ratio = None

    @property
    def as_capable(self) -> bool:
        return (self.link_delay_ns is not None and self.rate_ratio is not None
                and self.link_delay_ns <= self.thresh_ns and self.lost_in_a_row <= self.allowed_lost)

    def why_not(self) -> str:
        if self.lost_in_a_row > self.allowed_lost:
            return f"{self.lost_in_a_row} peer delay responses lost in a row"
        if self.link_delay_ns is None or self.rate_ratio is None:
            return "link delay not measured yet"
        if self.link_delay_ns > self.thresh_ns:
            return f"link delay {self.link_delay_ns} ns over neighborPropDelayThresh {self.thresh_ns} ns"
        return ""

    def snapshot(self) -> dict:
        return {"as_capable": self.as_capable, "why_not": self.why_not(),
                "neighbor_rate_ratio": self.rate_ratio, "link_delay_ns": self.link_delay_ns,
                "neighbor_prop_delay_thresh_ns": self.thresh_ns, "lost_in_a_row": self.lost_in_a_row}
