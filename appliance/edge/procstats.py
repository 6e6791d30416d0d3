"""CPU and memory of the appliance's processes, and what its state directory holds on disk.

I/O edge (reads /proc, walks the state directory, statvfs, the monotonic clock).  The parsing is pure functions of
the files' text, tested on samples; ``ProcessSampler`` keeps each process's previous reading so that CPU is given as
a percentage of one core over the interval since the last sample, beside the CPU seconds since the process started.
``disk_use`` walks the state directory (bounded: at most ``MAX_ENTRIES`` entries are looked at, and it says when it
stopped short) and names its biggest items: the audit trail, the time-quality record, the users, NTS keys ...; an
SQLite database's companion files (its write-ahead log, shared memory index, journal, the audit store's head file)
are counted with it.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_ENTRIES = 20_000  # files and folders a disk-use walk looks at, at most
BIGGEST = 8  # items of the state directory named one by one; the rest are summed as "other"
CACHE_S = 5.0  # a disk walk is reused for this long: a page polled by many viewers walks once
COMPANIONS = ("-wal", "-shm", "-journal", ".head")  # counted with the file they belong to


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat the system page shows (proc(5))."""

    pid: int
    name: str
    state: str
    cpu_ticks: int  # utime + stime, in clock ticks
    threads: int
    start_ticks: int  # when the process started, clock ticks after boot


def parse_stat(text: str) -> ProcStat:
    """/proc/<pid>/stat.  The command name (field 2) is in parentheses and may hold spaces and parentheses itself, so
    the fields are counted from the last ')'."""
    open_at, close_at = text.index("("), text.rindex(")")
    rest = text[close_at + 2:].split()  # field 3 (state) onwards
    return ProcStat(pid=int(text[:open_at]), name=text[open_at + 1:close_at], state=rest[0],
                    cpu_ticks=int(rest[11]) + int(rest[12]), threads=int(rest[17]), start_ticks=int(rest[19]))


def parse_status_kib(text: str) -> dict[str, int]:
    """The kB figures of /proc/<pid>/status (VmRSS, VmHWM, VmSize, RssAnon ...), in KiB."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[key] = int(parts[0])
    return out


def cpu_percent(ticks_before: int, ticks_now: int, interval_ns: int, ticks_per_s: int) -> float | None:
    """CPU used between two readings as a percentage of one core; None over no interval."""
    if interval_ns <= 0 or ticks_now < ticks_before:
        return None
    return 100.0 * (ticks_now - ticks_before) / ticks_per_s / (interval_ns / 1e9)


class ProcessSampler:
    """Reads processes from /proc; remembers each one's last reading for its CPU percentage (threads may share it).
    A look sooner than ``min_interval_ns`` after the last reading gives the percentage measured then."""

    def __init__(self, proc: Path = Path("/proc"), min_interval_ns: int = 1_000_000_000):
        self.proc, self.min_interval_ns = proc, min_interval_ns
        self.ticks_per_s = os.sysconf("SC_CLK_TCK")
        # (pid, start) -> (monotonic ns, cpu ticks, percent over the interval before them)
        self._last: dict[tuple[int, int], tuple[int, int, float | None]] = {}
        self._lock = threading.Lock()

    def sample(self, pid: int) -> dict[str, Any] | None:
        """What the system page shows of ``pid``; None if there is no such process (any more)."""
        try:
            stat = parse_stat((self.proc / str(pid) / "stat").read_text())
            status = parse_status_kib((self.proc / str(pid) / "status").read_text())
        except (OSError, ValueError, IndexError):
            return None
        now_ns = time.monotonic_ns()
        key = (pid, stat.start_ticks)  # a pid used again by another process starts afresh
        with self._lock:
            then = self._last.get(key)
            if then is None:
                percent = None
                self._last[key] = (now_ns, stat.cpu_ticks, None)
            elif now_ns - then[0] < self.min_interval_ns:  # too short to measure (ticks are 10 ms): the last figure
                percent = then[2]
            else:
                percent = cpu_percent(then[1], stat.cpu_ticks, now_ns - then[0], self.ticks_per_s)
                self._last[key] = (now_ns, stat.cpu_ticks, percent)
            if len(self._last) > 256:  # processes come and go (restarts): forget the oldest readings
                for old in sorted(self._last, key=lambda k: self._last[k][0])[:128]:
                    del self._last[old]
        return {"pid": pid, "name": stat.name, "state": stat.state, "threads": stat.threads,
                "cpu_s": round(stat.cpu_ticks / self.ticks_per_s, 2),
                "cpu_percent": None if percent is None else round(percent, 1),
                "rss_bytes": status.get("VmRSS", 0) * 1024, "peak_rss_bytes": status.get("VmHWM", 0) * 1024}


def disk_use(state_dir: Path, biggest: int = BIGGEST, max_entries: int = MAX_ENTRIES) -> dict[str, Any]:
    """Bytes of the files under ``state_dir`` (links not followed), its biggest items (a top-level file, or a folder
    with all it holds), and the size and free space of its filesystem."""
    items: dict[str, int] = {}
    seen = 0
    complete = True
    try:
        top = list(os.scandir(state_dir))
    except OSError as exc:
        return {"path": str(state_dir), "error": str(exc)}
    for entry in top:
        if seen >= max_entries:
            complete = False
            break
        size, counted, done = _entry_bytes(entry, max_entries - seen)
        seen += counted
        complete = complete and done
        name = entry.name + ("/" if _is_dir(entry) else "")
        owner = next((name[:-len(tail)] for tail in COMPANIONS if name.endswith(tail)), name)
        items[owner] = items.get(owner, 0) + size
    ranked = sorted(items.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = [{"name": name, "bytes": size} for name, size in ranked[:biggest]]
    rest = ranked[biggest:]
    if rest:
        shown.append({"name": f"{len(rest)} other items", "bytes": sum(size for _name, size in rest)})
    fs = os.statvfs(state_dir)
    return {"path": str(state_dir), "bytes": sum(items.values()), "items": shown, "complete": complete,
            "filesystem_bytes": fs.f_blocks * fs.f_frsize, "free_bytes": fs.f_bavail * fs.f_frsize}


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _entry_bytes(entry: os.DirEntry[str], budget: int) -> tuple[int, int, bool]:
    """(bytes, entries looked at, whether all were) of one item of the state directory."""
    try:
        if not _is_dir(entry):
            return entry.stat(follow_symlinks=False).st_size, 1, True
    except OSError:
        return 0, 1, True
    total, seen, stack = 0, 1, [entry.path]
    while stack:
        try:
            children = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for child in children:
            if seen >= budget:
                return total, seen, False
            seen += 1
            try:
                if child.is_dir(follow_symlinks=False):
                    stack.append(child.path)
                else:
                    total += child.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total, seen, True


class DiskUse:
    """``disk_use`` of one state directory, walked again at most every ``CACHE_S``."""

    def __init__(self, state_dir: Path, cache_s: float = CACHE_S):
        self.state_dir, self.cache_s = state_dir, cache_s
        self._at: float | None = None
        self._value: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self) -> dict[str, Any]:
        with self._lock:
            now = time.monotonic()
            if self._at is None or now - self._at >= self.cache_s:
                self._value, self._at = disk_use(self.state_dir), now
            return self._value
