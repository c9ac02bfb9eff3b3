"""Prompt logprobs through real processes: every prompt token after the first, scored as HF scores it, through
chunked prefill and preemption, never from a cached prefix; and OpenAI's completions echo + logprobs, the request
lm-evaluation-harness sends to score a continuation."""

from __future__ import annotations

import random

import openai
import pytest
import torch

from client import Client
from client.errors import InvalidArgumentError

pytestmark = pytest.mark.stack

PROMPT = [random.Random(7).randrange(3, 400) for _ in range(40)]


@pytest.fixture(scope="module")
def stack(tiny_model_dir, launch_module_stack):
    # 8-token chunks; 12 blocks of 16 tokens: the concurrent test below preempts.
    return launch_module_stack.with_scheduler(tiny_model_dir, ["--num-kv-blocks", "12"],
                               ["--max-num-batched-tokens", "8", "--http-port", "0", "--enable-prefix-caching"])


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32).eval()


def hf_prompt_logprobs(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)


def assert_like_hf(prompt_logprobs, hf: torch.Tensor, ids: list[int], count: int) -> None:
    assert [p.sampled.token_id for p in prompt_logprobs] == ids[1:]
    assert [p.sampled.logprob for p in prompt_logprobs] == pytest.approx(
        [hf[i, t].item() for i, t in enumerate(ids[1:])], abs=1e-4)
    for index, position in enumerate(prompt_logprobs):
        assert [t.token_id for t in position.top] == hf[index].topk(count).indices.tolist()


def test_prompt_logprobs_equal_hf_through_chunked_prefill_and_never_come_from_the_prefix_cache(stack, hf_model):
    hf = hf_prompt_logprobs(hf_model, PROMPT)
    with Client(stack.address) as client:
        first = client.generate(token_ids=PROMPT, max_tokens=2, temperature=0.0, prompt_logprobs=3)
        again = client.generate(token_ids=PROMPT, max_tokens=2, temperature=0.0, prompt_logprobs=3)
        unscored = client.generate(token_ids=PROMPT, max_tokens=2, temperature=0.0)
        chunks = list(client.generate_stream(token_ids=PROMPT, max_tokens=4, temperature=0.0, ignore_eos=True,
                                             prompt_logprobs=1))
    for result in (first, again):
        assert_like_hf(result.prompt_logprobs, hf, PROMPT, 3)
        assert result.usage.cached_prompt_tokens == 0
    assert unscored.usage.cached_prompt_tokens > 0 and not unscored.prompt_logprobs  # the cache was there to use
    assert len(chunks[0].prompt_logprobs) == len(PROMPT) - 1 and all(not c.prompt_logprobs for c in chunks[1:])
    assert_like_hf(chunks[0].prompt_logprobs, hf, PROMPT, 1)


def test_prompt_logprobs_survive_preemption(stack, hf_model):
    from concurrent.futures import ThreadPoolExecutor

    prompts = [[random.Random(seed).randrange(3, 400) for _ in range(60)] for seed in range(4)]
    with Client(stack.address) as client, ThreadPoolExecutor(4) as pool:
        before = client.model_info().stats.num_preemptions
        results = list(pool.map(lambda ids: client.generate(token_ids=ids, max_tokens=50, temperature=0.0,
                                                            ignore_eos=True, prompt_logprobs=2), prompts))
        assert client.model_info().stats.num_preemptions > before
    for ids, result in zip(prompts, results):
        assert_like_hf(result.prompt_logprobs, hf_prompt_logprobs(hf_model, ids), ids, 2)


@pytest.mark.parametrize("value", [-1, 21])
def test_a_bad_count_is_invalid_argument_naming_the_field(stack, value):
    with Client(stack.address) as client, pytest.raises(InvalidArgumentError, match="sampling.prompt_logprobs"):
        client.generate(token_ids=PROMPT, max_tokens=1, prompt_logprobs=value)


def test_openai_echo_with_logprobs_scores_the_prompt_as_lm_eval_asks(stack, hf_model):
    with Client(stack.address) as client:
        model = client.model_info().model
        ids = client.tokenize("The quick brown fox jumps over the lazy dog").token_ids
    openai_client = openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key="unused")
    completion = openai_client.completions.create(
        model=model, prompt="The quick brown fox jumps over the lazy dog", echo=True, logprobs=1, max_tokens=1,
        temperature=0.0)
    choice = completion.choices[0]
    assert choice.text.startswith("The quick brown fox jumps over the lazy dog")
    token_logprobs = choice.logprobs.token_logprobs
    assert token_logprobs[0] is None and len(token_logprobs) == len(ids) + 1
    hf = hf_prompt_logprobs(hf_model, list(ids))
    assert token_logprobs[1:len(ids)] == pytest.approx([hf[i, t].item() for i, t in enumerate(ids[1:])], abs=1e-4)
