"""TritonAttentionBackend against the reference torch backend; on the CPU through Triton's interpreter."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.cuda_graphs.buckets import GraphShape
from executor_svc.cuda_graphs.static_inputs import StaticStepInputs
from executor_svc.host_batch import HostBatch

# The interpreter must be chosen before the kernels are defined (triton reads it at @triton.jit time).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from paged_attention_cases import shuffled_tables  # noqa: E402

from executor_svc.attention import triton_backend  # noqa: E402
from executor_svc.attention.triton_backend import TritonAttentionBackend, triton_available  # noqa: E402
from executor_svc.attention.triton_kernels import MAX_SPLITS, choose_num_splits, num_query_tiles  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
BLOCK_SIZE = 4
NUM_BLOCKS = 24
HEAD_DIM = 8


def random_inputs(
    generator: torch.Generator,
    tokens: int,
    heads: int,
    kv_heads: int,
    num_blocks: int = NUM_BLOCKS,
    head_dim: int = HEAD_DIM,
    block_size: int = BLOCK_SIZE,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v and a cache full of random (stale) K/V, on DEVICE."""
    q = torch.randn(tokens, heads, head_dim, generator=generator)
    k = torch.randn(tokens, kv_heads, head_dim, generator=generator)
    v = torch.randn(tokens, kv_heads, head_dim, generator=generator)
    cache = torch.randn(num_blocks, 2, block_size, kv_heads, head_dim, generator=generator)
    return q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), cache.to(DEVICE)


def compare_with_reference(
    query_lens: list[int],
    seq_lens: list[int],
    heads: int,
    kv_heads: int,
    seed: int,
    num_splits: int | None = 1,
    num_blocks: int = NUM_BLOCKS,
    head_dim: int = HEAD_DIM,
    block_size: int = BLOCK_SIZE,
) -> torch.Tensor:
    """Runs both backends on the same random batch; asserts equal outputs and caches; returns the output."""
    generator = torch.Generator().manual_seed(seed)
    tables = shuffled_tables(seq_lens, num_blocks, block_size, generator)
    q, k, v, cache = random_inputs(generator, sum(query_lens), heads, kv_heads, num_blocks, head_dim, block_size)
    reference_cache = cache.clone()
    meta = AttentionMetadata.build(query_lens, seq_lens, tables, block_size, DEVICE)
    expected = TorchAttentionBackend().forward(q, k, v, reference_cache, meta, scale=0.3)
    fresh = AttentionMetadata.build(query_lens, seq_lens, tables, block_size, DEVICE)
    got = TritonAttentionBackend(num_splits).forward(q, k, v, cache, fresh, scale=0.3)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cache, reference_cache, atol=0, rtol=0)
    return got


def test_available_here():
    assert triton_available()


def test_pure_decode_batch_matches_the_reference_backend():
    compare_with_reference([1, 1, 1, 1], [5, 17, 1, 9], heads=6, kv_heads=2, seed=0)


@pytest.mark.parametrize(("heads", "kv_heads"), [(6, 2), (4, 4)], ids=["gqa", "mha"])
def test_mixed_batch_matches_the_reference_backend(heads, kv_heads):
    # A prefill chunk with cached context, a decode, a verify of 4, a whole prompt of 20 (for GQA two
    # query tiles of 16, so the second tile's keys stop at the prompt's end and the other sequences'
    # second tiles are empty).
    compare_with_reference([7, 1, 4, 20], [15, 18, 11, 20], heads, kv_heads, seed=1)


@pytest.mark.parametrize("num_splits", [1, 2])
def test_padded_static_batch_matches_on_real_rows_and_padding_writes_nothing(num_splits):
    generator = torch.Generator().manual_seed(2)
    batch = HostBatch(BLOCK_SIZE)
    batch.add_sequence([0, 0, 0], start=5, block_table=[3, 8])  # verify of 3 at positions 5..7
    batch.add_sequence([0], start=12, block_table=[1, 2, 4, 6])  # decode at position 12
    shape = GraphShape(4, 3)
    inputs = StaticStepInputs(4, 3, 6, BLOCK_SIZE, DEVICE)
    inputs.write(batch, shape)
    q, k, v, cache = random_inputs(generator, shape.num_tokens, 6, 2)
    reference_cache = cache.clone()
    real = batch.num_tokens
    meta = AttentionMetadata.build(batch.query_lens, batch.seq_lens, batch.block_tables, BLOCK_SIZE, DEVICE)
    expected = TorchAttentionBackend().forward(q[:real], k[:real], v[:real], reference_cache, meta, scale=0.5)
    got = TritonAttentionBackend(num_splits).forward(q, k, v, cache, inputs.metadata(shape), scale=0.5)
    torch.testing.assert_close(got[:real], expected, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(got).all(), "padded rows must not be NaN (they flow through the rest of the layer)"
    assert not got[real:].any(), "rows of no sequence are zero"
    torch.testing.assert_close(cache, reference_cache, atol=0, rtol=0)  # no scratch block: nothing else written


def test_split_kv_gives_the_same_output_for_any_number_of_splits():
    # Contexts long enough for three non-empty splits of 64-key tiles, a verify of 3, a one-token sequence
    # (its other splits are empty).
    query_lens, seq_lens = [1, 3, 1, 1], [150, 70, 9, 1]
    outputs = [
        compare_with_reference(query_lens, seq_lens, heads=6, kv_heads=2, seed=3, num_splits=n, num_blocks=64)
        for n in (1, 2, 3)
    ]
    torch.testing.assert_close(outputs[1], outputs[0], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(outputs[2], outputs[0], atol=1e-6, rtol=1e-6)


def test_wide_group_with_padded_head_dim_and_larger_blocks():
    # 8 query heads per KV head: query tiles of 8 queries, so 3 tiles for the chunk of 20; head_dim 80 pads to 128.
    compare_with_reference([20, 1], [30, 9], heads=8, kv_heads=1, seed=7, head_dim=80, block_size=16, num_blocks=8)


def test_automatic_num_splits_runs():
    compare_with_reference([1, 2], [30, 12], heads=6, kv_heads=2, seed=4, num_splits=None)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_are_close_to_fp32(dtype):
    generator = torch.Generator().manual_seed(5)
    query_lens, seq_lens, tables = [3, 1], [10, 6], [[4, 9, 2], [7, 1]]
    q, k, v, cache = (t.to(dtype) for t in random_inputs(generator, 4, 6, 2))
    reference_cache = cache.float()
    meta = AttentionMetadata.build(query_lens, seq_lens, tables, BLOCK_SIZE, DEVICE)
    expected = TorchAttentionBackend().forward(q.float(), k.float(), v.float(), reference_cache, meta, 0.3)
    fresh = AttentionMetadata.build(query_lens, seq_lens, tables, BLOCK_SIZE, DEVICE)
    got = TritonAttentionBackend(2).forward(q, k, v, cache, fresh, scale=0.3)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), expected, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(cache.float(), reference_cache, atol=0, rtol=0)


def test_forward_reads_no_tensor_on_the_host():
    from host_syncs import recorded_host_syncs

    generator = torch.Generator().manual_seed(6)
    q, k, v, cache = random_inputs(generator, 3, 6, 2)
    meta = AttentionMetadata.build([2, 1], [6, 9], [[0, 1], [2, 3, 4]], BLOCK_SIZE, DEVICE)
    with recorded_host_syncs() as syncs:
        TritonAttentionBackend(2).forward(q, k, v, cache, meta, scale=0.3)
    assert syncs == []


@pytest.mark.parametrize("num_splits", [0, -1, 1.5, True, "2"])
def test_invalid_num_splits_is_rejected(num_splits):
    with pytest.raises(ValueError, match="num_splits"):
        TritonAttentionBackend(num_splits)


def test_choose_num_splits_depends_on_shapes_only():
    assert choose_num_splits(num_seqs=64, num_kv_heads=3, max_blocks_bound=64, num_sms=132) == 1
    assert choose_num_splits(num_seqs=1, num_kv_heads=3, max_blocks_bound=4, num_sms=132) == 1  # 64 tokens
    assert choose_num_splits(num_seqs=1, num_kv_heads=3, max_blocks_bound=38, num_sms=132) == 4  # 608 tokens
    assert choose_num_splits(num_seqs=1, num_kv_heads=3, max_blocks_bound=4096, num_sms=132) == MAX_SPLITS
    assert choose_num_splits(num_seqs=16, num_kv_heads=3, max_blocks_bound=4096, num_sms=132) == 3
    # Query tiles count as programs: 2 sequences x 3 KV heads x 4 tiles of 16 (64 queries of a 3-head group).
    tiles = num_query_tiles(group=3, max_query_len=64)
    assert tiles == 4
    assert choose_num_splits(num_seqs=2, num_kv_heads=3, max_blocks_bound=4096, num_sms=132, num_query_tiles=tiles) == 6


def test_backend_module_imports_and_reports_unavailable_without_triton(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton now raises ImportError
    monkeypatch.delitem(sys.modules, "executor_svc.attention.triton_backend")
    reimported = importlib.import_module("executor_svc.attention.triton_backend")
    assert reimported is not triton_backend
    assert not reimported.triton_available()
    assert reimported.TritonAttentionBackend().name == "triton"


def test_kernels_compile_for_an_h100_without_one(tmp_path):
    # The interpreter accepts code the GPU compiler rejects: compile for sm_90 in a process without it.
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    script = Path(__file__).with_name("triton_sm90_compile.py")
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert "compiled for sm_90" in result.stdout
