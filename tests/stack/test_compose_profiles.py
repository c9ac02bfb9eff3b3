"""The compose scale-out profiles run as local processes with exactly their compose commands and
environment (as test_compose_commands.py does for the default services): `--profile tp2` (one executor of
two tensor-parallel ranks) and `--profile groups` (two executor groups behind the scheduler, listed in
STEPAHEAD_EXECUTOR) serve generations and pass their compose health checks."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from compose_services import OtlpSink, compose_stack_running, logs
from test_metrics_and_health import scrape

from client import Client

pytestmark = pytest.mark.stack

PROFILES = {"tp2": ("executor-tp2",), "groups": ("executor", "executor-b")}


@pytest.fixture(scope="module")
def otlp_sink():
    sink = OtlpSink().start()
    yield sink
    sink.stop()


@pytest.mark.parametrize("profile", list(PROFILES))
def test_the_scale_out_profile_serves(profile, tiny_model_dir, otlp_sink, tmp_path):
    shell = {"STEPAHEAD_MODEL": str(tiny_model_dir), "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_sink.endpoint}
    with compose_stack_running(shell, str(tmp_path), executors=PROFILES[profile]) as services:
        *executors, scheduler = services
        assert scheduler.env["STEPAHEAD_EXECUTOR"].split() == [executor.address for executor in executors]
        with Client(scheduler.address) as client, ThreadPoolExecutor(8) as pool:
            results = list(pool.map(
                lambda index: client.generate(token_ids=[5 + index, 6, 7], max_tokens=12, ignore_eos=True,
                                              temperature=0.0),
                range(8)))
        assert all(len(result.token_ids) == 12 for result in results), logs(*services)
        for service in services:
            done = subprocess.run(service.health_check_argv(), env=service.env, capture_output=True, text=True,
                                  timeout=120)
            assert done.stdout.strip() == "SERVING", f"{done.stdout}{done.stderr}\n{logs(service)}"
        if profile == "tp2":
            (rank0,) = executors
            assert len(psutil.Process(rank0.process.process.pid).children()) == 1, logs(rank0)  # rank 1
        else:
            samples = scrape(scheduler.metrics_address())
            for executor in executors:
                assert samples[f'stepahead_scheduler_group_steps_total{{group="{executor.address}"}}'] > 0
