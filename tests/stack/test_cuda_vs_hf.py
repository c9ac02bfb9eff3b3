"""On CUDA, fp32 greedy output of the default model through the stack equals HF transformers' (the same
reference the CPU stack is held to), synchronously and one step ahead, with and without n-gram
speculation, with captured step graphs replayed (the default on CUDA). Skipped without CUDA."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from hf_reference import assert_matches_reference, generate, load_cases

from client import Client

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.stack]

CUDA_FP32 = ["--device", "cuda", "--dtype", "float32"]


@pytest.mark.parametrize("spec", [[], ["--spec-method", "ngram", "--num-spec-tokens", "3"]], ids=["plain", "ngram"])
@pytest.mark.parametrize("inflight", [1, 2], ids=["sync", "async"])
def test_cuda_stack_matches_hf(launch_stack, default_model_dir, inflight, spec):
    stack = launch_stack(default_model_dir, [*CUDA_FP32, *spec], ["--max-inflight-steps", str(inflight)])
    cases = load_cases()
    with Client(stack.address) as client:
        for case in cases[:4]:  # one at a time: batch 1 graphs
            assert_matches_reference(generate(client, case), case)
        with ThreadPoolExecutor(len(cases)) as pool:  # all at once: the larger buckets
            outputs = list(pool.map(lambda case: generate(client, case), cases))
        info = client.model_info()
    for ours, case in zip(outputs, cases):
        assert_matches_reference(ours, case)
    assert info.num_free_kv_blocks == info.num_kv_blocks
