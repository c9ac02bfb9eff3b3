"""Chunked attention (Llama 4's attention_chunk_size: a query sees only the keys of its own chunk-aligned span) in
every backend against the dense reference (Triton through its interpreter without a GPU), on mixed batches whose
sequences cross chunk boundaries, and in a captured step's padded batch; bad chunk sizes are refused by name."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from paged_attention_cases import (
    NUM_BLOCKS,
    TRITON_HEADS,
    dense_reference,
    make_batch,
    needs_triton,
    static_batch,
)

from executor_svc.attention.backend import KeyReach
from executor_svc.attention.padded_torch_backend import PaddedTorchAttentionBackend
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.attention.triton_backend import TritonAttentionBackend

SCALE = 0.4
# A prefill chunk crossing a chunk boundary with cached context, a decode just past a boundary, a verify of 3
# crossing one, a whole prompt of 13 (no cached context, two chunks), a long decode (many chunks back).
QUERY_LENS = [9, 1, 3, 13, 1]
SEQ_LENS = [15, 9, 18, 13, 90]
CHUNKS = [4, 8, 6]
"""A block, two blocks, and a size not a multiple of the block size (4)."""
BACKENDS = [lambda: TorchAttentionBackend(1), lambda: TorchAttentionBackend(4), lambda: TorchAttentionBackend(100),
            PaddedTorchAttentionBackend]
BACKEND_IDS = ["torch-single", "torch-mixed", "torch-batched", "padded"]


def test_chunks_change_the_reference():
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=0, scale=SCALE)
    assert (dense_reference(batch, chunk=8) - dense_reference(batch)).abs().max() > 0.1


@pytest.mark.parametrize("make_backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("chunk", CHUNKS)
def test_backends_attend_within_chunks_as_the_dense_reference(make_backend, chunk):
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=1, scale=SCALE)
    for sinks in (None, torch.linspace(-2, 2, batch.q.shape[1])):
        cache = batch.cache.clone()
        got = make_backend().forward(batch.q, batch.k, batch.v, cache, batch.metadata(), SCALE, sinks=sinks,
                                     attention_chunk=chunk)
        torch.testing.assert_close(got.cpu(), dense_reference(batch, sinks=sinks, chunk=chunk), atol=2e-5,
                                   rtol=2e-5)
        torch.testing.assert_close(cache.cpu()[:NUM_BLOCKS], batch.written[:NUM_BLOCKS], atol=0, rtol=0)


@pytest.mark.parametrize("make_backend", BACKENDS, ids=BACKEND_IDS)
def test_a_chunk_longer_than_every_sequence_is_plain_causal_attention(make_backend):
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=2, scale=SCALE)
    chunked = batch.forward(make_backend(), attention_chunk=max(SEQ_LENS))
    torch.testing.assert_close(chunked, batch.forward(make_backend()), atol=0, rtol=0)


@pytest.mark.parametrize("num_seqs", [2, 4], ids=["no-padded-seqs", "padded-seqs"])
def test_static_padded_metadata_attends_within_chunks(num_seqs):
    host, shape, inputs = static_batch(num_seqs)
    real = host.num_tokens
    batch = make_batch(host.query_lens, host.seq_lens, seed=3, scale=SCALE, tables=host.block_tables,
                       padding=shape.num_tokens - real)
    for chunk in (2, 4, 6):
        got = batch.forward(PaddedTorchAttentionBackend(), inputs.metadata(shape), attention_chunk=chunk).cpu()
        reference = dense_reference(dataclasses.replace(batch, q=batch.q[:real]), chunk=chunk)
        torch.testing.assert_close(got[:real], reference, atol=2e-5, rtol=2e-5)
        assert torch.isfinite(got).all(), f"chunk {chunk}: padded rows must not be NaN"


def test_padded_backend_reads_no_tensor_on_the_host_with_chunks():
    from host_syncs import recorded_host_syncs

    host, shape, inputs = static_batch(4)
    batch = make_batch(host.query_lens, host.seq_lens, seed=4, scale=SCALE, tables=host.block_tables,
                       padding=shape.num_tokens - host.num_tokens)
    with recorded_host_syncs() as syncs:
        batch.forward(PaddedTorchAttentionBackend(), inputs.metadata(shape), attention_chunk=4)
    assert syncs == []


@pytest.mark.parametrize("make_backend", [TorchAttentionBackend, PaddedTorchAttentionBackend])
@pytest.mark.parametrize("chunk", [0, -4, True, 4.0])
def test_bad_chunks_and_a_window_with_chunks_are_refused_by_name(make_backend, chunk):
    batch = make_batch([1], [5], seed=5, scale=SCALE)
    with pytest.raises(ValueError, match="attention_chunk"):
        batch.forward(make_backend(), attention_chunk=chunk)
    with pytest.raises(ValueError, match="attention_chunk: .*not both"):
        batch.forward(make_backend(), sliding_window=4, attention_chunk=8)


@needs_triton
@pytest.mark.parametrize("num_splits", [1, 3])
def test_triton_attends_within_chunks_as_the_dense_reference(num_splits):
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=6, scale=SCALE, heads=TRITON_HEADS)
    for chunk in (4, 6):
        cache = batch.cache.clone()
        got = TritonAttentionBackend(num_splits).forward(batch.q, batch.k, batch.v, cache, batch.metadata(), SCALE,
                                                         attention_chunk=chunk)
        torch.testing.assert_close(got.cpu(), dense_reference(batch, chunk=chunk), atol=2e-5, rtol=2e-5,
                                   msg=lambda m, c=chunk: f"chunk {c}: {m}")
        torch.testing.assert_close(cache.cpu()[:NUM_BLOCKS], batch.written[:NUM_BLOCKS], atol=0, rtol=0)


@needs_triton
def test_triton_static_padded_metadata_attends_within_chunks():
    host, shape, inputs = static_batch(4)
    real = host.num_tokens
    batch = make_batch(host.query_lens, host.seq_lens, seed=7, scale=SCALE, tables=host.block_tables,
                       padding=shape.num_tokens - real, heads=TRITON_HEADS)
    got = batch.forward(TritonAttentionBackend(2), inputs.metadata(shape), attention_chunk=4).cpu()
    reference = dense_reference(dataclasses.replace(batch, q=batch.q[:real]), chunk=4)
    torch.testing.assert_close(got[:real], reference, atol=2e-5, rtol=2e-5)


def test_key_reach_first_keys():
    assert [KeyReach(chunk=4).first_key(p) for p in (0, 3, 4, 9)] == [0, 0, 4, 8]
    assert [KeyReach(window=3).first_key(p) for p in (0, 5)] == [-2, 3]
    assert KeyReach(chunk=8).hides_nothing(8) and not KeyReach(chunk=8).hides_nothing(9)
    assert KeyReach.of(None, None) is None
