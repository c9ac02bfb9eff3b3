"""Runs of constrained generation on the executor, and an independent reading of llguidance's masks, for the
structured output tests."""

from __future__ import annotations

from pathlib import Path

import llguidance
import numpy as np
from llguidance.numpy import fill_next_token_bitmask

from executor_svc.config import ExecutorConfig
from executor_svc.server import build_runner
from executor_svc.token_mask import mask_words
from stepahead_common.structured_output import grammar_of
from stepahead_proto import executor_pb2, sampling_pb2

VOCAB = 400
EOS = 2
REGEX = r"[0-9]{2,4}-[a-z]{3,6}!"


def build_constrained_model(directory: Path) -> Path:
    """The tiny checkpoint the structured output tests generate with (byte-level tokenizer, VOCAB tokens)."""
    from tiny_models import make_tiny_llama
    from tiny_tokenizers import build_byte_level

    build_byte_level(directory)
    return make_tiny_llama(directory, seed=5, vocab_size=VOCAB)


def llg_tokenizer_of(model_dir: Path) -> llguidance.LLTokenizer:
    """llguidance's view of the checkpoint's tokenizer, built by the test itself (independent of the executor's)."""
    return llguidance.LLTokenizer((model_dir / "tokenizer.json").read_text(), n_vocab=VOCAB, eos_token=[EOS])


def decode(model_dir: Path, ids: list[int]) -> str:
    """The text of ``ids`` (special tokens skipped)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(model_dir / "tokenizer.json")).decode(ids, skip_special_tokens=True)


def allowed_of(matcher: llguidance.LLMatcher) -> np.ndarray:
    """An independent reading of the matcher's mask: bool [VOCAB]."""
    bits = np.zeros((1, mask_words(VOCAB)), dtype=np.int32)
    fill_next_token_bitmask(matcher, bits)
    return np.unpackbits(bits.view(np.uint8), bitorder="little")[:VOCAB].astype(bool)


def fresh_matcher(llg_tokenizer, format_: sampling_pb2.StructuredOutput) -> llguidance.LLMatcher:
    return llguidance.LLMatcher(llg_tokenizer, grammar_of(format_))


def runner_for(model_dir: Path, defer: bool = False, **overrides):
    config = ExecutorConfig(model_dir=str(model_dir), num_kv_blocks=40, defer_token_readback=defer, **overrides)
    return build_runner(config)


def generate(runner, prompt: list[int], sampling: sampling_pb2.SamplingParams, max_tokens: int,
             output: list[int] | None = None, **request: object) -> list[int]:
    """Prefill then decode one token per step until EOS or max_tokens; returns the new tokens."""
    output = list(output or [])
    known = prompt + output
    new = executor_pb2.NewRequestData(request_id="r", prompt_token_ids=prompt, output_token_ids=output,
                                      sampling=sampling, block_ids=list(range(8)),
                                      num_scheduled_tokens=len(known), **request)
    result = runner.execute(executor_pb2.StepRequest(step_id=0, new_requests=[new]))
    tokens = list(result.outputs[0].token_ids)
    computed = len(known)
    while tokens[-1] != EOS and len(tokens) < max_tokens:
        cached = executor_pb2.CachedRequestData(request_id="r", num_computed_tokens=computed,
                                                num_scheduled_tokens=1)
        result = runner.execute(executor_pb2.StepRequest(step_id=computed, cached_requests=[cached]))
        tokens += result.outputs[0].token_ids
        computed += 1
    return tokens
