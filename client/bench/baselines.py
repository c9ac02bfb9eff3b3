"""Reference timings measured in the benchmark's own process: HF transformers generate and our bare forward.

Imports torch lazily: only `stepahead bench` pays for it.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from client.bench.forward_setup import ForwardSetup


def measure_bare_decode_forward(
    model_dir: str, num_threads: int, context_lens: list[int], repeats: int = 20, warmup: int = 10,
    query_len: int = 1, setup: ForwardSetup | None = None, graphs: bool = False,
) -> dict:
    """Median time of the executor model's forward + LM head over ``query_len`` new tokens per sequence
    (1: a decode step; K + 1: a verify step), logits for every new token, for a batch of
    ``len(context_lens)`` sequences that each hold that many tokens of context.

    No scheduler, no RPC, no sampler: the floor the engine's ITL is compared with. Attention reads every
    cached token, so the contexts should be the ones the engine decoded at (see
    ``client.bench.stats.decode_context_quantiles``). ``graphs``: replay the step from a captured CUDA
    graph, as the executor does (CUDA only).
    """
    import torch

    from executor_svc.attention.selection import build_attention_backend
    from executor_svc.model_loader import load_model

    setup = setup or ForwardSetup()
    if not context_lens or min(context_lens) < 1:
        raise ValueError(f"context_lens: need at least one context of >= 1 token, got {context_lens}")
    if graphs and not setup.is_cuda:
        raise ValueError("graphs: a captured step needs a CUDA device")
    torch.set_num_threads(num_threads)
    device = torch.device(setup.device)
    backend = build_attention_backend(setup.attention_backend, device)
    model = load_model(model_dir, getattr(torch, setup.dtype_name), device, backend, load_format=setup.load_format)
    # Prefill shorter contexts so that the timed steps (query_len tokens each) are centred on the requested ones.
    prefill_lens = [max(1, n - (warmup + repeats // 2) * query_len) for n in context_lens]
    bench = _BareForward(model, prefill_lens, (warmup + repeats) * query_len + 1, query_len, graphs)
    times = bench.time_steps(warmup + repeats)[warmup:]
    return {"batch_size": len(context_lens), "query_len": query_len, "context_lens": list(context_lens),
            "device": setup.device, "dtype": setup.dtype_name, "graphs": graphs,
            "median_ms": 1000 * statistics.median(times),
            "min_ms": 1000 * min(times), "max_ms": 1000 * max(times), "repeats": repeats}


class _BareForward:
    """One batch of sequences over a fresh KV cache, stepped ``query_len`` tokens at a time."""

    BLOCK_SIZE = 16

    def __init__(self, model: Any, prefill_lens: list[int], headroom: int, query_len: int, graphs: bool) -> None:
        import torch

        from executor_svc.cuda_graphs.step_graphs import StepGraphs, cuda_graph_factory
        from executor_svc.host_batch import HostBatch
        from executor_svc.kv_cache import PagedKVCache

        config = model.config
        device = model.embed_weight.device
        self.model, self.prefill_lens, self.query_len = model, prefill_lens, query_len
        self.device, self.vocab_size = device, config.vocab_size
        blocks_per_seq = -(-(max(prefill_lens) + headroom) // self.BLOCK_SIZE)
        self.tables = [list(range(i * blocks_per_seq, (i + 1) * blocks_per_seq)) for i in range(len(prefill_lens))]
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.kv = PagedKVCache(config.num_hidden_layers, len(prefill_lens) * blocks_per_seq, self.BLOCK_SIZE,
                               config.num_key_value_heads, head_dim, model.embed_weight.dtype, device,
                               scratch_blocks=1 if graphs else 0)
        self.graphs = None
        if graphs:
            self.graphs = StepGraphs(model, self.kv, len(prefill_lens), query_len, blocks_per_seq,
                                     cuda_graph_factory())
            self.graphs.capture_all()
        self.generator = torch.Generator().manual_seed(0)
        prefill = HostBatch(self.BLOCK_SIZE)
        for length, table in zip(prefill_lens, self.tables):
            prefill.add_sequence(self._random_ids(length), 0, table)
        with torch.inference_mode():
            self._eager(prefill)

    def _random_ids(self, count: int) -> list[int]:
        import torch

        return torch.randint(0, self.vocab_size, (count,), generator=self.generator).tolist()

    def _eager(self, batch: Any) -> Any:
        input_ids, positions, meta = batch.to_device(self.device)
        return self.model.compute_logits(self.model(input_ids, positions, meta, self.kv))

    def time_steps(self, num_steps: int) -> list[float]:
        """Wall time of each step, the device synchronised before and after each one."""
        import torch

        from executor_svc.host_batch import HostBatch

        times = []
        with torch.inference_mode():
            for step in range(num_steps):
                batch = HostBatch(self.BLOCK_SIZE)
                for length, table in zip(self.prefill_lens, self.tables):
                    batch.add_sequence(self._random_ids(self.query_len), length + step * self.query_len, table)
                self._synchronize()
                start = time.perf_counter()
                if self.graphs is not None:
                    shape = self.graphs.shape_for(batch)
                    assert shape is not None  # captured for exactly this batch
                    self.graphs.run(batch, shape, lambda ids: None)
                else:
                    self._eager(batch)
                self._synchronize()
                times.append(time.perf_counter() - start)
        return times

    def _synchronize(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def measure_bare_decode_forward_in_subprocess(
    model_dir: str, num_threads: int, context_lens: list[int], repeats: int = 40, query_len: int = 1,
    setup: ForwardSetup | None = None, graphs: bool = False,
) -> dict:
    """measure_bare_decode_forward in a fresh interpreter: its main thread, no gRPC or asyncio around it."""
    import json
    import subprocess
    import sys

    setup_args = (setup or ForwardSetup()).as_dict()
    code = (
        "import json, sys\n"
        "from client.bench.baselines import measure_bare_decode_forward\n"
        "from client.bench.forward_setup import ForwardSetup\n"
        f"print(json.dumps(measure_bare_decode_forward({model_dir!r}, {num_threads}, {list(context_lens)!r}, "
        f"repeats={repeats}, query_len={query_len}, setup=ForwardSetup(**{setup_args!r}), graphs={graphs})))\n"
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
    model_dir: str, prompts: list[str], batch_size: int, max_new_tokens: int, num_threads: int,
    setup: ForwardSetup | None = None, ignore_eos: bool = False,
) -> dict:
    """HF transformers greedy `generate` over the prompts in static batches (left-padded), eager, on the
    setup's device and dtype (fp32 on the CPU). ``ignore_eos``: every request generates max_new_tokens."""
    import torch

    setup = setup or ForwardSetup()
    torch.set_num_threads(num_threads)
    tokenizer, model = _hf_model(model_dir, setup, padding_side="left")
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos_ids))
    length = {"min_new_tokens": max_new_tokens} if ignore_eos else {}
    total_tokens = 0
    start = time.perf_counter()
    with torch.inference_mode():
        for first in range(0, len(prompts), batch_size):
            texts = [_chat_text(tokenizer, p) for p in prompts[first : first + batch_size]]
            inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(setup.device)
            out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_id,
                                 **length)
            generated = out[:, inputs["input_ids"].shape[1]:].tolist()
            total_tokens += sum(len(row) if ignore_eos else _count_generated(row, eos_ids) for row in generated)
    wall = time.perf_counter() - start
    return {"batch_size": batch_size, "num_requests": len(prompts), "output_tokens": total_tokens,
            "wall_s": wall, "throughput_tok_s": total_tokens / wall, "peer": "hf_eager",
            "device": setup.device, "dtype": setup.dtype_name}


def hf_compiled_generate_throughput(
    model_dir: str, prompts: list[str], max_new_tokens: int, setup: ForwardSetup, warmup_prompts: int = 3
) -> dict:
    """HF generate at batch 1 with a static KV cache, which transformers compiles (CUDA graphs, mode
    reduce-overhead): the strongest single-request peer on a GPU. Every request generates max_new_tokens."""
    import torch

    tokenizer, model = _hf_model(model_dir, setup)
    model.generation_config.cache_implementation = "static"
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def run(batch: list[str]) -> int:
        total = 0
        for prompt in batch:
            inputs = tokenizer(_chat_text(tokenizer, prompt), return_tensors="pt").to(setup.device)
            with torch.inference_mode():
                out = model.generate(**inputs, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                                     do_sample=False, pad_token_id=pad_id)
            total += out.shape[1] - inputs["input_ids"].shape[1]
        return total

    run(prompts[:warmup_prompts])  # compiles
    start = time.perf_counter()
    total_tokens = run(prompts)
    wall = time.perf_counter() - start
    return {"batch_size": 1, "num_requests": len(prompts), "output_tokens": total_tokens, "wall_s": wall,
            "throughput_tok_s": total_tokens / wall, "peer": "hf_static_compiled",
            "device": setup.device, "dtype": setup.dtype_name}


def _hf_model(model_dir: str, setup: ForwardSetup, padding_side: str = "right") -> tuple[Any, Any]:
    """The tokenizer and HF model of ``model_dir`` on the setup's device and dtype; with dummy weights, the
    model is built from its config (HF's own random init: speed does not depend on the values)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side=padding_side)
    dtype = getattr(torch, setup.dtype_name)
    if setup.load_format == "dummy":
        with torch.device(setup.device):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir), dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        model.to(setup.device)
    return tokenizer, model.eval()


def _chat_text(tokenizer: Any, prompt: str) -> str:
    text: str = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )
    return text
