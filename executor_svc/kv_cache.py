"""The paged KV cache: one tensor per layer, laid out as FlashInfer reads it."""

from __future__ import annotations

import torch


class PagedKVCache:
    """Per-layer KV tensors laid out as FlashInfer reads them (NHD):
    [num_blocks, planes, block_size, num_kv_heads, head_dim].

    With two planes, index 0 of the second axis holds keys, 1 values. ``values_are_keys`` (latent attention,
    whose cached vector is both) keeps one plane, read as keys and as values: half the memory. Token slot s
    lives in block s // block_size at offset s % block_size. ``scratch_blocks`` extra blocks follow the
    ``num_blocks`` the scheduler may hand out: backends that cannot skip a padded token's write put it there.
    """

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
        scratch_blocks: int = 0,
        values_are_keys: bool = False,
    ) -> None:
        if scratch_blocks < 0:
            raise ValueError(f"scratch_blocks: must be >= 0, got {scratch_blocks}")
        for name, value in (
            ("num_layers", num_layers),
            ("num_blocks", num_blocks),
            ("block_size", block_size),
            ("num_kv_heads", num_kv_heads),
            ("head_dim", head_dim),
        ):
            if value < 1:
                raise ValueError(f"{name}: must be >= 1, got {value}")
        self.num_layers = num_layers
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.scratch_blocks = scratch_blocks
        self.planes = kv_planes(values_are_keys)
        shape = (num_blocks + scratch_blocks, self.planes, block_size, num_kv_heads, head_dim)
        self.layers: list[torch.Tensor] = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    @staticmethod
    def bytes_per_block(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                        values_are_keys: bool = False) -> int:
        """Bytes one block takes across all layers (keys and values)."""
        element_size = torch.empty((), dtype=dtype).element_size()
        return num_layers * kv_planes(values_are_keys) * block_size * num_kv_heads * head_dim * element_size


def kv_planes(values_are_keys: bool) -> int:
    """Planes of a cache block: keys and values, or one the backends read as both."""
    return 1 if values_are_keys else 2
