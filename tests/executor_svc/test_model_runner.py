"""ModelRunner with deferred read-back: steps launched before the previous step's tokens reach the host
take their input ids from the device, and give exactly the tokens of one-step-at-a-time execution,
also when the batch is reordered and requests join and leave."""

from __future__ import annotations

import re

import pytest
from step_plans import BATCHES, PENALISED, outputs_of, plan_steps, requests_plain
from tiny_models import make_tiny_llama

from executor_svc.config import ExecutorConfig
from executor_svc.model_runner import StepError
from executor_svc.server import build_runner
from stepahead_proto import executor_pb2, sampling_pb2


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("target"), seed=3)


def runner_for(model_dir, defer: bool, **overrides):
    config = ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40, defer_token_readback=defer, **overrides)
    runner, _ = build_runner(config)
    return runner


def run_one_at_a_time(runner, steps) -> list[list[tuple]]:
    return [outputs_of(runner.execute(step)) for step in steps]


def run_ahead(runner, steps, lag: int, unread_seen: list[int]) -> list[list[tuple]]:
    """Launches step i before completing step i - lag; records how many tokens were unread on the
    host (sampled, not yet read back) right after each launch."""
    launched, results = [], []
    for step in steps:
        launched.append(runner.launch(step))
        unread_seen.append(sum(state.num_unread_tokens for state in runner.requests.values()))
        if len(launched) > lag:
            results.append(outputs_of(runner.complete(launched[len(results)])))
    results += [outputs_of(runner.complete(step)) for step in launched[len(results):]]
    return results


@pytest.mark.parametrize("lag", [1, 2])
def test_steps_launched_ahead_give_the_tokens_of_one_step_at_a_time(model_dir, lag):
    steps = plan_steps(requests_plain(), BATCHES)
    expected = run_one_at_a_time(runner_for(model_dir, defer=False), steps)
    unread: list[int] = []
    actual = run_ahead(runner_for(model_dir, defer=True), steps, lag, unread)
    assert actual == expected
    # The run-ahead really launched steps whose inputs were still only on the device.
    assert max(unread) >= 2 * lag


def test_without_deferral_every_launch_is_settled(model_dir):
    steps = plan_steps(requests_plain(), BATCHES)
    unread: list[int] = []
    actual = run_ahead(runner_for(model_dir, defer=False), steps, 1, unread)
    assert actual == run_one_at_a_time(runner_for(model_dir, defer=False), steps)
    assert max(unread) == 0


def test_a_penalised_request_settles_earlier_steps_first(model_dir):
    requests = requests_plain()
    requests["d"].sampling = PENALISED
    steps = plan_steps(requests, BATCHES)
    expected = run_one_at_a_time(runner_for(model_dir, defer=False), steps)
    unread: list[int] = []
    actual = run_ahead(runner_for(model_dir, defer=True), steps, 1, unread)
    assert actual == expected
    joins_d = BATCHES.index(["b", "c", "d"])
    assert unread[joins_d - 1] > 0  # deferred before d arrives...
    assert unread[joins_d + 1] == 0  # ...and every step with d (decoding, penalised) settles first


def test_a_biased_request_still_runs_ahead_and_gets_its_bias(model_dir):
    requests = requests_plain()
    requests["d"].sampling = sampling_pb2.SamplingParams(temperature=0.0, logit_bias={77: 100.0})
    steps = plan_steps(requests, BATCHES)
    expected = run_one_at_a_time(runner_for(model_dir, defer=False), steps)
    unread: list[int] = []
    actual = run_ahead(runner_for(model_dir, defer=True), steps, 1, unread)
    assert actual == expected
    d_tokens = [token for step in actual for rid, tokens, _, _ in step if rid == "d" for token in tokens]
    assert d_tokens and set(d_tokens) == {77}
    joins_d = BATCHES.index(["b", "c", "d"])
    assert unread[joins_d + 1] > 0  # the bias needs nothing from the host: steps with d still run ahead


def test_a_bias_outside_the_vocabulary_is_a_step_error(model_dir):
    requests = requests_plain()
    requests["a"].sampling = sampling_pb2.SamplingParams(logit_bias={256: 1.0})
    with pytest.raises(StepError, match="logit_bias token id 256 is outside the vocabulary"):
        runner_for(model_dir, defer=False).execute(plan_steps(requests, BATCHES)[0])


def test_speculative_requests_settle_and_verify_as_without_deferral(model_dir):
    requests = requests_plain()
    requests["b"].num_spec = 2
    steps = plan_steps(requests, BATCHES)
    expected = run_one_at_a_time(runner_for(model_dir, defer=False, spec_method="ngram", num_spec_tokens=2), steps)
    unread: list[int] = []
    runner = runner_for(model_dir, defer=True, spec_method="ngram", num_spec_tokens=2)
    assert run_ahead(runner, steps, 1, unread) == expected
    assert unread[-1] > 0  # the last step (d alone) is plain again, so it is deferred


@pytest.mark.parametrize("field, value, message", [
    ("prompt_token_ids", [5, 256, 7], "prompt_token_ids: 'bad' has id 256, outside [0, 256)"),
    ("prompt_token_ids", [5, -1], "prompt_token_ids: 'bad' has id -1, outside [0, 256)"),
    ("output_token_ids", [999], "output_token_ids: 'bad' has id 999, outside [0, 256)"),
    ("block_ids", [0, 40], "block_ids: 'bad' has id 40, outside [0, 40)"),
])
def test_a_new_request_with_an_id_outside_the_vocabulary_or_the_cache_is_a_step_error(
        model_dir, field, value, message):
    runner = runner_for(model_dir, defer=False)
    new = executor_pb2.NewRequestData(request_id="bad", prompt_token_ids=[5, 6, 7], block_ids=[0],
                                      num_scheduled_tokens=3)
    getattr(new, field)[:] = value
    with pytest.raises(StepError, match=re.escape(message)):
        runner.execute(executor_pb2.StepRequest(step_id=1, new_requests=[new]))
    assert "bad" not in runner.requests


def test_a_block_outside_the_cache_given_to_a_running_request_is_a_step_error(model_dir):
    runner = runner_for(model_dir, defer=False)
    new = executor_pb2.NewRequestData(request_id="r", prompt_token_ids=[5, 6, 7], block_ids=[0],
                                      num_scheduled_tokens=3)
    runner.execute(executor_pb2.StepRequest(step_id=1, new_requests=[new]))
    cached = executor_pb2.CachedRequestData(request_id="r", new_block_ids=[41], num_computed_tokens=3,
                                            num_scheduled_tokens=1)
    with pytest.raises(StepError, match=re.escape("new_block_ids: 'r' has id 41, outside [0, 40)")):
        runner.execute(executor_pb2.StepRequest(step_id=2, cached_requests=[cached]))
