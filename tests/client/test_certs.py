"""`stepahead make-certs`: a CA, a server certificate for the local names (and extra ones), a client one."""

from __future__ import annotations

import ipaddress
import stat

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from client import cli
from client.certs import make_certs


def load(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_certificates_chain_to_the_ca_with_the_right_names_and_usages(tmp_path):
    paths = make_certs(tmp_path / "out", ["scheduler", "10.0.0.7"], days=2)
    ca, server, client = load(paths.ca), load(paths.server), load(paths.client)
    for leaf in (server, client):
        leaf.verify_directly_issued_by(ca)
        assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {"localhost", "scheduler"}
    assert set(names.get_values_for_type(x509.IPAddress)) == {ipaddress.ip_address(a) for a in
                                                              ("127.0.0.1", "::1", "10.0.0.7")}
    assert ExtendedKeyUsageOID.SERVER_AUTH in server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    for key in (paths.ca_key, paths.server_key, paths.client_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_bad_arguments_name_the_option(tmp_path):
    with pytest.raises(ValueError, match="^days:"):
        make_certs(tmp_path, days=0)
    with pytest.raises(ValueError, match="^san:"):
        make_certs(tmp_path, [""])


def test_cli_writes_the_set(tmp_path, capsys):
    cli.main(["make-certs", "--out", str(tmp_path), "--san", "executor"])
    assert {p.name for p in tmp_path.iterdir()} == {"ca.pem", "ca-key.pem", "server.pem", "server-key.pem",
                                                    "client.pem", "client-key.pem"}
    assert "ca.pem" in capsys.readouterr().out
