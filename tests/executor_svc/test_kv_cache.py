"""PagedKVCache layout and AttentionMetadata's slot mapping."""

from __future__ import annotations

import pytest
import torch

from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.kv_cache import PagedKVCache


def test_layers_have_the_flashinfer_nhd_layout():
    cache = PagedKVCache(3, 10, 16, 2, 8, torch.float32, "cpu")
    assert len(cache.layers) == 3
    for layer in cache.layers:
        assert layer.shape == (10, 2, 16, 2, 8)
        assert layer.dtype == torch.float32 and layer.is_contiguous()
    cache.layers[0].fill_(1.0)
    assert cache.layers[1].abs().sum() == 0, "layers must not share storage"


@pytest.mark.parametrize("dtype,element_size", [(torch.float32, 4), (torch.bfloat16, 2), (torch.float16, 2)])
def test_bytes_per_block_counts_keys_and_values_of_every_layer(dtype, element_size):
    assert PagedKVCache.bytes_per_block(30, 16, 3, 64, dtype) == 30 * 2 * 16 * 3 * 64 * element_size
    cache = PagedKVCache(2, 5, 4, 3, 8, dtype, "cpu")
    total = sum(layer.numel() * layer.element_size() for layer in cache.layers)
    assert total == 5 * PagedKVCache.bytes_per_block(2, 4, 3, 8, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_cache_whose_values_are_its_keys_keeps_one_plane_and_half_the_bytes(dtype):
    cache = PagedKVCache(2, 5, 4, 1, 8, dtype, "cpu", scratch_blocks=1, values_are_keys=True)
    assert cache.planes == 1
    assert [tuple(layer.shape) for layer in cache.layers] == [(6, 1, 4, 1, 8)] * 2
    one_plane = PagedKVCache.bytes_per_block(2, 4, 1, 8, dtype, values_are_keys=True)
    assert 2 * one_plane == PagedKVCache.bytes_per_block(2, 4, 1, 8, dtype)
    assert sum(layer.numel() * layer.element_size() for layer in cache.layers) == 6 * one_plane


def test_cache_rejects_empty_dimensions():
    with pytest.raises(ValueError, match="num_blocks"):
        PagedKVCache(2, 0, 16, 2, 8, torch.float32, "cpu")


def test_slot_mapping_follows_positions_through_block_tables():
    # seq 0: 3 tokens computed, 3 new at positions 3..5 with block_size 4 -> blocks [7, 2]
    # seq 1: decode of position 4 -> second block (5), offset 0
    # seq 2: prefill of 2 tokens in block 9
    meta = AttentionMetadata.build([3, 1, 2], [6, 5, 2], [[7, 2, 11], [3, 5], [9]], 4, "cpu")
    assert meta.slot_mapping.tolist() == [7 * 4 + 3, 2 * 4 + 0, 2 * 4 + 1, 5 * 4 + 0, 9 * 4 + 0, 9 * 4 + 1]
    assert meta.slot_mapping.dtype == torch.int64
    assert meta.query_start_loc.tolist() == [0, 3, 4, 6]
    assert meta.seq_lens.tolist() == [6, 5, 2]
    # Tables are trimmed to the blocks seq_len needs (the unused block 11 goes) and padded with 0.
    assert meta.block_tables.tolist() == [[7, 2], [3, 5], [9, 0]]
    assert meta.block_tables_list == [[7, 2], [3, 5], [9]]
    assert not meta.is_pure_decode
    assert (meta.num_tokens, meta.num_seqs) == (6, 3)


def test_pure_decode_is_flagged():
    meta = AttentionMetadata.build([1, 1], [17, 3], [[4, 8], [1]], 16, "cpu")
    assert meta.is_pure_decode
    assert meta.slot_mapping.tolist() == [8 * 16 + 0, 1 * 16 + 2]


@pytest.mark.parametrize(
    "query_lens,seq_lens,tables,field",
    [
        ([1], [1, 2], [[0]], "lengths differ"),
        ([3], [2], [[0]], "query_len 3"),
        ([0], [2], [[0]], "query_len 0"),
        ([1], [20], [[0]], "too few"),
    ],
)
def test_build_rejects_inconsistent_batches(query_lens, seq_lens, tables, field):
    with pytest.raises(ValueError, match=field):
        AttentionMetadata.build(query_lens, seq_lens, tables, 16, "cpu")
