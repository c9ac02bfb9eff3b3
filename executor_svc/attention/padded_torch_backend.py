"""Graph-safe paged attention in plain torch: every shape from the metadata's tensor shapes, no host reads.

Each sequence's queries are gathered into a padded [num_seqs, max_query_len] batch and attend over its
whole block table (all of ``block_tables``' columns), masked by position. That costs padding a fused
kernel does not pay, so it is a fallback and a reference: it is what a captured graph or
``torch.compile(fullgraph=True)`` can run on any device, including the CPU tests of the graph machinery.

Layers with soft-capped scores or attention sinks attend explicitly (``explicit_attention``) over the same padded
batch and mask.

Padded tokens (slot -1) write their K/V into the cache's last slot, which must belong to a scratch block
no sequence uses (``PagedKVCache(..., scratch_blocks=1)``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from executor_svc.attention.backend import (
    KeyReach,
    check_logit_softcap,
    check_sinks,
    grouped_sinks,
    value_plane,
)
from executor_svc.attention.explicit import explicit_attention
from executor_svc.attention.metadata import AttentionMetadata


class PaddedTorchAttentionBackend:
    """Paged attention over padded per-sequence batches, with no host synchronisation or Python loop."""

    name = "torch_padded"
    graph_safe = True

    def plan(self, meta: AttentionMetadata) -> None:
        """Nothing to prepare on the host: every index is derived on the device inside ``forward``."""

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_layer: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
        sliding_window: int | None = None,
        logit_softcap: float | None = None,
        sinks: torch.Tensor | None = None,
        attention_chunk: int | None = None,
    ) -> torch.Tensor:
        """Write k/v [T, KVH, D] into kv_layer, then attend q [T, H, D] causally over each sequence's cache
        (over its last ``sliding_window`` positions, or its own ``attention_chunk``-aligned span, if set; scores
        capped by ``logit_softcap``, if set; with a sink logit per head in every softmax, if ``sinks`` [H] is set)."""
        reach = KeyReach.of(sliding_window, attention_chunk)
        check_logit_softcap(logit_softcap)
        check_sinks(sinks, q)
        _write_kv(kv_layer, k, v, meta.slot_mapping, value_plane(kv_layer, k, v))
        return _attend(q, kv_layer, meta, scale, reach, logit_softcap, sinks)


def _write_kv(kv_layer: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor, values_at: int) -> None:
    """Keys into plane 0, values into plane ``values_at`` (0: a one-plane cache, whose values are the keys)."""
    planes, block_size = kv_layer.shape[1], kv_layer.shape[2]
    scratch = kv_layer.shape[0] * block_size - 1
    slots = torch.where(slots >= 0, slots, scratch)
    key_rows = (slots // block_size) * (planes * block_size) + slots % block_size
    rows = kv_layer.view(-1, kv_layer.shape[3], kv_layer.shape[4])
    rows.index_copy_(0, key_rows, k)
    if values_at:
        rows.index_copy_(0, key_rows + values_at * block_size, v)


def _attend(
    q: torch.Tensor,
    kv_layer: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    reach: KeyReach | None,
    logit_softcap: float | None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads, block_size = kv_layer.shape[3], kv_layer.shape[2]
    group = num_heads // num_kv_heads
    num_seqs, width = meta.block_tables.shape
    max_q = meta.max_query_len
    starts = meta.query_start_loc[:-1]
    query_lens = meta.query_start_loc[1:] - starts
    offsets = torch.arange(max_q, device=q.device)
    # Padded query j of sequence i reads flat row starts[i] + j (clamped: padding repeats a real row).
    rows = (starts.unsqueeze(1) + offsets).clamp(max=num_tokens - 1)
    queries = q.index_select(0, rows.flatten()).view(num_seqs, max_q, num_kv_heads, group, head_dim)
    queries = queries.permute(0, 2, 3, 1, 4).reshape(num_seqs, num_kv_heads, group * max_q, head_dim)
    blocks = meta.block_tables.flatten()
    keys = kv_layer[:, 0].index_select(0, blocks).view(num_seqs, width * block_size, num_kv_heads, head_dim)
    values = keys if kv_layer.shape[1] == 1 else (
        kv_layer[:, 1].index_select(0, blocks).view(num_seqs, width * block_size, num_kv_heads, head_dim))
    query_positions = meta.seq_lens.unsqueeze(1) - query_lens.unsqueeze(1) + offsets  # [B, max_q]
    mask = _visible(query_positions, width * block_size, reach)
    mask = mask.unsqueeze(1).expand(num_seqs, group, max_q, -1).reshape(num_seqs, 1, group * max_q, -1)
    keys, values = keys.transpose(1, 2), values.transpose(1, 2)
    if logit_softcap is None and sinks is None:
        out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, scale=scale)
    else:
        out = explicit_attention(queries, keys, values, mask, scale, logit_softcap,
                                 grouped_sinks(sinks, num_kv_heads, max_q))
    out = out.view(num_seqs, num_kv_heads, group, max_q, head_dim).permute(0, 3, 1, 2, 4)
    out = out.reshape(num_seqs * max_q, num_heads, head_dim)
    # Flat token t belongs to sequence s (the last whose start is <= t) at query offset t - starts[s].
    flat = torch.arange(num_tokens, device=q.device)
    seq = (torch.searchsorted(meta.query_start_loc, flat, right=True) - 1).clamp(0, num_seqs - 1)
    within = (flat - starts.index_select(0, seq)).clamp(0, max_q - 1)
    return out.index_select(0, seq * max_q + within)


def _visible(query_positions: torch.Tensor, num_keys: int, reach: KeyReach | None) -> torch.Tensor:
    """bool [B, max_q, num_keys]: which keys each padded query row sees, never none (no NaN rows)."""
    keys = torch.arange(num_keys, device=query_positions.device).view(1, 1, -1)
    mask = keys <= query_positions.unsqueeze(2)
    if reach is None:
        mask[:, :, 0] = True  # an empty (padded) sequence still attends somewhere
        return mask
    # Key 0 may lie outside a real query's window or chunk, so padded rows are kept non-empty another way: a row
    # past the last key (padding of a query or of the batch) takes its reach from the last key.
    first = reach.first_key(query_positions.clamp(max=num_keys - 1))
    return mask & (keys >= first.unsqueeze(2))
