"""Silent timer gaps in a kernel trace (harness/kernel_trace.py): a timer interrupt that came late on a CPU with no
guest event meanwhile marks a stretch the vCPU was not running; one that came on time, or on a busy CPU, does not."""

from __future__ import annotations

from harness.kernel_trace import Trace, ipis_sent, kernel_holds, overlap_s, silent_timer_gaps, traced_span


def _line(comm: str, ts: float, event: str, fields: str) -> str:
    return f"          {comm}-1510    [000] d..2. {ts:.6f}: {event}: {fields}"


def _arm(t0: float, expires: float, addr: str) -> str:
    return _line("ptp-sync", t0, "hrtimer_start",
                 f"hrtimer={addr} function=hrtimer_wakeup expires={int(expires * 1e9)} softexpires=0 mode=ABS")


def _fire(t_irq: float, addr: str) -> list[str]:
    return [_line("python", t_irq - 1e-6, "local_timer_entry", "vector=236"),
            _line("python", t_irq, "hrtimer_expire_entry", f"hrtimer={addr} function=hrtimer_wakeup now=0")]


def test_a_late_interrupt_on_a_silent_cpu_is_a_gap() -> None:
    """From the timer's expiry to the first event after it (the interrupt's entry, or an IPI that was pending and
    came with it)."""
    text = "\n".join([_arm(100.0, 100.001, "aa"), _line("python", 100.00248, "call_function_single_entry",
                                                         "vector=251")] + _fire(100.0025, "aa"))
    (gap,) = silent_timer_gaps(text, 0)
    assert abs(gap[0] - 100.001) < 1e-9 and abs(gap[1] - 100.00248) < 1e-9


def test_a_busy_cpu_or_an_on_time_interrupt_is_not() -> None:
    """Only the stretch with no event at all counts: here the 30 us before the softirq is too short."""
    busy = [_arm(100.0, 100.001, "aa"), _line("python", 100.00103, "softirq_entry", "vec=3 [action=NET_RX]")]
    assert silent_timer_gaps("\n".join(busy + _fire(100.0025, "aa")), 0) == []
    on_time = [_arm(100.0, 100.001, "bb")] + _fire(100.00101, "bb")
    assert silent_timer_gaps("\n".join(on_time), 0) == []
    other_cpu = "\n".join([_arm(100.0, 100.001, "aa")] + _fire(100.0025, "aa"))
    assert silent_timer_gaps(other_cpu, 1) == []


def test_overlap_counts_each_instant_once() -> None:
    gaps = [(1.0, 2.0), (1.5, 3.0), (5.0, 6.0)]
    assert abs(overlap_s(gaps, 0.0, 10.0) - 3.0) < 1e-9
    assert abs(overlap_s(gaps, 2.5, 5.5) - 1.0) < 1e-9
    assert overlap_s(gaps, 3.5, 4.5) == 0.0


def test_a_silent_stretch_of_the_running_sender_is_a_gap() -> None:
    """The sender enters the kernel every few microseconds: 1.5 ms with no event while it is current is not its."""
    lines = [_line("python", 100.0, "sched_switch", "prev_comm=python prev_pid=1508 prev_prio=120 prev_state=R ==> "
                   "next_comm=ptp-sync next_pid=1510 next_prio=98"),
             _line("ptp-sync", 100.00001, "sys_enter", "NR 307 (3, 7f, 10, 0, 0, 0)"),
             _line("ptp-sync", 100.00151, "sys_enter", "NR 307 (3, 7f, 10, 0, 0, 0)"),
             _line("ptp-sync", 100.00152, "sched_switch", "prev_comm=ptp-sync prev_pid=1510 prev_prio=98 "
                   "prev_state=S ==> next_comm=python next_pid=1508 next_prio=120"),
             _line("python", 100.00400, "sys_enter", "NR 0 (3, 7f, 10, 0, 0, 0)")]
    text = "\n".join(lines)
    assert silent_timer_gaps(text, 0, "ptp-sync") == [(100.00001, 100.00151)]
    assert silent_timer_gaps(text, 0) == []  # python's 2.5 ms without an event may be its own computing


def test_the_traced_span_is_what_the_buffer_kept() -> None:
    text = "\n".join(["# tracer: nop", _arm(100.5, 101.0, "aa")] + _fire(102.0, "aa"))
    assert traced_span(text, 0) == (100.5, 102.0) and traced_span(text, 1) is None


def test_a_silent_stretch_of_the_running_canary_is_a_gap_when_named() -> None:
    """The canary works a few microseconds between its wake-up and its sleep: 6.7 ms with no event while it is
    current (no timer was due meanwhile to show it late) is the vCPU not running."""
    lines = [_line("python", 100.0, "sched_switch", "prev_comm=python prev_pid=1508 prev_prio=120 prev_state=R ==> "
                   "next_comm=canary next_pid=1532 next_prio=97"),
             _line("canary", 100.0067, "hrtimer_start", "hrtimer=00000000cc2b7fbf function=hrtimer_wakeup "
                   "expires=100007200000 softexpires=100007200000 mode=ABS"),
             _line("canary", 100.00671, "sched_switch", "prev_comm=canary prev_pid=1532 prev_prio=97 prev_state=S "
                   "==> next_comm=ptp-sync next_pid=1510 next_prio=98")]
    text = "\n".join(lines)
    assert silent_timer_gaps(text, 0, ("ptp-sync", "canary")) == [(100.0, 100.0067)]
    assert silent_timer_gaps(text, 0, "ptp-sync") == []


def test_the_interrupts_a_thread_sent_are_counted_from_one_parse() -> None:
    """ipi_send_cpu while the sender was current counts; another thread's, or another CPU's, does not; a parsed
    Trace gives the same answers as its text."""
    lines = [_line("ptp-sync", 100.0, "ipi_send_cpu", "cpu=1 callsite=ttwu_queue_wakelist+0x1 callback=0x0"),
             _line("ptp-sync", 100.1, "ipi_send_cpu", "cpu=1 callsite=wakeup_preempt+0x1 callback=0x0"),
             _line("python", 100.2, "ipi_send_cpu", "cpu=1 callsite=ttwu_queue_wakelist+0x1 callback=0x0"),
             _line("ptp-sync", 100.3, "sys_enter", "NR 307 (3, 7f, 13, 0, 0, 0)")]
    text = "\n".join(lines)
    assert ipis_sent(text, 0, "ptp-sync") == 2
    assert ipis_sent(text, 1, "ptp-sync") == 0
    events = Trace(text)
    assert ipis_sent(events, 0, "ptp-sync") == 2
    assert silent_timer_gaps(events, 0, "ptp-sync") == silent_timer_gaps(text, 0, "ptp-sync")


def _switch(t: float, prev: str, nxt: str) -> str:
    return _line(prev, t, "sched_switch", f"prev_comm={prev} prev_pid=1 prev_prio=120 prev_state=R+ ==> "
                                         f"next_comm={nxt} next_pid=2 next_prio=98")


def test_a_kernel_thread_kept_the_cpu_after_the_senders_wake_up() -> None:
    """The sender's timer expires while a worker runs; the worker switches away 1 ms later (the kernel did not
    preempt it): a hold from the expiry to that switch, with the work it ran.  The same with the appliance's own
    thread current is not a kernel hold, nor is another thread's timer."""
    held = [_arm(100.0, 100.001, "aa"), _switch(100.0005, "ptp-sync", "kworker/0:1"),
            _line("kworker/0:1", 100.0009, "workqueue_execute_start", "work struct 00ff: function vmstat_update"),
            *_fire_in("kworker/0:1", 100.001, "aa"), _switch(100.002, "kworker/0:1", "canary"),
            _switch(100.00207, "canary", "ptp-sync")]
    (hold,) = kernel_holds("\n".join(held), 0, "ptp-sync")
    assert abs(hold[0] - 100.001) < 1e-9 and abs(hold[1] - 100.002) < 1e-9 and hold[2] == ""
    # work started after the wake-up was due is named (the item before it is not)
    with_work = held[:5] + [_line("kworker/0:1", 100.0015, "workqueue_execute_start",
                                  "work struct 00ff: function lru_add_drain_per_cpu")] + held[5:]
    assert kernel_holds("\n".join(with_work), 0, "ptp-sync")[0][2] == "lru_add_drain_per_cpu"
    own = [_arm(100.0, 100.001, "aa"), _switch(100.0005, "ptp-sync", "python"), *_fire_in("python", 100.001, "aa"),
           _switch(100.002, "python", "ptp-sync")]
    assert kernel_holds("\n".join(own), 0, "ptp-sync") == []
    others = [_line("canary", 100.0, "hrtimer_start", "hrtimer=bb function=hrtimer_wakeup expires=100001000000 "
                    "softexpires=0 mode=ABS"), _switch(100.0005, "canary", "kworker/0:1"),
              *_fire_in("kworker/0:1", 100.001, "bb"), _switch(100.002, "kworker/0:1", "canary")]
    assert kernel_holds("\n".join(others), 0, "ptp-sync") == []


def _fire_in(comm: str, t_irq: float, addr: str) -> list[str]:
    return [_line(comm, t_irq - 1e-6, "local_timer_entry", "vector=236"),
            _line(comm, t_irq, "hrtimer_expire_entry", f"hrtimer={addr} function=hrtimer_wakeup now=0")]
