"""Time outputs of ``appliance run`` (embedded default).

The serial time string is read back through a pseudo-terminal: the appliance writes with pyserial to the terminal's
slave side, the test reads the master side and parses NMEA with pynmea2.  Each string names the second in which it
arrives (written ``offset_ms`` after that second began).  The pulse outputs' hardware sinks are checked where the
hardware is missing (this machine has no GPIO chip or PHC); their behaviour is unit-tested through injected layers.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
import wave
from datetime import datetime, timezone
from collections.abc import Iterator
from pathlib import Path

import pynmea2
import pytest

from harness.peers import require
from harness.procs import appliance, stop, wait_for
from harness.ptp_appliance import seed_learned_state

pytestmark = [pytest.mark.interop]
FAST = ["--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3", "--set", "ntp.enabled=false"]


def read_lines(master: int, seconds: float) -> Iterator[tuple[float, bytes]]:
    """(host time when the line was complete, line) for ``seconds``."""
    buf, end = b"", time.monotonic() + seconds
    while time.monotonic() < end:
        ready, _, _ = select.select([master], [], [], 0.2)
        if not ready:
            continue
        buf += os.read(master, 4096)
        now = time.time()
        while True:
            cut = min((i for i in (buf.find(b"\n"), buf.find(b"\x03")) if i >= 0), default=-1)
            if cut < 0:
                break
            line, buf = buf[:cut + 1], buf[cut + 1:]
            yield now, line


@pytest.fixture
def pty_pair() -> Iterator[tuple[int, str]]:
    master, slave = os.openpty()
    path = os.ttyname(slave)
    os.close(slave)  # the appliance opens it by name
    yield master, path
    os.close(master)


def test_zda_and_rmc_name_the_second_they_arrive_in_and_say_synchronized(tmp_path: Path,
                                                                         pty_pair: tuple[int, str]) -> None:
    master, path = pty_pair
    state = tmp_path / "state"
    app = appliance("run", "--set", f"state_dir={state}", *FAST, "--set", f"serial_out.device={path}",
                    "--set", "serial_out.offset_ms=200", "--set", "serial_out.baud=115200")
    try:
        wait_for(state, lambda s: s["clock"]["state"] == "LOCKED", timeout_s=60)
        time.sleep(1.5)
        termios_drain(master)
        lines = list(read_lines(master, 4.5))
        s = wait_for(state, lambda s: s["outputs"].get("serial", {}).get("written", 0) > 3)
    finally:
        code, err = stop(app)
    assert code == 0, err
    zdas = [(t, pynmea2.parse(line.decode().strip())) for t, line in lines if b"ZDA" in line]
    rmcs = [(t, pynmea2.parse(line.decode().strip())) for t, line in lines if b"RMC" in line]
    assert len(zdas) >= 4 and len(rmcs) >= 4
    for arrived, msg in zdas:
        # written 200 ms into its second (the served clock is the host clock here, within its error bound)
        named = msg.datetime.timestamp()
        assert 0.15 <= arrived - named <= 0.9, (msg, arrived)
    for arrived, msg in rmcs:
        assert msg.status == "A" and msg.mode_indicator == "A" and msg.latitude != 0.0
        assert 0.15 <= arrived - msg.datetime.timestamp() <= 0.9, (msg, arrived)
    serial = s["outputs"]["serial"]
    assert serial["error"] == "" and serial["format"] == "zda+rmc" and serial["overruns"] == 0
    assert serial["last"].startswith("$GPZDA") and "$GPRMC" in serial["last"]


def termios_drain(master: int) -> None:
    """Throw away what queued while the clock was locking."""
    while select.select([master], [], [], 0)[0]:
        os.read(master, 65536)


def test_meinberg_string_and_holdover_status(tmp_path: Path, pty_pair: tuple[int, str]) -> None:
    master, path = pty_pair
    state = tmp_path / "state"
    seed_learned_state(state)  # as after a restart: the clock knows its oscillator, so it may hold over
    app = appliance("run", "--set", f"state_dir={state}", *FAST, "--set", f"serial_out.device={path}",
                    "--set", "serial_out.format=meinberg", "--set", "clock.holdover_spec_ns=50",
                    "--set", "clock.holdover_temp_k=20")
    try:
        wait_for(state, lambda s: s["clock"]["state"] == "LOCKED", timeout_s=60)
        termios_drain(master)
        locked = [line for _, line in read_lines(master, 2.5)]
        hold = appliance("holdover", "start", "--set", f"state_dir={state}")
        assert hold.wait(10) == 0, hold.communicate()
        wait_for(state, lambda s: s["clock"]["advertised"]["ntp_stratum"] != 1, timeout_s=60)
        termios_drain(master)
        unsynced = [line for _, line in read_lines(master, 2.5)]
    finally:
        code, err = stop(app)
    assert code == 0, err
    for line in locked + unsynced:
        assert len(line) == 32 and line[:3] == b"\x02D:" and line[-1:] == b"\x03", line
    assert all(line[27:31] == b"  U " for line in locked), locked  # synchronized, position known, UTC
    assert unsynced and all(line[27:29] == b"# " for line in unsynced), unsynced  # running free


def test_a_missing_port_is_reported_and_nothing_else_stops(tmp_path: Path) -> None:
    state = tmp_path / "state"
    app = appliance("run", "--set", f"state_dir={state}", *FAST, "--set", "serial_out.device=/dev/does-not-exist")
    try:
        s = wait_for(state, lambda s: s["clock"]["state"] == "LOCKED", timeout_s=60)
        serial = s["outputs"]["serial"]
        assert "cannot open /dev/does-not-exist" in serial["error"] and serial["written"] == 0
    finally:
        code, err = stop(app)
    assert code == 0, err
    assert "serial time output: cannot open /dev/does-not-exist" in err


def test_pulse_outputs_on_hardware_that_is_not_there(tmp_path: Path) -> None:
    """A GPIO chip that does not exist: the outputs plan on, the sink says why nothing is driven; a PHC periodic
    output without a PHC as the served clock: a clear start-up error."""
    state = tmp_path / "state"
    app = appliance("run", "--set", f"state_dir={state}", *FAST, "--set", "pps_out.sink=gpio",
                    "--set", "pps_out.gpio_chip=/dev/gpiochip-missing", "--set", "irig_out.format=B002",
                    "--set", "irig_out.sink=record")
    try:
        s = wait_for(state, lambda s: s["outputs"].get("pps", {}).get("seconds", 0) >= 3, timeout_s=60)
        assert "cannot drive /dev/gpiochip-missing line 0" in s["outputs"]["pps"]["sink"]["error"]
        assert s["outputs"]["irig"]["frames"] >= 3 and s["outputs"]["irig"]["format"] == "B002"
    finally:
        code, err = stop(app)
    assert code == 0, err
    bad = appliance("run", "--set", f"state_dir={tmp_path / 'other'}", *FAST, "--set", "pps_out.sink=phc")
    out, err = bad.communicate(timeout=60)
    assert bad.returncode == 1 and "pps_out.sink=phc needs the PHC to be the served clock" in err


def decode_cli(path: Path, *extra: str) -> list[dict]:
    """``appliance irig decode --json``: one record per frame."""
    proc = appliance("irig", "decode", str(path), "--json", *extra)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_am_output_to_wav_segments_decodes_in_local_time(tmp_path: Path) -> None:
    """IRIG-B B124 live in 10 s WAV segments, coded in Berlin time: each segment decodes with ``appliance irig
    decode`` from its first frame, which is the second in its name, with the zone's offset in the control functions."""
    state, out = tmp_path / "state", tmp_path / "am"
    app = appliance("run", "--set", f"state_dir={state}", *FAST, "--set", "irig_out.format=B124",
                    "--set", "irig_out.sink=wav", "--set", f"irig_out.wav_path={out / 'irig.wav'}",
                    "--set", "irig_out.wav_segment_s=10", "--set", "irig_out.wav_keep=3",
                    "--set", "irig_out.timezone=Europe/Berlin", "--set", "irig_out.sample_rate=16000")
    try:
        wait_for(state, lambda s: s["clock"]["state"] == "LOCKED", timeout_s=60)
        s = wait_for(state, lambda s: s["outputs"]["irig"]["sink"]["segments"] >= 3, timeout_s=40)
    finally:
        code, err = stop(app)
    assert code == 0, err
    irig = s["outputs"]["irig"]
    assert irig["format"] == "B124" and irig["timezone"] == "Europe/Berlin" and irig["sample_rate_hz"] == 16000
    assert irig["sink"]["error"] is None and irig["sink"]["overruns"] == 0
    segments = sorted(out.glob("irig-*.wav"))
    assert len(segments) == 3  # the oldest pruned
    for segment in segments[1:]:  # whole segments (the first may have begun mid-way when the output started)
        frames = decode_cli(segment)
        named = datetime.strptime(segment.stem[5:], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
        assert frames[0]["utc"] == named.strftime("%Y-%m-%dT%H:%M:%SZ") and named.second % 10 == 0
        assert all(f["offset_h"] in (-1.0, -2.0) for f in frames)  # CET/CEST: local time + offset = UTC
        utc = [datetime.strptime(f["utc"], "%Y-%m-%dT%H:%M:%SZ") for f in frames]
        assert [(b - a).total_seconds() for a, b in zip(utc, utc[1:])] == [1.0] * (len(utc) - 1)
        local_hour = (named.hour - int(frames[0]["offset_h"])) % 24
        assert frames[0]["time"].startswith(f"{local_hour:02d}:")


ASOUNDRC = """pcm.irigfile {{
  type file
  slave.pcm "null"
  file "{raw}"
  format "raw"
}}
"""


def test_am_stream_through_a_fifo_plays_in_aplay(tmp_path: Path) -> None:
    """IRIG-B B122 into a FIFO that ALSA's aplay plays: aplay reads the open-ended WAV header and plays the stream
    (onto ALSA's file plugin here, this machine has no sound card); what it played decodes to consecutive seconds."""
    aplay = require("aplay")
    state, fifo, raw = tmp_path / "state", tmp_path / "irig.fifo", tmp_path / "played.raw"
    os.mkfifo(fifo)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".asoundrc").write_text(ASOUNDRC.format(raw=raw))
    app = appliance("run", "--set", f"state_dir={state}", *FAST, "--set", "irig_out.format=B122",
                    "--set", "irig_out.sink=wav", "--set", f"irig_out.wav_path={fifo}")
    player = None
    try:
        s = wait_for(state, lambda s: s["outputs"]["irig"]["sink"]["current"] == "waiting for a reader",
                     timeout_s=60)
        assert s["outputs"]["irig"]["sink"]["mode"] == "stream"
        player = subprocess.Popen([aplay, "-q", "-D", "irigfile", str(fifo)], env={**os.environ, "HOME": str(home)},
                                  stderr=subprocess.PIPE)
        s = wait_for(state, lambda s: s["outputs"]["irig"]["sink"]["frames"] >= 6, timeout_s=30)
        assert s["outputs"]["irig"]["sink"]["streams"] == 1
    finally:
        code, err = stop(app)
        if player is not None:
            _, perr = player.communicate(timeout=20)  # the stream ends when the appliance closes it
    assert code == 0, err
    assert player.returncode == 0, perr
    played = raw.read_bytes()
    assert len(played) >= 5 * 2 * 48_000
    wav = tmp_path / "played.wav"
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(48_000)
        w.writeframes(played)
    frames = decode_cli(wav, "--format", "B122")
    assert len(frames) >= 5
    utc = [datetime.strptime(f["utc"], "%Y-%m-%dT%H:%M:%SZ") for f in frames]
    assert [(b - a).total_seconds() for a, b in zip(utc, utc[1:])] == [1.0] * (len(utc) - 1)
