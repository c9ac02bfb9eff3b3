"""Quantise the default model as FP8-block, GPTQ-4bit (act order) and AWQ-4bit releases store it (with the tests'
writers), then load each with the executor's loader and report: load time, weight error against the original, and
greedy tokens on a few prompts against the unquantised model and against the weights dequantised independently.

    PYTHONPATH=.:tests/executor_svc python3 bench/experiments/quantized_default_model.py OUT_DIR
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import torch
from quantized_checkpoints import REFERENCE, awq, fp8_blocks, gptq

from executor_svc.attention.torch_backend import TorchAttentionBackend

from executor_svc.model_loader import load_model
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, a small robot"]
NEW_TOKENS = 24


def greedy(model, prompt_ids: list[int]) -> list[int]:
    from executor_svc.attention.metadata import AttentionMetadata
    from executor_svc.models.kv_layout import kv_layout

    config = model.config
    cache = kv_layout(config).cache(config.num_hidden_layers, 8, 16, torch.float32, "cpu")
    tokens, out = list(prompt_ids), []
    with torch.inference_mode():
        new = tokens
        for _ in range(NEW_TOKENS):
            start = len(tokens) - len(new)
            meta = AttentionMetadata.build([len(new)], [len(tokens)], [list(range(8))], 16, "cpu")
            hidden = model(torch.tensor(new), torch.arange(start, len(tokens)), meta, cache)
            token = int(model.compute_logits(hidden[-1:]).argmax())
            out.append(token)
            tokens.append(token)
            new = [token]
    return out


def main(out_dir: Path) -> None:
    from tokenizers import Tokenizer

    source = Path.home() / ".cache/stepahead/models/SmolLM2-135M-Instruct"  # what `bash .ci/setup` converts
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    prompts = [tokenizer.encode(p).ids for p in PROMPTS]
    started = time.monotonic()
    original = load_model(source, torch.float32, "cpu", TorchAttentionBackend())
    print(f"original: loaded in {time.monotonic() - started:.2f} s")
    expected = [greedy(original, ids) for ids in prompts]
    weights = dict(original.named_parameters())
    writers = {"fp8_blocks_128": lambda out: fp8_blocks(source, out, (128, 128)),
               "gptq_4bit_g128_act_order": lambda out: gptq(source, out, 4, 128, act_order=True),
               "awq_4bit_g128": lambda out: awq(source, out, 128)}
    for name, write in writers.items():
        target = out_dir / name
        shutil.rmtree(target, ignore_errors=True)
        write(target)
        size = sum(p.stat().st_size for p in target.glob("*.safetensors")) / 2**20
        started = time.monotonic()
        model = load_model(target, torch.float32, "cpu", TorchAttentionBackend())
        load_s = time.monotonic() - started
        reference = load_model(target / REFERENCE, torch.float32, "cpu", TorchAttentionBackend())
        same_weights = all(torch.equal(p, dict(reference.named_parameters())[n]) for n, p in model.named_parameters())
        error = max(float((p - weights[n]).abs().max()) for n, p in model.named_parameters())
        tokens = [greedy(model, ids) for ids in prompts]
        agree = sum(a == b for got, want in zip(tokens, expected) for a, b in zip(got, want))
        print(f"{name}: {size:.0f} MiB on disk, loaded in {load_s:.2f} s; weights equal the independent "
              f"dequantisation: {same_weights}; largest weight error vs the original {error:.4f}; greedy tokens "
              f"equal to the original model's: {agree}/{len(prompts) * NEW_TOKENS}")
        for prompt, got in zip(PROMPTS, tokens):
            print(f"    {prompt!r} -> {tokenizer.decode(got)!r}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
