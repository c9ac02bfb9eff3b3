"""Applying stacked LoRA adapters to a batch whose rows use different adapters (or none), with two dense
matmuls per projection and no per-adapter or per-sequence loop (so a step stays one fixed sequence of kernels).

Every adapter has a *slot* s in [0, S). A projection made of P parts (a fused qkv has three: q, k, v) keeps

- ``shrink`` [P*S*R, in]: row block (p, s) is part p's A for the adapter in slot s (rank padded to R with zeros);
- ``expand`` [out, P*S*R]: column block (p, s) holds that adapter's scaled B in part p's output rows, zeros
  elsewhere.

For a row x using slot s, ``((x @ shrink.T) * mask) @ expand.T`` with the mask keeping only the columns of slot s
is exactly sum_p scaling_s * B_{p,s} (A_{p,s} x) placed in part p's rows: LoRA's update. A row with no adapter has an
all-zero mask, so its update is exactly zero."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LoraProjection:
    """The stacked adapters of one (possibly fused) projection."""

    shrink: torch.Tensor
    """[parts * num_slots * rank, in_features]"""
    expand: torch.Tensor
    """[out_features, parts * num_slots * rank]"""
    parts: int

    def delta(self, x: torch.Tensor, rows: AdapterRows) -> torch.Tensor:
        """The adapters' update [T, out] for x [T, in], each row through its own adapter."""
        return F.linear(F.linear(x, self.shrink) * rows.mask(self.parts), self.expand)


def with_update(base: torch.Tensor, lora: LoraProjection | None, x: torch.Tensor, rows: AdapterRows | None
                ) -> torch.Tensor:
    """``base`` (a projection of ``x``) plus its adapters' update, or ``base`` itself when the projection has no
    adapter or no row of this forward uses one."""
    return base if lora is None or rows is None else base + lora.delta(x, rows)


class AdapterRows:
    """Which adapter slot each flat row of one forward uses (-1: none), as the column masks the projections need."""

    def __init__(self, token_slots: torch.Tensor, num_slots: int, rank: int, dtype: torch.dtype) -> None:
        """``token_slots`` int64 [T] on the model's device."""
        self.token_slots = token_slots
        self.num_slots = num_slots
        self.rank = rank
        self.dtype = dtype
        self._masks: dict[int, torch.Tensor] = {}

    def mask(self, parts: int) -> torch.Tensor:
        """[T, parts * num_slots * rank]: 1 where the column belongs to the row's slot, else 0 (built once per
        part count and forward)."""
        mask = self._masks.get(parts)
        if mask is None:
            columns = torch.arange(parts * self.num_slots * self.rank, device=self.token_slots.device)
            column_slots = (columns // self.rank) % self.num_slots
            mask = (self.token_slots.unsqueeze(1) == column_slots.unsqueeze(0)).to(self.dtype)
            self._masks[parts] = mask
        return mask


class AdaptedModel(Protocol):
    """A model whose forward applies the served adapters to the rows that use one."""

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: Any, kv_cache: Any,
                 adapters: AdapterRows | None = None) -> torch.Tensor:
        """Hidden states [T, hidden] of the flat tokens."""
        ...

    def adapter_rows(self, token_slots: torch.Tensor) -> AdapterRows:
        """The ``adapters`` argument for int64 [T] slots (-1: no adapter)."""
        ...
