"""`stepahead make-certs`: a throwaway CA and the certificates a local or compose stack needs.

Written with the ``cryptography`` package (no openssl binary), ECDSA P-256 keys:

- ``ca.pem`` / ``ca-key.pem``: the certificate authority (trust ``ca.pem`` in clients);
- ``server.pem`` / ``server-key.pem``: for the public APIs and the executor, valid for localhost,
  127.0.0.1 and ::1 plus any extra names (``--san scheduler --san executor`` for compose);
- ``client.pem`` / ``client-key.pem``: the scheduler's certificate for mutual TLS with the executor.

For tests and local use: anyone holding ``ca-key.pem`` can mint certificates this CA vouches for.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_NAMES = ("localhost", "127.0.0.1", "::1")
PrivateKey = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class CertificateSet:
    """Paths of the files make_certs wrote."""

    ca: Path
    ca_key: Path
    server: Path
    server_key: Path
    client: Path
    client_key: Path


def make_certs(
    out: Path, extra_names: Sequence[str] = (), days: int = 365, common_name: str = "stepahead"
) -> CertificateSet:
    """Write a fresh CA, a server and a client certificate into ``out`` (created if missing)."""
    if days < 1:
        raise ValueError(f"days: must be >= 1, got {days}")
    names = _subject_alt_names([*DEFAULT_NAMES, *extra_names])
    out.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name} throwaway CA")])
    ca = _builder(ca_name, ca_name, ca_key, days).add_extension(
        x509.BasicConstraints(ca=True, path_length=0), critical=True
    ).add_extension(
        x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                      key_encipherment=False, data_encipherment=False, key_agreement=False,
                      encipher_only=False, decipher_only=False), critical=True,
    ).sign(ca_key, hashes.SHA256())
    server_key, server = _leaf(ca, ca_key, f"{common_name} server", days, ExtendedKeyUsageOID.SERVER_AUTH, names)
    client_key, client = _leaf(ca, ca_key, f"{common_name} scheduler", days, ExtendedKeyUsageOID.CLIENT_AUTH, None)
    paths = CertificateSet(out / "ca.pem", out / "ca-key.pem", out / "server.pem", out / "server-key.pem",
                           out / "client.pem", out / "client-key.pem")
    for cert_path, key_path, cert, key in ((paths.ca, paths.ca_key, ca, ca_key),
                                           (paths.server, paths.server_key, server, server_key),
                                           (paths.client, paths.client_key, client, client_key)):
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_private(key_path, key)
    return paths


def _subject_alt_names(names: Sequence[str]) -> list[x509.GeneralName]:
    found: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        if not name:
            raise ValueError("san: a name must not be empty")
        try:
            found.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            found.append(x509.DNSName(name))
    return found


def _builder(subject: x509.Name, issuer: x509.Name, key: PrivateKey, days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _leaf(
    ca: x509.Certificate,
    ca_key: PrivateKey,
    common_name: str,
    days: int,
    usage: x509.ObjectIdentifier,
    names: list[x509.GeneralName] | None,
) -> tuple[PrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = _builder(subject, ca.subject, key, days).add_extension(
        x509.BasicConstraints(ca=False, path_length=None), critical=True
    ).add_extension(x509.ExtendedKeyUsage([usage]), critical=False).add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _write_private(path: Path, key: PrivateKey) -> None:
    """The key in PKCS#8 PEM, readable by its owner only."""
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    os.chmod(path, 0o600)
