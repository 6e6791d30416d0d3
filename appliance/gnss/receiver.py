"""One GNSS receiver as the core sees it: bytes in; epochs, time labels, leap news and state changes out.

Pure core.  Owns the framer, the NMEA and UBX decoders and the epoch assembler for one receiver, counts every rejected
input by reason, and keeps the receiver's state (disconnected, no data, no fix, 2D, 3D, time-only).  The caller stamps
every chunk of bytes with its arrival time on the local clock and calls ``tick`` now and then so that silence is
noticed; nothing here reads a clock.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from appliance import leap
from appliance.events import (DeviceEvent, FixMode, GnssEpoch, LeapInfo, ReceiverFault, ReceiverState,
                              ReceiverStateChanged, Rejected, TimeLabel, TimePulseInfo)
from appliance.gnss import nmea, ubx
from appliance.gnss.epoch import EpochAssembler
from appliance.gnss.framer import Framer, NmeaFrame, UbxFrame
from appliance.gnss.setup import ReceiverSetup
from appliance.units import NS_PER_MS, NS_PER_S

DAY_S = 86_400
ANTENNA = "gnss-antenna"
ANTENNA_TEXT = {"open": "antenna open circuit: the cable is cut or the antenna is disconnected",
                "short": "antenna short circuit: a damaged cable or connector (the receiver may cut the power)"}
GPS_TAI_OFFSET_S = 19  # TAI - GPS time, fixed since 1980 (IS-GPS-200)


@dataclass(frozen=True)
class ReceiverSnapshot:
    """What ``status`` shows about a receiver."""

    name: str
    device: str
    state: ReceiverState
    state_since_ns: int | None  # None: in this state since start (disconnected, before the device was tried)
    last_epoch: GnssEpoch | None
    frames: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    ignored: dict[str, int] = field(default_factory=dict)
    epochs: int = 0
    last_rejects: tuple[str, ...] = ()
    last_text: str = ""
    reconnects: int = 0
    device_error: str = ""
    setup: dict[str, object] | None = None  # the receiver's identity and set-up (``ReceiverSetup.snapshot``)
    antenna: str | None = None  # "ok", "open", "short", "unknown"; None when the receiver does not say


class GnssReceiver:
    def __init__(self, table: Callable[[], leap.LeapTable], name: str = "gnss0", device: str = "simulated",
                 epoch_idle_ns: int = 300 * NS_PER_MS, no_data_timeout_ns: int = 5_000 * NS_PER_MS,
                 setup: ReceiverSetup | None = None):
        self.name, self.device = name, device
        self.setup = setup
        self.antenna: str | None = None
        self._framer = Framer()
        self._assembler = EpochAssembler(table)
        self._epoch_idle_ns = epoch_idle_ns
        self._no_data_timeout_ns = no_data_timeout_ns
        self.state = ReceiverState.DISCONNECTED
        self._state_since_ns: int | None = None  # not known to be disconnected yet: the device is still to be tried
        self._last_rx_ns: int | None = None
        self._last_good_ns: int | None = None
        self._label_sent_for: int | None = None
        self.frames: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.ignored: Counter[str] = Counter()
        self.epochs = 0
        self.last_epoch: GnssEpoch | None = None
        self._last_rejects: deque[str] = deque(maxlen=8)
        self._last_text = ""
        self._reconnects = 0
        self._device_error = ""

    # --- inputs -------------------------------------------------------------------------------------------
    def feed(self, data: bytes, rx_raw_ns: int) -> list[object]:
        out: list[object] = []
        if self.state is ReceiverState.DISCONNECTED:
            out += self._set_state(ReceiverState.NO_DATA, "receiver data arriving", rx_raw_ns)
            if self.setup is not None and self.setup.state == "idle":  # a line without device events (simulated)
                out += self.setup.start(rx_raw_ns)
        if self._last_rx_ns is not None and rx_raw_ns - self._last_rx_ns > self._epoch_idle_ns:
            out += self._epochs(self._assembler.flush())
        self._last_rx_ns = rx_raw_ns
        for item in self._framer.feed(data):
            out += self._frame(item, rx_raw_ns)
        return out

    def tick(self, now_raw_ns: int) -> list[object]:
        """Close an epoch after a quiet gap; notice a receiver that stopped talking."""
        out: list[object] = []
        if self._last_rx_ns is not None and now_raw_ns - self._last_rx_ns >= self._epoch_idle_ns:
            out += self._epochs(self._assembler.flush())
        if self.setup is not None:
            out += self.setup.tick(now_raw_ns)
        quiet_since = self._last_good_ns if self._last_good_ns is not None else self._state_since_ns
        silent = quiet_since is not None and now_raw_ns - quiet_since >= self._no_data_timeout_ns
        if silent and self.state not in (ReceiverState.DISCONNECTED, ReceiverState.NO_DATA):
            seconds = self._no_data_timeout_ns // 1_000_000_000
            out += self._set_state(ReceiverState.NO_DATA, f"nothing decodable for {seconds} s", now_raw_ns)
        return out

    def on_device(self, event: DeviceEvent, now_raw_ns: int) -> list[object]:
        """The serial edge opened the device, lost it, or could not open it.  A failure is news even while the
        receiver is already disconnected (the device was never there, or the error changed): the state is then
        reported again with the new reason, so the alarm says what is wrong from the first failed open on."""
        self.device = event.device
        if event.connected:
            self._device_error = ""
            self._reconnects += 1 if self.frames else 0
            out = self._set_state(ReceiverState.NO_DATA, event.reason, now_raw_ns)
            return out + (self.setup.start(now_raw_ns) if self.setup is not None else [])
        news = event.reason != self._device_error
        self._device_error = event.reason
        out: list[object] = []
        # A partial frame from before the loss must not join bytes from after it; it is counted as truncated.
        for item in self._framer.flush():
            out += self._frame(item, now_raw_ns)
        out += self._epochs(self._assembler.flush())
        if self.state is ReceiverState.DISCONNECTED:
            if self._state_since_ns is None:
                self._state_since_ns = now_raw_ns  # known to be disconnected from the first failed open
            if news:
                out.append(ReceiverStateChanged(self.state, self.state, event.reason, now_raw_ns))
            return out
        return out + self._set_state(ReceiverState.DISCONNECTED, event.reason, now_raw_ns)

    def finish(self) -> list[object]:
        """End of a capture: account for the tail and the last epoch."""
        out: list[object] = []
        for item in self._framer.flush():
            out += self._frame(item, self._last_rx_ns or 0)
        return out + self._epochs(self._assembler.flush())

    def snapshot(self) -> ReceiverSnapshot:
        return ReceiverSnapshot(self.name, self.device, self.state, self._state_since_ns, self.last_epoch,
                                dict(self.frames), dict(self.rejected), dict(self.ignored), self.epochs,
                                tuple(self._last_rejects), self._last_text, self._reconnects, self._device_error,
                                None if self.setup is None else self.setup.snapshot(), self.antenna)

    # --- decoding -----------------------------------------------------------------------------------------
    def _frame(self, item: object, rx_raw_ns: int) -> list[object]:
        if isinstance(item, Rejected):
            return self._reject(item)
        out: list[object] = []
        if self.setup is not None:
            out += self.setup.on_frame(item, rx_raw_ns)
        if isinstance(item, NmeaFrame):
            self.frames["nmea"] += 1
            record = nmea.decode(item.text)  # a Unicore answer or log is ignored by name: the set-up's business
        else:
            assert isinstance(item, UbxFrame)
            self.frames["ubx"] += 1
            record = ubx.decode(item.msg_class, item.msg_id, item.payload)
        if isinstance(record, Rejected):
            return out + self._reject(record)
        self._last_good_ns = rx_raw_ns
        records = record if isinstance(record, tuple) else (record,)
        for r in records:
            out += self._record(r, rx_raw_ns)
        return out

    def _record(self, r: object, rx_raw_ns: int) -> list[object]:
        if isinstance(r, (nmea.Ignored, ubx.UbxIgnored)):
            self.ignored[r.kind] += 1
            return []
        if isinstance(r, nmea.TextRecord):
            self._last_text = r.text
        if isinstance(r, ubx.UbxSurvey) and self.setup is not None:
            self.setup.on_survey(r)
        out = self._epochs(self._assembler.add(r, rx_raw_ns))
        out += self._side_events(r, rx_raw_ns)
        return out

    def _side_events(self, r: object, rx_raw_ns: int) -> list[object]:
        """Events that must not wait for the epoch to close: the time label, qErr and leap news."""
        if isinstance(r, ubx.UbxTimePulse):
            return [TimePulseInfo(r.qerr_ps, None, rx_raw_ns)] if r.qerr_valid else []
        if isinstance(r, ubx.UbxLeap) and r.current_valid:
            return [self._leap_info(r)]
        if isinstance(r, ubx.UbxGpsTime) and r.leap_valid:
            return [LeapInfo(r.leap_s + GPS_TAI_OFFSET_S)] + self._label(r, rx_raw_ns)
        return self._label(r, rx_raw_ns)

    def _label(self, r: object, rx_raw_ns: int) -> list[object]:
        valid = _says_valid(r)
        tai = self._assembler.current_tai_ns()
        if valid is None or tai is None or self._label_sent_for == tai:
            return []
        self._label_sent_for = tai
        return [TimeLabel(tai, self._assembler.current_text() or "", rx_raw_ns, valid, type(r).__name__)]

    def _leap_info(self, r: ubx.UbxLeap) -> LeapInfo:
        tai = self._assembler.current_tai_ns()
        tai_utc = r.current_ls + GPS_TAI_OFFSET_S
        if r.change_s == 0 or r.time_to_event_s is None or r.time_to_event_s < 0 or tai is None:
            return LeapInfo(tai_utc)
        # u-blox counts to the UTC midnight under the current offset, i.e. to the start of an inserted 23:59:60,
        # not to the first instant of the new offset (which LeapInfo names).  A change always sits at a UTC
        # midnight, so snap to the nearest one rather than be a second early.
        event_posix_s = tai // NS_PER_S + r.time_to_event_s - tai_utc
        midnight_posix_s = (event_posix_s + DAY_S // 2) // DAY_S * DAY_S
        return LeapInfo(tai_utc, r.change_s, (midnight_posix_s + tai_utc + r.change_s) * NS_PER_S)

    def _epochs(self, epochs: list[GnssEpoch]) -> list[object]:
        out: list[object] = []
        for epoch in epochs:
            self.epochs += 1
            self.last_epoch = epoch
            out += self._antenna(getattr(epoch, "antenna_status", None), getattr(epoch, "antenna_power", None),
                                 epoch.rx_raw_ns)
            out.append(epoch)
            state = _state_of(epoch)
            if (state is ReceiverState.NO_FIX and epoch.time_valid and self.setup is not None
                    and self.setup.fixed_position_mode()):
                # A timing receiver on its fixed position keeps valid time with too few satellites for a fix.
                state = ReceiverState.TIME_ONLY
            out += self._set_state(state, f"epoch {epoch.utc_text or 'without time'}", epoch.rx_raw_ns)
        return out

    def _antenna(self, status: str | None, power: str | None, at_ns: int) -> list[object]:
        """The receiver's antenna supervisor (u-blox MON-HW / MON-RF): open or short circuit is a fault."""
        if status is None or status == self.antenna:
            return []
        was, self.antenna = self.antenna, status
        if status in ANTENNA_TEXT:
            text = f"{self.name}: {ANTENNA_TEXT[status]}" + (" (antenna power off)" if power == "off" else "")
            return [ReceiverFault(self.name, ANTENNA, True, text, at_ns)]
        if was in ANTENNA_TEXT:
            return [ReceiverFault(self.name, ANTENNA, False, f"{self.name}: antenna {status}", at_ns)]
        return []

    def _reject(self, rejected: Rejected) -> list[object]:
        key = f"{rejected.what}:{rejected.reason}"
        self.rejected[key] += 1
        self._last_rejects.append(f"{key} {rejected.detail}".strip())
        return []

    def _set_state(self, new: ReceiverState, reason: str, at_ns: int) -> list[object]:
        if new is self.state:
            return []
        old, self.state, self._state_since_ns = self.state, new, at_ns
        return [ReceiverStateChanged(old, new, reason, at_ns)]


def _state_of(epoch: GnssEpoch) -> ReceiverState:
    if epoch.fix_mode == FixMode.FIX_3D:
        return ReceiverState.TIME_ONLY if epoch.time_only else ReceiverState.FIX_3D
    if epoch.fix_mode == FixMode.FIX_2D:
        return ReceiverState.FIX_2D
    return ReceiverState.NO_FIX


def _says_valid(r: object) -> bool | None:
    """Whether a record vouches for (or against) the time of its epoch; None if it says nothing."""
    if isinstance(r, nmea.TimeRecord) and r.kind in ("RMC", "GGA", "GNS", "GLL"):
        return bool(r.valid)
    if isinstance(r, ubx.UbxUtc):
        return r.valid
    if isinstance(r, ubx.UbxGpsTime) and r.tow_valid and r.week_valid and r.leap_valid:
        return True  # UTC = GPS time - leapS (the epoch assembler): what a receiver without UTC messages offers
    return None
