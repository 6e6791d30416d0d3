"""NTS throughput: NTS-authenticated NTP replies per second (RFC 8915), the appliance against chronyd's NTS server,
same load generator, same run.

    python bench/nts_throughput.py [--rounds 3] [--duration 3] [--windows 4,8,16,32,64,128] [--verify-every 8]

The method of bench/ntp_throughput.py: the server pinned to CPU 0, the load generator (bench/ntsload.c, compiled
here with gcc against OpenSSL's libcrypto) on CPU 1, on loopback.  Before each server's sweep the bench does one
NTS-KE session with it (pyOpenSSL, TLS 1.3, ALPN ntske/1, trusting the server's certificate), exports the C2S and
S2C keys and hands them and the session's cookies to the generator.  Every request the generator sends is built
then: a fresh 32-byte Unique Identifier, a fresh nonce, one cookie (the session's eight in turn: neither server
tracks cookies) and its own AES-SIV authenticator.  A reply counts when it is mode 4, not a kiss-o'-death, answers
the request's transmit timestamp, echoes its Unique Identifier and ends in an NTS Authenticator; every
--verify-every'th one is decrypted with the S2C key and must hold a new cookie.  NTS NAKs, other KoDs and invalid
replies are counted apart; a window is sustainable when at most 0.1 % of its requests were lost and no reply was a
NAK, a KoD or invalid.

For each window (requests in flight) the load runs --duration s; per server the best sustainable replies/s is
kept, with its loss and p99 latency and the generator's own CPU share (well under 100 %: the generator is not what
limits).  A shared 2-vCPU host is noisy, so the whole is done --rounds times, the servers alternating (each round
starts the server afresh, its order swapped every round); printed: each round's figures and ratio appliance /
chronyd, then the median per server, the median of the per-round ratios with their range, and PASS when that
median is >= 1.0 (FAIL otherwise), said to be decided only when there were at least 3 rounds and every round's
ratio is on the same side of 1.0.

chronyd runs as an NTS server with a self-signed certificate made here (ntsserverkey/ntsservercert), no rate
limit (none configured), cmdport 0 and its command socket in its own 0700 directory, with -x and without the clock
capability.  The appliance runs with ntp.nts_enabled, one NTP worker, both rate limits off.  Nothing here adjusts
the clock.  Exit status: 0 PASS, 1 FAIL, 2 a tool missing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance.protocol.ntp import nts  # noqa: E402  (the records and exporter contexts: pure protocol)
from bench.ntp_throughput import appliance_status, stop  # noqa: E402  (the NTP bench's process handling)
from bench.ntp_throughput import wait_answers as wait_ntp  # noqa: E402
from harness.nts_load import (LOSS_LIMIT_PCT, MIN_DECIDING_ROUNDS, SERVERS, KeResult,  # noqa: E402
                              best_sustainable, ke_request, key_file_text, parse_ke_response, summarize,
                              sustainable)

SERVER_CPU, LOAD_CPU = "0", "1"
KE_TIMEOUT_S = 5.0
LOAD_TIMEOUT_MARGIN_S = 30.0  # a generator run is given its duration plus this, then killed
GENERATOR_BUSY_PCT = 95.0  # above this share of its CPU the generator, not the server, may be the limit


# --- processes ------------------------------------------------------------------------------------------------------

def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_load(workdir: Path) -> Path:
    exe = workdir / "ntsload"
    out = subprocess.run(["gcc", "-O2", "-o", str(exe), str(ROOT / "bench" / "ntsload.c"), "-lcrypto"],
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        if "openssl/evp.h" in out.stderr:
            raise SystemExit("nts_throughput: OpenSSL's headers are missing (openssl/evp.h): "
                             "install them with `apt-get install libssl-dev`")
        raise SystemExit(f"nts_throughput: bench/ntsload.c did not compile:\n{out.stderr}")
    return exe


def private_dir(workdir: Path, name: str) -> Path:
    d = workdir / name
    d.mkdir(mode=0o700)
    return d


def make_certificate(d: Path) -> tuple[Path, Path]:
    """A self-signed ECDSA P-256 certificate for localhost and 127.0.0.1 (as the appliance makes its own)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = d / "cert.pem", d / "key.pem"
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


@dataclass
class Server:
    name: str
    proc: subprocess.Popen
    ntp_port: int
    ke_port: int
    cert: Path
    state: Path | None = None  # the appliance's state directory
    sock: Path | None = None  # chronyd's command socket


def start_chronyd(workdir: Path, tag: str, cert: Path, key: Path) -> Server:
    d = private_dir(workdir, f"chronyd-{tag}")
    ntp_port, ke_port = free_port(), free_port(socket.SOCK_STREAM)
    conf = d / "chrony.conf"
    sock = d / "chronyd.sock"
    conf.write_text(f"port {ntp_port}\nbindaddress 127.0.0.1\nlocal stratum 1\nallow 127.0.0.1\ncmdport 0\n"
                    f"bindcmdaddress {sock}\npidfile {d}/chronyd.pid\ndriftfile {d}/drift\n"
                    f"ntsserverkey {key}\nntsservercert {cert}\nntsport {ke_port}\nntsdumpdir {d}\n")
    proc = subprocess.Popen(["taskset", "-c", SERVER_CPU, "setpriv", "--bounding-set", "-sys_time", "chronyd", "-x",
                             "-d", "-u", "root", "-f", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=open(d / "stderr", "wb"), start_new_session=True)
    server = Server("chronyd", proc, ntp_port, ke_port, cert, sock=sock)
    try:
        wait_ntp(ntp_port)
        wait_tcp(ke_port)
    except RuntimeError:
        stop(proc)
        raise RuntimeError(f"chronyd did not start: {(d / 'stderr').read_text()[-2000:]}") from None
    return server


def start_appliance(workdir: Path, tag: str) -> Server:
    state = workdir / f"appliance-{tag}"
    ntp_port, ke_port = free_port(), free_port(socket.SOCK_STREAM)
    cmd = ["taskset", "-c", SERVER_CPU, sys.executable, "-m", "appliance", "run", "--set", f"state_dir={state}",
           "--set", "ntp.listen=127.0.0.1", "--set", f"ntp.port={ntp_port}", "--set", "ntp.workers=1",
           "--set", "ntp.rate_limit_per_s=0",
           "--set", "ntp.nts_enabled=true", "--set", f"ntp.nts_port={ke_port}",
           "--set", "ntp.nts_rate_limit_per_s=0", "--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3",
           "--set", "log.level=warning"]
    errlog = workdir / f"appliance-{tag}.stderr"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(errlog, "wb"), start_new_session=True,
                            cwd=ROOT)
    server = Server("appliance", proc, ntp_port, ke_port, state / "nts" / "cert.pem", state=state)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # serve only once locked (stratum 1, as chronyd) with NTS-KE up
        status = appliance_status(state)
        if (status and status["clock"]["state"] == "LOCKED"
                and status["outputs"]["ntp"].get("nts", {}).get("alive") is True and server.cert.exists()):
            try:
                wait_tcp(ke_port, 10)
                return server
            except RuntimeError:
                break
        if proc.poll() is not None:
            break
        time.sleep(1)
    stop(proc)
    raise RuntimeError(f"the appliance did not lock with NTS-KE up within 90 s: {errlog.read_text()[-2000:]}")


def chronyd_serverstats(sock: Path) -> dict[str, str]:
    """chronyc serverstats over chronyd's own command socket (empty when chronyc is missing or fails)."""
    if shutil.which("chronyc") is None:
        return {}
    try:
        out = subprocess.run(["chronyc", "-h", str(sock), "serverstats"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return {}
    stats = {}
    for line in out.stdout.splitlines():
        key, _, value = line.partition(":")
        if value:
            stats[key.strip()] = value.strip()
    return stats


def wait_tcp(port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing accepts TCP on port {port}")


# --- NTS-KE ---------------------------------------------------------------------------------------------------------

def ke_exchange(port: int, cafile: Path) -> tuple[KeResult, bytes, bytes]:
    """One NTS-KE session with the server on 127.0.0.1:port: (its response, C2S, S2C)."""
    from OpenSSL import SSL

    ctx = SSL.Context(SSL.TLS_CLIENT_METHOD)
    ctx.set_min_proto_version(SSL.TLS1_3_VERSION)
    ctx.load_verify_locations(str(cafile))
    ctx.set_verify(SSL.VERIFY_PEER, lambda *a: a[-1])
    ctx.set_alpn_protos([nts.ALPN])
    sock = socket.create_connection(("127.0.0.1", port), timeout=KE_TIMEOUT_S)
    sock.setblocking(True)  # pyOpenSSL wants a blocking socket: bounded by SO_RCVTIMEO / SO_SNDTIMEO instead
    tv = struct.pack("ll", int(KE_TIMEOUT_S), 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    conn = SSL.Connection(ctx, sock)
    conn.set_tlsext_host_name(b"localhost")
    conn.set_connect_state()
    try:
        conn.do_handshake()
        if conn.get_alpn_proto_negotiated() != nts.ALPN:
            raise RuntimeError("NTS-KE: the server did not agree to ntske/1")
        conn.sendall(ke_request())
        data = b""
        deadline = time.monotonic() + KE_TIMEOUT_S
        while len(data) < 65536 and time.monotonic() < deadline:
            try:
                chunk = conn.recv(4096)
            except (SSL.ZeroReturnError, SSL.SysCallError):
                break
            if not chunk:
                break
            data += chunk
            if nts.parse_records(data)[1]:
                break
        c2s_ctx, s2c_ctx = nts.exporter_contexts()
        c2s = conn.export_keying_material(nts.EXPORTER_LABEL, nts.KEY_LEN, c2s_ctx)
        s2c = conn.export_keying_material(nts.EXPORTER_LABEL, nts.KEY_LEN, s2c_ctx)
    finally:
        sock.close()
    result = parse_ke_response(data)
    if result.error is not None or not result.cookies:
        raise RuntimeError(f"NTS-KE: error {result.error}, {len(result.cookies)} cookies")
    return result, c2s, s2c


# --- the load -------------------------------------------------------------------------------------------------------

def run_load(load: Path, keyfile: Path, port: int, window: int, duration: float, verify_every: int) -> dict:
    out = subprocess.run(["taskset", "-c", LOAD_CPU, str(load), "-k", str(keyfile), "-h", "127.0.0.1", "-p",
                          str(port), "-d", str(duration), "-w", str(window), "-a", str(verify_every)],
                         capture_output=True, text=True, check=True, timeout=duration + LOAD_TIMEOUT_MARGIN_S)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(server: Server, workdir: Path, tag: str, load: Path, windows: list[int], duration: float,
            verify_every: int) -> dict:
    ke, c2s, s2c = ke_exchange(server.ke_port, server.cert)
    keyfile = workdir / f"keys-{tag}"
    fd = os.open(keyfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key_file_text(c2s, s2c, ke.cookies))
    runs = [run_load(load, keyfile, server.ntp_port, w, duration, verify_every) for w in windows]
    result = {"best": best_sustainable(runs), "runs": runs, "ke": ke, "ntp_port": server.ntp_port,
              "cookie_len": len(ke.cookies[0])}
    if server.state is not None:
        status = appliance_status(server.state)
        result["counters"] = status["outputs"]["ntp"]["totals"] if status else {}
    elif server.sock is not None:
        result["counters"] = chronyd_serverstats(server.sock)
    return result


def one_round(workdir: Path, index: int, order: tuple[str, ...], load: Path, args: argparse.Namespace,
              cert: Path, key: Path) -> dict[str, dict]:
    out = {}
    for name in order:
        tag = f"{index}"
        if name == "chronyd":
            server = start_chronyd(workdir, tag, cert, key)
        else:
            server = start_appliance(workdir, tag)
        try:
            out[name] = measure(server, workdir, f"{name}-{tag}", load, args.windows, args.duration,
                                args.verify_every)
        finally:
            stop(server.proc)
    return out


def print_server(name: str, m: dict) -> None:
    b = m["best"]
    ke: KeResult = m["ke"]
    print(f"    {name:10} {b['replies_per_s']:10,.0f} replies/s  (window {b['window']}, loss {b['loss_pct']:.3f} %, "
          f"p99 {b['rtt_us_p99']:.0f} us, generator CPU {b['load_cpu_pct']:.0f} %)")
    if b["load_cpu_pct"] >= GENERATOR_BUSY_PCT:
        print(f"        the generator was busy {b['load_cpu_pct']:.0f} % of the time: this figure may be its limit, "
              f"not the server's")
    print("        per window: " + ", ".join(
        f"{r['window']}: {r['replies_per_s']:,.0f}/s {r['loss_pct']:.2f}%"
        + ("" if sustainable(r) else " (not sustainable" + _faults(r) + ")") for r in m["runs"]))
    port = ("none" if ke.port is None else f"{ke.port} (its NTP port)" if ke.port == m["ntp_port"]
            else f"{ke.port} (NOT its NTP port {m['ntp_port']})")
    print(f"        NTS-KE: {len(ke.cookies)} cookies of {m['cookie_len']} bytes, AEAD {ke.aead}, Port record "
          f"{port}; replies: {sum(r['valid'] for r in m['runs']):,} valid, "
          f"{sum(r['verified'] for r in m['runs']):,} authenticators decrypted, "
          f"{sum(r['nak'] for r in m['runs'])} NAK, {sum(r['kod'] for r in m['runs'])} other KoD, "
          f"{sum(r['invalid'] for r in m['runs'])} invalid, {sum(r['stale'] for r in m['runs'])} late")
    c = m.get("counters") or {}
    if name == "appliance" and c:
        print(f"        appliance counters: {c.get('nts', 0):,} NTS replies, {c.get('nts_nak', 0)} NAK, "
              f"{c.get('drop_nts_replay', 0)} replays dropped, {c.get('drop_nts_malformed', 0)} malformed dropped, "
              f"{c.get('requests', 0):,} requests")
    elif name == "chronyd" and c:
        print(f"        chronyd serverstats: {c.get('NTP packets received', '?')} NTP packets received, "
              f"{c.get('NTP packets dropped', '?')} dropped, {c.get('Authenticated NTP packets', '?')} authenticated")


def _faults(r: dict) -> str:
    parts = [f"{r[k]} {k}" for k in ("nak", "kod", "invalid") if r[k]]
    parts += [f"{k} {v}" for k, v in r.get("invalid_by", {}).items()]
    return (": " + ", ".join(parts)) if parts else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per window")
    ap.add_argument("--windows", default="4,8,16,32,64,128")
    ap.add_argument("--verify-every", type=int, default=8, help="decrypt every n-th reply's authenticator (1: all)")
    args = ap.parse_args()
    args.windows = [int(w) for w in args.windows.split(",")]
    if not 1 <= args.rounds <= 20 or not 0.5 <= args.duration <= 60 or not all(1 <= w <= 1024 for w in args.windows):
        ap.error("rounds 1..20, duration 0.5..60 s, windows 1..1024")
    logging.basicConfig(level=logging.ERROR)
    for tool in ("gcc", "chronyd", "taskset", "setpriv"):
        if shutil.which(tool) is None:
            print(f"nts_throughput: {tool} is needed (scripts/test-all installs the Debian peers)", file=sys.stderr)
            return 2
    try:
        import OpenSSL  # noqa: F401
    except ImportError:
        print("nts_throughput: pyOpenSSL is needed (the appliance's NTS-KE uses it: pip install -e .)",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o700)
        try:
            load = build_load(workdir)
        except SystemExit as exc:
            print(exc, file=sys.stderr)
            return 2
        cert, key = make_certificate(private_dir(workdir, "chronyd-cert"))
        print(f"NTS throughput on loopback, server on CPU {SERVER_CPU}, load on CPU {LOAD_CPU}, {args.duration:g} s "
              f"per window {','.join(map(str, args.windows))}, sustainable = loss <= {LOSS_LIMIT_PCT} % and no NAK, "
              f"KoD or invalid reply; {args.rounds} rounds, servers alternating; every {args.verify_every}th reply's "
              f"authenticator decrypted")
        per_round: list[dict[str, float]] = []
        for i in range(args.rounds):
            order = SERVERS if i % 2 == 0 else SERVERS[::-1]
            started = time.monotonic()
            m = one_round(workdir, i, order, load, args, cert, key)
            best = {name: m[name]["best"]["replies_per_s"] for name in SERVERS}
            per_round.append(best)
            ratio = best["appliance"] / best["chronyd"] if best["chronyd"] else float("nan")
            print(f"  round {i + 1} ({' then '.join(order)}, {time.monotonic() - started:.0f} s): ratio appliance / "
                  f"chronyd {ratio:.2f}")
            for name in SERVERS:
                print_server(name, m[name])
            sys.stdout.flush()
        s = summarize(per_round)
        print(f"Summary over {args.rounds} rounds (median, range over rounds):")
        for name in SERVERS:
            lo, hi = s["spread"][name]
            print(f"  {name:10} {s['median'][name]:10,.0f} replies/s   (rounds {lo:,.0f} .. {hi:,.0f})")
        lo, hi = s["ratio_range"]
        print(f"  ratio appliance / chronyd: median {s['median_ratio']:.2f} (rounds {lo:.2f} .. {hi:.2f}; "
              + ", ".join(f"{r:.2f}" for r in s["ratios"]) + ")")
        print(f"  NTS throughput target ratio >= 1.0: {'PASS' if s['passed'] else 'FAIL'} "
              + ("(every round on the same side of 1.0)" if s["decided"] else
                 f"(undecided on this host: fewer than {MIN_DECIDING_ROUNDS} rounds, or rounds on both sides of 1.0; "
                 f"run more --rounds)"))
    return 0 if s["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
