"""Real authentication servers for the external-login tests: FreeRADIUS and OpenLDAP's slapd, each in its own
directory, on loopback, on free ports, always stopped; a throwaway CA and server certificate for LDAPS/StartTLS.

The servers come from Debian's packages (freeradius, slapd, ldap-utils); ``harness.peers.require`` fails a test
whose server is missing under CI=true.  Nothing here touches the system's own configuration or services.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


from harness import pki
from harness.peers import require, run
from harness.pki import Pki

START_TIMEOUT_S = 20.0
BASE_DN = "dc=example,dc=org"
ROOT_DN = f"cn=admin,{BASE_DN}"
ROOT_PASSWORD = "root-pw-not-for-logins"


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(path: Path, text: str, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"{what} did not start:\n{path.read_text(errors='replace')[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# --- FreeRADIUS ----------------------------------------------------------------------------------------------------

_RADIUSD_CONF = """
prefix = /usr
exec_prefix = /usr
sysconfdir = /etc
localstatedir = /var
sbindir = /usr/sbin
logdir = {dir}
raddbdir = {dir}
radacctdir = {dir}
name = freeradius
confdir = {dir}
modconfdir = {dir}
run_dir = {dir}
db_dir = {dir}
libdir = /usr/lib/freeradius
dictdir = /usr/share/freeradius
pidfile = {dir}/radiusd.pid
max_request_time = 5
cleanup_delay = 1
max_requests = 64
hostname_lookups = no
log {{
    destination = stdout
    auth = yes
}}
security {{
    allow_core_dumps = no
    max_attributes = 200
    reject_delay = 0
    status_server = no
}}
thread pool {{
    start_servers = 1
    max_servers = 2
    min_spare_servers = 1
    max_spare_servers = 2
}}
client local {{
    ipaddr = 127.0.0.1
    secret = {secret}
    require_message_authenticator = yes
}}
modules {{
    files {{
        filename = {dir}/users
    }}
    pap {{
    }}
}}
server default {{
    listen {{
        type = auth
        ipaddr = 127.0.0.1
        port = {port}
    }}
    authorize {{
        files
        pap
    }}
    authenticate {{
        Auth-Type PAP {{
            pap
        }}
    }}
    # FreeRADIUS before 3.2.5 signs its answers with a Message-Authenticator only when told to (the BlastRADIUS
    # advice for those versions); the appliance refuses answers without one.
    post-auth {{
        update reply {{
            Message-Authenticator := 0x00
        }}
        Post-Auth-Type REJECT {{
            update reply {{
                Message-Authenticator := 0x00
            }}
        }}
    }}
}}
"""


@dataclass
class Radius:
    port: int
    secret: str
    log: Path


@contextlib.contextmanager
def freeradius(workdir: Path, secret: str, users: str) -> Iterator[Radius]:
    """FreeRADIUS answering on 127.0.0.1 (a free port) to a client with ``secret``, users from ``users`` (the
    ``files`` module's format)."""
    binary = require("freeradius")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port(socket.SOCK_DGRAM)
    (workdir / "radiusd.conf").write_text(_RADIUSD_CONF.format(dir=workdir, port=port, secret=secret))
    (workdir / "users").write_text(users)
    log = workdir / "radiusd.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([binary, "-f", "-l", "stdout", "-xx", "-d", str(workdir)], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        _wait_for(log, "Ready to process requests", proc, "freeradius")
        yield Radius(port, secret, log)
    finally:
        _stop(proc)


# --- a CA and a server certificate ---------------------------------------------------------------------------------

def make_pki(workdir: Path, name: str = "ca") -> Pki:
    """A throwaway CA and a certificate it signs for 127.0.0.1 (and localhost): ``ca``, ``server_cert``,
    ``server_key``."""
    return pki.make_pki(workdir, name)


# --- slapd ---------------------------------------------------------------------------------------------------------

_SLAPD_CONF = """
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {dir}/slapd.pid
TLSCACertificateFile {ca}
TLSCertificateFile {cert}
TLSCertificateKeyFile {key}
database mdb
maxsize 10485760
suffix "{base}"
rootdn "{root}"
rootpw {rootpw}
directory {dir}/db
access to attrs=userPassword by self read by anonymous auth by * none
access to * by users read by * none
"""


@dataclass
class Ldap:
    port: int  # ldap:// (StartTLS)
    tls_port: int  # ldaps://
    pki: Pki


@contextlib.contextmanager
def slapd(workdir: Path, ldif: str) -> Iterator[Ldap]:
    """slapd on 127.0.0.1 (ldap:// and ldaps:// on free ports) with the directory ``ldif`` loaded by ldapadd."""
    binary = require("slapd")
    ldapadd = require("ldapadd")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "db").mkdir(exist_ok=True)
    pki = make_pki(workdir / "pki")
    port, tls_port = free_port(), free_port()
    conf = workdir / "slapd.conf"
    conf.write_text(_SLAPD_CONF.format(dir=workdir, ca=pki.ca, cert=pki.server_cert, key=pki.server_key, base=BASE_DN,
                                       root=ROOT_DN, rootpw=ROOT_PASSWORD))
    log = workdir / "slapd.log"
    urls = f"ldap://127.0.0.1:{port}/ ldaps://127.0.0.1:{tls_port}/"
    with open(log, "w") as out:
        proc = subprocess.Popen([binary, "-d", "256", "-h", urls, "-f", str(conf)], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        _wait_for(log, "slapd starting", proc, "slapd")
        (workdir / "dit.ldif").write_text(ldif)
        run(ldapadd, "-x", "-H", f"ldap://127.0.0.1:{port}/", "-D", ROOT_DN, "-w", ROOT_PASSWORD,
            "-f", str(workdir / "dit.ldif"), timeout=20)
        yield Ldap(port, tls_port, pki)
    finally:
        _stop(proc)
