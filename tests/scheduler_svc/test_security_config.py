"""SchedulerServiceConfig's HTTP, TLS and API-key fields: every bad value is a ValueError naming its field."""

from __future__ import annotations

import pytest

from client.certs import make_certs
from scheduler_svc.config import SchedulerServiceConfig


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def config(**fields) -> SchedulerServiceConfig:
    return SchedulerServiceConfig(model_dir="m", executor_addresses=("127.0.0.1:1",), **fields)


def test_a_complete_secure_config(certs, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("from-file\n")
    secure = config(http_port=0, tls_cert=str(certs.server), tls_key=str(certs.server_key), api_keys=("k",),
                    api_key_file=str(keys), executor_tls_ca=str(certs.ca), executor_tls_cert=str(certs.client),
                    executor_tls_key=str(certs.client_key))
    assert secure.tls_enabled and secure.executor_tls_enabled
    assert secure.load_api_keys() == {"k", "from-file"}
    assert "'k'" not in repr(secure)
    assert not config().tls_enabled and not config().executor_tls_enabled and config().load_api_keys() == set()


def test_bad_values_name_their_field(certs, tmp_path):
    empty_keys = tmp_path / "empty"
    empty_keys.write_text("# nothing\n\n")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    cases = [
        (dict(tls_cert=str(certs.server)), "tls_key"),
        (dict(tls_key=str(certs.server_key)), "tls_cert"),
        (dict(tls_cert=str(tmp_path / "missing.pem"), tls_key=str(certs.server_key)), "tls_cert"),
        (dict(tls_cert=str(not_pem), tls_key=str(certs.server_key)), "tls_cert"),
        (dict(executor_tls_cert=str(certs.client)), "executor_tls_key"),
        (dict(executor_tls_ca=str(tmp_path)), "executor_tls_ca"),
        (dict(api_key_file=str(empty_keys)), "api_key_file"),
        (dict(api_key_file=str(tmp_path / "none")), "api_key_file"),
        (dict(api_keys=("",)), "api_keys[0]"),
        (dict(api_keys=("a b",)), "api_keys[0]"),
        (dict(http_port=70000), "http_port"),
        (dict(http_port=50051), "http_port"),
        (dict(http_port=9400, metrics_port=9400), "http_port"),
    ]
    for fields, name in cases:
        with pytest.raises(ValueError) as caught:
            config(**fields)
        assert str(caught.value).startswith(f"{name}: "), (fields, str(caught.value))
