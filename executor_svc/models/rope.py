"""Rotary position embeddings of the Llama family: settings, frequencies and the rotation."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def rope_parameters(config: PretrainedConfig) -> dict[str, Any]:
    """The RoPE settings of an HF config as one dict with at least rope_type and rope_theta.

    transformers >= 5 stores them in config.rope_parameters; older versions in rope_scaling + rope_theta.
    """
    params = getattr(config, "rope_parameters", None)
    if params is None:
        params = dict(getattr(config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    params = dict(params)
    params["rope_type"] = params.get("rope_type", params.get("type", "default"))
    return params


def rope_inverse_frequencies(head_dim: int, params: dict[str, Any], max_position_embeddings: int) -> torch.Tensor:
    """float32 [head_dim / 2] inverse frequencies for the default, linear and llama3 RoPE types."""
    base = float(params["rope_theta"])
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    rope_type = params["rope_type"]
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / float(params["factor"])
    if rope_type == "llama3":
        return _llama3_frequencies(inv_freq, params, max_position_embeddings)
    raise ValueError(f"rope_parameters: rope_type {rope_type!r} is not supported (default, linear, llama3)")


def _llama3_frequencies(inv_freq: torch.Tensor, params: dict[str, Any], max_position_embeddings: int) -> torch.Tensor:
    """Llama 3.1 scaling: long wavelengths divided by factor, short ones kept, smooth in between."""
    factor = float(params["factor"])
    low_freq_factor = float(params["low_freq_factor"])
    high_freq_factor = float(params["high_freq_factor"])
    old_context = float(params.get("original_max_position_embeddings", max_position_embeddings))
    low_freq_wavelen = old_context / low_freq_factor
    high_freq_wavelen = old_context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [T, heads, head_dim] by the angles whose cos/sin are [T, 1, head_dim / 2]."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
