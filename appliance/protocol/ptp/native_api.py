"""What a PTP port tells, and takes back from, a native sender that sends its Syncs and unicast Announces and answers
its negotiated clients' Delay_Reqs (edge/ptp/native_sync.py).

Pure core.  ``NativeSenderApi`` is a part of the port (port.py): with ``sync_offload`` set the port keeps no timers
for the Sync streams and the unicast Announce streams and queues instead which ones start and stop
(``take_stream_changes``); with ``delay_offload`` it queues whose Delay_Resp grants start and stop.  The sender asks
for the streams' messages as templates (``sync_stream``, ``unicast_announce``, ``delay_resp_template``), counts in the
port's sequenceId tables (``sync_sequence``), and hands back what it did (``add_offloaded``,
``add_offloaded_delay``, ``seen_offloaded``), which the port counts as its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appliance.outputs.ptp.lateness import SyncLateness
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.master import announce_phase_ns
from appliance.protocol.ptp.profiles import PortConfig
from appliance.protocol.ptp.unicast import Negotiation, SlavesSeen, UnicastClient

# ("start" | "stop", the client key or None for the multicast Syncs, "sync" | "announce" | "delay")
StreamChangeRow = tuple[str, Any, str]


class NativeSenderApi:
    """The port's side of the native sender; the attributes below are the port's."""

    config: PortConfig
    identity: c.PortIdentity
    log_sync: int
    sequence: dict[int, int]  # the port's own (multicast) sequenceIds, by message type
    negotiation: Negotiation
    slaves: SlavesSeen
    sync_lateness: SyncLateness
    sync_offload: bool
    delay_offload: bool
    _stream_changes: list[StreamChangeRow]
    count: Callable[..., None]  # (name, n=1)
    announce_bytes: Callable[[int, bool], bytes]  # (log interval, unicast): what an Announce says now

    announce_phase_ns = staticmethod(announce_phase_ns)  # where the sender puts a client's Announces: master.py

    @property
    def clients(self) -> dict[Any, UnicastClient]:
        """The negotiated clients, by (address key, portIdentity)."""
        return self.negotiation.clients

    def take_stream_changes(self) -> list[StreamChangeRow]:
        """With ``sync_offload``, in order since the last call: ("start", key, kind) for a client whose Sync or
        Announce stream (kind "sync" or "announce") (re)starts now, ("stop", key, kind) for one whose grant ended
        (with ``delay_offload`` also kind "delay": a Delay_Resp grant),
        and ("start", None, "sync") for the multicast Syncs when the port becomes MASTER."""
        changes, self._stream_changes = self._stream_changes, []
        return changes

    def announce_stream(self, key: Any) -> int | None:
        """The log interval of a client's granted Announce stream; None when there is none."""
        grant = self.negotiation.grant(key, c.MsgType.ANNOUNCE)
        return None if grant is None else grant.log_interval

    def unicast_announce(self, log_interval: int) -> bytes:
        """What a unicast Announce at this interval says now, with sequenceId and originTimestamp 0."""
        return self.announce_bytes(log_interval, True)

    def sync_stream(self, key: Any) -> tuple[int, bytes, bytes] | None:
        """A Sync stream as a native sender needs it: its log interval, the two-step Sync and its Follow_Up as the
        port sends them with sequenceId 0 and a zero timestamp (the sender changes only those two); key None: the
        multicast stream.  None when there is no such stream (the grant is gone)."""
        if key is None:
            log_interval, flags = self.log_sync, 0
        else:
            grant = self.negotiation.grant(key, c.MsgType.SYNC)
            if grant is None:
                return None
            log_interval, flags = grant.log_interval, c.FLAG_UNICAST
        domain = self.config.domain
        sync = c.encode_timestamped(c.MsgType.SYNC, domain, self.identity, 0, c.FLAG_TWO_STEP | flags, log_interval, 0)
        follow_up = c.encode_timestamped(c.MsgType.FOLLOW_UP, domain, self.identity, 0, flags, log_interval, 0)
        return log_interval, sync, follow_up

    def sync_sequence(self, key: Any) -> dict[int, int]:
        """The sequenceId table (by message type) a stream counts in: the client's, or the port's for key None; a
        native sender starts from it and hands the next one back."""
        if key is None:
            return self.sequence
        client = self.negotiation.clients.get(key)
        return client.sequence if client is not None else {}

    def delay_resp_template(self) -> bytes:
        """A unicast Delay_Resp of this port, for a native sender to fill in (correctionField, sequenceId,
        logMessageInterval, receiveTimestamp, requestingPortIdentity)."""
        return c.encode_timestamped(c.MsgType.DELAY_RESP, self.config.domain, self.identity, 0, c.FLAG_UNICAST, 0, 0,
                                    0, c.PortIdentity(bytes(8), 0))

    def add_offloaded_delay(self, answered: int, rate_limited: int, handoff_dropped: int) -> None:
        """Delay_Reqs a native sender answered, dropped over the rate, or could not hand back (its ring full)."""
        if answered + rate_limited:
            self.count("rx_delayreq", answered + rate_limited)
        if answered:
            self.count("tx_delay_resp", answered)
        if rate_limited:
            self.count("drop_rate_limited", rate_limited)
        if handoff_dropped:
            self.count("drop_handoff_full", handoff_dropped)

    def seen_offloaded(self, port: c.PortIdentity, source: Any, requests: int, last_seen_ns: int) -> None:
        """A client whose Delay_Reqs a native sender answered: ``requests`` since the last call, the latest at
        ``last_seen_ns`` (monotonic), into the table of slaves seen."""
        self.slaves.seen(port, source, last_seen_ns, "e2e", requests)

    def add_offloaded(self, taken: dict[str, Any]) -> None:
        """What a native sender sent since it was last asked (its ``take()``): counted as the port's own Syncs and
        Follow_Ups, their lateness into ``sync_lateness``."""
        self.count("tx_sync", taken["syncs"])
        self.count("tx_announce", taken["announces"])
        self.count("tx_follow_up", taken["follow_ups"])
        if taken["timestamps_lost"]:
            self.count("tx_timestamp_missing", taken["timestamps_lost"])
        self.sync_lateness.merge(taken["late_bins"], taken["late_count"], taken["late_over_1ms"],
                                 taken["late_max_ns"])
