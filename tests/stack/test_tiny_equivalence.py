"""On a tiny checkpoint: chunked prefill, preemption and staggered arrivals change nothing in the output."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from simultaneous import run_simultaneously

from client import Client

pytestmark = pytest.mark.stack

NUM_REQUESTS = 8
MAX_TOKENS = 40


def make_prompts(vocab_size: int = 400) -> list[list[int]]:
    rng = random.Random(7)
    lengths = [5, 17, 33, 64, 90, 120, 48, 3]
    return [[rng.randrange(3, vocab_size) for _ in range(n)] for n in lengths[:NUM_REQUESTS]]


def run_all(address: str, prompts: list[list[int]], stagger_s: float = 0.0) -> list[tuple[int, ...]]:
    """Send every prompt concurrently (optionally one after another with a delay); greedy, fixed length."""

    def one(index: int) -> tuple[int, ...]:
        time.sleep(index * stagger_s)  # arrival pattern, not synchronisation
        with Client(address) as client:
            result = client.generate(token_ids=prompts[index], max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
        assert result.finish_reason == "length"
        return result.token_ids

    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(one, range(len(prompts))))


def assert_all_blocks_free(address: str) -> None:
    with Client(address) as client:
        info = client.model_info()
    assert info.num_free_kv_blocks == info.num_kv_blocks, info
    assert info.num_running == 0 and info.num_waiting == 0


@pytest.fixture(scope="module")
def reference_outputs(tiny_model_dir, launch_module_stack):
    stack = launch_module_stack.with_scheduler(tiny_model_dir)
    outputs = run_all(stack.address, make_prompts())
    assert_all_blocks_free(stack.address)
    return outputs


def test_unconstrained_run_matches_hf(reference_outputs, tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    for prompt, ours in zip(make_prompts(), reference_outputs):
        with torch.inference_mode():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=MAX_TOKENS, min_new_tokens=MAX_TOKENS,
                                 do_sample=False)
        assert tuple(out[0, len(prompt):].tolist()) == ours


@pytest.mark.parametrize(
    "name, executor_flags, scheduler_flags, stagger_s",
    [
        ("chunked_prefill", [], ["--max-num-batched-tokens", "32"], 0.0),
        ("preemption", ["--num-kv-blocks", "24"], [], 0.0),
        ("chunked_and_preemption", ["--num-kv-blocks", "24"], ["--max-num-batched-tokens", "32"], 0.0),
        ("staggered_arrivals", [], ["--max-num-batched-tokens", "48"], 0.05),
        ("few_seqs", [], ["--max-num-seqs", "3"], 0.0),
    ],
)
def test_constrained_runs_equal_unconstrained(
    name, executor_flags, scheduler_flags, stagger_s, reference_outputs, tiny_model_dir, launch_module_stack
):
    stack = launch_module_stack.with_scheduler(tiny_model_dir, executor_flags, scheduler_flags)
    outputs = run_all(stack.address, make_prompts(), stagger_s)
    assert outputs == reference_outputs
    assert_all_blocks_free(stack.address)


def test_preemption_really_happens(tiny_model_dir, launch_module_stack):
    stack = launch_module_stack.with_scheduler(tiny_model_dir, ["--num-kv-blocks", "24"])

    def one(client: Client, prompt: list[int]) -> int:
        result = client.generate(token_ids=prompt, max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
        return result.usage.num_preemptions

    preemptions = run_simultaneously(stack.address, one, make_prompts())
    assert sum(preemptions) > 0, preemptions
    assert_all_blocks_free(stack.address)
