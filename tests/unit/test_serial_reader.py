"""SerialReader: a device that cannot be opened or fails is reported once per reason, with the operating system's
reason, and retried with back-off until it opens; a reopened device is reported connected."""

from __future__ import annotations

import errno
import threading
import time

import serial

from appliance.edge.serial_reader import SerialReader, _why
from appliance.events import DeviceEvent


class _Port:
    """An open line that delivers one chunk, then fails as an unplugged USB receiver does."""

    def __init__(self) -> None:
        self.reads = 0

    def read(self, size: int) -> bytes:
        self.reads += 1
        if self.reads == 1:
            return b"$GPRMC*00\r\n"
        raise serial.SerialException("device reports readiness to read but returned no data "
                                     "(device disconnected or multiple access on port?)")

    def close(self) -> None:
        pass


def _run(opener, until, timeout_s: float = 5.0) -> tuple[list[DeviceEvent], list[bytes], SerialReader]:
    events: list[DeviceEvent] = []
    chunks: list[bytes] = []
    done = threading.Event()

    def on_device(ev: DeviceEvent) -> None:
        events.append(ev)
        if until(events):
            done.set()

    reader = SerialReader("/dev/ttyTEST", 9600, lambda data, _ns: chunks.append(data), on_device,
                          initial_backoff_s=0.01, max_backoff_s=0.02, opener=opener)
    reader.start()
    assert done.wait(timeout_s), f"events so far: {events}"
    reader.stop()
    return events, chunks, reader


def test_missing_device_reported_once_with_the_reason_then_opened_when_it_appears():
    attempts = []

    def opener(device: str, baud: int, timeout: float):
        attempts.append(time.monotonic())
        if len(attempts) < 6:
            raise serial.SerialException(errno.ENOENT, f"could not open port {device}: [Errno 2] No such file or "
                                                       f"directory: '{device}'")
        return _Port()

    events, chunks, _ = _run(opener, lambda evs: len(evs) >= 3)
    assert [(e.connected, e.reason) for e in events[:3]] == [
        (False, "cannot open /dev/ttyTEST: No such file or directory"),  # once, not once per retry
        (True, "opened /dev/ttyTEST at 9600 baud"),
        (False, "/dev/ttyTEST failed: the device went away (no data on a ready line: unplugged or the other end "
                "closed)")]
    assert chunks[0] == b"$GPRMC*00\r\n"


def test_a_changed_failure_is_reported_again():
    reasons = iter([errno.ENOENT, errno.ENOENT, errno.EACCES, errno.EACCES, errno.EACCES] + [errno.EACCES] * 100)

    def opener(device: str, baud: int, timeout: float):
        code = next(reasons)
        raise serial.SerialException(code, f"could not open port {device}: [Errno {code}] ...")

    events, _, _ = _run(opener, lambda evs: len(evs) >= 2)
    assert [e.reason for e in events] == ["cannot open /dev/ttyTEST: No such file or directory",
                                          "cannot open /dev/ttyTEST: Permission denied"]


def test_reasons_are_the_operating_systems_words():
    try:
        serial.Serial("/dev/null", 9600, timeout=0.1)  # a character device, not a tty
    except serial.SerialException as exc:
        assert _why(exc) == "not a serial device (Inappropriate ioctl for device)"
    assert _why(serial.SerialException(errno.EACCES, "could not open port x: [Errno 13] Permission denied: 'x'")) \
        == "Permission denied"
    assert _why(OSError(errno.EIO, "Input/output error")) == "Input/output error"
