"""What the clock advertises follows the reference that drives it: PTP timeSource, NTP stratum and reference ID."""

from __future__ import annotations

from appliance import leap
from appliance.clock import quality
from appliance.outputs.ntp.publish import reference_id_bytes
from tests.sim.conftest import build_sim


def test_time_source_names_the_active_reference_while_it_drives_the_clock() -> None:
    assert quality.time_source("LOCKED") == 0x20
    assert quality.time_source("LOCKED", "ptp") == 0x40
    assert quality.time_source("ACQUIRING", "ntp") == 0x50
    assert quality.time_source("LOCKED", "irig") == 0x39
    assert quality.time_source("LOCKED", "pps") == 0x90
    assert quality.time_source("HOLDOVER", "ptp") == 0xA0  # the oscillator keeps the time in holdover


def test_ntp_stratum_is_one_more_than_the_upstream_server() -> None:
    assert quality.ntp_stratum(True) == 1
    assert quality.ntp_stratum(True, upstream_stratum=2) == 3
    assert quality.ntp_stratum(True, upstream_stratum=15) == 15
    assert quality.ntp_stratum(False, upstream_stratum=2) == 16


def test_reference_id_is_the_upstream_address_or_ascii() -> None:
    assert reference_id_bytes("192.0.2.7") == bytes([192, 0, 2, 7])
    assert reference_id_bytes("GPS") == b"GPS\0"
    assert reference_id_bytes("PTP") == b"PTP\0"
    assert len(reference_id_bytes("2001:db8::1")) == 4


def test_on_a_ptp_upstream_the_clock_says_ptp() -> None:
    sim = build_sim(**{"sim.ptp_upstream": "true", "sim.ptp_noise_ns": "5"})
    sim.run_s(300)
    assert sim.app.status().clock.advertised.time_source == 0x20
    assert sim.app.handle_command({"cmd": "world", "action": "receiver-off"})["ok"]
    sim.run_s(20)
    status = sim.app.status()
    assert status.references.active == "ptp" and status.clock.state == "LOCKED"
    assert status.clock.advertised.time_source == 0x40
    host_now = leap.tai_to_posix_ns(sim.scheduler.now_ns(), sim.app.leap_table())[0]
    assert sim.app.clock_map(host_now).reference_id == b"PTP\0"
