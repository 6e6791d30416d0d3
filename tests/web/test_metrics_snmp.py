"""The SNMP agent's security counters (replayed SETs, usmStats and the snmp group) reach Prometheus."""

from __future__ import annotations

import copy

from prometheus_client.parser import text_string_to_metric_families

from tests.web.conftest import ConsoleEnv


def test_snmp_replay_and_authentication_counters_are_metrics(env: ConsoleEnv) -> None:
    env.status = copy.deepcopy(env.status)  # the status is shared by the session's tests: this one changes its own
    snmp = dict(env.status["outputs"].get("snmp") or {})
    snmp.update(enabled=True, replay_dropped=3, replay_refused=1, replay_cached=2,
                standard={"usmStatsWrongDigests": 5, "usmStatsNotInTimeWindows": 7, "snmpInBadCommunityNames": 4})
    env.status["outputs"]["snmp"] = snmp
    response = env.browser().client.get("/metrics", headers={"Authorization": f"Bearer {env.token('operator')}"})
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.get_data(as_text=True))}
    replays = {s.labels["outcome"]: s.value for s in families["appliance_snmp_set_replays"].samples}
    assert replays == {"dropped": 3, "refused": 1}
    (cached,) = families["appliance_snmp_set_replay_cache_entries"].samples
    assert cached.value == 2
    security = {s.labels["object"]: s.value for s in families["appliance_snmp_security"].samples}
    assert security == {"usmStatsWrongDigests": 5, "usmStatsNotInTimeWindows": 7, "snmpInBadCommunityNames": 4}


def test_appliance_status_counts_replays_and_authentication_failures(env: ConsoleEnv) -> None:
    from appliance.status import render

    status = dict(env.status)
    status["outputs"] = dict(status["outputs"], snmp={
        "enabled": True, "error": None, "listen": "127.0.0.1", "port": 1161, "notifications": 0, "send_errors": 0,
        "denied": 0, "rate_limited": 0, "replay_dropped": 2,
        "standard": {"usmStatsWrongDigests": 1, "usmStatsNotInTimeWindows": 3, "snmpInBadCommunityNames": 1}})
    line = next(x for x in render(status).splitlines() if x.startswith("SNMP agent"))
    assert "2 replayed SETs dropped, 5 authentication failures" in line
