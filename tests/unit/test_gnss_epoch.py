"""Epoch assembly: dates for GGA-only epochs, the 2016-12-31 leap second, and NMEA + UBX of the same second."""

from __future__ import annotations

import struct

from appliance import leap
from appliance.events import Constellation as C
from appliance.events import FixMode, SatInfo
from appliance.gnss import nmea, ubx
from appliance.gnss.epoch import EpochAssembler
from appliance.gnss.framer import nmea_sentence_bytes

TABLE = leap.LeapTable.load_default()
NS = 1_000_000_000
TAI_2017 = (1_483_228_800 + 37) * NS  # 2017-01-01T00:00:00Z on the TAI axis (TAI-UTC 37 s from then on)
FIX = "4807.038,N,01131.000,E"


def assemble(records: list) -> list:
    assembler = EpochAssembler(lambda: TABLE)
    epochs = []
    for i, record in enumerate(records):
        epochs += assembler.add(record, i * 1_000_000)
    return epochs + assembler.flush()


def sentences(*bodies: str) -> list:
    return [nmea.decode(nmea_sentence_bytes(body).decode().rstrip()) for body in bodies]


def rmc(hhmmss: str, ddmmyy: str) -> str:
    return f"GPRMC,{hhmmss},A,{FIX},0.0,0.0,{ddmmyy},,,A"


def gga(hhmmss: str) -> str:
    return f"GPGGA,{hhmmss},{FIX},1,08,0.9,545.4,M,46.9,M,,"


def test_gga_only_epochs_take_the_date_across_midnight():
    epochs = assemble(sentences(rmc("235958", "311221"), gga("235958"), gga("235959"), gga("000000"),
                                gga("000001")))
    assert [e.utc_text for e in epochs] == ["2021-12-31T23:59:58.000Z", "2021-12-31T23:59:59.000Z",
                                            "2022-01-01T00:00:00.000Z", "2022-01-01T00:00:01.000Z"]
    assert all(e.fix_mode == FixMode.FIX_3D and e.time_valid for e in epochs)


def test_gga_before_any_date_has_no_time():
    (epoch,) = assemble(sentences(gga("120000")))
    assert epoch.utc_text is None and epoch.tai_ns is None and not epoch.time_valid
    assert epoch.fix_mode == FixMode.FIX_3D and epoch.position is not None


def test_leap_second_label_2016_12_31():
    epochs = assemble(sentences(rmc("235959", "311216"), gga("235959"), rmc("235960", "311216"), gga("235960"),
                                rmc("000000", "010117"), gga("000000")))
    assert [e.utc_text for e in epochs] == ["2016-12-31T23:59:59.000Z", "2016-12-31T23:59:60.000Z",
                                            "2017-01-01T00:00:00.000Z"]
    assert [e.tai_ns for e in epochs] == [TAI_2017 - 2 * NS, TAI_2017 - NS, TAI_2017]
    assert all(e.time_valid for e in epochs)


def test_leap_second_gga_only_keeps_the_date_then_rolls_over():
    epochs = assemble(sentences(rmc("235959", "311216"), gga("235960"), gga("000000")))
    assert [e.utc_text for e in epochs] == ["2016-12-31T23:59:59.000Z", "2016-12-31T23:59:60.000Z",
                                            "2017-01-01T00:00:00.000Z"]
    assert epochs[1].tai_ns == TAI_2017 - NS


def test_second_60_the_table_does_not_know_gives_no_tai():
    """2015-12-31 had no leap second: the epoch still reports what the receiver said, but it cannot label a pulse."""
    (epoch,) = assemble(sentences(rmc("235960", "311215")))
    assert epoch.utc_text == "2015-12-31T23:59:60.000Z"
    assert epoch.tai_ns is None and not epoch.time_valid


# --- UBX ------------------------------------------------------------------------------------------------------
def pvt(itow: int, hms: tuple[int, int, int], num_sv: int = 9) -> tuple:
    payload = struct.pack("<IHBBBBBBIiBBBBiiii", itow, 2025, 7, 31, *hms, 0x07, 20, 0, 3, 0x01, 0, num_sv,
                          -1_213_141_350, 440_688_540, 1_118_500, 1_139_862)
    return ubx.decode(0x01, 0x07, payload + bytes(92 - len(payload)))


def sats(itow: int, *blocks: tuple[int, int, bool]) -> ubx.UbxSats:
    body = b"".join(struct.pack("<BBBbhhI", g, sv, 40, 45, 100, 0, 0x0F if used else 0x04) for g, sv, used in blocks)
    return ubx.decode(0x01, 0x35, struct.pack("<IBBxx", itow, 1, len(blocks)) + body)


def test_nmea_and_ubx_of_the_same_second_make_one_epoch():
    itow = 416_032_000
    records = [*pvt(itow, (19, 33, 34)), *sentences("GNRMC,193334.00,A,4404.13124,N,12118.84810,W,0.014,,310725,,,A",
                                                   "GNGGA,193334.00,4404.13124,N,12118.84810,W,1,12,0.62,1139.9,M,"
                                                   "-21.3,M,,"),
               sats(itow, (0, 2, True), (0, 8, True)), ubx.UbxEndOfEpoch(itow),
               *pvt(itow + 1000, (19, 33, 35)), *sentences("GNRMC,193335.00,A,4404.13124,N,12118.84809,W,0.013,,"
                                                          "310725,,,A")]
    first, second = assemble(records)
    assert first.utc_text == "2025-07-31T19:33:34.000Z" and second.utc_text == "2025-07-31T19:33:35.000Z"
    assert {"NAV-PVT", "RMC", "GGA", "UbxSats"} <= set(first.sources)
    assert first.used_count == 2 and first.fix_mode == FixMode.FIX_3D
    assert first.position.alt_m == 1139.862  # NAV-PVT's position outranks NMEA's


def m8t_epoch(itow: int, utc: tuple[int, ...], leap_s: int) -> list:
    """What a NEO-M8T in time mode sends each second, in its order (u-blox-m8t-time.log)."""
    return [ubx.decode(0x0D, 0x01, ubx.encode_payload("TIM-TP", tow_ms=itow + 1000, qerr_ps=-4331, week=1930)),
            sats(itow, (0, 5, True)),
            ubx.decode(0x01, 0x03, ubx.encode_payload("NAV-STATUS", itow_ms=itow, gps_fix=5)),
            ubx.decode(0x01, 0x20, struct.pack("<IihbBI", itow, 0, 1930, leap_s, 0x07, 10)),
            ubx.decode(0x01, 0x21, struct.pack("<IIiHBBBBBB", itow, 20, 0, *utc, 0x07)),
            ubx.decode(0x01, 0x26, ubx.encode_payload("NAV-TIMELS", itow_ms=itow, current_ls=leap_s))]


def test_ubx_only_receiver_keeps_its_epochs_whole_across_the_leap_second():
    """GPS time of week runs on through 23:59:60 while UTC time of day stands still; epochs follow iTOW."""
    itow_2359_59 = 6 * 86_400_000 + 86_399_000 + 17_000  # Saturday 2016-12-31 23:59:59 UTC, GPS-UTC 17 s
    labels = [((2016, 12, 31, 23, 59, 58), 17), ((2016, 12, 31, 23, 59, 59), 17), ((2016, 12, 31, 23, 59, 60), 17),
              ((2017, 1, 1, 0, 0, 0), 18), ((2017, 1, 1, 0, 0, 1), 18)]
    records = [r for i, (utc, leap_s) in enumerate(labels) for r in m8t_epoch(itow_2359_59 + (i - 1) * 1000, utc,
                                                                               leap_s)]
    epochs = assemble(records)
    assert [e.utc_text[11:19] for e in epochs] == ["23:59:58", "23:59:59", "23:59:60", "00:00:00", "00:00:01"]
    assert [e.tai_ns for e in epochs] == [TAI_2017 + k * NS for k in range(-3, 2)]
    for epoch in epochs:
        assert {"UbxSats", "NAV-STATUS", "UbxGpsTime", "NAV-TIMEUTC", "UbxLeap"} <= set(epoch.sources)
        assert epoch.time_only and epoch.time_valid and epoch.used_count == 1


def test_ubx_epochs_without_valid_time_are_still_separated():
    status = [ubx.decode(0x01, 0x03, struct.pack("<IBBBBII", 1000 * k, 0, 0x0C, 0, 0, 0, 0)) for k in range(3)]
    epochs = assemble(status)
    assert len(epochs) == 3 and all(e.fix_mode == FixMode.NO_FIX and e.utc_text is None for e in epochs)


def test_satellite_used_on_its_second_signal_alone_counts_as_used():
    """NAV-SAT's svUsed speaks for the primary signal only; NAV-SIG shows Galileo 10 used on E5a (ZED-F9T)."""
    itow = 416_032_000
    used_on_e5a = ubx.UbxSignalsUsed(itow, frozenset({(C.GPS, 8), (C.GALILEO, 10)}))
    (epoch,) = assemble([*pvt(itow, (19, 33, 34)), sats(itow, (0, 8, True), (2, 10, False)), used_on_e5a])
    assert epoch.used_count == 2
    assert SatInfo(C.GALILEO, 10, 45, 100, 40, True) in epoch.satellites


def test_gsa_does_not_add_to_nav_sat():
    itow = 416_032_000
    gsa = sentences("GNGSA,A,3,08,10,,,,,,,,,,,1.1,0.6,0.9,1")
    (epoch,) = assemble([*pvt(itow, (19, 33, 34)), *gsa, sats(itow, (0, 8, True), (0, 10, False))])
    assert epoch.used_count == 1


def test_epoch_without_sky_report_keeps_the_last_one():
    epochs = assemble(sentences(rmc("120000", "010125"), "GPGSA,A,3,05,07,,,,,,,,,,,1.1,0.6,0.9",
                                "GPGSV,1,1,02,05,40,083,46,07,30,120,40", rmc("120001", "010125")))
    assert [e.used_count for e in epochs] == [2, 2]
    assert [len(e.satellites) for e in epochs] == [2, 2]


# --- the integrity inputs: MON-HW, NAV-STATUS and each system's time ---------------------------------------------
ITOW_1933_34 = 4 * 86_400_000 + (19 * 3600 + 33 * 60 + 34 + 18) * 1000  # Thursday 2025-07-31 19:33:34 UTC
WEEK_2025_07_31 = 2377
TAI_1933_34 = (1_753_990_414 + 37) * NS


def frame(kind: str, msg_class: int, msg_id: int, **fields: int) -> object:
    return ubx.decode(msg_class, msg_id, ubx.encode_payload(kind, **fields))


def system_times(itow: int, gps_ftow_ns: int = 0, gal_ns: int = 0, bds_ns: int = 0, valid: int = 0x03) -> list:
    """NAV-TIMEGPS/GAL/BDS putting the epoch at GPS + ``gps_ftow_ns``, and Galileo and BeiDou where told (ns from
    the labelled second)."""
    label = TAI_1933_34 + (itow - ITOW_1933_34) * 1_000_000
    out = [frame("NAV-TIMEGPS", 0x01, 0x20, itow_ms=itow, ftow_ns=gps_ftow_ns, week=WEEK_2025_07_31, valid=valid)]
    for kind, msg_id, system, extra_ns in (("NAV-TIMEGAL", 0x25, C.GALILEO, gal_ns),
                                           ("NAV-TIMEBDS", 0x24, C.BEIDOU, bds_ns)):
        week, tow_s, frac_ns = ubx.tai_ns_to_system_time(system, label + extra_ns)
        out.append(frame(kind, 0x01, msg_id, itow_ms=itow, tow_s=tow_s, ftow_ns=frac_ns, week=week, valid=valid))
    return out


def test_label_second_matches_the_gps_time_the_fixtures_use():
    assert ubx.system_time_tai_ns(C.GPS, WEEK_2025_07_31, ITOW_1933_34 * 1_000_000) == TAI_1933_34
    (epoch,) = assemble(sentences(rmc("193334", "310725")))
    assert epoch.tai_ns == TAI_1933_34


def test_nmea_epoch_carries_the_receivers_monitors_and_system_offsets_from_gps():
    records = [*sentences(rmc("193334", "310725"), gga("193334")),
               *system_times(ITOW_1933_34, gps_ftow_ns=-20, gal_ns=-5, bds_ns=380),
               frame("NAV-STATUS", 0x01, 0x03, itow_ms=ITOW_1933_34, gps_fix=3, spoofing_state=2),
               frame("MON-HW", 0x0A, 0x09, jam_indicator=37, jamming_state=2)]
    (epoch,) = assemble(records)
    assert (epoch.jam_indicator, epoch.jamming_state, epoch.spoofing_state) == (37, 2, 2)
    # Relative to where GPS puts the epoch (-20 ns): Galileo 15 ns later, BeiDou 400 ns later.
    assert epoch.system_offsets_ns == ((C.GPS, 0), (C.GALILEO, 15), (C.BEIDOU, 400))
    assert epoch.fix_mode == FixMode.FIX_3D and epoch.time_valid and epoch.tai_ns == TAI_1933_34


def test_without_gps_time_the_offsets_are_from_the_labelled_second():
    records = [*sentences(rmc("193334", "310725")), *system_times(ITOW_1933_34, gal_ns=-5, bds_ns=380)[1:]]
    (epoch,) = assemble(records)
    assert epoch.system_offsets_ns == ((C.GALILEO, -5), (C.BEIDOU, 380))


def test_systems_without_a_valid_time_give_no_offset_and_an_epoch_without_them_says_none():
    no_week = system_times(ITOW_1933_34, bds_ns=380)
    no_week[2] = frame("NAV-TIMEBDS", 0x01, 0x24, itow_ms=ITOW_1933_34, tow_s=1, week=0, valid=0x01)
    (epoch,) = assemble([*sentences(rmc("193334", "310725")), *no_week])
    assert epoch.system_offsets_ns == ((C.GPS, 0), (C.GALILEO, 0))
    (invalid,) = assemble([*sentences(rmc("193334", "310725")), *system_times(ITOW_1933_34, valid=0x00)])
    assert invalid.system_offsets_ns == ()
    (plain,) = assemble(sentences(rmc("193334", "310725")))
    assert (plain.jam_indicator, plain.jamming_state, plain.spoofing_state, plain.system_offsets_ns) == (
        None, None, None, ())


def test_nmea_then_gps_time_with_leap_seconds_stays_one_epoch_per_second_across_the_leap_second():
    """NAV-TIMEGPS's leapS lets iTOW name the epoch; it must follow the leap (GPS-UTC 17 -> 18 s), and during
    23:59:60, which iTOW cannot express, the UBX frames still join the second NMEA states."""
    itow_2359_59 = 6 * 86_400_000 + 86_399_000 + 17_000
    seconds = [("235958", "311216", 17), ("235959", "311216", 17), ("235960", "311216", 17), ("000000", "010117", 18),
               ("000001", "010117", 18)]
    records = []
    for i, (hms, date, leap_s) in enumerate(seconds):
        itow = itow_2359_59 + (i - 1) * 1000
        records += [*sentences(rmc(hms, date), gga(hms)),
                    frame("NAV-TIMEGPS", 0x01, 0x20, itow_ms=itow, week=1930, leap_s=leap_s, valid=0x07),
                    frame("NAV-TIMELS", 0x01, 0x26, itow_ms=itow, current_ls=leap_s),
                    frame("NAV-STATUS", 0x01, 0x03, itow_ms=itow, gps_fix=3)]
    epochs = assemble(records)
    assert [e.utc_text[11:19] for e in epochs] == ["23:59:58", "23:59:59", "23:59:60", "00:00:00", "00:00:01"]
    assert [e.tai_ns for e in epochs] == [TAI_2017 + k * NS for k in range(-3, 2)]
    assert all({"RMC", "UbxGpsTime", "UbxLeap", "NAV-STATUS"} <= set(e.sources) for e in epochs)
