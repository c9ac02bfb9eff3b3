"""Prefix caching through the stack (on by default): requests whose prompts start with blocks computed
before take those KV blocks back, and every output stays token for token what it is without the cache, with
chunked prefill, preemption and eviction, speculation of every kind, and one step ahead or not."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from test_speculative_decoding import assert_all_blocks_free, drafter_flags

from client import Client

pytestmark = pytest.mark.stack

MAX_TOKENS = 24
BLOCK = 16


def make_prompts() -> list[list[int]]:
    """Prompts sharing a 40-token system part, then their own; one repeated exactly, one ending on a block edge
    that another extends, and a second turn that continues a first (filled in with its output by the test)."""
    rng = random.Random(5)
    shared = [rng.randrange(3, 400) for _ in range(40)]
    own = [[rng.randrange(3, 400) for _ in range(rng.choice([5, 20, 37]))] for _ in range(6)]
    prompts = [shared + tail for tail in own]
    prompts.append(list(prompts[1]))
    prompts.append(shared[:2 * BLOCK])
    prompts.append(shared[:2 * BLOCK] + own[0][:3])
    return prompts


def run(address: str, prompts: list[list[int]], concurrent: bool) -> list[list[int]]:
    def one(prompt: list[int]) -> list[int]:
        with Client(address) as client:
            return list(client.generate(token_ids=prompt, max_tokens=MAX_TOKENS, temperature=0.0,
                                        ignore_eos=True).token_ids)

    if not concurrent:
        return [one(prompt) for prompt in prompts]
    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(one, prompts))


def run_workload(address: str) -> list[list[int]]:
    """One by one (each later prompt finds the earlier ones' blocks), a second turn, then all at once."""
    prompts = make_prompts()
    first = run(address, prompts, concurrent=False)
    second_turn = prompts[0] + first[0] + [7, 8, 9]
    return first + run(address, [second_turn], concurrent=False) + run(address, prompts, concurrent=True)


def hit_tokens(address: str) -> tuple[int, int]:
    with Client(address) as client:
        stats = client.model_info().stats
    return stats.prefix_cache_queried_tokens, stats.prefix_cache_hit_tokens


@pytest.fixture(scope="module")
def reference(tiny_model_dir, launch_module_stack):
    stack = launch_module_stack.with_scheduler(tiny_model_dir, [], ["--no-enable-prefix-caching"])
    outputs = run_workload(stack.address)
    assert hit_tokens(stack.address) == (0, 0)
    return outputs


CASES = {
    "plain": ([], []),
    "sync": ([], ["--max-inflight-steps", "1"]),
    "chunked-preempting": (["--num-kv-blocks", "20"], ["--max-num-batched-tokens", "32"]),
    "multi-step": ([], ["--num-scheduler-steps", "4"]),
    "ngram": (["--num-spec-tokens", "3", "ngram"], []),
    "draft-model": (["--num-spec-tokens", "3", "same"], ["--max-num-batched-tokens", "32"]),
    "eagle": (["--num-spec-tokens", "3", "eagle"], []),
    "eagle-ngram-preempting": (["--num-kv-blocks", "20", "--num-spec-tokens", "3", "eagle_ngram"], []),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cached_prefixes_give_the_same_tokens(case, reference, tiny_model_dir, tiny_draft_model_dir, tiny_eagle_dir,
                                              launch_stack):
    executor_flags, scheduler_flags = CASES[case]
    if "--num-spec-tokens" in executor_flags:
        *executor_flags, drafter = executor_flags
        executor_flags += drafter_flags(drafter, tiny_model_dir, tiny_draft_model_dir, tiny_eagle_dir)
    stack = launch_stack.with_scheduler(tiny_model_dir, executor_flags, scheduler_flags)  # the cache is on by default
    assert run_workload(stack.address) == reference
    queried, hits = hit_tokens(stack.address)
    assert hits >= 2 * BLOCK * 8 and hits % BLOCK == 0 and hits < queried
    assert_all_blocks_free(stack.address)


def test_two_executor_groups_send_a_prefix_to_the_group_that_holds_it(reference, tiny_model_dir, launch_stack):
    """Every prompt of the workload is cached by the time it runs concurrently, so the hits do not depend on timing:
    two groups routing by prefix find as many as one group (routing by load alone found 576 of these 656)."""
    hits = {}
    for groups in (1, 2):
        stack = launch_stack(tiny_model_dir, ["--num-threads", "1"], ["--enable-prefix-caching"],
                             executor_groups=groups)
        assert run_workload(stack.address) == reference
        hits[groups] = hit_tokens(stack.address)
        assert_all_blocks_free(stack.address)
    assert hits[2] == hits[1] and hits[1][1] > 0


def test_usage_reports_the_cached_prompt_tokens_over_grpc_and_http(tiny_model_dir, launch_stack):
    stack = launch_stack.with_scheduler(tiny_model_dir, [], ["--enable-prefix-caching", "--http-port", "0"])
    prompt = make_prompts()[0]
    with Client(stack.address) as client:
        first, second = (client.generate(token_ids=prompt, max_tokens=4, temperature=0.0) for _ in range(2))
    assert first.usage.cached_prompt_tokens == 0
    assert second.usage.cached_prompt_tokens == (len(prompt) - 1) // BLOCK * BLOCK > 0
    assert second.token_ids == first.token_ids
    messages = [{"role": "user", "content": "tell me " * 30}]
    with openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key="unused", max_retries=0) as http:
        usages = [http.chat.completions.create(model="", messages=messages, max_tokens=3).usage for _ in range(2)]
    assert usages[0].prompt_tokens_details.cached_tokens == 0
    assert usages[1].prompt_tokens_details.cached_tokens == (usages[1].prompt_tokens - 1) // BLOCK * BLOCK > 0
