"""The simulated u-blox receiver answers the appliance's set-up as a ZED-F9T or an M8T would, keeps what it was told
in the layers a real one has, and its answers read the same in pyubx2."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyubx2 import GET, UBXReader

from appliance.gnss import ubxcfg
from appliance.gnss import ubxlegacy as legacy
from appliance.gnss.framer import Framer, UbxFrame, ubx_frame_bytes
from appliance.gnss.plan import ReceiverPlan
from appliance.sim.ubxdevice import SimUblox

SURVEY = ReceiverPlan(survey_min_s=600, survey_acc_limit_m=1.5, baud=115200, pulse_length_ms=50)
FIXED = ReceiverPlan(mode="fixed", fixed_lat_deg=46.2044123456, fixed_lon_deg=-6.1432987654,
                     fixed_height_m=430.12345, fixed_acc_m=0.05, constellations=("gps", "galileo", "navic"))
M8_PLAN = ReceiverPlan(constellations=("gps", "galileo", "glonass"), baud=38400, survey_min_s=300,
                       survey_acc_limit_m=2.0)
FACTORY_NMEA = {"GGA", "GLL", "GSA", "GSV", "RMC", "VTG"}
APPLIANCE_READS = {"NAV-PVT", "NAV-STATUS", "NAV-TIMEUTC", "NAV-TIMEGPS", "NAV-TIMEGAL", "NAV-TIMEBDS", "NAV-TIMELS", "NAV-SAT", "TIM-TP",
                   "TIM-SVIN", "RMC", "GGA", "GSA", "GSV", "ZDA"}


def send(sim: SimUblox, msg_class: int, msg_id: int, payload: bytes) -> list[UbxFrame]:
    frames = Framer().feed(sim.accept(ubx_frame_bytes(msg_class, msg_id, payload)))
    assert all(isinstance(f, UbxFrame) for f in frames)
    return frames


def acked(frames: list[UbxFrame], msg_class: int, msg_id: int) -> bool | None:
    """True for ACK-ACK, False for ACK-NAK, None for no answer; the acknowledgement answers this message."""
    if not frames:
        return None
    ok, cls, mid = ubxcfg.ack_of(frames[-1].msg_class, frames[-1].msg_id, frames[-1].payload)
    assert (cls, mid) == (msg_class, msg_id)
    return ok


def configure9(sim: SimUblox, plan: ReceiverPlan) -> list[bool | None]:
    return [acked(send(sim, 0x06, 0x8A, p), 0x06, 0x8A)
            for p in ubxcfg.valset_payloads(ubxcfg.gen9_items(plan), plan.store)]


def read_back9(sim: SimUblox, names: list[str], layer: str = "ram") -> dict[str, int]:
    values = {}
    for at in range(0, len(names), 64):
        frames = send(sim, 0x06, 0x8B, ubxcfg.valget_payload(names[at:at + 64], layer))
        assert acked(frames, 0x06, 0x8B) and (frames[0].msg_class, frames[0].msg_id) == (0x06, 0x8B)
        values |= ubxcfg.decode_valget(frames[0].payload)
    return values


def configure8(sim: SimUblox, plan: ReceiverPlan) -> dict[str, bool | None]:
    return {legacy.NAMES[i] + (f" {p[:2].hex()}" if i == legacy.MSG else ""): acked(send(sim, c, i, p), c, i)
            for c, i, p in ubxcfg.m8_messages(plan)}


def test_out_of_the_box():
    f9t, m8t = SimUblox(), SimUblox(8)
    assert f9t.messages == m8t.messages == FACTORY_NMEA
    assert f9t.timing_mode == m8t.timing_mode == "disabled"
    assert (f9t.baud, m8t.baud) == (38400, 9600)
    assert f9t.constellations == {"gps", "sbas", "galileo", "beidou", "qzss", "glonass"}
    assert m8t.constellations == {"gps", "sbas", "qzss", "glonass"}
    assert (f9t.pulse_length_ms, f9t.pulse_rising, f9t.cable_delay_ns, f9t.dynamic_model) == (100, True, 50, 0)


def test_gen9_set_up_is_acknowledged_and_reads_back_as_set():
    sim = SimUblox()
    assert configure9(sim, SURVEY) == [True, True]
    items = ubxcfg.gen9_items(SURVEY)
    assert ubxcfg.gen9_mismatches(items, read_back9(sim, [n for n, _ in items])) == []
    assert sim.messages == APPLIANCE_READS | {"MON-RF"}
    assert (sim.timing_mode, sim.survey_min_s, sim.survey_acc_limit_m) == ("survey", 600, 1.5)
    assert (sim.pulse_length_ms, sim.pulse_period_ms, sim.pulse_rising, sim.cable_delay_ns) == (50, 1000, True, 0)
    assert sim.constellations == {"gps", "galileo", "beidou", "glonass"}
    assert (sim.baud, sim.dynamic_model) == (115200, 2)


def test_gen9_fixed_position_to_a_tenth_of_a_millimetre():
    sim = SimUblox()
    assert configure9(sim, FIXED) == [True, True]
    lat, lon, height = sim.fixed_llh
    assert sim.timing_mode == "fixed" and sim.fixed_acc_m == pytest.approx(0.05)
    assert lat == pytest.approx(46.2044123456, abs=1e-9) and lon == pytest.approx(-6.1432987654, abs=1e-9)
    assert height == pytest.approx(430.12345, abs=1e-4)
    assert sim.constellations == {"gps", "galileo", "navic"}


def test_valget_answer_reads_the_same_in_pyubx2():
    sim = SimUblox()
    configure9(sim, FIXED)
    names = ["CFG-TMODE-LAT", "CFG-TMODE-LON_HP", "CFG-TMODE-HEIGHT", "CFG-TP-ANT_CABLEDELAY", "CFG-UART1-BAUDRATE"]
    frame = ubx_frame_bytes(0x06, 0x8B, send(sim, 0x06, 0x8B, ubxcfg.valget_payload(names))[0].payload)
    parsed = UBXReader.parse(frame, msgmode=GET)
    for name, value in ubxcfg.decode_valget(UBXReader.parse(frame, msgmode=GET).payload).items():
        assert getattr(parsed, name.replace("-", "_")) == value == sim.value(name)


def test_refused_key_naks_its_whole_valset():
    sim = SimUblox()
    sim.refuse = {"CFG-TP-LEN_TP1"}
    assert configure9(sim, SURVEY) == [False, True]  # the pulse went in the first VALSET: none of it applied
    assert sim.timing_mode == "disabled" and sim.pulse_length_ms == 100 and sim.baud == 115200
    sim.refuse = {"CFG-VALSET"}
    assert configure9(sim, SURVEY) == [False, False]


def test_silent_receiver_never_answers():
    sim = SimUblox()
    sim.silent = {"CFG-UART1-BAUDRATE", "MON-VER"}
    assert configure9(sim, SURVEY) == [True, None]
    assert sim.baud == 38400 and sim.timing_mode == "survey"
    assert send(sim, 0x0A, 0x04, b"") == []


def test_wrong_readback_is_seen_and_the_receiver_keeps_the_truth():
    sim = SimUblox()
    configure9(sim, SURVEY)
    sim.readback_wrong = {"CFG-TP-LEN_LOCK_TP1", "CFG-TP-POL_TP1"}
    items = ubxcfg.gen9_items(SURVEY)
    assert ubxcfg.gen9_mismatches(items, read_back9(sim, [n for n, _ in items])) == [
        "CFG-TP-LEN_LOCK_TP1: set 50000, read 50001", "CFG-TP-POL_TP1: set 1, read 0"]
    assert sim.pulse_length_ms == 50 and sim.pulse_rising and sim.value("CFG-TP-LEN_LOCK_TP1") == 50_000


@pytest.mark.parametrize("items", [
    [("0x10310099", 1)],  # a key this receiver does not have
    [("CFG-TMODE-MODE", 3)], [("CFG-NAVSPG-DYNMODEL", 1)], [("CFG-TP-TIMEGRID_TP1", 5)],
    [("CFG-UART1-BAUDRATE", 12345)], [("CFG-TMODE-LAT", 900_000_001)],
    [("CFG-TP-LEN_LOCK_TP1", 1_000_000)],  # as long as its period
])
def test_out_of_range_values_are_refused(items):
    sim = SimUblox()
    assert acked(send(sim, 0x06, 0x8A, ubxcfg.valset_payload(items, "ram")), 0x06, 0x8A) is False
    assert sim.value("CFG-TMODE-MODE") == 0 and sim.value("CFG-TP-LEN_LOCK_TP1") == 100_000


def test_out_of_range_high_precision_part_is_refused():
    payload = bytes((0, 1, 0, 0)) + (0x2003000C).to_bytes(4, "little") + bytes((100,))
    assert acked(send(SimUblox(), 0x06, 0x8A, payload), 0x06, 0x8A) is False


def test_transactions_and_bad_requests_are_refused():
    sim = SimUblox()
    set_mode = (0x20030001).to_bytes(4, "little") + b"\x01"
    assert acked(send(sim, 0x06, 0x8A, bytes((1, 1, 1, 0)) + set_mode), 0x06, 0x8A) is False
    assert acked(send(sim, 0x06, 0x8A, bytes((0, 1, 0, 0)) + set_mode[:3]), 0x06, 0x8A) is False
    assert acked(send(sim, 0x06, 0x8B, bytes((0, 3, 0, 0)) + set_mode[:4]), 0x06, 0x8B) is False
    assert acked(send(sim, 0x06, 0x8B, bytes((0, 0, 0, 0)) + (0x10310099).to_bytes(4, "little")), 0x06, 0x8B) is False
    assert acked(send(sim, 0x06, 0x77, b""), 0x06, 0x77) is False  # a CFG message it does not know
    assert send(sim, 0x02, 0x15, b"") == []  # not a command: no answer
    assert sim.timing_mode == "disabled"


def test_bbr_and_flash_layers_hold_only_what_was_stored():
    sim = SimUblox()
    configure9(sim, ReceiverPlan(store="flash"))
    assert read_back9(sim, ["CFG-TMODE-MODE", "CFG-SIGNAL-NAVIC_ENA"], "flash") == {"CFG-TMODE-MODE": 1}
    assert read_back9(sim, ["CFG-TMODE-MODE"], "bbr") == {}
    assert read_back9(sim, ["CFG-UART1-BAUDRATE"], "default") == {"CFG-UART1-BAUDRATE": 38400}


@pytest.mark.parametrize("store, kept", [("ram", False), ("bbr", True), ("flash", True)])
def test_a_reset_keeps_what_the_store_kept(store, kept):
    sim = SimUblox()
    configure9(sim, ReceiverPlan(store=store, baud=115200))
    sim.reset()
    assert (sim.timing_mode, sim.baud) == (("survey", 115200) if kept else ("disabled", 38400))
    assert sim.messages == (APPLIANCE_READS | {"MON-RF"} if kept else FACTORY_NMEA)


def test_bbr_wins_over_flash_after_a_reset():
    sim = SimUblox()
    configure9(sim, ReceiverPlan(store="flash", pulse_length_ms=10))
    configure9(sim, ReceiverPlan(store="bbr", pulse_length_ms=20))
    configure9(sim, ReceiverPlan(store="ram", pulse_length_ms=30))
    assert sim.pulse_length_ms == 30
    sim.reset()
    assert sim.pulse_length_ms == 20


def test_turning_ubx_output_off_silences_every_ubx_message():
    sim = SimUblox()
    configure9(sim, SURVEY)
    send(sim, 0x06, 0x8A, ubxcfg.valset_payload([("CFG-UART1OUTPROT-UBX", 0)], "ram"))
    assert sim.messages == {"RMC", "GGA", "GSA", "GSV", "ZDA"}


def test_bytes_in_any_chunking_get_the_same_answers():
    stream = b"".join(ubx_frame_bytes(0x06, 0x8A, p) for p in ubxcfg.valset_payloads(ubxcfg.gen9_items(FIXED), "ram"))
    stream += b"$GNRMC,junk*00\r\n" + ubxcfg.mon_ver_poll()
    whole, trickled = SimUblox(), SimUblox()
    answers = whole.accept(stream)
    assert b"".join(trickled.accept(stream[i:i + 1]) for i in range(len(stream))) == answers
    assert trickled.fixed_llh == whole.fixed_llh and len(Framer().feed(answers)) == 3


@pytest.mark.parametrize("generation, family", [(9, "ublox9"), (8, "ublox8")])
def test_mon_ver_answer(generation, family):
    sim = SimUblox(generation)
    [frame] = send(sim, 0x0A, 0x04, b"")
    ver = ubxcfg.decode_mon_ver(frame.payload)
    assert ubxcfg.family_of(ver) == family
    assert (ver.model, ver.firmware) == (("ZED-F9T", "TIM 2.20") if generation == 9 else ("NEO-M8T", "TIM 1.10"))
    assert ver.sw_version.startswith("EXT CORE") and ver.hw_version == ("00190000" if generation == 9 else "00080000")
    parsed = UBXReader.parse(ubx_frame_bytes(0x0A, 0x04, frame.payload), msgmode=GET)
    assert parsed.identity == "MON-VER" and parsed.hwVersion.rstrip(b"\0").decode() == ver.hw_version
    custom = ubxcfg.decode_mon_ver(send(SimUblox(9, "ZED-X20P", "HPG 2.00", "50.00"), 0x0A, 0x04, b"")[0].payload)
    assert (custom.model, custom.firmware, custom.protocol) == ("ZED-X20P", "HPG 2.00", "50.00")


def test_m8_set_up_is_acknowledged_and_reads_back_as_set():
    sim = SimUblox(8)
    assert set(configure8(sim, M8_PLAN).values()) == {True}
    assert sim.messages == APPLIANCE_READS | {"MON-HW"}
    assert (sim.timing_mode, sim.survey_min_s, sim.survey_acc_limit_m) == ("survey", 300, 2.0)
    assert (sim.pulse_length_ms, sim.pulse_rising, sim.cable_delay_ns, sim.dynamic_model) == (100, True, 0, 2)
    assert (sim.constellations, sim.baud) == ({"gps", "galileo", "glonass"}, 38400)
    for msg_class, msg_id, poll in ubxcfg.m8_readback_polls(M8_PLAN):
        answer, ack = send(sim, msg_class, msg_id, poll)
        assert acked([ack], msg_class, msg_id) and (answer.msg_class, answer.msg_id) == (msg_class, msg_id)
        assert ubxcfg.m8_mismatches(M8_PLAN, msg_class, msg_id, answer.payload) == []
        assert UBXReader.parse(ubx_frame_bytes(msg_class, msg_id, answer.payload), msgmode=GET).identity == (
            legacy.NAMES[msg_id])


def test_m8_fixed_position_and_wrong_readback():
    plan = ReceiverPlan(mode="fixed", fixed_lat_deg=-33.85678, fixed_lon_deg=151.21529, fixed_height_m=45.6,
                        fixed_acc_m=0.3, constellations=("gps", "beidou"), pulse_rising=False)
    sim = SimUblox(8)
    assert set(configure8(sim, plan).values()) == {True}
    assert sim.fixed_llh == pytest.approx((-33.85678, 151.21529, 45.6)) and sim.fixed_acc_m == pytest.approx(0.3)
    assert not sim.pulse_rising
    sim.readback_wrong = {"CFG-TMODE-HEIGHT"}
    [answer, _] = send(sim, 0x06, legacy.TMODE2, b"")
    assert ubxcfg.m8_mismatches(plan, 0x06, legacy.TMODE2, answer.payload) == [
        "CFG-TMODE2 ecef_z_or_alt: set 4560, read 4561"]


def test_m8_cannot_take_three_carriers():
    sim = SimUblox(8)
    answers = configure8(sim, ReceiverPlan())  # GPS, Galileo, BeiDou and GLONASS
    assert answers.pop("CFG-GNSS") is False and set(answers.values()) == {True}
    assert sim.constellations == {"gps", "sbas", "qzss", "glonass"}
    assert sim.timing_mode == "survey"  # the rest went in


def test_m8_refused_and_silent_messages():
    sim = SimUblox(8)
    sim.refuse, sim.silent = {"CFG-TP5", "NAV-SAT"}, {"CFG-NAV5"}
    answers = configure8(sim, M8_PLAN)
    assert answers["CFG-TP5"] is False and answers["CFG-MSG 0135"] is False and answers["CFG-NAV5"] is None
    assert answers["CFG-TMODE2"] is True and "NAV-SAT" not in sim.messages and sim.dynamic_model == 0


def test_each_generation_refuses_the_others_messages():
    f9t, m8t = SimUblox(9), SimUblox(8)
    tmode2 = ubxcfg.m8_tmode2(M8_PLAN).payload()
    assert acked(send(f9t, 0x06, legacy.TMODE2, tmode2), 0x06, legacy.TMODE2) is False  # an M8 timing message
    assert acked(send(m8t, 0x06, 0x8A, ubxcfg.valset_payload([("CFG-TMODE-MODE", 1)], "ram")), 0x06, 0x8A) is False
    assert acked(send(m8t, 0x06, 0x01, bytes((0x0A, 0x38, 1))), 0x06, 0x01) is False  # MON-RF: not on an M8
    # Generation 9 still takes the deprecated legacy messages it documents: a CFG-TP5 lands on its keys.
    assert acked(send(f9t, 0x06, legacy.TP5, ubxcfg.m8_tp5(M8_PLAN).payload()), 0x06, legacy.TP5)
    assert read_back9(f9t, ["CFG-TP-LEN_TP1", "CFG-TP-ANT_CABLEDELAY"]) == {
        "CFG-TP-LEN_TP1": 100_000, "CFG-TP-ANT_CABLEDELAY": 0}


@pytest.mark.parametrize("store, kept", [("ram", False), ("bbr", True), ("flash", True)])
def test_m8_save_survives_a_reset(store, kept):
    sim = SimUblox(8)
    configure8(sim, ReceiverPlan(constellations=("gps",), store=store))
    send(sim, 0x06, legacy.RST, bytes((0, 0, 1, 0)))  # a controlled software reset: no answer
    assert sim.timing_mode == ("survey" if kept else "disabled")
    assert sim.constellations == ({"gps"} if kept else {"gps", "sbas", "qzss", "glonass"})


def test_m8_clear_and_load():
    sim = SimUblox(8)
    configure8(sim, ReceiverPlan(constellations=("gps",), store="bbr"))
    clear = legacy.CfgCfg(legacy.CFG_ALL_SECTIONS, 0, legacy.CFG_ALL_SECTIONS, legacy.DEV_BBR).payload()
    assert acked(send(sim, 0x06, legacy.CFG_CFG, clear), 0x06, legacy.CFG_CFG)
    assert sim.timing_mode == "disabled" and sim.baud == 9600  # cleared, then loaded: the factory's


def test_m8_msg_poll_and_port_refusals():
    sim = SimUblox(8)
    configure8(sim, M8_PLAN)
    [answer, _] = send(sim, 0x06, legacy.MSG, bytes((0x01, 0x07)))
    assert legacy.CfgMsg.decode(answer.payload).rates == (0, 1, 0, 0, 0, 0)
    usb = legacy.CfgPrt(port_id=3, baud_rate=9600).payload()
    seven_bits = legacy.CfgPrt(mode=(2 << 6) | (4 << 9), baud_rate=9600).payload()
    odd_speed = legacy.CfgPrt(baud_rate=12345).payload()
    for payload in (usb, seven_bits, odd_speed):
        assert acked(send(sim, 0x06, legacy.PRT, payload), 0x06, legacy.PRT) is False
    assert sim.baud == 38400


@settings(max_examples=200)
@given(st.binary(max_size=300))
def test_garbage_never_breaks_the_simulated_receiver(noise):
    for generation in (8, 9):
        sim = SimUblox(generation)
        sim.accept(noise)
        assert sim.timing_mode == "disabled"


@settings(max_examples=200)
@given(st.sampled_from([0x8A, 0x8B, 0x00, 0x01, 0x09, 0x24, 0x31, 0x3D, 0x3E, 0x04]), st.binary(max_size=80))
def test_any_payload_to_a_known_command_is_answered_or_refused(msg_id, payload):
    for generation in (8, 9):
        frames = Framer().feed(SimUblox(generation).accept(ubx_frame_bytes(0x06, msg_id, payload)))
        assert all(isinstance(f, UbxFrame) for f in frames)
