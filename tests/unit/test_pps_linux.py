"""Tests for the Linux PPS edge, against a fake system-call layer (this machine has no kernel PPS source)."""

from __future__ import annotations

import ctypes
import errno
import threading
import time
from collections import deque

import pytest

from appliance.events import PpsEdge
from appliance.edge import pps_linux as pps
from appliance.edge.pps_linux import (
    LinuxPpsSyscalls,
    PpsCapabilityError,
    PpsDevice,
    PpsError,
    PpsReader,
    SequenceTracker,
)

FULL_CAPS = pps.PPS_CAPTUREASSERT | pps.PPS_CAPTURECLEAR | pps.PPS_OFFSETASSERT | pps.PPS_CANWAIT | pps.PPS_TSFMT_TSPEC
NAMES = {pps.PPS_GETCAP: "GETCAP", pps.PPS_GETPARAMS: "GETPARAMS", pps.PPS_SETPARAMS: "SETPARAMS",
         pps.PPS_FETCH: "FETCH"}


class FakePps:
    """Stands in for the kernel.  ``script`` holds (sequence, sec, nsec) edges or errno ints to raise on FETCH;
    when it runs dry FETCH times out.  ``open_errors`` are raised by successive opens."""

    def __init__(self, script=(), *, caps=FULL_CAPS, mode=0, setparams_errno=None, open_errors=(), block=False):
        self.script = deque(script)
        self.block = block  # honour the fetch timeout like the kernel, instead of a token 2 ms
        self.caps, self.mode = caps, mode
        self.setparams_errno = setparams_errno
        self.open_errors = deque(open_errors)
        self.calls: list[str] = []
        self.timeouts: list[tuple[int, int, int]] = []
        self.open_fds: set[int] = set()
        self._next_fd = 3
        self._lock = threading.Lock()

    def open(self, path):
        with self._lock:
            self.calls.append("open")
            if self.open_errors:
                code = self.open_errors.popleft()
                raise OSError(code, f"fake {errno.errorcode[code]}", path)
            self._next_fd += 1
            self.open_fds.add(self._next_fd)
            return self._next_fd

    def close(self, fd):
        self.calls.append("close")
        self.open_fds.discard(fd)

    def ioctl(self, fd, request, buf):
        name = NAMES[request]
        self.calls.append(name)
        if fd not in self.open_fds:
            raise OSError(errno.EBADF, "bad fd")
        if name == "GETCAP":
            buf.value = self.caps
        elif name == "GETPARAMS":
            buf.api_version, buf.mode = pps.PPS_API_VERS_1, self.mode
        elif name == "SETPARAMS":
            if self.setparams_errno is not None:
                raise OSError(self.setparams_errno, "fake")
            self.mode = buf.mode
        else:
            self._fetch(buf)

    def _fetch(self, fdata):
        self.timeouts.append((fdata.timeout.sec, fdata.timeout.nsec, fdata.timeout.flags))
        with self._lock:
            item = self.script.popleft() if self.script else None
        if item is None:
            timeout_s = fdata.timeout.sec + fdata.timeout.nsec / 1e9
            time.sleep(timeout_s if self.block else 0.002)  # a token wait keeps reader tests from spinning
            raise OSError(errno.ETIMEDOUT, "fake timeout")
        if isinstance(item, int):
            raise OSError(item, f"fake {errno.errorcode[item]}")
        fdata.info.assert_sequence, fdata.info.assert_tu.sec, fdata.info.assert_tu.nsec = item
        fdata.info.current_mode = self.mode


# --- kernel ABI ------------------------------------------------------------------------------------------------


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="values derived for 64-bit pointers; CI runs on x86_64, where it never skips")
def test_ioctl_numbers_encode_pointer_size_as_the_header_does():
    # pps.h: _IOxx('p', nr, struct ... *): size field = sizeof(pointer) = 8, type 'p' = 0x70.
    assert pps.PPS_GETPARAMS == 0x800870A1  # _IOR: dir 2
    assert pps.PPS_SETPARAMS == 0x400870A2  # _IOW: dir 1
    assert pps.PPS_GETCAP == 0x800870A3
    assert pps.PPS_FETCH == 0xC00870A4  # _IOWR: dir 3


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="LP64 layout; CI runs on x86_64, where it never skips")
def test_structure_layout_matches_lp64_kernel():
    assert ctypes.sizeof(pps.PpsKtime) == 16
    # 4+4+16+16+4 = 44 bytes of fields, padded to 48 because pps_ktime's __s64 makes the struct 8-aligned.
    assert ctypes.sizeof(pps.PpsKinfo) == 48
    assert pps.PpsKinfo.assert_tu.offset == 8
    assert pps.PpsKinfo.clear_tu.offset == 24
    assert pps.PpsKinfo.current_mode.offset == 40
    assert ctypes.sizeof(pps.PpsKparams) == 40
    assert pps.PpsKparams.assert_off_tu.offset == 8
    assert ctypes.sizeof(pps.PpsFdata) == 64
    assert pps.PpsFdata.timeout.offset == 48


# --- PpsDevice -------------------------------------------------------------------------------------------------


def test_open_checks_caps_then_sets_assert_capture():
    fake = FakePps(mode=0)
    device = PpsDevice("/dev/pps0", fake)
    assert fake.calls == ["open", "GETCAP", "GETPARAMS", "SETPARAMS"]
    assert fake.mode & pps.PPS_CAPTUREASSERT and fake.mode & pps.PPS_TSFMT_TSPEC
    assert device.capabilities == FULL_CAPS and not device.read_only and device.warnings == []


def test_open_skips_setparams_when_kernel_already_captures_assert():
    fake = FakePps(mode=pps.PPS_CAPTUREASSERT | pps.PPS_TSFMT_TSPEC | pps.PPS_CANWAIT)
    PpsDevice("/dev/pps0", fake)
    assert fake.calls == ["open", "GETCAP", "GETPARAMS"]


@pytest.mark.parametrize("code", [errno.EPERM, errno.EACCES])
def test_setparams_refused_continues_read_only_with_warning(code):
    device = PpsDevice("/dev/pps0", FakePps(setparams_errno=code))
    assert device.read_only
    assert len(device.warnings) == 1 and "/dev/pps0" in device.warnings[0]


def test_setparams_other_error_is_fatal_and_closes_fd():
    fake = FakePps(setparams_errno=errno.EINVAL)
    with pytest.raises(PpsError) as info:
        PpsDevice("/dev/pps0", fake)
    assert info.value.errno == errno.EINVAL and not fake.open_fds


def test_missing_canwait_is_a_clear_error_and_closes_fd():
    fake = FakePps(caps=pps.PPS_CAPTUREASSERT | pps.PPS_TSFMT_TSPEC)
    with pytest.raises(PpsCapabilityError, match=r"/dev/pps1: .*PPS_CANWAIT") as info:
        PpsDevice("/dev/pps1", fake)
    assert "PPS_CAPTUREASSERT" not in str(info.value)
    assert not fake.open_fds


def test_fetch_builds_edge_with_exact_integer_nanoseconds_and_passes_timeout():
    fake = FakePps([(7, 1_700_000_000, 999_999_999)])
    device = PpsDevice("/dev/pps0", fake, source="pps0")
    assert device.fetch(1.25) == PpsEdge(raw_ns=1_700_000_000_999_999_999, sequence=7, source="pps0")
    assert fake.timeouts == [(1, 250_000_000, 0)]  # flags 0: PPS_TIME_INVALID would mean "wait forever"


def test_fetch_timeout_returns_none_and_eintr_is_retried():
    fake = FakePps([errno.EINTR, (1, 10, 0)])
    device = PpsDevice("/dev/pps0", fake)
    assert device.fetch(0.5) == PpsEdge(raw_ns=10 * 10**9, sequence=1)
    assert fake.calls.count("FETCH") == 2
    assert device.fetch(0.5) is None  # script exhausted: ETIMEDOUT


def test_same_edge_fetched_twice_yields_one_edge():
    device = PpsDevice("/dev/pps0", FakePps([(5, 100, 1), (5, 100, 1), (6, 101, 2)]))
    edges = [device.fetch(0.5) for _ in range(3)]
    assert [e.sequence if e else None for e in edges] == [5, None, 6]
    assert device.tracker.duplicates == 1 and device.missed_edges == 0


def test_never_captured_source_yields_nothing():
    assert PpsDevice("/dev/pps0", FakePps([(0, 0, 0)])).fetch(0.0) is None


def test_sequence_jump_counts_missed_edges_and_backwards_counts_reset():
    device = PpsDevice("/dev/pps0", FakePps([(10, 1, 0), (13, 4, 0), (2, 5, 0), (3, 6, 0)]))
    assert [device.fetch(0.5).sequence for _ in range(4)] == [10, 13, 2, 3]
    assert device.missed_edges == 2
    assert device.tracker.sequence_resets == 1


def test_sequence_wraparound_is_not_a_reset():
    tracker = SequenceTracker()
    assert tracker.accept(0xFFFFFFFF) and tracker.accept(0) and tracker.accept(2)
    assert tracker.sequence_resets == 0 and tracker.missed_edges == 1


def test_device_error_is_raised_with_errno():
    device = PpsDevice("/dev/pps0", FakePps([errno.ENODEV]))
    with pytest.raises(PpsError, match="/dev/pps0") as info:
        device.fetch(0.5)
    assert info.value.errno == errno.ENODEV


def test_fetch_after_close_raises():
    device = PpsDevice("/dev/pps0", FakePps())
    device.close()
    device.close()  # idempotent
    with pytest.raises(PpsError) as info:
        device.fetch(0.5)
    assert info.value.errno == errno.EBADF


# --- default syscall layer (real kernel, no PPS hardware needed) -----------------------------------------------


def test_default_syscalls_nonexistent_device_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match=r"PPS device /dev/pps99 does not exist") as info:
        LinuxPpsSyscalls().open("/dev/pps99")
    assert info.value.errno == errno.ENOENT
    with pytest.raises(PpsError, match="/dev/pps99") as info:
        PpsDevice("/dev/pps99")
    assert info.value.errno == errno.ENOENT


def test_default_syscalls_ioctl_accepts_ctypes_buffers():
    # /dev/null is not a PPS device: the kernel answers ENOTTY, proving the buffer and request were accepted.
    syscalls = LinuxPpsSyscalls()
    fd = syscalls.open("/dev/null")
    try:
        for request, buf in [(pps.PPS_FETCH, pps.PpsFdata()), (pps.PPS_GETCAP, ctypes.c_int())]:
            with pytest.raises(OSError) as info:
                syscalls.ioctl(fd, request, buf)
            assert info.value.errno == errno.ENOTTY
    finally:
        syscalls.close(fd)


# --- PpsReader -------------------------------------------------------------------------------------------------


class Collector:
    def __init__(self, want: int):
        self.edges: list[PpsEdge] = []
        self.errors: list[str] = []
        self.sleeps_s: list[float] = []
        self.want = want
        self.done = threading.Event()

    def on_edge(self, edge):
        self.edges.append(edge)
        if len(self.edges) >= self.want:
            self.done.set()

    def sleep(self, delay_s):
        self.sleeps_s.append(delay_s)


def run_reader(fake, collector, **kwargs):
    reader = PpsReader("/dev/pps0", collector.on_edge, collector.errors.append, syscalls=fake,
                       fetch_timeout_s=0.05, sleep=collector.sleep, **kwargs)
    reader.start()
    try:
        assert collector.done.wait(5), f"got only {collector.edges}"
    finally:
        reader.stop()
    return reader


def test_reader_delivers_edges_in_order():
    fake = FakePps([(1, 1, 0), (2, 2, 0), (2, 2, 0), (3, 3, 0)])
    collector = Collector(want=3)
    reader = run_reader(fake, collector)
    assert [e.sequence for e in collector.edges] == [1, 2, 3]
    assert collector.errors == [] and reader.missed_edges == 0


def test_reader_survives_unplug_reports_once_and_reconnects_with_backoff():
    fake = FakePps([(1, 1, 0), (2, 2, 0), errno.ENODEV, (3, 3, 0), (5, 5, 0)])
    # After ENODEV the device is gone for two reopen attempts, then comes back.
    original_fetch = fake._fetch

    def fetch_then_unplug(fdata):
        try:
            original_fetch(fdata)
        except OSError as exc:
            if exc.errno == errno.ENODEV:
                fake.open_errors.extend([errno.ENOENT, errno.ENOENT])
            raise

    fake._fetch = fetch_then_unplug
    collector = Collector(want=4)
    reader = run_reader(fake, collector, max_backoff_s=1.0)
    assert [e.sequence for e in collector.edges] == [1, 2, 3, 5]
    assert len(collector.errors) == 1 and "/dev/pps0" in collector.errors[0]
    assert collector.sleeps_s == [0.5, 1.0, 1.0]  # doubling, capped at max_backoff_s
    assert reader.missed_edges == 1  # edge 4 was lost; the tracker survives the reopen
    assert fake.calls.count("open") == 4 and fake.calls.count("close") >= 2


def test_reader_reports_each_failure_episode_and_resets_backoff():
    fake = FakePps([(1, 1, 0), errno.EIO, (2, 2, 0), errno.EIO, (3, 3, 0)])
    collector = Collector(want=3)
    run_reader(fake, collector)
    assert len(collector.errors) == 2
    assert collector.sleeps_s == [0.5, 0.5]  # the device answered in between, so backoff starts over


def test_reader_open_failure_calls_on_error_and_keeps_retrying():
    fake = FakePps([(1, 1, 0)], open_errors=[errno.ENOENT] * 3)
    collector = Collector(want=1)
    run_reader(fake, collector)
    assert len(collector.errors) == 1 and "cannot open" in collector.errors[0]
    assert collector.sleeps_s == [0.5, 1.0, 2.0]


def test_reader_survives_unexpected_exceptions_and_callback_bugs(caplog):
    fake = FakePps([(1, 1, 0), (2, 2, 0)])
    seen = []

    def flaky_on_edge(edge):
        seen.append(edge.sequence)
        if edge.sequence == 1:
            raise RuntimeError("consumer bug")

    original_ioctl = fake.ioctl
    failures = [ValueError("library bug")]

    def ioctl(fd, request, buf):
        if request == pps.PPS_GETCAP and failures:
            raise failures.pop()
        original_ioctl(fd, request, buf)

    fake.ioctl = ioctl
    errors = []
    reader = PpsReader("/dev/pps0", flaky_on_edge, errors.append, syscalls=fake, fetch_timeout_s=0.05,
                       sleep=lambda s: None)
    with caplog.at_level("WARNING", logger="appliance.gnss.pps"):
        reader.start()
        deadline = time.monotonic() + 5
        while seen != [1, 2] and time.monotonic() < deadline:
            time.sleep(0.01)
        reader.stop()
    assert seen == [1, 2]
    assert errors == ["library bug"]
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "unexpected error" in messages and "on_edge callback failed" in messages


def test_stop_returns_promptly_even_during_backoff():
    # Default sleep is the stop event's wait: a 30 s backoff must not delay stop().
    fake = FakePps(open_errors=[errno.ENOENT] * 100)
    backoff_s = 30.0
    reader = PpsReader("/dev/pps0", lambda edge: None, syscalls=fake, initial_backoff_s=backoff_s)
    reader.start()
    time.sleep(0.05)
    started = time.monotonic()
    reader.stop()
    assert time.monotonic() - started < backoff_s / 2  # not the backoff: a busy host is slower, never 15 s slower
    assert not reader._thread.is_alive()


def test_stop_returns_promptly_while_fetching():
    fake = FakePps(block=True)  # each fetch blocks its full timeout: that bounds stop() latency
    reader = PpsReader("/dev/pps0", lambda edge: None, syscalls=fake, fetch_timeout_s=0.3)
    reader.start()
    time.sleep(0.05)
    fetches_before = fake.calls.count("FETCH")
    reader.stop()
    # Bounded by the fetch in progress: at most one more begins (the loop may be between two when stop() comes).
    assert fake.calls.count("FETCH") - fetches_before <= 1
    assert not reader._thread.is_alive() and not fake.open_fds


def test_fetch_timeout_encoding_and_validation():
    fake = FakePps()
    device = PpsDevice("/dev/pps0", fake)
    device.fetch(0.9999999999)  # rounds up to a whole second, never nsec == 1e9
    device.fetch(0.0)
    assert fake.timeouts == [(1, 0, 0), (0, 0, 0)]
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            device.fetch(bad)
