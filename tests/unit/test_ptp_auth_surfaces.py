"""PTP authentication on the operator's surfaces: the status line, the SNMP port table and the Prometheus metrics,
from one status."""

from __future__ import annotations

from appliance import status as status_text
from appliance.snmp.values import Snap, _ptp_ports
from appliance.web.metrics import _ptp

AUTH = {"spp": 1, "key_id": 7, "algorithm": "SHA256-128", "allow_mutable": False, "accept_unsigned": False,
        "signed": 120, "verified": 30, "accepted_unsigned": 0, "refused": {"icv": 2, "unsigned": 5},
        "refused_total": 7}
PTP = {"enabled": True, "interface": "eth1", "state": "MASTER", "reason": "BMCA", "profile": "default-e2e",
       "transport": "udp4", "domain": 0, "port_identity": "0200aa.fffe.000001-1", "timestamping": "software",
       "counters": {"tx_sync": 10, "drop_auth_icv": 2, "drop_auth_unsigned": 5}, "security": AUTH}


def test_status_line_names_the_association_and_what_was_refused() -> None:
    line = status_text._ptp_line(PTP)
    assert ("authenticated: spp 1 key 7 (SHA256-128), 120 signed, 30 verified, refused 2 icv, 5 unsigned" in line
            and "7 dropped" in line), line
    assert "authenticated" not in status_text._ptp_line(PTP | {"security": None})


def test_snmp_port_table_columns() -> None:
    row = _ptp_ports(Snap({"outputs": {"ptp": PTP}}))[0][1]
    assert {k: v for k, v in row.items() if k.startswith("appliancePtpAuth")} == {
        "appliancePtpAuthSpp": 1, "appliancePtpAuthKeyId": 7, "appliancePtpAuthSigned": 120,
        "appliancePtpAuthVerified": 30, "appliancePtpAuthRefused": 7}
    off = _ptp_ports(Snap({"outputs": {"ptp": PTP | {"security": None}}}))[0][1]
    assert off["appliancePtpAuthSpp"] == -1 and off["appliancePtpAuthKeyId"] == 0


def test_prometheus_families() -> None:
    families = {f.name: f for f in _ptp(PTP)}
    outcomes = {s.labels["outcome"]: s.value for s in families["appliance_ptp_auth_messages"].samples}
    assert outcomes == {"signed": 120, "verified": 30, "accepted_unsigned": 0, "refused_icv": 2,
                        "refused_unsigned": 5}
    assert families["appliance_ptp_auth_spp"].samples[0].value == 1
    assert "appliance_ptp_auth_messages" not in {f.name for f in _ptp(PTP | {"security": None})}
