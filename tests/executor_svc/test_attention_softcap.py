"""Attention-score soft-capping (Gemma 2's attn_logit_softcapping) of every backend against a dense reference
written here, HF's eager order: s = scale * q.k, s = c * tanh(s / c), then the causal (and sliding-window)
mask, softmax in float32. Triton runs on the CPU through its interpreter."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Callable

import pytest
import torch

from executor_svc.attention import padded_torch_backend, torch_backend
from executor_svc.attention.backend import AttentionBackend
from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.attention.padded_torch_backend import PaddedTorchAttentionBackend
from executor_svc.attention.torch_backend import TorchAttentionBackend
from executor_svc.cuda_graphs.buckets import GraphShape
from executor_svc.cuda_graphs.static_inputs import StaticStepInputs
from executor_svc.host_batch import HostBatch

# The interpreter must be chosen before the kernels are defined (triton reads it at @triton.jit time).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from executor_svc.attention.triton_backend import TritonAttentionBackend, triton_available  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
BLOCK_SIZE = 4
NUM_BLOCKS = 48  # plus one scratch block (the padded backend's padding writes there)
HEADS, KV_HEADS, HEAD_DIM = 6, 2, 8
TRITON_HEADS = (4, 1)
"""A GQA group of 4 in few programs (the interpreter's cost)."""
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

needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or not triton_available(), reason="needs triton"
)


@dataclasses.dataclass
class Batch:
    """One forward's inputs over shuffled, non-contiguous block tables, and the cache after its K/V write."""

    query_lens: list[int]
    seq_lens: list[int]
    tables: list[list[int]]
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    cache: torch.Tensor
    """Before the write: random stale K/V everywhere."""
    written: torch.Tensor
    """The cache with every new token's K/V at its slot."""

    def metadata(self) -> AttentionMetadata:
        return AttentionMetadata.build(self.query_lens, self.seq_lens, self.tables, BLOCK_SIZE, DEVICE)

    def forward(
        self,
        backend: AttentionBackend,
        meta: AttentionMetadata | None = None,
        sliding_window: int | None = None,
        logit_softcap: float | None = None,
    ) -> torch.Tensor:
        """The backend's output over a fresh copy of the cache (the batch's own metadata unless ``meta``)."""
        meta = self.metadata() if meta is None else meta
        return backend.forward(self.q, self.k, self.v, self.cache.clone(), meta, SCALE, sliding_window=sliding_window,
                               logit_softcap=logit_softcap)


def make_batch(
    query_lens: list[int],
    seq_lens: list[int],
    seed: int,
    tables: list[list[int]] | None = None,
    padding: int = 0,
    heads: tuple[int, int] = (HEADS, KV_HEADS),
) -> Batch:
    """Random q (scaled by Q_GAIN), k, v (``padding`` rows more, of no sequence) and cache; tables default to
    shuffled blocks. ``heads``: query and KV heads."""
    num_heads, num_kv_heads = heads
    generator = torch.Generator().manual_seed(seed)
    if tables is None:
        blocks = torch.randperm(NUM_BLOCKS, generator=generator).tolist()
        tables, used = [], 0
        for seq_len in seq_lens:
            width = -(-seq_len // BLOCK_SIZE)
            tables.append(blocks[used : used + width])
            used += width
    tokens = sum(query_lens) + padding
    q = torch.randn(tokens, num_heads, HEAD_DIM, generator=generator) * Q_GAIN
    k = torch.randn(tokens, num_kv_heads, HEAD_DIM, generator=generator)
    v = torch.randn(tokens, num_kv_heads, HEAD_DIM, generator=generator)
    cache = torch.randn(NUM_BLOCKS + 1, 2, BLOCK_SIZE, num_kv_heads, HEAD_DIM, generator=generator)
    written = cache.clone()
    token = 0
    for query_len, seq_len, table in zip(query_lens, seq_lens, tables):
        for position in range(seq_len - query_len, seq_len):
            written[table[position // BLOCK_SIZE], :, position % BLOCK_SIZE] = torch.stack([k[token], v[token]])
            token += 1
    return Batch(query_lens, seq_lens, tables, q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), cache.to(DEVICE), written)


def dense_reference(batch: Batch, cap: float | None, window: int | None = None) -> torch.Tensor:
    """Per sequence, its queries over its keys gathered from the written cache: scores capped, then masked
    (causal, within the window), softmax in float32."""
    outputs = []
    group = batch.q.shape[1] // batch.k.shape[1]
    for query, query_len, seq_len, table in zip(
        batch.q.cpu().split(batch.query_lens), batch.query_lens, batch.seq_lens, batch.tables
    ):
        blocks = torch.tensor([table[p // BLOCK_SIZE] for p in range(seq_len)])
        offsets = torch.arange(seq_len) % BLOCK_SIZE
        keys = batch.written[blocks, 0, offsets].repeat_interleave(group, dim=1)  # [S, H, D]
        values = batch.written[blocks, 1, offsets].repeat_interleave(group, dim=1)
        query_positions = torch.arange(seq_len - query_len, seq_len).unsqueeze(1)
        key_positions = torch.arange(seq_len).unsqueeze(0)
        visible = key_positions <= query_positions
        if window is not None:
            visible &= key_positions > query_positions - window
        scores = torch.einsum("qhd,khd->hqk", query, keys) * SCALE
        if cap is not None:
            scores = torch.tanh(scores / cap) * cap
        scores = scores.masked_fill(~visible, float("-inf"))
        weights = scores.softmax(-1, dtype=torch.float32).to(query.dtype)
        outputs.append(torch.einsum("hqk,khd->qhd", weights, values))
    return torch.cat(outputs)


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
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=0)
    for window in WINDOWS:
        capped, uncapped = dense_reference(batch, CAP, window), dense_reference(batch, None, window)
        assert (capped - uncapped).abs().max() > 0.5
        assert (capped - uncapped).abs().mean() > 0.05


@pytest.mark.parametrize("max_batched_query_len", [1, 4, 100], ids=["all-single", "mixed", "all-batched"])
def test_torch_backend_matches_dense_reference(max_batched_query_len):
    check_backend(TorchAttentionBackend(max_batched_query_len), make_batch(QUERY_LENS, SEQ_LENS, seed=1))


def test_torch_backend_layers_with_and_without_caps_share_one_metadata():
    # One metadata, several layers: capped and uncapped layers reuse the plans (and the whole prompt's causal
    # mask) that other layers built.
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=2)
    meta = batch.metadata()
    backend = TorchAttentionBackend(max_batched_query_len=4)
    for window, cap in [(None, CAP), (5, None), (5, CAP), (None, None), (None, CAP), (5, 2.0)]:
        got = batch.forward(backend, meta, sliding_window=window, logit_softcap=cap)
        torch.testing.assert_close(got.cpu(), dense_reference(batch, cap, window), atol=2e-5, rtol=2e-5)


def test_padded_backend_matches_dense_reference():
    check_backend(PaddedTorchAttentionBackend(), make_batch(QUERY_LENS, SEQ_LENS, seed=3))


@needs_triton
@pytest.mark.parametrize("num_splits", [1, 2])
def test_triton_backend_matches_dense_reference(num_splits):
    check_backend(TritonAttentionBackend(num_splits), make_batch(QUERY_LENS, SEQ_LENS, seed=4, heads=TRITON_HEADS))


@pytest.mark.parametrize("make_backend", [TorchAttentionBackend, PaddedTorchAttentionBackend], ids=["torch", "padded"])
def test_bfloat16_casts_the_float32_weights_back(make_backend: Callable[[], AttentionBackend]):
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=5)
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
        monkeypatch.setattr(module, "softcapped_attention", explicit)
    batch = make_batch(QUERY_LENS, SEQ_LENS, seed=6)
    for window in WINDOWS:
        batch.forward(make_backend(), sliding_window=window, logit_softcap=None)
        with pytest.raises(AssertionError, match="explicit path"):
            batch.forward(make_backend(), sliding_window=window, logit_softcap=CAP)


def static_batch(num_seqs: int) -> tuple[HostBatch, GraphShape, StaticStepInputs]:
    """Two real sequences in a captured shape of ``num_seqs`` sequences of 3 queries: a verify of 3 at
    positions 5..7, a decode at position 15, the last key the 4-block tables hold."""
    batch = HostBatch(BLOCK_SIZE)
    batch.add_sequence([0, 0, 0], start=5, block_table=[3, 8])
    batch.add_sequence([0], start=15, block_table=[1, 2, 4, 6])
    shape = GraphShape(num_seqs, 3)
    inputs = StaticStepInputs(4, 3, 4, BLOCK_SIZE, DEVICE)
    inputs.write(batch, shape)
    return batch, shape, inputs


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
    batch = make_batch(host.query_lens, host.seq_lens, seed=7, tables=host.block_tables,
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
    batch = make_batch(host.query_lens, host.seq_lens, seed=8, tables=host.block_tables,
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
    batch = make_batch([1], [5], seed=9)
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
               sliding_window=None, logit_softcap=None):
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
