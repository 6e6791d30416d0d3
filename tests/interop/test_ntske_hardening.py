"""The NTS-KE server of ``appliance run`` under a slow-handshake flood, as a real NTS client sees it: chronyd (-x,
without CAP_SYS_TIME, in its own directory) completes its key exchange and gets NTS-authenticated time while other
loopback addresses open connections within their rate limit and trickle one byte of a TLS record every 3 s into
each (before, 8 such connections from one address held every slot for as long as they lasted).  Also: a client
offering no ALPN gets the no_application_protocol alert; the KE process runs at idle priority; a planted link at
the cookie key file stops NTS with a message naming it.
"""

from __future__ import annotations

import os
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.edge.ntp.ntske import CONNECTION_TIMEOUT_S, per_client_slots
from harness.peers import Chronyd, eventually
from harness.procs import appliance, free_tcp_port, free_udp_port, status, stop, wait_for
from tests.interop.test_nts_peers import _connects

pytestmark = [pytest.mark.interop, pytest.mark.slow]

MAX_CONNECTIONS = 8  # ntp.nts_max_connections: few, so that the trickle fills them in seconds
RATE_PER_S = 2.0  # ntp.nts_rate_limit_per_s, the default: the trickle stays within it
TLS_RECORD_HEADER = bytes([22, 3, 1, 2, 0])  # a handshake record of 512 bytes, whose body never comes
TRICKLE_EVERY_S = 3.0


class Server:
    def __init__(self, state: Path, ntp_port: int, ke_port: int) -> None:
        self.state, self.ntp_port, self.ke_port = state, ntp_port, ke_port
        self.cert = state / "nts" / "cert.pem"

    def nts(self) -> dict:
        s = status(self.state)
        assert s is not None
        return s["outputs"]["ntp"]["nts"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("ntske")
    ntp_port, ke_port, state = free_udp_port(), free_tcp_port(), base / "state"
    app = appliance("run", "--set", f"state_dir={state}", "--set", "clock.warmup_s=0", "--set", "clock.qualify_s=3",
                    "--set", "ntp.listen=127.0.0.1", "--set", f"ntp.port={ntp_port}", "--set", "ntp.workers=1",
                    "--set", "ntp.nts_enabled=true", "--set", f"ntp.nts_port={ke_port}",
                    "--set", f"ntp.nts_max_connections={MAX_CONNECTIONS}",
                    "--set", f"ntp.nts_rate_limit_per_s={RATE_PER_S}")
    srv = Server(state, ntp_port, ke_port)
    try:
        wait_for(state, lambda s: s["outputs"]["ntp"].get("nts", {}).get("alive") is True, 30)
        eventually(lambda: _connects(ke_port), 10, "the NTS-KE port accepting")
        yield srv
    finally:
        code, err = stop(app)
    assert code == 0, err



class Trickle:
    """Slow handshakes from ``sources``: each address keeps up to ``per_source`` connections open, opens at most
    ``RATE_PER_S`` a second, sends a TLS record header and then one byte every ``TRICKLE_EVERY_S``."""

    def __init__(self, port: int, sources: list[str], per_source: int) -> None:
        self.port, self.sources, self.per_source = port, sources, per_source
        self.open: dict[socket.socket, tuple[str, float]] = {}  # -> (source, next byte due)
        self.next_open = {s: 0.0 for s in sources}
        self.opened = self.closed_by_server = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Trickle:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)
        for sock in self.open:
            sock.close()

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        while not self.stopping.is_set():
            now = time.monotonic()
            for source in self.sources:
                held = sum(1 for s, _ in self.open.values() if s == source)
                if held < self.per_source and now >= self.next_open[source]:
                    self.next_open[source] = now + 1 / RATE_PER_S
                    self._connect(source, selector, now)
            for key, _ in selector.select(0.05):
                self._drop(key.fileobj, selector, by_server=True)  # readable: the server closed it
            now = time.monotonic()
            for sock, (source, due) in list(self.open.items()):
                if now >= due:
                    try:
                        sock.send(b"\1")
                        self.open[sock] = (source, now + TRICKLE_EVERY_S)
                    except OSError:
                        self._drop(sock, selector, by_server=True)
        selector.close()

    def _connect(self, source: str, selector: selectors.BaseSelector, now: float) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((source, 0))
            sock.settimeout(1.0)
            sock.connect(("127.0.0.1", self.port))
            sock.sendall(TLS_RECORD_HEADER)
            sock.setblocking(False)
        except OSError:
            sock.close()
            return
        self.opened += 1
        self.open[sock] = (source, now + TRICKLE_EVERY_S)
        selector.register(sock, selectors.EVENT_READ)

    def _drop(self, sock: socket.socket, selector: selectors.BaseSelector, by_server: bool) -> None:
        if sock in self.open:
            del self.open[sock]
            selector.unregister(sock)
            sock.close()
            self.closed_by_server += by_server


def nts_time_after(server: Server, acquire_from: str) -> float:
    """Seconds from chronyd's start to its first NTS-authenticated sample from the appliance (its key exchange
    done, its NTP request answered and verified)."""
    line = f"server 127.0.0.1 port {server.ntp_port} nts ntsport {server.ke_port} minpoll -2 maxpoll -2 iburst"
    start = time.monotonic()
    with Chronyd(line, extra=[f"ntstrustedcerts {server.cert}"], acquire_from=acquire_from) as chrony:
        def authenticated() -> bool:
            data = chrony.ntpdata()
            return data.get("Authenticated") == "Yes" and int(data.get("Total valid RX", "0")) >= 1
        eventually(authenticated, 60, f"chronyd's first NTS-authenticated sample (log:\n{chrony.output()})", 0.05)
        elapsed = time.monotonic() - start
        auth = chrony.chronyc("-c", "authdata").strip().split(",")
        assert auth[1] == "NTS" and int(auth[7]) == 0, auth  # NTS, no NAK
    return elapsed


@pytest.fixture(scope="module")
def unhindered_s(server: Server) -> float:
    """chronyd's time to NTS-authenticated time with nothing else on the KE port: what the bounds are made of."""
    return nts_time_after(server, "127.0.0.21")


def fill_time_s(sources: int) -> float:
    """How long the trickle takes to open as many connections as the server holds, at its rate limit."""
    return MAX_CONNECTIONS / (sources * RATE_PER_S) + 0.5


def bound_s(unhindered: float) -> float:
    """Twice the unhindered time (this host is shared), and one whole exchange's deadline."""
    return 2 * unhindered + CONNECTION_TIMEOUT_S


def test_chronyd_gets_nts_time_while_one_address_trickles(server: Server, unhindered_s: float) -> None:
    before = server.nts()
    with Trickle(server.ke_port, ["127.0.0.2"], MAX_CONNECTIONS) as trickle:
        time.sleep(fill_time_s(1))  # before, every slot was the trickle's by now, and stayed so
        took = nts_time_after(server, "127.0.0.22")
        assert took <= bound_s(unhindered_s), (took, unhindered_s)
        assert trickle.opened > per_client_slots(MAX_CONNECTIONS)
    after = server.nts()
    assert after["evicted"] > before["evicted"]  # the trickle pushed out its own connections beyond its share
    assert after["sessions"] > before["sessions"]


def test_chronyd_gets_nts_time_while_many_addresses_trickle(server: Server, unhindered_s: float) -> None:
    before = server.nts()
    sources = [f"127.0.0.{i}" for i in range(100, 170)]
    with Trickle(server.ke_port, sources, 2) as trickle:
        time.sleep(fill_time_s(len(sources)))
        took = nts_time_after(server, "127.0.0.23")
        assert took <= bound_s(unhindered_s), (took, unhindered_s)
        assert trickle.closed_by_server > 0
    after = server.nts()
    assert after["evicted"] > before["evicted"]


def test_a_trickled_connection_is_closed_at_the_exchange_deadline(server: Server) -> None:
    """One connection, alone: closed CONNECTION_TIMEOUT_S after its accept, though a byte came every second (each
    read was bounded, the exchange was not: such a connection was held for as long as its client liked)."""
    before = server.nts()
    with socket.create_connection(("127.0.0.1", server.ke_port), timeout=1) as sock:
        start = time.monotonic()
        sock.sendall(TLS_RECORD_HEADER)
        sock.settimeout(1.0)
        closed_after = None
        while time.monotonic() - start < 3 * CONNECTION_TIMEOUT_S:
            try:
                if sock.recv(1) == b"":
                    closed_after = time.monotonic() - start
                    break
            except socket.timeout:
                sock.sendall(b"\1")
            except OSError:
                closed_after = time.monotonic() - start
                break
    assert closed_after is not None and CONNECTION_TIMEOUT_S - 0.5 <= closed_after <= 2 * CONNECTION_TIMEOUT_S
    eventually(lambda: server.nts()["timed_out"] > before["timed_out"], 10, "the timeout counted")


@pytest.mark.parametrize("alpn", [None, ["http/1.1"]])
def test_a_client_not_offering_ntske_gets_the_no_application_protocol_alert(server: Server, alpn) -> None:
    ctx = ssl.create_default_context(cafile=str(server.cert))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if alpn is not None:
        ctx.set_alpn_protocols(alpn)
    before = server.nts()
    with socket.create_connection(("127.0.0.1", server.ke_port), timeout=5) as raw:
        with pytest.raises(ssl.SSLError) as refused:
            ctx.wrap_socket(raw, server_hostname="localhost")
    assert "alert no application protocol" in str(refused.value).lower(), refused.value  # TLS alert 120
    if alpn is None:
        eventually(lambda: server.nts()["no_alpn"] > before["no_alpn"], 10, "the refusal counted")
    ctx.set_alpn_protocols(["ntske/1"])  # the same client offering ntske/1 gets in
    with socket.create_connection(("127.0.0.1", server.ke_port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.selected_alpn_protocol() == "ntske/1"


def test_the_ke_process_runs_at_idle_priority(server: Server) -> None:
    pid = server.nts()["pid"]
    tasks = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    for tid in tasks:
        idle = os.sched_getscheduler(tid) == os.SCHED_IDLE
        assert idle or os.getpriority(os.PRIO_PROCESS, tid) == 19, tid  # nice 19 where SCHED_IDLE is refused


def test_a_link_planted_at_the_cookie_key_file_is_refused_naming_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "nts").mkdir(parents=True, mode=0o700)
    os.chmod(state, 0o700)
    victim = tmp_path / "someone-elses-file"
    victim.write_text("theirs\n")
    link = state / "nts" / "cookie_keys.json"
    link.symlink_to(victim)
    app = appliance("run", "--set", f"state_dir={state}", "--set", "ntp.listen=127.0.0.1",
                    "--set", f"ntp.port={free_udp_port()}", "--set", "ntp.workers=1", "--set", "ntp.nts_enabled=true",
                    "--set", f"ntp.nts_port={free_tcp_port()}")
    try:
        app.wait(timeout=30)
    finally:
        code, err = stop(app)
    assert code != 0 and str(link) in err and "symbolic link" in err, err
    assert victim.read_text() == "theirs\n"
