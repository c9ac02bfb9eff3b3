"""Reference attention backend in plain torch (CPU and GPU): the correctness oracle for the others."""

from __future__ import annotations

from dataclasses import dataclass

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
from executor_svc.attention.length_groups import length_groups
from executor_svc.attention.metadata import AttentionMetadata
from executor_svc.host_transfer import host_list_to_device

# What one more padded group costs, in KV blocks of padding it would save (one more gather, attention
# call and scatter per layer). Measured on SmolLM2-135M decode at batch 16, contexts 70..470, CPU.
GROUP_OVERHEAD_BLOCKS = 16


@dataclass(frozen=True)
class _BatchedGroup:
    """Sequences with few queries each, attended together over K/V gathered into a padded batch."""

    num_seqs: int
    max_query_len: int
    block_ids: torch.Tensor
    """int64 [num_seqs * blocks_per_seq]: every sequence's blocks, padded to the longest table."""
    query_rows: torch.Tensor | None
    """int64 [num_seqs * max_query_len]: flat token of each padded query (None: rows 0..T-1 in order)."""
    keep_padded: torch.Tensor | None
    """int64 [R]: which padded rows are real (None: all)."""
    keep_flat: torch.Tensor | None
    """int64 [R]: flat token of each real row (None: the padded rows map onto tokens 0..T-1)."""
    mask: torch.Tensor
    """bool [num_seqs, 1, group * max_query_len, padded_len]: True where a query may see a key (causal, and
    within the sliding window or chunk if any)."""


@dataclass(frozen=True)
class _SingleSequence:
    """One sequence with a long query (a prefill chunk), attended on its own."""

    start: int
    end: int
    num_keys: int
    """Keys attended: the sequence's tokens from the first block gathered (its whole length without a window)."""
    block_ids: torch.Tensor | None
    """int64 [blocks]: the blocks gathered, from the first one the window or chunk reaches (None: no cached context,
    attend over the new K/V only)."""
    mask: torch.Tensor | None
    """bool [query_len, num_keys]: causal mask offset by the cached context, banded by the sliding window or chunk
    (None: plain causal)."""


@dataclass(frozen=True)
class _Plan:
    """Everything the backend derives from the metadata once per forward and reuses in every layer."""

    key_rows: torch.Tensor
    value_rows: torch.Tensor | None
    """None: a one-plane cache, whose values are its keys."""
    batched: list[_BatchedGroup]
    """Short-query sequences in groups of similar length (see ``length_groups``)."""
    singles: list[_SingleSequence]
    output_is_batched: bool
    """A single batched group covers every token in order: its output is the whole output."""


class TorchAttentionBackend:
    """Paged attention with torch ops. Short queries (decode, draft verification) run as padded batches
    of sequences of similar length; long queries (prefill chunks) run per sequence with
    scaled_dot_product_attention. Layers with soft-capped scores or attention sinks compute the same batches
    explicitly (``explicit_attention``) over the same masks.

    ``group_overhead_blocks`` is the padding (in KV blocks) worth one more padded batch; 0 would put
    every distinct length in its own batch, a huge value puts all short queries in one.
    """

    name = "torch"

    def __init__(self, max_batched_query_len: int = 8, group_overhead_blocks: int = GROUP_OVERHEAD_BLOCKS) -> None:
        if max_batched_query_len < 1:
            raise ValueError(f"max_batched_query_len: must be >= 1, got {max_batched_query_len}")
        if group_overhead_blocks < 0:
            raise ValueError(f"group_overhead_blocks: must be >= 0, got {group_overhead_blocks}")
        self.max_batched_query_len = max_batched_query_len
        self.group_overhead_blocks = group_overhead_blocks

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
        num_kv_heads, planes = kv_layer.shape[3], kv_layer.shape[1]
        value_plane(kv_layer, k, v)
        group = q.shape[1] // num_kv_heads
        reach = _effective_reach(meta, reach)
        # Layers with different windows or chunks (or none) in one forward each get their own plan.
        plan = meta.cached(
            f"torch/{group}/{reach}/{planes}",
            lambda: _build_plan(meta, group, reach, planes, self.max_batched_query_len, self.group_overhead_blocks),
        )
        _write_kv(kv_layer, k, v, plan)
        if plan.output_is_batched:
            return _attend_batched(q, kv_layer, plan.batched[0], scale, logit_softcap, sinks)
        out = torch.empty_like(q)
        for batch in plan.batched:
            _scatter_batched(out, _attend_batched(q, kv_layer, batch, scale, logit_softcap, sinks), batch)
        for single in plan.singles:
            out[single.start : single.end] = _attend_single(q, k, v, kv_layer, single, scale, meta, logit_softcap,
                                                            sinks)
        return out


def _write_kv(kv_layer: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: _Plan) -> None:
    rows = kv_layer.view(-1, kv_layer.shape[3], kv_layer.shape[4])
    rows.index_copy_(0, plan.key_rows, k)
    if plan.value_rows is not None:
        rows.index_copy_(0, plan.value_rows, v)


def _keys_and_values(kv_layer: torch.Tensor, block_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of the given blocks, each [len(block_ids) * block_size, KVH, D] (one tensor twice for a
    one-plane cache, whose values are its keys)."""
    keys = _gather(kv_layer, 0, block_ids)
    return keys, keys if kv_layer.shape[1] == 1 else _gather(kv_layer, 1, block_ids)


def _gather(kv_layer: torch.Tensor, which: int, block_ids: torch.Tensor) -> torch.Tensor:
    """Keys (which=0) or values (1) of the given blocks as [len(block_ids) * block_size, KVH, D]."""
    gathered = kv_layer[:, which].index_select(0, block_ids)
    return gathered.view(-1, kv_layer.shape[3], kv_layer.shape[4])


def _attend_batched(
    q: torch.Tensor, kv_layer: torch.Tensor, batch: _BatchedGroup, scale: float, logit_softcap: float | None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of the padded batch; returns [num_seqs * max_query_len, H, D] rows."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = kv_layer.shape[3]
    group = num_heads // num_kv_heads
    seqs, qlen = batch.num_seqs, batch.max_query_len
    rows = q if batch.query_rows is None else q.index_select(0, batch.query_rows)
    # GQA without repeating K/V: the queries sharing a KV head become that head's "query sequence".
    queries = rows.view(seqs, qlen, num_kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    queries = queries.reshape(seqs, num_kv_heads, group * qlen, head_dim)
    keys, values = (part.view(seqs, -1, num_kv_heads, head_dim).transpose(1, 2)
                    for part in _keys_and_values(kv_layer, batch.block_ids))
    if logit_softcap is None and sinks is None:
        out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=batch.mask, scale=scale)
    else:
        out = explicit_attention(queries, keys, values, batch.mask, scale, logit_softcap,
                                 grouped_sinks(sinks, num_kv_heads, qlen))
    out = out.reshape(seqs, num_kv_heads, group, qlen, head_dim).permute(0, 3, 1, 2, 4)
    return out.reshape(seqs * qlen, num_heads, head_dim)


def _scatter_batched(out: torch.Tensor, rows: torch.Tensor, batch: _BatchedGroup) -> None:
    if batch.keep_padded is not None:
        rows = rows.index_select(0, batch.keep_padded)
    assert batch.keep_flat is not None  # None only when the group is the whole output (not scattered)
    out.index_copy_(0, batch.keep_flat, rows)


def _attend_single(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kv_layer: torch.Tensor,
    single: _SingleSequence,
    scale: float,
    meta: AttentionMetadata,
    logit_softcap: float | None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of one sequence's queries; returns [query_len, H, D]."""
    if single.block_ids is None:
        keys, values = k[single.start : single.end], v[single.start : single.end]
    else:
        keys, values = (part[: single.num_keys] for part in _keys_and_values(kv_layer, single.block_ids))
    if logit_softcap is not None or sinks is not None:
        mask = single.mask if single.mask is not None else _causal_mask(meta, single.end - single.start)
        return _attend_single_explicit(q[single.start : single.end], keys, values, mask, scale, logit_softcap, sinks)
    queries = q[single.start : single.end].transpose(0, 1).unsqueeze(0)
    out = F.scaled_dot_product_attention(
        queries,
        keys.transpose(0, 1).unsqueeze(0),
        values.transpose(0, 1).unsqueeze(0),
        attn_mask=single.mask,
        is_causal=single.mask is None,
        scale=scale,
        enable_gqa=True,
    )
    return out.squeeze(0).transpose(0, 1)


def _attend_single_explicit(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    logit_softcap: float | None,
    sinks: torch.Tensor | None,
) -> torch.Tensor:
    """Explicit (capped, or with sinks) attention of queries [n, H, D] over keys/values [S, KVH, D] with mask
    [n, S]; returns [n, H, D]. GQA without repeating K/V: each KV head's group of query heads is a broadcast dim."""
    n, num_heads, head_dim = queries.shape
    num_kv_heads = keys.shape[1]
    grouped = queries.unflatten(1, (num_kv_heads, -1)).permute(1, 2, 0, 3)
    out = explicit_attention(
        grouped,  # [KVH, group, n, D]
        keys.transpose(0, 1).unsqueeze(1),  # [KVH, 1, S, D]
        values.transpose(0, 1).unsqueeze(1),
        mask,
        scale,
        logit_softcap,
        None if sinks is None else sinks.view(num_kv_heads, -1, 1, 1),
    )
    return out.permute(2, 0, 1, 3).reshape(n, num_heads, head_dim)


def _causal_mask(meta: AttentionMetadata, n: int) -> torch.Tensor:
    """bool [n, n] lower-triangular mask of a whole prompt of n tokens (the plan has none: SDPA runs it with
    is_causal), built once per forward and length and shared by every capped layer."""
    return meta.cached(f"torch/causal/{n}", lambda: torch.ones(n, n, dtype=torch.bool, device=meta.device).tril())


def _effective_reach(meta: AttentionMetadata, reach: KeyReach | None) -> KeyReach | None:
    """The reach, or None where it hides no key from any query (no sequence is longer than the window or the
    chunk): such a layer shares the plan, and the speed, of a layer without one."""
    if reach is None or reach.hides_nothing(max(meta.seq_lens_list, default=0)):
        return None
    return reach


def _skipped_blocks(meta: AttentionMetadata, reach: KeyReach | None) -> list[int]:
    """Per sequence, its leading blocks that hold only keys before the reach of its first query (at
    p = seq_len - query_len): never gathered."""
    if reach is None:
        return [0] * len(meta.seq_lens_list)
    return [
        max(0, reach.first_key(seq_len - query_len)) // meta.block_size
        for query_len, seq_len in zip(meta.query_lens_list, meta.seq_lens_list)
    ]


def _visible(keys: torch.Tensor, positions: torch.Tensor, reach: KeyReach | None,
             first_key: int | torch.Tensor = 0) -> torch.Tensor:
    """Whether a query at ``positions`` sees a key at ``keys`` (broadcast; both counted from the sequence's first
    gathered key, at absolute position ``first_key``): causal, within the reach if any."""
    mask = keys <= positions
    if reach is not None:
        mask &= keys >= reach.first_key(positions + first_key) - first_key
    return mask


def _build_plan(
    meta: AttentionMetadata, group: int, reach: KeyReach | None, planes: int, max_batched_query_len: int,
    group_overhead_blocks: int,
) -> _Plan:
    device = meta.device
    block_size = meta.block_size
    blocks = meta.slot_mapping // block_size
    key_rows = blocks * (planes * block_size) + meta.slot_mapping % block_size
    starts = _host_starts(meta)
    skipped = _skipped_blocks(meta, reach)
    short = [i for i, n in enumerate(meta.query_lens_list) if n <= max_batched_query_len]
    long = [i for i, n in enumerate(meta.query_lens_list) if n > max_batched_query_len]
    widths = [len(meta.block_tables_list[i]) - skipped[i] for i in short]
    batched = [
        _build_batched(meta, starts, skipped, [short[j] for j in members], group, reach)
        for members in length_groups(widths, group_overhead_blocks)
    ]
    return _Plan(
        key_rows=key_rows,
        value_rows=key_rows + block_size if planes == 2 else None,
        batched=batched,
        singles=[_build_single(meta, starts[i], i, skipped[i], reach, device) for i in long],
        output_is_batched=len(batched) == 1 and not long and batched[0].query_rows is None,
    )


def _build_batched(
    meta: AttentionMetadata, starts: list[int], skipped: list[int], seqs: list[int], group: int,
    reach: KeyReach | None,
) -> _BatchedGroup:
    device = meta.device
    qlen = max(meta.query_lens_list[i] for i in seqs)
    tables = [meta.block_tables_list[i][skipped[i] :] for i in seqs]
    width = max(len(table) for table in tables)
    padded_len = width * meta.block_size
    rows = _PaddedRows.build(meta, starts, seqs, [skipped[i] * meta.block_size for i in seqs], qlen)
    block_ids: list[int] = []
    for table in tables:
        block_ids.extend(table + [table[0]] * (width - len(table)))
    positions = host_list_to_device(rows.positions, device).view(len(seqs), 1, 1, qlen, 1)
    first_keys = (0 if reach is None
                  else host_list_to_device([skipped[i] * meta.block_size for i in seqs], device).view(-1, 1, 1, 1, 1))
    mask = _visible(torch.arange(padded_len, device=device).view(1, 1, 1, 1, -1), positions, reach, first_keys)
    mask = mask.expand(len(seqs), 1, group, qlen, padded_len).reshape(len(seqs), 1, group * qlen, padded_len)
    in_order = rows.tokens == list(range(meta.num_tokens))
    return _BatchedGroup(
        num_seqs=len(seqs),
        max_query_len=qlen,
        block_ids=host_list_to_device(block_ids, device),
        query_rows=None if in_order else host_list_to_device(rows.tokens, device),
        keep_padded=(None if len(rows.keep_padded) == len(rows.tokens)
                     else host_list_to_device(rows.keep_padded, device)),
        keep_flat=None if in_order else host_list_to_device(rows.keep_flat, device),
        mask=mask,
    )


@dataclass
class _PaddedRows:
    """Host-side layout of a padded query batch: max_query_len rows per sequence."""

    tokens: list[int]
    """Flat token each padded row reads its query from (padding repeats the sequence's last query)."""
    positions: list[int]
    """Position of each padded row's query, counted from its sequence's first gathered key."""
    keep_padded: list[int]
    keep_flat: list[int]

    @classmethod
    def build(
        cls, meta: AttentionMetadata, starts: list[int], seqs: list[int], first_keys: list[int], qlen: int
    ) -> _PaddedRows:
        """``first_keys[j]``: the position of the first key gathered for sequence ``seqs[j]``."""
        rows = cls([], [], [], [])
        for i, first_key in zip(seqs, first_keys):
            n, num_keys, start = meta.query_lens_list[i], meta.seq_lens_list[i] - first_key, starts[i]
            for j in range(qlen):
                real = min(j, n - 1)
                if j < n:
                    rows.keep_padded.append(len(rows.tokens))
                    rows.keep_flat.append(start + j)
                rows.tokens.append(start + real)
                rows.positions.append(num_keys - n + real)
        return rows


def _build_single(
    meta: AttentionMetadata, start: int, i: int, skipped: int, reach: KeyReach | None, device: torch.device
) -> _SingleSequence:
    query_len, seq_len = meta.query_lens_list[i], meta.seq_lens_list[i]
    if reach is not None and reach.hides_nothing(seq_len):
        reach = None
    if query_len == seq_len and reach is None:
        return _SingleSequence(start=start, end=start + query_len, num_keys=seq_len, block_ids=None, mask=None)
    first_key = skipped * meta.block_size
    num_keys = seq_len - first_key
    query_positions = torch.arange(seq_len - query_len - first_key, num_keys, device=device)
    mask = _visible(torch.arange(num_keys, device=device).view(1, -1), query_positions.view(-1, 1), reach, first_key)
    # A whole prompt (no cached context) attends over its new K/V directly, as without a window or chunks.
    block_ids = None if query_len == seq_len else host_list_to_device(meta.block_tables_list[i][skipped:], device)
    return _SingleSequence(start=start, end=start + query_len, num_keys=num_keys, block_ids=block_ids, mask=mask)


def _host_starts(meta: AttentionMetadata) -> list[int]:
    starts = [0]
    for n in meta.query_lens_list:
        starts.append(starts[-1] + n)
    return starts
