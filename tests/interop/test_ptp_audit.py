"""What a running appliance records when PTP peers act on it: a pmc SET is an operator's write (an audit record by its
source, and a warning alarm while a setting is off its configured value), and a ptp4l grandmaster announcing priority1
0 -- one that out-ranks the appliance and silences it -- is an alarm and an audit record naming that clock, cleared
when the appliance is master again.  Peers in network namespaces, the appliance as ``appliance run``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from appliance.audit.store import AuditStore
from harness import ptp_harness as h
from harness.ptp_appliance import ApplianceGm

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _peers() -> None:
    h.require_ptp("ptp4l", "pmc")


def _records(state_dir: Path, kind: str) -> list[Any]:
    store = AuditStore(state_dir / "audit.sqlite", create=False)
    try:
        return list(reversed(store.records(kinds=[kind], limit=None)))
    finally:
        store.close()


def _wait_records(state_dir: Path, kind: str, count: int = 1, timeout_s: float = 10.0) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    found: list[Any] = []
    while time.monotonic() < deadline:
        found = _records(state_dir, kind)
        if len(found) >= count:
            return found
        time.sleep(0.3)
    raise AssertionError(f"{count} {kind} records expected, found {[r.text for r in found]}")


def _active(status: dict[str, Any], code: str) -> dict[str, Any] | None:
    return next((a for a in status["alarms"] if a["code"] == code and a["raised"]), None)


def test_pmc_set_and_a_rogue_grandmaster_are_audited_and_alarmed(tmp_path: Path) -> None:
    state = tmp_path / "gm"
    with h.NetnsPair("pa") as net, ApplianceGm(net.ns_a, net.if_a, state, "ptp.management=get-set") as gm:
        gm.wait(lambda s: s["outputs"]["ptp"].get("state") == "MASTER", 20)

        # a SET from an allowed address: obeyed, recorded by its source, and a warning alarm saying what changed
        acked = h.pmc(net.b, None, "udp4", 0, "SET PRIORITY1 90")
        assert any(b.get("action") == "ACKNOWLEDGE" and b.get("priority1") == "90" for b in acked), acked
        [change] = _wait_records(state, "config.change")
        assert change.actor == f"ptp-mgmt:{net.ip4_b}"
        assert (change.detail["setting"], change.detail["old"], change.detail["new"]) == ("ptp.priority1", 128, 90)
        managed = _active(gm.wait(lambda s: _active(s, "ptp-managed") is not None, 10), "ptp-managed")
        assert managed is not None and managed["severity"] == "warning" and "priority1 90" in managed["text"]

        # a grandmaster announcing priority1 0 out-ranks the appliance: PASSIVE, an alarm and a record naming it
        rogue = h.Ptp4l(net.b, role="master", extra={"priority1": "0"}, label="rogue")
        try:
            s = gm.wait(lambda s: _active(s, "ptp-outranked") is not None, 20)
            assert s["outputs"]["ptp"]["state"] == "PASSIVE"
            alarm = _active(s, "ptp-outranked")
            assert alarm is not None and alarm["severity"] == "minor"  # X.733: service goes on, needs attention
            assert "priority1 0" in alarm["text"] and net.ip4_b in alarm["text"]
            [foreign] = _wait_records(state, "ptp.foreign-master")
            seen = [m["grandmaster"] for m in s["outputs"]["ptp"]["foreign_masters"]]
            assert foreign.detail["grandmaster"].replace(".", "") in seen
            assert foreign.actor == f"ptp-master:{net.ip4_b}" and foreign.detail["source"] == net.ip4_b
            assert (foreign.detail["priority1"], foreign.detail["clock_class"],
                    foreign.detail["clock_accuracy"]) == (0, 6, 0x21)
        finally:
            rogue.stop()

        # the rogue gone: MASTER again, the alarm cleared (and that is recorded too)
        s = gm.wait(lambda s: s["outputs"]["ptp"].get("state") == "MASTER" and _active(s, "ptp-outranked") is None,
                    30)
        cleared = [r for r in _wait_records(state, "alarm.cleared") if r.detail.get("code") == "ptp-outranked"]
        assert cleared, "the clearing of ptp-outranked is not in the audit trail"

        # priority1 set back to its configured value: the warning clears
        h.pmc(net.b, None, "udp4", 0, "SET PRIORITY1 128")
        gm.wait(lambda s: _active(s, "ptp-managed") is None, 10)
        assert len(_wait_records(state, "config.change", 2)) == 2
        assert "management SET" in gm.stop()
