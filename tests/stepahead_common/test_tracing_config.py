"""TracingConfig from the OTEL_* environment: off by default, on only with an exporter configured."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stepahead_common.tracing_config import DEFAULT_STEP_TRACE_RATE, TracingConfig, load_span_exporter


def config(**environ: str) -> TracingConfig:
    return TracingConfig.from_env(environ, "svc-default")


def test_off_without_an_exporter():
    assert not config().enabled
    assert not config(OTEL_SERVICE_NAME="x", OTEL_TRACES_SAMPLER="always_on").enabled


@pytest.mark.parametrize("var", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"])
def test_an_otlp_endpoint_turns_it_on(var):
    on = config(**{var: "http://collector:4317"})
    assert on.enabled and on.exporters == ("otlp",) and on.otlp_protocol == "grpc"


def test_named_exporters():
    assert config(OTEL_TRACES_EXPORTER="console").exporters == ("console",)
    assert config(OTEL_TRACES_EXPORTER="otlp, console").exporters == ("otlp", "console")
    assert not config(OTEL_TRACES_EXPORTER="none", OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4317").enabled


def test_sdk_disabled_wins():
    assert not config(OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4317", OTEL_SDK_DISABLED="true").enabled
    assert config(OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4317", OTEL_SDK_DISABLED="false").enabled


def test_service_name_and_step_rate():
    assert config().service_name == "svc-default"
    assert config(OTEL_SERVICE_NAME="mine").service_name == "mine"
    assert config().step_trace_rate == DEFAULT_STEP_TRACE_RATE
    assert config(STEPAHEAD_STEP_TRACE_RATE="1").step_trace_rate == 1.0


@pytest.mark.parametrize(
    "environ, field",
    [
        ({"STEPAHEAD_STEP_TRACE_RATE": "1.5"}, "STEPAHEAD_STEP_TRACE_RATE"),
        ({"STEPAHEAD_STEP_TRACE_RATE": "often"}, "STEPAHEAD_STEP_TRACE_RATE"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
    ],
)
def test_bad_values_name_the_variable(environ, field):
    with pytest.raises(ValueError, match=field):
        TracingConfig.from_env(environ, "svc")


def test_unknown_exporter_names_the_variable():
    with pytest.raises(ValueError, match="OTEL_TRACES_EXPORTER"):
        load_span_exporter("no-such-exporter")


def test_off_loads_no_sdk():
    """With tracing off neither service imports the OpenTelemetry SDK (no cost when off)."""
    check = (
        "import os, sys\n"
        "from scheduler_svc.tracing import SchedulerTracing\n"
        "from executor_svc.tracing import ExecutorTracing\n"
        "s = SchedulerTracing.from_env(os.environ); e = ExecutorTracing.from_env(os.environ)\n"
        "assert not s.enabled and not e.enabled and s.server_interceptors() == []\n"
        "heavy = ('opentelemetry.sdk', 'opentelemetry.exporter', 'opentelemetry.instrumentation')\n"
        "assert not [m for m in sys.modules if m.startswith(heavy)]\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr


def test_the_provider_names_the_service_and_its_version():
    from importlib.metadata import version

    from stepahead_common.tracing_config import build_tracer_provider

    provider = build_tracer_provider(config(OTEL_SERVICE_NAME="mine", OTEL_TRACES_EXPORTER="none"))
    try:
        attributes = provider.resource.attributes
        assert (attributes["service.name"], attributes["service.version"]) == ("mine", version("stepahead"))
    finally:
        provider.shutdown()
