"""Step sequences planned the way a scheduler running ahead plans them, for model-runner tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from stepahead_proto import executor_pb2, sampling_pb2

BLOCKS_PER_REQUEST = 4


@dataclass
class PlannedRequest:
    """A request's prompt, sampling and drafts per step; block ids are given by with_blocks."""

    prompt: list[int]
    sampling: sampling_pb2.SamplingParams
    num_spec: int = 0
    block_ids: list[int] = field(default_factory=list)
    bad_words: list[list[int]] = field(default_factory=list)
    """Token sequences, as the scheduler sends SamplingParams.bad_words."""
    lora_adapter: str = ""
    """The LoRA adapter the request runs with (empty: none)."""
    format_after_thinking: executor_pb2.FormatAfterThinking | None = None
    """Where the structured output starts (None: from the first token)."""


GREEDY = sampling_pb2.SamplingParams(temperature=0.0, logprobs=1)
SEEDED = sampling_pb2.SamplingParams(temperature=0.9, top_k=20, seed=7, logprobs=2)
PENALISED = sampling_pb2.SamplingParams(temperature=0.0, repetition_penalty=1.3, frequency_penalty=0.5)


def plan_steps(requests: dict[str, PlannedRequest], batches: list[list[str]]) -> list[executor_pb2.StepRequest]:
    """One StepRequest per batch, planned without knowing any sampled token, as a scheduler running
    ahead does: a request's first batch prefills it, later ones decode one token each, and a request
    absent from every later batch is finished in the step after its last one."""
    computed: dict[str, int] = {}
    steps = []
    last_batch = {rid: max(i for i, batch in enumerate(batches) if rid in batch) for rid in requests}
    for index, batch in enumerate(batches):
        step = executor_pb2.StepRequest(step_id=index)
        step.finished_request_ids.extend(rid for rid, last in last_batch.items() if last == index - 1)
        for rid in batch:
            request = requests[rid]
            if rid not in computed:
                step.new_requests.add(request_id=rid, prompt_token_ids=request.prompt, sampling=request.sampling,
                                      block_ids=request.block_ids, num_scheduled_tokens=len(request.prompt),
                                      num_spec_tokens=request.num_spec,
                                      bad_words=[executor_pb2.TokenSequence(ids=ids) for ids in request.bad_words],
                                      lora_adapter=request.lora_adapter,
                                      format_after_thinking=request.format_after_thinking)
                computed[rid] = len(request.prompt)
            else:
                step.cached_requests.add(request_id=rid, num_computed_tokens=computed[rid], num_scheduled_tokens=1,
                                         num_draft_tokens=request.num_spec, num_spec_tokens=request.num_spec)
                computed[rid] += 1
        steps.append(step)
    return steps


def with_blocks(requests: dict[str, PlannedRequest]) -> dict[str, PlannedRequest]:
    for index, request in enumerate(requests.values()):
        request.block_ids = list(range(index * BLOCKS_PER_REQUEST, (index + 1) * BLOCKS_PER_REQUEST))
    return requests


def outputs_of(result: executor_pb2.StepResult) -> list[tuple]:
    return [(o.request_id, tuple(o.token_ids), tuple(p.sampled.logprob for p in o.logprobs),
             tuple(tuple(t.token_id for t in p.top) for p in o.logprobs)) for o in result.outputs]


# Requests join, leave, and come back in another order.
BATCHES = [["a", "b"], ["a", "b"], ["c", "b", "a"], ["b", "c", "a"], ["c", "b"], ["b", "c", "d"], ["d", "c"],
           ["d", "c"], ["d"]]


def requests_plain() -> dict[str, PlannedRequest]:
    return with_blocks({
        "a": PlannedRequest([5, 9, 11, 3, 17], GREEDY),
        "b": PlannedRequest([2, 40, 41, 42, 7, 8, 9], SEEDED),
        "c": PlannedRequest([100, 3, 4], sampling_pb2.SamplingParams(temperature=1.0, min_p=0.05, seed=3)),
        "d": PlannedRequest(list(range(20, 40)), GREEDY),
    })
