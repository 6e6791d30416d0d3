"""The live IRIG-B AM output as 16-bit mono WAV: segment files, or one endless stream into a FIFO for a player.

Edge module (files, a thread).  The planner hands ``emit`` one frame of samples a second ahead (an ``AmBlock``); a
writer thread takes them from a bounded queue, so a slow disk or a stalled reader never holds up the appliance (what
does not fit is dropped and counted as an overrun).

- A regular file path (or one that does not exist): segments of ``segment_s`` seconds, each a complete WAV file named
  ``<stem>-<UTC of its first frame>.wav`` beside the path, the newest ``keep`` kept.  The header is brought up to
  date with every frame written, so a segment cut short by a power cut still reads.  Each segment starts 10 ms before
  its first frame's on-time point (with the previous frame's last position identifier), so every frame in it decodes.
- A FIFO: one stream, a WAV header with open-ended sizes and then the samples, for a player reading the FIFO (for
  example ``aplay`` onto a sound card).  Until a reader opens it, frames are dropped (status says it waits); when the
  reader goes, the output waits for the next one, which gets a fresh header.  A sound card plays the samples on its
  own clock; a frame's samples are placed on the appliance's counter, so only a converter clocked from the
  appliance's oscillator keeps the zero crossings on the second.

Missing frames (seconds the appliance did not plan, or overruns) are filled with silence, so the time between the
frames in a file or stream stays right.
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import stat
import struct
import threading
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from appliance.leap import UtcTime
from appliance.protocol.irig.timecode import MARK
from appliance.protocol.irig.waveform import am_frame_values
from appliance.outputs.pulses import AmBlock

log = logging.getLogger(__name__)

QUEUE_FRAMES = 4
LEAD_IN_NS = 10_000_000  # one element: the previous frame's P0
MAX_FILL_S = 4  # at most this much silence for a gap; a longer gap starts a new segment or stream instead
RETRY_S = 1.0


def stream_header(rate_hz: int) -> bytes:
    """A WAV header for a stream of unknown length (RIFF and data sizes at their largest)."""
    fmt = struct.pack("<HHIIHH", 1, 1, rate_hz, 2 * rate_hz, 2, 16)
    return b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + \
        b"data" + struct.pack("<I", 0xFFFFFFFF)


def lead_in(block: AmBlock) -> bytes:
    """The 10 ms before a block's first sample, on the same grid: the end of a frame (its last element, P0, is a
    position identifier in every frame), for a segment or stream that starts without the previous frame."""
    n = LEAD_IN_NS * block.rate_hz // 1_000_000_000
    period = 1e9 / block.rate_hz
    tau = block.first_tau_ns + 1e9 - n * period + np.arange(n) * period
    return am_frame_values([MARK] * 100, tau).astype("<i2").tobytes()


class _Segment:
    """A WAV file being written; wave brings the header's sizes up to date after each write."""

    def __init__(self, name: Path, rate_hz: int):
        self._file = open(name, "wb")
        try:
            self._wave = wave.open(self._file, "wb")
            self._wave.setnchannels(1)
            self._wave.setsampwidth(2)
            self._wave.setframerate(rate_hz)
        except BaseException:
            self._file.close()
            raise

    def writeframes(self, data: bytes) -> None:
        self._wave.writeframes(data)

    def close(self) -> None:
        try:
            self._wave.close()
        finally:
            self._file.close()


class WavSink:
    def __init__(self, path: str, rate_hz: int, segment_s: int, keep: int, utc_of: Callable[[int], UtcTime]):
        """``utc_of``: the UTC label of a served instant (for segment names and boundaries)."""
        self.path, self.rate_hz, self.segment_s, self.keep, self.utc_of = Path(path), rate_hz, segment_s, keep, utc_of
        self.stream = self.path.exists() and stat.S_ISFIFO(self.path.stat().st_mode)
        self._queue: queue.Queue[AmBlock | None] = queue.Queue(QUEUE_FRAMES)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stats: dict[str, Any] = {"frames": 0, "overruns": 0, "silence_s": 0.0, "segments": 0, "current": None,
                                       "error": None, "streams": 0}
        self._out: Any = None  # wave.Wave_write (segments) or a binary file (stream)
        self._next_index: int | None = None  # grid index of the next sample due in the output
        self._segment_key: tuple[int, int, int, int] | None = None
        self._tail = b""  # the last LEAD_IN_NS of samples written, for the next segment's lead-in

    # --- the appliance's side -------------------------------------------------------------------------------
    def start(self) -> None:
        if not self.stream:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # reported in status; each frame tries again, the appliance carries on
                self._fail(exc)
        self._thread = threading.Thread(target=self._run, name="irig-am-wav", daemon=True)
        self._thread.start()

    def emit(self, block: AmBlock) -> None:
        try:
            self._queue.put_nowait(block)
        except queue.Full:
            with self._lock:
                self._stats["overruns"] += 1

    def close(self) -> None:
        if self._thread is not None:
            while True:
                try:
                    self._queue.put(None, timeout=0.5)
                    break
                except queue.Full:
                    self._drain_one()
            self._thread.join(timeout=5)
            self._thread = None
        self._close_out()

    def status(self) -> dict[str, Any]:
        with self._lock:
            stats = dict(self._stats)
        return {"kind": "wav", "path": str(self.path), "mode": "stream" if self.stream else "segments",
                "rate_hz": self.rate_hz, **({} if self.stream else {"segment_s": self.segment_s, "keep": self.keep}),
                **stats}

    # --- the writer thread ------------------------------------------------------------------------------------
    def _drain_one(self) -> None:
        try:
            self._queue.get_nowait()
        except queue.Empty:
            pass

    def _run(self) -> None:
        while True:
            block = self._queue.get()
            if block is None:
                return
            try:
                self._write(block)
                self._set(error=None)
            except OSError as exc:
                self._fail(exc)

    def _set(self, **values: Any) -> None:
        with self._lock:
            self._stats.update(values)

    def _fail(self, exc: OSError) -> None:
        message = f"{exc.filename or self.path}: {exc.strerror or exc}"
        with self._lock:
            first = self._stats["error"] != message
            self._stats["error"] = message
        if first:
            log.error("IRIG-B AM output: %s", message)
        self._close_out()

    def _write(self, block: AmBlock) -> None:
        gap = 0 if self._next_index is None else block.first_index - self._next_index
        if self._out is not None and (gap > MAX_FILL_S * self.rate_hz or gap < 0 or self._due_new_segment(block)):
            self._close_out()
        if self._out is None:
            if not self._open(block):
                return
            gap = 0
        data = block.samples
        if gap > 0:
            with self._lock:
                self._stats["silence_s"] += gap / self.rate_hz
            data = bytes(2 * gap) + data
        if not self._put(data):
            return
        self._next_index = block.first_index + len(block.samples) // 2
        self._tail = (self._tail + data)[-2 * (LEAD_IN_NS * self.rate_hz // 1_000_000_000):]
        with self._lock:
            self._stats["frames"] += 1

    def _key(self, block: AmBlock) -> tuple[int, int, int, int]:
        """Which segment a frame belongs in: segments start on multiples of segment_s into the UTC day."""
        u = self.utc_of(block.served_ns)
        return u.year, u.month, u.day, (u.hour * 3600 + u.minute * 60 + u.second) // self.segment_s

    def _due_new_segment(self, block: AmBlock) -> bool:
        return not self.stream and self._key(block) != self._segment_key

    def _open(self, block: AmBlock) -> bool:
        lead = self._tail if self._next_index == block.first_index else lead_in(block)
        if self.stream:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no reader yet
                    self._set(current="waiting for a reader")
                    self._next_index = None
                    return False
                raise
            os.set_blocking(fd, True)
            out: BinaryIO = os.fdopen(fd, "wb", buffering=0)
            try:
                out.write(stream_header(self.rate_hz) + lead)
            except OSError:
                out.close()
                raise
            self._out = out
            with self._lock:
                self._stats["streams"] += 1
                self._stats["current"] = "streaming"
            return True
        utc = self.utc_of(block.served_ns)
        name = self.path.with_name(f"{self.path.stem}-{utc.year:04d}{utc.month:02d}{utc.day:02d}T{utc.hour:02d}"
                                   f"{utc.minute:02d}{utc.second:02d}Z.wav")
        self._out = _Segment(name, self.rate_hz)
        self._out.writeframes(lead)
        self._segment_key = self._key(block)
        with self._lock:
            self._stats["segments"] += 1
            self._stats["current"] = str(name)
        self._prune()
        return True

    def _put(self, data: bytes) -> bool:
        if self.stream:
            try:
                self._out.write(data)
            except BrokenPipeError:  # the reader went: wait for the next one
                self._close_out()
                self._next_index = None
                self._set(current="waiting for a reader")
                return False
        else:
            self._out.writeframes(data)
        return True

    def _close_out(self) -> None:
        out, self._out = self._out, None
        if out is not None:
            try:
                out.close()
            except OSError:
                pass

    def _prune(self) -> None:
        segments = sorted(self.path.parent.glob(f"{self.path.stem}-*.wav"))
        for old in segments[:-self.keep]:
            try:
                old.unlink()
            except OSError as exc:
                log.warning("IRIG-B AM output: cannot remove the old segment %s: %s", old, exc.strerror)
