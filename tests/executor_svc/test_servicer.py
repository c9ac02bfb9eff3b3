"""The Execute stream over a real runner: with deferred read-back, steps streamed in before earlier
results are written launch ahead (their inputs read on the device), and every result matches
one-step-at-a-time execution, in order."""

from __future__ import annotations

import threading

import pytest
from step_plans import BATCHES, outputs_of, plan_steps, requests_plain
from tiny_models import make_tiny_llama

from executor_svc.compute_loop import ComputeLoop
from executor_svc.config import ExecutorConfig
from executor_svc.metrics import ExecutorMetrics
from executor_svc.server import build_runner
from executor_svc.servicer import ExecutorServicer
from stepahead_proto import executor_pb2


class FakeContext:
    def cancel(self):
        pass

    def abort(self, code, details):
        raise AssertionError(f"aborted: {code} {details}")


def stream(runner, steps) -> tuple[list[executor_pb2.StepResult], ExecutorMetrics]:
    """Runs the steps through ExecutorServicer.Execute with the compute loop on a thread of its own."""
    compute = ComputeLoop()
    worker = threading.Thread(target=compute.run_forever, daemon=True)
    worker.start()
    metrics = ExecutorMetrics()
    servicer = ExecutorServicer(compute, metrics)
    servicer.set_ready(runner, executor_pb2.ExecutorDescription())
    try:
        results = list(servicer.Execute(iter(steps), FakeContext()))
    finally:
        compute.stop()
        worker.join(timeout=10)
    return results, metrics


@pytest.mark.parametrize("defer", [False, True])
def test_streamed_results_match_one_step_at_a_time(tmp_path, defer):
    model_dir = make_tiny_llama(tmp_path / "model", seed=3)
    steps = plan_steps(requests_plain(), BATCHES)
    reference, _ = build_runner(ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40))
    expected = [outputs_of(reference.execute(step)) for step in steps]
    runner, _ = build_runner(ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40, defer_token_readback=defer))
    results, metrics = stream(runner, steps)
    assert [r.step_id for r in results] == [s.step_id for s in steps]
    assert [outputs_of(r) for r in results] == expected
    device_inputs = sum(r.num_device_input_ids for r in results)
    assert metrics.registry.get_sample_value("stepahead_executor_device_input_ids_total") == device_inputs
    # All steps are queued at once, so a deferring executor launches ahead whenever it can.
    assert (device_inputs > 0) == defer
    assert all(r.compute_end_s >= r.compute_start_s for r in results)
    # Each result says when its step was read off the stream: in order, and before the step started.
    received = [r.received_s for r in results]
    assert received == sorted(received) and all(0 < r.received_s <= r.compute_start_s for r in results)
