"""u-blox set-up messages, checked against pyubx2 (an independent UBX implementation): every key's name, ID and type
against its configuration database; every frame the appliance builds decodes there to the right message and fields,
and pyubx2 builds the same bytes from the same values."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyubx2 import GET, POLL, SET, UBXMessage, UBXReader
from pyubx2.ubxtypes_configdb import UBX_CONFIG_DATABASE

from appliance.gnss import ubxcfg
from appliance.gnss import ubxlegacy as legacy
from appliance.gnss.framer import ubx_frame_bytes
from appliance.gnss.plan import ReceiverPlan

SURVEY = ReceiverPlan(mode="survey", survey_min_s=7200, survey_acc_limit_m=2.5, baud=115200, store="bbr")
FIXED = ReceiverPlan(mode="fixed", fixed_lat_deg=-33.8567844123, fixed_lon_deg=151.2152967456,
                     fixed_height_m=45.67891, fixed_acc_m=0.02, pulse_length_ms=200, pulse_rising=False,
                     constellations=("gps", "galileo", "qzss", "navic"), store="flash")
LAYER_BITS = {"ram": 1, "bbr": 3, "flash": 5}


def py_name(name: str) -> str:
    return name.replace("-", "_")


def test_every_key_matches_pyubx2s_database():
    for name, (key_id, kind) in ubxcfg.KEYS.items():
        assert py_name(name) in UBX_CONFIG_DATABASE, name
        py_id, py_type = UBX_CONFIG_DATABASE[py_name(name)]
        assert key_id == py_id, name
        # pyubx2 writes "E001" for E1 and "L001" for a boolean in one byte.
        assert kind == (py_type[0] if py_type[0] == "L" else py_type[0] + str(int(py_type[1:]))), name


def test_a_keys_size_field_agrees_with_its_type():
    sizes = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8}
    for name, (key_id, kind) in ubxcfg.KEYS.items():
        assert sizes[(key_id >> 28) & 7] == struct.calcsize(ubxcfg._FORMATS[kind]), name
        assert ((key_id >> 28) & 7 == 1) == (kind == "L"), name


def test_every_message_the_appliance_asks_for_has_its_uart1_key():
    for message in ubxcfg.MESSAGES:
        assert ubxcfg.msgout_key(message) in ubxcfg.KEYS, message


@pytest.mark.parametrize("plan", [SURVEY, FIXED], ids=["survey", "fixed"])
def test_valsets_decode_in_pyubx2_and_pyubx2_builds_the_same_bytes(plan):
    items = ubxcfg.gen9_items(plan)
    payloads = ubxcfg.valset_payloads(items, plan.store)
    seen = []
    for payload in payloads:
        frame = ubx_frame_bytes(0x06, 0x8A, payload)
        parsed = UBXReader.parse(frame, msgmode=SET)
        assert parsed.identity == "CFG-VALSET"
        assert (parsed.version, parsed.ram, parsed.bbr, parsed.flash) == (
            0, 1, int(plan.store == "bbr"), int(plan.store == "flash"))
        chunk = [(name, value) for name, value in items if payload.find(struct.pack("<I", ubxcfg.key_id(name))) > 0]
        for name, value in chunk:
            assert getattr(parsed, py_name(name)) == value, name
        built = UBXMessage.config_set(LAYER_BITS[plan.store], 0, [(py_name(n), v) for n, v in chunk])
        assert built.serialize() == frame
        seen += chunk
    assert sorted(seen) == sorted(items)


def test_valget_request_is_pyubx2s_config_poll():
    keys = [name for name, _ in ubxcfg.gen9_items(SURVEY)][:40]
    for layer, number in ubxcfg.GET_LAYERS.items():
        frame = ubx_frame_bytes(0x06, 0x8B, ubxcfg.valget_payload(keys, layer))
        assert UBXMessage.config_poll(number, 0, [py_name(k) for k in keys]).serialize() == frame
        parsed = UBXReader.parse(frame, msgmode=POLL)
        assert (parsed.identity, parsed.version, parsed.layer) == ("CFG-VALGET", 0, number)
        assert parsed.keys_01 == ubxcfg.KEYS[keys[0]][0]


def test_valget_answer_decodes_as_pyubx2_reads_it():
    values = [("CFG-TMODE-LAT", -338567844), ("CFG-TMODE-LAT_HP", -12), ("CFG-TP-ANT_CABLEDELAY", -7),
              ("CFG-SIGNAL-GPS_ENA", 1), ("CFG-UART1-BAUDRATE", 115200)]
    body = b"".join(struct.pack("<I", ubxcfg.key_id(n)) + ubxcfg.value_bytes(n, v) for n, v in values)
    body += struct.pack("<I", 0x5099_0001) + struct.pack("<Q", 2**40 + 3)  # a key outside the table, 8 bytes
    payload = bytes((1, 0, 0, 0)) + body
    decoded = ubxcfg.decode_valget(payload)
    parsed = UBXReader.parse(ubx_frame_bytes(0x06, 0x8B, payload), msgmode=GET)
    for name, value in values:
        assert decoded[name] == value == getattr(parsed, py_name(name))
    assert decoded["0x50990001"] == 2**40 + 3


def test_survey_items():
    items = dict(ubxcfg.gen9_items(SURVEY))
    assert (items["CFG-TMODE-MODE"], items["CFG-TMODE-SVIN_MIN_DUR"], items["CFG-TMODE-SVIN_ACC_LIMIT"]) == (
        1, 7200, 25_000)
    assert "CFG-TMODE-LAT" not in items
    assert items["CFG-NAVSPG-DYNMODEL"] == 2
    assert (items["CFG-TP-PERIOD_TP1"], items["CFG-TP-PERIOD_LOCK_TP1"]) == (1_000_000, 1_000_000)
    assert (items["CFG-TP-LEN_TP1"], items["CFG-TP-LEN_LOCK_TP1"]) == (100_000, 100_000)
    assert (items["CFG-TP-POL_TP1"], items["CFG-TP-TIMEGRID_TP1"], items["CFG-TP-ANT_CABLEDELAY"]) == (1, 0, 0)
    assert items["CFG-TP-ALIGN_TO_TOW_TP1"] == items["CFG-TP-SYNC_GNSS_TP1"] == items["CFG-TP-USE_LOCKED_TP1"] == 1
    assert items["CFG-SIGNAL-GLO_ENA"] == items["CFG-SIGNAL-BDS_ENA"] == items["CFG-SIGNAL-GAL_ENA"] == 1
    assert items["CFG-SIGNAL-GLO_L1_ENA"] == items["CFG-SIGNAL-BDS_B1_ENA"] == items["CFG-SIGNAL-GAL_E1_ENA"] == 1
    assert items["CFG-SIGNAL-SBAS_ENA"] == items["CFG-SIGNAL-QZSS_ENA"] == 0
    assert "CFG-SIGNAL-NAVIC_ENA" not in items  # not every F9 has it: only when asked for
    rates = {k: v for k, v in items.items() if k.startswith("CFG-MSGOUT-")}
    assert rates["CFG-MSGOUT-UBX_NAV_PVT_UART1"] == rates["CFG-MSGOUT-NMEA_ID_ZDA_UART1"] == 1
    assert rates["CFG-MSGOUT-UBX_MON_RF_UART1"] == 1 and "CFG-MSGOUT-UBX_MON_HW_UART1" not in rates
    assert rates["CFG-MSGOUT-NMEA_ID_GLL_UART1"] == rates["CFG-MSGOUT-NMEA_ID_VTG_UART1"] == 0
    assert ubxcfg.gen9_items(SURVEY)[-1] == ("CFG-UART1-BAUDRATE", 115200)


def test_fixed_items_carry_the_high_precision_parts_with_the_values_sign():
    items = dict(ubxcfg.gen9_items(FIXED))
    assert (items["CFG-TMODE-MODE"], items["CFG-TMODE-POS_TYPE"]) == (2, 1)
    assert (items["CFG-TMODE-LAT"], items["CFG-TMODE-LAT_HP"]) == (-338567844, -12)
    assert (items["CFG-TMODE-LON"], items["CFG-TMODE-LON_HP"]) == (1512152967, 46)
    assert (items["CFG-TMODE-HEIGHT"], items["CFG-TMODE-HEIGHT_HP"]) == (4567, 89)
    assert items["CFG-TMODE-FIXED_POS_ACC"] == 200
    assert (items["CFG-TP-LEN_LOCK_TP1"], items["CFG-TP-POL_TP1"]) == (200_000, 0)
    assert items["CFG-SIGNAL-NAVIC_ENA"] == items["CFG-SIGNAL-QZSS_L1CA_ENA"] == 1
    assert items["CFG-SIGNAL-GLO_ENA"] == 0 and "CFG-SIGNAL-GLO_L1_ENA" not in items


def test_empty_constellations_leave_the_receivers_choice():
    items = ubxcfg.gen9_items(ReceiverPlan(constellations=()))
    assert not [n for n, _ in items if n.startswith("CFG-SIGNAL-")]
    assert not [m for m in ubxcfg.m8_messages(ReceiverPlan(constellations=())) if m[1] == legacy.GNSS]


def test_chunks_hold_at_most_64_keys_and_the_baud_rate_comes_alone_last():
    items = [(f"0x{0x20990000 + i:08x}", i % 200) for i in range(150)] + [("CFG-UART1-BAUDRATE", 9600)]
    payloads = ubxcfg.valset_payloads(items, "ram")
    assert [(len(p) - 4) // 5 for p in payloads[:-1]] == [64, 64, 22]
    assert payloads[-1] == bytes((0, 1, 0, 0)) + struct.pack("<II", 0x40520001, 9600)


def test_bad_requests_are_refused_naming_what_is_wrong():
    with pytest.raises(ValueError, match="65"):
        ubxcfg.valset_payload([("CFG-TMODE-MODE", 0)] * 65, "ram")
    with pytest.raises(ValueError, match="layers"):
        ubxcfg.valset_payload([("CFG-TMODE-MODE", 0)], "eeprom")
    with pytest.raises(ValueError, match="CFG-TMODE-LAT_HP"):
        ubxcfg.valset_payload([("CFG-TMODE-LAT_HP", 200)], "ram")
    with pytest.raises(ValueError, match="boolean"):
        ubxcfg.value_bytes("CFG-TP-POL_TP1", 2)
    with pytest.raises(ValueError, match="CFG-TMODE-SVIN_MIN_DUR"):
        ubxcfg.gen9_items(ReceiverPlan(survey_min_s=-1))
    with pytest.raises(ValueError, match="unknown configuration key"):
        ubxcfg.valget_payload(["CFG-NOTHING"])
    with pytest.raises(ValueError, match="cannot track navic"):
        ubxcfg.m8_messages(FIXED)


def test_ack_of():
    assert ubxcfg.ack_of(0x05, 0x01, b"\x06\x8a") == (True, 0x06, 0x8A)
    assert ubxcfg.ack_of(0x05, 0x00, b"\x06\x31") == (False, 0x06, 0x31)
    with pytest.raises(ValueError, match="not ACK"):
        ubxcfg.ack_of(0x06, 0x01, b"\x06\x31")
    with pytest.raises(ValueError, match="expected 2"):
        ubxcfg.ack_of(0x05, 0x01, b"\x06")


def mon_ver(sw: str, hw: str, *extensions: str) -> bytes:
    return sw.encode().ljust(30, b"\0") + hw.encode().ljust(10, b"\0") + b"".join(
        e.encode().ljust(30, b"\0") for e in extensions)


def test_mon_ver_of_an_f9t_and_an_m8t():
    f9t = ubxcfg.decode_mon_ver(mon_ver("EXT CORE 1.00 (3fda8e)", "00190000", "ROM BASE 0x118B2060",
                                        "FWVER=TIM 2.20", "PROTVER=29.20", "MOD=ZED-F9T", "GPS;GLO;GAL;BDS"))
    assert (f9t.model, f9t.firmware, f9t.protocol, f9t.hw_version) == ("ZED-F9T", "TIM 2.20", "29.20", "00190000")
    assert ubxcfg.family_of(f9t) == "ublox9"
    m8t = ubxcfg.decode_mon_ver(mon_ver("EXT CORE 3.01 (111141)", "00080000", "ROM BASE 2.01 (75331)",
                                        "FWVER=TIM 1.10", "PROTVER=22.00", "MOD=NEO-M8T-0", "SBAS;IMES;QZSS"))
    assert (m8t.model, m8t.firmware, m8t.protocol, len(m8t.extensions)) == ("NEO-M8T-0", "TIM 1.10", "22.00", 5)
    assert ubxcfg.family_of(m8t) == "ublox8"
    old = ubxcfg.decode_mon_ver(mon_ver("1.00 (59842)", "00070000", "PROTVER 14.00", "GPS;SBAS;GLO;QZSS"))
    assert (old.model, old.firmware, old.protocol, ubxcfg.family_of(old)) == ("", "", "14.00", "ublox8")
    assert ubxcfg.mon_ver_poll() == b"\xb5\x62\x0a\x04\x00\x00\x0e\x34"
    assert UBXReader.parse(ubxcfg.mon_ver_poll(), msgmode=POLL).identity == "MON-VER"


def test_mon_ver_refuses_what_is_not_one():
    with pytest.raises(ValueError, match="39 bytes"):
        ubxcfg.decode_mon_ver(bytes(39))
    with pytest.raises(ValueError, match="printable"):
        ubxcfg.decode_mon_ver(b"\xff" * 40)


def pyubx2_m8(plan: ReceiverPlan) -> dict[int, UBXMessage]:
    """What pyubx2 builds for the plan's M8 messages (all but CFG-MSG), from the field values by name."""
    gnss = {"msgVer": 0, "numTrkChHw": 0, "numTrkChUse": 32, "numConfigBlocks": 6}
    for i, (name, gid) in enumerate(ubxcfg.M8_GNSS_IDS.items(), start=1):
        res, most = ubxcfg.M8_CHANNELS[gid]
        gnss.update({f"gnssId_{i:02}": gid, f"resTrkCh_{i:02}": res, f"maxTrkCh_{i:02}": most,
                     f"enable_{i:02}": int(name in plan.constellations), f"sigCfMask_{i:02}": 1})
    fixed = plan.mode == "fixed"
    position = dict(lla=1, ecefXOrLat=round(plan.fixed_lat_deg * 1e7), ecefYOrLon=round(plan.fixed_lon_deg * 1e7),
                    ecefZOrAlt=round(plan.fixed_height_m * 100), fixedPosAcc=round(plan.fixed_acc_m * 1000))
    return {
        legacy.GNSS: UBXMessage("CFG", "CFG-GNSS", SET, **gnss),
        legacy.NAV5: UBXMessage("CFG", "CFG-NAV5", SET, dyn=1, dynModel=2),
        legacy.TMODE2: UBXMessage("CFG", "CFG-TMODE2", SET, timeMode=2 if fixed else 1,
                                  svinMinDur=plan.survey_min_s, svinAccLimit=round(plan.survey_acc_limit_m * 1000),
                                  **(position if fixed else {})),
        legacy.TP5: UBXMessage("CFG", "CFG-TP5", SET, tpIdx=0, version=1, antCableDelay=0, freqPeriod=1_000_000,
                               freqPeriodLock=1_000_000, pulseLenRatio=plan.pulse_length_ms * 1000,
                               pulseLenRatioLock=plan.pulse_length_ms * 1000, active=1, lockGnssFreq=1, isLength=1,
                               alignToTow=1, polarity=int(plan.pulse_rising), gridUtcGnss=0),
        legacy.PRT: UBXMessage("CFG", "CFG-PRT", SET, portID=1, charLen=3, parity=4, nStopBits=0,
                               baudRate=plan.baud, inUBX=1, inNMEA=1, outUBX=1, outNMEA=1),
        legacy.CFG_CFG: UBXMessage("CFG", "CFG-CFG", SET, saveMask=legacy.CFG_ALL_SECTIONS.to_bytes(4, "little"),
                                   clearMask=bytes(4), loadMask=bytes(4), devBBR=int(plan.store == "bbr"),
                                   devFlash=int(plan.store == "flash")),
    }


M8_SURVEY = ReceiverPlan(constellations=("gps", "galileo", "glonass"), baud=38400, store="bbr")
M8_FIXED = ReceiverPlan(mode="fixed", fixed_lat_deg=46.2044123, fixed_lon_deg=-6.14329, fixed_height_m=-12.3,
                        fixed_acc_m=0.5, pulse_length_ms=10, pulse_rising=False, store="flash")


@pytest.mark.parametrize("plan", [M8_SURVEY, M8_FIXED], ids=["survey", "fixed"])
def test_m8_messages_decode_in_pyubx2_and_pyubx2_builds_the_same_bytes(plan):
    messages = ubxcfg.m8_messages(plan)
    expected = pyubx2_m8(plan)
    rates = {}
    for msg_class, msg_id, payload in messages:
        frame = ubx_frame_bytes(msg_class, msg_id, payload)
        parsed = UBXReader.parse(frame, msgmode=SET)
        assert parsed.identity == legacy.NAMES[msg_id]
        if msg_id == legacy.MSG:
            # pyubx2 knows the 6-port form only and reads the one rate of the 3-byte form as its first port's.
            assert len(payload) == 3
            rates[(parsed.msgClass, parsed.msgID)] = parsed.rateDDC
            continue
        assert expected.pop(msg_id).serialize() == frame, legacy.NAMES[msg_id]
    assert not expected
    want = {ubxcfg.MESSAGES[m]: rate for m, rate in ubxcfg.message_rates(ubxcfg.M8_SKIPPED)}
    assert rates == want
    assert want[ubxcfg.MESSAGES["MON-HW"]] == 1 and ubxcfg.MESSAGES["MON-RF"] not in want
    assert [m[1] for m in messages][-2:] == [legacy.PRT, legacy.CFG_CFG]


def test_m8_fields_in_pyubx2s_reading():
    by_id = {msg_id: UBXReader.parse(ubx_frame_bytes(c, msg_id, p), msgmode=SET)
             for c, msg_id, p in ubxcfg.m8_messages(M8_FIXED)}
    tmode = by_id[legacy.TMODE2]
    assert (tmode.timeMode, tmode.lla, tmode.ecefXOrLat, tmode.ecefYOrLon, tmode.ecefZOrAlt, tmode.fixedPosAcc) == (
        2, 1, 462044123, -61432900, -1230, 500)
    tp5 = by_id[legacy.TP5]
    assert (tp5.pulseLenRatio, tp5.pulseLenRatioLock, tp5.polarity, tp5.isLength, tp5.gridUtcGnss) == (
        10_000, 10_000, 0, 1, 0)
    assert by_id[legacy.NAV5].dynModel == 2 and by_id[legacy.PRT].baudRate == 9600
    assert by_id[legacy.CFG_CFG].devFlash == 1
    gnss = by_id[legacy.GNSS]
    enabled = {gnss.__dict__[f"gnssId_{i:02}"] for i in range(1, 7) if gnss.__dict__[f"enable_{i:02}"]}
    assert enabled == {0, 2, 3, 6}


def test_m8_readback_polls_are_polls_in_pyubx2():
    for msg_class, msg_id, payload in ubxcfg.m8_readback_polls(M8_SURVEY):
        assert payload == b""
        assert UBXReader.parse(ubx_frame_bytes(msg_class, msg_id, payload), msgmode=POLL).identity == (
            legacy.NAMES[msg_id])


def test_m8_gnss_keeps_the_receivers_channel_counts():
    current = legacy.CfgGnss(32, 28, (legacy.GnssBlock(0, 10, 20, 0x01_0001), legacy.GnssBlock(4, 0, 8, 0x03_0000),
                                      legacy.GnssBlock(6, 6, 12, 0x01_0001)))
    new = ubxcfg.m8_gnss(ReceiverPlan(constellations=("gps", "galileo")), current)
    blocks = {b.gnss_id: b for b in new.blocks}
    assert (new.num_trk_ch_hw, new.num_trk_ch_use) == (32, 28)
    assert (blocks[0].res_trk_ch, blocks[0].max_trk_ch, blocks[0].enabled) == (10, 20, True)
    assert (blocks[6].res_trk_ch, blocks[6].enabled) == (6, False)
    assert blocks[4] == current.blocks[1]  # IMES, unknown to the appliance, as it was
    assert (blocks[2].res_trk_ch, blocks[2].max_trk_ch, blocks[2].enabled) == (4, 8, True)


def test_m8_carriers():
    assert ubxcfg.m8_carrier_conflict(("gps", "galileo", "glonass")) is None
    assert ubxcfg.m8_carrier_conflict(("glonass", "beidou")) is None
    assert "not three" in ubxcfg.m8_carrier_conflict(("gps", "glonass", "beidou"))


def test_m8_readback_comparison():
    plan = M8_FIXED
    assert ubxcfg.m8_mismatches(plan, 0x06, legacy.TP5, ubxcfg.m8_tp5(plan).payload()) == []
    longer = legacy.CfgTp5(0, 0, 21, 1_000_000, 1_000_000, 10_001, 10_000, 0, ubxcfg.m8_tp5(plan).flags)
    assert ubxcfg.m8_mismatches(plan, 0x06, legacy.TP5, longer.payload()) == [
        "CFG-TP5 pulse_len_ratio: set 10000, read 10001"]  # rfGroupDelay is the receiver's own
    assert ubxcfg.m8_mismatches(plan, 0x06, legacy.TMODE2, ubxcfg.m8_tmode2(plan).payload()) == []
    portable = legacy.CfgNav5(0xFFFF, 0, 3, 0, 10_000, 5)
    assert ubxcfg.m8_mismatches(plan, 0x06, legacy.NAV5, portable.payload()) == [
        "CFG-NAV5 dyn_model: set 2, read 0"]
    assert ubxcfg.m8_mismatches(plan, 0x06, legacy.GNSS, ubxcfg.m8_gnss(plan).payload()) == []
    assert ubxcfg.m8_mismatches(M8_SURVEY, 0x06, legacy.GNSS, ubxcfg.m8_gnss(plan).payload()) == [
        "CFG-GNSS beidou: set off, read on (signals 0x01)"]
    slow = legacy.CfgPrt(baud_rate=9600, out_proto_mask=legacy.PROTO_NMEA)
    assert ubxcfg.m8_mismatches(M8_SURVEY, 0x06, legacy.PRT, slow.payload()) == [
        "CFG-PRT baud_rate: set 38400, read 9600", "CFG-PRT out_proto_mask: UBX and NMEA not both on"]
    with pytest.raises(ValueError, match="not a read-back"):
        ubxcfg.m8_mismatches(plan, 0x06, legacy.MSG, b"")


def test_legacy_records_round_trip():
    records = [legacy.CfgPrt(1, 0, legacy.PRT_MODE_8N1, 115200, 7, 3, 2), legacy.CfgMsg(1, 7, 1),
               legacy.CfgMsg(1, 7), legacy.CfgMsg(0xF0, 4, rates=(0, 1, 0, 0, 1, 0)),
               ubxcfg.m8_tp5(M8_FIXED), ubxcfg.m8_tmode2(M8_FIXED), ubxcfg.m8_gnss(M8_SURVEY),
               legacy.CfgNav5(0xFFFF, 2, 3, -100, 10_000, -5, 1, 250, 250, 100, 300, 7, 60, 3, 35, 200, 3),
               legacy.CfgCfg(1, 2, 3), legacy.CfgCfg(0, 0x1F1F, 0, 0x17)]
    for record in records:
        assert type(record).decode(record.payload()) == record


def test_gen9_comparison_names_each_difference():
    items = [("CFG-TMODE-MODE", 1), ("CFG-TP-LEN_TP1", 100_000)]
    assert ubxcfg.gen9_mismatches(items, {"CFG-TMODE-MODE": 1, "CFG-TP-LEN_TP1": 100_000}) == []
    assert ubxcfg.gen9_mismatches(items, {"CFG-TMODE-MODE": 0}) == [
        "CFG-TMODE-MODE: set 1, read 0", "CFG-TP-LEN_TP1: set 100000, read nothing"]


DECODERS = [ubxcfg.decode_valget, ubxcfg.decode_valset, ubxcfg.decode_valget_request, ubxcfg.decode_mon_ver,
            lambda p: ubxcfg.ack_of(0x05, 0x01, p), legacy.CfgPrt.decode, legacy.CfgMsg.decode, legacy.CfgTp5.decode,
            legacy.CfgTmode2.decode, legacy.CfgGnss.decode, legacy.CfgNav5.decode, legacy.CfgCfg.decode,
            legacy.CfgRst.decode]


@given(st.binary(max_size=400), st.integers(0, len(DECODERS) - 1))
def test_garbage_raises_only_value_error(payload, which):
    try:
        DECODERS[which](payload)
    except ValueError:
        pass


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.binary(max_size=9)), max_size=8))
def test_key_value_garbage_raises_only_value_error(pairs):
    body = b"".join(struct.pack("<I", k) + v for k, v in pairs)
    for version in (0, 1):
        try:
            ubxcfg.decode_valget(bytes((version, 0, 0, 0)) + body)
        except ValueError:
            pass


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)), min_size=1, max_size=8))
def test_valget_answers_round_trip_for_any_key(pairs):
    body, expected = b"", {}
    for key, value in pairs:
        size = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8}.get((key >> 28) & 7)
        if size is None or key in ubxcfg._NAMES_BY_ID:
            continue
        value %= 2 if (key >> 28) & 7 == 1 else 2 ** (8 * size)
        body += struct.pack("<I", key) + value.to_bytes(size, "little")
        expected[f"0x{key:08x}"] = value
    assert ubxcfg.decode_valget(bytes((1, 0, 0, 0)) + body) == expected
