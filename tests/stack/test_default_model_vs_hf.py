"""Through the full stack, greedy output of the default model equals HF transformers token for token."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from hf_reference import assert_matches_reference, generate, load_cases

from client import Client

pytestmark = [pytest.mark.slow, pytest.mark.stack]


INFLIGHT = (1, 2)


@pytest.fixture
def default_stack(launch_stack, default_model_dir):
    """The default model as served out of the box (the shipped EAGLE-style drafter on, as eagle_ngram), on one
    executor for the session, with a scheduler that runs ``inflight`` steps in flight (1: synchronously, 2: one step
    ahead): call with inflight and other scheduler flags."""
    return lambda inflight, *flags: launch_stack.with_scheduler(default_model_dir, [], [
        "--max-inflight-steps", str(inflight), *flags])


def test_fixture_covers_twenty_prompts():
    cases = load_cases()
    assert len(cases) >= 20 and all(len(c["output_token_ids"]) == len(c["top2_gaps"]) for c in cases)


def test_chat_template_tokenization_matches_hf(default_model_dir):
    from scheduler_svc.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_dir(default_model_dir)
    for case in load_cases():
        assert tokenizer.apply_chat_template([{"role": "user", "content": case["prompt"]}]) == case["prompt_token_ids"]


ONE_AT_A_TIME = 5
"""Prompts sent one at a time to each stack, different ones to each (CI time: 64 tokens at batch size 1 take
seconds each here): 10 prompts at batch size 1 in all; all 20 go at once to both stacks in the next test."""


def test_one_at_a_time_matches_hf(default_stack):
    cases = load_cases()
    for index, inflight in enumerate(INFLIGHT):
        stack = default_stack(inflight)
        with Client(stack.address) as client:
            for case in cases[index * ONE_AT_A_TIME : (index + 1) * ONE_AT_A_TIME]:
                assert_matches_reference(generate(client, case), case)


def test_all_at_once_matches_hf_with_the_same_drafts_sync_and_async(default_stack):
    """All 20 prompts at once: HF's output from both stacks, and the shipped drafter (on by default as eagle_ngram:
    the head with its reduced draft vocabulary, n-gram lookup where the context repeats) drafted and had accepted
    exactly the same tokens whether the scheduler ran one step ahead or not."""
    cases = load_cases()
    counts = {}
    for inflight in INFLIGHT:
        stack = default_stack(inflight)
        with Client(stack.address) as client, ThreadPoolExecutor(len(cases)) as pool:
            results = list(pool.map(lambda case: client.generate(
                messages=[{"role": "user", "content": case["prompt"]}], max_tokens=64, temperature=0.0), cases))
            info = client.model_info()
        for result, case in zip(results, cases):
            assert result.usage.prompt_tokens == len(case["prompt_token_ids"])
            assert_matches_reference(list(result.token_ids), case)
        assert info.num_free_kv_blocks == info.num_kv_blocks
        assert info.stats.spec_drafted > info.stats.spec_accepted > 0
        counts[inflight] = [(r.spec.drafted, r.spec.accepted) for r in results]
    assert counts[1] == counts[2]


def test_spec_method_none_turns_the_shipped_drafter_off(launch_stack, default_model_dir):
    stack = launch_stack(default_model_dir, ["--spec-method", "none"])
    case = load_cases()[0]
    with Client(stack.address) as client:
        assert_matches_reference(generate(client, case), case)
        assert client.model_info().stats.spec_drafted == 0


def test_reference_fixture_is_still_what_hf_computes(default_model_dir):
    """Recompute two cases with HF so the stored reference cannot rot."""
    import torch
    from make_hf_reference import greedy_reference
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()
    for case in load_cases()[:2]:
        with torch.inference_mode():
            fresh = greedy_reference(model, tokenizer, case["prompt"], 64)
        assert fresh["prompt_token_ids"] == case["prompt_token_ids"]
        assert fresh["output_token_ids"] == case["output_token_ids"]


def test_ngram_speculation_keeps_hf_output(launch_stack, default_model_dir):
    """n-gram speculation on the default model, running one step ahead: still HF's greedy output on the first 10
    MT-Bench prompts (CI time; the same drafts verified sync and async: tests/stack/test_speculative_decoding.py, on 20
    prompts; all 20 with the shipped drafter in test_all_at_once_matches_hf_with_the_same_drafts_sync_and_async)."""
    stack = launch_stack(default_model_dir, ["--spec-method", "ngram", "--num-spec-tokens", "3"],
                         ["--max-inflight-steps", "2"])
    cases = load_cases()[:10]
    with Client(stack.address) as client, ThreadPoolExecutor(len(cases)) as pool:
        results = list(pool.map(
            lambda case: client.generate(messages=[{"role": "user", "content": case["prompt"]}], max_tokens=64,
                                         temperature=0.0),
            cases,
        ))
    for result, case in zip(results, cases):
        assert_matches_reference(list(result.token_ids), case)
    assert sum(result.spec.accepted for result in results) > 0


def test_multi_step_keeps_hf_output(default_stack):
    """Eight decode sub-steps per StepRequest on the default model, running one step ahead: still HF's greedy output,
    every block free, on the last 10 MT-Bench prompts (CI time; n in {1, 4, 8} x {sync, async} give identical outputs:
    test_multi_step_equivalence.py)."""
    stack = default_stack(2, "--num-scheduler-steps", "8")
    cases = load_cases()[10:20]
    with Client(stack.address) as client, ThreadPoolExecutor(len(cases)) as pool:
        outputs = list(pool.map(lambda case: generate(client, case), cases))
        info = client.model_info()
    for ours, case in zip(outputs, cases):
        assert_matches_reference(ours, case)
    assert info.num_free_kv_blocks == info.num_kv_blocks
    assert info.stats.step_requests < info.stats.steps  # sub-steps really ran without a round trip each


PERSON_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                                  "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                                  "city": {"type": "string", "maxLength": 40}},
                 "required": ["name", "age", "city"], "additionalProperties": False}


def hf_greedy_json(model_dir, prompt_ids: list[int], schema: dict, max_tokens: int) -> list[int]:
    """HF generate, greedy, fp32, each step masked by an llguidance matcher of its own (the test's, not ours)."""
    import llguidance
    import numpy as np
    import torch
    from llguidance.numpy import fill_next_token_bitmask
    from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList

    from stepahead_common.structured_output import JSON_OPTIONS

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    vocab = model.config.vocab_size
    tokenizer = llguidance.LLTokenizer((model_dir / "tokenizer.json").read_text(), n_vocab=vocab, eos_token=[2])
    grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=JSON_OPTIONS)
    matcher = llguidance.LLMatcher(tokenizer, grammar)

    class Mask(LogitsProcessor):
        def __call__(self, input_ids, scores):
            new = input_ids[0, len(prompt_ids):].tolist()
            matcher.consume_tokens(new[self.seen:])
            self.seen = len(new)
            bits = np.zeros((1, (vocab + 31) // 32), dtype=np.int32)
            fill_next_token_bitmask(matcher, bits)
            allowed = np.unpackbits(bits.view(np.uint8), bitorder="little")[:vocab].astype(bool)
            return scores.masked_fill(~torch.from_numpy(allowed), float("-inf"))

    processor = Mask()
    processor.seen = 0
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), do_sample=False, max_new_tokens=max_tokens,
                             logits_processor=LogitsProcessorList([processor]), eos_token_id=2, pad_token_id=2)
    return out[0, len(prompt_ids):].tolist()


def test_json_schema_output_equals_hf_masked_alike_sync_and_async_with_the_drafter(default_stack, default_model_dir):
    """The default model asked for a person as JSON: valid under the schema, and the tokens of HF's greedy generate
    masked by an independent matcher, whether the scheduler runs ahead or not, the shipped drafter drafting."""
    import jsonschema

    messages = [{"role": "user", "content": "Describe a fictional person as JSON with name, age and city."}]
    results = {}
    for inflight in INFLIGHT:
        with Client(default_stack(inflight).address) as client:
            results[inflight] = client.generate(messages=messages, max_tokens=60, temperature=0.0,
                                                json_schema=PERSON_SCHEMA)
    assert results[1].token_ids == results[2].token_ids and results[1].finish_reason == "stop"
    jsonschema.validate(json.loads(results[1].text), PERSON_SCHEMA)
    assert results[1].spec.drafted > 0
    from scheduler_svc.tokenizer import Tokenizer

    prompt_ids = Tokenizer.from_dir(default_model_dir).apply_chat_template(messages)
    assert list(results[1].token_ids) == hf_greedy_json(default_model_dir, prompt_ids, PERSON_SCHEMA, 60)
