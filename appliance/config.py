"""One declarative table of every setting, and the loader that checks a configuration against it.

Core module: pure except ``load``, which reads the TOML file it is given.  A configuration is the embedded
default, overlaid by an optional TOML file, overlaid by ``--set KEY=VALUE`` pairs; every problem found on the way is
collected (not raised one at a time) so an operator sees them all at once.
"""

from __future__ import annotations

import ipaddress
import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STANDARD_BAUDS = (1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600)


@dataclass(frozen=True)
class Setting:
    """One row of the settings table."""

    name: str
    type: str  # "str" | "int" | "float" | "bool" | "enum" | "address" | "path" | "networks"
    default: Any
    help: str
    restart: bool = True  # a change takes effect only after a restart
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] = ()

    def allowed(self) -> str:
        """What values are allowed, in words, for error messages and `config list`."""
        if self.choices:
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.type in ("int", "float") and (self.minimum is not None or self.maximum is not None):
            return f"{self.type} in [{_fmt(self.minimum)}, {_fmt(self.maximum)}]"
        return {"address": "an IPv4 or IPv6 address", "position": "\"lat_deg,lon_deg,alt_m\" or empty",
                "servers": "a list of NTP servers like [\"ntp1.example\", \"192.0.2.1:123\"]", "bool": "true or false", "path": "a file path",
                "networks": "a list of networks like [\"192.0.2.0/24\", \"2001:db8::/32\"] (comma-separated "
                            "with --set)"}.get(
            self.type, self.type)


def _fmt(v: float | None) -> str:
    if v is None:
        return "…"
    return str(int(v)) if float(v).is_integer() else str(v)


S = Setting
SETTINGS: tuple[Setting, ...] = (
    # --- receiver -------------------------------------------------------------------------------------------
    S("gnss.device", "path", "", "Serial device of the GNSS receiver (e.g. /dev/ttyS0); empty: simulated receiver"),
    S("gnss.baud", "int", 9600, "Serial line speed of the receiver", choices=STANDARD_BAUDS),
    S("gnss.pps_device", "path", "", "Kernel PPS source paired with the receiver (e.g. /dev/pps0); empty: none"),
    S("gnss.epoch_idle_ms", "int", 300, "Quiet time after which a receiver epoch is considered complete",
      minimum=20, maximum=2000, restart=False),
    S("gnss.no_data_timeout_s", "int", 5, "Seconds without a decodable sentence before the receiver is NO_DATA",
      minimum=1, maximum=300, restart=False),
    S("gnss.label_max_age_ms", "int", 900, "Latest a time label may follow its PPS edge and still name its second",
      minimum=100, maximum=990, restart=False),
    S("gnss.reconnect_max_s", "float", 30.0, "Longest back-off between attempts to reopen a lost receiver",
      minimum=0.1, maximum=3600),
    S("gnss.cable_delay_ns", "int", 0, "Antenna cable and receiver delay compensated on every PPS edge",
      minimum=-1_000_000, maximum=1_000_000, restart=False),
    # --- clock --------------------------------------------------------------------------------------------
    S("clock.oscillator", "enum", "ocxo", "Local oscillator fitted (sets the holdover model)",
      choices=("tcxo", "ocxo", "ocxo-hp", "rubidium")),
    S("clock.leap_file", "path", "", "IERS leap-seconds.list to use instead of the packaged one if newer"),
    S("clock.backend", "enum", "auto", "Clock steered: simulated oscillator, software clock over the host clock "
      "(never touches it), the system clock or a PHC; auto: simulated without a receiver, software with one",
      choices=("auto", "simulated", "software", "system", "phc")),
    S("clock.phc_device", "path", "", "PTP hardware clock steered when clock.backend is phc (e.g. /dev/ptp0)"),
    S("clock.time_constant_s", "float", 0.0, "DPLL time constant; 0: the oscillator's best (where its stability "
      "meets the reference noise)", minimum=0.0, maximum=10_000.0),
    S("clock.max_frequency_ppb", "float", 2000.0, "Frequency correction clamp (also the slew rate limit)",
      minimum=1.0, maximum=500_000.0),
    S("clock.step_threshold_ns", "int", 100_000, "On first lock, offsets beyond this are stepped; after first "
      "lock the clock only slews", minimum=0, maximum=1_000_000_000),
    S("clock.slew_only", "bool", False, "Never step the clock, not even on first lock"),
    S("clock.lock_threshold_ns", "int", 100, "Phase error within which the clock counts as locked",
      minimum=1, maximum=1_000_000),
    S("clock.unlock_threshold_ns", "int", 1000, "Phase error beyond which a locked clock re-acquires",
      minimum=2, maximum=10_000_000),
    S("clock.qualify_s", "int", 10, "Seconds a returning reference must be good before it drives the clock",
      minimum=1, maximum=86_400, restart=False),
    S("clock.warmup_s", "int", 10, "Oscillator warm-up after start before a reference may drive the clock",
      minimum=0, maximum=86_400),
    S("clock.holdover_spec_ns", "int", 1000, "Holdover stays 'within spec' (PTP clockClass 7, NTP stratum 1) "
      "while the error bound is below this", minimum=10, maximum=1_000_000_000),
    S("clock.holdover_temp_k", "float", 1.0, "Temperature excursion allowed for in the holdover bound when no "
      "thermometer reading exists", minimum=0.0, maximum=100.0),
    S("clock.degraded_class", "enum", "A", "PTP default profile: clockClass after holdover spec (A: 52, B: 187)",
      choices=("A", "B")),
    S("clock.save_interval_s", "int", 600, "How often the learned oscillator state is saved while locked",
      minimum=10, maximum=86_400),
    S("clock.restore_max_age_s", "int", 86_400, "A learned state older than this is not trusted at start",
      minimum=0, maximum=30 * 86_400),
    S("gnss.accuracy_ns", "int", 20, "Time accuracy of receiver, antenna and cabling (part of the error bound)",
      minimum=0, maximum=1_000_000, restart=False),
    # --- GNSS integrity ------------------------------------------------------------------------------------
    S("integrity.enabled", "bool", True, "Check the GNSS reference for spoofing and jamming"),
    S("integrity.action", "enum", "reject", "On spoofing or jamming: reject the reference and hold over, or only "
      "raise the alarm (monitor)", choices=("reject", "monitor")),
    S("integrity.position", "position", "", "Antenna position as \"lat_deg,lon_deg,alt_m\" (WGS-84, height above "
      "mean sea level); empty: survey it in"),
    S("integrity.survey_s", "int", 3600, "Survey-in: seconds of 3D fixes averaged into the antenna's home position",
      minimum=60, maximum=7 * 86_400),
    S("integrity.survey_max_std_m", "float", 10.0, "Survey-in: largest scatter of the fixes (rms, m) accepted",
      minimum=0.1, maximum=1000.0),
    S("integrity.position_limit_m", "float", 50.0, "A fix this far from home is a position push (spoofing)",
      minimum=1.0, maximum=100_000.0),
    S("integrity.phase_k", "float", 3.0, "A phase this many times its predicted error bound away is a time jump",
      minimum=1.5, maximum=100.0),
    S("integrity.drift_threshold_ns", "float", 40.0, "Phase drift from the prediction accumulated beyond 5 ns/s "
      "that counts as a time push", minimum=10.0, maximum=100_000.0),
    S("integrity.qualification_s", "int", 60, "A rejected reference must be consistent this long before it is "
      "used again", minimum=10, maximum=86_400),
    S("integrity.ntp_servers", "servers", (), "NTP servers for a coarse cross-check of GNSS time (host or "
      "host:port; comma-separated with --set); empty: none"),
    S("integrity.ntp_interval_s", "int", 64, "Seconds between NTP cross-check polls of each server",
      minimum=16, maximum=86_400),
    S("integrity.ntp_margin_ms", "float", 5.0, "GNSS time this far beyond NTP's own uncertainty is spoofing",
      minimum=0.5, maximum=10_000.0),
    # --- references -------------------------------------------------------------------------------------------
    S("references.revertive", "bool", True, "Return to a higher-priority reference once it has been qualified for "
      "references.wait_to_restore_s; false: stay on the active one until it fails"),
    S("references.wait_to_restore_s", "int", 60, "A returning higher-priority reference is qualified this long "
      "before the clock goes back to it (revertive policy)", minimum=0, maximum=86_400),
    S("references.step_limit_ns", "int", 20, "At a switch of reference, the largest phase difference handed to "
      "the loop; the rest is built out and slewed away", minimum=0, maximum=1_000_000_000),
    S("references.slew_ns_per_s", "float", 0.0, "How fast a built-out phase difference is slewed away after a "
      "switch, so the clock ends on the new reference (never faster than the loop can follow locked); 0: kept until "
      "the next switch", minimum=0.0, maximum=1_000_000.0),
    S("references.qualify_s", "int", 10, "Seconds of samples without a gap before a reference is qualified",
      minimum=0, maximum=86_400),
    S("references.gnss_priority", "int", 1, "Priority of the GNSS receiver (1 is the highest)", minimum=1,
      maximum=99),
    S("references.gnss2_device", "path", "", "Serial device of a second GNSS receiver on its own antenna, a hot "
      "standby (e.g. /dev/ttyS2); empty: none"),
    S("references.gnss2_baud", "int", 9600, "Serial line speed of the second receiver", choices=STANDARD_BAUDS),
    S("references.gnss2_pps_device", "path", "", "Kernel PPS source of the second receiver (e.g. /dev/pps2)"),
    S("references.gnss2_priority", "int", 1, "Priority of the second receiver (equal to the first: a hot standby "
      "the clock does not leave once on it)", minimum=1, maximum=99),
    S("references.ptp_interface", "str", "", "Network interface on which the appliance follows an upstream PTP "
      "grandmaster as a slave; empty: no PTP reference"),
    S("references.ptp_transport", "enum", "udp4", "Transport of the upstream PTP reference",
      choices=("udp4", "udp6", "l2")),
    S("references.ptp_delay_mechanism", "enum", "e2e", "Delay mechanism of the upstream PTP reference",
      choices=("e2e", "p2p")),
    S("references.ptp_domain", "int", 0, "PTP domain of the upstream grandmaster", minimum=0, maximum=255),
    S("references.ptp_priority", "int", 2, "Priority of the upstream PTP reference", minimum=1, maximum=99),
    S("references.ptp_accuracy_ns", "int", 1000, "What the upstream PTP reference's time is good to at this port "
      "(the upstream's accuracy plus the path asymmetry PTP cannot see)", minimum=1, maximum=1_000_000_000),
    S("references.ptp_timestamping", "enum", "auto", "Timestamps of the upstream PTP reference: the NIC's hardware "
      "clock, or the kernel's software timestamps; auto: hardware when the NIC offers it",
      choices=("auto", "hardware", "software")),
    S("references.ptp_arb_timescale", "enum", "utc", "How to read an upstream grandmaster that announces the ARB "
      "timescale (e.g. linuxptp on the system clock): its timestamps as UTC or as TAI", choices=("utc", "tai")),
    S("references.ntp_servers", "servers", (), "NTP upstream servers used as a (coarse) reference, with selection "
      "and outlier rejection; empty: no NTP reference"),
    S("references.ntp_interval_s", "int", 16, "Seconds between polls of each NTP upstream server", minimum=1,
      maximum=1024),
    S("references.ntp_priority", "int", 5, "Priority of the NTP upstream reference", minimum=1, maximum=99),
    S("references.ntp_accuracy_ns", "int", 1_000_000, "What NTP upstream time is taken to be good to at best (each "
      "estimate also carries its own root distance)", minimum=1, maximum=10_000_000_000),
    S("references.irig_input", "str", "", "IRIG-B input: \"wav:PATH\" (AM, a WAV stream from a FIFO, file or "
      "audio capture) or \"gpio:CHIP:LINE\" (DC level shift); empty: none"),
    S("references.irig_format", "enum", "B122", "Coded expression of the IRIG-B input (B000-B007 DC level shift on "
      "a GPIO line, B120-B127 AM from a WAV stream)", choices=tuple(f"B00{i}" for i in range(8)) +
      tuple(f"B12{i}" for i in range(8))),
    S("references.irig_delay_ns", "int", 0, "Cable and decoder delay compensated on the IRIG-B input",
      minimum=-1_000_000_000, maximum=1_000_000_000),
    S("references.irig_priority", "int", 3, "Priority of the IRIG-B input", minimum=1, maximum=99),
    S("references.irig_accuracy_ns", "int", 5_000_000, "What the IRIG-B input's time is good to (an AM input "
      "timed by an audio stream is good to milliseconds; DC level shift on a GPIO line to microseconds)",
      minimum=1, maximum=10_000_000_000),
    S("references.pps_in_device", "path", "", "External 1PPS input (a kernel PPS device, e.g. /dev/pps1) whose time "
      "of day comes from the other references; empty: none"),
    S("references.pps_in_priority", "int", 4, "Priority of the external 1PPS input", minimum=1, maximum=99),
    S("references.pps_in_accuracy_ns", "int", 100, "What the external 1PPS is good to (its source and cabling)",
      minimum=1, maximum=1_000_000_000),
    S("references.pps_in_cable_delay_ns", "int", 0, "Cable delay compensated on every external 1PPS edge",
      minimum=-1_000_000, maximum=1_000_000),
    # --- simulation -------------------------------------------------------------------------------------------
    S("sim.seed", "int", 1, "Seed of the simulated world (receiver noise, oscillator noise)", minimum=0,
      maximum=2**32 - 1),
    S("sim.ptp_upstream", "bool", False, "The simulated world also has an upstream PTP grandmaster (a reference "
      "named ptp, one sample per second)"),
    S("sim.ptp_noise_ns", "float", 50.0, "Simulated upstream PTP: rms noise of a sample", minimum=0.0,
      maximum=1e9),
    S("sim.ptp_asymmetry_ns", "float", 0.0, "Simulated upstream PTP: constant error (path asymmetry)",
      minimum=-1e9, maximum=1e9),
    S("sim.gnss2", "bool", False, "The simulated world also has a second receiver on its own antenna (a reference "
      "named gnss2)"),
    S("sim.ntp_upstream", "bool", False, "The simulated world also has NTP upstream servers (a reference named ntp, "
      "one estimate per references.ntp_interval_s)"),
    S("sim.ntp_noise_ns", "float", 200_000.0, "Simulated NTP upstream: rms noise of an estimate", minimum=0.0,
      maximum=1e10),
    S("sim.initial_clock_error_ns", "int", 3_000_000, "How far off the simulated clock starts (cold start)",
      minimum=-10**12, maximum=10**12),
    # --- outputs --------------------------------------------------------------------------------------------
    S("serial_out.device", "str", "", "Serial port the time string is written to (e.g. /dev/ttyS1); empty: off"),
    S("serial_out.baud", "int", 9600, "Serial line speed of the time string output", choices=STANDARD_BAUDS),
    S("serial_out.format", "enum", "zda+rmc", "Time string: NMEA ZDA, RMC, both, or the Meinberg standard string",
      choices=("zda", "rmc", "zda+rmc", "meinberg")),
    S("serial_out.offset_ms", "int", 0, "When the string is written, in ms after the second it describes begins",
      minimum=0, maximum=900),
    S("pps_out.sink", "enum", "none", "1PPS output: none; phc (the periodic output of clock.phc_device, with "
      "clock.backend=phc); gpio (pps_out.gpio_chip/gpio_line); record (kept in memory: status and tests)",
      choices=("none", "phc", "gpio", "record")),
    S("pps_out.phc_channel", "int", 0, "Periodic-output channel of the PHC for 1PPS", minimum=0, maximum=63),
    S("pps_out.phc_pin", "int", -1, "PHC pin to switch to periodic output first; -1: leave the pins alone",
      minimum=-1, maximum=63),
    S("pps_out.gpio_chip", "path", "/dev/gpiochip0", "GPIO chip of the 1PPS line (pps_out.sink=gpio)"),
    S("pps_out.gpio_line", "int", 0, "GPIO line offset of the 1PPS line", minimum=0, maximum=1023),
    S("pps_out.width_ms", "int", 100, "1PPS pulse width, ms", minimum=1, maximum=900),
    S("pps_out.cable_delay_ns", "int", 0, "1PPS cable delay to compensate (the pulse leaves this much early)",
      minimum=0, maximum=10_000_000),
    S("pps_out.policy", "enum", "squelch", "1PPS while the clock is not synchronized: squelch (no pulses), always, "
      "or flag (pulses of pps_out.flag_width_ms)", choices=("squelch", "always", "flag")),
    S("pps_out.flag_width_ms", "int", 500, "1PPS pulse width that flags an unsynchronized clock (policy flag)",
      minimum=1, maximum=900),
    S("irig_out.format", "enum", "none", "IRIG-B output: none; B000-B007 DC level shift (irig_out.sink gpio or "
      "record); B120-B127 amplitude-modulated on 1 kHz (irig_out.sink wav or record)",
      choices=("none", *(f"B00{d}" for d in range(8)), *(f"B12{d}" for d in range(8)))),
    S("irig_out.sink", "enum", "record", "Where the IRIG-B output goes: gpio (DC level shift on irig_out.gpio_chip/"
      "gpio_line), wav (AM samples to irig_out.wav_path), or record (kept in memory: status and tests)",
      choices=("gpio", "wav", "record")),
    S("irig_out.timezone", "str", "UTC", "Time coded by IRIG-B: UTC, or an IANA zone (e.g. Europe/Berlin); the "
      "control functions carry the offset and daylight saving"),
    S("irig_out.sample_rate", "int", 48_000, "Samples per second of the IRIG-B AM output", minimum=8_000,
      maximum=192_000),
    S("irig_out.wav_path", "path", "", "IRIG-B AM output: a FIFO (one endless WAV stream for a player, e.g. aplay), "
      "or a file name whose segments <stem>-<UTC>.wav are written beside it; empty: <state_dir>/irig/irig-am.wav"),
    S("irig_out.wav_segment_s", "int", 60, "Seconds of IRIG-B AM per WAV segment file", minimum=10, maximum=3600),
    S("irig_out.wav_keep", "int", 10, "IRIG-B AM segment files kept (the oldest are removed)", minimum=1,
      maximum=10_000),
    S("irig_out.gpio_chip", "path", "/dev/gpiochip0", "GPIO chip of the IRIG-B line (irig_out.sink=gpio)"),
    S("irig_out.gpio_line", "int", 1, "GPIO line offset of the IRIG-B line", minimum=0, maximum=1023),
    S("irig_out.cable_delay_ns", "int", 0, "IRIG-B cable delay to compensate", minimum=0, maximum=10_000_000),
    # --- console, audit, time-quality record --------------------------------------------------------------
    S("web.enabled", "bool", True, "Serve the web console, REST API and /metrics (HTTPS)"),
    S("web.listen", "address", "127.0.0.1", "Address the web console binds (0.0.0.0 or :: to serve the network)"),
    S("web.port", "int", 8443, "TCP port of the web console (HTTPS)", minimum=1, maximum=65535),
    S("web.cert", "path", "", "TLS certificate (PEM) of the console; empty: a self-signed one in <state_dir>"),
    S("web.key", "path", "", "Private key (PEM) of web.cert"),
    S("web.metrics_public", "bool", False, "Serve /metrics without a session or token (for a Prometheus server)"),
    S("web.session_timeout_s", "int", 3600, "Console sessions end this long after login", minimum=60,
      maximum=7 * 86_400),
    S("web.lockout_failures", "int", 5, "Failed logins in a row that lock an account", minimum=2, maximum=100),
    S("web.lockout_s", "int", 900, "How long a locked account stays locked", minimum=10, maximum=86_400),
    S("web.rate_per_s", "int", 20, "Requests per second each client address may make (burst: 5 s worth)",
      minimum=1, maximum=10_000),
    S("web.max_requests_per_s", "int", 20, "Requests per second the console serves for all clients together; "
      "burst 5 s worth; beyond it requests wait their turn (up to 5 s, then 503), so a flood cannot take time serving's CPU; 0: no "
      "budget", minimum=0, maximum=100_000),
    S("audit.max_age_days", "int", 3650, "Audit records older than this are pruned (a checkpoint keeps the chain "
      "verifiable)", minimum=1, maximum=36_500),
    S("audit.max_records", "int", 10_000_000, "Most audit records kept", minimum=1000, maximum=1_000_000_000),
    S("audit.syslog", "str", "", "Forward audit records as RFC 5424 syslog over UDP to HOST:PORT; empty: off"),
    S("audit.syslog_facility", "int", 13, "Syslog facility of forwarded audit records (13: log audit)",
      minimum=0, maximum=23),
    S("quality.enabled", "bool", True, "Keep the time-quality record (one sample a second, downsampled as it ages)"),
    S("quality.keep_days", "int", 400, "Days the time-quality record is kept", minimum=1, maximum=36_500),
    S("ntp.enabled", "bool", True, "Serve NTP"),
    S("ntp.listen", "address", "0.0.0.0", "Address the NTP server binds (:: serves IPv6 and IPv4)"),
    S("ntp.port", "int", 123, "UDP port of the NTP server", minimum=1, maximum=65535),
    S("ntp.workers", "int", 0, "NTP worker processes sharing the port (SO_REUSEPORT); 0: one per CPU",
      minimum=0, maximum=64),
    S("ntp.fast_path", "enum", "auto", "Serve the common request in the native fast path (auto: when built)",
      choices=("auto", "on", "off")),
    S("ntp.allow", "networks", ("0.0.0.0/0", "::/0"), "Clients allowed (the most specific rule of allow/deny wins)"),
    S("ntp.deny", "networks", (), "Clients denied"),
    S("ntp.deny_action", "enum", "drop", "Answer to a denied client: drop, or a kiss-o'-death DENY or RSTR",
      choices=("drop", "deny", "rstr")),
    S("ntp.rate_limit_per_s", "float", 16.0, "Average requests per second one client may send (0: no limit); "
      "beyond it, one KoD RATE a second and the rest dropped", minimum=0.0, maximum=1_000_000.0),
    S("ntp.rate_limit_burst", "int", 32, "Requests a client may send at once before the rate applies",
      minimum=1, maximum=1_000_000),
    S("ntp.keys_file", "path", "", "Symmetric keys (MD5, SHA1, AES128 CMAC) for authenticated clients"),
    S("ptp.interface", "str", "", "Network interface of the PTP port; empty: PTP disabled"),
    S("ptp.transport", "enum", "auto", "PTP transport: UDP over IPv4 or IPv6 (ports 319/320), or Ethernet "
      "(EtherType 0x88F7); auto: the profile's first (l2 for G.8275.1 and C37.238, else udp4)",
      choices=("auto", "udp4", "udp6", "l2")),
    S("ptp.profile", "enum", "default-e2e", "PTP profile (a file in deploy/ptp-profiles); also sets the clockClass "
      "rules", choices=("default-e2e", "default-p2p", "g8275.1", "g8275.2", "c37.238")),
    S("ptp.domain", "int", -1, "PTP domain number; -1: the profile's", minimum=-1, maximum=255),
    S("ptp.delay_mechanism", "enum", "auto", "Delay mechanism; auto: the profile's", choices=("auto", "e2e", "p2p")),
    S("ptp.priority1", "int", -1, "priority1 of the default data set; -1: the profile's", minimum=-1, maximum=255),
    S("ptp.priority2", "int", -1, "priority2 of the default data set; -1: the profile's", minimum=-1, maximum=255),
    S("ptp.local_priority", "int", -1, "G.8275.x localPriority; -1: the profile's", minimum=-1, maximum=255),
    S("ptp.log_sync_interval", "int", 127, "log2 of the Sync interval (-4: 16/s); 127: the profile's",
      minimum=-7, maximum=127),
    S("ptp.log_announce_interval", "int", 127, "log2 of the Announce interval; 127: the profile's",
      minimum=-3, maximum=127),
    S("ptp.log_min_delay_req_interval", "int", 127, "log2 of the shortest Delay_Req / Pdelay_Req interval asked "
      "of slaves; 127: the profile's", minimum=-7, maximum=127),
    S("ptp.announce_receipt_timeout", "int", 0, "Announce intervals without a foreign master's Announce before it "
      "is forgotten; 0: the profile's", minimum=0, maximum=255),
    S("ptp.l2_destination", "enum", "auto", "Ethernet destination of non-peer messages: the forwardable "
      "01:1B:19:00:00:00 or the non-forwardable 01:80:C2:00:00:0E; auto: the profile's",
      choices=("auto", "forwardable", "non-forwardable")),
    S("ptp.unicast_max_clients", "int", 0, "Most unicast-negotiated clients granted at once; 0: the profile's",
      minimum=0, maximum=100_000),
    S("ptp.grandmaster_id", "int", -1, "C37.238 grandmasterID in the IEEE_C37_238 TLV; -1: the profile's",
      minimum=-1, maximum=255),
    S("ptp.path_trace", "bool", False, "IEEE 1588 path trace (16.2): Announce messages carry a PATH_TRACE TLV "
      "with this clock's identity, and an Announce whose path already holds it (a loop) is discarded"),
    S("ptp.management", "enum", "get", "PTP management messages: off, answer GET only, or also accept SET of "
      "priority1/priority2 (where the profile allows) from ptp.management_allow", choices=("off", "get", "get-set")),
    S("ptp.management_allow", "networks", ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                             "::1/128", "fc00::/7", "fe80::/10"),
      "Sources over UDP whose management messages are answered (GET, and SET when enabled); over Ethernet the "
      "link is the boundary"),
    S("ptp.timestamping", "enum", "auto", "PTP timestamps: the NIC's hardware clock, or the kernel's software "
      "timestamps; auto: hardware when the NIC offers it", choices=("auto", "hardware", "software")),
    S("ptp.rate_limit_per_s", "float", 200.0, "Average PTP requests per second one source may send (Delay_Req, "
      "Pdelay_Req, management, signaling); beyond it they are dropped and counted", minimum=1.0, maximum=1_000_000.0),
    S("snmp.enabled", "bool", False, "Serve SNMP (the appliance MIB, SNMPv2-MIB system group) and send notifications"),
    S("snmp.listen", "address", "127.0.0.1", "Address the SNMP agent binds (0.0.0.0 or :: to serve the network)"),
    S("snmp.port", "int", 161, "UDP port of the SNMP agent", minimum=1, maximum=65535),
    S("snmp.allow", "networks", ("127.0.0.0/8", "::1/128"), "Networks allowed to query the agent; other sources get "
      "no answer"),
    S("snmp.rate_per_s", "int", 200, "Requests per second one source address may send (burst: 2 s worth)",
      minimum=1, maximum=100_000),
    S("snmp.max_requests_per_s", "int", 100, "Requests per second the agent answers for all sources together; "
      "beyond it requests wait their turn in the socket (up to 1 s, then dropped); 0: no budget",
      minimum=0, maximum=100_000),
    S("snmp.community", "str", "", "SNMPv2c read-only community; empty: SNMPv2c off (SNMPv3 only)"),
    S("snmp.users_file", "path", "", "SNMPv3 users (TOML, mode 0600; `appliance snmp user add`); empty: "
      "<state_dir>/snmp-users.toml"),
    S("snmp.v3_allow_without_privacy", "bool", False, "Accept SNMPv3 users without encryption (authNoPriv)"),
    S("snmp.trap_receivers", "str", "", "Notification receivers, comma-separated: v2c:COMMUNITY@HOST:PORT or "
      "v3:USER@HOST:PORT (a user of snmp.users_file; IPv6 hosts in brackets)"),
    S("snmp.engine_id", "str", "", "SNMPv3 engine ID in hex (receivers of v3 traps configure it); empty: made on "
      "first start from snmp.enterprise and kept in <state_dir>/snmp-engine-id"),
    S("snmp.informs", "bool", False, "Send informs (acknowledged, retried) instead of traps"),
    S("snmp.enterprise", "int", 99999, "Private enterprise number of the appliance MIB (99999 is a placeholder; "
      "`appliance snmp mib` renders the MIB with yours)", minimum=1, maximum=2**31 - 1),
    S("snmp.sys_contact", "str", "", "SNMPv2-MIB sysContact"),
    S("snmp.sys_location", "str", "", "SNMPv2-MIB sysLocation"),
    S("snmp.sys_name", "str", "", "SNMPv2-MIB sysName; empty: the host name"),
    # --- appliance -----------------------------------------------------------------------------------------
    S("state_dir", "path", "~/.local/state/appliance",
      "Directory for learned clock state, audit store and the control socket"),
    S("control.socket", "path", "", "Unix socket of `appliance status`; empty: <state_dir>/control.sock"),
    S("log.level", "enum", "info", "Log verbosity", choices=("debug", "info", "warning", "error"),
      restart=False),
)
del S

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


class ConfigError(Exception):
    """A configuration with one or more problems; ``problems`` holds one line each."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Config:
    """A checked configuration: every setting has a value of its declared type."""

    values: Mapping[str, Any]
    origins: Mapping[str, str] = field(default_factory=dict)  # name -> "default" | file path | "--set"

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def state_path(self) -> Path:
        return Path(str(self.values["state_dir"])).expanduser()

    def control_socket_path(self) -> Path:
        explicit = str(self.values["control.socket"])
        return Path(explicit).expanduser() if explicit else self.state_path() / "control.sock"

    def changed_from_default(self) -> dict[str, Any]:
        return {k: v for k, v in self.values.items() if v != BY_NAME[k].default}


def defaults() -> Config:
    return Config({s.name: s.default for s in SETTINGS}, {s.name: "default" for s in SETTINGS})


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested TOML tables to dotted names: ``{"gnss": {"baud": 9600}}`` -> ``{"gnss.baud": 9600}``."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name not in BY_NAME:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def check_value(setting: Setting, value: Any, from_text: bool = False) -> tuple[Any, str | None]:
    """Coerce ``value`` to the setting's type; return (value, None) or (None, problem)."""
    try:
        coerced = _coerce(setting, value, from_text)
    except (TypeError, ValueError, OverflowError) as exc:
        return None, f"{setting.name}: {exc}; allowed: {setting.allowed()}"
    if setting.choices and coerced not in setting.choices:
        return None, f"{setting.name}: {value!r} is not allowed; allowed: {setting.allowed()}"
    too_low = setting.minimum is not None and coerced < setting.minimum
    too_high = setting.maximum is not None and coerced > setting.maximum
    if too_low or too_high:
        return None, f"{setting.name}: {coerced!r} is out of range; allowed: {setting.allowed()}"
    return coerced, None


def _coerce(setting: Setting, value: Any, from_text: bool) -> Any:
    kind = setting.type
    if kind == "bool":
        if from_text and isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        if isinstance(value, bool):
            return value
        raise TypeError(f"expected true or false, got {value!r}")
    if kind == "int":
        return _to_int(value, from_text)
    if kind == "float":
        if from_text and isinstance(value, str):
            number = float(value)
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"expected a number, got {value!r}")
        else:
            number = float(value)  # OverflowError for an int beyond the float range
        if not math.isfinite(number):
            raise ValueError(f"expected a finite number, got {value!r}")
        return number
    if kind == "networks":
        return _networks(value, from_text)
    if kind == "servers":
        return _servers(value, from_text)
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    if kind == "address":
        ipaddress.ip_address(value)  # ValueError names the bad text
    if kind == "position" and value.strip():
        parse_position(value)
    return value


def parse_position(text: str) -> tuple[float, float, float]:
    """\"lat_deg,lon_deg,alt_m\" -> floats, checked for range."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3:
        raise ValueError(f"expected lat_deg,lon_deg,alt_m, got {text!r}")
    lat, lon, alt = (float(p) for p in parts)
    if not (-90 <= lat <= 90 and -180 <= lon <= 180 and -1000 <= alt <= 100_000):
        raise ValueError(f"position out of range: {text!r}")
    return lat, lon, alt


def split_server(text: str) -> tuple[str, int]:
    """\"host\", \"host:port\", \"[v6]:port\" or a bare IPv6 address -> (host, port)."""
    text = text.strip()
    host, port = text, 123
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"bad server {text!r}")
            port = int(rest[1:])
    elif text.count(":") == 1:
        host, _, p = text.partition(":")
        port = int(p)
    if not host or not 0 < port < 65536 or any(c.isspace() for c in host):
        raise ValueError(f"bad server {text!r}")
    return host, port


def _servers(value: Any, from_text: bool) -> tuple[str, ...]:
    if from_text and isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"expected a list of servers, got {value!r}")
    for text in value:
        split_server(text)
    return tuple(value)


def _networks(value: Any, from_text: bool) -> tuple[str, ...]:
    if from_text and isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"expected a list of networks, got {value!r}")
    for text in value:
        ipaddress.ip_network(text, strict=False)  # ValueError names the bad entry
    return tuple(value)


def _to_int(value: Any, from_text: bool) -> int:
    if from_text and isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            raise ValueError(f"expected an integer, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _unknown(name: str) -> str:
    close = [s.name for s in SETTINGS if s.name.split(".")[-1] == name.split(".")[-1]]
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return f"{name}: unknown setting{hint}; `appliance config list` shows them all"


def merge(base: Config, overrides: Mapping[str, Any], origin: str, from_text: bool = False,
          problems: list[str] | None = None) -> Config:
    """Overlay ``overrides`` on ``base``; problems are appended to ``problems`` (raised if it is None)."""
    collected: list[str] = [] if problems is None else problems
    values, origins = dict(base.values), dict(base.origins)
    for name, raw in overrides.items():
        setting = BY_NAME.get(name)
        if setting is None:
            collected.append(_unknown(name))
            continue
        value, problem = check_value(setting, raw, from_text)
        if problem:
            collected.append(problem)
            continue
        values[name], origins[name] = value, origin
    if problems is None and collected:
        raise ConfigError(collected)
    return Config(values, origins)


def parse_set_pairs(pairs: Iterable[str], problems: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            problems.append(f"--set {pair!r}: expected KEY=VALUE")
            continue
        out[key.strip()] = value.strip()
    return out


def load_text(text: str, origin: str, problems: list[str]) -> dict[str, Any]:
    try:
        return flatten(tomllib.loads(text))
    except ValueError as exc:  # TOMLDecodeError, or an integer too long for int() (over 4300 digits)
        problems.append(f"{origin}: not valid TOML: {exc}")
        return {}


def load(path: str | None = None, set_pairs: Iterable[str] = ()) -> Config:
    """Embedded default <- TOML file <- settings saved from the console (``<state_dir>/console-settings.toml``) <-
    --set pairs.  Raises ConfigError listing every problem."""
    problems: list[str] = []
    config = defaults()
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: cannot read configuration: {exc}")
        else:
            config = merge(config, load_text(text, path, problems), path, problems=problems)
    overrides = parse_set_pairs(set_pairs, problems)
    config = merge(config, overrides, "--set", from_text=True, problems=problems)
    console = Path(str(config["state_dir"])).expanduser() / CONSOLE_FILE
    if console.exists():  # changes saved from the web console or the REST API, under --set
        try:
            text = console.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{console}: cannot read saved console settings: {exc}")
        else:
            saved = {k: v for k, v in load_text(text, str(console), problems).items() if k not in overrides}
            config = merge(config, saved, "console", problems=problems)
    if problems:
        raise ConfigError(problems)
    return config


def to_toml(config: Config, only_changed: bool = False) -> str:
    """Render a configuration as TOML grouped by part (for `config list --toml` and the deploy default)."""
    groups: dict[str, list[str]] = {}
    for s in SETTINGS:
        value = config.values[s.name]
        if only_changed and value == s.default:
            continue
        part, _, key = s.name.rpartition(".")
        groups.setdefault(part, []).append(f"# {s.help}\n{key} = {_toml_value(value)}")
    chunks = ["\n".join(groups.pop("", []))] if "" in groups else []
    chunks += [f"[{part}]\n" + "\n".join(lines) for part, lines in groups.items()]
    return "\n\n".join(c for c in chunks if c) + "\n"


CONSOLE_FILE = "console-settings.toml"


def toml_value(value: Any) -> str:
    """A value as TOML text."""
    return _toml_value(value)


def _toml_value(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
