"""NTP upstream servers as a coarse time reference: a clock filter per server, then selection, clustering and
combining of the servers in the spirit of RFC 5905 §10 and §11.2.

Pure core: ``on_sample`` takes the poller's samples (``gnss.ntpcheck.NtpSample``: server minus served time at the host
instant ``host_ns``), ``estimate(now_ns)`` takes the host instant to judge them at; nothing here reads a clock.  The
estimate has a ``RefSample``'s sign: the served time minus the servers' consensus.

Where this departs from RFC 5905, on purpose:
- selection is Marzullo's intersection without the RFC's midpoint rule (as ntpd 4.2.8 and chrony), and a truechimer
  is a server whose correctness interval holds the whole intersection; a majority of the candidates must agree on one
  interval, and two disjoint majorities are no majority;
- the weighted mean of the survivors is clamped into the truechimers' common interval, the only times all of them
  allow, so one falseticker among honest servers can never carry the estimate outside the honest intervals;
- a sample without a round-trip delay (``delay_ns``) is ranked in the clock filter by its root distance instead.
Every sample is an offset against the served time at its own instant: after a step of the served clock the older
samples are wrong by the step, so this is a reference to steer coarsely (milliseconds), not a servo input.
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from appliance.refs.model import RefSample
from appliance.units import NS_PER_S

PHI = 15e-6  # RFC 5905 7.2: frequency tolerance (15 ppm), the rate at which an old sample's error bound grows
FILTER_STAGES = 8  # RFC 5905 10: the clock filter keeps the last eight samples
MAX_DISTANCE_NS = 1_500_000_000  # RFC 5905 7.2 MAXDIST: a server farther than this is not fit to be a candidate
MAX_STRATUM = 15  # RFC 5905 7.3: 16 is unsynchronised, 0 a kiss-o'-death
_REFUSING_KISS_CODES = ("DENY", "RSTR")  # RFC 5905 7.4: refused service; a RATE kiss only asks for fewer requests
_MAX_ABS_NS = 2**62  # beyond any sensible offset, distance or instant: such input is garbage
_MAX_TEXT = 200

CANDIDATE, SURVIVOR, FALSETICKER, UNREACHABLE, ERROR = "candidate", "survivor", "falseticker", "unreachable", "error"


@dataclass(frozen=True)
class Falseticker:
    """A candidate whose correctness interval misses the interval the majority agrees on."""

    server: str
    reason: str


@dataclass(frozen=True)
class NtpEstimate:
    """The servers' consensus at one evaluation.  ``offset_ns`` is the served time minus the consensus (positive: the
    served clock is ahead); ``uncertainty_ns`` the survivors' combined root distance plus the system jitter;
    ``stratum`` the system peer's (the appliance would be one more); ``host_ns`` the instant of the newest sample
    used; ``intersection_ns`` the truechimers' common interval, on ``offset_ns``'s axis."""

    ref: str
    offset_ns: int
    uncertainty_ns: int
    stratum: int
    system_peer: str
    survivors: tuple[str, ...]
    falsetickers: tuple[Falseticker, ...]
    outliers: tuple[str, ...]  # truechimers dropped by the clustering
    host_ns: int
    jitter_ns: int
    intersection_ns: tuple[int, int]

    def ref_sample(self, raw_ns: int) -> RefSample:
        """This estimate as a reference sample at local counter instant ``raw_ns`` (the caller maps ``host_ns``)."""
        return RefSample(self.ref, raw_ns, float(self.offset_ns), float(self.uncertainty_ns))


@dataclass(frozen=True)
class ServerStatus:
    """One server at one evaluation.  ``offset_ns``, ``delay_ns``, ``distance_ns`` (grown with age, jitter
    included) and ``jitter_ns`` are the clock filter's pick (None without one); offsets are server minus served
    time, as the poller reports them.  ``reach`` is the RFC 5905 8-bit reachability register (bit 0: the last poll)."""

    server: str
    state: str  # candidate, survivor, falseticker, unreachable or error
    reason: str
    reach: int
    stratum: int | None
    offset_ns: int | None
    delay_ns: int | None
    distance_ns: int | None
    jitter_ns: int | None
    last_offset_ns: int | None
    last_host_ns: int | None
    polls: int
    errors: int
    kisses: int
    unsynchronised: int
    invalid: int


@dataclass(frozen=True)
class _Stage:
    """One usable reply in a server's clock filter."""

    host_ns: int
    offset_ns: int  # server minus served
    distance_ns: int  # the server's root distance as seen from here, at host_ns
    delay_ns: int | None
    stratum: int


@dataclass
class _Peer:
    name: str
    stages: deque[_Stage] = field(default_factory=lambda: deque(maxlen=FILTER_STAGES))
    reach: int = 0
    polls: int = 0
    errors: int = 0
    kisses: int = 0
    unsynchronised: int = 0
    invalid: int = 0
    last_error: str = ""  # the last poll's ("" when it gave a usable reply)
    refusal: str = ""  # why the server refuses to be used, until its next usable reply


@dataclass(frozen=True)
class _Fit:
    """A server's clock filter output at the evaluation instant."""

    server: str
    stage: _Stage
    jitter_ns: float
    distance_ns: float  # root distance now: the sample's, grown at PHI since, plus the peer jitter

    @property
    def offset_ns(self) -> int:
        return self.stage.offset_ns

    @property
    def low_ns(self) -> float:
        return self.stage.offset_ns - self.distance_ns

    @property
    def high_ns(self) -> float:
        return self.stage.offset_ns + self.distance_ns


@dataclass
class _Selection:
    estimate: NtpEstimate | None
    verdict: str
    states: dict[str, tuple[str, str]]
    fits: dict[str, _Fit]


class NtpUpstream:
    """The NTP servers' consensus as one reference named ``name``.  Memory is bounded: eight samples per server and
    at most ``max_servers`` servers (samples from further servers are counted in ``dropped``).  ``servers`` lists
    configured names, shown as unreachable before their first reply."""

    def __init__(self, name: str = "ntp", min_survivors: int = 1, max_distance_ns: int = MAX_DISTANCE_NS,
                 max_age_ns: int = 1024 * NS_PER_S, precision_ns: int = 1_000, max_servers: int = 64,
                 servers: Iterable[str] = ()):
        if min_survivors < 1 or max_distance_ns <= 0 or max_age_ns <= 0 or precision_ns <= 0 or max_servers < 1:
            raise ValueError("min_survivors, max_distance_ns, max_age_ns, precision_ns and max_servers must be "
                             "positive")
        self.name = name
        self.min_survivors = min_survivors
        self.max_distance_ns = max_distance_ns
        self.max_age_ns = max_age_ns
        self.precision_ns = precision_ns  # the floor of every jitter: the poller's timestamps are no finer
        self.max_servers = max_servers
        self.dropped = 0
        self.last_verdict = "no estimate yet"
        self._peers: dict[str, _Peer] = {}
        self._last_now_ns: int | None = None
        for server in servers:
            self._peer(server)

    # --- input ------------------------------------------------------------------------------------------------------
    def on_sample(self, sample: object) -> None:
        """Record one poll of one server: a usable reply enters its clock filter and sets bit 0 of its reachability
        register; an error, a kiss-o'-death, an unsynchronised reply or garbage is counted and dropped."""
        name = _attr(sample, "server")
        peer = self._peer(name) if isinstance(name, str) else None
        if peer is None:
            self.dropped += 1
            return
        peer.polls += 1
        peer.reach = (peer.reach << 1) & 0xFF
        stage, kind, reason = _parse(sample)
        if stage is not None:
            peer.reach |= 1
            peer.stages.append(stage)
            peer.last_error = peer.refusal = ""
            return
        peer.last_error = reason
        if kind == "kiss" or kind == "refused":
            peer.kisses += 1
        elif kind == "unsynchronised":
            peer.unsynchronised += 1
        elif kind == "invalid":
            peer.invalid += 1
        else:
            peer.errors += 1
        if kind in ("refused", "unsynchronised"):
            peer.refusal = reason

    def _peer(self, name: str) -> _Peer | None:
        name = name.strip()[:_MAX_TEXT]
        if not name:
            return None
        peer = self._peers.get(name)
        if peer is None and len(self._peers) < self.max_servers:
            peer = self._peers[name] = _Peer(name)
        return peer

    # --- read model -------------------------------------------------------------------------------------------------
    def estimate(self, now_ns: int) -> NtpEstimate | None:
        """The consensus judged at host instant ``now_ns``; None when no majority of the candidates agrees (the
        reason is then in ``last_verdict``)."""
        self._last_now_ns = now_ns
        selection = self._evaluate(now_ns)
        self.last_verdict = selection.verdict
        return selection.estimate

    def servers(self, now_ns: int | None = None) -> list[ServerStatus]:
        """Every server's state judged at ``now_ns`` (default: the last ``estimate``'s instant, else the newest
        sample's)."""
        if now_ns is None:
            now_ns = self._last_now_ns if self._last_now_ns is not None else max(
                (s.host_ns for p in self._peers.values() for s in p.stages), default=0)
        selection = self._evaluate(now_ns)
        return [_row(peer, selection.fits.get(name), *selection.states[name]) for name, peer in self._peers.items()]

    # --- the system process -----------------------------------------------------------------------------------------
    def _evaluate(self, now_ns: int) -> _Selection:
        fits: dict[str, _Fit] = {}
        states: dict[str, tuple[str, str]] = {}
        for name, peer in self._peers.items():
            fit = self._filter(peer, now_ns)
            if fit is not None:
                fits[name] = fit
            states[name] = self._fitness(peer, fit)
        candidates = [fits[name] for name, (state, _) in states.items() if state == CANDIDATE]
        if not candidates:
            return _Selection(None, "no candidate server", states, fits)
        found = _intersection(candidates)
        if found is None:
            verdict = f"no majority: no interval is agreed by more than half of {len(candidates)} candidates"
            for c in candidates:
                states[c.server] = (CANDIDATE, verdict)
            return _Selection(None, verdict, states, fits)
        low_ns, high_ns, chimers = found
        falsetickers = tuple(Falseticker(c.server, f"interval {_ms(c.low_ns)}..{_ms(c.high_ns)} ms misses the "
                                         f"majority's {_ms(low_ns)}..{_ms(high_ns)} ms")
                             for c in candidates if c not in chimers)
        for f in falsetickers:
            states[f.server] = (FALSETICKER, f.reason)
        survivors, outliers = self._cluster(chimers)
        for c, selection_jitter_ns, floor_ns in outliers:
            why = f"clustered out: selection jitter {_ms(selection_jitter_ns, False)} ms above the smallest peer"
            states[c.server] = (CANDIDATE, f"{why} jitter {_ms(floor_ns, False)} ms")
        for c in survivors:
            states[c.server] = (SURVIVOR, "system peer" if c is survivors[0] else "combined")
        estimate = self._combine(survivors, chimers, falsetickers, tuple(c.server for c, _, _ in outliers))
        verdict = (f"{len(survivors)} survivors of {len(candidates)} candidates, system peer {estimate.system_peer}")
        return _Selection(estimate, verdict, states, fits)

    def _filter(self, peer: _Peer, now_ns: int) -> _Fit | None:
        """RFC 5905 10: of the samples not older than ``max_age_ns``, the one with the least delay; its peer jitter is
        the RMS difference from the others."""
        fresh = [s for s in peer.stages if now_ns - s.host_ns <= self.max_age_ns]
        if not fresh:
            return None
        by_delay = all(s.delay_ns is not None for s in fresh)
        best = min(fresh, key=lambda s: (s.delay_ns if by_delay else s.distance_ns, -s.host_ns))
        spread = math.fsum(float(s.offset_ns - best.offset_ns) ** 2 for s in fresh)
        jitter_ns = max(float(self.precision_ns), math.sqrt(spread / (len(fresh) - 1)) if len(fresh) > 1 else 0.0)
        distance_ns = best.distance_ns + PHI * max(0, now_ns - best.host_ns) + jitter_ns
        return _Fit(peer.name, best, jitter_ns, distance_ns)

    def _fitness(self, peer: _Peer, fit: _Fit | None) -> tuple[str, str]:
        """RFC 5905 11.2 (fit): a server refusing service, unreachable, silent for ``max_age_ns`` or too far is not a
        candidate."""
        if peer.refusal:
            return ERROR, peer.refusal
        if peer.polls == 0:
            return UNREACHABLE, "not polled yet"
        if peer.reach == 0:
            return UNREACHABLE, f"no usable reply in the last {min(peer.polls, 8)} polls: {peer.last_error}"
        if fit is None:
            return UNREACHABLE, f"no usable reply in the last {self.max_age_ns / NS_PER_S:g} s"
        if fit.distance_ns > self.max_distance_ns:
            return ERROR, (f"root distance {_ms(fit.distance_ns, False)} ms exceeds "
                           f"{_ms(self.max_distance_ns, False)} ms")
        return CANDIDATE, "awaiting selection"

    def _cluster(self, chimers: list[_Fit]) -> tuple[list[_Fit], list[tuple[_Fit, float, float]]]:
        """RFC 5905 11.2.2: while more than ``min_survivors`` remain, drop the survivor with the greatest selection
        jitter if that exceeds the smallest peer jitter.  Survivors stay in merit order (stratum, then distance)."""
        survivors = sorted(chimers, key=lambda c: (c.stage.stratum * self.max_distance_ns + c.distance_ns, c.server))
        outliers = []
        while len(survivors) > self.min_survivors:
            selection = [_selection_jitter_ns(c, survivors) for c in survivors]
            worst = max(range(len(survivors)), key=lambda i: (selection[i], i))  # a tie drops the lesser merit
            floor_ns = min(c.jitter_ns for c in survivors)
            if selection[worst] <= floor_ns:
                break
            outliers.append((survivors.pop(worst), selection[worst], floor_ns))
        return survivors, outliers

    def _combine(self, survivors: list[_Fit], chimers: list[_Fit], falsetickers: tuple[Falseticker, ...],
                 outliers: tuple[str, ...]) -> NtpEstimate:
        """RFC 5905 11.2.3: the survivors' offsets weighted by 1/distance, clamped into the truechimers' common
        interval.  The combined distance is the weighted mean distance: the weighted mean's error bound when every
        survivor's interval holds the true time."""
        weights = [1.0 / c.distance_ns for c in survivors]
        total = math.fsum(weights)
        mean_ns = math.fsum(w * c.offset_ns for w, c in zip(weights, survivors)) / total
        peer = survivors[0]
        selection_ns = math.sqrt(math.fsum(w * float(c.offset_ns - peer.offset_ns) ** 2
                                           for w, c in zip(weights, survivors)) / total)
        jitter_ns = math.hypot(peer.jitter_ns, selection_ns)
        low_ns = math.ceil(max(c.low_ns for c in chimers))
        high_ns = math.floor(min(c.high_ns for c in chimers))
        if low_ns > high_ns:  # an interval narrower than a nanosecond: its rounded middle
            low_ns = high_ns = round((max(c.low_ns for c in chimers) + min(c.high_ns for c in chimers)) / 2)
        server_offset_ns = min(max(round(mean_ns), low_ns), high_ns)
        return NtpEstimate(
            ref=self.name, offset_ns=-server_offset_ns,
            uncertainty_ns=math.ceil(len(survivors) / total + jitter_ns), stratum=peer.stage.stratum,
            system_peer=peer.server, survivors=tuple(c.server for c in survivors), falsetickers=falsetickers,
            outliers=outliers, host_ns=max(c.stage.host_ns for c in survivors), jitter_ns=math.ceil(jitter_ns),
            intersection_ns=(-high_ns, -low_ns))


def _intersection(candidates: list[_Fit]) -> tuple[float, float, list[_Fit]] | None:
    """RFC 5905 11.2.1 (Marzullo): allowing ever more falsetickers while they stay a minority, the interval held by
    ``n - allow`` correctness intervals, and the candidates whose interval holds all of it (None: no majority)."""
    edges = sorted([(c.low_ns, 0) for c in candidates] + [(c.high_ns, 1) for c in candidates])  # ties: lows first
    n = len(candidates)
    for allow in range((n + 1) // 2):
        need = n - allow
        low_ns = _edge(edges, need, opening=0)
        high_ns = _edge(reversed(edges), need, opening=1)
        if low_ns is None or high_ns is None:
            continue
        chimers = [c for c in candidates if c.low_ns <= low_ns and c.high_ns >= high_ns]
        if len(chimers) >= need:  # fewer: the two ends belong to two disjoint majorities
            return low_ns, high_ns, chimers
    return None


def _edge(edges: Iterable[tuple[float, int]], need: int, opening: int) -> float | None:
    """The first edge, scanning in the given order, where ``need`` intervals are open."""
    depth = 0
    for value, kind in edges:
        depth += 1 if kind == opening else -1
        if depth >= need:
            return value
    return None


def _selection_jitter_ns(c: _Fit, survivors: list[_Fit]) -> float:
    if len(survivors) < 2:
        return 0.0
    spread = math.fsum(float(other.offset_ns - c.offset_ns) ** 2 for other in survivors)
    return math.sqrt(spread / (len(survivors) - 1))


def _parse(sample: object) -> tuple[_Stage | None, str, str]:
    """A usable reply as a filter stage, or (None, kind, reason): kind is error, kiss (RATE or unknown), refused
    (DENY, RSTR), unsynchronised or invalid."""
    error = _attr(sample, "error")
    if error:
        text = _text(error) or "query failed"
        if text.startswith("served time unavailable"):  # ours, not the server's (gnss.ntpcheck's wording)
            return None, "error", text
        if "kiss" in text.lower():
            return None, "refused" if any(code in text for code in _REFUSING_KISS_CODES) else "kiss", text
        if "unsynchroni" in text.lower():
            return None, "unsynchronised", text
        return None, "error", text
    host_ns, offset_ns = _ns(_attr(sample, "host_ns")), _ns(_attr(sample, "offset_ns"))
    raw_distance, raw_delay = _attr(sample, "uncertainty_ns"), _attr(sample, "delay_ns")
    stratum = _attr(sample, "stratum")
    distance_ns = _ns(raw_distance)
    delay_ns = None if raw_delay is None else _ns(raw_delay)
    if host_ns is None or offset_ns is None:
        return None, "invalid", "instant or offset is not a finite number of ns"
    if distance_ns is None or distance_ns < 0:
        return None, "invalid", f"root distance {_text(raw_distance)} is not a non-negative number of ns"
    if raw_delay is not None and delay_ns is None:
        return None, "invalid", "round-trip delay is not a finite number of ns"
    if not isinstance(stratum, numbers.Integral) or isinstance(stratum, bool) or stratum < 0:
        return None, "invalid", f"stratum {_text(stratum)} is not a stratum"
    if stratum == 0:
        return None, "kiss", "stratum 0 (kiss-o'-death) without an error"
    if stratum > MAX_STRATUM:
        return None, "unsynchronised", f"server unsynchronised (stratum {stratum})"
    # RFC 5905 8: a negative delay (clock error at either end) counts as none.
    return _Stage(host_ns, offset_ns, distance_ns, None if delay_ns is None else max(0, delay_ns), int(stratum)), "", ""


def _attr(sample: object, name: str) -> object:
    """``sample.name``, or None when it is missing or reading it fails."""
    try:
        return getattr(sample, name, None)
    except Exception:  # noqa: BLE001 - a broken sample is counted and dropped, never raised
        return None


def _ns(value: object) -> int | None:
    """A finite number of ns within +-2**62 as an int, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        out = int(value)
    elif isinstance(value, numbers.Real) and math.isfinite(float(value)):
        out = round(float(value))
    else:
        return None
    return out if abs(out) < _MAX_ABS_NS else None


def _text(value: object) -> str:
    try:
        return str(value)[:_MAX_TEXT]
    except Exception:  # noqa: BLE001 - a broken __str__ must not break the input path
        return f"<unprintable {type(value).__name__}>"


def _ms(value_ns: float, signed: bool = True) -> str:
    return f"{value_ns / 1e6:+.3f}" if signed else f"{value_ns / 1e6:.3f}"


def _row(peer: _Peer, fit: _Fit | None, state: str, reason: str) -> ServerStatus:
    last = peer.stages[-1] if peer.stages else None
    return ServerStatus(
        server=peer.name, state=state, reason=reason, reach=peer.reach,
        stratum=None if last is None else last.stratum,
        offset_ns=None if fit is None else fit.offset_ns,
        delay_ns=None if fit is None else fit.stage.delay_ns,
        distance_ns=None if fit is None else math.ceil(fit.distance_ns),
        jitter_ns=None if fit is None else math.ceil(fit.jitter_ns),
        last_offset_ns=None if last is None else last.offset_ns,
        last_host_ns=None if last is None else last.host_ns,
        polls=peer.polls, errors=peer.errors, kisses=peer.kisses, unsynchronised=peer.unsynchronised,
        invalid=peer.invalid)
