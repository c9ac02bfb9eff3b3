"""TLS files and gRPC credentials: mutual TLS lets in only clients with a certificate the client CA signed."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from client.certs import make_certs
from stepahead_common.tls import channel_credentials, check_pair, check_pem_file, server_credentials


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def other_certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("other"))


def test_pem_checks_name_the_field(tmp_path, certs):
    check_pem_file(None, "x")
    check_pem_file(str(certs.ca), "x")
    (tmp_path / "plain.txt").write_text("not a certificate")
    for path, reason in ((str(tmp_path / "absent.pem"), "cannot read"), (str(tmp_path), "cannot read"),
                         (str(tmp_path / "plain.txt"), "not a PEM"), ("", "empty")):
        with pytest.raises(ValueError, match=rf"^tls_cert: .*{reason}"):
            check_pem_file(path, "tls_cert")
    with pytest.raises(ValueError, match="^tls_key: required with tls_cert"):
        check_pair(str(certs.server), None, "tls_cert", "tls_key")
    with pytest.raises(ValueError, match="^tls_cert: required with tls_key"):
        check_pair(None, str(certs.server_key), "tls_cert", "tls_key")


@pytest.fixture(scope="module")
def mtls_server(certs):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_secure_port("127.0.0.1:0", server_credentials(str(certs.server), str(certs.server_key),
                                                                     str(certs.ca)))
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)


def check(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    channel = grpc.insecure_channel(address) if credentials is None else grpc.secure_channel(address, credentials)
    with channel:
        try:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.RpcError as error:
            return error.code()
    return grpc.StatusCode.OK


def test_mutual_tls_admits_only_certificates_of_the_client_ca(mtls_server, certs, other_certs):
    assert check(mtls_server, channel_credentials(str(certs.ca), str(certs.client), str(certs.client_key))) \
        == grpc.StatusCode.OK
    refused = [
        None,  # plaintext
        channel_credentials(str(certs.ca)),  # TLS without a client certificate
        channel_credentials(str(certs.ca), str(other_certs.client), str(other_certs.client_key)),  # untrusted CA
        channel_credentials(str(other_certs.ca), str(certs.client), str(certs.client_key)),  # server not trusted
    ]
    for credentials in refused:
        assert check(mtls_server, credentials) == grpc.StatusCode.UNAVAILABLE
