"""Non-Llama architectures through the whole stack: a tiny Mixtral (routed experts, and a 16-position sliding window
shorter than every sequence here), a tiny DeepSeek-V3 (latent attention over a paged cache of latents, grouped
sigmoid routing), a tiny GPT-OSS (attention sinks, a 6-position window, biased experts) and a tiny Llama 4 (chunks of
8 positions, NoPE layers with a query temperature, input-weighted experts) give HF generate's greedy tokens, with
chunked prefill, preemption, running ahead and n-gram speculation forced at once, and free every block. (Each
family's logits are checked against HF's in tests/executor_svc/test_llama.py; this shows the windows, the latents,
the sinks, the chunks and the expert routing survive the scheduler's chunks, recomputation after preemption and
verify steps.) A tiny Gemma 3 vision-language checkpoint serves its language model the same way."""

from __future__ import annotations

import pytest
import torch
from test_tiny_equivalence import MAX_TOKENS, assert_all_blocks_free, make_prompts, run_all

from client import Client

pytestmark = pytest.mark.stack

WINDOW = 16
FORCED_EXECUTOR = ["--num-kv-blocks", "24", "--spec-method", "ngram", "--num-spec-tokens", "3"]
FORCED_SCHEDULER = ["--max-num-batched-tokens", "32", "--max-inflight-steps", "2"]


def _tiny_checkpoint(family: str, directory):
    from tiny_models import make_tiny_deepseek_v3, make_tiny_gpt_oss, make_tiny_llama4, make_tiny_mixtral

    if family == "llama4":
        return make_tiny_llama4(directory, seed=0, vocab_size=400)
    if family == "mixtral_window":
        return make_tiny_mixtral(directory, seed=0, vocab_size=400, sliding_window=WINDOW)
    if family == "gpt_oss":
        return make_tiny_gpt_oss(directory, seed=0, vocab_size=400)
    return make_tiny_deepseek_v3(directory, seed=0, vocab_size=400)


@pytest.mark.parametrize("family", ["mixtral_window", "deepseek_v3", "gpt_oss", "llama4"])
def test_a_moe_model_keeps_hf_tokens_under_chunking_preemption_and_speculation(family, tmp_path,
                                                                               launch_module_stack):
    from tiny_tokenizers import build_byte_level
    from transformers import AutoModelForCausalLM

    build_byte_level(tmp_path)
    model_dir = _tiny_checkpoint(family, tmp_path)
    stack = launch_module_stack.with_scheduler(model_dir, FORCED_EXECUTOR, FORCED_SCHEDULER)
    ours = run_all(stack.address, make_prompts())
    assert_all_blocks_free(stack.address)
    with Client(stack.address) as client:
        stats = client.model_info().stats
    assert stats.num_preemptions > 0 and stats.spec_drafted > 0, stats
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for prompt, tokens in zip(make_prompts(), ours):
        with torch.inference_mode():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=MAX_TOKENS, min_new_tokens=MAX_TOKENS,
                                 do_sample=False)
        assert tuple(out[0, len(prompt):].tolist()) == tokens


@pytest.fixture(scope="module")
def tiny_gemma3_vision_dir(tmp_path_factory):
    from tiny_models import make_tiny_gemma3_vision
    from tiny_tokenizers import build_byte_level

    directory = tmp_path_factory.mktemp("tiny_gemma3_vision")
    build_byte_level(directory)
    return make_tiny_gemma3_vision(directory, seed=0, vocab_size=400)


def test_a_vision_language_checkpoint_serves_its_language_model_with_hf_tokens(tiny_gemma3_vision_dir,
                                                                               launch_module_stack):
    from transformers import AutoModelForImageTextToText

    stack = launch_module_stack.with_scheduler(tiny_gemma3_vision_dir, FORCED_EXECUTOR, FORCED_SCHEDULER)
    prompts = make_prompts(397)  # below the image, begin-image and end-image tokens (397-399)
    ours = run_all(stack.address, prompts)
    assert_all_blocks_free(stack.address)
    model = AutoModelForImageTextToText.from_pretrained(tiny_gemma3_vision_dir, dtype=torch.float32).eval()
    for prompt, tokens in zip(prompts, ours):
        with torch.inference_mode():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=MAX_TOKENS, min_new_tokens=MAX_TOKENS,
                                 do_sample=False)
        assert tuple(out[0, len(prompt):].tolist()) == tokens
