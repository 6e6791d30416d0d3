"""IRIG-B input on ``appliance run``: a stream the appliance's own renderer made, played into its input in real time.

``appliance irig render`` writes a minute of B122 (AM) starting at a whole second soon after; a writer thread
plays it into a FIFO at the pace of the host clock, each sample at the instant it codes, as a sound card would.
``references.irig_input=wav:FIFO`` reads it: the "irig" reference must qualify and read the host clock's time
(the simulated world's truth) to within the AM input's few milliseconds.
"""

from __future__ import annotations

import datetime
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from appliance.edge.irig import files
from harness.procs import ENV, appliance, status, stop, wait_for

pytestmark = pytest.mark.slow
RATE = 48_000
SECONDS = 60


def play(fifo: Path, wav: Path, start_posix_s: int, done: threading.Event) -> None:
    """Write the WAV's header, then each 20 ms of samples when the host clock reaches them."""
    samples, rate = files.read_wav(wav)
    assert rate == RATE
    raw = wav.read_bytes()
    header = raw[:44]
    data = raw[44:]
    chunk = rate // 50
    lead_in_s = 0.01  # the renderer starts with the previous frame's P0: the first on-time point is 10 ms in
    with open(fifo, "wb", buffering=0) as out:
        out.write(header)
        for first in range(0, len(samples), chunk):
            # A card hands over a block once it is recorded: this one ends at its last sample's instant.
            due = start_posix_s - lead_in_s + (first + chunk) / rate
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            if done.is_set():
                return
            out.write(data[2 * first:2 * (first + chunk)])


def test_irig_b_rendered_by_the_appliance_decodes_to_the_right_time(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    fifo = tmp_path / "irig.fifo"
    os.mkfifo(fifo)
    start = int(time.time()) + 12  # rendering and starting the appliance take a few seconds: play after that
    iso = datetime.datetime.fromtimestamp(start, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    wav = tmp_path / "b122.wav"
    out = subprocess.run([sys.executable, "-m", "appliance", "irig", "render", "--format", "B122", "--start", iso,
                          "--seconds", str(SECONDS), "--wav", str(wav), "--rate", str(RATE)],
                         capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode == 0, out.stderr
    done = threading.Event()
    app = appliance("run", "--set", f"state_dir={state}", "--set", f"references.irig_input=wav:{fifo}",
                    "--set", "references.irig_format=B122", "--set", "references.qualify_s=5",
                    "--set", "sim.initial_clock_error_ns=0")  # no first-lock step between a sample and the status
    writer = threading.Thread(target=play, args=(fifo, wav, start, done), daemon=True)
    writer.start()
    try:
        s = wait_for(state, lambda s: _row(s, "irig") is not None and _row(s, "irig")["samples"] >= 8
                     and _row(s, "irig")["state"] == "qualified", timeout_s=60)
        irig = _row(s, "irig")
        # Served minus IRIG-B, less served minus true (the simulated clock's own error): the input's time against
        # the truth, the median of a few looks.  Timed by when its samples arrive, it is good to about a millisecond
        # here (5 ms is what it claims).
        errors = []
        for _ in range(5):
            look = status(state)
            if look is not None and _row(look, "irig") is not None:
                errors.append(_row(look, "irig")["offset_ns"] - look["clock"]["sim_time_error_ns"])
            time.sleep(0.5)
        assert errors and abs(statistics.median(errors)) < 2_000_000, (errors, irig)
        assert irig["input"]["kind"] == "am-wav" and irig["input"]["paired"] >= 8, irig["input"]
        text = subprocess.run([sys.executable, "-m", "appliance", "status", "--set", f"state_dir={state}"],
                              capture_output=True, text=True, env=ENV, timeout=30).stdout
        assert "irig" in text and "References" in text
    finally:
        done.set()
        stop(app)
        writer.join(timeout=5)


def _row(s: dict, name: str) -> dict | None:
    return next((r for r in (s.get("references") or {}).get("rows", []) if r["name"] == name), None)
