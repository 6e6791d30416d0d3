"""The appliance as a PTP slave of linuxptp's ptp4l: PtpSlaveService in one network namespace, ptp4l as the upstream
grandmaster in the other, joined by a veth pair; software timestamps at both ends.

ptp4l runs as the harness always runs it (``free_running 1`` under ``setpriv --bounding-set -sys_time``: it cannot
touch this machine's clock); the slave never adjusts a clock at all.  The slave runs in a child process started with
``ip netns exec`` (this file, run as ``python -m tests.interop.test_ptp_slave_peers --slave ...``), with the host
clock as its TAI local axis (``local_of_host(h) = h + 37 s``), and prints every measurement as a JSON line.

What ptp4l 3.1.1 is as a grandmaster here, checked on the wire and by the offsets: its Announce has PTP_TIMESCALE and
currentUtcOffsetValid clear and currentUtcOffset 37 (ARB timescale: clock.c sets utc_timescale for CLOCK_REALTIME,
and for free_running with software timestamps), and its Sync/Follow_Up timestamps are UTC (CLOCK_REALTIME): read as
UTC plus TAI - UTC, they agree with the host clock as TAI to microseconds; read as TAI they would be 37 s off.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness import ptp_harness as h

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
TAI_MINUS_HOST_NS = 37 * 1_000_000_000  # the host clock (UTC) as TAI, as the appliance's local axis
SAMPLES = 30  # measurements in SLAVE state per case (8 Sync/s: about 4 s)
MEDIAN_LIMIT_NS = 200_000  # software timestamps on a veth pair; typically a few microseconds
# A fast grandmaster, so that a case takes ~10 s: 8 Sync/s, 2 Announce/s, 8 (P)Delay_Req/s.
GM_EXTRA = {"logSyncInterval": "-3", "logAnnounceInterval": "-1", "logMinDelayReqInterval": "-3",
            "logMinPdelayReqInterval": "-3"}


@pytest.fixture(autouse=True)
def _peers() -> None:
    h.require_ptp("ptp4l", "pmc")


def _run_slave(net: h.NetnsPair, transport: str, delay: str, timeout_s: float = 25.0) -> tuple[list[dict], dict]:
    """PtpSlaveService in namespace b until SAMPLES measurements in SLAVE state; (measurements, final status)."""
    argv = [*h.SETPRIV, sys.executable, "-m", "tests.interop.test_ptp_slave_peers", "--slave", net.if_b, transport,
            delay, str(timeout_s)]
    proc = net.run(net.b, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
    try:
        out, err = proc.communicate(timeout=timeout_s + 15)
    except subprocess.TimeoutExpired:
        h.stop_process(proc)
        out, err = proc.communicate()
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    status = next((x["status"] for x in lines if "status" in x), None)
    assert status is not None, f"slave exited {proc.returncode} without a status; stderr:\n{err[-3000:]}"
    return [x["measurement"] for x in lines if "measurement" in x], status


def _check(measured: list[dict], status: dict, gm: h.Ptp4l) -> None:
    ident = gm.clock_identity()  # aabbcc.fffe.ddeeff, as the slave prints it too
    assert status["state"] == "SLAVE", status
    assert status["master"] == f"{ident}-1" and status["grandmaster"]["identity"] == ident
    calibrated = measured[-SAMPLES:]
    assert len(calibrated) == SAMPLES, (len(measured), status)
    for m in calibrated:
        assert m["gm_identity"] == ident and m["master"] == f"{ident}-1"
        assert (m["clock_class"], m["clock_accuracy"], m["time_source"]) == (6, 0x21, 0x20)
        assert m["steps_removed"] == 0
    offsets = [m["offset_ns"] for m in calibrated]
    delays = [m["path_delay_ns"] for m in calibrated]
    assert abs(statistics.median(offsets)) < MEDIAN_LIMIT_NS, offsets
    assert 0 < statistics.median(delays) < MEDIAN_LIMIT_NS, delays
    # ptp4l's timescale: ARB, currentUtcOffset 37 not marked valid; read as UTC + the appliance's TAI - UTC
    gmq = status["grandmaster"]
    assert not gmq["ptp_timescale"] and not gmq["utc_offset_valid"] and gmq["current_utc_offset"] == 37, gmq
    assert all(not m["ptp_timescale"] and m["utc_offset_applied_s"] == 37 for m in calibrated)
    assert status["counters"].get("send_errors", 0) == 0, status["counters"]


def test_e2e_udpv4_against_ptp4l_and_its_timestamps_are_utc(tmp_path: Path) -> None:
    with h.NetnsPair("sl") as net, h.Ptp4l(net.a, role="master", transport="udp4", delay="E2E",
                                          extra=GM_EXTRA) as gm:
        with h.Capture(net.ns_b, net.if_b, tmp_path / "e2e.pcap") as cap:
            measured, status = _run_slave(net, "udp4", "e2e")
        _check(measured, status, gm)
        assert status["counters"]["tx_delay_req"] >= SAMPLES // 4 and status["counters"]["path_delays"] >= 3
        props = next(b for b in gm.pmc_local("GET TIME_PROPERTIES_DATA_SET") if "ptpTimescale" in b)
        assert int(props["ptpTimescale"]) == 0 and int(props["currentUtcOffsetValid"]) == 0, props
    # On the wire: ptp4l's Announce says ARB (flags all clear) and currentUtcOffset 37, and every Follow_Up's
    # preciseOriginTimestamp is the capture's (UTC) receive time, not 37 s ahead of it.
    frames = h.dissect(cap.path)
    announces = [f for f in frames if f.get("message_type") == "Announce"]
    assert announces and all(f["ptp.v2.flags.timescale"] == "0" and f["ptp.v2.flags.utcreasonable"] == "0"
                             and f["ptp.v2.an.origincurrentutcoffset"] == "37" for f in announces), announces[0]
    follow_ups = [f for f in frames if f.get("message_type") == "Follow_Up"]
    assert follow_ups and not any(f["malformed"] for f in frames)
    for f in follow_ups:
        seconds = int(next(v for k, v in f.items() if k.endswith("preciseorigintimestamp.seconds")))
        nanos = int(next(v for k, v in f.items() if k.endswith("preciseorigintimestamp.nanoseconds")))
        origin_s = seconds + nanos / 1e9  # the whole timestamp: its seconds alone are up to 1 s behind
        assert abs(origin_s - f["time_epoch"]) < 0.5, (origin_s, f["time_epoch"])
    ours = [f for f in frames if f.get("message_type") == "Delay_Req" and f["src"] == net.ip4_b]
    assert ours, "no Delay_Req of the slave on the wire"


@pytest.mark.parametrize("transport,delay", [("l2", "p2p"), ("udp6", "e2e"), ("udp4", "p2p")])
def test_each_transport_and_delay_mechanism_against_ptp4l(transport: str, delay: str) -> None:
    with h.NetnsPair("sm") as net, h.Ptp4l(net.a, role="master", transport=transport, delay=delay.upper(),
                                          extra=GM_EXTRA) as gm:
        measured, status = _run_slave(net, transport, delay)
        _check(measured, status, gm)
        counters = status["counters"]
        if delay == "p2p":
            assert counters["tx_pdelay_req"] >= 4 and counters["path_delays"] >= 3
            # ptp4l asks for the peer delay too, and the slave answers it (two-step)
            assert counters.get("tx_pdelay_resp_follow_up", 0) >= 2, counters
            assert counters.get("tx_delay_req", 0) == 0
        else:
            assert counters["tx_delay_req"] >= 4


def test_an_interface_that_cannot_open_is_reported_and_retried() -> None:
    from appliance.refs.ptp_slave import SlaveConfig
    from appliance.edge.ptp.slave_service import PtpSlaveService

    async def main() -> dict[str, Any]:
        service = PtpSlaveService(SlaveConfig(), "nosuch0", lambda host_ns: host_ns, lambda m: None)
        service.start()
        try:
            assert service.runner.retrying  # tried again in FAULT_RETRY_S
            return service.status()
        finally:
            service.stop()

    status = asyncio.run(main())
    assert status["state"] == "FAULTY" and "nosuch0" in status["error"]


# --- the slave side, run in the namespace as a child process ------------------------------------------------------


def _slave_main(iface: str, transport: str, delay: str, timeout_s: float) -> None:
    import logging

    from appliance.protocol.ptp.fsm import SLAVE
    from appliance.refs.ptp_slave import PtpMeasurement, SlaveConfig
    from appliance.edge.ptp.slave_service import PtpSlaveService

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    config = SlaveConfig(transport=transport, delay_mechanism=delay, log_min_delay_req_interval=-2,
                         log_min_pdelay_req_interval=-2, tai_utc_s=37)

    async def main() -> None:
        done = asyncio.Event()
        calibrated = 0

        def on_measurement(m: PtpMeasurement) -> None:
            nonlocal calibrated
            print(json.dumps({"measurement": dataclasses.asdict(m)}), flush=True)
            if service.port is not None and service.port.state == SLAVE:
                calibrated += 1
                if calibrated >= SAMPLES:
                    done.set()

        service = PtpSlaveService(config, iface, lambda host_ns: host_ns + TAI_MINUS_HOST_NS, on_measurement)
        service.start()
        try:
            await asyncio.wait_for(done.wait(), timeout_s)
        except TimeoutError:
            pass
        finally:
            print(json.dumps({"status": service.status()}, default=str), flush=True)
            service.stop()

    asyncio.run(main())


if __name__ == "__main__" and sys.argv[1:2] == ["--slave"]:
    started = time.monotonic()
    _slave_main(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    print(f"slave ran {time.monotonic() - started:.1f} s", file=sys.stderr)
