"""A simulated u-blox receiver's command side: takes the bytes a driver writes, answers them, keeps the configuration.

Pure (the simulated world).  One store of configuration keys (``gnss/ubxcfg.py``'s table) stands for the receiver's
configuration in both personalities, with the three layers a real one has: RAM (in force), battery-backed RAM and
flash (kept over a reset), over the factory defaults.  Generation 9 (ZED-F9T) is set with CFG-VALSET and read with
CFG-VALGET; generation 8 (M8T) with CFG-PRT, -MSG, -TP5, -TMODE2, -GNSS, -NAV5 and -CFG, which land on the same keys.
As the F9 interface description documents, generation 9 still accepts those legacy messages (deprecated), except
CFG-TMODE2, an M8 timing message it does not have; an M8 has no CFG-VALSET or CFG-VALGET.  Either NAKs a CFG message
it does not know.  What the configuration means is exposed as plain attributes (``messages``, ``timing_mode``, ...).

What the simulation leaves out, and refuses rather than pretends: keys outside the table, VALSET transactions, time
pulse 2, frequency or duty-cycle pulses, a user delay, ECEF positions, ports other than UART1, other character
formats than 8N1, IMES.  The line speed is an attribute only (bytes are not re-timed).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from appliance.gnss import ubxcfg
from appliance.gnss import ubxlegacy as legacy
from appliance.gnss.framer import Framer, UbxFrame, ubx_frame_bytes
from appliance.gnss.ubxcfg import CFG, KEYS, MESSAGES, NMEA_CLASS, key_name, msgout_key

BAUDS = frozenset({4800, 9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600})
_DYN_MODELS = (0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)  # portable, stationary, pedestrian ... (1 is reserved)
# Values a receiver accepts beyond what fits the key's type.
_ALLOWED: dict[str, range | tuple[int, ...] | frozenset[int]] = {
    "CFG-TMODE-MODE": range(3), "CFG-TMODE-POS_TYPE": range(2), "CFG-TP-PULSE_DEF": range(2),
    "CFG-TP-PULSE_LENGTH_DEF": range(2), "CFG-TP-TIMEGRID_TP1": range(5), "CFG-NAVSPG-DYNMODEL": _DYN_MODELS,
    "CFG-TMODE-LAT": range(-900_000_000, 900_000_001), "CFG-TMODE-LON": range(-1_800_000_000, 1_800_000_001),
    "CFG-TMODE-LAT_HP": range(-99, 100), "CFG-TMODE-LON_HP": range(-99, 100), "CFG-TMODE-HEIGHT_HP": range(-99, 100),
    "CFG-TP-PERIOD_TP1": range(1, 2**32), "CFG-TP-PERIOD_LOCK_TP1": range(1, 2**32), "CFG-UART1-BAUDRATE": BAUDS,
}
_NMEA_OUT_OF_THE_BOX = ("GGA", "GLL", "GSA", "GSV", "RMC", "VTG")
_PULSES = (("CFG-TP-PERIOD_TP1", "CFG-TP-LEN_TP1"), ("CFG-TP-PERIOD_LOCK_TP1", "CFG-TP-LEN_LOCK_TP1"))


def factory(generation: int) -> dict[str, int]:
    """A receiver's configuration out of the box: a ZED-F9T (generation 9) or an M8T.  Both: timing mode off,
    portable model, NMEA GGA/GLL/GSA/GSV/RMC/VTG on UART1 with UBX and NMEA in and out, a 1 Hz pulse rising on the
    UTC second, 100 ms long once locked, behind a 50 ns cable delay.  The F9T tracks every system but NavIC at
    38400 baud; the M8 runs 9600 baud with GPS, GLONASS, SBAS and QZSS (Galileo and BeiDou off)."""
    values = {name: 0 for name in KEYS}
    values.update({
        "CFG-TP-PULSE_LENGTH_DEF": 1, "CFG-TP-ANT_CABLEDELAY": 50, "CFG-TP-PERIOD_TP1": 1_000_000,
        "CFG-TP-PERIOD_LOCK_TP1": 1_000_000, "CFG-TP-LEN_LOCK_TP1": 100_000, "CFG-TP-TP1_ENA": 1,
        "CFG-TP-SYNC_GNSS_TP1": 1, "CFG-TP-USE_LOCKED_TP1": 1, "CFG-TP-ALIGN_TO_TOW_TP1": 1, "CFG-TP-POL_TP1": 1,
        "CFG-UART1INPROT-UBX": 1, "CFG-UART1INPROT-NMEA": 1, "CFG-UART1OUTPROT-UBX": 1, "CFG-UART1OUTPROT-NMEA": 1,
    })
    values.update({msgout_key(m): 1 for m in _NMEA_OUT_OF_THE_BOX})
    tracked = ("gps", "sbas", "galileo", "beidou", "qzss", "glonass") if generation >= 9 else (
        "gps", "sbas", "qzss", "glonass")
    for name in tracked:
        enable, signal, _ = ubxcfg.CONSTELLATIONS[name]
        values[enable] = 1
    values.update({signal: 1 for _, signal, _ in ubxcfg.CONSTELLATIONS.values() if signal})
    values["CFG-UART1-BAUDRATE"] = 38400 if generation >= 9 else 9600
    return values


class _Refused(Exception):
    """The receiver answers ACK-NAK."""


class SimUblox:
    """Feed it what a driver writes (``accept``); it returns its answers as UBX frames.

    Knobs for tests, by key name (``"CFG-TP-LEN_TP1"``) or message name (``"CFG-TP5"``, ``"MON-VER"``, and for
    CFG-MSG the message whose rate it sets, ``"NAV-PVT"``): ``refuse`` answers ACK-NAK and changes nothing,
    ``silent`` never answers, ``readback_wrong`` (key names) reports a value other than the one held, in a VALGET
    answer or an M8 poll answer alike.
    """

    def __init__(self, generation: int = 9, model: str | None = None, firmware: str | None = None,
                 protocol: str | None = None) -> None:
        self.generation = generation
        modern = generation >= 9
        self.model = model or ("ZED-F9T" if modern else "NEO-M8T")
        self.firmware = firmware or ("TIM 2.20" if modern else "TIM 1.10")
        self.protocol = protocol or ("29.20" if modern else "22.00")
        self.refuse: set[str] = set()
        self.silent: set[str] = set()
        self.readback_wrong: set[str] = set()
        self._factory = factory(generation)
        self._bbr: dict[str, int] = {}
        self._flash: dict[str, int] = {}
        self._ram: dict[str, int] = {}
        self._catalogue = set(MESSAGES) - (set() if modern else ubxcfg.M8_SKIPPED)  # what this receiver can send
        handlers: dict[tuple[int, int], Callable[[bytes], bytes]] = {
            (ubxcfg.MON, ubxcfg.MON_VER): self._mon_ver, (CFG, legacy.PRT): self._prt, (CFG, legacy.MSG): self._msg,
            (CFG, legacy.TP5): self._tp5, (CFG, legacy.GNSS): self._gnss, (CFG, legacy.NAV5): self._nav5,
            (CFG, legacy.CFG_CFG): self._cfg, (CFG, legacy.RST): self._rst}
        if modern:
            handlers.update({(CFG, ubxcfg.VALSET): self._valset, (CFG, ubxcfg.VALGET): self._valget})
        else:
            handlers[(CFG, legacy.TMODE2)] = self._tmode2
        self._handlers = handlers
        self.reset()

    # --- the line ---------------------------------------------------------------------------------------------

    def accept(self, data: bytes) -> bytes:
        """Bytes written to the receiver -> the frames it answers with, in order."""
        out = bytearray()
        for frame in self._framer.feed(data):
            if isinstance(frame, UbxFrame) and self._ram["CFG-UART1INPROT-UBX"]:
                out += self._answer(frame.msg_class, frame.msg_id, frame.payload)
        return bytes(out)

    def reset(self) -> None:
        """A reset or power cycle: RAM is rebuilt from the factory defaults, then flash, then battery-backed RAM
        (which wins), and a half-received frame is lost."""
        self._ram = {**self._factory, **self._flash, **self._bbr}
        self._framer = Framer()
        self._derive()

    def value(self, name: str, layer: str = "ram") -> int | None:
        """What a layer holds for a key (None: nothing in that layer), as it is, whatever ``readback_wrong`` says."""
        held = {"ram": self._ram, "bbr": self._bbr, "flash": self._flash, "default": self._factory}[layer]
        return held.get(name)

    def _answer(self, msg_class: int, msg_id: int, payload: bytes) -> bytes:
        nak = ubx_frame_bytes(ubxcfg.ACK, ubxcfg.ACK_NAK, bytes((msg_class, msg_id)))
        handler = self._handlers.get((msg_class, msg_id))
        if handler is None:
            return nak if msg_class == CFG else b""  # every CFG message is answered; others need not be
        subjects = {_COMMANDS[(msg_class, msg_id)], *self._subjects(msg_class, msg_id, payload)}
        if subjects & self.silent:
            return b""
        if subjects & self.refuse:
            return nak
        try:
            reply = handler(payload)
        except (_Refused, ValueError):
            return nak
        self._derive()
        if msg_class != CFG or msg_id == legacy.RST:
            return reply  # MON-VER is answered, not acknowledged; a reset acknowledges nothing
        return reply + ubx_frame_bytes(ubxcfg.ACK, ubxcfg.ACK_ACK, bytes((msg_class, msg_id)))

    def _subjects(self, msg_class: int, msg_id: int, payload: bytes) -> set[str]:
        try:
            if (msg_class, msg_id) == (CFG, ubxcfg.VALSET):
                return {key_name(ident) for ident, _ in ubxcfg.decode_valset(payload)[1]}
            if (msg_class, msg_id) == (CFG, ubxcfg.VALGET):
                return {key_name(ident) for ident in ubxcfg.decode_valget_request(payload)[2]}
            if (msg_class, msg_id) == (CFG, legacy.MSG) and len(payload) >= 2:
                return {name for name, ids in MESSAGES.items() if ids == (payload[0], payload[1])}
        except ValueError:
            pass  # the handler NAKs it
        return set()

    # --- the configuration store ------------------------------------------------------------------------------

    def _check(self, name: str, value: int) -> None:
        if name not in KEYS:
            raise _Refused(name)
        ubxcfg.value_bytes(name, value)  # fits the type, booleans 0 or 1
        if name in _ALLOWED and value not in _ALLOWED[name]:
            raise _Refused(name)

    def _set(self, changes: dict[str, int], ram: bool = True, bbr: bool = False, flash: bool = False) -> None:
        """Apply changes to the chosen layers, all or nothing."""
        for name, value in changes.items():
            self._check(name, value)
        if ram:
            after = {**self._ram, **changes}
            for period, length in _PULSES:
                if after["CFG-TP-PULSE_LENGTH_DEF"] == 1 and after[length] >= after[period]:
                    raise _Refused(length)  # a pulse as long as its period
            self._ram = after
        for chosen, layer in ((bbr, self._bbr), (flash, self._flash)):
            if chosen:
                layer.update(changes)

    def _reported(self, name: str, value: int) -> int:
        if name not in self.readback_wrong:
            return value
        if KEYS[name][1] == "L":
            return 1 - value
        try:
            ubxcfg.value_bytes(name, value + 1)
            return value + 1
        except ValueError:
            return value - 1

    def _get(self, name: str) -> int:
        """A RAM value as a poll answer reports it."""
        return self._reported(name, self._ram[name])

    def _derive(self) -> None:
        v = self._ram.__getitem__
        out = {True: v("CFG-UART1OUTPROT-NMEA"), False: v("CFG-UART1OUTPROT-UBX")}
        self.messages: set[str] = {m for m in self._catalogue if v(msgout_key(m)) >= 1
                                   and out[MESSAGES[m][0] == NMEA_CLASS]}
        self.timing_mode = ("disabled", "survey", "fixed")[v("CFG-TMODE-MODE")]
        self.survey_min_s = v("CFG-TMODE-SVIN_MIN_DUR")
        self.survey_acc_limit_m = v("CFG-TMODE-SVIN_ACC_LIMIT") / 10_000
        self.fixed_llh = (v("CFG-TMODE-LAT") * 1e-7 + v("CFG-TMODE-LAT_HP") * 1e-9,
                          v("CFG-TMODE-LON") * 1e-7 + v("CFG-TMODE-LON_HP") * 1e-9,
                          v("CFG-TMODE-HEIGHT") / 100 + v("CFG-TMODE-HEIGHT_HP") / 10_000)
        self.fixed_acc_m = v("CFG-TMODE-FIXED_POS_ACC") / 10_000
        locked = v("CFG-TP-USE_LOCKED_TP1")
        self.pulse_enabled = bool(v("CFG-TP-TP1_ENA"))
        self.pulse_period_ms = v("CFG-TP-PERIOD_LOCK_TP1" if locked else "CFG-TP-PERIOD_TP1") / 1000
        self.pulse_length_ms = v("CFG-TP-LEN_LOCK_TP1" if locked else "CFG-TP-LEN_TP1") / 1000
        self.pulse_rising = bool(v("CFG-TP-POL_TP1"))
        self.cable_delay_ns = v("CFG-TP-ANT_CABLEDELAY")
        self.constellations: set[str] = {name for name, (enable, signal, _) in ubxcfg.CONSTELLATIONS.items()
                                         if v(enable) and (signal is None or v(signal))}
        self.baud = v("CFG-UART1-BAUDRATE")
        self.dynamic_model = v("CFG-NAVSPG-DYNMODEL")

    # --- generation 9: configuration keys ---------------------------------------------------------------------

    def _valset(self, payload: bytes) -> bytes:
        layers, pairs = ubxcfg.decode_valset(payload)
        if payload[0] != 0 or not layers or layers & ~0x07:
            raise _Refused("transactions and unknown layers are not simulated")
        changes = {key_name(ident): value for ident, value in pairs}
        self._set(changes, ram=bool(layers & 1), bbr=bool(layers & 2), flash=bool(layers & 4))
        return b""

    def _valget(self, payload: bytes) -> bytes:
        layer, position, idents = ubxcfg.decode_valget_request(payload)
        held = {0: self._ram, 1: self._bbr, 2: self._flash, 7: self._factory}.get(layer)
        names = [key_name(ident) for ident in idents]
        if held is None or not 0 < len(names) <= ubxcfg.MAX_KEYS or any(n not in KEYS for n in names):
            raise _Refused("layer or keys")
        body = b"".join(struct.pack("<I", KEYS[n][0]) + ubxcfg.value_bytes(n, self._reported(n, held[n]))
                        for n in names if n in held)  # a key a layer does not hold is left out
        return ubx_frame_bytes(CFG, ubxcfg.VALGET, struct.pack("<BBH", 1, layer, position) + body)

    # --- both: MON-VER and the legacy CFG messages ------------------------------------------------------------

    def _mon_ver(self, payload: bytes) -> bytes:
        if payload:
            return b""  # not a poll
        modern = self.generation >= 9
        sw, hw = ("EXT CORE 1.00 (3fda8e)", "00190000") if modern else ("EXT CORE 3.01 (111141)", "00080000")
        extensions = ["ROM BASE 0x118B2060" if modern else "ROM BASE 2.01 (75331)", f"FWVER={self.firmware}",
                      f"PROTVER={self.protocol}", f"MOD={self.model}", "GPS;GLO;GAL;BDS",
                      "SBAS;QZSS" if modern else "SBAS;IMES;QZSS", *(["NAVIC"] if modern else [])]
        fields = [sw.encode().ljust(30, b"\0"), hw.encode().ljust(10, b"\0")]
        fields += [e.encode().ljust(30, b"\0") for e in extensions]
        return ubx_frame_bytes(ubxcfg.MON, ubxcfg.MON_VER, b"".join(fields))

    def _prt(self, payload: bytes) -> bytes:
        if len(payload) <= 1:
            if payload and payload[0] != legacy.UART1:
                raise _Refused("only UART1 is simulated")
            g = self._get
            in_mask = legacy.PROTO_UBX * g("CFG-UART1INPROT-UBX") | legacy.PROTO_NMEA * g("CFG-UART1INPROT-NMEA")
            out_mask = legacy.PROTO_UBX * g("CFG-UART1OUTPROT-UBX") | legacy.PROTO_NMEA * g("CFG-UART1OUTPROT-NMEA")
            answer = legacy.CfgPrt(legacy.UART1, 0, legacy.PRT_MODE_8N1, g("CFG-UART1-BAUDRATE"), in_mask, out_mask)
            return ubx_frame_bytes(CFG, legacy.PRT, answer.payload())
        prt = legacy.CfgPrt.decode(payload)
        eight_n_one = (prt.mode >> 6) & 3 == 3 and (prt.mode >> 9) & 6 == 4 and (prt.mode >> 12) & 3 == 0
        if prt.port_id != legacy.UART1 or not eight_n_one:
            raise _Refused("only UART1 at 8N1 is simulated")
        self._set({"CFG-UART1-BAUDRATE": prt.baud_rate,
                   "CFG-UART1INPROT-UBX": int(bool(prt.in_proto_mask & legacy.PROTO_UBX)),
                   "CFG-UART1INPROT-NMEA": int(bool(prt.in_proto_mask & legacy.PROTO_NMEA)),
                   "CFG-UART1OUTPROT-UBX": int(bool(prt.out_proto_mask & legacy.PROTO_UBX)),
                   "CFG-UART1OUTPROT-NMEA": int(bool(prt.out_proto_mask & legacy.PROTO_NMEA))})
        return b""

    def _msg(self, payload: bytes) -> bytes:
        msg = legacy.CfgMsg.decode(payload)
        names = [n for n in self._catalogue if MESSAGES[n] == (msg.msg_class, msg.msg_id)]
        if not names:
            raise _Refused("a message this simulated receiver does not send")
        key = msgout_key(names[0])
        if msg.rates is None and msg.rate is None:
            rates = (0, self._get(key), 0, 0, 0, 0)
            return ubx_frame_bytes(CFG, legacy.MSG, legacy.CfgMsg(msg.msg_class, msg.msg_id, rates=rates).payload())
        self._set({key: msg.rate if msg.rates is None else msg.rates[legacy.UART1]})  # the 3-byte form: this port
        return b""

    def _tp5(self, payload: bytes) -> bytes:
        if len(payload) <= 1:
            if payload and payload[0] != 0:
                raise _Refused("only TIMEPULSE is simulated")
            g = self._get
            flags = (legacy.TP5_ACTIVE * g("CFG-TP-TP1_ENA") | legacy.TP5_LOCK_GNSS_FREQ * g("CFG-TP-SYNC_GNSS_TP1")
                     | legacy.TP5_LOCKED_OTHER_SET * g("CFG-TP-USE_LOCKED_TP1")
                     | legacy.TP5_IS_FREQ * g("CFG-TP-PULSE_DEF")
                     | legacy.TP5_IS_LENGTH * g("CFG-TP-PULSE_LENGTH_DEF")
                     | legacy.TP5_ALIGN_TO_TOW * g("CFG-TP-ALIGN_TO_TOW_TP1")
                     | legacy.TP5_POLARITY_RISING * g("CFG-TP-POL_TP1")
                     | g("CFG-TP-TIMEGRID_TP1") << legacy.TP5_GRID_SHIFT)
            answer = legacy.CfgTp5(0, g("CFG-TP-ANT_CABLEDELAY"), 0, g("CFG-TP-PERIOD_TP1"),
                                   g("CFG-TP-PERIOD_LOCK_TP1"), g("CFG-TP-LEN_TP1"), g("CFG-TP-LEN_LOCK_TP1"), 0, flags)
            return ubx_frame_bytes(CFG, legacy.TP5, answer.payload())
        tp = legacy.CfgTp5.decode(payload)
        if tp.tp_idx != 0 or tp.flags & legacy.TP5_IS_FREQ or not tp.flags & legacy.TP5_IS_LENGTH \
                or tp.user_config_delay_ns:
            raise _Refused("only TIMEPULSE, by period and length, without a user delay, is simulated")
        def bit(mask: int) -> int:
            return int(bool(tp.flags & mask))

        self._set({"CFG-TP-PULSE_DEF": 0, "CFG-TP-PULSE_LENGTH_DEF": 1, "CFG-TP-ANT_CABLEDELAY": tp.ant_cable_delay_ns,
                   "CFG-TP-PERIOD_TP1": tp.freq_period, "CFG-TP-PERIOD_LOCK_TP1": tp.freq_period_lock,
                   "CFG-TP-LEN_TP1": tp.pulse_len_ratio, "CFG-TP-LEN_LOCK_TP1": tp.pulse_len_ratio_lock,
                   "CFG-TP-TP1_ENA": bit(legacy.TP5_ACTIVE), "CFG-TP-SYNC_GNSS_TP1": bit(legacy.TP5_LOCK_GNSS_FREQ),
                   "CFG-TP-USE_LOCKED_TP1": bit(legacy.TP5_LOCKED_OTHER_SET),
                   "CFG-TP-ALIGN_TO_TOW_TP1": bit(legacy.TP5_ALIGN_TO_TOW),
                   "CFG-TP-POL_TP1": bit(legacy.TP5_POLARITY_RISING),
                   "CFG-TP-TIMEGRID_TP1": (tp.flags >> legacy.TP5_GRID_SHIFT) & 0x0F})
        return b""

    def _tmode2(self, payload: bytes) -> bytes:
        if not payload:
            g = self._get
            lla = legacy.TMODE2_LLA if g("CFG-TMODE-POS_TYPE") == 1 else 0
            answer = legacy.CfgTmode2(g("CFG-TMODE-MODE"), lla, g("CFG-TMODE-LAT"), g("CFG-TMODE-LON"),
                                      g("CFG-TMODE-HEIGHT"), g("CFG-TMODE-FIXED_POS_ACC") // 10,
                                      g("CFG-TMODE-SVIN_MIN_DUR"), g("CFG-TMODE-SVIN_ACC_LIMIT") // 10)
            return ubx_frame_bytes(CFG, legacy.TMODE2, answer.payload())
        tm = legacy.CfgTmode2.decode(payload)
        lla = bool(tm.flags & legacy.TMODE2_LLA)
        if not lla and (tm.time_mode == legacy.TMODE_FIXED or tm.ecef_x_or_lat or tm.ecef_y_or_lon
                        or tm.ecef_z_or_alt):
            raise _Refused("ECEF positions are not simulated")
        self._set({"CFG-TMODE-MODE": tm.time_mode, "CFG-TMODE-POS_TYPE": int(lla), "CFG-TMODE-LAT": tm.ecef_x_or_lat,
                   "CFG-TMODE-LON": tm.ecef_y_or_lon, "CFG-TMODE-HEIGHT": tm.ecef_z_or_alt, "CFG-TMODE-LAT_HP": 0,
                   "CFG-TMODE-LON_HP": 0, "CFG-TMODE-HEIGHT_HP": 0,
                   "CFG-TMODE-FIXED_POS_ACC": tm.fixed_pos_acc_mm * 10, "CFG-TMODE-SVIN_MIN_DUR": tm.svin_min_dur_s,
                   "CFG-TMODE-SVIN_ACC_LIMIT": tm.svin_acc_limit_mm * 10})
        return b""

    def _gnss(self, payload: bytes) -> bytes:
        by_id = {gid: name for name, gid in ubxcfg.M8_GNSS_IDS.items()}
        if not payload:
            blocks = []
            for gid, (res, most) in ubxcfg.M8_CHANNELS.items():
                enable, signal, _ = ubxcfg.CONSTELLATIONS[by_id[gid]] if gid in by_id else (None, None, None)
                on = bool(enable and self._get(enable) and (signal is None or self._get(signal)))
                blocks.append(legacy.GnssBlock(gid, res, most, ubxcfg.SIG_L1 << 16 | int(on)))
            answer = legacy.CfgGnss(ubxcfg.M8_CHANNELS_USED, ubxcfg.M8_CHANNELS_USED, tuple(blocks))
            return ubx_frame_bytes(CFG, legacy.GNSS, answer.payload())
        gnss = legacy.CfgGnss.decode(payload)
        channels = ubxcfg.M8_CHANNELS_USED if gnss.num_trk_ch_use == 0xFF else gnss.num_trk_ch_use
        reserved = sum(b.res_trk_ch for b in gnss.blocks if b.enabled)
        if channels > ubxcfg.M8_CHANNELS_USED or reserved > channels:
            raise _Refused("more channels than the receiver has")
        changes = {}
        for block in gnss.blocks:
            if block.res_trk_ch > block.max_trk_ch:
                raise _Refused(f"gnssId {block.gnss_id}: more reserved channels than its maximum")
            if block.gnss_id not in by_id:
                if block.enabled or block.gnss_id not in ubxcfg.M8_CHANNELS:
                    raise _Refused(f"gnssId {block.gnss_id} is not simulated")
                continue  # IMES, off: nothing to do
            enable, signal, _ = ubxcfg.CONSTELLATIONS[by_id[block.gnss_id]]
            changes[enable] = int(block.enabled)
            if signal:
                changes[signal] = int(bool(block.sig_cfg_mask & ubxcfg.SIG_L1))
        after = {**self._ram, **changes}
        on = [n for n, (enable, signal, _) in ubxcfg.CONSTELLATIONS.items()
              if after[enable] and (signal is None or after[signal])]
        if self.generation < 9 and ubxcfg.m8_carrier_conflict(on):
            raise _Refused("three carriers")
        self._set(changes)
        return b""

    def _nav5(self, payload: bytes) -> bytes:
        if not payload:
            # An M8's own answer: every field reported, the others at their factory values.
            answer = legacy.CfgNav5(0xFFFF, self._get("CFG-NAVSPG-DYNMODEL"), 3, 0, 10_000, 5, 0, 250, 250, 100, 300,
                                    0, 60, 0, 0, 0, 0)
            return ubx_frame_bytes(CFG, legacy.NAV5, answer.payload())
        nav = legacy.CfgNav5.decode(payload)
        if nav.mask & legacy.NAV5_MASK_DYN:
            self._set({"CFG-NAVSPG-DYNMODEL": nav.dyn_model})
        return b""

    def _cfg(self, payload: bytes) -> bytes:
        """CFG-CFG: any section bit stands for the whole configuration (sections are not simulated)."""
        cmd = legacy.CfgCfg.decode(payload)
        devices = legacy.DEV_BBR | legacy.DEV_FLASH if cmd.device_mask is None else cmd.device_mask
        layers = [layer for bit, layer in ((legacy.DEV_BBR, self._bbr), (legacy.DEV_FLASH, self._flash))
                  if devices & bit]
        for layer in layers:
            if cmd.clear_mask:
                layer.clear()
            if cmd.save_mask:
                layer.update(self._ram)
        if cmd.load_mask:
            self._ram = {**self._factory, **self._flash, **self._bbr}
        return b""

    def _rst(self, payload: bytes) -> bytes:
        if legacy.CfgRst.decode(payload).reset_mode in (0, 1, 4):  # hardware or software reset
            self.reset()
        return b""


_COMMANDS = {(ubxcfg.MON, ubxcfg.MON_VER): "MON-VER", (CFG, ubxcfg.VALSET): "CFG-VALSET",
             (CFG, ubxcfg.VALGET): "CFG-VALGET", **{(CFG, mid): name for mid, name in legacy.NAMES.items()}}
