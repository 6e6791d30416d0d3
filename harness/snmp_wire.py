"""A bare SNMPv2c manager on loopback, for the requests net-snmp's tools will not send (snmpget takes at most 128
OIDs): one datagram out, one in, both sizes kept, the response decoded with pysnmp's message API.
``encode_request`` builds the datagram alone (v1 or v2c, GET, GETNEXT, GETBULK or SET), for the fuzz tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pyasn1.codec.ber import decoder, encoder
from pysnmp.proto import api

V1 = api.PROTOCOL_MODULES[api.SNMP_VERSION_1]
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


def encode_request(oids: Sequence[str | tuple[int, ...]], community: str | bytes = "public", bulk: bool = False,
                   non_repeaters: int = 0, max_repetitions: int = 0, request_id: int | None = None, *,
                   operation: str | None = None, version: str = "v2c", values: Sequence[object] | None = None) -> bytes:
    """The datagram of a request for ``oids``: ``operation`` "get", "next", "set" or "bulk" (default: "bulk" if
    ``bulk`` else "get"), ``version`` "v1" or "v2c" (GETBULK is v2c only), ``values`` the SET's (default NULL),
    ``request_id`` pysnmp's next one unless given."""
    operation = operation or ("bulk" if bulk else "get")
    module = {"v1": V1, "v2c": V2C}[version]
    if operation == "bulk" and module is not V2C:
        raise ValueError("GETBULK is SNMPv2c only")
    pdu = {"get": module.GetRequestPDU, "next": module.GetNextRequestPDU, "set": module.SetRequestPDU,
           "bulk": V2C.GetBulkRequestPDU}[operation]()
    (V2C.apiBulkPDU if operation == "bulk" else module.apiPDU).set_defaults(pdu)
    if request_id is not None:
        module.apiPDU.set_request_id(pdu, request_id)
    if operation == "bulk":
        V2C.apiBulkPDU.set_non_repeaters(pdu, non_repeaters)
        V2C.apiBulkPDU.set_max_repetitions(pdu, max_repetitions)
    values = [module.Null("")] * len(oids) if values is None else values
    module.apiPDU.set_varbinds(pdu, [(_oid(oid), value) for oid, value in zip(oids, values, strict=True)])
    message = module.Message()
    module.apiMessage.set_defaults(message)
    module.apiMessage.set_community(message, community)
    module.apiMessage.set_pdu(message, pdu)
    return bytes(encoder.encode(message))


def request(port: int, oids: Sequence[str | tuple[int, ...]], community: str = "public", bulk: bool = False,
            non_repeaters: int = 0, max_repetitions: int = 0, timeout_s: float = 5.0) -> Answer | None:
    """A GET (or GETBULK) of ``oids`` to 127.0.0.1:``port``; None when no answer comes within ``timeout_s``."""
    data = encode_request(oids, community, bulk, non_repeaters, max_repetitions)
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
