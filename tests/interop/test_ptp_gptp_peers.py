"""IEEE 802.1AS (gPTP) against linuxptp: ptp4l configured by its shipped gPTP.cfg follows the appliance (profile
``gptp``) over a veth pair, and tshark dissects every message and TLV of both sides without a malformed mark.

gPTP.cfg is Debian's (/usr/share/doc/linuxptp/configs/gPTP.cfg), read here and handed to ptp4l as it is, with two
exceptions that the harness needs: neighborPropDelayThresh, because software time stamps over a veth pair put the
link delay at some microseconds where 802.1AS's 800 ns threshold assumes hardware stamps (the appliance's
``ptp.neighbor_prop_delay_thresh_ns`` is raised the same way), and the harness's safety keys (``free_running``,
its sockets).  ptp4l's priority1 248 loses to the appliance's 246.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import ptp_harness as h
from harness.ptp_appliance import ApplianceGm

pytestmark = [pytest.mark.interop, pytest.mark.slow]

GPTP_CFG = Path("/usr/share/doc/linuxptp/configs/gPTP.cfg")
THRESH_NS = 100_000_000  # software time stamps on a veth pair: microseconds, not 800 ns
SUMMARY_RE = re.compile(r"rms\s+(?P<rms>\d+) max\s+\d+ freq\s+[-+]?\d+ \+/-\s+\d+ delay\s+(?P<delay>\d+)")


def gptp_cfg() -> dict[str, str]:
    """The [global] keys of Debian's gPTP.cfg."""
    if not GPTP_CFG.exists():
        h._skip_or_fail(f"{GPTP_CFG} is missing (Debian package linuxptp)")
    keys: dict[str, str] = {}
    for line in GPTP_CFG.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("["):
            key, value = line.split(None, 1)
            keys[key] = value.strip()
    return keys


def _field(frame: dict, suffix: str) -> list[str]:
    values = []
    for k, v in frame.items():
        if k.endswith(suffix):
            values += [str(x) for x in v] if isinstance(v, list) else [str(v)]
    return values


@pytest.mark.timeout(180)
def test_ptp4l_with_gptp_cfg_follows_the_appliance_and_tshark_reads_every_tlv(tmp_path: Path) -> None:
    h.require_ptp("ptp4l")
    h.require("tshark")
    options = gptp_cfg()
    assert options["transportSpecific"] == "0x1" and options["follow_up_info"] == "1"
    options["neighborPropDelayThresh"] = str(THRESH_NS)
    with h.NetnsPair("pgp") as net, ApplianceGm(net.ns_a, net.if_a, tmp_path / "gm", "ptp.profile=gptp",
                                                 f"ptp.neighbor_prop_delay_thresh_ns={THRESH_NS}") as gm:
        with h.Capture(net.ns_b, net.if_b, tmp_path / "gptp.pcap") as cap, \
                h.Ptp4l(net.b, transport="l2", delay="P2P", domain=0, extra=options) as slave:
            # gPTP.cfg's ptp4l prints a summary (rms, delay) every few seconds instead of each offset
            assert slave.wait_slave(timeout_s=40, samples=0) < 35, slave.tail()
            assert slave.selected_gm() == gm.identity()
            summary = slave.wait_until(lambda: SUMMARY_RE.search(slave.log()), 30, "a summary line (rms, delay)")
            assert int(summary["delay"]) > 0  # ptp4l measured the link delay to the appliance (peer delay)
            ptp = gm.wait(lambda s: (s["outputs"]["ptp"].get("gptp") or {}).get("as_capable")
                          and s["outputs"]["ptp"]["counters"].get("tx_sync", 0) >= 16, 20)["outputs"]["ptp"]
            link = ptp["gptp"]
            assert abs(link["neighbor_rate_ratio"] - 1.0) < 1e-4  # one host clock on both ends
            assert 0 < link["link_delay_ns"] < THRESH_NS and ptp["profile"] == "gptp"
            log = slave.log()
    assert not re.search(r"(?i)bad message|msg type .* not supported|transportSpecific", log), log[-3000:]

    frames = h.dissect(cap.path)
    assert frames and not any(f["malformed"] for f in frames), [f for f in frames if f["malformed"]][:1]
    ours = [f for f in frames if f.get("eth_src") and f.get("src") == f.get("eth_src")
            and f["eth_dst"] == "01:80:c2:00:00:0e"]
    kinds = {f.get("message_type") for f in ours}
    assert {"Sync", "Follow_Up", "Announce", "Pdelay_Req", "Pdelay_Resp", "Pdelay_Resp_Follow_Up"} <= kinds, kinds
    assert all(_field(f, "v2.majorsdoid") == ["0x01"] for f in ours)  # transportSpecific 1
    follow_ups = [f for f in ours if f.get("message_type") == "Follow_Up"]
    assert follow_ups and all(_field(f, "as.fu.organizationId") == [str(0x0080C2)]
                              and _field(f, "as.fu.cumulativeScaledRateOffset") == ["0"] for f in follow_ups), \
        follow_ups[:1]
    announces = [f for f in ours if f.get("message_type") == "Announce"]
    assert announces and all(_field(f, "an.pathsequence") == [_field(f, "an.grandmasterclockidentity")[0]]
                             and _field(f, "an.priority1") == ["246"] for f in announces), announces[:1]


@pytest.mark.timeout(120)
def test_over_the_standard_threshold_the_link_is_not_as_capable_and_nothing_is_sent(tmp_path: Path) -> None:
    """With 802.1AS's own 800 ns neighborPropDelayThresh, a veth pair with software stamps (microseconds) is not
    asCapable: the appliance measures the link, says why, and sends no Announce or Sync; ptp4l never selects it."""
    h.require_ptp("ptp4l")
    options = gptp_cfg() | {"neighborPropDelayThresh": str(THRESH_NS)}
    with h.NetnsPair("pgn") as net, ApplianceGm(net.ns_a, net.if_a, tmp_path / "gm", "ptp.profile=gptp") as gm, \
            h.Ptp4l(net.b, transport="l2", delay="P2P", domain=0, extra=options) as slave:
        ptp = gm.wait(lambda s: (s["outputs"]["ptp"].get("gptp") or {}).get("link_delay_ns") is not None
                      and s["outputs"]["ptp"]["counters"].get("held_sync_not_as_capable", 0) >= 16, 30)[
            "outputs"]["ptp"]
        assert not ptp["gptp"]["as_capable"] and "over neighborPropDelayThresh 800 ns" in ptp["gptp"]["why_not"]
        assert ptp["counters"].get("tx_sync", 0) == 0 and ptp["counters"].get("tx_announce", 0) == 0
        assert slave.selected_gm() is None
