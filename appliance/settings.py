"""One declarative table of every setting: a frozen dataclass per section, a field per setting.

Pure core.  Each field carries its row of the table (type, default, help, bounds, choices, whether a change needs a
restart) through ``S``; ``SETTINGS`` is that table flattened to dotted names (``clock.max_frequency_ppb``), which the
loader (``config.py``) checks a configuration against, rejecting unknown keys.  The same classes are what the rest
of the appliance reads: ``config.clock.max_frequency_ppb`` is a float, checked and in bounds, so nothing casts a
string at a use site.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

STANDARD_BAUDS = (1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600)
KINDS = ("str", "int", "float", "bool", "enum", "address", "path", "position", "networks", "servers")
# A setting's unit from its name's suffix (the house rule: units in names), longest suffix first; a name that does
# not say its unit may declare it (``S(..., unit="K")``).
UNIT_SUFFIXES = (("_ns_per_s", "ns/s"), ("_per_s", "/s"), ("_ns", "ns"), ("_us", "µs"), ("_ms", "ms"), ("_s", "s"),
                 ("_ppb", "ppb"), ("_m", "m"), ("_days", "days"), ("_deg", "°"), ("_dbhz", "dB-Hz"), ("_db", "dB"))


def unit_of(name: str) -> str:
    """The unit a setting's name says (``clock.max_frequency_ppb`` -> ``ppb``); empty when it says none."""
    return next((unit for suffix, unit in UNIT_SUFFIXES if name.endswith(suffix)), "")


@dataclass(frozen=True)
class Setting:
    """One row of the settings table."""

    name: str
    type: str  # one of KINDS
    default: Any
    help: str
    restart: bool = True  # a change takes effect only after a restart
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] = ()
    secret: bool = False  # write-only: shown masked to every role, never logged or audited in clear
    empty_ok: bool = True  # an empty string or list is a valid value
    start_only: bool = False  # set only by the configuration file or --set: the console and REST API cannot write it
    unit: str = ""  # of a number: declared, or what the name's suffix says (unit_of)

    def allowed(self) -> str:
        """What values are allowed, in words, for error messages and `config list`."""
        if self.choices:
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.type in ("int", "float") and (self.minimum is not None or self.maximum is not None):
            return f"{self.type} in [{_fmt(self.minimum)}, {_fmt(self.maximum)}]"
        return {"address": "an IPv4 or IPv6 address", "position": "\"lat_deg,lon_deg,alt_m\" or empty",
                "servers": "a list of NTP servers like [\"ntp1.example\", \"192.0.2.1:123\"]", "bool": "true or false",
                "path": "a file path",
                "networks": "a list of networks like [\"192.0.2.0/24\", \"2001:db8::/32\"] (comma-separated "
                            "with --set)"}.get(self.type, self.type)


def _fmt(v: float | None) -> str:
    if v is None:
        return "…"
    return str(int(v)) if float(v).is_integer() else str(v)


def S(kind: str, default: Any, help: str, *, restart: bool = True, minimum: float | None = None,  # noqa: N802
      maximum: float | None = None, choices: tuple[Any, ...] = (), secret: bool = False,
      empty_ok: bool = True, start_only: bool | None = None, unit: str = "") -> Any:
    """A row of the table as a dataclass field: the setting's default, and the rest of the row in its metadata.
    A path is start-only unless said otherwise: a path the console could change would let a console login point
    the appliance at any file its user can read or write (a key, a FIFO, another state directory)."""
    assert kind in KINDS, kind
    row = {"type": kind, "help": help, "restart": restart, "minimum": minimum, "maximum": maximum,
           "choices": choices, "secret": secret, "empty_ok": empty_ok,
           "start_only": kind == "path" if start_only is None else start_only, "unit": unit}
    return field(default=default, metadata={"setting": row})


@dataclass(frozen=True)
class GnssSettings:
    """``gnss.*``: the GNSS receiver; with several (a ``[[gnss]]`` array), the first, whose line settings apply to
    all of them."""

    name: str = S("str", "", "Name of the receiver's reference (in status, SNMP, metrics and `appliance reference`); "
      "empty: gnss for the first receiver, gnss2, gnss3 ... for the others", start_only=True)
    device: str = S("path", "", "Serial device of the GNSS receiver (e.g. /dev/ttyS0); empty: simulated receiver")
    baud: int = S("int", 9600, "Serial line speed of the receiver", choices=STANDARD_BAUDS)
    pps_device: str = S("path", "", "Kernel PPS source paired with the receiver (e.g. /dev/pps0); empty: none")
    epoch_idle_ms: int = S("int", 300, "Quiet time after which a receiver epoch is considered complete (every "
      "receiver)", minimum=20, maximum=2000)
    no_data_timeout_s: int = S("int", 5, "Seconds without a decodable sentence before a receiver is NO_DATA (every "
      "receiver)", minimum=1, maximum=300)
    label_max_age_ms: int = S("int", 900, "Latest a time label may follow its PPS edge and still name its second "
      "(every receiver)", minimum=100, maximum=990, restart=False)
    reconnect_max_s: float = S("float", 30.0, "Longest back-off between attempts to reopen a lost receiver (every "
      "receiver)", minimum=0.1, maximum=3600)
    cable_delay_ns: int = S("int", 0, "Antenna cable and receiver delay compensated on every PPS edge",
      minimum=-1_000_000, maximum=1_000_000, restart=False)
    accuracy_ns: int = S("int", 20, "Time accuracy of receiver, antenna and cabling (part of the error bound)",
      minimum=0, maximum=1_000_000)
    receiver: str = S("enum", "auto", "Receiver family, for setting it up: u-blox generation 9 and later (ZED-F9T, "
      "X20: CFG-VALSET), u-blox M8T and older (CFG-* messages), Unicore (UM980/UM982, UM6xx: ASCII commands), or "
      "any NMEA receiver (listened to, never configured); auto: asked with UBX MON-VER and Unicore VERSIONA",
      choices=("auto", "ublox9", "ublox8", "unicore", "nmea"))
    configure: bool = S("bool", True, "Set the receiver up at start and after every reconnect (timing mode, time "
      "pulse, constellations, messages); false: leave it as it is and read what it sends")
    configure_store: str = S("enum", "ram", "Where the set-up is kept in the receiver: RAM only (set again after "
      "every reconnect), or also battery-backed RAM or flash (survives the receiver's power cycle)",
      choices=("ram", "bbr", "flash"))
    constellations: str = S("str", "gps,galileo,beidou,glonass", "Constellations the receiver tracks, "
      "comma-separated (gps, glonass, galileo, beidou, qzss, navic); empty: the receiver's own choice",
      empty_ok=True)
    pulse_length_ms: int = S("int", 100, "Length of the receiver's 1 Hz time pulse (rising edge on the second)",
      minimum=1, maximum=900)
    priority: int = S("int", 1, "Priority of the receiver's reference (1 is the highest; receivers of equal "
      "priority are hot standbys: the clock does not leave one it is on while it is good)", minimum=1, maximum=99)
    position: str = S("position", "", "Antenna position of the receiver as \"lat_deg,lon_deg,alt_m\" (WGS-84, "
      "height above mean sea level), for its timing mode and the simulated antenna; empty: integrity.position for "
      "the first receiver, a survey-in for the others")


# The [[gnss]] array (config_receivers.py): its first entry is gnss.* above; each other one (gnss2.*, gnss3.* ...
# with --set) has every setting of a receiver but these, which are set in the first entry and apply to all.
RECEIVER_SHARED = ("epoch_idle_ms", "no_data_timeout_s", "label_max_age_ms", "reconnect_max_s")
MAX_RECEIVERS = 16


@dataclass(frozen=True)
class ReceiverSettings(GnssSettings):
    """One receiver of the ``[[gnss]]`` array as the runtime reads it: its own settings with ``name`` and
    ``position`` resolved (gnss, gnss2 ...; the first receiver's position defaults to integrity.position), the
    shared ones from the first, and ``number``, its place in the array from 1."""

    number: int = 1


@dataclass(frozen=True)
class ClockSettings:
    """``clock.*``: the disciplined clock: oscillator, backend, loop and holdover."""

    oscillator: str = S("enum", "ocxo", "Local oscillator fitted (sets the holdover model)",
      choices=("tcxo", "ocxo", "ocxo-hp", "rubidium"))
    leap_file: str = S("path", "", "IERS leap-seconds.list to use instead of the packaged one if newer")
    backend: str = S("enum", "auto", "Clock steered: simulated oscillator, software clock over the host clock "
      "(never touches it), the system clock or a PHC; auto: simulated without a receiver, software with one",
      choices=("auto", "simulated", "software", "system", "phc"))
    phc_device: str = S("path", "", "PTP hardware clock steered when clock.backend is phc (e.g. /dev/ptp0)")
    time_constant_s: float = S("float", 0.0, "DPLL time constant; 0: the oscillator's best (where its stability "
      "meets the reference noise)", minimum=0.0, maximum=10_000.0)
    max_frequency_ppb: float = S("float", 2000.0, "Frequency correction clamp (also the slew rate limit)",
      minimum=1.0, maximum=500_000.0)
    step_threshold_ns: int = S("int", 100_000, "On first lock, offsets beyond this are stepped; after first "
      "lock the clock only slews", minimum=0, maximum=1_000_000_000)
    slew_only: bool = S("bool", False, "Never step the clock, not even on first lock")
    lock_threshold_ns: int = S("int", 100, "Phase error within which the clock counts as locked",
      minimum=1, maximum=1_000_000)
    unlock_threshold_ns: int = S("int", 1000, "Phase error beyond which a locked clock re-acquires",
      minimum=2, maximum=10_000_000)
    qualify_s: int = S("int", 10, "Seconds a returning reference must be good before it drives the clock",
      minimum=1, maximum=86_400)
    warmup_s: int = S("int", 10, "Oscillator warm-up after start before a reference may drive the clock",
      minimum=0, maximum=86_400)
    holdover_spec_ns: int = S("int", 1000, "Holdover stays 'within spec' (PTP clockClass 7, NTP stratum 1) "
      "while the error bound is below this", minimum=10, maximum=1_000_000_000)
    holdover_temp_k: float = S("float", 1.0, "Temperature excursion allowed for in the holdover bound when no "
      "thermometer reading exists", minimum=0.0, maximum=100.0, unit="K")
    degraded_class: str = S("enum", "A", "PTP default profile: clockClass after holdover spec (A: 52, B: 187)",
      choices=("A", "B"))
    save_interval_s: int = S("int", 600, "How often the learned oscillator state is saved while locked",
      minimum=10, maximum=86_400)
    restore_max_age_s: int = S("int", 86_400, "A learned state older than this is not trusted at start",
      minimum=0, maximum=30 * 86_400)


@dataclass(frozen=True)
class IntegritySettings:
    """``integrity.*``: GNSS integrity: spoofing and jamming checks on the first receiver."""

    enabled: bool = S("bool", True, "Check the GNSS reference for spoofing and jamming")
    action: str = S("enum", "reject", "On spoofing or jamming: reject the reference and hold over, or only "
      "raise the alarm (monitor)", choices=("reject", "monitor"))
    position: str = S("position", "", "Antenna position as \"lat_deg,lon_deg,alt_m\" (WGS-84, height above "
      "mean sea level); empty: survey it in", restart=False)
    survey_s: int = S("int", 3600, "Survey-in: seconds of 3D fixes averaged into the antenna's home position",
      minimum=60, maximum=7 * 86_400)
    survey_max_std_m: float = S("float", 10.0, "Survey-in: largest scatter of the fixes (rms, m) accepted",
      minimum=0.1, maximum=1000.0)
    position_limit_m: float = S("float", 50.0, "A fix this far from home is a position push (spoofing)",
      minimum=1.0, maximum=100_000.0)
    phase_k: float = S("float", 3.0, "A phase this many times its predicted error bound away is a time jump",
      minimum=1.5, maximum=100.0)
    drift_threshold_ns: float = S("float", 40.0, "Phase drift from the prediction accumulated beyond 5 ns/s "
      "that counts as a time push", minimum=10.0, maximum=100_000.0)
    qualification_s: int = S("int", 60, "A rejected reference must be consistent this long before it is "
      "used again", minimum=10, maximum=86_400)
    ntp_servers: tuple[str, ...] = S("servers", (), "NTP servers for a coarse cross-check of GNSS time (host or "
      "host:port; comma-separated with --set); empty: none")
    ntp_interval_s: int = S("int", 64, "Seconds between NTP cross-check polls of each server",
      minimum=16, maximum=86_400)
    ntp_margin_ms: float = S("float", 5.0, "GNSS time this far beyond NTP's own uncertainty is spoofing",
      minimum=0.5, maximum=10_000.0)


@dataclass(frozen=True)
class ReferencesSettings:
    """``references.*``: time references beyond the GNSS receivers, and how one is chosen."""

    revertive: bool = S("bool", True, "Return to a higher-priority reference once it has been qualified for "
      "references.wait_to_restore_s; false: stay on the active one until it fails")
    wait_to_restore_s: int = S("int", 60, "A returning higher-priority reference is qualified this long "
      "before the clock goes back to it (revertive policy)", minimum=0, maximum=86_400)
    step_limit_ns: int = S("int", 20, "At a switch of reference, the largest phase difference handed to "
      "the loop; the rest is built out and slewed away", minimum=0, maximum=1_000_000_000)
    slew_ns_per_s: float = S("float", 0.0, "How fast a built-out phase difference is slewed away after a "
      "switch, so the clock ends on the new reference (never faster than the loop can follow locked); 0: kept until "
      "the next switch", minimum=0.0, maximum=1_000_000.0)
    qualify_s: int = S("int", 10, "Seconds of samples without a gap before a reference is qualified",
      minimum=0, maximum=86_400)
    ptp_interface: str = S("str", "", "Network interface on which the appliance follows an upstream PTP "
      "grandmaster as a slave; empty: no PTP reference")
    ptp_transport: str = S("enum", "udp4", "Transport of the upstream PTP reference", choices=("udp4", "udp6", "l2"))
    ptp_delay_mechanism: str = S("enum", "e2e", "Delay mechanism of the upstream PTP reference", choices=("e2e", "p2p"))
    ptp_domain: int = S("int", 0, "PTP domain of the upstream grandmaster", minimum=0, maximum=255)
    ptp_priority: int = S("int", 2, "Priority of the upstream PTP reference", minimum=1, maximum=99)
    ptp_accuracy_ns: int = S("int", 1000, "What the upstream PTP reference's time is good to at this port "
      "(the upstream's accuracy plus the path asymmetry PTP cannot see)", minimum=1, maximum=1_000_000_000)
    ptp_timestamping: str = S("enum", "auto", "Timestamps of the upstream PTP reference: the NIC's hardware "
      "clock, or the kernel's software timestamps; auto: hardware when the NIC offers it",
      choices=("auto", "hardware", "software"))
    ptp_arb_timescale: str = S("enum", "utc", "How to read an upstream grandmaster that announces the ARB "
      "timescale (e.g. linuxptp on the system clock): its timestamps as UTC or as TAI", choices=("utc", "tai"))
    ntp_servers: tuple[str, ...] = S("servers", (), "NTP upstream servers used as a (coarse) reference, with selection "
      "and outlier rejection; empty: no NTP reference")
    ntp_interval_s: int = S("int", 16, "Seconds between polls of each NTP upstream server", minimum=1, maximum=1024)
    ntp_priority: int = S("int", 5, "Priority of the NTP upstream reference", minimum=1, maximum=99)
    ntp_accuracy_ns: int = S("int", 1_000_000, "What NTP upstream time is taken to be good to at best (each "
      "estimate also carries its own root distance)", minimum=1, maximum=10_000_000_000)
    irig_input: str = S("str", "", "IRIG-B input: \"wav:PATH\" (AM, a WAV stream from a FIFO, file or "
      "audio capture) or \"gpio:CHIP:LINE\" (DC level shift); empty: none")
    irig_format: str = S("enum", "B122", "Coded expression of the IRIG-B input (B000-B007 DC level shift on "
      "a GPIO line, B120-B127 AM from a WAV stream)",
      choices=tuple(f"B00{i}" for i in range(8)) +
      tuple(f"B12{i}" for i in range(8)))
    irig_delay_ns: int = S("int", 0, "Cable and decoder delay compensated on the IRIG-B input",
      minimum=-1_000_000_000, maximum=1_000_000_000)
    irig_priority: int = S("int", 3, "Priority of the IRIG-B input", minimum=1, maximum=99)
    irig_accuracy_ns: int = S("int", 5_000_000, "What the IRIG-B input's time is good to (an AM input "
      "timed by an audio stream is good to milliseconds; DC level shift on a GPIO line to microseconds)",
      minimum=1, maximum=10_000_000_000)
    pps_in_device: str = S("path", "", "External 1PPS input (a kernel PPS device, e.g. /dev/pps1) whose time "
      "of day comes from the other references; empty: none")
    pps_in_priority: int = S("int", 4, "Priority of the external 1PPS input", minimum=1, maximum=99)
    pps_in_accuracy_ns: int = S("int", 100, "What the external 1PPS is good to (its source and cabling)",
      minimum=1, maximum=1_000_000_000)
    pps_in_cable_delay_ns: int = S("int", 0, "Cable delay compensated on every external 1PPS edge",
      minimum=-1_000_000, maximum=1_000_000)


@dataclass(frozen=True)
class SimSettings:
    """``sim.*``: the simulated world the appliance runs on without a receiver."""

    seed: int = S("int", 1, "Seed of the simulated world (receiver noise, oscillator noise)",
      minimum=0, maximum=2**32 - 1)
    ptp_upstream: bool = S("bool", False, "The simulated world also has an upstream PTP grandmaster (a reference "
      "named ptp, one sample per second)")
    ptp_noise_ns: float = S("float", 50.0, "Simulated upstream PTP: rms noise of a sample", minimum=0.0, maximum=1e9)
    ptp_asymmetry_ns: float = S("float", 0.0, "Simulated upstream PTP: constant error (path asymmetry)",
      minimum=-1e9, maximum=1e9)
    receiver: str = S("enum", "ublox9", "Which receiver the simulated world has, for the commands it answers: u-blox "
      "generation 9 (ZED-F9T), u-blox M8T, Unicore UM980, or an NMEA receiver that answers nothing",
      choices=("ublox9", "ublox8", "unicore", "nmea"))
    ntp_upstream: bool = S("bool", False, "The simulated world also has NTP upstream servers (a reference named ntp, "
      "one estimate per references.ntp_interval_s)")
    ntp_noise_ns: float = S("float", 200_000.0, "Simulated NTP upstream: rms noise of an estimate",
      minimum=0.0, maximum=1e10)
    initial_clock_error_ns: int = S("int", 3_000_000, "How far off the simulated clock starts (cold start)",
      minimum=-10**12, maximum=10**12)


@dataclass(frozen=True)
class SerialOutSettings:
    """``serial_out.*``: the serial time-of-day string output."""

    device: str = S("str", "", "Serial port the time string is written to (e.g. /dev/ttyS1); empty: off")
    baud: int = S("int", 9600, "Serial line speed of the time string output", choices=STANDARD_BAUDS)
    format: str = S("enum", "zda+rmc", "Time string: NMEA ZDA, RMC, both, or the Meinberg standard string",
      choices=("zda", "rmc", "zda+rmc", "meinberg"))
    offset_ms: int = S("int", 0, "When the string is written, in ms after the second it describes begins",
      minimum=0, maximum=900)


@dataclass(frozen=True)
class PpsOutSettings:
    """``pps_out.*``: the 1PPS output."""

    sink: str = S("enum", "none", "1PPS output: none; phc (the periodic output of clock.phc_device, with "
      "clock.backend=phc); gpio (pps_out.gpio_chip/gpio_line); record (kept in memory: status and tests)",
      choices=("none", "phc", "gpio", "record"))
    phc_channel: int = S("int", 0, "Periodic-output channel of the PHC for 1PPS", minimum=0, maximum=63)
    phc_pin: int = S("int", -1, "PHC pin to switch to periodic output first; -1: leave the pins alone",
      minimum=-1, maximum=63)
    gpio_chip: str = S("path", "/dev/gpiochip0", "GPIO chip of the 1PPS line (pps_out.sink=gpio)")
    gpio_line: int = S("int", 0, "GPIO line offset of the 1PPS line", minimum=0, maximum=1023)
    width_ms: int = S("int", 100, "1PPS pulse width, ms", minimum=1, maximum=900)
    cable_delay_ns: int = S("int", 0, "1PPS cable delay to compensate (the pulse leaves this much early)",
      minimum=0, maximum=10_000_000)
    policy: str = S("enum", "squelch", "1PPS while the clock is not synchronized: squelch (no pulses), always, "
      "or flag (pulses of pps_out.flag_width_ms)", choices=("squelch", "always", "flag"))
    flag_width_ms: int = S("int", 500, "1PPS pulse width that flags an unsynchronized clock (policy flag)",
      minimum=1, maximum=900)


@dataclass(frozen=True)
class IrigOutSettings:
    """``irig_out.*``: the IRIG-B output."""

    format: str = S("enum", "none", "IRIG-B output: none; B000-B007 DC level shift (irig_out.sink gpio or "
      "record); B120-B127 amplitude-modulated on 1 kHz (irig_out.sink wav or record)",
      choices=("none", *(f"B00{d}" for d in range(8)), *(f"B12{d}" for d in range(8))))
    sink: str = S("enum", "record", "Where the IRIG-B output goes: gpio (DC level shift on irig_out.gpio_chip/"
      "gpio_line), wav (AM samples to irig_out.wav_path), or record (kept in memory: status and tests)",
      choices=("gpio", "wav", "record"))
    timezone: str = S("str", "UTC", "Time coded by IRIG-B: UTC, or an IANA zone (e.g. Europe/Berlin); the "
      "control functions carry the offset and daylight saving")
    sample_rate: int = S("int", 48_000, "Samples per second of the IRIG-B AM output", minimum=8_000, maximum=192_000,
      unit="Hz")
    wav_path: str = S("path", "", "IRIG-B AM output: a FIFO (one endless WAV stream for a player, e.g. aplay), "
      "or a file name whose segments <stem>-<UTC>.wav are written beside it; empty: <state_dir>/irig/irig-am.wav")
    wav_segment_s: int = S("int", 60, "Seconds of IRIG-B AM per WAV segment file", minimum=10, maximum=3600)
    wav_keep: int = S("int", 10, "IRIG-B AM segment files kept (the oldest are removed)", minimum=1, maximum=10_000)
    gpio_chip: str = S("path", "/dev/gpiochip0", "GPIO chip of the IRIG-B line (irig_out.sink=gpio)")
    gpio_line: int = S("int", 1, "GPIO line offset of the IRIG-B line", minimum=0, maximum=1023)
    cable_delay_ns: int = S("int", 0, "IRIG-B cable delay to compensate", minimum=0, maximum=10_000_000)


@dataclass(frozen=True)
class WebSettings:
    """``web.*``: the web console, REST API and /metrics."""

    enabled: bool = S("bool", True, "Serve the web console, REST API and /metrics (HTTPS)")
    listen: str = S("address", "127.0.0.1", "Address the web console binds (0.0.0.0 or :: to serve the network)")
    port: int = S("int", 8443, "TCP port of the web console (HTTPS)", minimum=1, maximum=65535)
    cert: str = S("path", "", "TLS certificate (PEM) of the console; empty: a self-signed one in <state_dir>")
    key: str = S("path", "", "Private key (PEM) of web.cert")
    metrics_public: bool = S("bool", False, "Serve /metrics without a session or token (for a Prometheus server)")
    session_timeout_s: int = S("int", 3600, "Console sessions end this long after login",
      minimum=60, maximum=7 * 86_400)
    lockout_failures: int = S("int", 5, "Failed logins in a row that lock an account", minimum=2, maximum=100)
    lockout_s: int = S("int", 900, "How long a locked account stays locked", minimum=10, maximum=86_400)
    rate_per_s: int = S("int", 20, "Requests per second each client address may make (burst: 5 s worth)",
      minimum=1, maximum=10_000)
    max_requests_per_s: int = S("int", 20, "Requests per second the console serves for all clients together; "
      "burst 5 s worth; beyond it requests wait their turn (up to 5 s, then 503), so a flood cannot take time "
      "serving's CPU; 0: no budget", minimum=0, maximum=100_000)


@dataclass(frozen=True)
class AuditSettings:
    """``audit.*``: the audit trail."""

    max_age_days: int = S("int", 3650, "Audit records older than this are pruned (a checkpoint keeps the chain "
      "verifiable)", minimum=1, maximum=36_500)
    max_records: int = S("int", 10_000_000, "Most audit records kept", minimum=1000, maximum=1_000_000_000)
    syslog: str = S("str", "", "Forward audit records to a syslog collector: tls://HOST[:6514] (RFC 5425), "
      "tcp://HOST[:514] (RFC 6587), udp://HOST[:514] or HOST:PORT (UDP); empty: off (the chain is not anchored)")
    syslog_ca: str = S("path", "", "CA file (PEM) the collector's TLS certificate must chain to; empty: the "
      "system's CAs")
    syslog_cert: str = S("path", "", "Client certificate (PEM) for collectors that ask for one; empty: none")
    syslog_key: str = S("path", "", "Private key of audit.syslog_cert (PEM); empty: in syslog_cert")
    syslog_server_name: str = S("str", "", "Name the collector's certificate must carry; empty: the host of "
      "audit.syslog")
    syslog_queue: int = S("int", 10_000, "Audit records queued for a TCP/TLS collector that is away; beyond it the "
      "oldest are dropped, counted and alarmed", minimum=1, maximum=1_000_000)
    syslog_facility: int = S("int", 13, "Syslog facility of forwarded audit records (13: log audit)",
      minimum=0, maximum=23)


@dataclass(frozen=True)
class QualitySettings:
    """``quality.*``: the time-quality record."""

    enabled: bool = S("bool", True, "Keep the time-quality record (one sample a second, downsampled as it ages)")
    keep_days: int = S("int", 400, "Days the time-quality record is kept", minimum=1, maximum=36_500)


@dataclass(frozen=True)
class NtpSettings:
    """``ntp.*``: the NTP server."""

    enabled: bool = S("bool", True, "Serve NTP")
    listen: str = S("address", "0.0.0.0", "Address the NTP server binds (:: serves IPv6 and IPv4)")
    port: int = S("int", 123, "UDP port of the NTP server", minimum=1, maximum=65535)
    workers: int = S("int", 0, "NTP worker processes sharing the port (SO_REUSEPORT); 0: one per CPU",
      minimum=0, maximum=64)
    allow: tuple[str, ...] = S("networks", ("0.0.0.0/0", "::/0"),
      "Clients allowed (the most specific rule of allow/deny wins; to serve nobody, set ntp.enabled = false)",
      empty_ok=False)
    deny: tuple[str, ...] = S("networks", (), "Clients denied")
    deny_action: str = S("enum", "drop", "Answer to a denied client: drop, or a kiss-o'-death DENY or RSTR",
      choices=("drop", "deny", "rstr"))
    rate_limit_per_s: float = S("float", 16.0, "Average requests per second one client may send (0: no limit); "
      "beyond it, one KoD RATE a second and the rest dropped", minimum=0.0, maximum=1_000_000.0)
    rate_limit_burst: int = S("int", 32, "Requests a client may send at once before the rate applies",
      minimum=1, maximum=1_000_000)
    keys_file: str = S("path", "", "Symmetric keys (MD5, SHA1, AES128 CMAC) for authenticated clients")
    nts_enabled: bool = S("bool", False, "Serve NTS (RFC 8915): an NTS-KE server over TLS 1.3 and NTS-authenticated "
      "NTP on ntp.port")
    nts_port: int = S("int", 4460, "TCP port of the NTS-KE server", minimum=1, maximum=65535)
    nts_certificate: str = S("path", "", "PEM certificate chain of the NTS-KE server; empty: a self-signed one made "
      "in the state directory (nts/cert.pem) for ntp.nts_server_names")
    nts_private_key: str = S("path", "", "PEM private key of ntp.nts_certificate; empty: with the self-signed one")
    nts_server_names: str = S("str", "localhost,127.0.0.1,::1", "Comma-separated DNS names and addresses a "
      "self-signed NTS certificate is made for")
    nts_key_rotation_s: int = S("int", 86_400, "Seconds between new cookie master keys (4 are kept: a cookie stays "
      "good for at least 3 rotations)", minimum=60, maximum=31_536_000)
    nts_rate_limit_per_s: float = S("float", 2.0, "NTS-KE connections per second one client may open (0: no limit)",
      minimum=0.0, maximum=100_000.0)
    nts_max_connections: int = S("int", 64, "NTS-KE connections held at once (a quarter of them, 8 at most, "
      "per client); when all are held, an unfinished one is pushed out",
      minimum=1, maximum=10_000)


@dataclass(frozen=True)
class PtpSettings:
    """``ptp.*``: the PTP grandmaster port (the profile's values, overlaid by these)."""

    interface: str = S("str", "", "Network interface of the PTP port; empty: PTP disabled")
    transport: str = S("enum", "auto", "PTP transport: UDP over IPv4 or IPv6 (ports 319/320), or Ethernet "
      "(EtherType 0x88F7); auto: the profile's first (l2 for G.8275.1 and C37.238, else udp4)",
      choices=("auto", "udp4", "udp6", "l2"))
    profile: str = S("enum", "default-e2e", "PTP profile (a file in deploy/ptp-profiles); also sets the clockClass "
      "rules", choices=("default-e2e", "default-p2p", "g8275.1", "g8275.2", "c37.238", "st2059-2", "gptp"))
    domain: int = S("int", -1, "PTP domain number; -1: the profile's", minimum=-1, maximum=255)
    delay_mechanism: str = S("enum", "auto", "Delay mechanism; auto: the profile's", choices=("auto", "e2e", "p2p"))
    priority1: int = S("int", -1, "priority1 of the default data set; -1: the profile's", minimum=-1, maximum=255)
    priority2: int = S("int", -1, "priority2 of the default data set; -1: the profile's", minimum=-1, maximum=255)
    local_priority: int = S("int", -1, "G.8275.x localPriority; -1: the profile's", minimum=-1, maximum=255)
    log_sync_interval: int = S("int", 127, "log2 of the Sync interval (-4: 16/s); 127: the profile's",
      minimum=-7, maximum=127, unit="log₂ s")
    log_announce_interval: int = S("int", 127, "log2 of the Announce interval; 127: the profile's",
      minimum=-3, maximum=127, unit="log₂ s")
    log_min_delay_req_interval: int = S("int", 127, "log2 of the shortest Delay_Req / Pdelay_Req interval asked "
      "of slaves; 127: the profile's", minimum=-7, maximum=127, unit="log₂ s")
    announce_receipt_timeout: int = S("int", 0, "Announce intervals without a foreign master's Announce before it "
      "is forgotten; 0: the profile's", minimum=0, maximum=255, unit="intervals")
    l2_destination: str = S("enum", "auto", "Ethernet destination of non-peer messages: the forwardable "
      "01:1B:19:00:00:00 or the non-forwardable 01:80:C2:00:00:0E; auto: the profile's",
      choices=("auto", "forwardable", "non-forwardable"))
    unicast_max_clients: int = S("int", 0, "Most unicast-negotiated clients granted at once; 0: the profile's",
      minimum=0, maximum=100_000)
    grandmaster_id: int = S("int", -1, "C37.238 grandmasterID in the IEEE_C37_238 TLV; -1: the profile's",
      minimum=-1, maximum=255)
    path_trace: bool = S("bool", False, "IEEE 1588 path trace (16.2): Announce messages carry a PATH_TRACE TLV "
      "with this clock's identity, and an Announce whose path already holds it (a loop) is discarded")
    management: str = S("enum", "get", "PTP management messages: off, answer GET only, or also accept SET of "
      "priority1/priority2 (where the profile allows) from ptp.management_allow", choices=("off", "get", "get-set"))
    management_allow: tuple[str, ...] = S(
      "networks", ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "::1/128", "fc00::/7", "fe80::/10"),
      "Sources over UDP whose management messages are answered (GET, and SET when enabled); over Ethernet the "
      "link is the boundary")
    timestamping: str = S("enum", "auto", "PTP timestamps: the NIC's hardware clock, or the kernel's software "
      "timestamps; auto: hardware when the NIC offers it", choices=("auto", "hardware", "software"))
    native_sync: str = S("enum", "auto", "Who sends the Syncs, their Follow_Ups and unicast Announces: auto, a native "
      "thread at each stream's slot when it is built and timestamps are software over UDP (else the port itself); "
      "off, always the port on the event loop", choices=("auto", "off"))
    rate_limit_per_s: float = S("float", 200.0, "Average PTP requests per second one source may send (Delay_Req, "
      "Pdelay_Req, management, signaling); beyond it they are dropped and counted", minimum=1.0, maximum=1_000_000.0)
    neighbor_prop_delay_thresh_ns: int = S("int", 0, "IEEE 802.1AS (gptp): the longest link delay at which the "
      "port is asCapable and sends Announce and Sync (neighborPropDelayThresh); 0: the profile's 800 ns (software "
      "timestamps need more)", minimum=0, maximum=1_000_000_000)
    smpte_frame_rate: str = S("str", "30000/1001", "SMPTE ST 2059-2: defaultSystemFrameRate of the synchronization "
      "metadata (N/D, an integer or 29.97-style decimal); drop-frame time code is flagged for 30000/1001 and "
      "60000/1001")
    smpte_time_zone: str = S("str", "UTC", "SMPTE ST 2059-2: the local time zone of the synchronization metadata "
      "(UTC, or an IANA zone such as America/New_York): its offset, daylight saving and next jump")
    spp: int = S("int", -1, "PTP authentication (IEEE 1588-2019 16.14): the Security Parameters Pointer of the "
      "security association in ptp.sa_file that signs every message sent and checks every message received; "
      "-1: off", minimum=-1, maximum=255)
    sa_file: str = S("path", "", "Security association file, linuxptp's format ([security_association], spp, keys "
      "'id SHA256-128|SHA256|AES128|AES256 [length] HEX:|B64:|ASCII:key'); needed with ptp.spp")
    active_key_id: int = S("int", 0, "Key of the ptp.spp association that signs what the port sends (received "
      "messages may use any key of it)", minimum=0, maximum=2**32 - 1)
    auth_accept_unsigned: bool = S("bool", False, "With ptp.spp: also accept unsigned messages (slaves not yet "
      "configured); wrongly signed ones are dropped all the same")


@dataclass(frozen=True)
class SnmpSettings:
    """``snmp.*``: the SNMP agent and its notifications."""

    enabled: bool = S("bool", False, "Serve SNMP (the appliance MIB, SNMPv2-MIB system group) and send notifications")
    listen: str = S("address", "127.0.0.1", "Address the SNMP agent binds (0.0.0.0 or :: to serve the network)")
    port: int = S("int", 161, "UDP port of the SNMP agent", minimum=1, maximum=65535)
    allow: tuple[str, ...] = S("networks", ("127.0.0.0/8", "::1/128"), "Networks allowed to query the agent; other "
      "sources get no answer (to answer nobody, set snmp.enabled = false)", empty_ok=False)
    rate_per_s: int = S("int", 200, "Requests per second one source address may send (burst: 2 s worth)",
      minimum=1, maximum=100_000)
    max_requests_per_s: int = S("int", 100, "Requests per second the agent answers for all sources together; "
      "beyond it requests wait their turn in the socket (up to 1 s, then dropped); 0: no budget",
      minimum=0, maximum=100_000)
    community: str = S("str", "", "SNMPv2c read-only community; empty: SNMPv2c off (SNMPv3 only)", secret=True)
    users_file: str = S("path", "", "SNMPv3 users (TOML, mode 0600; `appliance snmp user-add`); empty: "
      "<state_dir>/snmp-users.toml")
    v3_allow_without_privacy: bool = S("bool", False, "Accept SNMPv3 users without encryption (authNoPriv)")
    trap_receivers: str = S("str", "", "Notification receivers, comma-separated: v2c:COMMUNITY@HOST:PORT or "
      "v3:USER@HOST:PORT (a user of snmp.users_file; IPv6 hosts in brackets)", secret=True)
    engine_id: str = S("str", "", "SNMPv3 engine ID in hex (receivers of v3 traps configure it); empty: made on "
      "first start from snmp.enterprise and kept in <state_dir>/snmp-engine-id")
    informs: bool = S("bool", False, "Send informs (acknowledged, retried) instead of traps")
    enterprise: int = S("int", 99999, "Private enterprise number of the appliance MIB (99999 is a placeholder; "
      "`appliance snmp mib` renders the MIB with yours)", minimum=1, maximum=2**31 - 1)
    sys_contact: str = S("str", "", "SNMPv2-MIB sysContact")
    sys_location: str = S("str", "", "SNMPv2-MIB sysLocation")
    sys_name: str = S("str", "", "SNMPv2-MIB sysName; empty: the host name")


@dataclass(frozen=True)
class AuthSettings:
    """``auth.*``: external logins for the console (RADIUS or LDAP); API tokens stay local users' own."""

    method: str = S("enum", "local", "Who checks console passwords: local (the appliance's users), radius or ldap",
      choices=("local", "radius", "ldap"))
    fallback: str = S("enum", "unreachable", "With radius or ldap: unreachable (local users may log in only when no "
      "server answers) or never", choices=("unreachable", "never"))
    radius_servers: str = S("str", "", "RADIUS servers tried in order, comma-separated HOST or HOST:PORT (port 1812 "
      "by default; IPv6 hosts in brackets)")
    radius_secret: str = S("str", "", "RADIUS shared secret of the servers", secret=True)
    radius_timeout_s: float = S("float", 3.0, "How long to wait for each RADIUS server's answer",
      minimum=0.1, maximum=30.0)
    radius_role_attribute: str = S("str", "Filter-Id", "Attribute of an Access-Accept that names the role: a RADIUS "
      "attribute (Filter-Id, Class, Reply-Message) or VENDOR_ID:TYPE for a vendor attribute (string)")
    radius_roles: str = S("str", "", "Rules from that attribute's value to a role, tried in order, ';'-separated "
      "ROLE=VALUE (admin=appliance-admin;operator=appliance-operator); an Access-Accept no rule maps is refused")
    ldap_servers: str = S("str", "", "LDAP servers tried in order, comma-separated ldaps://HOST[:PORT] or "
      "ldap://HOST[:PORT] (ldap:// needs auth.ldap_starttls)")
    ldap_starttls: bool = S("bool", True, "Upgrade ldap:// connections with StartTLS (ldap:// without it is refused)")
    ldap_ca_file: str = S("path", "", "CA certificates (PEM) the LDAP servers' certificates are verified against")
    ldap_timeout_s: float = S("float", 3.0, "Connection and answer timeout for each LDAP server",
      minimum=0.1, maximum=30.0)
    ldap_bind_dn: str = S("str", "", "DN of the service account that searches users; empty: anonymous search")
    ldap_bind_password: str = S("str", "", "Password of auth.ldap_bind_dn", secret=True)
    ldap_base: str = S("str", "", "Base DN under which users and groups are searched")
    ldap_user_filter: str = S("str", "(uid={user})", "Filter that finds a user's entry; {user} is the login name, "
      "escaped")
    ldap_roles: str = S("str", "", "Rules from group DNs to roles, tried in order, ';'-separated ROLE=GROUP_DN "
      "(admin=cn=admins,ou=groups,dc=example,dc=org); a user in no mapped group is refused")


@dataclass(frozen=True)
class TopSettings:
    """Top-level settings: where the appliance keeps its state."""

    state_dir: str = S("path", "~/.local/state/appliance",
      "Directory for learned clock state, audit store and the control socket", empty_ok=False)
    cpu_latency_us: int = S("int", -1, "Hold the CPUs' wake-up latency at most this while running (the kernel's PM "
      "QoS request, /dev/cpu_dma_latency; needs root): idle CPUs poll (0) or sleep only shallowly, so a Sync's "
      "timer or a packet's wake-up is not delayed by a deep sleep, at the price of power; -1: the kernel's own "
      "idle policy", minimum=-1, maximum=1_000_000)


@dataclass(frozen=True)
class MonitorSettings:
    """``monitor.*``: the sync monitor of downstream clients (NTP hosts and PTP slaves measured against the served
    time)."""

    ntp_targets: tuple[str, ...] = S("servers", (), "NTP hosts to measure by client-mode exchanges (host or "
      "host:port; the host serves NTP, e.g. chronyd with an allow line); empty: none")
    ptp_targets: tuple[str, ...] = S("servers", (), "PTP slaves to measure through linuxptp's NetSync Monitor "
      "(nsm): IPv4 addresses (udp4) or MAC addresses (l2); each runs ptp4l with net_sync_monitor 1; empty: none")
    interval_s: int = S("int", 16, "Seconds between polls of each target", minimum=1, maximum=3600)
    timeout_s: float = S("float", 1.0, "Seconds to wait for a target's answer", minimum=0.05, maximum=30.0)
    limit_ns: int = S("int", 1_000_000, "Largest |offset| of a target from the served time before its alarm "
      "(raised after 2 answers in a row beyond it, cleared after 2 within 80 % of it)", minimum=1,
      maximum=1_000_000_000_000)
    limits: str = S("str", "", "Per-target limits overriding monitor.limit_ns, as \"TARGET=NS,TARGET=NS\" "
      "(TARGET as listed in monitor.ntp_targets or monitor.ptp_targets); empty: monitor.limit_ns for all")
    nsm_path: str = S("path", "nsm", "linuxptp's nsm program (a name is looked up on PATH)")
    ptp_interface: str = S("str", "", "Network interface nsm sends its requests on (needed with "
      "monitor.ptp_targets)")
    ptp_transport: str = S("enum", "udp4", "Transport of the NSM requests", choices=("udp4", "l2"))
    ptp_domain: int = S("int", 0, "PTP domain of the monitored slaves", minimum=0, maximum=255)
    ptp_timestamping: str = S("enum", "software", "Timestamps nsm takes: the kernel's software timestamps, or the "
      "NIC's hardware clock (which must then carry the served time)", choices=("software", "hardware"))


@dataclass(frozen=True)
class ControlSettings:
    """``control.*``: the local control socket."""

    socket: str = S("path", "", "Unix socket of `appliance status`; empty: <state_dir>/control.sock")


@dataclass(frozen=True)
class LogSettings:
    """``log.*``: logging."""

    level: str = S("enum", "info", "Log verbosity", choices=("debug", "info", "warning", "error"), restart=False)


SECTIONS: dict[str, type] = {
    "gnss": GnssSettings,
    "clock": ClockSettings,
    "integrity": IntegritySettings,
    "references": ReferencesSettings,
    "sim": SimSettings,
    "serial_out": SerialOutSettings,
    "pps_out": PpsOutSettings,
    "irig_out": IrigOutSettings,
    "web": WebSettings,
    "audit": AuditSettings,
    "quality": QualitySettings,
    "ntp": NtpSettings,
    "ptp": PtpSettings,
    "snmp": SnmpSettings,
    "auth": AuthSettings,
    "monitor": MonitorSettings,
    "": TopSettings,
    "control": ControlSettings,
    "log": LogSettings,
}


def _rows() -> tuple[Setting, ...]:
    rows = []
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            name = f"{section}.{f.name}" if section else f.name
            row = f.metadata["setting"]
            unit = row["unit"] or (unit_of(name) if row["type"] in ("int", "float") else "")
            rows.append(Setting(name, default=f.default, **(row | {"unit": unit})))
    return tuple(rows)


SETTINGS: tuple[Setting, ...] = _rows()
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
