"""The receiver set-up against simulated u-blox (generation 9 and M8) and Unicore receivers: every command answered,
read back, refused keys named, silence and restarts noticed, the line's speed hunted and followed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from appliance.events import ReceiverBaud, ReceiverFault, ReceiverWrite
from appliance.gnss.framer import Framer, NmeaFrame, UbxFrame, nmea_sentence_bytes, ubx_frame_bytes
from appliance.gnss.plan import ReceiverPlan
from appliance.gnss.setup import ReceiverSetup
from appliance.sim.ubxdevice import SimUblox
from appliance.sim.unicoredevice import SimUnicore
from appliance.units import NS_PER_MS, NS_PER_S

TIM_TP = ubx_frame_bytes(0x0D, 0x01, bytes(16))
GGA = nmea_sentence_bytes("GNGGA,120000.00,4612.26,N,00608.59,E,1,12,0.8,375.0,M,48.3,M,,")


@dataclass
class Line:
    """A line to a simulated receiver: what the set-up writes reaches the device at the line's speed, whose answers
    come back framed; the receiver's own traffic (TIM-TP, GGA) each second while it talks."""

    device: Any
    device_baud: int | None = None  # None: the device hears at any speed
    baud: int = 9600
    talking: bool = True
    faults: dict[str, str] = field(default_factory=dict)
    writes: list[str] = field(default_factory=list)
    bauds: list[int] = field(default_factory=list)
    more: Any = None  # () -> bytes: more of the receiver's own traffic each second

    def run(self, setup: ReceiverSetup, seconds: float, now_ns: int = 0, start: bool = True) -> int:
        framer = Framer()
        pending = setup.start(now_ns) if start else []
        end = now_ns + int(seconds * NS_PER_S)
        while now_ns < end:
            while pending:
                ev = pending.pop(0)
                if isinstance(ev, ReceiverWrite):
                    self.writes.append(ev.what)
                    if self.device_baud in (None, self.baud):
                        reply = self.device.accept(ev.data)
                        for frame in framer.feed(reply):
                            if isinstance(frame, (NmeaFrame, UbxFrame)):
                                pending += setup.on_frame(frame, now_ns)
                elif isinstance(ev, ReceiverBaud):
                    self.baud = ev.baud
                    self.bauds.append(ev.baud)
                    if hasattr(self.device, "baud") and self.device_baud is not None:
                        pass
                elif isinstance(ev, ReceiverFault):
                    if ev.active:
                        self.faults[ev.code] = ev.text
                    else:
                        self.faults.pop(ev.code, None)
            now_ns += 100 * NS_PER_MS
            if self.talking and now_ns % NS_PER_S == 0 and self.device_baud in (None, self.baud):
                traffic = (TIM_TP if "TIM-TP" in getattr(self.device, "messages", ()) else b"") + GGA + (
                    self.more() if self.more else b"")
                for frame in framer.feed(traffic):
                    pending += setup.on_frame(frame, now_ns)
            pending += setup.tick(now_ns)
        return now_ns


def plan(**kw: Any) -> ReceiverPlan:
    return ReceiverPlan(**{"survey_min_s": 600, "survey_acc_limit_m": 2.0, "baud": 9600, **kw})


def test_zed_f9t_is_identified_set_up_and_every_key_read_back() -> None:
    device = SimUblox(9)
    setup = ReceiverSetup("gnss", plan())
    line = Line(device)
    line.run(setup, 10)
    assert setup.state == "done", setup.detail
    snap = setup.snapshot()
    assert (snap["model"], snap["firmware"], snap["family"]) == ("ZED-F9T", "TIM 2.20", "ublox9")
    assert snap["commands_answered"] == snap["commands"] > 0 and not snap["problems"]
    assert "keys set and read back" in setup.detail
    # what was asked is what the receiver now does
    assert device.timing_mode == "survey" and device.survey_min_s == 600 and device.survey_acc_limit_m == 2.0
    assert {"NAV-PVT", "TIM-TP", "NAV-SAT", "TIM-SVIN", "MON-RF", "RMC", "ZDA"} <= device.messages
    assert device.pulse_length_ms == 100 and device.pulse_rising and device.cable_delay_ns == 0
    assert not any(w.startswith("CFG-UART1-BAUDRATE") for w in line.writes)  # at the speed asked: left
    assert not line.faults


def test_m8t_is_set_up_by_cfg_messages_and_reads_back_with_two_carriers() -> None:
    device = SimUblox(8)
    setup = ReceiverSetup("gnss", plan(constellations=("gps", "galileo", "beidou", "glonass")))
    Line(device).run(setup, 20)
    assert setup.state == "done", setup.detail
    assert setup.snapshot()["family"] == "ublox8" and setup.snapshot()["model"] == "NEO-M8T"
    assert device.timing_mode == "survey" and "TIM-TP" in device.messages and "MON-HW" in device.messages
    # two of the three carriers near L1: GLONASS, the third asked for, is left out (and the set-up says so)
    assert device.constellations == {"gps", "galileo", "beidou"}
    assert "glonass left out: an M8 receives two" in setup.detail


def test_unicore_um980_answers_every_command() -> None:
    device = SimUnicore()
    setup = ReceiverSetup("gnss", plan(baud=115200), line_baud=115200)
    line = Line(device)
    line.run(setup, 20)
    assert setup.state == "done", setup.detail
    assert setup.snapshot()["family"] == "unicore" and setup.snapshot()["model"] == "UM980"
    assert device.timing_mode == "survey" and {"RMC", "GGA", "ZDA"} <= device.messages
    assert device.pulse_length_ms == 100 and device.pulse_rising


def test_a_refused_key_is_named_and_the_rest_is_set() -> None:
    device = SimUblox(9)
    device.refuse.add("CFG-TP-LEN_TP1")
    setup = ReceiverSetup("gnss", plan())
    line = Line(device)
    line.run(setup, 20)
    assert setup.state == "incomplete"
    assert "CFG-TP-LEN_TP1" in line.faults["gnss-setup"] and "refused" in line.faults["gnss-setup"]
    assert device.timing_mode == "survey" and "TIM-TP" in device.messages  # everything else went in


def test_a_read_back_that_differs_names_the_key() -> None:
    device = SimUblox(9)
    device.readback_wrong.add("CFG-TMODE-SVIN_MIN_DUR")
    setup = ReceiverSetup("gnss", plan())
    line = Line(device)
    line.run(setup, 20)
    assert "CFG-TMODE-SVIN_MIN_DUR reads back" in line.faults["gnss-setup"]


def test_a_receiver_that_answers_nothing_is_an_alarm_when_its_family_is_named() -> None:
    device = SimUblox(9)
    device.silent.update({"MON-VER", "CFG-VALSET", "CFG-VALGET"})
    setup = ReceiverSetup("gnss", plan(), family="ublox9", answer_timeout_ns=200 * NS_PER_MS)
    line = Line(device)
    line.run(setup, 60)
    assert setup.state == "incomplete"
    assert "answered none" in line.faults["gnss-unanswered"]


def test_an_nmea_receiver_that_answers_neither_question_is_read_as_it_is() -> None:
    class Mute:
        def accept(self, data: bytes) -> bytes:
            return b""

    setup = ReceiverSetup("gnss", plan(), answer_timeout_ns=200 * NS_PER_MS)
    line = Line(Mute())
    line.run(setup, 10)
    assert setup.state == "nmea" and "NMEA receiver" in setup.detail
    assert not line.faults  # no alarm: nothing was promised


def test_the_line_hunts_for_the_receivers_speed_and_moves_it_to_the_configured_one() -> None:
    device = SimUblox(9)  # out of the box at 38400
    line = Line(device, device_baud=38400, baud=9600)
    setup = ReceiverSetup("gnss", plan(baud=115200), line_baud=9600, answer_timeout_ns=300 * NS_PER_MS)

    # the device's speed follows its own setting once it is set
    original = device.accept

    def accept(data: bytes) -> bytes:
        reply = original(data)
        line.device_baud = device.baud
        return reply

    device.accept = accept  # type: ignore[method-assign]
    line.run(setup, 30)
    assert 38400 in line.bauds and line.bauds[-1] == 115200, line.bauds
    assert device.baud == 115200 and line.baud == 115200
    assert setup.state == "done", setup.detail


def test_a_restarted_receiver_is_noticed_and_set_up_again() -> None:
    device = SimUblox(9)
    setup = ReceiverSetup("gnss", plan(), message_gap_ns=3 * NS_PER_S)
    line = Line(device)
    now = line.run(setup, 10)
    assert setup.state == "done"
    device.reset()  # RAM only: the set-up is gone, TIM-TP stops
    assert "TIM-TP" not in device.messages
    now = line.run(setup, 5, now, start=False)
    assert "gnss-restarted" in line.faults or setup.state == "done"
    line.run(setup, 10, now, start=False)
    assert setup.state == "done" and "TIM-TP" in device.messages
    assert "gnss-restarted" not in line.faults


def test_a_firmware_change_is_seen_in_the_health_query() -> None:
    device = SimUblox(9)
    setup = ReceiverSetup("gnss", plan(), health_interval_ns=5 * NS_PER_S)
    line = Line(device)
    now = line.run(setup, 10)
    device.firmware = "TIM 2.24"
    line.run(setup, 10, now, start=False)
    assert setup.identity is not None and setup.identity.firmware == "TIM 2.24"
    assert setup.previous_identity is not None and setup.previous_identity.firmware == "TIM 2.20"


def test_a_receiver_that_stops_answering_raises_and_clears() -> None:
    device = SimUblox(9)
    setup = ReceiverSetup("gnss", plan(), health_interval_ns=5 * NS_PER_S, answer_timeout_ns=500 * NS_PER_MS)
    line = Line(device)
    now = line.run(setup, 10)
    device.silent.add("MON-VER")
    now = line.run(setup, 15, now, start=False)
    assert "stopped answering" in line.faults["gnss-unanswered"]
    device.silent.discard("MON-VER")
    line.run(setup, 10, now, start=False)
    assert "gnss-unanswered" not in line.faults


def test_a_fixed_position_waits_for_the_geoid_separation_and_sends_the_ellipsoidal_height() -> None:
    device = SimUblox(9)
    setup = ReceiverSetup("gnss", plan(mode="fixed", fixed_lat_deg=46.2, fixed_lon_deg=6.14, fixed_height_m=375.0))
    line = Line(device)
    line.run(setup, 10)
    assert setup.state == "done", setup.detail
    assert device.timing_mode == "fixed"
    lat, lon, height = device.fixed_llh
    assert lat == pytest.approx(46.2) and lon == pytest.approx(6.14)
    assert height == pytest.approx(375.0 + 48.3, abs=0.01)  # GGA's geoid separation added


def test_configure_false_only_identifies() -> None:
    device = SimUblox(9)
    setup = ReceiverSetup("gnss", plan(), configure=False)
    line = Line(device)
    line.run(setup, 5)
    assert setup.state == "done" and "left as it is" in setup.detail
    assert device.timing_mode == "disabled"
    assert all("VALSET" not in w and "CFG-" not in w for w in line.writes)


def test_a_unicore_board_that_restarts_without_its_saved_set_up_is_set_up_again() -> None:
    device = SimUnicore()
    setup = ReceiverSetup("gnss", plan(baud=115200), line_baud=115200, message_gap_ns=3 * NS_PER_S)

    zda = nmea_sentence_bytes("GNZDA,120000.00,07,12,2026,00,00")
    line = Line(device, more=lambda: zda if "ZDA" in device.messages else b"")  # ZDA only while set up to send it
    now = line.run(setup, 10)
    assert setup.state == "done" and "ZDA" in device.messages
    device.reset()  # not saved (plan.store is ram): back to the factory's logs, no ZDA
    now = line.run(setup, 6, now, start=False)
    line.run(setup, 10, now, start=False)
    assert setup.state == "done" and "ZDA" in device.messages
    assert any(w == "Unicore VERSIONA" for w in line.writes[3:])  # identified again after the restart
