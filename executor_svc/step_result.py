"""Builds the outputs of a StepResult from what each request emitted."""

from __future__ import annotations

from executor_svc.prompt_logprobs import ScoredPrompt
from executor_svc.sampler import RowLogprobs
from executor_svc.step_work import Emitted, ScheduledWork
from stepahead_proto import executor_pb2, generation_pb2


def fill_outputs(
    result: executor_pb2.StepResult, work: list[ScheduledWork], emitted: dict[str, Emitted],
    prompt_logprobs: dict[str, ScoredPrompt] | None = None,
) -> None:
    """One output per scheduled request, in order; requests that only prefilled get an empty one (but for the
    prompt logprobs their chunk scored)."""
    for item in work:
        output = result.outputs.add(request_id=item.state.request_id)
        scored = (prompt_logprobs or {}).get(item.state.request_id)
        if scored is not None:
            output.prompt_logprobs_start = scored.start
            output.prompt_logprobs.extend(_logprobs_proto(t, lp) for t, lp in zip(scored.token_ids, scored.logprobs))
        produced = emitted.get(item.state.request_id)
        if produced is None:
            continue
        output.token_ids.extend(produced.token_ids)
        output.num_drafted = produced.num_drafted
        output.num_accepted = produced.num_accepted
        output.num_draft_slots = produced.num_draft_slots
        output.drafts_from_prediction = produced.from_prediction
        output.logprobs.extend(
            _logprobs_proto(t, lp) for t, lp in zip(produced.token_ids, produced.logprobs) if lp is not None
        )


def _logprobs_proto(token_id: int, logprobs: RowLogprobs) -> generation_pb2.PositionLogprobs:
    return generation_pb2.PositionLogprobs(
        sampled=generation_pb2.TokenLogprob(token_id=token_id, logprob=logprobs.sampled_logprob),
        top=[
            generation_pb2.TokenLogprob(token_id=t, logprob=lp)
            for t, lp in zip(logprobs.top_ids, logprobs.top_logprobs)
        ],
    )
