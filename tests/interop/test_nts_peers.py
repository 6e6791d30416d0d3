"""NTS (RFC 8915) of ``appliance run`` as real peers see it: chronyd as an NTS client, and a client of this test's
own (pyOpenSSL for TLS 1.3 and its exporter) for what chronyd never sends: bad ALPN, unknown critical records,
truncated requests, bad, tampered and replayed cookies, a wrong key.  chronyd runs with -x and without CAP_SYS_TIME.
"""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESSIV
from OpenSSL import SSL

from appliance.edge.ntp.ntske import _io_timeout
from tests.oracle import nts_model as nts
from harness.peers import Chronyd, eventually
from harness.procs import appliance, free_tcp_port, free_udp_port, status, stop, wait_for

pytestmark = [pytest.mark.interop, pytest.mark.slow]


class Server:
    def __init__(self, state: Path, ntp_port: int, ke_port: int) -> None:
        self.state, self.ntp_port, self.ke_port = state, ntp_port, ke_port
        self.cert = state / "nts" / "cert.pem"

    def nts_status(self) -> dict:
        s = status(self.state)
        assert s is not None
        return s["outputs"]["ntp"]["nts"]

    def totals(self) -> dict:
        return status(self.state)["outputs"]["ntp"]["totals"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("nts")
    ntp_port, ke_port, state = free_udp_port(), free_tcp_port(), base / "state"
    app = appliance("run", "--set", f"state_dir={state}", "--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3",
                    "--set", "ntp.listen=127.0.0.1", "--set", f"ntp.port={ntp_port}", "--set", "ntp.workers=1",
                    "--set", "ntp.nts_enabled=true", "--set", f"ntp.nts_port={ke_port}",
                    "--set", "ntp.nts_rate_limit_per_s=0")
    try:
        wait_for(state, lambda s: s["outputs"]["ntp"].get("nts", {}).get("alive") is True, 30)
        eventually(lambda: _connects(ke_port), 10, "the NTS-KE port accepting")
        yield Server(state, ntp_port, ke_port)
    finally:
        code, err = stop(app)
    assert code == 0, err


def _connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def ke_exchange(srv: Server, payload: bytes, alpn: bytes = nts.ALPN, close_early: bool = False):
    """One NTS-KE session: (records answered, C2S, S2C), or raises SSL.Error."""
    ctx = SSL.Context(SSL.TLS_CLIENT_METHOD)
    ctx.set_min_proto_version(SSL.TLS1_3_VERSION)
    ctx.load_verify_locations(str(srv.cert))
    ctx.set_verify(SSL.VERIFY_PEER, lambda *a: a[-1])
    ctx.set_alpn_protos([alpn])
    sock = socket.create_connection(("127.0.0.1", srv.ke_port), timeout=5)
    _io_timeout(sock, 5.0)  # pyOpenSSL wants a blocking socket
    conn = SSL.Connection(ctx, sock)
    conn.set_tlsext_host_name(b"localhost")
    conn.set_connect_state()
    try:
        conn.do_handshake()
        conn.sendall(payload)
        if close_early:
            conn.shutdown()
        data = b""
        while True:
            try:
                chunk = conn.recv(4096)
            except (SSL.ZeroReturnError, SSL.SysCallError):
                break
            if not chunk:
                break
            data += chunk
        c2s_ctx, s2c_ctx = nts.exporter_contexts()
        c2s = conn.export_keying_material(nts.EXPORTER_LABEL, 32, c2s_ctx)
        s2c = conn.export_keying_material(nts.EXPORTER_LABEL, 32, s2c_ctx)
        return nts.parse_records(data)[0], c2s, s2c
    finally:
        sock.close()


def ke_request(extra: bytes = b"") -> bytes:
    return (nts.Record(True, nts.NEXT_PROTOCOL, b"\0\0").encode()
            + nts.Record(False, nts.AEAD_ALGORITHM, struct.pack("!H", 15)).encode() + extra
            + nts.Record(True, nts.END_OF_MESSAGE, b"").encode())


def ntp_request(cookie: bytes, c2s: bytes, uid: bytes | None = None) -> tuple[bytes, bytes]:
    uid = uid or os.urandom(32)
    header = bytes([0x23]) + b"\0" * 39 + os.urandom(8)
    body = header + nts._field(nts.EF_UNIQUE_ID, uid) + nts._field(nts.EF_COOKIE, cookie)
    nonce = os.urandom(16)
    ct = AESSIV(c2s).encrypt(b"", [body, nonce])
    return body + nts._field(nts.EF_AUTHENTICATOR, struct.pack("!HH", 16, len(ct)) + nonce + ct), uid


def ask(srv: Server, data: bytes, timeout_s: float = 1.0) -> bytes | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout_s)
        s.sendto(data, ("127.0.0.1", srv.ntp_port))
        try:
            return s.recv(2048)
        except socket.timeout:
            return None


def test_chronyd_synchronises_over_nts(server: Server) -> None:
    line = f"server 127.0.0.1 port {server.ntp_port} nts ntsport {server.ke_port} minpoll -2 maxpoll -2 iburst"
    with Chronyd(line, extra=[f"ntstrustedcerts {server.cert}"], acquire_from="127.0.0.20") as chrony:
        source = chrony.wait_selected(40)
        assert source.stratum == 1
        auth = chrony.chronyc("-n", "-c", "authdata").strip().split(",")
        # name, mode, key id, AEAD type, key length, last, attempts, NAKs, cookies, cookie length
        assert auth[1] == "NTS" and auth[3] == "15" and auth[4] == "256", auth
        assert int(auth[7]) == 0 and int(auth[8]) >= 1 and auth[9] == str(nts.cookie_len()), auth
    eventually(lambda: server.nts_status()["sessions"] >= 1 and server.totals()["nts"] >= 1, 10, "NTS counted")
    assert server.nts_status()["cookie_key_age_s"] is not None


def test_ke_answers_eight_cookies_and_ntp_answers_with_fresh_ones(server: Server) -> None:
    records, c2s, s2c = ke_exchange(server, ke_request())
    cookies = [r.body for r in records if r.type == nts.NEW_COOKIE]
    assert len(cookies) == 8 and records[-1].type == nts.END_OF_MESSAGE
    assert any(r.type == nts.PORT and struct.unpack("!H", r.body)[0] == server.ntp_port for r in records)
    request, uid = ntp_request(cookies[0], c2s)
    before = server.totals()
    reply = ask(server, request)
    assert reply is not None and len(reply) <= len(request)
    assert reply[0] & 7 == 4 and reply[1] == 1 and reply[24:32] == request[40:48]  # mode 4, stratum 1, origin
    fields = nts.extension_fields(reply)
    assert fields[0][0] == nts.EF_UNIQUE_ID and reply[fields[0][1] + 4:fields[0][1] + fields[0][2]] == uid
    _, apos, alen = fields[-1]
    nonce_len, ct_len = struct.unpack_from("!HH", reply, apos + 4)
    nonce = reply[apos + 8:apos + 8 + nonce_len]
    ct = reply[apos + 8 + nonce_len:apos + 8 + nonce_len + ct_len]
    plain = AESSIV(s2c).decrypt(ct, [reply[:apos], nonce])  # raises if the reply is not the server's
    assert [k for k, _, _ in nts.extension_fields(plain, 0)] == [nts.EF_COOKIE]
    # a replay of the same request is dropped: no second answer to an attacker's copy
    assert ask(server, request, 0.5) is None
    after = eventually(lambda: (t := server.totals())["drop_nts_replay"] > before["drop_nts_replay"] and t, 10,
                       "the reply and the replay counted")
    assert after["nts"] >= before["nts"] + 1  # (>=: a count of earlier traffic may have been published since)


def test_bad_cookie_and_wrong_key_get_the_nts_nak(server: Server) -> None:
    records, c2s, _ = ke_exchange(server, ke_request())
    cookie = next(r.body for r in records if r.type == nts.NEW_COOKIE)
    tampered = bytearray(cookie)
    tampered[30] ^= 0xFF
    for request, _ in (ntp_request(bytes(tampered), c2s), ntp_request(cookie, os.urandom(32))):
        reply = ask(server, request)
        assert reply is not None, "an NTS NAK was expected"
        assert reply[0] >> 6 == 3 and reply[1] == 0 and reply[12:16] == b"NTSN"
        assert [k for k, _, _ in nts.extension_fields(reply)] == [nts.EF_UNIQUE_ID]
    eventually(lambda: server.totals()["nts_nak"] >= 2, 10, "both NAKs counted")  # counters publish every 0.5 s


def test_malformed_nts_requests_are_dropped_and_the_server_keeps_serving(server: Server) -> None:
    records, c2s, _ = ke_exchange(server, ke_request())
    cookie = next(r.body for r in records if r.type == nts.NEW_COOKIE)
    good, _ = ntp_request(cookie, c2s)
    for bad in (good[:-4], good[:60], good[:48] + nts._field(nts.EF_UNIQUE_ID, b"x" * 32)):
        assert ask(server, bad, 0.3) is None
    assert ask(server, ntp_request(cookie, c2s)[0]) is not None


def test_ke_errors_and_bad_sessions(server: Server) -> None:
    records, _, _ = ke_exchange(server, ke_request(nts.Record(True, 1234, b"?").encode()))
    assert records[0].type == nts.ERROR and struct.unpack("!H", records[0].body)[0] == nts.ERR_UNRECOGNIZED_CRITICAL
    aes_gcm_only = ke_request().replace(struct.pack("!HHH", nts.AEAD_ALGORITHM, 2, 15),
                                        struct.pack("!HHH", nts.AEAD_ALGORITHM, 2, 30))
    records, _, _ = ke_exchange(server, aes_gcm_only)  # no AEAD in common: an empty AEAD record, no cookies
    assert [(r.type, r.body) for r in records] == [(nts.NEXT_PROTOCOL, b"\0\0"), (nts.AEAD_ALGORITHM, b""),
                                                  (nts.END_OF_MESSAGE, b"")]
    records, _, _ = ke_exchange(server, ke_request()[:-4], close_early=True)  # truncated: no End of Message
    assert records and records[0].type == nts.ERROR and struct.unpack("!H", records[0].body)[0] == nts.ERR_BAD_REQUEST
    with pytest.raises(SSL.Error):
        ke_exchange(server, ke_request(), alpn=b"http/1.1")
    before = server.nts_status()
    raw = socket.create_connection(("127.0.0.1", server.ke_port), timeout=5)  # not TLS at all
    raw.sendall(b"GET / HTTP/1.0\r\n\r\n")
    raw.close()
    eventually(lambda: server.nts_status()["tls_failures"] > before["tls_failures"], 10, "the failure counted")
    eventually(lambda: server.nts_status()["ke_errors"] >= 2, 10, "both KE errors counted")
    assert ke_exchange(server, ke_request())[0][-1].type == nts.END_OF_MESSAGE  # still serving


def test_cookie_keys_survive_a_restart(tmp_path: Path) -> None:
    """The keys are in the state directory: cookies issued before a restart are accepted after it."""
    ntp_port, ke_port, state = free_udp_port(), free_tcp_port(), tmp_path / "state"
    args = ("run", "--set", f"state_dir={state}", "--set", "ntp.listen=127.0.0.1", "--set", f"ntp.port={ntp_port}",
            "--set", "ntp.workers=1", "--set", "ntp.nts_enabled=true", "--set", f"ntp.nts_port={ke_port}",
            "--set", "clock.warmup_s=0")
    srv = Server(state, ntp_port, ke_port)
    app = appliance(*args)
    try:
        wait_for(state, lambda s: s["outputs"]["ntp"].get("nts", {}).get("alive") is True, 30)
        eventually(lambda: _connects(ke_port), 10, "the NTS-KE port accepting")
        records, c2s, _ = ke_exchange(srv, ke_request())
    finally:
        assert stop(app)[0] == 0
    cookie = next(r.body for r in records if r.type == nts.NEW_COOKIE)
    app = appliance(*args)
    try:
        wait_for(state, lambda s: s["outputs"]["ntp"].get("nts", {}).get("alive") is True, 30)
        reply = eventually(lambda: ask(srv, ntp_request(cookie, c2s)[0]), 10, "an NTS reply")
        assert reply[12:16] != b"NTSN" and reply[1] in (1, 16)
    finally:
        assert stop(app)[0] == 0
