"""The sync monitor of downstream clients: how far each configured NTP host and PTP slave is from the served time.

Pure core.  The edge (``edge/sync_monitor.py``) polls the targets (NTP client-mode exchanges; PTP through linuxptp's
NetSync Monitor, ``nsm``) and hands over what came back with the served-clock instants it read; everything decided
from it is here: the offset and delay of an NTP exchange (RFC 5905 8), the reading of nsm's report, each target's
state (ok, over-limit, unreachable) with hysteresis, and the one alarm that names every target beyond its limit.
No clock is read: every instant is an argument (served TAI ns, or served POSIX ns where NTP speaks UTC).

Hysteresis: a target goes over-limit after ``raise_after`` answers in a row with |offset| above its limit, and comes
back only after ``clear_after`` answers in a row at or below ``clear_fraction`` of it, so an offset wandering around
the limit raises and clears once, not at every poll.  It is unreachable after ``fail_after`` failed polls in a row
(no answer, a refusal), or when no poll result at all arrived for ``stale_polls`` intervals (a poller that died).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from appliance.events import Alarm, Severity
from appliance.protocol.ntp import packet
from appliance.timebase import ntp64_to_posix_ns, posix_ns_to_ntp64
from appliance.units import NS_PER_S

ALARM_CODE = "monitor-over-limit"
KINDS = ("ntp", "ptp")
OK, OVER_LIMIT, UNREACHABLE, WAITING = "ok", "over-limit", "unreachable", "waiting"
UNSYNCHRONISED = "unsynchronised"  # it answers, saying its own clock is unsynchronised (leap 3): not unreachable
_UNSYNC_ERROR = "target unsynchronised"
_FIELD = re.compile(r"^[A-Za-z][A-Za-z0-9.]*$")
_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")


@dataclass(frozen=True)
class Target:
    """One monitored client: ``name`` is how every surface labels it (``host:port`` for NTP, the address for PTP)."""

    name: str
    kind: str  # "ntp" or "ptp"
    host: str
    port: int
    limit_ns: int


@dataclass(frozen=True)
class Answer:
    """One poll of one target.  ``offset_ns`` is the target's clock minus the served clock; ``delay_ns`` the
    round trip (NTP) or the slave's own mean path delay (PTP, as nsm reports it); with ``error`` set both are None."""

    target: str
    at_tai_ns: int  # served time of the poll's end
    offset_ns: int | None
    delay_ns: int | None
    error: str = ""


@dataclass(frozen=True)
class MonitorRow:
    """A target as status shows it."""

    target: str
    kind: str
    limit_ns: int
    state: str  # ok, over-limit, unreachable, waiting (no poll yet)
    offset_ns: int | None  # of the last answer
    delay_ns: int | None
    last_answer_tai_ns: int | None
    last_poll_tai_ns: int | None
    error: str  # of the last poll ("" when it answered)
    polls: int
    answers: int
    last_answer_utc: str = ""  # the read model labels ``last_answer_tai_ns`` in UTC


@dataclass
class _State:
    target: Target
    polls: int = 0
    answers: int = 0
    failures_in_row: int = 0
    over: bool = False
    over_in_row: int = 0
    under_in_row: int = 0
    last: Answer | None = None
    last_good: Answer | None = None


# --- settings ---------------------------------------------------------------------------------------------------
def split_host_port(text: str, default_port: int) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a bare IPv6 address -> (host, port); ValueError names it."""
    t = text.strip()
    host, port_text = t, ""
    if t.startswith("["):
        host, sep, rest = t[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r}: expected [address] or [address]:port")
        port_text = rest[1:]
    elif t.count(":") == 1:
        host, _, port_text = t.partition(":")
    if not host or any(c.isspace() for c in host):
        raise ValueError(f"{text!r}: no host")
    if not port_text:
        return host, default_port
    if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 and 0 < int(port_text) < 65536):
        raise ValueError(f"{text!r}: bad port {port_text[:10]!r}")
    return host, int(port_text)


def limit_items(text: str) -> list[str]:
    """``monitor.limits`` text -> its ``TARGET=NS`` items."""
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_limits(items: Iterable[str]) -> dict[str, int]:
    """``monitor.limits`` entries ``TARGET=NS`` -> {target: limit_ns}; ValueError names the bad entry."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not (value.isascii() and value.isdigit()) or not 0 < int(value) <= 10**12:
            raise ValueError(f"monitor.limits: {item!r}: expected TARGET=NS with NS in [1, 1000000000000]")
        out[name] = int(value)
    return out


def targets_of(ntp_targets: Sequence[str], ptp_targets: Sequence[str], limit_ns: int,
               limits: Iterable[str] = (), ntp_port: int = 123) -> tuple[Target, ...]:
    """The configured targets, each with its limit (``limits`` overrides ``limit_ns`` per target name); ValueError
    with every problem found, each naming its setting and value."""
    problems: list[str] = []
    out: list[Target] = []
    for text in ntp_targets:
        try:
            host, port = split_host_port(text, ntp_port)
        except ValueError as exc:
            problems.append(f"monitor.ntp_targets: {exc}")
            continue
        name = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        out.append(Target(name, "ntp", host, port, limit_ns))
    for text in ptp_targets:
        address = text.strip()
        if not (_is_ipv4(address) or _MAC.match(address)):
            problems.append(f"monitor.ptp_targets: {text!r}: expected an IPv4 address (udp4) or a MAC address (l2), "
                            "as nsm takes them")
            continue
        out.append(Target(address, "ptp", address, 319, limit_ns))
    try:
        overrides = parse_limits(limits)
    except ValueError as exc:
        problems.append(str(exc))
        overrides = {}
    names = [t.name for t in out]
    aliases = {t.host: t.name for t in out if t.kind == "ntp"}  # "host" names the target "host:123" too
    for name in overrides:
        if name not in names and name not in aliases:
            listed = ", ".join(names) or "none"
            problems.append(f"monitor.limits: {name!r} is not a monitored target (targets: {listed})")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        problems.append(f"monitor: targets listed twice: {', '.join(duplicates)}")
    if problems:
        raise ValueError("; ".join(problems))
    by_name = {aliases.get(name, name): value for name, value in overrides.items()}
    return tuple(Target(t.name, t.kind, t.host, t.port, by_name.get(t.name, t.limit_ns)) for t in out)


def _is_ipv4(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv4Address)
    except ValueError:
        return False


# --- NTP: one client-mode exchange --------------------------------------------------------------------------------
def ntp_offset_delay_ns(t1_ns: int, t2_ns: int, t3_ns: int, t4_ns: int) -> tuple[int, int]:
    """RFC 5905 8: offset = ((T2 - T1) + (T3 - T4)) / 2 and delay = (T4 - T1) - (T3 - T2), exact in int ns (the
    offset rounded half up).  T1/T4 are the served clock at the request's transmission and the reply's reception,
    T2/T3 the target's clock at its reception and transmission."""
    offset2 = (t2_ns - t1_ns) + (t3_ns - t4_ns)
    return -((-offset2) // 2) if offset2 % 2 else offset2 // 2, (t4_ns - t1_ns) - (t3_ns - t2_ns)


def ntp_request(t1_posix_ns: int) -> tuple[bytes, int]:
    """A client-mode NTPv4 request whose transmit timestamp is the served time ``t1``, and that timestamp (the reply
    must echo it as its origin)."""
    xmt = posix_ns_to_ntp64(t1_posix_ns)
    header = packet.NtpHeader(0, 4, packet.MODE_CLIENT, 0, 0, 0, 0, 0, b"\0\0\0\0", 0, 0, 0, xmt)
    return header.encode(), xmt


def ntp_answer(target: str, reply: bytes, sent_xmt: int, t1_posix_ns: int, t4_posix_ns: int,
               at_tai_ns: int) -> Answer:
    """The answer of one exchange from the reply's bytes, the transmit timestamp the request carried (echoed as the
    reply's origin) and the served instants T1 and T4 (POSIX ns) of the request's sending and the reply's receipt.
    A reply that is not a server's answer to our request, a kiss-o'-death or an unsynchronised target (leap 3:
    its time means nothing yet) is a failed poll with the reason."""
    try:
        h = packet.decode(reply)
    except ValueError as exc:
        return failed(target, at_tai_ns, str(exc))
    if h.mode != packet.MODE_SERVER:
        return failed(target, at_tai_ns, f"reply has mode {h.mode}, not server (4)")
    if h.origin_ts != sent_xmt:  # RFC 5905 8: the origin timestamp must echo our transmit timestamp
        return failed(target, at_tai_ns, "reply does not echo our request's transmit timestamp")
    if h.stratum == 0:  # RFC 5905 7.4: a kiss-o'-death carries its code in the reference ID
        code = h.reference_id.rstrip(b"\0").decode("ascii", "replace")
        return failed(target, at_tai_ns, f"kiss-o'-death {code!r}")
    if h.leap == packet.LI_ALARM or h.stratum > 15:
        return failed(target, at_tai_ns, f"{_UNSYNC_ERROR} (leap {h.leap}, stratum {h.stratum})")
    if h.transmit_ts == 0 or h.receive_ts == 0:
        return failed(target, at_tai_ns, "reply has no receive or transmit timestamp")
    t2 = ntp64_to_posix_ns(h.receive_ts, t1_posix_ns)
    t3 = ntp64_to_posix_ns(h.transmit_ts, t1_posix_ns)
    offset_ns, delay_ns = ntp_offset_delay_ns(t1_posix_ns, t2, t3, t4_posix_ns)
    return Answer(target, at_tai_ns, offset_ns, max(0, delay_ns))


def failed(target: str, at_tai_ns: int, error: str) -> Answer:
    return Answer(target, at_tai_ns, None, None, error or "poll failed")


# --- PTP: nsm's report ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NsmReport:
    """One "NSM MEASUREMENT COMPLETE" block of nsm's standard output.  ``offset_ns`` is nsm's clock minus the
    slave's (nsm measures the slave as its master); the slave's own currentDS follows."""

    offset_ns: int
    port_state: str = ""
    slave_offset_ns: float | None = None  # the slave's offsetFromMaster
    slave_delay_ns: float | None = None  # the slave's meanPathDelay


@dataclass
class NsmParser:
    """Reads nsm's standard output line by line; ``feed`` returns a report when a block is complete (at its
    ``lastSyncTimestamp`` line, or when the next block or any unrelated line begins after the fields seen)."""

    _fields: dict[str, str] = field(default_factory=dict)
    _open: bool = False

    def feed(self, line: str) -> NsmReport | None:
        text = line.strip()
        if text.startswith("NSM MEASUREMENT COMPLETE"):
            done = self._close()
            self._open, self._fields = True, {}
            return done
        if not self._open:
            return None
        key, _, value = text.partition(" ")
        if not key:
            return None
        if key == "lastSyncTimestamp":
            self._fields[key] = value.strip()
            return self._close()
        if line[:1] in ("\t", " ") and _FIELD.match(key):  # nsm indents a block's fields
            self._fields[key] = value.strip()
            return None
        return self._close()  # something else (a log line): the block ended early

    def _close(self) -> NsmReport | None:
        fields, self._fields, was_open = self._fields, {}, self._open
        self._open = False
        if not was_open:
            return None
        try:
            offset = int(fields["offset"].split()[0])
        except (KeyError, ValueError, IndexError):
            return None
        return NsmReport(offset, fields.get("portState", ""), _float(fields.get("offsetFromMaster")),
                         _float(fields.get("meanPathDelay")))


def _float(text: str | None) -> float | None:
    try:
        return None if text is None else float(text.split()[0])
    except (ValueError, IndexError):
        return None


def nsm_answer(target: str, report: NsmReport, served_minus_host_ns: int, at_tai_ns: int) -> Answer:
    """The slave against the served clock: nsm reports its own clock (the host's, read by the kernel) minus the
    slave's, so the slave minus the served clock is the negated report less the served clock's lead on the host."""
    delay = None if report.slave_delay_ns is None else round(report.slave_delay_ns)
    return Answer(target, at_tai_ns, -report.offset_ns - served_minus_host_ns, delay)


# --- the monitor ------------------------------------------------------------------------------------------------
class SyncMonitor:
    """Each target's last answer and state, and its over-limit alarm (one per target: ``monitor-over-limit@TARGET``,
    an instance of the catalogue's entry).  ``record`` and ``check`` return the alarm changes for the alarm book."""

    def __init__(self, targets: Sequence[Target], interval_ns: int, raise_after: int = 2, clear_after: int = 2,
                 clear_fraction: float = 0.8, fail_after: int = 2, stale_polls: int = 3):
        if interval_ns <= 0 or min(raise_after, clear_after, fail_after, stale_polls) < 1:
            raise ValueError("interval_ns and the counts must be positive")
        if not 0 < clear_fraction <= 1:
            raise ValueError(f"clear_fraction must be in (0, 1], got {clear_fraction}")
        self.interval_ns = interval_ns
        self.raise_after, self.clear_after, self.clear_fraction = raise_after, clear_after, clear_fraction
        self.fail_after, self.stale_polls = fail_after, stale_polls
        self._states = {t.name: _State(t) for t in targets}
        self._alarmed: set[str] = set()  # targets whose alarm is raised
        self._started_tai_ns: int | None = None

    @property
    def targets(self) -> tuple[Target, ...]:
        return tuple(s.target for s in self._states.values())

    def record(self, answer: Answer) -> list[Alarm]:
        """One poll's result; an answer for a target not monitored is ignored."""
        state = self._states.get(answer.target)
        if state is None:
            return []
        state.polls += 1
        state.last = answer
        if answer.offset_ns is None:
            state.failures_in_row += 1
        else:
            state.answers += 1
            state.failures_in_row = 0
            state.last_good = answer
            self._hysteresis(state, abs(answer.offset_ns))
        return self._alarm(answer.at_tai_ns)

    def _hysteresis(self, state: _State, size_ns: int) -> None:
        limit = state.target.limit_ns
        if size_ns > limit:
            state.over_in_row, state.under_in_row = state.over_in_row + 1, 0
        elif size_ns <= limit * self.clear_fraction:
            state.over_in_row, state.under_in_row = 0, state.under_in_row + 1
        else:  # between the clear level and the limit: neither raises nor clears
            state.over_in_row = state.under_in_row = 0
        if not state.over and state.over_in_row >= self.raise_after:
            state.over = True
        elif state.over and state.under_in_row >= self.clear_after:
            state.over = False

    def check(self, now_tai_ns: int) -> list[Alarm]:
        """Once a second: the alarm as the states stand now (a target gone unreachable keeps its over-limit state
        until it answers again within the limit: silence is no evidence that it came back)."""
        if self._started_tai_ns is None:
            self._started_tai_ns = now_tai_ns
        return self._alarm(now_tai_ns)

    def state_of(self, name: str, now_tai_ns: int) -> str:
        s = self._states[name]
        last_ns = s.last.at_tai_ns if s.last is not None else self._started_tai_ns
        stale = last_ns is not None and now_tai_ns - last_ns > self.stale_polls * self.interval_ns
        if stale:
            return UNREACHABLE
        if s.failures_in_row >= self.fail_after or (s.last_good is None and s.failures_in_row):
            answered = s.last is not None and s.last.error.startswith(_UNSYNC_ERROR)
            return UNSYNCHRONISED if answered else UNREACHABLE
        if s.last is None:
            return WAITING
        return OVER_LIMIT if s.over else OK

    def rows(self, now_tai_ns: int) -> tuple[MonitorRow, ...]:
        out = []
        for name, s in self._states.items():
            good, last = s.last_good, s.last
            stale = self.state_of(name, now_tai_ns) == UNREACHABLE and last is not None and not last.error
            error = ("no poll result for over "
                     f"{self.stale_polls * self.interval_ns // NS_PER_S} s" if stale else "" if last is None
                     else last.error)
            out.append(MonitorRow(name, s.target.kind, s.target.limit_ns, self.state_of(name, now_tai_ns),
                                  None if good is None else good.offset_ns, None if good is None else good.delay_ns,
                                  None if good is None else good.at_tai_ns, None if last is None else last.at_tai_ns,
                                  error, s.polls, s.answers))
        return tuple(out)

    def _alarm(self, at_tai_ns: int) -> list[Alarm]:
        out = []
        for name, s in self._states.items():
            t, code = s.target, alarm_code(name)
            if s.over and name not in self._alarmed:
                self._alarmed.add(name)
                offset = "" if s.last_good is None or s.last_good.offset_ns is None else \
                    f", offset {s.last_good.offset_ns:+,} ns"
                out.append(Alarm(code, Severity.MINOR, True, f"downstream client {t.kind.upper()} {name} beyond its "
                                 f"limit (limit {_ns_text(t.limit_ns)}{offset})", at_tai_ns))
            elif not s.over and name in self._alarmed:
                self._alarmed.discard(name)
                out.append(Alarm(code, Severity.MINOR, False, f"downstream client {t.kind.upper()} {name} within its "
                                 f"limit again (limit {_ns_text(t.limit_ns)})", at_tai_ns))
        return out


def alarm_code(target: str) -> str:
    """The over-limit alarm of one target: an instance of the catalogue's entry (alarms.INSTANCE_SEP)."""
    return f"{ALARM_CODE}@{target}"


def _ns_text(ns: int) -> str:
    for unit, scale in (("s", NS_PER_S), ("ms", 1_000_000), ("us", 1_000)):
        if ns >= scale and ns % scale == 0:
            return f"{ns // scale} {unit}"
    return f"{ns} ns"
