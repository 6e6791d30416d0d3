"""Steer a Linux clock - CLOCK_REALTIME or a PTP hardware clock (/dev/ptpN) - with clock_adjtime(2).

Single job: apply the discipline engine's actions (set a frequency in ppb, step by ns) to a kernel clock and
publish an honest sync status, error bounds and TAI offset where chrony, ``timedatectl`` and CLOCK_TAI readers
look.  This is an I/O edge: it calls clock_adjtime through ctypes and opens PHC devices.  Every system call
goes through an injectable :class:`ClockSyscalls`, so tests run against a fake and never touch a real clock.
The engine decides; the composition root applies its actions to a :class:`KernelClock`.

Units at the kernel ABI (include/uapi/linux/timex.h): ``freq`` is scaled ppm (ppm * 2**16); ``maxerror`` and
``esterror`` are microseconds; with ADJ_NANO, ADJ_SETOFFSET's ``time.tv_usec`` carries *nanoseconds*.
A positive frequency makes the clock run faster.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import math
import os
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from appliance.units import NS_PER_S

ADJ_OFFSET, ADJ_FREQUENCY, ADJ_MAXERROR, ADJ_ESTERROR = 0x0001, 0x0002, 0x0004, 0x0008
ADJ_STATUS, ADJ_TAI, ADJ_SETOFFSET, ADJ_NANO = 0x0010, 0x0080, 0x0100, 0x2000

STA_PLL, STA_PPSFREQ, STA_PPSTIME, STA_FLL = 0x0001, 0x0002, 0x0004, 0x0008
STA_INS, STA_DEL, STA_UNSYNC, STA_FREQHOLD = 0x0010, 0x0020, 0x0040, 0x0080
STA_PPSSIGNAL, STA_PPSJITTER, STA_PPSWANDER, STA_PPSERROR = 0x0100, 0x0200, 0x0400, 0x0800
STA_CLOCKERR, STA_NANO, STA_MODE, STA_CLK = 0x1000, 0x2000, 0x4000, 0x8000
# Bits the kernel owns: ADJ_STATUS keeps its own copy of these whatever we send.
STA_RONLY = STA_PPSSIGNAL | STA_PPSJITTER | STA_PPSWANDER | STA_PPSERROR | STA_CLOCKERR | STA_NANO | STA_MODE | STA_CLK

TIME_OK, TIME_INS, TIME_DEL, TIME_OOP, TIME_WAIT, TIME_ERROR = range(6)  # clock_adjtime's return value
STATE_NAMES = ("TIME_OK", "TIME_INS", "TIME_DEL", "TIME_OOP", "TIME_WAIT", "TIME_ERROR")

CLOCK_REALTIME = 0
CLOCKFD = 3  # low bits of a dynamic (file-descriptor) clock id
MAX_REALTIME_FREQUENCY_PPB = 500_000  # MAXFREQ_SCALED: the kernel *silently clamps* beyond +-500 ppm, so we refuse
NTP_PHASE_LIMIT_US = 16_000_000  # the kernel caps maxerror/esterror here (and calls the clock unsynchronized)
MAX_TAI_OFFSET_S = 100_000  # ADJ_TAI values outside 0..this are ignored by the kernel without an error
_SCALED_PPM_PER_PPB = Fraction(1 << 16, 1000)  # 65.536, kept exact so the conversion rounds only once
_FD_LIMIT = 1 << 28  # FD_TO_CLOCKID keeps 29 bits of ~fd: larger fds do not survive CLOCKID_TO_FD
_LONG_BITS = 8 * ctypes.sizeof(ctypes.c_long)
_LONG_MIN, _LONG_MAX = -(1 << (_LONG_BITS - 1)), (1 << (_LONG_BITS - 1)) - 1
_CAP_SYS_TIME_HINT = "setting the clock needs CAP_SYS_TIME (run as root or grant the capability)"


# Kernel ABI, include/uapi/linux/timex.h (the userspace branch, __kernel_long_t == long on LP64).
class Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class Timex(ctypes.Structure):
    # ctypes aligns each long to 8 on LP64, which inserts the same padding the C compiler does after
    # ``modes``, ``status`` and ``shift``.  The header's eleven anonymous ``int :32`` fields are reserve space.
    _fields_ = [("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
                ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long), ("status", ctypes.c_int),
                ("constant", ctypes.c_long), ("precision", ctypes.c_long), ("tolerance", ctypes.c_long),
                ("time", Timeval), ("tick", ctypes.c_long), ("ppsfreq", ctypes.c_long), ("jitter", ctypes.c_long),
                ("shift", ctypes.c_int), ("stabil", ctypes.c_long), ("jitcnt", ctypes.c_long),
                ("calcnt", ctypes.c_long), ("errcnt", ctypes.c_long), ("stbcnt", ctypes.c_long),
                ("tai", ctypes.c_int), ("_reserved", ctypes.c_int32 * 11)]


# include/uapi/linux/ptp_clock.h.  Newer kernels turn ``rsv`` slots into fields; the size (80) never changes,
# which is what keeps the ioctl number stable.
class PtpClockCaps(ctypes.Structure):
    _fields_ = [("max_adj", ctypes.c_int), ("n_alarm", ctypes.c_int), ("n_ext_ts", ctypes.c_int),
                ("n_per_out", ctypes.c_int), ("pps", ctypes.c_int), ("n_pins", ctypes.c_int),
                ("cross_timestamping", ctypes.c_int), ("adjust_phase", ctypes.c_int),
                ("max_phase_adj", ctypes.c_int), ("rsv", ctypes.c_int * 11)]


# _IOR('=', 1, struct ptp_clock_caps) in the asm-generic encoding (x86, arm, arm64, riscv): dir 2 << 30 |
# size << 16 | type << 8 | nr.  Unlike pps.h, ptp_clock.h names the struct itself, so size is sizeof the struct.
PTP_CLOCK_GETCAPS = (2 << 30) | (ctypes.sizeof(PtpClockCaps) << 16) | (ord("=") << 8) | 1


def ppb_to_scaled_ppm(freq_ppb: float) -> int:
    """The kernel's ``freq`` for a frequency in ppb: round(ppb * 65.536), exact, ties to even."""
    return round(Fraction(freq_ppb) * _SCALED_PPM_PER_PPB)


def scaled_ppm_to_ppb(freq_scaled_ppm: int) -> float:
    return freq_scaled_ppm * 1000 / 65536  # exact in binary floating point for any kernel value


def setoffset_fields(delta_ns: int) -> tuple[int, int]:
    """(tv_sec, tv_nsec) for ADJ_SETOFFSET|ADJ_NANO: the kernel wants 0 <= nsec < 1e9, so -0.3 s is (-1, 7e8)."""
    return divmod(delta_ns, NS_PER_S)  # floor division gives exactly that normalization


def fd_to_clockid(fd: int) -> int:
    """linuxptp's FD_TO_CLOCKID: ((unsigned) ~fd << 3) | CLOCKFD, read back as a signed 32-bit clockid_t."""
    if not 0 <= fd < _FD_LIMIT:
        raise ValueError(f"fd {fd} cannot be encoded as a dynamic clock id (need 0 <= fd < 2**28)")
    unsigned = (((~fd) & 0xFFFFFFFF) << 3 | CLOCKFD) & 0xFFFFFFFF
    return unsigned - (1 << 32) if unsigned & 0x80000000 else unsigned


def clockid_to_fd(clock_id: int) -> int:
    """The kernel's CLOCKID_TO_FD: (unsigned) ~(clk >> 3), with an arithmetic shift of the signed id."""
    return ~(clock_id >> 3) & 0xFFFFFFFF


@dataclass(frozen=True)
class ClockReading:
    """What a read-only clock_adjtime reports.  For a PHC only ``frequency_ppb`` is meaningful."""

    frequency_ppb: float
    status: int  # STA_* bits
    maxerror_us: int
    esterror_us: int
    tai_offset_s: int
    state: int  # TIME_OK .. TIME_ERROR

    @property
    def synchronized(self) -> bool:
        return not self.status & STA_UNSYNC

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state] if 0 <= self.state < len(STATE_NAMES) else f"state {self.state}"


class ClockSyscalls(Protocol):
    def clock_adjtime(self, clock_id: int, tx: Timex) -> int: ...  # returns the clock state; raises OSError
    def open(self, path: str) -> int: ...
    def ioctl(self, fd: int, request: int, buf: ctypes.Structure) -> None: ...  # raises OSError
    def close(self, fd: int) -> None: ...


class LinuxClockSyscalls:
    """The real thing: glibc's clock_adjtime through ctypes, os.open and fcntl.ioctl."""

    def __init__(self) -> None:
        self._clock_adjtime = ctypes.CDLL(None, use_errno=True).clock_adjtime
        self._clock_adjtime.argtypes = [ctypes.c_int, ctypes.POINTER(Timex)]
        self._clock_adjtime.restype = ctypes.c_int

    def clock_adjtime(self, clock_id: int, tx: Timex) -> int:
        state = self._clock_adjtime(clock_id, ctypes.byref(tx))
        if state == -1:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return state

    def open(self, path: str) -> int:
        try:
            return os.open(path, os.O_RDWR | os.O_CLOEXEC)  # the kernel refuses to adjust a PHC opened read-only
        except PermissionError:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # still good for query(); adjusting says EACCES

    def ioctl(self, fd: int, request: int, buf: ctypes.Structure) -> None:
        fcntl.ioctl(fd, request, buf, True)

    def close(self, fd: int) -> None:
        os.close(fd)


class KernelClockError(OSError):
    """clock_adjtime or opening a PHC failed; ``errno`` says how (EPERM: no CAP_SYS_TIME, EACCES, ...)."""


class KernelClock:
    """One kernel clock.  Use :meth:`realtime` or :meth:`phc`; close a PHC when done (or use ``with``)."""

    def __init__(self, clock_id: int, name: str, syscalls: ClockSyscalls, *, fd: int | None = None,
                 max_frequency_ppb: int = MAX_REALTIME_FREQUENCY_PPB) -> None:
        self.clock_id, self.name = clock_id, name
        self.max_frequency_ppb = max_frequency_ppb
        self._sys, self._fd = syscalls, fd
        self._closed = False

    @classmethod
    def realtime(cls, syscalls: ClockSyscalls | None = None) -> KernelClock:
        return cls(CLOCK_REALTIME, "CLOCK_REALTIME", syscalls if syscalls is not None else LinuxClockSyscalls())

    @classmethod
    def phc(cls, path: str, syscalls: ClockSyscalls | None = None) -> KernelClock:
        sys = syscalls if syscalls is not None else LinuxClockSyscalls()
        try:
            fd = sys.open(path)
        except OSError as exc:
            raise KernelClockError(exc.errno, f"{path}: cannot open PTP hardware clock: {exc.strerror or exc}") from exc
        caps = PtpClockCaps()
        try:
            sys.ioctl(fd, PTP_CLOCK_GETCAPS, caps)  # max_adj: the driver's own frequency limit, in ppb
        except OSError as exc:
            sys.close(fd)  # do not leak the fd of a device we cannot use
            raise KernelClockError(exc.errno, f"{path}: PTP_CLOCK_GETCAPS failed ({exc.strerror or exc}): "
                                              "not a PTP hardware clock?") from exc
        return cls(fd_to_clockid(fd), path, sys, fd=fd, max_frequency_ppb=caps.max_adj)

    @property
    def is_phc(self) -> bool:
        return self._fd is not None

    def query(self) -> ClockReading:
        """Read the clock's discipline state.  modes = 0: changes nothing and needs no privilege."""
        tx = Timex()
        state = self._adjtime(tx, "query")
        return ClockReading(frequency_ppb=scaled_ppm_to_ppb(tx.freq), status=tx.status, maxerror_us=tx.maxerror,
                            esterror_us=tx.esterror, tai_offset_s=tx.tai, state=state)

    def set_frequency(self, freq_ppb: float) -> None:
        self._check_frequency(freq_ppb)
        self._adjtime(Timex(modes=ADJ_FREQUENCY, freq=ppb_to_scaled_ppm(freq_ppb)), f"set frequency {freq_ppb} ppb")

    def step(self, delta_ns: int) -> None:
        """Jump the clock by ``delta_ns`` (ADJ_SETOFFSET|ADJ_NANO)."""
        if isinstance(delta_ns, bool) or not isinstance(delta_ns, int):
            raise TypeError(f"delta_ns must be an int, got {delta_ns!r}")  # a float would lose nanoseconds
        if delta_ns == 0:
            return  # even a zero SETOFFSET fires clock_was_set, waking every cancel-on-set timer on the host
        sec, nsec = setoffset_fields(delta_ns)
        if not _LONG_MIN <= sec <= _LONG_MAX:
            raise ValueError(f"a step of {delta_ns} ns does not fit the kernel's time field")
        tx = Timex(modes=ADJ_SETOFFSET | ADJ_NANO, time=Timeval(tv_sec=sec, tv_usec=nsec))
        self._adjtime(tx, f"step {delta_ns} ns")

    def set_status(self, synchronized: bool, maxerror_us: int, esterror_us: int) -> None:
        """Publish sync state and error bounds (what ntp_adjtime readers, chrony and timedatectl see).

        The kernel adds 500 us to maxerror every second and marks the clock unsynchronized past 16 s, so the
        caller refreshes this periodically.  Clearing STA_UNSYNC also lets the kernel's 11-minute mode copy the
        time into the RTC.
        """
        self._require_ntp_state("set status")
        # Read-modify-write: keep bits others own, e.g. a pending leap second (STA_INS) or the kernel PLL flags.
        current = self.query().status
        status = current & ~STA_RONLY & ~STA_UNSYNC
        if not synchronized:
            status |= STA_UNSYNC
        tx = Timex(modes=ADJ_STATUS | ADJ_MAXERROR | ADJ_ESTERROR, status=status,
                   maxerror=_error_us(maxerror_us, "maxerror_us"), esterror=_error_us(esterror_us, "esterror_us"))
        self._adjtime(tx, "set status")

    def set_tai_offset(self, tai_utc_s: int) -> None:
        """Set TAI - UTC in the kernel so CLOCK_TAI is right (ADJ_TAI; the value travels in ``constant``)."""
        self._require_ntp_state("set TAI offset")
        if not 0 <= tai_utc_s <= MAX_TAI_OFFSET_S:
            raise ValueError(f"TAI-UTC of {tai_utc_s} s is outside the kernel's 0..{MAX_TAI_OFFSET_S} s")
        self._adjtime(Timex(modes=ADJ_TAI, constant=tai_utc_s), f"set TAI offset {tai_utc_s} s")

    def close(self) -> None:
        self._closed = True
        fd, self._fd = self._fd, None
        if fd is not None:
            self._sys.close(fd)

    def __enter__(self) -> KernelClock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_frequency(self, freq_ppb: float) -> None:
        if not math.isfinite(freq_ppb):
            raise ValueError(f"frequency must be finite, got {freq_ppb!r}")
        if abs(freq_ppb) > self.max_frequency_ppb:
            source = "its PTP_CLOCK_GETCAPS max_adj" if self.is_phc else "the kernel's limit"
            raise ValueError(f"{self.name}: {freq_ppb} ppb is beyond {source} of +-{self.max_frequency_ppb} ppb "
                             f"(+-{self.max_frequency_ppb / 1000:g} ppm)")

    def _require_ntp_state(self, action: str) -> None:
        if self.is_phc:  # ptp_clock_adjtime only handles frequency, offset and step: it would say EOPNOTSUPP
            raise KernelClockError(errno.EOPNOTSUPP, f"{self.name}: cannot {action}: a PTP hardware clock keeps no "
                                                     "NTP status, error bounds or TAI offset (use CLOCK_REALTIME)")

    def _adjtime(self, tx: Timex, action: str) -> int:
        if self._closed:
            raise KernelClockError(errno.EBADF, f"{self.name}: {action}: clock is closed")
        try:
            return self._sys.clock_adjtime(self.clock_id, tx)
        except OSError as exc:
            if exc.errno == errno.EPERM:
                why = _CAP_SYS_TIME_HINT
            elif exc.errno == errno.EACCES and self.is_phc:  # posix clocks check the open mode, not capabilities
                why = "adjusting a PTP hardware clock needs write access to its device"
            else:
                why = f"clock_adjtime failed: {exc.strerror or exc}"
            raise KernelClockError(exc.errno, f"{self.name}: {action}: {why}") from exc


def _error_us(value_us: int, name: str) -> int:
    if value_us < 0:
        raise ValueError(f"{name} must be >= 0, got {value_us}")
    return min(int(value_us), NTP_PHASE_LIMIT_US)  # the kernel's own ceiling, meaning "unbounded"
