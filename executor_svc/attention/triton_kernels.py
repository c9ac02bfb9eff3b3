# Triton reads the kernels' parameter annotations (tl.constexpr marks compile-time constants): the
# @triton.jit functions carry no other annotations, and mypy is told not to ask for them.
# mypy: disable-error-code="no-untyped-def, untyped-decorator"
"""Triton kernels of the graph-safe paged attention backend, and the functions that launch them.

Every launch parameter (grid, tile sizes, number of KV splits) comes from tensor shapes and from the
Python ints of the metadata (``max_query_len``): nothing reads a device tensor on the host, so a forward
can be captured in a CUDA graph and replayed with new metadata values.

Importing this module imports triton; ``triton_backend`` imports it only when a forward runs. Setting
``TRITON_INTERPRET=1`` before triton is first imported runs the kernels on the CPU (slowly).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

MAX_HEAD_DIM = 128  # selection.TRITON_MAX_HEAD_DIM says the same without importing triton
MAX_SPLITS = 16
"""Upper bound of ``choose_num_splits``; a caller may ask for more."""
SPLIT_VARIANTS = (1, 2, 4, 8, 16)
"""Every number of splits an eager decode step uses (``eager_num_splits``): the powers of two up to MAX_SPLITS."""
MIN_TOKENS_PER_SPLIT = 128
"""About two KV tiles: shorter splits would spend more on their partial write and combine than they save."""
_ROWS_PER_TILE = 64
"""Target query rows (GQA heads x query tokens) per program; a tile never has fewer than 16 (tl.dot)."""
_MIN_DOT = 16
_NO_SCORE = tl.constexpr(-1.0e30)
"""Running max of a row that has seen no key: finite, so exp2(m_old - m_new) never computes inf - inf.
(A global a kernel reads must be a tl.constexpr.)"""
_LOG2E = 1.4426950408889634
_MINUS_TWO_LOG2E = tl.constexpr(-2.0 * _LOG2E)


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


# ---------------------------------------------------------------------------------------------------
# K/V write


@triton.jit
def _write_kv_kernel(
    k_ptr,
    v_ptr,
    kv_ptr,
    slot_ptr,
    k_stride_t,
    k_stride_h,
    k_stride_d,
    v_stride_t,
    v_stride_h,
    v_stride_d,
    kv_stride_block,
    kv_stride_kv,
    kv_stride_offset,
    kv_stride_h,
    kv_stride_d,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    DIM_PAD: tl.constexpr,
):
    """One program per token: copies its K and V [KVH, D] into the cache slot; slot < 0 writes nothing."""
    token = tl.program_id(0).to(tl.int64)
    heads = tl.arange(0, HEADS_PAD)[:, None]
    dims = tl.arange(0, DIM_PAD)[None, :]
    # The slot broadcast to the tile: the interpreter mishandles a scalar mask combined with a block one.
    slot = tl.load(slot_ptr + token) + tl.zeros([HEADS_PAD, DIM_PAD], dtype=tl.int64)
    valid = slot >= 0
    slot = tl.where(valid, slot, 0)
    block = slot // BLOCK_SIZE
    offset = slot % BLOCK_SIZE
    mask = valid & (heads < NUM_KV_HEADS) & (dims < HEAD_DIM)
    key = tl.load(k_ptr + token * k_stride_t + heads * k_stride_h + dims * k_stride_d, mask=mask)
    value = tl.load(v_ptr + token * v_stride_t + heads * v_stride_h + dims * v_stride_d, mask=mask)
    dst = kv_ptr + block * kv_stride_block + offset * kv_stride_offset + heads * kv_stride_h + dims * kv_stride_d
    tl.store(dst, key.to(kv_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + kv_stride_kv, value.to(kv_ptr.dtype.element_ty), mask=mask)


def write_kv(k: torch.Tensor, v: torch.Tensor, kv_layer: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Scatter k/v [T, KVH, D] into kv_layer [num_blocks, 2, block_size, KVH, D] at slot_mapping [T].

    Tokens whose slot is negative (padding of a captured batch) are skipped.
    """
    num_tokens, num_kv_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    _write_kv_kernel[(num_tokens,)](
        k,
        v,
        kv_layer,
        slot_mapping,
        *k.stride(),
        *v.stride(),
        *kv_layer.stride(),
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_SIZE=kv_layer.shape[2],
        HEADS_PAD=_next_power_of_2(num_kv_heads),
        DIM_PAD=_next_power_of_2(head_dim),
    )


# ---------------------------------------------------------------------------------------------------
# Attention


@triton.jit
def _tile_rows(
    qsl_ptr,
    seq_lens_ptr,
    seq,
    kv_head,
    tile,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    """The rows of one (sequence, KV head, query tile) program: row r is query head kv_head * GROUP + r %
    GROUP_PAD of the tile's query r // GROUP_PAD. Returns each row's flat token, head, absolute position
    (-1 for rows that are not real queries) and validity, and the tile's key bound (keys < kv_end)."""
    q_start = tl.load(qsl_ptr + seq)
    # Lengths fit int32 (cheaper loop and mask arithmetic); flat token offsets stay int64.
    query_len = (tl.load(qsl_ptr + seq + 1) - q_start).to(tl.int32)
    seq_len = tl.load(seq_lens_ptr + seq).to(tl.int32)
    rows = tl.arange(0, BLOCK_M)
    in_group = rows % GROUP_PAD
    query = tile * BLOCK_Q + rows // GROUP_PAD
    valid = (in_group < GROUP) & (rows // GROUP_PAD < BLOCK_Q) & (query < query_len)
    tokens = q_start + query
    heads = kv_head * GROUP + in_group
    positions = tl.where(valid, seq_len - query_len + query, -1)
    # The tile's last query sees keys up to its own position; an empty tile (past the query) sees none.
    tile_end = tl.minimum(tile * BLOCK_Q + BLOCK_Q, query_len)
    kv_end = tl.where(tile * BLOCK_Q < query_len, seq_len - query_len + tile_end, 0)
    return tokens, heads, positions, valid, kv_end


@triton.jit
def _window_start(qsl_ptr, seq_lens_ptr, seq, tile, kv_end, window, attn_chunk, BLOCK_Q: tl.constexpr,
                  BLOCK_SIZE: tl.constexpr):
    """The tile's first key to read (<= kv_end): the start of the KV-cache block holding the first key its
    first query's sliding window (``window`` > 0) or chunk (``attn_chunk`` > 0) reaches (both 0: every key from 0).
    Whole blocks before it are skipped; the rows' own masks cut the boundary block."""
    q_start = tl.load(qsl_ptr + seq)
    query_len = (tl.load(qsl_ptr + seq + 1) - q_start).to(tl.int32)
    seq_len = tl.load(seq_lens_ptr + seq).to(tl.int32)
    first_query = seq_len - query_len + tile * BLOCK_Q
    first_key = tl.where(window > 0, first_query - window + 1, 0)
    first_key = tl.where(attn_chunk > 0, first_query - first_query % tl.maximum(attn_chunk, 1), first_key)
    return tl.minimum((tl.maximum(first_key, 0) // BLOCK_SIZE) * BLOCK_SIZE, kv_end)


@triton.jit
def _tanh(x):
    """tanh from exp2 (tl has no tanh, and libdevice's fails under the Triton 3.9 interpreter): sign(x) (1 - e) /
    (1 + e) with e = exp(-2|x|) in (0, 1], which never overflows."""
    e = tl.exp2(tl.abs(x) * _MINUS_TWO_LOG2E)
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


# ``window`` and ``attn_chunk`` are runtime ints, not constexprs: one compiled kernel serves every window and chunk
# (and none), so models whose layers alternate them compile nothing more and the eager warm-up needs no variant per
# window; they are not specialised either (Triton would otherwise compile 1 and multiples of 16 apart). SOFTCAP is a
# constexpr so that an uncapped layer runs exactly the kernel it ran before caps existed (no tanh, no branch);
# the cap's value is a runtime float, so every cap shares the one capped kernel.
@triton.jit(do_not_specialize=["num_tokens", "block_tables_stride", "window", "attn_chunk"])
def _attention_kernel(
    q_ptr,
    kv_ptr,
    out_ptr,
    part_m_ptr,
    part_l_ptr,
    part_acc_ptr,
    qsl_ptr,
    seq_lens_ptr,
    block_tables_ptr,
    qk_scale,
    num_tokens,
    num_heads,
    q_stride_t,
    q_stride_h,
    q_stride_d,
    out_stride_t,
    out_stride_h,
    out_stride_d,
    kv_stride_block,
    kv_stride_kv,
    kv_stride_offset,
    kv_stride_h,
    kv_stride_d,
    block_tables_stride,
    window,
    attn_chunk,
    softcap,
    NUM_KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    DOT_FP32: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    """Program (sequence * KVH + kv head, query tile, split): online softmax over the split's share of
    the keys the tile may see. With one split it writes the normalised output, otherwise the partial
    (max, sum, accumulator) of every row, in log2 units, for ``_combine_kernel``. ``window`` > 0 is a sliding
    window (a query at p sees keys p - window < key <= p), ``attn_chunk`` > 0 chunked attention (keys
    p - p % attn_chunk <= key <= p); 0 none.

    Scores are q.k * qk_scale in log2 units; with SOFTCAP they are instead softcap * tanh(q.k * qk_scale),
    the launcher passing qk_scale = scale / cap and softcap = cap * log2(e) (the cap applies to the
    natural-scale score, then converts).

    DOT_FP32 upcasts the operands of both dots (which are then exact fp32 dots if DOT_PRECISION is "ieee")."""
    seq = tl.program_id(0) // NUM_KV_HEADS
    kv_head = tl.program_id(0) % NUM_KV_HEADS
    tile = tl.program_id(1)
    split = tl.program_id(2)
    tokens, heads, positions, valid, kv_end = _tile_rows(
        qsl_ptr, seq_lens_ptr, seq, kv_head, tile, GROUP, GROUP_PAD, BLOCK_Q, BLOCK_M
    )
    kv_start = _window_start(qsl_ptr, seq_lens_ptr, seq, tile, kv_end, window, attn_chunk, BLOCK_Q, BLOCK_SIZE)
    # A row sees the keys above its floor (and up to its position); -1 without a window or chunks.
    floor = tl.where(window > 0, positions - window, -1)
    floor = tl.where(attn_chunk > 0, positions - positions % tl.maximum(attn_chunk, 1) - 1, floor)
    dims = tl.arange(0, DIM_PAD)
    dim_ok = dims < HEAD_DIM
    q_mask = valid[:, None] & dim_ok[None, :]
    q_ptrs = q_ptr + tokens[:, None] * q_stride_t + heads[:, None] * q_stride_h + dims[None, :] * q_stride_d
    q = tl.load(q_ptrs, mask=q_mask, other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)

    # This split's key range, in whole KV tiles; computed on the device from the sequence's length.
    chunk = tl.cdiv(tl.cdiv(kv_end - kv_start, NUM_SPLITS), BLOCK_N) * BLOCK_N
    kv_lo = kv_start + split * chunk
    kv_hi = tl.minimum(kv_lo + chunk, kv_end)

    m_i = tl.full([BLOCK_M], _NO_SCORE, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, DIM_PAD], dtype=tl.float32)
    table = block_tables_ptr + seq.to(tl.int64) * block_tables_stride
    kv_base = kv_ptr + kv_head * kv_stride_h
    for start in range(kv_lo, kv_hi, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        key_ok = keys < kv_hi
        blocks = tl.load(table + keys // BLOCK_SIZE, mask=key_ok, other=0)
        rows = blocks * kv_stride_block + (keys % BLOCK_SIZE) * kv_stride_offset
        kv_mask = key_ok[:, None] & dim_ok[None, :]
        k_ptrs = kv_base + rows[:, None] + dims[None, :] * kv_stride_d
        k = tl.load(k_ptrs, mask=kv_mask, other=0.0)
        v = tl.load(k_ptrs + kv_stride_kv, mask=kv_mask, other=0.0)
        if DOT_FP32:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        if SOFTCAP:
            scores = _tanh(scores) * softcap
        visible = key_ok[None, :] & (keys[None, :] <= positions[:, None]) & (keys[None, :] > floor[:, None])
        scores = tl.where(visible, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        p = tl.exp2(scores - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    if NUM_SPLITS == 1:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        out_ptrs = out_ptr + tokens[:, None] * out_stride_t + heads[:, None] * out_stride_h
        tl.store(out_ptrs + dims[None, :] * out_stride_d, out.to(out_ptr.dtype.element_ty), mask=q_mask)
    else:
        part_rows = (split * num_tokens + tokens) * num_heads + heads
        tl.store(part_m_ptr + part_rows, m_i, mask=valid)
        tl.store(part_l_ptr + part_rows, l_i, mask=valid)
        tl.store(part_acc_ptr + part_rows[:, None] * HEAD_DIM + dims[None, :], acc, mask=q_mask)


@triton.jit(do_not_specialize=["num_tokens"])
def _combine_kernel(
    out_ptr,
    part_m_ptr,
    part_l_ptr,
    part_acc_ptr,
    qsl_ptr,
    seq_lens_ptr,
    num_tokens,
    num_heads,
    out_stride_t,
    out_stride_h,
    out_stride_d,
    NUM_KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    DIM_PAD: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
):
    """Program (sequence * KVH + kv head, query tile), as in ``_attention_kernel``: merges the splits'
    partials of its rows (rescaled to their common max) and writes the normalised output."""
    seq = tl.program_id(0) // NUM_KV_HEADS
    kv_head = tl.program_id(0) % NUM_KV_HEADS
    tile = tl.program_id(1)
    tokens, heads, positions, valid, kv_end = _tile_rows(
        qsl_ptr, seq_lens_ptr, seq, kv_head, tile, GROUP, GROUP_PAD, BLOCK_Q, BLOCK_M
    )
    dims = tl.arange(0, DIM_PAD)
    mask = valid[:, None] & (dims < HEAD_DIM)[None, :]
    m_i = tl.full([BLOCK_M], _NO_SCORE, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, DIM_PAD], dtype=tl.float32)
    for split in range(NUM_SPLITS):
        part_rows = (split * num_tokens + tokens) * num_heads + heads
        m_s = tl.load(part_m_ptr + part_rows, mask=valid, other=_NO_SCORE)
        l_s = tl.load(part_l_ptr + part_rows, mask=valid, other=0.0)
        acc_s = tl.load(part_acc_ptr + part_rows[:, None] * HEAD_DIM + dims[None, :], mask=mask, other=0.0)
        m_new = tl.maximum(m_i, m_s)
        alpha = tl.exp2(m_i - m_new)
        beta = tl.exp2(m_s - m_new)
        l_i = l_i * alpha + l_s * beta
        acc = acc * alpha[:, None] + acc_s * beta[:, None]
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    out_ptrs = out_ptr + tokens[:, None] * out_stride_t + heads[:, None] * out_stride_h
    tl.store(out_ptrs + dims[None, :] * out_stride_d, out.to(out_ptr.dtype.element_ty), mask=mask)


def choose_num_splits(
    num_seqs: int,
    num_kv_heads: int,
    max_blocks_bound: int,
    num_sms: int,
    block_size: int = 16,
    num_query_tiles: int = 1,
) -> int:
    """How many KV splits (flash-decoding) fill the GPU, from shapes alone (graph-safe).

    One program per (sequence, KV head, query tile) leaves most SMs idle at small batch; splitting each
    sequence's keys gives num_splits times more programs. ``max_blocks_bound`` is the block tables' width
    (for a captured graph, its capacity), so a split is never planned shorter than ``MIN_TOKENS_PER_SPLIT``
    of that bound. Returns 1 when the batch already fills the SMs or the context is short.
    """
    programs = max(1, num_seqs * num_kv_heads * num_query_tiles)
    if programs >= num_sms:
        return 1
    by_length = (max_blocks_bound * block_size) // MIN_TOKENS_PER_SPLIT
    return max(1, min(MAX_SPLITS, math.ceil(num_sms / programs), by_length))


def eager_num_splits(num_splits: int, max_query_len: int) -> int:
    """The splits an eager step uses: an eager step's shapes change every step and each distinct value is a kernel
    to compile, so a decode-only step takes the power of two at or below ``num_splits`` (SPLIT_VARIANTS) and a
    step with longer queries 1 (its query tiles already give the programs; splits pay for few long decodes).
    Captured steps keep the exact choice: their kernels compile when the graphs are captured."""
    if max_query_len > 1:
        return 1
    return 1 << (min(num_splits, MAX_SPLITS).bit_length() - 1)


def eager_variants(group: int) -> tuple[tuple[int, int], ...]:
    """(max_query_len, num_splits) pairs that compile every kernel an eager step of a GQA group of ``group``
    heads can launch: each query-tile shape with 1 split, and one-token queries with every split."""
    return tuple((query_len, 1) for query_len in query_tile_variants(group)) + tuple(
        (1, splits) for splits in SPLIT_VARIANTS if splits > 1)


def _tile_shape(group: int, max_query_len: int) -> tuple[int, int, int]:
    """(GROUP_PAD, BLOCK_Q, BLOCK_M): a tile holds BLOCK_Q queries of the group's GROUP_PAD heads."""
    group_pad = _next_power_of_2(group)
    block_q = min(_next_power_of_2(max(1, max_query_len)), max(1, _ROWS_PER_TILE // group_pad))
    return group_pad, block_q, max(_MIN_DOT, group_pad * block_q)


def query_tile_variants(group: int) -> tuple[int, ...]:
    """One ``max_query_len`` per query-tile shape a GQA group of ``group`` heads can compile to (BLOCK_Q is
    the next power of two of the longest query, up to a cap): warming these compiles every shape."""
    cap = _tile_shape(group, 1 << 30)[1]
    return tuple(1 << i for i in range(cap.bit_length()))


def num_query_tiles(group: int, max_query_len: int) -> int:
    """Query tiles per (sequence, KV head) for queries of up to ``max_query_len`` tokens."""
    return -(-max(1, max_query_len) // _tile_shape(group, max_query_len)[1])


def paged_attention(
    out: torch.Tensor,
    q: torch.Tensor,
    kv_layer: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    max_query_len: int,
    scale: float,
    num_splits: int = 1,
    sliding_window: int | None = None,
    logit_softcap: float | None = None,
    attention_chunk: int | None = None,
) -> None:
    """Causal attention of q [T, H, D] over each sequence's paged cache, written into out [T, H, D].

    Sequence i's queries are flat rows query_start_loc[i] .. query_start_loc[i+1]-1 at the last positions
    of its seq_lens[i] tokens. Rows of no sequence (padding) are not written. ``max_query_len`` must bound
    every query length: it sets the number of query tiles. ``sliding_window`` w (>= 1) limits a query at p
    to the keys p - w < key <= p; None sees every earlier key. ``attention_chunk`` c (>= 1) limits it to the keys
    p - p % c <= key <= p. ``logit_softcap`` c caps each score s = scale * q.k to c * tanh(s / c) before the mask;
    None leaves it as it is.
    """
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads, block_size = kv_layer.shape[3], kv_layer.shape[2]
    num_seqs = seq_lens.shape[0]
    if num_tokens == 0 or num_seqs == 0 or max_query_len < 1:
        return
    group = num_heads // num_kv_heads
    group_pad, block_q, block_m = _tile_shape(group, max_query_len)
    dim_pad = max(_MIN_DOT, _next_power_of_2(head_dim))
    block_n = 64 if dim_pad <= 64 else 32
    # The interpreter (CPU tensors) multiplies bf16 dot operands as their raw bits: upcast them there.
    dot_fp32 = q.dtype == torch.float32 or (q.dtype == torch.bfloat16 and q.device.type == "cpu")
    grid = (num_seqs * num_kv_heads, num_query_tiles(group, max_query_len), num_splits)
    constants = dict(
        NUM_KV_HEADS=num_kv_heads,
        GROUP=group,
        GROUP_PAD=group_pad,
        HEAD_DIM=head_dim,
        DIM_PAD=dim_pad,
        BLOCK_Q=block_q,
        BLOCK_M=block_m,
    )
    # Partials are fp32 [splits, T, H] (max, sum) and [splits, T, H, D] (accumulator), one row per query head.
    partial_rows = (num_splits, num_tokens, num_heads) if num_splits > 1 else (1,)
    part_m = torch.empty(partial_rows, dtype=torch.float32, device=q.device)
    part_l = torch.empty_like(part_m)
    part_acc = torch.empty((*partial_rows, head_dim) if num_splits > 1 else (1,), dtype=torch.float32, device=q.device)
    qk_scale, softcap = _score_scales(scale, logit_softcap)
    _attention_kernel[grid](
        q, kv_layer, out, part_m, part_l, part_acc, query_start_loc, seq_lens, block_tables,
        qk_scale, num_tokens, num_heads, *q.stride(), *out.stride(), *kv_layer.stride(),
        block_tables.stride(0), sliding_window or 0, attention_chunk or 0, softcap,
        BLOCK_SIZE=block_size, BLOCK_N=block_n, NUM_SPLITS=num_splits, DOT_FP32=dot_fp32,
        DOT_PRECISION="ieee" if dot_fp32 else None, SOFTCAP=logit_softcap is not None,
        **constants,
    )  # fmt: skip
    if num_splits > 1:
        _combine_kernel[grid[:2]](
            out, part_m, part_l, part_acc, query_start_loc, seq_lens, num_tokens, num_heads, *out.stride(),
            NUM_SPLITS=num_splits, **constants,
        )  # fmt: skip


def _score_scales(scale: float, logit_softcap: float | None) -> tuple[float, float]:
    """The kernel's (qk_scale, softcap): its log2-unit score is q.k * qk_scale, or softcap * tanh(q.k * qk_scale)
    with a cap c (= c * tanh(scale * q.k / c) * log2(e)); softcap is 0.0 without a cap (unread)."""
    if logit_softcap is None:
        return scale * _LOG2E, 0.0
    return scale / logit_softcap, logit_softcap * _LOG2E
