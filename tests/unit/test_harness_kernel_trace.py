"""The PTP benches' kernel-trace reading (harness/kernel_trace.py): frames paired by skb, Syncs told from their
Follow_Ups, and a stall told silent (the hypervisor's) only when the sending CPU showed no guest event in it."""

from harness.kernel_trace import Trace, kernel_transits, summarize_frames, syncs


def _xmit(ts: float, dev: str, skb: str, cpu: int = 0, length: int = 86, comm: str = "python-100") -> str:
    return (f"          {comm}    [{cpu:03d}] b.... {ts:.6f}: net_dev_start_xmit: dev={dev} queue_mapping=0 "
            f"skbaddr={skb} vlan_tagged=0 protocol=0x0800 ip_summed=3 len={length} data_len=0")


def _rx(ts: float, dev: str, skb: str, cpu: int = 0, comm: str = "python-100") -> str:
    return (f"          {comm}    [{cpu:03d}] b.... {ts:.6f}: netif_rx_entry: dev={dev} napi_id=0x0 "
            f"queue_mapping=0 skbaddr={skb} vlan_tagged=0 protocol=0x0800 len=72 data_len=0")


def _timer(ts: float, cpu: int) -> str:
    return f"          <idle>-0       [{cpu:03d}] d.h1. {ts:.6f}: local_timer_entry: vector=236"


TRACE = "\n".join([
    "# tracer: nop",
    _xmit(100.000000, "v1a", "s1"), _rx(100.000003, "v1b", "s1"),  # Sync, 3 us
    _xmit(100.000400, "v1a", "f1"), _rx(100.000402, "v1b", "f1"),  # its Follow_Up
    _xmit(100.062500, "v1a", "s2"), _rx(100.062540, "v1b", "s2"),  # Sync stalled 40 us, nothing else on CPU 0
    _xmit(100.062900, "v1a", "f2"), _timer(100.062905, 0), _rx(100.062930, "v1b", "f2"),  # 30 us, a timer inside
    _xmit(100.070000, "v1a", "a1", length=108), _rx(100.070003, "v1b", "a1"),  # an Announce: not a 44-byte frame
    _xmit(100.100000, "v2a", "o1", comm="ptp4l-200"), _rx(100.100002, "v2b", "o1", comm="ptp4l-200"),  # other link
    _timer(100.062910, 1),  # another CPU's event does not make CPU 0's stall a guest one
])


def test_frames_pair_transmit_and_receive_by_skb_and_judge_the_stall_on_the_sending_cpu() -> None:
    sent = Trace(TRACE).frames(devs=("v1a",))
    assert [round(f.transit_s * 1e6) for f in sent] == [3, 2, 40, 30]
    assert [f.silent for f in sent] == [True, True, True, False]


def test_a_sync_is_the_first_of_a_pair_and_the_next_one_comes_an_interval_later() -> None:
    found = syncs(Trace(TRACE).frames(devs=("v1a",)))
    assert [round(f.t_xmit_s, 4) for f in found] == [100.0, 100.0625]


def test_the_summary_counts_stalls_and_the_silent_ones() -> None:
    summary = summarize_frames(Trace(TRACE).frames(devs=("v1a",)))
    assert (summary["frames"], summary["over_10us"], summary["silent_over_10us"]) == (4, 2, 1)
    assert round(summary["max_us"]) == 40
    assert kernel_transits(TRACE, "ptp4l")["frames"] == 1
