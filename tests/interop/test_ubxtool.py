"""gpsd's ubxtool (Debian gpsd-clients), a UBX implementation with its own table of configuration keys, against the
appliance's u-blox set-up.

Offline, two ways: ubxtool decodes a file of the appliance's frames (``-f FILE``), and it talks over a
pseudo-terminal to the simulated receiver (``-f /dev/pts/N``: a character device, so it writes), where the frames it
builds from the same names and values are captured and compared byte for byte, and the simulated receiver's answers
are decoded by ubxtool.  What ubxtool cannot build (a CFG-TP5 with chosen values, a multi-block CFG-GNSS, a CFG-CFG
with chosen masks) it still decodes.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import time
import tty
from pathlib import Path

import pytest

from appliance.gnss import ubxcfg
from appliance.gnss import ubxlegacy as legacy
from appliance.gnss.framer import ubx_frame_bytes
from appliance.gnss.plan import ReceiverPlan
from appliance.sim.ubxdevice import SimUblox
from harness.peers import require

pytestmark = [pytest.mark.interop]

ENV = {k: v for k, v in os.environ.items() if k not in ("UBXOPTS", "PYTHONPATH", "PYTHONHOME")}
SURVEY = ReceiverPlan(survey_min_s=600, survey_acc_limit_m=2.0, baud=115200, store="bbr")
FIXED = ReceiverPlan(mode="fixed", fixed_lat_deg=-33.8567844123, fixed_lon_deg=151.2152967456,
                     fixed_height_m=45.67891, fixed_acc_m=0.02, pulse_length_ms=200, pulse_rising=False,
                     constellations=("gps", "galileo", "glonass"), store="flash")
ITEM = re.compile(r"item (\S+)/(0x[0-9a-f]+)(?: val (-?\d+))?")


def blocks(text: str) -> list[tuple[str, str]]:
    """ubxtool's decodes: (message name, the lines under it)."""
    return [(m[1], m[2]) for m in re.finditer(r"^(UBX-[A-Z0-9]+-[A-Z0-9]+):\n(.*?)(?=\n\n|\Z)", text, re.M | re.S)]


def decode(tmp_path: Path, frames: bytes) -> list[tuple[str, str]]:
    path = tmp_path / "frames.ubx"
    path.write_bytes(frames)
    out = subprocess.run([require("ubxtool"), "-f", str(path), "-v", "3", "-w", "0"], capture_output=True, text=True,
                         timeout=60, env=ENV)
    assert out.returncode == 0, out.stderr
    return blocks(out.stdout)


def session(sim: SimUblox, *args: str, wait_s: float = 1.0) -> tuple[str, bytes]:
    """Run ubxtool on a pseudo-terminal whose other end is ``sim``: (what ubxtool printed, the bytes it sent)."""
    binary = require("ubxtool")
    master, slave = os.openpty()
    tty.setraw(slave)  # no echo: what the receiver answers reaches ubxtool only
    sent = bytearray()
    try:
        proc = subprocess.Popen([binary, "-f", os.ttyname(slave), "-v", "2", "-w", str(wait_s), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.05)[0]:
                data = os.read(master, 4096)
                sent += data
                if reply := sim.accept(data):
                    os.write(master, reply)
        if proc.poll() is None:
            proc.kill()
        out = proc.communicate(timeout=10)[0]
    finally:
        os.close(master)
        os.close(slave)
    assert proc.returncode == 0, out
    return out, bytes(sent)


def items_of(body: str) -> list[tuple[str, int, int | None]]:
    return [(name, int(ident, 16), int(value) if value else None) for name, ident, value in ITEM.findall(body)]


@pytest.mark.parametrize("plan", [SURVEY, FIXED], ids=["survey", "fixed"])
def test_ubxtool_reads_every_key_as_the_appliance_wrote_it(tmp_path, plan):
    items = ubxcfg.gen9_items(plan)
    payloads = ubxcfg.valset_payloads(items, plan.store)
    decoded = decode(tmp_path, b"".join(ubx_frame_bytes(0x06, 0x8A, p) for p in payloads))
    assert [name for name, _ in decoded] == ["UBX-CFG-VALSET"] * len(payloads)
    read = [item for _, body in decoded for item in items_of(body)]
    assert read == [(name, ubxcfg.KEYS[name][0], value) for name, value in items]
    assert all(f"layers (ram {plan.store})" in body for _, body in decoded)


def test_ubxtool_reads_valget_requests(tmp_path):
    keys = [name for name, _ in ubxcfg.gen9_items(FIXED)][:64]
    [(name, body)] = decode(tmp_path, ubx_frame_bytes(0x06, 0x8B, ubxcfg.valget_payload(keys, "flash")))
    assert name == "UBX-CFG-VALGET" and "layers (flash)" in body
    assert items_of(body) == [(k, ubxcfg.KEYS[k][0], None) for k in keys]


def test_ubxtool_reads_the_m8_messages(tmp_path):
    frames = ubxcfg.m8_messages(FIXED)
    decoded = decode(tmp_path, b"".join(ubx_frame_bytes(*frame) for frame in frames))
    assert [name for name, _ in decoded] == [f"UBX-{legacy.NAMES[i]}" for _, i, _ in frames]
    text = dict(decoded[:4]) | {"UBX-CFG-PRT": decoded[-2][1], "UBX-CFG-CFG": decoded[-1][1]}
    gnss = re.findall(r"gnssId (\d) TrkCh +(\d+) maxTrCh +(\d+) reserved 0 Flags x([0-9a-f]{8})\n +\S+ [^\n]*?("
                      r"enabled)?$", text["UBX-CFG-GNSS"], re.M)
    assert [(int(g), int(f, 16) & 1, bool(e)) for g, _, _, f, e in gnss] == [
        (0, 1, True), (1, 0, False), (2, 1, True), (3, 0, False), (5, 0, False), (6, 1, True)]
    assert "dynModel 2" in text["UBX-CFG-NAV5"] and "dynModel (Stationary)" in text["UBX-CFG-NAV5"]
    assert "timeMode 2" in text["UBX-CFG-TMODE2"] and "flags (lla)" in text["UBX-CFG-TMODE2"]
    assert "ecefXOrLat -338567844 ecefYOrLon 1512152967 ecefZOrAlt 4568" in text["UBX-CFG-TMODE2"]
    assert "fixedPosAcc 20 svinMinDur 3600 svinAccLimit 10000" in text["UBX-CFG-TMODE2"]
    tp5 = text["UBX-CFG-TP5"]
    assert "antCableDelay 0 rfGroupDelay 0 freqPeriod 1000000 freqPeriodLock 1000000" in tp5
    assert "pulseLenRatio 200000 pulseLenRatioLock 200000 userConfigDelay 0" in tp5
    assert "flags (Active lockGnssFreq isLength alignToTow)" in tp5 and "gridToGps (UTC)" in tp5  # falling edge
    rates = [re.search(r"Rate set Class x([0-9a-f]{2}) \(\w+\) ID x([0-9a-f]{2}) \([\w-]+\) Rate (\d)", body)
             for name, body in decoded if name == "UBX-CFG-MSG"]
    assert [(int(m[1], 16), int(m[2], 16), int(m[3])) for m in rates] == [
        (*ubxcfg.MESSAGES[m], rate) for m, rate in ubxcfg.message_rates(ubxcfg.M8_SKIPPED)]
    assert "PortID 1 (UART1)" in text["UBX-CFG-PRT"] and "mode 0x8c0 baudRate 9600" in text["UBX-CFG-PRT"]
    assert "inProtoMask (UBX NMEA)\n    outProtoMask (UBX NMEA)" in text["UBX-CFG-PRT"]
    assert "saveMask: 0xf1f" in text["UBX-CFG-CFG"] and "deviceMask: 0x2 (devFlash)" in text["UBX-CFG-CFG"]


def test_ubxtool_builds_the_same_valsets_and_the_simulated_f9t_takes_them():
    sim = SimUblox()
    items = ubxcfg.gen9_items(FIXED)
    for payload in ubxcfg.valset_payloads(items, FIXED.store):
        chunk = [(n, v) for n, v in items if payload.find(ubxcfg.KEYS[n][0].to_bytes(4, "little")) > 0]
        args = [a for name, value in chunk for a in ("-z", f"{name},{value},{ubxcfg.LAYERS[FIXED.store]}")]
        out, sent = session(sim, *args)
        assert sent == ubx_frame_bytes(0x06, 0x8A, payload)
        assert "ACK to Class x06 (CFG) ID x8a (VALSET)" in out
    assert sim.timing_mode == "fixed" and sim.constellations == {"gps", "galileo", "glonass"}
    lat, lon, height = sim.fixed_llh
    assert (lat, lon) == pytest.approx((-33.8567844123, 151.2152967456), abs=1e-9)
    assert height == pytest.approx(45.6789, abs=1e-9)  # to the key's 0.1 mm
    assert sim.pulse_length_ms == 200 and not sim.pulse_rising and sim.baud == 9600

    keys = ["CFG-TMODE-LAT", "CFG-TMODE-LAT_HP", "CFG-TMODE-HEIGHT_HP", "CFG-TP-POL_TP1", "CFG-UART1-BAUDRATE"]
    out, sent = session(sim, *[a for k in keys for a in ("-g", f"{k},2")])
    assert sent == ubx_frame_bytes(0x06, 0x8B, ubxcfg.valget_payload(keys, "flash"))
    [answer] = [body for name, body in blocks(out) if name == "UBX-CFG-VALGET" and "version 1" in body]
    assert [(n, v) for n, _, v in items_of(answer)] == [(k, dict(items)[k]) for k in keys]


def test_ubxtool_sees_the_simulated_receivers_version_and_refusals():
    sim = SimUblox()
    sim.refuse = {"CFG-TMODE-MODE"}
    out, sent = session(sim, "-z", "CFG-TMODE-MODE,1,1")
    assert sent == ubx_frame_bytes(0x06, 0x8A, ubxcfg.valset_payload([("CFG-TMODE-MODE", 1)], "ram"))
    assert "NAK to Class x06 (CFG) ID x8a (VALSET)" in out and sim.timing_mode == "disabled"
    out, sent = session(sim, "-p", "MON-VER")
    assert sent == ubxcfg.mon_ver_poll()
    [ver] = [body for name, body in blocks(out) if name == "UBX-MON-VER" and "extension" in body]  # not the poll
    assert "swVersion EXT CORE 1.00" in ver and "hwVersion 00190000" in ver
    assert "extension FWVER=TIM 2.20\n  extension PROTVER=29.20\n  extension MOD=ZED-F9T" in ver


def test_ubxtool_builds_the_same_m8_messages_and_reads_the_answers():
    plan = ReceiverPlan(survey_min_s=600, survey_acc_limit_m=2.0, baud=38400, constellations=("gps", "glonass"))
    ours = {(i, p[:2] if i == legacy.MSG else b""): ubx_frame_bytes(c, i, p) for c, i, p in ubxcfg.m8_messages(plan)}
    sim = SimUblox(8)
    out, sent = session(sim, "-e", "SURVEYIN,600,2000", "-p", "MODEL,2", "-p", "CFG-MSG,1,7,1")
    assert sent == ours[(legacy.TMODE2, b"")] + ours[(legacy.NAV5, b"")] + ours[(legacy.MSG, b"\x01\x07")]
    assert out.count("ACK to Class x06 (CFG)") == 3
    out, sent = session(sim, "-S", "38400")
    assert sent == ours[(legacy.PRT, b"")] and "ACK to Class x06 (CFG) ID x00 (PRT)" in out
    assert (sim.timing_mode, sim.survey_min_s, sim.dynamic_model, sim.baud) == ("survey", 600, 2, 38400)
    assert "NAV-PVT" in sim.messages

    polls = ["CFG-TMODE2", "CFG-NAV5", "CFG-PRT", "CFG-GNSS", "CFG-TP5"]
    out, sent = session(sim, *[a for p in polls for a in ("-p", p)])
    by_id = {legacy.NAMES[i]: i for i in legacy.NAMES}
    assert sent == b"".join(ubx_frame_bytes(0x06, by_id[p], b"") for p in polls)
    answers = {name: body for name, body in blocks(out) if "Poll request" not in body}
    assert "timeMode 1" in answers["UBX-CFG-TMODE2"] and "svinMinDur 600 svinAccLimit 2000" in answers[
        "UBX-CFG-TMODE2"]
    assert "dynModel (Stationary)" in answers["UBX-CFG-NAV5"]
    assert "mode 0x8c0 baudRate 38400" in answers["UBX-CFG-PRT"]
    assert "GPS L1C/A enabled" in answers["UBX-CFG-GNSS"] and "GLONASS L1 enabled" in answers["UBX-CFG-GNSS"]
    assert "BeiDou B1I enabled" not in answers["UBX-CFG-GNSS"]
    assert "flags (Active lockGnssFreq lockedOtherSet isLength alignToTow RisingEdge)" in answers["UBX-CFG-TP5"]


def test_ubxtool_gnss_switches_and_save_on_the_simulated_m8():
    sim = SimUblox(8)  # out of the box: GPS and GLONASS (with SBAS and QZSS)
    out, _ = session(sim, "-e", "BEIDOU")  # a third carrier
    assert "NAK to Class x06 (CFG) ID x3e (GNSS)" in out and "beidou" not in sim.constellations
    session(sim, "-d", "GLONASS")
    out, _ = session(sim, "-e", "BEIDOU")
    assert "ACK to Class x06 (CFG) ID x3e (GNSS)" in out and {"gps", "beidou"} <= sim.constellations
    out, _ = session(sim, "-p", "SAVE")
    assert "ACK to Class x06 (CFG) ID x09 (CFG)" in out
    sim.reset()
    assert "beidou" in sim.constellations and "glonass" not in sim.constellations
