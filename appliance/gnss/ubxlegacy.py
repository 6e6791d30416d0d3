"""u-blox CFG-* messages of the M8 generation and older: payload <-> typed record, one dataclass per message.

Pure core.  Layouts follow the u-blox M8 receiver description (UBX-13003221, "UBX-CFG"): CFG-PRT (UART form), CFG-MSG,
CFG-TP5 (version 1), CFG-TMODE2, CFG-GNSS, CFG-NAV5, CFG-CFG and CFG-RST.  Field names are the description's, in
snake case, so the code greps against it; a field's unit is in its name where it has one.  Generation 9 receivers
still accept most of these (deprecated there in favour of configuration keys); CFG-TMODE2 belongs to M8 timing
receivers only.  Every decoder raises ValueError, naming the message, on a payload of the wrong length.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

CFG = 0x06
PRT, MSG, RST, CFG_CFG, NAV5, TP5, TMODE2, GNSS = 0x00, 0x01, 0x04, 0x09, 0x24, 0x31, 0x3D, 0x3E
NAMES = {PRT: "CFG-PRT", MSG: "CFG-MSG", RST: "CFG-RST", CFG_CFG: "CFG-CFG", NAV5: "CFG-NAV5", TP5: "CFG-TP5",
         TMODE2: "CFG-TMODE2", GNSS: "CFG-GNSS"}

# CFG-PRT, UART: mode bits 6-7 charLen (3: 8 bits), 9-11 parity (4: none), 12-13 nStopBits (0: 1); protocol masks.
PRT_MODE_8N1 = (3 << 6) | (4 << 9)
PROTO_UBX, PROTO_NMEA, PROTO_RTCM3 = 0x01, 0x02, 0x20
UART1 = 1

# CFG-TP5 flags.
TP5_ACTIVE, TP5_LOCK_GNSS_FREQ, TP5_LOCKED_OTHER_SET, TP5_IS_FREQ = 0x01, 0x02, 0x04, 0x08
TP5_IS_LENGTH, TP5_ALIGN_TO_TOW, TP5_POLARITY_RISING = 0x10, 0x20, 0x40
TP5_GRID_SHIFT = 7  # gridUtcGnss, 4 bits: 0 UTC, 1 GPS, 2 GLONASS, 3 BeiDou, 4 Galileo

# CFG-TMODE2 timeMode and flags.
TMODE_DISABLED, TMODE_SURVEY_IN, TMODE_FIXED = 0, 1, 2
TMODE2_LLA = 0x01  # position given as latitude, longitude, altitude (else ECEF)

# CFG-NAV5: mask bit 0 applies dynModel; dynModel 2 is "stationary".
NAV5_MASK_DYN = 0x0001
DYN_STATIONARY = 2

# CFG-CFG: every section of the configuration (ioPort, msgConf, infMsg, navConf, rxmConf, senConf, rinvConf,
# antConf, logConf; ftsConf, for FTS products only, left out) and the storage devices.
CFG_ALL_SECTIONS = 0x00000F1F
DEV_BBR, DEV_FLASH = 0x01, 0x02


def _need(name: str, payload: bytes, *lengths: int) -> None:
    if len(payload) not in lengths:
        expected = " or ".join(str(n) for n in lengths)
        raise ValueError(f"{name}: {len(payload)} bytes, expected {expected}")


@dataclass(frozen=True, slots=True)
class CfgPrt:
    """CFG-PRT for a UART (20 bytes)."""

    port_id: int = UART1
    tx_ready: int = 0
    mode: int = PRT_MODE_8N1
    baud_rate: int = 9600
    in_proto_mask: int = PROTO_UBX | PROTO_NMEA
    out_proto_mask: int = PROTO_UBX | PROTO_NMEA
    flags: int = 0

    def payload(self) -> bytes:
        return struct.pack("<BxHIIHHH2x", self.port_id, self.tx_ready, self.mode, self.baud_rate,
                           self.in_proto_mask, self.out_proto_mask, self.flags)

    @classmethod
    def decode(cls, payload: bytes) -> CfgPrt:
        _need("CFG-PRT", payload, 20)
        return cls(*struct.unpack("<BxHIIHHH2x", payload))


@dataclass(frozen=True, slots=True)
class CfgMsg:
    """CFG-MSG: a message's output rate.  ``rate`` is on the port the command arrives on (the 3-byte form);
    the 8-byte form gives one rate per port (I2C, UART1, UART2, USB, SPI, reserved)."""

    msg_class: int
    msg_id: int
    rate: int | None = None  # None: a poll (2 bytes)
    rates: tuple[int, ...] | None = None

    def payload(self) -> bytes:
        if self.rates is not None:
            return struct.pack("<BB6B", self.msg_class, self.msg_id, *self.rates)
        if self.rate is None:
            return bytes((self.msg_class, self.msg_id))
        return bytes((self.msg_class, self.msg_id, self.rate))

    @classmethod
    def decode(cls, payload: bytes) -> CfgMsg:
        _need("CFG-MSG", payload, 2, 3, 8)
        if len(payload) == 8:
            return cls(payload[0], payload[1], rates=tuple(payload[2:]))
        return cls(payload[0], payload[1], payload[2] if len(payload) == 3 else None)


@dataclass(frozen=True, slots=True)
class CfgTp5:
    """CFG-TP5 version 1 (32 bytes).  ``freq_period*`` are periods in us and ``pulse_len_ratio*`` lengths in us when
    the flags say period (isFreq clear) and length (isLength set), the only way the appliance uses them."""

    tp_idx: int = 0
    ant_cable_delay_ns: int = 0
    rf_group_delay_ns: int = 0
    freq_period: int = 1_000_000
    freq_period_lock: int = 1_000_000
    pulse_len_ratio: int = 0
    pulse_len_ratio_lock: int = 0
    user_config_delay_ns: int = 0
    flags: int = 0

    def payload(self) -> bytes:
        return struct.pack("<BB2xhhIIIIiI", self.tp_idx, 1, self.ant_cable_delay_ns, self.rf_group_delay_ns,
                           self.freq_period, self.freq_period_lock, self.pulse_len_ratio, self.pulse_len_ratio_lock,
                           self.user_config_delay_ns, self.flags)

    @classmethod
    def decode(cls, payload: bytes) -> CfgTp5:
        _need("CFG-TP5", payload, 32)
        tp_idx, _version, *rest = struct.unpack("<BB2xhhIIIIiI", payload)
        return cls(tp_idx, *rest)


@dataclass(frozen=True, slots=True)
class CfgTmode2:
    """CFG-TMODE2 (28 bytes): survey-in or a fixed antenna position.  With the LLA flag the position is latitude
    and longitude in 1e-7 deg and altitude in cm above the ellipsoid, else ECEF in cm."""

    time_mode: int = TMODE_DISABLED
    flags: int = 0
    ecef_x_or_lat: int = 0
    ecef_y_or_lon: int = 0
    ecef_z_or_alt: int = 0
    fixed_pos_acc_mm: int = 0
    svin_min_dur_s: int = 0
    svin_acc_limit_mm: int = 0

    def payload(self) -> bytes:
        return struct.pack("<BxHiiiIII", self.time_mode, self.flags, self.ecef_x_or_lat, self.ecef_y_or_lon,
                           self.ecef_z_or_alt, self.fixed_pos_acc_mm, self.svin_min_dur_s, self.svin_acc_limit_mm)

    @classmethod
    def decode(cls, payload: bytes) -> CfgTmode2:
        _need("CFG-TMODE2", payload, 28)
        return cls(*struct.unpack("<BxHiiiIII", payload))


@dataclass(frozen=True, slots=True)
class GnssBlock:
    """One system's block in CFG-GNSS: reserved and maximum tracking channels, flags (bit 0 enable, bits 16-23
    sigCfgMask)."""

    gnss_id: int
    res_trk_ch: int
    max_trk_ch: int
    flags: int

    @property
    def enabled(self) -> bool:
        return bool(self.flags & 0x01)

    @property
    def sig_cfg_mask(self) -> int:
        return (self.flags >> 16) & 0xFF


@dataclass(frozen=True, slots=True)
class CfgGnss:
    """CFG-GNSS version 0: tracking channels and one block per system."""

    num_trk_ch_hw: int
    num_trk_ch_use: int
    blocks: tuple[GnssBlock, ...]

    def payload(self) -> bytes:
        head = struct.pack("<BBBB", 0, self.num_trk_ch_hw, self.num_trk_ch_use, len(self.blocks))
        return head + b"".join(struct.pack("<BBBxI", b.gnss_id, b.res_trk_ch, b.max_trk_ch, b.flags)
                               for b in self.blocks)

    @classmethod
    def decode(cls, payload: bytes) -> CfgGnss:
        if len(payload) < 4:
            raise ValueError(f"CFG-GNSS: {len(payload)} bytes, expected at least 4")
        version, hw, use, count = struct.unpack_from("<BBBB", payload)
        if version != 0:
            raise ValueError(f"CFG-GNSS: message version {version}, expected 0")
        _need("CFG-GNSS", payload, 4 + 8 * count)
        blocks = tuple(GnssBlock(*struct.unpack_from("<BBBxI", payload, 4 + 8 * i)) for i in range(count))
        return cls(hw, use, blocks)


@dataclass(frozen=True, slots=True)
class CfgNav5:
    """CFG-NAV5 (36 bytes): navigation engine settings; ``mask`` says which fields a set applies."""

    mask: int = NAV5_MASK_DYN
    dyn_model: int = 0
    fix_mode: int = 0
    fixed_alt_cm: int = 0
    fixed_alt_var: int = 0  # 0.0001 m^2
    min_elev_deg: int = 0
    dr_limit_s: int = 0
    p_dop: int = 0  # 0.1
    t_dop: int = 0  # 0.1
    p_acc_m: int = 0
    t_acc_m: int = 0
    static_hold_thresh_cm_s: int = 0
    dgnss_timeout_s: int = 0
    cno_thresh_num_svs: int = 0
    cno_thresh_dbhz: int = 0
    static_hold_max_dist_m: int = 0
    utc_standard: int = 0

    _FORMAT = "<HBBiIbBHHHHBBBB2xHB5x"

    def payload(self) -> bytes:
        return struct.pack(self._FORMAT, self.mask, self.dyn_model, self.fix_mode, self.fixed_alt_cm,
                           self.fixed_alt_var, self.min_elev_deg, self.dr_limit_s, self.p_dop, self.t_dop,
                           self.p_acc_m, self.t_acc_m, self.static_hold_thresh_cm_s, self.dgnss_timeout_s,
                           self.cno_thresh_num_svs, self.cno_thresh_dbhz, self.static_hold_max_dist_m,
                           self.utc_standard)

    @classmethod
    def decode(cls, payload: bytes) -> CfgNav5:
        _need("CFG-NAV5", payload, 36)
        return cls(*struct.unpack(cls._FORMAT, payload))


@dataclass(frozen=True, slots=True)
class CfgCfg:
    """CFG-CFG: clear, save and load configuration sections; ``device_mask`` None is the 12-byte form (the
    receiver's default devices)."""

    clear_mask: int = 0
    save_mask: int = 0
    load_mask: int = 0
    device_mask: int | None = None

    def payload(self) -> bytes:
        head = struct.pack("<III", self.clear_mask, self.save_mask, self.load_mask)
        return head if self.device_mask is None else head + bytes((self.device_mask,))

    @classmethod
    def decode(cls, payload: bytes) -> CfgCfg:
        _need("CFG-CFG", payload, 12, 13)
        masks = struct.unpack_from("<III", payload)
        return cls(*masks, payload[12] if len(payload) == 13 else None)


@dataclass(frozen=True, slots=True)
class CfgRst:
    """CFG-RST: which navigation data to clear and how to reset (0 hardware, 1 software, 2 GNSS only,
    4 hardware after shutdown, 8 GNSS stop, 9 GNSS start)."""

    nav_bbr_mask: int
    reset_mode: int

    @classmethod
    def decode(cls, payload: bytes) -> CfgRst:
        _need("CFG-RST", payload, 4)
        return cls(*struct.unpack("<HBx", payload))
