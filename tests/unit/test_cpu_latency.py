"""The CPU wake-up latency hold (cpu_latency_us): the PM QoS request written while running, dropped at stop, and a
refusal said in the log and the status without stopping the appliance."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest

from appliance.config import ConfigError, load
from appliance.edge.cpu_latency import CpuLatencyHold


def test_the_request_is_written_held_and_dropped_at_stop(tmp_path: Path) -> None:
    device = tmp_path / "cpu_dma_latency"
    os.mkfifo(device)  # read at the other end, as the kernel reads the device
    reader = os.open(device, os.O_RDONLY | os.O_NONBLOCK)
    hold = CpuLatencyHold(0, str(device))
    hold.start()
    assert struct.unpack("=i", os.read(reader, 4)) == (0,)
    assert hold.held and hold.status() == {"cpu_latency": {"enabled": True, "latency_us": 0, "held": True}}
    hold.stop()
    assert not hold.held and os.read(reader, 4) == b""  # the writer closed: the kernel drops the request
    os.close(reader)


def test_a_refusal_is_logged_and_shown_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    hold = CpuLatencyHold(20, str(tmp_path / "missing"))
    with caplog.at_level(logging.WARNING, logger="appliance"):
        hold.start()
    status = hold.status()["cpu_latency"]
    assert not status["held"] and "cannot hold the CPU wake-up latency at 20 us" in status["error"]
    assert "No such file or directory" in caplog.text and "idle policy stays as it is" in caplog.text
    hold.stop()


def test_the_setting_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text("cpu_latency_us = -2\n")
    with pytest.raises(ConfigError, match="cpu_latency_us"):
        load(str(path))
    with pytest.raises(ValueError):
        CpuLatencyHold(-1)
