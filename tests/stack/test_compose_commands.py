"""The compose file's scheduler and executor, run as local processes with exactly its commands and
environment, serve a generation, pass their compose health checks, serve /metrics and export traces
to the configured endpoint; so docker-compose.yml cannot drift from what works.

Substituted, and nothing else: the bind host (127.0.0.1), the ports (0: any free port), the cache
directory, and, through the variables the compose file itself reads from the shell, the model
(STEPAHEAD_MODEL), the executor address (STEPAHEAD_EXECUTOR) and the collector endpoint
(OTEL_EXPORTER_OTLP_ENDPOINT, a local OTLP sink here).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import urllib.request
from concurrent import futures

import grpc
import pytest
from compose_file import load_compose, service_environment
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from client import Client
from client.launcher import ServiceProcess, wait_until_serving
from client.stack import EXECUTOR_BOUND, SCHEDULER_HTTP, SCHEDULER_LISTENING

pytestmark = pytest.mark.stack

METRICS_LINE = r"metrics on (\S+)"
SUBSTITUTED = {"STEPAHEAD_HOST": "127.0.0.1", "STEPAHEAD_PORT": "0", "STEPAHEAD_METRICS_PORT": "0"}
SUBSTITUTED_SCHEDULER = {"STEPAHEAD_HTTP_PORT": "0"}


class OtlpSink(trace_service_pb2_grpc.TraceServiceServicer):
    """The collector's stand-in: accepts OTLP trace exports and notes which services sent spans."""

    def __init__(self) -> None:
        self.endpoint = ""
        self.services: set[str] = set()
        self._changed = threading.Condition()

    def Export(self, request, context):
        names = {attribute.value.string_value for spans in request.resource_spans
                 for attribute in spans.resource.attributes if attribute.key == "service.name"}
        with self._changed:
            self.services |= names
            self._changed.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def wait_for_service(self, name: str, timeout_s: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: name in self.services, timeout_s)


@pytest.fixture(scope="module")
def otlp_sink():
    sink = OtlpSink()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    sink.endpoint = f"http://127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    yield sink
    server.stop(grace=None)


class ComposeService:
    """One compose service started locally from its compose command, environment and health check."""

    def __init__(self, name: str, compose: dict, cache_dir: str) -> None:
        self.spec = compose["services"][name]
        self.compose_env = service_environment(self.spec)
        self.env = local_environment(self.compose_env, cache_dir)
        self.process = ServiceProcess(name, ServiceProcess.cli_argv(*self.spec["command"]), self.env)
        self.address = ""

    def start(self, address_pattern: str) -> str:
        self.address = self.process.start(address_pattern, timeout_s=300)
        return self.address

    def health_check_argv(self) -> list[str]:
        """The compose health check, pointed at the local port instead of the container's."""
        kind, program, *args = self.spec["healthcheck"]["test"]
        assert (kind, program) == ("CMD", "stepahead")
        container_address = f"127.0.0.1:{self.compose_env['STEPAHEAD_PORT']}"
        assert container_address in args
        return ServiceProcess.cli_argv(*(self.address if arg == container_address else arg for arg in args))

    def metrics_address(self) -> str:
        match = re.search(METRICS_LINE, self.process.log())
        assert match, f"{self.process.name} prints no metrics address:\n{self.process.log()}"
        return match.group(1)


def local_environment(compose_env: dict[str, str], cache_dir: str) -> dict[str, str]:
    """This machine's environment without stepahead/OTel settings, then the compose file's, then the substitutions."""
    substituted = {**SUBSTITUTED, **(SUBSTITUTED_SCHEDULER if "STEPAHEAD_HTTP_PORT" in compose_env else {})}
    missing = set(substituted) - set(compose_env)
    assert not missing, f"the compose file no longer sets {missing}; update this test"
    compose_cache = compose_env["STEPAHEAD_CACHE"]
    under_cache = {key: cache_dir + value[len(compose_cache):] for key, value in compose_env.items()
                   if value.startswith(compose_cache)}
    inherited = {key: value for key, value in os.environ.items() if not key.startswith(("STEPAHEAD_", "OTEL_"))}
    return {**inherited, **compose_env, **under_cache, **substituted}


@pytest.fixture(scope="module")
def compose_stack(tiny_model_dir, otlp_sink, tmp_path_factory):
    shell = {"STEPAHEAD_MODEL": str(tiny_model_dir), "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_sink.endpoint}
    cache_dir = str(tmp_path_factory.mktemp("compose_cache"))
    executor = ComposeService("executor", load_compose(shell), cache_dir)
    started = [executor]
    try:
        executor_address = executor.start(EXECUTOR_BOUND)  # a failed start raises with the service's log
        scheduler = ComposeService(
            "scheduler", load_compose({**shell, "STEPAHEAD_EXECUTOR": executor_address}), cache_dir
        )
        started.append(scheduler)
        try:
            wait_until_serving(scheduler.start(SCHEDULER_LISTENING), timeout_s=300, service="stepahead.v1.Generation")
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{logs(*started)}") from None
        yield executor, scheduler
    finally:
        for service in reversed(started):
            service.process.stop()


def logs(*services: ComposeService) -> str:
    return "\n".join(f"--- {service.process.name} ---\n{service.process.log()}" for service in services)


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
    request = urllib.request.Request(f"{url}/v1/completions", data=b'{"prompt": "hi", "max_tokens": 3}',
                                     headers={"Content-Type": "application/json"})
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
