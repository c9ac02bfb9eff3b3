"""Attention sinks (GPT-OSS: a learned logit per head that joins every softmax's denominator and attends to
nothing) in the torch backends against the dense reference, alone and with windows and soft caps; the Triton
kernels refuse them by name."""

from __future__ import annotations

import pytest
import torch
from paged_attention_cases import HEADS, NUM_BLOCKS, dense_reference, make_batch

from executor_svc.attention.padded_torch_backend import PaddedTorchAttentionBackend
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.attention.triton_backend import TritonAttentionBackend

SCALE = 0.35
QUERY_LENS = [9, 1, 3, 6, 1]
SEQ_LENS = [15, 23, 13, 6, 90]
SINKS = torch.tensor([2.0, -1.0, 0.5, 3.0, 0.0, -4.0])
"""One per query head: large ones take most of a short sequence's weight, small ones almost none."""
CASES = [(None, None), (5, None), (None, 5.0), (5, 5.0)]
"""(window, soft cap) combinations."""


def test_sinks_change_the_reference():
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=0, scale=SCALE)
    assert (dense_reference(batch, sinks=SINKS) - dense_reference(batch)).abs().max() > 0.1


@pytest.mark.parametrize("make_backend", [lambda: TorchAttentionBackend(1), lambda: TorchAttentionBackend(4),
                                          lambda: TorchAttentionBackend(100), PaddedTorchAttentionBackend],
                         ids=["torch-single", "torch-mixed", "torch-batched", "padded"])
def test_backends_with_sinks_match_the_dense_reference(make_backend):
    assert SINKS.shape == (HEADS,)
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=1, scale=SCALE)
    for window, cap in CASES:
        cache = batch.cache.clone()
        got = make_backend().forward(batch.q, batch.k, batch.v, cache, batch.metadata(), SCALE,
                                     sliding_window=window, logit_softcap=cap, sinks=SINKS)
        torch.testing.assert_close(got.cpu(), dense_reference(batch, window, cap, SINKS), atol=2e-5, rtol=2e-5,
                                   msg=lambda m, w=window, c=cap: f"window {w}, cap {c}: {m}")
        torch.testing.assert_close(cache.cpu()[:NUM_BLOCKS], batch.written[:NUM_BLOCKS], atol=0, rtol=0)


def test_sinks_of_the_wrong_shape_and_triton_are_refused_by_name():
    batch = make_batch([1], [5], seed=2, scale=SCALE)
    with pytest.raises(ValueError, match="sinks: expected one per query head"):
        batch.forward(TorchAttentionBackend(), sinks=SINKS[:3])
    with pytest.raises(ValueError, match="sinks: the Triton kernels take no attention sinks"):
        batch.forward(TritonAttentionBackend(), sinks=SINKS)
