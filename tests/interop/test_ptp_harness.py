"""The PTP harness's own parsing and config generation, on canned text (pmc replies, ptp4l log lines, ptpd statistics
and status, tshark JSON): no peers, no namespaces, no root."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest

from harness.ptp_harness import (L2_FORWARDABLE, L2_NON_FORWARDABLE, PROFILE_MASTER_OPTIONS,
                                 PROFILE_SLAVE_OPTIONS, PROFILE_TRANSPORTS, GmSelection, OffsetSample,
                                 PmcStream, PortTransition, Summary, _pairs, _ptpd_clock_id, dissect_json,
                                 parse_pmc, parse_ptp4l_line, parse_ptpd_stats_line, parse_ptpd_status,
                                 ptp4l_config, summarize)

PROFILES_DIR = Path(__file__).resolve().parents[2] / "appliance" / "data" / "ptp-profiles"

# linuxptp 3.1.1 pmc over UDPv4 from the slave's namespace: the grandmaster and a second (passive) clock answer.
PMC_TEXT = """\
sending: GET DEFAULT_DATA_SET
\td6ce5a.fffe.b18892-1 seq 0 RESPONSE MANAGEMENT DEFAULT_DATA_SET 
\t\ttwoStepFlag             1
\t\tslaveOnly               0
\t\tnumberPorts             1
\t\tpriority1               128
\t\tclockClass              6
\t\tclockAccuracy           0x21
\t\toffsetScaledLogVariance 0x4e5d
\t\tpriority2               128
\t\tclockIdentity           d6ce5a.fffe.b18892
\t\tdomainNumber            0
\t3aba47.fffe.e02184-1 seq 0 RESPONSE MANAGEMENT DEFAULT_DATA_SET 
\t\ttwoStepFlag             1
\t\tslaveOnly               0
\t\tnumberPorts             1
\t\tpriority1               128
\t\tclockClass              7
\t\tclockAccuracy           0xfe
\t\toffsetScaledLogVariance 0xffff
\t\tpriority2               100
\t\tclockIdentity           3aba47.fffe.e02184
\t\tdomainNumber            0
sending: GET PARENT_DATA_SET
\td6ce5a.fffe.b18892-1 seq 1 RESPONSE MANAGEMENT PARENT_DATA_SET 
\t\tparentPortIdentity                    d6ce5a.fffe.b18892-0
\t\tparentStats                           0
\t\tobservedParentOffsetScaledLogVariance 0xffff
\t\tobservedParentClockPhaseChangeRate    0x7fffffff
\t\tgrandmasterPriority1                  128
\t\tgm.ClockClass                         6
\t\tgm.ClockAccuracy                      0x21
\t\tgm.OffsetScaledLogVariance            0x4e5d
\t\tgrandmasterPriority2                  128
\t\tgrandmasterIdentity                   d6ce5a.fffe.b18892
\td6ce5a.fffe.b18892-1 seq 2 RESPONSE MANAGEMENT TIME_PROPERTIES_DATA_SET 
\t\tcurrentUtcOffset      37
\t\tleap61                0
\t\tleap59                0
\t\tcurrentUtcOffsetValid 0
\t\tptpTimescale          0
\t\ttimeTraceable         0
\t\tfrequencyTraceable    0
\t\ttimeSource            0x20
\td6ce5a.fffe.b18892-1 seq 3 RESPONSE MANAGEMENT PORT_DATA_SET 
\t\tportIdentity            d6ce5a.fffe.b18892-1
\t\tportState               MASTER
\t\tlogMinDelayReqInterval  0
\t\tpeerMeanPathDelay       0
\t\tlogAnnounceInterval     1
\t\tannounceReceiptTimeout  3
\t\tlogSyncInterval         0
\t\tdelayMechanism          1
\t\tlogMinPdelayReqInterval 0
\t\tversionNumber           2
\td6ce5a.fffe.b18892-1 seq 4 RESPONSE MANAGEMENT_ERROR_STATUS 
"""

PTP4L_LOG = """\
ptp4l[3262.248]: port 1: INITIALIZING to LISTENING on INIT_COMPLETE
ptp4l[3262.248]: port 0: INITIALIZING to LISTENING on INIT_COMPLETE
ptp4l[3265.391]: selected local clock 1e5f71.fffe.a4b8da as best master
ptp4l[3266.042]: port 1: new foreign master 7a98be.fffe.ea540a-1
ptp4l[3268.042]: selected best master clock 7a98be.fffe.ea540a
ptp4l[3268.043]: foreign master not using PTP timescale
ptp4l[3268.043]: port 1: LISTENING to UNCALIBRATED on RS_SLAVE
ptp4l[3270.042]: master offset       -130 s0 freq    +210 path delay      2834
ptp4l[3271.042]: master offset         11 s2 freq     +60 path delay      2753
ptp4l[3422.356]: rms  893 max 1957 freq     -3 +/- 513 delay  2196 +/- 398
ptp4l[3423.356]: rms   12 max   30 freq  -1024 +/-  10
ptp4l[3480.000]: port 1: UNCALIBRATED to SLAVE on MASTER_CLOCK_SELECTED
"""

PTPD_STATS = """\
# Timestamp, State, Clock ID, One Way Delay, Offset From Master, Slave to Master, Master to Slave, Observed Drift, \
Last packet Received, One Way Delay Mean, One Way Delay Std Dev, Offset From Master Mean, Offset From Master Std Dev, \
Observed Drift Mean, Observed Drift Std Dev, raw delayMS, raw delaySM
1796238676.513601464, init,
1796238676.614282248, lstn_init, 1 
1796238679.600955076, slv,daca73fffe10297c(unknown)/1,  0.000000000,  0.000000000,  0.000000000,  0.000000000, \
0.000000000, I, 0.000000000, 0, 0.000000000, 0, 0, 0,  0.000000000,  0.000000000
1796238681.599986048, slv,daca73fffe10297c(unknown)/1,  0.000000000,  0.000002674,  0.000000000,  0.000002765, \
0.000000000, S, 0.000000000, 0, 0.000000000, 0, 0, 0,  0.000002765,  0.000000000
1796238681.600104485, slv,daca73fffe10297c(unknown)/1,  0.000000819,  -0.000000443,  0.000000511,  0.000002765, \
0.000000000, D, 0.000000000, 0, 0.000000000, 0, 0, 0,  0.000002765,  0.000000511
"""

PTPD_STATUS = """\
Host info          :  vm, PID 9044
Interface          :  v9021x0b
Preset             :  slaveonly
Transport          :  ipv4, multicast
Delay mechanism    :  E2E
PTP domain         :  0
Port state         :  PTP_SLAVE
Best master ID     :  daca73fffe10297c(unknown)/1
Best master IP     :  10.183.148.1
GM priority        :  Priority1 128, Priority2 128, clockClass 6
Offset from Master :  0.000000443 s
Clock status       :  in control, read-only
"""


def test_pmc_blocks_one_dict_per_port_and_command() -> None:
    blocks = parse_pmc(PMC_TEXT)
    assert [(b["sourcePortIdentity"], b["id"]) for b in blocks] == [
        ("d6ce5a.fffe.b18892-1", "DEFAULT_DATA_SET"), ("3aba47.fffe.e02184-1", "DEFAULT_DATA_SET"),
        ("d6ce5a.fffe.b18892-1", "PARENT_DATA_SET"), ("d6ce5a.fffe.b18892-1", "TIME_PROPERTIES_DATA_SET"),
        ("d6ce5a.fffe.b18892-1", "PORT_DATA_SET"), ("d6ce5a.fffe.b18892-1", "")]
    gm, other, parent, tprops, port, error = blocks
    assert (gm["action"], gm["tlv"], gm["seq"]) == ("RESPONSE", "MANAGEMENT", 0)
    assert (gm["clockClass"], gm["priority1"], gm["clockAccuracy"], gm["offsetScaledLogVariance"]) == (
        "6", "128", "0x21", "0x4e5d")
    assert gm["clockIdentity"] == "d6ce5a.fffe.b18892" and other["priority2"] == "100"
    assert (parent["gm.ClockClass"], parent["grandmasterIdentity"]) == ("6", "d6ce5a.fffe.b18892")
    assert (tprops["currentUtcOffset"], tprops["timeSource"]) == ("37", "0x20")
    assert (port["portState"], port["delayMechanism"]) == ("MASTER", "1")
    assert error["tlv"] == "MANAGEMENT_ERROR_STATUS"


def test_pmc_stream_completes_a_block_at_the_next_header() -> None:
    parser = PmcStream()
    done = []
    for line in PMC_TEXT.splitlines(keepends=True)[:13]:  # up to the second port's header
        done += parser.feed(line)
    assert [b["sourcePortIdentity"] for b in done] == ["d6ce5a.fffe.b18892-1"]
    assert parser.current is not None and parser.current["sourcePortIdentity"] == "3aba47.fffe.e02184-1"
    assert len(parser.flush()) == 1 and parser.current is None


def test_ptp4l_log_lines() -> None:
    items = [parse_ptp4l_line(line) for line in PTP4L_LOG.splitlines()]
    assert items[0] == PortTransition(3262.248, 1, "INITIALIZING", "LISTENING", "INIT_COMPLETE")
    assert items[2] == GmSelection(3265.391, "1e5f71.fffe.a4b8da", True)
    assert items[3] == ("foreign", 3266.042, "7a98be.fffe.ea540a-1")
    assert items[4] == GmSelection(3268.042, "7a98be.fffe.ea540a", False)
    assert items[5] is None
    assert str(items[6]) == "port 1: LISTENING to UNCALIBRATED on RS_SLAVE"
    assert items[7] == OffsetSample(3270.042, -130, 2834.0, "s0", 210.0, "log")
    assert items[8].servo_state == "s2" and items[8].offset_ns == 11
    assert items[9] == Summary(3422.356, 893, 1957, -3, 513, 2196, 398)
    assert items[10] == Summary(3423.356, 12, 30, -1024, 10, None, None)
    assert items[11].new == "SLAVE"


def test_ptpd_statistics_lines() -> None:
    stats = [s for s in map(parse_ptpd_stats_line, PTPD_STATS.splitlines()) if s is not None]
    assert [s.state for s in stats] == ["init", "lstn_init", "slv", "slv", "slv"]
    assert math.isnan(stats[0].offset_ns) and math.isnan(stats[1].one_way_delay_ns)
    sync, delay = stats[3], stats[4]
    assert (sync.kind, sync.offset_ns, sync.one_way_delay_ns) == ("S", pytest.approx(2674), 0.0)
    assert (delay.kind, delay.offset_ns, delay.one_way_delay_ns) == ("D", pytest.approx(-443), pytest.approx(819))
    assert sync.t_real == pytest.approx(1796238681.599986048)
    assert _ptpd_clock_id(sync.master) == "daca73.fffe.10297c"
    assert _ptpd_clock_id("daca:73ff:fe10:297c/1") == "daca73.fffe.10297c"


def test_ptpd_status_file() -> None:
    status = parse_ptpd_status(PTPD_STATUS)
    assert status["Port state"] == "PTP_SLAVE" and status["Clock status"] == "in control, read-only"
    assert status["GM priority"] == "Priority1 128, Priority2 128, clockClass 6"
    assert status["Best master IP"] == "10.183.148.1"


def test_summarize_discards_the_first_seconds_and_everything_before_s2() -> None:
    rows = [(100.0 + i, 1000 if i < 5 else (10 if i % 2 else -10), 2000.0) for i in range(20)]
    s = summarize(rows, discard_s=5.0)
    assert (s["count"], s["discarded"], s["rms_ns"], s["max_abs_ns"], s["mean_ns"]) == (15, 5, 10.0, 10.0,
                                                                                          pytest.approx(10 / 15))
    assert s["path_delay_mean_ns"] == 2000.0 and s["span_s"] == 14.0
    servo = [OffsetSample(100.0 + i, 500 if i < 8 else 3, 2000.0, "s2" if i >= 8 else "s1") for i in range(12)]
    s = summarize(servo, discard_s=2.0)
    assert (s["count"], s["max_abs_ns"]) == (4, 3.0)  # the s2 rule is later than the time rule here
    assert summarize(servo, discard_s=2.0, until_s2=False)["count"] == 10
    empty = summarize([], discard_s=5.0)
    assert empty["count"] == 0 and math.isnan(empty["rms_ns"])
    assert summarize(rows, discard_s=100.0)["count"] == 0


def test_ptp4l_config_never_adjusts_the_clock() -> None:
    slave = ptp4l_config("slave", "udp6", "P2P", 7, "/tmp/x.sock")
    lines = dict(line.split(None, 1) for line in slave.splitlines() if line and not line.startswith(("#", "[")))
    assert (lines["free_running"], lines["kernel_leap"], lines["slaveOnly"], lines["freq_est_interval"]) == (
        "1", "0", "1", "0")
    assert (lines["network_transport"], lines["delay_mechanism"], lines["domainNumber"], lines["uds_address"]) == (
        "UDPv6", "P2P", "7", "/tmp/x.sock")
    master = ptp4l_config("master", "l2", extra={"logSyncInterval": -4, "priority2": 100})
    lines = dict(line.split(None, 1) for line in master.splitlines() if line and not line.startswith(("#", "[")))
    assert (lines["clockClass"], lines["clockAccuracy"], lines["offsetScaledLogVariance"], lines["timeSource"],
            lines["priority1"]) == ("6", "0x21", "0x4E5D", "0x20", "128")
    assert (lines["logSyncInterval"], lines["priority2"], lines["free_running"]) == ("-4", "100", "1")
    assert "slaveOnly" not in lines
    for bad in ({"free_running": 0}, {"kernel_leap": 1}, {"time_stamping": "hardware"}, {"domainNumber": 254}):
        with pytest.raises(ValueError):
            ptp4l_config("slave", extra=bad)


def test_ptp4l_config_unicast_master_table() -> None:
    text = ptp4l_config("slave", "udp4", extra=PROFILE_SLAVE_OPTIONS["g8275.2"], unicast_master_table=["10.1.2.1"],
                        unicast_req_duration=60)
    glob, table = text.split("[unicast_master_table]")
    assert "unicast_master_table             1" in glob and "unicast_req_duration             60" in glob
    assert [line.split() for line in table.strip().splitlines()] == [["table_id", "1"], ["logQueryInterval", "2"],
                                                                     ["UDPv4", "10.1.2.1"]]
    master = ptp4l_config("master", "udp4", extra=PROFILE_MASTER_OPTIONS["g8275.2"])
    assert "unicast_listen                   1" in master and "[unicast_master_table]" not in master


@pytest.mark.parametrize("profile", sorted(PROFILE_SLAVE_OPTIONS))
def test_profile_slave_options_match_the_appliance_profiles(profile: str) -> None:
    spec = tomllib.loads((PROFILES_DIR / f"{profile}.toml").read_text())
    options = PROFILE_SLAVE_OPTIONS[profile]
    assert int(options["domainNumber"]) == spec["domain"]
    assert options["delay_mechanism"] == spec["delay_mechanism"].upper()
    assert tuple(spec["transports"]) == PROFILE_TRANSPORTS[profile]
    assert options["dataset_comparison"] == ("G.8275.x" if spec["dataset_comparison"] == "g8275" else "ieee1588")
    if "l2" in spec["transports"]:
        assert options["ptp_dst_mac"] == spec["l2_destination"] == L2_FORWARDABLE
    if spec["delay_mechanism"] == "p2p":
        assert options["p2p_dst_mac"] == L2_NON_FORWARDABLE
    if spec["transports"] == ["l2"]:
        assert options["network_transport"] == "L2"
    assert int(options["logAnnounceInterval"]) == spec["log_announce_interval"]
    assert PROFILE_MASTER_OPTIONS[profile]["domainNumber"] == options["domainNumber"]


TSHARK_JSON = """[
 {"_source": {"layers": {
   "frame": {"frame.time_epoch": "1796238940.388688435", "frame.number": "1"},
   "eth": {"eth.dst": "3e:e5:7c:95:35:dc", "eth.src": "12:5a:0c:d2:6a:de", "eth.type": "0x0800"},
   "ip": {"ip.src": "10.183.180.1", "ip.addr": "10.183.180.1", "ip.dst": "10.183.180.2", "ip.addr": "10.183.180.2"},
   "udp": {"udp.srcport": "40011", "udp.dstport": "319"},
   "ptp": {"ptp.v2.messagetype": "0x00", "ptp.v2.versionptp": "2", "ptp.v2.messagelength": "44",
           "ptp.v2.messagelength_tree": {"_ws.expert": {"ptp.v2.msg_len_too_large": "",
               "_ws.expert.message": "Message length goes past the end of the packet",
               "_ws.expert.severity": "8388608", "_ws.expert.group": "117440512"},
               "_ws.malformed": "Malformed Packet"},
           "ptp.v2.flags": "0x0000", "ptp.v2.flags_tree": {"ptp.v2.flags.twostep": "0"}},
   "_ws.malformed": {"_ws.expert": {"_ws.malformed.expert": "",
       "_ws.expert.message": "Malformed Packet (Exception occurred)", "_ws.expert.severity": "8388608",
       "_ws.expert.group": "117440512"}, "_ws.malformed": "Malformed Packet"}}}},
 {"_source": {"layers": {
   "frame": {"frame.time_epoch": "1796238941.5", "frame.number": "2"},
   "eth": {"eth.dst": "01:1b:19:00:00:00", "eth.src": "12:5a:0c:d2:6a:de", "eth.type": "0x88f7"},
   "ptp": {"ptp.v2.messagetype": "0x0b", "ptp.v2.domainnumber": "24", "ptp.v2.flags": "0x0008",
           "ptp.v2.flags_tree": {"ptp.v2.flags.twostep": "0", "ptp.v2.flags.ptptimescale": "1"},
           "ptp.v2.an.grandmasterclockclass": "6",
           "ptp.v2.an.tlv.tlvtype": "3", "ptp.v2.an.tlv.lengthfield": "8",
           "ptp.v2.an.tlv.tlvtype": "8", "ptp.v2.an.tlv.lengthfield": "12"}}}}
]"""


def test_dissect_json_flattens_ptp_fields_and_flags_malformed_frames() -> None:
    frames = dissect_json(json.loads(TSHARK_JSON, object_pairs_hook=_pairs))
    bad, announce = frames
    assert (bad["frame"], bad["transport"], bad["src"], bad["dst"], bad["message_type"]) == (
        1, "udp4", "10.183.180.1", "10.183.180.2", "Sync")
    assert bad["malformed"] and "Message length goes past the end of the packet" in [e["message"] for e in
                                                                                      bad["expert"]]
    assert bad["ptp.v2.messagelength"] == "44" and bad["ptp.v2.flags.twostep"] == "0"
    assert bad["time_epoch"] == pytest.approx(1796238940.388688435)
    assert (announce["transport"], announce["dst"], announce["message_type"]) == ("l2", "01:1b:19:00:00:00",
                                                                                  "Announce")
    assert not announce["malformed"] and announce["expert"] == []
    assert announce["ptp.v2.an.grandmasterclockclass"] == "6" and announce["ptp.v2.flags.ptptimescale"] == "1"
    assert announce["ptp.v2.an.tlv.tlvtype"] == ["3", "8"]  # repeated keys (one per TLV) kept in order
