"""TorchAttentionBackend against a dense reference on random tensors."""

from __future__ import annotations

import pytest
import torch

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.attention.torch_backend import TorchAttentionBackend

BLOCK_SIZE = 4
NUM_BLOCKS = 32
HEADS, KV_HEADS, HEAD_DIM = 6, 2, 8


def dense_attention(q, k, v, scale):
    """Causal GQA over one whole sequence: q [Q, H, D] are the last Q positions of k/v [S, KVH, D]."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,shd->hqs", q, k) * scale
    q_pos = torch.arange(k.shape[0] - q.shape[0], k.shape[0]).unsqueeze(1)
    scores = scores.masked_fill(torch.arange(k.shape[0]).unsqueeze(0) > q_pos, float("-inf"))
    return torch.einsum("hqs,shd->qhd", scores.softmax(-1), v)


@pytest.mark.parametrize("max_batched_query_len", [1, 3, 100])
def test_two_steps_over_shuffled_blocks_match_dense_attention(max_batched_query_len):
    generator = torch.Generator().manual_seed(0)
    backend = TorchAttentionBackend(max_batched_query_len)
    kv_layer = torch.zeros(NUM_BLOCKS, 2, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
    blocks = torch.randperm(NUM_BLOCKS, generator=generator).tolist()
    tables = [blocks[0:5], blocks[5:10], blocks[10:15]]
    full_k = [torch.randn(18, KV_HEADS, HEAD_DIM, generator=generator) for _ in tables]
    full_v = [torch.randn(18, KV_HEADS, HEAD_DIM, generator=generator) for _ in tables]
    computed = [0, 0, 0]
    # Step 1: prefills of 6, 1 and 9 tokens; step 2: decode, a 7-token chunk, a 3-token verify.
    for query_lens in ([6, 1, 9], [1, 7, 3]):
        seq_lens = [c + n for c, n in zip(computed, query_lens)]
        q = torch.randn(sum(query_lens), HEADS, HEAD_DIM, generator=generator)
        k = torch.cat([full_k[i][computed[i] : seq_lens[i]] for i in range(3)])
        v = torch.cat([full_v[i][computed[i] : seq_lens[i]] for i in range(3)])
        meta = AttentionMetadata.build(query_lens, seq_lens, tables, BLOCK_SIZE, "cpu")
        out = backend.forward(q, k, v, kv_layer, meta, scale=0.3)
        for i, rows in enumerate(out.split(query_lens)):
            q_rows = q.split(query_lens)[i]
            expected = dense_attention(q_rows, full_k[i][: seq_lens[i]], full_v[i][: seq_lens[i]], 0.3)
            torch.testing.assert_close(rows, expected, atol=1e-5, rtol=1e-5)
        computed = seq_lens
    # Every token's K/V sits at its slot: block tables[i][p // B], offset p % B.
    for i, table in enumerate(tables):
        for position in range(computed[i]):
            block, offset = table[position // BLOCK_SIZE], position % BLOCK_SIZE
            torch.testing.assert_close(kv_layer[block, 0, offset], full_k[i][position])
            torch.testing.assert_close(kv_layer[block, 1, offset], full_v[i][position])


def test_pure_decode_batch_returns_rows_in_token_order():
    generator = torch.Generator().manual_seed(1)
    backend = TorchAttentionBackend()
    kv_layer = torch.randn(NUM_BLOCKS, 2, BLOCK_SIZE, KV_HEADS, HEAD_DIM, generator=generator)
    tables = [[3, 9], [12], [30, 1, 7]]
    seq_lens = [6, 2, 11]
    q = torch.randn(3, HEADS, HEAD_DIM, generator=generator)
    k = torch.randn(3, KV_HEADS, HEAD_DIM, generator=generator)
    v = torch.randn(3, KV_HEADS, HEAD_DIM, generator=generator)
    meta = AttentionMetadata.build([1, 1, 1], seq_lens, tables, BLOCK_SIZE, "cpu")
    out = backend.forward(q, k, v, kv_layer, meta, scale=0.5)
    for i, table in enumerate(tables):
        keys = kv_layer[table, 0].reshape(-1, KV_HEADS, HEAD_DIM)[: seq_lens[i]]
        values = kv_layer[table, 1].reshape(-1, KV_HEADS, HEAD_DIM)[: seq_lens[i]]
        torch.testing.assert_close(keys[-1], k[i])
        expected = dense_attention(q[i : i + 1], keys, values, 0.5)
        torch.testing.assert_close(out[i : i + 1], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("group_overhead_blocks", [0, 10**6])
def test_decode_and_verify_rows_in_length_groups_match_dense_attention(group_overhead_blocks):
    """Overhead 0 puts each length in its own padded batch (rows leave and re-enter flat order);
    a huge one keeps one batch. Both must give every row its own sequence's attention."""
    generator = torch.Generator().manual_seed(2)
    backend = TorchAttentionBackend(max_batched_query_len=3, group_overhead_blocks=group_overhead_blocks)
    kv_layer = torch.randn(NUM_BLOCKS, 2, BLOCK_SIZE, KV_HEADS, HEAD_DIM, generator=generator)
    tables = [[3, 9, 4, 5, 6], [12], [30, 1, 7], [20, 21], [8, 10, 11, 13]]
    seq_lens = [19, 3, 11, 6, 14]
    query_lens = [1, 2, 1, 3, 1]
    q = torch.randn(sum(query_lens), HEADS, HEAD_DIM, generator=generator)
    k = torch.randn(sum(query_lens), KV_HEADS, HEAD_DIM, generator=generator)
    v = torch.randn(sum(query_lens), KV_HEADS, HEAD_DIM, generator=generator)
    meta = AttentionMetadata.build(query_lens, seq_lens, tables, BLOCK_SIZE, "cpu")
    out = backend.forward(q, k, v, kv_layer, meta, scale=0.4)
    for i, (rows, q_rows) in enumerate(zip(out.split(query_lens), q.split(query_lens))):
        table = tables[i][: -(-seq_lens[i] // BLOCK_SIZE)]
        keys = kv_layer[table, 0].reshape(-1, KV_HEADS, HEAD_DIM)[: seq_lens[i]]
        values = kv_layer[table, 1].reshape(-1, KV_HEADS, HEAD_DIM)[: seq_lens[i]]
        torch.testing.assert_close(rows, dense_attention(q_rows, keys, values, 0.4), atol=1e-5, rtol=1e-5)


def test_threshold_must_be_positive():
    with pytest.raises(ValueError, match="max_batched_query_len"):
        TorchAttentionBackend(0)
    with pytest.raises(ValueError, match="group_overhead_blocks"):
        TorchAttentionBackend(group_overhead_blocks=-1)
