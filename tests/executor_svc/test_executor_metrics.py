"""Executor metrics: per-step observations, scrape-time gauges, the servicer hook and /metrics."""

from __future__ import annotations

import threading
import urllib.request

import pytest

from executor_svc.compute_loop import ComputeLoop
from executor_svc.metrics import ExecutorMetrics, tokens_computed
from executor_svc.servicer import ExecutorServicer
from stepahead_proto import executor_pb2


def value(metrics: ExecutorMetrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name)


def make_step(step_id: int, new: int = 0, cached: tuple[int, ...] = (), drafts: int = 0) -> executor_pb2.StepRequest:
    step = executor_pb2.StepRequest(step_id=step_id)
    if new:
        step.new_requests.add(request_id=f"new{step_id}", num_scheduled_tokens=new)
    for index, num in enumerate(cached):
        step.cached_requests.add(request_id=f"c{index}", num_scheduled_tokens=num, num_draft_tokens=drafts)
    return step


def make_result(
    step_id: int, start: float = 10.0, forward: float = 0.03, sample: float = 0.01
) -> executor_pb2.StepResult:
    return executor_pb2.StepResult(
        step_id=step_id,
        compute_start_s=start,
        compute_end_s=start + forward + sample,
        forward_s=forward,
        sample_s=sample,
    )


def test_tokens_computed_counts_prefill_decode_and_drafts():
    assert tokens_computed(make_step(0, new=12, cached=(1, 1), drafts=3)) == 12 + 2 * (1 + 3)
    assert tokens_computed(make_step(1)) == 0


def test_observe_step_times_and_tokens():
    metrics = ExecutorMetrics()
    metrics.observe_step(make_step(0, new=8), make_result(0, forward=0.03, sample=0.01))
    metrics.observe_step(make_step(1, cached=(1, 1)), make_result(1, forward=0.02, sample=0.02))
    assert value(metrics, "stepahead_executor_steps_total") == 2
    assert value(metrics, "stepahead_executor_tokens_computed_total") == 10
    assert value(metrics, "stepahead_executor_step_compute_seconds_sum") == pytest.approx(0.08)
    assert value(metrics, "stepahead_executor_forward_seconds_sum") == pytest.approx(0.05)
    assert value(metrics, "stepahead_executor_sample_seconds_count") == 2
    assert value(metrics, "stepahead_executor_draft_seconds_count") == 0


def test_a_step_that_only_drops_requests_is_counted_but_not_timed():
    metrics = ExecutorMetrics()
    step = make_step(0)
    step.finished_request_ids.append("gone")
    metrics.observe_step(step, executor_pb2.StepResult(step_id=0, compute_start_s=1.0, compute_end_s=1.0))
    assert value(metrics, "stepahead_executor_steps_total") == 1
    assert value(metrics, "stepahead_executor_step_compute_seconds_count") == 0


def test_runner_gauges_after_binding():
    metrics = ExecutorMetrics()
    assert value(metrics, "stepahead_executor_ready") == 0
    held = {"a": 1}
    metrics.bind_runner(lambda: len(held), num_kv_blocks=42)
    assert value(metrics, "stepahead_executor_ready") == 1
    assert value(metrics, "stepahead_executor_kv_blocks_total") == 42
    assert value(metrics, "stepahead_executor_requests_held") == 1
    held["b"] = 2
    assert value(metrics, "stepahead_executor_requests_held") == 2


class FakeRunner:
    """Answers every step with a fixed timing; counts resets."""

    defer_readback = False

    def __init__(self) -> None:
        self.requests: dict[str, object] = {}

    def execute(self, step: executor_pb2.StepRequest) -> executor_pb2.StepResult:
        return make_result(step.step_id)

    def reset(self) -> None:
        self.requests.clear()


class FakeContext:
    def cancel(self) -> None:
        pass

    def abort(self, code, details):
        raise AssertionError(f"aborted: {code} {details}")


def test_servicer_observes_every_step_it_streams():
    compute = ComputeLoop()
    worker = threading.Thread(target=compute.run_forever, daemon=True)
    worker.start()
    metrics = ExecutorMetrics()
    servicer = ExecutorServicer(compute, metrics)
    servicer.set_ready(FakeRunner(), executor_pb2.ExecutorDescription())
    steps = [make_step(0, new=5), make_step(1, cached=(1,)), make_step(2, cached=(1,))]
    try:
        results = list(servicer.Execute(iter(steps), FakeContext()))
    finally:
        compute.stop()
        worker.join(timeout=5)
    assert [r.step_id for r in results] == [0, 1, 2]
    assert value(metrics, "stepahead_executor_steps_total") == 3
    assert value(metrics, "stepahead_executor_tokens_computed_total") == 7


def test_http_endpoint_serves_the_registry():
    metrics = ExecutorMetrics()
    metrics.observe_step(make_step(0, new=3), make_result(0))
    port = metrics.serve_http("127.0.0.1", 0)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    assert "stepahead_executor_tokens_computed_total 3.0" in text
    assert "stepahead_executor_ready 0.0" in text


def test_metrics_port_is_validated():
    from executor_svc.config import ExecutorConfig

    assert ExecutorConfig(model_dir="m", metrics_port=None).metrics_port is None
    with pytest.raises(ValueError, match="metrics_port"):
        ExecutorConfig(model_dir="m", metrics_port=-1)
