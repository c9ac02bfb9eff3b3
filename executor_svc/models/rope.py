"""Rotary position embeddings of the Llama family: settings, frequencies, the servable context and the rotation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PretrainedConfig


LAYER_TYPES = ("full_attention", "sliding_attention")
"""Keys of rope_parameters set per layer type (Gemma 3)."""


def rope_parameters(config: PretrainedConfig, layer_type: str | None = None) -> dict[str, Any]:
    """The RoPE settings of an HF config as one dict with at least rope_type and rope_theta.

    transformers >= 5 stores them in config.rope_parameters (per layer type for Gemma 3: those of
    ``layer_type``, full_attention's by default); older versions in rope_scaling + rope_theta.
    """
    params = getattr(config, "rope_parameters", None)
    if params is not None and is_per_layer_type(config):
        params = params[layer_type or "full_attention"]
    if params is None:
        params = dict(getattr(config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    params = dict(params)
    params["rope_type"] = params.get("rope_type", params.get("type", "default"))
    return params


def is_per_layer_type(config: PretrainedConfig) -> bool:
    """Whether config.rope_parameters holds one set of settings per layer type (Gemma 3)."""
    params = getattr(config, "rope_parameters", None) or {}
    return any(kind in params for kind in LAYER_TYPES)


def rope_frequencies(config: PretrainedConfig, rotary_dim: int, layer_type: str | None = None
                     ) -> tuple[torch.Tensor, float]:
    """float32 [rotary_dim / 2] inverse frequencies and the attention factor that scales cos and sin.

    The default type is computed here; the scaled ones (linear, llama3, yarn, longrope, dynamic, ...) by
    transformers' own ROPE_INIT_FUNCTIONS, so they match HF exactly. Within the positions the executor serves
    (see rope_context_limit) HF never switches a dynamic type's frequencies, so the initial ones are the ones.
    """
    params = rope_parameters(config, layer_type)
    rope_type = params["rope_type"]
    if rope_type == "default":
        base = float(params["rope_theta"])
        return 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)), 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    init = ROPE_INIT_FUNCTIONS.get(rope_type)
    if init is None:
        raise ValueError(f"rope_parameters: rope_type {rope_type!r} is not supported "
                         f"(default, {', '.join(sorted(ROPE_INIT_FUNCTIONS))})")
    if is_per_layer_type(config):
        inv_freq, attention_factor = init(config, "cpu", layer_type=layer_type or "full_attention")
    else:
        inv_freq, attention_factor = init(config, "cpu")
    if inv_freq.shape[0] * 2 != rotary_dim:
        raise ValueError(f"rope_parameters: {rope_type} gives {inv_freq.shape[0]} frequencies for a rotary "
                         f"dimension of {rotary_dim}")
    return inv_freq.float(), float(attention_factor)


def rope_context_limit(config: PretrainedConfig) -> tuple[int, str]:
    """The longest context the model can be served with exactly, and why.

    max_position_embeddings, except for longrope: HF switches every position to the long factors once a
    sequence passes original_max_position_embeddings, which keys already cached cannot follow, so serving
    stops at that length (and uses the short factors, as HF does up to it)."""
    params = rope_parameters(config)  # longrope models (Phi-3) set one for every layer
    limit = int(config.max_position_embeddings)
    original = params.get("original_max_position_embeddings") or getattr(config, "original_max_position_embeddings",
                                                                         None)
    if params["rope_type"] == "longrope" and original and int(original) < limit:
        return int(original), ("longrope switches to its long factors past original_max_position_embeddings "
                               f"({original}), which a KV cache cannot follow")
    return limit, f"max_position_embeddings ({limit})"


def apply_rotary_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """apply_rotary with the rotated pairs interleaved (GLM, GPT-J): dimensions 2i and 2i + 1 turn by angle i,
    instead of i and i + R."""
    rotary = 2 * cos.shape[-1]
    pairs = x[..., :rotary].unflatten(-1, (cos.shape[-1], 2))
    first, second = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((first * cos - second * sin, second * cos + first * sin), dim=-1).flatten(-2)
    return rotated if rotary == x.shape[-1] else torch.cat((rotated, x[..., rotary:]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the leading 2 * R dimensions of x [T, heads, head_dim] by the angles whose cos/sin are [T, 1, R]
    (R = head_dim / 2 unless a partial_rotary_factor leaves the last dimensions as they are)."""
    rotary = 2 * cos.shape[-1]
    if rotary == x.shape[-1]:
        first, second = x.chunk(2, dim=-1)
        return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
    first, second = x[..., :rotary].chunk(2, dim=-1)
    return torch.cat((first * cos - second * sin, second * cos + first * sin, x[..., rotary:]), dim=-1)
