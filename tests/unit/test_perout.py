"""1PPS through a PHC's periodic output, with the ioctl layer injected: what is asked of the kernel, and when."""

from __future__ import annotations

import errno
import struct

from appliance.edge.perout import (PEROUT_FORMAT, PIN_FORMAT, PTP_PEROUT_REQUEST, PTP_PEROUT_REQUEST2,
                                      PTP_PIN_SETFUNC, PeroutSink)
from appliance.outputs.pulses import PlannedEdge, PpsConfig, pps_edges

S = 1_900_000_000 * 1_000_000_000  # a PHC second (TAI)


class FakePhc:
    def __init__(self, fail: dict[int, int] | None = None):
        self.calls: list[tuple[int, tuple]] = []
        self.fail = dict(fail or {})

    def ioctl(self, fd: int, request: int, arg: bytes) -> None:
        if request in self.fail:
            raise OSError(self.fail[request], "injected")
        fmt = PIN_FORMAT if request == PTP_PIN_SETFUNC else PEROUT_FORMAT
        self.calls.append((request, struct.unpack(fmt, arg)))


def sink(phc: FakePhc, **kw) -> PeroutSink:
    return PeroutSink("/dev/ptp3", channel=1, ioctl=phc.ioctl, opener=lambda path: 42, **kw)


def plan(synchronized: bool, policy: str = "squelch") -> list[PlannedEdge]:
    return pps_edges(S, synchronized, PpsConfig(width_ns=200_000_000, policy=policy), lambda s: s)


def test_started_once_on_the_second_less_the_cable_delay_with_its_width() -> None:
    phc = FakePhc()
    out = sink(phc, pin=0, cable_delay_ns=250)
    out.emit(plan(True))
    out.emit(plan(True))  # the PHC keeps the train running: nothing more to ask
    pin, perout = phc.calls
    assert pin[0] == PTP_PIN_SETFUNC and pin[1][1:4] == (0, 2, 1)  # pin 0 -> PTP_PF_PEROUT on channel 1
    assert perout[0] == PTP_PEROUT_REQUEST2
    start_s, start_ns, _, period_s, period_ns, _, channel, flags, on_s, on_ns, _ = perout[1]
    assert (start_s * 10**9 + start_ns, period_s, period_ns, channel, flags, on_s, on_ns) == (
        S - 250, 1, 0, 1, 2, 0, 200_000_000)
    assert out.status()["running"] and out.programmed == 1


def test_squelch_stops_the_train_and_flag_changes_its_width() -> None:
    phc = FakePhc()
    out = sink(phc)
    out.emit(plan(True))
    out.emit(plan(False))  # squelched: period 0
    assert phc.calls[-1][1][3:5] == (0, 0) and not out.status()["running"]
    out.emit(plan(False, "flag"))
    assert phc.calls[-1][1][8:10] == (0, 500_000_000)
    out.emit(plan(True, "flag"))
    assert phc.calls[-1][1][8:10] == (0, 200_000_000) and out.programmed == 4


def test_old_kernels_get_the_first_request_and_failures_are_kept_and_retried() -> None:
    phc = FakePhc({PTP_PEROUT_REQUEST2: errno.ENOTTY})
    out = sink(phc)
    out.emit(plan(True))
    assert phc.calls[-1][0] == PTP_PEROUT_REQUEST and phc.calls[-1][1][7] == 0  # no duty-cycle flag
    broken = FakePhc({PTP_PEROUT_REQUEST2: errno.EOPNOTSUPP})
    out = sink(broken)
    out.emit(plan(True))
    assert "channel 1" in out.error and not out.status()["running"]
    broken.fail.clear()
    out.emit(plan(True))  # retried the next second
    assert out.error == "" and out.status()["running"]
