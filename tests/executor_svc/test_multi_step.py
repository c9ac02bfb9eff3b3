"""ModelRunner multi-step: n decode sub-steps per StepRequest give exactly the tokens of n single steps (bad words
and a thinking budget applied within them), stop requests on their stop conditions in the middle of a batch, and flag
them finished."""

from __future__ import annotations

import pytest
from step_plans import GREEDY, PENALISED, SEEDED
from tiny_models import make_tiny_llama

from executor_svc.config import ExecutorConfig
from executor_svc.model_runner import StepError
from executor_svc.server import build_runner
from stepahead_proto import executor_pb2, sampling_pb2

BLOCKS = 8  # per request, block_size 16: 128 tokens


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("target"), seed=3)


def runner_for(model_dir, **overrides):
    config = ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40, **overrides)
    runner, _ = build_runner(config)
    return runner


REQUESTS = {
    "a": ([5, 9, 11, 3, 17, 5, 9, 11], GREEDY, executor_pb2.StopConditions(max_tokens=6)),
    "b": ([2, 40, 41, 42, 7, 8, 9], SEEDED, executor_pb2.StopConditions(max_tokens=40)),
    "c": ([100, 3, 4, 100, 3], PENALISED, executor_pb2.StopConditions(max_tokens=40, max_model_len=19)),
    "d": (list(range(20, 40)), sampling_pb2.SamplingParams(temperature=1.0, seed=5, logprobs=1),
          executor_pb2.StopConditions(max_tokens=40)),
    "e": ([60, 61, 62, 63], sampling_pb2.SamplingParams(temperature=0.8, seed=9, thinking_token_budget=3),
          executor_pb2.StopConditions(max_tokens=40)),
}
THINKING_END = 250
"""Request "e" thinks 3 tokens, then this token (standing for ``</think>``) is forced."""
# Bad words (token sequences) of request "a", whose free greedy output is 48 199 237 193 140 201: the sub-steps must
# forbid 237 after 199 and 140 everywhere from the outputs of the sub-steps before.
BAD_WORDS = {"a": [[199, 237], [140]]}


def prefill(num_spec: int, stops: dict[str, executor_pb2.StopConditions]) -> executor_pb2.StepRequest:
    step = executor_pb2.StepRequest(step_id=0, num_steps=1)
    for index, (rid, (prompt, sampling, _)) in enumerate(REQUESTS.items()):
        step.new_requests.add(request_id=rid, prompt_token_ids=prompt, sampling=sampling,
                              block_ids=list(range(index * BLOCKS, (index + 1) * BLOCKS)),
                              num_scheduled_tokens=len(prompt), num_spec_tokens=num_spec, stop=stops[rid],
                              bad_words=[executor_pb2.TokenSequence(ids=ids) for ids in BAD_WORDS.get(rid, [])])
        if sampling.HasField("thinking_token_budget"):
            step.new_requests[-1].format_after_thinking.end_token_ids.append(THINKING_END)
    return step


def decode(runner, step_id: int, num_steps: int, num_spec: int) -> executor_pb2.StepRequest:
    step = executor_pb2.StepRequest(step_id=step_id, num_steps=num_steps)
    for rid, state in runner.requests.items():
        step.cached_requests.add(request_id=rid, num_computed_tokens=state.num_computed_tokens,
                                 num_scheduled_tokens=1, num_draft_tokens=len(state.draft_token_ids),
                                 num_spec_tokens=num_spec)
    return step


def run(runner, num_steps: int, num_spec: int = 0, rounds: int = 3) -> tuple[dict[str, list], list]:
    """Tokens (and sampled logprobs) per request over ``rounds`` multi-step StepRequests after a prefill."""
    stops = {rid: stop for rid, (_, _, stop) in REQUESTS.items()}
    streams: dict[str, list] = {rid: [] for rid in REQUESTS}
    results = [runner.execute(prefill(num_spec, stops))]
    for index in range(1, rounds * 8 // num_steps + 1):
        step = decode(runner, index, num_steps, num_spec)
        if num_steps == 1:
            results.append(runner.execute(step))
            _stop_like_multi_step(runner, results[-1])
        else:
            results += [runner.execute_sub_step(step, j) for j in range(num_steps)]
    for result in results:
        for output in result.outputs:
            streams[output.request_id] += [(t, round(p.sampled.logprob, 4)) for t, p in
                                           zip(output.token_ids, output.logprobs)] or list(output.token_ids)
    return streams, results


def _stop_like_multi_step(runner, result) -> None:
    from executor_svc.multi_step import mark_stops

    mark_stops(result, runner.requests)


def expected_lengths() -> dict[str, int]:
    return {"a": 6, "c": 19 - 5}


@pytest.mark.parametrize("num_steps", [4, 8])
def test_sub_steps_give_the_tokens_of_single_steps(model_dir, num_steps):
    expected, _ = run(runner_for(model_dir), 1)
    actual, results = run(runner_for(model_dir), num_steps)
    assert actual == expected
    for rid, length in expected_lengths().items():
        assert len(actual[rid]) == length
    assert [r.sub_step for r in results[1:num_steps + 1]] == list(range(num_steps))
    a_tokens = [t for t, _ in actual["a"]]
    assert a_tokens[:2] == [48, 199] and a_tokens[2] != 237 and 140 not in a_tokens
    e_tokens = list(actual["e"])
    assert THINKING_END not in e_tokens[:3] and e_tokens[3] == THINKING_END
    finished = {o.request_id for r in results for o in r.outputs if o.finished}
    assert finished == {"a", "c"}


@pytest.mark.parametrize("defer", [False, True])
def test_sub_steps_with_ngram_drafts_match_single_steps(model_dir, defer):
    spec = {"spec_method": "ngram", "num_spec_tokens": 3}
    expected, _ = run(runner_for(model_dir, **spec), 1, num_spec=3)
    actual, results = run(runner_for(model_dir, defer_token_readback=defer, **spec), 4, num_spec=3)
    assert actual == expected
    assert sum(o.num_draft_slots for r in results for o in r.outputs) > 0  # sub-steps verified drafts
    assert actual["e"][3] == THINKING_END
    assert all(o.num_draft_slots <= 3 for r in results for o in r.outputs)


def test_stopped_requests_are_skipped_by_later_steps(model_dir):
    runner = runner_for(model_dir)
    _, results = run(runner, 4, rounds=1)
    assert runner.requests["a"].stopped
    later = runner.execute(decode(runner, 99, 1, 0))
    assert "a" not in {o.request_id for o in later.outputs}
    assert len(later.outputs) == 4  # b, c, d and e


def test_a_multi_step_request_must_be_pure_decode(model_dir):
    runner = runner_for(model_dir)
    step = prefill(0, {rid: stop for rid, (_, _, stop) in REQUESTS.items()})
    step.num_steps = 4
    with pytest.raises(StepError, match="num_steps"):
        runner.execute_sub_step(step, 0)
