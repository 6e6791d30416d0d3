"""A bare SNMPv2c manager on loopback, for the requests net-snmp's tools will not send (snmpget takes at most 128
OIDs): one datagram out, one in, both sizes kept, the response decoded with pysnmp's message API."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pyasn1.codec.ber import decoder, encoder
from pysnmp.proto import api

V2C = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]


@dataclass(frozen=True)
class Answer:
    sent_bytes: int
    received_bytes: int
    error_status: str  # "noError", "tooBig", "genErr" ...
    error_index: int
    varbinds: list[tuple[tuple[int, ...], object]]
    seconds: float

    def end_of_mib(self, index: int) -> bool:
        return self.varbinds[index][1].tagSet == V2C.EndOfMibView.tagSet


def _oid(text: str | tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(arc) for arc in text.strip(".").split(".")) if isinstance(text, str) else tuple(text)


def request(port: int, oids: Sequence[str | tuple[int, ...]], community: str = "public", bulk: bool = False,
            non_repeaters: int = 0, max_repetitions: int = 0, timeout_s: float = 5.0) -> Answer | None:
    """A GET (or GETBULK) of ``oids`` to 127.0.0.1:``port``; None when no answer comes within ``timeout_s``."""
    pdu = V2C.GetBulkRequestPDU() if bulk else V2C.GetRequestPDU()
    (V2C.apiBulkPDU if bulk else V2C.apiPDU).set_defaults(pdu)
    if bulk:
        V2C.apiBulkPDU.set_non_repeaters(pdu, non_repeaters)
        V2C.apiBulkPDU.set_max_repetitions(pdu, max_repetitions)
    V2C.apiPDU.set_varbinds(pdu, [(_oid(oid), V2C.Null("")) for oid in oids])
    message = V2C.Message()
    V2C.apiMessage.set_defaults(message)
    V2C.apiMessage.set_community(message, community)
    V2C.apiMessage.set_pdu(message, pdu)
    data = encoder.encode(message)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout_s)
        started = time.monotonic()
        sock.sendto(data, ("127.0.0.1", port))
        try:
            reply, _ = sock.recvfrom(65535)
        except TimeoutError:
            return None
        seconds = time.monotonic() - started
    decoded, _ = decoder.decode(reply, asn1Spec=V2C.Message())
    response = V2C.apiMessage.get_pdu(decoded)
    varbinds = [(tuple(name), value) for name, value in V2C.apiPDU.get_varbinds(response)]
    return Answer(len(data), len(reply), V2C.apiPDU.get_error_status(response).prettyPrint(),
                  int(V2C.apiPDU.get_error_index(response)), varbinds, seconds)
