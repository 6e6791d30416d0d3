"""What each object of the appliance MIB reads in the status: one small function per scalar, one per table.

Pure core.  OIDs, types, enumerations and access come from the MIB (``mibgen.load_table``); here is only where a
value comes from, keyed by the MIB's object names (a test checks that every readable object has one, and nothing
else).  A function returns a plain value: int, str, bool (TruthValue), an enumeration label, a ``DateAndTime`` as
TAI ns (``Stamp``), or None where the object has no instance now.  ``Snap`` carries the status dict and what a
status does not hold (the UTC label function).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance.units import NS_PER_S

UNKNOWN_BOUND = 4_294_967_295
NO_PHASE = -2_147_483_648
OUTPUTS = ("ntp", "ptp", "irig", "pps", "serial", "web", "audit")  # applianceOutputIndex order


@dataclass(frozen=True)
class Stamp:
    """A DateAndTime: the TAI instant, rendered in UTC by the view."""

    tai_ns: int


@dataclass(frozen=True)
class Snap:
    status: dict[str, Any]

    @property
    def clock(self) -> dict[str, Any]:
        return self.status["clock"]

    @property
    def rx(self) -> dict[str, Any]:
        return self.status["receiver"]

    @property
    def epoch(self) -> dict[str, Any]:
        return self.rx.get("last_epoch") or {}

    @property
    def adv(self) -> dict[str, Any]:
        return self.clock.get("advertised") or {}

    def age_s(self, then_ns: int | None) -> int:
        return 0 if then_ns is None else max(0, (self.status["at_tai_ns"] - then_ns) // NS_PER_S)


def _clamp32(value: float, signed: bool = True) -> int:
    lo, hi = (-2_147_483_647, 2_147_483_647) if signed else (0, UNKNOWN_BOUND - 1)
    return int(max(lo, min(hi, round(value))))


CLOCK_STATE = {"FREERUN": "freerun", "ACQUIRING": "acquiring", "LOCKED": "locked", "HOLDOVER": "holdover",
                "HOLDOVER_EXPIRED": "holdoverExpired"}
_RX_STATE = {"disconnected": "disconnected", "no-data": "noData", "no-fix": "noFix", "2d-fix": "fix2d",
             "3d-fix": "fix3d", "time-only": "timeOnly"}
_CONSTELLATION = {"GPS": "gps", "GLONASS": "glonass", "Galileo": "galileo", "BeiDou": "beidou", "QZSS": "qzss",
                  "NavIC": "navic", "SBAS": "sbas"}
_PTP_STATE = {"INITIALIZING": "initializing", "FAULTY": "faulty", "DISABLED": "disabled", "LISTENING": "listening",
              "PRE_MASTER": "preMaster", "MASTER": "master", "PASSIVE": "passive", "UNCALIBRATED": "uncalibrated",
              "SLAVE": "slave"}


def clock_state(s: Snap) -> str:
    return CLOCK_STATE.get(s.clock["state"], "freerun")


def _fix(s: Snap) -> str:
    mode = s.epoch.get("fix_mode")
    return {1: "noFix", 2: "fix2d", 3: "fix3d"}.get(mode, "unknown") if mode is not None else "unknown"


def _position(s: Snap, key: str, scale: float) -> int | None:
    pos = s.epoch.get("position")
    if not pos or pos.get(key) is None:
        return None
    return _clamp32(pos[key] * scale)


def _nts(s: Snap) -> dict[str, Any]:
    """The NTS part of the NTP status; empty when NTS is off."""
    return (s.status["outputs"].get("ntp") or {}).get("nts") or {}


def _snmp(s: Snap) -> dict[str, Any]:
    """The SNMP agent's own part of the status (its counters); empty when the agent is off."""
    return s.status["outputs"].get("snmp") or {}


def _ntp_total(s: Snap, *keys: str) -> int | None:
    ntp = s.status["outputs"].get("ntp") or {}
    totals = ntp.get("totals")
    if not totals:
        return 0 if not ntp.get("enabled") else None
    return sum(int(v) for k, v in totals.items() if any(k == key or (key.endswith("*") and k.startswith(key[:-1]))
                                                     for key in keys))


SCALARS: dict[str, Callable[[Snap], Any]] = {
    "applianceVersion": lambda s: s.status["version"],
    "applianceMode": lambda s: s.status["mode"] if s.status["mode"] in ("simulated", "hardware") else "hardware",
    "applianceCurrentTime": lambda s: Stamp(s.status["at_tai_ns"]),
    "applianceClockState": clock_state,
    "applianceClockStateReason": lambda s: s.clock["reason"],
    "applianceClockStateTime": lambda s: s.age_s(s.clock["state_since_ns"]),
    "applianceClockClass": lambda s: s.clock["clock_class"],
    "applianceClockAccuracy": lambda s: s.clock["clock_accuracy"],
    "applianceClockErrorBound": lambda s: UNKNOWN_BOUND if s.clock["error_bound_ns"] is None else
    _clamp32(s.clock["error_bound_ns"], signed=False),
    "applianceClockPhaseOffset": lambda s: NO_PHASE if s.clock["phase_offset_ns"] is None else
    _clamp32(s.clock["phase_offset_ns"]),
    "applianceClockFrequency": lambda s: _clamp32(s.clock["frequency_ppb"] * 1000),
    "applianceClockTimeSinceLock": lambda s: s.age_s(s.clock["locked_since_ns"]) if s.clock["state"] == "LOCKED"
    and s.clock["locked_since_ns"] is not None else 0,
    "applianceClockHoldoverTime": lambda s: s.age_s(s.clock["holdover_since_ns"]) if s.clock["state"].startswith(
        "HOLDOVER") and s.clock["holdover_since_ns"] is not None else 0,
    "applianceClockForcedHoldover": lambda s: bool(s.clock["forced_holdover"]),
    "applianceClockOscillator": lambda s: s.clock["oscillator"],
    "applianceClockBackend": lambda s: s.clock["backend"],
    "applianceClockSteps": lambda s: s.clock["steps"],
    "applianceClockTimeConstant": lambda s: _clamp32(s.clock["time_constant_s"], signed=False),
    "applianceClockLearnedTime": lambda s: _clamp32(s.clock["learned_s"], signed=False),
    "applianceClockHoldoverReady": lambda s: s.clock["predicted_frequency_ppb"] is not None,
    "applianceClockOffsetScaledLogVar": lambda s: s.adv.get("offset_scaled_log_variance", 0xFFFF),
    "applianceClockTimeSource": lambda s: s.adv.get("time_source", 0xA0),
    "applianceClockTimeTraceable": lambda s: bool(s.adv.get("time_traceable")),
    "applianceClockFreqTraceable": lambda s: bool(s.adv.get("frequency_traceable")),
    "applianceClockIrigTimeQuality": lambda s: s.adv.get("irig_time_quality", 15),
    "applianceRcvName": lambda s: s.rx["name"],
    "applianceRcvDevice": lambda s: s.rx["device"],
    "applianceRcvState": lambda s: _RX_STATE.get(s.rx["state"], "noData"),
    "applianceRcvStateTime": lambda s: s.age_s(s.rx["state_since_ns"]),
    "applianceRcvFixMode": _fix,
    "applianceRcvTimeValid": lambda s: bool(s.epoch.get("time_valid")),
    "applianceRcvPositionValid": lambda s: bool(s.epoch.get("position")),
    "applianceRcvLatitude": lambda s: _position(s, "lat_deg", 1e7),
    "applianceRcvLongitude": lambda s: _position(s, "lon_deg", 1e7),
    "applianceRcvAltitude": lambda s: _position(s, "alt_m", 100),
    "applianceRcvSatellitesUsed": lambda s: sum(c["used"] for c in s.status["constellations"]),
    "applianceRcvSatellitesVisible": lambda s: sum(c["visible"] for c in s.status["constellations"]),
    "applianceRcvSurveyState": lambda s: _survey_state(s),
    "applianceRcvHdop": lambda s: 0 if s.epoch.get("hdop") is None else _clamp32(s.epoch["hdop"] * 100, False),
    "applianceRcvFrames": lambda s: sum(s.rx.get("frames", {}).values()),
    "applianceRcvRejected": lambda s: sum(s.rx.get("rejected", {}).values()),
    "applianceRcvReconnects": lambda s: s.rx.get("reconnects", 0),
    "applianceRcvDeviceError": lambda s: s.rx.get("device_error", ""),
    "applianceIntegrityLevel": lambda s: s.status["integrity"]["level"] if _integrity_on(s) else "disabled",
    "applianceIntegrityReferenceUsable": lambda s: bool((s.status.get("integrity") or {}).get("usable", True)),
    "applianceIntegrityOverride": lambda s: (s.status.get("integrity") or {}).get("override", "auto"),
    "applianceIntegrityScore": lambda s: min(1000, round(1000 * (s.status.get("integrity") or {}).get("score", 0.0))),
    "applianceIntegrityRequalifyIn": lambda s: math.ceil((s.status.get("integrity") or {}).get("requalify_in_s")
                                                         or 0),
    "applianceIntegrityRejections": lambda s: (s.status.get("integrity") or {}).get("rejections", 0),
    "applianceIntegrityReason": lambda s: "; ".join((s.status.get("integrity") or {}).get("reasons", ())),
    "applianceIntegrityHomeState": lambda s: _home_state(s),
    "applianceRefActive": lambda s: (s.status.get("references") or {}).get("active") or "",
    "applianceRefSwitches": lambda s: (s.status.get("references") or {}).get("switches", 0),
    "applianceRefPinned": lambda s: (s.status.get("references") or {}).get("pinned") or "",
    "appliancePpsSource": lambda s: s.status["pps"]["source"],
    "appliancePpsEdges": lambda s: s.status["pps"]["edges"],
    "appliancePpsPaired": lambda s: s.status["pps"]["paired"],
    "appliancePpsRejected": lambda s: sum(s.status["pps"]["rejected"].values()),
    "appliancePpsQuantError": lambda s: None if s.status["pps"]["last_qerr_ps"] is None else
    _clamp32(s.status["pps"]["last_qerr_ps"]),
    "applianceLeapTaiUtcOffset": lambda s: s.status["leap"]["tai_utc_s"],
    "applianceLeapSource": lambda s: s.status["leap"]["source"],
    "applianceLeapPending": lambda s: s.status["leap"]["pending_change_s"],
    "applianceLeapPendingUtc": lambda s: s.status["leap"]["pending_at_utc"] or "",
    "applianceLeapTableExpires": lambda s: s.status["leap"]["table_expires_utc"] or "",
    "applianceLeapTableExpired": lambda s: bool(s.status["leap"]["table_expired"]),
    "applianceAlarmsActive": lambda s: sum(1 for a in s.status["alarms"] if a["raised"]),
    "applianceNtpEnabled": lambda s: bool((s.status["outputs"].get("ntp") or {}).get("enabled")),
    "applianceNtpStratum": lambda s: s.adv.get("ntp_stratum", 16),
    "applianceNtpLeapIndicator": lambda s: s.adv.get("ntp_leap_indicator", 3),
    "applianceNtpRootDispersion": lambda s: _clamp32(s.adv.get("ntp_root_dispersion_ns", 0) / 1000, signed=False),
    "applianceNtpWorkers": lambda s: sum(1 for w in (s.status["outputs"].get("ntp") or {}).get("workers", [])
                                         if w.get("alive")),
    "applianceNtpRequests": lambda s: _ntp_total(s, "requests"),
    "applianceNtpReplies": lambda s: _ntp_total(s, "replies"),
    "applianceNtpDropped": lambda s: _ntp_total(s, "drop_*"),
    "applianceNtpKod": lambda s: _ntp_total(s, "kod_*"),
    "applianceNtpRateLimited": lambda s: _ntp_total(s, "drop_rate_limited", "kod_rate"),
    "applianceNtpAuthenticated": lambda s: _ntp_total(s, "authenticated"),
    "applianceNtpInterleaved": lambda s: _ntp_total(s, "interleaved"),
    "applianceNtpCryptoNak": lambda s: _ntp_total(s, "crypto_nak"),
    "applianceNtsEnabled": lambda s: bool(_nts(s)),
    "applianceNtsReplies": lambda s: _ntp_total(s, "nts"),
    "applianceNtsNaks": lambda s: _ntp_total(s, "nts_nak"),
    "applianceNtsKeSessions": lambda s: _nts(s).get("sessions", 0),
    "applianceNtsKeFailures": lambda s: _nts(s).get("tls_failures", 0) + _nts(s).get("ke_errors", 0),
    "applianceNtsCookieKeyAge": lambda s: _clamp32(-1 if _nts(s).get("cookie_key_age_s") is None
                                                   else _nts(s)["cookie_key_age_s"]),
    "applianceSnmpReplayDropped": lambda s: _snmp(s).get("replay_dropped", 0),
    "applianceSnmpReplayRefused": lambda s: _snmp(s).get("replay_refused", 0),
    "applianceSnmpReplayCached": lambda s: _snmp(s).get("replay_cached", 0),
}
# The objects the SNMP agent counts itself: it shows them as they are at each request (view.agent_items).
AGENT_SCALARS = ("applianceSnmpReplayDropped", "applianceSnmpReplayRefused", "applianceSnmpReplayCached")

Row = tuple[tuple[Any, ...], dict[str, Any]]  # (index values, column name -> value)


def _satellites(s: Snap) -> list[Row]:
    rows = []
    for sat in s.status["satellites"]:
        const = _CONSTELLATION.get(sat["constellation"], "unknown")
        rows.append(((const, sat["prn"]), {"applianceSatElevation": sat["elevation_deg"],
                                           "applianceSatAzimuth": sat["azimuth_deg"],
                                           "applianceSatCn0": sat["cn0_dbhz"], "applianceSatUsed": bool(sat["used"])}))
    return rows


def _constellations(s: Snap) -> list[Row]:
    return [((_CONSTELLATION.get(c["name"], "unknown"),),
             {"applianceConstUsed": c["used"], "applianceConstVisible": c["visible"],
              "applianceConstTracked": c["tracked"],
              "applianceConstMeanCn0": None if c["mean_cn0_dbhz"] is None else round(c["mean_cn0_dbhz"] * 10)})
            for c in s.status["constellations"]]


def output_row(name: str, o: dict[str, Any]) -> dict[str, Any]:
    """One output's row: enabled, state, fault and its text, a packet and an error count (what 'packets' means
    depends on the output: NTP replies, PTP Syncs sent, IRIG-B frames, 1PPS seconds, serial strings, audit records)."""
    sink = o.get("sink") or {}
    fault = o.get("error") or sink.get("error") or ""
    packets, errors = 0, 0
    if name == "ntp":
        totals = o.get("totals") or {}
        packets = totals.get("replies", 0)
        errors = sum(v for k, v in totals.items() if k.startswith("drop_"))
    elif name == "ptp":
        counters = o.get("counters") or {}
        packets = counters.get("tx_sync", counters.get("sync_sent", 0))
        errors = counters.get("send_errors", 0)
    elif name == "irig":
        packets, errors = o.get("frames", 0), o.get("lost", 0)
    elif name == "pps":
        packets, errors = o.get("seconds", 0), o.get("lost", 0)
    elif name == "serial":
        packets, errors = o.get("written", 0), o.get("write_errors", 0)
    elif name == "audit":
        packets, errors = o.get("records", 0), o.get("failures", 0)
    state = "FAULT" if fault else str(o.get("state") or ("serving" if o.get("enabled") else "disabled"))
    return {"applianceOutputName": name, "applianceOutputEnabled": bool(o.get("enabled")),
            "applianceOutputState": state, "applianceOutputFault": bool(fault), "applianceOutputFaultText": str(fault),
            "applianceOutputPackets": int(packets), "applianceOutputErrors": int(errors)}


def _outputs(s: Snap) -> list[Row]:
    outputs = s.status["outputs"]
    return [((name,), output_row(name, outputs[name])) for name in OUTPUTS if name in outputs]


def _alarms(s: Snap, index_of: Callable[[str], int]) -> list[Row]:
    return [((index_of(a["code"]),), {"applianceAlarmCode": a["code"], "applianceAlarmSeverity": a["severity"],
                                     "applianceAlarmRaisedTime": Stamp(a["at_ns"]), "applianceAlarmText": a["text"],
                                     "applianceAlarmProbableCause": a.get("probable_cause", ""),
                                     "applianceAlarmAcknowledged": bool(a.get("acked_by")),
                                     "applianceAlarmAckedBy": a.get("acked_by") or ""})
            for a in s.status["alarms"] if a["raised"]]


def _ptp_ports(s: Snap) -> list[Row]:
    p = s.status["outputs"].get("ptp") or {}
    if not p.get("enabled"):
        return []
    c = p.get("counters") or {}
    mech = {"E2E": "e2e", "P2P": "p2p", "COMMON_P2P": "commonP2p", "NONE": "noMechanism"}.get(
        str(p.get("delay_mechanism", "E2E")).upper(), "special")
    row = {"appliancePtpPortIdentity": p.get("port_identity", ""), "appliancePtpInterface": p.get("interface", ""),
           "appliancePtpPortState": _PTP_STATE.get(str(p.get("state", "")).upper(), "initializing"),
           "appliancePtpStateReason": p.get("reason", p.get("error", "")) or "",
           "appliancePtpProfile": p.get("profile", ""), "appliancePtpDomain": p.get("domain", 0),
           "appliancePtpTransport": p.get("transport", ""), "appliancePtpDelayMechanism": mech,
           "appliancePtpLogSyncInterval": p.get("log_sync_interval", 0),
           "appliancePtpLogAnnounceInterval": p.get("log_announce_interval", 0),
           "appliancePtpClockClass": p.get("clock_class", 248), "appliancePtpClockAccuracy": p.get("clock_accuracy", 254),
           "appliancePtpPriority1": p.get("priority1", 128), "appliancePtpPriority2": p.get("priority2", 128),
           "appliancePtpTimestamping": p.get("timestamping", ""),
           "appliancePtpUnicastClients": p.get("unicast_clients", 0), "appliancePtpSlavesActive": p.get("slaves_active", 0),
           "appliancePtpTxAnnounce": c.get("tx_announce", 0), "appliancePtpTxSync": c.get("tx_sync", 0),
           "appliancePtpTxFollowUp": c.get("tx_follow_up", 0), "appliancePtpRxDelayReq": c.get("rx_delay_req", 0),
           "appliancePtpTxDelayResp": c.get("tx_delay_resp", 0), "appliancePtpRxPdelayReq": c.get("rx_pdelay_req", 0),
           "appliancePtpTxPdelayResp": c.get("tx_pdelay_resp", 0),
           "appliancePtpDropped": sum(v for k, v in c.items() if k.startswith("drop")),
           "appliancePtpSendErrors": c.get("send_errors", 0)}
    auth = p.get("security") or {}
    row |= {"appliancePtpAuthSpp": auth.get("spp", -1), "appliancePtpAuthKeyId": auth.get("key_id", 0),
            "appliancePtpAuthSigned": auth.get("signed", 0), "appliancePtpAuthVerified": auth.get("verified", 0),
            "appliancePtpAuthRefused": auth.get("refused_total", 0)}
    return [((1,), row)]


REFERENCE_INDEX = {"gnss": 1, "ptp": 2, "ntp": 3, "irig": 4, "pps": 5}  # by kind; receiver N from 2: 4 + N
_REF_STATE = {"no-signal": "noSignal"}


def reference_index(kind: str, receiver_number: int = 1) -> int | None:
    """A reference's applianceRefIndex: fixed by its kind, and for GNSS receiver N from the second on 4 + N."""
    if kind == "gnss" and receiver_number > 1:
        return 4 + receiver_number
    return REFERENCE_INDEX.get(kind)


def _receiver_numbers(s: Snap) -> dict[str, int]:
    return {r["name"]: r["number"] for r in s.status.get("receivers") or []}


def _references(s: Snap) -> list[Row]:
    rows = []
    numbers = _receiver_numbers(s)
    for r in (s.status.get("references") or {}).get("rows", []):
        index = reference_index(r.get("kind", r["name"]), numbers.get(r["name"], 1))
        if index is None:
            continue
        rows.append(((index,), {
            "applianceRefName": r["name"], "applianceRefPriority": r["priority"],
            "applianceRefState": _REF_STATE.get(r["state"], r["state"]), "applianceRefIsActive": bool(r["active"]),
            "applianceRefOffset": None if r["offset_ns"] is None else _clamp32(r["offset_ns"]),
            "applianceRefJitter": None if r["jitter_ns"] is None else _clamp32(r["jitter_ns"], signed=False),
            "applianceRefAccuracy": _clamp32(r["accuracy_ns"], signed=False), "applianceRefReason": r["reason"]}))
    return sorted(rows)


def _receivers(s: Snap) -> list[Row]:
    """One row per GNSS receiver of the [[gnss]] array, indexed by its place in it."""
    return [((r["number"],), {
        "applianceReceiverName": r["name"], "applianceReceiverDevice": r["device"],
        "applianceReceiverState": _RX_STATE.get(r["state"], "noData"),
        "applianceReceiverStateTime": s.age_s(r["state_since_ns"]),
        "applianceReceiverRefIndex": reference_index("gnss", r["number"]),
        "applianceReceiverWatched": bool(r["watched"]), "applianceReceiverSatellitesUsed": r["satellites_used"],
        "applianceReceiverSatellitesVisible": r["satellites_visible"], "applianceReceiverPpsEdges": r["pps_edges"],
        "applianceReceiverPpsPaired": r["paired"], "applianceReceiverCableDelay": r["cable_delay_ns"],
        "applianceReceiverFrames": r["frames"], "applianceReceiverRejected": r["rejected"],
        "applianceReceiverDeviceError": r["device_error"], "applianceReceiverModel": r.get("model", "")[:64],
        "applianceReceiverFirmware": r.get("firmware", "")[:64],
        "applianceReceiverSetup": (f"{r['setup']}: {r['setup_detail']}" if r.get("setup_detail") else
                                   r.get("setup", ""))[:255],
        "applianceReceiverTimingMode": r.get("timing_mode", "")[:255], "applianceReceiverAntenna": r.get("antenna", "")}) for r in s.status.get("receivers") or []]


def tables(index_of_alarm: Callable[[str], int]) -> dict[str, Callable[[Snap], list[Row]]]:
    """Each table's rows (keyed by the table's entry-less name as the MIB spells it)."""
    return {"applianceSatTable": _satellites, "applianceConstTable": _constellations,
            "applianceOutputTable": _outputs, "applianceAlarmTable": lambda s: _alarms(s, index_of_alarm),
            "appliancePtpPortTable": _ptp_ports, "applianceRefTable": _references,
            "applianceReceiverTable": _receivers}


def _integrity_on(s: Any) -> bool:
    return bool((s.status.get("integrity") or {}).get("enabled"))


def _home_state(s: Any) -> str:
    survey = (s.status.get("integrity") or {}).get("survey") or {}
    if survey.get("state") != "fixed":
        return "surveying"
    return "configured" if survey.get("source") == "configured" else "surveyed"


def _survey_state(s: Any) -> str:
    if not s.epoch:
        return "unknown"
    if s.epoch.get("time_only"):
        return "fixedPosition"
    if _integrity_on(s):
        return "fixedPosition" if _home_state(s) != "surveying" else "surveying"
    return "navigating"
