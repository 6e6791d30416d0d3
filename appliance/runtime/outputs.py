"""The time outputs as parts of the runtime: NTP, PTP, the serial time string, 1PPS and IRIG-B and their sinks.

Edge wiring.  Each part is built from the settings with the callbacks it needs (the clock map, the status, the alarm
it raises when it cannot serve, the audit trail for what it is told to do) and shows in status only once started, as
the outputs always have.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from appliance import leap
from appliance.config import Config
from appliance.events import Alarm, Severity
from appliance.protocol.clockmap import ClockMap
from appliance.router import ClockReading
from appliance.status import TimeStatus
from appliance.units import NS_PER_MS

if TYPE_CHECKING:
    from appliance.outputs.ptp.notices import ManagementSet, PortNotice

log = logging.getLogger("appliance")
Auditor = Callable[[str, str, str, dict[str, Any]], Any]  # kind, actor, text, detail: as runtime.Auditor
PTP_MANAGED = "ptp-managed"  # a PTP management SET left a setting off its configured value
PTP_OUTRANKED = "ptp-outranked"  # a foreign grandmaster out-ranks this one: the port is PASSIVE, silent


class Output:
    """A started-and-stopped output (the serial string, the console, the agent ...) shown in status under ``name``
    once it runs."""

    def __init__(self, name: str, thing: Any):
        self.name, self.thing = name, thing
        self.running = False

    def start(self) -> None:
        self.running = True
        self.thing.start()

    def stop(self) -> None:
        self.running = False
        self.thing.stop()

    def status(self) -> dict[str, Any]:
        return {self.name: self.thing.status()} if self.running else {}


class NtpOutput(Output):
    """The NTP workers: started with the clock map of the moment, then handed every new one."""

    def __init__(self, service: Any, clock_map: Callable[[], ClockMap], alarm: Callable[[Alarm], None],
                 now_tai_ns: Callable[[], int]):
        super().__init__("ntp", service)
        self.clock_map, self.alarm, self.now_tai_ns = clock_map, alarm, now_tai_ns

    def start(self) -> None:
        self.running = True  # so status shows why it is not serving
        if not self.thing.start(self.clock_map()):
            self.alarm(Alarm("ntp-not-serving", Severity.MAJOR, True, f"NTP not served: {self.thing.error}",
                             self.now_tai_ns()))

    def publish(self, clock_map: ClockMap, status: TimeStatus) -> None:
        if self.running:
            self.thing.publish(clock_map)


class PtpOutput(Output):
    """The PTP port: its faults and state changes become alarms; it hears the clock's map and quality.

    What the port notices becomes an audit record and an alarm.  A management SET is an operator's write: a
    ``config.change`` record (a refused one a ``command`` record) by actor ``ptp-mgmt:<address>``, and the WARNING
    alarm ``ptp-managed`` stays raised while a SET has left priority1 or priority2 off its configured value (a SET
    back to it clears it; so does a restart, which restores the configured values).  A foreign grandmaster that
    out-ranks this one (the port falls PASSIVE, silent) is a ``ptp.foreign-master`` record by actor
    ``ptp-master:<address>`` naming it, and the MAJOR alarm ``ptp-outranked``, cleared when the port is MASTER
    again."""

    def __init__(self, service: Any, publish_now: Callable[[], None], alarm: Callable[[Alarm], None],
                 now_tai_ns: Callable[[], int], audit: Auditor | None = None):
        super().__init__("ptp", service)
        self.publish_now, self.alarm, self.now_tai_ns = publish_now, alarm, now_tai_ns
        self.audit: Auditor = audit or (lambda kind, actor, text, detail: None)
        self.managed: dict[str, tuple[int, int, str]] = {}  # name -> (value, configured, who set it), off-config

    def audit_to(self, auditor: Auditor) -> None:
        """Where its records go (the runtime hands this over as it adds the part: the trail opens later)."""
        self.audit = auditor

    def start(self) -> None:
        super().start()
        self.publish_now()

    def on_event(self, kind: str, text: str) -> None:
        now = self.now_tai_ns()
        if kind == "ptp-fault":
            self.alarm(Alarm("ptp-not-serving", Severity.MAJOR, True, f"PTP not served: {text}", now))
        elif kind == "ptp-state" and "-> FAULTY" not in text:
            self.alarm(Alarm("ptp-not-serving", Severity.MAJOR, False, f"PTP port {text}", now))

    def on_notice(self, notice: PortNotice) -> None:
        """A notice of the port (``outputs/ptp/notices.py``): an audit record, an alarm raised or cleared."""
        from appliance.outputs.ptp.notices import ManagementSet, MasterAgain, Outranked

        now = self.now_tai_ns()
        if isinstance(notice, ManagementSet):
            self._management_set(notice, now)
        elif isinstance(notice, Outranked):
            self.audit("ptp.foreign-master", f"ptp-master:{notice.source or 'unknown'}", notice.text,
                       notice.detail())
            self.alarm(Alarm(PTP_OUTRANKED, Severity.MAJOR, True, notice.text, now))
        elif isinstance(notice, MasterAgain):
            self.alarm(Alarm(PTP_OUTRANKED, Severity.MAJOR, False, notice.text, now))

    def _management_set(self, notice: ManagementSet, now: int) -> None:
        actor = f"ptp-mgmt:{notice.source}"
        if notice.refused:
            self.audit("command", actor, notice.text, {"command": "ptp-management-set", "setting": notice.name,
                                                       "refused": notice.refused, "source": notice.source})
            return
        setting = f"ptp.{notice.name}"
        text = (f"{setting}: {notice.old} -> {notice.new} by PTP management from {notice.source} "
                f"(running value only; the configured {notice.configured} returns at restart)")
        self.audit("config.change", actor, text, {"setting": setting, "old": notice.old, "new": notice.new,
                                                  "applied": True, "saved": False, "configured": notice.configured,
                                                  "source": notice.source, "via": "ptp-management"})
        if notice.new == notice.configured:
            self.managed.pop(notice.name, None)
        else:
            self.managed[notice.name] = (notice.new, notice.configured, notice.source)
        if self.managed:
            changed = "; ".join(f"{name} {value} (configured {configured}) set by PTP management from {who}"
                                for name, (value, configured, who) in sorted(self.managed.items()))
            self.alarm(Alarm(PTP_MANAGED, Severity.WARNING, True, f"PTP {changed}", now))
        else:
            self.alarm(Alarm(PTP_MANAGED, Severity.WARNING, False, f"PTP {notice.name} back to the configured "
                             f"{notice.configured} by PTP management from {notice.source}", now))

    def publish(self, clock_map: ClockMap, status: TimeStatus) -> None:
        if self.running:
            from appliance.outputs.ptp.datasets import gm_view

            self.thing.publish(clock_map, gm_view(status))


class PulseOutputs:
    """1PPS and IRIG-B, planned a second ahead on the counter; recorded in memory unless a hardware sink (a PHC's
    periodic output, a GPIO line, WAV segments) is attached."""

    def __init__(self, planner: Any, pps_record: Any, irig_record: Any):
        self.planner, self.pps_record, self.irig_record = planner, pps_record, irig_record
        self.sinks: dict[str, Any] = {}  # "pps" / "irig" -> a hardware sink with .status()

    @classmethod
    def from_config(cls, config: Config) -> PulseOutputs | None:
        """The 1PPS and IRIG-B outputs the settings ask for (None if neither); ValueError for settings that cannot
        work together."""
        from appliance.edge.irig.cli import offset_function
        from appliance.outputs.pulses import (
            BlockRecording,
            IrigConfig,
            PpsConfig,
            RecordingSink,
            TimeOutputs,
        )
        from appliance.protocol.irig.timecode import CodedExpression

        pps = irig = pps_record = irig_record = None
        p, i = config.pps_out, config.irig_out
        if p.sink != "none":
            pps = PpsConfig(p.width_ms * NS_PER_MS, p.cable_delay_ns, p.policy, p.flag_width_ms * NS_PER_MS)
            pps_record = RecordingSink()
        if i.format != "none":
            am = i.format.startswith("B12")
            if i.sink == ("gpio" if am else "wav"):
                raise ValueError(f"irig_out.sink={i.sink} cannot carry {i.format}: a GPIO line carries DC level "
                                 f"shift (B000-B007), a WAV file or stream amplitude modulation (B120-B127)")
            try:
                offset_of = offset_function(i.timezone)
            except ValueError as exc:
                raise ValueError(f"irig_out.timezone: {exc}") from None
            irig = IrigConfig(CodedExpression(int(i.format[3])), i.cable_delay_ns, i.sample_rate if am else None,
                              offset_of, i.timezone)
            irig_record = BlockRecording() if am else RecordingSink()
        if pps is None and irig is None:
            return None
        planner = TimeOutputs(pps, pps_record.emit if pps_record else None, irig,
                              irig_record.emit if irig_record else None)
        return cls(planner, pps_record, irig_record)

    def attach(self, name: str, sink: Any) -> None:
        """A hardware sink takes over from the recording."""
        if name == "pps":
            self.planner.pps_sink = sink.emit
        else:
            self.planner.irig_sink = sink.emit
        self.sinks[name] = sink

    def on_second(self, reading: ClockReading) -> None:
        self.planner.on_second(reading.served_ns, reading.raw_at, reading.synchronized, reading.error_bound_ns,
                               reading.table)

    def status(self) -> dict[str, Any]:
        outputs: dict[str, Any] = dict(self.planner.status())
        for name, sink in self.sinks.items():
            if name in outputs:
                outputs[name] = {**outputs[name], "sink": sink.status()}
        return outputs


class PulseSinks:
    """The hardware sinks of the 1PPS and IRIG-B outputs, started and closed with the other parts."""

    def __init__(self, pulses: PulseOutputs | None, sinks: dict[str, Any]):
        self.pulses, self.sinks = pulses, sinks

    def start(self) -> None:
        for name, sink in self.sinks.items():
            getattr(sink, "start", lambda: None)()
            if self.pulses is not None:
                self.pulses.attach(name, sink)

    def stop(self) -> None:
        for sink in self.sinks.values():
            sink.close()


class KernelStatus:
    """A kernel clock's synchronised flag, error bound and TAI offset (adjtimex), from the served clock's second."""

    def __init__(self, backend: Any):
        self.backend = backend

    def on_second(self, reading: ClockReading) -> None:
        self.backend.publish(reading.synchronized, reading.error_bound_ns, reading.tai_utc_s)


def pulse_sinks(config: Config, pulses: PulseOutputs | None, raw_now: Callable[[], int],
                host_now: Callable[[], int], utc_table: Callable[[], leap.LeapTable]) -> PulseSinks:
    """PHC and GPIO sinks the settings ask for; a PHC sink needs the PHC to be the served clock."""
    sinks: dict[str, Any] = {}

    def to_host(raw_ns: int) -> int:  # edges are planned at most two seconds ahead: the rate error is negligible
        return host_now() + raw_ns - raw_now()

    p, i = config.pps_out, config.irig_out
    if p.sink == "phc":
        if config.clock.backend != "phc" or not config.gnss.device:
            raise ValueError("pps_out.sink=phc needs the PHC to be the served clock (clock.backend=phc and a "
                             "receiver, gnss.device): its periodic output runs on the PHC's own seconds")
        from appliance.edge.perout import PeroutSink

        sinks["pps"] = PeroutSink(config.clock.phc_device, p.phc_channel, p.phc_pin, p.cable_delay_ns)
    from appliance.edge.gpio import GpioSink

    if p.sink == "gpio":
        sinks["pps"] = GpioSink(p.gpio_chip, p.gpio_line, to_host, "appliance-1pps")
    if i.format != "none" and i.sink == "gpio":
        sinks["irig"] = GpioSink(i.gpio_chip, i.gpio_line, to_host, "appliance-irig")
    if i.format != "none" and i.sink == "wav":
        from appliance.edge.irig.wavout import WavSink

        path = i.wav_path or str(config.state_path() / "irig" / "irig-am.wav")
        sinks["irig"] = WavSink(path, i.sample_rate, i.wav_segment_s, i.wav_keep,
                                lambda served: leap.tai_to_utc(served, utc_table()))
    return PulseSinks(pulses, sinks)


def ntp_output(config: Config, clock_map: Callable[[], ClockMap], alarm: Callable[[Alarm], None],
               now_tai_ns: Callable[[], int]) -> NtpOutput:
    from appliance.edge.ntp.service import NtpService, NtpSettings
    from appliance.outputs.ntp.policy import ServerConfig

    n = config.ntp
    server = ServerConfig(allow=n.allow, deny=n.deny, deny_action=n.deny_action, rate_per_s=n.rate_limit_per_s,
                          burst=n.rate_limit_burst)
    nts_config, names = None, tuple(x.strip() for x in n.nts_server_names.split(",") if x.strip())
    if n.nts_enabled:
        from appliance.edge.ntp.ntske import KeConfig

        own = config.state_path() / "nts"
        nts_config = KeConfig(n.listen, n.nts_port, n.nts_certificate or str(own / "cert.pem"),
                              n.nts_private_key or str(own / "key.pem"), str(own / "cookie_keys.json"),
                              n.nts_key_rotation_s, n.port, n.nts_rate_limit_per_s, 8, n.nts_max_connections)
        if n.nts_certificate or n.nts_private_key:
            names = ()  # the operator's certificate: never replaced by a self-signed one
    settings = NtpSettings(n.listen, n.port, n.workers, server, n.keys_file, nts_config, names)
    return NtpOutput(NtpService(settings), clock_map, alarm, now_tai_ns)


def ptp_output(config: Config, clock_map: ClockMap, status: TimeStatus, publish_now: Callable[[], None],
               alarm: Callable[[Alarm], None], now_tai_ns: Callable[[], int]) -> PtpOutput:
    """The PTP port from the profile and the settings; a profile conflict is a start-up error (ValueError)."""
    from appliance.edge.ptp.gm_service import PtpService
    from appliance.outputs.ptp.datasets import gm_view
    from appliance.protocol.ptp.profiles import port_config_from

    port_config, errors, warnings = port_config_from(config.section("ptp"))
    if errors:
        raise ValueError("; ".join(errors))
    for warning in warnings:
        log.warning("%s", warning)
    p = config.ptp
    security = ptp_security(p)
    sync_metadata = None
    if port_config.smpte_tlv:
        from appliance.edge.irig.cli import offset_function
        from appliance.protocol.ptp.smpte import SyncMetadata, parse_frame_rate
        try:
            sync_metadata = SyncMetadata(parse_frame_rate(p.smpte_frame_rate),
                                         None if p.smpte_time_zone.upper() in ("UTC", "Z", "ETC/UTC")
                                         else offset_function(p.smpte_time_zone))
        except ValueError as exc:
            raise ValueError(f"ptp.smpte_*: {exc}") from None
    output = PtpOutput(None, publish_now, alarm, now_tai_ns)
    output.thing = PtpService(port_config, p.interface, clock_map, gm_view(status), p.management_allow,
                              on_event=output.on_event, timestamping=p.timestamping,
                              served_phc=config.clock.phc_device if config.clock.backend == "phc" else "",
                              on_notice=output.on_notice, native=p.native_sync, security=security,
                              sync_metadata=sync_metadata)
    return output


def ptp_security(p: Any) -> Any:
    """The port's ``PortSecurity`` from ``ptp.spp``, ``ptp.sa_file`` and ``ptp.active_key_id``; None when ptp.spp is
    -1.  A missing or broken file, an spp it does not hold or a key it does not have is a start-up error
    (ValueError naming every problem, never a key)."""
    from appliance.edge.input_files import load_sa_file
    from appliance.protocol.ptp.security import PortSecurity, SaFileError

    if p.spp < 0:
        return None
    if not p.sa_file:
        raise ValueError(f"ptp.spp={p.spp} needs ptp.sa_file (the security association file)")
    if p.active_key_id < 1:
        raise ValueError(f"ptp.spp={p.spp} needs ptp.active_key_id (the key that signs, 1 or more)")
    try:
        associations = load_sa_file(p.sa_file)
    except SaFileError as exc:
        raise ValueError("ptp.sa_file: " + "; ".join(exc.problems)) from None
    security = PortSecurity.from_file(associations, p.spp, p.active_key_id, p.auth_accept_unsigned)
    log.info("PTP authentication: spp %d, key %d (%s) signs every message; %s", p.spp, p.active_key_id,
             security.key.algorithm, "unsigned messages accepted" if p.auth_accept_unsigned
             else "unsigned or wrongly signed messages dropped")
    return security


def serial_output(config: Config, utc_table: Callable[[], leap.LeapTable], status: Callable[[], TimeStatus],
                  served_at_host: Callable[[int], tuple[int, float]]) -> Output:
    from appliance.edge.serialout import SerialTimeOutput

    s = config.serial_out
    return Output("serial", SerialTimeOutput(s.device, s.baud, s.format, s.offset_ms, utc_table, status,
                                             served_at_host))
