"""Epochs from a u-blox receiver that states no UTC: NAV-SOL, NAV-DOP, NAV-TIMEGPS and now and then NAV-SVINFO, as a
u-blox 8 sends them (gpsd's ublox-8-time.log); a timing receiver's time-only fix; the antenna supervisor."""

from __future__ import annotations

from appliance import leap
from appliance.events import Constellation as C
from appliance.events import FixMode, Position, ReceiverState, ReceiverStateChanged, SatInfo, TimeLabel
from appliance.gnss import nmea, ubx
from appliance.gnss.epoch import EpochAssembler, gps_time_utc
from appliance.gnss.framer import nmea_sentence_bytes, ubx_frame_bytes
from appliance.gnss.integrity import IntegrityMonitor, Level
from appliance.gnss.receiver import GnssReceiver
from appliance.gnss.survey import SurveyIn

TABLE = leap.LeapTable.load_default()
NS = 1_000_000_000
TAI_2017 = (1_483_228_800 + 37) * NS  # 2017-01-01T00:00:00Z on the TAI axis
GRENOBLE_ECEF_CM = (447_748_408, 45_537_294, 450_468_730)
WEEK, ITOW = 1977, 494_575_000  # 2017-12-01T17:22:55 GPS time = 17:22:37 UTC (GPS-UTC 18 s)
IDS = {"NAV-SOL": (0x01, 0x06), "NAV-DOP": (0x01, 0x04), "NAV-TIMEGPS": (0x01, 0x20), "NAV-SVINFO": (0x01, 0x30),
       "NAV-TIMEUTC": (0x01, 0x21), "MON-HW": (0x0A, 0x09), "MON-RF": (0x0A, 0x38)}


def frame_bytes(kind: str, **fields: object) -> bytes:
    return ubx_frame_bytes(*IDS[kind], ubx.encode_payload(kind, **fields))


def record(kind: str, **fields: object) -> object:
    return ubx.decode(*IDS[kind], ubx.encode_payload(kind, **fields))


def m8_epoch(itow: int, week: int = WEEK, leap_s: int = 18, gps_fix: int = 2, valid: int = 0x07, num_sv: int = 6,
             svinfo: tuple = ()) -> list:
    out = [record("NAV-SOL", itow_ms=itow, week=week, gps_fix=gps_fix, flags=0xDF, ecef_cm=GRENOBLE_ECEF_CM,
                  num_sv=num_sv),
           record("NAV-DOP", itow_ms=itow, hdop=136),
           record("NAV-TIMEGPS", itow_ms=itow, week=week, leap_s=leap_s, valid=valid)]
    if svinfo:
        out.append(record("NAV-SVINFO", itow_ms=itow, sats=svinfo))
    return out


def assemble(records: list) -> list:
    assembler = EpochAssembler(lambda: TABLE)
    epochs = []
    for i, r in enumerate(records):
        epochs += assembler.add(r, i * 1_000_000)
    return epochs + assembler.flush()


def test_gps_time_minus_leap_seconds():
    assert gps_time_utc(WEEK, ITOW, 18, TABLE) == ((2017, 12, 1), (17 * 3600 + 22 * 60 + 37) * 1000)
    assert gps_time_utc(0, 0, 0, TABLE) == ((1980, 1, 6), 0)


def test_an_epoch_without_utc_messages_is_labelled_from_gps_time():
    (epoch,) = assemble(m8_epoch(ITOW))
    assert epoch.utc_text == "2017-12-01T17:22:37.000Z"
    assert epoch.tai_ns == ubx.system_time_tai_ns(C.GPS, WEEK, ITOW * 1_000_000)
    assert epoch.time_valid and epoch.fix_mode == FixMode.FIX_2D and epoch.used_count == 6 and epoch.hdop == 1.36
    assert abs(epoch.position.alt_m - 278.88) < 0.01  # above the ellipsoid: NAV-SOL has no geoid


def test_gps_time_without_valid_leap_seconds_names_no_utc():
    epochs = assemble(m8_epoch(ITOW, valid=0x03) + m8_epoch(ITOW + 1000, valid=0x03))
    assert len(epochs) == 2 and all(e.utc_text is None and not e.time_valid for e in epochs)


def test_gps_time_without_a_valid_week_names_no_date():
    (epoch,) = assemble(m8_epoch(ITOW, valid=0x05))
    assert epoch.utc_text is None and epoch.tai_ns is None


def test_later_epochs_take_their_time_before_gps_time_arrives():
    epochs = assemble(m8_epoch(ITOW) + m8_epoch(ITOW + 1000) + m8_epoch(ITOW + 2000))
    assert [e.utc_text[11:19] for e in epochs] == ["17:22:37", "17:22:38", "17:22:39"]


def test_a_stated_utc_outranks_gps_time_in_either_order():
    utc = record("NAV-TIMEUTC", itow_ms=ITOW, date=(2017, 12, 1), hms=(17, 22, 36))  # a receiver at odds with itself
    for records in ([*m8_epoch(ITOW), utc], [utc, *m8_epoch(ITOW)]):
        (epoch,) = assemble(records)
        assert epoch.utc_text == "2017-12-01T17:22:36.000Z"


def test_gps_time_labels_the_inserted_second_2016_12_31():
    """GPS time 2017-01-01T00:00:17 (week 1930) is 23:59:60 UTC: GPS-UTC 17 s gives 00:00:00 and 18 s repeats
    23:59:59, whichever the receiver reports during the leap second; the leap table names it."""
    for leap_during in (17, 18):
        leaps = (17, 17, leap_during, 18, 18)
        records = [r for k, leap_s in enumerate(leaps) for r in m8_epoch((15 + k) * 1000, week=1930, leap_s=leap_s)]
        epochs = assemble(records)
        assert [e.utc_text[11:19] for e in epochs] == ["23:59:58", "23:59:59", "23:59:60", "00:00:00", "00:00:01"]
        assert [e.tai_ns for e in epochs] == [TAI_2017 + k * NS for k in range(-3, 2)]
        assert all(e.time_valid for e in epochs)


def test_nav_sol_height_gives_way_to_a_height_above_mean_sea_level():
    gga = nmea_sentence_bytes("GPGGA,172237.00,4513.1124687,N,00548.4306494,E,2,06,,230.23,M,48.648,M,,")
    (epoch,) = assemble([nmea.decode(gga.decode().rstrip()), *m8_epoch(ITOW)])
    assert epoch.position.alt_m == 230.23


SVINFO = ((5, 0x0F, 7, 37, 44, 201), (13, 0x0F, 7, 30, 72, 321), (70, 0x0C, 7, 33, 48, 155))


def test_the_sky_of_the_last_svinfo_stands_until_the_next_and_numsv_counts():
    epochs = assemble(m8_epoch(ITOW, svinfo=SVINFO) + m8_epoch(ITOW + 1000, num_sv=5))
    first, second = epochs
    assert first.satellites == (SatInfo(C.GLONASS, 6, 48, 155, 33, False), SatInfo(C.GPS, 5, 44, 201, 37, True),
                                SatInfo(C.GPS, 13, 72, 321, 30, True))
    assert first.used_count == 2  # the list speaks where there is one
    assert second.satellites == first.satellites and second.used_count == 5  # NAV-SOL numSV where there is not


def test_antenna_supervisor_reaches_the_epoch():
    (hw,) = assemble([*m8_epoch(ITOW), record("MON-HW", a_status=4, a_power=1)])
    assert (hw.antenna_status, hw.antenna_power) == ("open", "on")
    (rf,) = assemble([*m8_epoch(ITOW), record("MON-RF", blocks=((1, 3, 0, 5),))])
    assert (rf.antenna_status, rf.antenna_power) == ("short", "off")
    (silent,) = assemble(m8_epoch(ITOW))
    assert (silent.antenna_status, silent.antenna_power) == (None, None)


# --- the receiver: labels and state -------------------------------------------------------------------------------
def feed(*epochs_bytes: bytes) -> tuple[list, GnssReceiver]:
    rx = GnssReceiver(lambda: TABLE, device="/dev/ttyTEST")
    events: list = []
    for i, data in enumerate(epochs_bytes):
        events += rx.feed(data, i * NS)
    return events + rx.finish(), rx


def legacy_bytes(itow: int, gps_fix: int = 2, ecef_cm: tuple = GRENOBLE_ECEF_CM, valid: int = 0x07) -> bytes:
    return (frame_bytes("NAV-SOL", itow_ms=itow, week=WEEK, gps_fix=gps_fix, flags=0xDD, ecef_cm=ecef_cm, num_sv=18,
                        pdop=9999)
            + frame_bytes("NAV-TIMEGPS", itow_ms=itow, week=WEEK, leap_s=18, valid=valid))


def test_gps_time_gives_the_time_label_as_soon_as_it_arrives():
    events, _ = feed(legacy_bytes(ITOW), legacy_bytes(ITOW + 1000))
    labels = [e for e in events if isinstance(e, TimeLabel)]
    assert [(label.utc_text, label.valid, label.source) for label in labels] == [
        ("2017-12-01T17:22:37.000Z", True, "UbxGpsTime"), ("2017-12-01T17:22:38.000Z", True, "UbxGpsTime")]
    assert [label.rx_raw_ns for label in labels] == [0, NS]


def test_gps_time_without_leap_seconds_gives_no_label():
    events, _ = feed(legacy_bytes(ITOW, valid=0x03))
    assert not [e for e in events if isinstance(e, TimeLabel)]


def test_a_time_only_fix_without_a_position_is_used_for_time():
    """A timing receiver on its fixed position (gpsFix 5) that zeroes its solution: time, no position."""
    events, rx = feed(*(legacy_bytes(ITOW + k * 1000, gps_fix=5, ecef_cm=(0, 0, 0)) for k in range(3)))
    assert rx.state is ReceiverState.TIME_ONLY
    assert [e.new for e in events if isinstance(e, ReceiverStateChanged)][-1] is ReceiverState.TIME_ONLY
    assert rx.last_epoch.position is None and rx.last_epoch.time_valid and rx.last_epoch.time_only
    monitor = IntegrityMonitor(SurveyIn.configured(Position(45.2185, 5.8072, 278.9)))
    for k in range(3):
        verdict = monitor.on_epoch(k * NS, rx.last_epoch)
    assert verdict.level is Level.OK
    findings = monitor.snapshot(2 * NS).findings
    assert "no measured position" in next(f.reason for f in findings if f.detector == "position")
