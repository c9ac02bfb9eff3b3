"""Reference timings measured in the benchmark's own process: HF transformers generate and our bare forward.

Imports torch lazily: only `stepahead bench` pays for it.
"""

from __future__ import annotations

import statistics
import time


def measure_bare_decode_forward(
    model_dir: str, num_threads: int, context_lens: list[int], repeats: int = 20, warmup: int = 10,
    query_len: int = 1,
) -> dict:
    """Median time of the executor model's forward + LM head over ``query_len`` new tokens per sequence
    (1: a decode step; K + 1: a verify step), logits for every new token, for a batch of
    ``len(context_lens)`` sequences that each hold that many tokens of context.

    No scheduler, no RPC, no sampler, no metadata building: the floor the engine's ITL is compared with.
    Attention reads every cached token, so the contexts should be the ones the engine decoded at
    (see ``client.bench.stats.decode_context_quantiles``).
    """
    import torch

    from executor_svc.attention.metadata import AttentionMetadata
    from executor_svc.attention.torch_backend import TorchAttentionBackend
    from executor_svc.kv_cache import PagedKVCache
    from executor_svc.model_loader import load_hf_config, load_model
    from executor_svc.row_argmax import row_argmax

    if not context_lens or min(context_lens) < 1:
        raise ValueError(f"context_lens: need at least one context of >= 1 token, got {context_lens}")
    torch.set_num_threads(num_threads)
    # Prefill shorter contexts so that the timed steps are centred on the requested ones.
    prefill_lens = [max(1, n - warmup - repeats // 2) for n in context_lens]
    config = load_hf_config(model_dir)
    model = load_model(model_dir, torch.float32, torch.device("cpu"), TorchAttentionBackend())
    block_size = 16
    tables, next_block = [], 0
    for prefill_len in prefill_lens:
        blocks = -(-(prefill_len + warmup + repeats + query_len + 1) // block_size)
        tables.append(list(range(next_block, next_block + blocks)))
        next_block += blocks
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv = PagedKVCache(config.num_hidden_layers, next_block, block_size,
                      config.num_key_value_heads, head_dim, torch.float32, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    batch_size = len(context_lens)
    with torch.inference_mode():
        ids = torch.randint(0, config.vocab_size, (sum(prefill_lens),), generator=generator)
        positions = torch.cat([torch.arange(n) for n in prefill_lens])
        meta = AttentionMetadata.build(prefill_lens, prefill_lens, tables, block_size, "cpu")
        model(ids, positions, meta, kv)
        times = []
        for step in range(warmup + repeats):
            seq_lens = [n + step + query_len for n in prefill_lens]
            meta = AttentionMetadata.build([query_len] * batch_size, seq_lens, tables, block_size, "cpu")
            ids = torch.randint(0, config.vocab_size, (batch_size * query_len,), generator=generator)
            positions = torch.cat([torch.arange(n - query_len, n) for n in seq_lens])
            start = time.perf_counter()
            hidden = model(ids, positions, meta, kv)
            row_argmax(model.compute_logits(hidden))
            if step >= warmup:
                times.append(time.perf_counter() - start)
    return {"batch_size": batch_size, "query_len": query_len, "context_lens": list(context_lens),
            "median_ms": 1000 * statistics.median(times),
            "min_ms": 1000 * min(times), "max_ms": 1000 * max(times), "repeats": repeats}


def measure_bare_decode_forward_in_subprocess(
    model_dir: str, num_threads: int, context_lens: list[int], repeats: int = 40, query_len: int = 1
) -> dict:
    """measure_bare_decode_forward in a fresh interpreter: its main thread, no gRPC or asyncio around it."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from client.bench.baselines import measure_bare_decode_forward\n"
        f"print(json.dumps(measure_bare_decode_forward({model_dir!r}, {num_threads}, {list(context_lens)!r}, "
        f"repeats={repeats}, query_len={query_len})))\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _count_generated(row: list[int], eos_ids: set[int]) -> int:
    """Tokens up to and including the first EOS (HF pads finished rows afterwards)."""
    for index, token in enumerate(row):
        if token in eos_ids:
            return index + 1
    return len(row)


def hf_generate_throughput(
    model_dir: str, prompts: list[str], batch_size: int, max_new_tokens: int, num_threads: int
) -> dict:
    """HF transformers greedy `generate` over the prompts in static batches (left-padded), fp32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(num_threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos_ids))
    total_tokens = 0
    start = time.perf_counter()
    with torch.inference_mode():
        for first in range(0, len(prompts), batch_size):
            texts = [
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
                )
                for p in prompts[first : first + batch_size]
            ]
            inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_id)
            generated = out[:, inputs["input_ids"].shape[1]:].tolist()
            total_tokens += sum(_count_generated(row, eos_ids) for row in generated)
    wall = time.perf_counter() - start
    return {"batch_size": batch_size, "num_requests": len(prompts), "output_tokens": total_tokens,
            "wall_s": wall, "throughput_tok_s": total_tokens / wall}
