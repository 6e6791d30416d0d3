"""Unicore ASCII commands: the set-up a plan turns into, the answers and the version log, and a simulated board."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.gnss import unicore
from appliance.gnss.framer import Framer, UnicoreFrame, nmea_checksum
from appliance.gnss.plan import ReceiverPlan
from appliance.gnss.unicore import CommandAnswer, UnicoreVersion
from appliance.sim.unicoredevice import SimUnicore

SURVEY = ReceiverPlan(mode="survey", survey_min_s=1800, survey_acc_limit_m=2.5, pulse_length_ms=100,
                      constellations=("gps", "galileo", "beidou", "glonass"), baud=115200, store="ram")
FIXED = ReceiverPlan(mode="fixed", fixed_lat_deg=44.06886183, fixed_lon_deg=-121.3141, fixed_height_m=1087.25,
                     pulse_length_ms=200, pulse_rising=False, constellations=("gps", "qzss", "navic"), baud=460800,
                     store="flash")
MESSAGES = ["GPRMC COM1 1", "GPGGA COM1 1", "GPGSA COM1 1", "GPGSV COM1 1", "GPZDA COM1 1"]

# Lines as real UM980/UM982 receivers sent them (published with open-source drivers and their tests).
CAPTURED_ANSWERS = {
    "$command,MODE,response: OK*5D": CommandAnswer("MODE", True, "OK"),
    "$command,GNRMC 1,response: OK*1A": CommandAnswer("GNRMC 1", True, "OK"),
    "$command,unlog,response: OK*21": CommandAnswer("unlog", True, "OK"),
    "$command,VERSIONA,response: OK*45": CommandAnswer("VERSIONA", True, "OK"),
    "$command,badResponse,response: PARSING FAILD NO MATCHING FUNC  BADRESPONSE*40":
        CommandAnswer("badResponse", False, "PARSING FAILD NO MATCHING FUNC  BADRESPONSE"),
}
CAPTURED_VERSIONS = {
    '#VERSIONA,79,GPS,FINE,2326,378237000,15434,0,18,889;"UM982","R4.10Build15434","HRPT00-S10C-P",'
    '"2310415000012-LR23A2225208904","ff2740966a10124c","2024/08/08"*769fd54f':
        UnicoreVersion("UM982", "R4.10Build15434", "HRPT00-S10C-P", "2310415000012-LR23A2225208904",
                       "ff2740966a10124c", "2024/08/08"),
    '#VERSIONA,97,GPS,FINE,2343,48235000,0,0,18,813;"UM980","R4.10Build11833","HRPT00-S10C-P",'
    '"2310415000001-MD22A2225022497","ff3ba396dcb0478d","2023/11/24"*270a13f7':
        UnicoreVersion("UM980", "R4.10Build11833", "HRPT00-S10C-P", "2310415000001-MD22A2225022497",
                       "ff3ba396dcb0478d", "2023/11/24"),
    # Older firmware's VERSION log: the same fields, unquoted.
    "#VERSION,0,GPS,UNKNOWN,0,0,0,0,0,1261;UM982,R4.10Build11826,HRPT00-S10C-P,2310415000012-LR23A0225104240,"
    "ff27289609cf869d,2023/11/24*4d0ec3ba":
        UnicoreVersion("UM982", "R4.10Build11826", "HRPT00-S10C-P", "2310415000012-LR23A0225104240",
                       "ff27289609cf869d", "2023/11/24"),
}


# --- the commands ----------------------------------------------------------------------------------------------
def test_survey_plan_commands():
    assert unicore.commands(SURVEY) == [
        "UNLOG COM1",
        "MODE BASE TIME 1800 2.5 2.5",
        "CONFIG PPS ENABLE GPS POSITIVE 100000 1000 0 0",
        "UNMASK GPS", "UNMASK BDS", "UNMASK GLO", "UNMASK GAL", "MASK QZSS", "MASK IRNSS",
        *MESSAGES,
        "CONFIG COM1 115200",
    ]


def test_fixed_plan_commands_on_another_port_saved():
    assert unicore.commands(FIXED, "COM2") == [
        "UNLOG COM2",
        "MODE BASE 44.068861830 -121.314100000 1087.2500",
        "CONFIG PPS ENABLE GPS NEGATIVE 200000 1000 0 0",
        "UNMASK GPS", "MASK BDS", "MASK GLO", "MASK GAL", "UNMASK QZSS", "UNMASK IRNSS",
        *(m.replace("COM1", "COM2") for m in MESSAGES),
        "CONFIG COM2 460800",
        "SAVECONFIG",
    ]


def test_timing_boards_take_mode_timing():
    assert unicore.mode_syntax_for("UT4B0") == "timing" and unicore.mode_syntax_for("UM980") == "base"
    assert unicore.commands(SURVEY, mode_syntax="timing")[1] == "MODE TIMING SURVEYIN 1800 2.5 2.5"
    assert unicore.commands(FIXED, mode_syntax="timing")[1] == "MODE TIMING FIX 44.068861830 -121.314100000 1087.2500"


def test_the_receiver_keeps_its_own_systems_when_the_plan_names_none():
    assert not any("MASK" in c for c in unicore.commands(ReceiverPlan(constellations=(), baud=115200)))


@pytest.mark.parametrize("plan, port, syntax", [
    (ReceiverPlan(baud=4800), "COM1", "base"),  # not a Unicore port speed
    (ReceiverPlan(constellations=("sbas",), baud=9600), "COM1", "base"),  # would mask every system
    (ReceiverPlan(survey_min_s=0, baud=9600), "COM1", "base"),
    (ReceiverPlan(baud=9600), "USB", "base"),
    (ReceiverPlan(baud=9600), "COM1", "rover"),
])
def test_what_a_unicore_receiver_cannot_be_set_to_is_refused(plan, port, syntax):
    with pytest.raises(ValueError):
        unicore.commands(plan, port, mode_syntax=syntax)


def test_encode_ends_with_crlf_and_takes_one_line():
    assert unicore.encode("SAVECONFIG") == b"SAVECONFIG\r\n"
    for bad in ("", "MODE\r\nSAVECONFIG", "MODE BASE \u00e9"):
        with pytest.raises(ValueError):
            unicore.encode(bad)


# --- the answers -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("line, answer", CAPTURED_ANSWERS.items())
def test_captured_answers_parse(line, answer):
    assert unicore.answer_of(line + "\r\n") == answer


def test_answers_are_built_as_receivers_send_them():
    for line, answer in CAPTURED_ANSWERS.items():
        assert unicore.answer_line(answer.command, answer.text) == line


def test_an_answer_checksummed_as_nmea_counts_parses_too():
    body = "command,MODE,response: OK"
    assert unicore.answer_of(f"${body}*{nmea_checksum(body.encode()):02X}") == CommandAnswer("MODE", True, "OK")


@pytest.mark.parametrize("line", [
    "$command,MODE,response: OK*5E",  # checksum off by one
    "$command,MODE,response: OK*5",
    "$command,MODE,response: OK",
    "$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*47",
    "#VERSIONA,1;x*00000000",
    "",
])
def test_other_lines_are_not_answers(line):
    assert unicore.answer_of(line) is None


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.builds(lambda cmd, resp, ck: f"$command,{cmd},response: {resp}*{ck}",
                                      st.text(), st.text(), st.text(max_size=3))))
def test_any_text_gives_an_answer_or_none(line):
    answer = unicore.answer_of(line)
    assert answer is None or isinstance(answer, CommandAnswer)
    assert unicore.parse_version(line) is None or line.lstrip().startswith("#VERSION")


@given(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1).filter(str.strip),
       st.sampled_from(["OK", "PARSING FAILD NO MATCHING FUNC  X", "not support"]))
def test_answer_round_trip(command, response):
    answer = unicore.answer_of(unicore.answer_line(command, response))
    assert answer == CommandAnswer(command, response == "OK", response)


# --- the version -----------------------------------------------------------------------------------------------
def test_version_query():
    assert unicore.version_query() == "VERSIONA"


@pytest.mark.parametrize("line, version", CAPTURED_VERSIONS.items())
def test_captured_versions_parse(line, version):
    assert unicore.parse_version(line + "\r\n") == version
    (frame,) = Framer().feed(line.encode() + b"\r\n")
    assert frame == UnicoreFrame(line)


def test_a_version_with_a_bad_crc_or_another_log_is_none():
    line = next(iter(CAPTURED_VERSIONS))
    assert unicore.parse_version(line.replace("UM982", "UM983")) is None
    assert unicore.parse_version(line[: -8] + "00000000") is None
    assert unicore.parse_version(unicore.log_line("BESTNAVA", ["SOL_COMPUTED", "SINGLE"])) is None


def test_version_lines_are_built_as_receivers_send_them():
    line, version = next(iter(CAPTURED_VERSIONS.items()))
    assert unicore.version_line(version, header="79,GPS,FINE,2326,378237000,15434,0,18,889") == line


def test_version_round_trip():
    version = UnicoreVersion("UM980", "R4.10Build11826", "HRPT00-S10C-P", "SIM1", "00", "2023/11/24")
    assert unicore.parse_version(unicore.version_line(version)) == version
    assert unicore.parse_version(unicore.version_line(UnicoreVersion("UM980", ""))) is None  # no firmware: no version


# --- the simulated board ---------------------------------------------------------------------------------------
def set_up(board: SimUnicore, plan: ReceiverPlan, port: str = "COM1") -> list[CommandAnswer | None]:
    """Send the plan's commands one at a time; the answer to each, None where none came."""
    answers = []
    for command in unicore.commands(plan, port, mode_syntax=unicore.mode_syntax_for(board.version.model)):
        lines = board.accept(unicore.encode(command)).decode().splitlines()
        answers.append(unicore.answer_of(lines[0]) if lines else None)
    return answers


@pytest.mark.parametrize("model", ["UM980", "UT4B0"])
def test_every_command_of_a_survey_plan_is_taken_and_the_board_says_what_was_asked(model):
    board = SimUnicore(model)
    assert set_up(board, SURVEY) == [CommandAnswer(c, True, "OK") for c in unicore.commands(
        SURVEY, mode_syntax=unicore.mode_syntax_for(model))]
    assert board.messages == {"RMC", "GGA", "GSA", "GSV", "ZDA"}
    assert set(board.message_period_s.values()) == {1.0}
    assert (board.timing_mode, board.survey_min_s, board.survey_acc_limit_m) == ("survey", 1800, 2.5)
    assert (board.pulse_length_ms, board.pulse_period_ms, board.pulse_rising) == (100, 1000, True)
    assert (board.rf_delay_ns, board.user_delay_ns) == (0, 0)
    assert board.constellations == {"gps", "galileo", "beidou", "glonass"}
    assert board.baud == 115200


def test_every_command_of_a_fixed_plan_is_taken_and_the_board_says_what_was_asked():
    board = SimUnicore(port="COM2")
    assert all(answer and answer.ok for answer in set_up(board, FIXED, "COM2"))
    assert (board.timing_mode, board.fixed_llh) == ("fixed", pytest.approx((44.06886183, -121.3141, 1087.25)))
    assert (board.pulse_length_ms, board.pulse_rising) == (200, False)
    assert board.constellations == {"gps", "qzss", "navic"}
    assert board.baud == 460800


def test_factory_state():
    board = SimUnicore()
    assert board.messages == {"GGA", "GSA", "GSV", "RMC"}
    assert (board.timing_mode, board.survey_min_s, board.fixed_llh) == ("disabled", None, None)
    assert (board.pps_enabled, board.pulse_length_ms, board.pulse_period_ms, board.pulse_rising) == (True, 500, 1000,
                                                                                                   True)
    assert board.constellations == {"gps", "glonass", "galileo", "beidou", "qzss", "navic"}
    assert board.baud == unicore.FACTORY_BAUD == 115200


def test_versiona_is_answered_then_logged_and_frames_whole():
    board = SimUnicore("UM982", "R4.10Build15434")
    frames = Framer().feed(board.accept(unicore.encode(unicore.version_query())))
    assert [type(f) for f in frames] == [UnicoreFrame, UnicoreFrame]
    assert unicore.answer_of(frames[0].text) == CommandAnswer("VERSIONA", True, "OK")
    version = unicore.parse_version(frames[1].text)
    assert version is not None and (version.model, version.firmware) == ("UM982", "R4.10Build15434")


def test_mode_and_config_queries_read_the_set_up_back():
    board = SimUnicore()
    set_up(board, SURVEY)
    mode, config = (Framer().feed(board.accept(unicore.encode(query))) for query in ("MODE", "CONFIG"))
    assert [f.text.split(";")[-1] for f in mode[1:]] == [f"MODE BASE TIME 1800 2.5 2.5,*{mode[1].text[-2:]}"]
    assert [f.text.split(",")[2].split("*")[0] for f in config[1:]] == [
        "CONFIG COM1 115200", "CONFIG PPS ENABLE GPS POSITIVE 100000 1000 0 0"]


def test_unknown_and_malformed_commands_get_an_error_and_change_nothing():
    board = SimUnicore()
    answers = [unicore.answer_of(line) for line in board.accept(
        b"NOSUCH THING\r\nCONFIG PPS ENABLE GPS POSITIVE 2000000 1000 0 0\r\nMODE BASE TIME -5\r\nMASK MARS\r\n"
        b"MODE TIMING SURVEYIN 60 1 1\r\n").decode().splitlines()]
    assert [a.ok for a in answers if a] == [False] * 5
    assert answers[0].text == "PARSING FAILD NO MATCHING FUNC  NOSUCH"
    assert (board.pulse_length_ms, board.timing_mode) == (500, "disabled")  # a UM980 has no MODE TIMING


def test_lines_may_end_in_cr_lf_or_both_and_arrive_in_pieces():
    board = SimUnicore()
    data = b"GPZDA COM1 1\rGPGGA COM1 1\nUNLOG COM1 GPGSV\r\n"
    out = b"".join(board.accept(data[i : i + 1]) for i in range(len(data)))
    assert [unicore.answer_of(line).ok for line in out.decode().splitlines()] == [True] * 3
    assert board.messages == {"GGA", "GSA", "RMC", "ZDA"}


def test_a_command_in_nmea_framing_is_taken_and_answered_without_it():
    board = SimUnicore()
    assert board.accept(b"$VERSIONA*1B\r\n").decode().splitlines()[0] == "$command,VERSIONA,response: OK*45"


def test_refused_commands_get_an_error_and_change_nothing():
    board = SimUnicore()
    board.refuse = {"CONFIG PPS", "unmask"}
    answers = set_up(board, SURVEY)
    refused = [a.command for a in answers if a and not a.ok]
    assert refused == ["CONFIG PPS ENABLE GPS POSITIVE 100000 1000 0 0", "UNMASK GPS", "UNMASK BDS", "UNMASK GLO",
                       "UNMASK GAL"]
    assert board.pulse_length_ms == 500  # the factory's
    assert board.constellations == {"gps", "glonass", "galileo", "beidou"}  # masks taken, unmasks refused
    assert board.baud == 115200


def test_silent_commands_are_never_answered_and_change_nothing():
    board = SimUnicore()
    board.silent = {"GPZDA", "MODE"}
    answers = dict(zip(unicore.commands(SURVEY), set_up(board, SURVEY)))
    assert [c for c, a in answers.items() if a is None] == ["MODE BASE TIME 1800 2.5 2.5", "GPZDA COM1 1"]
    assert board.timing_mode == "disabled" and "ZDA" not in board.messages
    assert board.received == unicore.commands(SURVEY)


def test_reset_goes_back_to_the_factory_without_saveconfig():
    board = SimUnicore()
    set_up(board, SURVEY)
    board.reset()
    assert (board.timing_mode, board.baud, board.messages) == ("disabled", 115200, {"GGA", "GSA", "GSV", "RMC"})


def test_reset_keeps_what_saveconfig_saved_and_freset_forgets_it():
    board = SimUnicore()
    saved = ReceiverPlan(mode="survey", survey_min_s=600, baud=230400, store="flash")
    set_up(board, saved)
    board.accept(b"GPGST COM1 1\r\n")  # after the save: lost at the power cycle
    board.reset()
    assert (board.timing_mode, board.survey_min_s, board.baud) == ("survey", 600, 230400)
    assert board.messages == {"RMC", "GGA", "GSA", "GSV", "ZDA"}
    board.accept(b"FRESET\r\n")
    board.reset()
    assert (board.timing_mode, board.baud) == ("disabled", 115200)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200).map(lambda b: b.replace(b"$", b"").replace(b"!", b"")))
def test_any_bytes_get_answers_the_framer_takes_whole(data):
    """(A '$' or '!' inside a command would be echoed and break the answer's framing, as it would a real board's.)"""
    board = SimUnicore()
    out = board.accept(data + b"\r\n")
    framer = Framer()
    frames = framer.feed(out) + framer.flush()
    assert all(isinstance(f, UnicoreFrame) for f in frames)
    assert len([f for f in frames if unicore.answer_of(f.text)]) == len(board.received)
