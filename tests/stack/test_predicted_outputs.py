"""Predicted outputs through the stack: a request's prediction drafts for it, with or without a server drafter, and
the output is the one it gets without a prediction (greedy), a right prediction accepted, a wrong one rejected."""

from __future__ import annotations

import grpc
import pytest
from test_speculative_decoding import assert_all_blocks_free, make_prompts

from client import Client
from client.errors import InvalidArgumentError

pytestmark = pytest.mark.stack

MAX_TOKENS = 40
PROMPTS = make_prompts(4)
GREEDY = {"max_tokens": MAX_TOKENS, "temperature": 0.0, "ignore_eos": True}


def generate_all(address: str, predictions: list[str | None], **params) -> list:
    params = params or GREEDY
    with Client(address) as client:
        return [client.generate(token_ids=prompt, prediction=prediction, **params)
                for prompt, prediction in zip(PROMPTS, predictions)]


@pytest.fixture(scope="module")
def plain(tiny_model_dir, launch_module_stack):
    """No drafter: a prediction is the only source of drafts."""
    return launch_module_stack.with_scheduler(tiny_model_dir)


@pytest.fixture(scope="module")
def reference(plain) -> list:
    return generate_all(plain.address, [None] * len(PROMPTS))


def edited(text: str) -> str:
    """The text with a stretch in its middle replaced (an edit the output will not make)."""
    middle = len(text) // 2
    return text[: middle - 3] + "zqzqzq" + text[middle + 3 :]


@pytest.mark.parametrize("flags", [
    ([], []),
    (["--spec-method", "ngram", "--num-spec-tokens", "3"], []),
    ([], ["--num-scheduler-steps", "4"]),
    ([], ["--max-inflight-steps", "1"]),
], ids=["no-drafter", "ngram", "multi-step", "sync"])
def test_a_right_prediction_is_accepted_and_changes_no_token(flags, reference, tiny_model_dir, launch_stack):
    executor_flags, scheduler_flags = flags
    stack = launch_stack.with_scheduler(tiny_model_dir, executor_flags, scheduler_flags)
    results = generate_all(stack.address, [result.text for result in reference])
    assert [r.token_ids for r in results] == [r.token_ids for r in reference]
    # The random model's text does not tokenize back to its ids (broken UTF-8 among them), so only part of each
    # prediction is right here; the default model's test (test_default_model_predicted_outputs.py) measures how much
    # of a right prediction is accepted.
    assert sum(r.usage.accepted_prediction_tokens for r in results) > 0
    for r in results:
        predicted = r.usage.accepted_prediction_tokens + r.usage.rejected_prediction_tokens
        assert r.spec is not None and predicted <= r.spec.drafted
        assert r.usage.accepted_prediction_tokens <= r.spec.accepted
    assert_all_blocks_free(stack.address)


def test_seeded_sampling_gives_the_same_tokens_with_a_prediction(plain, reference):
    sampled = {"temperature": 0.9, "seed": 5}
    without = generate_all(plain.address, [None] * len(PROMPTS), **{**GREEDY, **sampled})
    predicted = generate_all(plain.address, [r.text for r in without], **{**GREEDY, **sampled})
    assert [r.token_ids for r in predicted] == [r.token_ids for r in without]
    assert sum(r.usage.accepted_prediction_tokens for r in predicted) > 0


def test_a_wrong_prediction_is_rejected_and_changes_no_token(plain, reference):
    results = generate_all(plain.address, [edited(r.text) for r in reference])
    assert [r.token_ids for r in results] == [r.token_ids for r in reference]
    assert sum(r.usage.rejected_prediction_tokens for r in results) > 0
    unrelated = generate_all(plain.address, [reference[(i + 1) % len(PROMPTS)].text for i in range(len(PROMPTS))])
    assert [r.token_ids for r in unrelated] == [r.token_ids for r in reference]
    assert_all_blocks_free(plain.address)


def test_without_a_prediction_usage_counts_none(reference):
    assert all(r.usage.accepted_prediction_tokens == r.usage.rejected_prediction_tokens == 0 for r in reference)
    assert all(r.spec is None for r in reference)


def test_bad_predictions_are_refused_by_name(plain):
    with Client(plain.address) as client:
        with pytest.raises(InvalidArgumentError, match="prediction: .*disable_speculation") as refused:
            client.generate(prompt="Hi", prediction="Hello", disable_speculation=True, max_tokens=4)
        assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
        info = client.model_info()
        with pytest.raises(InvalidArgumentError, match="prediction: .* at most"):
            client.generate(prompt="Hi", prediction="ab " * info.max_model_len, max_tokens=4)
    assert_all_blocks_free(plain.address)
