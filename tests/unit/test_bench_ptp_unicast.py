"""The PTP unicast bench's verdict (bench/ptp_unicast.py): a Sync over 1 ms late is the grandmaster's unless its
SCHED_FIFO sender was held off its CPU for the excess (the host's), and every other shortfall fails the run."""

from __future__ import annotations

from bench.ptp_unicast import classify_late, own_late, target_failures


def _run(**late) -> dict:
    lateness = {"syncs": 100_000, "p50_us": 40, "p99_us": 300, "max_us": 900, "late_over_1ms": 0} | late
    return {"clients_requested": 10_000, "granted": 10_000, "denied": 0, "no_reply": 0, "syncs_missed": 0,
            "sync_late_slots": 0, "delay_req_sent": 100_000, "delay_resp_received": 100_000, "lateness": lateness}


def test_a_clean_run_meets_the_target() -> None:
    assert target_failures(_run()) == []


def test_late_syncs_held_off_the_cpu_are_the_hosts() -> None:
    run = _run(late_over_1ms=7, held=7, max_us=4200, realtime=True)
    assert own_late(run["lateness"]) == 0 and target_failures(run) == []


def test_late_syncs_not_held_are_the_grandmasters() -> None:
    run = _run(late_over_1ms=7, held=5, max_us=4200, realtime=True)
    assert own_late(run["lateness"]) == 2
    assert target_failures(run) == ["2 of 100000 Syncs over 1 ms after their slot, not shown to be the host's "
                                    "(max 4.20 ms)"]


def test_without_a_realtime_sender_nothing_is_set_apart() -> None:
    """Not SCHED_FIFO: the thread may have been held off by the grandmaster's own threads."""
    run = _run(late_over_1ms=7, held=7, max_us=4200, realtime=False)
    assert own_late(run["lateness"]) == 7 and len(target_failures(run)) == 1


def test_unanswered_and_missed_fail_whatever_the_lateness() -> None:
    run = _run() | {"delay_resp_received": 99_990, "syncs_missed": 3}
    failures = target_failures(run)
    assert "10 Delay_Req unanswered" in failures and any("3 Syncs missed" in f for f in failures)



def test_with_a_trace_each_listed_late_sync_is_classified() -> None:
    """Slots at 10 s and 20 s; a silent stretch of 3 ms right after the first; the second had no stall."""
    gaps = [(10.0002, 10.0032)]
    syncs = [(10_000_000_000, 3500.0, 0.0), (20_000_000_000, 1800.0, 100.0), (40_000_000_000, 9000.0, 0.0)]
    traced = classify_late(syncs, gaps, 5.0, 30.0)
    assert traced == {"listed": 2, "host": 1, "untraced": 0, "silent_gaps_over_1ms": 1}
    # the buffer kept only what came after 15 s: the first one is judged on its held time alone
    assert classify_late(syncs, gaps, 5.0, 30.0, (15.0, 30.0))["host"] == 0
    late = {"late_over_1ms": 3, "held": 0, "realtime": True, "traced": traced}
    assert own_late(_run(**late)["lateness"]) == 2  # one unlisted in the window counts as the grandmaster's


def test_held_time_alone_can_make_a_late_sync_the_hosts() -> None:
    assert classify_late([(10_000_000_000, 2500.0, 1600.0)], [], 5.0, 30.0)["host"] == 1
