"""Hand the grandmaster port's Sync streams and unicast Announce streams to the native sender (``_syncsend.c``).

I/O edge.  With ``PtpPort.sync_offload`` set, the port keeps no timers for them: it says which streams start (MASTER
entered: the multicast Syncs; a grant, or a new interval: a client's Syncs or Announces) and stop (expired,
cancelled), and this module gives each one to a ``SyncSender`` thread with its destination, the port's messages as
templates and the first slot (unicast slots spread evenly, an Announce halfway between a client's Syncs).  The
thread sends on a socket of its own in the port's event-socket group (``UdpTransport.open_sync_socket``), so the
interpreter -- its garbage collector, the status publication, a burst of Delay_Reqs -- no longer stands between a
slot and its Sync.  The port still decides everything else; the service publishes the clock map and what the
Announces say to the thread each second, tells it whether the port is MASTER, and adds what it sent (counters,
lateness) to the port's own figures.  ``available()`` is False when the module was not built (the port then sends
them itself).

With ``answer_delay`` (unicast negotiation, E2E) the thread also answers the Delay_Reqs of every client granted
Delay_Resp (``PtpPort.delay_offload``: the port says whose grants start and end) and hands the rest back through
``take_handoff``; what it answered is folded into the port's counters and its table of slaves seen.
"""

from __future__ import annotations

import functools
import logging
import socket
import time
from collections import deque
from typing import Any

from appliance.edge.kernel_preemption import WEAK, preemption
from appliance.protocol.clockmap import ClockMap
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.port_common import interval_ns

try:
    from appliance.edge.ptp import _syncsend  # type: ignore[attr-defined]
except ImportError:  # built optionally (setup.py)
    _syncsend = None

REALTIME_PRIORITY = 1  # SCHED_FIFO 1 when allowed: above every normal thread, below the kernel's own
GOLDEN = 0.6180339887498949
SPREAD_MAX_NS = 1_000_000_000  # a first Sync comes at most this long after its grant
LATE_SYNCS_KEPT = 256  # the latest Syncs over 1 ms late that status shows
SIGNING_ALGORITHMS = {"SHA256-128": 1, "SHA256": 2, "AES128": 3, "AES256": 4}  # _ptpauth.h


@functools.cache
def _kernel_preemption(log: logging.Logger) -> dict[str, Any]:
    """Whether the kernel preempts its own code for the sender: where it does not, a kernel worker's item on the
    sender's CPU delays every Sync due meanwhile (a millisecond or more), whatever the sender's priority.  Read,
    and warned of, once a process (the mode is the boot's): a sender opened again after a fault reads nothing."""
    found = preemption()
    if found["mode"] in WEAK:
        log.warning("PTP Sync sender: the kernel does not preempt kernel code (preemption %s, from %s): kernel "
                    "work on its CPU can hold Syncs back by a millisecond or more; boot with preempt=full or "
                    "run a PREEMPT_RT kernel", found["mode"], found["from"])
    return found


def available() -> bool:
    return _syncsend is not None


class NativeSync:
    """One sender thread for one transport: ``apply(port)`` after every call into the port, ``publish(map)``, then
    ``take(port)`` to fold its figures in, ``close()`` before the transport closes."""

    def __init__(self, transport: Any, log: logging.Logger, answer_delay: bool = False) -> None:
        """``answer_delay``: the event socket steers Delay_Reqs to the sender, which answers those of negotiated
        clients (``enable_delay``) and hands the rest back (``handoff_fd``, ``take_handoff``)."""
        self.log = log
        self.answer_delay = answer_delay
        self.sock: socket.socket = transport.open_sync_socket(steer_delay_req=answer_delay)
        try:
            self.sender = _syncsend.SyncSender(self.sock.fileno(), transport.general.fileno(), REALTIME_PRIORITY)
        except OSError:
            self.sock.close()
            raise
        # (client key or None for multicast, kind) -> (sender index, first slot ns)
        self.streams: dict[tuple[Any, str], tuple[int, int]] = {}
        self.group = (transport.primary, 0, 0, transport.ifindex) if transport.v6 else (transport.primary, 0)
        self.announces: dict[int, bytes] = {}  # log interval -> the Announce template the sender has
        self.active = False
        self._started = 0
        self.kernel_preemption = _kernel_preemption(log)
        # client key -> (sender index, address, portIdentity) of the clients whose Delay_Reqs the sender answers,
        # and by the sender's index
        self.delay_clients: dict[Any, tuple[int, Any, c.PortIdentity]] = {}
        self.delay_index: dict[int, tuple[Any, c.PortIdentity]] = {}
        # Timed wake-ups that came over 1 ms after their slot, and the latest: the scheduler's (or the host's)
        # share of a late Sync, apart from the sender's own work.
        self.wakes_over_1ms = 0
        self.wake_max_ns = 0
        # Syncs over 1 ms late that would have been within 1 ms but for the time the running thread was held off
        # its CPU (the hypervisor's or a higher-priority thread's, when it runs SCHED_FIFO), and the most one Sync
        # was held.
        self.late_over_1ms_held = 0
        self.late_over_1ms_woken = 0  # the others: a timed wake-up for them came over 1 ms late
        # Rounds of the sender's loop that took over 1 ms of its CPU time; the longest, and what it sent.
        self.long_rounds = self.long_round_cpu_max_ns = self.long_round_packets = 0
        # The sender's waits for the port's hold of their shared lock: the longest, and the longest round's share.
        self.lock_wait_max_ns = self.long_round_lock_ns = 0
        self.delay_answered = self.handed_off = 0  # Delay_Reqs answered here, and handed back to the port
        # The latest Syncs over 1 ms late: (slot on CLOCK_MONOTONIC in ns, lateness us, held us, the number of the
        # take that counted it), to line up with a kernel trace of that CPU; ``takes`` numbers the takes, so that
        # a reader differencing two statuses' counts knows which of these those counts hold.
        self.takes = 0
        self.late_syncs: deque[tuple[int, float, float, int]] = deque(maxlen=LATE_SYNCS_KEPT)
        # Those the last publish took (all of them, up to the sender's 4,096 a publish), and those it could not
        # keep: a reader polling faster than the publishes sees every late Sync or is told how many it missed.
        self.late_syncs_new: list[tuple[int, float, float, int]] = []
        self.late_syncs_lost = 0
        self.held_max_ns = 0
        # Of the Syncs over 1 ms late: the most time from the slot to the start of their send, and from then to
        # their transmit timestamp (in the kernel's send path), since start: where lateness comes from.
        self.late_pre_max_ns = self.late_send_max_ns = 0
        self.security: Any = None  # the port's PortSecurity while the sender signs (sign_with)

    def sign_with(self, security: Any) -> None:
        """From now on the sender signs everything it sends with the port's security association and active key
        (``PortSecurity``; None: unsigned), and answers only Delay_Reqs signed with that key: the rest, unsigned or
        under another key, go back to the port, which accepts or refuses them (and counts why)."""
        self.security = security
        if security is None:
            self.sender.set_security(None)
            return
        key = security.key
        self.sender.set_security(security.association.spp, key.key_id, SIGNING_ALGORITHMS[key.algorithm], key.secret,
                                 security.association.allow_mutable)

    def adopt(self, port: Any, now_ns: int) -> None:
        """Every stream the port already grants (a transport opened again) starts now; the multicast Syncs start
        as the port enters MASTER (it is told to offload them before)."""
        port.sync_offload = True
        for key, client in port.clients.items():
            for mtype, kind in ((c.MsgType.SYNC, "sync"), (c.MsgType.ANNOUNCE, "announce")):
                if mtype in client.grants:
                    self._start(port, key, kind, now_ns)

    @property
    def handoff_fd(self) -> int:
        return self.sender.handoff_fd()

    def take_handoff(self) -> list[tuple[bytes, Any, int | None]]:
        """The datagrams the sender read and did not answer: (data, source, CLOCK_REALTIME receive ns or None)."""
        return self.sender.take_handoff()

    def enable_delay(self, port: Any) -> None:
        """The sender answers the Delay_Reqs of every client with a Delay_Resp grant, now and as they come, at the
        port's request rate per client."""
        if not self.answer_delay:
            return
        port.delay_offload = True
        self.sender.set_delay(port.delay_resp_template(), port.limiter.rate_per_s, port.limiter.burst)
        for key, client in port.clients.items():
            if c.MsgType.DELAY_RESP in client.grants:
                self._start_delay(port, key)

    def _start_delay(self, port: Any, key: Any) -> None:
        client = port.clients.get(key)
        grant = client.grants.get(c.MsgType.DELAY_RESP) if client is not None else None
        if grant is None:
            return
        try:
            index = self.sender.add_client(_plain(client.address), _port_bytes(client.port), grant.log_interval)
        except ValueError as exc:  # its Delay_Reqs come back to the port, which answers them itself
            self.log.warning("PTP Delay_Reqs of %s answered by the port: %s", client.address, exc)
            return
        self.delay_clients[key] = (index, client.address, client.port)
        self.delay_index[index] = (client.address, client.port)

    def _stop_delay(self, port: Any, key: Any) -> None:
        held = self.delay_clients.pop(key, None)
        if held is None:
            return
        index, address, identity = held
        self.delay_index.pop(index, None)
        requests = self.sender.remove_client(_plain(address), _port_bytes(identity))
        if requests:
            port.seen_offloaded(identity, address, requests, time.monotonic_ns())

    def apply(self, port: Any, now_ns: int) -> None:
        for what, key, kind in port.take_stream_changes():
            if kind == "delay":
                if what == "start":
                    self._start_delay(port, key)
                else:
                    self._stop_delay(port, key)
            elif what == "start":
                self._start(port, key, kind, now_ns)
            else:
                self._stop(port, key, kind)
        active = port.state == "MASTER"
        if active != self.active:
            self.sender.set_active(active)
            self.active = active
            if not active:  # what it sent up to now counted at once: from here the port's counters stand still
                self.take(port)

    def _start(self, port: Any, key: Any, kind: str, now_ns: int) -> None:
        """A unicast client's Sync stream (its slots spread, ``_phase_ns``), its Announce stream (half an interval
        after its Syncs, as the port would send them), or with key None the multicast Syncs (the first now: the
        port's Announces run half an interval after it)."""
        if kind == "announce":
            self._start_announce(port, key, now_ns)
            return
        stream = port.sync_stream(key)
        if stream is None:
            return
        log_interval, sync, follow_up = stream
        self._stop(port, key, kind)
        seq = port.sync_sequence(key).get(c.MsgType.SYNC, 0)
        step_ns = interval_ns(log_interval)
        if key is None:
            address, first_ns = self.group, now_ns
        else:
            address, first_ns = port.clients[key].address, now_ns + self._phase_ns(step_ns)
        index = self.sender.add(address, sync, follow_up, step_ns, first_ns, seq)
        self.streams[(key, kind)] = (index, first_ns)
        if key is not None and (key, "announce") in self.streams:
            self._start_announce(port, key, now_ns)  # keep it halfway between the new Syncs

    def _start_announce(self, port: Any, key: Any, now_ns: int) -> None:
        log_interval = port.announce_stream(key)
        if log_interval is None:
            return
        self._stop(port, key, "announce")
        step_ns = interval_ns(log_interval)
        sync = self.streams.get((key, "sync"))
        if sync is None:
            first_ns = now_ns + self._phase_ns(step_ns)
        else:
            sync_log = port.sync_stream(key)[0]
            first_ns = sync[1] + port.announce_phase_ns(sync_log, log_interval)
            if first_ns < now_ns:
                first_ns += -(-(now_ns - first_ns) // step_ns) * step_ns
        self._template(port, log_interval)
        seq = port.sync_sequence(key).get(c.MsgType.ANNOUNCE, 0)
        index = self.sender.add(port.clients[key].address, None, log_interval, step_ns, first_ns, seq)
        self.streams[(key, "announce")] = (index, first_ns)

    def _template(self, port: Any, log_interval: int) -> None:
        template = port.unicast_announce(log_interval)
        if self.announces.get(log_interval) != template:
            self.sender.set_announce(log_interval, template)
            self.announces[log_interval] = template

    def _phase_ns(self, step_ns: int) -> int:
        """Where in its interval a new stream's slots fall: grants come in bursts (a batch of requests read at
        once, clients that all start together), and slots left where they were granted would make their Syncs queue
        behind each other.  The n-th stream starts n x the golden ratio (mod 1) into its interval, at most
        SPREAD_MAX_NS after its grant: however many there are, their slots stay evenly spread."""
        self._started += 1
        return int((self._started * GOLDEN) % 1.0 * min(step_ns, SPREAD_MAX_NS))

    def _stop(self, port: Any, key: Any, kind: str) -> None:
        """The stream ends; its next sequenceId goes back to the port."""
        held = self.streams.pop((key, kind), None)
        if held is None:
            return
        sent, seq, _slot = self.sender.remove(held[0])
        port.sync_sequence(key)[c.MsgType.SYNC if kind == "sync" else c.MsgType.ANNOUNCE] = seq
        client = port.clients.get(key) if key is not None else None
        if client is not None and kind == "sync":
            client.sent_sync += sent

    def publish(self, clock_map: ClockMap, port: Any) -> None:
        """The clock map, and what the unicast Announces say now (the clock's quality changes second by second)."""
        self.sender.set_map(True, clock_map.host_anchor_ns, clock_map.served_anchor_tai_ns, clock_map.rate_ppb)
        for log_interval in list(self.announces):
            self._template(port, log_interval)

    def take(self, port: Any) -> dict[str, Any]:
        """Its figures since the last take, folded into the port's; what status shows of the sender itself."""
        taken = self.sender.take()
        port.add_offloaded(taken)
        if self.security is not None:
            self.security.signed += taken["auth_signed"]
        if taken["auth_failed"]:
            self.log.error("PTP: %d messages not sent: libcrypto could not sign them", taken["auth_failed"])
        self.wakes_over_1ms += taken["wakes_over_1ms"]
        self.wake_max_ns = max(self.wake_max_ns, taken["wake_max_ns"])
        self.late_over_1ms_held += taken["late_over_1ms_held"]
        self.late_over_1ms_woken += taken["late_over_1ms_woken"]
        self.long_rounds += taken["long_rounds"]
        if taken["long_round_cpu_max_ns"] > self.long_round_cpu_max_ns:
            self.long_round_cpu_max_ns, self.long_round_packets = (taken["long_round_cpu_max_ns"],
                                                                   taken["long_round_packets"])
            self.long_round_lock_ns = taken["long_round_lock_ns"]
        self.lock_wait_max_ns = max(self.lock_wait_max_ns, taken["lock_wait_max_ns"])
        self.takes += 1
        self.late_syncs_new = [(slot, late / 1000, held / 1000, self.takes) for slot, late, held in taken["late_syncs"]]
        self.late_syncs.extend(self.late_syncs_new)
        self.late_syncs_lost += taken["late_syncs_lost"]
        self.held_max_ns = max(self.held_max_ns, taken["held_max_ns"])
        self.late_pre_max_ns = max(self.late_pre_max_ns, taken["late_pre_max_ns"])
        self.late_send_max_ns = max(self.late_send_max_ns, taken["late_send_max_ns"])
        port.add_offloaded_delay(taken["delay_answered"], taken["delay_rate_limited"], taken["handoff_dropped"])
        for index, requests, last_seen_ns in taken["delay_seen"]:
            who = self.delay_index.get(index)
            if who is not None:
                port.seen_offloaded(who[1], who[0], requests, last_seen_ns)
        self.delay_answered += taken["delay_answered"]
        self.handed_off += taken["handed_off"]
        return {"delay_reqs_answered": self.delay_answered, "delay_reqs_handed_back": self.handed_off,
                "delay_clients": len(self.delay_clients),
                "streams": taken["streams"], "realtime": taken["realtime"], "send_errors": taken["send_errors"],
                "kernel_preemption": dict(self.kernel_preemption),
                "wakes_over_1ms": self.wakes_over_1ms, "wake_max_us": self.wake_max_ns / 1000,
                "late_over_1ms_held": self.late_over_1ms_held, "late_over_1ms_woken": self.late_over_1ms_woken,
                "held_max_us": self.held_max_ns / 1000,
                "late_pre_max_us": self.late_pre_max_ns / 1000, "late_send_max_us": self.late_send_max_ns / 1000,
                "long_rounds": self.long_rounds, "long_round_cpu_max_us": self.long_round_cpu_max_ns / 1000,
                "long_round_packets": self.long_round_packets, "long_round_lock_us": self.long_round_lock_ns / 1000,
                "lock_wait_max_us": self.lock_wait_max_ns / 1000,
                "late_syncs_recent": [list(x) for x in self.late_syncs],
                "late_syncs_new": [list(x) for x in self.late_syncs_new], "late_syncs_lost": self.late_syncs_lost,
                "takes": self.takes}

    def close(self) -> None:
        self.sender.close()
        self.sock.close()
        self.streams.clear()
        self.delay_clients.clear()
        self.delay_index.clear()


def _port_bytes(identity: c.PortIdentity) -> bytes:
    return identity.clock_identity + identity.port_number.to_bytes(2, "big")


def _plain(address: Any) -> Any:
    """A source address without an IPv6 zone ("fe80::1%eth0"): the sender keys its clients by the address octets."""
    host = address[0].split("%", 1)[0] if isinstance(address, tuple) and isinstance(address[0], str) else address
    return (host,) + tuple(address[1:]) if isinstance(address, tuple) else address
