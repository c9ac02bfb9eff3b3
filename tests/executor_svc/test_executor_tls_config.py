"""ExecutorConfig's TLS fields, and the flags `stepahead serve` passes the executor for them."""

from __future__ import annotations

import argparse

import pytest

from client.certs import make_certs
from executor_svc.cli_args import executor_tls_flags
from executor_svc.config import ExecutorConfig


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_tls_fields_are_validated_naming_the_field(certs, tmp_path):
    ExecutorConfig(model_dir="m", tls_cert=str(certs.server), tls_key=str(certs.server_key),
                   tls_client_ca=str(certs.ca))
    for fields, name in (
        (dict(tls_cert=str(certs.server)), "tls_key"),
        (dict(tls_key=str(certs.server_key)), "tls_cert"),
        (dict(tls_client_ca=str(certs.ca)), "tls_client_ca"),
        (dict(tls_cert=str(certs.server), tls_key=str(tmp_path / "nope")), "tls_key"),
        (dict(tls_cert=str(certs.server), tls_key=str(certs.server_key), tls_client_ca=str(tmp_path)), "tls_client_ca"),
    ):
        with pytest.raises(ValueError) as caught:
            ExecutorConfig(model_dir="m", **fields)
        assert str(caught.value).startswith(f"{name}: "), str(caught.value)


def namespace(**values) -> argparse.Namespace:
    names = ("tls_cert", "tls_key", "tls_client_ca", "executor_tls_ca", "executor_tls_cert", "executor_tls_key")
    return argparse.Namespace(**{name: values.get(name) for name in names})


def test_serve_secures_the_executor_only_with_the_hop():
    assert executor_tls_flags(namespace(tls_cert="s.pem", tls_key="k.pem")) == []  # public TLS only
    assert executor_tls_flags(namespace(tls_cert="s.pem", tls_key="k.pem", executor_tls_ca="ca.pem")) == [
        "--tls-cert", "s.pem", "--tls-key", "k.pem"]
    assert executor_tls_flags(namespace(tls_cert="s.pem", tls_key="k.pem", executor_tls_ca="ca.pem",
                                        tls_client_ca="ca.pem"))[-2:] == ["--tls-client-ca", "ca.pem"]
    with pytest.raises(ValueError, match="^tls_cert:"):
        executor_tls_flags(namespace(executor_tls_ca="ca.pem"))
