"""The interface every attention backend implements."""

from __future__ import annotations

from typing import Protocol

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
    ) -> torch.Tensor:
        """q [T, H, D], k/v [T, KVH, D], kv_layer [num_blocks, 2, block_size, KVH, D] -> [T, H, D]."""
        ...
