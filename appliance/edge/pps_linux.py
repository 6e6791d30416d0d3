"""Read pulse-per-second edges from a Linux PPS device (RFC 2783 as implemented by include/uapi/linux/pps.h).

This is an I/O edge: it opens ``/dev/ppsN``, issues ioctls and runs a reader thread.  It turns the kernel's
assert timestamps into :class:`~appliance.events.PpsEdge` records and hands them to a callback; everything
downstream is pure.  System calls go through an injectable :class:`PpsSyscalls` so tests need no kernel PPS.

The kernel stamps edges on CLOCK_REALTIME, so ``raw_ns`` is that clock's reading at the edge.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import os
import threading
from typing import Callable, Protocol

from appliance.events import PpsEdge
from appliance.units import NS_PER_S

logger = logging.getLogger("appliance.gnss.pps")

PPS_API_VERS_1 = 1
PPS_TIME_INVALID = 1 << 0  # pps_ktime.flags; in a FETCH timeout it means "wait forever" (we never ask that)
PPS_CAPTUREASSERT = 0x01
PPS_CAPTURECLEAR = 0x02
PPS_OFFSETASSERT = 0x10
PPS_CANWAIT = 0x100
PPS_TSFMT_TSPEC = 0x1000

_SEQUENCE_MODULUS = 1 << 32  # assert_sequence is a __u32 and wraps


# Kernel ABI, include/uapi/linux/pps.h.
class PpsKtime(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_int64), ("nsec", ctypes.c_int32), ("flags", ctypes.c_uint32)]


class PpsKinfo(ctypes.Structure):
    # 44 bytes of fields, but sizeof is 48 on LP64: pps_ktime holds an __s64, so the struct is 8-aligned and
    # gets 4 bytes of tail padding.  (On i386 __s64 is 4-aligned and it is 44 - hence the kernel's compat ioctl.)
    _fields_ = [("assert_sequence", ctypes.c_uint32), ("clear_sequence", ctypes.c_uint32),
                ("assert_tu", PpsKtime), ("clear_tu", PpsKtime), ("current_mode", ctypes.c_int)]


class PpsKparams(ctypes.Structure):
    _fields_ = [("api_version", ctypes.c_int), ("mode", ctypes.c_int),
                ("assert_off_tu", PpsKtime), ("clear_off_tu", PpsKtime)]


class PpsFdata(ctypes.Structure):
    _fields_ = [("info", PpsKinfo), ("timeout", PpsKtime)]


# asm-generic/ioctl.h encoding (x86, arm, arm64, riscv): dir<<30 | size<<16 | type<<8 | nr.
# powerpc/mips/sparc use different direction bits; this appliance does not target them.
_IOC_WRITE, _IOC_READ = 1, 2


def _ioc(direction: int, type_char: str, nr: int, size_bytes: int) -> int:
    return (direction << 30) | (size_bytes << 16) | (ord(type_char) << 8) | nr


# The header writes e.g. _IOWR('p', 0xa4, struct pps_fdata *): the size field encodes sizeof(a *pointer*)
# (8 on 64-bit), not sizeof the struct.  The kernel matches on these numbers and copies the real struct, so we
# must reproduce the quirk: PPS_FETCH == 0xc00870a4 on x86_64, not 0xc04070a4.
_POINTER_SIZE = ctypes.sizeof(ctypes.c_void_p)
PPS_GETPARAMS = _ioc(_IOC_READ, "p", 0xA1, _POINTER_SIZE)
PPS_SETPARAMS = _ioc(_IOC_WRITE, "p", 0xA2, _POINTER_SIZE)
PPS_GETCAP = _ioc(_IOC_READ, "p", 0xA3, _POINTER_SIZE)
PPS_FETCH = _ioc(_IOC_READ | _IOC_WRITE, "p", 0xA4, _POINTER_SIZE)


class PpsSyscalls(Protocol):
    def open(self, path: str) -> int: ...
    def ioctl(self, fd: int, request: int, buf: ctypes.Structure | ctypes.c_int) -> None: ...  # raises OSError
    def close(self, fd: int) -> None: ...


class LinuxPpsSyscalls:
    """The real thing: os.open + fcntl.ioctl on a mutable ctypes buffer (filled in place by the kernel)."""

    def open(self, path: str) -> int:
        try:
            return os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except PermissionError:
            # Reading edges needs only read access; SETPARAMS is gated by CAP_SYS_TIME, not by the open mode.
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                exc.errno, f"PPS device {path} does not exist (PPS driver not loaded or receiver unplugged?)", path
            ) from None

    def ioctl(self, fd: int, request: int, buf: ctypes.Structure | ctypes.c_int) -> None:
        fcntl.ioctl(fd, request, buf, True)

    def close(self, fd: int) -> None:
        os.close(fd)


class PpsError(OSError):
    """A PPS device failed; ``errno`` says how (ENODEV: vanished, EIO, ENOENT: absent, ...)."""


class PpsCapabilityError(PpsError):
    """The source cannot do what this reader needs (assert capture and blocking fetch)."""


class SequenceTracker:
    """Decides which fetched edges are new, counting duplicates, missed edges and sequence resets."""

    def __init__(self) -> None:
        self.last_sequence: int | None = None
        self.duplicates = 0
        self.missed_edges = 0
        self.sequence_resets = 0

    def accept(self, sequence: int) -> bool:
        if self.last_sequence is None:
            self.last_sequence = sequence
            return True
        delta = (sequence - self.last_sequence) % _SEQUENCE_MODULUS
        if delta == 0:
            self.duplicates += 1  # the kernel handed back the edge we already have
            return False
        if delta < _SEQUENCE_MODULUS // 2:
            if delta > 1:
                self.missed_edges += delta - 1
                logger.warning("PPS sequence jumped %d -> %d: %d edge(s) missed",
                               self.last_sequence, sequence, delta - 1)
        else:
            # Backwards: the source was re-registered (driver reload, replug) and counts from 1 again.
            self.sequence_resets += 1
            logger.warning("PPS sequence went backwards %d -> %d (source reset)", self.last_sequence, sequence)
        self.last_sequence = sequence
        return True


def _timeout_ktime(timeout_s: float) -> PpsKtime:
    if not 0 <= timeout_s < 1e9:  # also rejects NaN and inf
        raise ValueError(f"timeout_s must be a finite number >= 0, got {timeout_s!r}")
    whole_s, nsec = divmod(round(timeout_s * NS_PER_S), NS_PER_S)  # divmod keeps nsec < 1e9 after rounding
    return PpsKtime(sec=whole_s, nsec=nsec, flags=0)


class PpsDevice:
    """An open PPS source configured for assert capture.  Not thread-safe: one reader per instance."""

    def __init__(self, path: str, syscalls: PpsSyscalls | None = None, *,
                 tracker: SequenceTracker | None = None, source: str = "pps") -> None:
        self.path = path
        self.source = source
        self.tracker = tracker if tracker is not None else SequenceTracker()
        self.warnings: list[str] = []
        self.read_only = False
        self._sys = syscalls if syscalls is not None else LinuxPpsSyscalls()
        try:
            self._fd: int | None = self._sys.open(path)
        except OSError as exc:
            raise PpsError(exc.errno, f"{path}: cannot open PPS device: {exc.strerror or exc}") from exc
        try:
            self.capabilities = self._check_capabilities()
            self._configure_assert_capture()
        except BaseException:
            self.close()  # do not leak the fd when the device is unusable
            raise

    @property
    def missed_edges(self) -> int:
        return self.tracker.missed_edges

    def _ioctl(self, name: str, request: int, buf: ctypes.Structure | ctypes.c_int) -> None:
        if self._fd is None:
            raise PpsError(errno.EBADF, f"{self.path}: PPS device is closed")
        try:
            self._sys.ioctl(self._fd, request, buf)
        except OSError as exc:
            raise PpsError(exc.errno, f"{self.path}: {name} failed: {exc.strerror or exc}") from exc

    def _check_capabilities(self) -> int:
        caps = ctypes.c_int(0)
        self._ioctl("PPS_GETCAP", PPS_GETCAP, caps)
        needed = {"PPS_CAPTUREASSERT": PPS_CAPTUREASSERT, "PPS_CANWAIT": PPS_CANWAIT}  # CANWAIT: blocking fetch
        missing = [name for name, bit in needed.items() if not caps.value & bit]
        if missing:
            raise PpsCapabilityError(errno.EOPNOTSUPP, f"{self.path}: PPS source lacks {', '.join(missing)} "
                                                       f"(capabilities 0x{caps.value:x})")
        return caps.value

    def _configure_assert_capture(self) -> None:
        params = PpsKparams()
        self._ioctl("PPS_GETPARAMS", PPS_GETPARAMS, params)
        wanted = PPS_CAPTUREASSERT | PPS_TSFMT_TSPEC
        if params.mode & wanted == wanted:
            return  # already so (the usual kernel default): no need for CAP_SYS_TIME
        params.api_version = PPS_API_VERS_1
        params.mode |= wanted
        try:
            self._ioctl("PPS_SETPARAMS", PPS_SETPARAMS, params)
        except PpsError as exc:
            if exc.errno not in (errno.EPERM, errno.EACCES):
                raise
            # Unprivileged: carry on with the kernel's settings, which capture assert on most drivers.
            self.read_only = True
            message = f"{self.path}: cannot set PPS parameters ({exc.strerror}); using the kernel's settings"
            self.warnings.append(message)
            logger.warning("%s", message)

    def fetch(self, timeout_s: float) -> PpsEdge | None:
        """Wait up to ``timeout_s`` for an assert edge; None on timeout or when no *new* edge was captured."""
        while True:
            fdata = PpsFdata(timeout=_timeout_ktime(timeout_s))
            try:
                self._ioctl("PPS_FETCH", PPS_FETCH, fdata)
            except PpsError as exc:
                if exc.errno == errno.EINTR:
                    continue  # a signal interrupted the wait; the edge may still come
                if exc.errno == errno.ETIMEDOUT:
                    return None
                raise
            return self._edge_from(fdata.info)

    def _edge_from(self, info: PpsKinfo) -> PpsEdge | None:
        stamp = info.assert_tu
        if info.assert_sequence == 0 and stamp.sec == 0 and stamp.nsec == 0:
            return None  # nothing captured since the source registered (a zero-tick timeout returns at once)
        if not self.tracker.accept(info.assert_sequence):
            return None
        # Integer arithmetic: a float 1e9 product would lose nanoseconds at today's epoch.
        return PpsEdge(raw_ns=stamp.sec * NS_PER_S + stamp.nsec, sequence=info.assert_sequence, source=self.source)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                self._sys.close(fd)
            except OSError:
                logger.debug("closing %s failed", self.path, exc_info=True)  # a vanished device may refuse


class PpsReader:
    """Runs a thread that delivers edges to ``on_edge`` and reopens the device with backoff when it fails.

    Callbacks run on the reader thread.  ``on_error`` is called once per failure episode; an episode ends when
    a reopened device answers a fetch.
    """

    def __init__(self, path: str, on_edge: Callable[[PpsEdge], object],
                 on_error: Callable[[str], object] = lambda message: None, *,
                 syscalls: PpsSyscalls | None = None, fetch_timeout_s: float = 0.5,
                 initial_backoff_s: float = 0.5, max_backoff_s: float = 30.0, duplicate_pause_s: float = 0.05,
                 sleep: Callable[[float], object] | None = None, source: str = "pps") -> None:
        self.path = path
        self.tracker = SequenceTracker()  # shared across reopenings so dedup and counts survive a replug
        self._on_edge, self._on_error = on_edge, on_error
        self._syscalls, self._source = syscalls, source
        self._fetch_timeout_s = fetch_timeout_s
        self._initial_backoff_s, self._max_backoff_s = initial_backoff_s, max_backoff_s
        self._duplicate_pause_s = duplicate_pause_s
        self._stop = threading.Event()
        self._sleep = sleep if sleep is not None else self._stop.wait  # wakes at once on stop()
        self._next_backoff_s = initial_backoff_s
        self._failing = False
        self._thread: threading.Thread | None = None

    @property
    def missed_edges(self) -> int:
        return self.tracker.missed_edges

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("PpsReader already started")
        self._thread = threading.Thread(target=self._run, name=f"pps-reader {self.path}", daemon=True)
        self._thread.start()

    def stop(self, join_timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(join_timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._serve_one_opening()
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any failure
                self._report_failure(exc)
                self._sleep(self._take_backoff_s())

    def _serve_one_opening(self) -> None:
        device = PpsDevice(self.path, self._syscalls, tracker=self.tracker, source=self._source)
        try:
            while not self._stop.is_set():
                duplicates_before = self.tracker.duplicates
                edge = device.fetch(self._fetch_timeout_s)
                self._mark_healthy()
                if edge is not None:
                    self._deliver(edge)
                elif self.tracker.duplicates != duplicates_before:
                    # Some kernels return the last edge without waiting; pause so we do not spin on it.
                    self._stop.wait(self._duplicate_pause_s)
        finally:
            device.close()

    def _deliver(self, edge: PpsEdge) -> None:
        try:
            self._on_edge(edge)
        except Exception:  # noqa: BLE001 - a consumer bug is not a device failure; keep reading
            logger.exception("on_edge callback failed for %s", edge)

    def _mark_healthy(self) -> None:
        if self._failing:
            logger.info("PPS device %s is answering again", self.path)
        self._failing = False
        self._next_backoff_s = self._initial_backoff_s

    def _report_failure(self, exc: Exception) -> None:
        if isinstance(exc, OSError):
            logger.warning("PPS device %s failed: %s", self.path, exc)
        else:
            logger.exception("PPS reader for %s hit an unexpected error", self.path)
        if self._failing:
            return
        self._failing = True
        try:
            self._on_error(str(exc))
        except Exception:  # noqa: BLE001 - same reasoning as _deliver
            logger.exception("on_error callback failed")

    def _take_backoff_s(self) -> float:
        delay_s = self._next_backoff_s
        self._next_backoff_s = min(delay_s * 2, self._max_backoff_s)
        return delay_s
