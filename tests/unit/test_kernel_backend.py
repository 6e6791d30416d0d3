"""The hardware clock path end to end through an injected system-call layer: the appliance, fed a receiver's
bytes and PPS edges stamped on CLOCK_REALTIME, steers a (fake) kernel clock and tells it how synchronized it is.
Nothing here can touch this machine's clock: every adjtimex call lands in the fake kernel."""

from __future__ import annotations

from appliance import config as cfg, leap
from appliance.events import PpsEdge
from appliance.refs.gnss import ReceiverBytes
from appliance.runtime.build import Platform, assemble
from appliance.edge import kernel_clock as kc
from appliance.edge.kernel_backend import KernelBackend
from appliance.edge.kernel_clock import KernelClock
from appliance.sched import SimScheduler
from appliance.sim.receiver import SimReceiver
from tests.unit.test_kernel_clock import FakeKernel

NS = 1_000_000_000
TABLE = leap.LeapTable.load_default()


def test_the_appliance_steers_and_publishes_to_the_kernel_clock() -> None:
    kernel = FakeKernel()
    start_tai = leap.utc_fields_to_tai(2026, 6, 1, 12, 0, 0, 0, TABLE) + NS // 4
    posix_offset = 37 * NS
    clock_error_ns = 2_000_000  # the host clock starts 2 ms off
    sched = SimScheduler(start_tai)

    def raw_now() -> int:  # CLOCK_REALTIME, as the kernel would read it: off by the error, stepped as told
        return sched.now_ns() - posix_offset + clock_error_ns + sum(kernel.steps_ns)

    backend = KernelBackend(KernelClock.realtime(syscalls=kernel), lambda raw: leap.posix_to_tai_ns(raw, TABLE))
    config = cfg.load(None, ["clock.warmup_s=0", "clock.qualify_s=3"])
    platform = Platform("hardware", raw_now, backend, "system", device="/dev/fake")
    app = assemble(config, sched, platform, TABLE)
    rx = SimReceiver(1, TABLE)
    for second in range(60):
        s_ns = start_tai - start_tai % NS + (second + 1) * NS
        sched.run_until(s_ns)
        app.deliver("gnss", PpsEdge(s_ns - posix_offset + clock_error_ns + sum(kernel.steps_ns), second + 1, "pps0"))
        sched.run_until(s_ns + 100_000_000)
        app.deliver("gnss", ReceiverBytes(rx.burst(s_ns), raw_now()))
    status = app.status()
    assert status.clock.state == "LOCKED" and status.clock.backend == "system"
    assert kernel.steps_ns and abs(sum(kernel.steps_ns) + clock_error_ns) < 1000  # one step undid the error
    assert kc.ADJ_FREQUENCY in {m & kc.ADJ_FREQUENCY for m in kernel.modes}
    assert not kernel.status & kc.STA_UNSYNC  # published as synchronized
    assert kernel.maxerror_us >= 1 and kernel.tai_s == 37
