"""The compose file's scheduler and executor, run as local processes with exactly its commands and
environment, serve a generation, pass their compose health checks, serve /metrics and export traces
to the configured endpoint; so docker-compose.yml cannot drift from what works.

Substituted, and nothing else (tests/fixtures/compose_services.py): the bind host (127.0.0.1), the
ports (0: any free port), the cache directory, and, through the variables the compose file itself reads
from the shell, the model (STEPAHEAD_MODEL), the executor address (STEPAHEAD_EXECUTOR) and the
collector endpoint (OTEL_EXPORTER_OTLP_ENDPOINT, a local OTLP sink here). The TLS overlay:
test_compose_tls.py.
"""

from __future__ import annotations

import subprocess
import urllib.request

import pytest
from compose_services import OtlpSink, compose_stack_running, logs

from client import Client
from client.stack import SCHEDULER_HTTP

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def otlp_sink():
    sink = OtlpSink().start()
    yield sink
    sink.stop()


@pytest.fixture(scope="module")
def compose_stack(tiny_model_dir, otlp_sink, tmp_path_factory):
    shell = {"STEPAHEAD_MODEL": str(tiny_model_dir), "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_sink.endpoint}
    with compose_stack_running(shell, str(tmp_path_factory.mktemp("compose_cache"))) as services:
        yield services


def test_compose_environment_reaches_the_processes(compose_stack):
    executor, scheduler = compose_stack
    assert executor.env["STEPAHEAD_MODEL"] == scheduler.env["STEPAHEAD_MODEL"] != "default"
    assert scheduler.env["STEPAHEAD_EXECUTOR"] == executor.address
    assert executor.env["OTEL_SERVICE_NAME"] != scheduler.env["OTEL_SERVICE_NAME"]


def test_generation_runs_through_the_compose_services(compose_stack):
    executor, scheduler = compose_stack
    with Client(scheduler.address) as client:
        result = client.generate(prompt="hello compose", max_tokens=8, ignore_eos=True, temperature=0.0)
    assert len(result.token_ids) == 8 and result.finish_reason == "length", logs(executor, scheduler)


def test_the_compose_scheduler_serves_the_http_api(compose_stack):
    executor, scheduler = compose_stack
    url = scheduler.process.find(SCHEDULER_HTTP)
    assert url, logs(scheduler)
    body = b'{"prompt": "hi", "max_tokens": 3, "ignore_eos": true}'
    request = urllib.request.Request(f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200 and b'"completion_tokens":3' in response.read()


@pytest.mark.parametrize("index", [0, 1], ids=["executor", "scheduler"])
def test_compose_health_checks_pass(compose_stack, index):
    service = compose_stack[index]
    done = subprocess.run(service.health_check_argv(), env=service.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "SERVING", f"{done.stdout}{done.stderr}\n{logs(service)}"


@pytest.mark.parametrize("index", [0, 1], ids=["executor", "scheduler"])
def test_compose_metrics_ports_serve_prometheus_text(compose_stack, index):
    service = compose_stack[index]
    with urllib.request.urlopen(f"http://{service.metrics_address()}/metrics", timeout=10) as response:
        body = response.read().decode()
    assert response.status == 200 and "# TYPE" in body, logs(service)


def test_requests_are_traced_to_the_compose_collector_endpoint(compose_stack, otlp_sink):
    executor, scheduler = compose_stack
    with Client(scheduler.address) as client:
        client.generate(prompt="trace me", max_tokens=4, ignore_eos=True)
    name = scheduler.env["OTEL_SERVICE_NAME"]
    # the compose file keeps the SDK's batch delay (5 s by default): spans arrive within a few seconds
    assert otlp_sink.wait_for_service(name, timeout_s=30), (
        f"no spans from {name}: {otlp_sink.services}\n{logs(scheduler)}"
    )
