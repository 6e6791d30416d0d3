"""Unit tests of the NTP shared-memory segment (appliance.edge.ntp.shm): sequence-counted map, counter rows."""

from __future__ import annotations

import struct
from dataclasses import replace
from types import SimpleNamespace

import pytest

from appliance.edge.ntp import shm
from appliance.protocol.clockmap import PACKED_SIZE, ClockMap
from appliance.protocol.ntp.packet import refid
from appliance.edge.ntp.shm import (COUNTER_NAMES, MAP_OFFSET, ROW_SIZE, ROWS_OFFSET, SEQ_OFFSET, ClockReader,
                                       ClockSegment, segment_size)

MAP = ClockMap(True, 1, 1, -20, 5, 6, refid("GPS"), 10**18, 10**18 + 37 * 10**9, 12.5, 37, 1, 2 * 10**18,
               12345, 3, 1)


@pytest.fixture
def segment():
    seg = ClockSegment(3)
    readers: list[ClockReader] = []
    yield seg, readers
    for reader in readers:
        reader.close()
    seg.close()


def attach(segment, index: int = 0) -> ClockReader:
    seg, readers = segment
    reader = ClockReader(seg.name, index)
    readers.append(reader)
    return reader


def seq_of(seg: ClockSegment) -> int:
    return struct.unpack_from("<Q", seg.shm.buf, SEQ_OFFSET)[0]


def test_layout_and_header(segment):
    seg, _ = segment
    assert seg.shm.size >= segment_size(3) == shm.clients_offset(3) + 3 * shm.CLIENTS_SIZE
    assert shm.clients_offset(3) == ROWS_OFFSET + 3 * ROW_SIZE
    assert struct.unpack_from("<II", seg.shm.buf, 0) == (shm.MAGIC, shm.LAYOUT_VERSION)
    assert MAP_OFFSET + PACKED_SIZE <= ROWS_OFFSET and len(COUNTER_NAMES) * 8 <= ROW_SIZE


def test_nothing_published_reads_none_then_each_publication(segment):
    seg, _ = segment
    reader = attach(segment)
    assert reader.read() is None
    seg.publish(MAP)
    assert seq_of(seg) == 2 and reader.read() == MAP
    assert reader.read() is reader.read()  # unchanged sequence: the cached map, no copy
    newer = replace(MAP, generation=2, rate_ppb=-3.25, leap_indicator=0)
    seg.publish(newer)
    assert seq_of(seg) == 4 and reader.read() == newer
    assert bytes(seg.shm.buf[MAP_OFFSET:MAP_OFFSET + PACKED_SIZE]) == newer.pack()


def test_reader_waits_while_the_writer_is_mid_update(segment, monkeypatch):
    seg, _ = segment
    reader = attach(segment)
    seg.publish(MAP)
    assert reader.read() == MAP
    newer = replace(MAP, generation=2)
    # The writer has made the sequence odd and written half of the new map when the reader looks.
    struct.pack_into("<Q", seg.shm.buf, SEQ_OFFSET, 3)
    seg.shm.buf[MAP_OFFSET:MAP_OFFSET + 8] = newer.pack()[:8]
    yields = []

    def writer_finishes_after_a_few_yields(_s: float) -> None:
        yields.append(1)
        if len(yields) == 5:
            seg.shm.buf[MAP_OFFSET:MAP_OFFSET + PACKED_SIZE] = newer.pack()
            struct.pack_into("<Q", seg.shm.buf, SEQ_OFFSET, 4)

    monkeypatch.setattr(shm.time, "sleep", writer_finishes_after_a_few_yields)
    assert reader.read() == newer and len(yields) == 5


def test_a_writer_that_never_finishes_leaves_the_last_good_map(segment, monkeypatch):
    seg, _ = segment
    reader = attach(segment)
    seg.publish(MAP)
    assert reader.read() == MAP
    struct.pack_into("<Q", seg.shm.buf, SEQ_OFFSET, 3)
    seg.shm.buf[MAP_OFFSET:MAP_OFFSET + PACKED_SIZE] = bytes(PACKED_SIZE)  # garbage mid-write
    monkeypatch.setattr(shm.time, "sleep", lambda _s: None)
    assert reader.read() == MAP


class TornBuffer(bytearray):
    """Shared memory whose writer publishes a new map while the reader is copying the old one (once)."""

    def __init__(self, data: bytes, newer: ClockMap):
        super().__init__(data)
        self.newer, self.copies = newer, 0

    def __getitem__(self, index):  # type: ignore[override]
        out = super().__getitem__(index)
        if isinstance(index, slice) and index.start == MAP_OFFSET:
            self.copies += 1
            if self.copies == 1:  # the copy just taken is now stale: the writer moves on
                self[MAP_OFFSET:MAP_OFFSET + PACKED_SIZE] = self.newer.pack()
                struct.pack_into("<Q", self, SEQ_OFFSET, struct.unpack_from("<Q", self, SEQ_OFFSET)[0] + 2)
        return out


def test_a_copy_torn_by_a_concurrent_publication_is_retried(segment):
    seg, _ = segment
    reader = attach(segment)
    seg.publish(MAP)
    newer = replace(MAP, generation=9, served_anchor_tai_ns=MAP.served_anchor_tai_ns + 1)
    torn = TornBuffer(bytes(seg.shm.buf), newer)
    real = reader.shm
    reader.shm = SimpleNamespace(buf=torn)
    try:
        assert reader.read() == newer and torn.copies == 2
    finally:
        reader.shm = real


def test_counter_rows_are_independent_per_worker(segment):
    seg, _ = segment
    one, two = attach(segment, 1), attach(segment, 2)
    one.write_counters({"requests": 5, "drop_short": 1, "unknown": 99})
    two.write_counters({"requests": 7, "replies": 6, "pid": 4242, "heartbeat_ns": 2**63 + 1})
    two.write_counters({"requests": 8, "replies": 7, "pid": 4242, "slow_path": -1})  # the row is rewritten whole
    assert seg.counters(0) == dict.fromkeys(COUNTER_NAMES, 0)
    assert seg.counters(1) == {**dict.fromkeys(COUNTER_NAMES, 0), "requests": 5, "drop_short": 1}
    assert seg.counters(2) == {**dict.fromkeys(COUNTER_NAMES, 0), "requests": 8, "replies": 7, "pid": 4242,
                               "slow_path": 2**64 - 1}
    seg.publish(MAP)  # publishing never touches the rows
    assert seg.counters(1)["requests"] == 5 and one.read() == MAP


def test_attaching_to_something_else_is_refused():
    seg = ClockSegment(1)
    try:
        struct.pack_into("<I", seg.shm.buf, 0, 0xDEADBEEF)
        with pytest.raises(ValueError, match="not an NTP clock segment"):
            ClockReader(seg.name, 0)
    finally:
        seg.close()


def test_each_worker_publishes_its_busiest_clients(segment):
    seg, _ = segment
    first, last = attach(segment, 0), attach(segment, 2)
    assert seg.clients(0) == seg.clients(2) == []
    first.write_clients([(bytes([192, 0, 2, 7]), 40, 0), (bytes(range(8)), 3, 1)])
    many = [(bytes([10, 0, 0, i]), 100 - i, 0) for i in range(shm.CLIENT_SLOTS + 5)]
    last.write_clients(many)
    assert seg.clients(0) == [(bytes([192, 0, 2, 7]), 40, 0), (bytes(range(8)), 3, 1)]
    assert seg.clients(1) == []
    assert seg.clients(2) == many[:shm.CLIENT_SLOTS]  # at most CLIENT_SLOTS: the table's size is fixed
    first.write_clients([])
    assert seg.clients(0) == [] and seg.clients(2) == many[:shm.CLIENT_SLOTS]
    assert struct.unpack_from("<II", seg.shm.buf, 0) == (shm.MAGIC, shm.LAYOUT_VERSION)  # nothing else written
    assert first.read() is None
