"""The shape of a model's paged KV cache: how many KV heads each rank caches per token and layer, and how wide."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from executor_svc.kv_cache import PagedKVCache
from executor_svc.models.mla_settings import mla_settings_for
from executor_svc.models.variants import head_dim_of
from executor_svc.parallel.tensor_parallel import SINGLE, TensorParallel

if TYPE_CHECKING:
    from transformers import PretrainedConfig


@dataclass(frozen=True)
class KvLayout:
    """One rank's KV cache geometry: ``num_kv_heads`` vectors of ``head_dim`` per token and layer; ``most_kv_heads``
    is what the rank holding the most heads caches (every rank gets as many blocks as that one can hold).
    ``values_are_keys``: the cached vector serves as key and as value (latent attention), stored once."""

    num_kv_heads: int
    most_kv_heads: int
    head_dim: int
    values_are_keys: bool = False

    def bytes_per_block(self, num_layers: int, block_size: int, dtype: torch.dtype) -> int:
        """Bytes one block takes on the rank holding the most KV heads, across ``num_layers`` layers."""
        return PagedKVCache.bytes_per_block(num_layers, block_size, self.most_kv_heads, self.head_dim, dtype,
                                            self.values_are_keys)

    def cache(self, num_layers: int, num_blocks: int, block_size: int, dtype: torch.dtype,
              device: torch.device | str, scratch_blocks: int = 0) -> PagedKVCache:
        """A paged KV cache of this layout."""
        return PagedKVCache(num_layers, num_blocks, block_size, self.num_kv_heads, self.head_dim, dtype, device,
                            scratch_blocks=scratch_blocks, values_are_keys=self.values_are_keys)


def kv_layout(config: PretrainedConfig, tp: TensorParallel = SINGLE) -> KvLayout:
    """This rank's share of the KV heads (whole groups, as the attention splits them), or for latent attention
    the one latent vector every rank caches whole."""
    mla = mla_settings_for(config)
    if mla is not None:
        return KvLayout(1, 1, mla.cache_head_dim, values_are_keys=True)
    start, end = tp.split(config.num_key_value_heads, "num_key_value_heads")
    most = -(-config.num_key_value_heads // tp.world_size)
    return KvLayout(end - start, most, head_dim_of(config))
