"""The interface every attention backend implements."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch

from executor_svc.attention.metadata import AttentionMetadata


class AttentionBackend(Protocol):
    """Writes a layer's new K/V into the paged cache and attends each query over its sequence's cache."""

    name: str

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
        """q [T, H, D], k/v [T, KVH, D], kv_layer [num_blocks, planes, block_size, KVH, D] -> [T, H, D].

        Two planes hold keys and values; one plane (``PagedKVCache`` with ``values_are_keys``) is read as both, and
        then ``v`` must be ``k`` (``value_plane``).

        ``sliding_window`` w limits a query at position p to the keys at positions p - w < j <= p (the
        last w, itself included: HF transformers' sliding window); None attends to every earlier key.
        ``logit_softcap`` c caps every score s = scale * q.k to c * tanh(s / c) before the mask and the
        softmax (Gemma 2's attn_logit_softcapping); None leaves the scores as they are.
        ``sinks`` [H]: each head's learned sink logit joins every softmax's denominator without a value (GPT-OSS's
        attention sinks); None: no sink.
        ``attention_chunk`` c limits a query at position p to the keys of its own c-aligned span, p - p % c <= j <= p
        (Llama 4's chunked attention); None: no chunks. A layer has a window or chunks, not both.
        Every new token's K/V is written to the cache either way.
        """
        ...


Position = TypeVar("Position", int, torch.Tensor)


@dataclass(frozen=True)
class KeyReach:
    """Which earlier keys a query sees besides causality: the last ``window`` positions (a sliding window), or those
    of its own ``chunk``-aligned span (chunked attention)."""

    window: int | None = None
    chunk: int | None = None

    @classmethod
    def of(cls, sliding_window: int | None, attention_chunk: int | None) -> KeyReach | None:
        """The reach of a layer's arguments, checked (None: every earlier key)."""
        check_sliding_window(sliding_window)
        check_attention_chunk(attention_chunk)
        if sliding_window is not None and attention_chunk is not None:
            raise ValueError("attention_chunk: a layer attends within a sliding window or within chunks, not both")
        if sliding_window is None and attention_chunk is None:
            return None
        return cls(sliding_window, attention_chunk)

    def first_key(self, position: Position) -> Position:
        """The first key position a query at ``position`` sees (an int or a tensor of them; may be negative for a
        window: all keys from 0)."""
        if self.chunk is not None:
            return position - position % self.chunk
        return position - (self.window or 1) + 1

    def hides_nothing(self, seq_len: int) -> bool:
        """Whether no query of a sequence this long misses any earlier key."""
        return seq_len <= (self.window if self.window is not None else self.chunk or 0)


def check_attention_chunk(attention_chunk: int | None) -> None:
    """Raise ValueError unless ``attention_chunk`` is None or an int >= 1."""
    if attention_chunk is None:
        return
    if isinstance(attention_chunk, bool) or not isinstance(attention_chunk, int) or attention_chunk < 1:
        raise ValueError(f"attention_chunk: must be an int >= 1 or None, got {attention_chunk!r}")


def check_sliding_window(sliding_window: int | None) -> None:
    """Raise ValueError unless ``sliding_window`` is None or an int >= 1."""
    if sliding_window is None:
        return
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or sliding_window < 1:
        raise ValueError(f"sliding_window: must be an int >= 1 or None, got {sliding_window!r}")


def check_logit_softcap(logit_softcap: float | None) -> None:
    """Raise ValueError unless ``logit_softcap`` is None or a positive finite number."""
    if logit_softcap is None:
        return
    if (
        isinstance(logit_softcap, bool)
        or not isinstance(logit_softcap, (int, float))
        or not math.isfinite(logit_softcap)
        or logit_softcap <= 0
    ):
        raise ValueError(f"logit_softcap: must be a positive finite float or None, got {logit_softcap!r}")


def value_plane(kv_layer: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
    """The plane of ``kv_layer`` values are read from: 1, or 0 for a one-plane cache, whose values are its keys
    (ValueError unless ``v`` is ``k`` then: values that differ would be lost)."""
    planes = kv_layer.shape[1]
    if planes == 2:
        return 1
    if planes != 1:
        raise ValueError(f"kv_layer: expected 1 or 2 planes, got {planes}")
    if v is not k:
        raise ValueError("v: a one-plane KV cache stores keys that are also the values; v must be k")
    return 0


def check_sinks(sinks: torch.Tensor | None, q: torch.Tensor) -> None:
    """Raise ValueError unless ``sinks`` is None or one value per query head of ``q``."""
    if sinks is not None and tuple(sinks.shape) != (q.shape[1],):
        raise ValueError(f"sinks: expected one per query head ({q.shape[1]},), got {tuple(sinks.shape)}")


def grouped_sinks(sinks: torch.Tensor | None, num_kv_heads: int, query_len: int) -> torch.Tensor | None:
    """Sinks [H] laid out for queries grouped by KV head as [..., KVH, group * query_len, D] rows: [1, KVH,
    group * query_len, 1] (None stays None)."""
    if sinks is None:
        return None
    group = sinks.shape[0] // num_kv_heads
    return sinks.view(num_kv_heads, group, 1).expand(num_kv_heads, group, query_len).reshape(1, num_kv_heads, -1, 1)
