"""What structured output costs: the matcher's work per token, the mask on the logits, and whole requests.

1. Matcher (llguidance) on the default model's tokenizer, one JSON Schema: microseconds per mask and per token
   consumed, walking a real JSON answer token by token (masks of a verify step with 3 drafts too).
2. The mask on [rows, 49152] float32 logits (executor_svc.token_mask), the executor's added work per step (a
   verify step with K drafts has K + 1 rows per request).
3. The default model served as `stepahead serve` serves it (shipped drafter on, async), 16 MT-Bench first turns asking
   for JSON, free vs constrained by the schema, 3 alternating rounds each at c=1 (first 8 prompts) and c=16 (all 16):
   tok/s and time per output token (TPOT), medians.
    PYTHONPATH=.:proto python3 bench/experiments/structured_output_cost.py"""
import asyncio
import json
import statistics
import time
from pathlib import Path

import llguidance
import torch

from client import AsyncClient
from client.model_resolver import resolve_model
from client.mtbench import load_mtbench_first_turns
from client.stack import LocalStack
from executor_svc.grammar import GrammarCompiler
from executor_svc.token_mask import TokenMask, apply_token_mask
from stepahead_proto import sampling_pb2

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 600},
                                           "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
          "required": ["answer", "confidence"], "additionalProperties": False}
ANSWER = json.dumps({"answer": "Paris is the capital of France; it has been since the tenth century, give or take.",
                     "confidence": 97})

def matcher_cost(model_dir: Path):
    compiler = GrammarCompiler.for_model(model_dir, 49152, [2])
    format_ = sampling_pb2.StructuredOutput(json_schema=json.dumps(SCHEMA))
    t = time.perf_counter(); compiler.request_grammar(format_); compile_ms = (time.perf_counter() - t) * 1e3
    tok = llguidance.LLTokenizer((model_dir / "tokenizer.json").read_text(), n_vocab=49152, eos_token=[2])
    ids = tok.tokenize_str(ANSWER)
    for drafts in (0, 3):
        grammar = compiler.request_grammar(format_)
        mask_s, consume_s = [], []
        for i, token in enumerate(ids):
            t = time.perf_counter(); grammar.masks(ids[i + 1:i + 1 + drafts] if drafts else []); mask_s.append(time.perf_counter() - t)
            t = time.perf_counter(); grammar.consume([token]); consume_s.append(time.perf_counter() - t)
        assert grammar.error is None
        print(f"matcher, {len(ids)} tokens, {drafts} drafts: mask p50 {statistics.median(mask_s)*1e6:.0f} us "
              f"(mean {statistics.mean(mask_s)*1e6:.0f}), consume p50 {statistics.median(consume_s)*1e6:.0f} us")
    print(f"first compile (building llguidance's tokenizer view included): {compile_ms:.1f} ms")
    grammar = compiler.request_grammar(format_)
    real = []
    for token in ids:
        real.append(grammar.masks([])[0]); grammar.consume([token])
    return real

def apply_cost(real):
    """Masks met walking the answer (structural positions allow few tokens, string contents most)."""
    for rows in (1, 16, 64):
        logits = torch.randn(rows, 49152)
        mask = TokenMask.build({r: real[r % len(real)] for r in range(rows)}, "cpu")
        for _ in range(5): apply_token_mask(logits, mask)
        t = time.perf_counter()
        for _ in range(50): apply_token_mask(logits, mask)
        print(f"mask on [{rows}, 49152] logits: {(time.perf_counter() - t) / 50 * 1e6:.0f} us")

async def one(client, prompt, constrained):
    extra = {"json_schema": SCHEMA} if constrained else {}
    start = time.perf_counter(); first = None; n = 0
    async for chunk in client.generate_stream(messages=[{"role": "user", "content": prompt + " Reply in JSON with an answer and a confidence."}],
                                              max_tokens=160, temperature=0.0, **extra):
        if chunk.token_ids and first is None: first = time.perf_counter()
        n += len(chunk.token_ids)
    end = time.perf_counter()
    return n, end - start, (end - first) / max(1, n - 1)

async def load(address, prompts, concurrency, constrained):
    async with AsyncClient(address) as client:
        start = time.perf_counter()
        sem = asyncio.Semaphore(concurrency)
        async def run(p):
            async with sem: return await one(client, p, constrained)
        results = await asyncio.gather(*(run(p) for p in prompts))
        wall = time.perf_counter() - start
    tokens = sum(r[0] for r in results)
    return tokens / wall, statistics.median(r[2] for r in results) * 1e3, tokens

def main():
    model_dir = resolve_model(None)
    apply_cost(matcher_cost(model_dir))
    prompts = load_mtbench_first_turns()[:16]
    stack = LocalStack(str(model_dir), ["--num-threads", "2"], [])
    stack.start(timeout_s=600)
    try:
        asyncio.run(load(stack.address, prompts[:2], 1, True))  # warm-up: compile, tokenizer views
        table = {}
        for round_ in range(3):
            for c, ps in ((1, prompts[:8]), (16, prompts)):
                for constrained in (False, True):
                    tps, tpot, tokens = asyncio.run(load(stack.address, ps, c, constrained))
                    table.setdefault((c, constrained), []).append((tps, tpot))
                    print(f"round {round_} c={c} {'json_schema' if constrained else 'free':11s} {tps:7.1f} tok/s "
                          f"TPOT p50 {tpot:6.1f} ms ({tokens} tokens)", flush=True)
        for (c, constrained), rows in table.items():
            print(f"median c={c} {'json_schema' if constrained else 'free':11s} "
                  f"{statistics.median(r[0] for r in rows):7.1f} tok/s TPOT {statistics.median(r[1] for r in rows):6.1f} ms")
    finally:
        stack.stop()

if __name__ == "__main__":
    main()
