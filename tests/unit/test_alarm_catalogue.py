"""The alarm catalogue, acknowledgements, the history paired from the audit trail, and the verdict.

Every alarm the appliance can raise is in the one catalogue with a stable ID and one X.733 severity; whoever raises
an alarm cannot give it another severity; an acknowledgement stays until the alarm clears; the history pairs each
raise with its clear; the verdict says "not traceable" with the cause whenever the clock advertises so.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance import alarms
from appliance.alarms import CATALOG, AlarmBook, episodes, select, spec_of
from appliance.clock.quality import advertise
from appliance.events import Alarm, Severity
from appliance.gnss.guard import INTEGRITY_CODES
from appliance.status import ClockStatus, clock_accuracy_meaning, clock_class_meaning, judge

ROOT = Path(__file__).parents[2] / "appliance"
S = 1_000_000_000
CODE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)+$")


def raised_codes() -> set[str]:
    """Every alarm code the appliance's source can raise: literal codes given to Alarm(...) or to a ``_raise``,
    module constants used as codes, and the receiver's and the clock's tables."""
    found: set[str] = set()
    constants: dict[str, str] = {}
    trees = [ast.parse(p.read_text(), str(p)) for p in ROOT.rglob("*.py")]
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.Tuple)):
                targets = node.targets[0].elts if isinstance(node.targets[0], ast.Tuple) else node.targets
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                for t, v in zip(targets, values):
                    if isinstance(t, ast.Name) and isinstance(v, ast.Constant) and isinstance(v.value, str):
                        constants[t.id] = v.value
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name not in ("Alarm", "_raise"):
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value)
            elif isinstance(first, ast.Name) and first.id in constants:
                found.add(constants[first.id])
    found |= {code for code, _, _ in alarms.RECEIVER_ALARMS.values()}
    found |= {code for code, _, _ in alarms.CLOCK_ALARMS.values()}
    found |= set(INTEGRITY_CODES)  # the guard picks one of these by its verdict
    return {c for c in found if CODE.match(c)}


def test_every_alarm_the_appliance_raises_is_in_the_catalogue() -> None:
    codes = raised_codes()
    assert {"clock-unlocked", "gnss-no-fix", "ntp-not-serving", "gnss-spoofing", "audit-truncated"} <= codes
    missing = sorted(codes - set(CATALOG))
    assert not missing, f"alarms raised but not in appliance/alarms.py CATALOG: {missing}"


def test_the_catalogue_has_stable_unique_ids_and_says_what_to_do() -> None:
    ids = [s.id for s in CATALOG.values()]
    assert len(ids) == len(set(ids)) and all(0 < i < 1000 for i in ids)
    assert CATALOG["clock-unlocked"].id == 1 and CATALOG["gnss-no-fix"].id == 12  # IDs never move
    for spec in CATALOG.values():
        assert spec.severity in (Severity.CRITICAL, Severity.MAJOR, Severity.MINOR, Severity.WARNING)
        assert spec.title and spec.probable_cause and spec.cause.endswith(".") and spec.action.endswith(".")


def test_severities_follow_the_documented_table() -> None:
    """Time not traceable is critical, a lost reference major, holdover within its promise minor."""
    sev = {code: spec.severity for code, spec in CATALOG.items()}
    assert sev["clock-unlocked"] is Severity.CRITICAL and sev["clock-holdover-expired"] is Severity.CRITICAL
    assert sev["gnss-no-fix"] is Severity.MAJOR and sev["gnss-disconnected"] is Severity.MAJOR
    assert sev["clock-holdover"] is Severity.MINOR and sev["gnss-spoofing"] is Severity.CRITICAL
    assert sev["leap-table-expiring"] is Severity.WARNING
    assert sev["clock-unlocked"] != Severity.WARNING  # free-running is never below a lost fix


def test_the_catalogue_decides_the_severity_and_keeps_the_first_raise() -> None:
    book = AlarmBook()
    changed = book.apply([Alarm("gnss-no-fix", Severity.WARNING, True, "no fix (a)", 10 * S)])
    assert changed[0].severity is Severity.MAJOR
    book.apply([Alarm("gnss-no-fix", Severity.WARNING, True, "no fix (b)", 20 * S)])  # a new text re-raises
    (row,) = book.rows()
    assert (row.id, row.severity, row.text, row.at_ns, row.since_ns) == (12, Severity.MAJOR, "no fix (b)", 20 * S,
                                                                        10 * S)
    assert row.cause and row.action and row.probable_cause == "lossOfSignal"


def test_an_acknowledgement_stays_until_the_alarm_clears() -> None:
    book = AlarmBook()
    book.apply([Alarm("clock-holdover", Severity.MINOR, True, "clock in holdover", S)])
    with pytest.raises(ValueError, match="no active alarm 'gnss-no-fix'"):
        book.acknowledge("gnss-no-fix", "web:op", 2 * S)
    book.acknowledge("clock-holdover", "web:op", 2 * S, "antenna work")
    book.apply([Alarm("clock-holdover", Severity.MINOR, True, "clock in holdover (still)", 3 * S)])
    (row,) = book.rows()
    assert (row.acked_by, row.acked_at_ns, row.ack_comment) == ("web:op", 2 * S, "antenna work")
    book.apply([Alarm("clock-holdover", Severity.MINOR, False, "clock in holdover", 4 * S)])
    book.apply([Alarm("clock-holdover", Severity.MINOR, True, "clock in holdover", 5 * S)])
    (row,) = book.rows()
    assert row.acked_by is None and row.since_ns == 5 * S  # a new episode needs a new acknowledgement


def test_rows_are_most_severe_first() -> None:
    book = AlarmBook()
    book.apply([Alarm("leap-table-expiring", Severity.WARNING, True, "w", S),
                Alarm("gnss-no-fix", Severity.MAJOR, True, "m", 2 * S),
                Alarm("clock-unlocked", Severity.CRITICAL, True, "c", 3 * S)])
    assert [r.code for r in book.rows()] == ["clock-unlocked", "gnss-no-fix", "leap-table-expiring"]


def record(kind: str, at_s: int, code: str, text: str = "", actor: str = "system", **detail: str) -> dict:
    return {"kind": kind, "at_tai_ns": at_s * S, "actor": actor, "text": text,
            "detail": {"code": code, "severity": spec_of(code).severity.value, **detail}}


def test_the_history_pairs_each_raise_with_its_clear() -> None:
    found = episodes([
        record("alarm.cleared", 1, "gnss-no-fix", "cleared [major] GNSS receiver has no fix"),  # raised before
        record("alarm.raised", 10, "clock-holdover", "raised [minor] clock in holdover (a)"),
        record("alarm.raised", 12, "clock-holdover", "raised [minor] clock in holdover (b)"),
        record("alarm.ack", 13, "clock-holdover", "acknowledged", actor="web:op", comment="known"),
        record("alarm.cleared", 20, "clock-holdover", "cleared [minor] clock in holdover (b)"),
        record("alarm.raised", 30, "clock-holdover", "raised [minor] clock in holdover (c)"),
        record("alarm.raised", 31, "gnss-no-fix", "raised [major] GNSS receiver has no fix"),
    ])
    assert [(e.code, e.raised_at_ns // S, None if e.cleared_at_ns is None else e.cleared_at_ns // S)
            for e in found] == [("gnss-no-fix", 31, None), ("clock-holdover", 30, None),
                                ("clock-holdover", 10, 20), ("gnss-no-fix", 1, 1)]
    done = found[2]
    assert done.text == "clock in holdover (b)" and (done.acked_by, done.ack_comment) == ("web:op", "known")
    assert done.to_dict(100 * S)["duration_s"] == 10 and found[0].to_dict(100 * S)["duration_s"] == 69
    assert [e.code for e in select(found, severity="major")] == ["gnss-no-fix", "gnss-no-fix"]
    assert [e.raised_at_ns // S for e in select(found, state="open")] == [31, 30]
    assert [e.raised_at_ns // S for e in select(found, state="cleared", code="clock-holdover")] == [10]
    assert [e.raised_at_ns // S for e in select(found, search="(C)")] == [30]


@given(st.lists(st.tuples(st.sampled_from(["gnss-no-fix", "clock-holdover", "ptp-outranked"]), st.booleans()),
                max_size=60))
def test_history_episodes_never_overlap_for_one_alarm(events: list[tuple[str, bool]]) -> None:
    """Whatever order raises and clears come in, an alarm has at most one open episode and its episodes do not
    overlap; every clear that followed a raise closes exactly one."""
    recs = [record("alarm.raised" if up else "alarm.cleared", i, code, "x") for i, (code, up) in enumerate(events)]
    found = episodes(recs)
    for code in {c for c, _ in events}:
        mine = sorted((e for e in found if e.code == code), key=lambda e: e.raised_at_ns)
        assert sum(1 for e in mine if e.open) <= 1
        for a, b in zip(mine, mine[1:]):
            assert a.cleared_at_ns is not None and a.cleared_at_ns <= b.raised_at_ns


def clock(state: str, in_spec: bool = True, bound: int | None = 40, reason: str = "why") -> ClockStatus:
    adv = advertise(state, bound, None, "default-e2e", in_spec, 0, None)
    return ClockStatus(state, 5 * S, reason, bound, clock_class=adv.clock_class, clock_accuracy=adv.clock_accuracy,
                       advertised=adv)


def test_the_verdict_follows_what_the_clock_advertises() -> None:
    book = AlarmBook()
    book.apply([Alarm("clock-unlocked", Severity.CRITICAL, True, "clock free-running", S),
                Alarm("gnss-no-fix", Severity.MAJOR, True, "GNSS receiver has no fix (epoch 12:00:00)", S)])
    v = judge(clock("FREERUN", bound=None), None, book.rows(), "2026-12-07T12:00:00.000Z")
    assert (v.traceable, v.level, v.headline) == (False, "not-traceable", "not traceable")
    assert v.reason == "clock free-running: GNSS receiver has no fix (epoch 12:00:00)"
    assert v.clock_class_meaning == "default: free-running, not traceable" and v.since_tai_ns == 5 * S
    v = judge(clock("LOCKED"), "gnss", (), "t")
    assert (v.traceable, v.headline, v.reason) == (True, "serving traceable time", "locked to gnss, error bound 40 ns")
    v = judge(clock("HOLDOVER"), None, book.rows(), "t")
    assert (v.traceable, v.level) == (True, "holdover") and "GNSS receiver has no fix" in v.reason
    v = judge(clock("HOLDOVER", reason="holdover forced by web:op"), "gnss", (), "t")
    assert v.reason == "holding over (holdover forced by web:op); error bound 40 ns, within its promise"
    v = judge(clock("HOLDOVER", in_spec=False), None, (), "t")
    assert (v.traceable, v.level) == (False, "not-traceable") and "holdover past its promise" in v.reason
    v = judge(clock("ACQUIRING", reason="reference qualified for 3 s"), "gnss", (), "t")
    assert v.reason == "clock acquiring a reference (reference qualified for 3 s)"


def test_clock_class_and_accuracy_are_explained() -> None:
    assert clock_class_meaning(6) == "locked to a primary reference (PRTC)"
    assert clock_class_meaning(7) == "holdover, within its specification"
    assert clock_class_meaning(248) == "default: free-running, not traceable"
    assert clock_accuracy_meaning(0x21) == "within 100 ns" and clock_accuracy_meaning(0xFE) == "unknown"
    assert clock_accuracy_meaning(0x31) == "more than 10 s"


def test_a_lost_fix_is_told_apart_by_what_the_receiver_sees() -> None:
    from appliance.alarms import diagnose_no_fix

    assert diagnose_no_fix(0, 43, "ok", "receiver reports no interference") == (
        "no satellite tracked: the antenna sees no sky (blocked, disconnected or a cable fault), not jamming "
        "(receiver reports no interference)")
    assert diagnose_no_fix(3, 40, "jammed", None).startswith("jamming")
    assert diagnose_no_fix(3, 40, "ok", None).startswith("3 of 40 satellites tracked: too few for a fix")


def test_an_acknowledgement_through_the_appliance_is_audited_and_shown() -> None:
    from appliance import config, leap
    from appliance.runtime.platforms import simulated as simulated_appliance
    from appliance.sched import SimScheduler

    table = leap.LeapTable.load_default()
    at = leap.utc_fields_to_tai(2025, 3, 1, 12, 0, 10, 0, table)
    sched = SimScheduler(at)
    app, world = simulated_appliance(config.load(None, []), sched, table)
    audited: list[tuple] = []
    app.audit_to(lambda *rec: audited.append(rec))
    world.start()
    sched.run_for(3 * S)
    refused = app.handle_command({"cmd": "alarm", "action": "ack", "code": "gnss-no-fix", "user": "op"})
    assert refused == {"ok": False, "error": "no active alarm 'gnss-no-fix' (active: clock-unlocked)"}
    done = app.handle_command({"cmd": "alarm", "action": "ack", "code": "clock-unlocked", "user": "op",
                               "reason": "starting up"})
    assert done["ok"] and done["acked_by"] == "op"
    (row,) = [a for a in app.status().alarms if a.code == "clock-unlocked"]
    assert (row.acked_by, row.ack_comment) == ("op", "starting up")
    (kind, actor, text, detail), = [a for a in audited if a[0] == "alarm.ack"]
    assert actor == "op" and text.startswith("acknowledged [critical] clock ") and "(comment: starting up)" in text
    assert detail == {"code": "clock-unlocked", "severity": "critical", "comment": "starting up"}


def test_the_readme_documents_the_catalogue() -> None:
    readme = (ROOT.parent / "README.md").read_text()
    for spec in CATALOG.values():
        assert f"| {spec.id} | `{spec.code}` | {spec.severity.value} | {spec.title} |" in readme, spec.code


def test_an_outputs_fault_is_not_the_verdicts_cause() -> None:
    book = AlarmBook()
    book.apply([Alarm("clock-unlocked", Severity.CRITICAL, True, "clock free-running", S),
                Alarm("ntp-not-serving", Severity.CRITICAL, True, "NTP not served: port 123 taken", S)])
    v = judge(clock("FREERUN", bound=None, reason="starting"), None, book.rows(), "t")
    assert v.reason == "clock free-running (starting)"
