"""u-blox receiver set-up: a ReceiverPlan -> UBX configuration messages, and the receiver's answers -> values.

Pure core.  Two generations are set up differently.  Generation 9 and later (ZED-F9T, X20) keep a database of keys
written with CFG-VALSET and read with CFG-VALGET (u-blox ZED-F9T interface description, UBX-19005590,
"Configuration interface"); the M8T and older take one CFG-* message per function (``gnss/ubxlegacy.py``).  Both
answer every CFG message with ACK-ACK or ACK-NAK and say who they are in MON-VER.  Decoders raise ValueError with a
message naming what was wrong; the caller turns it into a rejection.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from appliance.gnss import ubxlegacy as legacy
from appliance.gnss.framer import ubx_frame_bytes
from appliance.gnss.plan import NMEA_MESSAGES, UBX_MESSAGES, ReceiverPlan

CFG, VALSET, VALGET = 0x06, 0x8A, 0x8B
ACK, ACK_NAK, ACK_ACK = 0x05, 0x00, 0x01
MON, MON_VER = 0x0A, 0x04
NMEA_CLASS = 0xF0
MAX_KEYS = 64  # per CFG-VALSET or CFG-VALGET (interface description, "UBX-CFG-VALSET")

# The configuration keys the appliance uses: name -> (key ID, storage type).  Units and meanings in the comments.
KEYS: dict[str, tuple[int, str]] = {
    # Time mode.  MODE 0 disabled, 1 survey-in, 2 fixed; POS_TYPE 0 ECEF, 1 LLH.
    "CFG-TMODE-MODE": (0x20030001, "E1"),
    "CFG-TMODE-POS_TYPE": (0x20030002, "E1"),
    "CFG-TMODE-LAT": (0x40030009, "I4"),  # 1e-7 deg
    "CFG-TMODE-LON": (0x4003000A, "I4"),  # 1e-7 deg
    "CFG-TMODE-HEIGHT": (0x4003000B, "I4"),  # cm above the ellipsoid
    "CFG-TMODE-LAT_HP": (0x2003000C, "I1"),  # 1e-9 deg, -99..99
    "CFG-TMODE-LON_HP": (0x2003000D, "I1"),  # 1e-9 deg, -99..99
    "CFG-TMODE-HEIGHT_HP": (0x2003000E, "I1"),  # 0.1 mm, -99..99
    "CFG-TMODE-FIXED_POS_ACC": (0x4003000F, "U4"),  # 0.1 mm
    "CFG-TMODE-SVIN_MIN_DUR": (0x40030010, "U4"),  # s
    "CFG-TMODE-SVIN_ACC_LIMIT": (0x40030011, "U4"),  # 0.1 mm
    # Time pulse 1.  PULSE_DEF 0 period, 1 frequency; PULSE_LENGTH_DEF 0 ratio, 1 length; POL 1 rising edge on the
    # second; TIMEGRID 0 UTC, 1 GPS, 2 GLONASS, 3 BeiDou, 4 Galileo.
    "CFG-TP-PULSE_DEF": (0x20050023, "E1"),
    "CFG-TP-PULSE_LENGTH_DEF": (0x20050030, "E1"),
    "CFG-TP-ANT_CABLEDELAY": (0x30050001, "I2"),  # ns
    "CFG-TP-PERIOD_TP1": (0x40050002, "U4"),  # us, before lock
    "CFG-TP-PERIOD_LOCK_TP1": (0x40050003, "U4"),  # us, locked to GNSS time
    "CFG-TP-LEN_TP1": (0x40050004, "U4"),  # us, before lock
    "CFG-TP-LEN_LOCK_TP1": (0x40050005, "U4"),  # us, locked
    "CFG-TP-TP1_ENA": (0x10050007, "L"),
    "CFG-TP-SYNC_GNSS_TP1": (0x10050008, "L"),
    "CFG-TP-USE_LOCKED_TP1": (0x10050009, "L"),
    "CFG-TP-ALIGN_TO_TOW_TP1": (0x1005000A, "L"),
    "CFG-TP-POL_TP1": (0x1005000B, "L"),
    "CFG-TP-TIMEGRID_TP1": (0x2005000C, "E1"),
    # Constellations, and each one's L1-band signal.
    "CFG-SIGNAL-GPS_ENA": (0x1031001F, "L"),
    "CFG-SIGNAL-GPS_L1CA_ENA": (0x10310001, "L"),
    "CFG-SIGNAL-SBAS_ENA": (0x10310020, "L"),
    "CFG-SIGNAL-SBAS_L1CA_ENA": (0x10310005, "L"),
    "CFG-SIGNAL-GAL_ENA": (0x10310021, "L"),
    "CFG-SIGNAL-GAL_E1_ENA": (0x10310007, "L"),
    "CFG-SIGNAL-BDS_ENA": (0x10310022, "L"),
    "CFG-SIGNAL-BDS_B1_ENA": (0x1031000D, "L"),
    "CFG-SIGNAL-QZSS_ENA": (0x10310024, "L"),
    "CFG-SIGNAL-QZSS_L1CA_ENA": (0x10310012, "L"),
    "CFG-SIGNAL-GLO_ENA": (0x10310025, "L"),
    "CFG-SIGNAL-GLO_L1_ENA": (0x10310018, "L"),
    "CFG-SIGNAL-NAVIC_ENA": (0x10310026, "L"),  # NavIC has no L1 signal (L5 only)
    # Output rates on UART1, per navigation epoch.
    "CFG-MSGOUT-UBX_NAV_PVT_UART1": (0x20910007, "U1"),
    "CFG-MSGOUT-UBX_NAV_STATUS_UART1": (0x2091001B, "U1"),
    "CFG-MSGOUT-UBX_NAV_TIMEUTC_UART1": (0x2091005C, "U1"),
    "CFG-MSGOUT-UBX_NAV_TIMEGPS_UART1": (0x20910048, "U1"),
    "CFG-MSGOUT-UBX_NAV_TIMELS_UART1": (0x20910061, "U1"),
    "CFG-MSGOUT-UBX_NAV_TIMEGAL_UART1": (0x20910057, "U1"),
    "CFG-MSGOUT-UBX_NAV_TIMEBDS_UART1": (0x20910052, "U1"),
    "CFG-MSGOUT-UBX_NAV_SAT_UART1": (0x20910016, "U1"),
    "CFG-MSGOUT-UBX_TIM_TP_UART1": (0x2091017E, "U1"),
    "CFG-MSGOUT-UBX_TIM_SVIN_UART1": (0x20910098, "U1"),
    "CFG-MSGOUT-UBX_MON_RF_UART1": (0x2091035A, "U1"),
    "CFG-MSGOUT-UBX_MON_HW_UART1": (0x209101B5, "U1"),
    "CFG-MSGOUT-NMEA_ID_RMC_UART1": (0x209100AC, "U1"),
    "CFG-MSGOUT-NMEA_ID_GGA_UART1": (0x209100BB, "U1"),
    "CFG-MSGOUT-NMEA_ID_GSA_UART1": (0x209100C0, "U1"),
    "CFG-MSGOUT-NMEA_ID_GSV_UART1": (0x209100C5, "U1"),
    "CFG-MSGOUT-NMEA_ID_ZDA_UART1": (0x209100D9, "U1"),
    "CFG-MSGOUT-NMEA_ID_GLL_UART1": (0x209100CA, "U1"),  # on out of the box; the appliance turns it off
    "CFG-MSGOUT-NMEA_ID_VTG_UART1": (0x209100B1, "U1"),  # likewise
    # UART1: speed, and the protocols it takes and sends.
    "CFG-UART1-BAUDRATE": (0x40520001, "U4"),
    "CFG-UART1INPROT-UBX": (0x10730001, "L"),
    "CFG-UART1INPROT-NMEA": (0x10730002, "L"),
    "CFG-UART1OUTPROT-UBX": (0x10740001, "L"),
    "CFG-UART1OUTPROT-NMEA": (0x10740002, "L"),
    # Navigation engine: 0 portable, 2 stationary.
    "CFG-NAVSPG-DYNMODEL": (0x20110021, "E1"),
}
_NAMES_BY_ID = {key_id: name for name, (key_id, _) in KEYS.items()}
# Value formats by storage type; the size is also in bits 28-30 of every key ID.
_FORMATS = {"L": "<B", "U1": "<B", "E1": "<B", "X1": "<B", "I1": "<b", "U2": "<H", "E2": "<H", "X2": "<H",
            "I2": "<h", "U4": "<I", "E4": "<I", "X4": "<I", "I4": "<i", "U8": "<Q", "X8": "<Q", "I8": "<q"}
_SIZE_FIELD = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8}  # key ID bits 28-30 -> value bytes (1: a one-bit value in one byte)
_UNSIGNED = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}
LAYERS = {"ram": 0x01, "bbr": 0x03, "flash": 0x05}  # CFG-VALSET layers: RAM always, plus BBR or flash
GET_LAYERS = {"ram": 0, "bbr": 1, "flash": 2, "default": 7}  # CFG-VALGET reads one layer
LINK_KEYS = ("CFG-UART1-BAUDRATE",)  # change the line itself: sent alone and last, so only that ACK may be lost

# Messages the appliance may ask for: name -> (class, id).  NMEA sentences are class 0xF0 (standard messages).
MESSAGES: dict[str, tuple[int, int]] = {
    "NAV-PVT": (0x01, 0x07), "NAV-STATUS": (0x01, 0x03), "NAV-TIMEUTC": (0x01, 0x21), "NAV-TIMEGPS": (0x01, 0x20),
    "NAV-TIMELS": (0x01, 0x26), "NAV-TIMEGAL": (0x01, 0x25), "NAV-TIMEBDS": (0x01, 0x24), "NAV-SAT": (0x01, 0x35), "TIM-TP": (0x0D, 0x01), "TIM-SVIN": (0x0D, 0x04),
    "MON-HW": (0x0A, 0x09), "MON-RF": (0x0A, 0x38),
    "GGA": (NMEA_CLASS, 0x00), "GLL": (NMEA_CLASS, 0x01), "GSA": (NMEA_CLASS, 0x02), "GSV": (NMEA_CLASS, 0x03),
    "RMC": (NMEA_CLASS, 0x04), "VTG": (NMEA_CLASS, 0x05), "ZDA": (NMEA_CLASS, 0x08),
}
UNWANTED_NMEA = ("GLL", "VTG")  # on out of the box, read by nobody: off, to spare the line
# MON-HW is deprecated in generation 9, where MON-RF carries the same jamming state; a firmware that dropped its key
# would refuse a whole VALSET naming it, so generation 9 is asked for MON-RF only.  MON-RF does not exist on the M8.
GEN9_SKIPPED = frozenset({"MON-HW"})
M8_SKIPPED = frozenset({"MON-RF"})

# Constellation names (gnss.constellations) -> (enable key, L1 signal key or None, M8 gnssId or None).
CONSTELLATIONS: dict[str, tuple[str, str | None, int | None]] = {
    "gps": ("CFG-SIGNAL-GPS_ENA", "CFG-SIGNAL-GPS_L1CA_ENA", 0),
    "sbas": ("CFG-SIGNAL-SBAS_ENA", "CFG-SIGNAL-SBAS_L1CA_ENA", 1),
    "galileo": ("CFG-SIGNAL-GAL_ENA", "CFG-SIGNAL-GAL_E1_ENA", 2),
    "beidou": ("CFG-SIGNAL-BDS_ENA", "CFG-SIGNAL-BDS_B1_ENA", 3),
    "qzss": ("CFG-SIGNAL-QZSS_ENA", "CFG-SIGNAL-QZSS_L1CA_ENA", 5),
    "glonass": ("CFG-SIGNAL-GLO_ENA", "CFG-SIGNAL-GLO_L1_ENA", 6),
    "navic": ("CFG-SIGNAL-NAVIC_ENA", None, None),
}
_ALWAYS_SET = ("gps", "sbas", "galileo", "beidou", "qzss", "glonass")  # NavIC only when asked: not every F9 has it


def msgout_key(message: str) -> str:
    """The UART1 output-rate key of a message: ``"NAV-PVT"`` -> ``"CFG-MSGOUT-UBX_NAV_PVT_UART1"``."""
    if MESSAGES[message][0] == NMEA_CLASS:
        return f"CFG-MSGOUT-NMEA_ID_{message}_UART1"
    return f"CFG-MSGOUT-UBX_{message.replace('-', '_')}_UART1"


def key_id(name: str) -> int:
    """A key's ID from its name, or from a hex name (``"0x10310026"``) for a key outside the table."""
    if name in KEYS:
        return KEYS[name][0]
    if name.lower().startswith("0x"):
        return int(name, 16)
    raise ValueError(f"unknown configuration key {name!r}")


def key_name(ident: int) -> str:
    """A key's name, or its ID in hex when it is not in the table."""
    return _NAMES_BY_ID.get(ident, f"0x{ident:08x}")


def _value_format(ident: int) -> str:
    name = _NAMES_BY_ID.get(ident)
    if name is not None:
        return _FORMATS[KEYS[name][1]]
    size = _SIZE_FIELD.get((ident >> 28) & 0x07)
    if size is None:
        raise ValueError(f"key 0x{ident:08x}: size field {(ident >> 28) & 0x07} is not a value size")
    return _UNSIGNED[size]


def value_bytes(name: str, value: int) -> bytes:
    """A key's value as the receiver stores it; ValueError when it does not fit the key's type."""
    ident = key_id(name)
    fmt = _value_format(ident)
    if name in KEYS and KEYS[name][1] == "L" and value not in (0, 1):
        raise ValueError(f"{name}: {value} is not a boolean (0 or 1)")
    try:
        return struct.pack(fmt, value)
    except struct.error as exc:
        raise ValueError(f"{name}: {value} does not fit its type ({exc})") from None


def _pairs(data: bytes, what: str) -> list[tuple[int, int]]:
    """Concatenated key ID + value pairs -> [(key ID, value)]; the value's size comes from the key ID."""
    out, at = [], 0
    while at < len(data):
        if len(data) - at < 4:
            raise ValueError(f"{what}: {len(data) - at} stray bytes after the last value")
        ident = struct.unpack_from("<I", data, at)[0]
        fmt = _value_format(ident)
        size = struct.calcsize(fmt)
        if len(data) - at - 4 < size:
            raise ValueError(f"{what}: key {key_name(ident)} lacks its {size}-byte value")
        out.append((ident, struct.unpack_from(fmt, data, at + 4)[0]))
        at += 4 + size
    return out


def valset_payload(items: Sequence[tuple[str, int]], layers: str) -> bytes:
    """CFG-VALSET version 0 (no transaction): set ``items`` in RAM, and in BBR or flash when ``layers`` says so."""
    if layers not in LAYERS:
        raise ValueError(f"layers {layers!r}: expected one of {', '.join(LAYERS)}")
    if not 0 < len(items) <= MAX_KEYS:
        raise ValueError(f"CFG-VALSET takes 1 to {MAX_KEYS} keys, not {len(items)}")
    body = b"".join(struct.pack("<I", key_id(name)) + value_bytes(name, value) for name, value in items)
    return bytes((0, LAYERS[layers], 0, 0)) + body


def valset_payloads(items: Sequence[tuple[str, int]], layers: str) -> list[bytes]:
    """``items`` in as few CFG-VALSETs as the 64-key limit allows; the line's own keys (baud rate) come alone and
    last, since the receiver answers that one at the new speed."""
    rest = [item for item in items if item[0] not in LINK_KEYS]
    link = [item for item in items if item[0] in LINK_KEYS]
    chunks = [rest[i:i + MAX_KEYS] for i in range(0, len(rest), MAX_KEYS)] + ([link] if link else [])
    return [valset_payload(chunk, layers) for chunk in chunks]


def decode_valset(payload: bytes) -> tuple[int, list[tuple[int, int]]]:
    """CFG-VALSET -> (layers bit mask, [(key ID, value)]).  Versions 0 and 1 (with a transaction byte) share the
    layout."""
    if len(payload) < 4:
        raise ValueError(f"CFG-VALSET: {len(payload)} bytes, shorter than its 4-byte header")
    if payload[0] not in (0, 1):
        raise ValueError(f"CFG-VALSET: message version {payload[0]}")
    return payload[1], _pairs(payload[4:], "CFG-VALSET")


def valget_payload(keys: Sequence[str], layer: str = "ram") -> bytes:
    """CFG-VALGET request (version 0) for ``keys`` from one layer."""
    if layer not in GET_LAYERS:
        raise ValueError(f"layer {layer!r}: expected one of {', '.join(GET_LAYERS)}")
    if not 0 < len(keys) <= MAX_KEYS:
        raise ValueError(f"CFG-VALGET takes 1 to {MAX_KEYS} keys, not {len(keys)}")
    return struct.pack("<BBH", 0, GET_LAYERS[layer], 0) + b"".join(struct.pack("<I", key_id(k)) for k in keys)


def decode_valget_request(payload: bytes) -> tuple[int, int, list[int]]:
    """CFG-VALGET request -> (layer, position, key IDs)."""
    if len(payload) < 4 or (len(payload) - 4) % 4 or payload[0] != 0:
        raise ValueError(f"CFG-VALGET request: {len(payload)} bytes, version {payload[:1].hex() or 'none'}")
    layer, position = struct.unpack_from("<BH", payload, 1)
    return layer, position, [struct.unpack_from("<I", payload, at)[0] for at in range(4, len(payload), 4)]


def decode_valget(payload: bytes) -> dict[str, int]:
    """CFG-VALGET answer (version 1) -> {key name: value}; keys outside the table by their hex ID."""
    if len(payload) < 4:
        raise ValueError(f"CFG-VALGET: {len(payload)} bytes, shorter than its 4-byte header")
    if payload[0] != 1:
        raise ValueError(f"CFG-VALGET: version {payload[0]} is not an answer (version 1)")
    return {key_name(ident): value for ident, value in _pairs(payload[4:], "CFG-VALGET")}


def gen9_mismatches(items: Sequence[tuple[str, int]], read_back: dict[str, int]) -> list[str]:
    """What a read-back shows differently from what was set, one line per key (empty: all as set)."""
    return [f"{name}: set {value}, read {read_back.get(name, 'nothing')}" for name, value in items
            if read_back.get(name) != value]


def ack_of(msg_class: int, msg_id: int, payload: bytes) -> tuple[bool, int, int]:
    """ACK-ACK / ACK-NAK -> (acknowledged, class, id of the message answered)."""
    if msg_class != ACK or msg_id not in (ACK_NAK, ACK_ACK):
        raise ValueError(f"UBX 0x{msg_class:02x} 0x{msg_id:02x} is not ACK-ACK or ACK-NAK")
    if len(payload) != 2:
        raise ValueError(f"ACK: {len(payload)} bytes, expected 2")
    return msg_id == ACK_ACK, payload[0], payload[1]


@dataclass(frozen=True, slots=True)
class MonVer:
    sw_version: str
    hw_version: str
    extensions: tuple[str, ...]
    model: str  # "ZED-F9T"; "" when the receiver does not say
    firmware: str  # "TIM 2.20"; ""
    protocol: str  # "29.20"; ""


def mon_ver_poll() -> bytes:
    """The MON-VER poll frame (empty payload)."""
    return ubx_frame_bytes(MON, MON_VER, b"")


def _text(field: bytes, what: str) -> str:
    raw = field.split(b"\0", 1)[0]
    if any(not 0x20 <= byte < 0x7F for byte in raw):
        raise ValueError(f"MON-VER {what}: not printable ASCII")
    return raw.decode("ascii")


def decode_mon_ver(payload: bytes) -> MonVer:
    """MON-VER: swVersion (30 bytes), hwVersion (10), then 30-byte extensions such as ``FWVER=TIM 2.20``,
    ``PROTVER=29.20`` and ``MOD=ZED-F9T`` (older firmware writes ``PROTVER 14.00``)."""
    if len(payload) < 40 or (len(payload) - 40) % 30:
        raise ValueError(f"MON-VER: {len(payload)} bytes, expected 40 plus 30 per extension")
    extensions = tuple(_text(payload[at:at + 30], "extension") for at in range(40, len(payload), 30))
    fields = {}
    for ext in extensions:
        for tag in ("FWVER", "PROTVER", "MOD"):
            if ext[len(tag):len(tag) + 1] in ("=", " ") and ext.startswith(tag):
                fields.setdefault(tag, ext[len(tag) + 1:].strip())
    return MonVer(_text(payload[:30], "swVersion"), _text(payload[30:40], "hwVersion"), extensions,
                  fields.get("MOD", ""), fields.get("FWVER", ""), fields.get("PROTVER", ""))


def family_of(ver: MonVer) -> str:
    """"ublox9" when the receiver speaks the configuration-key interface, else "ublox8".  The M8 interface
    description ends at protocol 23.01; every later protocol has CFG-VALSET."""
    try:
        major, _, minor = ver.protocol.partition(".")
        newer = (int(major), int(minor or 0)) > (23, 1)
    except ValueError:
        newer = False  # no protocol version: a receiver older than the M8
    return "ublox9" if newer else "ublox8"


def _split(total: int, unit: int) -> tuple[int, int]:
    """A value in fine units -> (whole units, remainder); both carry the value's sign, as the _HP keys need."""
    whole = abs(total) // unit * (1 if total >= 0 else -1)
    return whole, total - whole * unit


def _mm10(metres: float) -> int:
    return round(metres * 10_000)  # 0.1 mm


def _constellation_items(constellations: Sequence[str]) -> list[tuple[str, int]]:
    unknown = set(constellations) - set(CONSTELLATIONS)
    if unknown:
        raise ValueError(f"unknown constellations {sorted(unknown)}: expected {', '.join(CONSTELLATIONS)}")
    items = []
    for name in (*_ALWAYS_SET, *(["navic"] if "navic" in constellations else [])):
        enable, signal, _ = CONSTELLATIONS[name]
        on = int(name in constellations)
        items.append((enable, on))
        if on and signal:
            items.append((signal, 1))  # a system is tracked only with one of its signals on
    return items


def _timing_items(plan: ReceiverPlan) -> list[tuple[str, int]]:
    if plan.mode == "survey":
        return [("CFG-TMODE-MODE", legacy.TMODE_SURVEY_IN), ("CFG-TMODE-SVIN_MIN_DUR", plan.survey_min_s),
                ("CFG-TMODE-SVIN_ACC_LIMIT", _mm10(plan.survey_acc_limit_m))]
    lat, lat_hp = _split(round(plan.fixed_lat_deg * 1e9), 100)
    lon, lon_hp = _split(round(plan.fixed_lon_deg * 1e9), 100)
    height, height_hp = _split(_mm10(plan.fixed_height_m), 100)
    return [("CFG-TMODE-MODE", legacy.TMODE_FIXED), ("CFG-TMODE-POS_TYPE", 1),
            ("CFG-TMODE-LAT", lat), ("CFG-TMODE-LAT_HP", lat_hp), ("CFG-TMODE-LON", lon),
            ("CFG-TMODE-LON_HP", lon_hp), ("CFG-TMODE-HEIGHT", height), ("CFG-TMODE-HEIGHT_HP", height_hp),
            ("CFG-TMODE-FIXED_POS_ACC", _mm10(plan.fixed_acc_m))]


def _pulse_items(plan: ReceiverPlan) -> list[tuple[str, int]]:
    period_us, length_us = plan.pulse_period_ms * 1000, plan.pulse_length_ms * 1000
    return [("CFG-TP-PULSE_DEF", 0), ("CFG-TP-PULSE_LENGTH_DEF", 1), ("CFG-TP-ANT_CABLEDELAY", plan.cable_delay_ns),
            ("CFG-TP-PERIOD_TP1", period_us), ("CFG-TP-PERIOD_LOCK_TP1", period_us),
            ("CFG-TP-LEN_TP1", length_us), ("CFG-TP-LEN_LOCK_TP1", length_us),
            ("CFG-TP-TP1_ENA", 1), ("CFG-TP-SYNC_GNSS_TP1", 1), ("CFG-TP-USE_LOCKED_TP1", 1),
            ("CFG-TP-ALIGN_TO_TOW_TP1", 1), ("CFG-TP-POL_TP1", int(plan.pulse_rising)), ("CFG-TP-TIMEGRID_TP1", 0)]


def message_rates(skipped: frozenset[str]) -> list[tuple[str, int]]:
    """(message, rate) for every message the appliance reads (1) and the factory NMEA it does not (0)."""
    wanted = [m for m in (*UBX_MESSAGES, *NMEA_MESSAGES) if m not in skipped]
    return [(m, 1) for m in wanted] + [(m, 0) for m in UNWANTED_NMEA]


def gen9_items(plan: ReceiverPlan) -> list[tuple[str, int]]:
    """The plan as key/value pairs, in the order to send them: constellations first (changing them restarts the
    receiver's tracking), the baud rate last.  Send with ``valset_payloads(items, plan.store)``."""
    items = _constellation_items(plan.constellations) if plan.constellations else []
    items.append(("CFG-NAVSPG-DYNMODEL", legacy.DYN_STATIONARY))
    items += _timing_items(plan) + _pulse_items(plan)
    items += [(msgout_key(m), rate) for m, rate in message_rates(GEN9_SKIPPED)]
    items += [("CFG-UART1INPROT-UBX", 1), ("CFG-UART1INPROT-NMEA", 1), ("CFG-UART1OUTPROT-UBX", 1),
              ("CFG-UART1OUTPROT-NMEA", 1), ("CFG-UART1-BAUDRATE", plan.baud)]
    for name, value in items:
        value_bytes(name, value)  # out of range for its type: say so here, naming the key
    return items


# --- M8T and older: one CFG-* message per function -------------------------------------------------------------

# The M8's own CFG-GNSS out of the box: gnssId -> (reserved, maximum tracking channels), 32 channels in use.
M8_CHANNELS = {0: (8, 16), 1: (1, 3), 2: (4, 8), 3: (8, 16), 4: (0, 8), 5: (0, 3), 6: (8, 14)}
M8_CHANNELS_USED = 32
M8_GNSS_IDS = {name: gid for name, (_, _, gid) in CONSTELLATIONS.items() if gid is not None}
SIG_L1 = 0x01  # sigCfgMask bit 0: GPS/SBAS/QZSS L1C/A, Galileo E1, BeiDou B1I, GLONASS L1
# An M8 receives at most two of the three carriers near L1 (u-blox GNSS firmware 3.01 release notes): GPS, Galileo,
# QZSS and SBAS at 1575.42 MHz, GLONASS at 1602 MHz, BeiDou at 1561.098 MHz.  GLONASS and BeiDou together leave no
# room for GPS or Galileo.
_M8_CARRIERS = {"gps": "1575", "sbas": "1575", "galileo": "1575", "qzss": "1575", "glonass": "1602",
                "beidou": "1561"}


def m8_carrier_conflict(constellations: Sequence[str]) -> str | None:
    """Why an M8 would refuse these constellations together, or None."""
    carriers = {_M8_CARRIERS[c] for c in constellations if c in _M8_CARRIERS}
    if len(carriers) > 2:
        return "an M8 receives two of GPS/Galileo (1575 MHz), GLONASS (1602 MHz) and BeiDou (1561 MHz), not three"
    return None


def m8_gnss(plan: ReceiverPlan, current: legacy.CfgGnss | None = None) -> legacy.CfgGnss:
    """CFG-GNSS enabling the plan's constellations.  Channel counts are kept: those of ``current`` (the receiver's
    answer to a CFG-GNSS poll) when given, else the M8's own defaults; systems the plan does not name are disabled,
    and blocks for systems the appliance does not know (IMES) are sent back as they were."""
    unknown = set(plan.constellations) - set(M8_GNSS_IDS)
    if unknown:
        raise ValueError(f"u-blox M8 receivers cannot track {', '.join(sorted(unknown))}")
    old = {b.gnss_id: b for b in current.blocks} if current else {}
    blocks = []
    for name in _ALWAYS_SET:
        gid = M8_GNSS_IDS[name]
        res, most = (old[gid].res_trk_ch, old[gid].max_trk_ch) if gid in old else M8_CHANNELS[gid]
        signals = (old[gid].flags & 0x00FF0000) if gid in old and old[gid].sig_cfg_mask else SIG_L1 << 16
        blocks.append(legacy.GnssBlock(gid, res, most, signals | int(name in plan.constellations)))
    blocks += [block for gid, block in old.items() if gid not in M8_GNSS_IDS.values()]
    hw, use = (current.num_trk_ch_hw, current.num_trk_ch_use) if current else (0, M8_CHANNELS_USED)
    return legacy.CfgGnss(hw, use, tuple(blocks))


def m8_tp5(plan: ReceiverPlan) -> legacy.CfgTp5:
    """CFG-TP5 for TIMEPULSE: the period and length, the same locked or not, on the UTC grid, aligned to the
    second and synchronised to GNSS time."""
    flags = (legacy.TP5_ACTIVE | legacy.TP5_LOCK_GNSS_FREQ | legacy.TP5_IS_LENGTH | legacy.TP5_ALIGN_TO_TOW
             | (legacy.TP5_POLARITY_RISING if plan.pulse_rising else 0) | (0 << legacy.TP5_GRID_SHIFT))
    period_us, length_us = plan.pulse_period_ms * 1000, plan.pulse_length_ms * 1000
    return legacy.CfgTp5(0, plan.cable_delay_ns, 0, period_us, period_us, length_us, length_us, 0, flags)


def m8_tmode2(plan: ReceiverPlan) -> legacy.CfgTmode2:
    """CFG-TMODE2: survey-in (duration s, accuracy limit mm) or the fixed position (1e-7 deg, cm, mm)."""
    svin_dur, svin_acc_mm = plan.survey_min_s, round(plan.survey_acc_limit_m * 1000)
    if plan.mode == "survey":
        return legacy.CfgTmode2(legacy.TMODE_SURVEY_IN, 0, 0, 0, 0, 0, svin_dur, svin_acc_mm)
    return legacy.CfgTmode2(legacy.TMODE_FIXED, legacy.TMODE2_LLA, round(plan.fixed_lat_deg * 1e7),
                            round(plan.fixed_lon_deg * 1e7), round(plan.fixed_height_m * 100),
                            round(plan.fixed_acc_m * 1000), svin_dur, svin_acc_mm)


def m8_nav5() -> legacy.CfgNav5:
    """CFG-NAV5 applying only the dynamic model: stationary."""
    return legacy.CfgNav5(mask=legacy.NAV5_MASK_DYN, dyn_model=legacy.DYN_STATIONARY)


def m8_messages(plan: ReceiverPlan) -> list[tuple[int, int, bytes]]:
    """(class, id, payload) to send, in order: constellations first (the receiver restarts its tracking), then the
    navigation model, timing mode, time pulse and message rates (on the port they arrive on), the port itself (its
    new speed applies at once), and a save to BBR or flash when the plan's store asks."""
    out = [(CFG, legacy.GNSS, m8_gnss(plan).payload())] if plan.constellations else []
    out += [(CFG, legacy.NAV5, m8_nav5().payload()), (CFG, legacy.TMODE2, m8_tmode2(plan).payload()),
            (CFG, legacy.TP5, m8_tp5(plan).payload())]
    out += [(CFG, legacy.MSG, legacy.CfgMsg(*MESSAGES[m], rate).payload()) for m, rate in message_rates(M8_SKIPPED)]
    out.append((CFG, legacy.PRT, legacy.CfgPrt(baud_rate=plan.baud).payload()))
    if plan.store != "ram":
        device = legacy.DEV_BBR if plan.store == "bbr" else legacy.DEV_FLASH
        out.append((CFG, legacy.CFG_CFG, legacy.CfgCfg(0, legacy.CFG_ALL_SECTIONS, 0, device).payload()))
    return out


def m8_readback_polls(plan: ReceiverPlan) -> list[tuple[int, int, bytes]]:
    """The polls (empty payloads) whose answers ``m8_mismatches`` checks against the plan."""
    ids = ([legacy.GNSS] if plan.constellations else []) + [legacy.NAV5, legacy.TMODE2, legacy.TP5, legacy.PRT]
    return [(CFG, msg_id, b"") for msg_id in ids]


def _differences(name: str, want: object, got: object, fields: Sequence[str]) -> list[str]:
    return [f"{name} {f}: set {getattr(want, f)}, read {getattr(got, f)}" for f in fields
            if getattr(want, f) != getattr(got, f)]


def m8_mismatches(plan: ReceiverPlan, msg_class: int, msg_id: int, payload: bytes) -> list[str]:
    """What an M8's answer to one of ``m8_readback_polls`` shows differently from the plan (empty: as set)."""
    if msg_class != CFG or msg_id not in (legacy.GNSS, legacy.NAV5, legacy.TMODE2, legacy.TP5, legacy.PRT):
        raise ValueError(f"UBX 0x{msg_class:02x} 0x{msg_id:02x} is not a read-back answer")
    if msg_id == legacy.TP5:
        fields = [f for f in legacy.CfgTp5.__dataclass_fields__ if f != "rf_group_delay_ns"]  # the receiver's own
        return _differences("CFG-TP5", m8_tp5(plan), legacy.CfgTp5.decode(payload), fields)
    if msg_id == legacy.TMODE2:
        want = m8_tmode2(plan)
        return _differences("CFG-TMODE2", want, legacy.CfgTmode2.decode(payload), list(want.__dataclass_fields__))
    if msg_id == legacy.NAV5:
        return _differences("CFG-NAV5", m8_nav5(), legacy.CfgNav5.decode(payload), ["dyn_model"])
    if msg_id == legacy.PRT:
        got = legacy.CfgPrt.decode(payload)
        both = legacy.PROTO_UBX | legacy.PROTO_NMEA
        out = _differences("CFG-PRT", legacy.CfgPrt(baud_rate=plan.baud), got, ["port_id", "baud_rate"])
        return out + [f"CFG-PRT {f}: UBX and NMEA not both on" for f in ("in_proto_mask", "out_proto_mask")
                      if getattr(got, f) & both != both]
    blocks = {b.gnss_id: b for b in legacy.CfgGnss.decode(payload).blocks}
    out = []
    for name in _ALWAYS_SET:
        gid, want = M8_GNSS_IDS[name], name in plan.constellations
        block = blocks.get(gid)
        if block is None or block.enabled != want or (want and not block.sig_cfg_mask & SIG_L1):
            out.append(f"CFG-GNSS {name}: set {'on' if want else 'off'}, read {_gnss_state(block)}")
    return out


def _gnss_state(block: legacy.GnssBlock | None) -> str:
    if block is None:
        return "no block"
    return f"{'on' if block.enabled else 'off'} (signals 0x{block.sig_cfg_mask:02x})"
