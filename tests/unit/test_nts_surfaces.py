"""NTS on the operator's surfaces: the status line, the SNMP objects and the Prometheus metrics, from one status."""

from __future__ import annotations

from appliance import status as status_text
from appliance.snmp.values import SCALARS, Snap
from appliance.web.metrics import _ntp

NTS = {"ke_listen": "127.0.0.1", "ke_port": 4460, "certificate": "/x/cert.pem", "alive": True, "restarts": 0,
       "sessions": 12, "tls_failures": 2, "ke_errors": 1, "rate_limited": 3, "busy": 0, "active": 0,
       "evicted": 5, "timed_out": 6, "no_alpn": 7, "cookie_key_id": "0000002a", "cookie_key_age_s": 7300, "key_rotation_s": 86400}
NTP = {"enabled": True, "listen": "127.0.0.1", "port": 123, "error": "", "workers": [],
       "totals": {"requests": 40, "replies": 38, "nts": 30, "nts_nak": 4, "drop_nts_replay": 2}, "nts": NTS}


def test_status_line_names_the_ke_sessions_failures_and_key_age() -> None:
    line = status_text._ntp_line(NTP)
    assert "NTS-KE port 4460: 12 sessions, 3 failed, 30 NTS replies, 4 NAK, cookie key 0000002a 2 h old" in line
    assert "NOT RUNNING" in status_text._ntp_line(NTP | {"nts": NTS | {"alive": False}})


def test_snmp_objects() -> None:
    snap = Snap({"outputs": {"ntp": NTP}})
    values = {name: SCALARS[name](snap) for name in SCALARS if name.startswith("applianceNts")}
    assert values == {"applianceNtsEnabled": True, "applianceNtsReplies": 30, "applianceNtsNaks": 4,
                      "applianceNtsKeSessions": 12, "applianceNtsKeFailures": 3, "applianceNtsCookieKeyAge": 7300}
    off = Snap({"outputs": {"ntp": NTP | {"nts": None}}})
    assert SCALARS["applianceNtsEnabled"](off) is False and SCALARS["applianceNtsCookieKeyAge"](off) == -1


def test_prometheus_families() -> None:
    families = {f.name: f for f in _ntp(NTP)}
    ke = {s.labels["outcome"]: s.value for s in families["appliance_nts_ke_connections"].samples}
    assert ke == {"sessions": 12, "tls_failures": 2, "ke_errors": 1, "rate_limited": 3, "busy": 0, "evicted": 5,
                  "timed_out": 6, "no_alpn": 7}
    assert families["appliance_nts_cookie_key_age_seconds"].samples[0].value == 7300
    packets = {s.labels["outcome"]: s.value for s in families["appliance_ntp_packets"].samples}
    assert packets["nts"] == 30 and packets["nts_nak"] == 4


def test_the_ntp_clients_are_in_the_status_line_and_the_metrics() -> None:
    clients = {"request_rate_per_s": 2.834, "rate_window_s": 17.0, "window_s": 60, "kod_sent": 1, "rate_limited": 11,
               "top": [{"client": "127.0.0.1", "requests": 48, "error": 0},
                       {"client": "2001:db8::/64", "requests": 7, "error": 0}]}
    line = status_text._ntp_line(NTP | {"clients": clients})
    assert "; 2.8 requests/s over 17 s, busiest in 60 s: 127.0.0.1 48, 2001:db8::/64 7" in line
    rate = next(m for m in _ntp(NTP | {"clients": clients}) if m.name == "appliance_ntp_request_rate")
    assert rate.samples[0].value == 2.834
    assert "requests/s" not in status_text._ntp_line(NTP)  # an appliance whose workers do not report them
