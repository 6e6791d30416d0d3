"""The runtime builds one reference, one driver and one serial line (with its PPS device) per [[gnss]] receiver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from appliance import config as cfg
from appliance import leap
from appliance.edge.pps_linux import PpsReader
from appliance.edge.serial_reader import SerialReader
from appliance.refs.gnss import GnssReference, ReceiverBytes
from appliance.runtime import inputs
from appliance.runtime.build import reference_drivers, reference_specs

THREE = """
[[gnss]]
device = "/dev/ttyACM0"
pps_device = "/dev/pps0"
cable_delay_ns = 95
[[gnss]]
device = "/dev/ttyS2"
baud = 38400
cable_delay_ns = 140
accuracy_ns = 40
[[gnss]]
name = "mast"
device = "/dev/ttyS3"
pps_device = "/dev/pps3"
priority = 2
"""


def three(tmp_path: Path) -> cfg.Config:
    path = tmp_path / "appliance.toml"
    path.write_text(THREE, encoding="utf-8")
    return cfg.load(str(path), [f"state_dir={tmp_path / 'state'}"])


def test_one_reference_and_driver_per_receiver_each_with_its_own_settings(tmp_path: Path) -> None:
    config = three(tmp_path)
    specs = [s for s in reference_specs(config) if s.kind == "gnss"]
    assert [(s.name, s.priority, s.accuracy_ns) for s in specs] == [("gnss", 1, 20.0), ("gnss2", 1, 40.0),
                                                                    ("mast", 2, 20.0)]
    assert specs[0].qualify_s == 0.0 and specs[1].qualify_s == specs[2].qualify_s == config.references.qualify_s
    table = leap.LeapTable.load_default()
    drivers = reference_drivers(config, specs, lambda: table, config.gnss.device)
    assert all(isinstance(d, GnssReference) for d in drivers)
    assert [d.watched for d in drivers] == [True, False, False]  # the integrity checks watch the first
    assert [d.pairer.cable_delay_ns for d in drivers] == [95, 140, 0]  # type: ignore[attr-defined]
    assert [d.receiver.device for d in drivers] == ["/dev/ttyACM0", "/dev/ttyS2", "/dev/ttyS3"]  # type: ignore


def test_a_serial_line_per_receiver_and_a_pps_reader_where_one_is_set(tmp_path: Path) -> None:
    delivered: list[tuple[str, Any]] = []
    parts = inputs.receivers(three(tmp_path), lambda ref, item: delivered.append((ref, item)),
                             lambda fn, *args: fn(*args))
    lines = [p for p in parts if isinstance(p, SerialReader)]
    assert [(p.device, p.baud) for p in lines] == [("/dev/ttyACM0", 9600), ("/dev/ttyS2", 38400),
                                                   ("/dev/ttyS3", 9600)]
    assert [p.path for p in parts if isinstance(p, PpsReader)] == ["/dev/pps0", "/dev/pps3"]
    for line in lines:
        line._on_bytes(b"$", 7)  # what the line's reader thread hands on
    assert [(ref, type(item)) for ref, item in delivered] == [("gnss", ReceiverBytes), ("gnss2", ReceiverBytes),
                                                              ("mast", ReceiverBytes)]
