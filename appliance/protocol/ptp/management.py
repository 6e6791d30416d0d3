"""PTP management (IEEE 1588-2019 clause 15) of a port: GET of the data sets, SET of priority1 and priority2.

Pure core.  ``answer(port, msg, source)`` is the reply to a management message the port received, or None (dropped,
counted by why): management off, not addressed to this port, a source the access rules refuse, or not one GET or SET
of one management TLV.  A SET is obeyed only for what the settings and the profile allow, and every SET that got
that far becomes a notice (notices.py), obeyed or refused.  The data sets are read off the port (``ManagedPort``):
its clock's view, priorities, state and intervals.
"""

from __future__ import annotations

from typing import Any, Protocol

from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.outputs.ptp.notices import ManagementSet, PortNotice
from appliance.protocol.limits import AccessRules
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp.fsm import PORT_STATE_CODES
from appliance.protocol.ptp.profiles import PortConfig
from appliance.protocol.ptp.unicast import ALL_PORTS, address_text

# The managementIds a SET names, for the notice of a refused one (Table 59).
MANAGEMENT_NAMES = {c.PRIORITY1: "priority1", c.PRIORITY2: "priority2", c.DOMAIN: "domain",
                    c.SLAVE_ONLY: "slaveOnly", c.LOG_ANNOUNCE_INTERVAL: "logAnnounceInterval",
                    c.ANNOUNCE_RECEIPT_TIMEOUT: "announceReceiptTimeout", c.LOG_SYNC_INTERVAL: "logSyncInterval",
                    c.PATH_TRACE_ENABLE: "pathTraceEnable", c.DEFAULT_DATA_SET: "DEFAULT_DATA_SET",
                    c.TIME_PROPERTIES_DATA_SET: "TIME_PROPERTIES_DATA_SET"}


class ManagedPort(Protocol):
    """What management reads of a port, and the two values a SET may change."""

    config: PortConfig
    identity: c.PortIdentity
    view: GrandmasterView
    priority1: int
    priority2: int
    state: str
    peer_delay_ns: int | None
    log_announce: int
    log_sync: int
    management_rules: AccessRules | None
    last_set: tuple[str, int, int, str] | None

    def count(self, name: str, n: int = 1) -> None: ...

    def notice(self, notice: PortNotice) -> None: ...


def answer(port: ManagedPort, msg: c.Management, source: Any) -> c.Management | None:
    cfg = port.config
    if cfg.management == "off":
        port.count("drop_management_off")
        return None
    if msg.target_port.clock_identity not in (port.identity.clock_identity, ALL_PORTS.clock_identity) or \
            msg.target_port.port_number not in (port.identity.port_number, 0xFFFF):
        port.count("drop_management_not_for_us")
        return None
    if port.management_rules is not None and isinstance(source, tuple) and \
            not port.management_rules.is_allowed(source[0]):
        port.count("drop_management_denied")
        return None
    if msg.action not in (c.GET, c.SET) or len(msg.tlvs) != 1 or not isinstance(msg.tlvs[0], c.ManagementTlv):
        port.count("drop_management_unsupported")
        return None
    tlv = msg.tlvs[0]
    reply_tlv = _set(port, tlv, source) if msg.action == c.SET else _get(port, tlv.management_id)
    header = c.Header(c.MsgType.MANAGEMENT, cfg.domain, port.identity, msg.header.sequence_id,
                      flags=msg.header.flags & c.FLAG_UNICAST)
    hops = max(0, msg.starting_boundary_hops - msg.boundary_hops)
    port.count("tx_management")
    return c.Management(header, msg.header.source_port, hops, hops,
                        c.RESPONSE if msg.action == c.GET else c.ACKNOWLEDGE, (reply_tlv,))


def _get(port: ManagedPort, mid: int) -> Any:
    body = dataset(port, mid)
    if body is None:
        port.count("management_no_such_id")
        return c.ManagementErrorStatusTlv(c.NOT_SUPPORTED, mid)
    return c.ManagementTlv(mid, body)


def _set(port: ManagedPort, tlv: c.ManagementTlv, source: Any) -> Any:
    """PRIORITY1 and PRIORITY2, when the settings and the profile allow it."""
    mid, who = tlv.management_id, address_text(source)
    name = {c.PRIORITY1: "priority1", c.PRIORITY2: "priority2"}.get(mid)
    if port.config.management != "get-set" or name is None or name not in port.config.management_set:
        port.count("management_set_refused")
        port.notice(ManagementSet(MANAGEMENT_NAMES.get(mid, f"managementId 0x{mid:04x}"), None, None, None, who,
                                  "not settable"))
        return c.ManagementErrorStatusTlv(c.NOT_SETABLE, mid)
    try:
        value = c.OneOctetBody.unpack(tlv.data).value
    except c.PtpDecodeError:
        port.notice(ManagementSet(name, None, None, None, who, "wrong length"))
        return c.ManagementErrorStatusTlv(c.WRONG_LENGTH, mid)
    old = getattr(port, name)
    setattr(port, name, value)
    port.count("management_set")
    port.last_set = (name, old, value, who)
    port.notice(ManagementSet(name, old, value, getattr(port.config, name), who))
    return c.ManagementTlv(mid, c.OneOctetBody(value).pack())


def dataset(port: ManagedPort, mid: int) -> bytes | None:
    """The body of a data set (15.5.3), or None for a managementId the port does not serve."""
    v, cfg, identity = port.view, port.config, port.identity
    quality = c.ClockQuality(v.clock_class, v.clock_accuracy, v.offset_scaled_log_variance)
    if mid == c.DEFAULT_DATA_SET:
        return c.DefaultDataSetBody(True, cfg.slave_only, 1, port.priority1, quality, port.priority2,
                                    identity.clock_identity, cfg.domain).pack()
    if mid == c.CURRENT_DATA_SET:
        return c.CurrentDataSetBody(0, 0, 0).pack()
    if mid == c.PARENT_DATA_SET:
        return c.ParentDataSetBody(identity, False, 0xFFFF, 0x7FFFFFFF, port.priority1, quality, port.priority2,
                                   identity.clock_identity).pack()
    if mid == c.TIME_PROPERTIES_DATA_SET:
        return c.TimePropertiesDataSetBody(v.current_utc_offset, v.leap61, v.leap59, v.utc_offset_valid,
                                           v.ptp_timescale, v.time_traceable, v.frequency_traceable,
                                           v.time_source).pack()
    if mid == c.PORT_DATA_SET:
        return c.PortDataSetBody(identity, PORT_STATE_CODES[port.state], cfg.log_min_delay_req_interval,
                                 (port.peer_delay_ns or 0) << 16, port.log_announce, cfg.announce_receipt_timeout,
                                 port.log_sync, 1 if cfg.delay_mechanism == "e2e" else 2,
                                 cfg.log_min_pdelay_req_interval, 0x12).pack()
    one_octet = {c.PRIORITY1: port.priority1, c.PRIORITY2: port.priority2, c.DOMAIN: cfg.domain,
                 c.PATH_TRACE_ENABLE: 1 if cfg.path_trace else 0}
    if mid in one_octet:
        return c.OneOctetBody(one_octet[mid]).pack()
    if mid == c.PATH_TRACE_LIST:  # 15.5.3.3.x: pathTraceDS.list; a grandmaster's is itself
        return identity.clock_identity if cfg.path_trace else b""
    if mid == c.NULL_MANAGEMENT:
        return b""
    return None
