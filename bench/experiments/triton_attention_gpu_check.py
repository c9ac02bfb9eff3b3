"""Triton paged attention against the torch backends on a CUDA GPU: correctness and time per layer call.

A decode batch at SmolLM2-135M's attention shapes (9 query heads, 3 KV heads, head_dim 64, block_size 16)
with contexts around ``--context`` tokens. For each batch size it checks the Triton backend's output and
cache write against TorchAttentionBackend (the reference), then times one layer's forward (K/V write +
attention) of each backend with CUDA events: eagerly, and replayed from a CUDA graph for the graph-safe
ones (triton, torch_padded).

    PYTHONPATH=.:proto python bench/experiments/triton_attention_gpu_check.py --batches 1,16,64 --context 600
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch

HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 9, 3, 64, 16
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 5e-3, torch.float32: 1e-4}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,16,64", help="comma-separated decode batch sizes")
    parser.add_argument("--context", type=int, default=600, help="mean context length (each within +-10%%)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument(
        "--splits", default="auto,1,2,4,8", help="comma-separated num_splits to run (auto = the backend's choice)"
    )
    parser.add_argument("--iters", type=int, default=200, help="timed calls per measurement")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls before each measurement")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.batch_sizes = [int(b) for b in args.batches.split(",")]
    args.split_choices = [None if s == "auto" else int(s) for s in args.splits.split(",")]
    if min(args.batch_sizes) < 1 or args.context < 2 or args.iters < 1 or args.warmup < 0:
        parser.error("--batches must be >= 1, --context >= 2, --iters >= 1, --warmup >= 0")
    return args


class DecodeBatch:
    """One decode step's q/k/v, a KV cache holding each sequence's context, and its metadata."""

    def __init__(self, batch: int, context: int, dtype: torch.dtype, generator: torch.Generator) -> None:
        from executor_svc.attention.metadata import AttentionMetadata

        spread = max(1, context // 10)
        self.seq_lens = torch.randint(context - spread, context + spread + 1, (batch,), generator=generator).tolist()
        widths = [-(-n // BLOCK_SIZE) for n in self.seq_lens]
        num_blocks = sum(widths) + 1  # the last is the padded backend's scratch block
        order = torch.randperm(num_blocks - 1, generator=generator).tolist()
        self.tables, used = [], 0
        for width in widths:
            self.tables.append(order[used : used + width])
            used += width

        def randn(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=generator).to("cuda", dtype)

        self.q = randn(batch, HEADS, HEAD_DIM)
        self.k = randn(batch, KV_HEADS, HEAD_DIM)
        self.v = randn(batch, KV_HEADS, HEAD_DIM)
        self.cache = randn(num_blocks, 2, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
        self.scale = HEAD_DIM**-0.5
        self.build_meta = lambda: AttentionMetadata.build(
            [1] * batch, self.seq_lens, self.tables, BLOCK_SIZE, torch.device("cuda")
        )

    def runner(self, backend: object, cache: torch.Tensor) -> Callable[[], torch.Tensor]:
        """A call of the backend's forward over this batch (its metadata built once, as for one step)."""
        meta = self.build_meta()
        forward = backend.forward  # type: ignore[attr-defined]
        return lambda: forward(self.q, self.k, self.v, cache, meta, self.scale)


def time_eager(fn: Callable[[], torch.Tensor], warmup: int, iters: int) -> float:
    """Mean microseconds per call, launches included."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / iters


def time_graph(fn: Callable[[], torch.Tensor], warmup: int, iters: int) -> float:
    """Mean microseconds per replay of fn captured in a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_eager(graph.replay, warmup, iters)


def check(batch: DecodeBatch, num_splits: int | None, dtype: torch.dtype) -> tuple[float, bool]:
    """Max |triton - torch| over the output, and whether both caches are equal after the write."""
    from executor_svc.attention.torch_backend import TorchAttentionBackend
    from executor_svc.attention.triton_backend import TritonAttentionBackend

    reference_cache, cache = batch.cache.clone(), batch.cache.clone()
    expected = batch.runner(TorchAttentionBackend(), reference_cache)()
    got = batch.runner(TritonAttentionBackend(num_splits), cache)()
    error = (got.float() - expected.float()).abs().max().item()
    return error, torch.equal(cache, reference_cache)


def measure(batch_size: int, args: argparse.Namespace, generator: torch.Generator) -> list[list[str]]:
    """Table rows for one batch size: the torch backends, then triton at each num_splits."""
    from executor_svc.attention.padded_torch_backend import PaddedTorchAttentionBackend
    from executor_svc.attention.torch_backend import TorchAttentionBackend
    from executor_svc.attention.triton_backend import TritonAttentionBackend

    dtype = DTYPES[args.dtype]
    batch = DecodeBatch(batch_size, args.context, dtype, generator)
    context = f"{min(batch.seq_lens)}-{max(batch.seq_lens)}"
    rows = []
    torch_eager = time_eager(batch.runner(TorchAttentionBackend(), batch.cache.clone()), args.warmup, args.iters)
    rows.append([str(batch_size), context, "torch", "-", "reference", f"{torch_eager:.1f}", "-"])
    padded = PaddedTorchAttentionBackend()
    padded_eager = time_eager(batch.runner(padded, batch.cache.clone()), args.warmup, args.iters)
    padded_graph = time_graph(batch.runner(padded, batch.cache.clone()), args.warmup, args.iters)
    rows.append([str(batch_size), context, "torch_padded", "-", "-", f"{padded_eager:.1f}", f"{padded_graph:.1f}"])
    for num_splits in args.split_choices:
        error, cache_ok = check(batch, num_splits, dtype)
        verdict = "ok" if error <= TOLERANCE[dtype] and cache_ok else "FAIL"
        backend = TritonAttentionBackend(num_splits)
        eager = time_eager(batch.runner(backend, batch.cache.clone()), args.warmup, args.iters)
        graph = time_graph(batch.runner(backend, batch.cache.clone()), args.warmup, args.iters)
        label = "auto" if num_splits is None else str(num_splits)
        cache_note = "" if cache_ok else ", cache differs"
        rows.append(
            [str(batch_size), context, "triton", label, f"{verdict} ({error:.1e}{cache_note})", f"{eager:.1f}",
             f"{graph:.1f}"]
        )  # fmt: skip
    return rows


def print_table(rows: list[list[str]]) -> None:
    """Aligned columns, header first."""
    header = ["batch", "context", "backend", "splits", "max err vs torch", "eager us", "graph us"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))


def main(argv: list[str] | None = None) -> int:
    """Run the checks and timings; exit status 1 when a check fails or there is no GPU."""
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (the Triton interpreter would take minutes for these shapes)", file=sys.stderr)
        return 1
    print(f"{torch.cuda.get_device_name()}, {args.dtype}, heads {HEADS}/{KV_HEADS}, head_dim {HEAD_DIM}, "
          f"block_size {BLOCK_SIZE}, {args.iters} calls per time")  # fmt: skip
    generator = torch.Generator().manual_seed(args.seed)
    rows = [row for batch_size in args.batch_sizes for row in measure(batch_size, args, generator)]
    print_table(rows)
    return 1 if any("FAIL" in row[4] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
