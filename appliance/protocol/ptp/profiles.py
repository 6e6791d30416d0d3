"""PTP profiles: one TOML file each (deploy/ptp-profiles, shipped in the package), overlaid by the ptp.* settings.

Pure core except ``load_profile``, which reads the packaged file.  ``resolve`` turns a profile and the settings into
the ``PortConfig`` the port engine runs with, and lists what it had to refuse (a transport the profile does not
allow) and what it applied against the profile's advice (a value outside the profile's range: applied, with a
warning, since operators do run 16 Sync/s on the default profile).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

PROFILE_NAMES = ("default-e2e", "default-p2p", "g8275.1", "g8275.2", "c37.238", "st2059-2", "gptp")
L2_FORWARDABLE = "01:1B:19:00:00:00"  # IEEE 1588-2019 Annex E.3: all messages but the peer delay ones
L2_NON_FORWARDABLE = "01:80:C2:00:00:0E"  # peer delay messages; G.8275.1 may use it for everything
UNSPECIFIED_LOG = 127  # logMessageInterval 0x7F: "not specified" (IEEE 1588-2019 13.3.2.14)


@dataclass(frozen=True)
class Profile:
    name: str
    standard: str
    profile_identity: str
    transports: tuple[str, ...]
    delay_mechanism: str  # "e2e" | "p2p"
    domain: int
    priority1: int
    priority2: int
    local_priority: int
    log_announce_interval: int
    announce_receipt_timeout: int
    log_sync_interval: int
    log_min_delay_req_interval: int
    log_min_pdelay_req_interval: int
    dataset_comparison: str  # "ieee1588" (9.3.4) or "g8275" (G.8275.1 6.3 / G.8275.2 6.7 alternate BMCA)
    clock_class_rules: str  # "default" | "telecom"
    management_set: tuple[str, ...]
    l2_destination: str = L2_FORWARDABLE
    unicast_negotiation: bool = False
    multicast: bool = True
    unicast_max_clients: int = 0
    unicast_duration_s: tuple[int, int] = (60, 1000)
    unicast_log_announce_interval: tuple[int, int] = (-3, 0)
    unicast_log_sync_interval: tuple[int, int] = (-7, 0)
    unicast_log_delay_resp_interval: tuple[int, int] = (-7, 0)
    c37238_tlv: bool = False
    grandmaster_id: int = 0
    master_only: bool = False
    smpte_tlv: bool = False  # SMPTE ST 2059-2 synchronization metadata in a management message every second
    major_sdo_id: int = 0  # 1: IEEE 802.1AS (transportSpecific 1)
    follow_up_info: bool = False  # 802.1AS: every Follow_Up carries the Follow_Up information TLV
    as_capable_required: bool = False  # 802.1AS: Announce and Sync only while the link is asCapable
    neighbor_prop_delay_thresh_ns: int = 800  # 802.1AS neighborPropDelayThresh
    path_trace: bool = False  # the profile's path trace default (802.1AS: on)
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)


def load_profile(name: str) -> Profile:
    """The packaged profile file ``name``.toml."""
    if name not in PROFILE_NAMES:
        raise ValueError(f"unknown PTP profile {name!r}; expected one of {', '.join(PROFILE_NAMES)}")
    text = resources.files("appliance").joinpath("data", "ptp-profiles", f"{name}.toml").read_text()
    return parse_profile(text, f"{name}.toml")


def _pair(origin: str, key: str, value: Any) -> tuple[int, int]:
    """A [low, high] pair of integers, or the file's error."""
    if not isinstance(value, list) or len(value) != 2 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                 for x in value):
        raise ValueError(f"{origin}: {key} must be a [low, high] pair of integers, got {value!r}")
    return value[0], value[1]


def parse_profile(text: str, origin: str) -> Profile:
    try:
        raw: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{origin}: {exc}") from None
    ranges_raw = raw.pop("ranges", {})
    if not isinstance(ranges_raw, dict):
        raise ValueError(f"{origin}: ranges must be a table of [low, high] pairs")
    ranges = {k: _pair(origin, f"ranges.{k}", v) for k, v in ranges_raw.items()}
    known = set(Profile.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{origin}: unknown keys {', '.join(unknown)}")
    for key in ("transports", "management_set"):
        raw[key] = tuple(raw.get(key, ()))
    for key in ("unicast_duration_s", "unicast_log_announce_interval", "unicast_log_sync_interval",
                "unicast_log_delay_resp_interval"):
        if key in raw:
            raw[key] = _pair(origin, key, raw[key])
    raw.setdefault("local_priority", 128)
    raw.setdefault("master_only", raw.get("clock_class_rules") == "telecom")  # G.8275.x T-GM ports: masterOnly
    try:
        return Profile(ranges=ranges, **raw)
    except TypeError as exc:
        raise ValueError(f"{origin}: {exc}") from None


@dataclass(frozen=True)
class PortConfig:
    """Everything one port runs with, after profile and settings are merged (or, for the upstream reference's
    slaveOnly port, from its settings: refs/ptp_slave.py)."""

    profile: str
    transport: str
    delay_mechanism: str
    domain: int
    priority1: int
    priority2: int
    local_priority: int
    log_announce_interval: int
    announce_receipt_timeout: int
    log_sync_interval: int
    log_min_delay_req_interval: int
    log_min_pdelay_req_interval: int
    dataset_comparison: str
    management: str  # "off" | "get" | "get-set"
    management_set: tuple[str, ...]
    l2_destination: str
    multicast: bool
    unicast_negotiation: bool
    unicast_max_clients: int
    unicast_duration_s: tuple[int, int]
    unicast_log_announce_interval: tuple[int, int]
    unicast_log_sync_interval: tuple[int, int]
    unicast_log_delay_resp_interval: tuple[int, int]
    c37238_tlv: bool
    grandmaster_id: int
    master_only: bool
    rate_limit_per_s: float = 200.0
    path_trace: bool = False
    slave_only: bool = False
    two_step: bool = True
    smpte_tlv: bool = False
    major_sdo_id: int = 0
    follow_up_info: bool = False
    as_capable_required: bool = False
    neighbor_prop_delay_thresh_ns: int = 800
    # The slave role of a slaveOnly port: how it reads a master whose Announce has PTP_TIMESCALE clear ("utc" or
    # "tai"), and TAI - UTC in seconds for one that does not vouch for its own currentUtcOffset (measure.py).
    arb_timescale: str = "utc"
    tai_utc_s: int | None = None
    # The masters a slaveOnly port with unicast negotiation asks for Announce (transport addresses; ptp4l's
    # unicast_master_table).
    unicast_masters: tuple[Any, ...] = ()


def resolve(profile: Profile, settings: dict[str, Any]) -> tuple[PortConfig, list[str], list[str]]:
    """(config, errors, warnings) from a profile and the ``ptp.*`` settings (names without the prefix)."""
    errors: list[str] = []
    warnings: list[str] = []

    def pick(key: str, unset: Any) -> Any:
        value = settings.get(key, unset)
        chosen = getattr(profile, key) if value == unset else value
        lo_hi = profile.ranges.get(key)
        if lo_hi is not None and not lo_hi[0] <= chosen <= lo_hi[1]:
            warnings.append(f"ptp.{key}={chosen} is outside the {profile.name} profile's range "
                            f"[{lo_hi[0]}, {lo_hi[1]}]: applied all the same; slaves of the profile may reject it")
        return chosen

    transport = str(settings.get("transport", "auto"))
    transport = profile.transports[0] if transport == "auto" else transport
    if transport not in profile.transports:
        errors.append(f"ptp.transport={transport} is not allowed by the {profile.name} profile "
                      f"(allowed: {', '.join(profile.transports)})")
    delay = str(settings.get("delay_mechanism", "auto"))
    delay = profile.delay_mechanism if delay == "auto" else delay
    if profile.unicast_negotiation and delay == "p2p":
        errors.append(f"the {profile.name} profile has no peer delay mechanism")
    l2 = str(settings.get("l2_destination", "auto"))
    l2_dest = {"auto": profile.l2_destination, "forwardable": L2_FORWARDABLE,
               "non-forwardable": L2_NON_FORWARDABLE}.get(l2, profile.l2_destination)
    priority1 = pick("priority1", -1)
    if profile.dataset_comparison == "g8275" and priority1 != 128:
        errors.append(f"the {profile.name} profile fixes priority1 at 128 (got {priority1})")
    max_clients = int(settings.get("unicast_max_clients", 0)) or profile.unicast_max_clients
    gm_id = int(settings.get("grandmaster_id", -1))
    gm_id = profile.grandmaster_id if gm_id < 0 else gm_id
    if profile.c37238_tlv and not 3 <= gm_id <= 254:
        errors.append(f"ptp.grandmaster_id={gm_id}: IEEE C37.238-2017 allows 3 to 254")
    config = PortConfig(
        profile=profile.name, transport=transport, delay_mechanism=delay,
        domain=pick("domain", -1), priority1=priority1, priority2=pick("priority2", -1),
        local_priority=pick("local_priority", -1),
        log_announce_interval=pick("log_announce_interval", UNSPECIFIED_LOG),
        announce_receipt_timeout=pick("announce_receipt_timeout", 0),
        log_sync_interval=pick("log_sync_interval", UNSPECIFIED_LOG),
        log_min_delay_req_interval=pick("log_min_delay_req_interval", UNSPECIFIED_LOG),
        log_min_pdelay_req_interval=(profile.log_min_pdelay_req_interval
                                     if settings.get("log_min_delay_req_interval", UNSPECIFIED_LOG) == UNSPECIFIED_LOG
                                     else int(settings["log_min_delay_req_interval"])),
        dataset_comparison=profile.dataset_comparison, management=str(settings.get("management", "get")),
        management_set=profile.management_set, l2_destination=l2_dest, multicast=profile.multicast,
        unicast_negotiation=profile.unicast_negotiation, unicast_max_clients=max_clients,
        unicast_duration_s=profile.unicast_duration_s,
        unicast_log_announce_interval=profile.unicast_log_announce_interval,
        unicast_log_sync_interval=profile.unicast_log_sync_interval,
        unicast_log_delay_resp_interval=profile.unicast_log_delay_resp_interval,
        c37238_tlv=profile.c37238_tlv, grandmaster_id=gm_id, master_only=profile.master_only,
        rate_limit_per_s=float(settings.get("rate_limit_per_s", 200.0)),
        path_trace=bool(settings.get("path_trace", False)) or profile.path_trace, smpte_tlv=profile.smpte_tlv,
        major_sdo_id=profile.major_sdo_id, follow_up_info=profile.follow_up_info,
        as_capable_required=profile.as_capable_required,
        neighbor_prop_delay_thresh_ns=int(settings.get("neighbor_prop_delay_thresh_ns", 0))
        or profile.neighbor_prop_delay_thresh_ns)
    return config, errors, warnings


def port_config_from(settings: dict[str, Any]) -> tuple[PortConfig, list[str], list[str]]:
    """From the ``ptp.*`` settings (prefix stripped): load the named profile and resolve."""
    return resolve(load_profile(str(settings.get("profile", "default-e2e"))), settings)
