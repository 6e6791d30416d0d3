"""The live IRIG-B AM output: samples planned on the counter's grid (AmPlanner), and the WAV sink that writes them to
segment files or a FIFO stream."""

from __future__ import annotations

import os
import struct
import threading
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from appliance import leap
from appliance.protocol.irig.timecode import CodedExpression, encode, fields_for_second, tai_of
from appliance.protocol.irig.waveform import elements_from_pulses, frames_from_elements, pulses_from_samples
from appliance.edge.irig.wavout import WavSink, lead_in, stream_header
from appliance.outputs.pulses import AmBlock, AmPlanner, IrigConfig, TimeOutputs

NS = 1_000_000_000
TABLE = leap._default_table()
S0 = leap.utc_fields_to_tai(2026, 12, 31, 23, 59, 50, 0, TABLE)
RATE = 48_000


def raw_at_for(offset_ns: int, ppb: float):  # noqa: ANN201 - a served -> counter map of a clock off in phase and rate
    return lambda served: served + offset_ns + round((served - S0) * ppb * 1e-9)


def frame(second: int, digit: int = 4) -> list[int]:
    return encode(fields_for_second(second, TABLE, 1), CodedExpression(digit))


def plan(seconds: int, offset_ns: int = 0, ppb: float = 0.0, start: int = S0) -> list[AmBlock]:
    planner, raw_at = AmPlanner(RATE), raw_at_for(offset_ns, ppb)
    return [planner.block(start + k * NS, frame(start + k * NS), 0, raw_at) for k in range(seconds)]


def decode(blocks: list[AmBlock]) -> tuple[list, list[str], int]:
    lead = lead_in(blocks[0])
    samples = np.frombuffer(lead + b"".join(b.samples for b in blocks), "<i2").tolist()
    frames, problems = frames_from_elements(elements_from_pulses(pulses_from_samples(samples, RATE)),
                                            CodedExpression(4), 2026)
    return frames, problems, len(lead) // 2


@pytest.mark.parametrize("offset_ns,ppb", [(0, 0.0), (7_321, 0.0), (-13_007, 250.0), (20_000, -900.0)])
def test_each_reference_marker_crosses_zero_on_its_served_second(offset_ns: int, ppb: float) -> None:
    blocks = plan(12, offset_ns, ppb)  # through the new year
    assert all(a.first_index + len(a.samples) // 2 == b.first_index for a, b in zip(blocks, blocks[1:]))
    frames, problems, lead = decode(blocks)
    assert not problems and len(frames) == 12
    grid = AmPlanner(RATE)
    grid._origin_raw = blocks[0].first_raw_ns
    for f, block in zip(frames, blocks):
        assert tai_of(f.fields, TABLE) == block.served_ns
        # the crossing's counter instant, from the sample stream (a sample every 1/rate of the counter), against where the served second is on the counter
        on_time_raw = raw_at_for(offset_ns, ppb)(block.served_ns) - blocks[0].first_raw_ns  # small: floats will do
        assert abs(f.on_time_ns - lead * NS / RATE - on_time_raw) <= 20, (f, block.first_tau_ns)
    assert [f.fields.year for f in frames] == [2026] * 10 + [2027] * 2


def test_a_gap_skips_the_grid_ahead_and_a_small_step_stays_on_it() -> None:
    planner, raw_at = AmPlanner(RATE), raw_at_for(0, 0.0)
    a = planner.block(S0, frame(S0), 0, raw_at)
    b = planner.block(S0 + 5 * NS, frame(S0 + 5 * NS), 0, raw_at)  # four seconds unplanned
    assert b.first_index == a.first_index + 5 * RATE and b.first_raw_ns == planner.raw_of(b.first_index)
    stepped = raw_at_for(3_000, 0.0)  # the clock stepped back 3 µs: the frame starts a little later on the grid
    c = planner.block(S0 + 6 * NS, frame(S0 + 6 * NS), 0, stepped)
    assert c.first_index == b.first_index + len(b.samples) // 2
    with pytest.raises(ValueError, match="8000 to 192000"):
        IrigConfig(CodedExpression(2), sample_rate_hz=4_000)


def test_time_outputs_plan_am_blocks_with_the_local_time_and_say_so() -> None:
    from appliance.edge.irig.cli import offset_function

    got: list[AmBlock] = []
    outputs = TimeOutputs(irig=IrigConfig(CodedExpression(4), 0, RATE, offset_function("Asia/Kolkata"),
                                          "Asia/Kolkata"), irig_sink=got.append)
    outputs.on_second(S0 - NS // 2, raw_at_for(0, 0.0), True, 80, TABLE)
    assert [b.served_ns for b in got] == [S0]
    frames, problems, _ = decode(got + plan(1, start=S0 + NS))
    assert frames[0].fields.offset_half_hours == -11 and frames[0].fields.hour == 5  # 23:59:50 UTC is 05:29:50 IST
    assert outputs.status()["irig"] == {"enabled": True, "format": "B124", "timezone": "Asia/Kolkata",
                                        "sample_rate_hz": RATE, "cable_delay_ns": 0, "frames": 1, "lost": 0,
                                        "time_quality": 3}


def utc(served_ns: int) -> leap.UtcTime:
    return leap.tai_to_utc(served_ns, TABLE)


def feed(sink: WavSink, blocks: list[AmBlock]) -> None:
    """Hand the sink its blocks no faster than it writes them (the appliance hands it one a second)."""
    for block in blocks:
        done = sink.status()["frames"]
        sink.emit(block)
        wait_frames(sink, done + 1)


def wait_frames(sink: WavSink, n: int) -> None:
    end = time.monotonic() + 10
    while sink.status()["frames"] < n and time.monotonic() < end:
        time.sleep(0.01)
    assert sink.status()["frames"] >= n, sink.status()


def test_segments_each_decode_from_their_first_frame_and_old_ones_go(tmp_path: Path) -> None:
    blocks = plan(35, start=S0 - 5 * NS)  # 23:59:45 .. 00:00:19
    sink = WavSink(str(tmp_path / "am" / "irig.wav"), RATE, 10, 2, utc)
    sink.start()
    feed(sink, blocks)
    sink.close()
    names = sorted(p.name for p in (tmp_path / "am").iterdir())
    # segments start on a multiple of 10 s (the first when the output started); the oldest two were removed
    assert names == ["irig-20270101T000000Z.wav", "irig-20270101T000010Z.wav"]
    for name, first in zip(names, (S0 + 10 * NS, S0 + 20 * NS)):
        with wave.open(str(tmp_path / "am" / name)) as w:
            assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, RATE)
            samples = np.frombuffer(w.readframes(w.getnframes()), "<i2").tolist()
        frames, problems = frames_from_elements(elements_from_pulses(pulses_from_samples(samples, RATE)),
                                                CodedExpression(4), 2027)
        assert not problems
        assert [tai_of(f.fields, TABLE) for f in frames] == [first + k * NS for k in range(len(frames))]
        assert len(frames) == 10
    s = sink.status()
    assert s["segments"] == 4 and s["overruns"] == 0 and s["error"] is None and s["mode"] == "segments"


def test_a_missing_frame_is_filled_with_silence_and_the_segment_header_is_always_current(tmp_path: Path) -> None:
    blocks = plan(6)
    sink = WavSink(str(tmp_path / "irig.wav"), RATE, 60, 5, utc)
    sink.start()
    feed(sink, blocks[:2] + blocks[3:])
    path = Path(sink.status()["current"])
    with wave.open(str(path)) as w:  # still open for writing: the sizes in the header are already right
        n = w.getnframes()
        samples = np.frombuffer(w.readframes(n), "<i2").tolist()
    sink.close()
    assert n == 480 + sum(len(b.samples) // 2 for b in blocks)
    assert sink.status()["silence_s"] == pytest.approx(1.0, abs=1e-3)
    frames, problems = frames_from_elements(elements_from_pulses(pulses_from_samples(samples, RATE)),
                                            CodedExpression(4), 2026)
    assert [tai_of(f.fields, TABLE) for f in frames] == [S0, S0 + NS, S0 + 3 * NS, S0 + 4 * NS, S0 + 5 * NS]
    assert frames[2].on_time_ns - frames[1].on_time_ns == pytest.approx(2 * NS, abs=50)


def test_a_full_queue_counts_overruns_and_an_unwritable_path_is_reported(tmp_path: Path) -> None:
    sink = WavSink(str(tmp_path / "irig.wav"), RATE, 60, 5, utc)  # not started: nothing takes from the queue
    for block in plan(6):
        sink.emit(block)
    assert sink.status()["overruns"] == 2
    (tmp_path / "file").write_text("")
    bad = WavSink(str(tmp_path / "file" / "irig.wav"), RATE, 60, 5, utc)
    bad._thread = threading.Thread(target=bad._run, daemon=True)  # started without making the directory
    bad._thread.start()
    bad.emit(plan(1)[0])
    end = time.monotonic() + 5
    while bad.status()["error"] is None and time.monotonic() < end:
        time.sleep(0.01)
    bad.close()
    assert "file/irig-20261231T235950Z.wav" in bad.status()["error"] and "Not a directory" in bad.status()["error"]


def test_a_fifo_gets_one_stream_per_reader_and_waits_without_one(tmp_path: Path) -> None:
    fifo = tmp_path / "irig.fifo"
    os.mkfifo(fifo)
    blocks = plan(8)
    sink = WavSink(str(fifo), RATE, 60, 5, utc)
    sink.start()
    sink.emit(blocks[0])  # no reader: dropped
    end = time.monotonic() + 5
    while sink.status()["current"] != "waiting for a reader" and time.monotonic() < end:
        time.sleep(0.01)
    assert sink.status()["current"] == "waiting for a reader" and sink.status()["frames"] == 0
    got = bytearray()
    reader = threading.Thread(target=lambda: _read_all(os.open(fifo, os.O_RDONLY), got), daemon=True)  # as a
    # player does: the open waits for the writer
    reader.start()
    _wait_in_open(reader)  # a frame the sink has before the reader's open begins is dropped, as without a reader
    feed(sink, blocks[1:5])
    sink.close()
    reader.join(5)
    assert bytes(got[:44]) == stream_header(RATE)
    assert struct.unpack("<I", got[4:8])[0] == 0xFFFFFFFF
    samples = np.frombuffer(bytes(got[44:]), "<i2").tolist()
    frames, problems = frames_from_elements(elements_from_pulses(pulses_from_samples(samples, RATE)),
                                            CodedExpression(4), 2026)
    assert not problems and [tai_of(f.fields, TABLE) for f in frames] == [S0 + k * NS for k in range(1, 5)]
    s = sink.status()
    assert s["mode"] == "stream" and s["streams"] == 1


def _wait_in_open(thread: threading.Thread) -> None:
    """Until ``thread`` waits in a FIFO's open for a writer (Linux: its wait channel is ``wait_for_partner``)."""
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            if Path(f"/proc/self/task/{thread.native_id}/wchan").read_text().strip() == "wait_for_partner":
                return
        except OSError:
            pass
        time.sleep(0.005)
    raise AssertionError("the reader never reached the FIFO's open")


def _read_all(fd: int, into: bytearray) -> None:
    while chunk := os.read(fd, 65536):
        into += chunk
    os.close(fd)


@pytest.mark.parametrize("pairs,message", [
    ({"irig_out.format": "B124", "irig_out.sink": "gpio"}, "irig_out.sink=gpio cannot carry B124"),
    ({"irig_out.format": "B004", "irig_out.sink": "wav"}, "irig_out.sink=wav cannot carry B004"),
    ({"irig_out.format": "B004", "irig_out.timezone": "Mars/Olympus"}, "irig_out.timezone: unknown time zone"),
])
def test_settings_that_cannot_work_are_refused_at_start(pairs: dict[str, str], message: str) -> None:
    from appliance import config as cfg
    from appliance.runtime.outputs import PulseOutputs

    config = cfg.merge(cfg.defaults(), pairs, "test")
    with pytest.raises(ValueError, match=message):
        PulseOutputs.from_config(config)
    outputs = PulseOutputs.from_config(cfg.merge(cfg.defaults(), {"irig_out.format": "B127"}, "test"))
    assert outputs is not None
    assert outputs.status()["irig"]["format"] == "B127" and outputs.irig_record.blocks is not None
