"""The shape of a model's paged KV cache: how many KV heads each rank caches per token and layer, and how wide."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from executor_svc.models.mla_settings import mla_settings_for
from executor_svc.models.variants import head_dim_of
from executor_svc.parallel.tensor_parallel import SINGLE, TensorParallel

if TYPE_CHECKING:
    from transformers import PretrainedConfig


@dataclass(frozen=True)
class KvLayout:
    """One rank's KV cache geometry: ``num_kv_heads`` vectors of ``head_dim`` per token and layer; ``most_kv_heads``
    is what the rank holding the most heads caches (every rank gets as many blocks as that one can hold)."""

    num_kv_heads: int
    most_kv_heads: int
    head_dim: int


def kv_layout(config: PretrainedConfig, tp: TensorParallel = SINGLE) -> KvLayout:
    """This rank's share of the KV heads (whole groups, as the attention splits them), or for latent attention
    the one latent vector every rank caches whole."""
    mla = mla_settings_for(config)
    if mla is not None:
        return KvLayout(1, 1, mla.cache_head_dim)
    start, end = tp.split(config.num_key_value_heads, "num_key_value_heads")
    most = -(-config.num_key_value_heads // tp.world_size)
    return KvLayout(end - start, most, head_dim_of(config))
