"""Shared by the in-process runner experiments: prefill a batch of greedy requests, each with its own blocks."""

from __future__ import annotations

from executor_svc.model_runner import ModelRunner
from stepahead_proto import executor_pb2, sampling_pb2

GREEDY = sampling_pb2.SamplingParams(temperature=0.0)


def prefill(runner: ModelRunner, batch: int, prompt_len: int, blocks_per_request: int) -> None:
    """Add requests r0..r{batch-1} with distinct prompts of ``prompt_len`` tokens and run their prefill."""
    step = executor_pb2.StepRequest(step_id=0)
    for i in range(batch):
        prompt = [(7 * i + j) % 1000 + 10 for j in range(prompt_len)]
        blocks = list(range(i * blocks_per_request, (i + 1) * blocks_per_request))
        step.new_requests.add(request_id=f"r{i}", prompt_token_ids=prompt, sampling=GREEDY, block_ids=blocks,
                              num_scheduled_tokens=prompt_len, stop=executor_pb2.StopConditions(max_tokens=1000))
    runner.execute(step)
