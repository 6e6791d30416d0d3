"""The shared memory between the appliance and its NTP workers: the clock map under a sequence counter, and one
counter row per worker.

I/O edge (shared memory).  Like chrony's SHM refclock segment, readers never block the writer: the writer makes the
sequence odd, writes, and makes it even again; a reader copies the map and retries if the sequence was odd or changed
meanwhile.  Each worker owns its counter row, so counters need no lock at all.  The layout is fixed and mirrored by
the C fast path (``_fastpath.c``): magic, layout version, sequence, then the packed ClockMap at ``MAP_OFFSET``, then
the counter rows, then (Python's only) one table per worker of its busiest clients over the recent window
(``outputs/ntp/clients.py``), written under a sequence counter of its own like the map.
"""

from __future__ import annotations

import struct
import time
from multiprocessing import shared_memory

from appliance.protocol.clockmap import PACKED_SIZE, ClockMap

MAGIC = 0x4E545053  # "NTPS"
LAYOUT_VERSION = 1
SEQ_OFFSET = 8
MAP_OFFSET = 16
ROWS_OFFSET = 256
COUNTER_NAMES = (
    "requests", "replies", "interleaved", "authenticated", "kod_rate", "kod_deny", "kod_rstr", "crypto_nak",
    "drop_short", "drop_oversize", "drop_malformed", "drop_bad_version", "drop_control_query", "drop_mode",
    "drop_denied", "drop_rate_limited", "rx_without_kernel_timestamp", "tx_kernel_timestamps", "heartbeat_ns",
    "pid", "fast_path", "slow_path", "nts", "nts_nak", "drop_nts_malformed", "drop_nts_replay",
)
ROW_SLOTS = 32
ROW_SIZE = 8 * ROW_SLOTS
assert len(COUNTER_NAMES) <= ROW_SLOTS and MAP_OFFSET + PACKED_SIZE <= ROWS_OFFSET
CLIENT_SLOTS = 16  # a worker's busiest clients published, at most
CLIENT_ENTRY = struct.Struct("<B7x8sQQ")  # key length, client key (IPv4 address or IPv6 /64), requests, error
CLIENTS_SIZE = 16 + CLIENT_ENTRY.size * CLIENT_SLOTS  # sequence, count, entries


def clients_offset(workers: int) -> int:
    return ROWS_OFFSET + ROW_SIZE * workers


def segment_size(workers: int) -> int:
    return clients_offset(workers) + CLIENTS_SIZE * workers


class ClockSegment:
    """The appliance's side: creates the segment, publishes maps, reads the workers' counters."""

    def __init__(self, workers: int, name: str | None = None):
        self.workers = workers
        self.shm = shared_memory.SharedMemory(name=name, create=True, size=segment_size(workers))
        struct.pack_into("<II", self.shm.buf, 0, MAGIC, LAYOUT_VERSION)
        struct.pack_into("<Q", self.shm.buf, SEQ_OFFSET, 0)
        self._seq = 0

    @property
    def name(self) -> str:
        return self.shm.name

    def publish(self, clock: ClockMap) -> None:
        buf = self.shm.buf
        self._seq += 1
        struct.pack_into("<Q", buf, SEQ_OFFSET, self._seq * 2 - 1)  # odd: being written
        buf[MAP_OFFSET:MAP_OFFSET + PACKED_SIZE] = clock.pack()
        struct.pack_into("<Q", buf, SEQ_OFFSET, self._seq * 2)

    def counters(self, index: int) -> dict[str, int]:
        values = struct.unpack_from(f"<{len(COUNTER_NAMES)}Q", self.shm.buf, ROWS_OFFSET + ROW_SIZE * index)
        return dict(zip(COUNTER_NAMES, values))

    def clients(self, index: int) -> list[tuple[bytes, int, int]]:
        """Worker ``index``'s busiest clients as (client key, requests, error); [] if it is mid-write twice over."""
        base = clients_offset(self.workers) + CLIENTS_SIZE * index
        for _ in range(2):
            seq, count = struct.unpack_from("<QQ", self.shm.buf, base)
            if seq % 2:
                continue
            rows = [CLIENT_ENTRY.unpack_from(self.shm.buf, base + 16 + CLIENT_ENTRY.size * i)
                    for i in range(min(count, CLIENT_SLOTS))]
            if struct.unpack_from("<Q", self.shm.buf, base)[0] == seq:
                return [(key[:length], requests, error) for length, key, requests, error in rows]
        return []

    def close(self) -> None:
        self.shm.close()
        try:
            self.shm.unlink()
        except FileNotFoundError:
            pass


class ClockReader:
    """A worker's side: reads the current map (cheaply when nothing changed) and writes its counter row."""

    def __init__(self, name: str, index: int, workers: int | None = None):
        # Workers are spawned by the appliance and share its resource tracker, so attaching registers nothing new
        # and the segment outlives any one worker; the appliance unlinks it.
        self.shm = shared_memory.SharedMemory(name=name, create=False)
        magic, version = struct.unpack_from("<II", self.shm.buf, 0)
        if magic != MAGIC or version != LAYOUT_VERSION:
            raise ValueError(f"shared memory {name} is not an NTP clock segment of layout {LAYOUT_VERSION}")
        self.index = index
        if workers is None:  # the segment is segment_size(workers) long
            workers = (self.shm.size - ROWS_OFFSET) // (ROW_SIZE + CLIENTS_SIZE)
        self._clients_base = clients_offset(workers) + CLIENTS_SIZE * index
        self._seq = -1
        self._map: ClockMap | None = None

    def read(self) -> ClockMap | None:
        buf = self.shm.buf
        for _ in range(1000):
            seq = struct.unpack_from("<Q", buf, SEQ_OFFSET)[0]
            if seq == self._seq:
                return self._map
            if seq % 2:
                time.sleep(0)  # the writer is mid-update: let it finish
                continue
            data = bytes(buf[MAP_OFFSET:MAP_OFFSET + PACKED_SIZE])
            if struct.unpack_from("<Q", buf, SEQ_OFFSET)[0] == seq:
                self._seq, self._map = seq, (ClockMap.unpack(data) if seq else None)
                return self._map
        return self._map

    def write_counters(self, values: dict[str, int]) -> None:
        row = [int(values.get(name, 0)) & 0xFFFFFFFFFFFFFFFF for name in COUNTER_NAMES]
        struct.pack_into(f"<{len(COUNTER_NAMES)}Q", self.shm.buf, ROWS_OFFSET + ROW_SIZE * self.index, *row)

    def close(self) -> None:
        self.shm.close()

    def write_clients(self, top: list[tuple[bytes, int, int]]) -> None:
        """This worker's busiest clients (at most ``CLIENT_SLOTS``), under the table's sequence counter."""
        base = self._clients_base
        seq = struct.unpack_from("<Q", self.shm.buf, base)[0]
        struct.pack_into("<Q", self.shm.buf, base, seq + 1)  # odd: being written
        rows = top[:CLIENT_SLOTS]
        for i, (key, requests, error) in enumerate(rows):
            CLIENT_ENTRY.pack_into(self.shm.buf, base + 16 + CLIENT_ENTRY.size * i, len(key), key, requests, error)
        struct.pack_into("<QQ", self.shm.buf, base, seq + 2, len(rows))
