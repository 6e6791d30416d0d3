"""The NTS-KE server's own defences, without a network: which connections its gate keeps and lets go, the ALPN it
reads from a ClientHello before OpenSSL does, and its private files (never written or read through a link)."""

from __future__ import annotations

import json
import os
import ssl
from pathlib import Path

import pytest

from appliance.edge.ntp import ntske
from appliance.protocol.ntp.kegate import KeGate, Stage, client_of, per_client_slots
from appliance.edge.persist import UnsafePathError
from appliance.protocol.ntp import nts

S = 1_000_000_000


# --- the gate -----------------------------------------------------------------------------------------------------

def test_one_client_holds_at_most_its_share_and_pushes_out_its_own_oldest() -> None:
    gate = KeGate(8, 2, 5 * S)
    a1, _ = gate.admit("192.0.2.1", 0)
    a2, _ = gate.admit("192.0.2.1", 1)
    b1, evicted = gate.admit("192.0.2.2", 2)
    assert evicted == []
    a3, evicted = gate.admit("192.0.2.1", 3)
    assert evicted == [a1] and gate.held_by("192.0.2.1") == 2 and len(gate) == 3
    assert gate.client(b1) == "192.0.2.2"


def test_a_full_gate_pushes_out_a_trickle_before_a_real_handshake() -> None:
    """Every slot held: the new connection displaces the least advanced exchange (no whole ClientHello yet), of
    the client holding the most, the oldest; a connection being answered is never pushed out."""
    gate = KeGate(4, 2, 5 * S)
    real, _ = gate.admit("198.51.100.7", 0)
    gate.move(real, Stage.HANDSHAKE)  # its ClientHello came with the connection
    t1, _ = gate.admit("192.0.2.1", 1)
    t2, _ = gate.admit("192.0.2.1", 2)
    t3, _ = gate.admit("192.0.2.2", 3)
    _, evicted = gate.admit("192.0.2.3", 4)
    assert evicted == [t1]  # 192.0.2.1 held the most
    _, evicted = gate.admit("192.0.2.4", 5)
    assert evicted == [t2] or evicted == [t3]
    assert gate.client(real) == "198.51.100.7"


def test_ipv6_clients_are_their_64_and_mapped_ipv4_is_ipv4() -> None:
    gate = KeGate(8, 2, 5 * S)
    first, _ = gate.admit("2001:db8:1:2::10", 0)
    gate.admit("2001:db8:1:2::20", 1)
    _, evicted = gate.admit("2001:db8:1:2:ffff::1", 2)
    assert evicted == [first]
    assert client_of("::ffff:192.0.2.9") == "192.0.2.9"


def test_when_every_slot_is_being_answered_a_new_connection_is_refused() -> None:
    gate = KeGate(2, 2, 5 * S)
    for i in range(2):
        key, _ = gate.admit(f"192.0.2.{i}", i)
        gate.move(key, Stage.ANSWER)
    assert gate.admit("192.0.2.9", 3) == (None, [])


def test_the_whole_exchange_has_one_deadline_from_its_accept() -> None:
    gate = KeGate(8, 2, 5 * S)
    key, _ = gate.admit("192.0.2.1", 0)
    later, _ = gate.admit("192.0.2.2", 2 * S)
    gate.move(key, Stage.HANDSHAKE)
    gate.move(key, Stage.REQUEST)  # moving on does not restart the clock
    assert gate.next_deadline_ns() == 5 * S
    assert gate.expired(5 * S - 1) == []
    assert gate.expired(5 * S) == [key] and gate.client(key) is None
    assert gate.move(key, Stage.ANSWER) is False  # its thread learns it was let go
    assert gate.expired(7 * S) == [later] and len(gate) == 0


def test_per_client_share() -> None:
    assert [per_client_slots(n) for n in (1, 3, 8, 16, 64, 10_000)] == [1, 1, 2, 4, 8, 8]


# --- the ClientHello's ALPN -----------------------------------------------------------------------------------------

def client_hello_of(alpn: list[str] | None) -> bytes:
    """The first bytes a Python TLS 1.3 client sends, offering ``alpn`` (None: no ALPN extension)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    if alpn is not None:
        ctx.set_alpn_protocols(alpn)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("alpn, offered", [(None, ()), (["http/1.1"], (b"http/1.1",)),
                                           (["h2", "ntske/1"], (b"h2", b"ntske/1"))])
def test_the_alpn_a_client_hello_offers(alpn: list[str] | None, offered: tuple[bytes, ...]) -> None:
    data = client_hello_of(alpn)
    for cut in (0, 3, 5, 40, len(data) - 1):  # not all there yet: how much is needed
        hello, needed = nts.client_hello(data[:cut])
        assert hello is None and cut < needed <= len(data)
    hello, needed = nts.client_hello(data)
    assert needed == 0 and nts.alpn_offered(hello) == offered


def test_a_client_hello_split_over_two_records_is_read_whole() -> None:
    data = client_hello_of(["ntske/1"])
    message = data[5:]
    split = b"".join(bytes([22, 3, 1]) + len(part).to_bytes(2, "big") + part
                     for part in (message[:50], message[50:]))
    hello, needed = nts.client_hello(split)
    assert needed == 0 and hello == message and nts.alpn_offered(hello) == (b"ntske/1",)


def test_bytes_that_are_not_a_client_hello_are_told_apart() -> None:
    """Not TLS, a ServerHello, a record longer than TLS allows: OpenSSL is left to refuse them."""
    for junk in (b"GET / HTTP/1.0\r\n\r\n", bytes([22, 3, 3, 0, 4, 2, 0, 0, 0]), bytes([22, 3, 3, 0x40, 1])):
        with pytest.raises(ValueError):
            nts.client_hello(junk)
    with pytest.raises(ValueError):
        nts.alpn_offered(client_hello_of(["ntske/1"])[5:60])


# --- private files ----------------------------------------------------------------------------------------------------

def test_the_cookie_keys_are_never_written_through_a_planted_link(tmp_path: Path) -> None:
    """A link at the key file, or at the fixed temporary name the server once used, is never written through."""
    nts_dir = tmp_path / "nts"
    nts_dir.mkdir(mode=0o700)
    victim = tmp_path / "someone-elses-file"
    victim.write_text("theirs")
    (nts_dir / "cookie_keys.tmp").symlink_to(victim)
    path = nts_dir / "cookie_keys.json"
    keys = ntske.rotate_if_due(path, 1000, 86_400)
    assert victim.read_text() == "theirs"
    assert ntske.load_keys(path) == keys and (path.stat().st_mode & 0o777) == 0o600
    path.unlink()
    path.symlink_to(victim)
    with pytest.raises(UnsafePathError, match=str(path)):
        ntske.rotate_if_due(path, 2000, 86_400)
    assert victim.read_text() == "theirs"


def test_a_key_file_behind_a_link_is_not_read(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps({"keys": [{"id": 1, "key": "00" * nts.MASTER_KEY_LEN, "created_s": 0}]}))
    link = tmp_path / "cookie_keys.json"
    link.symlink_to(real)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        ntske.load_keys(link)


def test_the_own_certificate_key_is_never_written_or_read_through_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("theirs")
    cert, key = tmp_path / "nts" / "cert.pem", tmp_path / "nts" / "key.pem"
    key.parent.mkdir()
    key.symlink_to(victim)
    with pytest.raises(UnsafePathError, match=str(key)):
        ntske.ensure_certificate(cert, key, ("localhost",))
    assert victim.read_text() == "theirs" and not cert.exists()
    key.unlink()
    ntske.ensure_certificate(cert, key, ("localhost",))
    assert (key.stat().st_mode & 0o777) == 0o600
    ntske.tls_context(str(cert), str(key), private=True)
    moved = tmp_path / "key-moved.pem"
    os.replace(key, moved)
    key.symlink_to(moved)
    with pytest.raises(UnsafePathError, match=str(key)):
        ntske.tls_context(str(cert), str(key), private=True)


def test_a_link_planted_while_serving_stops_rotation_not_the_server(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """The KE process keeps its keys and says why it cannot rotate; it never writes through the link."""
    nts_dir = tmp_path / "nts"
    nts_dir.mkdir(mode=0o700)
    cert, key = nts_dir / "cert.pem", nts_dir / "key.pem"
    ntske.ensure_certificate(cert, key, ("localhost",))
    keys_path = nts_dir / "cookie_keys.json"
    config = ntske.KeConfig("127.0.0.1", 0, str(cert), str(key), str(keys_path), 60, 123, 0.0, 8, 8)
    server = ntske.KeServer(config, [0] * len(ntske.COUNTERS))
    held = server.jar.current
    victim = tmp_path / "victim"
    victim.write_text("theirs")
    keys_path.unlink()
    keys_path.symlink_to(victim)
    with caplog.at_level("ERROR", logger="appliance.ntske"):
        server.tick(held.created_s + 3600)
        server.tick(held.created_s + 3601)
    assert victim.read_text() == "theirs" and server.jar.current == held
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and str(keys_path) in errors[0] and "symbolic link" in errors[0]
