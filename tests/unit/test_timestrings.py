"""Serial time strings: exact bytes for known instants, checksums, status characters, pynmea2 reads them back."""

from __future__ import annotations

import pynmea2
import pytest

from appliance.leap import UtcTime
from appliance.outputs.timestrings import StringStatus, meinberg, nmea_sentence, rmc, time_string, zda

T = UtcTime(2024, 7, 9, 13, 14, 15, 0)
LEAP = UtcTime(2016, 12, 31, 23, 59, 60, 0)
BERLIN = StringStatus(True, 52.5163, 13.3777)


def test_zda_bytes_and_checksum() -> None:
    assert zda(T) == b"$GPZDA,131415.00,09,07,2024,00,00*6F\r\n"
    msg = pynmea2.parse(zda(T).decode().strip())
    assert (msg.datetime.year, msg.datetime.month, msg.datetime.day, msg.datetime.hour, msg.datetime.minute,
            msg.datetime.second) == (2024, 7, 9, 13, 14, 15)


def test_rmc_carries_status_mode_and_position() -> None:
    line = rmc(T, BERLIN).decode().strip()
    assert line.startswith("$GPRMC,131415.00,A,5230.9780,N,01322.6620,E,0.0,,090724,,,A*")
    msg = pynmea2.parse(line)
    assert msg.status == "A" and msg.mode_indicator == "A"
    assert abs(msg.latitude - 52.5163) < 1e-6 and abs(msg.longitude - 13.3777) < 1e-6
    unsynced = pynmea2.parse(rmc(T, StringStatus(False)).decode().strip())
    assert unsynced.status == "V" and unsynced.mode_indicator == "N" and unsynced.lat == ""
    south_west = pynmea2.parse(rmc(T, StringStatus(True, -33.8688, -151.2093)).decode().strip())
    assert (south_west.lat_dir, south_west.lon_dir) == ("S", "W") and abs(south_west.longitude + 151.2093) < 1e-6


def test_checksum_is_the_xor_of_the_body() -> None:
    assert nmea_sentence("GPZDA,000000.00,01,01,2000,00,00") == b"$GPZDA,000000.00,01,01,2000,00,00*64\r\n"


def test_meinberg_string_bytes() -> None:
    assert meinberg(T, BERLIN) == b"\x02D:09.07.24;T:2;U:13.14.15;  U \x03"  # 2024-07-09 was a Tuesday
    assert meinberg(T, StringStatus(False)) == b"\x02D:09.07.24;T:2;U:13.14.15;#*U \x03"
    leap = meinberg(LEAP, StringStatus(True, 1.0, 2.0, leap_within_hour=True))
    assert leap == b"\x02D:31.12.16;T:6;U:23.59.60;  UA\x03" and len(leap) == 32  # a Saturday, second 60


def test_leap_second_is_second_60_in_nmea() -> None:
    assert zda(LEAP).startswith(b"$GPZDA,235960.00,31,12,2016,")


def test_time_string_kinds() -> None:
    both = time_string("zda+rmc", T, BERLIN)
    assert both.startswith(b"$GPZDA") and b"\r\n$GPRMC" in both
    with pytest.raises(ValueError, match="zda, rmc, zda\\+rmc or meinberg"):
        time_string("gga", T, BERLIN)
