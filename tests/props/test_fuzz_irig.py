"""Fuzzing the IRIG-B input: the time code decoder, the waveform demodulators, the live decoder and the WAV reader.

``test_irig_props.py`` already corrupts elements of valid frames.  Here: ``timecode.decode`` takes element lists of
any length and values (IrigDecodeError, never anything else; what it accepts re-encodes to the same fields);
``IrigFormat.parse`` takes any text (ValueError); the waveform decoders take arbitrary samples, edges and pulses; the
live ``IrigDecoder`` takes arbitrary and mutated DC level shift edges and AM samples, never raises, and never emits a
time that was not sent (for the expressions whose parity and straight binary seconds guard the frame); the input's
WAV header reader (``edge/irig/input.py``) and the IRIG file readers (``edge/irig/files.py``) take any bytes and
raise only their documented errors.  Budget: ``fuzzing.py``.
"""

from __future__ import annotations

import io
import os
import tempfile
import threading
import wave
from pathlib import Path

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from appliance import leap
from appliance.edge.irig import files
from appliance.edge.irig.input import IrigWavInput, WavStreamError, _Stream, read_wav_header
from appliance.protocol.irig.timecode import (ELEMENTS, CodedExpression, IrigDecodeError, IrigFormat, decode,
                                             encode, fields_for_second, tai_of)
from appliance.protocol.irig.waveform import (Edge, am_samples, dcls_edges, elements_from_pulses,
                                             frames_from_elements, pulses_from_edges, pulses_from_samples)
from appliance.refs.irig_in import IrigDecoder
from appliance.refs.model import PairedTime
from tests.props.fuzzing import FUZZ, apply_edits, edits, fuzz, mutated, tokens_text

TABLE = leap.LeapTable.load_default()
NS = 1_000_000_000
START = leap.utc_fields_to_tai(2016, 12, 31, 23, 59, 57, 0, TABLE)  # frames run through the leap second
expressions = st.integers(0, 7).map(CodedExpression)


# --- the time code -----------------------------------------------------------------------------------------------
@st.composite
def element_lists(draw: st.DrawFn) -> list[int]:
    """A valid frame with elements changed (to any value, not only ZERO, ONE, MARK), or lengthened or cut short."""
    second = draw(st.integers(0, 8))
    elements = encode(fields_for_second(START + second * NS, TABLE, draw(st.integers(0, 15))),
                      draw(expressions))
    for _ in range(draw(st.integers(0, 4))):
        elements[draw(st.integers(0, ELEMENTS - 1))] = draw(st.one_of(st.integers(0, 2), st.integers(-2, 9)))
    cut = draw(st.sampled_from([None, None, None, 0, 99, 101]))
    return elements if cut is None else (elements + [0, 2])[:cut]


@FUZZ
@given(st.one_of(element_lists(), st.lists(st.integers(0, 3), max_size=110)), expressions,
       st.sampled_from([1999, 2016, 2099]))
def test_decode_returns_fields_or_raises_irig_decode_error(elements: list[int], expression: CodedExpression,
                                                           year_hint: int) -> None:
    try:
        fields = decode(elements, expression, year_hint)
    except IrigDecodeError:
        event("decode: refused")
        return
    event("decode: fields")
    again = decode(encode(fields, expression), expression, year_hint)
    assert again == fields
    try:
        tai_of(fields, TABLE)
    except ValueError:
        pass  # day 366 of a common year, or :60 without a leap second: the calendar's refusal, not the decoder's


FORMAT_TOKENS = ["B", "b", "0", "1", "2", "7", "8", "00", "12", " ", "\t", "\u0660", "B12", "B00", "x"]


@FUZZ
@given(st.one_of(st.text(max_size=8), tokens_text(FORMAT_TOKENS, 6)))
def test_format_names_parse_or_raise_value_error(name: str) -> None:
    try:
        fmt = IrigFormat.parse(name)
    except ValueError:
        return
    assert IrigFormat.parse(fmt.name) == fmt and fmt.name in {f"B{m}{d}" for m in ("00", "12") for d in range(8)}


# --- the waveform decoders ---------------------------------------------------------------------------------------
samples16 = st.lists(st.integers(-32768, 32767), max_size=400)


@FUZZ
@given(st.one_of(samples16, st.lists(st.sampled_from([-32768, -1, 0, 1, 32767, 9000, -9000]), max_size=400)),
       st.sampled_from([8000, 44_100, 48_000]))
def test_am_pulses_from_any_samples(samples: list[int], rate: int) -> None:
    try:
        pulses = pulses_from_samples(samples, rate)
    except IrigDecodeError:
        return
    assert all(isinstance(t, int) and isinstance(w, int) and w >= 0 for t, w in pulses)


edges = st.lists(st.builds(Edge, st.integers(-(10**12), 10**12), st.integers(0, 1)), max_size=60)


@FUZZ
@given(edges, expressions)
def test_dcls_pulses_and_frames_from_any_edges(edge_list: list[Edge], expression: CodedExpression) -> None:
    pulses = pulses_from_edges(edge_list)
    assert all(w >= 0 for _, w in pulses)
    elements = elements_from_pulses(pulses)
    found, problems = frames_from_elements(elements, expression, 2016)
    assert isinstance(problems, list) and all(len(f.elements) == ELEMENTS for f in found)


# --- the live decoder --------------------------------------------------------------------------------------------
def sent_frames(expression: CodedExpression, seconds: int, first: int) -> tuple[list[list[int]], set[int]]:
    frames = [encode(fields_for_second(START + (first + k) * NS, TABLE, 3), expression) for k in range(seconds)]
    return frames, {START + (first + k) * NS for k in range(seconds)}


def guarded(expression: CodedExpression) -> bool:
    """Parity and straight binary seconds both check the BCD time: a few changed elements cannot make a frame that
    reads as another second (it takes three in each of two frames in a row)."""
    return expression.has_cf and expression.has_sbs


@st.composite
def edge_stream(draw: st.DrawFn) -> tuple[CodedExpression, list[tuple[int, int]], set[int]]:
    """Three to four seconds of DC level shift edges, then jittered, some dropped, doubled, moved or inserted."""
    expression = draw(expressions)
    frames, sent = sent_frames(expression, draw(st.integers(3, 4)), draw(st.integers(0, 5)))
    stream = [(10**15 + e.t_ns, e.level) for e in dcls_edges(frames, draw(st.integers(0, NS)))]
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(stream) - 1))
        what = draw(st.sampled_from(["drop", "double", "move", "flip", "insert"]))
        t, level = stream[i]
        if what == "drop":
            del stream[i]
        elif what == "double":
            stream.insert(i, (t, level))
        elif what == "move":
            stream[i] = (t + draw(st.integers(-3_000_000, 3_000_000)), level)
        elif what == "flip":
            stream[i] = (t, 1 - level)
        else:
            stream.insert(i, (t + draw(st.integers(-(10**7), 10**7)), draw(st.integers(0, 1))))
    return expression, stream, sent


def check_decoder(decoder: IrigDecoder, paired: list[PairedTime], sent: set[int] | None) -> None:
    assert all(isinstance(p, PairedTime) for p in paired)
    if sent is not None:
        assert {p.tai_ns for p in paired} <= sent
    snapshot = decoder.snapshot()
    assert snapshot["emitted"] == decoder.emitted <= decoder.frames
    event(f"decoder: {'emitted' if paired else 'nothing'}")


@fuzz(0.5)
@given(edge_stream(), st.lists(st.integers(1, 400), max_size=4))
def test_the_live_decoder_takes_mutated_dcls_edges(stream, cuts: list[int]) -> None:
    expression, edge_list, sent = stream
    decoder = IrigDecoder("irig", expression, TABLE, 2016)
    paired, at = [], 0
    for cut in cuts + [len(edge_list)]:
        paired += decoder.feed_edges(edge_list[at:at + cut])
        at += cut
    check_decoder(decoder, paired, sent if guarded(expression) else None)


# An infinite time is left out: it raises OverflowError (test_an_infinite_edge_time_is_counted_as_bad_input).
junk_edges = st.lists(st.one_of(st.tuples(st.integers(-(2**70), 2**70), st.integers(-1, 2)),
                                st.sampled_from([(), (1,), ("x", 1), (None, 0), (1.5, 1), (float("nan"), 1),
                                                 "ab", None])), max_size=30)


@FUZZ
@given(junk_edges)
def test_the_live_decoder_takes_junk_edges(junk: list) -> None:
    decoder = IrigDecoder("irig", CodedExpression(0), TABLE, 2016)
    check_decoder(decoder, decoder.feed_edges(junk), set())


def test_an_infinite_edge_time_is_counted_as_bad_input() -> None:  # int(inf) raises OverflowError
    decoder = IrigDecoder("irig", CodedExpression(0), TABLE, 2016)
    assert decoder.feed_edges([(float("inf"), 0), (float("-inf"), 1)]) == []
    assert decoder.bad_input == 2


AM_RATE = 8000
AM_FRAMES = {digit: sent_frames(CodedExpression(digit), 3, 1) for digit in (0, 4)}
AM_SIGNALS = {digit: np.array(am_samples(frames, AM_RATE), dtype=np.int16) for digit, (frames, _) in
              AM_FRAMES.items()}


@fuzz(0.1)
@given(st.sampled_from(sorted(AM_SIGNALS)), edits(max_edits=6, max_insert=40), st.integers(0, 2**32),
       st.lists(st.integers(1, 12_000), max_size=3))
def test_the_live_decoder_takes_mutated_am_samples(digit: int, changes: list, noise_seed: int,
                                                   cuts: list[int]) -> None:
    """Three seconds of AM at 8 kHz, byte-edited (a sample's high byte flipped is a spike), noise on top."""
    clean = AM_SIGNALS[digit].tobytes()
    raw = apply_edits(clean, changes)
    samples = np.frombuffer(raw[:len(raw) & ~1], "<i2").astype(np.int32)
    samples += np.random.default_rng(noise_seed).normal(0, 300, len(samples)).astype(np.int32)
    decoder = IrigDecoder("irig", CodedExpression(digit), TABLE, 2016)
    paired, at, first_ns = [], 0, 10**15
    for cut in cuts + [len(samples)]:
        chunk = samples[at:at + cut]
        paired += decoder.feed_samples(chunk, first_ns + at * NS // AM_RATE, AM_RATE)
        at += len(chunk)
    check_decoder(decoder, paired, AM_FRAMES[digit][1])


@FUZZ
@given(st.one_of(st.lists(st.integers(-(2**40), 2**40), max_size=50), st.lists(st.floats(), max_size=20),
                 st.sampled_from([None, "abc", [[1, 2], [3, 4]], [1.5], []])),
       st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([None, "x", 1.5])),
       st.one_of(st.sampled_from([8000, 48_000, 7999, 192_001, 0, -1]), st.integers(-(2**40), 2**40),
                 st.sampled_from([None, "48000", float("nan")])))
def test_the_live_decoder_takes_junk_sample_chunks(samples, first_ns, rate) -> None:
    decoder = IrigDecoder("irig", CodedExpression(0), TABLE, 2016)
    check_decoder(decoder, decoder.feed_samples(samples, first_ns, rate), set())


# --- the WAV stream header (edge/irig/input.py) and the IRIG files (edge/irig/files.py) --------------------------
def wav_bytes(samples: np.ndarray, rate: int = AM_RATE, channels: int = 1) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.repeat(samples, channels).astype("<i2").tobytes())
    return out.getvalue()


VALID_WAV = wav_bytes(AM_SIGNALS[0][:120])
EXTENSIBLE_WAV = (VALID_WAV[:4] + (len(VALID_WAV) + 24 - 8).to_bytes(4, "little") + b"WAVEfmt " +
                  (40).to_bytes(4, "little") + b"\xfe\xff\x01\x00" + VALID_WAV[24:32] + b"\x10\x00\x16\x00\x10\x00" +
                  b"\x04\x00\x00\x00" + b"\x01\x00" + bytes(14) + b"LIST" + (4).to_bytes(4, "little") + b"INFO" +
                  VALID_WAV[36:])
wav_inputs = st.one_of(mutated(st.sampled_from([VALID_WAV, EXTENSIBLE_WAV]), max_edits=3),
                       mutated(st.sampled_from([VALID_WAV[:44], EXTENSIBLE_WAV[:80]])), st.binary(max_size=80))


def stream_of(data: bytes) -> tuple[_Stream, Path]:
    handle, name = tempfile.mkstemp(prefix="irig-fuzz-", suffix=".wav")
    os.write(handle, data)
    os.lseek(handle, 0, os.SEEK_SET)
    return _Stream(handle, True, False, threading.Event(), 0.0, name), Path(name)


@FUZZ
@given(wav_inputs)
def test_the_wav_stream_header_reads_or_raises_wav_stream_error(data: bytes) -> None:
    stream, path = stream_of(data)
    try:
        rate, channels, size = read_wav_header(stream)  # type: ignore[misc]
    except (WavStreamError, EOFError) as exc:
        event(f"wav header: {type(exc).__name__}")
        return
    finally:
        os.close(stream.fd)
        path.unlink()
    event("wav header: read")
    assert 8000 <= rate <= 192_000 and channels >= 1 and (size is None or size > 0)


LONG_WAV = wav_bytes(AM_SIGNALS[4], channels=2)  # three seconds: frames decode


@fuzz(0.3)
@given(st.one_of(wav_inputs, mutated(LONG_WAV, max_edits=3)))
def test_the_wav_input_reads_any_stream_into_the_decoder(data: bytes) -> None:
    """The AM input's whole read path on a regular file (not followed): header, chunks, placement, decoding."""
    stream, path = stream_of(data)
    clock = iter(range(10**15, 10**16, 50_000_000))
    paired: list[PairedTime] = []
    source = IrigWavInput(IrigDecoder("irig", CodedExpression(4), TABLE, 2016), str(path), paired.append,
                          follow=False, now_ns=lambda: next(clock))
    try:
        source._read_stream(stream)
    except (WavStreamError, EOFError) as exc:
        event(f"wav input: {type(exc).__name__}")
    finally:
        os.close(stream.fd)
        path.unlink()
    assert source.paired == len(paired) and source.samples >= 0
    event(f"wav input: {'emitted' if paired else 'nothing'}")
    assert source.status()["decoder"]["emitted"] == len(paired)


def read_wav_bytes(data: bytes) -> tuple[list[int], int]:
    with tempfile.NamedTemporaryFile(suffix=".wav") as f:
        f.write(data)
        f.flush()
        return files.read_wav(f.name)


@FUZZ
@given(wav_inputs)
def test_the_wav_file_reader_reads_or_raises_irig_file_error(data: bytes) -> None:
    try:
        samples, rate = read_wav_bytes(data)
    except files.IrigFileError:
        return
    assert isinstance(rate, int) and all(-32768 <= v <= 32767 for v in samples)


# A fmt chunk whose size (0x110) runs past the end of the file: the standard library's wave module raises a bare
# RuntimeError from its chunk reader (wave._Chunk.seek), which read_wav turns into IrigFileError.
CHUNK_PAST_THE_END = (b"RIFF\x14\x01\x00\x00WAVEfmt \x10\x01\x00\x00\x01\x00\x01\x00@\x1f\x00\x00\x80>\x00\x00"
                      b"\x02\x00\x10\x00data\xf0\x00\x00\x00" + bytes(16))


def test_a_wav_chunk_past_the_end_of_the_file_is_an_irig_file_error() -> None:
    with pytest.raises(files.IrigFileError):
        read_wav_bytes(CHUNK_PAST_THE_END)


EDGE_FILE = "".join(["# IRIG-B DC level shift edges\n# format: B004\n"] +
                    [f"{e.t_ns} {e.level}\n" for e in dcls_edges(sent_frames(CodedExpression(4), 1, 0)[0])][:40])
EDGE_TOKENS = [" ", "\n", "#", ":", "0", "1", "-", "10000000", "1e9", "\u0661", "\t", "x", "00"]


@FUZZ
@given(st.one_of(mutated(EDGE_FILE.encode()), tokens_text(EDGE_TOKENS).map(str.encode), st.binary(max_size=60)))
def test_the_edge_file_reader_reads_or_raises_irig_file_error(data: bytes) -> None:
    with tempfile.NamedTemporaryFile(suffix=".edges") as f:
        f.write(data)
        f.flush()
        try:
            edge_list, header = files.read_edges(f.name)
        except files.IrigFileError:
            return
    assert edge_list and all(e.level in (0, 1) for e in edge_list) and isinstance(header, dict)
