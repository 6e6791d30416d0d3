"""What a profile or the security settings add around a PTP port: on the way in and out of it, and beside it.

Pure core.  ``Extensions`` holds, for one port:
- the AUTHENTICATION TLV (IEEE 1588-2019 16.14, security.py): every message received is checked before it is decoded
  (``ingress``: unsigned, unless accepted, or wrongly signed is refused, with why), every message sent is signed last;
- IEEE 802.1AS (gptp.py): majorSdoId on everything sent, the Follow_Up information TLV on every Follow_Up, and the
  link's state from the peer delay exchanges (``link``): Announce, Sync and the rest are held while not asCapable;
- SMPTE ST 2059-2 (smpte.py): the synchronization metadata, a management COMMAND every second while MASTER.
``egress`` applies what is on to a message on its way out; ``egress_on`` says whether there is anything to apply.
"""

from __future__ import annotations

from appliance.outputs.ptp.datasets import GrandmasterView
from appliance.protocol.ptp import codec as c
from appliance.protocol.ptp import gptp
from appliance.protocol.ptp.profiles import PortConfig
from appliance.protocol.ptp.security import PortSecurity
from appliance.protocol.ptp.smpte import SyncMetadata
from appliance.protocol.ptp.smpte import unpack as smpte_unpack

ALL_PORTS = c.PortIdentity(b"\xff" * 8, 0xFFFF)


class Extensions:
    def __init__(self, config: PortConfig, security: PortSecurity | None, sync_metadata: SyncMetadata | None):
        self.config = config
        self.security = security  # sign what is sent, check what is received (None: neither)
        # SMPTE ST 2059-2: the metadata sent every second while MASTER (UTC, 30000/1001 unless the edge gives the
        # zone and the frame rate)
        self.sync_metadata = (sync_metadata or SyncMetadata()) if config.smpte_tlv else None
        self.last_metadata: dict[str, int] | None = None  # the fields of the latest metadata sent
        # IEEE 802.1AS: the link's rate ratio, delay and asCapable from the peer delay exchanges (None: not gPTP)
        self.link = gptp.LinkState(config.neighbor_prop_delay_thresh_ns) if config.as_capable_required else None
        self._fui = gptp.follow_up_info() if config.follow_up_info else b""
        self.egress_on = security is not None or config.major_sdo_id != 0 or bool(self._fui)

    def ingress(self, data: bytes | bytearray | memoryview) -> tuple[bytes | bytearray | memoryview | None, str]:
        """The message with its AUTHENTICATION TLV checked and removed, or (None, why it is refused)."""
        if self.security is None:
            return data, ""
        return self.security.verify(bytes(data))

    def egress(self, data: bytes) -> bytes:
        """A message on its way out: majorSdoId set, a Follow_Up given the 802.1AS information TLV, then signed."""
        if self.config.major_sdo_id:
            data = gptp.set_major_sdo_id(data, self.config.major_sdo_id)
        if self._fui and data[0] & 0x0F == c.MsgType.FOLLOW_UP:
            data = gptp.with_follow_up_info(data, self._fui)
        if self.security is not None:
            data = self.security.sign(data)
        return data

    def held(self) -> bool:
        """802.1AS: nothing but the peer delay messages is sent on a link that is not asCapable."""
        return self.link is not None and not self.link.as_capable

    def metadata_message(self, header: c.Header, served_ns: int, view: GrandmasterView) -> bytes:
        """ST 2059-2's management message: to all ports and clocks, the SMPTE organization extension TLV in place of a
        management TLV, action COMMAND (no answer expected); multicast, a general message (port 320)."""
        assert self.sync_metadata is not None
        tlv = self.sync_metadata.tlv(served_ns, view)
        self.last_metadata = smpte_unpack(tlv.data)
        return c.encode(c.Management(header, ALL_PORTS, 0, 0, c.COMMAND, (tlv,)))

    def snapshot(self) -> dict[str, object]:
        return {"security": None if self.security is None else self.security.snapshot(),
                "smpte_metadata": self.last_metadata,
                "gptp": None if self.link is None else self.link.snapshot()}
