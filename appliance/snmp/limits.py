"""How large one SNMP response may be, and which of its variable bindings fit: the agent's bound on amplification.

Pure core (byte arithmetic on BER lengths; no pysnmp, no I/O).  The agent asks ``response_budget`` once per request
and then fills a ``Fit`` with the encoded size of each variable binding, in order.

The rule: a GETBULK response message is at most ``REPLY_FACTOR`` times its request message, but never held below
``MIN_REPLY_BYTES`` (RFC 3417 3.2: the message size every SNMP engine must accept, so one ordinary variable binding
always fits).  GETBULK is where the manager chooses how much comes back (max-repetitions); a GET, GETNEXT or SET
answers one binding per binding asked, each value at most what the MIB declares (a DisplayString: 255 octets), so
its size is bounded by the MIB, not by the request, and is not held to the factor.  Every response stays within the
largest message the manager said it accepts (SNMPv3 msgMaxSize) and the agent's own (a UDP datagram), and carries at
most ``MAX_VARBINDS`` variable bindings.  What happens past the bound is the RFC's: a GET, GETNEXT or SET is answered
tooBig (RFC 3416 4.2.1 (4)); a GETBULK is answered with the bindings that fit, the ones at the end left out
(RFC 3416 4.2.3), and tooBig only when not even the first fits.
"""

from __future__ import annotations

from dataclasses import dataclass

REPLY_FACTOR = 8  # a GETBULK response message is at most 8 x its request message...
MIN_REPLY_BYTES = 484  # ...or 484 octets, whichever is more (RFC 3417 3.2)
MAX_VARBINDS = 256  # variable bindings in one response (net-snmp's snmpget sends at most 128 in a request)
# request-id (up to 6 octets: the manager's id is put back after the budget was taken from the engine's own),
# error-status and error-index (3 each; 4 for an index past 127) inside the PDU
PDU_HEADER_BYTES = 6 + 3 + 4
# BER lengths that grow past a boundary (PDU, scoped PDU, message) and the request-id put back: slack, in octets
MARGIN_BYTES = 16


def tlv_bytes(content_bytes: int) -> int:
    """Octets of a BER tag-length-value (one-octet tag, definite length) around ``content_bytes`` of content."""
    if content_bytes < 0x80:
        return 2 + content_bytes
    return 2 + (content_bytes.bit_length() + 7) // 8 + content_bytes


def varbind_bytes(name_bytes: int, value_bytes: int) -> int:
    """One VarBind: a SEQUENCE of the encoded name and the encoded value (each a whole TLV already)."""
    return tlv_bytes(name_bytes + value_bytes)


def pdu_bytes(varbind_list_content_bytes: int) -> int:
    """A response PDU around a variable-binding list whose bindings add up to ``varbind_list_content_bytes``."""
    return tlv_bytes(PDU_HEADER_BYTES + tlv_bytes(varbind_list_content_bytes))


@dataclass(frozen=True)
class Budget:
    """What one response may hold: ``pdu_bytes`` of encoded PDU, ``varbinds`` bindings, and why (for the log)."""

    pdu_bytes: int
    reply_bytes: int  # the message bound the PDU budget was taken from
    varbinds: int
    reason: str

    def describe(self) -> str:
        return f"{self.reply_bytes} bytes ({self.reason}) and {self.varbinds} variable bindings"


def response_budget(request_bytes: int, request_pdu_bytes: int, agent_max_bytes: int,
                    manager_max_pdu_bytes: int | None = None, by_request: bool = True) -> Budget:
    """The budget of the response to a request of ``request_bytes`` (the whole datagram) whose PDU encodes to
    ``request_pdu_bytes``.  ``manager_max_pdu_bytes`` is the largest response PDU the manager accepts (from SNMPv3
    msgMaxSize, less the security parameters and the scoped PDU's context); None for SNMPv1/v2c, which do not say.
    ``by_request``: held to ``REPLY_FACTOR`` times the request as well (GETBULK).  The response wraps its PDU as the
    request did (community or security parameters), so a message bound leaves the PDU that bound less the request's
    wrapping."""
    wrapping = max(0, request_bytes - request_pdu_bytes)
    bounds = [(agent_max_bytes - wrapping, "the agent's largest message")]
    if manager_max_pdu_bytes is not None:
        bounds.append((manager_max_pdu_bytes, "the largest message the manager accepts"))
    if by_request:
        amplification = max(REPLY_FACTOR * request_bytes, MIN_REPLY_BYTES)
        bounds.append((amplification - wrapping, f"{REPLY_FACTOR} x the request's {request_bytes} bytes"
                       if amplification > MIN_REPLY_BYTES else f"the {MIN_REPLY_BYTES}-byte floor"))
    pdu, reason = min(bounds, key=lambda bound: bound[0])
    return Budget(max(0, pdu - MARGIN_BYTES), pdu + wrapping, MAX_VARBINDS, reason)


class Fit:
    """The variable bindings of one response, added in order while the PDU stays within its budget."""

    def __init__(self, budget: Budget):
        self.budget = budget
        self.count = 0
        self.content_bytes = 0

    @property
    def room(self) -> int:
        """How many more bindings the count bound leaves (the byte bound is only known binding by binding)."""
        return max(0, self.budget.varbinds - self.count)

    def add(self, binding_bytes: int) -> bool:
        """Take one binding of ``binding_bytes`` (see ``varbind_bytes``), or refuse it (and every later one)."""
        if self.count >= self.budget.varbinds or \
                pdu_bytes(self.content_bytes + binding_bytes) > self.budget.pdu_bytes:
            return False
        self.count += 1
        self.content_bytes += binding_bytes
        return True

    def fits_all(self, bindings_bytes: list[int]) -> bool:
        """Whether every one of these bindings fits (for a GET, GETNEXT or SET, answered whole or tooBig)."""
        return all(self.add(size) for size in bindings_bytes)
