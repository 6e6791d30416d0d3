"""PTP on the wire: UDP over IPv4/IPv6 (ports 319/320, multicast and unicast) and Ethernet (EtherType 0x88F7).

I/O edge.  Each transport opens its sockets on one interface with kernel timestamps (SO_TIMESTAMPING): every
received datagram carries its receive time, and an event message sent with a per-message request comes back on the
socket's error queue with its transmit time.  Transmit timestamps are switched on for the whole socket, not per
message: measured on a veth pair, a per-message request (a control message on sendmsg) let about 700 ns pass between
the timestamp and the packet leaving, which a slave sees as offset.  The UDP event socket sends only event messages,
numbered by the kernel (SOF_TIMESTAMPING_OPT_ID) so a timestamp is matched to its message by count; the Ethernet
socket gets each frame back and matches it by messageType and sequenceId.  Timestamps are host CLOCK_REALTIME (software) nanoseconds; the service maps them to the served clock.
``hardware_info`` reads what the NIC offers (ETHTOOL_GET_TS_INFO).  With ``hardware=True`` the NIC is told to
timestamp PTP event messages (SIOCSHWTSTAMP) and the sockets report its raw hardware timestamps instead: those count
the NIC's PHC, which the service maps onto the served clock (phcmap.py) unless the PHC is the served clock itself.
The system calls go through ``ioctl`` arguments so that tests can stand in for a NIC this machine does not have.
"""

from __future__ import annotations

import collections
import ctypes
import fcntl
import os
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

from appliance.protocol.phcmap import PhcMap, tightest
from appliance.protocol.ptp.profiles import L2_FORWARDABLE, L2_NON_FORWARDABLE

SO_TIMESTAMPING = 37
SCM_TIMESTAMPING = SO_TIMESTAMPING
SOF_TX_SOFTWARE, SOF_RX_SOFTWARE, SOF_SOFTWARE = 1 << 1, 1 << 3, 1 << 4
SOF_TX_HARDWARE, SOF_RX_HARDWARE, SOF_RAW_HARDWARE = 1 << 0, 1 << 2, 1 << 6
SOF_OPT_ID, SOF_OPT_TSONLY = 1 << 7, 1 << 11
SIOCSHWTSTAMP = 0x89B0
HWTSTAMP_TX_ON = 1
HWTSTAMP_FILTER_ALL, HWTSTAMP_FILTER_PTP_V2_EVENT = 1, 12
MSG_ERRQUEUE = 0x2000
IP_RECVERR, IPV6_RECVERR = 11, 25
SOL_PACKET, PACKET_ADD_MEMBERSHIP, PACKET_MR_MULTICAST = 263, 1, 0
SO_EE_ORIGIN_TIMESTAMPING = 4
ETH_P_1588 = 0x88F7
ANC_SIZE = socket.CMSG_SPACE(48) + socket.CMSG_SPACE(64)
RECV_SIZE = 1500
MAX_PENDING_TX = 65536  # transmit timestamps awaited at once (one per Sync in flight: ample for 20,000 clients)
SIOCETHTOOL, ETHTOOL_GET_TS_INFO = 0x8946, 0x41
SIOCGIFHWADDR = 0x8927
SO_ATTACH_REUSEPORT_CBPF, IP_MULTICAST_ALL, IPV6_MULTICAST_ALL = 51, 49, 29
STEER_TO_FIRST = struct.pack("HBBI", 0x06, 0, 0, 0)  # classic BPF "ret #0": every datagram to the group's first
# ... but a Delay_Req (messageType 1, the low nibble of the payload's first octet) to the second, the native sender's:
# ldb [0]; and #0x0f; jeq #1, 0, 1; ret #1; ret #0
STEER_DELAY_REQ_TO_SECOND = b"".join(struct.pack("HBBI", *insn) for insn in (
    (0x30, 0, 0, 0), (0x54, 0, 0, 0x0F), (0x15, 0, 1, 1), (0x06, 0, 0, 1), (0x06, 0, 0, 0)))

PTP_PRIMARY_V4, PTP_PDELAY_V4 = "224.0.1.129", "224.0.0.107"  # IEEE 1588-2019 Annex C.3
PTP_PRIMARY_V6, PTP_PDELAY_V6 = "ff0e::181", "ff02::6b"  # Annex D.3
EVENT_PORT, GENERAL_PORT = 319, 320


class TransportError(OSError):
    pass


def mac_address(iface: str) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            info = fcntl.ioctl(s.fileno(), SIOCGIFHWADDR, struct.pack("256s", iface.encode()[:15]))
        except OSError as exc:
            raise TransportError(exc.errno, f"interface {iface}: {exc.strerror}") from None
    return info[18:24]


def clock_identity(mac: bytes) -> bytes:
    """EUI-64 from the interface's EUI-48 (IEEE 1588-2019 7.5.2.2.2): OUI, FF FE, the rest."""
    return mac[:3] + b"\xff\xfe" + mac[3:]


@dataclass(frozen=True)
class HardwareInfo:
    so_timestamping: int
    phc_index: int

    @property
    def hardware(self) -> bool:
        need = SOF_TX_HARDWARE | SOF_RX_HARDWARE | SOF_RAW_HARDWARE
        return self.so_timestamping & need == need

    def describe(self) -> str:
        if self.hardware:
            return f"hardware timestamps offered (PHC /dev/ptp{self.phc_index})"
        return "software timestamps only"


def hardware_info(iface: str) -> HardwareInfo:
    """ETHTOOL_GET_TS_INFO: what timestamping the interface offers; software-only on error."""
    buf = ctypes.create_string_buffer(struct.pack("=IIiI3II3I", ETHTOOL_GET_TS_INFO, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0))
    ifreq = struct.pack("16sP", iface.encode()[:15], ctypes.addressof(buf))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            fcntl.ioctl(s.fileno(), SIOCETHTOOL, ifreq)
        except OSError:
            return HardwareInfo(SOF_RX_SOFTWARE | SOF_SOFTWARE, -1)
    _cmd, flags, phc, *_ = struct.unpack_from("=IIiI3II3I", buf.raw)
    return HardwareInfo(flags, phc)


SO_RCVBUFFORCE, SO_SNDBUFFORCE = 33, 32
BUFFER_BYTES = 16 << 20


def _big_buffers(sock: socket.socket) -> None:
    """Room for a burst of requests and of transmit timestamps (they share the receive buffer): beyond the
    rmem_max cap when allowed (root / CAP_NET_ADMIN), else as much as the cap lets."""
    for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, BUFFER_BYTES)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, plain, BUFFER_BYTES)


def enable_hw_timestamps(iface: str, ioctl: Any = fcntl.ioctl) -> int:
    """Ask the NIC to timestamp every transmitted packet that asks and the PTP event messages it receives (all
    packets if it cannot pick out PTP); returns the receive filter it took.  OSError if it refuses both."""
    last: OSError | None = None
    for rx_filter in (HWTSTAMP_FILTER_PTP_V2_EVENT, HWTSTAMP_FILTER_ALL):
        config = ctypes.create_string_buffer(struct.pack("iii", 0, HWTSTAMP_TX_ON, rx_filter))
        ifreq = struct.pack("16sP", iface.encode()[:15], ctypes.addressof(config))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                ioctl(s.fileno(), SIOCSHWTSTAMP, ifreq)
            except OSError as exc:
                last = exc
                continue
        return struct.unpack_from("iii", config.raw)[2]
    raise TransportError(last.errno if last else 95, f"{iface} refuses hardware timestamping: "
                                                     f"{last.strerror if last else 'unknown'}")


class PhcReader:
    """A NIC's hardware clock (PHC) read against the host clock: ``sample()``, once a second, adds the tightest of
    five (host, PHC, host) reads to ``map``, through which its hardware timestamps reach the host clock."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.fd = os.open(device, os.O_RDONLY)
        self.map = PhcMap()
        self.sampled_mono_ns = 0
        self.sample()

    def sample(self) -> None:
        clock_id = ((~self.fd) << 3) | 3  # FD_TO_CLOCKID: a dynamic POSIX clock on the PHC's descriptor
        reads = []
        for _ in range(5):
            before = time.clock_gettime_ns(time.CLOCK_REALTIME)
            phc = time.clock_gettime_ns(clock_id)
            reads.append((before, phc, time.clock_gettime_ns(time.CLOCK_REALTIME)))
        self.map.update(*tightest(reads))
        self.sampled_mono_ns = time.monotonic_ns()

    def host_of(self, phc_ns: int) -> int:
        return self.map.host_of(phc_ns)

    def close(self) -> None:
        os.close(self.fd)


def choose_timestamping(iface: str, want: str, setting: str, served_phc: str = "") -> tuple[bool, str,
                                                                                          PhcReader | None]:
    """Hardware timestamps when ``want`` is "hardware", or "auto" and the NIC offers them: the NIC is switched on
    and its PHC opened for reading against the host clock, unless the PHC is ``served_phc`` (the served clock
    itself: its timestamps are served time already).  Returns (hardware, what status shows, the PHC reader or
    None).  Hardware asked for and not offered, or refused, is a TransportError naming ``setting``."""
    info = hardware_info(iface)
    if want == "software" or (want == "auto" and not info.hardware):
        return False, "software" + (f"; {info.describe()}" if info.hardware else ""), None
    if not info.hardware:
        raise TransportError(95, f"{setting}=hardware but {iface} offers no hardware timestamps")
    enable_hw_timestamps(iface)
    device = f"/dev/ptp{info.phc_index}"
    if served_phc and os.path.realpath(served_phc) == os.path.realpath(device):
        return True, f"hardware ({device}, the served clock)", None
    return True, f"hardware ({device})", PhcReader(device)


def _flags(hardware: bool, tx: bool) -> int:
    rx = SOF_RX_HARDWARE | SOF_RAW_HARDWARE if hardware else SOF_RX_SOFTWARE | SOF_SOFTWARE
    if not tx:
        return rx
    return rx | (SOF_TX_HARDWARE if hardware else SOF_TX_SOFTWARE)


def _rx_ts(ancdata: list[tuple[int, int, bytes]], hardware: bool = False) -> int | None:
    """The software (first) or raw hardware (third) of the three timespecs of SCM_TIMESTAMPING."""
    offset = 32 if hardware else 0
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPING and len(data) >= offset + 16:
            sec, nsec = struct.unpack_from("qq", data, offset)
            if sec or nsec:
                return sec * 1_000_000_000 + nsec
    return None


def _ee_id(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancdata:
        if len(data) >= 16 and level in (socket.IPPROTO_IP, socket.IPPROTO_IPV6, SOL_PACKET):
            _errno, origin, _t, _c, _p, _info, ident = struct.unpack_from("=IBBBBII", data)
            if origin == SO_EE_ORIGIN_TIMESTAMPING:
                return ident
    return None


class UdpTransport:
    """Ports 319 (event) and 320 (general) on one interface, IPv4 or IPv6."""

    def __init__(self, iface: str, family: int, peer_multicast: bool, hardware: bool = False):
        self.iface, self.family, self.hardware = iface, family, hardware
        self.v6 = family == socket.AF_INET6
        self.primary = PTP_PRIMARY_V6 if self.v6 else PTP_PRIMARY_V4
        self.pdelay = PTP_PDELAY_V6 if self.v6 else PTP_PDELAY_V4
        self.groups = [self.primary] + ([self.pdelay] if peer_multicast else [])
        self.ifindex = socket.if_nametoindex(iface)
        self.mac = mac_address(iface)
        self.event = self._open(EVENT_PORT, timestamps=True)
        try:
            self.general = self._open(GENERAL_PORT, timestamps=False)
        except OSError:
            self.event.close()
            raise
        self._sent_with_ts = 0
        self._tokens: dict[int, int] = {}
        self.send_errors = 0

    def _open(self, port: int, timestamps: bool) -> socket.socket:
        sock = socket.socket(self.family, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if timestamps:  # the event socket: a native Sync sender may join it (open_sync_socket)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, self.iface.encode())
            flags = _flags(self.hardware, timestamps) | (SOF_OPT_ID | SOF_OPT_TSONLY if timestamps else 0)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, flags)
            _big_buffers(sock)
            if self.v6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(("::", port))
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, self.ifindex)
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 0)
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 1)
                for group in self.groups:
                    mreq = socket.inet_pton(socket.AF_INET6, group) + struct.pack("@I", self.ifindex)
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, mreq)
            else:
                sock.bind(("0.0.0.0", port))
                mreqn = struct.pack("4s4si", socket.inet_aton("0.0.0.0"), socket.inet_aton("0.0.0.0"), self.ifindex)
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, mreqn)
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
                for group in self.groups:
                    mreq = struct.pack("4s4si", socket.inet_aton(group), socket.inet_aton("0.0.0.0"), self.ifindex)
                    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise TransportError(exc.errno, f"PTP {'UDPv6' if self.v6 else 'UDPv4'} port {port} on "
                                            f"{self.iface}: {exc.strerror}") from None
        return sock

    def open_sync_socket(self, steer_delay_req: bool = False) -> socket.socket:
        """A second event socket for a native Sync sender: bound to port 319 on the same interface in the event
        socket's SO_REUSEPORT group, its sends timestamped and numbered alike, but it never receives: a classic
        BPF program steers every datagram to the group's first socket (the port's), and it joins no multicast group
        and hears none of the port's (IP_MULTICAST_ALL off).  Its error queue is the native sender's alone.  Unlike
        the port's socket it asks for no SOF_TIMESTAMPING_OPT_TSONLY, as ptp4l does not: the kernel then clones the
        Sync for the error queue instead of allocating a new buffer, between the Sync's transmit timestamp and its
        leaving, and the mean offset a slave reads at 16 Sync/s came within 50 ns of ptp4l's (bench/ptp_offset.py).
        ``steer_delay_req``: the unicast Delay_Reqs are steered to it instead (a native sender answers them), every
        other datagram still to the port's socket."""
        if self.hardware:
            raise TransportError(95, "a native Sync sender takes software timestamps only")
        sock = socket.socket(self.family, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, self.iface.encode())
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, _flags(False, True) | SOF_OPT_ID)
            if self.v6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.setsockopt(socket.IPPROTO_IPV6, IPV6_MULTICAST_ALL, 0)
                sock.bind(("::", EVENT_PORT))
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, self.ifindex)
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 0)
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 1)
            else:
                sock.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
                sock.bind(("0.0.0.0", EVENT_PORT))
                mreqn = struct.pack("4s4si", socket.inet_aton("0.0.0.0"), socket.inet_aton("0.0.0.0"), self.ifindex)
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, mreqn)
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
            code = STEER_DELAY_REQ_TO_SECOND if steer_delay_req else STEER_TO_FIRST
            program = ctypes.create_string_buffer(code, len(code))
            fprog = struct.pack("HL", len(code) // 8, ctypes.addressof(program))
            sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, fprog)
            _big_buffers(sock)  # its transmit timestamps count against its receive buffer
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise TransportError(exc.errno, f"PTP Sync socket on {self.iface}: {exc.strerror}") from None
        return sock

    def fds(self) -> list[int]:
        return [self.event.fileno(), self.general.fileno()]

    @property
    def timestamped_fd(self) -> int:
        """The socket whose sends are timestamped (see send_batch)."""
        return self.event.fileno()

    def send(self, data: bytes, event: bool, to: Any, peer: bool, token: int | None) -> None:
        port = EVENT_PORT if event else GENERAL_PORT
        if to is None:
            dest: tuple[Any, ...] = ((self.pdelay if peer else self.primary), port)
            if self.v6:
                dest = (dest[0], port, 0, self.ifindex)
        else:
            dest = (to[0], port) + tuple(to[2:4]) if self.v6 else (to[0], port)
        sock = self.event if event else self.general
        try:
            sock.sendto(data, dest)
        except OSError:
            self.send_errors += 1
            return
        if event:  # every datagram of the event socket is numbered, and timestamped
            if token is not None:
                self._tokens[self._sent_with_ts] = token
                if len(self._tokens) > MAX_PENDING_TX:  # a timestamp that never came: forget the oldest
                    del self._tokens[next(iter(self._tokens))]
            self._sent_with_ts += 1

    def receive(self, fd: int, budget: int = 64) -> list[tuple[bytes, Any, int | None]]:
        sock = self.event if fd == self.event.fileno() else self.general
        out = []
        for _ in range(budget):
            try:
                data, anc, _flags, addr = sock.recvmsg(RECV_SIZE, ANC_SIZE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            out.append((data, addr, _rx_ts(anc, self.hardware)))
        return out

    def tx_timestamps(self, budget: int = 4096) -> list[tuple[int, int]]:
        out = []
        for _ in range(budget):
            try:
                _data, anc, _flags, _addr = self.event.recvmsg(1, ANC_SIZE, MSG_ERRQUEUE)
            except (BlockingIOError, InterruptedError, OSError):
                break
            ts, ident = _rx_ts(anc, self.hardware), _ee_id(anc)
            token = self._tokens.pop(ident, None) if ident is not None else None
            if ts is not None and token is not None:
                out.append((token, ts))
        return out

    def address_key(self, source: Any) -> Any:
        return source[0] if isinstance(source, tuple) else source

    def close(self) -> None:
        self.event.close()
        self.general.close()


class EthernetTransport:
    """EtherType 0x88F7 through a raw packet socket; the profile's multicast destination plus the peer-delay one."""

    def __init__(self, iface: str, destination: str, hardware: bool = False):
        self.iface, self.hardware = iface, hardware
        self.mac = mac_address(iface)
        self.dest = bytes.fromhex(destination.replace(":", ""))
        self.peer_dest = bytes.fromhex(L2_NON_FORWARDABLE.replace(":", ""))
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_1588))
        try:
            self.sock.bind((iface, ETH_P_1588))
            ifindex = socket.if_nametoindex(iface)
            for mac in {L2_FORWARDABLE, L2_NON_FORWARDABLE, destination}:
                mreq = struct.pack("iHH8s", ifindex, PACKET_MR_MULTICAST, 6, bytes.fromhex(mac.replace(":", "")))
                self.sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, _flags(hardware, tx=True))
            _big_buffers(self.sock)
            self.sock.setblocking(False)
        except OSError as exc:
            self.sock.close()
            raise TransportError(exc.errno, f"PTP Ethernet on {iface}: {exc.strerror}") from None
        self._tokens: collections.OrderedDict[tuple[int, int], int] = collections.OrderedDict()
        self.send_errors = 0

    def fds(self) -> list[int]:
        return [self.sock.fileno()]

    @property
    def timestamped_fd(self) -> int:
        return self.sock.fileno()

    def send(self, data: bytes, event: bool, to: Any, peer: bool, token: int | None) -> None:
        dst = to if isinstance(to, (bytes, bytearray)) else (self.peer_dest if peer else self.dest)
        frame = bytes(dst) + self.mac + struct.pack("!H", ETH_P_1588) + data
        try:
            self.sock.send(frame)
        except OSError:
            self.send_errors += 1
            return
        if token is not None:  # every frame comes back timestamped; only these are waited for
            self._tokens[(data[0] & 0x0F, int.from_bytes(data[30:32], "big"))] = token
            while len(self._tokens) > MAX_PENDING_TX:
                self._tokens.popitem(last=False)

    def receive(self, fd: int, budget: int = 64) -> list[tuple[bytes, Any, int | None]]:
        out = []
        for _ in range(budget):
            try:
                frame, anc, _flags, addr = self.sock.recvmsg(RECV_SIZE, ANC_SIZE)
            except (BlockingIOError, InterruptedError, OSError):
                break
            if len(frame) < 14 or addr[2] == socket.PACKET_OUTGOING:
                continue
            payload = _strip_vlan(frame)
            if payload is None:
                continue
            out.append((payload, frame[6:12], _rx_ts(anc, self.hardware)))
        return out

    def tx_timestamps(self, budget: int = 4096) -> list[tuple[int, int]]:
        out = []
        for _ in range(budget):
            try:
                frame, anc, _flags, _addr = self.sock.recvmsg(RECV_SIZE, ANC_SIZE, MSG_ERRQUEUE)
            except (BlockingIOError, InterruptedError, OSError):
                break
            payload = _strip_vlan(frame)
            ts = _rx_ts(anc, self.hardware)
            if payload is None or len(payload) < 34 or ts is None:
                continue
            token = self._tokens.pop((payload[0] & 0x0F, int.from_bytes(payload[30:32], "big")), None)
            if token is not None:
                out.append((token, ts))
        return out

    def address_key(self, source: Any) -> Any:
        return bytes(source) + bytes(10)  # a MAC as a 16-byte key for the rate limiter

    def close(self) -> None:
        self.sock.close()


def _strip_vlan(frame: bytes) -> bytes | None:
    ethertype = int.from_bytes(frame[12:14], "big")
    offset = 14
    while ethertype in (0x8100, 0x88A8) and len(frame) >= offset + 4:
        ethertype = int.from_bytes(frame[offset + 2:offset + 4], "big")
        offset += 4
    return frame[offset:] if ethertype == ETH_P_1588 else None


def open_transport(kind: str, iface: str, l2_destination: str, peer: bool,
                   hardware: bool = False) -> UdpTransport | EthernetTransport:
    if kind == "l2":
        return EthernetTransport(iface, l2_destination, hardware)
    try:
        socket.if_nametoindex(iface)
    except OSError:
        raise TransportError(19, f"interface {iface} does not exist") from None
    return UdpTransport(iface, socket.AF_INET6 if kind == "udp6" else socket.AF_INET, peer, hardware)


def send_batch(transport: Any, loop: Any, readable: Any, sends: list[Any], watching: bool) -> None:
    """Send a port's ``Send`` actions.  A socket in an epoll set costs every send on it a wake-up callback between the
    driver's transmit timestamp and the packet leaving (the error-queue report and the send-buffer release both wake
    the socket's wait queue): about 1.3 us more on a veth, all of it error in the message's timestamp.  ptp4l polls
    only while it waits; the same here: the timestamped socket leaves the loop's set while event messages go out, and
    comes back with ``readable`` as its reader."""
    if transport is None or not sends:
        return
    quiet = transport.timestamped_fd if watching and any(a.event for a in sends) else None
    if quiet is not None and loop is not None:
        loop.remove_reader(quiet)
    try:
        for a in sends:
            transport.send(a.data, a.event, a.to, a.peer, a.token)
    finally:
        if quiet is not None and loop is not None:
            loop.add_reader(quiet, readable, quiet)

