"""`stepahead serve` restarts a crashed scheduler on the ports it had (gRPC, HTTP, metrics), the executor keeping its
model, and exits 1 once --scheduler-max-restarts are used up; killed outright, it takes its scheduler and executor
with it (they watch it: stepahead_common/parent_watch.py)."""

from __future__ import annotations

import urllib.request

import psutil
import pytest
from cpu_share import executor_threads
from serve_process import serve_process, wait_for_log_line

from client import Client, UnavailableError
from client.launcher import ServiceProcess
from client.serve_supervisor import RestartLimits

pytestmark = pytest.mark.stack

SERVING = r"stepahead serving \S+ on (\S+) "
GREEDY = dict(token_ids=[5, 6, 7, 8], max_tokens=12, temperature=0.0, ignore_eos=True)


def child(serve: ServiceProcess, service: str) -> psutil.Process:
    """The serve process's one child running ``service`` (the CLI command word)."""
    (process,) = [p for p in psutil.Process(serve.process.pid).children(recursive=True) if service in p.cmdline()]
    return process


def test_a_killed_scheduler_is_restarted_on_its_ports_and_serves_the_same_tokens(tiny_model_dir):
    serve = serve_process(tiny_model_dir, "--num-threads", executor_threads(), "--http-port", "0", "--metrics-port",
                          "0", "--scheduler-max-restarts", "2")
    try:
        address = serve.start(SERVING, timeout_s=300)
        http_url = serve.find(r" and (http://\S+) ")
        metrics = serve.find(r"metrics on (\S+);")
        executor = child(serve, "executor")
        with Client(address, timeout=60) as client:
            before = client.generate(**GREEDY).token_ids
            stream = client.generate_stream(**{**GREEDY, "max_tokens": 400})
            next(stream)
            child(serve, "scheduler").kill()
            with pytest.raises(UnavailableError):
                list(stream)  # a request of the crashed scheduler ends; the client may send it again
        with Client(address, timeout=60, wait_for_server=True) as patient:
            assert patient.generate(**GREEDY).token_ids == before  # sent while it restarts: waits for it
        assert wait_for_log_line(serve, "the scheduler restarted on", timeout_s=60), serve.log()
        assert "restart 1 of 2 in 1 s" in serve.log()
        with Client(address, timeout=60) as client:
            assert client.generate(**GREEDY).token_ids == before
            info = client.model_info()
            assert info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == 0
        assert child(serve, "executor").pid == executor.pid  # the model was not loaded again
        with urllib.request.urlopen(f"{http_url}/v1/models", timeout=10) as response:
            assert response.status == 200
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as response:
            assert b"stepahead_scheduler_requests_finished_total" in response.read()
        assert serve.is_running()
    finally:
        serve.stop()


def test_serve_exits_1_when_the_scheduler_restarts_are_used_up(tiny_model_dir):
    serve = serve_process(tiny_model_dir, "--num-threads", executor_threads(), "--scheduler-max-restarts", "0")
    try:
        serve.start(SERVING, timeout_s=300)
        child(serve, "scheduler").kill()
        assert serve.process.wait(timeout=30) == 1
        assert wait_for_log_line(serve, "--scheduler-max-restarts 0 are used up", timeout_s=10)
    finally:
        serve.stop()


def test_restart_limits_are_not_negative():
    with pytest.raises(ValueError, match="--scheduler-max-restarts: must be >= 0, got -1"):
        RestartLimits(executor=5, scheduler=-1)


def test_a_killed_serve_takes_its_scheduler_and_executor_with_it(tiny_model_dir):
    serve = serve_process(tiny_model_dir, "--num-threads", executor_threads())
    services: list[psutil.Process] = []
    try:
        serve.start(SERVING, timeout_s=300)
        services = [child(serve, "executor"), child(serve, "scheduler")]
        serve.process.kill()  # SIGKILL: serve cannot stop them itself
        _, alive = psutil.wait_procs(services, timeout=20)
        assert not alive, [p.cmdline()[:4] for p in alive]
    finally:
        serve.stop()
        for service in services:  # in their own sessions: serve's process group does not hold them
            if service.is_running():
                service.kill()
