"""NTPv4 packet header codec (RFC 5905 §7.3, Figure 8), byte-exact and pure.

Timestamps stay in their 64-bit wire form (``int``): converting them is the time base's job, and keeping them raw is
what lets the server echo a client's timestamp bit for bit.  Root delay and dispersion stay in 16.16 form.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

HEADER_LEN = 48
_HEADER = struct.Struct("!BBbbII4sQQQQ")

MODE_RESERVED, MODE_ACTIVE, MODE_PASSIVE, MODE_CLIENT, MODE_SERVER = 0, 1, 2, 3, 4
MODE_BROADCAST, MODE_CONTROL, MODE_PRIVATE = 5, 6, 7
LI_NONE, LI_INSERT, LI_DELETE, LI_ALARM = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class NtpHeader:
    """The 48-byte header; field names follow RFC 5905 Figure 8."""

    leap: int
    version: int
    mode: int
    stratum: int
    poll: int
    precision: int
    root_delay: int  # NTP short format (16.16 s)
    root_dispersion: int  # NTP short format (16.16 s)
    reference_id: bytes  # 4 bytes: ASCII refid (stratum 0/1) or an address hash
    reference_ts: int  # NTP 64-bit timestamps (32.32 s since the era start)
    origin_ts: int
    receive_ts: int
    transmit_ts: int

    def encode(self) -> bytes:
        first = (self.leap & 3) << 6 | (self.version & 7) << 3 | (self.mode & 7)
        return _HEADER.pack(first, self.stratum & 0xFF, self.poll, self.precision, self.root_delay,
                            self.root_dispersion, self.reference_id, self.reference_ts, self.origin_ts,
                            self.receive_ts, self.transmit_ts)

    def with_(self, **changes: object) -> NtpHeader:
        return replace(self, **changes)  # type: ignore[arg-type]


def decode(data: bytes) -> NtpHeader:
    """The first 48 bytes as a header; raises ValueError if there are fewer (the caller drops such packets)."""
    if len(data) < HEADER_LEN:
        raise ValueError(f"{len(data)} bytes is shorter than an NTP header")
    (first, stratum, poll, precision, root_delay, root_dispersion, ref_id, ref_ts, org_ts, rec_ts,
     xmt_ts) = _HEADER.unpack_from(data)
    return NtpHeader(first >> 6, (first >> 3) & 7, first & 7, stratum, poll, precision, root_delay,
                     root_dispersion, ref_id, ref_ts, org_ts, rec_ts, xmt_ts)


def refid(text: str) -> bytes:
    """An ASCII reference identifier or kiss code, NUL-padded to 4 bytes (RFC 5905 §7.3, Figure 12)."""
    raw = text.encode("ascii")[:4]
    return raw + b"\0" * (4 - len(raw))
