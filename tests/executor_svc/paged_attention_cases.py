"""Shared cases of the attention-backend tests that check windows and soft caps: random q/k/v over shuffled,
non-contiguous block tables, the cache after the K/V write, a dense reference written independently of the
backends, and a captured step's static batch. Importing this chooses Triton's interpreter when there is no GPU
(triton reads it at @triton.jit time), so import it before the Triton backend."""

from __future__ import annotations

import dataclasses
import importlib.util
import os

import pytest
import torch

from executor_svc.attention.backend import AttentionBackend
from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.cuda_graphs.buckets import GraphShape
from executor_svc.cuda_graphs.static_inputs import StaticStepInputs
from executor_svc.host_batch import HostBatch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from executor_svc.attention.triton_backend import triton_available  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
BLOCK_SIZE = 4
NUM_BLOCKS = 64  # plus one scratch block (the padded backend's padding writes there)
HEADS, KV_HEADS, HEAD_DIM = 6, 2, 8
TRITON_HEADS = (4, 1)
"""Query and KV heads of the Triton tests: a GQA group of 4 (tiles of 16 queries, so a chunk of 20 has two)
in few programs (the interpreter's cost)."""

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
    """The cache with every new token's K/V at its slot (what every backend must leave)."""
    scale: float

    def metadata(self) -> AttentionMetadata:
        return AttentionMetadata.build(self.query_lens, self.seq_lens, self.tables, BLOCK_SIZE, DEVICE)

    def forward(
        self,
        backend: AttentionBackend,
        meta: AttentionMetadata | None = None,
        sliding_window: int | None = None,
        logit_softcap: float | None = None,
        sinks: torch.Tensor | None = None,
        attention_chunk: int | None = None,
    ) -> torch.Tensor:
        """The backend's output over a fresh copy of the cache (the batch's own metadata unless ``meta``)."""
        meta = self.metadata() if meta is None else meta
        extra: dict[str, object] = {} if sinks is None else {"sinks": sinks.to(DEVICE)}
        if attention_chunk is not None:
            extra["attention_chunk"] = attention_chunk
        return backend.forward(self.q, self.k, self.v, self.cache.clone(), meta, self.scale,
                               sliding_window=sliding_window, logit_softcap=logit_softcap, **extra)


def shuffled_tables(seq_lens: list[int], num_blocks: int, block_size: int, generator: torch.Generator
                    ) -> list[list[int]]:
    """Block tables for ``seq_lens``, each sequence's blocks taken in turn from a random permutation of the cache's:
    non-contiguous and out of order."""
    blocks = torch.randperm(num_blocks, generator=generator).tolist()
    tables, used = [], 0
    for seq_len in seq_lens:
        width = -(-seq_len // block_size)
        tables.append(blocks[used : used + width])
        used += width
    return tables


def make_batch(
    query_lens: list[int],
    seq_lens: list[int],
    seed: int,
    scale: float,
    tables: list[list[int]] | None = None,
    padding: int = 0,
    heads: tuple[int, int] = (HEADS, KV_HEADS),
    q_gain: float = 1.0,
) -> Batch:
    """Random q (times ``q_gain``), k, v (``padding`` rows more, of no sequence) and cache; tables default to
    shuffled blocks. ``heads``: query and KV heads."""
    num_heads, num_kv_heads = heads
    generator = torch.Generator().manual_seed(seed)
    if tables is None:
        tables = shuffled_tables(seq_lens, NUM_BLOCKS, BLOCK_SIZE, generator)
    tokens = sum(query_lens) + padding
    q = torch.randn(tokens, num_heads, HEAD_DIM, generator=generator) * q_gain
    k = torch.randn(tokens, num_kv_heads, HEAD_DIM, generator=generator)
    v = torch.randn(tokens, num_kv_heads, HEAD_DIM, generator=generator)
    cache = torch.randn(NUM_BLOCKS + 1, 2, BLOCK_SIZE, num_kv_heads, HEAD_DIM, generator=generator)
    written = cache.clone()
    token = 0
    for query_len, seq_len, table in zip(query_lens, seq_lens, tables):
        for position in range(seq_len - query_len, seq_len):
            written[table[position // BLOCK_SIZE], :, position % BLOCK_SIZE] = torch.stack([k[token], v[token]])
            token += 1
    return Batch(query_lens, seq_lens, tables, q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), cache.to(DEVICE), written,
                 scale)


def dense_reference(batch: Batch, window: int | None = None, cap: float | None = None,
                    sinks: torch.Tensor | None = None, chunk: int | None = None) -> torch.Tensor:
    """Per sequence, its queries over its keys gathered from the written cache, as HF's eager attention: scores
    capped (if ``cap``), then masked (causal, within the window if any, within the query's own ``chunk``-aligned span
    if any), softmax in float32 (with each head's
    sink logit as one more column, then dropped, if ``sinks`` [H])."""
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
        if chunk is not None:
            visible &= key_positions // chunk == query_positions // chunk
        scores = torch.einsum("qhd,khd->hqk", query, keys) * batch.scale
        if cap is not None:
            scores = torch.tanh(scores / cap) * cap
        scores = scores.masked_fill(~visible, float("-inf"))
        if sinks is not None:
            sink_column = sinks.view(-1, 1, 1).expand(-1, query_len, 1)
            weights = torch.cat((scores, sink_column), dim=-1).softmax(-1, dtype=torch.float32)[..., :-1]
        else:
            weights = scores.softmax(-1, dtype=torch.float32)
        weights = weights.to(query.dtype)
        outputs.append(torch.einsum("hqk,khd->qhd", weights, values))
    return torch.cat(outputs)


def static_batch(num_seqs: int = 4) -> tuple[HostBatch, GraphShape, StaticStepInputs]:
    """Two real sequences in a captured shape of ``num_seqs`` sequences of 3 queries: a verify of 3 at
    positions 5..7, a decode at position 15, the last key the 4-block tables hold. With 2 sequences the
    padded tokens read the decode's padded query rows, which lie past every key."""
    batch = HostBatch(BLOCK_SIZE)
    batch.add_sequence([0, 0, 0], start=5, block_table=[3, 8])
    batch.add_sequence([0], start=15, block_table=[1, 2, 4, 6])
    shape = GraphShape(num_seqs, 3)
    inputs = StaticStepInputs(4, 3, 4, BLOCK_SIZE, DEVICE)
    inputs.write(batch, shape)
    return batch, shape, inputs
