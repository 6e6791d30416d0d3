"""ReferenceSelector: qualification of each time reference, priority selection, revertive switching, operator pin and
disable, hitless phase build-out, the 1 Hz loop stream (held for slow references, averaged for fast ones), and the
cross-check of references against each other -- driven by hand with ``RefSample``s on a local counter in int ns."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.refs.model import RefSample
from appliance.refs.selector import (
    LoopSample,
    ReferenceSelector,
    RefSpec,
    RefState,
    RefStateChanged,
    RefSwitched,
    SelectorPolicy,
)

S = 1_000_000_000
T0 = 10**18  # the local counter at start (int ns)


def at(seconds: float) -> int:
    """The counter instant ``seconds`` after T0."""
    return T0 + round(seconds * S)


def noise(k: int, amplitude: float = 3.0) -> float:
    """A deterministic small scatter in [-amplitude, amplitude]."""
    return amplitude * (((k * 7919) % 11) - 5) / 5


def gnss(**kw: object) -> RefSpec:
    return RefSpec(**{"name": "gnss", "kind": "gnss", "priority": 1, "accuracy_ns": 50.0, "qualify_s": 0.0, **kw})


def ptp(**kw: object) -> RefSpec:
    return RefSpec(**{"name": "ptp", "kind": "ptp", "priority": 2, "accuracy_ns": 100.0, "qualify_s": 0.0, **kw})


def ntp(**kw: object) -> RefSpec:
    return RefSpec(**{"name": "ntp", "kind": "ntp", "priority": 5, "accuracy_ns": 1_000.0, "qualify_s": 0.0, **kw})


class Bench:
    """A selector and everything it said, fed second by second."""

    def __init__(self, specs: list[RefSpec], policy: SelectorPolicy | None = None):
        self.sel = ReferenceSelector(specs, policy or SelectorPolicy(), T0)
        self.events: list[object] = []

    def _keep(self, out: list[object]) -> list[object]:
        self.events += out
        return out

    def feed(self, name: str, t: int, offset: float, unc: float = 10.0, corr: float = 0.0) -> list[object]:
        return self._keep(self.sel.on_sample(RefSample(name, t, offset, unc), corr))

    def tick(self, t: int, corr: float = 0.0) -> list[object]:
        return self._keep(self.sel.tick(t, corr))

    def set_usable(self, name: str, usable: bool, reason: str, t: int) -> list[object]:
        return self._keep(self.sel.set_usable(name, usable, reason, t))

    def pin(self, name: str | None, t: int, who: str = "op") -> list[object]:
        return self._keep(self.sel.pin(name, t, who))

    def enable(self, name: str, on: bool, t: int, who: str = "op") -> list[object]:
        return self._keep(self.sel.enable(name, on, t, who))

    def run(self, first_s: int, end_s: int, offsets: dict[str, Callable[[int], float | None]],
            tick_at: float | None = 0.5) -> None:
        """Seconds ``first_s`` .. ``end_s - 1``: each reference named (in that order) gives a sample at the whole
        second (its function of the second returns the offset, or None: silent), then a tick ``tick_at`` s later."""
        for k in range(first_s, end_s):
            for name, f in offsets.items():
                off = f(k)
                if off is not None:
                    self.feed(name, at(k), off)
            if tick_at is not None:
                self.tick(at(k + tick_at))

    def switches(self) -> list[RefSwitched]:
        return [e for e in self.events if isinstance(e, RefSwitched)]

    def loops(self, since: int = 0) -> list[LoopSample]:
        return [e for e in self.events if isinstance(e, LoopSample) and e.raw_ns >= since]

    def changes(self, ref: str | None = None) -> list[RefStateChanged]:
        return [e for e in self.events if isinstance(e, RefStateChanged) and (ref is None or e.ref == ref)]

    def state(self, name: str) -> str:
        return self.sel.refs[name].state.value


def quiet(k: int) -> float:
    return noise(k)


def views_by_name(sel: ReferenceSelector, t: int) -> dict[str, object]:
    return {v.name: v for v in sel.views(t)}


# --- configuration ---------------------------------------------------------------------------------------------------
def test_specs_and_selector_are_validated() -> None:
    with pytest.raises(ValueError, match="kind"):
        RefSpec("x", "radio", 1, 10.0)
    with pytest.raises(ValueError, match="priority"):
        RefSpec("x", "gnss", 0, 10.0)
    with pytest.raises(ValueError, match="unique"):
        ReferenceSelector([gnss(), gnss()], SelectorPolicy(), T0)
    with pytest.raises(ValueError, match="at least one"):
        ReferenceSelector([], SelectorPolicy(), T0)


def test_a_reference_disabled_in_the_settings_is_never_selected() -> None:
    b = Bench([gnss(enabled=False), ptp()])
    assert b.state("gnss") == "disabled"
    assert b.sel.refs["gnss"].reason == "disabled in the settings"
    b.run(0, 5, {"gnss": quiet, "ptp": quiet})
    assert b.sel.active == "ptp"
    assert b.state("gnss") == "disabled"


# --- a single GNSS reference ---------------------------------------------------------------------------------------
def test_single_gnss_is_selected_on_its_first_sample_and_the_loop_follows_it_at_1_hz() -> None:
    b = Bench([gnss()])
    out = b.feed("gnss", at(0), 12.5, unc=7.0)
    assert out[0] == RefStateChanged("gnss", "no-signal", "qualified", "samples for 0 s", at(0))
    assert out[1] == RefSwitched(None, "gnss", "gnss is the best qualified reference", at(0), 0.0, 0.0)
    assert out[2] == LoopSample("gnss", at(0), 12.5, 7.0)
    assert len(out) == 3

    for k in range(1, 6):
        out = b.feed("gnss", at(k), 10.0 * k, unc=8.0)
        assert out == [LoopSample("gnss", at(k), 10.0 * k, 8.0)]  # the offset passed through, one per second
        assert b.tick(at(k + 0.5)) == []  # a 1 Hz reference is never held by tick
    assert b.sel.active == "gnss"
    assert b.sel.switches == 1


def test_single_gnss_silent_past_its_timeout_goes_to_no_signal_and_the_clock_holds_over() -> None:
    b = Bench([gnss(timeout_s=3.0)])
    b.run(0, 6, {"gnss": quiet}, tick_at=None)  # last sample at 5 s
    assert b.tick(at(8)) == []  # silent 3 s: not yet more than the timeout
    out = b.tick(at(8.5))
    assert [type(e) for e in out] == [RefStateChanged, RefSwitched]
    assert (out[0].ref, out[0].old, out[0].new) == ("gnss", "qualified", "no-signal")
    assert out[0].reason.startswith("no sample for")
    sw = out[1]
    assert (sw.old, sw.new, sw.at_raw_ns) == ("gnss", None, at(8.5))
    assert "gnss no-signal" in sw.reason and "no qualified reference left" in sw.reason
    assert b.sel.active is None
    assert b.tick(at(9.5)) == []  # no loop sample in holdover

    # It comes back: selected again.
    out = b.feed("gnss", at(20), 1.0)
    assert next(e for e in out if isinstance(e, RefSwitched)).new == "gnss"
    assert out[-1] == LoopSample("gnss", at(20), 1.0, 10.0)


# --- priority ------------------------------------------------------------------------------------------------------------
def test_fallback_down_the_priorities_and_holdover_when_all_are_gone() -> None:
    b = Bench([gnss(), ptp(), ntp()])
    b.run(0, 5, {"gnss": quiet, "ptp": quiet, "ntp": quiet})
    assert b.sel.active == "gnss"
    assert all(b.state(n) == "qualified" for n in ("gnss", "ptp", "ntp"))

    # GNSS loses its fix: PTP at once, and the switch says why.
    out = b.set_usable("gnss", False, "no fix", at(5.2))
    assert RefStateChanged("gnss", "qualified", "unusable", "no fix", at(5.2)) in out
    sw = [e for e in out if isinstance(e, RefSwitched)]
    assert len(sw) == 1
    assert (sw[0].old, sw[0].new, sw[0].at_raw_ns) == ("gnss", "ptp", at(5.2))
    assert "gnss unusable (no fix)" in sw[0].reason
    assert b.set_usable("gnss", False, "no fix", at(5.3)) == []  # the same verdict again changes nothing

    # GNSS keeps sending (unusable), PTP stops after 9 s: NTP once PTP is silent for more than its timeout.
    b.run(5, 20, {"gnss": quiet, "ptp": lambda k: quiet(k) if k < 10 else None, "ntp": quiet})
    sw = b.switches()
    assert [(s.old, s.new) for s in sw] == [(None, "gnss"), ("gnss", "ptp"), ("ptp", "ntp")]
    assert at(12) < sw[-1].at_raw_ns <= at(13)  # last PTP sample at 9 s, timeout 3 s
    assert "ptp no-signal" in sw[-1].reason
    assert {ls.ref for ls in b.loops(since=at(5.2)) if ls.raw_ns < at(12)} == {"ptp"}
    assert {ls.ref for ls in b.loops(since=sw[-1].at_raw_ns)} == {"ntp"}

    # Everything stops: holdover.
    b.run(20, 30, {})
    assert b.sel.active is None
    assert b.switches()[-1].new is None
    assert "no qualified reference left" in b.switches()[-1].reason


# --- qualification -------------------------------------------------------------------------------------------------------
def test_a_reference_is_qualified_after_qualify_s_of_samples_and_only_then_used() -> None:
    b = Bench([gnss(qualify_s=10.0)])
    b.run(0, 10, {"gnss": quiet})
    assert b.state("gnss") == "qualifying"
    assert b.sel.refs["gnss"].reason.endswith("of 10 s")
    assert b.sel.active is None and b.loops() == []
    b.run(10, 11, {"gnss": quiet})
    assert b.changes("gnss")[-1] == RefStateChanged("gnss", "qualifying", "qualified", "samples for 10 s", at(10))
    assert b.switches()[-1].new == "gnss" and b.switches()[-1].at_raw_ns == at(10)
    assert b.loops()[0].raw_ns == at(10)


def test_a_gap_longer_than_the_timeout_restarts_qualification() -> None:
    b = Bench([gnss(qualify_s=10.0, timeout_s=3.0)])
    b.run(0, 6, {"gnss": quiet})
    b.run(6, 10, {})  # 4 s without a sample
    assert b.state("gnss") == "no-signal"
    b.run(10, 20, {"gnss": quiet})
    assert b.state("gnss") == "qualifying"  # 10 s of samples since 10 s would be needed
    b.run(20, 21, {"gnss": quiet})
    assert b.state("gnss") == "qualified"
    assert b.switches()[0].at_raw_ns == at(20)


def test_a_gap_longer_than_the_timeout_restarts_qualification_even_without_ticks() -> None:
    b = Bench([gnss(qualify_s=10.0, timeout_s=3.0)])
    b.run(0, 6, {"gnss": quiet}, tick_at=None)
    b.run(9, 19, {"gnss": quiet}, tick_at=None)  # 5 -> 9 s: a gap of 4 s
    assert b.state("gnss") == "qualifying"
    b.run(19, 20, {"gnss": quiet}, tick_at=None)
    assert b.state("gnss") == "qualified"


def test_a_gap_within_the_timeout_does_not_restart_qualification() -> None:
    b = Bench([gnss(qualify_s=10.0, timeout_s=3.0)])
    b.run(0, 11, {"gnss": lambda k: None if k in (6, 7) else quiet(k)})  # 5 -> 8 s: 3 s, not more than the timeout
    assert b.state("gnss") == "qualified"
    assert b.switches()[0].at_raw_ns == at(10)


def test_a_qualified_reference_silent_longer_than_its_timeout_must_requalify() -> None:
    b = Bench([gnss(qualify_s=5.0, timeout_s=3.0)])
    for k in range(11):  # qualified at 5 s; the once-a-second tick comes right after each sample
        b.feed("gnss", at(k), quiet(k))
        b.tick(at(k))
    for k in (11, 12, 13):  # silent 1, 2, 3 s at the ticks: never more than the timeout at a tick
        b.tick(at(k))
    b.feed("gnss", at(13.5), 0.0)  # 3.5 s after the last sample: a gap longer than the timeout
    # Expected: the reference lost its signal for longer than timeout_s, so it qualifies again (qualifying, not
    # driving the clock).  Got: still "qualified" and active.
    assert b.state("gnss") == "qualifying"


# --- revertive / non-revertive -------------------------------------------------------------------------------------------
def _gnss_away_and_back(policy: SelectorPolicy, end_s: int) -> Bench:
    b = Bench([gnss(qualify_s=2.0), ptp(qualify_s=2.0)], policy)
    b.run(0, 10, {"gnss": quiet, "ptp": quiet})
    assert b.sel.active == "gnss"
    b.set_usable("gnss", False, "no fix", at(10.5))
    assert b.sel.active == "ptp"
    b.run(10, 20, {"gnss": quiet, "ptp": quiet})
    b.set_usable("gnss", True, "", at(20.5))
    b.run(20, end_s, {"gnss": quiet, "ptp": quiet})
    return b


def test_revertive_returns_to_the_better_reference_after_wait_to_restore() -> None:
    b = _gnss_away_and_back(SelectorPolicy(revertive=True, wait_to_restore_s=10.0), 60)
    qualified = [c for c in b.changes("gnss") if c.new == "qualified"][-1]
    assert qualified.old == "qualifying"  # it qualified again (qualify_s 2) before it counted
    back = b.switches()[-1]
    assert (back.old, back.new) == ("ptp", "gnss")
    assert qualified.at_raw_ns + 10 * S <= back.at_raw_ns < qualified.at_raw_ns + 11 * S
    assert "revertive" in back.reason
    assert back.buildout_ns == 0.0 and back.step_ns == 0.0  # a return to a better reference is not built out
    assert len(b.switches()) == 3
    assert {ls.ref for ls in b.loops(since=back.at_raw_ns)} == {"gnss"}


def test_non_revertive_stays_on_the_fallback_until_it_fails() -> None:
    b = _gnss_away_and_back(SelectorPolicy(revertive=False, wait_to_restore_s=10.0), 120)
    assert b.sel.active == "ptp"
    assert b.state("gnss") == "qualified"
    assert len(b.switches()) == 2
    b.run(120, 130, {"gnss": quiet})  # PTP stops: back to GNSS then
    assert b.sel.active == "gnss"
    assert (b.switches()[-1].old, b.switches()[-1].new) == ("ptp", "gnss")
    assert b.switches()[-1].buildout_ns == 0.0


def test_non_revertive_is_not_reverted_by_disabling_an_unrelated_reference() -> None:
    b = Bench([gnss(), ptp(), ntp()], SelectorPolicy(revertive=False))
    b.run(0, 5, {"gnss": quiet, "ptp": quiet, "ntp": quiet})
    b.set_usable("gnss", False, "no fix", at(5.5))
    b.run(5, 10, {"gnss": quiet, "ptp": quiet, "ntp": quiet})
    b.set_usable("gnss", True, "", at(10.5))
    b.run(10, 100, {"gnss": quiet, "ptp": quiet, "ntp": quiet})
    assert b.sel.active == "ptp"
    b.sel.enable("ntp", False, at(100.5), "op")
    # Expected: still on PTP (non-revertive; NTP was not involved).  Got: RefSwitched(ptp -> gnss, "ntp disabled
    # by op").
    assert b.sel.active == "ptp"


# --- operator: pin and disable -------------------------------------------------------------------------------------------
def test_pin_unpin_and_disable() -> None:
    b = Bench([gnss(), ptp(), ntp()])
    b.run(0, 5, {"gnss": quiet, "ptp": quiet, "ntp": quiet})
    assert b.sel.active == "gnss"

    out = b.sel.pin("ntp", at(5.5), "alice")
    sw = [e for e in out if isinstance(e, RefSwitched)]
    assert [(s.old, s.new) for s in sw] == [("gnss", "ntp")]
    assert sw[0].reason == "pinned to ntp by alice"
    v = views_by_name(b.sel, at(5.5))
    assert v["ntp"].pinned and v["ntp"].active and not v["gnss"].active

    b.run(5, 8, {"gnss": quiet, "ptp": quiet, "ntp": quiet})
    assert b.sel.active == "ntp"  # stays pinned although GNSS is better
    assert {ls.ref for ls in b.loops(since=at(5.5))} == {"ntp"}

    with pytest.raises(ValueError, match="no reference named 'irig'"):
        b.sel.pin("irig", at(8.1), "alice")
    assert b.sel.pinned == "ntp"

    out = b.sel.pin(None, at(8.2), "alice")
    sw = [e for e in out if isinstance(e, RefSwitched)]
    assert [(s.old, s.new, s.reason) for s in sw] == [("ntp", "gnss", "unpinned by alice")]
    assert b.sel.pinned is None

    out = b.sel.enable("ptp", False, at(8.3), "bob")
    assert RefStateChanged("ptp", "qualified", "disabled", "disabled by the operator", at(8.3)) in out
    assert views_by_name(b.sel, at(8.3))["ptp"].state == "disabled"
    with pytest.raises(ValueError, match="disabled"):
        b.sel.pin("ptp", at(8.4), "bob")
    assert b.sel.pinned is None

    # A disabled reference is not selectable: GNSS fails -> NTP, not PTP, although PTP keeps sending.
    b.set_usable("gnss", False, "no fix", at(8.5))
    b.run(8, 12, {"gnss": quiet, "ptp": quiet, "ntp": quiet})
    assert b.sel.active == "ntp"
    assert b.state("ptp") == "disabled"

    b.sel.enable("ptp", True, at(12.5), "bob")  # enabled again: qualifies and, better than NTP, is taken after
    b.run(12, 14, {"gnss": quiet, "ptp": quiet, "ntp": quiet})  # the wait to restore (revertive policy)
    assert b.state("ptp") == "qualified"
    assert b.sel.active == "ntp"
    b.run(14, 14 + int(SelectorPolicy().wait_to_restore_s) + 1, {"gnss": quiet, "ptp": quiet, "ntp": quiet})
    assert b.sel.active == "ptp"


def test_pinned_reference_is_used_whenever_it_is_qualified() -> None:
    b = Bench([gnss(), ntp()])
    b.run(0, 3, {"gnss": quiet, "ntp": quiet})
    b.pin("ntp", at(3.5))
    b.run(3, 10, {"gnss": quiet, "ntp": lambda k: None if 4 <= k < 8 else quiet(k)})
    refs = [(s.old, s.new) for s in b.switches()]
    assert refs == [(None, "gnss"), ("gnss", "ntp"), ("ntp", "gnss"), ("gnss", "ntp")]
    assert b.sel.pinned == "ntp" and b.sel.active == "ntp"


def test_disabling_the_pinned_reference_unpins_it_and_enable_of_an_unknown_one_raises() -> None:
    b = Bench([gnss(), ntp()])
    b.run(0, 3, {"gnss": quiet, "ntp": quiet})
    b.sel.pin("ntp", at(3.5), "op")
    b.sel.enable("ntp", False, at(4), "op")
    assert b.sel.pinned is None
    assert b.sel.active == "gnss"
    with pytest.raises(ValueError):
        b.sel.enable("irig", False, at(5), "op")


# --- hitless switching: phase build-out ----------------------------------------------------------------------------------
def _fallback_to_offset_ptp(ptp_offset: float, policy: SelectorPolicy,
                            hold_phase: bool = True) -> tuple[Bench, RefSwitched]:
    """GNSS (offsets ~0) drives the clock for 20 s; PTP reads ``ptp_offset`` (its bound is wide enough to agree);
    GNSS loses its fix at 19.5 s."""
    b = Bench([gnss(), ptp(accuracy_ns=20_000.0)], policy)
    b.run(0, 20, {"gnss": quiet, "ptp": lambda k: ptp_offset + noise(k + 3)})
    assert b.sel.active == "gnss"
    b.sel.hold_phase = hold_phase
    out = b.set_usable("gnss", False, "no fix", at(19.5))
    sw = [e for e in out if isinstance(e, RefSwitched)]
    assert len(sw) == 1 and (sw[0].old, sw[0].new) == ("gnss", "ptp")
    return b, sw[0]


@pytest.mark.parametrize("sign", [1, -1])
def test_fallback_builds_out_the_phase_difference_beyond_the_step_limit(sign: int) -> None:
    policy = SelectorPolicy(step_limit_ns=20.0, slew_ns_per_s=10.0)
    b, sw = _fallback_to_offset_ptp(sign * 5000.0, policy)
    assert sw.step_ns == pytest.approx(sign * 20.0)
    assert sw.buildout_ns == pytest.approx(sign * (5000.0 - 20.0), abs=6.0)
    assert b.sel.buildout_ns(at(19.5)) == sw.buildout_ns

    # The loop carries on from its phase: right after the switch it sees about the step, not 5000 ns.
    b.run(20, 25, {"gnss": quiet, "ptp": lambda k: sign * 5000.0 + noise(k + 3)})
    after = b.loops(since=at(19.5))
    assert [ls.ref for ls in after] == ["ptp"] * 6  # handed at the switch, then one a second
    for ls in after:
        elapsed_s = (ls.raw_ns - at(19.5)) / S
        assert sign * ls.offset_ns == pytest.approx(20.0 + 10.0 * elapsed_s, abs=8.0)
        assert abs(ls.offset_ns) < 100.0

    # The build-out slews away at 10 ns/s and ends at 0 (never crosses it).
    assert sign * b.sel.buildout_ns(at(119.5)) == pytest.approx(sign * sw.buildout_ns - 1000.0)
    assert views_by_name(b.sel, at(119.5))["ptp"].buildout_ns == b.sel.buildout_ns(at(119.5))
    left = [sign * b.sel.buildout_ns(at(19.5 + s)) for s in range(0, 700, 7)]
    assert all(x >= y >= 0.0 for x, y in itertools.pairwise(left))
    end = 19.5 + abs(sw.buildout_ns) / 10.0
    assert b.sel.buildout_ns(at(end - 1)) != 0.0
    assert b.sel.buildout_ns(at(end + 0.001)) == 0.0
    assert b.sel.buildout_ns(at(end + 10_000)) == 0.0


def test_the_loop_ends_on_the_new_reference_without_moving_faster_than_the_slew() -> None:
    policy = SelectorPolicy(step_limit_ns=20.0, slew_ns_per_s=50.0)
    b, _sw = _fallback_to_offset_ptp(5000.0, policy)
    b.run(20, 140, {"gnss": quiet, "ptp": lambda k: 5000.0 + noise(k + 3)})
    offs = [ls.offset_ns for ls in b.loops(since=at(19.5))]
    assert offs[0] < 100.0
    steps = [y - x for x, y in itertools.pairwise(offs)]
    assert max(abs(d) for d in steps) <= 50.0 + 2 * 3.0 + 1e-9  # slew per second plus the reference's scatter
    assert offs[-1] == pytest.approx(5000.0, abs=3.0)


def test_with_zero_slew_the_buildout_stays_until_the_next_switch() -> None:
    b, sw = _fallback_to_offset_ptp(5000.0, SelectorPolicy(step_limit_ns=20.0, slew_ns_per_s=0.0))
    assert b.sel.buildout_ns(at(19.5 + 100_000)) == sw.buildout_ns
    b.run(20, 120, {"gnss": quiet, "ptp": lambda k: 5000.0 + noise(k + 3)})
    assert b.loops()[-1].offset_ns == pytest.approx(20.0, abs=8.0)


def test_without_hold_phase_there_is_no_buildout() -> None:
    b, sw = _fallback_to_offset_ptp(5000.0, SelectorPolicy(step_limit_ns=20.0), hold_phase=False)
    assert sw.buildout_ns == 0.0 and sw.step_ns == 0.0
    b.run(20, 21, {"gnss": quiet, "ptp": lambda k: 5000.0 + noise(k + 3)})
    assert b.loops()[-1].offset_ns == pytest.approx(5000.0, abs=3.0)


def test_a_return_to_a_higher_priority_reference_is_not_built_out() -> None:
    b, _sw = _fallback_to_offset_ptp(5000.0, SelectorPolicy(step_limit_ns=20.0, slew_ns_per_s=1.0,
                                                           wait_to_restore_s=5.0))
    b.run(20, 25, {"gnss": quiet, "ptp": lambda k: 5000.0 + noise(k + 3)})
    b.set_usable("gnss", True, "", at(25.5))
    b.run(25, 40, {"gnss": quiet, "ptp": lambda k: 5000.0 + noise(k + 3)})
    back = b.switches()[-1]
    assert (back.old, back.new) == ("ptp", "gnss")
    assert back.buildout_ns == 0.0 and back.step_ns == 0.0
    assert b.sel.buildout_ns(back.at_raw_ns) == 0.0
    for ls in b.loops(since=back.at_raw_ns):
        assert ls.ref == "gnss" and abs(ls.offset_ns) <= 3.0  # GNSS's own offsets, nothing removed


def test_a_second_fallback_keeps_the_phase_the_loop_was_holding() -> None:
    """GNSS -> PTP (+5000 ns, built out) -> NTP (+5000 ns too): the loop sees no jump at the second switch either."""
    b = Bench([gnss(), ptp(accuracy_ns=20_000.0), ntp(accuracy_ns=20_000.0)],
              SelectorPolicy(step_limit_ns=20.0, slew_ns_per_s=0.0))
    offs = {"gnss": quiet, "ptp": lambda k: 5000.0 + noise(k + 3), "ntp": lambda k: 5000.0 + noise(k + 5)}
    b.run(0, 20, offs)
    b.set_usable("gnss", False, "no fix", at(19.5))
    b.run(20, 30, offs)
    b.set_usable("ptp", False, "clockClass 248", at(29.5))
    b.run(30, 35, offs)
    sw = b.switches()[-1]
    assert (sw.old, sw.new) == ("ptp", "ntp")
    assert abs(sw.step_ns) <= 20.0
    # The loop held ~20 ns (the first step): NTP is ~4980 ns from that, of which another 20 ns go to the loop.
    assert sw.buildout_ns == pytest.approx(5000.0 - 20.0 - 20.0, abs=12.0)
    before = b.loops(since=at(20))[-7]  # before the one handed at the switch and the five after it
    assert before.ref == "ptp"
    for ls in b.loops(since=at(29.5)):
        assert ls.ref == "ntp"
        assert abs(ls.offset_ns - before.offset_ns) <= 20.0 + 12.0


# --- the 1 Hz loop stream ------------------------------------------------------------------------------------------------
def test_a_slow_reference_is_held_between_samples_with_the_corrections_applied_since() -> None:
    b = Bench([ntp(timeout_s=64.0)])

    def corr(t: int) -> float:
        return 7.0 * (t - T0) / S  # the discipline's accumulated correction

    samples = {0: 100.0, 16: 120.0, 32: 90.0, 48: 95.0}
    loops_at: dict[int, LoopSample] = {}
    for j in range(64):
        got = []
        if j in samples:
            got += [e for e in b.feed("ntp", at(j), samples[j], unc=500.0, corr=corr(at(j)))
                    if isinstance(e, LoopSample)]
        got += [e for e in b.tick(at(j), corr(at(j))) if isinstance(e, LoopSample)]
        assert len(got) <= 1
        if got:
            loops_at[j] = got[0]
    # From the second sample on (the interval is known), exactly one loop sample per second.
    assert set(range(16, 64)) <= set(loops_at)
    for j in range(16, 64):
        last = max(s for s in samples if s <= j)
        ls = loops_at[j]
        assert ls.raw_ns == at(j) and ls.ref == "ntp" and ls.uncertainty_ns == 500.0
        expected = samples[last] + corr(at(j)) - corr(at(last))
        assert ls.offset_ns == pytest.approx(expected)


def test_a_slow_reference_is_not_held_past_its_timeout() -> None:
    b = Bench([ntp(timeout_s=40.0)])
    b.feed("ntp", at(0), 1.0)
    b.feed("ntp", at(16), 2.0)
    for j in range(17, 70):
        b.tick(at(j))
    held = [ls.raw_ns for ls in b.loops(since=at(17))]
    assert held == [at(j) for j in range(17, 56)]  # up to 40 s after the last sample
    assert b.sel.active is None
    assert at(56) <= b.switches()[-1].at_raw_ns <= at(57)


def test_a_1_hz_reference_gets_no_held_samples_from_tick() -> None:
    b = Bench([gnss()])
    for k in range(20):
        b.feed("gnss", at(k), quiet(k))
        assert b.tick(at(k + 0.25)) == []
        assert b.tick(at(k + 0.75)) == []
    assert len(b.loops()) == 20


def test_a_fast_reference_is_averaged_to_about_one_loop_sample_per_second() -> None:
    b = Bench([ptp()])
    sent: list[tuple[int, float]] = []
    dt = S // 16
    for i in range(16 * 20):
        t = T0 + i * dt
        off = 100.0 + 5.0 * math.sin(i / 3.0)
        sent.append((t, off))
        b.feed("ptp", t, off)
        if i % 16 == 8:
            assert [e for e in b.tick(t) if isinstance(e, LoopSample)] == []
    loops = b.loops()
    assert 19 <= len(loops) <= 22  # 20 s of samples
    gaps = [(y.raw_ns - x.raw_ns) / S for x, y in itertools.pairwise(loops)]
    assert all(0.9 <= g <= 1.0 for g in gaps)
    # Each one is the mean of the offsets since the previous one.
    prev = None
    for ls in loops:
        window = [o for t, o in sent if (prev is None or t > prev) and t <= ls.raw_ns]
        assert ls.offset_ns == pytest.approx(statistics.fmean(window))
        prev = ls.raw_ns
    assert all(len([t for t, _ in sent if a.raw_ns < t <= c.raw_ns]) >= 14 for a, c in itertools.pairwise(loops))


# --- references against each other ------------------------------------------------------------------------------------
def test_a_reference_the_two_others_dispute_is_disqualified_and_left() -> None:
    b = Bench([gnss(), ptp(), ntp()])
    b.run(0, 20, {"gnss": quiet, "ptp": quiet, "ntp": quiet})
    assert b.sel.active == "gnss"
    b.run(20, 60, {"gnss": lambda k: 10_000.0 + noise(k), "ptp": quiet, "ntp": quiet})
    assert b.state("gnss") == "disqualified"
    assert b.state("ptp") == "qualified" and b.state("ntp") == "qualified"
    assert b.sel.refs["gnss"].reason.startswith("disagrees with ntp, ptp")
    ch = [c for c in b.changes("gnss") if c.new == "disqualified"]
    assert len(ch) == 1 and "disagrees with" in ch[0].reason
    sw = b.switches()[-1]
    assert (sw.old, sw.new) == ("gnss", "ptp")
    assert sw.at_raw_ns == ch[0].at_raw_ns
    assert "gnss disqualified" in sw.reason
    assert sw.buildout_ns == 0.0  # not built out from a reference set aside as wrong
    assert {ls.ref for ls in b.loops(since=sw.at_raw_ns)} == {"ptp"}


@pytest.mark.parametrize("wrong", ["gnss", "ptp"])
def test_of_two_that_disagree_the_lower_priority_one_is_disqualified(wrong: str) -> None:
    b = Bench([gnss(), ptp()])
    b.run(0, 30, {"gnss": lambda k: (10_000.0 if wrong == "gnss" else 0.0) + noise(k),
                  "ptp": lambda k: (10_000.0 if wrong == "ptp" else 0.0) + noise(k + 1)})
    assert b.state("ptp") == "disqualified"
    assert b.sel.refs["ptp"].reason.startswith("disagrees with gnss, of higher priority")
    assert b.state("gnss") == "qualified"
    assert b.sel.active == "gnss"
    assert [(s.old, s.new) for s in b.switches()] == [(None, "gnss")]
    assert len(b.sel.disagreements) == 1


def test_a_coarse_reference_agreeing_with_both_does_not_save_the_fine_one_that_disagrees() -> None:
    b = Bench([gnss(), ptp(), ntp(accuracy_ns=1_000_000.0)])
    b.run(0, 30, {"gnss": quiet, "ptp": lambda k: 2_000.0 + noise(k), "ntp": quiet})
    assert b.state("ptp") == "disqualified"
    assert "disagrees with gnss, of higher priority" in b.sel.refs["ptp"].reason
    assert b.state("gnss") == "qualified" and b.state("ntp") == "qualified"
    assert b.sel.active == "gnss"


def test_a_disqualified_reference_is_qualified_again_once_it_agrees() -> None:
    b = Bench([gnss(qualify_s=5.0), ptp(qualify_s=5.0), ntp(qualify_s=5.0, accuracy_ns=1_000_000.0)])
    b.run(0, 20, {"gnss": quiet, "ptp": quiet, "ntp": quiet})
    b.run(20, 45, {"gnss": quiet, "ptp": lambda k: 2_000.0 + noise(k), "ntp": quiet})
    assert b.state("ptp") == "disqualified"
    b.run(45, 90, {"gnss": quiet, "ptp": quiet, "ntp": quiet})
    assert b.state("ptp") == "qualified"
    assert b.sel.refs["ptp"].disagrees == ""


def test_a_disqualified_reference_must_requalify_for_qualify_s_once_it_agrees() -> None:
    b = Bench([gnss(qualify_s=5.0), ptp(qualify_s=5.0), ntp(qualify_s=5.0, accuracy_ns=1_000_000.0)])
    b.run(0, 20, {"gnss": quiet, "ptp": quiet, "ntp": quiet})
    b.run(20, 45, {"gnss": quiet, "ptp": lambda k: 2_000.0 + noise(k), "ntp": quiet})
    b.run(45, 90, {"gnss": quiet, "ptp": quiet, "ntp": quiet})
    after = [c for c in b.changes("ptp") if c.at_raw_ns > at(45)]
    # Expected: disqualified -> qualifying, then qualifying -> qualified at least qualify_s (5 s) later.
    # Got: a single disqualified -> qualified change ("samples for 53 s").
    assert [(c.old, c.new) for c in after] == [("disqualified", "qualifying"), ("qualifying", "qualified")]
    assert after[1].at_raw_ns - after[0].at_raw_ns >= 5 * S


RATE = 200.0  # ns/s: the served clock runs fast against every reference


def _drifting(b: Bench, first_s: int, end_s: int, ntp_error_ns: float = 0.0) -> None:
    """All references read the same drifting clock, sampled at different instants and rates: GNSS on the second,
    PTP 0.3 s later, NTP every 16 s at 0.7 s (``ntp_error_ns`` added to NTP's reading)."""

    def ramp(t: int, k: int) -> float:
        return RATE * (t - T0) / S + noise(k, 2.0)

    for k in range(first_s, end_s):
        b.feed("gnss", at(k), ramp(at(k), k))
        b.feed("ptp", at(k + 0.3), ramp(at(k + 0.3), k + 1))
        if k % 16 == 0:
            b.feed("ntp", at(k + 0.7), ramp(at(k + 0.7), k + 2) + ntp_error_ns)
        b.tick(at(k + 0.9))


def test_a_drifting_clock_is_not_read_as_disagreement() -> None:
    b = Bench([gnss(), ptp(), ntp(timeout_s=64.0)])
    _drifting(b, 0, 200)
    assert [c for c in b.changes() if c.new == "disqualified"] == []
    assert all(b.state(n) == "qualified" for n in ("gnss", "ptp", "ntp"))
    assert b.sel.disagreements == []
    assert b.sel.drift_ns_per_s(at(199.9)) == pytest.approx(RATE, rel=0.01)
    assert [(s.old, s.new) for s in b.switches()] == [(None, "gnss")]
    # The offsets carried to one instant agree to within the scatter, whenever each was sampled.
    now = [b.sel.offset_now(n, at(199.9)) for n in ("gnss", "ptp", "ntp")]
    assert max(now) - min(now) <= 10.0


def test_without_drift_an_ntp_reference_5_us_off_is_set_aside() -> None:
    """The control for the next test: the same three references on a clock that does not drift."""
    b = Bench([gnss(), ptp(), ntp(timeout_s=64.0)])
    for k in range(200):
        b.feed("gnss", at(k), noise(k, 2.0))
        b.feed("ptp", at(k + 0.3), noise(k + 1, 2.0))
        if k % 16 == 0:
            b.feed("ntp", at(k + 0.7), noise(k + 2, 2.0) + (5_000.0 if k >= 64 else 0.0))
        b.tick(at(k + 0.9))
    assert b.state("ntp") == "disqualified"
    assert b.state("gnss") == "qualified" and b.state("ptp") == "qualified"


def test_a_drifting_clock_does_not_hide_a_real_disagreement() -> None:
    b = Bench([gnss(), ptp(), ntp(timeout_s=64.0)])
    _drifting(b, 0, 64)
    _drifting(b, 64, 300, ntp_error_ns=5_000.0)
    # Expected: NTP, 5 us off both others (bound 1 us + scatter), is disqualified as on a steady clock.  Got: it
    # stays "qualified" (its bound is ~11 us: the 3200 ns it drifts between polls read as jitter).
    assert b.state("ntp") == "disqualified"


def test_a_quiet_reference_on_a_drifting_clock_shows_little_jitter() -> None:
    b = Bench([gnss(), ptp(), ntp(timeout_s=64.0)])
    _drifting(b, 0, 60)
    v = views_by_name(b.sel, at(59.9))
    # Expected: about the 2 ns of scatter the samples carry.  Got: ~210 ns (GNSS, PTP), ~3300 ns (NTP).
    assert v["gnss"].jitter_ns <= 10.0
    assert v["ntp"].jitter_ns <= 10.0


# --- the read model ------------------------------------------------------------------------------------------------------
def test_views_rows_sorted_by_priority_with_flags_jitter_and_counts() -> None:
    b = Bench([ntp(), ptp(), gnss(), RefSpec("irig", "irig", 3, 1_000.0)])
    for k in range(20):
        b.feed("gnss", at(k), 10.0 if k % 2 else -10.0, unc=4.0)
        b.feed("ptp", at(k), 0.5)
        if k < 3:
            b.feed("ntp", at(k), 1.0)
    b.sel.pin("ptp", at(19.5), "op")
    rows = b.sel.views(at(19.5))
    assert [r.name for r in rows] == ["gnss", "ptp", "irig", "ntp"]
    assert [r.priority for r in rows] == [1, 2, 3, 5]
    g, p, i, n = rows
    assert (g.active, g.pinned, p.active, p.pinned) == (False, False, True, True)
    assert not i.active and not n.active
    assert (g.kind, g.state, g.samples, g.offset_ns, g.uncertainty_ns) == ("gnss", "qualified", 20, 10.0, 4.0)
    assert 5.0 <= g.jitter_ns <= 30.0  # of the order of the scatter
    assert p.jitter_ns is None and p.samples == 20  # twenty identical samples: one measurement, repeated
    assert g.last_sample_raw_ns == at(19) and g.accuracy_ns == 50.0
    assert (i.state, i.samples, i.offset_ns, i.jitter_ns, i.uncertainty_ns, i.last_sample_raw_ns) == (
        "no-signal", 0, None, None, None, None)
    assert n.samples == 3 and n.state == "no-signal" and n.last_sample_raw_ns == at(2)
    assert n.jitter_ns is None  # nothing recent (its samples are older than the comparison window)
    assert all(r.buildout_ns == 0.0 for r in rows)


# --- bad input -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("offset,unc", [(math.nan, 10.0), (math.inf, 10.0), (-math.inf, 10.0), (5.0, math.nan),
                                        (5.0, math.inf)])
def test_non_finite_samples_are_ignored(offset: float, unc: float) -> None:
    b = Bench([gnss()])
    b.run(0, 3, {"gnss": quiet})
    before = views_by_name(b.sel, at(3))["gnss"]
    assert b.feed("gnss", at(3), offset, unc=unc) == []
    after = views_by_name(b.sel, at(3))["gnss"]
    assert after.samples == before.samples and after.offset_ns == before.offset_ns
    assert after.last_sample_raw_ns == at(2)
    b.run(3, 4, {"gnss": quiet})
    assert all(math.isfinite(ls.offset_ns) for ls in b.loops())


def test_a_non_finite_sample_does_not_keep_a_reference_alive() -> None:
    b = Bench([gnss()])
    b.run(0, 3, {"gnss": quiet})
    b.run(3, 8, {"gnss": lambda k: math.nan})
    assert b.state("gnss") == "no-signal"
    assert b.sel.active is None


def test_samples_and_verdicts_for_unknown_references_are_ignored() -> None:
    b = Bench([gnss()])
    assert b.feed("irig", at(0), 1.0) == []
    assert b.set_usable("irig", False, "no frame", at(0)) == []
    assert b.sel.active is None and set(b.sel.refs) == {"gnss"}
    assert b.state("gnss") == "no-signal"


# --- properties ----------------------------------------------------------------------------------------------------------
NAMES = ("gnss", "ptp", "ntp")
ACTIONS = ("sample", "sample", "sample", "off", "silent", "unusable", "usable", "disable", "enable", "pin", "unpin")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    qualify_s=st.sampled_from([0.0, 1.0, 3.0]),
    revertive=st.booleans(),
    steps=st.lists(st.tuples(st.sampled_from(ACTIONS), st.sampled_from(ACTIONS), st.sampled_from(ACTIONS)),
                   min_size=1, max_size=40),
)
def test_property_the_active_reference_is_always_a_qualified_enabled_one(
        qualify_s: float, revertive: bool, steps: list[tuple[str, str, str]]) -> None:
    b = Bench([gnss(qualify_s=qualify_s), ptp(qualify_s=qualify_s), ntp(qualify_s=qualify_s)],
              SelectorPolicy(revertive=revertive, wait_to_restore_s=3.0))
    sel = b.sel

    def check(t: int) -> None:
        qualified = {n for n, r in sel.refs.items() if r.state is RefState.QUALIFIED}
        if sel.active is not None:
            r = sel.refs[sel.active]
            assert r.state is RefState.QUALIFIED and r.enabled
        assert (sel.active is None) == (not qualified)  # a qualified reference is never left unused
        if sel.pinned is not None:
            assert sel.refs[sel.pinned].enabled
            if sel.pinned in qualified:
                assert sel.active == sel.pinned
        for r in sel.refs.values():
            assert r.enabled or r.state is RefState.DISABLED
        rows = sel.views(t)
        assert [r.name for r in rows if r.active] == ([] if sel.active is None else [sel.active])

    for k, acts in enumerate(steps):
        for j, (name, act) in enumerate(zip(NAMES, acts)):
            t = at(k + j * 0.1)
            if act in ("sample", "off"):
                b.feed(name, t, (10_000.0 if act == "off" else 0.0) + noise(k + j))
            elif act in ("unusable", "usable"):
                b.set_usable(name, act == "usable", "" if act == "usable" else "source says no", t)
            elif act in ("disable", "enable"):
                sel.enable(name, act == "enable", t, "op")
            elif act == "pin":
                if sel.refs[name].enabled:
                    sel.pin(name, t, "op")
                else:
                    with pytest.raises(ValueError):
                        sel.pin(name, t, "op")
            elif act == "unpin":
                sel.pin(None, t, "op")
            check(t)
        b.tick(at(k + 0.5))
        check(at(k + 0.5))
    for e in b.events:
        if isinstance(e, LoopSample):
            assert math.isfinite(e.offset_ns)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    d=st.floats(min_value=-50_000.0, max_value=50_000.0, allow_nan=False),
    step_limit=st.floats(min_value=0.0, max_value=1_000.0),
    slew=st.floats(min_value=0.0, max_value=100.0),
    sigma_p=st.floats(min_value=0.0, max_value=30.0),
    sigma_g=st.floats(min_value=0.0, max_value=5.0),
    np_=st.lists(st.floats(min_value=-1.0, max_value=1.0), min_size=21, max_size=21),
    ng=st.lists(st.floats(min_value=-1.0, max_value=1.0), min_size=21, max_size=21),
)
def test_property_buildout_is_bounded_and_the_loop_never_jumps_more_than_the_step_limit(
        d: float, step_limit: float, slew: float, sigma_p: float, sigma_g: float, np_: list[float],
        ng: list[float]) -> None:
    """A fallback from GNSS to a PTP reference ``d`` ns away (each with its own scatter): the build-out never
    exceeds the difference, the loop's step is within the limit, and the loop sees no larger jump than the step
    limit plus the two references' scatter (and the slew over the half second to the next sample)."""
    b = Bench([gnss(), ptp()], SelectorPolicy(step_limit_ns=step_limit, slew_ns_per_s=slew,
                                              disagree_margin_ns=1e9))
    b.run(0, 20, {"gnss": lambda k: sigma_g * ng[k], "ptp": lambda k: d + sigma_p * np_[k]}, tick_at=None)
    assert b.sel.active == "gnss"
    before = b.loops()[-1]
    assert before.raw_ns == at(19) and before.ref == "gnss"
    out = b.set_usable("gnss", False, "no fix", at(19.5))
    sw = next(e for e in out if isinstance(e, RefSwitched))
    assert sw.new == "ptp"
    scatter = sigma_p + sigma_g
    assert abs(sw.step_ns) <= step_limit
    assert abs(sw.buildout_ns) <= max(0.0, abs(d) + scatter - step_limit) + 1e-6
    assert abs(sw.buildout_ns + sw.step_ns - d) <= scatter + 1e-6  # together: the difference as measured
    if sw.buildout_ns and sw.step_ns:
        assert math.copysign(1, sw.buildout_ns) == math.copysign(1, sw.step_ns)
    b.feed("ptp", at(20), d + sigma_p * np_[20])
    after = b.loops()[-1]
    assert after.raw_ns == at(20) and after.ref == "ptp"
    assert abs(after.offset_ns - before.offset_ns) <= step_limit + slew * 0.5 + 2 * scatter + 1e-6
    # The build-out only ever shrinks towards 0, keeping its sign.
    left = [b.sel.buildout_ns(at(19.5 + s)) for s in (0, 1, 10, 100, 1_000, 10_000)]
    assert all(abs(x) >= abs(y) for x, y in itertools.pairwise(left))
    assert all(y == 0.0 or math.copysign(1, y) == math.copysign(1, sw.buildout_ns) for y in left)


def test_a_held_sample_carries_the_oscillators_drift_as_well_as_the_loops_corrections() -> None:
    """The served clock exactly on time while the loop corrects a 32 ppb oscillator: NTP every 4 s reads 0, and so
    must every sample held between its polls (not a sawtooth of the corrections)."""
    b = Bench([ntp(timeout_s=20.0)])
    for k in range(11):
        b.feed("ntp", at(4 * k), 0.0, corr=32.0 * 4 * k)  # free phase = -correction: the oscillator runs 32 ns/s
    for dt in (1, 2, 3):
        out = b.tick(at(40 + dt), corr=32.0 * (40 + dt))
        held = [e for e in out if isinstance(e, LoopSample)]
        assert len(held) == 1 and held[0].offset_ns == pytest.approx(0.0, abs=1e-6), (dt, held)


def test_out_of_holdover_onto_a_coarser_reference_the_clock_carries_on_from_its_phase() -> None:
    """In holdover within a 500 ns bound, a 1 ms-class NTP 20 us away qualifies: most of that is built out."""
    b = Bench([gnss(), ntp(accuracy_ns=1_000_000.0)], SelectorPolicy(step_limit_ns=20.0))
    b.run(0, 10, {"gnss": quiet, "ntp": lambda k: None})
    b.set_usable("gnss", False, "no fix", at(10.5))
    assert b.sel.active is None
    b.sel.phase_bound_ns = 500.0
    b.run(11, 20, {"gnss": lambda k: None, "ntp": lambda k: 20_000.0 + noise(k)})
    sw = b.switches()[-1]
    assert (sw.old, sw.new) == (None, "ntp")
    assert sw.step_ns == pytest.approx(20.0) and sw.buildout_ns == pytest.approx(19_980.0, abs=5.0)
    assert all(abs(ls.offset_ns) < 30.0 for ls in b.loops(since=sw.at_raw_ns))
    # A reference better than the bound is followed: no build-out.
    b2 = Bench([gnss(), ntp(accuracy_ns=100.0)], SelectorPolicy(step_limit_ns=20.0))
    b2.run(0, 10, {"gnss": quiet, "ntp": lambda k: None})
    b2.set_usable("gnss", False, "no fix", at(10.5))
    b2.sel.phase_bound_ns = 500.0
    b2.run(11, 20, {"gnss": lambda k: None, "ntp": lambda k: 20_000.0 + noise(k)})
    assert b2.switches()[-1].buildout_ns == 0.0
