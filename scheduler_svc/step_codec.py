"""Writes a SchedulerOutput as the StepRequest the executor reads."""

from __future__ import annotations

from scheduler_svc.reasoning.thinking_bounds import ThinkingBounds
from scheduler_svc.request import Request
from scheduler_svc.scheduler_output import SchedulerOutput
from stepahead_proto import executor_pb2


def stop_conditions(request: Request, max_model_len: int) -> executor_pb2.StopConditions:
    """The request's stop rules the executor applies inside a multi-step batch (not stop strings)."""
    params = request.stop_params
    stop_ids = set(params.stop_token_ids) | (set() if params.ignore_eos else set(params.eos_token_ids))
    return executor_pb2.StopConditions(
        max_tokens=params.max_tokens,
        min_tokens=params.min_tokens,
        stop_token_ids=sorted(stop_ids),
        max_model_len=max_model_len,
    )


def to_step_request(output: SchedulerOutput, max_model_len: int = 0) -> executor_pb2.StepRequest:
    """Encode one step: new requests in full, cached ones as deltas, finished ids to drop."""
    step = executor_pb2.StepRequest(
        step_id=output.step_id, num_steps=output.num_steps, finished_request_ids=output.finished_request_ids
    )
    for scheduled in output.new_requests:
        request = scheduled.request
        step.new_requests.append(
            executor_pb2.NewRequestData(
                request_id=request.request_id,
                prompt_token_ids=request.prompt_token_ids,
                output_token_ids=request.output_token_ids,
                sampling=request.sampling,
                block_ids=scheduled.block_ids,
                num_computed_tokens=scheduled.num_computed_tokens,
                num_scheduled_tokens=scheduled.num_scheduled_tokens,
                num_spec_tokens=scheduled.num_spec_tokens,
                stop=stop_conditions(request, max_model_len),
                bad_words=[executor_pb2.TokenSequence(ids=words) for words in request.bad_words],
                lora_adapter=request.lora_adapter,
                format_after_thinking=_format_after_thinking(request.format_after_thinking),
                prediction_token_ids=request.prediction_token_ids,
            )
        )
    for cached in output.cached_requests:
        step.cached_requests.append(
            executor_pb2.CachedRequestData(
                request_id=cached.request_id,
                new_block_ids=cached.new_block_ids,
                num_computed_tokens=cached.num_computed_tokens,
                num_scheduled_tokens=cached.num_scheduled_tokens,
                num_draft_tokens=cached.num_draft_tokens,
                num_spec_tokens=cached.num_spec_tokens,
            )
        )
    return step


def _format_after_thinking(bounds: ThinkingBounds | None) -> executor_pb2.FormatAfterThinking | None:
    if bounds is None:
        return None
    return executor_pb2.FormatAfterThinking(end_token_ids=bounds.end_token_ids,
                                            opener_token_ids=bounds.opener_token_ids,
                                            header_end_token_id=bounds.header_end_token_id)
