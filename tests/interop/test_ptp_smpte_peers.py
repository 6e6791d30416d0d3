"""SMPTE ST 2059-2 against real peers: a ptp4l slave configured for the profile (domain 127, 4 Announces and 8 Syncs
a second) follows the appliance over a veth pair, and tshark dissects the synchronization metadata it sends every
second (the SMPTE organization extension TLV) field by field, with no malformed mark or expert error."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import ptp_harness as h
from harness.ptp_appliance import ApplianceGm

pytestmark = [pytest.mark.interop, pytest.mark.slow]

SLAVE_OPTIONS = {"domainNumber": "127", "delay_mechanism": "E2E", "logAnnounceInterval": "-2",
                 "announceReceiptTimeout": "3", "logSyncInterval": "-3", "logMinDelayReqInterval": "-3",
                 "dataset_comparison": "ieee1588"}


def _field(frame: dict, suffix: str) -> str | None:
    return next((str(v) for k, v in frame.items() if k.endswith(suffix)), None)


@pytest.mark.timeout(150)
def test_a_ptp4l_slave_follows_a_st2059_2_grandmaster_and_tshark_reads_its_metadata(tmp_path: Path) -> None:
    h.require_ptp("ptp4l")
    h.require("tshark")
    with h.NetnsPair("psm") as net, ApplianceGm(net.ns_a, net.if_a, tmp_path / "gm", "ptp.profile=st2059-2",
                                                 "ptp.smpte_frame_rate=25",
                                                 "ptp.smpte_time_zone=Europe/Berlin") as gm:
        with h.Capture(net.ns_b, net.if_b, tmp_path / "smpte.pcap") as cap, \
                h.Ptp4l(net.b, transport="udp4", delay="E2E", domain=127, extra=SLAVE_OPTIONS) as slave:
            assert slave.wait_slave(timeout_s=30) < 20, slave.tail()
            assert slave.selected_gm() == gm.identity()
            ptp = gm.wait(lambda s: s["outputs"]["ptp"]["counters"].get("tx_smpte_metadata", 0) >= 3, 10)[
                "outputs"]["ptp"]
            assert ptp["domain"] == 127 and ptp["profile"] == "st2059-2" and ptp["log_sync_interval"] == -3
            assert ptp["log_announce_interval"] == -2
    frames = h.dissect(cap.path)
    assert frames and not any(f["malformed"] for f in frames)
    metadata = [f for f in frames if f.get("message_type") == "Management"
                and _field(f, "smpte.defaultsystemframerate.numerator") is not None]
    assert len(metadata) >= 3, [f.get("message_type") for f in frames][:20]
    last = metadata[-1]
    assert _field(last, "smpte.defaultsystemframerate.numerator") == "25"
    assert _field(last, "smpte.defaultsystemframerate.denominator") == "1"
    berlin = int(_field(last, "smpte.currentlocaloffset"))
    assert berlin in (3600 - 37, 7200 - 37)  # CET or CEST minus currentUtcOffset
    assert int(_field(last, "smpte.jumpseconds")) == (3600 if berlin == 3600 - 37 else -3600)
    assert int(_field(last, "smpte.timeofnextjump")) > 0
    assert _field(last, "smpte.masterlockingstatus") in ("1", "2", "4")
