"""An IRIG-B stream rendered by the appliance itself and played back into its input decodes to the right time.

The signal comes out of the appliance's real output paths (``appliance irig render`` to a WAV or edge file, the live
AM output's FIFO writer ``WavSink``) and, through ALSA's ``arecord`` where it is installed, out of a capture device;
it goes into the IRIG-B input's edge (``IrigWavInput`` on a file, a FIFO or standard input; ``IrigGpioInput`` with the
GPIO device replaced by a replay of the edge file, this machine having no GPIO chip).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import threading
import time
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from appliance import leap
from appliance.edge.irig import files
from appliance.protocol.irig.timecode import CodedExpression, encode, fields_for_second
from appliance.edge.irig.wavout import WavSink
from appliance.outputs.pulses import AmPlanner
from appliance.refs.irig_in import IrigDecoder
from appliance.edge.irig.input import EdgeEvents, IrigGpioInput, IrigWavInput, gpiod_edge_events
from appliance.refs.model import PairedTime
from harness.peers import require
from harness.procs import ENV, appliance

pytestmark = [pytest.mark.interop]
NS = 1_000_000_000
TABLE = leap._default_table()
START = "2016-12-31T23:59:57Z"  # through the leap second 23:59:60
S0 = leap.utc_fields_to_tai(2016, 12, 31, 23, 59, 57, 0, TABLE)
RATE = 48_000
LEAD = RATE // 100  # the renderer's lead-in: the first on-time point is at this sample


def render(path: Path, fmt: str, seconds: int, *extra: str) -> None:
    kind = "--wav" if fmt.startswith("B12") else "--edges"
    proc = appliance("irig", "render", "--format", fmt, "--start", START, "--seconds", str(seconds), kind, str(path),
                     *extra)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err


def decoder(digit: int = 4) -> IrigDecoder:
    return IrigDecoder("irig-in", CodedExpression(digit), TABLE, 2016)


class Collected:
    def __init__(self) -> None:
        self.times: list[PairedTime] = []
        self.threads: set[str] = set()
        self.cond = threading.Condition()

    def __call__(self, paired: PairedTime) -> None:
        with self.cond:
            self.times.append(paired)
            self.threads.add(threading.current_thread().name)
            self.cond.notify_all()

    def wait(self, n: int, timeout_s: float = 20.0) -> list[PairedTime]:
        with self.cond:
            self.cond.wait_for(lambda: len(self.times) >= n, timeout_s)
            return list(self.times)


def wait_until(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.02)


def labels(times: list[PairedTime]) -> list[str]:
    return [str(leap.tai_to_utc(p.tai_ns, TABLE))[11:19] for p in times]


def test_cli_rendered_wav_file_into_the_input_on_the_event_loop(tmp_path: Path) -> None:
    render(tmp_path / "b124.wav", "B124", 6, "--rate", str(RATE))
    got = Collected()
    now = 1_700_000_000_000_000_000

    async def main() -> IrigWavInput:
        loop = asyncio.get_running_loop()
        source = IrigWavInput(decoder(), str(tmp_path / "b124.wav"), got, post=loop.call_soon_threadsafe,
                              follow=False, now_ns=lambda: now)
        source.start()
        while len(got.times) < 5 or source.state != "ended":
            await asyncio.sleep(0.02)
        source.stop()
        return source

    source = asyncio.run(asyncio.wait_for(main(), 30))
    assert got.threads == {threading.main_thread().name}  # handed over on the loop, not on the reader thread
    assert [p.tai_ns for p in got.times] == [S0 + k * NS for k in range(1, 6)]
    assert labels(got.times) == ["23:59:58", "23:59:59", "23:59:60", "00:00:00", "00:00:01"]
    s = source.status()
    anchor = s["anchor_ns"]
    assert anchor == now - int(RATE * 0.05) * NS // RATE  # the first chunk (50 ms) arrived "now"
    for k, p in enumerate(got.times, 1):  # each on-time point on its sample, placed at the nominal rate
        assert abs(p.edge_raw_ns - (anchor + (LEAD + k * RATE) * NS // RATE)) <= 20
    assert s["state"] == "ended" and s["streams"] == 1 and s["error"] is None and s["samples"] == LEAD + 6 * RATE
    assert s["decoder"]["frames"] == 6 and not any(s["decoder"]["rejects"].values())


def test_a_live_streams_late_first_read_is_not_kept_as_phase_error(tmp_path: Path) -> None:
    """Live audio (a FIFO, standard input) read 30 ms late at first (a backlog in the pipe, a slow start), then as it
    is captured: the anchor follows the least-latency chunk, so the on-time points land on their true instants."""
    render(tmp_path / "b124.wav", "B124", 6, "--rate", str(RATE))
    samples, rate = files.read_wav(tmp_path / "b124.wav")
    t0 = 1_700_000_000_000_000_000  # the true instant of the stream's first sample
    chunk = RATE // 20
    got = Collected()
    clock = {"now": 0}
    source = IrigWavInput(decoder(), "-", got, now_ns=lambda: clock["now"])
    count = 0
    for first in range(0, len(samples), chunk):
        block = np.asarray(samples[first:first + chunk], dtype=np.int16)
        end_ns = t0 + (first + len(block)) * NS // RATE  # the block is whole at its last sample's instant
        clock["now"] = end_ns + (30_000_000 if first == 0 else 400_000)  # late at first, then 0.4 ms
        count = source._feed(block, count, rate)
    assert len(got.times) >= 5
    for p in got.times:  # on-time points every second from the lead-in on, placed from the best chunk's latency
        k = round((p.edge_raw_ns - t0 - LEAD * NS // RATE) / NS)
        assert abs(p.edge_raw_ns - (t0 + (LEAD + k * RATE) * NS // RATE) - 400_000) <= 1_000, (k, p)
    assert source.status()["reanchors"] == 0 and source.status()["lag_ms"] == 0


def test_a_writer_faster_than_real_time_moves_the_anchor_by_at_most_the_cap_and_shows_as_negative_lag(
        tmp_path: Path) -> None:
    """A live stream written twice as fast as its sample rate: the anchor follows it back by 250 ms at most, and the
    status shows the chunks arriving ahead of their place (negative lag) instead of a lag of 0."""
    from appliance.edge.irig.input import MAX_CATCH_UP_NS

    render(tmp_path / "b124.wav", "B124", 3, "--rate", str(RATE))
    samples, rate = files.read_wav(tmp_path / "b124.wav")
    chunk = RATE // 20  # 50 ms of audio, arriving every 25 ms
    clock = {"now": 1_700_000_000_000_000_000}
    source = IrigWavInput(decoder(), "-", Collected(), now_ns=lambda: clock["now"])
    count = 0
    for first in range(0, len(samples), chunk):
        clock["now"] += 25_000_000
        count = source._feed(np.asarray(samples[first:first + chunk], dtype=np.int16), count, rate)
    assert source._decoder_anchor_ns - source.anchor_ns == MAX_CATCH_UP_NS
    ahead_ns = clock["now"] - (source.anchor_ns + len(samples) * NS // RATE)  # the last chunk against its place
    assert ahead_ns < -1_000_000_000  # 3 s of audio (plus lead-in) written in half the time, less the cap
    assert source.status()["lag_ms"] == round(ahead_ns / 1e6, 1) and source.status()["reanchors"] == 0


def test_the_live_am_outputs_fifo_writer_into_the_input(tmp_path: Path) -> None:
    """WavSink streams into a FIFO the input reads; one stream per writer, each with its own header."""
    fifo = tmp_path / "irig.fifo"
    os.mkfifo(fifo)
    got = Collected()
    source = IrigWavInput(decoder(), str(fifo), got)
    source.start()
    sink = WavSink(str(fifo), RATE, 60, 5, lambda ns: leap.tai_to_utc(ns, TABLE))
    try:
        wait_until(lambda: source.state == "waiting for a writer")
        planner = AmPlanner(RATE)
        blocks = [planner.block(S0 + k * NS, encode(fields_for_second(S0 + k * NS, TABLE, 3), CodedExpression(4)), 0,
                                lambda served: served - S0) for k in range(8)]
        sink.start()
        for n, block in enumerate(blocks, 1):
            sink.emit(block)
            wait_until(lambda n=n: sink.status()["frames"] >= n)
        sink.close()  # the writer goes: the input waits for the next
        times = got.wait(7)
        wait_until(lambda: source.state == "waiting for a writer")
        assert sink.status()["streams"] == 1 and sink.status()["overruns"] == 0
        # the stream's lead-in completes the first frame's P0: every frame but the first is confirmed
        assert [p.tai_ns for p in times] == [b.served_ns for b in blocks[1:]]
        assert labels(times)[:4] == ["23:59:58", "23:59:59", "23:59:60", "00:00:00"]
        gaps = np.diff([p.edge_raw_ns for p in times])
        assert np.all(np.abs(gaps - NS) <= 100), gaps  # the samples' own spacing: 1 s at the nominal rate

        render(tmp_path / "again.wav", "B124", 3, "--rate", str(RATE))  # a second writer, a fresh header
        with open(fifo, "wb") as writer:
            writer.write((tmp_path / "again.wav").read_bytes())
        times = got.wait(9)
        assert [p.tai_ns for p in times[7:]] == [S0 + NS, S0 + 2 * NS]
        wait_until(lambda: source.status()["streams"] == 2 and source.state == "waiting for a writer")
        assert source.status()["error"] is None
    finally:
        sink.close()
        source.stop()
    assert source.state == "stopped"


ASOUNDRC = """pcm.irigin {{
  type file
  slave.pcm "null"
  file "/dev/null"
  infile "{raw}"
  format "raw"
}}
"""


def test_arecord_capture_into_the_input(tmp_path: Path) -> None:
    """``arecord -t wav`` from a capture device (ALSA's file plugin playing the rendered samples in) into a FIFO the
    input reads: the header arecord writes for a stream, and its chunking, decode to the rendered seconds."""
    arecord = require("arecord")
    render(tmp_path / "b122.wav", "B122", 6, "--rate", str(RATE))
    with wave.open(str(tmp_path / "b122.wav")) as w:
        (tmp_path / "in.raw").write_bytes(w.readframes(w.getnframes()))
    home = tmp_path / "home"
    home.mkdir()
    (home / ".asoundrc").write_text(ASOUNDRC.format(raw=tmp_path / "in.raw"))
    fifo = tmp_path / "capture.fifo"
    os.mkfifo(fifo)
    got = Collected()
    source = IrigWavInput(IrigDecoder("irig-in", CodedExpression(2), TABLE, 2016), str(fifo), got)
    source.start()
    try:
        wait_until(lambda: source.state == "waiting for a writer")
        with open(fifo, "wb") as out:
            proc = subprocess.run([arecord, "-q", "-D", "irigin", "-t", "wav", "-f", "S16_LE", "-r", str(RATE),
                                   "-c", "1", "-s", str(LEAD + 5 * RATE)], stdout=out, stderr=subprocess.PIPE,
                                  env={**os.environ, "HOME": str(home)}, timeout=30, check=False)
        assert proc.returncode == 0, proc.stderr
        times = got.wait(4)
    finally:
        source.stop()
    assert [p.tai_ns for p in times] == [S0 + k * NS for k in range(1, 5)]  # frames 0-4 captured, 1-4 confirmed
    gaps = np.diff([p.edge_raw_ns for p in times])
    assert np.all(np.abs(gaps - NS) <= 100), gaps


STDIN_READER = """
import json, sys, time
from appliance import leap
from appliance.protocol.irig.timecode import CodedExpression
from appliance.refs.irig_in import IrigDecoder
from appliance.edge.irig.input import IrigWavInput
out = []
source = IrigWavInput(IrigDecoder("irig-in", CodedExpression(4), leap._default_table(), 2016), "-", out.append)
source.start()
while source.state != "ended":
    time.sleep(0.02)
source.stop()
print(json.dumps({"tai": [p.tai_ns for p in out], "status": source.status()}))
"""


def test_a_wav_stream_on_standard_input(tmp_path: Path) -> None:
    """``... | appliance``: a pipe on standard input, read to its end."""
    render(tmp_path / "b124.wav", "B124", 4, "--rate", "16000")
    with open(tmp_path / "b124.wav", "rb") as wav:
        proc = subprocess.run([sys.executable, "-c", STDIN_READER], stdin=wav, capture_output=True, text=True,
                              env=ENV, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["tai"] == [S0 + k * NS for k in range(1, 4)]
    assert result["status"]["rate_hz"] == 16000 and result["status"]["state"] == "ended"


def test_a_growing_file_is_followed_from_its_live_end(tmp_path: Path) -> None:
    render(tmp_path / "b124.wav", "B124", 5, "--rate", str(RATE))
    with wave.open(str(tmp_path / "b124.wav")) as w:
        samples = w.readframes(w.getnframes())
    path = tmp_path / "growing.wav"
    got = Collected()
    source = IrigWavInput(decoder(), str(path), got, retry_s=0.05, poll_s=0.01)
    source.start()
    try:
        wait_until(lambda: "cannot open" in (source.error or ""))  # not there yet: retried
        with open(path, "wb") as f, wave.open(f, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(b"\1\0" * 4_800)  # what is in the file before the input opens it is skipped
            f.flush()
            wait_until(lambda: source.state == "streaming")
            step = 2 * 4_001
            for i in range(0, len(samples), step):
                w.writeframes(samples[i:i + step])
                f.flush()
                time.sleep(0.002)
            times = got.wait(4)
    finally:
        source.stop()
    assert source.status()["samples"] == len(samples) // 2
    assert [p.tai_ns for p in times] == [S0 + k * NS for k in range(1, 5)]


def test_cli_rendered_dcls_edges_through_the_gpio_input(tmp_path: Path) -> None:
    """B004 as the CLI writes it, replayed as GPIO edge events in kernel-sized batches; the line cannot be had at
    first (retried), then every confirmed frame lands exactly on its rising edge."""
    render(tmp_path / "b004.edges", "B004", 8)
    edges, header = files.read_edges(tmp_path / "b004.edges")
    assert header["format"] == "B004"
    raw0 = 1_700_000_000_123_456_789
    events = [(raw0 + e.t_ns, e.level) for e in edges]
    rng = random.Random(4)
    batches = []
    while events:
        n = rng.randint(1, 64)
        batches.append(events[:n])
        events = events[n:]
    attempts: list[str] = []
    released = threading.Event()

    def line(chip: str, offset: int, consumer: str) -> tuple[EdgeEvents, Callable[[], None]]:  # gpiod's stand-in
        attempts.append(f"{chip}:{offset}:{consumer}")
        if len(attempts) == 1:
            raise OSError("line busy")

        def wait(timeout_s: float) -> list[tuple[int, int]]:
            if batches:
                return batches.pop(0)
            time.sleep(timeout_s / 20)
            return []
        return wait, released.set

    got = Collected()
    source = IrigGpioInput(decoder(), "/dev/gpiochip7", 17, got, events=line, retry_s=0.05)
    source.start()
    try:
        times = got.wait(6)
        wait_until(lambda: not batches)
        status = source.status()
    finally:
        source.stop()
    assert attempts == ["/dev/gpiochip7:17:appliance"] * 2 and released.is_set()
    # the file starts on frame 0's reference marker with no P0 before it: frame 1 is the first read, 2 the first sure
    assert [(p.edge_raw_ns, p.tai_ns) for p in times] == [(raw0 + k * NS, S0 + k * NS) for k in range(2, 8)]
    assert status["state"] == "reading" and status["error"] is None and status["edges"] == len(edges)
    assert status["decoder"]["frames"] == 7 and status["decoder"]["last_fields"]["time_quality"] == 3


def test_a_missing_gpio_binding_or_chip_is_said_plainly_and_retried(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="gpiod Python binding|no GPIO chip"):
        gpiod_edge_events(str(tmp_path / "gpiochip-missing"), 3, "appliance")
    source = IrigGpioInput(decoder(), str(tmp_path / "gpiochip-missing"), 3, Collected(), retry_s=0.05)
    source.start()
    try:
        wait_until(lambda: source.state == "error")
        assert source.status()["error"].startswith(f"cannot read {tmp_path / 'gpiochip-missing'} line 3:")
    finally:
        source.stop()


@pytest.mark.parametrize("width,rate,message", [(1, RATE, "16-bit PCM"), (2, 4_000, "8000 to 192000")])
def test_a_wav_the_input_cannot_take_is_reported(tmp_path: Path, width: int, rate: int, message: str) -> None:
    path = tmp_path / "bad.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(b"\x80" * 1000)
    source = IrigWavInput(decoder(), str(path), Collected(), follow=False, retry_s=0.05)
    source.start()
    try:
        wait_until(lambda: source.state == "error")
        assert message in source.status()["error"]
    finally:
        source.stop()
