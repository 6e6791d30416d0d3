"""NMEA decoding: talkers and satellite numbers to constellations, GSV signal IDs, leap-second times, bad fields."""

from __future__ import annotations

import pytest

from appliance.events import Constellation as C
from appliance.events import FixMode, Position, Rejected
from appliance.gnss import nmea
from appliance.gnss.framer import nmea_sentence_bytes


def decode(body: str):
    return nmea.decode(nmea_sentence_bytes(body).decode().rstrip())


def gsv_sats(talker: str, *prns: int, signal: str | None = None) -> list[tuple[C, int]]:
    blocks = ",".join(f"{prn:02d},45,180,40" for prn in prns)
    body = f"{talker}GSV,1,1,{len(prns):02d},{blocks}" + ("" if signal is None else f",{signal}")
    record = decode(body)
    assert isinstance(record, nmea.ViewRecord), record
    return [(const, prn) for const, prn, *_ in record.sats]


@pytest.mark.parametrize("talker, prn, expected", [
    ("GP", 5, (C.GPS, 5)), ("GL", 7, (C.GLONASS, 7)), ("GL", 71, (C.GLONASS, 7)), ("GA", 11, (C.GALILEO, 11)),
    ("GA", 311, (C.GALILEO, 11)), ("BD", 13, (C.BEIDOU, 13)), ("GB", 13, (C.BEIDOU, 13)), ("GB", 213, (C.BEIDOU, 13)),
    ("GB", 413, (C.BEIDOU, 13)), ("GQ", 2, (C.QZSS, 2)), ("GQ", 194, (C.QZSS, 2)), ("PQ", 3, (C.QZSS, 3)),
    ("QZ", 1, (C.QZSS, 1)), ("GI", 4, (C.NAVIC, 4)),
])
def test_talker_names_the_constellation(talker, prn, expected):
    assert gsv_sats(talker, prn) == [expected]


EXTENDED = [
    (1, (C.GPS, 1)), (32, (C.GPS, 32)), (33, (C.SBAS, 120)), (46, (C.SBAS, 133)), (65, (C.GLONASS, 1)),
    (96, (C.GLONASS, 32)), (131, (C.SBAS, 131)), (193, (C.QZSS, 1)), (199, (C.QZSS, 7)), (201, (C.BEIDOU, 1)),
    (202, (C.BEIDOU, 2)), (237, (C.BEIDOU, 37)), (263, (C.BEIDOU, 63)), (301, (C.GALILEO, 1)),
    (336, (C.GALILEO, 36)), (401, (C.BEIDOU, 1)), (437, (C.BEIDOU, 37)),
]


@pytest.mark.parametrize("talker, prn, expected",
                         [("GN", *case) for case in EXTENDED] + [("GP", *case) for case in EXTENDED if case[0] > 32])
def test_extended_satellite_numbers_under_gn_and_gp(talker, prn, expected):
    assert gsv_sats(talker, prn) == [expected]


def test_pq_talker_is_decoded_not_taken_for_a_proprietary_sentence():
    """pynmea2 alone parses "$PQGSA" as maker "QGS"'s proprietary sentence and the satellites would be lost."""
    assert decode("PQGSA,A,3,02,03,,,,,,,,,,,1.2,0.7,0.9").sats == ((C.QZSS, 2), (C.QZSS, 3))
    assert isinstance(decode("PQXYZ,1,2"), nmea.Ignored)


@pytest.mark.parametrize("system_id, prns, expected", [
    (1, (5, 44, 197, 201), [(C.GPS, 5), (C.SBAS, 131), (C.QZSS, 5), (C.QZSS, 9)]),  # u-blox files QZSS under GPS
    (2, (65, 7), [(C.GLONASS, 1), (C.GLONASS, 7)]),
    (3, (2, 36), [(C.GALILEO, 2), (C.GALILEO, 36)]),
    (4, (12, 34), [(C.BEIDOU, 12), (C.BEIDOU, 34)]),
    (5, (1, 10), [(C.QZSS, 1), (C.QZSS, 10)]),
    (6, (3,), [(C.NAVIC, 3)]),
])
def test_nmea_410_system_id_in_gngsa(system_id, prns, expected):
    fields = [f"{p:02d}" for p in prns] + [""] * (12 - len(prns))
    record = decode(f"GNGSA,A,3,{','.join(fields)},1.1,0.6,0.9,{system_id}")
    assert isinstance(record, nmea.UsedRecord)
    assert list(record.sats) == expected
    assert record.fix == FixMode.FIX_3D and record.hdop == 0.6


def test_non_numeric_system_id_falls_back_to_the_talker():
    record = decode("BDGSA,A,3,01,02,,,,,,,,,,,2.5,1.3,2.1,4.0")  # SiRF-TriG puts a float here (beidou-bd.log)
    assert record.sats == ((C.BEIDOU, 1), (C.BEIDOU, 2))


def test_gsv_with_and_without_signal_id():
    with_signal = decode("GPGSV,3,1,12,02,24,310,29,08,37,282,42,10,73,011,34,18,19,128,34,1")
    without = decode("GPGSV,3,1,12,02,24,310,29,08,37,282,42,10,73,011,34,18,19,128,34")
    assert with_signal.signal == "1" and without.signal == ""
    assert with_signal.sats == without.sats == ((C.GPS, 2, 24, 310, 29), (C.GPS, 8, 37, 282, 42),
                                                (C.GPS, 10, 73, 11, 34), (C.GPS, 18, 19, 128, 34))
    assert (with_signal.part, with_signal.parts, with_signal.total) == (1, 3, 12)


def test_gsv_short_last_part_and_missing_cn0():
    assert decode("GAGSV,3,3,09,36,72,322,,7").sats == ((C.GALILEO, 36, 72, 322, None),)
    assert decode("GPGSV,7,7,25,04,08,012,").sats == ((C.GPS, 4, 8, 12, None),)


def test_rmc_decodes_time_date_position_and_validity():
    record = decode("GNRMC,223745.00,A,3806.62964,N,12237.61382,W,0.040,,110720,,,D,V")
    assert isinstance(record, nmea.TimeRecord)
    assert record.tod_ms == (22 * 3600 + 37 * 60 + 45) * 1000 and record.date == (2020, 7, 11)
    assert record.valid and record.mode == FixMode.FIX_2D
    assert record.position == Position(38 + 6.62964 / 60, -(122 + 37.61382 / 60))


def test_gga_with_altitude_is_3d_and_without_fix_is_no_fix():
    fixed = decode("GNGGA,193334.00,4404.13124,N,12118.84810,W,1,12,0.62,1139.9,M,-21.3,M,,")
    assert fixed.mode == FixMode.FIX_3D and fixed.position.alt_m == 1139.9 and fixed.num_sats == 12
    empty = decode("GNGGA,074150.799,,,,,0,00,,,M,0.0,M,,0000,")
    assert empty.mode == FixMode.NO_FIX and empty.position is None and empty.valid is False


def test_milliseconds_are_kept():
    assert decode("GNGGA,074150.799,,,,,0,00,,,M,,M,,").tod_ms == (7 * 3600 + 41 * 60 + 50) * 1000 + 799


def test_leap_second_235960_parses():
    record = decode("GPRMC,235960,A,4807.038,N,01131.000,E,0.0,0.0,311216,,,A")
    assert record.tod_ms == 86_400_000 and record.date == (2016, 12, 31)
    assert decode("GPZDA,235960.50,31,12,2016,00,00").tod_ms == 86_400_500


BAD_FIELDS = [
    "GPRMC,1a3519,A,4807.038,N,01131.000,E,0.0,0.0,230394,,,A",  # time not digits
    "GPRMC,250000,A,4807.038,N,01131.000,E,0.0,0.0,230394,,,A",  # hour 25
    "GPRMC,123060,A,4807.038,N,01131.000,E,0.0,0.0,230394,,,A",  # second 60 outside 23:59
    "GPRMC,123519.,A,4807.038,N,01131.000,E,0.0,0.0,230394,,,A",  # dot without fraction
    "GPRMC,123519,A,4807.038,N,01131.000,E,0.0,0.0,321394,,,A",  # day 32
    "GPRMC,123519,A,4807.038,N,01131.000,E,0.0,0.0,23039,,,A",  # five-digit date
    "GPRMC,123519,A,48-7.038,N,01131.000,E,0.0,0.0,230394,,,A",  # sign inside a coordinate
    "GPRMC,123519,A,4867.038,N,01131.000,E,0.0,0.0,230394,,,A",  # 67 minutes
    "GPRMC,123519,A,4807.038,,01131.000,E,0.0,0.0,230394,,,A",  # no hemisphere
    "GPRMC,123519,A,4807.038,X,01131.000,E,0.0,0.0,230394,,,A",  # hemisphere X
    "GPRMC,123519,A,4807.038,N,1131.000,E,0.0,0.0,230394,,,A",  # longitude missing a degree digit
    "GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,nan,M,46.9,M,,",  # altitude nan
    "GPGGA,123519,4807.038,N,01131.000,E,1,08,inf,545.4,M,46.9,M,,",  # hdop inf
    "GPGGA,123519,4807.038,N,01131.000,E,one,08,0.9,545.4,M,46.9,M,,",  # quality
    "GPGGA,123519,4807.038,N,01131.000,E,1,1_2,0.9,545.4,M,46.9,M,,",  # int() would read 12
    "GPGSA,A,7,01,02,,,,,,,,,,,1.0,1.0,1.0",  # fix type 7
    "GPGSA,A,3,x1,02,,,,,,,,,,,1.0,1.0,1.0",  # PRN
    "GPGSV,2,3,08,01,40,083,46",  # part 3 of 2
    "GPGSV,,1,08,01,40,083,46",  # no part count
    "GPGSV,1,1,01,01,4x,083,46",  # elevation
    "GPZDA,123519,23,03,94,00,00",  # two-digit year
    "GPZDA,123519,23,13,1994,00,00",  # month 13
    "GPGLL,4807.038,N,01131.000,E,12351,A,A",  # short time
]


@pytest.mark.parametrize("body", BAD_FIELDS)
def test_malformed_field_is_rejected_as_bad_field(body):
    result = decode(body)
    assert isinstance(result, Rejected) and (result.what, result.reason) == ("nmea", "bad-field"), result


@pytest.mark.parametrize("body, reason", [
    ("PUBX", "unparseable"), ("PASHR", "unparseable"), ("PTNL", "unparseable"), ("PSXN", "unparseable"),
    ("GPRMC", "unparseable"), ("GPRMC,", "bad-field"),
])
def test_empty_sentences_are_rejected_never_raised(body, reason):
    """pynmea2's u-blox, Ashtech, Trimble and SeaNav classes index their first fields while being built."""
    result = decode(body)
    assert isinstance(result, Rejected) and (result.what, result.reason) == ("nmea", reason)


def test_unknown_and_proprietary_types_are_ignored():
    assert decode("SDDPT,5.3,0.4,") == nmea.Ignored("DPT")
    assert isinstance(decode("PUBX,00,081350.00,4717.113210,N"), nmea.Ignored)
    assert isinstance(decode("GPVTG,,T,,M,0.040,N,0.075,K,D"), nmea.Ignored)


def test_query_sentence_is_ignored_not_a_bad_rmc():
    assert decode("CCGPQ,RMC") == nmea.Ignored("query")


def test_encapsulated_ais_sentence_is_ignored():
    text = nmea_sentence_bytes("AIVDM,1,1,,A,13u?etPv2;0n:dDPwUM1U1Cb069D,0").decode().rstrip()
    assert nmea.decode("!" + text[1:]) == nmea.Ignored("VDM")


def test_txt_keeps_the_text():
    assert decode("GPTXT,01,01,02,ANTSTATUS=OK") == nmea.TextRecord("GP", "ANTSTATUS=OK")
