"""One rank's place in a tensor-parallel group, and the collectives the sharded model layers call.

Megatron-style sharding: column-parallel projections (q/k/v heads, gate/up rows) need no communication;
row-parallel ones (o_proj, down_proj) sum their partial outputs with one all-reduce; the embedding is
split by vocabulary rows (each rank looks up its rows, one all-reduce joins them) and so is the LM head
(each rank scores its vocabulary slice, an all-gather gives every rank the full logits, so every rank
samples the same tokens from the same seeds). With world_size 1 every collective is the identity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class TensorParallel:
    """This process's rank in its tensor-parallel group (world_size 1: no parallelism)."""

    rank: int = 0
    world_size: int = 1
    group: Any = field(default=None, compare=False, repr=False)
    """The torch.distributed process group (None: the default group)."""

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"tensor_parallel_size: must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank: must be in [0, {self.world_size}), got {self.rank}")

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def shard(self, total: int, name: str) -> tuple[int, int]:
        """This rank's [start, end) of ``total`` rows split evenly; ValueError naming ``name`` when uneven."""
        if total % self.world_size:
            raise ValueError(f"{name}: {total} does not split over tensor_parallel_size {self.world_size}")
        size = total // self.world_size
        return self.rank * size, (self.rank + 1) * size

    def split(self, total: int, name: str) -> tuple[int, int]:
        """This rank's [start, end) of ``total`` units split as evenly as possible (the first ranks take one
        more); ValueError naming ``name`` when a rank would get none."""
        if total < self.world_size:
            raise ValueError(f"{name}: {total} cannot be split over tensor_parallel_size {self.world_size}")
        base, extra = divmod(total, self.world_size)
        start = self.rank * base + min(self.rank, extra)
        return start, start + base + (1 if self.rank < extra else 0)

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over the ranks (in place); the identity without parallelism."""
        if self.enabled:
            dist.all_reduce(tensor, group=self.group)
        return tensor

    def all_gather_columns(self, tensor: torch.Tensor) -> torch.Tensor:
        """[N, cols] on each rank -> [N, world_size * cols], rank 0's columns first."""
        return self._all_gather(tensor, dim=-1)

    def all_gather_rows(self, tensor: torch.Tensor) -> torch.Tensor:
        """[rows, cols] on each rank -> [world_size * rows, cols], rank 0's rows first."""
        return self._all_gather(tensor, dim=0)

    def _all_gather(self, tensor: torch.Tensor, dim: int) -> torch.Tensor:
        if not self.enabled:
            return tensor
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor.contiguous(), group=self.group)
        return torch.cat(parts, dim=dim)

    def broadcast_from_first(self, tensor: torch.Tensor) -> torch.Tensor:
        """Overwrite ``tensor`` (in place) with rank 0's; the identity without parallelism."""
        if self.enabled:
            source = 0 if self.group is None else dist.get_global_rank(self.group, 0)
            dist.broadcast(tensor, src=source, group=self.group)
        return tensor


SINGLE = TensorParallel()
"""No tensor parallelism."""


def vocab_parallel_embedding(
    input_ids: torch.Tensor, weight_shard: torch.Tensor, tp: TensorParallel
) -> torch.Tensor:
    """Embedding lookup with the vocabulary rows split over ranks: each rank fills the rows of ids it holds
    (zeros elsewhere) and the all-reduce assembles the full embeddings."""
    if not tp.enabled:
        return torch.nn.functional.embedding(input_ids, weight_shard)
    rows = weight_shard.shape[0]
    start = tp.rank * rows
    local = input_ids - start
    outside = (local < 0) | (local >= rows)
    hidden = torch.nn.functional.embedding(local.masked_fill(outside, 0), weight_shard)
    hidden = hidden.masked_fill(outside.unsqueeze(-1), 0.0)
    return tp.all_reduce(hidden)
