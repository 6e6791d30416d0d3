"""Unit tests for appliance.status: the TimeStatus read model, its JSON form and the one-screen render."""

from __future__ import annotations

import json

import pytest

from appliance import config, leap
from appliance.runtime.platforms import simulated as simulated_appliance
from appliance.alarms import AlarmBook, AlarmRow
from appliance.events import Alarm, Constellation, FixMode, GnssEpoch, Position, ReceiverState, SatInfo, Severity
from appliance.gnss.receiver import ReceiverSnapshot
from appliance.clock.readiness import HoldoverReadiness
from appliance.sched import SimScheduler
from appliance.status import ClockStatus, PpsStatus, TimeStatus, render, summarize, to_dict
from appliance.utcoffset import LeapStatus

S = 1_000_000_000
TABLE = leap.LeapTable.load_default()
AT = leap.utc_fields_to_tai(2025, 3, 1, 12, 0, 10, 0, TABLE)
GPS, GAL = Constellation.GPS, Constellation.GALILEO
SATS = (SatInfo(GPS, 1, 70, 115, 45, True), SatInfo(GPS, 7, 21, 88, 35, True), SatInfo(GPS, 9, 5, 10, None, False),
        SatInfo(GAL, 3, 40, 100, 41, True), SatInfo(GAL, 5, 10, 200, 31, False))


def build(**changes) -> TimeStatus:
    epoch = GnssEpoch("2025-03-01T12:00:09.000Z", AT - S, True, FixMode.FIX_3D, Position(46.2044, 6.1432, 375.0),
                      SATS, rx_raw_ns=AT - S // 2, sources=("GGA", "RMC", "GSV"))
    fields = dict(
        at_tai_ns=AT, utc_text="2025-03-01T12:00:10.000Z", mode="hardware", version="0.1.0",
        started_at_tai_ns=AT - 3725 * S,
        receiver=ReceiverSnapshot("gnss0", "/dev/ttyS0", ReceiverState.FIX_3D, AT - 3725 * S, epoch,
                                  frames={"nmea": 100, "ubx": 10}, rejected={"checksum": 2}, ignored={"GPTXT": 3}),
        satellites=SATS, constellations=summarize(SATS),
        pps=PpsStatus("/dev/pps0", 3725, 3700, {"stale-label": 4}, 123, -1800),
        leap=LeapStatus(37, "table", "appliance/data/leap-seconds.list", "2026-12-28T00:00:00.000Z", False, 1,
                        "2027-01-01T00:00:00.000Z"),
        clock=ClockStatus("LOCKED", AT - 600 * S, "tracking GNSS", 25, -12.3456, 1.5, AT - 600 * S, None, 6, 0x21,
                          "ocxo"),
        alarms=active_alarms(Alarm("leap-disagreement", Severity.MAJOR, True, "receiver says TAI-UTC is 38 s", AT - 90 * S),
                             Alarm("gnss-no-fix", Severity.MAJOR, True, "GNSS receiver has no fix", AT),
                             Alarm("gnss-no-fix", Severity.MAJOR, False, "GNSS receiver has no fix", AT)),
    )
    fields.update(changes)
    return TimeStatus(**fields)


def active_alarms(*alarms: Alarm) -> tuple[AlarmRow, ...]:
    book = AlarmBook()
    book.apply(list(alarms))
    return book.rows()


def lines_of(status: TimeStatus) -> dict[str, str]:
    text = render(json.loads(json.dumps(to_dict(status))))  # what the CLI renders: the socket's JSON
    return {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in text.splitlines()}


def test_summarize_per_constellation():
    gps, gal = summarize(SATS)
    assert (gps.name, gps.used, gps.visible, gps.tracked, gps.mean_cn0_dbhz) == ("GPS", 2, 3, 2, 40.0)
    assert (gal.name, gal.used, gal.visible, gal.tracked, gal.mean_cn0_dbhz) == ("Galileo", 1, 2, 2, 36.0)
    assert summarize(()) == ()


def test_to_dict_is_plain_json_with_enum_values():
    d = to_dict(build())
    assert json.loads(json.dumps(d)) == d  # only JSON types: nothing changes on the way through
    assert d["receiver"]["state"] == "3d-fix"
    assert d["receiver"]["last_epoch"]["fix_mode"] == 3
    assert d["receiver"]["last_epoch"]["position"] == {"lat_deg": 46.2044, "lon_deg": 6.1432, "alt_m": 375.0}
    assert d["satellites"][0] == {"constellation": "GPS", "prn": 1, "elevation_deg": 70, "azimuth_deg": 115,
                                  "cn0_dbhz": 45, "used": True}
    assert d["alarms"][0]["severity"] == "major" and d["alarms"][0]["raised"] is True
    assert d["leap"]["pending_at_utc"] == "2027-01-01T00:00:00.000Z"
    assert d["outputs"] == {"ntp": {"enabled": False}, "ptp": {"enabled": False}}  # the others are not configured
    assert d["references"]["rows"] == [] and d["integrity"] is None


def test_render_full_status():
    got = lines_of(build())
    assert got["Time (UTC)"] == "2025-03-01T12:00:10.000Z   [hardware, up 1h02m05s]"
    assert got["Clock state"] == "LOCKED for 10m00s (tracking GNSS)"
    assert got["Error bound"] == ("25 ns   clockClass 6 (locked to a primary reference (PRTC))   clockAccuracy 0x21"
                                  " (within 100 ns)")
    assert got["Frequency"].startswith("-12.346 ppb (ocxo, ")
    assert got["Receiver"] == "gnss0 on /dev/ttyS0: 3d-fix for 1h02m05s"
    assert got["Last fix"] == "2025-03-01T12:00:09.000Z  mode 3D  position 46.204400 6.143200 375.0 m"
    assert got["Satellites"] == "GPS 2/3 (40 dBHz), Galileo 1/2 (36 dBHz)   (used/visible)"
    assert got["PPS"] == "/dev/pps0: 3725 edges, 3700 paired, qErr -1.8 ns"
    assert got["UTC offset"] == ("TAI-UTC 37 s from table; leap +1 s at 2027-01-01T00:00:00.000Z; "
                                 "table valid to 2026-12-28T00:00:00.000Z")
    assert got["Frames"] == "nmea 100, ubx 10; ignored 3"
    assert got["Rejected"] == "checksum 2; PPS stale-label 4"
    assert got["Alarms"] == "1 active"  # the cleared alarm is not shown
    text = render(json.loads(json.dumps(to_dict(build()))))
    assert "\n  #40  MAJOR    leap-disagreement: receiver says TAI-UTC is 38 s (up 1m30s)" in text


def test_render_before_anything_is_known():
    rx = ReceiverSnapshot("gnss0", "/dev/ttyS0", ReceiverState.DISCONNECTED, AT, None,
                          device_error="No such file or directory")
    leap_status = LeapStatus(38, "receiver", "t + receiver", "2026-12-28T00:00:00.000Z", True, 0, None)
    got = lines_of(build(receiver=rx, satellites=(), constellations=(), pps=PpsStatus("none", 0, 0),
                         clock=ClockStatus(state_since_ns=AT), leap=leap_status, alarms=()))
    assert got["Receiver"] == "gnss0 on /dev/ttyS0: disconnected for 0m00s  (No such file or directory)"
    assert got["Last fix"] == "-  mode -  position -"
    assert got["Satellites"] == "none   (used/visible)"
    assert got["PPS"] == "none: 0 edges, 0 paired"
    assert got["Error bound"].startswith("unknown   clockClass 248")
    assert got["UTC offset"] == "TAI-UTC 38 s from receiver; LEAP TABLE EXPIRED"
    assert got["Rejected"] == "none" and got["Alarms"] == "none"


@pytest.fixture(scope="module")
def simulated():
    """A real appliance on the simulated world, 10 simulated seconds in (as `appliance run` without a device)."""
    sched = SimScheduler(AT - 10 * S)
    app, world = simulated_appliance(config.load(None, ["sim.initial_clock_error_ns=0"]), sched, TABLE)
    world.start()
    sched.run_for(10 * S)
    return app


def test_simulated_appliance_status(simulated):
    d = to_dict(simulated.status())
    assert json.loads(json.dumps(d)) == d
    assert d["mode"] == "simulated" and abs(d["at_tai_ns"] - AT) < 1_000_000  # served time: free-running so far
    assert d["utc_text"] in ("2025-03-01T12:00:10.000Z", "2025-03-01T12:00:09.999Z")
    assert d["receiver"]["state"] == ReceiverState.FIX_3D.value
    assert {s["constellation"] for s in d["satellites"]} <= {c.value for c in Constellation}
    assert d["pps"]["source"] == "sim-pps" and d["pps"]["edges"] >= 9
    assert d["leap"]["tai_utc_s"] == 37 and d["leap"]["source"] == "table"
    text = render(d)
    assert "Clock state     : FREERUN" in text and "Receiver        : gnss0 on simulated: 3d-fix" in text
    assert "mode 3D" in text
    for c in d["constellations"]:
        assert f"{c['name']} {c['used']}/{c['visible']}" in text
    assert "TAI-UTC 37 s from table" in text
    assert "Alarms          : 1 active\n  #1   CRITICAL clock-unlocked: clock free-running: time not traceable (starting)" in text
    assert text.startswith("Verdict         : NOT TRACEABLE since 2025-03-01T12:00:00.000Z (0m")
    assert "): clock free-running (starting" in text.splitlines()[0]


def test_status_over_the_command_handler(simulated):
    reply = simulated.handle_command({"cmd": "status"})
    assert reply["ok"] is True and json.loads(json.dumps(reply)) == reply
    assert "Time (UTC)      : 2025-03-01T12:00:" in render(reply["status"])
    assert simulated.handle_command({"cmd": "reboot"}) == {"ok": False, "error": "unknown command 'reboot'"}


def test_a_state_held_since_start_shows_no_duration_and_the_holdover_readiness_has_its_line():
    rx = ReceiverSnapshot("gnss0", "/dev/ttyNOPE", ReceiverState.DISCONNECTED, None, None)
    readiness = HoldoverReadiness(False, "capable in 3 min", capable_in_s=170, within_ns=1000)
    d = to_dict(build(receiver=rx, clock=ClockStatus(state_since_ns=AT, holdover_readiness=readiness)))
    assert d["receiver"]["state_since_ns"] is None
    assert d["clock"]["holdover_readiness"] == {"capable": False, "text": "capable in 3 min", "capable_in_s": 170,
                                                "within_ns": 1000, "good_for_s": None}
    got = lines_of(build(receiver=rx, clock=ClockStatus(state_since_ns=AT, holdover_readiness=readiness)))
    assert got["Receiver"] == "gnss0 on /dev/ttyNOPE: disconnected since start"
    assert got["Holdover"] == "capable in 3 min"


def test_simulated_appliance_says_when_it_can_hold_over(simulated):
    d = to_dict(simulated.status())
    assert d["clock"]["holdover_readiness"]["capable"] is False
    assert f"\nHoldover        : {d['clock']['holdover_readiness']['text']}\nReceiver" in render(d)
