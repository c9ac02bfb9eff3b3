"""Predicted outputs on the default model as served out of the box (its EAGLE-style drafter on): with HF's own
greedy answer as the prediction, the answer is still HF's, and most of it comes from accepted prediction drafts."""

from __future__ import annotations

import pytest
from hf_reference import assert_matches_reference, load_cases

from client import Client
from scheduler_svc.tokenizer import Tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.stack]

NUM_CASES = 4


def test_hf_answer_as_prediction_is_accepted_and_the_answer_unchanged(launch_stack, default_model_dir):
    tokenizer = Tokenizer.from_dir(default_model_dir)
    stack = launch_stack.with_scheduler(default_model_dir)
    accepted = rejected = emitted = 0
    with Client(stack.address) as client:
        for case in load_cases()[:NUM_CASES]:
            reference = case["output_token_ids"]
            result = client.generate(messages=[{"role": "user", "content": case["prompt"]}], max_tokens=64,
                                     temperature=0.0, prediction=tokenizer.decode(reference))
            assert_matches_reference(list(result.token_ids), case)
            accepted += result.usage.accepted_prediction_tokens
            rejected += result.usage.rejected_prediction_tokens
            emitted += len(result.token_ids)
    # Every verify step but the last emits its accepted drafts and one token of the target's: with K_max = 5,
    # at least 5/6 of the answer would be accepted drafts; tokenization seams and the last step cost some.
    assert accepted >= 0.7 * emitted, (accepted, rejected, emitted)
    assert rejected <= 0.1 * accepted, (accepted, rejected, emitted)
