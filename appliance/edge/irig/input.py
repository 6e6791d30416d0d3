"""IRIG-B input from the outside world: AM from a WAV stream, DC level shift from a GPIO line.

Edge module (reader threads, files and FIFOs, the GPIO character device, the host clock).  Both hand what they read
to an ``IrigDecoder`` (pure core) and each ``PairedTime`` it yields to ``on_time`` through ``post`` (the appliance
passes ``loop.call_soon_threadsafe``: ``post(on_time, paired)``).  The local counter here is the host's
CLOCK_REALTIME, as for the Linux PPS reader.

AM (``IrigWavInput``): 16-bit PCM WAV from a FIFO (one stream per writer, each with its own header; the input waits
for the next writer when one goes), from standard input (``-``, e.g. ``arecord -t wav -f S16_LE -r 48000 | appliance
...``), or from a regular file (read as it grows with ``follow``, else to its end).  The first sample's instant is the
arrival time of the first chunk minus that chunk's duration; every later sample is placed from it by its count at
the nominal rate.  Data cannot arrive before it was captured, so a later chunk that arrives earlier than that
placement says moves the anchor earlier, by up to ``MAX_CATCH_UP_NS`` in all: the least-latency chunk wins, so a
backlog in the pipe when the input starts reading, or a slow first read, is not kept as a phase error, and a writer
faster than real time (which says nothing of phase) cannot drag the anchor without bound.  The decoder keeps its first
placement; the decoded edges are handed over moved by the difference.  Limitation: without a sound card that
timestamps its samples, the phase is only as good as that anchor (pipe and driver buffering, scheduling:
milliseconds) and drifts with the card's rate error, so the decoder's default AM uncertainty is 5 ms.  Data arriving
more than ``REANCHOR_LAG_NS`` later than its samples' place says (lost samples, a stalled writer) anchors the stream
again, which the decoder sees as a new stream.

DC level shift (``IrigGpioInput``): both edges of a GPIO input line as gpiod v2 edge events stamped by the kernel on
CLOCK_REALTIME.  A chip or line that cannot be requested (absent, busy, no binding) is kept in ``error`` and retried
every 16 s, as for the GPIO output.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import select
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from appliance.refs.irig_in import MAX_RATE_HZ, MIN_RATE_HZ, IrigDecoder
from appliance.refs.model import PairedTime
from appliance.units import NS_PER_S

log = logging.getLogger("appliance.refs.irig_in")
RETRY_S = 16.0
REANCHOR_LAG_NS = NS_PER_S
MAX_CATCH_UP_NS = 250_000_000  # how much earlier than its first chunk's arrival a live stream's anchor may move
CHUNK_S = 0.05  # read this much audio at a time
POLL_S = 0.2  # how often a blocked reader looks at stop()
_OPEN_ENDED = 0x7FFF_0000  # a data size at least this large: a stream of unknown length

OnTime = Callable[[PairedTime], None]
Post = Callable[..., Any]  # post(fn, *args): run fn(*args) where the appliance wants it (its event loop)


def _call(fn: Callable[..., Any], *args: Any) -> None:
    fn(*args)


class WavStreamError(ValueError):
    """A stream that is not 16-bit PCM WAV; the message says what was found."""


class _Stream:
    """Bytes from a FIFO, a pipe or a regular file; ``read`` returns b"" at the end of the stream and None on stop."""

    def __init__(self, fd: int, regular: bool, follow: bool, stop: threading.Event, poll_s: float, path: str):
        self.fd, self.regular, self.follow, self.stop, self.poll_s, self.path = fd, regular, follow, stop, poll_s, path
        self.position = 0

    def read(self, n: int) -> bytes | None:
        while not self.stop.is_set():
            if not self.regular:
                ready = select.poll()
                ready.register(self.fd, select.POLLIN | select.POLLHUP)
                if not ready.poll(POLL_S * 1000):
                    continue
            try:
                data = os.read(self.fd, n)
            except BlockingIOError:
                continue
            if data or not (self.regular and self.follow) or self._replaced():
                self.position += len(data)
                return data
            self.stop.wait(self.poll_s)  # a growing file: wait for more
        return None

    def _replaced(self) -> bool:
        try:
            now, ours = os.stat(self.path), os.fstat(self.fd)
        except OSError:
            return False
        return (now.st_ino, now.st_dev) != (ours.st_ino, ours.st_dev) or now.st_size < self.position

    def read_exact(self, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            data = self.read(n - len(out))
            if data is None:
                return None
            if not data:
                raise EOFError
            out += data
        return out


def read_wav_header(stream: _Stream) -> tuple[int, int, int | None] | None:
    """(rate_hz, channels, data bytes or None for open-ended) from a WAV header, the stream left at the first sample;
    None on stop.  EOFError when the stream ends inside the header."""
    head = stream.read_exact(12)
    if head is None:
        return None
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise WavStreamError(f"not a WAV stream (starts {head[:12]!r})")
    fmt: tuple[int, int, int, int] | None = None
    while True:
        chunk = stream.read_exact(8)
        if chunk is None:
            return None
        kind, size = chunk[:4], struct.unpack("<I", chunk[4:])[0]
        if kind == b"data":
            if fmt is None:
                raise WavStreamError("the data chunk comes before the fmt chunk")
            return fmt[1], fmt[0], None if size == 0 or size >= _OPEN_ENDED else size
        if size >= _OPEN_ENDED:
            raise WavStreamError(f"a {kind!r} chunk of {size} bytes before the samples")
        body = stream.read_exact(size + size % 2)
        if body is None:
            return None
        if kind == b"fmt ":
            if size < 16:
                raise WavStreamError(f"a fmt chunk of {size} bytes")
            tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", body[:16])
            if tag == 0xFFFE and size >= 26:  # WAVE_FORMAT_EXTENSIBLE: the sub-format's first two bytes
                tag = struct.unpack("<H", body[24:26])[0]
            if tag != 1 or bits != 16 or channels < 1:
                raise WavStreamError(f"format {tag:#x}, {bits}-bit, {channels} channel(s): IRIG-B input takes "
                                     "16-bit PCM")
            if not MIN_RATE_HZ <= rate <= MAX_RATE_HZ:
                raise WavStreamError(f"{rate} samples/s: IRIG-B AM input takes {MIN_RATE_HZ} to {MAX_RATE_HZ}")
            fmt = (channels, rate, bits, tag)


class _Reader:
    """A thread reading the outside world into an ``IrigDecoder``; errors are kept and the source retried."""

    kind = ""

    def __init__(self, decoder: IrigDecoder, on_time: OnTime, post: Post, now_ns: Callable[[], int],
                 retry_s: float):
        self.decoder, self.on_time, self.post, self._now, self.retry_s = decoder, on_time, post, now_ns, retry_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.state = "stopped"
        self.error = ""
        self.paired = 0

    def start(self) -> None:
        self._stop.clear()
        self.state = "starting"
        self._thread = threading.Thread(target=self._run, name=f"irig-in-{self.decoder.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.state != "ended":
            self.state = "stopped"

    def _run(self) -> None:
        raise NotImplementedError

    def _fail(self, message: str) -> None:
        if message != self.error:
            log.error("IRIG-B input %s: %s (retrying every %g s)", self.decoder.name, message, self.retry_s)
        self.error, self.state = message, "error"

    def _hand_over(self, paired: list[PairedTime]) -> None:
        for p in paired:
            self.paired += 1
            self.post(self.on_time, p)

    def _decoder_status(self) -> dict[str, Any]:
        with self._lock:
            return self.decoder.snapshot()


class IrigWavInput(_Reader):
    """AM IRIG-B from a WAV stream: ``source`` is a FIFO, a regular file or ``-`` (standard input)."""

    kind = "am-wav"

    def __init__(self, decoder: IrigDecoder, source: str, on_time: OnTime, post: Post = _call, follow: bool = True,
                 now_ns: Callable[[], int] = time.time_ns, retry_s: float = RETRY_S, poll_s: float = 0.05):
        super().__init__(decoder, on_time, post, now_ns, retry_s)
        self.source, self.follow, self.poll_s = source, follow, poll_s
        self.streams = 0
        self.samples = 0
        self.reanchors = 0
        self.rate_hz: int | None = None
        self.anchor_ns: int | None = None  # the host instant of the current stream's first sample (least latency)
        self._decoder_anchor_ns = 0  # where the decoder placed the first sample (the first chunk's arrival)
        self.lag_ns: int | None = None  # arrival of the last chunk minus its last sample's place

    def _open(self) -> tuple[_Stream, bool]:
        """The stream, and whether another can follow it (a FIFO's next writer, a followed file replaced)."""
        if self.source == "-":
            return _Stream(sys.stdin.fileno(), False, False, self._stop, self.poll_s, "-"), False
        fifo = stat.S_ISFIFO(os.stat(self.source).st_mode)
        fd = os.open(self.source, os.O_RDONLY | (os.O_NONBLOCK if fifo else 0) | os.O_CLOEXEC)
        self.state = "waiting for a writer" if fifo else "reading"
        return _Stream(fd, not fifo, self.follow, self._stop, self.poll_s, self.source), fifo or self.follow

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                stream, again = self._open()
            except OSError as exc:
                self._fail(f"cannot open {self.source}: {exc.strerror or exc}")
                self._stop.wait(self.retry_s)
                continue
            try:
                self._read_stream(stream)
            except EOFError:
                pass  # a writer that went inside the header
            except (OSError, WavStreamError) as exc:
                self._fail(f"{self.source}: {getattr(exc, 'strerror', None) or exc}")
                self._stop.wait(self.retry_s if stream.regular else POLL_S)
            finally:
                if self.source != "-":
                    os.close(stream.fd)
            if not again and not self.error:
                self.state = "ended"
                return
            if self.source == "-":
                return  # standard input cannot be read again: the error stays in the status

    def _read_stream(self, stream: _Stream) -> None:
        header = read_wav_header(stream)
        if header is None:
            return
        rate, channels, size = header
        block = 2 * channels
        if size is not None and (not stream.regular or self.follow):
            size = None  # a stream's or a growing file's size says nothing yet
        if stream.regular and self.follow:  # live: what is already in the file was not captured just now
            here = os.lseek(stream.fd, 0, os.SEEK_CUR)
            skip = (os.fstat(stream.fd).st_size - here) // block * block
            stream.position = os.lseek(stream.fd, here + skip, os.SEEK_SET)
        self.rate_hz, self.anchor_ns, self.state, self.error = rate, None, "streaming", ""
        self.streams += 1
        with self._lock:
            self.decoder.new_stream()
        chunk_bytes = max(block, int(rate * CHUNK_S) * block)
        count, rest = 0, b""
        while size is None or size > 0:
            data = stream.read(chunk_bytes if size is None else min(chunk_bytes, size))
            if not data:
                return
            if size is not None:
                size -= len(data)
            data = rest + data
            usable = len(data) - len(data) % block
            rest = data[usable:]
            if not usable:
                continue
            samples = np.frombuffer(data[:usable], "<i2")[::channels]
            count = self._feed(samples, count, rate, live=not stream.regular or self.follow)

    def _feed(self, samples: np.ndarray, count: int, rate: int, live: bool = True) -> int:
        """Place a chunk on the host clock and decode it; the stream's sample count after it.  ``live``: the chunk
        arrives as it is captured (a FIFO, standard input, a followed file), so its arrival bounds its place."""
        arrival = self._now()
        n = len(samples)
        if self.anchor_ns is not None:
            self.lag_ns = arrival - (self.anchor_ns + (count + n) * NS_PER_S // rate)
            if self.lag_ns > REANCHOR_LAG_NS:
                self.reanchors += 1
                self.anchor_ns = None
            elif live and self.lag_ns < 0:  # this chunk came through faster than any before: the anchor was late
                self.anchor_ns = max(self.anchor_ns + self.lag_ns, self._decoder_anchor_ns - MAX_CATCH_UP_NS)
                # 0 once the anchor has caught up; still negative (ahead of its placement) when the catch-up cap
                # held it back: a writer faster than real time, which status then shows
                self.lag_ns = arrival - (self.anchor_ns + (count + n) * NS_PER_S // rate)
        if self.anchor_ns is None:  # the first chunk (or a stalled stream): it ends now
            self.anchor_ns = self._decoder_anchor_ns = arrival - (count + n) * NS_PER_S // rate
            self.lag_ns = 0
        first_raw_ns = self._decoder_anchor_ns + count * NS_PER_S // rate
        with self._lock:
            paired = self.decoder.feed_samples(samples, first_raw_ns, rate)
        self.samples += n
        shift_ns = self.anchor_ns - self._decoder_anchor_ns
        self._hand_over([dataclasses.replace(p, edge_raw_ns=p.edge_raw_ns + shift_ns) for p in paired]
                        if shift_ns else paired)
        return count + n

    def status(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source, "state": self.state, "error": self.error or None,
                "streams": self.streams, "rate_hz": self.rate_hz, "samples": self.samples,
                "anchor_ns": self.anchor_ns, "lag_ms": None if self.lag_ns is None else round(self.lag_ns / 1e6, 1),
                "reanchors": self.reanchors, "paired": self.paired, "decoder": self._decoder_status()}


EdgeEvents = Callable[[float], list[tuple[int, int]]]  # wait up to timeout_s -> [(CLOCK_REALTIME ns, level)]


def gpiod_edge_events(chip: str, offset: int, consumer: str) -> tuple[EdgeEvents, Callable[[], None]]:
    """(wait for edges, release) for one input line, both edges stamped on CLOCK_REALTIME, through gpiod v2."""
    try:
        import gpiod
        from gpiod.line import Clock, Direction, Edge
    except ImportError:
        raise OSError("the gpiod Python binding (libgpiod 2) is not installed") from None
    if not os.path.exists(chip):
        raise OSError(f"no GPIO chip {chip}")
    request = gpiod.request_lines(chip, consumer=consumer, config={offset: gpiod.LineSettings(
        direction=Direction.INPUT, edge_detection=Edge.BOTH, event_clock=Clock.REALTIME)})
    rising = gpiod.EdgeEvent.Type.RISING_EDGE

    def wait(timeout_s: float) -> list[tuple[int, int]]:
        if not request.wait_edge_events(timeout_s):
            return []
        return [(e.timestamp_ns, int(e.event_type == rising)) for e in request.read_edge_events()]
    return wait, request.release


class IrigGpioInput(_Reader):
    """DC level shift IRIG-B from a GPIO input line (``chip``: /dev/gpiochipN, ``offset``: the line)."""

    kind = "dcls-gpio"

    def __init__(self, decoder: IrigDecoder, chip: str, offset: int, on_time: OnTime, post: Post = _call,
                 consumer: str = "appliance",
                 events: Callable[[str, int, str], tuple[EdgeEvents, Callable[[], None]]] = gpiod_edge_events,
                 now_ns: Callable[[], int] = time.time_ns, retry_s: float = RETRY_S):
        super().__init__(decoder, on_time, post, now_ns, retry_s)
        self.chip, self.offset, self.consumer, self._events = chip, offset, consumer, events
        self.edges = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                wait, release = self._events(self.chip, self.offset, self.consumer)
            except (OSError, ValueError) as exc:
                self._fail(f"cannot read {self.chip} line {self.offset}: {exc}")
                self._stop.wait(self.retry_s)
                continue
            self.error, self.state = "", "reading"
            try:
                self._read(wait)
            except (OSError, ValueError) as exc:
                self._fail(f"reading {self.chip} line {self.offset}: {exc}")
                self._stop.wait(self.retry_s)
            finally:
                try:
                    release()
                except OSError:
                    pass

    def _read(self, wait: EdgeEvents) -> None:
        while not self._stop.is_set():
            edges = wait(POLL_S)
            if not edges:
                continue
            self.edges += len(edges)
            with self._lock:
                paired = self.decoder.feed_edges(edges)
            self._hand_over(paired)

    def status(self) -> dict[str, Any]:
        return {"kind": self.kind, "chip": self.chip, "line": self.offset, "state": self.state,
                "error": self.error or None, "edges": self.edges, "paired": self.paired,
                "decoder": self._decoder_status()}
