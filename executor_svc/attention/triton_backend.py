"""Graph-safe paged attention in Triton: a K/V write kernel and a fused causal attention kernel.

Like ``PaddedTorchAttentionBackend`` it derives everything from tensor shapes and the metadata's Python
ints, never reading a device tensor on the host, so a captured CUDA graph replays it with new metadata.
Unlike it, it pays no padding: each program walks only its own sequence's blocks, and padded tokens
(slot -1) are skipped rather than written to a scratch block.

Triton is imported only when a forward runs, so this module imports where triton is not installed.
"""

from __future__ import annotations

import importlib.util
import os

import torch

from executor_svc.attention.backend import KeyReach, check_logit_softcap
from executor_svc.attention.metadata import AttentionMetadata

_INTERPRETER_SMS = 1
"""SMs assumed under the Triton interpreter (CPU): automatic choice never splits there."""


def triton_available() -> bool:
    """Whether this backend can run here: triton is installed, and CUDA is available or the Triton
    interpreter is switched on (TRITON_INTERPRET=1, read now)."""
    if importlib.util.find_spec("triton") is None:
        return False
    return torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"


class TritonAttentionBackend:
    """Paged attention with Triton kernels: one program per (sequence, KV head, query tile), the GQA
    group's heads sharing the program's K/V loads; optionally each sequence's keys are split across
    ``num_splits`` programs whose partial results a second kernel combines (flash-decoding).

    ``num_splits`` None chooses per forward from the shapes (``choose_num_splits``).
    """

    name = "triton"
    graph_safe = True

    def __init__(self, num_splits: int | None = None) -> None:
        if num_splits is not None and (isinstance(num_splits, bool) or not isinstance(num_splits, int)):
            raise ValueError(f"num_splits: must be an int or None, got {num_splits!r}")
        if num_splits is not None and num_splits < 1:
            raise ValueError(f"num_splits: must be >= 1 (or None to choose automatically), got {num_splits}")
        self.num_splits = num_splits

    def plan(self, meta: AttentionMetadata) -> None:
        """Nothing to prepare on the host: the kernels read the metadata tensors directly."""

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
        capped by ``logit_softcap``, if set). Attention sinks are not in the kernels: ValueError (selection.py picks
        torch_padded for such models)."""
        from executor_svc.attention import triton_kernels

        if sinks is not None:
            raise ValueError("sinks: the Triton kernels take no attention sinks; use the torch_padded backend")

        reach = KeyReach.of(sliding_window, attention_chunk)
        check_logit_softcap(logit_softcap)
        _check_shapes(q, k, v, kv_layer, meta)
        triton_kernels.write_kv(k, v, kv_layer, meta.slot_mapping)
        # Tokens of no sequence (a captured batch's padding) are never written by the kernel: zero them.
        out = torch.zeros_like(q) if meta.is_static else torch.empty_like(q)
        triton_kernels.paged_attention(
            out,
            q,
            kv_layer,
            meta.query_start_loc,
            meta.seq_lens,
            meta.block_tables,
            meta.max_query_len,
            scale,
            num_splits=self._num_splits(q, kv_layer, meta, reach),
            sliding_window=sliding_window,
            logit_softcap=logit_softcap,
            attention_chunk=attention_chunk,
        )
        return out

    def _num_splits(
        self, q: torch.Tensor, kv_layer: torch.Tensor, meta: AttentionMetadata, reach: KeyReach | None = None
    ) -> int:
        if self.num_splits is not None:
            return self.num_splits
        from executor_svc.attention.triton_kernels import choose_num_splits, eager_num_splits, num_query_tiles

        num_kv_heads = kv_layer.shape[3]
        chosen = choose_num_splits(
            meta.num_seqs,
            num_kv_heads,
            _max_blocks_read(meta, reach),
            _num_sms(q.device),
            block_size=kv_layer.shape[2],
            num_query_tiles=num_query_tiles(q.shape[1] // num_kv_heads, meta.max_query_len),
        )
        return chosen if meta.is_static else eager_num_splits(chosen, meta.max_query_len)


def _max_blocks_read(meta: AttentionMetadata, reach: KeyReach | None) -> int:
    """A bound (from shapes and ints only) on the KV blocks one query tile reads: the block tables' width, or
    with a sliding window or chunks the blocks its window or chunk and queries can span (they start
    block-aligned)."""
    width = int(meta.block_tables.shape[1])
    if reach is None:
        return width
    span = reach.window if reach.window is not None else reach.chunk or 0
    return min(width, -(-(span + meta.max_query_len - 1) // meta.block_size) + 1)


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return _INTERPRETER_SMS
    return int(torch.cuda.get_device_properties(device).multi_processor_count)


def _check_shapes(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_layer: torch.Tensor, meta: AttentionMetadata
) -> None:
    from executor_svc.attention.triton_kernels import MAX_HEAD_DIM

    if q.dim() != 3 or k.dim() != 3 or kv_layer.dim() != 5:
        raise ValueError(f"q, k, kv_layer: expected 3, 3 and 5 dims, got {q.dim()}, {k.dim()}, {kv_layer.dim()}")
    if kv_layer.shape[1] != 2:
        raise ValueError(f"kv_layer: the Triton kernels read a key plane and a value plane, got {kv_layer.shape[1]} "
                         "plane(s) (a latent-attention cache: use the torch backends)")
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = kv_layer.shape[3]
    if k.shape != v.shape or k.shape[1:] != (num_kv_heads, head_dim) or kv_layer.shape[4] != head_dim:
        raise ValueError(
            f"k, v, kv_layer: shapes {tuple(k.shape)}, {tuple(v.shape)}, {tuple(kv_layer.shape)} "
            f"do not match q {tuple(q.shape)}"
        )
    if not q.dtype == k.dtype == v.dtype == kv_layer.dtype:
        raise ValueError(f"q, k, v, kv_layer: dtypes differ ({q.dtype}, {k.dtype}, {v.dtype}, {kv_layer.dtype})")
    if num_heads % num_kv_heads != 0:
        raise ValueError(f"q: {num_heads} heads are not a multiple of the cache's {num_kv_heads} KV heads")
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"q: head_dim {head_dim} exceeds the supported {MAX_HEAD_DIM}")
    if kv_layer.shape[2] != meta.block_size:
        raise ValueError(f"kv_layer: block_size {kv_layer.shape[2]} differs from the metadata's {meta.block_size}")
