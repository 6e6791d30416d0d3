"""``appliance irig render`` and ``appliance irig decode``: what an operator testing a decoder gets, read back by the
appliance's decoder and by an independent one written here (no appliance IRIG code), and the errors for bad input."""

from __future__ import annotations

import json
import wave
from pathlib import Path

import pytest

from appliance.cli import main


def independent_elements_from_wav(path: Path) -> list[str]:
    """Per-millisecond RMS on the 1 kHz carrier, aligned to the file's start (the render begins on an element),
    mark/space against the midpoint of the loudest and quietest milliseconds, then 2/5/8 loud ms per 10 ms slot."""
    with wave.open(str(path), "rb") as w:
        rate, raw = w.getframerate(), w.readframes(w.getnframes())
    values = [int.from_bytes(raw[i:i + 2], "little", signed=True) for i in range(0, len(raw), 2)]
    per_ms = rate // 1000
    rms = [(sum(v * v for v in values[m * per_ms:(m + 1) * per_ms]) / per_ms) ** 0.5
           for m in range(len(values) // per_ms)]
    cut = (max(rms) + min(rms)) / 2
    loud = [r > cut for r in rms]
    return [{2: "0", 5: "1", 8: "P"}.get(sum(loud[s:s + 10]), "?") for s in range(0, len(loud) - 9, 10)]


def independent_elements_from_edges(path: Path) -> list[str]:
    rows = [line.split() for line in path.read_text().splitlines() if line and not line.startswith("#")]
    rises = [int(t) for t, level in rows if level == "1"]
    falls = [int(t) for t, level in rows if level == "0"]
    return [{2: "0", 5: "1", 8: "P"}.get(round((f - r) / 1e6), "?") for r, f in zip(rises, falls, strict=True)]


def bcd(symbols: list[str], positions: list[tuple[int, int]]) -> int:
    return sum(weight for pos, weight in positions if symbols[pos] == "1")


def independent_time(frame: list[str]) -> tuple[int, int, int, int]:
    """(day of year, hour, minute, second) of one frame of 100 symbols starting at its reference marker."""
    second = bcd(frame, [(1, 1), (2, 2), (3, 4), (4, 8), (6, 10), (7, 20), (8, 40)])
    minute = bcd(frame, [(10, 1), (11, 2), (12, 4), (13, 8), (15, 10), (16, 20), (17, 40)])
    hour = bcd(frame, [(20, 1), (21, 2), (22, 4), (23, 8), (25, 10), (26, 20)])
    day = bcd(frame, [(30, 1), (31, 2), (32, 4), (33, 8), (35, 10), (36, 20), (37, 40), (38, 80), (40, 100),
                      (41, 200)])
    return day, hour, minute, second


def frames_of(symbols: list[str]) -> list[list[str]]:
    starts = [i for i in range(len(symbols) - 99) if all(symbols[i + m] == "P" for m in (0, 9, 19, 49, 99))]
    return [symbols[i:i + 100] for i in starts]


def test_render_b122_wav_decodes_with_the_appliance_and_independently(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    wav = tmp_path / "b122.wav"
    assert main(["irig", "render", "--format", "B122", "--start", "2016-12-31T23:59:58Z", "--seconds", "4",
                 "--wav", str(wav), "--rate", "16000"]) == 0
    capsys.readouterr()
    assert main(["irig", "decode", str(wav), "--json", "--year", "2016"]) == 0
    out, err = capsys.readouterr()
    frames = [json.loads(line) for line in out.splitlines()]
    assert [f["utc"] for f in frames] == ["2016-12-31T23:59:58Z", "2016-12-31T23:59:59Z", "2016-12-31T23:59:60Z",
                                          "2017-01-01T00:00:00Z"]
    assert [f["on_time_ns"] // 1000 for f in frames] == [10_000, 1_010_000, 2_010_000, 3_010_000]  # after P0
    assert "decoded as B122" in err
    independent = [independent_time(f) for f in frames_of(independent_elements_from_wav(wav))]
    assert independent == [(366, 23, 59, 58), (366, 23, 59, 59), (366, 23, 59, 60), (1, 0, 0, 0)]


def test_render_b006_edges_decode_with_the_appliance_and_independently(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    edges = tmp_path / "b006.txt"
    assert main(["irig", "render", "--format", "B006", "--start", "2024-12-31T23:59:59Z", "--seconds", "2",
                 "--edges", str(edges), "--timezone", "Asia/Kolkata"]) == 0
    text = edges.read_text()
    assert "# format: B006" in text and text.count("\n") == 7 + 400  # 7 header lines, 2 x 100 x 2 edges
    capsys.readouterr()
    assert main(["irig", "decode", str(edges), "--json"]) == 0
    out, _ = capsys.readouterr()
    frames = [json.loads(line) for line in out.splitlines()]
    # B006 carries BCD time and year but no offset: the coded local time (UTC + 5:30) is what comes back
    assert [(f["year"], f["day_of_year"], f["time"]) for f in frames] == [(2025, 1, "05:29:59"), (2025, 1, "05:30:00")]
    assert [independent_time(f) for f in frames_of(independent_elements_from_edges(edges))] == [(1, 5, 29, 59),
                                                                                               (1, 5, 30, 0)]


@pytest.mark.parametrize(("argv", "message"), [
    (["--format", "B009", "--start", "2024-01-01T00:00:00Z", "--seconds", "1", "--edges", "x"], "B000-B007"),
    (["--format", "B002", "--start", "yesterday", "--seconds", "1", "--edges", "x"], "whole second"),
    (["--format", "B002", "--start", "2024-01-01T00:00:00.5Z", "--seconds", "1", "--edges", "x"], "whole second"),
    (["--format", "B002", "--start", "2024-06-30T23:59:60Z", "--seconds", "1", "--edges", "x"], "not an inserted"),
    (["--format", "B122", "--start", "2024-01-01T00:00:00Z", "--seconds", "1", "--edges", "x"], "use --wav"),
    (["--format", "B002", "--start", "2024-01-01T00:00:00Z", "--seconds", "0", "--edges", "x"], "--seconds"),
    (["--format", "B002", "--start", "2024-01-01T00:00:00Z", "--seconds", "1", "--edges", "x", "--timezone",
      "Mars/Olympus"], "unknown time zone"),
    (["--format", "B122", "--start", "2024-01-01T00:00:00Z", "--seconds", "1", "--wav", "x", "--rate", "4000"],
     "samples/s"),
])
def test_render_refuses_bad_input_with_one_clear_line(argv: list[str], message: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(tmp_path / a) if a == "x" else a for a in argv]
    assert main(["irig", "render", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("appliance: irig: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_decode_reports_garbage_and_damaged_frames(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("# nothing\n12 up\n")
    assert main(["irig", "decode", str(bad)]) == 2
    assert "bad.txt:2: expected '<time ns> <0|1>'" in capsys.readouterr().err
    assert main(["irig", "decode", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in capsys.readouterr().err
    noise = tmp_path / "noise.wav"
    with wave.open(str(noise), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(8000)
        w.writeframes(bytes(16000))
    assert main(["irig", "decode", str(noise)]) == 2
    assert "no 1 kHz carrier" in capsys.readouterr().err
    # one frame of three with a pulse stretched out of its class: two decode, the third is named
    edges = tmp_path / "b000.txt"
    assert main(["irig", "render", "--format", "B000", "--start", "2024-03-01T10:00:00Z", "--seconds", "3",
                 "--edges", str(edges)]) == 0
    lines = edges.read_text().splitlines()
    first_edge = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    fall = first_edge + 2 * 150 + 1  # the falling edge of element 50 of the second frame
    t, level = lines[fall].split()
    lines[fall] = f"{int(t) + 4_000_000} {level}"
    edges.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["irig", "decode", str(edges)]) == 1
    out, err = capsys.readouterr()
    assert out.count("2024-03-01T10:00:0") == 2 and "2 frame(s) decoded as B000, 1 unreadable" in err
    assert "parity error" in err


@pytest.mark.parametrize("digit", range(8))
def test_decode_without_a_format_finds_the_coded_expression(digit: int) -> None:
    from appliance import leap
    from appliance.protocol.irig.render import decode_elements, frames_for
    from appliance.protocol.irig.timecode import CodedExpression
    from appliance.protocol.irig.waveform import dcls_edges, elements_from_pulses, pulses_from_edges

    table = leap.LeapTable.load_default()
    start = leap.utc_fields_to_tai(2024, 7, 9, 13, 14, 15, 0, table)
    frames = frames_for(CodedExpression(digit), start, 3, table, quality=4)
    result = decode_elements(elements_from_pulses(pulses_from_edges(dcls_edges(frames))), None, 2024)
    same_signal = {0: 4, 1: 5}  # the IEEE 1344 CF field carries the year where BCD_YEAR would
    assert result.format_digit == same_signal.get(digit, digit) and len(result.frames) == 3 and not result.problems
