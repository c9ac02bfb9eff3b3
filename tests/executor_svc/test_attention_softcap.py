"""Attention-score soft-capping (Gemma 2's attn_logit_softcapping) of every backend against a dense reference
written here, HF's eager order: s = scale * q.k, s = c * tanh(s / c), then the causal (and sliding-window)
mask, softmax in float32. Triton runs on the CPU through its interpreter."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from paged_attention_cases import (
    HEAD_DIM,
    HEADS,
    KV_HEADS,
    NUM_BLOCKS,
    TRITON_HEADS,
    Batch,
    make_batch,
    needs_triton,
    static_batch,
)
from paged_attention_cases import dense_reference as reference

from executor_svc.attention import padded_torch_backend, torch_backend
from executor_svc.attention.backend import AttentionBackend
from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.attention.padded_torch_backend import PaddedTorchAttentionBackend
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.attention.triton_backend import TritonAttentionBackend

SCALE = 1.0
CAP = 5.0
Q_GAIN = 3.0
"""Queries scaled up so that most scores (std about 8.5) lie where tanh bends: the cap changes the output."""
# A chunk of 9 from mid-block position 6, a decode, a verify of 3, a whole prompt of 6 (no cached context),
# a long decode (several Triton KV tiles, so two non-empty splits).
QUERY_LENS = [9, 1, 3, 6, 1]
SEQ_LENS = [15, 23, 13, 6, 90]
WINDOWS = [None, 5]
"""No window, and one shorter than every sequence."""

def dense_reference(batch: Batch, cap: float | None, window: int | None = None) -> torch.Tensor:
    """The shared dense reference (paged_attention_cases.py) with scores capped by ``cap``."""
    return reference(batch, window, cap)


def check_backend(backend: AttentionBackend, batch: Batch, windows: list[int | None] = WINDOWS) -> None:
    """With each window (or none), the capped output equals the dense reference and the cache holds exactly the
    new K/V; no cap (None or not passed) is the uncapped output, bit for bit."""
    for window in windows:
        cache = batch.cache.clone()
        got = backend.forward(batch.q, batch.k, batch.v, cache, batch.metadata(), SCALE, sliding_window=window,
                              logit_softcap=CAP)
        torch.testing.assert_close(got.cpu(), dense_reference(batch, CAP, window), atol=2e-5, rtol=2e-5,
                                   msg=lambda m, w=window: f"window {w}: {m}")
        torch.testing.assert_close(cache.cpu()[:NUM_BLOCKS], batch.written[:NUM_BLOCKS], atol=0, rtol=0)
        uncapped = batch.forward(backend, sliding_window=window)
        assert torch.equal(batch.forward(backend, sliding_window=window, logit_softcap=None), uncapped)
        torch.testing.assert_close(uncapped.cpu(), dense_reference(batch, None, window), atol=2e-5, rtol=2e-5)


def test_capping_changes_the_reference():
    # Otherwise every test below would pass with the cap ignored.
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=0, scale=SCALE, q_gain=Q_GAIN)
    for window in WINDOWS:
        capped, uncapped = dense_reference(batch, CAP, window), dense_reference(batch, None, window)
        assert (capped - uncapped).abs().max() > 0.5
        assert (capped - uncapped).abs().mean() > 0.05


@pytest.mark.parametrize("max_batched_query_len", [1, 4, 100], ids=["all-single", "mixed", "all-batched"])
def test_torch_backend_matches_dense_reference(max_batched_query_len):
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=1, scale=SCALE, q_gain=Q_GAIN)
    check_backend(TorchAttentionBackend(max_batched_query_len), batch)


def test_torch_backend_layers_with_and_without_caps_share_one_metadata():
    # One metadata, several layers: capped and uncapped layers reuse the plans (and the whole prompt's causal
    # mask) that other layers built.
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=2, scale=SCALE, q_gain=Q_GAIN)
    meta = batch.metadata()
    backend = TorchAttentionBackend(max_batched_query_len=4)
    for window, cap in [(None, CAP), (5, None), (5, CAP), (None, None), (None, CAP), (5, 2.0)]:
        got = batch.forward(backend, meta, sliding_window=window, logit_softcap=cap)
        torch.testing.assert_close(got.cpu(), dense_reference(batch, cap, window), atol=2e-5, rtol=2e-5)


def test_padded_backend_matches_dense_reference():
    check_backend(PaddedTorchAttentionBackend(), make_batch(QUERY_LENS, SEQ_LENS, seed=3, scale=SCALE, q_gain=Q_GAIN))


@needs_triton
@pytest.mark.parametrize("num_splits", [1, 2])
def test_triton_backend_matches_dense_reference(num_splits):
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=4, scale=SCALE, q_gain=Q_GAIN, heads=TRITON_HEADS)
    check_backend(TritonAttentionBackend(num_splits), batch)


@pytest.mark.parametrize("make_backend", [TorchAttentionBackend, PaddedTorchAttentionBackend], ids=["torch", "padded"])
def test_bfloat16_casts_the_float32_weights_back(make_backend: Callable[[], AttentionBackend]):
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=5, scale=SCALE, q_gain=Q_GAIN)
    half = dataclasses.replace(batch, q=batch.q.bfloat16(), k=batch.k.bfloat16(), v=batch.v.bfloat16(),
                               cache=batch.cache.bfloat16())
    got = half.forward(make_backend(), sliding_window=5, logit_softcap=CAP)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float().cpu(), dense_reference(batch, CAP, 5), atol=0.1, rtol=0.05)


@pytest.mark.parametrize("make_backend", [TorchAttentionBackend, PaddedTorchAttentionBackend], ids=["torch", "padded"])
def test_uncapped_layers_keep_scaled_dot_product_attention(monkeypatch, make_backend):
    def explicit(*args: object) -> torch.Tensor:
        raise AssertionError("an uncapped layer took the explicit path")

    for module in (torch_backend, padded_torch_backend):
        monkeypatch.setattr(module, "explicit_attention", explicit)
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=6, scale=SCALE, q_gain=Q_GAIN)
    for window in WINDOWS:
        batch.forward(make_backend(), sliding_window=window, logit_softcap=None)
        with pytest.raises(AssertionError, match="explicit path"):
            batch.forward(make_backend(), sliding_window=window, logit_softcap=CAP)


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
    batch = make_batch(host.query_lens, host.seq_lens, seed=7, scale=SCALE, q_gain=Q_GAIN,
                       tables=host.block_tables,
                       padding=shape.num_tokens - real, heads=heads)
    backend = make_backend()
    for window in (None, 2):
        got = batch.forward(backend, inputs.metadata(shape), sliding_window=window, logit_softcap=CAP).cpu()
        reference = dense_reference(dataclasses.replace(batch, q=batch.q[:real]), CAP, window)
        torch.testing.assert_close(got[:real], reference, atol=2e-5, rtol=2e-5)
        assert torch.isfinite(got).all(), f"window {window}: padded rows must not be NaN"


def test_padded_backend_reads_no_tensor_on_the_host():
    from host_syncs import recorded_host_syncs

    host, shape, inputs = static_batch(4)
    batch = make_batch(host.query_lens, host.seq_lens, seed=8, scale=SCALE, q_gain=Q_GAIN,
                       tables=host.block_tables,
                       padding=shape.num_tokens - host.num_tokens)
    with recorded_host_syncs() as syncs:
        batch.forward(PaddedTorchAttentionBackend(), inputs.metadata(shape), sliding_window=3, logit_softcap=CAP)
    assert syncs == []


@pytest.mark.parametrize(
    "make_backend",
    [TorchAttentionBackend, PaddedTorchAttentionBackend, pytest.param(TritonAttentionBackend, marks=needs_triton)],
    ids=["torch", "padded", "triton"],
)
@pytest.mark.parametrize("cap", [0.0, -5.0, float("inf"), float("nan"), True, "5.0"])
def test_invalid_softcap_is_rejected(make_backend: Callable[[], AttentionBackend], cap):
    batch = make_batch([1], [5], seed=9, scale=SCALE, q_gain=Q_GAIN)
    with pytest.raises(ValueError, match="logit_softcap"):
        batch.forward(make_backend(), logit_softcap=cap)


@needs_triton
def test_kernel_warm_up_compiles_the_capped_variant_of_a_capped_model(monkeypatch):
    # The warm-up runs the model's own forward: a model with capped and uncapped layers launches both kernel
    # variants (SOFTCAP is a compile-time switch) at every eager tile shape and split.
    from executor_svc.attention import triton_kernels
    from executor_svc.attention.kernel_warmup import warm_up_attention_kernels
    from executor_svc.kv_cache import PagedKVCache

    launched: set[tuple[int, int, bool]] = set()

    def record(out, q, kv_layer, query_start_loc, seq_lens, block_tables, max_query_len, scale, num_splits=1,
               sliding_window=None, logit_softcap=None, attention_chunk=None):
        launched.add((max_query_len, num_splits, logit_softcap is not None))

    monkeypatch.setattr(triton_kernels, "paged_attention", record)
    monkeypatch.setattr(triton_kernels, "write_kv", lambda k, v, kv_layer, slot_mapping: None)
    backend = TritonAttentionBackend()
    cache = PagedKVCache(2, 8, 16, 1, HEAD_DIM, torch.float32, "cpu")
    model = _TwoLayerModel(backend, caps=(None, CAP))
    forwards = warm_up_attention_kernels(model, cache, backend, torch.device("cpu"))
    variants = [(n, s) for n, s in triton_kernels.eager_variants(4) if n <= 8 * 16]
    assert forwards == len(variants)
    assert launched == {(n, s, capped) for n, s in variants for capped in (False, True)}


class _TwoLayerModel(torch.nn.Module):
    """Just the attention calls of a model whose layers have the given caps (4 query heads, 1 KV head)."""

    def __init__(self, backend: TritonAttentionBackend, caps: tuple[float | None, ...]) -> None:
        super().__init__()
        self.backend, self.caps = backend, caps
        self.config = type("Config", (), {"num_attention_heads": 4, "num_key_value_heads": 1})()

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                kv_cache: object) -> None:
        tokens = input_ids.shape[0]
        q, kv = torch.zeros(tokens, 4, HEAD_DIM), torch.zeros(tokens, 1, HEAD_DIM)
        kv_layer = torch.zeros(8, 2, 16, 1, HEAD_DIM)
        for cap in self.caps:
            self.backend.forward(q, kv, kv, kv_layer, meta, SCALE, logit_softcap=cap)
