"""Decode a receiver capture file into epochs (``appliance replay``).

Pure core: it takes a capture's bytes (``edge/input_files.py`` reads the file).  Captures are what a receiver sent on its
serial line; the files from gpsd's regression suite start with ``#`` comment lines, which are stripped only from the
head of the file because further on a ``#`` byte can be part of a binary UBX frame.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from appliance import leap
from appliance.events import Constellation, GnssEpoch, LeapInfo
from appliance.gnss.receiver import GnssReceiver, ReceiverSnapshot


@dataclass(frozen=True)
class ReplayResult:
    epochs: tuple[GnssEpoch, ...]
    receiver: ReceiverSnapshot
    leap: tuple[LeapInfo, ...]


def strip_header(data: bytes) -> bytes:
    """Drop the leading ``#`` comment lines of a capture (and blank lines among them)."""
    pos = 0
    while pos < len(data) and data[pos:pos + 1] in (b"#", b"\n", b"\r"):
        end = data.find(b"\n", pos)
        pos = len(data) if end < 0 else end + 1
    return data[pos:]


def replay_bytes(data: bytes, table: leap.LeapTable | None = None, chunk: int = 4096) -> ReplayResult:
    """Feed a capture through the receiver as a serial line would deliver it, in chunks."""
    lt = table or leap.LeapTable.load_default()
    rx = GnssReceiver(lambda: lt, device="capture")
    epochs: list[GnssEpoch] = []
    leaps: list[LeapInfo] = []
    for i in range(0, len(data), chunk):
        _collect(rx.feed(data[i:i + chunk], 0), epochs, leaps)
    _collect(rx.finish(), epochs, leaps)
    return ReplayResult(tuple(epochs), rx.snapshot(), tuple(leaps))


def _collect(events: list[object], epochs: list[GnssEpoch], leaps: list[LeapInfo]) -> None:
    for ev in events:
        if isinstance(ev, GnssEpoch):
            epochs.append(ev)
        elif isinstance(ev, LeapInfo) and (not leaps or leaps[-1] != ev):
            leaps.append(ev)


def per_constellation(epoch: GnssEpoch) -> dict[str, dict[str, int]]:
    """{"GPS": {"used": 8, "visible": 12}, ...} in a stable order."""
    visible = Counter(s.constellation.value for s in epoch.satellites)
    used = Counter(s.constellation.value for s in epoch.satellites if s.used)
    order = [c.value for c in Constellation]
    return {c: {"used": used[c], "visible": visible[c]} for c in order if visible[c] or used[c]}


def epoch_json(epoch: GnssEpoch) -> dict:
    pos = epoch.position
    return {
        "time": epoch.utc_text, "valid": epoch.time_valid, "mode": int(epoch.fix_mode),
        "fix": epoch.fix_mode.name.lower().replace("_", "-"), "time_only": epoch.time_only,
        "lat": None if pos is None else round(pos.lat_deg, 9),
        "lon": None if pos is None else round(pos.lon_deg, 9),
        "alt_m": None if pos is None or pos.alt_m is None else round(pos.alt_m, 3),
        "used": epoch.used_count, "visible": len(epoch.satellites),
        "constellations": per_constellation(epoch),
        "satellites": [{"gnss": s.constellation.value, "prn": s.prn, "el": s.elevation_deg, "az": s.azimuth_deg,
                        "cn0": s.cn0_dbhz, "used": s.used} for s in epoch.satellites],
    }


def epoch_line(epoch: GnssEpoch) -> str:
    pos = epoch.position
    where = "-" if pos is None else f"{pos.lat_deg:+.6f} {pos.lon_deg:+.6f}" + (
        "" if pos.alt_m is None else f" {pos.alt_m:.1f}m")
    sats = " ".join(f"{c}:{v['used']}/{v['visible']}" for c, v in per_constellation(epoch).items())
    fix = epoch.fix_mode.name.lower().replace("_", "-") + ("(time)" if epoch.time_only else "")
    return f"{epoch.utc_text or '-':24} {fix:14} {where:36} used {epoch.used_count if epoch.used_count is not None else '-':>2}  {sats}"


def lines(result: ReplayResult) -> Iterator[str]:
    for epoch in result.epochs:
        yield epoch_line(epoch)


def summary_json(result: ReplayResult) -> dict:
    rx = result.receiver
    return {"epochs": len(result.epochs), "frames": rx.frames, "rejected": rx.rejected, "ignored": rx.ignored,
            "tai_utc_s": result.leap[-1].tai_utc_s if result.leap else None}


def summary_line(result: ReplayResult) -> str:
    s = summary_json(result)
    rejected = ", ".join(f"{k} {v}" for k, v in sorted(s["rejected"].items())) or "none"
    frames = ", ".join(f"{k} {v}" for k, v in sorted(s["frames"].items()))
    leap_text = "" if s["tai_utc_s"] is None else f"; receiver says TAI-UTC {s['tai_utc_s']} s"
    return f"{s['epochs']} epochs; frames {frames}; ignored {sum(s['ignored'].values())}; rejected {rejected}{leap_text}"


@dataclass(frozen=True)
class CaptureIntegrity:
    """What the integrity checks made of a capture: how many epochs each level got, and the worst reasons."""

    epochs: int
    levels: dict[str, int]
    alarms: dict[str, int]  # "detector:verdict" -> epochs
    worst_reasons: tuple[str, ...]
    survey: str


def capture_integrity(data: bytes, survey_s: float = 30.0, table: leap.LeapTable | None = None) -> CaptureIntegrity:
    """Run a capture's epochs through the integrity monitor (the epoch checks: position against a home surveyed
    over the first ``survey_s``, C/N0, jamming, sky, receiver flags, per-system times, the time label).  A capture
    has no arrival stamps, so each epoch's label is its instant; a capture has no PPS, so the phase checks rest."""
    from collections import Counter
    from dataclasses import replace

    from appliance.gnss.integrity import IntegrityMonitor, Level
    from appliance.gnss.survey import SurveyIn

    monitor = IntegrityMonitor(SurveyIn(survey_s, min_fixes=10))
    levels: Counter[str] = Counter()
    worst: tuple[str, ...] = ()
    result = replay_bytes(data, table)
    first = next(((i, e.tai_ns) for i, e in enumerate(result.epochs) if e.tai_ns is not None), (0, 0))
    last_ns = first[1] - (first[0] + 1) * 1_000_000_000  # epochs before the first label: a second apart
    for epoch in result.epochs:
        at_ns = epoch.tai_ns if epoch.tai_ns is not None and epoch.tai_ns > last_ns else last_ns + 1_000_000_000
        last_ns = at_ns
        epoch = replace(epoch, rx_raw_ns=at_ns)
        verdict = monitor.on_epoch(at_ns, epoch, epoch.jam_indicator, epoch.spoofing_state)
        offsets = dict(epoch.system_offsets_ns)
        if len(offsets) >= 2 and epoch.time_valid:
            verdict = monitor.on_constellation_offsets(at_ns, offsets)
        levels[verdict.level.value] += 1
        if verdict.level is not Level.OK and not worst:
            worst = verdict.reasons
    s = monitor.survey.snapshot()
    return CaptureIntegrity(len(result.epochs), dict(levels), dict(monitor.alarms), worst, f"{s.state}: {s.reason}")
