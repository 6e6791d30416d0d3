"""The SNMP agent: pysnmp 7 on the appliance's event loop, serving the MIB view and sending notifications.

Edge module (UDP sockets, pysnmp).  SNMPv2c communities are read-only; SNMPv3 users (USM) need authPriv by default;
every request is first checked against the allowed networks and a per-address rate limit, before pysnmp decodes it.
Reads go to a ``MibView`` (the objects the MIB declares, instantiated from the latest status; see view.py), merged
with pysnmp's own instrumentation for the standard objects it keeps (SNMPv2-MIB system group and snmp counters,
SNMP-FRAMEWORK-MIB engine objects).  Writes are accepted only for the objects the MIB declares read-write (one:
forced holdover), only from v3 authPriv users with write access, and go through the appliance's command path, which
audits them.  Notifications go as traps (or informs) to each configured receiver, v2c or v3.

Responses are bounded (limits.py): the manager's and the agent's largest message, 256 variable bindings, and for
GETBULK 8 x its request (484 octets at least).  Past that a GET, GETNEXT or SET is answered tooBig and a GETBULK
with the bindings that fit (RFC 3416 4.2.1, 4.2.3).  The command responders are pysnmp's with that check added,
and GETBULK redone: pysnmp's own gives up on 65 or more repeaters (it cuts the repetitions to 64 // R, none, then
fails on its own error: a traceback and no answer).  A request that fails inside pysnmp anyway is answered genErr
and logged in one line, at most once a minute.

An authenticated SET is run once: a message that passed USM and was already seen inside the 150 s time window (a
captured SET resent) is dropped unanswered and counted (``replay.py``).  For that to hold across restarts the engine
boots value is the caller's, kept in a file and raised at every start, and snmpEngineTime counts seconds of the
monotonic clock since the engine started (pysnmp's counts the host clock, which a step moves back into the window).
The standard counters pysnmp keeps (SNMPv2-MIB snmpInPkts .. snmpInASNParseErrs, SNMP-MPD-MIB and
SNMP-USER-BASED-SM-MIB usmStats) are read by ``security_stats`` for the status and the view.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pyasn1.codec.ber import decoder as ber_decoder
from pyasn1.codec.ber import encoder as ber
from pyasn1.error import PyAsn1Error
from pyasn1.type import univ
from pysnmp.carrier.asyncio.dgram import udp, udp6
from pysnmp.entity import config, engine
from pysnmp.entity.rfc3413 import cmdrsp, context, ntforg
from pysnmp.proto import errind, rfc1902, rfc1905
from pysnmp.proto.api import v2c
from pysnmp.proto.mpmod.rfc3412 import SNMPv3Message
from pysnmp.proto.secmod.rfc3414.service import UsmSecurityParameters
from pysnmp.smi import error as smi_error
from pysnmp.smi.instrum import AbstractMibInstrumController

from appliance.edge.pacer import Pacer
from appliance.protocol import limits as rate_limits
from appliance.snmp import limits
from appliance.units import NS_PER_S
from appliance.snmp.replay import ReplayCache, Verdict, WriteId

log = logging.getLogger("appliance.snmp")

AUTH = {"SHA-256": config.USM_AUTH_HMAC192_SHA256, "SHA-384": config.USM_AUTH_HMAC256_SHA384,
        "SHA-512": config.USM_AUTH_HMAC384_SHA512, "SHA": config.USM_AUTH_HMAC96_SHA, "none": config.USM_AUTH_NONE}
PRIV = {"AES-128": config.USM_PRIV_CFB128_AES, "AES-256": config.USM_PRIV_CFB256_AES, "none": config.USM_PRIV_NONE}
TYPES: dict[str, Callable[[Any], Any]] = {
    "Integer32": rfc1902.Integer32, "Integer": rfc1902.Integer32, "Unsigned32": rfc1902.Unsigned32,
    "Gauge32": rfc1902.Gauge32, "Counter32": rfc1902.Counter32, "Counter64": rfc1902.Counter64,
    "TimeTicks": rfc1902.TimeTicks, "OctetString": rfc1902.OctetString, "IpAddress": rfc1902.IpAddress,
    "ObjectIdentifier": rfc1902.ObjectName, "Bits": rfc1902.OctetString}
SNMP_TRAP_OID = (1, 3, 6, 1, 6, 3, 1, 1, 4, 1, 0)
AUTH_FAILURES = (errind.UnknownCommunityName, errind.UnknownUserName, errind.WrongDigest, errind.DecryptionError,
                 errind.AuthenticationFailure, errind.AuthenticationError, errind.UnsupportedSecurityLevel)
SYS_UPTIME = (1, 3, 6, 1, 2, 1, 1, 3, 0)
MAX_MESSAGE_BYTES = 65507  # the largest UDP payload over IPv4: the agent's own bound on a message
LOG_INTERVAL_S = 60.0  # one log line per kind of refused or cut request per minute, with a count of the rest
MAX_ENGINE_BOOTS = 2147483647  # RFC 3414 2.2.2: latched there (the engine ID must then change)
MAX_ENGINE_TIME_S = 2147483647
# The counters pysnmp keeps, by the pysnmp module instrumenting them: RFC 3418 (SNMPv2-MIB snmp group), RFC 3412
# (SNMP-MPD-MIB snmpMPDStats), RFC 3414 (SNMP-USER-BASED-SM-MIB usmStats).
STANDARD_COUNTERS = {
    "__SNMPv2-MIB": ("snmpInPkts", "snmpInBadVersions", "snmpInBadCommunityNames", "snmpInBadCommunityUses",
                     "snmpInASNParseErrs", "snmpSilentDrops", "snmpProxyDrops"),
    "__SNMP-MPD-MIB": ("snmpUnknownSecurityModels", "snmpInvalidMsgs", "snmpUnknownPDUHandlers"),
    "__SNMP-USER-BASED-SM-MIB": ("usmStatsUnsupportedSecLevels", "usmStatsNotInTimeWindows",
                                 "usmStatsUnknownUserNames", "usmStatsUnknownEngineIDs", "usmStatsWrongDigests",
                                 "usmStatsDecryptionErrors"),
}


class SetRefused(Exception):
    """The appliance refused a well-formed SET (e.g. holdover before the oscillator is learned): inconsistentValue."""


@dataclass(frozen=True)
class V3User:
    name: str
    auth: str  # SHA-256 ...
    auth_key: str
    priv: str  # AES-128 ...
    priv_key: str
    write: bool = False


@dataclass(frozen=True)
class TrapReceiver:
    host: str
    port: int
    version: str  # "v2c" | "v3"
    community_or_user: str
    inform: bool = False


class AccessGate:
    """Allowed networks and a token bucket per source address, checked before a datagram is decoded."""

    def __init__(self, allow: Sequence[str], rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 pacer: Pacer | None = None, max_wait_s: float = 1.0):
        self.networks = [ipaddress.ip_network(n, strict=False) for n in allow]
        self.clock = clock
        self._limiter = rate_limits.RateLimiter(rate_per_s, max(1, int(burst)))  # the data plane's rate table
        self.denied = self.limited = self.malformed = 0
        self.pacer, self.max_wait_s = pacer, max_wait_s  # all sources together: the agent's thread waits its turn

    def admit(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.split("%")[0])
        except ValueError:
            self.denied += 1
            return False
        if ip.version == 6 and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if not any(ip in n for n in self.networks if n.version == ip.version):
            self.denied += 1
            return False
        # One bucket per host, however it is written (an IPv6 source: its /64, as every limiter here counts it).
        if self._limiter.check(ip.packed, int(self.clock() * NS_PER_S)) is not rate_limits.Limit.PASS:
            self.limited += 1
            return False
        if self.pacer is not None and not self.pacer.wait(self.max_wait_s):
            self.limited += 1
            return False
        return True


def _gated(base: type, gate: AccessGate) -> type:
    class Gated(base):  # type: ignore[misc, valid-type]
        def datagram_received(self, datagram: bytes, transportAddress: Any) -> None:
            # Every SNMP message (v1, v2c, v3) is a BER SEQUENCE: anything else is dropped here, since pyasn1 raises
            # a TypeError (not its own error, which pysnmp would catch) on some other constructed tags, and asyncio
            # would log a traceback for each such datagram.
            if datagram[:1] != b"\x30":
                gate.malformed += 1
                return
            if gate.admit(str(transportAddress[0])):
                super().datagram_received(datagram, transportAddress)
    return Gated


class ResponseGuard:
    """Counts responses refused (tooBig), cut (a GETBULK's tail left out) and failed (genErr), and logs them: one
    line per kind per minute at most, with the number of those not logged since."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, interval_s: float = LOG_INTERVAL_S):
        self.clock, self.interval_s = clock, interval_s
        self.too_big = self.cut = self.failed = 0
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def _log(self, level: int, kind: str, text: str) -> None:
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._quiet[kind] = self._quiet.get(kind, 0) + 1
            return
        self._last[kind] = now
        quiet = self._quiet.pop(kind, 0)
        log.log(level, "%s%s", text, f" ({quiet} more since the last such line)" if quiet else "")

    def refused(self, operation: str, source: str, why: str) -> None:
        self.too_big += 1
        self._log(logging.WARNING, "too-big", f"SNMP {operation} from {source}: {why}; answered tooBig (a manager "
                  "splits such a request)")

    def shortened(self, operation: str, source: str, sent: int, asked: int, budget: limits.Budget) -> None:
        """A GETBULK cut to fit is the RFC's answer, and a walking manager asks for more than fits all the time:
        the first is logged at info, the next at debug (and counted: bulk_cut in the status)."""
        self.cut += 1
        self._log(logging.INFO if self.cut == 1 else logging.DEBUG, "cut",
                  f"SNMP {operation} from {source}: answered {sent} of the {asked} variable bindings asked for, "
                  f"within the response bound of {budget.describe()}" +
                  ("; the next ones are counted (bulk_cut in the SNMP status) and logged at debug level"
                   if self.cut == 1 else ""))

    def replayed(self, source: str, user: str, write: WriteId) -> None:
        self._log(logging.WARNING, "replay", f"SNMP SET from {source} as v3 user {user} dropped unanswered: the "
                  f"same message (msgID {write.msg_id}, engine time {write.engine_time_s}) was run already; a "
                  "replay (counted: replay_dropped in the SNMP status)")

    def replay_refused(self, source: str, user: str, replay: ReplayCache) -> None:
        why = replay.disabled_reason or f"the replay cache holds {len(replay)} writes still inside the time window"
        self._log(logging.ERROR, "replay-full", f"SNMP SET from {source} as v3 user {user} refused "
                  f"(resourceUnavailable): {why} (counted: replay_refused in the SNMP status)")

    def broke(self, operation: str, source: str, exc: BaseException) -> None:
        self.failed += 1
        self._log(logging.ERROR, "failed", f"SNMP {operation} from {source} failed inside the agent and was "
                  f"answered genErr: {type(exc).__name__}: {str(exc)[:200]}")


def _binding_bytes(var_bind: Any) -> int:
    name, value = var_bind
    return limits.varbind_bytes(len(ber.encode(rfc1902.ObjectName(name))), len(ber.encode(value)))


@dataclass(frozen=True)
class _Pending:
    budget: limits.Budget
    source: str


class BoundedResponder(cmdrsp.CommandResponderBase):
    """A pysnmp command responder whose responses stay within the request's budget (see limits.py); a request
    that fails inside pysnmp is answered genErr and logged by the guard, not left to the event loop's traceback."""

    OPERATION = "request"
    CHECK_REQUEST_SIZE = True  # a GET or SET answers at least as many octets per binding as it was asked
    BY_REQUEST = False  # held to limits.REPLY_FACTOR x the request (GETBULK: the manager chooses how much comes back)

    def __init__(self, snmp_engine: Any, snmp_context: Any, guard: ResponseGuard):
        super().__init__(snmp_engine, snmp_context)
        self.guard = guard
        self.pending: dict[Any, _Pending] = {}

    def process_pdu(self, snmpEngine: Any, messageProcessingModel: Any, securityModel: Any, securityName: Any,
                    securityLevel: Any, contextEngineId: Any, contextName: Any, pduVersion: Any, PDU: Any,
                    maxSizeResponseScopedPDU: Any, stateReference: Any) -> None:
        source = "?"
        try:
            request = snmpEngine.observer.get_execution_context("rfc3412.receiveMessage:request")
            address = request.get("transportAddress")
            source = str(address[0]) if address else "?"
            self.pending[stateReference] = _Pending(self._budget(
                request, PDU, int(messageProcessingModel), contextEngineId, contextName, maxSizeResponseScopedPDU),
                source)
            super().process_pdu(snmpEngine, messageProcessingModel, securityModel, securityName, securityLevel,
                                contextEngineId, contextName, pduVersion, PDU, maxSizeResponseScopedPDU,
                                stateReference)
        except Exception as exc:  # noqa: BLE001 - one bad request: a genErr and a log line, never a traceback
            self.guard.broke(self.OPERATION, source, exc)
            try:
                self.send_varbinds(snmpEngine, stateReference, "genErr", 0, [])
            except Exception:  # noqa: BLE001 - the response may be gone with the error (counted above)
                pass
        finally:
            self.pending.pop(stateReference, None)
            self.release_state_information(stateReference)

    def _budget(self, request: dict[str, Any], pdu: Any, model: int, context_engine_id: Any, context_name: Any,
                max_scoped_pdu: Any) -> limits.Budget:
        whole = request.get("wholeMsg") or b""
        try:
            pdu_bytes = len(ber.encode(pdu))
        except PyAsn1Error:
            pdu_bytes = len(whole)
        manager = None
        if model == 3:  # SNMPv3: msgMaxSize, less what the security model keeps; less the scoped PDU's context
            manager = int(max_scoped_pdu) - len(bytes(context_engine_id or b"")) - \
                len(bytes(context_name or b"")) - 8
        return limits.response_budget(len(whole) or pdu_bytes, pdu_bytes, MAX_MESSAGE_BYTES, manager, self.BY_REQUEST)

    def handle_management_operation(self, snmpEngine: Any, stateReference: Any, contextName: Any,
                                    PDU: Any) -> None:
        """Refuse before any work what cannot be answered whole: more bindings than a response holds or, for a
        GET or SET, a request larger than the response may be."""
        pending = self.pending[stateReference]
        var_binds = v2c.apiPDU.get_varbinds(PDU)
        if len(var_binds) > pending.budget.varbinds:
            self.guard.refused(self.OPERATION, pending.source, f"{len(var_binds)} variable bindings, more than the "
                               f"{pending.budget.varbinds} one response carries")
            raise smi_error.TooBigError()
        if self.CHECK_REQUEST_SIZE:
            self._check_size(pending, var_binds, "the request alone")
        super().handle_management_operation(snmpEngine, stateReference, contextName, PDU)

    def _check_size(self, pending: _Pending, var_binds: Sequence[Any], what: str) -> None:
        sizes = [_binding_bytes(vb) for vb in var_binds]
        if not limits.Fit(pending.budget).fits_all(sizes):
            self.guard.refused(self.OPERATION, pending.source, f"{what} ({len(var_binds)} variable bindings, "
                               f"{limits.pdu_bytes(sum(sizes))} bytes of PDU) is over the response bound of "
                               f"{pending.budget.describe()}")
            raise smi_error.TooBigError()

    def send_varbinds(self, snmpEngine: Any, stateReference: Any, errorStatus: Any, errorIndex: Any,
                      varBinds: Any) -> None:
        """A response that would not fit is answered tooBig, no bindings (RFC 3416 4.2.1 (4)), instead of being
        dropped unanswered where the message is built."""
        pending = self.pending.get(stateReference)
        if pending is not None and varBinds and errorStatus in (0, "noError"):
            try:
                self._check_size(pending, varBinds, "the response")
            except smi_error.TooBigError:
                errorStatus, errorIndex, varBinds = "tooBig", 0, []
        super().send_varbinds(snmpEngine, stateReference, errorStatus, errorIndex, varBinds)


class GetResponder(BoundedResponder, cmdrsp.GetCommandResponder):
    OPERATION = "GET"


class NextResponder(BoundedResponder, cmdrsp.NextCommandResponder):
    OPERATION = "GETNEXT"
    CHECK_REQUEST_SIZE = False  # the next object's name may be shorter than the one asked


def write_id(whole_msg: bytes, user: str) -> WriteId | None:
    """The identity of an SNMPv3 message (see replay.WriteId): its header, read again from the datagram after USM
    took it; None when it is no SNMPv3 message with USM parameters."""
    try:
        message, _ = ber_decoder.decode(whole_msg, asn1Spec=SNMPv3Message())
        header, security = message.getComponentByPosition(1), message.getComponentByPosition(2)
        usm, _ = ber_decoder.decode(bytes(security), asn1Spec=UsmSecurityParameters())
        return WriteId(int(usm.getComponentByPosition(1)), int(usm.getComponentByPosition(2)),
                       int(header.getComponentByPosition(0)), user.encode(), hashlib.sha256(whole_msg).digest())
    except (PyAsn1Error, TypeError, ValueError):
        return None


class SetResponder(BoundedResponder, cmdrsp.SetCommandResponder):
    """SET, with the replay check first: ``screen`` says whether an authenticated write is new, a replay (dropped,
    no answer: a replayer learns nothing, and the manager that sent it first had its answer then) or one the full
    replay cache cannot take (resourceUnavailable, RFC 3416 4.2.5: try again later)."""

    OPERATION = "SET"

    def __init__(self, snmp_engine: Any, snmp_context: Any, guard: ResponseGuard,
                 screen: Callable[[], Verdict] = lambda: Verdict.FRESH):
        super().__init__(snmp_engine, snmp_context, guard)
        self.screen = screen

    def handle_management_operation(self, snmpEngine: Any, stateReference: Any, contextName: Any,
                                    PDU: Any) -> None:
        verdict = self.screen()
        if verdict is Verdict.REPLAY:
            return  # unanswered (pysnmp's message-processing cache lets the request's state expire)
        if verdict is Verdict.FULL:
            raise smi_error.ResourceUnavailableError(idx=0)
        super().handle_management_operation(snmpEngine, stateReference, contextName, PDU)


class BulkResponder(BoundedResponder, cmdrsp.BulkCommandResponder):
    """GETBULK (RFC 3416 4.2.3): the non-repeaters once, then up to max-repetitions rows of the repeaters, as many
    bindings as the budget holds, the rest left out; no more rows once every repeater is past the end of the MIB
    (each further row would only say endOfMibView again).  No more bindings are computed than one response carries,
    however large max-repetitions (pysnmp's own cut the repetitions to 64 // R: none at all from 65 repeaters)."""

    OPERATION = "GETBULK"
    BY_REQUEST = True

    def handle_management_operation(self, snmpEngine: Any, stateReference: Any, contextName: Any,
                                    PDU: Any) -> None:
        pending = self.pending[stateReference]
        requested = v2c.apiPDU.get_varbinds(PDU)
        non_repeaters = min(max(0, int(v2c.apiBulkPDU.get_non_repeaters(PDU))), len(requested))
        repetitions = max(0, int(v2c.apiBulkPDU.get_max_repetitions(PDU)))
        read_next = self.snmpContext.get_mib_instrum(contextName).read_next_variables
        context = dict(snmpEngine=snmpEngine, acFun=self.verify_access, cbCtx=self.cbCtx)
        fit = limits.Fit(pending.budget)
        out: list[Any] = []

        def take(asked: list[Any]) -> tuple[list[Any], bool]:
            """The next bindings of ``asked`` as far as they fit, and whether all did."""
            row = read_next(*asked[:fit.room], **context) if asked and fit.room else []
            taken = []
            for var_bind in row:
                if not fit.add(_binding_bytes(var_bind)):
                    break  # the bindings left out are the ones at the end (RFC 3416 4.2.3)
                taken.append(var_bind)
            out.extend(taken)
            return taken, len(taken) == len(asked)

        whole = take(requested[:non_repeaters])[1]
        cursor = requested[non_repeaters:]
        for _ in range(repetitions if whole and cursor else 0):
            row, whole = take(cursor)
            if not whole or all(value.tagSet == rfc1905.endOfMibView.tagSet for _, value in row):
                break
            cursor = row
        if not whole:
            asked = non_repeaters + repetitions * (len(requested) - non_repeaters)
            if not out:
                self.guard.refused(self.OPERATION, pending.source, "not even the first variable binding fits the "
                                   f"response bound of {pending.budget.describe()}")
                raise smi_error.TooBigError()
            self.guard.shortened(self.OPERATION, pending.source, len(out), asked, pending.budget)
        self.send_varbinds(snmpEngine, stateReference, 0, 0, out)
        self.release_state_information(stateReference)


class ViewInstrum(AbstractMibInstrumController):
    """Answers reads, walks and writes from the appliance's MIB view (which also holds the SNMPv2-MIB system group),
    checking each object against the requester's VACM read view."""

    def __init__(self, view: Callable[[], Any], writer: Callable[[tuple[int, ...], Any], None]):
        self.view, self.writer = view, writer

    @staticmethod
    def _value(kind: str, value: Any) -> Any:
        return TYPES[kind](value)

    @staticmethod
    def _in_view(oid: tuple[int, ...], value: Any, context: dict[str, Any], idx: int) -> bool:
        ac = context.get("acFun")
        return ac is None or not ac("read", (rfc1902.ObjectName(oid), value), idx=idx, **context)

    def read_variables(self, *var_binds: Any, **context: Any) -> list[Any]:
        view = self.view()
        out = []
        for idx, (name, _) in enumerate(var_binds):
            oid = tuple(name)
            found = view.get(oid)
            if found is None:
                result = rfc1905.noSuchInstance if view.declares(oid) else rfc1905.noSuchObject
            else:
                result = self._value(*found)
            if not self._in_view(oid, result, context, idx):
                result = rfc1905.noSuchObject
            out.append((name, result))
        return out

    def read_next_variables(self, *var_binds: Any, **context: Any) -> list[Any]:
        view = self.view()
        out = []
        for idx, (name, _) in enumerate(var_binds):
            oid = tuple(name)
            while True:
                found = view.next(oid)
                if found is None:
                    out.append((name, rfc1905.endOfMibView))
                    break
                oid, (kind, value) = found
                typed = self._value(kind, value)
                if self._in_view(oid, typed, context, idx):
                    out.append((rfc1902.ObjectName(oid), typed))
                    break
        return out

    def write_variables(self, *var_binds: Any, **context: Any) -> list[Any]:
        view = self.view()
        for idx, (name, _) in enumerate(var_binds):
            if not view.writable(tuple(name)):
                raise smi_error.NotWritableError(name=name, idx=idx)
        for idx, (name, val) in enumerate(var_binds):
            try:
                self.writer(tuple(name), val)
            except PermissionError:
                raise smi_error.NoAccessError(name=name, idx=idx) from None
            except SetRefused as exc:
                log.warning("SNMP SET %s refused: %s", ".".join(map(str, tuple(name))), exc)
                raise smi_error.InconsistentValueError(name=name, idx=idx) from None
            except ValueError as exc:
                log.warning("SNMP SET %s refused: %s", ".".join(map(str, tuple(name))), exc)
                raise smi_error.WrongValueError(name=name, idx=idx) from None
            except RuntimeError as exc:
                log.warning("SNMP SET %s failed: %s", ".".join(map(str, tuple(name))), exc)
                raise smi_error.CommitFailedError(name=name, idx=idx) from None
        return list(var_binds)


def security_level(user: V3User, allow_without_privacy: bool) -> str:
    """The user's USM level; ValueError for one below authPriv unless snmp.v3_allow_without_privacy."""
    level = "authPriv" if user.priv != "none" else "authNoPriv" if user.auth != "none" else "noAuthNoPriv"
    if level != "authPriv" and not allow_without_privacy:
        raise ValueError(f"SNMPv3 user {user.name}: {level} is off (snmp.v3_allow_without_privacy)")
    return level


class Agent:
    def __init__(self, listen: str, port: int, view: Callable[[], Any],
                 writer: Callable[[tuple[int, ...], Any, str], None], gate: AccessGate,
                 community: str, users: Sequence[V3User], allow_noauth_v3: bool, read_subtrees: Sequence[tuple],
                 receivers: Sequence[TrapReceiver], on_auth_failure: Callable[[str], None] | None = None,
                 engine_id: bytes | None = None, engine_boots: int | None = None,
                 replay: ReplayCache | None = None):
        """``engine_boots``: this start's snmpEngineBoots (RFC 3414 2.2.2), from a file the caller raises at every
        start; None leaves pysnmp's own, and refuses every write (see replay.ReplayCache.disable)."""
        self.listen, self.port, self.gate = listen, port, gate
        self.receivers = list(receivers)
        self.engine = engine.SnmpEngine(snmpEngineID=univ.OctetString(engine_id) if engine_id else None,
                                        maxMessageSize=MAX_MESSAGE_BYTES)
        self.replay = replay if replay is not None else ReplayCache()
        self._engine_clock(engine_boots)
        self.guard = ResponseGuard()
        self._writer = writer
        self._on_auth_failure = on_auth_failure
        self.sent = self.send_errors = 0
        self.error = ""
        self._configure(community, users, allow_noauth_v3, read_subtrees)
        self._view = view

    # --- set-up ---------------------------------------------------------------------------------------------
    def _engine_clock(self, boots: int | None) -> None:
        """snmpEngineBoots as given, snmpEngineTime in monotonic seconds since now: USM's time window and the replay
        cache then read one clock that no host clock step moves."""
        builder = self.engine.get_mib_builder()
        boots_object, time_object = builder.import_symbols("__SNMP-FRAMEWORK-MIB", "snmpEngineBoots",
                                                           "snmpEngineTime")
        if boots is None:
            self.replay.disable("the SNMP engine boots counter could not be kept")
        else:
            boots_object.syntax = boots_object.syntax.clone(max(1, min(MAX_ENGINE_BOOTS, boots)))
        started = time.monotonic()
        base = type(time_object.syntax)

        class MonotonicEngineTime(base):  # type: ignore[misc, valid-type]
            def clone(self, *args: Any, **kwargs: Any) -> Any:
                if not args and "value" not in kwargs:
                    args = (min(MAX_ENGINE_TIME_S, int(time.monotonic() - started)),)
                return base.clone(self, *args, **kwargs)

        time_object.syntax = MonotonicEngineTime(0)

    def engine_clock(self) -> tuple[int, int]:
        """The engine's snmpEngineBoots and snmpEngineTime (seconds), as USM reads them."""
        boots_object, time_object = self.engine.get_mib_builder().import_symbols(
            "__SNMP-FRAMEWORK-MIB", "snmpEngineBoots", "snmpEngineTime")
        return int(boots_object.syntax), int(time_object.syntax.clone())

    def _configure(self, community: str, users: Sequence[V3User], allow_noauth_v3: bool,
                   read_subtrees: Sequence[tuple]) -> None:
        eng = self.engine
        if community:
            config.add_v1_system(eng, "ro-community", community)
            for subtree in read_subtrees:
                config.add_vacm_user(eng, 2, "ro-community", "noAuthNoPriv", readSubTree=subtree)
        for user in users:
            config.add_v3_user(eng, user.name, AUTH[user.auth], user.auth_key or None, PRIV[user.priv],
                               user.priv_key or None)
            level = security_level(user, allow_noauth_v3)
            for subtree in read_subtrees:
                config.add_vacm_user(eng, 3, user.name, level, readSubTree=subtree)
        self.writers = {u.name for u in users if u.write and u.auth != "none" and u.priv != "none"}
        self.snmp_context = context.SnmpContext(eng)
        self.instrum = ViewInstrum(lambda: self._view(), self._write)
        self.snmp_context.unregister_context_name(b"")
        self.snmp_context.register_context_name(b"", self.instrum)
        for receiver in self.receivers:
            self._add_receiver(receiver)

    def _add_receiver(self, r: TrapReceiver) -> None:
        name = f"{r.host}-{r.port}"
        params = f"p-{name}"
        if r.version == "v2c":
            config.add_v1_system(self.engine, f"trap-{name}", r.community_or_user, transportTag=f"t-{name}")
            config.add_target_parameters(self.engine, params, f"trap-{name}", "noAuthNoPriv", 1)
        else:
            config.add_target_parameters(self.engine, params, r.community_or_user, "authPriv", 3)
        domain = udp6.DOMAIN_NAME if ":" in r.host else udp.DOMAIN_NAME
        config.add_target_address(self.engine, f"a-{name}", domain, (r.host, r.port), params,
                                  tagList="appliance-notify")
        config.add_notification_target(self.engine, "appliance-notify", "notify-filter", "appliance-notify",
                                       "inform" if r.inform else "trap")
        config.add_vacm_user(self.engine, 2 if r.version == "v2c" else 3,
                             f"trap-{name}" if r.version == "v2c" else r.community_or_user,
                             "noAuthNoPriv" if r.version == "v2c" else "authPriv", (), (), notifySubTree=(1, 3, 6))

    def start(self) -> None:
        gate = self.gate
        address = (self.listen, self.port)
        if ":" in self.listen:
            transport = _gated(udp6.Udp6AsyncioTransport, gate)().open_server_mode(address)
            config.add_transport(self.engine, udp6.DOMAIN_NAME, transport)
        else:
            transport = _gated(udp.UdpAsyncioTransport, gate)().open_server_mode(address)
            config.add_transport(self.engine, udp.DOMAIN_NAME, transport)
        for family, domain, kind in ((False, udp.DOMAIN_NAME, udp.UdpAsyncioTransport),
                                     (True, udp6.DOMAIN_NAME, udp6.Udp6AsyncioTransport)):
            if (":" in self.listen) != family and any((":" in r.host) == family for r in self.receivers):
                config.add_transport(self.engine, domain, kind().open_client_mode())  # notifications only
        for responder in (GetResponder, NextResponder, BulkResponder):
            responder(self.engine, self.snmp_context, self.guard)
        SetResponder(self.engine, self.snmp_context, self.guard, self._screen_write)
        self.engine.observer.register_observer(self._auth_observer, "rfc2576.prepareDataElements:sm-failure",
                                               "rfc3412.prepareDataElements:sm-failure")
        self.originator = ntforg.NotificationOriginator()

    def _auth_observer(self, snmp_engine: Any, point: str, variables: dict[str, Any], cb_ctx: Any) -> None:
        """A request that failed its security check: a wrong community, user, digest or key (not the SNMPv3
        engine discovery, which fails on purpose)."""
        info = variables.get("statusInformation") or {}
        indication = info.get("errorIndication") if hasattr(info, "get") else None
        if not isinstance(indication, AUTH_FAILURES):
            return
        address = variables.get("transportAddress")
        who = str(address[0]) if address else "?"
        if self._on_auth_failure is not None:
            self._on_auth_failure(who)

    def _screen_write(self) -> Verdict:
        """The replay verdict on the SET being processed.  Only the writes that would run are remembered (SNMPv3
        authPriv from a user with write access): anyone else's SET is refused noAccess whether or not it is a
        replay, and must not fill the cache that a writer needs."""
        exec_ctx = self.engine.observer.get_execution_context("rfc3412.receiveMessage:request")
        user = str(exec_ctx.get("securityName", ""))
        if exec_ctx.get("securityModel") != 3 or exec_ctx.get("securityLevel") != 3 or user not in self.writers:
            return Verdict.FRESH
        identity = write_id(bytes(exec_ctx.get("wholeMsg") or b""), user)
        if identity is None:
            return Verdict.FRESH  # USM took it, so it is an SNMPv3 message: not reached
        address = exec_ctx.get("transportAddress")
        verdict = self.replay.check(identity, *self.engine_clock())
        if verdict is Verdict.REPLAY:
            self.guard.replayed(str(address[0]) if address else "?", user, identity)
        elif verdict is Verdict.FULL:
            self.guard.replay_refused(str(address[0]) if address else "?", user, self.replay)
        return verdict

    def _write(self, oid: tuple[int, ...], value: Any) -> None:
        """Only SNMPv3 users with write access, at authPriv; PermissionError for anyone else (noAccess)."""
        exec_ctx = self.engine.observer.get_execution_context("rfc3412.receiveMessage:request")
        model, user, level = exec_ctx.get("securityModel"), str(exec_ctx.get("securityName", "")), \
            exec_ctx.get("securityLevel")
        if model in (1, 2):  # RFC 3418 snmpInBadCommunityUses: an operation the community may not do
            (uses,) = self.engine.get_mib_builder().import_symbols("__SNMPv2-MIB", "snmpInBadCommunityUses")
            uses.syntax += 1
        if model != 3 or level != 3 or user not in self.writers:
            log.warning("SNMP SET %s refused: %s has no write access (SNMPv3 authPriv users with write only)",
                        ".".join(map(str, oid)), f"v3 user {user}" if model == 3 else "a community")
            raise PermissionError(user)
        self._writer(oid, value, user)

    def notify(self, notification_oid: tuple[int, ...], var_binds: Sequence[tuple[tuple[int, ...], str, Any]],
               uptime_ticks: int) -> None:
        """Send one notification to every receiver (traps: fire and forget; informs: acknowledged)."""
        if not self.receivers:
            return
        binds = [(rfc1902.ObjectName(SYS_UPTIME), rfc1902.TimeTicks(uptime_ticks)),
                 (rfc1902.ObjectName(SNMP_TRAP_OID), rfc1902.ObjectName(notification_oid))]
        binds += [(rfc1902.ObjectName(oid), TYPES[kind](value)) for oid, kind, value in var_binds]
        try:
            self.originator.send_varbinds(self.engine, "appliance-notify", None, b"", binds, self._sent_cb)
            self.sent += 1
        except Exception as exc:  # noqa: BLE001 - a notification that cannot go must not stop the appliance
            self.send_errors += 1
            self.error = str(exc)[:200]
            log.warning("SNMP notification %s not sent: %s", ".".join(map(str, notification_oid)), self.error)

    def _sent_cb(self, snmp_engine: Any, handle: Any, error_indication: Any, *rest: Any) -> None:
        if error_indication:
            self.send_errors += 1
            self.error = str(error_indication)[:200]

    def security_stats(self) -> dict[str, int]:
        """The standard counters pysnmp keeps, by their MIB names, with the datagrams the gate found to be no BER
        message at all (ASN.1 parse errors that never reached pysnmp)."""
        builder = self.engine.get_mib_builder()
        out: dict[str, int] = {}
        for module, names in STANDARD_COUNTERS.items():
            for name, found in zip(names, builder.import_symbols(module, *names)):
                out[name] = int(found.syntax)
        out["snmpInPkts"] += self.gate.malformed
        out["snmpInASNParseErrs"] += self.gate.malformed
        return out

    def stop(self) -> None:
        self.engine.close_dispatcher()


