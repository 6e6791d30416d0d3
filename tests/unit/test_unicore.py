"""Unicore ASCII commands: the set-up a plan turns into, the answers and the version log, and a simulated board."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.gnss import unicore
from appliance.gnss.framer import Framer, UnicoreFrame, nmea_checksum
from appliance.gnss.plan import ReceiverPlan
from appliance.gnss.unicore import CommandAnswer, UnicoreVersion

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
