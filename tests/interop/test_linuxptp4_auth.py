"""linuxptp 4.x against linuxptp 4.x with PTP authentication (IEEE 1588-2019 16.14, Annex P): the peer that
scripts/get-linuxptp4 provisions works, and this is how its sa_file, its settings and its AUTHENTICATION TLV look.

Two ptp4l 4.x (``tests.interop.linuxptp4.ptp4l4()``) in two network namespaces joined by a veth pair, UDPv4, E2E,
software time stamps (``-S``), ``free_running 1`` and under ``setpriv --bounding-set -sys_time``: neither touches the
clock.  Both read one sa_file::

    [security_association]
    spp 1
    1 SHA256-128 HEX:<64 hex digits: a 32-byte key>

and say in their [global] section ``sa_file <path>``, ``spp 1``, ``active_key_id 1``.  (A [global] spp also covers
ptp4l's own Unix-socket ports: a local ``pmc -u`` then needs ``-f`` with a config naming the same sa_file, spp and
active_key_id, or ptp4l logs "port 0 (...): auth: bad message" and does not answer.)

* same key: the slave follows the master, its path delay measured (Delay_Req/Delay_Resp are signed and checked
  too); in the capture every message of either side ends with an AUTHENTICATION TLV (type 0x8009, lengthField 22:
  spp 1, secParamIndicator 0, keyID 1, a 16-byte ICV) whose ICV is HMAC-SHA256 of the message from the first
  header byte up to the ICV, cut to 16 bytes -- recomputed here; the master's Announce carries its PATH_TRACE TLV
  first and the AUTHENTICATION TLV last;
* another key (same spp and key id), or a master that does not sign: the slave logs "port 1 (...): auth: bad
  message" for each message and never takes the master as a foreign master.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from pathlib import Path

import pytest

from harness import ptp_harness as h
from tests.interop.linuxptp4 import requirements

pytestmark = [pytest.mark.interop, pytest.mark.slow]

KEY = bytes(range(0x40, 0x60))  # 32 bytes
OTHER_KEY = bytes(range(0x60, 0x80))
SPP, KEY_ID = 1, 1
TLV_PATH_TRACE, TLV_AUTHENTICATION = 0x0008, 0x8009
ICV_LEN = 16  # HMAC-SHA256-128
AUTH_TLV_LEN = 4 + 6 + ICV_LEN  # type, lengthField | spp, secParamIndicator, keyID | ICV

# IEEE 1588-2019 message types and the length of each one's body (header included), where its TLVs start.
ANNOUNCE, SYNC, FOLLOW_UP, DELAY_REQ, DELAY_RESP = 0xB, 0x0, 0x8, 0x1, 0x9
BODY_LEN = {SYNC: 44, DELAY_REQ: 44, 0x2: 54, 0x3: 54, FOLLOW_UP: 44, DELAY_RESP: 54, 0xA: 54, ANNOUNCE: 64,
            0xC: 44, 0xD: 48}

_PORT1 = r"ptp4l\[[\d.]+\]: port 1 \([^)]*\): "
GM_RE = re.compile(r"selected local clock (\S+) as best master")
GRAND_MASTER_RE = re.compile(_PORT1 + r"assuming the grand master role")
BEST_RE = re.compile(r"selected best master clock (\S+)")
FOREIGN_RE = re.compile(_PORT1 + r"new foreign master")
RS_SLAVE_RE = re.compile(_PORT1 + r"\w+ to (UNCALIBRATED|SLAVE) on RS_SLAVE")
OFFSET_RE = re.compile(r"master offset\s+(-?\d+) s\d freq\s+[+-]?\d+ path delay\s+(-?\d+)")
BAD_RE = re.compile(_PORT1 + r"auth: bad message")


def sa_file(path: Path, key: bytes) -> Path:
    path.write_text("# IEEE 1588-2019 16.14 security associations (linuxptp sa_file)\n"
                    "[security_association]\n"
                    f"spp {SPP}\n"
                    f"{KEY_ID} SHA256-128 HEX:{key.hex().upper()}\n")
    return path


def ptp4l4_config(role: str, workdir: Path, sa: Path | None) -> str:
    """A linuxptp 4.x config: never adjusts the clock (the harness's PTP4L_SAFETY), 1 Announce and 1 Sync a
    second; the master a GNSS-traceable grandmaster that sends a PATH_TRACE TLV in its Announce."""
    glob = {**h.PTP4L_SAFETY, "time_stamping": "software", "network_transport": "UDPv4", "delay_mechanism": "E2E",
            "domainNumber": "0", "uds_address": str(workdir / "ptp4l.sock"),
            "uds_ro_address": str(workdir / "ptp4l-ro.sock"), "use_syslog": "0", "verbose": "1"}
    if role == "master":
        glob.update(h.REFERENCE_GM)
        glob["path_trace_enabled"] = "1"
    else:
        glob.update({"clientOnly": "1", "freq_est_interval": "0"})
    glob.update({"logAnnounceInterval": "0", "announceReceiptTimeout": "3", "logSyncInterval": "0",
                 "logMinDelayReqInterval": "0"})
    if sa is not None:
        glob.update({"sa_file": str(sa), "spp": str(SPP), "active_key_id": str(KEY_ID)})
    return "[global]\n" + "".join(f"{k:<28} {v}\n" for k, v in glob.items())


class Ptp4l4(h._LogProcess):
    """ptp4l 4.x in a namespace: ``ip netns exec NS setpriv --bounding-set -sys_time -- DIR/ptp4l -f CFG -i IFACE
    -m -q -S``; log lines kept (``wait_for_line``, ``log``)."""

    def __init__(self, where: h.Member, role: str, directory: Path, workdir: Path, sa: Path | None) -> None:
        super().__init__()
        self.name = f"ptp4l4[{role}@{where.ns}]"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "ptp4l.cfg"
        self.config.write_text(ptp4l4_config(role, workdir, sa))
        argv = [str(directory / "ptp4l"), "-f", str(self.config), "-i", where.iface, "-m", "-q", "-S"]
        self._start(h.netns_argv(where.ns, [*h.SETPRIV, *argv]))

    def count(self, pattern: re.Pattern) -> int:
        with self._cond:
            return sum(1 for line in self.lines if pattern.search(line))


def ptp_payloads(capture: Path) -> list[tuple[str, bytes]]:
    """(source address, UDP payload) of every PTP event/general message in the capture."""
    out = h.sh("tshark", "-n", "-r", str(capture), "-Y", "udp.port == 319 || udp.port == 320", "-T", "fields",
               "-e", "ip.src", "-e", "udp.payload", timeout=60).stdout
    return [(src, bytes.fromhex(payload)) for src, payload in (line.split("\t") for line in out.splitlines())]


def tlvs(message: bytes) -> list[tuple[int, int, int]]:
    """(tlvType, lengthField, offset) of each TLV after the message body, up to messageLength."""
    length = int.from_bytes(message[2:4], "big")
    found, offset = [], BODY_LEN[message[0] & 0x0F]
    while offset + 4 <= length:
        kind, size = int.from_bytes(message[offset:offset + 2], "big"), int.from_bytes(message[offset + 2:offset + 4],
                                                                                       "big")
        found.append((kind, size, offset))
        offset += 4 + size
    assert offset == length, f"TLVs overrun messageLength {length}: {message.hex()}"
    return found


def check_signed(message: bytes, key: bytes) -> int:
    """Assert that ``message`` ends with linuxptp's AUTHENTICATION TLV signed with ``key``; its message type."""
    length = int.from_bytes(message[2:4], "big")
    assert len(message) == length, "the UDP payload is the PTP message, messageLength counting the TLVs and ICV"
    assert message[1] == 0x12, "minorVersionPTP 1, versionPTP 2: authentication needs PTPv2.1"
    found = tlvs(message)
    assert found and found[-1][:2] == (TLV_AUTHENTICATION, AUTH_TLV_LEN - 4), found
    offset = found[-1][2]
    assert offset == length - AUTH_TLV_LEN
    assert message[offset + 4] == SPP and message[offset + 5] == 0  # spp; secParamIndicator: no RES, no seqNo
    assert int.from_bytes(message[offset + 6:offset + 10], "big") == KEY_ID
    icv = hmac.new(key, message[:length - ICV_LEN], hashlib.sha256).digest()[:ICV_LEN]
    assert message[length - ICV_LEN:] == icv, f"ICV is not HMAC-SHA256-128 over bytes 0..{length - ICV_LEN}"
    return message[0] & 0x0F


@pytest.mark.timeout(120)
def test_a_ptp4l_4_slave_follows_a_ptp4l_4_master_signing_with_the_same_key(tmp_path: Path) -> None:
    directory = requirements()
    sa = sa_file(tmp_path / "sa.cfg", KEY)
    with h.NetnsPair("lpa") as net:
        with h.Capture(net.b, None, tmp_path / "auth.pcapng") as cap, \
                Ptp4l4(net.a, "master", directory, tmp_path / "master", sa) as master, \
                Ptp4l4(net.b, "slave", directory, tmp_path / "slave", sa) as slave:
            gm = master.wait_for_line(GM_RE, 20)[1]
            master.wait_for_line(GRAND_MASTER_RE, 20)
            assert slave.wait_for_line(BEST_RE, 30)[1] == gm
            slave.wait_for_line(RS_SLAVE_RE, 20)

            def measured() -> list[tuple[int, int]] | None:  # a path delay needs Delay_Req and Delay_Resp through
                found = [(int(m[1]), int(m[2])) for line in slave.lines if (m := OFFSET_RE.search(line))]
                return found if len([d for _o, d in found if d != 0]) >= 3 else None

            offsets = slave.wait_until(measured, 30, "three offsets with a measured path delay")
        for who in (master, slave):
            assert who.count(BAD_RE) == 0, who.log()
        assert all(abs(o) < 1_000_000 and 0 <= d < 1_000_000 for o, d in offsets), offsets  # same host clock

    payloads = ptp_payloads(cap.path)
    sent: dict[str, set[int]] = {net.ip4_a: set(), net.ip4_b: set()}
    for source, message in payloads:
        sent[source].add(check_signed(message, KEY))
        if message[0] & 0x0F == ANNOUNCE:
            assert [kind for kind, _size, _offset in tlvs(message)] == [TLV_PATH_TRACE, TLV_AUTHENTICATION]
        if message[0] & 0x0F == SYNC:
            assert message[6] & 0x02, "two-step Sync (a port with spp refuses one-step time stamping)"
    assert sent[net.ip4_a] >= {ANNOUNCE, SYNC, FOLLOW_UP, DELAY_RESP}, sent
    assert sent[net.ip4_b] >= {DELAY_REQ}, sent


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["another key", "an unsigned master"])
def test_a_ptp4l_4_slave_refuses_a_master_with_another_key_or_none(tmp_path: Path, case: str) -> None:
    directory = requirements()
    slave_sa = sa_file(tmp_path / "slave-sa.cfg", KEY)
    master_sa = sa_file(tmp_path / "master-sa.cfg", OTHER_KEY) if case == "another key" else None
    with h.NetnsPair("lpr") as net, \
            Ptp4l4(net.a, "master", directory, tmp_path / "master", master_sa) as master, \
            Ptp4l4(net.b, "slave", directory, tmp_path / "slave", slave_sa) as slave:
        master.wait_for_line(GRAND_MASTER_RE, 20)
        since = time.monotonic()
        slave.wait_until(lambda: slave.count(BAD_RE) >= 6, 20, "six 'auth: bad message'")
        time.sleep(max(0.0, 5.0 - (time.monotonic() - since)))  # more than announceReceiptTimeout's 3 Announces
        assert slave.count(FOREIGN_RE) == 0 and slave.count(BEST_RE) == 0 and slave.count(RS_SLAVE_RE) == 0, \
            slave.log()
        assert slave.alive() and master.alive()
