"""One real forward before the executor reports ready, so the first request pays no start-up cost."""

from __future__ import annotations

from executor_svc.model_runner import ModelRunner
from stepahead_proto import executor_pb2, sampling_pb2

WARMUP_REQUEST_ID = "__warmup__"


def warm_up(runner: ModelRunner, num_prompt_tokens: int = 8) -> None:
    """Prefill a short dummy prompt and decode one token through the normal step path, then forget it."""
    num_blocks = -(-(num_prompt_tokens + 1) // runner.block_size)
    prefill = executor_pb2.StepRequest(
        step_id=0,
        new_requests=[
            executor_pb2.NewRequestData(
                request_id=WARMUP_REQUEST_ID,
                prompt_token_ids=[0] * num_prompt_tokens,
                sampling=sampling_pb2.SamplingParams(temperature=0.0),
                block_ids=list(range(num_blocks)),
                num_scheduled_tokens=num_prompt_tokens,
            )
        ],
    )
    decode = executor_pb2.StepRequest(
        step_id=1,
        cached_requests=[
            executor_pb2.CachedRequestData(
                request_id=WARMUP_REQUEST_ID, num_computed_tokens=num_prompt_tokens, num_scheduled_tokens=1
            )
        ],
    )
    # Both launched before either completes: with deferred read-back the decode takes its input
    # from the device, so start-up exercises that path too.
    launched = [runner.launch(prefill), runner.launch(decode)]
    for step in launched:
        runner.complete(step)
    runner.reset()
