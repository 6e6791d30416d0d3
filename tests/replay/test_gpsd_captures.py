"""Real receiver captures from gpsd's regression suite, decoded by us and compared with gpsd's own decoding.

Where we disagree with gpsd on purpose, a test of its own asserts our behaviour and says why.
"""

from __future__ import annotations

import struct
from collections import Counter
from functools import cache

import pytest
from tests.replay.gpsd_reference import CAPTURES, DATA_DIR, load, satellite_keys, satellite_level, tod_ms_of

from appliance import leap
from appliance.edge.input_files import read_capture
from appliance.events import (Constellation, FixMode, GnssEpoch, LeapInfo, ReceiverState, TimeLabel,
                              TimePulseInfo)
from appliance.gnss import nmea, ubx
from appliance.gnss.framer import UBX_SYNC, Framer, NmeaFrame, UbxFrame, ubx_checksum
from appliance.gnss.receiver import GnssReceiver
from appliance.gnss.replay import ReplayResult, replay_bytes

DEG_TOLERANCE = 1e-6
M8T, F9T, ZEUS = "u-blox-m8t-time", "ublox-zed-f9t-ubx_nmea_l5", "bundg_zeus_9"
UBLOX8, M8T_S = "ublox-8-time", "ublox-neo-m8t-s"  # NAV-SOL, NAV-TIMEGPS, NAV-SVINFO: no NAV-PVT, no NMEA


@cache
def replayed(name: str) -> ReplayResult:
    return replay_bytes(read_capture(DATA_DIR / f"{name}.log"))


def dated_epochs(name: str) -> dict[int, GnssEpoch]:
    epochs = [e for e in replayed(name).epochs if e.utc_text]
    by_tod = {tod_ms_of(e.utc_text): e for e in epochs}
    assert len(by_tod) == len(epochs), "two epochs name the same second"
    return by_tod


@cache
def receiver_events(name: str) -> tuple[list[object], GnssReceiver]:
    """The capture fed to a GnssReceiver 1 kB at a time, one chunk per millisecond of local clock."""
    data = read_capture(DATA_DIR / f"{name}.log")
    table = leap.LeapTable.load_default()
    rx = GnssReceiver(lambda: table, device=name)
    events: list[object] = []
    for i in range(0, len(data), 1024):
        events += rx.feed(data[i : i + 1024], i * 1_000)
    return events + rx.finish(), rx


def nmea_positions_by_second(name: str) -> dict[int, list[tuple[str, float, float]]]:
    """Every position the receiver stated in NMEA, in stream order, by the second its sentence names."""
    framer = Framer()
    out: dict[int, list[tuple[str, float, float]]] = {}
    for frame in framer.feed(read_capture(DATA_DIR / f"{name}.log")) + framer.flush():
        record = nmea.decode(frame.text) if isinstance(frame, NmeaFrame) else None
        if isinstance(record, nmea.TimeRecord) and record.position is not None:
            out.setdefault(record.tod_ms, []).append((record.kind, record.position.lat_deg, record.position.lon_deg))
    return out


def close(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return abs(a[0] - b[0]) <= DEG_TOLERANCE and abs(a[1] - b[1]) <= DEG_TOLERANCE


# --- time, fix, satellites and position against gpsd ------------------------------------------------------------
@pytest.mark.parametrize("name", CAPTURES)
def test_time_and_fix_mode_match_gpsd_for_every_timed_epoch(name):
    ours = {e.utc_text: e for e in replayed(name).epochs if e.utc_text}
    reference = load(name).tpv
    assert reference, "gpsd reported no timed fix: the comparison would be empty"
    for time, tpv in reference.items():
        assert time in ours, f"gpsd has an epoch at {time}, we do not"
        assert int(ours[time].fix_mode) == tpv["mode"], time


@pytest.mark.parametrize("name", CAPTURES)
def test_satellites_used_match_gpsd_sky(name):
    known = {(ZEUS, "09:49:26"): (11, 12)}  # test_zeus_glonass_used_despite_zero_cn0
    known |= {(F9T, f"19:33:3{s}"): (22, 23) for s in (4, 5, 6)}  # test_f9t_galileo_used_on_e5a_alone
    ours = dated_epochs(name)
    compared, differences = 0, {}
    for tod_ms, sky in load(name).sky.items():
        if tod_ms not in ours:
            continue  # only the Zeus's first, undated epoch: test_zeus_first_epoch_has_no_date_like_gpsd
        compared += 1
        if ours[tod_ms].used_count != sky["uSat"]:
            label = ours[tod_ms].utc_text[11:19]
            differences[(name, label)] = (sky["uSat"], ours[tod_ms].used_count)
    assert compared > 0
    assert differences == {k: v for k, v in known.items() if k[0] == name}


@pytest.mark.parametrize("name", CAPTURES)
def test_every_gpsd_sky_epoch_is_one_of_ours(name):
    missing = {tod_ms for tod_ms in load(name).sky if tod_ms not in dated_epochs(name)}
    assert missing == ({tod_ms_of("2018-08-20T09:47:36.000Z")} if name == ZEUS else set())


def test_zeus_first_epoch_has_no_date_like_gpsd():
    """The Zeus starts with GGA/GLL, which carry no date; the first RMC comes a second later.  gpsd's TPVs before it
    have no ``time`` either.  The satellites still agree with gpsd's SKY for that second."""
    first = replayed(ZEUS).epochs[0]
    assert first.utc_text is None and first.tai_ns is None and not first.time_valid
    assert first.used_count == load(ZEUS).sky[tod_ms_of("2018-08-20T09:47:36.000Z")]["uSat"] == 12


def test_zeus_glonass_used_despite_zero_cn0():
    """At 09:49:26 the Zeus's GPGSA lists PRN 76 (GLONASS 12) among the 12 used and its GGA says 12 satellites,
    while that second's GPGSV gives PRN 76 a C/N0 of 00.  gpsd drops a used satellite without signal (uSat 11);
    we report what the receiver says it used (12): the solution is the receiver's, not ours to second-guess."""
    epoch = dated_epochs(ZEUS)[tod_ms_of("2018-08-20T09:49:26.000Z")]
    glonass_12 = next(s for s in epoch.satellites if (s.constellation, s.prn) == (Constellation.GLONASS, 12))
    assert glonass_12.used and not glonass_12.cn0_dbhz
    assert epoch.used_count == 12
    assert load(ZEUS).sky[tod_ms_of(epoch.utc_text)]["uSat"] == 11


def f9t_receiver_counts() -> dict[int, tuple[int, int]]:
    """Per epoch, the F9T's own statements of satellites used: NAV-PVT numSV and the satellites its GSAs list.
    Each of its epochs starts with NAV-PVT, before the NMEA."""
    framer, counts, tod_ms = Framer(), {}, None
    for frame in framer.feed(read_capture(DATA_DIR / f"{F9T}.log")) + framer.flush():
        if isinstance(frame, UbxFrame) and (frame.msg_class, frame.msg_id) == (0x01, 0x07):
            utc, fix = ubx.decode(0x01, 0x07, frame.payload)
            tod_ms = utc.tod_ms
            counts[tod_ms] = (fix.num_sv, set())
        elif isinstance(frame, NmeaFrame) and tod_ms is not None:
            record = nmea.decode(frame.text)
            if isinstance(record, nmea.UsedRecord):
                counts[tod_ms][1].update(record.sats)
    return {k: (num_sv, len(gsa)) for k, (num_sv, gsa) in counts.items()}


def test_f9t_gpsd_counts_signals_where_we_count_satellites():
    """The ZED-F9T tracks L1 and L5.  gpsd's last SKY of each epoch is built from UBX-NAV-SIG and lists one entry
    per *signal*, so a satellite used on both counts twice (uSat 51-54).  We count satellites, and agree with the
    receiver's own count: NAV-PVT numSV and its NMEA GSAs (23 in every epoch)."""
    ours, reference, receiver = dated_epochs(F9T), load(F9T), f9t_receiver_counts()
    assert len(reference.final_sky) == len(receiver) == 9
    for tod_ms, final in reference.final_sky.items():
        assert not satellite_level(final) and 51 <= final["uSat"] <= 54
        assert ours[tod_ms].used_count == receiver[tod_ms][0] == receiver[tod_ms][1] == 23 < final["uSat"]


def test_f9t_galileo_used_on_e5a_alone():
    """In the F9T's first three epochs NAV-SAT marks Galileo 10 unused, and gpsd's NAV-SAT SKY says 22; yet NAV-PVT
    numSV, the GNGSA for Galileo (system ID 3) and NAV-SIG's prUsed flag on E10's E5a signal all say 23.  NAV-SAT's
    svUsed speaks for the primary (E1) signal only, which this satellite was not yet using.  We count it (23): it was
    in the solution, and an L5 receiver under L1 interference must not look as if it had no satellites."""
    ours, reference = dated_epochs(F9T), load(F9T)
    for second in ("34", "35", "36"):
        tod_ms = tod_ms_of(f"2025-07-31T19:33:{second}.000Z")
        galileo_10 = next(s for s in ours[tod_ms].satellites if (s.constellation, s.prn) == (Constellation.GALILEO, 10))
        gpsd_galileo_10 = next(s for s in reference.sky[tod_ms]["satellites"] if (s["gnssid"], s["svid"]) == (2, 10))
        assert galileo_10.used and not gpsd_galileo_10["used"]
        assert (reference.sky[tod_ms]["uSat"], ours[tod_ms].used_count) == (22, 23)


@pytest.mark.parametrize("name", CAPTURES)
def test_positions_match_gpsd(name):
    """Compared wherever the receiver's own NMEA positions for a second agree with each other (see the Zeus test)."""
    contradicting = {t for t, ps in nmea_positions_by_second(name).items() if any(not close(p[1:], ps[0][1:])
                                                                                  for p in ps)}
    assert bool(contradicting) == (name == ZEUS)
    ours, compared = dated_epochs(name), 0
    for time, tpv in load(name).tpv.items():
        epoch = ours[tod_ms_of(time)]
        if "lat" not in tpv or tod_ms_of(time) in contradicting:
            continue
        assert epoch.position is not None, time
        compared += 1
        assert close((epoch.position.lat_deg, epoch.position.lon_deg), (tpv["lat"], tpv["lon"])), time
    assert compared > 0


def test_zeus_sends_three_positions_a_second_and_we_prefer_gga():
    """The Zeus sends GGA, GLL and RMC each second with positions up to ~4 m apart (RMC repeats the previous
    second's GGA position: one second of travel at 5-6 kn).  gpsd's TPV carries whichever of them its reporting
    cycle ended on; we take GGA's (the fix sentence, with altitude and quality), else the first one stated.  Both
    are the receiver's own words and a timing appliance does not care about 4 m, so we keep the fix sentence."""
    positions, ours = nmea_positions_by_second(ZEUS), dated_epochs(ZEUS)
    disagreements = 0
    for time, tpv in load(ZEUS).tpv.items():
        stated = positions[tod_ms_of(time)]
        epoch = ours[tod_ms_of(time)]
        mine, theirs = (epoch.position.lat_deg, epoch.position.lon_deg), (tpv["lat"], tpv["lon"])
        gga = [p[1:] for p in stated if p[0] == "GGA"]
        assert close(mine, gga[0] if gga else stated[0][1:])
        assert any(close(theirs, p[1:]) for p in stated)
        assert abs(mine[0] - theirs[0]) < 5e-5 and abs(mine[1] - theirs[1]) < 5e-5
        disagreements += not close(mine, theirs)
    assert disagreements == 99


# --- the timing receivers --------------------------------------------------------------------------------------
def tim_tp_qerrs_in(data: bytes) -> list[int]:
    """qErr of every checksummed, qErr-valid TIM-TP in a capture, found without our framer or decoder."""
    header = UBX_SYNC + bytes((0x0D, 0x01, 16, 0))
    found, start = [], data.find(header)
    while start >= 0:
        frame = data[start : start + 24]
        if len(frame) == 24 and bytes(ubx_checksum(frame[2:22])) == frame[22:24]:
            qerr, flags = struct.unpack_from("<i", frame, 6 + 8)[0], frame[6 + 14]
            if not flags & 0x10:
                found.append(qerr)
        start = data.find(header, start + 1)
    return found


def test_m8t_qerr_arrives_as_time_pulse_info():
    events, _ = receiver_events(M8T)
    expected = tim_tp_qerrs_in(read_capture(DATA_DIR / f"{M8T}.log"))
    assert len(expected) > 100
    assert [e.qerr_ps for e in events if isinstance(e, TimePulseInfo)] == expected


@pytest.mark.parametrize("name", [M8T, F9T, M8T_S])
def test_timing_receivers_report_tai_utc_37(name):
    events, rx = receiver_events(name)
    leaps = [e for e in events if isinstance(e, LeapInfo)]
    expected_kinds = {M8T: {"UbxLeap", "UbxGpsTime"}, F9T: {"UbxGpsTime"}, M8T_S: {"UbxGpsTime"}}[name]
    assert set(leaps) == {LeapInfo(37)}
    assert len(leaps) == len(expected_kinds) * rx.epochs


def test_m8t_epochs_are_valid_time_only_fixes():
    events, rx = receiver_events(M8T)
    epochs = [e for e in events if isinstance(e, GnssEpoch)]
    assert len(epochs) == 151
    assert all(e.time_only and e.fix_mode == FixMode.FIX_3D and e.time_valid for e in epochs)
    assert rx.state is ReceiverState.TIME_ONLY


@pytest.mark.parametrize("name", [M8T, F9T, M8T_S])
def test_timing_receivers_label_every_epoch_once(name):
    events, _ = receiver_events(name)
    labels = [e for e in events if isinstance(e, TimeLabel)]
    epochs = [e for e in events if isinstance(e, GnssEpoch)]
    assert [(label.tai_ns, label.utc_text) for label in labels] == [(e.tai_ns, e.utc_text) for e in epochs]
    assert all(label.valid for label in labels)


# --- u-blox receivers that state no UTC ----------------------------------------------------------------------------
@pytest.mark.parametrize("name, count", [(UBLOX8, 89), (M8T_S, 29)])
def test_legacy_ublox_epochs_are_gpsds_epochs_one_for_one(name, count):
    """No NAV-PVT and no NMEA: each epoch's UTC comes from NAV-TIMEGPS (GPS time - leapS), its fix from NAV-SOL.
    Our epochs are gpsd's TPVs, in order, time for time and fix mode for fix mode."""
    epochs, reference = replayed(name).epochs, load(name).tpv
    assert len(epochs) == len(reference) == count
    assert [(e.utc_text, int(e.fix_mode)) for e in epochs] == [(time, tpv["mode"]) for time, tpv in reference.items()]


def test_ublox8_last_epoch_lost_its_gps_time_and_goes_unlabelled():
    """The capture ends inside the last epoch's NAV-TIMEGPS.  gpsd still reports that epoch's time: it resolves
    NAV-SOL's own GPS week and time of week with the leap seconds the previous NAV-TIMEGPS gave.  We name the epoch
    too (iTOW with the last GPS-UTC offset), so the epochs agree, but nothing in it vouched for UTC: it is not
    time-valid and gets no TimeLabel, since a label nobody vouched for must not steer the clock.  89 epochs, 88
    labels."""
    events, rx = receiver_events(UBLOX8)
    epochs = [e for e in events if isinstance(e, GnssEpoch)]
    labels = [e for e in events if isinstance(e, TimeLabel)]
    assert [e.time_valid for e in epochs] == [True] * 88 + [False]
    assert [(label.tai_ns, label.utc_text) for label in labels] == [(e.tai_ns, e.utc_text) for e in epochs[:-1]]
    assert epochs[-1].utc_text == list(load(UBLOX8).tpv)[-1] == "2017-12-01T17:24:05.000Z"
    assert "UbxGpsTime" not in epochs[-1].sources and "UbxSolution" in epochs[-1].sources
    assert all(label.valid and label.source == "UbxGpsTime" for label in labels)
    assert rx.state is ReceiverState.FIX_2D


def test_m8t_on_its_fixed_position_is_time_only_where_gpsd_says_status_time():
    """NAV-SOL gpsFix 5: gpsd reports mode 3 with status 7 (STATUS_TIME); we report a 3D time-only fix, and the
    receiver's state is time-only."""
    events, rx = receiver_events(M8T_S)
    epochs = [e for e in events if isinstance(e, GnssEpoch)]
    assert {tpv["status"] for tpv in load(M8T_S).tpv.values()} == {7}
    assert all(e.time_only and e.fix_mode == FixMode.FIX_3D and e.time_valid for e in epochs)
    assert rx.state is ReceiverState.TIME_ONLY


@pytest.mark.parametrize("name", [UBLOX8, M8T_S])
def test_legacy_ublox_heights_are_gpsds_height_above_the_ellipsoid(name):
    """NAV-SOL gives ECEF only.  gpsd's ``alt``/``altMSL`` subtract its own geoid model from the ellipsoidal height
    (``altHAE``); we carry no geoid model, so the height we report is gpsd's altHAE (to the millimetre), tens of
    metres from its altMSL (the geoid lies 48.6 m above the ellipsoid at Grenoble, 22.2 m below it in Oregon)."""
    ours = dated_epochs(name)
    separations = set()
    for time, tpv in load(name).tpv.items():
        epoch = ours[tod_ms_of(time)]
        assert abs(epoch.position.alt_m - tpv["altHAE"]) < 1e-3, time
        separations.add(round(tpv["altHAE"] - tpv["altMSL"], 1))
    assert separations == {UBLOX8: {48.6}, M8T_S: {-22.2}}[name]


@pytest.mark.parametrize("name", [UBLOX8, M8T_S])
def test_legacy_ublox_sky_is_gpsds_satellite_for_satellite(name):
    """NAV-SVINFO's one-byte svid (GPS, SBAS 120-158, QZSS 193-197, GLONASS 65-96 here) decodes to the same
    systems, satellites and used flags as gpsd's SKY, and the sky stands between reports (every 10 s here)."""
    gnss_ids = {system: gnss_id for gnss_id, system in ubx.GNSS_IDS.items()}
    ours = dated_epochs(name)
    for tod_ms, sky in load(name).sky.items():
        mine = {(gnss_ids[s.constellation], s.prn, s.used) for s in ours[tod_ms].satellites}
        assert mine == satellite_keys(sky) and len(ours[tod_ms].satellites) == sky["nSat"]
    first_report = min(load(name).sky)
    assert all(len(e.satellites) == (0 if tod_ms < first_report else len(ours[first_report].satellites))
               for tod_ms, e in ours.items() if tod_ms < first_report + 10_000)


def test_legacy_ublox_dop_is_the_receivers_where_gpsd_computes_its_own():
    """Our HDOP is NAV-DOP's.  The NEO-M8T on its fixed position sends 99.99, u-blox's "no DOP": we report none,
    where gpsd's SKY computes DOPs of its own from NAV-SVINFO's geometry (0.59 and so on)."""
    assert {e.hdop for e in replayed(M8T_S).epochs} == {None}
    assert {sky["hdop"] for sky in load(M8T_S).sky.values()} == {0.59}
    assert {e.hdop for e in replayed(M8T).epochs} == {None}  # the same receiver family in the same mode


# --- what each capture costs us --------------------------------------------------------------------------------
EXPECTED_COUNTS = {
    "beidou-bd": ({"nmea": 79}, {}),
    "bundg_zeus_9": ({"nmea": 4999}, {}),
    # The m8t capture starts with three JSON lines from the capture tool and ends inside a NAV-SAT frame.
    "u-blox-m8t-time": ({"ubx": 1511}, {"bytes:noise": 1, "ubx:truncated": 1}),
    "ublox-neo-m9n-nmea": ({"nmea": 1403}, {}),
    "ublox-zed-f9t-ubx_nmea_l5": ({"ubx": 83, "nmea": 252}, {}),
    "ublox-8-time": ({"ubx": 284}, {"ubx:truncated": 1}),  # ends inside the last epoch's NAV-TIMEGPS
    "ublox-neo-m8t-s": ({"ubx": 153}, {}),
}


@pytest.mark.parametrize("name", CAPTURES)
def test_frame_and_rejection_counters(name):
    snapshot = replayed(name).receiver
    assert (snapshot.frames, snapshot.rejected) == EXPECTED_COUNTS[name]


def test_m8t_capture_tool_json_is_the_noise():
    data = read_capture(DATA_DIR / f"{M8T}.log")
    json_lines = data[: data.index(UBX_SYNC)]
    assert json_lines.startswith(b'{"class":"VERSION"')
    json_bytes = sum(len(line.strip()) for line in json_lines.splitlines())
    assert f"bytes:noise {json_bytes} bytes between frames" in replayed(M8T).receiver.last_rejects


@pytest.mark.parametrize("name", CAPTURES)
def test_chunking_does_not_change_the_replay(name):
    data = read_capture(DATA_DIR / f"{name}.log")
    for chunk in (1, 61) if len(data) < 100_000 else (61,):
        result = replay_bytes(data, chunk=chunk)
        assert result.epochs == replayed(name).epochs
        assert Counter(result.receiver.rejected) == Counter(replayed(name).receiver.rejected)
