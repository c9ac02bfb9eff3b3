"""Sliding-window attention of every backend against a dense reference written here (HF semantics: a query
at position p sees the keys p - window < j <= p). Triton runs on the CPU through its interpreter."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from paged_attention_cases import (
    HEADS,
    KV_HEADS,
    NUM_BLOCKS,
    TRITON_HEADS,
    Batch,
    dense_reference,
    make_batch,
    needs_triton,
    static_batch,
)

from executor_svc.attention.backend import AttentionBackend
from executor_svc.attention.padded_torch_backend import PaddedTorchAttentionBackend
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.attention.triton_backend import TritonAttentionBackend

SCALE = 0.3
# A chunk of 20 from mid-block position 9 (two query tiles), a decode, a verify of 3, a whole prompt of 10,
# a decode at position 1, a long decode (several KV tiles, so two non-empty Triton splits under a window).
QUERY_LENS = [20, 1, 3, 10, 1, 1]
SEQ_LENS = [29, 23, 13, 10, 2, 150]
# Only itself, smaller than a block, a block, several blocks, several KV tiles, longer than every sequence.
WINDOWS = [1, 3, 4, 9, 100, 1000]

def check_backend(backend: AttentionBackend, batch: Batch, windows: list[int]) -> None:
    """Each window's output equals the dense reference; windows longer than every sequence equal no window;
    the cache holds exactly the new K/V."""
    unwindowed = backend.forward(batch.q, batch.k, batch.v, batch.cache.clone(), batch.metadata(), SCALE)
    for window in windows:
        cache = batch.cache.clone()
        got = backend.forward(batch.q, batch.k, batch.v, cache, batch.metadata(), SCALE, sliding_window=window)
        torch.testing.assert_close(got.cpu(), dense_reference(batch, window), atol=1e-5, rtol=1e-5,
                                   msg=lambda m, w=window: f"window {w}: {m}")
        torch.testing.assert_close(cache.cpu()[:NUM_BLOCKS], batch.written[:NUM_BLOCKS], atol=0, rtol=0)
        if window >= max(batch.seq_lens):
            torch.testing.assert_close(got, unwindowed, atol=0, rtol=0)


@pytest.mark.parametrize("max_batched_query_len", [1, 8, 100], ids=["all-single", "mixed", "all-batched"])
def test_torch_backend_matches_dense_reference(max_batched_query_len):
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=0, scale=SCALE)
    check_backend(TorchAttentionBackend(max_batched_query_len), batch, WINDOWS)


def test_torch_backend_groups_the_windowed_lengths():
    # With no padding worth a group, every distinct windowed width is its own batched group.
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=1, scale=SCALE)
    check_backend(TorchAttentionBackend(group_overhead_blocks=0), batch, [3, 9])


def test_padded_backend_matches_dense_reference():
    check_backend(PaddedTorchAttentionBackend(), make_batch(QUERY_LENS, SEQ_LENS, seed=2, scale=SCALE), WINDOWS)


@needs_triton
@pytest.mark.parametrize(
    ("num_splits", "windows"),
    # Two splits: window 100 leaves the long decode two non-empty splits, 3 one and an empty one.
    [(1, [1, 3, 4, 9, 1000]), (2, [3, 100])],
)
def test_triton_backend_matches_dense_reference(num_splits, windows):
    batch = make_batch(QUERY_LENS, SEQ_LENS, 3, SCALE, heads=TRITON_HEADS)
    check_backend(TritonAttentionBackend(num_splits), batch, windows)


@needs_triton
def test_triton_automatic_splits_are_bounded_by_the_window():
    batch = make_batch([1, 1], [150, 40], seed=4, scale=SCALE, heads=TRITON_HEADS)
    check_backend(TritonAttentionBackend(None), batch, [5, 100])


def test_torch_backend_layers_with_different_windows_in_one_forward():
    # One metadata, several layers: each window (or none) needs its own cached plan.
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=5, scale=SCALE)
    meta = batch.metadata()
    backend = TorchAttentionBackend()
    outputs = {}
    for window in (3, None, 9, 3):
        got = backend.forward(batch.q, batch.k, batch.v, batch.cache.clone(), meta, SCALE, sliding_window=window)
        torch.testing.assert_close(got.cpu(), dense_reference(batch, window), atol=1e-5, rtol=1e-5)
        outputs[window] = got
    assert not torch.allclose(outputs[3], outputs[None])
    assert not torch.allclose(outputs[3], outputs[9])


@pytest.mark.parametrize(
    ("make_backend", "heads"),
    [
        (PaddedTorchAttentionBackend, (HEADS, KV_HEADS)),
        pytest.param(lambda: TritonAttentionBackend(2), TRITON_HEADS, marks=needs_triton),
    ],
    ids=["padded", "triton"],
)
@pytest.mark.parametrize("num_seqs", [2, 4], ids=["no-padded-seqs", "padded-seqs"])
def test_static_padded_metadata_matches_dense_reference(
    make_backend: Callable[[], AttentionBackend], heads: tuple[int, int], num_seqs: int
):
    host, shape, inputs = static_batch(num_seqs)
    real = host.num_tokens
    batch = make_batch(host.query_lens, host.seq_lens, seed=6, scale=SCALE, tables=host.block_tables,
                       padding=shape.num_tokens - real, heads=heads)
    backend = make_backend()
    for window in (1, 2, 5, 100):
        cache = batch.cache.clone()
        got = backend.forward(batch.q, batch.k, batch.v, cache, inputs.metadata(shape), SCALE,
                              sliding_window=window).cpu()
        reference = dense_reference(dataclasses.replace(batch, q=batch.q[:real]), window)
        torch.testing.assert_close(got[:real], reference, atol=1e-5, rtol=1e-5)
        assert torch.isfinite(got).all(), f"window {window}: padded rows must not be NaN"
        torch.testing.assert_close(cache.cpu()[:NUM_BLOCKS], batch.written[:NUM_BLOCKS], atol=0, rtol=0)


def test_padded_backend_reads_no_tensor_on_the_host():
    from host_syncs import recorded_host_syncs

    host, shape, inputs = static_batch()
    batch = make_batch(host.query_lens, host.seq_lens, seed=7, scale=SCALE, tables=host.block_tables,
                       padding=shape.num_tokens - host.num_tokens)
    with recorded_host_syncs() as syncs:
        PaddedTorchAttentionBackend().forward(
            batch.q, batch.k, batch.v, batch.cache, inputs.metadata(shape), SCALE, sliding_window=3
        )
    assert syncs == []


@pytest.mark.parametrize(
    "make_backend",
    [TorchAttentionBackend, PaddedTorchAttentionBackend, pytest.param(TritonAttentionBackend, marks=needs_triton)],
    ids=["torch", "padded", "triton"],
)
@pytest.mark.parametrize("window", [0, -4, True, 2.5, "8"])
def test_invalid_window_is_rejected(make_backend: Callable[[], AttentionBackend], window):
    batch = make_batch([1], [5], seed=8, scale=SCALE)
    with pytest.raises(ValueError, match="sliding_window"):
        make_backend().forward(batch.q, batch.k, batch.v, batch.cache, batch.metadata(), SCALE, sliding_window=window)


@pytest.mark.parametrize("window", [None, 1, 3])
def test_padded_backend_mask_leaves_no_row_empty(window):
    # A padded query row can lie past every key; SDPA's output for a row that sees nothing depends on the
    # kernel (zeros on the CPU, NaN on some GPU kernels), so the mask gives every row a key.
    from executor_svc.attention.backend import KeyReach
    from executor_svc.attention.padded_torch_backend import _visible

    positions = torch.tensor([[0, 5, 15], [16, 17, 40]])
    mask = _visible(positions, 16, KeyReach.of(window, None))
    assert mask.any(dim=2).all()
    real = positions < 16
    keys = torch.arange(16).view(1, 1, -1)
    expected = (keys <= positions.unsqueeze(2)) & (window is None or keys > positions.unsqueeze(2) - window)
    assert torch.equal(mask[real], expected[real])
