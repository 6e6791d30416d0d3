"""IRIG-B signals as files: the edge file (DC level shift) and 16-bit mono WAV (AM).

Edge module (file I/O).  The edge file is text, one edge per line: the time in integer nanoseconds from the start of
the signal (the first reference marker's on-time point is at 0 when rendered by the appliance), a space, and the
level after the edge (1 rising, 0 falling).  Lines starting with ``#`` are comments; the appliance writes the format,
the start instant (UTC and TAI ns) and the number of seconds there, as ``# key: value`` lines.
"""

from __future__ import annotations

import wave
from pathlib import Path

from appliance.protocol.irig.waveform import Edge


class IrigFileError(ValueError):
    """A file that is not an edge file or a 16-bit mono WAV; the message names the file and the line."""


def write_edges(path: str | Path, edges: list[Edge], header: dict[str, str]) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write("# IRIG-B DC level shift edges: <time ns from start> <level 1|0>, one per line\n")
        for key, value in header.items():
            f.write(f"# {key}: {value}\n")
        f.writelines(f"{e.t_ns} {e.level}\n" for e in edges)


def read_edges(path: str | Path) -> tuple[list[Edge], dict[str, str]]:
    edges, header = [], {}
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise IrigFileError(f"{path}: cannot read an edge file: {exc}") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep:
                header[key.strip()] = value.strip()
            continue
        parts = line.split()
        if len(parts) != 2 or parts[1] not in ("0", "1"):
            raise IrigFileError(f"{path}:{lineno}: expected '<time ns> <0|1>', got {line[:60]!r}")
        try:
            edges.append(Edge(int(parts[0]), int(parts[1])))
        except ValueError:
            raise IrigFileError(f"{path}:{lineno}: time {parts[0][:30]!r} is not an integer of nanoseconds") from None
    if not edges:
        raise IrigFileError(f"{path}: no edges")
    return edges, header


def write_wav(path: str | Path, samples: list[int], rate_hz: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate_hz)
        w.writeframes(b"".join(max(-32768, min(32767, v)).to_bytes(2, "little", signed=True) for v in samples))


def read_wav(path: str | Path) -> tuple[list[int], int]:
    try:
        with wave.open(str(path), "rb") as w:
            channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
            data = w.readframes(w.getnframes())
    except (OSError, EOFError, wave.Error, RuntimeError) as exc:
        # RuntimeError: the wave module's chunk reader, for a chunk whose size runs past the end of the file
        raise IrigFileError(f"{path}: not a readable WAV file: {exc}") from None
    if width != 2:
        raise IrigFileError(f"{path}: {8 * width}-bit samples; IRIG-B AM files are 16-bit")
    step = 2 * channels  # the first channel of a multi-channel file
    return [int.from_bytes(data[i:i + 2], "little", signed=True) for i in range(0, len(data) - 1, step)], rate


def is_wav(path: str | Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError as exc:
        raise IrigFileError(f"{path}: {exc.strerror}") from None
    return head[:4] == b"RIFF" and head[8:12] == b"WAVE"
