"""Prometheus ``/metrics``: the clock, the receivers, the references and the NTP and PTP counters, from the latest
status.

Edge module (HTTP).  A custom collector turns the status the appliance published into metric families at each
scrape (prometheus_client renders the exposition format); nothing is kept between scrapes.  Units follow
Prometheus' conventions: seconds, not nanoseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from flask import Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from appliance.events import ReceiverState
from appliance.refs.selector import RefState

STATES = ("FREERUN", "ACQUIRING", "LOCKED", "HOLDOVER")


class StatusCollector(Collector):
    def __init__(self, status: Callable[[], dict[str, Any]]):
        self.status = status

    def collect(self) -> Iterator[Metric]:
        s = self.status()
        clock, rx = s["clock"], s["receiver"]
        state = GaugeMetricFamily("appliance_clock_state", "1 for the clock's current state", labels=["state"])
        for name in sorted({*STATES, clock["state"]}):
            state.add_metric([name], 1.0 if name == clock["state"] else 0.0)
        yield state
        yield _gauge("appliance_clock_class", "PTP clockClass advertised", clock["clock_class"])
        yield _gauge("appliance_error_bound_seconds", "Bound on the served time's error (NaN: unknown)",
                     None if clock["error_bound_ns"] is None else clock["error_bound_ns"] * 1e-9)
        yield _gauge("appliance_phase_offset_seconds", "Phase offset of the clock against its reference",
                     None if clock["phase_offset_ns"] is None else clock["phase_offset_ns"] * 1e-9)
        yield _gauge("appliance_frequency_ppb", "Frequency correction applied to the oscillator", clock["frequency_ppb"])
        yield _gauge("appliance_forced_holdover", "1 while an operator holds the clock over",
                     1.0 if clock["forced_holdover"] else 0.0)
        yield _gauge("appliance_uptime_seconds", "Seconds since the appliance started",
                     (s["at_tai_ns"] - s["started_at_tai_ns"]) * 1e-9)
        sats = GaugeMetricFamily("appliance_satellites", "Satellites by constellation", labels=["constellation",
                                                                                                 "kind"])
        for c in s["constellations"]:
            sats.add_metric([c["name"], "used"], c["used"])
            sats.add_metric([c["name"], "visible"], c["visible"])
        yield sats
        yield from _receivers(s.get("receivers") or [{"name": "gnss", **rx}])
        yield from _references((s.get("references") or {}).get("rows") or [])
        yield from _monitor(s.get("monitor") or [])
        verdict = s.get("verdict") or {}
        yield _gauge("appliance_time_traceable", "1 while the appliance serves traceable time (locked, or holdover "
                     "within its promise), as the console's verdict says", 1.0 if verdict.get("traceable") else 0.0)
        alarms = [a for a in s["alarms"] if a["raised"]]
        active = GaugeMetricFamily("appliance_alarms_active", "Active alarms by severity", labels=["severity"])
        for severity in ("critical", "major", "minor", "warning"):
            active.add_metric([severity], sum(1 for a in alarms if a["severity"] == severity))
        yield active
        yield from _alarms(alarms, s["at_tai_ns"])
        yield from _ntp(s["outputs"].get("ntp") or {})
        yield from _ptp(s["outputs"].get("ptp") or {})
        yield from _snmp(s["outputs"].get("snmp") or {})


RECEIVER_STATES = tuple(s.value for s in ReceiverState)
REFERENCE_STATES = tuple(s.value for s in RefState)


def _receivers(receivers: list[dict[str, Any]]) -> Iterator[Metric]:
    """One series per GNSS receiver of the [[gnss]] array, labelled with its reference's name."""
    up = GaugeMetricFamily("appliance_receiver_up", "1 while the receiver delivers data", labels=["receiver"])
    state = GaugeMetricFamily("appliance_receiver_state", "1 for the receiver's current state",
                              labels=["receiver", "state"])
    used = GaugeMetricFamily("appliance_receiver_satellites_used", "Satellites in the receiver's last solution",
                             labels=["receiver"])
    edges = CounterMetricFamily("appliance_receiver_pps_edges", "PPS edges from the receiver", labels=["receiver"])
    paired = CounterMetricFamily("appliance_receiver_pps_paired", "PPS edges paired with the receiver's time label",
                                 labels=["receiver"])
    info = GaugeMetricFamily("appliance_receiver_info", "1, labelled with what the receiver says it is and its set-up "
                             "state (done, incomplete, configuring, identifying, nmea, off)",
                             labels=["receiver", "model", "firmware", "setup"])
    antenna = GaugeMetricFamily("appliance_receiver_antenna_ok", "1 while the receiver's antenna supervisor reports "
                                "ok, 0 for an open or short circuit (absent when the receiver does not report it)",
                                labels=["receiver"])
    for r in receivers:
        name = str(r.get("name", ""))
        if "setup" in r:
            info.add_metric([name, str(r.get("model", "")), str(r.get("firmware", "")), str(r.get("setup", ""))], 1.0)
        if r.get("antenna") in ("ok", "open", "short"):
            antenna.add_metric([name], 1.0 if r["antenna"] == "ok" else 0.0)
        up.add_metric([name], 1.0 if r.get("state") not in ("no-data", "disconnected") else 0.0)
        for each in sorted({*RECEIVER_STATES, str(r.get("state"))}):
            state.add_metric([name, each], 1.0 if each == r.get("state") else 0.0)
        if "pps_edges" in r:  # a receiver row (an older status has only the first receiver's snapshot)
            used.add_metric([name], float("nan") if r["satellites_used"] is None else r["satellites_used"])
            edges.add_metric([name], r["pps_edges"])
            paired.add_metric([name], r["paired"])
    yield from (up, state, used, edges, paired, info, antenna)


def _references(rows: list[dict[str, Any]]) -> Iterator[Metric]:
    """One series per reference (each GNSS receiver, PTP, NTP, IRIG-B, 1PPS), labelled with its name and kind."""
    labels = ["reference", "kind"]
    state = GaugeMetricFamily("appliance_reference_state", "1 for the reference's current qualification",
                              labels=[*labels, "state"])
    active = GaugeMetricFamily("appliance_reference_active", "1 for the reference that drives the clock",
                               labels=labels)
    priority = GaugeMetricFamily("appliance_reference_priority", "The reference's priority (1 is the highest)",
                                 labels=labels)
    offset = GaugeMetricFamily("appliance_reference_offset_seconds", "The served clock minus the reference, its "
                               "latest sample (NaN: none yet)", labels=labels)
    for r in rows:
        key = [str(r["name"]), str(r["kind"])]
        for each in sorted({*REFERENCE_STATES, str(r["state"])}):
            state.add_metric([*key, each], 1.0 if each == r["state"] else 0.0)
        active.add_metric(key, 1.0 if r["active"] else 0.0)
        priority.add_metric(key, r["priority"])
        offset.add_metric(key, float("nan") if r["offset_ns"] is None else r["offset_ns"] * 1e-9)
    yield from (state, active, priority, offset)


MONITOR_STATES = ("ok", "over-limit", "unreachable", "unsynchronised", "waiting")


def _monitor(rows: list[dict[str, Any]]) -> Iterator[Metric]:
    """One series per downstream client of the sync monitor, labelled with the target and its kind (ntp, ptp)."""
    labels = ["target", "kind"]
    offset = GaugeMetricFamily("appliance_monitor_offset_seconds", "The client's clock minus the served time, its "
                               "last answer (NaN: none yet)", labels=labels)
    delay = GaugeMetricFamily("appliance_monitor_delay_seconds", "Round-trip delay of the last NTP exchange, or the "
                              "PTP slave's own mean path delay as nsm reports it (NaN: none)", labels=labels)
    up = GaugeMetricFamily("appliance_monitor_up", "1 while the client answers (state ok or over-limit)",
                           labels=labels)
    limit = GaugeMetricFamily("appliance_monitor_limit_seconds", "The client's offset limit", labels=labels)
    state = GaugeMetricFamily("appliance_monitor_state", "1 for the client's current state",
                              labels=[*labels, "state"])
    for r in rows:
        key = [str(r["target"]), str(r["kind"])]
        offset.add_metric(key, float("nan") if r["offset_ns"] is None else r["offset_ns"] * 1e-9)
        delay.add_metric(key, float("nan") if r["delay_ns"] is None else r["delay_ns"] * 1e-9)
        up.add_metric(key, 1.0 if r["state"] in ("ok", "over-limit") else 0.0)
        limit.add_metric(key, r["limit_ns"] * 1e-9)
        for each in sorted({*MONITOR_STATES, str(r["state"])}):
            state.add_metric([*key, each], 1.0 if each == r["state"] else 0.0)
    yield from (offset, delay, up, limit, state)


def _alarms(alarms: list[dict[str, Any]], now_tai_ns: int) -> Iterator[Metric]:
    """One series per alarm of the catalogue (0 or 1), labelled with its stable ID, code and severity, so that a rule
    can name an alarm and a dashboard can list them; with its acknowledgement and how long it has been up."""
    from appliance.alarms import CATALOG

    labels = ["id", "code", "severity"]
    up = GaugeMetricFamily("appliance_alarm", "1 while the alarm is active", labels=labels)
    acked = GaugeMetricFamily("appliance_alarm_acknowledged", "1 while the active alarm is acknowledged",
                              labels=labels)
    since = GaugeMetricFamily("appliance_alarm_active_seconds", "How long the active alarm has been up",
                              labels=labels)
    by_code = {a["code"]: a for a in alarms}
    for spec in CATALOG.values():
        up.add_metric([str(spec.id), spec.code, spec.severity.value], 1.0 if spec.code in by_code else 0.0)
    for a in alarms:
        key = [str(a.get("id", "")), a["code"], a["severity"]]
        if a["code"] not in CATALOG:
            up.add_metric(key, 1.0)
        acked.add_metric(key, 1.0 if a.get("acked_by") else 0.0)
        since.add_metric(key, max(0, now_tai_ns - a.get("since_ns", a["at_ns"])) * 1e-9)
    yield up
    yield acked
    yield since


def _gauge(name: str, help_text: str, value: float | None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=float("nan") if value is None else float(value))


def _ntp(ntp: dict[str, Any]) -> Iterator[Metric]:
    totals = ntp.get("totals") or {}
    if not ntp.get("enabled") or not totals:
        return
    family = CounterMetricFamily("appliance_ntp_packets", "NTP requests by outcome", labels=["outcome"])
    for key, value in sorted(totals.items()):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            family.add_metric([key], float(value))
    yield family
    clients = ntp.get("clients") or {}
    yield _gauge("appliance_ntp_request_rate", "NTP requests per second over the last minute (all workers)",
                 clients.get("request_rate_per_s"))
    nts = ntp.get("nts")
    if nts:
        ke = CounterMetricFamily("appliance_nts_ke_connections", "NTS-KE connections by outcome", labels=["outcome"])
        for key in ("sessions", "tls_failures", "ke_errors", "rate_limited", "busy", "evicted", "timed_out",
                    "no_alpn"):
            ke.add_metric([key], float(nts.get(key, 0)))
        yield ke
        yield _gauge("appliance_nts_cookie_key_age_seconds", "Age of the NTS cookie master key in use",
                     nts.get("cookie_key_age_s"))


def _ptp(ptp: dict[str, Any]) -> Iterator[Metric]:
    if not ptp.get("enabled"):
        return
    counters = ptp.get("counters") or {}
    family = CounterMetricFamily("appliance_ptp_messages", "PTP messages by kind", labels=["kind"])
    for key, value in sorted(counters.items()):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            family.add_metric([key], float(value))
    yield family
    info = GaugeMetricFamily("appliance_ptp_port_info", "The PTP port's profile, transport, domain and state (1)",
                             labels=["profile", "transport", "domain", "state"])
    info.add_metric([str(ptp.get("profile", "")), str(ptp.get("transport", "")), str(ptp.get("domain", "")),
                     str(ptp.get("state", ""))], 1.0)
    yield info
    link = ptp.get("gptp")
    if link:
        yield _gauge("appliance_ptp_as_capable", "IEEE 802.1AS: 1 while the link is asCapable", float(
            bool(link.get("as_capable"))))
        yield _gauge("appliance_ptp_link_delay_seconds", "IEEE 802.1AS mean link delay",
                     None if link.get("link_delay_ns") is None else link["link_delay_ns"] / 1e9)
    if "unicast_clients" in ptp:
        yield _gauge("appliance_ptp_unicast_clients", "Unicast clients granted", ptp["unicast_clients"])
    auth = ptp.get("security")
    if auth:
        family = CounterMetricFamily("appliance_ptp_auth_messages", "PTP messages by authentication outcome "
                                     "(IEEE 1588-2019 16.14)", labels=["outcome"])
        for key in ("signed", "verified", "accepted_unsigned"):
            family.add_metric([key], float(auth.get(key, 0)))
        for why, n in sorted(auth.get("refused", {}).items()):
            family.add_metric(["refused_" + why], float(n))
        yield family
        yield _gauge("appliance_ptp_auth_spp", "Security Parameters Pointer of the PTP security association in use",
                     auth.get("spp"))


def view(ctx: Any) -> Callable[[], Response]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(ctx.status))

    def metrics() -> Response:
        return Response(generate_latest(registry), mimetype="text/plain; version=0.0.4; charset=utf-8")
    return metrics


def _snmp(snmp: dict[str, Any]) -> Iterator[Metric]:
    """The SNMP agent's security counters (they restart at zero with the agent's process)."""
    if not snmp.get("enabled"):
        return
    replays = CounterMetricFamily("appliance_snmp_set_replays", "Authenticated SNMPv3 SETs dropped as replays "
                                  "(dropped) or refused as the replay check could not remember them (refused)",
                                  labels=["outcome"])
    replays.add_metric(["dropped"], snmp.get("replay_dropped", 0))
    replays.add_metric(["refused"], snmp.get("replay_refused", 0))
    yield replays
    yield _gauge("appliance_snmp_set_replay_cache_entries", "Authenticated SETs remembered inside the time window",
                 snmp.get("replay_cached", 0))
    standard = CounterMetricFamily("appliance_snmp_security", "SNMP agent counters by MIB object (usmStats, "
                                   "SNMPv2-MIB snmp group, SNMP-MPD-MIB snmpMPDStats)", labels=["object"])
    for name, value in sorted((snmp.get("standard") or {}).items()):
        standard.add_metric([name], value)
    yield standard
