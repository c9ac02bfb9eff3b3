"""PaddedTorchAttentionBackend (graph-safe torch attention) against the reference torch backend."""

from __future__ import annotations

import torch

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.attention.padded_torch_backend import PaddedTorchAttentionBackend
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.cuda_graphs.buckets import GraphShape
from executor_svc.cuda_graphs.static_inputs import StaticStepInputs
from executor_svc.host_batch import HostBatch

BLOCK_SIZE = 4
NUM_BLOCKS = 24  # plus one scratch block
HEADS, KV_HEADS, HEAD_DIM = 6, 2, 8


def random_cache(generator: torch.Generator) -> torch.Tensor:
    return torch.randn(NUM_BLOCKS + 1, 2, BLOCK_SIZE, KV_HEADS, HEAD_DIM, generator=generator)


def test_mixed_batch_matches_the_reference_backend():
    generator = torch.Generator().manual_seed(0)
    blocks = torch.randperm(NUM_BLOCKS, generator=generator).tolist()
    tables = [blocks[0:5], blocks[5:10], blocks[10:15], blocks[15:20]]
    # A prefill chunk with cached context, a decode, a verify of 4, a whole prompt.
    query_lens, seq_lens = [7, 1, 4, 9], [15, 18, 11, 9]
    tokens = sum(query_lens)
    q = torch.randn(tokens, HEADS, HEAD_DIM, generator=generator)
    k = torch.randn(tokens, KV_HEADS, HEAD_DIM, generator=generator)
    v = torch.randn(tokens, KV_HEADS, HEAD_DIM, generator=generator)
    cache = random_cache(generator)
    reference_cache = cache.clone()
    meta = AttentionMetadata.build(query_lens, seq_lens, tables, BLOCK_SIZE, "cpu")
    expected = TorchAttentionBackend().forward(q, k, v, reference_cache, meta, scale=0.3)
    fresh = AttentionMetadata.build(query_lens, seq_lens, tables, BLOCK_SIZE, "cpu")
    got = PaddedTorchAttentionBackend().forward(q, k, v, cache, fresh, scale=0.3)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cache, reference_cache)


def test_padded_static_batch_matches_on_real_rows_and_writes_only_scratch():
    generator = torch.Generator().manual_seed(1)
    batch = HostBatch(BLOCK_SIZE)
    batch.add_sequence([0, 0, 0], start=5, block_table=[3, 8])  # verify of 3 at positions 5..7
    batch.add_sequence([0], start=12, block_table=[1, 2, 4, 6])  # decode at position 12
    shape = GraphShape(4, 3)
    inputs = StaticStepInputs(4, 3, 6, BLOCK_SIZE, torch.device("cpu"))
    inputs.write(batch, shape)
    rows = shape.num_tokens
    q = torch.randn(rows, HEADS, HEAD_DIM, generator=generator)
    k = torch.randn(rows, KV_HEADS, HEAD_DIM, generator=generator)
    v = torch.randn(rows, KV_HEADS, HEAD_DIM, generator=generator)
    cache = random_cache(generator)
    reference_cache = cache.clone()
    real = batch.num_tokens
    meta = AttentionMetadata.build(batch.query_lens, batch.seq_lens, batch.block_tables, BLOCK_SIZE, "cpu")
    expected = TorchAttentionBackend().forward(q[:real], k[:real], v[:real], reference_cache, meta, scale=0.5)
    got = PaddedTorchAttentionBackend().forward(q, k, v, cache, inputs.metadata(shape), scale=0.5)
    torch.testing.assert_close(got[:real], expected, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(got).all(), "padded rows must not be NaN (they flow through the rest of the layer)"
    torch.testing.assert_close(cache[:NUM_BLOCKS], reference_cache[:NUM_BLOCKS])
