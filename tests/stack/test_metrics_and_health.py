"""/metrics on both services under load, and liveness/readiness through real processes."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import grpc
import pytest
from cpu_share import executor_threads
from grpc_health.v1 import health_pb2, health_pb2_grpc

from client import Client, InvalidArgumentError
from client.launcher import ServiceProcess, wait_until_serving
from client.stack import EXECUTOR_BOUND, SCHEDULER_LISTENING
from scheduler_svc.readiness import EXECUTOR_SERVICE, GENERATION_SERVICE

pytestmark = pytest.mark.stack

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
NUM_REQUESTS = 8


def metrics_address(log: str, service: str) -> str:
    match = re.search(rf"{service} metrics on (\S+)", log)
    assert match, f"no metrics line in the {service} log:\n{log}"
    return match.group(1)


def scrape(address: str) -> dict[str, float]:
    """Every sample of a /metrics page, keyed by its name with labels as printed."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, number = line.rpartition(" ")
            samples[name] = float(number)
    return samples


def health_status(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2).status


def seconds_until_status(address: str, service: str, wanted: int, limit_s: float) -> float:
    """Poll readiness until it reads ``wanted``; fails after ``limit_s`` seconds."""
    start = time.monotonic()
    while True:
        try:
            status = health_status(address, service)
        except grpc.RpcError as error:
            status = error.code()
        elapsed = time.monotonic() - start
        if status == wanted:
            return elapsed
        assert elapsed < limit_s, f"{service or 'liveness'} still {status} after {elapsed:.1f} s"
        time.sleep(0.05)


class MeteredStack:
    """Executor then scheduler as processes, with what the executor's health said right after binding."""

    def __init__(self, model_dir: str) -> None:
        self.model_dir = model_dir
        self.executor = ServiceProcess(
            "executor",
            ServiceProcess.cli_argv("executor", "--model", model_dir, "--port", "0",
                                    "--num-threads", executor_threads(),
                                    "--num-kv-blocks", "10", "--metrics-port", "0"),
        )
        self.scheduler: ServiceProcess | None = None
        self.address = ""
        self.executor_address = ""
        self.status_while_loading: dict[str, int] = {}

    def start(self) -> None:
        executor_address = self.executor_address = self.executor.start(EXECUTOR_BOUND, timeout_s=300)
        # The bound line comes before the model is loaded (transformers alone takes seconds to import).
        self.status_while_loading = {
            service: health_status(executor_address, service) for service in ("", EXECUTOR_SERVICE)
        }
        self.scheduler = ServiceProcess(
            "scheduler",
            ServiceProcess.cli_argv("scheduler", "--model", self.model_dir, "--port", "0",
                                    "--executor", executor_address,
                                    "--metrics-port", "0", "--max-inflight-steps", "2"),
        )
        self.address = self.scheduler.start(SCHEDULER_LISTENING, timeout_s=300)
        wait_until_serving(self.address, timeout_s=300, service=GENERATION_SERVICE)

    def stop(self, print_logs: bool) -> None:
        if print_logs:
            print(f"--- executor ---\n{self.executor.log()}\n"
                  f"--- scheduler ---\n{self.scheduler and self.scheduler.log()}")
        if self.scheduler is not None:
            self.scheduler.stop()
        self.executor.stop()


@pytest.fixture(scope="module")
def metered_stack(tiny_model_dir, request):
    """Few KV blocks so that eight concurrent requests must preempt; /metrics on any free port."""
    stack = MeteredStack(str(tiny_model_dir))
    failed = True
    try:
        stack.start()
        yield stack
        failed = request.session.testsfailed > 0
    finally:
        stack.stop(print_logs=failed)


def test_executor_ready_only_after_model_load_and_warm_up(metered_stack):
    assert metered_stack.status_while_loading == {"": SERVING, EXECUTOR_SERVICE: NOT_SERVING}, (
        metered_stack.executor.log()
    )
    executor_address = re.search(EXECUTOR_BOUND, metered_stack.executor.log()).group(1)
    assert health_status(executor_address, EXECUTOR_SERVICE) == SERVING
    assert "executor listening on" in metered_stack.executor.log()  # printed once warm-up is done


def test_metrics_move_under_load_and_settle(metered_stack):
    scheduler = metrics_address(metered_stack.scheduler.log(), "scheduler")
    executor = metrics_address(metered_stack.executor.log(), "executor")
    before = scrape(scheduler)
    with Client(metered_stack.address) as client:
        with pytest.raises(InvalidArgumentError):
            client.generate(token_ids=[5, 6, 7], max_tokens=10_000)
        with ThreadPoolExecutor(NUM_REQUESTS) as pool:
            futures = [
                pool.submit(client.generate, token_ids=[11 + i] * (30 + i), max_tokens=60, ignore_eos=True)
                for i in range(NUM_REQUESTS)
            ]
            wait(futures, return_when=FIRST_COMPLETED)
            during = scrape(scheduler)
            results = [future.result() for future in futures]
    after = scrape(scheduler)
    executor_after = scrape(executor)

    generated = sum(result.usage.completion_tokens for result in results)
    prompts = sum(result.usage.prompt_tokens for result in results)
    assert before["stepahead_scheduler_generation_tokens_total"] == 0
    assert 0 < during["stepahead_scheduler_generation_tokens_total"] <= generated
    assert after["stepahead_scheduler_generation_tokens_total"] == generated == NUM_REQUESTS * 60
    assert after["stepahead_scheduler_prompt_tokens_total"] == prompts
    for histogram in ("time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds"):
        assert after[f"stepahead_scheduler_{histogram}_count"] == NUM_REQUESTS, histogram
    assert after['stepahead_scheduler_requests_finished_total{finish_reason="length"}'] == NUM_REQUESTS
    assert after['stepahead_scheduler_requests_failed_total{code="INVALID_ARGUMENT"}'] == 1
    assert after["stepahead_scheduler_inter_token_latency_seconds_count"] > 0
    assert after["stepahead_scheduler_preemptions_total"] > 0
    assert sum(result.usage.num_preemptions for result in results) == after["stepahead_scheduler_preemptions_total"]
    assert after["stepahead_scheduler_step_time_seconds_count"] == after["stepahead_scheduler_steps_total"] > 0
    assert (
        after["stepahead_scheduler_spec_accepted_tokens_total"] <= after["stepahead_scheduler_spec_draft_tokens_total"]
    )
    assert after["stepahead_scheduler_kv_blocks_used"] == 0
    assert after["stepahead_scheduler_kv_blocks_free"] == after["stepahead_scheduler_kv_blocks_total"] == 10
    assert after["stepahead_scheduler_requests_running"] == after["stepahead_scheduler_requests_waiting"] == 0
    assert after["stepahead_scheduler_ready"] == 1

    assert executor_after["stepahead_executor_ready"] == 1
    assert executor_after["stepahead_executor_kv_blocks_total"] == 10
    assert executor_after["stepahead_executor_steps_total"] >= after["stepahead_scheduler_steps_total"] - 1
    assert executor_after["stepahead_executor_tokens_computed_total"] >= prompts  # preemptions recompute more
    assert executor_after["stepahead_executor_forward_seconds_count"] > 0


def test_stalled_executor_turns_scheduler_not_ready_and_back(metered_stack):
    address = metered_stack.address
    assert health_status(address, GENERATION_SERVICE) == SERVING
    os.kill(metered_stack.executor.process.pid, signal.SIGSTOP)
    try:
        assert seconds_until_status(address, GENERATION_SERVICE, NOT_SERVING, limit_s=5.0) < 5.0
        assert health_status(address, "") == SERVING  # still alive
    finally:
        os.kill(metered_stack.executor.process.pid, signal.SIGCONT)
    seconds_until_status(address, GENERATION_SERVICE, SERVING, limit_s=10.0)
    with Client(address) as client:
        assert len(client.generate(token_ids=[3, 4, 5], max_tokens=4, ignore_eos=True).token_ids) == 4


def test_killed_executor_requests_resume_on_a_restarted_one(metered_stack):
    """Runs last: it replaces the module's executor. A request running when the executor dies and one sent
    while it is down both complete once a new executor answers at the same address, token for token."""
    address = metered_stack.address
    assert health_status(address, GENERATION_SERVICE) == SERVING
    greedy = {"token_ids": [3, 4, 5], "max_tokens": 150, "ignore_eos": True, "temperature": 0.0}
    with Client(address, timeout=120) as client:
        reference = client.generate(**greedy).token_ids
        stream = client.generate_stream(**greedy)
        tokens = list(next(stream).token_ids)
        os.killpg(metered_stack.executor.process.pid, signal.SIGKILL)
        assert seconds_until_status(address, GENERATION_SERVICE, NOT_SERVING, limit_s=5.0) < 5.0
        assert health_status(address, "") == SERVING
        sent_while_down = client.generate_stream(token_ids=[3, 4, 5], max_tokens=4, ignore_eos=True)
        port = metered_stack.executor_address.rpartition(":")[2]
        metered_stack.executor = ServiceProcess(
            "executor", ServiceProcess.cli_argv("executor", "--model", metered_stack.model_dir, "--port", port,
                                                "--num-threads", executor_threads(), "--num-kv-blocks", "10"),
        )
        metered_stack.executor.start(EXECUTOR_BOUND, timeout_s=300)
        for chunk in stream:
            tokens += chunk.token_ids
        assert tokens == list(reference)  # nothing lost, nothing repeated
        assert sum(len(chunk.token_ids) for chunk in sent_while_down) == 4
        seconds_until_status(address, GENERATION_SERVICE, SERVING, limit_s=60.0)
        info = client.model_info()
        assert info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == 0
    metrics = scrape(metrics_address(metered_stack.scheduler.log(), "scheduler"))
    assert metrics["stepahead_scheduler_executor_losses_total"] == 1
    assert metrics["stepahead_scheduler_executor_recoveries_total"] == 1
