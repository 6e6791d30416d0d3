"""A throwaway PKI for tests on loopback: a CA, a server certificate for 127.0.0.1 and localhost, a client
certificate (the audit collector's TLS, LDAPS and StartTLS peers)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_pki(directory: Path, name: str = "test") -> Pki:
    """A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate, all valid for a day."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} audit collector CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))

    def leaf(common_name: str, usage: x509.ObjectIdentifier, names: list[x509.GeneralName], stem: str) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                                                       common_name)]))
                .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .sign(ca_key, hashes.SHA256()))
        (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (directory / f"{stem}.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        (directory / f"{stem}.key").chmod(0o600)

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    leaf("localhost", ExtendedKeyUsageOID.SERVER_AUTH,
         [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))], "server")
    leaf("gm1", ExtendedKeyUsageOID.CLIENT_AUTH, [x509.DNSName("gm1")], "client")
    return Pki(directory / "ca.pem", directory / "server.pem", directory / "server.key", directory / "client.pem",
               directory / "client.key")
