"""IEEE 1588-2019 (PTPv2.1) message codec: the ten messages of Table 36 and the TLVs a grandmaster speaks, byte-exact.

Single job: bytes <-> frozen dataclasses.  Pure core: no I/O, no clock reads.  Instants are int nanoseconds on the
PTP timescale (wire Timestamp: 48-bit seconds + 32-bit ns, §5.3.3); TimeInterval fields (correctionField,
offsetFromMaster, meanPathDelay, ...) stay in their wire form, ns * 2**16 (§5.3.2), as the standard's arithmetic
on them is exact there.  ``decode`` raises nothing but ``PtpDecodeError``, whose ``reason`` names the drop counter;
bytes after messageLength are ignored (Ethernet pads frames to 60 octets, some stacks pad UDP).  TLVs this module
does not interpret are kept as ``Tlv`` so they round-trip; a known TLV shorter than its layout is a "tlv" error,
octets past its layout are ignored.  ``encode`` raises ValueError for anything the wire cannot carry.

The layouts agree with linuxptp (msg.h, tlv.h, ds.h) and Wireshark's packet-ptp.c, which the tshark interop test
checks frame by frame.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeAlias

from appliance.units import NS_PER_S


class MsgType(enum.IntEnum):
    """messageType, Table 36 (low nibble of header octet 0)."""

    SYNC = 0x0
    DELAY_REQ = 0x1
    PDELAY_REQ = 0x2
    PDELAY_RESP = 0x3
    FOLLOW_UP = 0x8
    DELAY_RESP = 0x9
    PDELAY_RESP_FOLLOW_UP = 0xA
    ANNOUNCE = 0xB
    SIGNALING = 0xC
    MANAGEMENT = 0xD


EVENT_TYPES = frozenset({MsgType.SYNC, MsgType.DELAY_REQ, MsgType.PDELAY_REQ, MsgType.PDELAY_RESP})
_MSG_TYPES = {int(t): t for t in MsgType}

# controlField, Table 42 (kept for 1588-2008 receivers): every other message type sends 5.
_CONTROL = {MsgType.SYNC: 0, MsgType.DELAY_REQ: 1, MsgType.FOLLOW_UP: 2, MsgType.DELAY_RESP: 3,
            MsgType.MANAGEMENT: 4}
CONTROL_OTHER = 5

# flagField, Table 37, as one big-endian 16-bit int: octet 0 is the high byte.
FLAG_ALTERNATE_MASTER = 0x0100
FLAG_TWO_STEP = 0x0200
FLAG_UNICAST = 0x0400
FLAG_PROFILE_1 = 0x2000
FLAG_PROFILE_2 = 0x4000
FLAG_LEAP61 = 0x0001
FLAG_LEAP59 = 0x0002
FLAG_UTC_OFFSET_VALID = 0x0004
FLAG_PTP_TIMESCALE = 0x0008
FLAG_TIME_TRACEABLE = 0x0010
FLAG_FREQUENCY_TRACEABLE = 0x0020
FLAG_SYNC_UNCERTAIN = 0x0040

# tlvType, Table 52 (those decoded into their own classes; any other value stays a Tlv).
TLV_MANAGEMENT = 0x0001
TLV_MANAGEMENT_ERROR_STATUS = 0x0002
TLV_ORGANIZATION_EXTENSION = 0x0003
TLV_REQUEST_UNICAST_TRANSMISSION = 0x0004
TLV_GRANT_UNICAST_TRANSMISSION = 0x0005
TLV_CANCEL_UNICAST_TRANSMISSION = 0x0006
TLV_ACKNOWLEDGE_CANCEL_UNICAST_TRANSMISSION = 0x0007
TLV_PATH_TRACE = 0x0008
TLV_ORGANIZATION_EXTENSION_PROPAGATE = 0x4000
TLV_ORGANIZATION_EXTENSION_DO_NOT_PROPAGATE = 0x8000
_ORGANIZATION_TYPES = frozenset({TLV_ORGANIZATION_EXTENSION, TLV_ORGANIZATION_EXTENSION_PROPAGATE,
                                 TLV_ORGANIZATION_EXTENSION_DO_NOT_PROPAGATE})

# actionField, Table 57 (low nibble of the octet after boundaryHops).
GET, SET, RESPONSE, COMMAND, ACKNOWLEDGE = 0, 1, 2, 3, 4

# managementId, Table 59 (values as linuxptp tlv.h and libptpmgmt ids_base.m4 give them).
NULL_MANAGEMENT = 0x0000  # NULL_PTP_MANAGEMENT in 1588-2019
CLOCK_DESCRIPTION = 0x0001
USER_DESCRIPTION = 0x0002
SAVE_IN_NON_VOLATILE_STORAGE = 0x0003
RESET_NON_VOLATILE_STORAGE = 0x0004
INITIALIZE = 0x0005
FAULT_LOG = 0x0006
FAULT_LOG_RESET = 0x0007
DEFAULT_DATA_SET = 0x2000
CURRENT_DATA_SET = 0x2001
PARENT_DATA_SET = 0x2002
TIME_PROPERTIES_DATA_SET = 0x2003
PORT_DATA_SET = 0x2004
PRIORITY1 = 0x2005
PRIORITY2 = 0x2006
DOMAIN = 0x2007
SLAVE_ONLY = 0x2008
LOG_ANNOUNCE_INTERVAL = 0x2009
ANNOUNCE_RECEIPT_TIMEOUT = 0x200A
LOG_SYNC_INTERVAL = 0x200B
VERSION_NUMBER = 0x200C
ENABLE_PORT = 0x200D
DISABLE_PORT = 0x200E
TIME = 0x200F
CURRENT_TIME = TIME  # the standard's name is TIME
CLOCK_ACCURACY = 0x2010
UTC_PROPERTIES = 0x2011
TRACEABILITY_PROPERTIES = 0x2012
TIMESCALE_PROPERTIES = 0x2013
UNICAST_NEGOTIATION_ENABLE = 0x2014
PATH_TRACE_LIST = 0x2015
PATH_TRACE_ENABLE = 0x2016
DELAY_MECHANISM = 0x6000
LOG_MIN_PDELAY_REQ_INTERVAL = 0x6001

# managementErrorId, Table 109.
RESPONSE_TOO_BIG = 0x0001
NO_SUCH_ID = 0x0002
WRONG_LENGTH = 0x0003
WRONG_VALUE = 0x0004
NOT_SETABLE = 0x0005
NOT_SUPPORTED = 0x0006
GENERAL_ERROR = 0xFFFE

# portState, Table 20.
INITIALIZING, FAULTY, DISABLED, LISTENING, PRE_MASTER, MASTER, PASSIVE, UNCALIBRATED, SLAVE = range(1, 10)
# delayMechanism (portDS.delayMechanism, §8.2.15.4.4).
DELAY_E2E, DELAY_P2P, DELAY_COMMON_P2P, DELAY_SPECIAL, DELAY_NO_MECHANISM = 0x01, 0x02, 0x03, 0x04, 0xFE
# clockType bits of CLOCK_DESCRIPTION (§15.5.3.1.2.1); networkProtocol of a PortAddress (§7.4.1).
CLOCK_TYPE_ORDINARY, CLOCK_TYPE_BOUNDARY, CLOCK_TYPE_P2P_TC, CLOCK_TYPE_E2E_TC = 0x8000, 0x4000, 0x2000, 0x1000
CLOCK_TYPE_MANAGEMENT = 0x0800
PROTOCOL_UDP_IPV4, PROTOCOL_UDP_IPV6, PROTOCOL_IEEE_802_3 = 1, 2, 3

HEADER_LEN = 34
_TIMESTAMP_LIMIT_NS = 2**48 * NS_PER_S

_HEADER = struct.Struct("!BBHBBHqI8sHHBb")  # Table 35
_TS = struct.Struct("!HII")  # Timestamp §5.3.3: seconds high 16, seconds low 32, nanoseconds
_TS_RESERVED = struct.Struct("!HII10x")  # Pdelay_Req §13.9: originTimestamp, 10 reserved octets
_TS_PORT = struct.Struct("!HII8sH")  # Delay_Resp, Pdelay_Resp, Pdelay_Resp_Follow_Up: Timestamp, PortIdentity
_ANNOUNCE = struct.Struct("!HIIhxBBBHB8sHB")  # §13.5
_PORT = struct.Struct("!8sH")  # PortIdentity §5.3.5; Signaling §13.12 targetPortIdentity
_MANAGEMENT = struct.Struct("!8sHBBBx")  # §15.4.1: target, startingBoundaryHops, boundaryHops, action, reserved
_TLV_HEAD = struct.Struct("!HH")  # §14.1: tlvType, lengthField
_U16 = struct.Struct("!H")
_ERROR_STATUS = struct.Struct("!HH4x")  # §15.5.4: managementErrorId, managementId, reserved
_REQUEST = struct.Struct("!BbI")  # §16.1.4.1: messageType nibble, logInterMessagePeriod, durationField
_GRANT = struct.Struct("!BbIxB")  # §16.1.4.2: ... reserved, flags (bit 0 renewalInvited)
_CANCEL = struct.Struct("!Bx")  # §16.1.4.3, §16.1.4.4: messageType nibble, reserved


class PtpDecodeError(ValueError):
    """A received message this codec will not pass on; ``reason`` is one of REASONS (a drop counter's name)."""

    REASONS: ClassVar[tuple[str, ...]] = ("truncated", "version", "length", "type", "tlv")

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(f"{reason}: {message}" if message else reason)
        self.reason = reason


# --- common fields --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PortIdentity:
    """§5.3.5: clockIdentity (8 octets, §5.3.4) and portNumber."""

    clock_identity: bytes
    port_number: int


@dataclass(frozen=True, slots=True)
class ClockQuality:
    """§5.3.7: clockClass, clockAccuracy (Table 5 code), offsetScaledLogVariance."""

    clock_class: int
    clock_accuracy: int
    offset_scaled_log_variance: int


@dataclass(frozen=True, slots=True)
class Header:
    """The common header, Table 35."""

    message_type: MsgType
    domain: int
    source_port: PortIdentity
    sequence_id: int
    flags: int = 0  # Table 37, octet 0 in the high byte
    correction: int = 0  # correctionField: signed 64-bit, scaled ns (ns * 2**16)
    log_interval: int = 0x7F  # logMessageInterval, signed; 0x7F = unspecified
    version: int = 2  # versionPTP
    minor_version: int = 1  # minorVersionPTP
    major_sdo_id: int = 0  # high nibble of octet 0 (transportSpecific in 1588-2008)
    minor_sdo_id: int = 0
    control: int | None = None  # None on encode: Table 42's value for the type; decode keeps the wire value
    message_type_specific: int = 0


def control_for(message_type: MsgType) -> int:
    """The controlField a message of this type carries (Table 42)."""
    return _CONTROL.get(message_type, CONTROL_OTHER)


def _nibble(value: int, name: str) -> int:
    if not 0 <= value <= 0xF:
        raise ValueError(f"{name} {value} does not fit a nibble")
    return value


def _octets(value: bytes, size: int, name: str) -> bytes:
    if not isinstance(value, bytes | bytearray) or len(value) != size:
        raise ValueError(f"{name} must be {size} octets, got {value!r}")
    return bytes(value)


def _pack(fmt: struct.Struct, *values: Any) -> bytes:
    try:
        return fmt.pack(*values)
    except struct.error as exc:
        raise ValueError(f"value out of range for its field: {exc}") from None


def _unpack(fmt: struct.Struct, data: bytes, offset: int = 0) -> tuple[Any, ...]:
    if len(data) < offset + fmt.size:
        raise PtpDecodeError("tlv", f"{len(data) - offset} octets where {fmt.size} are needed")
    return fmt.unpack_from(data, offset)


def _ts(ns: int, name: str) -> tuple[int, int, int]:
    if not 0 <= ns < _TIMESTAMP_LIMIT_NS:
        raise ValueError(f"{name} {ns} ns is outside the PTP Timestamp range [0, 2**48 s)")
    seconds, nanoseconds = divmod(ns, NS_PER_S)
    return seconds >> 32, seconds & 0xFFFFFFFF, nanoseconds


def _ns(seconds_hi: int, seconds_lo: int, nanoseconds: int) -> int:
    # A nanosecondsField >= 10**9 breaks §5.3.3 but is kept arithmetically rather than dropping the message.
    return ((seconds_hi << 32) | seconds_lo) * NS_PER_S + nanoseconds


def _port(p: PortIdentity) -> tuple[bytes, int]:
    return _octets(p.clock_identity, 8, "clockIdentity"), p.port_number


def _text(value: str) -> bytes:
    """PTPText, §5.3.9: lengthField octet, then UTF-8 (undecodable received octets round-trip as escapes)."""
    raw = value.encode("utf-8", "surrogateescape")
    if len(raw) > 0xFF:
        raise ValueError(f"PTPText is limited to 255 octets, got {len(raw)}")
    return bytes((len(raw),)) + raw


def _read_text(data: bytes, offset: int) -> tuple[str, int]:
    if offset >= len(data) or offset + 1 + data[offset] > len(data):
        raise PtpDecodeError("tlv", "PTPText runs past its TLV")
    end = offset + 1 + data[offset]
    return data[offset + 1:end].decode("utf-8", "surrogateescape"), end


def _even(raw: bytes) -> bytes:
    return raw + b"\0" if len(raw) % 2 else raw


# --- TLVs (§14) -----------------------------------------------------------------------------------------------


def _tlv(tlv_type: int, value: bytes) -> bytes:
    if len(value) % 2:
        raise ValueError(f"TLV 0x{tlv_type:04x}: lengthField must be even (§14.1.2), value is {len(value)} octets")
    return _pack(_TLV_HEAD, tlv_type, len(value)) + value


@dataclass(frozen=True, slots=True)
class Tlv:
    """Any TLV this codec does not interpret, kept whole so it round-trips (§14.1)."""

    tlv_type: int
    value: bytes

    def pack(self) -> bytes:
        return _tlv(self.tlv_type, bytes(self.value))


@dataclass(frozen=True, slots=True)
class ManagementTlv:
    """MANAGEMENT TLV, §15.5.2: managementId (Table 59) and its dataField (a *Body.pack(); empty for GET)."""

    management_id: int
    data: bytes = b""

    def pack(self) -> bytes:
        return _tlv(TLV_MANAGEMENT, _pack(_U16, self.management_id) + bytes(self.data))


@dataclass(frozen=True, slots=True)
class ManagementErrorStatusTlv:
    """MANAGEMENT_ERROR_STATUS TLV, §15.5.4: errorId (Table 109), managementId, optional displayData PTPText."""

    error_id: int
    management_id: int
    display_data: str = ""

    def pack(self) -> bytes:
        text = _text(self.display_data) if self.display_data else b""
        return _tlv(TLV_MANAGEMENT_ERROR_STATUS, _even(_pack(_ERROR_STATUS, self.error_id, self.management_id) + text))


@dataclass(frozen=True, slots=True)
class OrganizationExtensionTlv:
    """ORGANIZATION_EXTENSION TLV, §14.3: OUI/CID, organizationSubType, dataField; tlv_type 0x0003, or the
    PROPAGATE (0x4000) and DO_NOT_PROPAGATE (0x8000) variants of Table 52."""

    organization_id: bytes  # 3 octets
    organization_subtype: bytes  # 3 octets
    data: bytes
    tlv_type: int = TLV_ORGANIZATION_EXTENSION

    def pack(self) -> bytes:
        if self.tlv_type not in _ORGANIZATION_TYPES:
            raise ValueError(f"tlvType 0x{self.tlv_type:04x} is not an organization extension")
        return _tlv(self.tlv_type, _octets(self.organization_id, 3, "organizationId")
                    + _octets(self.organization_subtype, 3, "organizationSubType") + bytes(self.data))


@dataclass(frozen=True, slots=True)
class RequestUnicastTransmissionTlv:
    """REQUEST_UNICAST_TRANSMISSION, §16.1.4.1 (messageType in the high nibble of the first octet)."""

    message_type: MsgType
    log_inter_message_period: int
    duration_s: int

    def pack(self) -> bytes:
        return _tlv(TLV_REQUEST_UNICAST_TRANSMISSION, _pack(_REQUEST, _nibble(self.message_type, "messageType") << 4,
                                                            self.log_inter_message_period, self.duration_s))


@dataclass(frozen=True, slots=True)
class GrantUnicastTransmissionTlv:
    """GRANT_UNICAST_TRANSMISSION, §16.1.4.2; duration 0 denies the request."""

    message_type: MsgType
    log_inter_message_period: int
    duration_s: int
    renewal_invited: bool

    def pack(self) -> bytes:
        return _tlv(TLV_GRANT_UNICAST_TRANSMISSION, _pack(_GRANT, _nibble(self.message_type, "messageType") << 4,
                                                          self.log_inter_message_period, self.duration_s,
                                                          1 if self.renewal_invited else 0))


@dataclass(frozen=True, slots=True)
class CancelUnicastTransmissionTlv:
    """CANCEL_UNICAST_TRANSMISSION, §16.1.4.3."""

    message_type: MsgType

    def pack(self) -> bytes:
        return _tlv(TLV_CANCEL_UNICAST_TRANSMISSION, _pack(_CANCEL, _nibble(self.message_type, "messageType") << 4))


@dataclass(frozen=True, slots=True)
class AcknowledgeCancelUnicastTransmissionTlv:
    """ACKNOWLEDGE_CANCEL_UNICAST_TRANSMISSION, §16.1.4.4."""

    message_type: MsgType

    def pack(self) -> bytes:
        return _tlv(TLV_ACKNOWLEDGE_CANCEL_UNICAST_TRANSMISSION,
                    _pack(_CANCEL, _nibble(self.message_type, "messageType") << 4))


@dataclass(frozen=True, slots=True)
class PathTraceTlv:
    """PATH_TRACE, §16.2: the clockIdentity of every PTP Instance the Announce passed, grandmaster first."""

    path: tuple[bytes, ...]

    def pack(self) -> bytes:
        return _tlv(TLV_PATH_TRACE, b"".join(_octets(c, 8, "pathSequence entry") for c in self.path))


AnyTlv: TypeAlias = (Tlv | ManagementTlv | ManagementErrorStatusTlv | OrganizationExtensionTlv
                     | RequestUnicastTransmissionTlv | GrantUnicastTransmissionTlv | CancelUnicastTransmissionTlv
                     | AcknowledgeCancelUnicastTransmissionTlv | PathTraceTlv)


def _tlv_message_type(octet: int) -> MsgType:
    mtype = _MSG_TYPES.get(octet >> 4)
    if mtype is None:
        raise PtpDecodeError("tlv", f"unicast TLV names unknown messageType {octet >> 4}")
    return mtype


def _error_status(v: bytes) -> ManagementErrorStatusTlv:
    error_id, management_id = _unpack(_ERROR_STATUS, v)
    text = _read_text(v, _ERROR_STATUS.size)[0] if len(v) > _ERROR_STATUS.size else ""
    return ManagementErrorStatusTlv(error_id, management_id, text)


def _path_trace(v: bytes) -> PathTraceTlv:
    if len(v) % 8:
        raise PtpDecodeError("tlv", f"PATH_TRACE of {len(v)} octets is not a list of clockIdentities")
    return PathTraceTlv(tuple(v[i:i + 8] for i in range(0, len(v), 8)))


def _organization(t: int, v: bytes) -> OrganizationExtensionTlv:
    if len(v) < 6:
        raise PtpDecodeError("tlv", "organization extension shorter than its OUI and subtype")
    return OrganizationExtensionTlv(v[:3], v[3:6], v[6:], t)


def _request(v: bytes) -> RequestUnicastTransmissionTlv:
    octet, period, duration = _unpack(_REQUEST, v)
    return RequestUnicastTransmissionTlv(_tlv_message_type(octet), period, duration)


def _grant(v: bytes) -> GrantUnicastTransmissionTlv:
    octet, period, duration, flags = _unpack(_GRANT, v)
    return GrantUnicastTransmissionTlv(_tlv_message_type(octet), period, duration, bool(flags & 1))


def _cancel_type(v: bytes) -> MsgType:
    return _tlv_message_type(_unpack(_CANCEL, v)[0])


def _management_tlv(v: bytes) -> ManagementTlv:
    return ManagementTlv(_unpack(_U16, v)[0], v[2:])


_TLV_PARSERS: dict[int, Callable[[int, bytes], AnyTlv]] = {
    TLV_MANAGEMENT: lambda t, v: _management_tlv(v),
    TLV_MANAGEMENT_ERROR_STATUS: lambda t, v: _error_status(v),
    TLV_REQUEST_UNICAST_TRANSMISSION: lambda t, v: _request(v),
    TLV_GRANT_UNICAST_TRANSMISSION: lambda t, v: _grant(v),
    TLV_CANCEL_UNICAST_TRANSMISSION: lambda t, v: CancelUnicastTransmissionTlv(_cancel_type(v)),
    TLV_ACKNOWLEDGE_CANCEL_UNICAST_TRANSMISSION: lambda t, v: AcknowledgeCancelUnicastTransmissionTlv(_cancel_type(v)),
    TLV_PATH_TRACE: lambda t, v: _path_trace(v),
    **{t: _organization for t in _ORGANIZATION_TYPES},
}


def _decode_tlvs(data: bytes, offset: int, end: int) -> tuple[AnyTlv, ...]:
    tlvs = []
    while offset < end:
        if end - offset < _TLV_HEAD.size:
            raise PtpDecodeError("tlv", f"{end - offset} octets left over after the last TLV")
        tlv_type, length = _TLV_HEAD.unpack_from(data, offset)
        offset += _TLV_HEAD.size
        if length % 2 or offset + length > end:
            raise PtpDecodeError("tlv", f"TLV 0x{tlv_type:04x} lengthField {length} is odd or runs past the message")
        value = data[offset:offset + length]
        parse = _TLV_PARSERS.get(tlv_type)
        tlvs.append(Tlv(tlv_type, value) if parse is None else parse(tlv_type, value))
        offset += length
    return tuple(tlvs)


# --- C37.238-2017 (power profile) -----------------------------------------------------------------------------

C37238_OUI = b"\x1c\x12\x9d"  # IEEE C37.238 organizationId
C37238_2017_SUBTYPE = b"\x00\x00\x02"  # subtype 1 is the 2011 TLV, whose layout this one keeps
_C37238_2017 = struct.Struct("!HIIxx")  # grandmasterID, reserved, totalTimeInaccuracy (ns), pad


def c37238_2017_tlv(grandmaster_id: int, total_time_inaccuracy_ns: int) -> OrganizationExtensionTlv:
    """The IEEE_C37_238 TLV an Announce carries under C37.238-2017 (Annex C); 0xFFFFFFFF ns means unknown."""
    return OrganizationExtensionTlv(C37238_OUI, C37238_2017_SUBTYPE,
                                    _pack(_C37238_2017, grandmaster_id, 0, total_time_inaccuracy_ns))


def parse_c37238_2017_tlv(tlv: AnyTlv) -> tuple[int, int] | None:
    """(grandmasterID, totalTimeInaccuracy ns) from a C37.238-2017 TLV; None for any other TLV."""
    if (not isinstance(tlv, OrganizationExtensionTlv) or tlv.organization_id != C37238_OUI
            or tlv.organization_subtype != C37238_2017_SUBTYPE):
        return None
    grandmaster_id, _, inaccuracy_ns = _unpack(_C37238_2017, tlv.data)
    return grandmaster_id, inaccuracy_ns


# --- messages (§13) -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sync:
    """Sync, §13.6."""

    MESSAGE_TYPE: ClassVar[MsgType] = MsgType.SYNC
    header: Header
    origin_ts_ns: int
    tlvs: tuple[AnyTlv, ...] = ()

    def pack_body(self) -> bytes:
        return _pack(_TS, *_ts(self.origin_ts_ns, "originTimestamp"))


@dataclass(frozen=True, slots=True)
class DelayReq:
    """Delay_Req, §13.6."""

    MESSAGE_TYPE: ClassVar[MsgType] = MsgType.DELAY_REQ
    header: Header
    origin_ts_ns: int
    tlvs: tuple[AnyTlv, ...] = ()

    def pack_body(self) -> bytes:
        return _pack(_TS, *_ts(self.origin_ts_ns, "originTimestamp"))


@dataclass(frozen=True, slots=True)
class PdelayReq:
    """Pdelay_Req, §13.9: originTimestamp and 10 reserved octets (the size of a Pdelay_Resp)."""

    MESSAGE_TYPE: ClassVar[MsgType] = MsgType.PDELAY_REQ
    header: Header
    origin_ts_ns: int
    tlvs: tuple[AnyTlv, ...] = ()

    def pack_body(self) -> bytes:
        return _pack(_TS_RESERVED, *_ts(self.origin_ts_ns, "originTimestamp"))


@dataclass(frozen=True, slots=True)
class PdelayResp:
    """Pdelay_Resp, §13.10."""

    MESSAGE_TYPE: ClassVar[MsgType] = MsgType.PDELAY_RESP
    header: Header
    request_receipt_ts_ns: int
    requesting_port: PortIdentity
    tlvs: tuple[AnyTlv, ...] = ()

    def pack_body(self) -> bytes:
        return _pack(_TS_PORT, *_ts(self.request_receipt_ts_ns, "requestReceiptTimestamp"),
                     *_port(self.requesting_port))


@dataclass(frozen=True, slots=True)
class FollowUp:
    """Follow_Up, §13.7."""

    MESSAGE_TYPE: ClassVar[MsgType] = MsgType.FOLLOW_UP
    header: Header
    precise_origin_ts_ns: int
    tlvs: tuple[AnyTlv, ...] = ()

    def pack_body(self) -> bytes:
        return _pack(_TS, *_ts(self.precise_origin_ts_ns, "preciseOriginTimestamp"))


@dataclass(frozen=True, slots=True)
class DelayResp:
    """Delay_Resp, §13.8."""

    MESSAGE_TYPE: ClassVar[MsgType] = MsgType.DELAY_RESP
    header: Header
    receive_ts_ns: int
    requesting_port: PortIdentity
    tlvs: tuple[AnyTlv, ...] = ()

    def pack_body(self) -> bytes:
        return _pack(_TS_PORT, *_ts(self.receive_ts_ns, "receiveTimestamp"), *_port(self.requesting_port))


@dataclass(frozen=True, slots=True)
class PdelayRespFollowUp:
    """Pdelay_Resp_Follow_Up, §13.11."""

    MESSAGE_TYPE: ClassVar[MsgType] = MsgType.PDELAY_RESP_FOLLOW_UP
    header: Header
    response_origin_ts_ns: int
    requesting_port: PortIdentity
    tlvs: tuple[AnyTlv, ...] = ()

    def pack_body(self) -> bytes:
        return _pack(_TS_PORT, *_ts(self.response_origin_ts_ns, "responseOriginTimestamp"),
                     *_port(self.requesting_port))


@dataclass(frozen=True, slots=True)
class Announce:
    """Announce, §13.5."""

    MESSAGE_TYPE: ClassVar[MsgType] = MsgType.ANNOUNCE
    header: Header
    origin_ts_ns: int
    current_utc_offset: int
    gm_priority1: int
    gm_clock_quality: ClockQuality
    gm_priority2: int
    gm_identity: bytes
    steps_removed: int
    time_source: int
    tlvs: tuple[AnyTlv, ...] = ()

    def pack_body(self) -> bytes:
        q = self.gm_clock_quality
        return _pack(_ANNOUNCE, *_ts(self.origin_ts_ns, "originTimestamp"), self.current_utc_offset,
                     self.gm_priority1, q.clock_class, q.clock_accuracy, q.offset_scaled_log_variance,
                     self.gm_priority2, _octets(self.gm_identity, 8, "grandmasterIdentity"), self.steps_removed,
                     self.time_source)


@dataclass(frozen=True, slots=True)
class Signaling:
    """Signaling, §13.12: a targetPortIdentity and TLVs (unicast negotiation, §16.1)."""

    MESSAGE_TYPE: ClassVar[MsgType] = MsgType.SIGNALING
    header: Header
    target_port: PortIdentity
    tlvs: tuple[AnyTlv, ...] = ()

    def pack_body(self) -> bytes:
        return _pack(_PORT, *_port(self.target_port))


@dataclass(frozen=True, slots=True)
class Management:
    """Management, §15.4.1: action is Table 57's GET .. ACKNOWLEDGE; tlvs normally one (error) status TLV."""

    MESSAGE_TYPE: ClassVar[MsgType] = MsgType.MANAGEMENT
    header: Header
    target_port: PortIdentity
    starting_boundary_hops: int
    boundary_hops: int
    action: int
    tlvs: tuple[AnyTlv, ...] = ()

    def pack_body(self) -> bytes:
        return _pack(_MANAGEMENT, *_port(self.target_port), self.starting_boundary_hops, self.boundary_hops,
                     _nibble(self.action, "actionField"))


Message: TypeAlias = (Sync | DelayReq | PdelayReq | PdelayResp | FollowUp | DelayResp | PdelayRespFollowUp
                      | Announce | Signaling | Management)

_BODY_LEN = {MsgType.SYNC: _TS.size, MsgType.DELAY_REQ: _TS.size, MsgType.PDELAY_REQ: _TS_RESERVED.size,
             MsgType.PDELAY_RESP: _TS_PORT.size, MsgType.FOLLOW_UP: _TS.size, MsgType.DELAY_RESP: _TS_PORT.size,
             MsgType.PDELAY_RESP_FOLLOW_UP: _TS_PORT.size, MsgType.ANNOUNCE: _ANNOUNCE.size,
             MsgType.SIGNALING: _PORT.size, MsgType.MANAGEMENT: _MANAGEMENT.size}


def _announce(h: Header, data: bytes, tlvs: tuple[AnyTlv, ...]) -> Announce:
    (s_hi, s_lo, ns, utc_offset, p1, clock_class, accuracy, variance, p2, gm, steps,
     source) = _ANNOUNCE.unpack_from(data, HEADER_LEN)
    return Announce(h, _ns(s_hi, s_lo, ns), utc_offset, p1, ClockQuality(clock_class, accuracy, variance), p2, gm,
                    steps, source, tlvs)


def _management(h: Header, data: bytes, tlvs: tuple[AnyTlv, ...]) -> Management:
    clock, port, starting_hops, hops, action = _MANAGEMENT.unpack_from(data, HEADER_LEN)
    return Management(h, PortIdentity(clock, port), starting_hops, hops, action & 0x0F, tlvs)


def _with_port(cls: Callable[..., Message]) -> Callable[[Header, bytes, tuple[AnyTlv, ...]], Message]:
    def parse(h: Header, data: bytes, tlvs: tuple[AnyTlv, ...]) -> Message:
        s_hi, s_lo, ns, clock, port = _TS_PORT.unpack_from(data, HEADER_LEN)
        return cls(h, _ns(s_hi, s_lo, ns), PortIdentity(clock, port), tlvs)
    return parse


def _timestamp_only(cls: Callable[..., Message]) -> Callable[[Header, bytes, tuple[AnyTlv, ...]], Message]:
    def parse(h: Header, data: bytes, tlvs: tuple[AnyTlv, ...]) -> Message:
        return cls(h, _ns(*_TS.unpack_from(data, HEADER_LEN)), tlvs)
    return parse


_PARSERS: dict[MsgType, Callable[[Header, bytes, tuple[AnyTlv, ...]], Message]] = {
    MsgType.SYNC: _timestamp_only(Sync),
    MsgType.DELAY_REQ: _timestamp_only(DelayReq),
    MsgType.PDELAY_REQ: _timestamp_only(PdelayReq),
    MsgType.FOLLOW_UP: _timestamp_only(FollowUp),
    MsgType.PDELAY_RESP: _with_port(PdelayResp),
    MsgType.DELAY_RESP: _with_port(DelayResp),
    MsgType.PDELAY_RESP_FOLLOW_UP: _with_port(PdelayRespFollowUp),
    MsgType.ANNOUNCE: _announce,
    MsgType.SIGNALING: lambda h, data, tlvs: Signaling(h, PortIdentity(*_PORT.unpack_from(data, HEADER_LEN)), tlvs),
    MsgType.MANAGEMENT: _management,
}


def _pack_header(h: Header, message_type: MsgType, length: int) -> bytes:
    control = control_for(message_type) if h.control is None else h.control
    return _pack(_HEADER, _nibble(h.major_sdo_id, "majorSdoId") << 4 | message_type,
                 _nibble(h.minor_version, "minorVersionPTP") << 4 | _nibble(h.version, "versionPTP"), length,
                 h.domain, h.minor_sdo_id, h.flags, h.correction, h.message_type_specific, *_port(h.source_port),
                 h.sequence_id, control, h.log_interval)


def encode(msg: Message) -> bytes:
    """The message on the wire: header (messageLength computed), body, then its TLVs in order."""
    message_type = msg.MESSAGE_TYPE
    if msg.header.message_type != message_type:
        raise ValueError(f"{type(msg).__name__} carries a {msg.header.message_type!r} header")
    body = msg.pack_body() + b"".join(tlv.pack() for tlv in msg.tlvs)
    length = HEADER_LEN + len(body)
    if length > 0xFFFF:
        raise ValueError(f"message of {length} octets exceeds messageLength's 16 bits")
    return _pack_header(msg.header, message_type, length) + body


# --- the grandmaster's steady-state messages, in one struct call each --------------------------------------------
_HEADER_TS = struct.Struct("!BBHBBHqI8sHHBbHII")  # Table 35, then a Timestamp: Sync, Delay_Req, Follow_Up
_HEADER_TS_PORT = struct.Struct("!BBHBBHqI8sHHBbHII8sH")  # then a PortIdentity too: Delay_Resp
_VERSION_OCTET = 1 << 4 | 2  # minorVersionPTP 1, versionPTP 2: the Header's defaults
_TIMESTAMP_BODIES = (MsgType.SYNC, MsgType.DELAY_REQ, MsgType.FOLLOW_UP)


def encode_timestamped(message_type: MsgType, domain: int, source_port: PortIdentity, sequence_id: int, flags: int,
                       log_interval: int, ts_ns: int, correction: int = 0,
                       requesting_port: PortIdentity | None = None) -> bytes:
    """A Sync, Delay_Req or Follow_Up (a Timestamp body, §13.6-13.7), or with ``requesting_port`` a Delay_Resp
    (§13.8), octet for octet as ``encode`` writes it from a ``Header`` with its defaults (versionPTP 2.1, sdoIds 0,
    Table 42's controlField) and no TLVs, in one struct call: a grandmaster sends these a few times a second per
    client, and building the dataclasses costs more than the packing.  ValueError as ``encode`` raises it."""
    hi, lo, ns = _ts(ts_ns, "timestamp")
    clock, number = _port(source_port)
    if requesting_port is None:
        if message_type not in _TIMESTAMP_BODIES:
            raise ValueError(f"{message_type!r} has no Timestamp-only body")
        return _pack(_HEADER_TS, message_type, _VERSION_OCTET, HEADER_LEN + _TS.size, domain, 0, flags, correction,
                     0, clock, number, sequence_id, _CONTROL[message_type], log_interval, hi, lo, ns)
    if message_type != MsgType.DELAY_RESP:
        raise ValueError(f"{message_type!r} carries no requestingPortIdentity")
    return _pack(_HEADER_TS_PORT, message_type, _VERSION_OCTET, HEADER_LEN + _TS_PORT.size, domain, 0, flags,
                 correction, 0, clock, number, sequence_id, _CONTROL[message_type], log_interval, hi, lo, ns,
                 *_port(requesting_port))


def restamp(message: bytes, sequence_id: int, ts_ns: int) -> bytes:
    """An encoded Sync, Delay_Req, Follow_Up or Announce with another sequenceId and first Timestamp (its
    originTimestamp), everything else as it was: an Announce is the same for every client and second but these."""
    out = bytearray(message)
    struct.pack_into("!H", out, 30, sequence_id)
    _TS.pack_into(out, HEADER_LEN, *_ts(ts_ns, "originTimestamp"))
    return bytes(out)


def _read_header(data: bytes) -> tuple[Header, int]:
    if len(data) < HEADER_LEN:
        raise PtpDecodeError("truncated", f"{len(data)} octets is shorter than the PTP header")
    (b0, b1, length, domain, minor_sdo_id, flags, correction, specific, clock, port, sequence_id, control,
     log_interval) = _HEADER.unpack_from(data)
    if b1 & 0x0F != 2 or b1 >> 4 > 1:
        raise PtpDecodeError("version", f"versionPTP {b1 & 0x0F}.{b1 >> 4} is not 2.0 or 2.1")
    message_type = _MSG_TYPES.get(b0 & 0x0F)
    if message_type is None:
        raise PtpDecodeError("type", f"messageType 0x{b0 & 0x0F:x} is reserved")
    if length < HEADER_LEN + _BODY_LEN[message_type]:
        raise PtpDecodeError("length", f"messageLength {length} is shorter than a {message_type.name}")
    if len(data) < length:
        raise PtpDecodeError("truncated", f"{len(data)} octets received of messageLength {length}")
    header = Header(message_type, domain, PortIdentity(clock, port), sequence_id, flags, correction, log_interval,
                    b1 & 0x0F, b1 >> 4, b0 >> 4, minor_sdo_id, control, specific)
    return header, length


def peek_header(data: bytes) -> Header:
    """The header alone, for dispatch; raises the same PtpDecodeErrors as ``decode`` short of the TLVs."""
    return _read_header(data)[0]


def decode(data: bytes) -> Message:
    """One message from a datagram or frame payload; octets after messageLength are ignored."""
    if not isinstance(data, bytes):
        data = bytes(data)
    header, length = _read_header(data)
    tlvs = _decode_tlvs(data, HEADER_LEN + _BODY_LEN[header.message_type], length)
    return _PARSERS[header.message_type](header, data, tlvs)


# --- management dataField bodies (§15.5.3) --------------------------------------------------------------------

_DEFAULT_DS = struct.Struct("!BxHBBBHB8sBx")
_CURRENT_DS = struct.Struct("!Hqq")
_PARENT_DS = struct.Struct("!8sHBxHiBBBHB8s")
_TIME_PROPERTIES_DS = struct.Struct("!hBB")
_PORT_DS = struct.Struct("!8sHBbqbBbBbB")
_ONE_OCTET = struct.Struct("!Bx")
_TIME_FLAG_BITS = (FLAG_LEAP61, FLAG_LEAP59, FLAG_UTC_OFFSET_VALID, FLAG_PTP_TIMESCALE, FLAG_TIME_TRACEABLE,
                   FLAG_FREQUENCY_TRACEABLE)


@dataclass(frozen=True, slots=True)
class DefaultDataSetBody:
    """DEFAULT_DATA_SET, §15.5.3.3.1: TSC/SO flags, reserved, numberPorts, priority1, clockQuality, priority2,
    clockIdentity, domainNumber, reserved (20 octets, as pmc prints it)."""

    two_step: bool
    slave_only: bool
    number_ports: int
    priority1: int
    clock_quality: ClockQuality
    priority2: int
    clock_identity: bytes
    domain: int

    def pack(self) -> bytes:
        q = self.clock_quality
        return _pack(_DEFAULT_DS, (1 if self.two_step else 0) | (2 if self.slave_only else 0), self.number_ports,
                     self.priority1, q.clock_class, q.clock_accuracy, q.offset_scaled_log_variance, self.priority2,
                     _octets(self.clock_identity, 8, "clockIdentity"), self.domain)

    @classmethod
    def unpack(cls, data: bytes) -> Self:
        flags, ports, p1, clock_class, accuracy, variance, p2, identity, domain = _unpack(_DEFAULT_DS, data)
        return cls(bool(flags & 1), bool(flags & 2), ports, p1, ClockQuality(clock_class, accuracy, variance), p2,
                   identity, domain)


@dataclass(frozen=True, slots=True)
class CurrentDataSetBody:
    """CURRENT_DATA_SET, §15.5.3.4.1: stepsRemoved, offsetFromMaster, meanPathDelay (TimeIntervals, ns * 2**16)."""

    steps_removed: int
    offset_from_master: int
    mean_path_delay: int

    def pack(self) -> bytes:
        return _pack(_CURRENT_DS, self.steps_removed, self.offset_from_master, self.mean_path_delay)

    @classmethod
    def unpack(cls, data: bytes) -> Self:
        return cls(*_unpack(_CURRENT_DS, data))


@dataclass(frozen=True, slots=True)
class ParentDataSetBody:
    """PARENT_DATA_SET, §15.5.3.5.1 (32 octets)."""

    parent_port: PortIdentity
    parent_stats: bool
    observed_parent_oslv: int  # observedParentOffsetScaledLogVariance
    observed_parent_phase_change_rate: int  # observedParentClockPhaseChangeRate, Integer32
    gm_priority1: int
    gm_clock_quality: ClockQuality
    gm_priority2: int
    gm_identity: bytes

    def pack(self) -> bytes:
        q = self.gm_clock_quality
        return _pack(_PARENT_DS, *_port(self.parent_port), 1 if self.parent_stats else 0, self.observed_parent_oslv,
                     self.observed_parent_phase_change_rate, self.gm_priority1, q.clock_class, q.clock_accuracy,
                     q.offset_scaled_log_variance, self.gm_priority2,
                     _octets(self.gm_identity, 8, "grandmasterIdentity"))

    @classmethod
    def unpack(cls, data: bytes) -> Self:
        (clock, port, stats, oslv, rate, p1, clock_class, accuracy, variance, p2,
         gm) = _unpack(_PARENT_DS, data)
        return cls(PortIdentity(clock, port), bool(stats & 1), oslv, rate, p1,
                   ClockQuality(clock_class, accuracy, variance), p2, gm)


@dataclass(frozen=True, slots=True)
class TimePropertiesDataSetBody:
    """TIME_PROPERTIES_DATA_SET, §15.5.3.6.1: currentUtcOffset, flags (the bits of flagField octet 1), timeSource."""

    current_utc_offset: int
    leap61: bool
    leap59: bool
    utc_offset_valid: bool
    ptp_timescale: bool
    time_traceable: bool
    frequency_traceable: bool
    time_source: int

    def pack(self) -> bytes:
        states = (self.leap61, self.leap59, self.utc_offset_valid, self.ptp_timescale, self.time_traceable,
                  self.frequency_traceable)
        flags = sum(bit for bit, on in zip(_TIME_FLAG_BITS, states, strict=True) if on)
        return _pack(_TIME_PROPERTIES_DS, self.current_utc_offset, flags, self.time_source)

    @classmethod
    def unpack(cls, data: bytes) -> Self:
        offset, flags, source = _unpack(_TIME_PROPERTIES_DS, data)
        return cls(offset, *(bool(flags & bit) for bit in _TIME_FLAG_BITS), source)


@dataclass(frozen=True, slots=True)
class PortDataSetBody:
    """PORT_DATA_SET, §15.5.3.7.1 (26 octets)."""

    port_identity: PortIdentity
    port_state: int  # Table 20
    log_min_delay_req_interval: int
    peer_mean_path_delay: int  # TimeInterval, ns * 2**16
    log_announce_interval: int
    announce_receipt_timeout: int
    log_sync_interval: int
    delay_mechanism: int  # DELAY_E2E, DELAY_P2P, ..., DELAY_NO_MECHANISM
    log_min_pdelay_req_interval: int
    version_number: int  # low nibble versionPTP, high nibble minorVersionPTP

    def pack(self) -> bytes:
        return _pack(_PORT_DS, *_port(self.port_identity), self.port_state, self.log_min_delay_req_interval,
                     self.peer_mean_path_delay, self.log_announce_interval, self.announce_receipt_timeout,
                     self.log_sync_interval, self.delay_mechanism, self.log_min_pdelay_req_interval,
                     self.version_number)

    @classmethod
    def unpack(cls, data: bytes) -> Self:
        clock, port, *rest = _unpack(_PORT_DS, data)
        return cls(PortIdentity(clock, port), *rest)


@dataclass(frozen=True, slots=True)
class OneOctetBody:
    """The value-and-reserved-octet body of PRIORITY1, PRIORITY2, DOMAIN, SLAVE_ONLY, LOG_*_INTERVAL, ...
    (§15.5.3.3.2 ff.).  Signed fields (the log intervals) pack from -128..-1 and unpack with ``signed=True``."""

    value: int

    def pack(self) -> bytes:
        if not -0x80 <= self.value <= 0xFF:
            raise ValueError(f"{self.value} does not fit one octet")
        return _ONE_OCTET.pack(self.value & 0xFF)

    @classmethod
    def unpack(cls, data: bytes, signed: bool = False) -> Self:
        value = _unpack(_ONE_OCTET, data)[0]
        return cls(value - 0x100 if signed and value >= 0x80 else value)


@dataclass(frozen=True, slots=True)
class ClockDescriptionBody:
    """CLOCK_DESCRIPTION, §15.5.3.1.2 (pmc's GET CLOCK_DESCRIPTION), padded to an even length."""

    clock_type: int  # CLOCK_TYPE_* bits
    physical_layer_protocol: str  # e.g. "IEEE 802.3"
    physical_address: bytes  # e.g. the MAC
    network_protocol: int  # protocolAddress.networkProtocol: PROTOCOL_UDP_IPV4, ...
    protocol_address: bytes
    manufacturer_identity: bytes  # 3-octet OUI (followed on the wire by one reserved octet)
    product_description: str  # "manufacturer;model;serial"
    revision_data: str  # "hardware;firmware;software"
    user_description: str
    profile_identity: bytes  # 6 octets

    def pack(self) -> bytes:
        return _even(b"".join((
            _pack(_U16, self.clock_type), _text(self.physical_layer_protocol),
            _pack(_U16, len(self.physical_address)), bytes(self.physical_address),
            _pack(_TLV_HEAD, self.network_protocol, len(self.protocol_address)), bytes(self.protocol_address),
            _octets(self.manufacturer_identity, 3, "manufacturerIdentity"), b"\0",
            _text(self.product_description), _text(self.revision_data), _text(self.user_description),
            _octets(self.profile_identity, 6, "profileIdentity"))))

    @classmethod
    def unpack(cls, data: bytes) -> Self:
        clock_type = _unpack(_U16, data)[0]
        physical_protocol, at = _read_text(data, 2)
        physical_address, at = _read_counted(data, at)
        network_protocol = _unpack(_U16, data, at)[0]
        protocol_address, at = _read_counted(data, at + 2)
        manufacturer = _read_octets(data, at, 3)
        product, at = _read_text(data, at + 4)
        revision, at = _read_text(data, at)
        user, at = _read_text(data, at)
        return cls(clock_type, physical_protocol, physical_address, network_protocol, protocol_address, manufacturer,
                   product, revision, user, _read_octets(data, at, 6))


def _read_octets(data: bytes, offset: int, size: int) -> bytes:
    if offset + size > len(data):
        raise PtpDecodeError("tlv", f"{size} octets needed at offset {offset} of {len(data)}")
    return bytes(data[offset:offset + size])


def _read_counted(data: bytes, offset: int) -> tuple[bytes, int]:
    size = _unpack(_U16, data, offset)[0]
    return _read_octets(data, offset + 2, size), offset + 2 + size
