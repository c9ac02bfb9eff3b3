"""docker-compose.yml with docker-compose.tls.yml over it, run as local processes with exactly the merged
commands, environment and health checks (tests/fixtures/compose_services.py): TLS on the public gRPC
API and the HTTP front, an API key, and mutual TLS from scheduler to executor. The certificates are the
ones `stepahead make-certs` writes, mounted as ./certs is in compose; the key comes from the shell, as
the overlay asks. A keyed TLS client generates; plaintext, keyless and certificate-less callers are refused.
"""

from __future__ import annotations

import ssl
import subprocess

import grpc
import httpx
import pytest
from compose_file import REPO_ROOT, load_compose
from compose_services import OtlpSink, compose_stack_running, logs

from client import Client, UnauthenticatedError, UnavailableError
from client.certs import make_certs
from client.health_check import health_status
from client.stack import SCHEDULER_HTTP

pytestmark = pytest.mark.stack

TLS_OVERLAY = REPO_ROOT / "docker-compose.tls.yml"
API_KEY = "compose-test-key"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"), extra_names=("scheduler", "executor", "executor-gpu"))


@pytest.fixture(scope="module")
def tls_compose_stack(tiny_model_dir, certs, tmp_path_factory):
    sink = OtlpSink().start()
    shell = {"STEPAHEAD_MODEL": str(tiny_model_dir), "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
             "STEPAHEAD_API_KEY": API_KEY}
    cache_dir = str(tmp_path_factory.mktemp("compose_cache"))
    credentials = grpc.ssl_channel_credentials(certs.ca.read_bytes())
    try:
        with compose_stack_running(shell, cache_dir, (TLS_OVERLAY,), {"/certs": str(certs.ca.parent)},
                                   credentials) as services:
            yield services
    finally:
        sink.stop()


def test_the_overlay_refuses_to_start_without_a_key(tiny_model_dir):
    with pytest.raises(ValueError, match="STEPAHEAD_API_KEY"):
        load_compose({"STEPAHEAD_MODEL": str(tiny_model_dir)}, (TLS_OVERLAY,))


def test_a_keyed_tls_client_generates_and_others_are_refused(tls_compose_stack, certs):
    executor, scheduler = tls_compose_stack
    assert scheduler.env["STEPAHEAD_TLS_CERT"] == str(certs.server)  # the mounted file, not /certs/...
    with Client(scheduler.address, tls_ca=str(certs.ca), api_key=API_KEY) as client:
        result = client.generate(prompt="hello compose", max_tokens=6, ignore_eos=True, temperature=0.0)
    assert len(result.token_ids) == 6, logs(executor, scheduler)
    with Client(scheduler.address, tls_ca=str(certs.ca), api_key="wrong", timeout=10) as wrong_key:
        with pytest.raises(UnauthenticatedError):
            wrong_key.generate(prompt="hi", max_tokens=2)
    with Client(scheduler.address, api_key=API_KEY, timeout=10) as plaintext:
        with pytest.raises(UnavailableError):
            plaintext.model_info()


def test_the_http_front_speaks_tls_with_the_key(tls_compose_stack, certs):
    _, scheduler = tls_compose_stack
    url = scheduler.process.find(SCHEDULER_HTTP)
    assert url and url.startswith("https://"), logs(scheduler)
    with httpx.Client(base_url=url, verify=ssl.create_default_context(cafile=str(certs.ca)), timeout=60) as http:
        body = {"prompt": "hi", "max_tokens": 3, "ignore_eos": True}
        assert http.post("/v1/completions", json=body).status_code == 401
        reply = http.post("/v1/completions", json=body, headers={"Authorization": f"Bearer {API_KEY}"})
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3


def test_the_executor_admits_only_the_schedulers_certificate(tls_compose_stack, certs):
    executor, _ = tls_compose_stack
    assert health_status(executor.address, "stepahead.v1.Executor", tls_ca=str(certs.ca)) == "UNAVAILABLE"
    assert health_status(executor.address, "stepahead.v1.Executor") == "UNAVAILABLE"


@pytest.mark.parametrize("index", [0, 1], ids=["executor", "scheduler"])
def test_the_overlay_health_checks_pass(tls_compose_stack, index):
    service = tls_compose_stack[index]
    done = subprocess.run(service.health_check_argv(), env=service.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "SERVING", f"{done.stdout}{done.stderr}\n{logs(service)}"
