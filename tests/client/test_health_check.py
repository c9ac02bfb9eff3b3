"""`stepahead health`: one grpc.health.v1 Check; exit 0 only on SERVING."""

from __future__ import annotations

import socket
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from client import cli
from client.health_check import health_status

READY = "stepahead.v1.Executor"


@pytest.fixture
def health_server():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(grace=None)


def exit_code(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["health", *argv])
    return exit_info.value.code, capsys.readouterr().out.strip()


def test_status_follows_the_server(health_server, capsys):
    address, servicer = health_server
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    servicer.set(READY, health_pb2.HealthCheckResponse.NOT_SERVING)
    assert exit_code(capsys, address) == (0, "SERVING")
    assert exit_code(capsys, address, "--service", READY) == (1, "NOT_SERVING")
    servicer.set(READY, health_pb2.HealthCheckResponse.SERVING)
    assert exit_code(capsys, address, "--service", READY) == (0, "SERVING")


def test_unknown_service_and_no_server_fail(health_server, capsys):
    address, _ = health_server
    assert exit_code(capsys, address, "--service", "nope") == (1, "NOT_FOUND")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]  # closed again below: nothing listens there
    assert health_status(f"127.0.0.1:{closed_port}", timeout_s=1.0) in ("UNAVAILABLE", "DEADLINE_EXCEEDED")


@pytest.mark.parametrize("flags, message", [
    (["--tls-ca", "{dir}/missing.pem"], "error: tls_ca: cannot read '{dir}/missing.pem' (No such file or directory)"),
    (["--tls-ca", "{dir}/plain.txt"], "error: tls_ca: '{dir}/plain.txt' is not a PEM file"),
    (["--tls-cert", "{dir}/plain.txt"], "error: tls_key: required with tls_cert"),
])
def test_an_unreadable_tls_file_names_its_option_and_exits_2(flags, message, tmp_path, capsys):
    (tmp_path / "plain.txt").write_text("not a certificate\n")
    argv = ["health", "127.0.0.1:1", *[flag.format(dir=tmp_path) for flag in flags]]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert message.format(dir=tmp_path) in capsys.readouterr().err
