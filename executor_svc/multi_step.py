"""Multi-step decode on the executor: the sub-steps of one StepRequest with ``num_steps > 1``.

Sub-step 0 is the StepRequest as sent. Every later sub-step is planned here, from the requests' host
state after the previous one (no scheduler round trip): each live request decodes one token, verifies
the drafts proposed after the previous sub-step, and proposes the next ones. A request that meets one
of its stop conditions (a stop token id, EOS, max_tokens, the length limit) is stopped: it takes no
part in later sub-steps or steps, and its output says ``finished``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from executor_svc.request_state import ExecutorRequestState
from stepahead_proto import executor_pb2


class MultiStepError(ValueError):
    """A StepRequest asks for several sub-steps but is not a pure decode step."""


def check_pure_decode(step: executor_pb2.StepRequest) -> None:
    """Several sub-steps need every request cached and decoding one token."""
    if step.new_requests:
        raise MultiStepError(f"num_steps: {step.num_steps} with new_requests (only pure decode steps may repeat)")
    for cached in step.cached_requests:
        if cached.num_scheduled_tokens != 1:
            raise MultiStepError(
                f"num_steps: {step.num_steps} but cached_requests {cached.request_id!r} has "
                f"num_scheduled_tokens {cached.num_scheduled_tokens} (must be 1)"
            )


def mark_stops(result: executor_pb2.StepResult, requests: dict[str, ExecutorRequestState]) -> None:
    """Stop every request whose tokens of this sub-step meet a stop condition; flag its output."""
    for output in result.outputs:
        state = requests.get(output.request_id)
        if state is None or state.stop is None or not output.token_ids:
            continue
        base_output = state.num_output_tokens - len(output.token_ids)
        base_tokens = state.num_tokens - len(output.token_ids)
        for index, token_id in enumerate(output.token_ids, start=1):
            if state.stop.ends_at(base_output + index, base_tokens + index, token_id):
                state.stopped = True
                output.finished = True
                break


@dataclass
class MultiStepBatch:
    """The requests of one multi-step StepRequest and the drafts each asks for per sub-step."""

    step: executor_pb2.StepRequest
    num_spec: dict[str, int] = field(default_factory=dict)
    """K per request, as sent in sub-step 0."""
    last_spec: dict[str, int] = field(default_factory=dict)
    """Drafts each request was asked to propose in the previous sub-step (what the next verifies)."""

    @classmethod
    def start(cls, step: executor_pb2.StepRequest) -> MultiStepBatch:
        spec = {cached.request_id: cached.num_spec_tokens for cached in step.cached_requests}
        return cls(step, spec, dict(spec))

    def next_request(
        self, sub_step: int, requests: dict[str, ExecutorRequestState], block_size: int
    ) -> executor_pb2.StepRequest:
        """Sub-step ``sub_step`` (>= 1) for the requests still live, from their host state."""
        next_step = executor_pb2.StepRequest(step_id=self.step.step_id, num_steps=1)
        next_step.trace_context.update(self.step.trace_context)
        for request_id, k in self.num_spec.items():
            state = requests.get(request_id)
            if state is None or state.stopped:
                continue
            room = _room(state, block_size)
            num_drafts = max(0, min(self.last_spec[request_id], room))
            num_spec = max(0, min(k, room - num_drafts))
            self.last_spec[request_id] = num_spec
            next_step.cached_requests.add(
                request_id=request_id,
                num_computed_tokens=state.num_computed_tokens,
                num_scheduled_tokens=1,
                num_draft_tokens=num_drafts,
                num_spec_tokens=num_spec,
            )
        return next_step


def _room(state: ExecutorRequestState, block_size: int) -> int:
    """Draft slots (verified plus proposed) that fit after this sub-step's one new token: within the
    request's blocks and its length limit."""
    limit = len(state.block_ids) * block_size
    if state.stop is not None and state.stop.max_model_len:
        limit = min(limit, state.stop.max_model_len)
    return limit - state.num_computed_tokens - 1
