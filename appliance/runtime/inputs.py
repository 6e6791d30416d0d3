"""The reference inputs as parts of the runtime: receivers' serial lines and PPS devices, NTP pollers, the PTP slave
port, the IRIG-B input and the external 1PPS.

Edge wiring.  Every input runs in a thread or on the loop; what it reads reaches its reference's driver on the loop
through ``deliver(ref, item)`` (posted with ``post`` from a thread), never through the runtime object.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from appliance import leap
from appliance.config import Config
from appliance.monitor import Answer, Target
from appliance.refs.gnss import ReceiverBytes

log = logging.getLogger("appliance")
Deliver = Callable[[str, object], None]  # (reference name, what its edge read), on the loop
Post = Callable[..., Any]  # loop.call_soon_threadsafe


def receivers(config: Config, deliver: Deliver, post: Post,
              add_line: Callable[[str, Any], None] | None = None) -> list[Any]:
    """The receivers' serial readers and PPS readers, one of each per [[gnss]] entry; their bytes, device events and
    edges go to that receiver's reference (gnss, gnss2 ...), and ``add_line`` learns where each one's set-up commands
    go."""
    from appliance.edge.pps_linux import PpsReader
    from appliance.edge.serial_reader import SerialReader

    g = config.gnss
    lines = [(rx.name, rx.device, rx.baud, rx.pps_device) for rx in config.receivers]
    parts: list[Any] = []
    for ref, device, baud, pps_path in lines:
        reader = SerialReader(device, baud, _bytes_to(ref, deliver, post), _to(ref, deliver, post),
                              max_backoff_s=g.reconnect_max_s)
        parts.append(reader)
        if add_line is not None:
            add_line(ref, reader)  # the receiver's set-up commands go out on its line
        if pps_path:
            parts.append(PpsReader(pps_path, _to(ref, deliver, post),
                                   on_error=functools.partial(log.warning, "PPS %s: %s", pps_path)))
    return parts


def _to(ref: str, deliver: Deliver, post: Post) -> Callable[[object], None]:
    return lambda item: post(deliver, ref, item)


def _bytes_to(ref: str, deliver: Deliver, post: Post) -> Callable[[bytes, int], None]:
    return lambda data, rx_raw_ns: post(deliver, ref, ReceiverBytes(data, rx_raw_ns))


class Input:
    """An input edge started and stopped with the other parts; its status shows in its reference's row."""

    def __init__(self, edge: Any, status: Callable[[], dict[str, Any]] | None = None):
        self.edge = edge
        self.status = status or (lambda: dict(getattr(edge, "status", dict)()))

    def start(self) -> None:
        self.edge.start()

    def stop(self) -> None:
        self.edge.stop()


def cross_check_poller(config: Config, cross_check: Callable[[str, float, float], None], post: Post,
                       served_posix_ns: Callable[[int], int]) -> Input:
    """Polls the integrity cross-check's NTP servers from a thread; each answer reaches the guard on the loop."""
    from appliance.edge.ntp_poller import NtpCrossCheckPoller

    def on_sample(sample: Any) -> None:
        if not sample.error:  # failed queries only show in status
            post(cross_check, sample.server, sample.offset_ns, sample.uncertainty_ns)

    i = config.integrity
    return Input(NtpCrossCheckPoller(i.ntp_servers, float(i.ntp_interval_s), 2.0, served_posix_ns, on_sample))


def sync_monitor_poller(config: Config, targets: Sequence[Target], on_answer: Callable[[Answer], None], post: Post,
                        served_tai_ns_at_host: Callable[[int], int], posix_of_tai: Callable[[int], int]) -> Input:
    """Polls the sync monitor's downstream clients from a thread (nsm as a child for the PTP slaves); each result
    reaches the router on the loop."""
    from appliance.edge.sync_monitor import NsmProcess, SyncMonitorPoller

    m = config.monitor
    nsm = None
    if any(t.kind == "ptp" for t in targets):
        nsm = NsmProcess(m.nsm_path, m.ptp_interface, m.ptp_transport, m.ptp_domain, m.ptp_timestamping)
    poller = SyncMonitorPoller(targets, float(m.interval_s), float(m.timeout_s), served_tai_ns_at_host,
                               posix_of_tai, lambda answer: post(on_answer, answer), nsm)
    return Input(poller, status=dict)


def ntp_upstream(config: Config, deliver: Deliver, post: Post, served_posix_ns: Callable[[int], int]) -> Input:
    """Polls the NTP upstream servers from a thread; each answer reaches the "ntp" reference on the loop."""
    from appliance.edge.ntp_poller import NtpCrossCheckPoller

    r = config.references
    return Input(NtpCrossCheckPoller(r.ntp_servers, float(r.ntp_interval_s), 2.0, served_posix_ns,
                                     _to("ntp", deliver, post)), status=dict)


def ptp_upstream(config: Config, deliver: Deliver, served_at_past_host: Callable[[int], int],
                 tai_utc_s: int) -> Input:
    """The appliance as a PTP slave of an upstream grandmaster, on its own interface (on the loop)."""
    from appliance.edge.ptp.slave_service import PtpSlaveService
    from appliance.refs.ptp_slave import SlaveConfig

    r = config.references
    slave = SlaveConfig(domain=r.ptp_domain, transport=r.ptp_transport, delay_mechanism=r.ptp_delay_mechanism,
                        arb_timescale=r.ptp_arb_timescale, tai_utc_s=tai_utc_s)
    same_port = r.ptp_interface == config.ptp.interface
    service = PtpSlaveService(slave, r.ptp_interface, served_at_past_host, lambda m: deliver("ptp", m),
                              port_number=2 if same_port else 1, timestamping=r.ptp_timestamping)
    return Input(service, status=lambda: dict(service.status()))


def irig_input(config: Config, deliver: Deliver, post: Post, table: leap.LeapTable, year: int) -> Input:
    """``references.irig_input``: "wav:PATH" (AM) or "gpio:CHIP:LINE" (DC level shift)."""
    from appliance.edge.irig.input import IrigGpioInput, IrigWavInput
    from appliance.protocol.irig.timecode import CodedExpression
    from appliance.refs.irig_in import IrigDecoder

    r = config.references
    text, fmt = r.irig_input, r.irig_format
    kind, _, where = text.partition(":")
    am = fmt.startswith("B12")
    if kind not in ("wav", "gpio") or not where:
        raise ValueError(f"references.irig_input={text!r}: expected \"wav:PATH\" or \"gpio:CHIP:LINE\"")
    if (kind == "wav") != am:
        raise ValueError(f"references.irig_input={text!r} cannot carry {fmt}: a WAV stream carries AM (B120-B127), a "
                         "GPIO line DC level shift (B000-B007)")
    decoder = IrigDecoder("irig", CodedExpression(int(fmt[3])), table, year, delay_ns=r.irig_delay_ns)
    on_time = _deliver_to("irig", deliver)
    if kind == "wav":
        return Input(IrigWavInput(decoder, where, on_time, post=post))
    chip, _, line = where.rpartition(":")
    try:
        offset = int(line)
    except ValueError:
        raise ValueError(f"references.irig_input={text!r}: the GPIO line must be a number") from None
    return Input(IrigGpioInput(decoder, chip, offset, on_time, post=post))


def _deliver_to(ref: str, deliver: Deliver) -> Callable[[object], None]:
    return lambda item: deliver(ref, item)


def pps_input(config: Config, deliver: Deliver, post: Post) -> Input:
    """The external 1PPS input's PPS device; its edges reach the "pps" reference on the loop."""
    from appliance.edge.pps_linux import PpsReader

    path = config.references.pps_in_device
    reader = PpsReader(path, _to("pps", deliver, post),
                       on_error=lambda msg: log.warning("external PPS %s: %s", path, msg))
    return Input(reader, status=lambda: {"device": path})
